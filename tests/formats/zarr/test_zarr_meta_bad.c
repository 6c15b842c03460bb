/* ome-zarr metadata fields that break their specification (Zarr v2 .zarray, Zarr v3 zarr.json,
 * NGFF 0.4/0.5 multiscales) and shapes that claim more bytes than pipebench believes. Each case
 * takes a dataset the writer made, changes one field, and expects the open, the metadata or the
 * read of image 0 to fail with the given code and a message naming the file and the field.
 * Before these checks, each of these files was read as if valid (a wrong separator made every
 * chunk look missing: the image read as fill value), or its claimed size was allocated. */
#include <cjson/cJSON.h>
#include <stdint.h>

#include "zarr_test.h"

static char g_dir[256];

static void make_ds(const char *path, const char *compression, const char *options) {
  struct pb_error err = {""};
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.compression = compression;
  wp.options = options;
  int64_t chunk[PB_NDIM] = {1, 1, 1, 8, 8};
  memcpy(wp.chunk, chunk, sizeof chunk);
  int64_t shape[PB_NDIM] = {1, 1, 2, 16, 16};
  pb_image_meta m;
  pb_image_meta_init(&m, "img.zarr", PB_UINT16, shape);
  uint16_t pix[512];
  for (int i = 0; i < 512; i++) pix[i] = (uint16_t)(1 + i * 7);
  pb_writer *w;
  pb__remove_tree(path);
  CHECK_OK(pb_writer_new(path, "ome-zarr", &wp, &w, &err), &err);
  CHECK_OK(pb_writer_add(w, &m, pix, &err), &err);
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
}

/* Sets the item at path ("a/b/0/c": object keys and list indices) of ds/rel to the JSON value
 * text (NULL: removes it). */
static void edit(const char *ds, const char *rel, const char *path, const char *value) {
  char p[1024], keys[256];
  struct pb_error err = {""};
  snprintf(p, sizeof p, "%s/%s", ds, rel);
  void *data;
  size_t n;
  CHECK_OK(pb__read_file(p, &data, &n, &err), &err);
  cJSON *root = cJSON_ParseWithLength(data, n);
  pb_free(data, n);
  CHECK(root != NULL);
  snprintf(keys, sizeof keys, "%s", path);
  cJSON *at = root;
  char *save = NULL, *k = strtok_r(keys, "/", &save);
  for (;;) {
    char *next = strtok_r(NULL, "/", &save);
    if (next == NULL) break;
    at = cJSON_IsArray(at) ? cJSON_GetArrayItem(at, atoi(k))
                           : cJSON_GetObjectItemCaseSensitive(at, k);
    if (at == NULL) FAIL("%s: no '%s' in %s", p, k, path);
    k = next;
  }
  if (value == NULL) {
    cJSON_DeleteItemFromObjectCaseSensitive(at, k);
  } else {
    cJSON *v = cJSON_Parse(value);
    CHECK(v != NULL);
    if (cJSON_IsArray(at)) CHECK(cJSON_ReplaceItemInArray(at, atoi(k), v));
    else if (cJSON_HasObjectItem(at, k)) CHECK(cJSON_ReplaceItemInObjectCaseSensitive(at, k, v));
    else CHECK(cJSON_AddItemToObject(at, k, v));
  }
  char *text = cJSON_PrintUnformatted(root);
  CHECK(text != NULL);
  CHECK_OK(pb__write_file(p, text, strlen(text), &err), &err);
  cJSON_free(text);
  cJSON_Delete(root);
}

/* Appends text to ds/rel (after the JSON value and its white space). */
static void append(const char *ds, const char *rel, const char *text) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", ds, rel);
  FILE *f = fopen(p, "a");
  CHECK(f != NULL);
  CHECK(fputs(text, f) >= 0);
  CHECK(fclose(f) == 0);
}

/* Opens ds, reads image 0's metadata and (when it claims at most 64 MiB) the image; expects
 * code and a message naming file and needle. */
static void expect(const char *what, const char *ds, const char *file, int code,
                   const char *needle) {
  struct pb_error err = {""};
  pb_dataset *d = NULL;
  int rc = pb_dataset_open(ds, "ome-zarr", &d, &err);
  if (rc == PB_OK) {
    pb_image_meta m;
    rc = pb_dataset_meta(d, 0, &m, &err);
    if (rc == PB_OK) {
      size_t nb = pb_image_bytes(&m);
      if (nb > ((size_t)64 << 20)) {
        EXPECT_FAIL("%s: metadata believed: image 0 claims %zu bytes", what, nb);
        pb_dataset_free(d);
        return;
      }
      void *buf = malloc(nb);
      CHECK(buf != NULL);
      rc = pb_dataset_read(d, 0, buf, nb, NULL, &err);
      free(buf);
    }
    pb_dataset_free(d);
  }
  if (rc != code) {
    EXPECT_FAIL("%s: got %s (%d), expected %s: %s", what, pb_strerror(rc), rc, pb_strerror(code),
                err.message);
    return;
  }
  if (code != PB_OK) {
    EXPECT_CONTAINS(err.message, file);
    EXPECT_CONTAINS(err.message, needle);
  }
  printf("ok %-36s %s\n", what, err.message);
}

typedef struct mcase {
  const char *what, *field, *value; /* value NULL: the field is removed */
  int code;
  const char *needle;
} mcase;

static void run_cases(const char *ds, const char *comp, const char *opt, const char *rel,
                      const mcase *c, size_t n) {
  for (size_t k = 0; k < n; k++) {
    make_ds(ds, comp, opt);
    edit(ds, rel, c[k].field, c[k].value);
    expect(c[k].what, ds, rel, c[k].code, c[k].needle);
  }
}

int main(void) {
  zt_tmpdir(g_dir, sizeof g_dir, "meta");
  char ds[512];
  snprintf(ds, sizeof ds, "%s/ds", g_dir);

  /* the writer's own datasets read (so each failure below is the edit's) */
  make_ds(ds, NULL, NULL);
  expect("v2 as written", ds, "", PB_OK, NULL);
  make_ds(ds, NULL, "zarr=3,shard=1x1x2x16x16");
  expect("v3 sharded as written", ds, "", PB_OK, NULL);

  static const mcase v2[] = {
      {"separator a list", "dimension_separator", "[\"/\"]", PB_EFORMAT, "dimension_separator"},
      {"separator a number", "dimension_separator", "1", PB_EFORMAT, "dimension_separator"},
      {"separator true", "dimension_separator", "true", PB_EFORMAT, "dimension_separator"},
      {"separator an object", "dimension_separator", "{}", PB_EFORMAT, "dimension_separator"},
      {"order a number", "order", "1", PB_EFORMAT, "order"},
      {"order neither C nor F", "order", "\"K\"", PB_EFORMAT, "order"},
      {"filters not objects", "filters", "[1]", PB_EFORMAT, "filters"},
      {"blosc cname a number", "compressor/cname", "5", PB_EFORMAT, "cname"},
      {"blosc clevel a string", "compressor/clevel", "\"high\"", PB_EFORMAT, "clevel"},
      {"blosc shuffle 7", "compressor/shuffle", "7", PB_EFORMAT, "shuffle"},
      {"shape 2^31 x 2048", "shape", "[1, 1, 2, 2147483648, 2048]", PB_EUNSUPPORTED, "claims"},
      {"shape 10^11", "shape", "[1, 1, 2, 100000000000, 16]", PB_EUNSUPPORTED,
       "100000000000"},
  };
  run_cases(ds, NULL, NULL, "img.zarr/0/.zarray", v2, sizeof v2 / sizeof v2[0]);

  static const mcase ngff04[] = {
      {"scale of strings", "multiscales/0/datasets/0/coordinateTransformations/0/scale",
       "[\"a\", 1, 1, 1, 1]", PB_EFORMAT, "scale"},
      {"scale too short", "multiscales/0/datasets/0/coordinateTransformations/0/scale",
       "[1, 1]", PB_EFORMAT, "scale"},
      {"scale zero", "multiscales/0/datasets/0/coordinateTransformations/0/scale",
       "[1, 1, 1, 0, 1]", PB_EFORMAT, "scale"},
      {"transformations an object", "multiscales/0/datasets/0/coordinateTransformations", "{}",
       PB_EFORMAT, "coordinateTransformations"},
      {"transformation type unknown", "multiscales/0/datasets/0/coordinateTransformations/0/type",
       "\"rotate\"", PB_EFORMAT, "rotate"},
      {"axis name a number", "multiscales/0/axes/0/name", "5", PB_EFORMAT, "axis 0"},
      {"axis unit a number", "multiscales/0/axes/4/unit", "5", PB_EFORMAT, "axis 4"},
      {"version a number", "multiscales/0/version", "0.4", PB_EFORMAT, "version"},
      {"multiscales an object", "multiscales", "{\"datasets\": []}", PB_EFORMAT,
       "'multiscales' is not a list"},
      {"second dataset without path", "multiscales/0/datasets",
       "[{\"path\": \"0\"}, {\"p\": \"1\"}]", PB_EFORMAT, "path"},
  };
  run_cases(ds, NULL, NULL, "img.zarr/.zattrs", ngff04, sizeof ngff04 / sizeof ngff04[0]);

  static const mcase v3[] = {
      {"key separator a number", "chunk_key_encoding/configuration/separator", "1", PB_EFORMAT,
       "separator"},
      {"key configuration a list", "chunk_key_encoding/configuration", "[]", PB_EFORMAT,
       "configuration"},
      {"index_location a number", "codecs/0/configuration/index_location", "0", PB_EFORMAT,
       "index_location"},
      {"inner endian a number", "codecs/0/configuration/codecs/0/configuration/endian", "1",
       PB_EFORMAT, "endian"},
      {"blosc shuffle unknown", "codecs/0/configuration/codecs/1/configuration/shuffle",
       "\"sideways\"", PB_EFORMAT, "shuffle"},
      {"blosc typesize zero", "codecs/0/configuration/codecs/1/configuration/typesize", "0",
       PB_EFORMAT, "typesize"},
      {"dimension_names a number", "dimension_names", "5", PB_EFORMAT, "dimension_names"},
      {"dimension_names too short", "dimension_names", "[\"y\", \"x\"]", PB_EFORMAT,
       "dimension_names"},
      {"storage_transformers an object", "storage_transformers", "{}", PB_EFORMAT,
       "storage_transformers"},
      {"attributes a list", "attributes", "[]", PB_EFORMAT, "attributes"},
      {"shape 2^31 x 2048", "shape", "[1, 1, 2, 2147483648, 2048]", PB_EUNSUPPORTED, "claims"},
  };
  run_cases(ds, NULL, "zarr=3,shard=1x1x2x16x16", "img.zarr/0/zarr.json", v3,
            sizeof v3 / sizeof v3[0]);

  static const mcase ngff05[] = {
      {"0.5 version a number", "attributes/ome/version", "0.5", PB_EFORMAT, "version"},
      {"0.5 scale of strings",
       "attributes/ome/multiscales/0/datasets/0/coordinateTransformations/0/scale",
       "[\"a\", 1, 1, 1, 1]", PB_EFORMAT, "scale"},
  };
  run_cases(ds, NULL, "zarr=3", "img.zarr/zarr.json", ngff05, sizeof ngff05 / sizeof ngff05[0]);

  /* one JSON value per file: anything but white space after it is refused, naming the file
   * and where the extra data starts (cJSON stopped at the value and ignored the rest) */
  static const char *const trailing[][2] = {
      {"", "img.zarr/0/.zarray"}, {"", "img.zarr/.zattrs"},
      {"zarr=3", "img.zarr/0/zarr.json"}, {"zarr=3", "img.zarr/zarr.json"}};
  for (size_t k = 0; k < sizeof trailing / sizeof trailing[0]; k++) {
    make_ds(ds, NULL, trailing[k][0][0] ? trailing[k][0] : NULL);
    append(ds, trailing[k][1], " \n\t");
    expect("white space after the value", ds, "", PB_OK, NULL);
    append(ds, trailing[k][1], "{\"zarr_format\": 9}");
    const char *base = strrchr(trailing[k][1], '/') + 1;
    expect(trailing[k][1], ds, base, PB_EFORMAT, "trailing data after the JSON value at byte");
  }

  /* the limit is the documented one: lowered below a 16 MiB shape, the shape is refused;
   * raised above it, the image reads (missing chunks as fill value) */
  setenv("PIPEBENCH_MAX_IMAGE_BYTES", "1000000", 1);
  make_ds(ds, NULL, NULL);
  edit(ds, "img.zarr/0/.zarray", "shape", "[1, 1, 2, 2048, 2048]");
  expect("shape over PIPEBENCH_MAX_IMAGE_BYTES", ds, ".zarray", PB_EUNSUPPORTED, "PIPEBENCH_MAX_IMAGE_BYTES");
  setenv("PIPEBENCH_MAX_IMAGE_BYTES", "100000000", 1);
  expect("shape under PIPEBENCH_MAX_IMAGE_BYTES", ds, "", PB_OK, NULL);
  unsetenv("PIPEBENCH_MAX_IMAGE_BYTES");

  pb__remove_tree(g_dir);
  return check_failures() != 0;
}
