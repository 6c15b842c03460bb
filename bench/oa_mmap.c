/* Direct page reads of OME-Arrow files with the file mapped (PB_OA_MMAP=1) against pages read
 * with pread (the default), side by side in one process: the dataset is opened twice, once
 * each way, and seeded random single-image reads (warm cache) run in interleaved rounds, the
 * order of the two modes alternating from round to round. Every read's pixels are compared
 * between the two handles. Prints per mode the p50 and p95 per read (microseconds, n beside
 * them), then pread/mapped as a ratio of medians with its 99% bootstrap interval and the
 * verdict of measuring.md's rule (factor 1.1).
 * usage: oa_mmap DATASET [reads_per_round] [rounds] -> one line of JSON */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipebench/format.h"
#include "pipebench/stats.h"

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t next_rand(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static pb_dataset *open_mode(const char *path, int mapped) {
  struct pb_error err = {0};
  pb_dataset *ds = NULL;
  setenv("PB_OA_MMAP", mapped ? "1" : "0", 1); /* read once, at open */
  int rc = pb_dataset_open(path, NULL, &ds, &err);
  unsetenv("PB_OA_MMAP");
  if (rc != 0) {
    fprintf(stderr, "oa_mmap: %s\n", err.message);
    exit(2);
  }
  return ds;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 4) {
    fprintf(stderr, "usage: oa_mmap DATASET [reads_per_round] [rounds]\n");
    return 1;
  }
  const char *path = argv[1];
  long reads = argc > 2 ? strtol(argv[2], NULL, 10) : 2000;
  long rounds = argc > 3 ? strtol(argv[3], NULL, 10) : 5;
  if (reads < 1 || rounds < 1) {
    fprintf(stderr, "oa_mmap: reads and rounds must be positive\n");
    return 1;
  }
  pb_dataset *ds[2] = {open_mode(path, 1), open_mode(path, 0)}; /* 0: mapped, 1: pread */
  int64_t n = pb_dataset_count(ds[0]);
  struct pb_error err = {0};
  size_t cap = 0;
  for (int64_t i = 0; i < n; i++) { /* warm: every image once, both ways */
    pb_image_meta m;
    if (pb_dataset_meta(ds[0], i, &m, &err) != 0) {
      fprintf(stderr, "oa_mmap: %s\n", err.message);
      return 2;
    }
    if (pb_image_bytes(&m) > cap) cap = pb_image_bytes(&m);
  }
  unsigned char *buf[2] = {malloc(cap), malloc(cap)};
  size_t total = (size_t)reads * (size_t)rounds;
  double *t[2] = {malloc(total * sizeof(double)), malloc(total * sizeof(double))};
  if (buf[0] == NULL || buf[1] == NULL || t[0] == NULL || t[1] == NULL) {
    fprintf(stderr, "oa_mmap: out of memory\n");
    return 2;
  }
  for (int mode = 0; mode < 2; mode++)
    for (int64_t i = 0; i < n; i++)
      if (pb_dataset_read(ds[mode], i, buf[mode], cap, NULL, &err) != 0) {
        fprintf(stderr, "oa_mmap: %s\n", err.message);
        return 2;
      }
  size_t got[2] = {0, 0};
  for (long r = 0; r < rounds; r++) {
    for (int o = 0; o < 2; o++) {
      int mode = (int)((r + o) % 2);
      uint64_t seed = 0x5eed0000u + (uint64_t)r; /* the same images both ways in a round */
      for (long k = 0; k < reads; k++) {
        int64_t i = (int64_t)(next_rand(&seed) % (uint64_t)n);
        pb_image_meta m;
        if (pb_dataset_meta(ds[mode], i, &m, &err) != 0) {
          fprintf(stderr, "oa_mmap: %s\n", err.message);
          return 2;
        }
        int64_t t0 = now_ns();
        int rc = pb_dataset_read(ds[mode], i, buf[mode], cap, NULL, &err);
        t[mode][got[mode]++] = (double)(now_ns() - t0) / 1e3;
        if (rc != 0) {
          fprintf(stderr, "oa_mmap: %s\n", err.message);
          return 2;
        }
        if (o == 1 && k == reads - 1) { /* the same image was read last the other way too */
          if (memcmp(buf[0], buf[1], pb_image_bytes(&m)) != 0) {
            fprintf(stderr, "oa_mmap: %s: image %lld differs between mapped and pread\n", path,
                    (long long)i);
            return 2;
          }
        }
      }
    }
  }
  pb_ratio ratio;
  pb_ratio_of(t[1], got[1], t[0], got[0], 42, 0, &ratio);
  double p = NAN;
  pb_verdict v = pb_compare(t[1], got[1], t[0], got[0], 1.1, &p);
  double p50[2], p95[2];
  for (int mode = 0; mode < 2; mode++) {
    qsort(t[mode], got[mode], sizeof(double), cmp_d);
    p50[mode] = pb_percentile_sorted(t[mode], got[mode], 0.50);
    p95[mode] = pb_percentile_sorted(t[mode], got[mode], 0.95);
  }
  printf("{\"dataset\":\"%s\",\"format\":\"%s\",\"images\":%lld,\"rounds\":%ld,\"n\":%zu,"
         "\"mapped_p50_us\":%.2f,\"mapped_p95_us\":%.2f,\"pread_p50_us\":%.2f,"
         "\"pread_p95_us\":%.2f,\"pread_over_mapped\":%.3f,\"ratio_lo\":%.3f,"
         "\"ratio_hi\":%.3f,\"mann_whitney_p\":%.3g,\"verdict\":\"%s\"}\n",
         path, pb_dataset_format(ds[0]), (long long)n, rounds, got[0], p50[0], p95[0], p50[1],
         p95[1], ratio.ratio, ratio.lo, ratio.hi, p, pb_verdict_name(v));
  for (int mode = 0; mode < 2; mode++) {
    free(t[mode]);
    free(buf[mode]);
    pb_dataset_free(ds[mode]);
  }
  return 0;
}
