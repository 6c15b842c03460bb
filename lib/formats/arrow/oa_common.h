/* Helpers the OME-Arrow backends (ome-parquet, duckdb, oa-dataset) share: a DuckDB session,
 * reading and writing DuckDB vectors, leaf codecs and a spool file. Internal. */
#ifndef PB_OA_COMMON_H
#define PB_OA_COMMON_H

#include <duckdb.h>
#include <stdint.h>
#include "codecs/codec.h"
#include "common/strbuf.h"
#include "formats/format_internal.h"

/** One DuckDB instance and one connection on it. */
typedef struct pb__ome_arrow_db {
  duckdb_database db;
  duckdb_connection con;
} pb__ome_arrow_db;

/** Opens path (NULL: in memory) with one thread; read_only for existing database files. */
int pb__ome_arrow_db_open(pb__ome_arrow_db *d, const char *path, int read_only, struct pb_error *err);
/** Opens a session for reading whose SQL reaches nothing on the host but what is named: the
 * DuckDB database file db_path (NULL: in memory, then files are the only paths read_parquet may
 * open). External access (file functions, ATTACH, COPY, extensions) is off and the setting
 * locked before any of the file's contents is read. */
int pb__ome_arrow_db_open_reader(pb__ome_arrow_db *d, const char *db_path, const char *const *files,
                          size_t nfiles, struct pb_error *err);
/** Refuses a database (path, for messages) that stores functions or macros: one could stand in
 * for a function pipebench's SQL calls. PB_EFORMAT naming it. */
int pb__ome_arrow_db_check_stored(pb__ome_arrow_db *d, const char *path, struct pb_error *err);
/** PB_OK when table is a base table of the database; PB_EFORMAT ("'images' is a VIEW, not a
 * table; pipebench reads only base tables") otherwise. */
int pb__ome_arrow_db_check_table(pb__ome_arrow_db *d, const char *path, const char *table,
                          struct pb_error *err);
void pb__ome_arrow_db_close(pb__ome_arrow_db *d);
/** Runs sql, discarding any result; errors carry DuckDB's message prefixed by what. */
int pb__ome_arrow_exec(pb__ome_arrow_db *d, const char *sql, const char *what, struct pb_error *err);
/** Executes a prepared statement with a streaming result (chunks are fetched with
 * duckdb_fetch_chunk and not first copied into a materialised result). On failure *out holds
 * DuckDB's error, as with duckdb_execute_prepared. */
duckdb_state pb__ome_arrow_execute_streaming(duckdb_prepared_statement st, duckdb_result *out);
/** The logical type that the SQL type text names (caller destroys it). */
int pb__ome_arrow_type(pb__ome_arrow_db *d, const char *sql_type, duckdb_logical_type *out,
                struct pb_error *err);

/* ---- vectors ------------------------------------------------------------------------------ */
void pb__ome_arrow_set_str(duckdb_vector v, idx_t row, const char *s);
void pb__ome_arrow_set_null(duckdb_vector v, idx_t row);
void pb__ome_arrow_set_i16(duckdb_vector v, idx_t row, int16_t x);
void pb__ome_arrow_set_i32(duckdb_vector v, idx_t row, int32_t x);
void pb__ome_arrow_set_i64(duckdb_vector v, idx_t row, int64_t x);
void pb__ome_arrow_set_u32(duckdb_vector v, idx_t row, uint32_t x);
void pb__ome_arrow_set_f32(duckdb_vector v, idx_t row, float x);
/** Makes row of list vector v a list of n new entries; returns the first entry's index in the
 * child vector (whose capacity it grows). */
idx_t pb__ome_arrow_list_append(duckdb_vector v, idx_t row, idx_t n);

int pb__ome_arrow_valid(duckdb_vector v, idx_t row);
/** Copies a VARCHAR/BLOB into buf (truncated, NUL-terminated); "" when NULL. */
void pb__ome_arrow_get_str(duckdb_vector v, idx_t row, char *buf, size_t size);
/** Pointer and length of a VARCHAR/BLOB value (valid while the chunk lives); NULL when NULL. */
const char *pb__ome_arrow_get_blob(duckdb_vector v, idx_t row, size_t *len);
/** Integer of any integer type, and float of FLOAT/DOUBLE; def when NULL or another type. */
int64_t pb__ome_arrow_get_int(duckdb_vector v, idx_t row, int64_t def);
double pb__ome_arrow_get_real(duckdb_vector v, idx_t row, double def);
/** Index of the struct field called name in a STRUCT vector's type, or -1. */
int pb__ome_arrow_field(duckdb_vector v, const char *name);
/** The DuckDB type of each pipebench dtype (USMALLINT for uint16, ...). */
duckdb_type pb__ome_arrow_dtype_duck(pb_dtype d);
const char *pb__ome_arrow_dtype_sql(pb_dtype d);

/* ---- leaf codecs (byte variant) ----------------------------------------------------------- */
/** "none", "zstd" or "lz4"; PB_EINVAL otherwise. */
int pb__ome_arrow_codec_check(const char *name, struct pb_error *err);
/** Compresses n bytes into a malloc'd *out. lz4: a block after a 4-byte little-endian size. */
int pb__ome_arrow_encode(const char *codec, int level, const void *src, size_t n, void **out,
                  size_t *out_n, struct pb_error *err);
/** Decompresses exactly dst_n bytes through the codec table; lz4 accepts a size-prefixed block,
 * a bare block or an LZ4 frame. ctx: the reader's codec state (its zstd context is kept between
 * calls), or NULL for a one-off. On failure returns PB_ECODEC with the codec's message in err. */
int pb__ome_arrow_decode(const char *codec, const void *src, size_t n, void *dst, size_t dst_n,
                  pb__codec_ctx *ctx, struct pb_error *err);

/* ---- spool: a temporary file that collects encoded pixels until finish -------------------- */
typedef struct pb__ome_arrow_spool {
  int fd;
  int64_t size;
  char path[4200];
} pb__ome_arrow_spool;
int pb__ome_arrow_spool_open(pb__ome_arrow_spool *s, const char *near_path, struct pb_error *err);
/** Appends n bytes; *off receives where they start. */
int pb__ome_arrow_spool_write(pb__ome_arrow_spool *s, const void *p, size_t n, int64_t *off,
                       struct pb_error *err);
int pb__ome_arrow_spool_read(pb__ome_arrow_spool *s, int64_t off, void *p, size_t n);
void pb__ome_arrow_spool_close(pb__ome_arrow_spool *s);

/** OME pixel type names: uint8 uint16 uint32 int16 float double. */
const char *pb__ome_arrow_ome_type(pb_dtype d);

#endif
