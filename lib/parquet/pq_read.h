/* The narrow direct reader of one leaf column of a Parquet file: the OME-Arrow backends read
 * pixel columns (planes.pixels, chunks.pixel_bytes, pixel_bytes) and the small columns that
 * place a row's pieces with it. Column-chunk locations come from the footer (pq_footer.h);
 * this code parses page headers (Thrift compact) and pages:
 * RLE/bit-packed levels, PLAIN and dictionary values, codecs none, snappy, gzip, lz4_raw and
 * zstd (through lib/codecs). Anything else is refused at open (the caller keeps DuckDB).
 * Internal; see docs/format-ome-arrow.md, "Direct page reads". */
#ifndef PB_PARQUET_PQ_READ_H
#define PB_PARQUET_PQ_READ_H

#include <duckdb.h>
#include <stddef.h>
#include <stdint.h>

#include "parquet/pq_footer.h"
#include "pipebench/core.h"

/* Parquet physical types and codecs (the format's own numbers). */
enum { PB__PQ_INT32 = 1, PB__PQ_INT64 = 2, PB__PQ_FLOAT = 4, PB__PQ_DOUBLE = 5,
       PB__PQ_BYTE_ARRAY = 6 };
enum { PB__PQ_UNCOMPRESSED = 0, PB__PQ_SNAPPY = 1, PB__PQ_GZIP = 2, PB__PQ_ZSTD = 6,
       PB__PQ_LZ4_RAW = 7 };

typedef struct pb__pq_col pb__pq_col;

/** Rows read from a column: each row holds elements (the items of the first repeated level; for
 * a column without repetition, one per row) and each element holds values (the leaf values
 * under it that are not null) and nulls (its entries without a value). Owned by the caller:
 * zero-initialise, reuse across reads, release with pb__pq_rows_destroy. */
typedef struct pb__pq_rows {
  size_t n_rows, n_elems, n_vals;
  size_t *row_elem;   /* n_rows + 1 entries: first element of each row */
  size_t *elem_val;   /* n_elems + 1 entries: first value of each element */
  size_t *elem_nulls; /* n_elems entries */
  unsigned char *data;
  size_t *val_off;    /* byte arrays: n_vals + 1 offsets into data; fixed width: unused */
  size_t width;       /* bytes per value (fixed width), 0 for byte arrays */
  size_t n_data, cap_rows, cap_elems, cap_vals, cap_data;
  /* Set by the caller: values that lie in one page may be left where they are (the mapped
   * file, or the column's decoded page) instead of copied into data. Such values stay valid
   * until the next read of the column. Read them through pb__pq_rows_data. */
  int may_borrow;
  const unsigned char *borrowed; /* the values, when borrowed; NULL otherwise */
  /* Set by the caller with may_borrow (optional): memory where a read of one row holding one
   * byte-array value of exactly into_n bytes may put that value, read straight from the file
   * (pages read with pread), sparing the caller a copy. When it does, borrowed == into. */
  unsigned char *into;
  size_t into_n;
} pb__pq_rows;

/** Where the values of r lie (offsets as for data). */
static inline const unsigned char *pb__pq_rows_data(const pb__pq_rows *r) {
  return r->borrowed != NULL ? r->borrowed : r->data;
}

void pb__pq_rows_clear(pb__pq_rows *r);
void pb__pq_rows_destroy(pb__pq_rows *r);

/** Opens leaf columns leaves[0..n) (their paths in the schema as parquet_metadata() writes
 * them, "a, b, c") of the Parquet file at path, whose footer meta holds (pq_footer.h). map:
 * read pages where they lie in a mapping of the file (else each page with pread). out[k] is
 * the column, or NULL when the file has no such leaf or its layout is one the direct reader
 * does not handle; in_file[k] tells whether the leaf exists. Returns a PB_E code only for
 * errors (then every out[k] is NULL). Free each with pb__pq_free. */
int pb__pq_open_meta(const pb__pq_meta *meta, const char *path,
                     const char *const *leaves, size_t n, int map, pb__pq_col **out,
                     int *in_file, struct pb_error *err);
/** pb__pq_open_meta with the footer read from the file (errors in it are PB_EFORMAT). */
int pb__pq_open_many(const char *path, const char *const *leaves, size_t n, int map,
                     pb__pq_col **out, int *in_file, struct pb_error *err);
void pb__pq_free(pb__pq_col *c);

int pb__pq_physical(const pb__pq_col *c);
/** The converted type parquet_schema() reports ("UINT_16", ... ; "" when none). */
const char *pb__pq_converted(const pb__pq_col *c);
int64_t pb__pq_row_count(const pb__pq_col *c);
/** The column's row groups (the file's): their count; with first, also the first file row of
 * each into first[0..count) and the file's row count into first[count]. */
size_t pb__pq_row_groups(const pb__pq_col *c, int64_t *first);

/** Appends rows [first, first + n) (file row numbers, all in one row group) to out. Errors name
 * the row group and the page offset; the caller prefixes the file and the image. */
int pb__pq_read(pb__pq_col *c, int64_t first, int64_t n, pb__pq_rows *out,
                struct pb_error *err);
/** Appends every row of the column to out. */
int pb__pq_read_all(pb__pq_col *c, pb__pq_rows *out, struct pb_error *err);

/** Decodes pages held in memory as one column chunk (optional dictionary page, then data pages)
 * and appends row `row` of it to out: the entry point of the fuzz target. */
int pb__pq_read_mem(const uint8_t *data, size_t size, int physical, int codec, int max_rep,
                    int max_def, int64_t row, pb__pq_rows *out, struct pb_error *err);

#endif
