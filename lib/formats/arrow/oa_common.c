/* Shared plumbing of the OME-Arrow backends: DuckDB sessions, vectors, codecs, spool files. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/duck_msg.h"
#include "common/env.h"
#include "formats/arrow/oa_common.h"
#include "formats/arrow/oa_pq.h"
#include "io/io.h"

/* DuckDB's version, for every result row (common/env.h). */
static void duckdb_version(char *buf, size_t size) {
  snprintf(buf, size, "%s", duckdb_library_version());
}
PB__ENV_VERSION(register_duckdb, "duckdb_version", duckdb_version)

/* Opens path (NULL: in memory) with cfg, which it destroys, and connects. */
static int open_with(pb__ome_arrow_db *d, const char *path, const char *shown, duckdb_config *cfg,
                     struct pb_error *err) {
  char *msg = NULL;
  duckdb_state st = duckdb_open_ext(path, &d->db, *cfg, &msg);
  duckdb_destroy_config(cfg);
  if (st != DuckDBSuccess) {
    int rc = pb_error_set(err, PB_EDUCKDB, "%s: DuckDB cannot open it: %s", shown,
                          msg ? msg : "unknown error");
    duckdb_free(msg);
    d->db = NULL;
    return rc;
  }
  if (duckdb_connect(d->db, &d->con) != DuckDBSuccess) {
    duckdb_close(&d->db);
    return pb_error_set(err, PB_EDUCKDB, "DuckDB: cannot connect");
  }
  return PB_OK;
}

int pb__ome_arrow_db_open(pb__ome_arrow_db *d, const char *path, int read_only, struct pb_error *err) {
  memset(d, 0, sizeof *d);
  duckdb_config cfg = NULL;
  if (duckdb_create_config(&cfg) != DuckDBSuccess)
    return pb_error_set(err, PB_EDUCKDB, "DuckDB: cannot create a configuration");
  /* One DuckDB thread per handle: the loader opens a handle per worker, and reading one row
   * gains nothing from more threads. */
  duckdb_set_config(cfg, "threads", "1");
  if (read_only && path != NULL) duckdb_set_config(cfg, "access_mode", "READ_ONLY");
  PB_RETURN_NOT_OK(open_with(d, path, path ? path : "(memory)", &cfg, err));
  /* Parquet footers are parsed once per file, not once per query. DuckDB's external file cache
   * would keep a copy of every byte range read in memory: pipebench keeps what it needs itself
   * (its block cache), the page cache keeps the file, and with the cache on, the metadata scan
   * of a file of thousands of row groups held hundreds of MB. */
  PB_RETURN_NOT_OK(pb__ome_arrow_exec(d, "SET parquet_metadata_cache = true", "DuckDB setup", err));
  return pb__ome_arrow_exec(d, "SET enable_external_file_cache = false", "DuckDB setup", err);
}

int pb__ome_arrow_db_open_reader(pb__ome_arrow_db *d, const char *db_path, const char *const *files,
                          size_t nfiles, struct pb_error *err) {
  memset(d, 0, sizeof *d);
  const char *shown = db_path != NULL ? db_path : nfiles > 0 ? files[0] : "(memory)";
  duckdb_config cfg = NULL;
  if (duckdb_create_config(&cfg) != DuckDBSuccess)
    return pb_error_set(err, PB_EDUCKDB, "DuckDB: cannot create a configuration");
  duckdb_set_config(cfg, "threads", "1");
  duckdb_set_config(cfg, "autoload_known_extensions", "false");
  duckdb_set_config(cfg, "autoinstall_known_extensions", "false");
  if (db_path != NULL) {
    /* Sealed before the file is opened: nothing stored in it runs with access to the host. */
    duckdb_set_config(cfg, "access_mode", "READ_ONLY");
    duckdb_set_config(cfg, "enable_external_access", "false");
    duckdb_set_config(cfg, "lock_configuration", "true");
  }
  PB_RETURN_NOT_OK(open_with(d, db_path, shown, &cfg, err));
  if (db_path != NULL) return PB_OK;
  /* In memory: the Parquet files pipebench chose are the only paths its SQL may open
   * (allowed_paths holds while external access is off; both are set by SQL, which the
   * configuration object refuses for them, then locked). The footer cache on and the external
   * file cache off, as in the writers' sessions above. */
  pb__strbuf sql = {0};
  pb__strbuf_puts(&sql, "SET parquet_metadata_cache = true; "
                        "SET enable_external_file_cache = false; SET allowed_paths = [");
  char q[8400];
  int rc = PB_OK;
  for (size_t i = 0; i < nfiles && rc == PB_OK; i++) {
    if (pb__sql_quote(q, sizeof q, files[i]) != PB_OK)
      rc = pb_error_set(err, PB_EINVAL, "%s: path too long", files[i]);
    pb__strbuf_printf(&sql, "%s%s", i ? ", " : "", q);
  }
  pb__strbuf_puts(&sql, "]; SET enable_external_access = false; SET lock_configuration = true");
  if (rc == PB_OK && pb__strbuf_status(&sql) != PB_OK)
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  if (rc == PB_OK) rc = pb__ome_arrow_exec(d, pb__strbuf_str(&sql), "DuckDB setup", err);
  pb__strbuf_destroy(&sql);
  if (rc != PB_OK) pb__ome_arrow_db_close(d);
  return rc;
}

int pb__ome_arrow_db_check_stored(pb__ome_arrow_db *d, const char *path, struct pb_error *err) {
  /* Qualified and calling no function: a macro stored in the file cannot stand in for
   * these. */
  duckdb_result res;
  if (duckdb_query(d->con,
                   "SELECT function_name, function_type FROM system.main.duckdb_functions() "
                   "WHERE NOT internal",
                   &res) != DuckDBSuccess) {
    int rc = pb_error_set(err, PB_EDUCKDB, "%s: cannot list its functions: %.*s", path,
                          PB__DUCK_MSG(duckdb_result_error(&res)));
    duckdb_destroy_result(&res);
    return rc;
  }
  int rc = PB_OK;
  if (duckdb_row_count(&res) > 0) {
    char *name = duckdb_value_varchar(&res, 0, 0), *type = duckdb_value_varchar(&res, 1, 0);
    rc = pb_error_set(err, PB_EFORMAT,
                      "%s: '%s' is a stored %s; pipebench reads only base tables, and opens no "
                      "database that defines functions or macros",
                      path, name ? name : "?",
                      type != NULL && strcmp(type, "table_macro") == 0 ? "table macro"
                      : type != NULL && strcmp(type, "macro") == 0   ? "macro"
                                                                     : "function");
    duckdb_free(name);
    duckdb_free(type);
  }
  duckdb_destroy_result(&res);
  return rc;
}

int pb__ome_arrow_db_check_table(pb__ome_arrow_db *d, const char *path, const char *table,
                          struct pb_error *err) {
  static const char *const kinds[][2] = {
      {"SELECT 1 FROM system.main.duckdb_tables() WHERE NOT temporary AND table_name = $1",
       NULL},
      {"SELECT 1 FROM system.main.duckdb_views() WHERE NOT internal AND view_name = $1",
       "a VIEW"}};
  for (size_t k = 0; k < 2; k++) {
    duckdb_prepared_statement st = NULL;
    duckdb_result res;
    int found = -1;
    if (duckdb_prepare(d->con, kinds[k][0], &st) == DuckDBSuccess &&
        duckdb_bind_varchar(st, 1, table) == DuckDBSuccess &&
        duckdb_execute_prepared(st, &res) == DuckDBSuccess) {
      found = duckdb_row_count(&res) > 0;
      duckdb_destroy_result(&res);
    }
    duckdb_destroy_prepare(&st);
    if (found < 0) return pb_error_set(err, PB_EDUCKDB, "%s: cannot list its tables", path);
    if (k == 0 && found) return PB_OK;
    if (k == 1 && found)
      return pb_error_set(err, PB_EFORMAT,
                          "%s: '%s' is %s, not a table; pipebench reads only base tables", path,
                          table, kinds[k][1]);
  }
  return pb_error_set(err, PB_EFORMAT,
                      "%s: '%s' is not a base table; pipebench reads only base tables", path,
                      table);
}

void pb__ome_arrow_db_close(pb__ome_arrow_db *d) {
  if (d->con != NULL) duckdb_disconnect(&d->con);
  if (d->db != NULL) duckdb_close(&d->db);
  d->con = NULL;
  d->db = NULL;
}

int pb__ome_arrow_exec(pb__ome_arrow_db *d, const char *sql, const char *what, struct pb_error *err) {
  duckdb_result r;
  if (duckdb_query(d->con, sql, &r) != DuckDBSuccess) {
    const char *m = duckdb_result_error(&r);
    int rc = pb_error_set(err, PB_EDUCKDB, "%s: %.*s", what, PB__DUCK_MSG(m));
    duckdb_destroy_result(&r);
    return rc;
  }
  duckdb_destroy_result(&r);
  return PB_OK;
}

duckdb_state pb__ome_arrow_execute_streaming(duckdb_prepared_statement st, duckdb_result *out) {
  duckdb_pending_result pending = NULL;
  if (duckdb_pending_prepared_streaming(st, &pending) == DuckDBSuccess) {
    duckdb_state s = duckdb_execute_pending(pending, out);
    duckdb_destroy_pending(&pending);
    return s;
  }
  if (pending != NULL) duckdb_destroy_pending(&pending);
  /* No pending result: run it the ordinary way, which leaves the error message in *out. */
  return duckdb_execute_prepared(st, out);
}

int pb__ome_arrow_type(pb__ome_arrow_db *d, const char *sql_type, duckdb_logical_type *out,
                struct pb_error *err) {
  size_t n = strlen(sql_type) + 64;
  char *sql = malloc(n);
  if (sql == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  snprintf(sql, n, "SELECT CAST(NULL AS %s)", sql_type);
  duckdb_prepared_statement st = NULL;
  int rc = PB_OK;
  if (duckdb_prepare(d->con, sql, &st) != DuckDBSuccess) {
    rc = pb_error_set(err, PB_EDUCKDB, "DuckDB type %s: %.*s", sql_type,
                      PB__DUCK_MSG(duckdb_prepare_error(st)));
  } else {
    *out = duckdb_prepared_statement_column_logical_type(st, 0);
  }
  duckdb_destroy_prepare(&st);
  free(sql);
  return rc;
}

/* ---- vectors ------------------------------------------------------------------------------ */

void pb__ome_arrow_set_str(duckdb_vector v, idx_t row, const char *s) {
  if (s == NULL) {
    pb__ome_arrow_set_null(v, row);
    return;
  }
  duckdb_vector_assign_string_element_len(v, row, s, strlen(s));
}

void pb__ome_arrow_set_null(duckdb_vector v, idx_t row) {
  duckdb_vector_ensure_validity_writable(v);
  duckdb_validity_set_row_invalid(duckdb_vector_get_validity(v), row);
  /* DuckDB copies a NULL struct's fields too (ColumnDataCopyStruct, when COPY collects a row
   * group), so they must be NULL as well: a VARCHAR field left as whatever the reused vector
   * held is copied through its stale pointer. The C API does not do this for us. */
  duckdb_logical_type t = duckdb_vector_get_column_type(v);
  if (duckdb_get_type_id(t) == DUCKDB_TYPE_STRUCT) {
    idx_t n = duckdb_struct_type_child_count(t);
    for (idx_t k = 0; k < n; k++) pb__ome_arrow_set_null(duckdb_struct_vector_get_child(v, k), row);
  }
  duckdb_destroy_logical_type(&t);
}

void pb__ome_arrow_set_i16(duckdb_vector v, idx_t row, int16_t x) {
  ((int16_t *)duckdb_vector_get_data(v))[row] = x;
}
void pb__ome_arrow_set_i32(duckdb_vector v, idx_t row, int32_t x) {
  ((int32_t *)duckdb_vector_get_data(v))[row] = x;
}
void pb__ome_arrow_set_i64(duckdb_vector v, idx_t row, int64_t x) {
  ((int64_t *)duckdb_vector_get_data(v))[row] = x;
}
void pb__ome_arrow_set_u32(duckdb_vector v, idx_t row, uint32_t x) {
  ((uint32_t *)duckdb_vector_get_data(v))[row] = x;
}
void pb__ome_arrow_set_f32(duckdb_vector v, idx_t row, float x) {
  ((float *)duckdb_vector_get_data(v))[row] = x;
}

idx_t pb__ome_arrow_list_append(duckdb_vector v, idx_t row, idx_t n) {
  idx_t at = duckdb_list_vector_get_size(v);
  duckdb_list_vector_reserve(v, at + n);
  duckdb_list_vector_set_size(v, at + n);
  duckdb_list_entry *e = duckdb_vector_get_data(v);
  e[row].offset = at;
  e[row].length = n;
  return at;
}

int pb__ome_arrow_valid(duckdb_vector v, idx_t row) {
  uint64_t *val = duckdb_vector_get_validity(v);
  return val == NULL || duckdb_validity_row_is_valid(val, row);
}

const char *pb__ome_arrow_get_blob(duckdb_vector v, idx_t row, size_t *len) {
  *len = 0;
  if (!pb__ome_arrow_valid(v, row)) return NULL;
  duckdb_string_t *s = (duckdb_string_t *)duckdb_vector_get_data(v) + row;
  *len = duckdb_string_t_length(*s);
  return duckdb_string_t_data(s);
}

void pb__ome_arrow_get_str(duckdb_vector v, idx_t row, char *buf, size_t size) {
  size_t n;
  const char *p = pb__ome_arrow_get_blob(v, row, &n);
  if (p == NULL) n = 0;
  if (n >= size) n = size - 1;
  if (n > 0) memcpy(buf, p, n);
  buf[n] = '\0';
}

static duckdb_type vec_type(duckdb_vector v) {
  duckdb_logical_type t = duckdb_vector_get_column_type(v);
  duckdb_type id = duckdb_get_type_id(t);
  duckdb_destroy_logical_type(&t);
  return id;
}

int64_t pb__ome_arrow_get_int(duckdb_vector v, idx_t row, int64_t def) {
  if (!pb__ome_arrow_valid(v, row)) return def;
  const void *p = duckdb_vector_get_data(v);
  switch (vec_type(v)) {
    case DUCKDB_TYPE_TINYINT: return ((const int8_t *)p)[row];
    case DUCKDB_TYPE_SMALLINT: return ((const int16_t *)p)[row];
    case DUCKDB_TYPE_INTEGER: return ((const int32_t *)p)[row];
    case DUCKDB_TYPE_BIGINT: return ((const int64_t *)p)[row];
    case DUCKDB_TYPE_UTINYINT: return ((const uint8_t *)p)[row];
    case DUCKDB_TYPE_USMALLINT: return ((const uint16_t *)p)[row];
    case DUCKDB_TYPE_UINTEGER: return ((const uint32_t *)p)[row];
    case DUCKDB_TYPE_UBIGINT: return (int64_t)((const uint64_t *)p)[row];
    default: return def;
  }
}

double pb__ome_arrow_get_real(duckdb_vector v, idx_t row, double def) {
  if (!pb__ome_arrow_valid(v, row)) return def;
  const void *p = duckdb_vector_get_data(v);
  switch (vec_type(v)) {
    case DUCKDB_TYPE_FLOAT: return ((const float *)p)[row];
    case DUCKDB_TYPE_DOUBLE: return ((const double *)p)[row];
    default: return (double)pb__ome_arrow_get_int(v, row, (int64_t)def);
  }
}

int pb__ome_arrow_field(duckdb_vector v, const char *name) {
  duckdb_logical_type t = duckdb_vector_get_column_type(v);
  int found = -1;
  if (duckdb_get_type_id(t) == DUCKDB_TYPE_STRUCT) {
    idx_t n = duckdb_struct_type_child_count(t);
    for (idx_t i = 0; i < n && found < 0; i++) {
      char *nm = duckdb_struct_type_child_name(t, i);
      if (nm != NULL && strcmp(nm, name) == 0) found = (int)i;
      duckdb_free(nm);
    }
  }
  duckdb_destroy_logical_type(&t);
  return found;
}

duckdb_type pb__ome_arrow_dtype_duck(pb_dtype d) {
  switch (d) {
    case PB_UINT8: return DUCKDB_TYPE_UTINYINT;
    case PB_UINT16: return DUCKDB_TYPE_USMALLINT;
    case PB_UINT32: return DUCKDB_TYPE_UINTEGER;
    case PB_INT16: return DUCKDB_TYPE_SMALLINT;
    case PB_FLOAT32: return DUCKDB_TYPE_FLOAT;
    case PB_FLOAT64: return DUCKDB_TYPE_DOUBLE;
    default: return DUCKDB_TYPE_INVALID;
  }
}

const char *pb__ome_arrow_dtype_sql(pb_dtype d) {
  switch (d) {
    case PB_UINT8: return "UTINYINT";
    case PB_UINT16: return "USMALLINT";
    case PB_UINT32: return "UINTEGER";
    case PB_INT16: return "SMALLINT";
    case PB_FLOAT32: return "FLOAT";
    case PB_FLOAT64: return "DOUBLE";
    default: return "INVALID";
  }
}

const char *pb__ome_arrow_ome_type(pb_dtype d) {
  switch (d) {
    case PB_FLOAT32: return "float";
    case PB_FLOAT64: return "double";
    default: return pb_dtype_name(d);
  }
}

/* ---- codecs ------------------------------------------------------------------------------- */

int pb__ome_arrow_codec_check(const char *name, struct pb_error *err) {
  if (strcmp(name, "none") == 0 || strcmp(name, "zstd") == 0 || strcmp(name, "lz4") == 0)
    return PB_OK;
  return pb_error_set(err, PB_EINVAL, "leaf compression '%s' is not one of none, zstd, lz4",
                      name);
}

int pb__ome_arrow_encode(const char *codec, int level, const void *src, size_t n, void **out,
                  size_t *out_n, struct pb_error *err) {
  *out = NULL;
  *out_n = 0;
  pb__codec_id id;
  PB_RETURN_NOT_OK(pb__ome_arrow_codec_check(codec, err));
  PB_RETURN_NOT_OK(pb__codec_by_name(codec, &id, err));
  size_t cap = pb__codec_bound(id, n);
  if (cap == 0 && n > 0)
    return pb_error_set(err, PB_EINVAL, "%s: chunk of %zu bytes is too large", codec, n);
  void *buf = malloc(cap > 0 ? cap : 1);
  if (buf == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  pb__codec_params prm = {.level = level};
  int rc = pb__codec_encode(NULL, id, &prm, src, n, buf, cap, out_n, err);
  if (rc != PB_OK) {
    free(buf);
    return rc;
  }
  *out = buf;
  return PB_OK;
}

int pb__ome_arrow_decode(const char *codec, const void *src, size_t n, void *dst, size_t dst_n,
                  pb__codec_ctx *ctx, struct pb_error *err) {
  if (strcmp(codec, "none") == 0 || codec[0] == '\0') {
    if (n != dst_n)
      return pb_error_set(err, PB_EFORMAT, "chunk holds %zu bytes, its shape needs %zu", n, dst_n);
    memcpy(dst, src, n);
    return PB_OK;
  }
  pb__codec_id id;
  if (pb__ome_arrow_codec_check(codec, NULL) != PB_OK || pb__codec_by_name(codec, &id, NULL) != PB_OK)
    return pb_error_set(err, PB_EUNSUPPORTED, "unknown leaf compression '%s'", codec);
  return pb__codec_decode_exact(ctx, id, src, n, dst, dst_n, err);
}

/* ---- spool -------------------------------------------------------------------------------- */

int pb__ome_arrow_spool_open(pb__ome_arrow_spool *s, const char *near_path, struct pb_error *err) {
  char tmp[4096];
  pb__temp_sibling(near_path, tmp, sizeof tmp);
  snprintf(s->path, sizeof s->path, "%s.spool", tmp);
  s->size = 0;
  s->fd = open(s->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600); /* a new file */
  if (s->fd < 0)
    return pb_error_set(err, -errno, "%s: cannot create: %s", s->path, strerror(errno));
  return PB_OK;
}

int pb__ome_arrow_spool_write(pb__ome_arrow_spool *s, const void *p, size_t n, int64_t *off,
                       struct pb_error *err) {
  *off = s->size;
  const char *c = p;
  size_t done = 0;
  while (done < n) {
    ssize_t w = pwrite(s->fd, c + done, n - done, (off_t)(s->size + (int64_t)done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return pb_error_set(err, PB_EIO, "%s: write failed: %s", s->path, strerror(errno));
    done += (size_t)w;
  }
  s->size += (int64_t)n;
  return PB_OK;
}

int pb__ome_arrow_spool_read(pb__ome_arrow_spool *s, int64_t off, void *p, size_t n) {
  /* the spool is this writer's own growing file, no dataset: read by descriptor */
  return pb__io_fd_pread(s->fd, p, n, (uint64_t)off, s->path, NULL) == PB_OK ? PB_OK : PB_EIO;
}

void pb__ome_arrow_spool_close(pb__ome_arrow_spool *s) {
  if (s->fd >= 0) {
    close(s->fd);
    unlink(s->path);
  }
  s->fd = -1;
}

/* ---- the direct path's switch and counters (oa_pq.h) -------------------------------------- */

static _Atomic int_fast64_t g_served, g_fell_back, g_meta;

void pb__ome_arrow_direct_note(int served) {
  if (served) atomic_fetch_add(&g_served, 1);
  else atomic_fetch_add(&g_fell_back, 1);
}
void pb__ome_arrow_direct_stats(int64_t *served, int64_t *fell_back) {
  if (served) *served = (int64_t)atomic_load(&g_served);
  if (fell_back) *fell_back = (int64_t)atomic_load(&g_fell_back);
}
void pb__ome_arrow_direct_meta_note(void) { atomic_fetch_add(&g_meta, 1); }
int64_t pb__ome_arrow_direct_meta_count(void) { return (int64_t)atomic_load(&g_meta); }
void pb__ome_arrow_direct_reset(void) {
  atomic_store(&g_served, 0);
  atomic_store(&g_fell_back, 0);
  atomic_store(&g_meta, 0);
}
