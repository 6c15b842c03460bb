/* Bad input to the OME-Arrow backends gives clear errors (naming file and image), never a
 * crash; plus a fuzz-ish pass that truncates and flips bytes of small written files. */
#include <duckdb.h>
#include <stdint.h>

#include "arrow_test_util.h"
#include "formats/format_internal.h"

/* n images of 2 channels x 16 x 20 uint16. */
static void write_one(const char *path, const char *format, const char *comp, const char *opt,
                      int n) {
  static const int64_t shape[PB_NDIM] = {1, 2, 1, 16, 20};
  write_images(path, format, comp, opt, shape, n, 0);
}

/* Opens path and reads every image; returns the first error code (0 when all worked). */
static int open_read_all(const char *path, const char *format, struct pb_error *err) {
  pb_dataset *ds = NULL;
  int rc = pb_dataset_open(path, format, &ds, err);
  if (rc != 0) return rc;
  for (int64_t i = 0; i < pb_dataset_count(ds) && rc == 0; i++) {
    pb_image_meta m;
    rc = pb_dataset_meta(ds, i, &m, err);
    if (rc != 0) break;
    size_t nb = pb_image_bytes(&m);
    if (nb > ((size_t)1 << 28)) break; /* a flipped size must not make us allocate wildly */
    void *buf = malloc(nb ? nb : 1);
    rc = pb_dataset_read(ds, i, buf, nb, NULL, err);
    free(buf);
  }
  pb_dataset_free(ds);
  return rc;
}

static void expect_error(const char *path, const char *format, const char *needle1,
                         const char *needle2) {
  struct pb_error err = {{0}};
  int rc = open_read_all(path, format, &err);
  /* DuckDB's messages come without the query it echoes (pipebench's SQL is no help). */
  if (rc == 0 || strstr(err.message, needle1) == NULL ||
      (needle2 != NULL && strstr(err.message, needle2) == NULL) ||
      strstr(err.message, "LINE 1") != NULL) {
    fprintf(stderr, "expected an error naming '%s' and '%s' for %s, got rc=%d: %s\n", needle1,
            needle2 ? needle2 : "", path, rc, err.message);
    exit(1);
  }
  printf("ok error: %s\n", err.message);
}

static void sql(duckdb_connection c, const char *q) {
  duckdb_result r;
  if (duckdb_query(c, q, &r) != DuckDBSuccess) {
    fprintf(stderr, "SQL failed: %s: %s\n", q, duckdb_result_error(&r));
    exit(1);
  }
  duckdb_destroy_result(&r);
}

static void *slurp(const char *path, size_t *n) {
  void *d;
  struct pb_error err;
  CHECK_OK(pb__read_file(path, &d, n, &err), &err);
  void *copy = malloc(*n);
  memcpy(copy, d, *n);
  pb_free(d, *n);
  return copy;
}

static void fuzz(const char *dir, const char *src, const char *format) {
  size_t n;
  unsigned char *orig = slurp(src, &n);
  char path[512];
  snprintf(path, sizeof path, "%s/fuzz.%s", dir, strcmp(format, "duckdb") == 0 ? "duckdb" : "parquet");
  int failures = 0, runs = 0;
  size_t step = n / 60 + 1;
  for (size_t pos = 0; pos < n; pos += step) {
    struct pb_error err = {{0}};
    pb__write_file(path, orig, pos, &err); /* truncated */
    failures += open_read_all(path, format, &err) != 0;
    unsigned char *m = malloc(n);
    memcpy(m, orig, n);
    for (size_t k = pos; k < pos + 8 && k < n; k++) m[k] ^= (unsigned char)(0x5A + k);
    pb__write_file(path, m, n, &err); /* flipped */
    failures += open_read_all(path, format, &err) != 0;
    free(m);
    runs += 2;
  }
  printf("ok fuzz %s: %d runs of %zu-byte file, %d gave clean errors, none crashed\n", format,
         runs, n, failures);
  free(orig);
}

int main(void) {
  char dir[256], p[512], q[512], s[2048];
  tmp_dir(dir, sizeof dir, "bad");
  duckdb_database db;
  duckdb_connection c;
  CHECK(duckdb_open(NULL, &db) == DuckDBSuccess);
  CHECK(duckdb_connect(db, &c) == DuckDBSuccess);

  /* 1. A truncated Parquet file. */
  snprintf(p, sizeof p, "%s/a.parquet", dir);
  write_one(p, "ome-parquet", NULL, NULL, 3);
  size_t n;
  void *d = slurp(p, &n);
  snprintf(q, sizeof q, "%s/trunc.parquet", dir);
  struct pb_error err;
  CHECK_OK(pb__write_file(q, d, n / 2, &err), &err);
  free(d);
  expect_error(q, NULL, q, NULL);

  /* 2. A Parquet file with other columns only. */
  snprintf(q, sizeof q, "%s/other.parquet", dir);
  snprintf(s, sizeof s, "COPY (SELECT 1 AS a, 'x' AS b) TO '%s' (FORMAT parquet)", q);
  sql(c, s);
  expect_error(q, NULL, q, "no OME-Arrow column");

  /* 3. A corrupt manifest. */
  snprintf(p, sizeof p, "%s/ds", dir);
  write_one(p, "oa-dataset", NULL, NULL, 2);
  snprintf(q, sizeof q, "%s/ds/_ome_arrow_dataset.json", dir);
  void *keep = slurp(q, &n);
  CHECK_OK(pb__write_file(q, "{\"type\": \"ome.arrow\", [", 23, &err), &err);
  expect_error(p, NULL, "_ome_arrow_dataset.json", "not valid JSON");
  /* A valid manifest with more after it: refused, not read up to its first value. */
  char *more = malloc(n + 32);
  CHECK(more != NULL);
  memcpy(more, keep, n);
  memcpy(more + n, "\n{\"files\": []}\n", 15);
  CHECK_OK(pb__write_file(q, more, n + 15, &err), &err);
  expect_error(p, NULL, "_ome_arrow_dataset.json", "trailing data after the JSON value at byte");
  free(more);
  CHECK_OK(pb__write_file(q, keep, n, &err), &err);
  free(keep);

  /* 4. A chunk whose pixel_bytes have the wrong size (image 1's first chunk cut short). */
  snprintf(s, sizeof s,
           "COPY (SELECT * REPLACE (CASE WHEN image_id = 'img_00001' THEN pixel_bytes[1:10] "
           "ELSE pixel_bytes END AS pixel_bytes) FROM read_parquet('%s/ds/chunks.parquet')) TO "
           "'%s/chunks2.parquet' (FORMAT parquet, ROW_GROUP_SIZE 1)",
           dir, dir);
  sql(c, s);
  snprintf(q, sizeof q, "%s/chunks2.parquet", dir);
  snprintf(s, sizeof s, "%s/ds/chunks.parquet", dir);
  CHECK(rename(q, s) == 0);
  expect_error(p, NULL, "image 1", "pixel_bytes holds 10 bytes");

  /* 5. A zstd leaf that does not decompress: corrupt the frame inside an uncompressed file. */
  snprintf(p, sizeof p, "%s/z.parquet", dir);
  write_one(p, "ome-parquet", "zstd", "parquet_codec=uncompressed", 1);
  unsigned char *b = slurp(p, &n);
  int hit = 0;
  for (size_t k = 0; k + 16 < n && !hit; k++)
    if (b[k] == 0x28 && b[k + 1] == 0xB5 && b[k + 2] == 0x2F && b[k + 3] == 0xFD) {
      for (size_t j = k + 6; j < k + 14; j++) b[j] = 0xFF;
      hit = 1;
    }
  CHECK(hit);
  CHECK_OK(pb__write_file(p, b, n, &err), &err);
  free(b);
  expect_error(p, NULL, "image 0", "zstd");

  /* 6. Not a DuckDB database, and a missing oa-dataset part. */
  snprintf(p, sizeof p, "%s/x.duckdb", dir);
  CHECK_OK(pb__write_file(p, "hello, not a database at all", 28, &err), &err);
  expect_error(p, "duckdb", p, NULL);
  snprintf(p, sizeof p, "%s/ds2", dir);
  write_one(p, "oa-dataset", NULL, NULL, 1);
  snprintf(q, sizeof q, "%s/ds2/index.parquet", dir);
  unlink(q);
  expect_error(p, NULL, "index.parquet", NULL);

  /* Fuzz-ish: truncations and byte flips at ~60 positions of small files. */
  snprintf(p, sizeof p, "%s/f1.parquet", dir);
  write_one(p, "ome-parquet", NULL, NULL, 2);
  fuzz(dir, p, "ome-parquet");
  snprintf(p, sizeof p, "%s/f2.parquet", dir);
  write_one(p, "ome-parquet", "lz4", NULL, 2);
  fuzz(dir, p, "ome-parquet");

  duckdb_disconnect(&c);
  duckdb_close(&db);
  pb__remove_tree(dir);
  return 0;
}
