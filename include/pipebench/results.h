/* pipebench results: one table API, three sinks (Parquet through DuckDB, CSV, JSON). */
#ifndef PIPEBENCH_RESULTS_H
#define PIPEBENCH_RESULTS_H

#include <stddef.h>
#include <stdint.h>

#include "pipebench/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { PB_COL_STRING = 0, PB_COL_INT64 = 1, PB_COL_DOUBLE = 2, PB_COL_BOOL = 3 } pb_col_type;

/** A column-typed table of rows. Columns are added on first use, in order; a row that leaves
 * a column unset holds NULL there. Not thread-safe. */
typedef struct pb_table pb_table;

/** New empty table. *out is freed with pb_table_free. */
PB_API int pb_table_new(pb_table **out);
PB_API void pb_table_free(pb_table *t);

/** Declares a column ahead of rows (optional; set_* declares on first use). Declaring an
 * existing name with another type is PB_EINVAL. */
PB_API int pb_table_add_column(pb_table *t, const char *name, pb_col_type type);
/** Starts a new row; the set_* calls below fill it (before the first row they return
 * PB_ESTATE). A set_* call declares a missing column with its own type; setting an existing
 * column of another type is PB_EINVAL, except that set_i64 stores into a DOUBLE column.
 * set_str with v == NULL stores NULL. Strings are copied. */
PB_API int pb_table_append_row(pb_table *t);
PB_API int pb_table_set_str(pb_table *t, const char *col, const char *v);
PB_API int pb_table_set_i64(pb_table *t, const char *col, int64_t v);
PB_API int pb_table_set_f64(pb_table *t, const char *col, double v); /* NaN/inf stored as NULL */
PB_API int pb_table_set_bool(pb_table *t, const char *col, int v);
/** Makes a cell of the current row NULL again (the column must exist: PB_ENOTFOUND). */
PB_API int pb_table_set_null(pb_table *t, const char *col);

PB_API size_t pb_table_rows(const pb_table *t);
PB_API size_t pb_table_cols(const pb_table *t);
PB_API const char *pb_table_col_name(const pb_table *t, size_t col);
PB_API pb_col_type pb_table_col_type(const pb_table *t, size_t col);
/** Index of a column by name, or -1. */
PB_API long pb_table_col_index(const pb_table *t, const char *name);
/** Cell access; is_null tells a NULL cell (or an index out of range). Strings are owned by the
 * table (NULL for a NULL cell or a non-string column). get_i64 and get_f64 convert between
 * the numeric types (bool reads as 0/1); a NULL cell reads as 0, NaN for get_f64. */
PB_API int pb_table_is_null(const pb_table *t, size_t row, size_t col);
PB_API const char *pb_table_get_str(const pb_table *t, size_t row, size_t col);
PB_API int64_t pb_table_get_i64(const pb_table *t, size_t row, size_t col);
PB_API double pb_table_get_f64(const pb_table *t, size_t row, size_t col);
PB_API int pb_table_get_bool(const pb_table *t, size_t row, size_t col);

/** Key/value metadata (string -> string) carried with the table: Parquet key/value metadata,
 * a CSV's sidecar (NAME.csv-metadata.json, which also holds the column types: the CSV itself
 * is a header and rows only), a JSON "metadata" object. */
PB_API int pb_table_set_meta(pb_table *t, const char *key, const char *value);
PB_API const char *pb_table_get_meta(const pb_table *t, const char *key); /* NULL if absent */
PB_API size_t pb_table_meta_count(const pb_table *t);
PB_API void pb_table_meta_at(const pb_table *t, size_t i, const char **key, const char **value);
/** Adds every pb_env field as metadata with the prefix "env." */
PB_API int pb_table_set_env(pb_table *t, const pb_env *env);

typedef enum { PB_SINK_AUTO = 0, PB_SINK_PARQUET, PB_SINK_CSV, PB_SINK_JSON } pb_sink;

/** Writes t to path (AUTO: by extension .parquet/.pq, .csv, .json). The data go to a temporary
 * file in the same folder (".<name>.pbtmp-<host>-<pid>-<random>"), are fsync'ed, then renamed
 * over path: a reader sees the old file or the new one, never half of one. Temporaries that a
 * killed writer of this host left behind are removed by the next write to the same path.
 * File layouts: docs/results.md. Parquet needs at least one column. */
PB_API int pb_table_write(const pb_table *t, const char *path, pb_sink sink, struct pb_error *err);
/** Reads a table that pb_table_write wrote (or any Parquet/CSV/JSON table of scalar columns;
 * AUTO: by extension, else by content). A missing file is PB_ENOTFOUND, a malformed one
 * PB_EFORMAT; messages name the file. *out is freed with pb_table_free. */
PB_API int pb_table_read(const char *path, pb_sink sink, pb_table **out, struct pb_error *err);

/** Creates the folder dir and its parents (mkdir -p). A path that exists and is not a folder is
 * PB_EIO naming it; an empty name is PB_EINVAL. */
PB_API int pb_mkdirs(const char *dir, struct pb_error *err);

/** Writes size bytes to path through a temporary file and a rename (for any result file). */
PB_API int pb_write_file_atomic(const char *path, const void *data, size_t size,
                                struct pb_error *err);

/** The shortest text of a finite double that reads back exactly, ".0" on whole numbers (how
 * tables write doubles). */
PB_API void pb_format_double(double v, char *buf, size_t size);

/** Atomic replacement of a file for writers that take a file name (PLplot): begin reserves a
 * temporary beside path (created empty) and puts its name in tmp; finish takes the writer's
 * status rc and removes the temporary (rc != PB_OK, or nothing written: an error) or renames it
 * over path. A device, FIFO or folder at path is refused. */
PB_API int pb_atomic_begin(const char *path, char *tmp, size_t tmp_size, struct pb_error *err);
PB_API int pb_atomic_finish(const char *tmp, const char *path, int rc, struct pb_error *err);

#ifdef __cplusplus
}
#endif
#endif
