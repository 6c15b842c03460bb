/* Pages read with pread keep their levels and value offsets after their first load, so a later
 * read of the page reads only the values it needs (pq_read.c, keep_page, read_byte_values).
 * Checked on the uncompressed pixel_bytes of an oa-dataset's chunks.parquet (several values per
 * page):
 *  - every row, read in order, then backwards and in a scattered order (the kept path), is
 *    byte for byte what the mapped file gives;
 *  - a value whose length prefix is rewritten in place after its page was first read is an
 *    error that says so, not other bytes;
 *  - after the file is cut short, a row whose value lay past the cut is an error ("file
 *    truncated?"), and a row wholly before it still reads as written. */
#include <duckdb.h>
#include <fcntl.h>
#include <stdint.h>

#include "common/fs.h"
#include "formats/arrow/arrow_test_util.h"
#include "parquet/pq_read.h"

static const int64_t SHAPE[PB_NDIM] = {1, 1, 1, 30, 40};
enum { N_IMAGES = 40 };

static pb__pq_col *open_col(duckdb_connection con, const char *file, int map) {
  const char *leaf[1] = {"pixel_bytes"};
  pb__pq_col *c = NULL;
  int in_file = 0;
  struct pb_error err = {{0}};
  CHECK_OK(pb__pq_open_many(con, file, leaf, 1, map, &c, &in_file, &err), &err);
  CHECK(c != NULL && in_file);
  return c;
}

/* Row r's value, read through c (copied out, as the rows may borrow). */
static int read_row(pb__pq_col *c, int64_t r, pb__pq_rows *q, unsigned char **out, size_t *n,
                    struct pb_error *err) {
  pb__pq_rows_clear(q);
  int rc = pb__pq_read(c, r, 1, q, err);
  if (rc != PB_OK) return rc;
  CHECK_EQ(q->n_vals, 1);
  *n = q->val_off[1] - q->val_off[0];
  *out = malloc(*n + 1);
  CHECK(*out != NULL);
  memcpy(*out, pb__pq_rows_data(q) + q->val_off[0], *n);
  return PB_OK;
}

int main(void) {
  char dir[256], ds[512], file[600];
  tmp_dir(dir, sizeof dir, "pqkept");
  snprintf(ds, sizeof ds, "%s/ds", dir);
  write_images(ds, "oa-dataset", "none", "chunks_per_row_group=16", SHAPE, N_IMAGES, 3);
  snprintf(file, sizeof file, "%s/chunks.parquet", ds);

  duckdb_database db;
  duckdb_connection con;
  CHECK(duckdb_open(NULL, &db) == DuckDBSuccess);
  CHECK(duckdb_connect(db, &con) == DuckDBSuccess);
  pb__pq_col *pr = open_col(con, file, 0), *mp = open_col(con, file, 1);
  int64_t n = pb__pq_row_count(pr);
  CHECK_EQ(n, pb__pq_row_count(mp));
  CHECK(n >= N_IMAGES);
  unsigned char **want = calloc((size_t)n, sizeof *want);
  size_t *want_n = calloc((size_t)n, sizeof *want_n);
  CHECK(want != NULL && want_n != NULL);
  pb__pq_rows q = {0};
  q.may_borrow = 1;
  struct pb_error err = {{0}};
  for (int64_t r = 0; r < n; r++) CHECK_OK(read_row(mp, r, &q, &want[r], &want_n[r], &err), &err);
  for (int pass = 0; pass < 3; pass++)
    for (int64_t k = 0; k < n; k++) {
      int64_t r = pass == 0 ? k : pass == 1 ? n - 1 - k : (k * 17 + 5) % n;
      unsigned char *v;
      size_t vn;
      CHECK_OK(read_row(pr, r, &q, &v, &vn, &err), &err);
      CHECK_EQ(vn, want_n[r]);
      CHECK(memcmp(v, want[r], vn) == 0);
      free(v);
    }
  pb__pq_free(mp);

  /* Where row r's value lies in the file: its bytes are unique (random pixels). */
  size_t fn = 0;
  unsigned char *whole = NULL;
  {
    FILE *f = fopen(file, "rb");
    CHECK(f != NULL);
    CHECK(fseek(f, 0, SEEK_END) == 0);
    fn = (size_t)ftell(f);
    rewind(f);
    whole = malloc(fn);
    CHECK(whole != NULL && fread(whole, 1, fn, f) == fn);
    fclose(f);
  }
  int64_t r_mid = n / 2;
  unsigned char *at = memmem(whole, fn, want[r_mid], want_n[r_mid]);
  CHECK(at != NULL && at - whole >= 4);
  int64_t pos = at - whole;
  /* The length prefix rewritten in place (one less): an error, not other bytes. */
  unsigned char len4[4];
  uint32_t l = (uint32_t)want_n[r_mid] - 1;
  for (int k = 0; k < 4; k++) len4[k] = (unsigned char)(l >> (8 * k));
  int fd = open(file, O_WRONLY);
  CHECK(fd >= 0);
  CHECK_EQ(pwrite(fd, len4, 4, (off_t)(pos - 4)), 4);
  close(fd);
  unsigned char *v = NULL;
  size_t vn = 0;
  CHECK(read_row(pr, r_mid, &q, &v, &vn, &err) != PB_OK);
  CHECK(strstr(err.message, "changed since the page was first read") != NULL);
  printf("ok error: %s\n", err.message);

  /* Cut in the middle of row r_mid + 1's value: that row fails, row 0 still reads. */
  unsigned char *next = memmem(whole, fn, want[r_mid + 1], want_n[r_mid + 1]);
  CHECK(next != NULL);
  CHECK(truncate(file, (off_t)(next - whole) + (off_t)want_n[r_mid + 1] / 2) == 0);
  CHECK(read_row(pr, r_mid + 1, &q, &v, &vn, &err) != PB_OK);
  CHECK(strstr(err.message, "truncated") != NULL);
  printf("ok error: %s\n", err.message);
  CHECK_OK(read_row(pr, 0, &q, &v, &vn, &err), &err);
  CHECK_EQ(vn, want_n[0]);
  CHECK(memcmp(v, want[0], vn) == 0);
  free(v);

  pb__pq_free(pr);
  pb__pq_rows_destroy(&q);
  for (int64_t r = 0; r < n; r++) free(want[r]);
  free(want);
  free(want_n);
  free(whole);
  duckdb_disconnect(&con);
  duckdb_close(&db);
  pb__remove_tree(dir);
  return 0;
}
