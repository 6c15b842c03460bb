/* Batch assembly of native batches (the images' own pixels) against float32 batches and
 * against a plain memcpy of the same bytes, in one process, rounds interleaved.
 *   loader_native DATASET [BATCH] [ROUNDS]
 * Configurations: dtype native and float32, cache preload (assembly only) and none (the
 * format's read included), workers 0 and 2; the memcpy limit copies batch-sized runs of the
 * decoded pixels (held in one buffer, like the preload cache) into one reused buffer. Rounds
 * are interleaved and each starts at another configuration; throughputs are medians over
 * rounds, ratios are of total times (per-round ratios beside them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipebench/format.h"
#include "pipebench/loader.h"

enum { MAX_ROUNDS = 101, NCONF = 8 };

typedef struct conf {
  pb_out_dtype out;
  pb_cache_mode cache;
  int workers;
  pb_loader *l;
  double sps[MAX_ROUNDS];
  size_t batch_bytes;
} conf;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const double *v, int n) {
  double s[MAX_ROUNDS];
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* a against b, from samples/s per round: out[0] the ratio of total times over all rounds
 * (robust to a round that a neighbour's burst slowed), out[1] the median of the per-round
 * ratios, out[2] and out[3] their extremes. */
static void ratio(const double *a, const double *b, int n, double out[4]) {
  double r[MAX_ROUNDS], ta = 0, tb = 0;
  for (int i = 0; i < n; i++) {
    r[i] = a[i] / b[i];
    ta += 1.0 / a[i];
    tb += 1.0 / b[i];
  }
  out[0] = tb / ta;
  out[1] = median(r, n);
  qsort(r, (size_t)n, sizeof *r, cmp_double);
  out[2] = r[0];
  out[3] = r[n - 1];
}

static int fail(const char *what, const struct pb_error *err) {
  fprintf(stderr, "loader_native: %s: %s\n", what, err->message);
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 4) {
    fprintf(stderr, "usage: loader_native DATASET [BATCH] [ROUNDS]\n");
    return 1;
  }
  const char *path = argv[1];
  int batch = argc > 2 ? atoi(argv[2]) : 256, rounds = argc > 3 ? atoi(argv[3]) : 15;
  if (batch < 1 || rounds < 1 || rounds >= MAX_ROUNDS) {
    fprintf(stderr, "loader_native: BATCH must be >= 1 and ROUNDS in [1, %d]\n", MAX_ROUNDS - 1);
    return 1;
  }
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  if (pb_dataset_open(path, NULL, &ds, &err) != PB_OK) return fail(path, &err);
  int64_t n = pb_dataset_count(ds);
  pb_image_meta m;
  if (n < 1 || pb_dataset_meta(ds, 0, &m, &err) != PB_OK) {
    pb_dataset_free(ds);
    return fail(path, &err);
  }
  size_t img = pb_image_bytes(&m);
  unsigned char *all = pb_alloc((size_t)n * img), *dst = pb_alloc((size_t)batch * img);
  if (all == NULL || dst == NULL) {
    fprintf(stderr, "loader_native: out of memory for %lld images\n", (long long)n);
    return 2;
  }
  for (int64_t i = 0; i < n; i++)
    if (pb_dataset_read(ds, i, all + (size_t)i * img, img, NULL, &err) != PB_OK) {
      pb_dataset_free(ds);
      return fail(path, &err);
    }
  pb_dataset_free(ds);
  memset(dst, 0, (size_t)batch * img); /* faulted in once, like the loader's recycled buffers */

  conf cs[NCONF];
  int nc = 0;
  const pb_cache_mode caches[] = {PB_CACHE_PRELOAD, PB_CACHE_NONE};
  for (int c = 0; c < 2; c++)
    for (int w = 0; w <= 2; w += 2)
      for (int o = 0; o < 2; o++) {
        conf *k = &cs[nc++];
        memset(k, 0, sizeof *k);
        k->out = o == 0 ? PB_OUT_NATIVE : PB_OUT_FLOAT32;
        k->cache = caches[c];
        k->workers = w;
        pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
        p.batch_size = batch;
        p.workers = w;
        p.cache = k->cache;
        p.out_dtype = k->out;
        if (pb_loader_new(path, &p, &k->l, &err) != PB_OK) return fail(path, &err);
      }
  double memcpy_sps[MAX_ROUNDS];
  /* Round -1 warms the caches and the batch pools. Each round starts at another
   * configuration, so none always runs right after the same neighbour (whose data would be
   * the one left in the caches). */
  for (int r = -1; r < rounds; r++) {
    for (int q = 0; q <= nc; q++) {
      int c = (q + (r < 0 ? 0 : r)) % (nc + 1);
      if (c == nc) {
        int64_t t0 = pb_now_ns();
        for (int64_t i = 0; i < n; i += batch) {
          int64_t k = n - i < batch ? n - i : batch;
          memcpy(dst, all + (size_t)i * img, (size_t)k * img);
          __asm__ volatile("" : : "r"(dst) : "memory"); /* the copy is not dead */
        }
        if (r >= 0) memcpy_sps[r] = (double)n / ((double)(pb_now_ns() - t0) * 1e-9);
        continue;
      }
      conf *k = &cs[c];
      int64_t t0 = pb_now_ns(), samples = 0;
      if (pb_loader_reset(k->l, r + 1, &err) != PB_OK) return fail("reset", &err);
      for (;;) {
        pb_batch *b = NULL;
        if (pb_loader_next(k->l, &b, &err) != PB_OK) return fail("next", &err);
        if (b == NULL) break;
        samples += b->shape[0];
        if (b->nbytes > k->batch_bytes) k->batch_bytes = b->nbytes;
        pb_batch_free(b);
      }
      if (r >= 0) k->sps[r] = (double)samples / ((double)(pb_now_ns() - t0) * 1e-9);
    }
  }

  printf("%lld images %lldx%lldx%lld %s (%zu bytes each), batch %d, %d rounds (medians)\n",
         (long long)n, (long long)m.shape[PB_C], (long long)m.shape[PB_Y],
         (long long)m.shape[PB_X], pb_dtype_name(m.dtype), img, batch, rounds);
  printf("%-34s %12s %12s %8s\n", "path", "bytes/batch", "samples/s", "GB/s");
  double ms = median(memcpy_sps, rounds);
  printf("%-34s %12zu %12.0f %8.2f\n", "memcpy of the pixels", (size_t)batch * img, ms,
         ms * (double)img * 1e-9);
  for (int c = 0; c < nc; c++) {
    conf *k = &cs[c];
    char name[64];
    snprintf(name, sizeof name, "loader %s %s w%d", pb_out_dtype_name(k->out),
             k->cache == PB_CACHE_PRELOAD ? "preload" : "none", k->workers);
    double s = median(k->sps, rounds);
    printf("%-34s %12zu %12.0f %8.2f\n", name, k->batch_bytes, s,
           s * (double)k->batch_bytes / batch * 1e-9);
  }
  printf("\n");
  printf("ratios: over all rounds' time (per-round median, min-max)\n");
  for (int c = 0; c < nc; c += 2) {
    double r[4];
    ratio(cs[c].sps, cs[c + 1].sps, rounds, r);
    printf("native vs float32, %s w%d: %.2fx samples/s (%.2f, %.2f-%.2f), %zu vs %zu bytes "
           "per batch\n",
           cs[c].cache == PB_CACHE_PRELOAD ? "preload" : "none", cs[c].workers, r[0], r[1], r[2],
           r[3], cs[c].batch_bytes, cs[c + 1].batch_bytes);
  }
  double r[4];
  ratio(cs[0].sps, memcpy_sps, rounds, r);
  printf("native preload w0 of the memcpy limit: %.2fx (%.2f, %.2f-%.2f)  %s (>= 0.9x)\n", r[0],
         r[1], r[2], r[3], r[0] >= 0.9 ? "met" : "MISSED");
  for (int c = 0; c < nc; c++) pb_loader_free(cs[c].l);
  pb_free(all, (size_t)n * img);
  pb_free(dst, (size_t)batch * img);
  return 0;
}
