/* Internals shared by the results sinks (not public API). */
#ifndef PB_RESULTS_INTERNAL_H
#define PB_RESULTS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

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

/* Atomic replacement of a file: reserve a temporary sibling of path, fill it, then commit
 * (fsync, rename over path, fsync the folder) or abort (unlink). Temporary names are
 * "<folder>/.<name>.pbtmp-<host hash>-<pid>-<random>". */
int pb__atomic_open(const char *path, char *tmp, size_t tmp_size, int *fd, struct pb_error *err);
int pb__atomic_commit(const char *tmp, const char *path, struct pb_error *err);
void pb__atomic_abort(const char *tmp);
/* Removes temporaries of path left by processes of this host that no longer exist (a writer
 * killed mid-write); returns how many were removed. */
int pb__atomic_sweep(const char *path);
/* Writes all of data to fd. */
int pb__write_all(int fd, const void *data, size_t size, const char *name, struct pb_error *err);
/* Reads a whole file into a malloc'd, NUL-terminated buffer. */
int pb__results_slurp(const char *path, char **data, size_t *size, struct pb_error *err);

/* The sinks. Writers fill the already-created temporary file tmp (fd open on it for CSV and
 * JSON); path is the final name, for messages. Readers build a new table. */
int pb__parquet_write(const pb_table *t, const char *tmp, const char *path, struct pb_error *err);
int pb__parquet_read(const char *path, pb_table **out, struct pb_error *err);
int pb__csv_write(const pb_table *t, int fd, const char *path, struct pb_error *err);
int pb__csv_read(const char *path, pb_table **out, struct pb_error *err);
int pb__json_write(const pb_table *t, int fd, const char *path, struct pb_error *err);
int pb__json_read(const char *path, pb_table **out, struct pb_error *err);

#endif
