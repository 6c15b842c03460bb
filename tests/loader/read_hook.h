/* Slow and failing reads for the threaded loader tests, through the raw backend's test hook:
 * install test_read_hook as pb__raw_read_hook; each read then sleeps test_read_delay_us
 * microseconds first, and the read of image test_fail_index fails as a corrupt chunk would.
 * Both are atomics: the loader's worker threads read them while the test changes them. */
#ifndef PB_LOADER_READ_HOOK_H
#define PB_LOADER_READ_HOOK_H

#include <stdatomic.h>
#include <time.h>

#include "formats/raw/raw.h"
#include "pipebench/core.h"

static atomic_llong test_fail_index = -1;
static atomic_int test_read_delay_us;

static int test_read_hook(const char *path, int64_t i, struct pb_error *err) {
  int us = atomic_load(&test_read_delay_us);
  if (us > 0) {
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000L};
    nanosleep(&ts, NULL);
  }
  if (i == atomic_load(&test_fail_index))
    return pb_error_set(err, PB_ECODEC, "%s: chunk 0 of image %lld: zstd: corrupted block", path,
                        (long long)i);
  return PB_OK;
}

#endif
