/* The public face of the I/O layer's location calls (include/pipebench/format.h), for the
 * programs, which see only include/: a manifest beside a remote dataset is read as the
 * dataset's files are. */
#include "io/io.h"

int pb_location_is_url(const char *location) { return pb__io_is_url(location); }

int pb_location_stat(const char *location, int *kind, uint64_t *size, struct pb_error *err) {
  pb_read_options o;
  pb__io_options_resolve(NULL, &o);
  pb__io_kind k = PB__IO_MISSING;
  int rc = pb__io_stat(location, &o, &k, size, err);
  *kind = k == PB__IO_FILE ? 1 : k == PB__IO_DIR ? 2 : k == PB__IO_OTHER ? 3 : 0;
  return rc;
}

int pb_location_read(const char *location, size_t max, void **data, size_t *size,
                     struct pb_error *err) {
  pb_read_options o;
  pb__io_options_resolve(NULL, &o);
  return pb__io_read_file(location, &o, max, data, size, err);
}
