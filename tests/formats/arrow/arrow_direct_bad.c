/* Bad pages under the direct page reader: a corrupted page header, a page whose sizes are
 * wrong, corrupt compressed data, and a file truncated in place between reads (read with pread
 * and mapped). Each read gives a clear
 * error naming the file and the image (the direct path's, when DuckDB fails as well), never a
 * crash and never wrong pixels. */
#include <duckdb.h>
#include <fcntl.h>
#include <sys/wait.h>
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
  pb__ome_arrow_direct_reset();
  int rc = pb_dataset_read(ds, 0, buf, nb, NULL, &err);
  int64_t served, fell;
  pb__ome_arrow_direct_stats(&served, &fell);
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

/* The file is cut short in place by another process between two reads: read image 0, cut
 * the file at keep, then read the last image (and image 0 again). Each read after the cut is
 * an error naming the file, never a crash: with the file mapped (the default), where touching
 * a page past the new end would raise SIGBUS, the reader compares the file's length with the
 * mapping's before every read; with pages read by pread (PB_OA_MMAP=0) the short read is seen. Image 0 may still be served from the page decoded before the cut (pread only), which
 * is the file's content as it was. */
static void truncated_between_reads(const char *path, const char *file, int64_t keep,
                                    int mapped) {
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  setenv("PB_OA_MMAP", mapped ? "1" : "0", 1);
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  unsetenv("PB_OA_MMAP");
  pb_image_meta m;
  CHECK_OK(pb_dataset_meta(ds, 0, &m, &err), &err);
  size_t nb = pb_image_bytes(&m);
  void *buf = malloc(nb);
  CHECK_OK(pb_dataset_read(ds, 0, buf, nb, NULL, &err), &err);
  pid_t pid = fork(); /* another process cuts it */
  CHECK(pid >= 0);
  if (pid == 0) _exit(truncate(file, (off_t)keep) == 0 ? 0 : 1);
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  int64_t last = pb_dataset_count(ds) - 1;
  for (int k = 0; k < 2; k++) {
    int64_t i = k == 0 ? last : 0;
    if (k == 1 && !mapped) break;
    char want[32];
    snprintf(want, sizeof want, "image %lld", (long long)i);
    int rc = pb_dataset_read(ds, i, buf, nb, NULL, &err);
    if (rc == 0 || strstr(err.message, file) == NULL || strstr(err.message, want) == NULL) {
      fprintf(stderr, "%s: truncated between reads (%s): image %lld: rc=%d: %s\n", path,
              mapped ? "mapped" : "pread", (long long)i, rc, err.message);
      exit(1);
    }
    printf("ok error (%s): %s\n", mapped ? "mapped" : "pread", err.message);
  }
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
    write_set(p, "ome-parquet", NULL, "layout=planes,parquet_codec=zstd,row_group_rows=2");
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
  write_set(p, "ome-parquet", NULL, "layout=planes,parquet_codec=uncompressed,row_group_rows=2");
  add_to_byte(p, page_offset(p, pixels) + 3, 2);
  expect_error(p, p, "page at byte");
  /* Files cut between reads: planes and numeric chunks, pread and mapped. */
  for (int k = 0; k < 4; k++) {
    snprintf(p, sizeof p, "%s/t%d.parquet", dir, k);
    write_set(p, "ome-parquet", NULL,
              k < 2 ? "layout=planes,parquet_codec=uncompressed,row_group_rows=2"
                    : "layout=chunks,parquet_codec=uncompressed,row_group_rows=2");
    const char *leaf = k < 2 ? pixels
                             : "ome_arrow, chunks, list, element, pixels, list, element";
    truncated_between_reads(p, p, page_offset(p, leaf) + 100, k % 2);
  }

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
  for (int mapped = 0; mapped < 2; mapped++) {
    snprintf(p, sizeof p, "%s/dst%d", dir, mapped);
    write_set(p, "oa-dataset", "none", NULL);
    snprintf(f, sizeof f, "%s/chunks.parquet", p);
    truncated_between_reads(p, f, page_offset(f, "pixel_bytes") + 20, mapped);
  }
  pb__remove_tree(dir);
  return 0;
}
