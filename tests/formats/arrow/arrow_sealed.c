/* A DuckDB dataset reaches nothing on the host. Before, a database whose `images` was a VIEW
 * over read_text('/some/secret') opened and read (the secret came out as pixels), and a stored
 * macro named like a function pipebench's SQL calls stood in for it. Now the session is opened
 * with external access off, only a base table is read, and a database that stores macros is
 * refused, each naming the object. Parquet paths with a quote in them are read as files, never
 * as SQL. */
#include <duckdb.h>
#include <sys/stat.h>

#include "arrow_test_util.h"
#include "common/fs.h"
#include "formats/arrow/oa_common.h"

static int open_read_all(const char *path, const char *format, struct pb_error *err) {
  pb_dataset *ds = NULL;
  int rc = pb_dataset_open(path, format, &ds, err);
  if (rc != 0) return rc;
  for (int64_t i = 0; i < pb_dataset_count(ds) && rc == 0; i++) {
    pb_image_meta m;
    rc = pb_dataset_meta(ds, i, &m, err);
    if (rc != 0) break;
    size_t nb = pb_image_bytes(&m);
    void *buf = malloc(nb ? nb : 1);
    CHECK(buf != NULL);
    rc = pb_dataset_read(ds, i, buf, nb, NULL, err);
    free(buf);
  }
  pb_dataset_free(ds);
  return rc;
}

/* Runs q on the database file path, opened for writing with DuckDB's defaults. */
static void sql_on(const char *path, const char *q) {
  duckdb_database db;
  duckdb_connection c;
  CHECK(duckdb_open(path, &db) == DuckDBSuccess);
  CHECK(duckdb_connect(db, &c) == DuckDBSuccess);
  duckdb_result r;
  if (duckdb_query(c, q, &r) != DuckDBSuccess)
    FAIL("SQL failed: %s: %s", q, duckdb_result_error(&r));
  duckdb_destroy_result(&r);
  duckdb_disconnect(&c);
  duckdb_close(&db);
}

static void expect_refused(const char *what, const char *path, const char *needle1,
                           const char *needle2) {
  struct pb_error err = {{0}};
  int rc = open_read_all(path, "duckdb", &err);
  if (rc == PB_OK) {
    EXPECT_FAIL("%s: %s opened and read", what, path);
    return;
  }
  EXPECT_EQ(rc, PB_EFORMAT);
  EXPECT_CONTAINS(err.message, path);
  EXPECT_CONTAINS(err.message, needle1);
  EXPECT_CONTAINS(err.message, needle2);
  printf("ok %s: %s\n", what, err.message);
}

int main(void) {
  char dir[256], db[512], secret[512], q[2048];
  tmp_dir(dir, sizeof dir, "sealed");
  snprintf(secret, sizeof secret, "%s/secret.txt", dir);
  struct pb_error err = {{0}};
  static const char text[] = "TOP-SECRET-TOP-SECRET-TOP-SECRET-TOP-SECRET";
  CHECK_OK(pb__write_file(secret, text, sizeof text - 1, &err), &err);
  const int64_t shape[PB_NDIM] = {1, 1, 1, 4, 4};

  /* As written: opens and reads (so each refusal below is the edit's). */
  snprintf(db, sizeof db, "%s/plain.duckdb", dir);
  write_images(db, "duckdb", NULL, NULL, shape, 2, 1);
  CHECK_OK(open_read_all(db, "duckdb", &err), &err);

  /* The reading session itself: no file functions, no ATTACH, and that setting locked. */
  pb__ome_arrow_db d;
  char plain[512], pq[512];
  snprintf(plain, sizeof plain, "%s", db);
  CHECK_OK(pb__ome_arrow_db_open_reader(&d, plain, NULL, 0, &err), &err);
  snprintf(q, sizeof q, "SELECT content FROM read_text('%s')", secret);
  EXPECT(pb__ome_arrow_exec(&d, q, "probe", &err) != PB_OK);
  EXPECT_CONTAINS(err.message, "disabled by configuration");
  snprintf(q, sizeof q, "ATTACH '%s/other.duckdb' AS other", dir);
  EXPECT(pb__ome_arrow_exec(&d, q, "probe", &err) != PB_OK);
  EXPECT(pb__ome_arrow_exec(&d, "SET enable_external_access = true", "probe", &err) != PB_OK);
  pb__ome_arrow_db_close(&d);
  /* In memory for Parquet: the files named read, nothing else. */
  snprintf(pq, sizeof pq, "%s/plain.parquet", dir);
  write_images(pq, "ome-parquet", NULL, NULL, shape, 2, 1);
  const char *files[1] = {pq};
  CHECK_OK(pb__ome_arrow_db_open_reader(&d, NULL, files, 1, &err), &err);
  snprintf(q, sizeof q, "SELECT count(*) FROM read_parquet('%s')", pq);
  EXPECT_OK(pb__ome_arrow_exec(&d, q, "probe", &err), &err);
  snprintf(q, sizeof q, "SELECT content FROM read_text('%s')", secret);
  EXPECT(pb__ome_arrow_exec(&d, q, "probe", &err) != PB_OK);
  EXPECT(pb__ome_arrow_exec(&d, "SET allowed_paths = ['/']", "probe", &err) != PB_OK);
  pb__ome_arrow_db_close(&d);
  printf("ok sessions sealed\n");

  /* images a VIEW that reads a host file. */
  snprintf(db, sizeof db, "%s/view.duckdb", dir);
  write_images(db, "duckdb", NULL, NULL, shape, 2, 1);
  snprintf(q, sizeof q,
           "ALTER TABLE images RENAME TO images_base; CREATE VIEW images AS SELECT b.rowid AS "
           "rowid, b.ome_arrow, s.content AS leaked FROM images_base b, read_text('%s') s",
           secret);
  sql_on(db, q);
  expect_refused("a view over read_text", db, "'images' is a VIEW, not a table",
                 "pipebench reads only base tables");

  /* A stored macro named like a function pipebench's queries call. */
  snprintf(db, sizeof db, "%s/macro.duckdb", dir);
  write_images(db, "duckdb", NULL, NULL, shape, 2, 1);
  snprintf(q, sizeof q,
           "CREATE MACRO struct_extract(s, f) AS (SELECT content FROM read_text('%s'))", secret);
  sql_on(db, q);
  expect_refused("a macro standing in for struct_extract", db, "'struct_extract'",
                 "stored macro");

  /* A table macro, unused by pipebench but stored: refused too. */
  snprintf(db, sizeof db, "%s/tmacro.duckdb", dir);
  write_images(db, "duckdb", NULL, NULL, shape, 2, 1);
  snprintf(q, sizeof q, "CREATE MACRO peek() AS TABLE SELECT content FROM read_text('%s')",
           secret);
  sql_on(db, q);
  expect_refused("a table macro", db, "'peek'", "stored table macro");

  /* Paths with a quote (and SQL after it) are file names: written and read back whole. */
  static const char *const names[] = {"it's.parquet", "x') UNION SELECT 1 --.parquet"};
  for (size_t k = 0; k < 2; k++) {
    char p[768];
    snprintf(p, sizeof p, "%s/%s", dir, names[k]);
    write_images(p, "ome-parquet", NULL, NULL, shape, 2, 3);
    CHECK_OK(open_read_all(p, "ome-parquet", &err), &err);
    snprintf(p, sizeof p, "%s/o'a %zu", dir, k);
    write_images(p, "oa-dataset", NULL, NULL, shape, 2, 3);
    CHECK_OK(open_read_all(p, "oa-dataset", &err), &err);
  }
  printf("ok quoted paths read as files\n");

  pb__remove_tree(dir);
  return check_failures() != 0;
}
