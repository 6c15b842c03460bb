/* Round trips of every column type, NULLs and awkward strings through the three sinks, the
 * metadata (env.* included), and a check that plain DuckDB SQL reads the Parquet file. */
#include <math.h>
#include <stdbool.h>
#include <sys/stat.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include "duckdb.h"
#pragma GCC diagnostic pop

#include "results_test.h"

static const char *const STRS[] = {
    "plain",
    "comma, inside",
    "quote \" inside and \"\"double\"\"",
    "new\nline and\r\ncrlf",
    "unicode: \xc2\xb5m \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac",
    "",
    NULL,
    "#not a comment",
    "  spaces  ",
    "back\\slash",
    "'single'",
};
#define NROWS (sizeof STRS / sizeof STRS[0])

static const int64_t INTS[NROWS] = {0, -1, 1, INT64_MAX, INT64_MIN, 9007199254740993LL, 42,
                                    -9007199254740993LL, 1000000, 7, 8};

static pb_table *make_table(const pb_env *env) {
  pb_table *t;
  struct pb_error err = {{0}};
  CHECK_OK(pb_table_new(&t), &err);
  /* Declared up front so the order is fixed; "late" appears only at row 2. */
  CHECK_OK(pb_table_add_column(t, "s", PB_COL_STRING), &err);
  CHECK_OK(pb_table_add_column(t, "i", PB_COL_INT64), &err);
  const double dbl[NROWS] = {0.1, -2.5, 1e300, 5e-324, 3.0, NAN, INFINITY, -0.0, 123456789.125,
                             -1e-10, 2.0 / 3.0};
  for (size_t r = 0; r < NROWS; r++) {
    CHECK_OK(pb_table_append_row(t), &err);
    CHECK_OK(pb_table_set_str(t, "s", STRS[r]), &err);
    if (r != 9) CHECK_OK(pb_table_set_i64(t, "i", INTS[r]), &err); /* row 9: NULL */
    CHECK_OK(pb_table_set_f64(t, "d", dbl[r]), &err);
    if (r % 3 != 2) CHECK_OK(pb_table_set_bool(t, "b", r % 3 == 0), &err);
    if (r >= 2) CHECK_OK(pb_table_set_str(t, "late col, \"quoted\"", "x"), &err);
    if (r == 4) CHECK_OK(pb_table_set_null(t, "late col, \"quoted\""), &err);
  }
  CHECK_OK(pb_table_set_env(t, env), &err);
  CHECK_OK(pb_table_set_meta(t, "seed", "1234"), &err);
  CHECK_OK(pb_table_set_meta(t, "key: with colon", "value: with colon"), &err);
  CHECK_OK(pb_table_set_meta(t, "multi", "line one\nline two\\n not an escape"), &err);
  CHECK_OK(pb_table_set_meta(t, "quotes", "it's \"quoted\", {braces}"), &err);
  CHECK_OK(pb_table_set_meta(t, "types", "user value named like the types line"), &err);
  CHECK_OK(pb_table_set_meta(t, "unicode \xe2\x9c\x93", "\xe6\x97\xa5\xe6\x9c\xac"), &err);
  CHECK_OK(pb_table_set_meta(t, "empty", ""), &err);
  return t;
}

static void compare(const pb_table *a, const pb_table *b, const char *what) {
  fprintf(stderr, "-- comparing %s\n", what);
  EXPECT_EQ(pb_table_rows(b), pb_table_rows(a));
  EXPECT_EQ(pb_table_cols(b), pb_table_cols(a));
  if (pb_table_rows(a) != pb_table_rows(b) || pb_table_cols(a) != pb_table_cols(b)) return;
  for (size_t c = 0; c < pb_table_cols(a); c++) {
    EXPECT_STREQ(pb_table_col_name(b, c), pb_table_col_name(a, c));
    EXPECT_EQ(pb_table_col_type(b, c), pb_table_col_type(a, c));
    for (size_t r = 0; r < pb_table_rows(a); r++) {
      int na = pb_table_is_null(a, r, c), nb = pb_table_is_null(b, r, c);
      if (na != nb) {
        EXPECT_FAIL("  row %zu col %zu: null %d vs %d", r, c, na, nb);
        continue;
      }
      if (na) continue;
      switch (pb_table_col_type(a, c)) {
        case PB_COL_STRING:
          EXPECT_STREQ(pb_table_get_str(b, r, c), pb_table_get_str(a, r, c));
          break;
        case PB_COL_INT64: EXPECT_EQ(pb_table_get_i64(b, r, c), pb_table_get_i64(a, r, c)); break;
        case PB_COL_BOOL: EXPECT_EQ(pb_table_get_bool(b, r, c), pb_table_get_bool(a, r, c)); break;
        case PB_COL_DOUBLE: {
          double x = pb_table_get_f64(a, r, c), y = pb_table_get_f64(b, r, c);
          if (memcmp(&x, &y, sizeof x) != 0) {
            EXPECT_FAIL("  row %zu col %zu: %.17g != %.17g", r, c, y, x);
          }
          break;
        }
      }
    }
  }
  EXPECT_EQ(pb_table_meta_count(b), pb_table_meta_count(a));
  for (size_t i = 0; i < pb_table_meta_count(a); i++) {
    const char *k, *v;
    pb_table_meta_at(a, i, &k, &v);
    EXPECT_STREQ(pb_table_get_meta(b, k), v);
  }
}

static void check_api(void) {
  pb_table *t;
  struct pb_error err = {{0}};
  CHECK_OK(pb_table_new(&t), &err);
  EXPECT_EQ(pb_table_set_i64(t, "x", 1), PB_ESTATE); /* no row yet */
  CHECK_OK(pb_table_append_row(t), &err);
  EXPECT_EQ(pb_table_set_i64(t, "x", 1), 0);
  EXPECT_EQ(pb_table_set_str(t, "x", "a"), PB_EINVAL); /* type conflict */
  EXPECT_EQ(pb_table_add_column(t, "x", PB_COL_DOUBLE), PB_EINVAL);
  EXPECT_EQ(pb_table_add_column(t, "x", PB_COL_INT64), 0);
  EXPECT_EQ(pb_table_set_null(t, "nope"), PB_ENOTFOUND);
  EXPECT_EQ(pb_table_col_index(t, "x"), 0);
  EXPECT_EQ(pb_table_col_index(t, "y"), -1);
  EXPECT(pb_table_is_null(t, 5, 0)); /* out of range reads as NULL */
  /* Many rows: growth keeps earlier values. */
  for (int i = 1; i < 5000; i++) {
    CHECK_OK(pb_table_append_row(t), &err);
    CHECK_OK(pb_table_set_i64(t, "x", i), &err);
  }
  EXPECT_EQ(pb_table_rows(t), 5000);
  EXPECT_EQ(pb_table_get_i64(t, 4321, 0), 4321);
  EXPECT_EQ(pb_table_write(t, "/tmp/x.unknown", PB_SINK_AUTO, &err), PB_EINVAL);
  EXPECT(strstr(err.message, "/tmp/x.unknown") != NULL);
  pb_table_free(t);
  pb_table_free(NULL);
}

/* A fresh DuckDB, plain SQL, reads what the Parquet sink wrote. */
static void check_duckdb_sql(const char *path) {
  duckdb_database db;
  duckdb_connection con;
  duckdb_result res;
  EXPECT(duckdb_open(NULL, &db) == DuckDBSuccess);
  EXPECT(duckdb_connect(db, &con) == DuckDBSuccess);
  char sql[2048];
  snprintf(sql, sizeof sql,
           "SELECT count(*), count(s), count(i), count(d), count(b), sum(i) FILTER (WHERE i "
           "BETWEEN -100 AND 100), bool_or(b), max(length(s)) FROM read_parquet('%s')",
           path);
  if (duckdb_query(con, sql, &res) != DuckDBSuccess) {
    EXPECT_FAIL("query failed: %s", duckdb_result_error(&res));
  } else {
    EXPECT_EQ(duckdb_value_int64(&res, 0, 0), NROWS);
    EXPECT_EQ(duckdb_value_int64(&res, 1, 0), NROWS - 1); /* one NULL string */
    EXPECT_EQ(duckdb_value_int64(&res, 2, 0), NROWS - 1); /* row 9 */
    EXPECT_EQ(duckdb_value_int64(&res, 3, 0), NROWS - 2); /* NaN and inf became NULL */
    EXPECT_EQ(duckdb_value_int64(&res, 4, 0), 8);
    EXPECT_EQ(duckdb_value_int64(&res, 5, 0), 0 - 1 + 1 + 42 + 8); /* row 9 (7) is NULL */
    EXPECT_EQ(duckdb_value_boolean(&res, 6, 0), 1);
  }
  duckdb_destroy_result(&res);
  snprintf(sql, sizeof sql,
           "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_parquet('%s'))",
           path);
  if (duckdb_query(con, sql, &res) != DuckDBSuccess) {
    EXPECT_FAIL("describe failed: %s", duckdb_result_error(&res));
  } else {
    const char *want[] = {"VARCHAR", "BIGINT", "DOUBLE", "BOOLEAN", "VARCHAR"};
    EXPECT_EQ(duckdb_row_count(&res), 5);
    for (idx_t r = 0; r < 5 && r < duckdb_row_count(&res); r++) {
      char *ty = duckdb_value_varchar(&res, 1, r);
      EXPECT_STREQ(ty, want[r]);
      duckdb_free(ty);
    }
  }
  duckdb_destroy_result(&res);
  snprintf(sql, sizeof sql,
           "SELECT decode(value) FROM parquet_kv_metadata('%s') WHERE decode(key) = "
           "'env.hostname'",
           path);
  if (duckdb_query(con, sql, &res) != DuckDBSuccess) {
    EXPECT_FAIL("kv query failed: %s", duckdb_result_error(&res));
  } else {
    EXPECT_EQ(duckdb_row_count(&res), 1);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char *v = duckdb_value_varchar(&res, 0, 0);
    EXPECT_STREQ(v, host);
    duckdb_free(v);
  }
  duckdb_destroy_result(&res);
  /* DuckDB's CSV reader takes the CSV sink's layout as it is (a header, then rows). */
  char csv[1024];
  snprintf(csv, sizeof csv, "%.*s.csv", (int)(strlen(path) - strlen(".parquet")), path);
  snprintf(sql, sizeof sql,
           "SELECT count(*), count(s), max(i), min(s) FILTER (WHERE s LIKE 'quote%%') FROM "
           "read_csv('%s', header = true, types = {'i': 'BIGINT'})",
           csv);
  if (duckdb_query(con, sql, &res) != DuckDBSuccess) {
    EXPECT_FAIL("read_csv failed: %s", duckdb_result_error(&res));
  } else {
    EXPECT_EQ(duckdb_value_int64(&res, 0, 0), NROWS);
    EXPECT_EQ(duckdb_value_int64(&res, 2, 0), INT64_MAX);
    char *v = duckdb_value_varchar(&res, 3, 0);
    EXPECT_STREQ(v, STRS[2]);
    duckdb_free(v);
  }
  duckdb_destroy_result(&res);
  duckdb_disconnect(&con);
  duckdb_close(&db);
}

/* Python's own csv and json modules read the two text sinks with the same values. */
static void check_python(const char *dir) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "%s -c 'import csv, json, sys\n"
           "d = sys.argv[1]\n"
           "with open(d + \"/r.csv\", newline=\"\") as f:\n"
           "    rows = list(csv.reader(f))\n"
           "j = json.load(open(d + \"/r.json\"))\n"
           "assert rows[0] == [c[\"name\"] for c in j[\"columns\"]], rows[0]\n"
           "assert len(rows) - 1 == len(j[\"rows\"]) == 11\n"
           "assert rows[4][0] == j[\"rows\"][3][\"s\"] == \"new\\nline and\\r\\ncrlf\", rows[4]\n"
           "assert j[\"rows\"][4][\"s\"].endswith(\"\\u65e5\\u672c\")\n"
           "assert j[\"metadata\"][\"multi\"] == \"line one\\nline two\\\\n not an escape\"\n"
           "print(\"python ok\")' %s",
           PIPEBENCH_PYTHON, dir);
  int rc = system(cmd);
  EXPECT_EQ(rc, 0);
}

int main(void) {
  struct pb_error err = {{0}};
  check_api();
  pb_env env;
  CHECK_OK(pb_env_collect(&env, &err), &err);
  pb_table *t = make_table(&env);
  EXPECT_STREQ(pb_table_get_meta(t, "env.hostname"), env.hostname);
  EXPECT(pb_table_get_meta(t, "env.duckdb_version") != NULL);

  const char *dir = rt_tmpdir();
  const char *names[] = {"r.parquet", "r.csv", "r.json"};
  for (int k = 0; k < 3; k++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, names[k]);
    /* Twice: the second write replaces the first. */
    CHECK_OK(pb_table_write(t, path, PB_SINK_AUTO, &err), &err);
    CHECK_OK(pb_table_write(t, path, PB_SINK_AUTO, &err), &err);
    pb_table *back = NULL;
    CHECK_OK(pb_table_read(path, PB_SINK_AUTO, &back, &err), &err);
    compare(t, back, path);
    pb_table_free(back);
    /* Reading by content, under a name without an extension. */
    char other[1024];
    snprintf(other, sizeof other, "%s/noext%d", dir, k);
    size_t n;
    char *bytes = rt_slurp(path, &n);
    EXPECT(bytes != NULL);
    if (bytes) rt_spit(other, bytes, n);
    free(bytes);
    if (k == 1) { /* a CSV's types and metadata travel in its sidecar, which goes along */
      char side[1100], other_side[1100];
      snprintf(side, sizeof side, "%s-metadata.json", path);
      snprintf(other_side, sizeof other_side, "%s-metadata.json", other);
      bytes = rt_slurp(side, &n);
      EXPECT(bytes != NULL);
      if (bytes) rt_spit(other_side, bytes, n);
      free(bytes);
    }
    CHECK_OK(pb_table_read(other, PB_SINK_AUTO, &back, &err), &err);
    compare(t, back, other);
    pb_table_free(back);
  }
  EXPECT_EQ(rt_count(dir, ".pbtmp-"), 0); /* no temporaries left behind */

  char path[1024];
  snprintf(path, sizeof path, "%s/r.parquet", dir);
  check_duckdb_sql(path);
  check_python(dir);

  /* The CSV layout: the header first, no comment line; types and metadata in the sidecar. */
  snprintf(path, sizeof path, "%s/r.csv", dir);
  char *csv = rt_slurp(path, NULL);
  EXPECT(csv != NULL && strncmp(csv, "s,i,d,b,\"late col, \"\"quoted\"\"\"\n", 30) == 0);
  EXPECT(csv != NULL && strstr(csv, "\n#") == NULL);
  free(csv);
  snprintf(path, sizeof path, "%s/r.csv-metadata.json", dir);
  csv = rt_slurp(path, NULL);
  EXPECT(csv != NULL && strstr(csv, "\"datatype\":\t\"long\"") != NULL);
  EXPECT(csv != NULL && strstr(csv, "\"key: with colon\":\t\"value: with colon\"") != NULL);
  free(csv);
  /* A CSV changed by another tool no longer matches its sidecar: it is read as a plain CSV,
   * its types inferred, no metadata. */
  snprintf(path, sizeof path, "%s/r.csv", dir);
  CHECK_OK(pb_table_write(t, path, PB_SINK_AUTO, &err), &err);
  FILE *af = fopen(path, "a");
  EXPECT(af != NULL);
  if (af) {
    fputs("x,1,2.5,true,y\n", af);
    fclose(af);
  }
  pb_table *edited = NULL;
  CHECK_OK(pb_table_read(path, PB_SINK_AUTO, &edited, &err), &err);
  EXPECT_EQ(pb_table_rows(edited), NROWS + 1);
  EXPECT_EQ(pb_table_meta_count(edited), 0);
  pb_table_free(edited);

  /* pb_write_file_atomic, also over an existing file. */
  snprintf(path, sizeof path, "%s/blob.bin", dir);
  CHECK_OK(pb_write_file_atomic(path, "first", 5, &err), &err);
  CHECK_OK(pb_write_file_atomic(path, "second!", 7, &err), &err);
  size_t n;
  char *blob = rt_slurp(path, &n);
  EXPECT(blob != NULL && n == 7 && memcmp(blob, "second!", 7) == 0);
  free(blob);
  CHECK_OK(pb_write_file_atomic(path, NULL, 0, &err), &err);
  blob = rt_slurp(path, &n);
  EXPECT(blob != NULL && n == 0);
  free(blob);
  EXPECT_EQ(rt_count(dir, ".pbtmp-"), 0);

  /* pb_mkdirs: parents made, an existing folder is fine, a file in the way is named. */
  char sub[600];
  snprintf(sub, sizeof sub, "%s/a/b/c", dir);
  CHECK_OK(pb_mkdirs(sub, &err), &err);
  CHECK_OK(pb_mkdirs(sub, &err), &err);
  struct stat st;
  EXPECT(stat(sub, &st) == 0 && S_ISDIR(st.st_mode));
  snprintf(sub, sizeof sub, "%s/blob.bin/x", dir);
  EXPECT(pb_mkdirs(sub, &err) != PB_OK);
  EXPECT(strstr(err.message, "blob.bin") != NULL);
  snprintf(sub, sizeof sub, "%s/blob.bin", dir);
  EXPECT_EQ(pb_mkdirs(sub, &err), PB_EIO);
  EXPECT(strstr(err.message, "is not a folder") != NULL);
  EXPECT_EQ(pb_mkdirs("", &err), PB_EINVAL);

  /* A table with no rows keeps its columns and types in every sink. */
  pb_table *empty;
  CHECK_OK(pb_table_new(&empty), &err);
  CHECK_OK(pb_table_add_column(empty, "a", PB_COL_DOUBLE), &err);
  CHECK_OK(pb_table_add_column(empty, "b", PB_COL_BOOL), &err);
  for (int k = 0; k < 3; k++) {
    snprintf(path, sizeof path, "%s/empty_%s", dir, names[k]);
    CHECK_OK(pb_table_write(empty, path, PB_SINK_AUTO, &err), &err);
    pb_table *back = NULL;
    CHECK_OK(pb_table_read(path, PB_SINK_AUTO, &back, &err), &err);
    compare(empty, back, path);
    pb_table_free(back);
  }
  pb_table_free(empty);

  pb_table_free(t);
  rt_rmdir(dir);
  if (check_failures()) fprintf(stderr, "%d check(s) failed\n", check_failures());
  else fprintf(stderr, "all checks passed\n");
  return check_failures() ? 1 : 0;
}
