/* The loader's reader team (reads_in_flight): a batch's samples read at once by reader threads
 * give the same batches as one read after another; the reads in flight never exceed the team,
 * which both caps bound; skip_errors closes up the failed samples in order; the error of a
 * failed batch is that of its first failed sample in order. Runs under ThreadSanitizer. */
#include <stdatomic.h>
#include <time.h>

#include "formats/format_internal.h"
#include "formats/raw/raw.h"
#include "loader_test.h"

static char dir[512];
static char path37[600]; /* 37 uint16 images, 2 channels, 6 x 5 */

/* The raw backend's test hook: counts reads in flight (the most at once in peak), sleeps
 * delay_us in each, and fails every image whose index is in the fail set (a bit per index). */
static atomic_int in_flight, peak, delay_us;
static atomic_ullong fail_bits;

static int hook(const char *path, int64_t i, struct pb_error *err) {
  int now = atomic_fetch_add(&in_flight, 1) + 1;
  for (int p = atomic_load(&peak); now > p && !atomic_compare_exchange_weak(&peak, &p, now);) {
  }
  int us = atomic_load(&delay_us);
  if (us > 0) {
    struct timespec ts = {0, (long)us * 1000L};
    nanosleep(&ts, NULL);
  }
  atomic_fetch_sub(&in_flight, 1);
  if (i < 64 && (atomic_load(&fail_bits) >> i & 1u))
    return pb_error_set(err, PB_ECODEC, "%s: chunk 0 of image %lld: zstd: corrupted block", path,
                        (long long)i);
  return PB_OK;
}

typedef struct run {
  int64_t nsamples, nbatches, skipped, errors;
  int64_t indices[512], labels[512], batch_sizes[64];
  int rcs[64];
  char first_error[1024];
  unsigned char *data;
  size_t size;
} run;

/* One epoch: every batch's indices, labels and bytes, and each batch's result. */
static void run_epoch(const pb_loader_params *p, run *r, int *reads) {
  struct pb_error err = {{0}};
  pb_loader *l = NULL;
  CHECK_OK(pb_loader_new(path37, p, &l, &err), &err);
  if (reads != NULL) *reads = pb_loader_reads_in_flight(l);
  memset(r, 0, sizeof *r);
  for (;;) {
    pb_batch *b = NULL;
    int rc = pb_loader_next(l, &b, &err);
    CHECK(r->nbatches < 64);
    r->rcs[r->nbatches] = rc;
    if (rc != PB_OK) {
      CHECK(b == NULL);
      if (r->errors++ == 0) snprintf(r->first_error, sizeof r->first_error, "%s", err.message);
      r->nbatches++;
      continue;
    }
    if (b == NULL) break;
    CHECK(r->nsamples + b->shape[0] <= 512);
    r->batch_sizes[r->nbatches++] = b->shape[0];
    memcpy(r->indices + r->nsamples, b->indices, (size_t)b->shape[0] * sizeof(int64_t));
    memcpy(r->labels + r->nsamples, b->labels, (size_t)b->shape[0] * sizeof(int64_t));
    r->nsamples += b->shape[0];
    r->skipped += b->skipped;
    r->data = realloc(r->data, r->size + b->nbytes);
    memcpy(r->data + r->size, b->data, b->nbytes);
    r->size += b->nbytes;
    CHECK(b->times.read_ns >= 0 && b->times.collate_ns >= 0);
    pb_batch_free(b);
  }
  pb_loader_free(l);
}

static void check_same(const run *a, const run *b) {
  CHECK_EQ(a->nbatches, b->nbatches);
  CHECK_EQ(a->nsamples, b->nsamples);
  CHECK_EQ(a->skipped, b->skipped);
  CHECK_EQ(a->errors, b->errors);
  CHECK(memcmp(a->rcs, b->rcs, (size_t)a->nbatches * sizeof(int)) == 0);
  CHECK(memcmp(a->batch_sizes, b->batch_sizes, sizeof a->batch_sizes) == 0);
  CHECK(memcmp(a->indices, b->indices, (size_t)a->nsamples * sizeof(int64_t)) == 0);
  CHECK(memcmp(a->labels, b->labels, (size_t)a->nsamples * sizeof(int64_t)) == 0);
  CHECK_EQ(a->size, b->size);
  CHECK(a->size == 0 || memcmp(a->data, b->data, a->size) == 0);
  CHECK_STREQ(a->first_error, b->first_error);
}

static void free_run(run *r) { free(r->data); }

/* Same batches with 1, 3 or 8 reads in flight as one read after another (a local path's
 * default), for 0 and 2 workers, float and native output, augment and a random crop. */
static void test_same_batches(void) {
  const int reads[] = {1, 3, 8}, workers[] = {0, 2};
  for (int v = 0; v < 4; v++) {
    pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
    p.batch_size = 5;
    p.shuffle = 1;
    p.seed = 7;
    if (v == 1) p.transform = PB_TRANSFORM_AUGMENT;
    if (v == 2) p.out_dtype = PB_OUT_NATIVE;
    if (v == 3) {
      p.transform = PB_TRANSFORM_RANDOM_CROP;
      p.crop_h = 4;
      p.crop_w = 3;
    }
    run ref;
    int n = 0;
    run_epoch(&p, &ref, &n);
    CHECK_EQ(n, 1); /* a local path, auto: each worker reads its own samples */
    CHECK_EQ(ref.nsamples, 37);
    for (int wi = 0; wi < 2; wi++)
      for (int ri = 0; ri < 3; ri++) {
        p.workers = workers[wi];
        p.reads_in_flight = reads[ri];
        run r;
        run_epoch(&p, &r, &n);
        int most = (workers[wi] > 0 ? workers[wi] : 1) * p.batch_size; /* samples that wait */
        CHECK_EQ(n, reads[ri] < most ? reads[ri] : most);
        check_same(&ref, &r);
        free_run(&r);
      }
    p.workers = 0;
    p.reads_in_flight = 0;
    free_run(&ref);
  }
}

/* The reads in flight at once: never more than the team (reads_in_flight, or what
 * bytes_in_flight allows at one image's bytes each), and more than one. */
static void test_bounded(void) {
  pb__raw_read_hook = hook;
  atomic_store(&delay_us, 3000);
  const size_t img = 2 * 6 * 5 * sizeof(uint16_t);
  struct {
    int workers, reads;
    int64_t bytes;
    int want;
  } cases[] = {{0, 4, 0, 4}, {2, 6, 0, 6}, {2, 16, (int64_t)(3 * img + 1), 3}, {0, 64, 0, 8}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
    p.batch_size = 8;
    p.workers = cases[c].workers;
    p.reads_in_flight = cases[c].reads;
    p.bytes_in_flight = cases[c].bytes;
    atomic_store(&peak, 0);
    run r;
    int n = 0;
    run_epoch(&p, &r, &n);
    /* {0, 64}: one batch of 8 at a time is all that can wait */
    CHECK_EQ(n, cases[c].want);
    CHECK_EQ(r.nsamples, 37);
    CHECK(atomic_load(&peak) <= cases[c].want);
    CHECK(atomic_load(&peak) >= 2);
    free_run(&r);
  }
  atomic_store(&delay_us, 0);
  pb__raw_read_hook = NULL;
}

/* Failed samples: skipped and closed up in order, or the batch's first failure (in order, not
 * in time: a later sample fails sooner) reported as one read after another reports it. */
static void test_errors(void) {
  pb__raw_read_hook = hook;
  /* batch 1 (samples 5..9 in dataset order) holds 6 and 8; batch 4 holds 22 */
  atomic_store(&fail_bits, (1ull << 6) | (1ull << 8) | (1ull << 22));
  for (int skip = 0; skip < 2; skip++)
    for (int wi = 0; wi < 2; wi++) {
      pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
      p.batch_size = 5;
      p.workers = wi * 3;
      p.skip_errors = skip;
      run ref, r;
      run_epoch(&p, &ref, NULL);
      p.reads_in_flight = 5;
      run_epoch(&p, &r, NULL);
      check_same(&ref, &r);
      if (skip) {
        CHECK_EQ(r.nsamples, 34);
        CHECK_EQ(r.skipped, 3);
        CHECK_EQ(r.batch_sizes[1], 3);
        CHECK_EQ(r.indices[5], 5);
        CHECK_EQ(r.indices[6], 7);
        CHECK_EQ(r.indices[7], 9);
      } else {
        CHECK_EQ(r.errors, 2);
        CHECK_EQ(r.rcs[1], PB_ECODEC);
        CHECK_CONTAINS(r.first_error, "sample 6 (image 'img_00006' of ");
        CHECK_CONTAINS(r.first_error, "zstd: corrupted block");
        CHECK_EQ(r.nsamples, 27);
      }
      free_run(&ref);
      free_run(&r);
    }
  atomic_store(&fail_bits, 0);
  pb__raw_read_hook = NULL;
}

/* Freed with batches waiting on the team, after a reset, and with one handed out. */
static void test_free_busy(void) {
  pb__raw_read_hook = hook;
  atomic_store(&delay_us, 2000);
  for (int take = 0; take < 3; take++) {
    pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
    p.batch_size = 3;
    p.workers = 3;
    p.prefetch = 2;
    p.reads_in_flight = 4;
    struct pb_error err = {{0}};
    pb_loader *l;
    CHECK_OK(pb_loader_new(path37, &p, &l, &err), &err);
    pb_batch *kept = NULL;
    for (int k = 0; k < take; k++) {
      pb_batch *b;
      CHECK_OK(pb_loader_next(l, &b, &err), &err);
      if (k == 0) kept = b;
      else pb_batch_free(b);
    }
    if (take == 2) CHECK_OK(pb_loader_reset(l, 1, &err), &err);
    pb_loader_free(l);
    if (kept != NULL) {
      CHECK_EQ(kept->shape[0], 3);
      pb_batch_free(kept);
    }
  }
  atomic_store(&delay_us, 0);
  pb__raw_read_hook = NULL;
}

static void test_options(void) {
  struct pb_error err = {{0}};
  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  CHECK_EQ(p.reads_in_flight, 0);
  CHECK_EQ(p.bytes_in_flight, 0);
  CHECK_OK(pb_loader_params_set(&p, "reads_in_flight", "16", &err), &err);
  CHECK_EQ(p.reads_in_flight, 16);
  CHECK_OK(pb_loader_params_set(&p, "bytes_in_flight", "64M", &err), &err);
  CHECK_EQ(p.bytes_in_flight, (int64_t)64 << 20);
  CHECK_OK(pb_loader_params_set(&p, "bytes_in_flight", "1000", &err), &err);
  CHECK_EQ(p.bytes_in_flight, 1000);
  CHECK_EQ(pb_loader_params_set(&p, "bytes_in_flight", "12X", &err), PB_EINVAL);
  CHECK_CONTAINS(err.message, "bytes_in_flight: '12X'");
  CHECK_EQ(pb_loader_params_set(&p, "reads_in_flight", "-1", &err), PB_EINVAL);
  p.reads_in_flight = -1;
  pb_loader *l = NULL;
  CHECK_EQ(pb_loader_new(path37, &p, &l, &err), PB_EINVAL);
  CHECK_CONTAINS(err.message, "reads_in_flight");
}

int main(void) {
  test_tmpdir(dir, sizeof dir);
  snprintf(path37, sizeof path37, "%s/d37.raw", dir);
  test_make_raw(path37, 37, PB_UINT16, 2, 1, 6, 5);
  test_options();
  test_same_batches();
  test_bounded();
  test_errors();
  test_free_busy();
  pb__remove_tree(dir);
  printf("loader reads in flight: ok\n");
  return 0;
}
