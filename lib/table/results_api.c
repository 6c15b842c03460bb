/* Public names of the tables' number formatting and atomic file replacement
 * (pipebench/results.h). */
#include "pipebench/results.h"
#include "table/results_internal.h"

void pb_format_double(double v, char *buf, size_t size) { pb__format_double(v, buf, size); }
int pb_atomic_begin(const char *path, char *tmp, size_t tmp_size, struct pb_error *err) {
  return pb__atomic_begin(path, tmp, tmp_size, err);
}
int pb_atomic_finish(const char *tmp, const char *path, int rc, struct pb_error *err) {
  return pb__atomic_finish(tmp, path, rc, err);
}
