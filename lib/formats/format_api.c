/* Public names of the format layer's option strings and of the Parquet readers' cache budget
 * (pipebench/format.h). */
#include "formats/format_internal.h"
#include "parquet/pq_cache.h"
#include "pipebench/format.h"

int pb_opt_check(const char *format, const char *options, const char *const *keys,
                 struct pb_error *err) {
  return pb__opt_check(format, options, keys, err);
}
int pb_opt_get(const char *options, const char *key, char *buf, size_t size) {
  return pb__opt_get(options, key, buf, size);
}
size_t pb_pq_cache_budget(size_t dflt) { return pb__pq_cache_budget(dflt); }
long long pb_pq_cache_budget_set(long long bytes) { return pb__pq_cache_budget_set(bytes); }
