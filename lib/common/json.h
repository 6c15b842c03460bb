/* JSON files: read whole and parsed with cJSON. Internal. */
#ifndef PB_COMMON_JSON_H
#define PB_COMMON_JSON_H

#include <cjson/cJSON.h>

#include "pipebench/core.h"

/** Reads the regular file at path and parses it: 0 and *out (free with cJSON_Delete); the read's
 * error (naming path) when it cannot be read; PB_EFORMAT ("path: not valid JSON") when it does
 * not parse, or holds more than one value (pb__json_parse). *out is NULL on failure. */
int pb__json_read_file(const char *path, cJSON **out, struct pb_error *err);
/** Parses the n bytes of text as one JSON value, which only white space may follow: 0 and *out
 * (free with cJSON_Delete); PB_EFORMAT naming label ("LABEL: not valid JSON", or "LABEL:
 * trailing data after the JSON value at byte N") with *out NULL otherwise. */
int pb__json_parse(const char *text, size_t n, const char *label, cJSON **out,
                   struct pb_error *err);
/** pb__json_read_file returning the tree, or NULL with err saying why. */
cJSON *pb__load_json(const char *path, struct pb_error *err);

#endif
