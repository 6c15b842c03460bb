/* The OME-Arrow table (one image per row in a column `ome_arrow`) that two containers store:
 * a Parquet file (`ome-parquet`, ome_table.c) and a table `images` in a DuckDB database file
 * (`duckdb`, lib/formats/duckdb/). The writer and the reader are shared; a container supplies
 * where the rows go at finish (a sink) and where they come from at open (a column, a source
 * and a row key for the queries). Internal. */
#ifndef PB_OME_TABLE_H
#define PB_OME_TABLE_H

#include "formats/arrow/oa_common.h"

/* ---- writer: images are spooled by add; finish hands DuckDB a row source pb_ome_rows() ----- */

/** What a sink needs to know at finish. */
typedef struct pb__ome_table_out {
  const char *path;     /**< the output, for messages */
  const char *tmp;      /**< the temporary file to write; finish then renames it to path */
  const char *pq_codec; /**< the parquet_codec= option (zstd unless leaves are compressed) */
  int level;            /**< the compression level asked for (0: the codec's default) */
  int64_t rg_rows;      /**< the row_group_rows= option, 0 when not given */
  size_t image_bytes;   /**< the first image's pixel bytes */
  const char *layout;   /**< planes, chunks or chunk-bytes */
} pb__ome_table_out;

/** Where a container's rows go. */
typedef struct pb__ome_table_sink {
  /** 1: DuckDB opens out->tmp as its database file; 0: DuckDB runs in memory. */
  int db_is_output;
  /** Writes the rows of the table function pb_ome_rows() into out->tmp. Sets *per_chunk (the
   * rows per data chunk the row source yields) before it runs the SQL that reads them. */
  int (*store)(pb__ome_arrow_db *db, const pb__ome_table_out *out, idx_t *per_chunk,
               struct pb_error *err);
} pb__ome_table_sink;

/** The writer's vtable entries; finish takes the container's sink. */
int pb__ome_table_writer_open(const char *path, const pb_write_params *params, void **wstate,
                              struct pb_error *err);
int pb__ome_table_writer_add(void *wstate, const pb_image_meta *meta, const void *pixels,
                             struct pb_error *err);
int pb__ome_table_writer_finish(void *wstate, const pb__ome_table_sink *sink,
                                struct pb_error *err);
void pb__ome_table_writer_free(void *wstate);
/** The --options keys both containers take (NULL-terminated). */
extern const char *const pb__ome_table_write_options[];

/* ---- reader ------------------------------------------------------------------------------- */

typedef struct pb__ome_table_reader pb__ome_table_reader;

/** A reader with no session yet: the container opens pb__ome_table_reader_db(r), finds the
 * column and calls pb__ome_table_reader_ready. On any later failure it frees r with
 * pb__ome_table_reader_close; before the session is opened, with free(). */
int pb__ome_table_reader_new(const char *path, const pb_read_options *opts,
                             pb__ome_table_reader **out, struct pb_error *err);
pb__ome_arrow_db *pb__ome_table_reader_db(pb__ome_table_reader *r);
/** Picks the OME-Arrow column among the rows (table, column, type) that sql returns:
 * `ome_arrow` if present, else the first STRUCT column with a pixels_meta field. table/col
 * receive the names, has_* which of planes and chunks it has. PB_EFORMAT otherwise. */
int pb__ome_table_find_column(pb__ome_table_reader *r, const char *sql, char *table,
                              size_t tsize, char *col, size_t csize, int *has_chunks,
                              int *has_planes, struct pb_error *err);
/** Finishes an open for a database table: reads every image's metadata from src (SQL, e.g. a
 * quoted table name) ordered by key (e.g. rowid), sizes the block cache (blocks of consecutive
 * keys) and prepares the pixel query. */
int pb__ome_table_reader_ready(pb__ome_table_reader *r, const char *key, const char *col,
                               const char *src, int has_chunks, int has_planes,
                               struct pb_error *err);
/** The reader's vtable entries (state: a pb__ome_table_reader). close accepts NULL. */
void pb__ome_table_reader_close(void *state);
int64_t pb__ome_table_reader_count(void *state);
int pb__ome_table_reader_meta(void *state, int64_t i, pb_image_meta *out, struct pb_error *err);
int pb__ome_table_reader_shape(void *state, int64_t i, pb_dtype *dtype, int64_t shape[PB_NDIM],
                               struct pb_error *err);
int pb__ome_table_reader_read(void *state, int64_t i, const pb_region *region, void *dst,
                              size_t dst_size, pb_stage_times *times, struct pb_error *err);

/* ---- probes ------------------------------------------------------------------------------- */
/** Reads the first n bytes of path into buf: 0, or -1 when it cannot (or is shorter). */
int pb__ome_table_read_head(const char *path, unsigned char *buf, size_t n);
int pb__ome_table_ends_with(const char *s, const char *suffix);

#endif
