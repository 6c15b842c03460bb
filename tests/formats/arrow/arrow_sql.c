/* DuckDB's own SQL, on a fresh connection, reads what pipebench wrote: identical pixels, column
 * types as ome-arrow.md lists them, key/value metadata, and one chunk per row group. */
#include <duckdb.h>

#include "arrow_test_util.h"
#include "formats/format_internal.h"

static duckdb_connection con;

static char *one_value(const char *q) {
  duckdb_result r;
  if (duckdb_query(con, q, &r) != DuckDBSuccess) {
    fprintf(stderr, "SQL failed: %s: %s\n", q, duckdb_result_error(&r));
    exit(1);
  }
  char *v = duckdb_value_varchar(&r, 0, 0);
  duckdb_destroy_result(&r);
  return v ? v : strdup("NULL");
}

static void expect_contains(const char *q, const char *needle) {
  char *v = one_value(q);
  if (strstr(v, needle) == NULL) {
    fprintf(stderr, "%s\n gave: %s\n lacks: %s\n", q, v, needle);
    exit(1);
  }
  duckdb_free(v);
}

/* Fetches a BLOB or a USMALLINT[] value into buf and returns its byte length. */
static size_t fetch_bytes(const char *q, void *buf, size_t cap) {
  duckdb_result r;
  CHECK(duckdb_query(con, q, &r) == DuckDBSuccess);
  duckdb_data_chunk ch = duckdb_fetch_chunk(r);
  CHECK(ch != NULL && duckdb_data_chunk_get_size(ch) == 1);
  duckdb_vector v = duckdb_data_chunk_get_vector(ch, 0);
  duckdb_logical_type t = duckdb_vector_get_column_type(v);
  size_t n;
  if (duckdb_get_type_id(t) == DUCKDB_TYPE_LIST) {
    duckdb_list_entry e = ((duckdb_list_entry *)duckdb_vector_get_data(v))[0];
    n = (size_t)e.length * 2;
    CHECK(n <= cap);
    memcpy(buf, (uint16_t *)duckdb_vector_get_data(duckdb_list_vector_get_child(v)) + e.offset, n);
  } else {
    duckdb_string_t *s = duckdb_vector_get_data(v);
    n = duckdb_string_t_length(*s);
    CHECK(n <= cap);
    memcpy(buf, duckdb_string_t_data(s), n);
  }
  duckdb_destroy_logical_type(&t);
  duckdb_destroy_data_chunk(&ch);
  duckdb_destroy_result(&r);
  return n;
}

int main(void) {
  char dir[256], p[512], q[2048];
  tmp_dir(dir, sizeof dir, "sql");
  duckdb_database db;
  CHECK(duckdb_open(NULL, &db) == DuckDBSuccess && duckdb_connect(db, &con) == DuckDBSuccess);
  const int64_t shape[PB_NDIM] = {1, 2, 1, 40, 30};
  pb_image_meta m;
  pb_image_meta_init(&m, "sample", PB_UINT16, shape);
  uint16_t px[3][2 * 40 * 30], got[2 * 40 * 30];
  static const char *const variants[][3] = {
      {"ome-parquet", "num.parquet", "layout=planes"},
      {"ome-parquet", "bytes.parquet", "layout=chunk-bytes"},
      {"oa-dataset", "ds", NULL},
      {"ome-parquet", "chunks.parquet", NULL}};
  for (int v = 0; v < 4; v++) {
    struct pb_error err = {{0}};
    pb_write_params par = PB_WRITE_PARAMS_DEFAULTS;
    par.options = variants[v][2];
    par.chunk[PB_Y] = 64; /* so the whole 40x30 plane is one chunk */
    snprintf(p, sizeof p, "%s/%s", dir, variants[v][1]);
    pb_writer *w;
    CHECK_OK(pb_writer_new(p, variants[v][0], &par, &w, &err), &err);
    for (int i = 0; i < 3; i++) {
      fill_pixels(&m, px[i], (unsigned)i + 7);
      CHECK_OK(pb_writer_add(w, &m, px[i], &err), &err);
    }
    CHECK_OK(pb_writer_finish(w, &err), &err);
    pb_writer_free(w);
  }
  size_t plane = 40 * 30 * 2;
  /* Numeric variant: image 1, channel 1 is planes[2].pixels (t, c, z order). */
  snprintf(q, sizeof q,
           "SELECT ome_arrow.planes[2].pixels FROM read_parquet('%s/num.parquet') WHERE "
           "file_row_number = 1",
           dir);
  CHECK_EQ(fetch_bytes(q, got, sizeof got), plane);
  CHECK(memcmp(got, px[1] + 40 * 30, plane) == 0);
  snprintf(q, sizeof q, "SELECT typeof(ome_arrow) FROM read_parquet('%s/num.parquet') LIMIT 1", dir);
  static const char *const types[] = {
      "\"type\" VARCHAR", "acquisition_datetime TIMESTAMP", "size_c SMALLINT", "size_t INTEGER",
      "physical_size_x FLOAT", "color_rgba UINTEGER", "chunk_c SMALLINT",
      "planes STRUCT(z INTEGER, t INTEGER, c SMALLINT, pixels USMALLINT[])[]"};
  for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) expect_contains(q, types[k]);
  /* Numeric chunks (the default layout): image 1, channel 1 is chunks[2].pixels; planes are
   * empty; the grid and the layout are recorded. */
  snprintf(q, sizeof q,
           "SELECT ome_arrow.chunks[2].pixels FROM read_parquet('%s/chunks.parquet') WHERE "
           "file_row_number = 1",
           dir);
  CHECK_EQ(fetch_bytes(q, got, sizeof got), plane);
  CHECK(memcmp(got, px[1] + 40 * 30, plane) == 0);
  snprintf(q, sizeof q, "SELECT typeof(ome_arrow) FROM read_parquet('%s/chunks.parquet') LIMIT 1",
           dir);
  expect_contains(q, "chunks STRUCT(t INTEGER, c SMALLINT, z INTEGER, y INTEGER, x INTEGER, "
                     "shape_z INTEGER, shape_y INTEGER, shape_x INTEGER, pixels USMALLINT[])[]");
  snprintf(q, sizeof q,
           "SELECT max(len(ome_arrow.planes)) || ' ' || max(len(ome_arrow.chunks)) || ' ' || "
           "any_value(ome_arrow.chunk_grid.chunk_y) FROM read_parquet('%s/chunks.parquet')",
           dir);
  expect_contains(q, "0 2 40");
  snprintf(q, sizeof q,
           "SELECT string_agg(decode(key) || '=' || decode(value), ',') FROM "
           "parquet_kv_metadata('%s/chunks.parquet')",
           dir);
  expect_contains(q, "ome.arrow.layout=chunks");
  /* Byte variant: chunk 1 of image 2 holds channel 1 raw. */
  snprintf(q, sizeof q,
           "SELECT ome_arrow.chunks[2].pixel_bytes FROM read_parquet('%s/bytes.parquet') WHERE "
           "file_row_number = 2",
           dir);
  CHECK_EQ(fetch_bytes(q, got, sizeof got), plane);
  CHECK(memcmp(got, px[2] + 40 * 30, plane) == 0);
  snprintf(q, sizeof q, "SELECT typeof(ome_arrow) FROM read_parquet('%s/bytes.parquet') LIMIT 1",
           dir);
  expect_contains(q, "chunks STRUCT(t INTEGER, c SMALLINT, z INTEGER, y INTEGER, x INTEGER, "
                     "shape_z INTEGER, shape_y INTEGER, shape_x INTEGER, dtype VARCHAR, "
                     "\"compression\" VARCHAR, pixel_bytes BLOB)[]");
  snprintf(q, sizeof q,
           "SELECT string_agg(decode(key), ',') FROM parquet_kv_metadata('%s/bytes.parquet')", dir);
  expect_contains(q, "ome.arrow.type");
  /* oa-dataset: chunk of image 0, channel 1; types; one chunk per row group; KV metadata. */
  snprintf(q, sizeof q,
           "SELECT pixel_bytes FROM read_parquet('%s/ds/chunks.parquet') WHERE image_id = "
           "'img_00000' AND c = 1",
           dir);
  CHECK_EQ(fetch_bytes(q, got, sizeof got), plane);
  CHECK(memcmp(got, px[0] + 40 * 30, plane) == 0);
  snprintf(q, sizeof q,
           "SELECT string_agg(column_name || ' ' || column_type, ', ') FROM (DESCRIBE SELECT * "
           "FROM read_parquet('%s/ds/chunks.parquet'))",
           dir);
  expect_contains(q, "image_id VARCHAR, chunk_id BIGINT, t INTEGER, c INTEGER, z INTEGER, "
                     "y INTEGER, x INTEGER, shape_t INTEGER, shape_c INTEGER, shape_z INTEGER, "
                     "shape_y INTEGER, shape_x INTEGER, dtype VARCHAR, pixel_bytes BLOB");
  snprintf(q, sizeof q,
           "SELECT count(DISTINCT row_group_id) = 6 AND max(row_group_num_rows) = 1 FROM "
           "parquet_metadata('%s/ds/chunks.parquet')",
           dir);
  expect_contains(q, "true");
  static const char *const files[] = {"images", "chunks", "index"};
  for (int f = 0; f < 3; f++) {
    snprintf(q, sizeof q,
             "SELECT string_agg(decode(key) || '=' || decode(value), ',') FROM "
             "parquet_kv_metadata('%s/ds/%s.parquet')",
             dir, files[f]);
    expect_contains(q, "ome.arrow.layout=typed-chunk-dataset");
    expect_contains(q, "ome.arrow.type=ome.arrow");
  }
  /* The index points at the row group that holds each chunk. */
  snprintf(q, sizeof q,
           "SELECT bool_and(i.row_group_id = c.file_row_number) FROM read_parquet('%s/ds/index.parquet') i "
           "JOIN read_parquet('%s/ds/chunks.parquet') c USING (chunk_id)",
           dir, dir);
  expect_contains(q, "true");
  printf("ok: DuckDB SQL agrees with pipebench's ome-parquet (all three layouts) and "
         "oa-dataset\n");
  duckdb_disconnect(&con);
  duckdb_close(&db);
  pb__remove_tree(dir);
  return 0;
}
