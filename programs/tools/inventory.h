/* What pipebench wrote at a path, and whether what stands there now is exactly that.
 *
 * gen and convert replace an earlier output only when they can prove they wrote it: their
 * manifests carry an inventory of every file they put at each output name (relative path and
 * size), taken from the finished output before it was renamed into place. A later run compares
 * the tree on disk with that inventory and refuses when it holds anything else. */
#ifndef PB_COMMON_INVENTORY_H
#define PB_COMMON_INVENTORY_H

#include <cjson/cJSON.h>

#include "pipebench/core.h"

/** The inventory of what stands at path: {"kind":"file","size":N} for a regular file,
 * {"kind":"folder","files":{"rel/path":size,...}} for a folder (sub-folders walked, links never
 * followed). A link, device, FIFO or socket anywhere in it is an error (pipebench writes none).
 * Returns a new cJSON object the caller frees with cJSON_Delete, or NULL with err set. */
cJSON *pb__inventory_take(const char *path, struct pb_error *err);

/** Whether what stands at path may be replaced as pipebench's own: PB_OK when nothing is there
 * or when every regular file in it is listed in inv with its size (files of inv that are gone
 * do not matter: removing fewer is no loss). Otherwise PB_EIO with a message naming path and the
 * first thing in the way ("holds notes.txt, which pipebench did not write"). inv may be NULL
 * (nothing proven). `manifest` names the manifest that holds inv, for the message (NULL: there
 * is none). */
int pb__inventory_check(const char *path, const cJSON *inv, const char *manifest,
                        struct pb_error *err);

#endif
