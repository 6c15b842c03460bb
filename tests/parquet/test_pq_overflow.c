/* Column chunk sizes from a Parquet footer that overflow when added to their offset: the
 * typed-chunk dataset's chunks.parquet (pixel_bytes, chunk_id) and an ome-parquet file
 * (the pixels of planes, and of numeric chunks) with a column chunk's total_compressed_size
 * rewritten to INT64_MAX.
 *
 * The direct page reader must refuse such a column at open (the caller keeps DuckDB), and
 * reading the dataset must then give either the written pixels or an error naming the file,
 * never undefined behaviour (this test runs under UBSan in the sanitizer build). */
#include <duckdb.h>
#include <stdint.h>

#include "formats/arrow/arrow_test_util.h"
#include "formats/format_internal.h"
#include "parquet/pq_read.h"

static const int64_t SHAPE[PB_NDIM] = {1, 1, 2, 30, 40};
enum { N_IMAGES = 3, SEED = 11 };

/* One int64 of parquet_metadata() for row group 0 of leaf. */
static int64_t meta_value(const char *file, const char *leaf, const char *col) {
  duckdb_database db;
  duckdb_connection c;
  CHECK(duckdb_open(NULL, &db) == DuckDBSuccess);
  CHECK(duckdb_connect(db, &c) == DuckDBSuccess);
  char q[2048];
  snprintf(q, sizeof q,
           "SELECT %s FROM parquet_metadata('%s') WHERE row_group_id = 0 AND "
           "path_in_schema = '%s'", col, file, leaf);
  duckdb_result r;
  CHECK(duckdb_query(c, q, &r) == DuckDBSuccess);
  CHECK_EQ(duckdb_row_count(&r), 1);
  int64_t v = duckdb_value_int64(&r, 0, 0);
  duckdb_destroy_result(&r);
  duckdb_disconnect(&c);
  duckdb_close(&db);
  return v;
}

/* Thrift compact: an i64 field header one id after the previous field (0x16), then the
 * zigzag varint of v. */
static size_t put_i64_field(unsigned char *out, int64_t v) {
  uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
  size_t n = 0;
  out[n++] = 0x16;
  do {
    unsigned char b = (unsigned char)(z & 0x7f);
    z >>= 7;
    out[n++] = (unsigned char)(b | (z ? 0x80 : 0));
  } while (z);
  return n;
}

static unsigned char *slurp(const char *file, size_t *n) {
  FILE *f = fopen(file, "rb");
  CHECK(f != NULL);
  CHECK(fseek(f, 0, SEEK_END) == 0);
  long len = ftell(f);
  CHECK(len > 12);
  rewind(f);
  unsigned char *b = malloc((size_t)len + 64);
  CHECK(b != NULL);
  CHECK_EQ(fread(b, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return b;
}

/* Rewrites leaf's total_compressed_size in row group 0 of file's footer to v (ColumnMetaData
 * field 7, right after total_uncompressed_size, field 6), fixing the footer length. */
static void set_compressed_size(const char *file, const char *leaf, int64_t v) {
  int64_t usz = meta_value(file, leaf, "total_uncompressed_size");
  int64_t csz = meta_value(file, leaf, "total_compressed_size");
  unsigned char pat[32], rep[32];
  size_t np = put_i64_field(pat, usz);
  size_t ncs = put_i64_field(pat + np, csz);
  size_t nr = put_i64_field(rep, v);
  size_t n;
  unsigned char *b = slurp(file, &n);
  uint32_t flen = (uint32_t)b[n - 8] | (uint32_t)b[n - 7] << 8 | (uint32_t)b[n - 6] << 16 |
                  (uint32_t)b[n - 5] << 24;
  CHECK(flen + 8 <= n);
  size_t f0 = n - 8 - flen, at = 0, hits = 0;
  for (size_t k = f0; k + np + ncs <= n - 8; k++)
    if (memcmp(b + k, pat, np + ncs) == 0 && hits++ == 0) at = k + np;
  CHECK(hits >= 1); /* the first is row group 0's (row groups are in order; checked below) */
  /* the new file: everything before the size, the new size, the rest of the footer */
  size_t m = n - ncs + nr;
  unsigned char *o = malloc(m);
  CHECK(o != NULL);
  memcpy(o, b, at);
  memcpy(o + at, rep, nr);
  memcpy(o + at + nr, b + at + ncs, n - at - ncs);
  uint32_t nf = (uint32_t)(flen - ncs + nr);
  for (int k = 0; k < 4; k++) o[m - 8 + (size_t)k] = (unsigned char)(nf >> (8 * k));
  FILE *f = fopen(file, "wb");
  CHECK(f != NULL);
  CHECK_EQ(fwrite(o, 1, m, f), m);
  CHECK(fclose(f) == 0);
  free(o);
  free(b);
  CHECK_EQ(meta_value(file, leaf, "total_compressed_size"), v);
}

/* The direct reader opens leaf of file (unmutated: expect_open 1) or refuses it (0). */
static void check_open(const char *file, const char *leaf, int expect_open) {
  pb__pq_col *col = NULL;
  int in_file = 0;
  struct pb_error err = {{0}};
  CHECK_OK(pb__pq_open_many(file, &leaf, 1, 1, &col, &in_file, &err), &err);
  CHECK_EQ(in_file, 1);
  if (expect_open != (col != NULL))
    FAIL("%s: leaf '%s' %s by the direct reader", file, leaf,
         col != NULL ? "opened (its chunk size overflows)" : "refused");
  if (col != NULL) {
    /* reading it whole must not overflow either */
    pb__pq_rows rows;
    memset(&rows, 0, sizeof rows);
    int rc = pb__pq_read_all(col, &rows, &err);
    if (expect_open) CHECK_OK(rc, &err);
    pb__pq_rows_destroy(&rows);
    pb__pq_free(col);
  }
}

/* Every image of the dataset reads as written, or fails with a message naming file. */
static void read_back(const char *path, const char *file) {
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  int rc = pb_dataset_open(path, NULL, &ds, &err);
  if (rc != PB_OK) {
    CHECK_CONTAINS(err.message, file);
    printf("ok refused at open: %s\n", err.message);
    return;
  }
  pb_image_meta m;
  pb_image_meta_init(&m, "x", PB_UINT16, SHAPE);
  size_t nb = pb_image_bytes(&m);
  void *got = malloc(nb), *want = malloc(nb);
  CHECK(got != NULL && want != NULL);
  for (int i = 0; i < N_IMAGES; i++) {
    rc = pb_dataset_read(ds, i, got, nb, NULL, &err);
    if (rc != PB_OK) {
      CHECK_CONTAINS(err.message, file);
      printf("ok error, image %d: %s\n", i, err.message);
      continue;
    }
    fill_pixels(&m, want, SEED + (unsigned)i);
    CHECK(memcmp(got, want, nb) == 0);
  }
  printf("ok read: %s\n", path);
  free(got);
  free(want);
  pb_dataset_free(ds);
}

int main(void) {
  char dir[256], p[512], f[600];
  tmp_dir(dir, sizeof dir, "pqovf");
  static const char *const od_leaves[] = {"pixel_bytes", "chunk_id"};
  for (int k = 0; k < 2; k++) {
    snprintf(p, sizeof p, "%s/ds%d", dir, k);
    write_images(p, "oa-dataset", "zstd", NULL, SHAPE, N_IMAGES, SEED);
    snprintf(f, sizeof f, "%s/chunks.parquet", p);
    check_open(f, od_leaves[k], 1);
    set_compressed_size(f, od_leaves[k], INT64_MAX);
    check_open(f, od_leaves[k], 0);
    read_back(p, f);
  }
  static const char *const layouts[][2] = {
      {"layout=planes,parquet_codec=zstd", "ome_arrow, planes, list, element, pixels, list, element"},
      {"layout=chunks,parquet_codec=zstd", "ome_arrow, chunks, list, element, pixels, list, element"}};
  for (int k = 0; k < 2; k++) {
    const char *pixels = layouts[k][1];
    snprintf(p, sizeof p, "%s/o%d.parquet", dir, k);
    write_images(p, "ome-parquet", NULL, layouts[k][0], SHAPE, N_IMAGES, SEED);
    check_open(p, pixels, 1);
    set_compressed_size(p, pixels, INT64_MAX);
    check_open(p, pixels, 0);
    read_back(p, p);
  }
  pb__remove_tree(dir);
  return check_failures() != 0;
}
