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
  /* Manifests of 10^7 images take about 120 MB; past this a file is not one of pipebench's. */
  PB_RETURN_NOT_OK(pb__read_file_max(path, (size_t)256 << 20, &data, &size, err));
  int rc = pb__json_parse(data, size, path, out, err);
  pb_free(data, size);
  return rc;
}

int pb__json_parse(const char *text, size_t n, const char *label, cJSON **out,
                   struct pb_error *err) {
  *out = NULL;
  const char *end = NULL;
  /* Not require_null_terminated: cJSON 1.7 then also refuses a buffer that ends right after
   * the value, and counts any byte up to 32 (NUL included) as white space. */
  cJSON *root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
  if (root == NULL) return pb_error_set(err, PB_EFORMAT, "%s: not valid JSON", label);
  size_t at = end != NULL && end >= text && end <= text + n ? (size_t)(end - text) : n;
  while (at < n && (text[at] == ' ' || text[at] == '\t' || text[at] == '\n' || text[at] == '\r'))
    at++;
  if (at < n) {
    cJSON_Delete(root);
    return pb_error_set(err, PB_EFORMAT, "%s: trailing data after the JSON value at byte %zu",
                        label, at);
  }
  *out = root;
  return PB_OK;
}

cJSON *pb__load_json(const char *path, struct pb_error *err) {
  cJSON *root = NULL;
  pb__json_read_file(path, &root, err);
  return root;
}
