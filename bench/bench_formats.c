/* Random single-image reads and sequential bulk decode per format, as issue targets state them:
 * p50/p95 microseconds and images/s for seeded random reads (warm cache), and sequential decode
 * MB/s as a fraction of the memory-copy limit measured in the same run.
 * usage: bench_formats DATASET_DIR [reads] -> one JSON object per format on stdout */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipebench/calibrate.h"
#include "pipebench/format.h"
#include "pipebench/gen.h"
#include "pipebench/stats.h"

static int bench_one(const char *format, const char *path, int reads, double memcpy_gbps) {
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  if (pb_dataset_open(path, format, &ds, &err) != PB_OK) {
    fprintf(stderr, "bench_formats: %s\n", err.message);
    return 1;
  }
  int64_t n = pb_dataset_count(ds);
  pb_image_meta m;
  if (pb_dataset_meta(ds, 0, &m, &err) != PB_OK) {
    fprintf(stderr, "bench_formats: %s\n", err.message);
    pb_dataset_free(ds);
    return 1;
  }
  size_t bytes = pb_image_bytes(&m);
  void *buf = malloc(bytes);
  double *lat = calloc((size_t)reads, sizeof *lat);
  int64_t *order = calloc((size_t)n, sizeof *order);
  for (int64_t i = 0; i < n; i++) order[i] = i;
  pb_rng rng;
  pb_rng_init(&rng, 42);
  pb_rng_shuffle_i64(&rng, order, (size_t)n);
  int rc = 0;
  /* Warm-up: one pass over everything, so the page cache holds the files (warm cache). */
  for (int64_t i = 0; i < n && rc == 0; i++) rc = pb_dataset_read(ds, i, buf, bytes, NULL, &err);
  for (int k = 0; k < reads && rc == 0; k++) {
    int64_t t0 = pb_now_ns();
    rc = pb_dataset_read(ds, order[k % n], buf, bytes, NULL, &err);
    lat[k] = (double)(pb_now_ns() - t0) / 1e9;
  }
  int64_t t0 = pb_now_ns();
  for (int64_t i = 0; i < n && rc == 0; i++) rc = pb_dataset_read(ds, i, buf, bytes, NULL, &err);
  double seq_s = (double)(pb_now_ns() - t0) / 1e9;
  if (rc != 0) {
    fprintf(stderr, "bench_formats: %s: %s\n", format, err.message);
  } else {
    pb_summary s;
    pb_summarize(lat, (size_t)reads, &s);
    double mbps = (double)bytes * (double)n / seq_s / 1e6;
    printf("{\"format\":\"%s\",\"reads\":%d,\"p50_us\":%.2f,\"p95_us\":%.2f,\"p99_us\":%.2f,"
           "\"images_per_s\":%.1f,\"seq_mb_per_s\":%.1f,\"seq_memcpy_fraction\":%.4f}\n",
           format, reads, s.p50 * 1e6, s.p95 * 1e6, s.p99 * 1e6, 1.0 / s.mean, mbps,
           mbps / 1e3 / memcpy_gbps);
  }
  free(order);
  free(lat);
  free(buf);
  pb_dataset_free(ds);
  return rc != 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_formats DATASET_DIR [reads] [formats]\n");
    return 1;
  }
  int reads = argc > 2 ? atoi(argv[2]) : 2000;
  const char *only = argc > 3 ? argv[3] : NULL;
  pb_calibrate_params cp = PB_CALIBRATE_PARAMS_DEFAULTS;
  cp.memory_bytes = cp.file_bytes = (size_t)128 << 20;
  cp.rounds = 3;
  cp.matmul = 0;
  pb_calibration cal;
  struct pb_error err = {{0}};
  if (pb_calibrate(&cp, &cal, &err) != PB_OK) {
    fprintf(stderr, "bench_formats: %s\n", err.message);
    return 1;
  }
  printf("{\"memcpy_gbps\":%.3f,\"memcpy_1thread_gbps\":%.3f}\n", cal.memcpy_mt_gbps.value,
         cal.memcpy_gbps.value);
  int fails = 0;
  for (int i = 0; i < pb_format_count(); i++) {
    const pb_format_info *f = pb_format_at(i);
    if (!f->can_read) continue;
    if (only != NULL && strstr(only, f->name) == NULL) continue;
    char path[4096];
    pb_gen_format_path(argv[1], f->name, path, sizeof path);
    FILE *probe = fopen(path, "r");
    if (probe == NULL) continue;
    fclose(probe);
    fails += bench_one(f->name, path, reads, cal.memcpy_gbps.value);
  }
  return fails != 0;
}
