/* Bad pages under the direct page reader: a corrupted page header, a page whose sizes are
 * wrong, corrupt compressed data, and a file truncated after open. Each read gives a clear
 * error naming the file and the image (the direct path's, when DuckDB fails as well), never a
 * crash and never wrong pixels. */
#include <duckdb.h>
#include <fcntl.h>
#include <stdint.h>

#include "arrow_test_util.h"
#include "formats/arrow/oa_pq.h"
#include "formats/format_internal.h"

static const int64_t SHAPE[PB_NDIM] = {1, 1, 2, 30, 40};

static void write_set(const char *path, const char *format, const char *comp, const char *opt) {
  write_images(path, format, comp, opt, SHAPE, 4, 3);
}

/* data_page_offset of leaf in row group 0. */
static int64_t page_offset(const char *file, const char *leaf) {
  duckdb_database db;
  duckdb_connection c;
  CHECK(duckdb_open(NULL, &db) == DuckDBSuccess);
  CHECK(duckdb_connect(db, &c) == DuckDBSuccess);
  char q[2048];
  snprintf(q, sizeof q,
           "SELECT data_page_offset FROM parquet_metadata('%s') WHERE row_group_id = 0 AND "
           "path_in_schema = '%s'",
           file, leaf);
  duckdb_result r;
  CHECK(duckdb_query(c, q, &r) == DuckDBSuccess);
  CHECK_EQ(duckdb_row_count(&r), 1);
  int64_t off = duckdb_value_int64(&r, 0, 0);
  duckdb_destroy_result(&r);
  duckdb_disconnect(&c);
  duckdb_close(&db);
  return off;
}

static void patch(const char *file, int64_t off, const unsigned char *bytes, size_t n) {
  int fd = open(file, O_WRONLY);
  CHECK(fd >= 0);
  CHECK_EQ(pwrite(fd, bytes, n, (off_t)off), (long long)n);
  close(fd);
}

static void add_to_byte(const char *file, int64_t off, int delta) {
  int fd = open(file, O_RDWR);
  CHECK(fd >= 0);
  unsigned char b;
  CHECK_EQ(pread(fd, &b, 1, (off_t)off), 1);
  b = (unsigned char)(b + delta);
  CHECK_EQ(pwrite(fd, &b, 1, (off_t)off), 1);
  close(fd);
}

/* Reads image 0 of the dataset and expects an error naming name_in_msg and "image 0" (and
 * extra, if not NULL). */
static void expect_error(const char *path, const char *name_in_msg, const char *extra) {
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  pb_image_meta m;
  CHECK_OK(pb_dataset_meta(ds, 0, &m, &err), &err);
  size_t nb = pb_image_bytes(&m);
  void *buf = malloc(nb);
  pb__oa_direct_reset();
  int rc = pb_dataset_read(ds, 0, buf, nb, NULL, &err);
  int64_t served, fell;
  pb__oa_direct_stats(&served, &fell);
  if (rc == 0 || strstr(err.message, name_in_msg) == NULL ||
      strstr(err.message, "image 0") == NULL || (extra != NULL && strstr(err.message, extra) == NULL) || fell != 1) {
    fprintf(stderr, "%s: expected an error naming '%s', 'image 0' and '%s' (fell back %lld), got "
            "rc=%d: %s\n", path, name_in_msg, extra ? extra : "", (long long)fell, rc,
            err.message);
    exit(1);
  }
  printf("ok error: %s\n", err.message);
  free(buf);
  pb_dataset_free(ds);
}

/* The file is cut short after open: the direct path's pread fails cleanly. With the file
 * mapped (the default), a page past the new end would fault instead, as in any mapped reader,
 * so this is the pread path's promise (PB_OA_MMAP=0; docs/format-ome-arrow.md). */
static void truncated_after_open(const char *path, const char *file, int64_t keep) {
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  setenv("PB_OA_MMAP", "0", 1);
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  unsetenv("PB_OA_MMAP");
  CHECK(truncate(file, (off_t)keep) == 0);
  pb_image_meta m;
  CHECK_OK(pb_dataset_meta(ds, 0, &m, &err), &err);
  size_t nb = pb_image_bytes(&m);
  void *buf = malloc(nb);
  int rc = pb_dataset_read(ds, 0, buf, nb, NULL, &err);
  if (rc == 0 || strstr(err.message, file) == NULL || strstr(err.message, "image 0") == NULL) {
    fprintf(stderr, "%s: truncated after open: rc=%d: %s\n", path, rc, err.message);
    exit(1);
  }
  printf("ok error: %s\n", err.message);
  free(buf);
  pb_dataset_free(ds);
}

int main(void) {
  char dir[256], p[512], f[600];
  tmp_dir(dir, sizeof dir, "dbad");
  const char *pixels = "ome_arrow, planes, list, element, pixels, list, element";
  static const unsigned char junk[4] = {0xFF, 0xFF, 0xFF, 0xFF};

  /* ome-parquet, zstd pages: header junk, a wrong uncompressed size, corrupt zstd data. */
  for (int k = 0; k < 3; k++) {
    snprintf(p, sizeof p, "%s/z%d.parquet", dir, k);
    write_set(p, "ome-parquet", NULL, "parquet_codec=zstd,row_group_rows=2");
    int64_t off = page_offset(p, pixels);
    if (k == 0) {
      patch(p, off, junk, 4);
      expect_error(p, p, "malformed page header");
    } else if (k == 1) {
      add_to_byte(p, off + 3, 2); /* uncompressed_page_size + 1 (zigzag varint) */
      expect_error(p, p, "page at byte");
    } else {
      add_to_byte(p, off + 40, 0x55);
      add_to_byte(p, off + 60, 0x55);
      add_to_byte(p, off + 200, 0x55);
      expect_error(p, p, NULL);
    }
  }
  /* ome-parquet, uncompressed pages: the two sizes disagree; a truncation after open. */
  snprintf(p, sizeof p, "%s/u.parquet", dir);
  write_set(p, "ome-parquet", NULL, "parquet_codec=uncompressed,row_group_rows=2");
  add_to_byte(p, page_offset(p, pixels) + 3, 2);
  expect_error(p, p, "page at byte");
  snprintf(p, sizeof p, "%s/t.parquet", dir);
  write_set(p, "ome-parquet", NULL, "parquet_codec=uncompressed,row_group_rows=2");
  truncated_after_open(p, p, page_offset(p, pixels) + 100);

  /* oa-dataset: the same damage to chunks.parquet's pixel_bytes pages. */
  for (int k = 0; k < 3; k++) {
    snprintf(p, sizeof p, "%s/ds%d", dir, k);
    write_set(p, "oa-dataset", k == 2 ? "snappy" : "zstd", NULL);
    snprintf(f, sizeof f, "%s/chunks.parquet", p);
    int64_t off = page_offset(f, "pixel_bytes");
    if (k == 0) {
      patch(f, off, junk, 4);
      expect_error(p, f, "malformed page header");
    } else if (k == 1) {
      add_to_byte(f, off + 3, 2);
      expect_error(p, f, "page at byte");
    } else {
      add_to_byte(f, off + 30, 0x55);
      add_to_byte(f, off + 31, 0x55);
      add_to_byte(f, off + 33, 0x55);
      expect_error(p, f, NULL);
    }
  }
  snprintf(p, sizeof p, "%s/dst", dir);
  write_set(p, "oa-dataset", "none", NULL);
  snprintf(f, sizeof f, "%s/chunks.parquet", p);
  truncated_after_open(p, f, page_offset(f, "pixel_bytes") + 20);
  pb__remove_tree(dir);
  return 0;
}
