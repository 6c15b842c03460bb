/* pipebench's Parquet footer parser against DuckDB's reading of the same footers: on files
 * DuckDB writes with each codec, several row-group sizes, optional (nullable) columns,
 * dictionary pages, nested lists of structs and key-value metadata, every row of
 * parquet_metadata(), parquet_schema(), parquet_kv_metadata() and parquet_file_metadata() must
 * be what the parser read. Damaged footers (truncated, a count past the end, a wrong magic)
 * must be PB_EFORMAT naming the file and the field. */
#include <duckdb.h>
#include <stdint.h>

#include "common/fs.h"
#include "formats/arrow/arrow_test_util.h"
#include "parquet/pq_footer.h"

static void sql(duckdb_connection c, const char *q) {
  duckdb_result r;
  if (duckdb_query(c, q, &r) != DuckDBSuccess) FAIL("%s: %s", q, duckdb_result_error(&r));
  duckdb_destroy_result(&r);
}

static const char *type_name(int32_t t) {
  static const char *const n[] = {"BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE",
                                  "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
  return t >= 0 && t < 8 ? n[t] : "?";
}

static const char *codec_name(int32_t t) {
  static const char *const n[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4",
                                  "ZSTD", "LZ4_RAW"};
  return t >= 0 && t < 8 ? n[t] : "?";
}

/* DuckDB's encodings string ("PLAIN, RLE_DICTIONARY") as the parser's bit set. */
static uint32_t encoding_bits(const char *s) {
  static const char *const n[] = {"PLAIN", "", "PLAIN_DICTIONARY", "RLE", "BIT_PACKED",
                                  "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY",
                                  "DELTA_BYTE_ARRAY", "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
  uint32_t bits = 0;
  char buf[512];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *save = NULL, *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
    int known = 0;
    for (int e = 0; e < 10; e++)
      if (n[e][0] != '\0' && strcmp(t, n[e]) == 0) {
        bits |= 1u << e;
        known = 1;
      }
    if (!known) FAIL("encoding %s not in the test's table", t);
  }
  return bits;
}

static int64_t opt_i64(duckdb_result *r, idx_t col, idx_t row) {
  return duckdb_value_is_null(r, col, row) ? -1 : duckdb_value_int64(r, col, row);
}

/* Runs "SELECT cols FROM fn('file') rest". */
static void query(duckdb_connection c, duckdb_result *r, const char *cols, const char *fn,
                  const char *file, const char *rest) {
  char q[5000];
  snprintf(q, sizeof q, "SELECT %s FROM %s('%s') %s", cols, fn, file, rest);
  if (duckdb_query(c, q, r) != DuckDBSuccess) FAIL("%s: %s", q, duckdb_result_error(r));
}

static void compare_chunks(duckdb_connection c, const char *file, const pb__pq_meta *m) {
  duckdb_result r;
  query(c, &r,
        "row_group_id, row_group_num_rows, row_group_num_columns, row_group_bytes, "
        "column_id, file_offset, num_values, path_in_schema, type, stats_null_count, "
        "compression, encodings, index_page_offset, dictionary_page_offset, data_page_offset, "
        "total_compressed_size, total_uncompressed_size",
        "parquet_metadata", file, "ORDER BY row_group_id, column_id");
  CHECK_EQ(duckdb_row_count(&r), m->n_rgs * m->n_leaves);
  char path[2048];
  for (idx_t i = 0; i < duckdb_row_count(&r); i++) {
    size_t g = (size_t)duckdb_value_int64(&r, 0, i), k = (size_t)duckdb_value_int64(&r, 4, i);
    CHECK(g < m->n_rgs && k < m->n_leaves);
    const pb__pq_chunk *ch = &m->chunks[g * m->n_leaves + k];
    EXPECT_EQ(duckdb_value_int64(&r, 1, i), m->rgs[g].num_rows);
    EXPECT_EQ(duckdb_value_int64(&r, 2, i), m->n_leaves);
    EXPECT_EQ(duckdb_value_int64(&r, 3, i), m->rgs[g].total_byte_size);
    EXPECT_EQ(duckdb_value_int64(&r, 5, i), ch->file_offset);
    EXPECT_EQ(duckdb_value_int64(&r, 6, i), ch->num_values);
    char *s = duckdb_value_varchar(&r, 7, i);
    pb__pq_leaf_path(m, k, path, sizeof path);
    EXPECT_STREQ(s, path);
    duckdb_free(s);
    s = duckdb_value_varchar(&r, 8, i);
    EXPECT_STREQ(s, type_name(ch->type));
    duckdb_free(s);
    EXPECT_EQ(opt_i64(&r, 9, i), ch->null_count);
    s = duckdb_value_varchar(&r, 10, i);
    EXPECT_STREQ(s, codec_name(ch->codec));
    duckdb_free(s);
    s = duckdb_value_varchar(&r, 11, i);
    EXPECT_EQ(encoding_bits(s), ch->encodings);
    duckdb_free(s);
    EXPECT_EQ(opt_i64(&r, 12, i), ch->index_page_offset);
    EXPECT_EQ(opt_i64(&r, 13, i), ch->dictionary_page_offset);
    EXPECT_EQ(duckdb_value_int64(&r, 14, i), ch->data_page_offset);
    EXPECT_EQ(duckdb_value_int64(&r, 15, i), ch->total_compressed_size);
    EXPECT_EQ(duckdb_value_int64(&r, 16, i), ch->total_uncompressed_size);
  }
  duckdb_destroy_result(&r);
}

static void compare_schema(duckdb_connection c, const char *file, const pb__pq_meta *m) {
  static const char *const rep[] = {"REQUIRED", "OPTIONAL", "REPEATED"};
  duckdb_result r;
  query(c, &r, "name, type, repetition_type, num_children, converted_type, type_length",
        "parquet_schema", file, "");
  CHECK_EQ(duckdb_row_count(&r), m->n_nodes);
  for (idx_t i = 0; i < duckdb_row_count(&r); i++) {
    const pb__pq_node *e = &m->nodes[i];
    char *s = duckdb_value_varchar(&r, 0, i);
    EXPECT_STREQ(s, e->name);
    duckdb_free(s);
    s = duckdb_value_varchar(&r, 1, i);
    if (e->type < 0) EXPECT(s == NULL);
    else EXPECT_STREQ(s, type_name(e->type));
    duckdb_free(s);
    s = duckdb_value_varchar(&r, 2, i);
    if (e->repetition < 0) EXPECT(s == NULL);
    else EXPECT_STREQ(s, e->repetition <= 2 ? rep[e->repetition] : "?");
    duckdb_free(s);
    EXPECT_EQ(opt_i64(&r, 3, i), e->num_children);
    EXPECT_EQ(duckdb_value_is_null(&r, 4, i), e->converted_type < 0);
    EXPECT_EQ(opt_i64(&r, 5, i), e->type_length);
  }
  duckdb_destroy_result(&r);
}

static void compare_file(duckdb_connection c, const char *file, const pb__pq_meta *m) {
  duckdb_result r;
  query(c, &r, "num_rows, num_row_groups, format_version, created_by",
        "parquet_file_metadata", file, "");
  CHECK_EQ(duckdb_row_count(&r), 1);
  EXPECT_EQ(duckdb_value_int64(&r, 0, 0), m->num_rows);
  EXPECT_EQ(duckdb_value_int64(&r, 1, 0), m->n_rgs);
  EXPECT_EQ(duckdb_value_int64(&r, 2, 0), m->version);
  char *s = duckdb_value_varchar(&r, 3, 0);
  EXPECT_STREQ(s, m->created_by);
  duckdb_free(s);
  duckdb_destroy_result(&r);
  query(c, &r, "decode(key), decode(value)", "parquet_kv_metadata", file, "");
  CHECK_EQ(duckdb_row_count(&r), m->n_kv);
  for (idx_t i = 0; i < duckdb_row_count(&r); i++) {
    char *k = duckdb_value_varchar(&r, 0, i), *v = duckdb_value_varchar(&r, 1, i);
    EXPECT_STREQ(k, m->kv[i].key);
    EXPECT_STREQ(v, m->kv[i].value);
    duckdb_free(k);
    duckdb_free(v);
  }
  duckdb_destroy_result(&r);
}

static void check_file(duckdb_connection c, const char *file) {
  pb__pq_meta m;
  struct pb_error err = {{0}};
  CHECK_OK(pb__pq_meta_read(file, &m, &err), &err);
  compare_file(c, file, &m);
  compare_schema(c, file, &m);
  compare_chunks(c, file, &m);
  printf("ok %s: %zu row groups, %zu leaves\n", file, m.n_rgs, m.n_leaves);
  pb__pq_meta_destroy(&m);
}

/* A damaged copy of file: its footer cut at `keep` bytes (the length field rewritten to
 * match), or byte `at` of the footer set to `val`. The parser must refuse it naming the file
 * and `field`. */
static void check_damaged(const char *dir, const char *file, long keep, long at, int val,
                          const char *field) {
  FILE *f = fopen(file, "rb");
  CHECK(f != NULL);
  CHECK(fseek(f, 0, SEEK_END) == 0);
  long len = ftell(f);
  unsigned char *b = malloc((size_t)len);
  rewind(f);
  CHECK(fread(b, 1, (size_t)len, f) == (size_t)len);
  fclose(f);
  long n = (long)((uint32_t)b[len - 8] | (uint32_t)b[len - 7] << 8 |
                  (uint32_t)b[len - 6] << 16 | (uint32_t)b[len - 5] << 24);
  long start = len - 8 - n;
  if (at >= 0) b[start + at] = (unsigned char)val;
  if (keep >= 0) {
    memmove(b + start + keep, b + len - 8, 8);
    b[start + keep] = (unsigned char)(keep & 0xff);
    b[start + keep + 1] = (unsigned char)((keep >> 8) & 0xff);
    b[start + keep + 2] = (unsigned char)((keep >> 16) & 0xff);
    b[start + keep + 3] = 0;
    len = start + keep + 8;
  }
  char out[4200];
  snprintf(out, sizeof out, "%s/damaged.parquet", dir);
  struct pb_error err = {{0}};
  CHECK_OK(pb__write_file(out, b, (size_t)len, &err), &err);
  free(b);
  pb__pq_meta m;
  int rc = pb__pq_meta_read(out, &m, &err);
  CHECK_EQ(rc, PB_EFORMAT);
  CHECK_CONTAINS(err.message, out);
  CHECK_CONTAINS(err.message, field);
  printf("ok refused: %s\n", err.message);
}

int main(void) {
  char dir[256], file[4200], q[8800];
  tmp_dir(dir, sizeof dir, "footer");
  duckdb_database db;
  duckdb_connection c;
  CHECK(duckdb_open(NULL, &db) == DuckDBSuccess);
  CHECK(duckdb_connect(db, &c) == DuckDBSuccess);
  /* nullable numbers and strings (repeating, so dictionary pages), a nested list of structs,
   * a list of lists, a map */
  sql(c, "CREATE TABLE t AS SELECT i::INTEGER AS a, CASE WHEN i % 3 = 0 THEN NULL "
         "ELSE i * 1.5 END AS b, 'v' || (i % 7)::VARCHAR AS s, "
         "CASE WHEN i % 5 = 0 THEN NULL ELSE [{'x': i, 'y': 'p' || i::VARCHAR}] END AS l, "
         "[[i, i + 1], []]::BIGINT[][] AS ll, MAP {'k': i::SMALLINT} AS mp, "
         "{'id': (i % 200)::UTINYINT, 'name': NULL::VARCHAR} AS st FROM range(12000) r(i)");
  static const char *const codecs[] = {"uncompressed", "snappy", "gzip", "zstd", "lz4_raw"};
  static const int rg_rows[] = {2048, 4096, 2048, 12000, 6144};
  for (int k = 0; k < 5; k++) {
    snprintf(file, sizeof file, "%s/%s.parquet", dir, codecs[k]);
    snprintf(q, sizeof q,
             "COPY t TO '%s' (FORMAT parquet, COMPRESSION %s, ROW_GROUP_SIZE %d, "
             "KV_METADATA {origin: 'test', codec: '%s'})",
             file, codecs[k], rg_rows[k], codecs[k]);
    sql(c, q);
    check_file(c, file);
  }
  /* OME-Arrow files of the fuzz corpus (written by pipebench) */
  static const char *const corpus[] = {"good_planes", "good_chunks", "good_bytes", "codec"};
  for (int k = 0; k < 4; k++) {
    snprintf(file, sizeof file, "%s/tests/formats/arrow/corpus/ome_parquet/%s.parquet",
             PIPEBENCH_SOURCE_DIR, corpus[k]);
    check_file(c, file);
  }
  /* damaged footers: cut short (in the schema, in the row groups), a field of an unknown
   * type */
  snprintf(file, sizeof file, "%s/gzip.parquet", dir);
  check_damaged(dir, file, 40, -1, 0, "schema[");
  check_damaged(dir, file, 1500, -1, 0, "row_groups[");
  check_damaged(dir, file, -1, 2, 0xff, "Parquet footer");
  /* not Parquet at all */
  snprintf(file, sizeof file, "%s/text.parquet", dir);
  struct pb_error err = {{0}};
  CHECK_OK(pb__write_file(file, "hello, this is not parquet\n", 27, &err), &err);
  pb__pq_meta m;
  CHECK_EQ(pb__pq_meta_read(file, &m, &err), PB_EFORMAT);
  CHECK_CONTAINS(err.message, file);
  duckdb_disconnect(&c);
  duckdb_close(&db);
  pb__remove_tree(dir);
  return check_failures() ? 1 : 0;
}
