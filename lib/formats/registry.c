/* The table of storage backends. A backend adds one line here and one folder under formats/. */
#include <stddef.h>

#include "formats/format_internal.h"

extern const pb_format_vtable pb__format_lance, pb__format_vortex;
extern const pb_format_vtable pb__format_ome_zarr;
extern const pb_format_vtable pb__format_ome_parquet, pb__format_oa_dataset; /* arrow/ */
extern const pb_format_vtable pb__format_duckdb; /* duckdb/: the OME-Arrow table in a DuckDB file */
extern const pb_format_vtable pb__format_raw;
extern const pb_format_vtable pb__format_tiff;
extern const pb_format_vtable pb__format_imagefolder;

static const pb_format_vtable *const backends[] = {
    &pb__format_raw,
    &pb__format_ome_parquet, &pb__format_oa_dataset, &pb__format_duckdb,
    &pb__format_ome_zarr,
    &pb__format_tiff,
    &pb__format_imagefolder,
    &pb__format_lance,
    &pb__format_vortex,
};

int pb__format_vtable_count(void) { return (int)(sizeof backends / sizeof backends[0]); }

const pb_format_vtable *pb__format_vtable_at(int i) {
  return i >= 0 && i < pb__format_vtable_count() ? backends[i] : NULL;
}
