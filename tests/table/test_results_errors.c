/* Bad input gives clear errors naming the file: missing files, a truncated Parquet file,
 * corrupt JSON, CSV with wrong field counts; and foreign files are typed by their values. */
#include "results_test.h"

static void expect_fail(const char *path, pb_sink sink, int want, const char *needle) {
  struct pb_error err = {{0}};
  pb_table *t = (pb_table *)1;
  int rc = pb_table_read(path, sink, &t, &err);
  fprintf(stderr, "  %s -> %d (%s): %s\n", path, rc, pb_strerror(rc), err.message);
  EXPECT_EQ(rc, want);
  EXPECT(t == NULL);
  EXPECT(strstr(err.message, path) != NULL);
  if (needle) EXPECT(strstr(err.message, needle) != NULL);
}

static void write_text(const char *dir, const char *name, const char *text, char *path,
                       size_t size) {
  snprintf(path, size, "%s/%s", dir, name);
  rt_spit(path, text, strlen(text));
}

int main(void) {
  struct pb_error err = {{0}};
  const char *dir = rt_tmpdir();
  char path[1024];

  /* Missing files, for every sink. */
  const char *missing[] = {"none.parquet", "none.csv", "none.json"};
  for (int k = 0; k < 3; k++) {
    snprintf(path, sizeof path, "%s/%s", dir, missing[k]);
    expect_fail(path, PB_SINK_AUTO, PB_ENOTFOUND, "no such file");
  }

  /* A truncated Parquet file (the footer is gone) and one that is not Parquet at all. */
  pb_table *t;
  CHECK_OK(pb_table_new(&t), &err);
  for (int i = 0; i < 1000; i++) {
    CHECK_OK(pb_table_append_row(t), &err);
    CHECK_OK(pb_table_set_i64(t, "i", i), &err);
    CHECK_OK(pb_table_set_str(t, "s", "some text to make the file longer"), &err);
  }
  snprintf(path, sizeof path, "%s/good.parquet", dir);
  CHECK_OK(pb_table_write(t, path, PB_SINK_AUTO, &err), &err);
  size_t n = 0;
  char *bytes = rt_slurp(path, &n);
  EXPECT(bytes != NULL && n > 100);
  snprintf(path, sizeof path, "%s/trunc.parquet", dir);
  rt_spit(path, bytes, n / 2);
  expect_fail(path, PB_SINK_AUTO, PB_EFORMAT, "not a readable Parquet file");
  snprintf(path, sizeof path, "%s/tail.parquet", dir);
  rt_spit(path, bytes, n - 3); /* only the last magic bytes missing */
  expect_fail(path, PB_SINK_AUTO, PB_EFORMAT, NULL);
  free(bytes);
  write_text(dir, "text.parquet", "this is not parquet\n", path, sizeof path);
  expect_fail(path, PB_SINK_AUTO, PB_EFORMAT, NULL);

  /* Corrupt JSON: cut off, and well-formed but of the wrong shape or types. */
  write_text(dir, "cut.json", "{\"metadata\": {},\n \"rows\": [ {\"a\": 1}, ", path, sizeof path);
  expect_fail(path, PB_SINK_AUTO, PB_EFORMAT, "invalid JSON at line 2");
  write_text(dir, "empty.json", "", path, sizeof path);
  expect_fail(path, PB_SINK_JSON, PB_EFORMAT, "empty file");
  write_text(dir, "shape.json", "{\"rows\": 3}", path, sizeof path);
  expect_fail(path, PB_SINK_AUTO, PB_EFORMAT, "\"rows\"");
  write_text(dir, "type.json",
             "{\"columns\":[{\"name\":\"a\",\"type\":\"int64\"}],\"rows\":[{\"a\":1},{\"a\":\"x\"}]}",
             path, sizeof path);
  expect_fail(path, PB_SINK_AUTO, PB_EFORMAT, "row 1, column 'a': expected int64, found a string");
  write_text(dir, "undeclared.json",
             "{\"columns\":[{\"name\":\"a\",\"type\":\"bool\"}],\"rows\":[{\"a\":true,\"b\":1}]}",
             path, sizeof path);
  expect_fail(path, PB_SINK_AUTO, PB_EFORMAT, "'b'");

  /* CSV with wrong field counts, an open quote, junk after a quote, a bad typed value. */
  write_text(dir, "short.csv", "a,b\n1,2\n3\n", path, sizeof path);
  expect_fail(path, PB_SINK_AUTO, PB_EFORMAT, "line 3 has 1 field, the header has 2");
  write_text(dir, "long.csv", "# k: v\na,b\n1,2,3\n", path, sizeof path);
  expect_fail(path, PB_SINK_AUTO, PB_EFORMAT, "line 3 has 3 fields, the header has 2");
  write_text(dir, "open.csv", "a,b\n1,\"never closed\n2,3\n", path, sizeof path);
  expect_fail(path, PB_SINK_AUTO, PB_EFORMAT, "line 2: quoted field is not closed");
  write_text(dir, "junk.csv", "a\n\"x\"y\n", path, sizeof path);
  expect_fail(path, PB_SINK_AUTO, PB_EFORMAT, "after a closing quote");
  write_text(dir, "typed.csv", "# types: int64,string\na,b\n1,x\nnope,y\n", path, sizeof path);
  expect_fail(path, PB_SINK_AUTO, PB_EFORMAT, "line 4, column 'a': 'nope' is not a valid int64");
  write_text(dir, "typecount.csv", "# types: int64\na,b\n1,x\n", path, sizeof path);
  expect_fail(path, PB_SINK_AUTO, PB_EFORMAT, "types line");
  write_text(dir, "nohead.csv", "# only: comments\n", path, sizeof path);
  expect_fail(path, PB_SINK_AUTO, PB_EFORMAT, "no header");

  /* Writes that cannot happen name the file too, and leave nothing behind. */
  snprintf(path, sizeof path, "%s/no/such/folder/x.csv", dir);
  int rc = pb_table_write(t, path, PB_SINK_AUTO, &err);
  fprintf(stderr, "  write %s -> %d: %s\n", path, rc, err.message);
  EXPECT(rc != 0 && strstr(err.message, path) != NULL);
  pb_table *none;
  CHECK_OK(pb_table_new(&none), &err);
  snprintf(path, sizeof path, "%s/nocols.parquet", dir);
  EXPECT_EQ(pb_table_write(none, path, PB_SINK_AUTO, &err), PB_EINVAL);
  EXPECT(access(path, F_OK) != 0);
  pb_table_free(none);
  pb_table_free(t);

  /* A CSV from elsewhere: CRLF lines, no types line, types inferred from the values. */
  write_text(dir, "foreign.csv",
             "# made by hand\r\nname,count,ratio,flag,mixed\r\n"
             "\"a, b\",1,0.5,true,1\r\nc,,2,FALSE,x\r\n\"\",3,,,\r\n",
             path, sizeof path);
  CHECK_OK(pb_table_read(path, PB_SINK_AUTO, &t, &err), &err);
  EXPECT_EQ(pb_table_rows(t), 3);
  EXPECT_EQ(pb_table_cols(t), 5);
  EXPECT_EQ(pb_table_col_type(t, 0), PB_COL_STRING);
  EXPECT_EQ(pb_table_col_type(t, 1), PB_COL_INT64);
  EXPECT_EQ(pb_table_col_type(t, 2), PB_COL_DOUBLE);
  EXPECT_EQ(pb_table_col_type(t, 3), PB_COL_BOOL);
  EXPECT_EQ(pb_table_col_type(t, 4), PB_COL_STRING);
  EXPECT_STREQ(pb_table_get_str(t, 0, 0), "a, b");
  EXPECT_STREQ(pb_table_get_str(t, 2, 0), ""); /* quoted empty: a string, not NULL */
  EXPECT(pb_table_is_null(t, 1, 1));
  EXPECT_EQ(pb_table_get_i64(t, 2, 1), 3);
  EXPECT_EQ(pb_table_get_bool(t, 1, 3), 0);
  EXPECT(pb_table_is_null(t, 2, 4));
  EXPECT_EQ(pb_table_meta_count(t), 0); /* a comment without "key:" is not metadata */
  pb_table_free(t);

  /* JSON from elsewhere: a top-level array of objects, columns in order of appearance. */
  write_text(dir, "foreign.json",
             "[{\"x\": 1, \"y\": \"s\"}, {\"x\": 2.5, \"z\": false}, {\"y\": null}]", path,
             sizeof path);
  CHECK_OK(pb_table_read(path, PB_SINK_AUTO, &t, &err), &err);
  EXPECT_EQ(pb_table_rows(t), 3);
  EXPECT_EQ(pb_table_cols(t), 3);
  EXPECT_STREQ(pb_table_col_name(t, 2), "z");
  EXPECT_EQ(pb_table_col_type(t, 0), PB_COL_DOUBLE);
  EXPECT_EQ(pb_table_col_type(t, 1), PB_COL_STRING);
  EXPECT_EQ(pb_table_col_type(t, 2), PB_COL_BOOL);
  EXPECT(pb_table_get_f64(t, 1, 0) == 2.5);
  EXPECT(pb_table_is_null(t, 2, 0) && pb_table_is_null(t, 0, 2));
  pb_table_free(t);

  rt_rmdir(dir);
  if (check_failures()) fprintf(stderr, "%d check(s) failed\n", check_failures());
  else fprintf(stderr, "all checks passed\n");
  return check_failures() ? 1 : 0;
}
