/* Random single-image reads and sequential bulk decode per format, as issue targets state them:
 * p50/p95 microseconds and images/s for seeded random reads (warm cache), and sequential decode
 * MB/s as a fraction of the memory-copy limit measured in the same run, and, for formats with
 * one file per image, as a fraction of merely opening, reading and closing those files.
 * usage: bench_formats DATASET_DIR [reads] -> one JSON object per format on stdout */
#define _XOPEN_SOURCE 700
#include <fcntl.h>
#include <zstd.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipebench/calibrate.h"
#include "pipebench/format.h"
#include "pipebench/gen.h"
#include "pipebench/stats.h"

#include "data_files.h"

/* The machine's own limit for formats that keep one file per image (or per chunk): opening,
 * reading and closing the same files with no parsing at all. Collected here: every regular file
 * under the dataset folder except metadata (names starting with '.', and *.json), i.e. the TIFF
 * files or the Zarr chunk files the readers open once per image. */

/* Seconds for one pass of open + read everything + close over the files, best of three passes
 * (the page cache is warm after the format's own passes). 0 when not applicable. */
static double file_floor(const char *path, size_t *n_files) {
  struct stat st;
  *n_files = 0;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
  perf_files files = {0};
  if (perf_files_list(path, &files) != 0 || files.n == 0) {
    perf_files_free(&files);
    return 0;
  }
  size_t cap = (size_t)1 << 20;
  char *buf = malloc(cap);
  double best = 0;
  for (int pass = 0; pass < 3 && buf != NULL; pass++) {
    int64_t t0 = pb_now_ns();
    for (size_t i = 0; i < files.n; i++) (void)perf_read_whole(files.paths[i], buf, cap);
    double s = (double)(pb_now_ns() - t0) / 1e9;
    if (best == 0 || s < best) best = s;
  }
  free(buf);
  *n_files = files.n;
  perf_files_free(&files);
  return best;
}

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
    size_t n_files = 0;
    double floor_s = file_floor(path, &n_files);
    if (n_files < (size_t)n) floor_s = 0; /* many images per file: no per-file floor */
    double floor_mbps = floor_s > 0 ? (double)bytes * (double)n / floor_s / 1e6 : 0.0;
    printf("{\"format\":\"%s\",\"reads\":%d,\"p50_us\":%.2f,\"p95_us\":%.2f,\"p99_us\":%.2f,"
           "\"images_per_s\":%.1f,\"seq_mb_per_s\":%.1f,\"seq_memcpy_fraction\":%.4f,"
           "\"image_bytes\":%zu,\"files\":%zu,\"file_floor_mb_per_s\":%.1f,"
           "\"seq_file_floor_fraction\":%.4f}\n",
           format, reads, s.p50 * 1e6, s.p95 * 1e6, s.p99 * 1e6, 1.0 / s.mean, mbps,
           mbps / 1e3 / memcpy_gbps, bytes, n_files, floor_mbps,
           floor_mbps > 0 ? mbps / floor_mbps : 0.0);
  }
  free(order);
  free(lat);
  free(buf);
  pb_dataset_free(ds);
  return rc != 0;
}

/* The codec's own floor for a zstd-compressed format: one image's pixel bytes (from the
 * dataset's raw copy) compressed with zstd at level 3, the level DuckDB's Parquet writer uses,
 * and decompressed from memory with a reused context, nothing else. p50 over `reads`
 * decompressions of up to 512 images; 0 when the dataset has no raw copy. */
static void zstd_floor(const char *dir, int reads, double *p50_us, double *ratio) {
  char path[4096];
  pb_gen_format_path(dir, "raw", path, sizeof path);
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  if (access(path, R_OK) != 0 || pb_dataset_open(path, "raw", &ds, &err) != PB_OK) return;
  int64_t n = pb_dataset_count(ds);
  if (n > 512) n = 512;
  pb_image_meta m;
  if (n < 1 || reads < 1 || pb_dataset_meta(ds, 0, &m, &err) != PB_OK) {
    pb_dataset_free(ds);
    return;
  }
  size_t bytes = pb_image_bytes(&m), bound = ZSTD_compressBound(bytes);
  unsigned char *raw = malloc(bytes), *out = malloc(bytes);
  unsigned char **comp = calloc((size_t)n, sizeof *comp);
  size_t *clen = calloc((size_t)n, sizeof *clen);
  double *lat = calloc((size_t)reads, sizeof *lat);
  ZSTD_DCtx *dc = ZSTD_createDCtx();
  int ok = raw && out && comp && clen && lat && dc;
  size_t in_total = 0, out_total = 0;
  for (int64_t i = 0; i < n && ok; i++) {
    comp[i] = malloc(bound);
    ok = comp[i] != NULL && pb_dataset_read(ds, i, raw, bytes, NULL, &err) == PB_OK;
    if (ok) clen[i] = ZSTD_compress(comp[i], bound, raw, bytes, 3);
    ok = ok && !ZSTD_isError(clen[i]);
    in_total += bytes;
    out_total += clen[i];
  }
  for (int k = 0; k < reads && ok; k++) {
    int64_t i = k % n, t0 = pb_now_ns();
    size_t got = ZSTD_decompressDCtx(dc, out, bytes, comp[i], clen[i]);
    lat[k] = (double)(pb_now_ns() - t0) / 1e9;
    ok = got == bytes;
  }
  if (ok) {
    pb_summary s;
    pb_summarize(lat, (size_t)reads, &s);
    *p50_us = s.p50 * 1e6;
    *ratio = (double)in_total / (double)out_total;
  }
  for (int64_t i = 0; comp != NULL && i < n; i++) free(comp[i]);
  free(comp);
  free(clen);
  free(lat);
  free(raw);
  free(out);
  ZSTD_freeDCtx(dc);
  pb_dataset_free(ds);
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
  cp.gpu = 0;         /* the memory and file limits only */
  cp.jpeg_images = 0;
  pb_calibration cal;
  struct pb_error err = {{0}};
  if (pb_calibrate(&cp, &cal, &err) != PB_OK) {
    fprintf(stderr, "bench_formats: %s\n", err.message);
    return 1;
  }
  double zstd_us = 0, zstd_ratio = 0;
  zstd_floor(argv[1], reads, &zstd_us, &zstd_ratio);
  printf("{\"memcpy_gbps\":%.3f,\"memcpy_1thread_gbps\":%.3f,\"zstd_image_p50_us\":%.2f,"
         "\"zstd_image_ratio\":%.3f}\n",
         cal.memcpy_mt_gbps.value, cal.memcpy_gbps.value, zstd_us, zstd_ratio);
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
