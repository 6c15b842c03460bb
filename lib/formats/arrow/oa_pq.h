/* OME-Arrow's direct path: Parquet pages read by lib/parquet instead of through DuckDB, with a
 * switch to turn it (or its file mapping) off and counters that tests read. Internal. */
#ifndef PB_OA_PQ_H
#define PB_OA_PQ_H

#include <stdint.h>

#include "formats/arrow/oa_common.h"
#include "parquet/pq_read.h"

/* Whether the direct path is used, and whether it maps the file, are read options
 * (pb_read_options.page_reader and .map; docs/io.md). */
/** Process-wide counters, for tests: image reads served by the direct path, and reads of files
 * open with the direct path that DuckDB served instead (rows it does not take, or a direct read
 * that failed). */
void pb__ome_arrow_direct_note(int served);
void pb__ome_arrow_direct_stats(int64_t *served, int64_t *fell_back);
void pb__ome_arrow_direct_reset(void);
/** Opens whose metadata (id, name, pixels_meta) the page reader read, DuckDB not queried. */
void pb__ome_arrow_direct_meta_note(void);
int64_t pb__ome_arrow_direct_meta_count(void);

#endif
