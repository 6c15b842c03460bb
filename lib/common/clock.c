/* The one clock pipebench times with: CLOCK_MONOTONIC in nanoseconds. */
#include <stdio.h>
#include <time.h>

#include "pipebench/core.h"

int64_t pb_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void pb_utc_iso8601(char *buf, size_t size) {
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}
