/* JSON files: read whole and parsed with cJSON. Internal. */
#ifndef PB_COMMON_JSON_H
#define PB_COMMON_JSON_H

#include <cjson/cJSON.h>

#include "pipebench/core.h"

/** Reads the regular file at path and parses it: 0 and *out (free with cJSON_Delete); the read's
 * error (naming path) when it cannot be read; PB_EFORMAT ("path: not valid JSON") when it does
 * not parse. *out is NULL on failure. */
int pb__json_read_file(const char *path, cJSON **out, struct pb_error *err);
/** pb__json_read_file returning the tree, or NULL with err saying why. */
cJSON *pb__load_json(const char *path, struct pb_error *err);

#endif
