/* Whole-image reads and random crops of large images with N threads, each thread holding its
 * own dataset handle, as issue 16's "strongest peers, on large images" states them: per-read
 * p50/p95 and throughput, and whole-image throughput as a fraction of the memory-copy bandwidth
 * pipebench calibrate measures (one thread, or all cores), in the same run.
 *
 * usage: regions DATASET_DIR [--format NAME] [--threads 1,16] [--whole R] [--crops K]
 *                [--crop EDGE] [--seed S] [--floor 0|1]
 * One JSON object per line on stdout: the calibration first, then one per (op, threads); with
 * --floor 1, also the file floor of whole reads per thread count (see file_floor).
 *
 * The images and crops are the ones bench/large_images_peers.py reads: whole reads go through the
 * images in index order (R reads, wrapping; R = 0, the default, means max(images, 4 x threads)
 * for each thread count, so that every thread reads several whole images, one at a time, as
 * the loader's workers do: with fewer reads than threads, some threads would sit idle and the
 * throughput would count them); crop k of every run is image a % n at y = b % (H -
 * EDGE + 1), x = c % (W - EDGE + 1), all T, C and Z, where a, b, c are splitmix64 steps from
 * seed + (k + 1) * 0x9E3779B97F4A7C15. Reads are handed out from one shared counter. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipebench/calibrate.h"
#include "pipebench/format.h"
#include "pipebench/stats.h"

#include "data_files.h"

static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

typedef struct job {
  const char *path, *format;
  int op; /* 0 whole, 1 crop */
  int64_t n_images, reads, edge;
  uint64_t seed;
  pb_image_meta *meta; /* per image */
  int64_t next;        /* shared counter */
  int64_t bytes;       /* bytes delivered (atomic) */
  double *lat;         /* seconds per read, by read number */
  pthread_barrier_t go;
  int failed;
} job;

static void region_full(pb_region *r, const int64_t shape[PB_NDIM]) {
  for (int d = 0; d < PB_NDIM; d++) {
    r->start[d] = 0;
    r->count[d] = shape[d];
  }
}

static void crop_of(const job *j, int64_t k, int64_t *img, pb_region *r) {
  uint64_t a = mix(j->seed + (uint64_t)(k + 1) * 0x9E3779B97F4A7C15ull), b = mix(a), c = mix(b);
  *img = (int64_t)(a % (uint64_t)j->n_images);
  const pb_image_meta *m = &j->meta[*img];
  region_full(r, m->shape);
  int64_t ey = j->edge < m->shape[PB_Y] ? j->edge : m->shape[PB_Y];
  int64_t ex = j->edge < m->shape[PB_X] ? j->edge : m->shape[PB_X];
  r->start[PB_Y] = (int64_t)(b % (uint64_t)(m->shape[PB_Y] - ey + 1));
  r->start[PB_X] = (int64_t)(c % (uint64_t)(m->shape[PB_X] - ex + 1));
  r->count[PB_Y] = ey;
  r->count[PB_X] = ex;
}

static void *worker(void *arg) {
  job *j = arg;
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  int ok = pb_dataset_open(j->path, j->format, &ds, &err) == PB_OK;
  size_t cap = 0;
  for (int64_t i = 0; ok && i < j->n_images; i++) { /* every image's metadata, before timing */
    pb_image_meta m;
    ok = pb_dataset_meta(ds, i, &m, &err) == PB_OK;
    if (ok && pb_image_bytes(&m) > cap) cap = pb_image_bytes(&m);
  }
  unsigned char *buf = ok ? malloc(cap) : NULL;
  if (buf != NULL) memset(buf, 0, cap); /* fault the pages in before timing */
  if (ok && buf == NULL) snprintf(err.message, sizeof err.message, "out of memory");
  ok = ok && buf != NULL;
  if (!ok) __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
  pthread_barrier_wait(&j->go);
  for (;;) {
    int64_t k = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
    if (k >= j->reads || !ok || __atomic_load_n(&j->failed, __ATOMIC_RELAXED)) break;
    int64_t img;
    pb_region r;
    if (j->op == 0) {
      img = k % j->n_images;
      region_full(&r, j->meta[img].shape);
    } else {
      crop_of(j, k, &img, &r);
    }
    size_t n = pb_dtype_size(j->meta[img].dtype);
    for (int d = 0; d < PB_NDIM; d++) n *= (size_t)r.count[d];
    int64_t t0 = pb_now_ns();
    ok = pb_dataset_read_region(ds, img, &r, buf, cap, NULL, &err) == PB_OK;
    j->lat[k] = (double)(pb_now_ns() - t0) / 1e9;
    __atomic_fetch_add(&j->bytes, (int64_t)n, __ATOMIC_RELAXED);
  }
  if (!ok) {
    fprintf(stderr, "regions: %s\n", err.message);
    __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
  }
  free(buf);
  pb_dataset_free(ds);
  return NULL;
}

/* Runs one (op, threads) measurement and prints its line; 0 on success. */
static int measure(job *j, int threads, const pb_calibration *cal) {
  j->next = 0;
  j->bytes = 0;
  j->failed = 0;
  j->lat = calloc((size_t)j->reads, sizeof *j->lat);
  pthread_t *tid = calloc((size_t)threads, sizeof *tid);
  if (j->lat == NULL || tid == NULL) return 1;
  pthread_barrier_init(&j->go, NULL, (unsigned)threads + 1);
  int started = 0;
  for (int t = 0; t < threads; t++) started += pthread_create(&tid[t], NULL, worker, j) == 0;
  if (started != threads) {
    fprintf(stderr, "regions: cannot start %d threads\n", threads);
    exit(2);
  }
  pthread_barrier_wait(&j->go);
  int64_t t0 = pb_now_ns();
  for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
  double wall = (double)(pb_now_ns() - t0) / 1e9;
  pthread_barrier_destroy(&j->go);
  free(tid);
  int rc = j->failed;
  if (!rc) {
    pb_summary s;
    pb_summarize(j->lat, (size_t)j->reads, &s);
    double mbps = (double)j->bytes / wall / 1e6;
    double mc = threads > 1 ? cal->memcpy_mt_gbps.value : cal->memcpy_gbps.value;
    printf("{\"tool\":\"pipebench\",\"format\":\"%s\",\"op\":\"%s\",\"threads\":%d,\"n\":%lld,"
           "\"p50_us\":%.1f,\"p95_us\":%.1f,\"ops_per_s\":%.2f,\"mb_per_s\":%.1f,"
           "\"memcpy_fraction\":%.4f,\"cv\":%.3f}\n",
           j->format, j->op == 0 ? "whole" : "crop", threads, (long long)j->reads, s.p50 * 1e6,
           s.p95 * 1e6, (double)j->reads / wall, mbps, mbps / 1e3 / mc, s.cv);
    fflush(stdout);
  }
  free(j->lat);
  j->lat = NULL;
  return rc;
}

/* The floor of a whole-image read for formats of many files: opening, reading (into a small
 * buffer each thread reuses) and closing every data file under the dataset folder (metadata,
 * i.e. names starting with '.' and *.json, excluded), with the same threads; no parsing. */
static perf_files g_files;
static int64_t g_next_file, g_floor_bytes;

static void *floor_worker(void *arg) {
  pthread_barrier_t *go = arg;
  size_t cap = (size_t)1 << 20;
  char *buf = malloc(cap);
  pthread_barrier_wait(go);
  int64_t got = 0;
  for (;;) {
    int64_t k = __atomic_fetch_add(&g_next_file, 1, __ATOMIC_RELAXED);
    if (k >= (int64_t)g_files.n || buf == NULL) break;
    int64_t n = perf_read_whole(g_files.paths[k], buf, cap);
    if (n > 0) got += n;
  }
  __atomic_fetch_add(&g_floor_bytes, got, __ATOMIC_RELAXED);
  free(buf);
  return NULL;
}

static void file_floor(const char *path, int threads) {
  if (g_files.n == 0 && perf_files_list(path, &g_files) != 0) return;
  if (g_files.n == 0) return;
  pthread_t *tid = calloc((size_t)threads, sizeof *tid);
  pthread_barrier_t go;
  if (tid == NULL) return;
  pthread_barrier_init(&go, NULL, (unsigned)threads + 1);
  g_next_file = g_floor_bytes = 0;
  int started = 0;
  for (int t = 0; t < threads; t++) started += pthread_create(&tid[t], NULL, floor_worker, &go) == 0;
  if (started != threads) {
    fprintf(stderr, "regions: cannot start %d threads\n", threads);
    exit(2);
  }
  pthread_barrier_wait(&go);
  int64_t t0 = pb_now_ns();
  for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
  double wall = (double)(pb_now_ns() - t0) / 1e9;
  pthread_barrier_destroy(&go);
  free(tid);
  printf("{\"tool\":\"file-floor\",\"op\":\"whole\",\"threads\":%d,\"files\":%zu,"
         "\"mb_per_s\":%.1f}\n",
         threads, g_files.n, (double)g_floor_bytes / wall / 1e6);
  fflush(stdout);
}

static void usage(void) {
  fprintf(stderr, "usage: regions DATASET_DIR [--format NAME] [--threads 1,16] [--whole R] "
                  "[--crops K] [--crop EDGE] [--seed S] [--floor 0|1]\n");
  exit(1);
}

int main(int argc, char **argv) {
  if (argc < 2 || argv[1][0] == '-') usage();
  job j = {.path = argv[1], .edge = 256, .seed = 42};
  const char *threads = NULL;
  int64_t whole = 0, crops = 1000;
  int with_floor = 0;
  for (int i = 2; i < argc; i++) {
    if (i + 1 >= argc) usage();
    const char *k = argv[i], *v = argv[++i];
    if (strcmp(k, "--format") == 0) j.format = v;
    else if (strcmp(k, "--threads") == 0) threads = v;
    else if (strcmp(k, "--whole") == 0) whole = atoll(v);
    else if (strcmp(k, "--crops") == 0) crops = atoll(v);
    else if (strcmp(k, "--crop") == 0) j.edge = atoll(v);
    else if (strcmp(k, "--seed") == 0) j.seed = strtoull(v, NULL, 10);
    else if (strcmp(k, "--floor") == 0) with_floor = atoi(v);
    else usage();
  }
  if (j.edge < 1 || crops < 0 || whole < 0) usage();
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  if (pb_dataset_open(j.path, j.format, &ds, &err) != PB_OK) {
    fprintf(stderr, "regions: %s\n", err.message);
    return 2;
  }
  if (j.format == NULL) j.format = pb_dataset_format(ds);
  j.n_images = pb_dataset_count(ds);
  j.meta = calloc((size_t)(j.n_images > 0 ? j.n_images : 1), sizeof *j.meta);
  int rc = j.n_images > 0 && j.meta != NULL ? PB_OK : PB_EFORMAT;
  for (int64_t i = 0; rc == PB_OK && i < j.n_images; i++) rc = pb_dataset_meta(ds, i, &j.meta[i], &err);
  /* Warm cache: one untimed pass over every image, as the peers get. */
  size_t cap = 0;
  for (int64_t i = 0; rc == PB_OK && i < j.n_images; i++)
    if (pb_image_bytes(&j.meta[i]) > cap) cap = pb_image_bytes(&j.meta[i]);
  void *buf = rc == PB_OK ? malloc(cap) : NULL;
  for (int64_t i = 0; rc == PB_OK && buf != NULL && i < j.n_images; i++)
    rc = pb_dataset_read(ds, i, buf, cap, NULL, &err);
  free(buf);
  pb_dataset_free(ds);
  if (rc != PB_OK) {
    fprintf(stderr, "regions: %s: %s\n", j.path, err.message[0] ? err.message : "no images");
    return 2;
  }
  pb_calibrate_params cp = PB_CALIBRATE_PARAMS_DEFAULTS;
  cp.memory_bytes = cp.file_bytes = (size_t)256 << 20;
  cp.rounds = 3;
  cp.matmul = 0;
  cp.gpu = 0;         /* the memory and file limits only */
  cp.jpeg_images = 0;
  pb_calibration cal;
  if (pb_calibrate(&cp, &cal, &err) != PB_OK) {
    fprintf(stderr, "regions: %s\n", err.message);
    return 2;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  printf("{\"memcpy_gbps\":%.3f,\"memcpy_mt_gbps\":%.3f,\"memcpy_threads\":%d,\"cores\":%ld,"
         "\"images\":%lld,\"image_bytes\":%zu}\n",
         cal.memcpy_gbps.value, cal.memcpy_mt_gbps.value, cal.memcpy_threads, cores,
         (long long)j.n_images, pb_image_bytes(&j.meta[0]));
  char list[256];
  if (threads == NULL) snprintf(list, sizeof list, "1,%ld", cores);
  else snprintf(list, sizeof list, "%s", threads);
  int fails = 0;
  for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok != NULL;
       tok = strtok_r(NULL, ",", &save)) {
    int t = atoi(tok);
    if (t < 1) usage();
    j.op = 0;
    j.reads = whole > 0 ? whole : j.n_images > 4 * (int64_t)t ? j.n_images : 4 * (int64_t)t;
    fails += measure(&j, t, &cal);
    if (with_floor) file_floor(j.path, t);
    j.op = 1;
    j.reads = crops;
    if (crops > 0) fails += measure(&j, t, &cal);
  }
  free(j.meta);
  perf_files_free(&g_files);
  return fails ? 2 : 0;
}
