/* JSON files read whole and parsed. */
#include "common/json.h"

#include <stdio.h>

#include "common/env.h"
#include "common/fs.h"

static void cjson_version(char *buf, size_t size) { snprintf(buf, size, "%s", cJSON_Version()); }
PB__ENV_VERSION(register_cjson, "cjson_version", cjson_version)

int pb__json_read_file(const char *path, cJSON **out, struct pb_error *err) {
  *out = NULL;
  void *data = NULL;
  size_t size = 0;
  PB_RETURN_NOT_OK(pb__read_file(path, &data, &size, err));
  *out = cJSON_ParseWithLength(data, size);
  pb_free(data, size);
  if (*out == NULL) return pb_error_set(err, PB_EFORMAT, "%s: not valid JSON", path);
  return PB_OK;
}

cJSON *pb__load_json(const char *path, struct pb_error *err) {
  cJSON *root = NULL;
  pb__json_read_file(path, &root, err);
  return root;
}
