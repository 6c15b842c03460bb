/* The `duckdb` format: OME-Arrow rows (one image per row, column ome_arrow) in the base table
 * `images` of a DuckDB database file. The table's writer and reader are shared with
 * ome-parquet (lib/formats/arrow/ome_table.h); this file says where the rows go and where
 * they come from, and keeps a database file from running SQL of its own. See
 * docs/format-ome-arrow.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/arrow/ome_table.h"

/* The rows become table `images` of the temporary database file, checkpointed so the file
 * holds them without its write-ahead log. */
static int ddb_store(pb__ome_arrow_db *db, const pb__ome_table_out *out, idx_t *per_chunk,
                        struct pb_error *err) {
  *per_chunk = 64;
  int rc = pb__ome_arrow_exec(db, "CREATE TABLE images AS SELECT ome_arrow FROM pb_ome_rows()",
                       out->path, err);
  if (rc == PB_OK) rc = pb__ome_arrow_exec(db, "CHECKPOINT", out->path, err);
  return rc;
}

static int ddb_writer_finish(void *ws, struct pb_error *err) {
  static const pb__ome_table_sink sink = {1, ddb_store};
  return pb__ome_table_writer_finish(ws, &sink, err);
}

/* DuckDB reads the database file itself: of the read options only the cache size reaches it. */
static int ddb_open(const char *path, const pb_read_options *opts, void **state,
                       struct pb_error *err) {
  pb__ome_table_reader *r;
  PB_RETURN_NOT_OK(pb__ome_table_reader_new(path, opts, &r, err));
  pb__ome_arrow_db *db = pb__ome_table_reader_db(r);
  int rc = pb__ome_arrow_db_open_reader(db, path, NULL, 0, err);
  if (rc != PB_OK) {
    free(r);
    return rc;
  }
  /* No stored macro may stand in for a function the queries below call, and only a base table
   * is read (a view runs whatever SQL it holds). */
  char table[256] = "", col[256], src[300];
  int has_chunks = 0, has_planes = 0;
  rc = pb__ome_arrow_db_check_stored(db, path, err);
  if (rc == PB_OK)
    rc = pb__ome_table_find_column(
        r,
        "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE "
        "database_name = current_database() ORDER BY table_name <> 'images', column_index",
        table, sizeof table, col, sizeof col, &has_chunks, &has_planes, err);
  if (rc == PB_OK) rc = pb__ome_arrow_db_check_table(db, path, table, err);
  if (rc == PB_OK && (strchr(col, '"') != NULL || strchr(table, '"') != NULL))
    rc = pb_error_set(err, PB_EUNSUPPORTED, "%s: column or table name with '\"'", path);
  if (rc == PB_OK) {
    snprintf(src, sizeof src, "\"%s\"", table);
    rc = pb__ome_table_reader_ready(r, "rowid", col, src, has_chunks, has_planes, err);
  }
  if (rc != PB_OK) {
    pb__ome_table_reader_close(r);
    return rc;
  }
  *state = r;
  return PB_OK;
}

static int ddb_probe(const char *path) {
  unsigned char h[12];
  if (pb__ome_table_read_head(path, h, 12) != 0 || memcmp(h + 8, "DUCK", 4) != 0) return 0;
  return pb__ome_table_ends_with(path, ".duckdb") || pb__ome_table_ends_with(path, ".db") ? 90
                                                                                          : 60;
}

const pb_format_vtable pb__format_duckdb = {
    .info = {"duckdb", "OME-Arrow struct per row in table 'images' of a DuckDB database file", 1,
             1},
    .probe = ddb_probe,
    .open = ddb_open,
    .close = pb__ome_table_reader_close,
    .count = pb__ome_table_reader_count,
    .meta = pb__ome_table_reader_meta,
    .shape = pb__ome_table_reader_shape,
    .read = pb__ome_table_reader_read,
    .writer_open = pb__ome_table_writer_open,
    .writer_add = pb__ome_table_writer_add,
    .writer_finish = ddb_writer_finish,
    .writer_free = pb__ome_table_writer_free,
    .write_options = pb__ome_table_write_options,
};
