/* Formats the origin benchmark used that have no C library reachable from this project's
 * package sources: recognised by name, refused with the reason. */
#include "formats/format_internal.h"

const pb_format_vtable pb__format_lance = {
    .info = {"lance", "Lance columnar dataset (not available: no C library)", 0, 0},
    .refuse = "Lance has no C library in Debian or the npm registry; convert to ome-parquet or "
              "oa-dataset instead",
};

const pb_format_vtable pb__format_vortex = {
    .info = {"vortex", "Vortex columnar file (not available: no C library)", 0, 0},
    .refuse = "Vortex has no C library in Debian or the npm registry; convert to ome-parquet or "
              "oa-dataset instead",
};
