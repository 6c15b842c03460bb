/* Formats the origin benchmark used that have no implementation reachable from this project's
 * package sources: recognised by name, refused with the reason (docs/formats.md). */
#include "formats/format_internal.h"

const pb_format_vtable pb__format_vortex = {
    .info = {"vortex", "Vortex columnar file (not available: no implementation)", 0, 0},
    .refuse = "Vortex has no C library in Debian and no package in the npm registry that "
              "installs here (its engine is Rust and Python only); convert to ome-parquet, "
              "oa-dataset or lance instead",
};
