/* Internals shared by the results sinks (not public API). */
#ifndef PB_RESULTS_INTERNAL_H
#define PB_RESULTS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/fs.h"
#include "pipebench/results.h"

/* One cell; which member is live follows the column's type. */
union pb__cell {
  int64_t i;
  double d;
  char *s;
};

struct pb__column {
  char *name;
  pb_col_type type;
  union pb__cell *cells; /* cap_rows entries, from pb_alloc */
  unsigned char *valid;  /* cap_rows bytes, 0 = NULL, from pb_alloc */
};

struct pb__meta {
  char *key;
  char *value;
};

struct pb_table {
  struct pb__column *cols;
  size_t ncols, cap_cols;
  size_t nrows, cap_rows;
  struct pb__meta *meta;
  size_t nmeta, cap_meta;
};

/* Typed setters of the current (last) row by column index; the type must match. */
int pb__table_put_str(pb_table *t, size_t col, const char *v, size_t len);
int pb__table_put_i64(pb_table *t, size_t col, int64_t v);
int pb__table_put_f64(pb_table *t, size_t col, double v);
int pb__table_put_bool(pb_table *t, size_t col, int v);

/* Shortest text of a finite double that reads back exactly, with a ".0" on whole numbers. */
void pb__format_double(double v, char *buf, size_t size);

/* Name of a column type ("string", "int64", "double", "bool") and back (-1 if unknown). */
const char *pb__col_type_name(pb_col_type type);
int pb__col_type_parse(const char *name, size_t len);

/* Atomic replacement of a file: reserve a temporary (common/fs.h names it), fill it, then
 * commit (fsync, rename over path, fsync the folder) or abort (unlink). The target decides:
 * a missing or regular path is replaced by the rename; a symbolic link is followed and the file
 * it names is replaced (the link stays); a character device (/dev/null) is written in place
 * at commit, from a temporary in $TMPDIR or /tmp; a folder, FIFO, socket or block device is
 * refused (PB_EIO naming what it is), so a rename never replaces one. Opening also sweeps the
 * temporaries of path that dead writers of this host left. */
int pb__atomic_open(const char *path, char *tmp, size_t tmp_size, int *fd, struct pb_error *err);
int pb__atomic_commit(const char *tmp, const char *path, struct pb_error *err);
/* Removes tmp (and DuckDB's "tmp_" copy of it); tmp "" is a no-op. */
void pb__atomic_abort(const char *tmp);
/* The same path for writers that take a file name (PLplot, DuckDB's COPY): begin reserves the
 * temporary (created empty) and puts its name in tmp; finish takes the writer's status rc and
 * either removes the temporary (rc != PB_OK, or nothing was written: returns the error) or
 * commits it. */
int pb__atomic_begin(const char *path, char *tmp, size_t tmp_size, struct pb_error *err);
int pb__atomic_finish(const char *tmp, const char *path, int rc, struct pb_error *err);

/* The sinks. Writers fill the already-created temporary file tmp (fd open on it for CSV and
 * JSON); path is the final name, for messages. Readers build a new table. */
int pb__parquet_write(const pb_table *t, const char *tmp, const char *path, struct pb_error *err);
int pb__parquet_read(const char *path, pb_table **out, struct pb_error *err);
/* The CSV: header and rows only; *hash (may be NULL) gets the FNV-1a hash of its bytes. */
int pb__csv_write(const pb_table *t, int fd, const char *path, uint64_t *hash,
                  struct pb_error *err);
/* path's sidecar, path + "-metadata.json": the column types and metadata of the CSV whose
 * bytes hash to `hash` (W3C CSVW layout), written atomically beside a regular file only. */
void pb__csv_sidecar_path(const char *path, char *out, size_t size);
int pb__csv_write_sidecar(const pb_table *t, const char *path, uint64_t hash,
                          struct pb_error *err);
int pb__csv_read(const char *path, pb_table **out, struct pb_error *err);
int pb__json_write(const pb_table *t, int fd, const char *path, struct pb_error *err);
int pb__json_read(const char *path, pb_table **out, struct pb_error *err);

#endif
