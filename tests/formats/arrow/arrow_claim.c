/* An oa-dataset whose images.parquet claims an image far larger than its chunks: size_y and
 * size_x rewritten to 2^31 - 1 (a real Parquet file, rewritten by DuckDB). The claim is held to
 * PIPEBENCH_MAX_IMAGE_BYTES (docs/formats.md) before anything is allocated: open or the metadata call
 * fails naming images.parquet and the claimed shape, instead of reporting 2^63 bytes. */
#include <duckdb.h>
#include <stdint.h>

#include "arrow_test_util.h"
#include "formats/format_internal.h"

static const int64_t SHAPE[PB_NDIM] = {1, 1, 2, 30, 40};

static void sql(duckdb_connection c, const char *q) {
  duckdb_result r;
  if (duckdb_query(c, q, &r) != DuckDBSuccess) FAIL("%s: %s", q, duckdb_result_error(&r));
  duckdb_destroy_result(&r);
}

/* Rewrites images.parquet of the dataset at path with size_y and size_x set to v. */
static void claim_size(const char *path, long long v) {
  duckdb_database db;
  duckdb_connection c;
  CHECK(duckdb_open(NULL, &db) == DuckDBSuccess);
  CHECK(duckdb_connect(db, &c) == DuckDBSuccess);
  char q[4096];
  snprintf(q, sizeof q,
           "COPY (SELECT * REPLACE (%lld::INTEGER AS size_y, %lld::INTEGER AS size_x) FROM "
           "read_parquet('%s/images.parquet')) TO '%s/images2.parquet' (FORMAT parquet)",
           v, v, path, path);
  sql(c, q);
  duckdb_disconnect(&c);
  duckdb_close(&db);
  char a[1024], b[1024];
  snprintf(a, sizeof a, "%s/images2.parquet", path);
  snprintf(b, sizeof b, "%s/images.parquet", path);
  CHECK(rename(a, b) == 0);
}

int main(void) {
  char dir[256], p[512], f[600];
  tmp_dir(dir, sizeof dir, "claim");
  snprintf(p, sizeof p, "%s/ds", dir);
  snprintf(f, sizeof f, "%s/images.parquet", p);
  write_images(p, "oa-dataset", "zstd", NULL, SHAPE, 2, 5);
  claim_size(p, 40); /* unchanged x; y grows to 40: still a small claim, and it reads */
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(p, NULL, &ds, &err), &err);
  pb_dataset_free(ds);

  claim_size(p, INT32_MAX);
  int rc = pb_dataset_open(p, NULL, &ds, &err);
  if (rc == PB_OK) {
    pb_image_meta m;
    rc = pb_dataset_meta(ds, 0, &m, &err);
    if (rc == PB_OK) FAIL("%s: a claim of %zu bytes was believed", f, pb_image_bytes(&m));
    pb_dataset_free(ds);
  }
  CHECK_EQ(rc, PB_EUNSUPPORTED);
  CHECK_CONTAINS(err.message, f);
  CHECK_CONTAINS(err.message, "2147483647x2147483647");
  CHECK_CONTAINS(err.message, "PIPEBENCH_MAX_IMAGE_BYTES");
  printf("ok refused: %s\n", err.message);
  pb__remove_tree(dir);
  return 0;
}
