/* Parquet sink through DuckDB's C API: an in-memory table filled by an appender, then
 * COPY ... TO (FORMAT PARQUET, KV_METADATA {...}); read back with read_parquet and
 * parquet_kv_metadata. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include "common/duck_msg.h"
#include "duckdb.h"
#pragma GCC diagnostic pop

#include "common/strbuf.h"
#include "table/results_internal.h"

struct db {
  duckdb_database db;
  duckdb_connection con;
};

static int db_open(struct db *d, const char *path, struct pb_error *err) {
  d->db = NULL;
  d->con = NULL;
  char *msg = NULL;
  duckdb_config cfg = NULL;
  if (duckdb_create_config(&cfg) != DuckDBSuccess)
    return pb_error_set(err, PB_EDUCKDB, "%s: DuckDB: cannot create a configuration", path);
  /* Results tables are small: one thread starts fastest and leaves the cores to benchmarks. */
  duckdb_set_config(cfg, "threads", "1");
  if (duckdb_open_ext(NULL, &d->db, cfg, &msg) != DuckDBSuccess) {
    pb_error_set(err, PB_EDUCKDB, "%s: DuckDB: cannot open an in-memory database: %s", path,
                 msg ? msg : "unknown error");
    duckdb_free(msg);
    duckdb_destroy_config(&cfg);
    return PB_EDUCKDB;
  }
  duckdb_destroy_config(&cfg);
  if (duckdb_connect(d->db, &d->con) != DuckDBSuccess) {
    duckdb_close(&d->db);
    return pb_error_set(err, PB_EDUCKDB, "%s: DuckDB: cannot connect", path);
  }
  return PB_OK;
}

static void db_close(struct db *d) {
  if (d->con) duckdb_disconnect(&d->con);
  if (d->db) duckdb_close(&d->db);
}

/* Runs sql; on failure sets err with what and DuckDB's message and returns code. */
static int db_exec(struct db *d, const char *sql, duckdb_result *res, int code,
                   const char *path, const char *what, struct pb_error *err) {
  duckdb_result local;
  duckdb_result *r = res ? res : &local;
  if (duckdb_query(d->con, sql, r) != DuckDBSuccess) {
    const char *m = duckdb_result_error(r);
    pb_error_set(err, code, "%s: %s: %.*s", path, what, PB__DUCK_MSG(m));
    duckdb_destroy_result(r);
    return code;
  }
  if (res == NULL) duckdb_destroy_result(r);
  return PB_OK;
}

static const char *sql_type(pb_col_type t) {
  switch (t) {
    case PB_COL_STRING: return "VARCHAR";
    case PB_COL_INT64: return "BIGINT";
    case PB_COL_DOUBLE: return "DOUBLE";
    case PB_COL_BOOL: return "BOOLEAN";
  }
  return "VARCHAR";
}

static int append_rows(struct db *d, const pb_table *t, const char *path, struct pb_error *err) {
  duckdb_appender app = NULL;
  if (duckdb_appender_create(d->con, NULL, "pb_results", &app) != DuckDBSuccess) {
    const char *m = app ? duckdb_appender_error(app) : NULL;
    pb_error_set(err, PB_EDUCKDB, "%s: DuckDB appender: %s", path, m ? m : "cannot create");
    duckdb_appender_destroy(&app);
    return PB_EDUCKDB;
  }
  int ok = 1;
  for (size_t r = 0; r < t->nrows && ok; r++) {
    for (size_t c = 0; c < t->ncols && ok; c++) {
      const struct pb__column *col = &t->cols[c];
      duckdb_state st;
      if (!col->valid[r]) {
        st = duckdb_append_null(app);
      } else {
        switch (col->type) {
          case PB_COL_STRING:
            st = duckdb_append_varchar_length(app, col->cells[r].s, strlen(col->cells[r].s));
            break;
          case PB_COL_INT64: st = duckdb_append_int64(app, col->cells[r].i); break;
          case PB_COL_DOUBLE: st = duckdb_append_double(app, col->cells[r].d); break;
          case PB_COL_BOOL: st = duckdb_append_bool(app, col->cells[r].i != 0); break;
          default: st = DuckDBError; break;
        }
      }
      ok = st == DuckDBSuccess;
    }
    if (ok) ok = duckdb_appender_end_row(app) == DuckDBSuccess;
  }
  if (ok) ok = duckdb_appender_close(app) == DuckDBSuccess;
  if (!ok) {
    const char *m = duckdb_appender_error(app);
    pb_error_set(err, PB_EDUCKDB, "%s: DuckDB appender: %s", path, m ? m : "append failed");
  }
  duckdb_appender_destroy(&app);
  return ok ? PB_OK : PB_EDUCKDB;
}

int pb__parquet_write(const pb_table *t, const char *tmp, const char *path,
                      struct pb_error *err) {
  if (t->ncols == 0)
    return pb_error_set(err, PB_EINVAL, "%s: a Parquet file needs at least one column", path);
  struct db d;
  PB_RETURN_NOT_OK(db_open(&d, path, err));
  pb__strbuf sql = {0};
  pb__strbuf_puts(&sql, "CREATE TABLE pb_results (");
  for (size_t c = 0; c < t->ncols; c++) {
    if (c) pb__strbuf_puts(&sql, ", ");
    pb__strbuf_quoted(&sql, t->cols[c].name, '"');
    pb__strbuf_puts(&sql, " ");
    pb__strbuf_puts(&sql, sql_type(t->cols[c].type));
  }
  pb__strbuf_puts(&sql, ")");
  int rc = sql.oom ? pb_error_set(err, PB_ENOMEM, "%s: out of memory", path) : PB_OK;
  if (rc == 0) rc = db_exec(&d, sql.p, NULL, PB_EDUCKDB, path, "DuckDB CREATE TABLE", err);
  if (rc == 0) rc = append_rows(&d, t, path, err);
  if (rc == 0) {
    sql.n = 0;
    pb__strbuf_puts(&sql, "COPY pb_results TO ");
    pb__strbuf_quoted(&sql, tmp, '\'');
    pb__strbuf_puts(&sql, " (FORMAT PARQUET");
    if (t->nmeta > 0) {
      /* Footer key/value metadata: a struct literal of string keys and string values. */
      pb__strbuf_puts(&sql, ", KV_METADATA {");
      for (size_t i = 0; i < t->nmeta; i++) {
        if (i) pb__strbuf_puts(&sql, ", ");
        pb__strbuf_quoted(&sql, t->meta[i].key, '\'');
        pb__strbuf_puts(&sql, ": ");
        pb__strbuf_quoted(&sql, t->meta[i].value, '\'');
      }
      pb__strbuf_puts(&sql, "}");
    }
    pb__strbuf_puts(&sql, ")");
    rc = sql.oom ? pb_error_set(err, PB_ENOMEM, "%s: out of memory", path)
                 : db_exec(&d, sql.p, NULL, PB_EDUCKDB, path, "DuckDB COPY TO PARQUET", err);
  }
  free(sql.p);
  db_close(&d);
  return rc;
}

/* How a DuckDB column type lands in a table: the type and the SQL cast that gets it there. */
static pb_col_type map_type(duckdb_type t, const char **cast) {
  switch (t) {
    case DUCKDB_TYPE_BOOLEAN: *cast = "BOOLEAN"; return PB_COL_BOOL;
    case DUCKDB_TYPE_TINYINT:
    case DUCKDB_TYPE_SMALLINT:
    case DUCKDB_TYPE_INTEGER:
    case DUCKDB_TYPE_BIGINT:
    case DUCKDB_TYPE_UTINYINT:
    case DUCKDB_TYPE_USMALLINT:
    case DUCKDB_TYPE_UINTEGER: *cast = "BIGINT"; return PB_COL_INT64;
    /* Wider integers might not fit int64; a double never fails. */
    case DUCKDB_TYPE_UBIGINT:
    case DUCKDB_TYPE_HUGEINT:
    case DUCKDB_TYPE_UHUGEINT:
    case DUCKDB_TYPE_FLOAT:
    case DUCKDB_TYPE_DOUBLE:
    case DUCKDB_TYPE_DECIMAL: *cast = "DOUBLE"; return PB_COL_DOUBLE;
    default: *cast = "VARCHAR"; return PB_COL_STRING;
  }
}

static int read_chunks(duckdb_result *res, pb_table *t, const char *path, struct pb_error *err) {
  size_t ncols = t->ncols;
  for (;;) {
    duckdb_data_chunk chunk = duckdb_fetch_chunk(*res);
    if (chunk == NULL) break;
    idx_t n = duckdb_data_chunk_get_size(chunk);
    int rc = PB_OK;
    size_t base = t->nrows;
    for (idx_t r = 0; r < n && rc == 0; r++) rc = pb_table_append_row(t);
    for (size_t c = 0; c < ncols && rc == 0; c++) {
      duckdb_vector v = duckdb_data_chunk_get_vector(chunk, c);
      void *data = duckdb_vector_get_data(v);
      uint64_t *validity = duckdb_vector_get_validity(v);
      struct pb__column *col = &t->cols[c];
      for (idx_t r = 0; r < n && rc == 0; r++) {
        size_t row = base + (size_t)r;
        if (validity != NULL && !duckdb_validity_row_is_valid(validity, r)) continue;
        switch (col->type) {
          case PB_COL_STRING: {
            duckdb_string_t *s = (duckdb_string_t *)data + r;
            const char *p = duckdb_string_t_data(s);
            size_t len = duckdb_string_t_length(*s);
            char *copy = malloc(len + 1);
            if (copy == NULL) {
              rc = PB_ENOMEM;
              break;
            }
            memcpy(copy, p, len);
            copy[len] = '\0';
            col->cells[row].s = copy;
            break;
          }
          case PB_COL_INT64: col->cells[row].i = ((int64_t *)data)[r]; break;
          case PB_COL_DOUBLE: col->cells[row].d = ((double *)data)[r]; break;
          case PB_COL_BOOL: col->cells[row].i = ((bool *)data)[r] ? 1 : 0; break;
        }
        if (rc == 0) col->valid[row] = 1;
      }
    }
    duckdb_destroy_data_chunk(&chunk);
    if (rc != 0) return pb_error_set(err, rc, "%s: out of memory while reading rows", path);
  }
  return PB_OK;
}

static int read_meta(struct db *d, const char *lit, pb_table *t, const char *path,
                     struct pb_error *err) {
  pb__strbuf sql = {0};
  /* Keys and values are BLOBs; decode() keeps UTF-8 text as is, the cast is for binary. */
  pb__strbuf_puts(&sql, "SELECT coalesce(try(decode(key)), CAST(key AS VARCHAR)), "
                "coalesce(try(decode(value)), CAST(value AS VARCHAR)) FROM parquet_kv_metadata(");
  pb__strbuf_puts(&sql, lit);
  pb__strbuf_puts(&sql, ")");
  if (sql.oom) return pb_error_set(err, PB_ENOMEM, "%s: out of memory", path);
  duckdb_result res;
  int rc = db_exec(d, sql.p, &res, PB_EFORMAT, path, "cannot read Parquet key/value metadata",
                   err);
  free(sql.p);
  if (rc != 0) return rc;
  pb_table *kv = NULL;
  rc = pb_table_new(&kv);
  if (rc == 0) rc = pb_table_add_column(kv, "k", PB_COL_STRING);
  if (rc == 0) rc = pb_table_add_column(kv, "v", PB_COL_STRING);
  if (rc == 0) rc = read_chunks(&res, kv, path, err);
  duckdb_destroy_result(&res);
  for (size_t i = 0; rc == 0 && i < kv->nrows; i++) {
    const char *k = pb_table_get_str(kv, i, 0), *v = pb_table_get_str(kv, i, 1);
    if (k != NULL) rc = pb_table_set_meta(t, k, v ? v : "");
  }
  pb_table_free(kv);
  return rc;
}

int pb__parquet_read(const char *path, pb_table **out, struct pb_error *err) {
  *out = NULL;
  struct stat st;
  if (stat(path, &st) != 0)
    return pb_error_set(err, PB_ENOTFOUND, "%s: cannot open: no such file", path);
  /* read_parquet expands these as a glob; refusing is clearer than reading other files. */
  if (strpbrk(path, "*?[") != NULL)
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "%s: a name with '*', '?' or '[' would be read as a glob pattern", path);
  struct db d;
  PB_RETURN_NOT_OK(db_open(&d, path, err));
  pb__strbuf lit = {0}, sql = {0};
  pb__strbuf_quoted(&lit, path, '\'');
  /* The file named is all this session's SQL may open (external access off, locked). */
  pb__strbuf_puts(&sql, "SET allowed_paths = [");
  pb__strbuf_puts(&sql, lit.p ? lit.p : "''");
  pb__strbuf_puts(&sql, "]; SET enable_external_access = false; SET lock_configuration = true");
  int rc = lit.oom || sql.oom ? pb_error_set(err, PB_ENOMEM, "%s: out of memory", path) : 0;
  if (rc == 0) rc = db_exec(&d, sql.p, NULL, PB_EDUCKDB, path, "DuckDB setup", err);
  sql.n = 0;
  pb__strbuf_puts(&sql, "SELECT * FROM read_parquet(");
  pb__strbuf_puts(&sql, lit.p ? lit.p : "''");
  pb__strbuf_puts(&sql, ") LIMIT 0");
  duckdb_result res;
  pb_table *t = NULL;
  if (rc == 0 && (lit.oom || sql.oom)) rc = pb_error_set(err, PB_ENOMEM, "%s: out of memory", path);
  if (rc == 0) rc = db_exec(&d, sql.p, &res, PB_EFORMAT, path, "not a readable Parquet file", err);
  if (rc == 0) {
    rc = pb_table_new(&t);
    idx_t nc = duckdb_column_count(&res);
    sql.n = 0;
    pb__strbuf_puts(&sql, "SELECT ");
    for (idx_t c = 0; c < nc && rc == 0; c++) {
      const char *name = duckdb_column_name(&res, c), *cast;
      pb_col_type type = map_type(duckdb_column_type(&res, c), &cast);
      rc = pb_table_add_column(t, name, type);
      if (rc == PB_EINVAL)
        rc = pb_error_set(err, PB_EFORMAT, "%s: column name '%s' appears twice", path, name);
      if (c) pb__strbuf_puts(&sql, ", ");
      pb__strbuf_puts(&sql, "CAST(");
      pb__strbuf_quoted(&sql, name, '"');
      pb__strbuf_puts(&sql, " AS ");
      pb__strbuf_puts(&sql, cast);
      pb__strbuf_puts(&sql, ")");
    }
    duckdb_destroy_result(&res);
    pb__strbuf_puts(&sql, " FROM read_parquet(");
    pb__strbuf_puts(&sql, lit.p);
    pb__strbuf_puts(&sql, ")");
    if (rc == 0 && sql.oom) rc = pb_error_set(err, PB_ENOMEM, "%s: out of memory", path);
    if (rc == 0)
      rc = db_exec(&d, sql.p, &res, PB_EFORMAT, path, "cannot read Parquet data", err);
    if (rc == 0) {
      rc = read_chunks(&res, t, path, err);
      duckdb_destroy_result(&res);
    }
    if (rc == 0) rc = read_meta(&d, lit.p, t, path, err);
  }
  free(lit.p);
  free(sql.p);
  db_close(&d);
  if (rc != 0) {
    pb_table_free(t);
    return rc;
  }
  *out = t;
  return PB_OK;
}
