/* Damaged chunk lists in ome-parquet files (numeric and byte chunks), made from good files with
 * DuckDB's SQL: a chunk outside the image, one off the grid, chunk shapes that do not tile the
 * image, a pixels list of the wrong length, overlapping chunks, an unknown compression and a
 * truncated list. Each is refused by both readers (direct pages and DuckDB) with the file and
 * the problem named, and `pipebench inspect` exits 2 with the same words. And a crop touches
 * only the chunks it needs: a garbage zstd leaf outside it does not stop it.
 * With PIPEBENCH_ARROW_CORPUS_OUT=DIR the damaged files are also copied there (how
 * corpus/ome_parquet/ was made). */
#include <duckdb.h>
#include <sys/wait.h>

#include "arrow_test_util.h"
#include "formats/format_internal.h"

static const int64_t SHAPE[PB_NDIM] = {1, 2, 1, 12, 10};

static void write_good(const char *path, const char *opt, const char *comp) {
  struct pb_error err = {{0}};
  pb_write_params p = PB_WRITE_PARAMS_DEFAULTS;
  p.options = opt;
  p.compression = comp;
  p.chunk[PB_Z] = 1;
  p.chunk[PB_Y] = p.chunk[PB_X] = 8; /* 4 chunks per channel, three of them edge chunks */
  pb_writer *w = NULL;
  CHECK_OK(pb_writer_new(path, "ome-parquet", &p, &w, &err), &err);
  pb_image_meta m;
  pb_image_meta_init(&m, "bad", PB_UINT16, SHAPE);
  uint16_t px[2 * 12 * 10];
  for (int i = 0; i < 2; i++) {
    fill_pixels(&m, px, (unsigned)i + 5);
    CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
  }
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
}

static void sql(duckdb_connection con, const char *q) {
  duckdb_result r;
  if (duckdb_query(con, q, &r) != DuckDBSuccess) FAIL("%s: %s", q, duckdb_result_error(&r));
  duckdb_destroy_result(&r);
}

/* Writes bad from good with the chunks list of every row replaced by expr (over `ch`, the
 * original list). */
static void damage(duckdb_connection con, const char *good, const char *bad, const char *expr) {
  char q[4096];
  snprintf(q, sizeof q,
           "COPY (SELECT struct_update(ome_arrow, chunks := (SELECT %s FROM (SELECT "
           "ome_arrow.chunks AS ch))) AS ome_arrow FROM read_parquet('%s')) TO '%s' "
           "(FORMAT parquet)",
           expr, good, bad);
  sql(con, q);
}

static void expect_refused(const char *path, int direct, const char *what) {
  struct pb_error err = {{0}};
  if (!direct) setenv("PB_OA_DIRECT", "0", 1);
  pb_dataset *ds = NULL;
  int rc = pb_dataset_open(path, NULL, &ds, &err);
  unsetenv("PB_OA_DIRECT");
  if (rc == PB_OK) {
    uint16_t buf[2 * 12 * 10];
    rc = pb_dataset_read(ds, 0, buf, sizeof buf, NULL, &err);
    /* a crop that misses the damaged chunk is refused too: the whole list is checked */
    pb_region crop = {{0, 0, 0, 0, 0}, {1, 1, 1, 2, 2}};
    struct pb_error e2 = {{0}};
    int rc2 = pb_dataset_read_region(ds, 0, &crop, buf, sizeof buf, NULL, &e2);
    if (rc2 == PB_OK || strstr(e2.message, what) == NULL)
      FAIL("%s (%s): a crop was not refused for '%s': rc=%d: %s", path,
           direct ? "direct" : "DuckDB", what, rc2, e2.message);
    pb_dataset_free(ds);
  }
  if (rc == PB_OK || strstr(err.message, path) == NULL || strstr(err.message, what) == NULL)
    FAIL("%s (%s): expected an error naming the file and '%s': rc=%d: %s", path,
         direct ? "direct" : "DuckDB", what, rc, err.message);
  printf("ok (%s): %s\n", direct ? "direct" : "DuckDB", err.message);
}

static void expect_cli_exit2(const char *dir, const char *path, const char *what) {
  const char *cli = getenv("PIPEBENCH_CLI") ? getenv("PIPEBENCH_CLI") : PIPEBENCH_CLI;
  char cmd[4096], log[600];
  snprintf(log, sizeof log, "%s/stderr.txt", dir);
  snprintf(cmd, sizeof cmd, "'%s' inspect '%s' > /dev/null 2> '%s'", cli, path, log);
  int st = system(cmd);
  void *text;
  size_t n;
  struct pb_error err;
  CHECK_OK(pb__read_file(log, &text, &n, &err), &err);
  char *s = calloc(1, n + 1);
  memcpy(s, text, n);
  pb_free(text, n);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 2 || strstr(s, path) == NULL || strstr(s, what) == NULL)
    FAIL("pipebench inspect %s: exit %d, stderr: %s (wanted exit 2 and '%s')", path,
         WIFEXITED(st) ? WEXITSTATUS(st) : -1, s, what);
  free(s);
}

int main(void) {
  char dir[256], good[512], goodb[512], bad[640];
  tmp_dir(dir, sizeof dir, "ckbad");
  snprintf(good, sizeof good, "%s/good_chunks.parquet", dir);
  snprintf(goodb, sizeof goodb, "%s/good_bytes.parquet", dir);
  write_good(good, "layout=chunks", NULL);
  write_good(goodb, "layout=chunk-bytes", NULL);
  duckdb_database db;
  duckdb_connection con;
  CHECK(duckdb_open(NULL, &db) == DuckDBSuccess && duckdb_connect(db, &con) == DuckDBSuccess);
  /* Lists are 1-based in DuckDB; chunk k (0-based) is ch[k + 1]. Per image: c=0 chunks at
   * (y, x) = (0,0) 8x8, (0,8) 8x2, (8,0) 4x8, (8,8) 4x2; then the same for c=1. */
  static const struct {
    const char *name, *layout, *expr, *what;
  } cases[] = {
      {"outside_c", "chunks",
       "list_transform(ch, (x, i) -> CASE WHEN i = 3 THEN struct_update(x, c := 5::SMALLINT) "
       "ELSE x END)",
       "t=0, c=5 lies outside the image"},
      {"outside_y", "chunks",
       "list_transform(ch, (x, i) -> CASE WHEN i = 4 THEN struct_update(x, y := 16) ELSE x "
       "END)",
       "y=16 of size 4 lies outside the image"},
      {"off_grid", "chunk-bytes",
       "list_transform(ch, (x, i) -> CASE WHEN i = 3 THEN struct_update(x, y := 6, shape_y := 6)"
       " ELSE x END)",
       "is not on the grid"},
      {"not_tiling", "chunks",
       "list_transform(ch, (x, i) -> CASE WHEN i = 2 THEN struct_update(x, shape_x := 1, pixels"
       " := x.pixels[1:8]) ELSE x END)",
       "chunk shapes do not tile the image"},
      {"pixels_short", "chunks",
       "list_transform(ch, (x, i) -> CASE WHEN i = 6 THEN struct_update(x, pixels := "
       "x.pixels[1:10]) ELSE x END)",
       "pixels list holds 10 values"},
      {"overlap", "chunks", "list_transform(ch, (x, i) -> CASE WHEN i = 2 THEN ch[1] ELSE x END)",
       "overlapping chunks"},
      {"overlap_bytes", "chunk-bytes",
       "list_transform(ch, (x, i) -> CASE WHEN i = 8 THEN ch[7] ELSE x END)",
       "overlapping chunks"},
      {"codec", "chunk-bytes",
       "list_transform(ch, (x, i) -> CASE WHEN i = 5 THEN struct_update(x, compression := "
       "'brotli') ELSE x END)",
       "unknown compression 'brotli'"},
      {"truncated", "chunks", "ch[1:5]", "truncated chunk list: 5 chunks"},
      {"truncated_bytes", "chunk-bytes", "ch[1:7]", "truncated chunk list: 7 chunks"},
  };
  const char *corpus = getenv("PIPEBENCH_ARROW_CORPUS_OUT");
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    snprintf(bad, sizeof bad, "%s/%s.parquet", dir, cases[k].name);
    damage(con, strcmp(cases[k].layout, "chunks") == 0 ? good : goodb, bad, cases[k].expr);
    expect_refused(bad, 1, cases[k].what);
    expect_refused(bad, 0, cases[k].what);
    expect_cli_exit2(dir, bad, cases[k].what);
    if (corpus != NULL) {
      char cmd[2048];
      snprintf(cmd, sizeof cmd, "cp '%s' '%s/%s.parquet'", bad, corpus, cases[k].name);
      CHECK_EQ(system(cmd), 0);
    }
  }
  if (corpus != NULL) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' '%s/'", good, goodb, corpus);
    CHECK_EQ(system(cmd), 0);
  }
  /* A region read touches only the chunks it needs: with chunk 4's zstd leaf (c=1, y=0, x=0)
   * made garbage, the whole image is an error naming that chunk, and a crop of channel 0 reads
   * the written pixels. */
  char goodz[512];
  snprintf(goodz, sizeof goodz, "%s/good_zstd.parquet", dir);
  write_good(goodz, "layout=chunk-bytes", "zstd");
  snprintf(bad, sizeof bad, "%s/leaf_garbage.parquet", dir);
  damage(con, goodz, bad,
         "list_transform(ch, (x, i) -> CASE WHEN i = 5 THEN struct_update(x, pixel_bytes := "
         "'\\xDE\\xAD\\xBE\\xEF'::BLOB) ELSE x END)");
  for (int direct = 0; direct < 2; direct++) {
    struct pb_error err = {{0}};
    if (!direct) setenv("PB_OA_DIRECT", "0", 1);
    pb_dataset *ds = NULL;
    CHECK_OK(pb_dataset_open(bad, NULL, &ds, &err), &err);
    unsetenv("PB_OA_DIRECT");
    uint16_t buf[2 * 12 * 10], want[2 * 12 * 10];
    int rc = pb_dataset_read(ds, 0, buf, sizeof buf, NULL, &err);
    if (rc == PB_OK || strstr(err.message, bad) == NULL || strstr(err.message, "chunk 4") == NULL)
      FAIL("%s: whole read: rc=%d: %s", bad, rc, err.message);
    pb_region c0 = {{0, 0, 0, 0, 0}, {1, 1, 1, 12, 10}};
    CHECK_OK(pb_dataset_read_region(ds, 0, &c0, buf, sizeof buf, NULL, &err), &err);
    pb_image_meta m;
    pb_image_meta_init(&m, "bad", PB_UINT16, SHAPE);
    fill_pixels(&m, want, 5);
    CHECK(memcmp(buf, want, 12 * 10 * sizeof(uint16_t)) == 0);
    pb_dataset_free(ds);
  }
  duckdb_disconnect(&con);
  duckdb_close(&db);
  pb__remove_tree(dir);
  printf("ok: %zu damaged chunk lists refused by both readers and by inspect (exit 2)\n",
         sizeof cases / sizeof cases[0]);
  return 0;
}
