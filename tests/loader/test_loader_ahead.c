/* Workers running ahead into the next epoch: over several epochs with pb_loader_reset(e + 1),
 * the batches (indices, labels, pixels, numbers, epochs, errors) equal those of a loader without
 * threads and those of loaders that drain at every reset; epochs of fewer batches than
 * workers; resets to other epochs after running ahead; freeing while ahead. Runs under
 * ThreadSanitizer in CI. */
#include <stdatomic.h>
#include <time.h>

#include "formats/format_internal.h"
#include "formats/raw/raw.h"
#include "loader_test.h"
#include "read_hook.h"

static char dir[512];
static char path37[600]; /* 37 uint16 images, 2 channels, 6 x 5 */

enum { MAX_BATCHES = 64, MAX_SAMPLES = 256 };

/* What one epoch delivered, in order. An error counts as a batch with rc set and no samples. */
typedef struct epoch_run {
  int64_t nbatches, nsamples;
  int64_t indices[MAX_SAMPLES];
  int64_t sizes[MAX_BATCHES];
  int rcs[MAX_BATCHES];
  unsigned char *data;
  size_t data_size;
} epoch_run;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Reads the rest of the current epoch (epoch e) from l into r. */
static void drain_epoch(pb_loader *l, int64_t e, epoch_run *r) {
  struct pb_error err = {{0}};
  memset(r, 0, sizeof *r);
  for (;;) {
    pb_batch *b = NULL;
    int rc = pb_loader_next(l, &b, &err);
    CHECK(r->nbatches < MAX_BATCHES);
    if (rc != PB_OK) {
      CHECK(b == NULL);
      CHECK_CONTAINS(err.message, "zstd: corrupted block");
      r->rcs[r->nbatches++] = rc;
      continue;
    }
    if (b == NULL) break;
    CHECK_EQ(b->epoch, e);
    CHECK(b->number >= r->nbatches); /* numbers skip only batches that failed or were empty */
    CHECK(r->nsamples + b->shape[0] <= MAX_SAMPLES);
    r->sizes[r->nbatches++] = b->shape[0];
    memcpy(r->indices + r->nsamples, b->indices, (size_t)b->shape[0] * sizeof(int64_t));
    r->nsamples += b->shape[0];
    r->data = realloc(r->data, r->data_size + b->nbytes);
    CHECK(r->data != NULL);
    memcpy(r->data + r->data_size, b->data, b->nbytes);
    r->data_size += b->nbytes;
    pb_batch_free(b);
  }
}

static void check_same(const epoch_run *a, const epoch_run *b) {
  CHECK_EQ(a->nbatches, b->nbatches);
  CHECK_EQ(a->nsamples, b->nsamples);
  CHECK(memcmp(a->sizes, b->sizes, (size_t)a->nbatches * sizeof a->sizes[0]) == 0);
  CHECK(memcmp(a->rcs, b->rcs, (size_t)a->nbatches * sizeof a->rcs[0]) == 0);
  CHECK(memcmp(a->indices, b->indices, (size_t)a->nsamples * sizeof(int64_t)) == 0);
  CHECK_EQ(a->data_size, b->data_size);
  CHECK(a->data_size == 0 || memcmp(a->data, b->data, a->data_size) == 0);
}

static void free_runs(epoch_run *r, int n) {
  for (int i = 0; i < n; i++) {
    free(r[i].data);
    r[i].data = NULL;
  }
}

/* Epochs 0..n-1 with reset(e + 1) after each: the path that keeps what was built ahead. The
 * sleep lets the workers get ahead before the reset. */
static void run_consecutive(const pb_loader_params *p, int n, int pause_ms, epoch_run *out) {
  struct pb_error err = {{0}};
  pb_loader *l = NULL;
  CHECK_OK(pb_loader_new(path37, p, &l, &err), &err);
  for (int e = 0; e < n; e++) {
    if (e > 0) {
      if (pause_ms > 0) sleep_ms(pause_ms);
      CHECK_OK(pb_loader_reset(l, e, &err), &err);
    }
    drain_epoch(l, e, &out[e]);
  }
  pb_loader_free(l);
}

/* Each epoch from a fresh loader reset straight to it: nothing is ever kept. */
static void run_fresh(const pb_loader_params *p, int n, epoch_run *out) {
  struct pb_error err = {{0}};
  for (int e = 0; e < n; e++) {
    pb_loader *l = NULL;
    CHECK_OK(pb_loader_new(path37, p, &l, &err), &err);
    if (e > 0) CHECK_OK(pb_loader_reset(l, e, &err), &err);
    drain_epoch(l, e, &out[e]);
    pb_loader_free(l);
  }
}

static void check_once_per_epoch(const epoch_run *r, int64_t expect_samples, int64_t n) {
  CHECK_EQ(r->nsamples, expect_samples);
  int seen[64] = {0};
  CHECK(n <= 64);
  for (int64_t k = 0; k < r->nsamples; k++) {
    CHECK(r->indices[k] >= 0 && r->indices[k] < n);
    seen[r->indices[k]]++;
  }
  for (int64_t i = 0; i < n; i++) CHECK(seen[i] <= 1);
}

/* ---- tests ---------------------------------------------------------------------------------- */

enum { EPOCHS = 5 };

static void test_same_batches(void) {
  const int workers[] = {1, 2, 3, 8}, prefetch[] = {1, 2, 4};
  /* {batch_size, drop_last, world_size, rank, shard_pad, transform} */
  const int cfg[][6] = {
      {5, 0, 1, 0, 0, PB_TRANSFORM_NONE},        {5, 1, 1, 0, 0, PB_TRANSFORM_NONE},
      {4, 0, 3, 2, 1, PB_TRANSFORM_NONE},        {4, 1, 2, 1, 0, PB_TRANSFORM_NONE},
      {6, 0, 1, 0, 0, PB_TRANSFORM_RANDOM_CROP}, {3, 0, 2, 0, 0, PB_TRANSFORM_AUGMENT},
      {40, 0, 1, 0, 0, PB_TRANSFORM_NONE},       {40, 1, 1, 0, 0, PB_TRANSFORM_NONE},
  };
  for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
    pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
    p.batch_size = cfg[c][0];
    p.drop_last = cfg[c][1];
    p.world_size = cfg[c][2];
    p.rank = cfg[c][3];
    p.shard_pad = cfg[c][4];
    p.transform = (pb_transform)cfg[c][5];
    p.crop_h = 4;
    p.crop_w = 3;
    p.shuffle = 1;
    p.seed = 1234 + c;
    p.workers = 0;
    epoch_run ref[EPOCHS];
    run_consecutive(&p, EPOCHS, 0, ref);
    /* The order changes between epochs, so an epoch that reused the last one's would show. */
    if (ref[0].nsamples > 1)
      CHECK(memcmp(ref[0].indices, ref[1].indices, (size_t)ref[0].nsamples * sizeof(int64_t)) != 0);
    int64_t per_rank = p.shard_pad ? (37 + p.world_size - 1) / p.world_size : 37 / p.world_size;
    int64_t expect = p.drop_last ? per_rank / p.batch_size * p.batch_size : per_rank;
    for (int e = 0; e < EPOCHS; e++) {
      CHECK_EQ(ref[e].nsamples, expect);
      if (!p.shard_pad) check_once_per_epoch(&ref[e], expect, 37);
    }
    for (int wi = 0; wi < 4; wi++)
      for (int pi = 0; pi < 3; pi++) {
        p.workers = workers[wi];
        p.prefetch = prefetch[pi];
        epoch_run got[EPOCHS];
        run_consecutive(&p, EPOCHS, (wi + pi) % 2 ? 5 : 0, got);
        for (int e = 0; e < EPOCHS; e++) check_same(&ref[e], &got[e]);
        free_runs(got, EPOCHS);
      }
    /* Loaders that drain at every reset give the same epochs. */
    p.workers = 3;
    p.prefetch = 2;
    epoch_run fresh[EPOCHS];
    run_fresh(&p, EPOCHS, fresh);
    for (int e = 0; e < EPOCHS; e++) check_same(&ref[e], &fresh[e]);
    free_runs(fresh, EPOCHS);
    free_runs(ref, EPOCHS);
  }
}

/* 3 batches an epoch for 8 workers: every sample exactly once per epoch, over 5 epochs, and
 * the stats count delivered batches only. */
static void test_few_batches(void) {
  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  p.batch_size = 13; /* 13 + 13 + 11 */
  p.shuffle = 1;
  p.seed = 7;
  epoch_run ref[EPOCHS], got[EPOCHS];
  p.workers = 0;
  run_consecutive(&p, EPOCHS, 0, ref);
  for (int round = 0; round < 4; round++) {
    p.workers = 8;
    p.prefetch = 1 + round % 2;
    struct pb_error err = {{0}};
    pb_loader *l = NULL;
    CHECK_OK(pb_loader_new(path37, &p, &l, &err), &err);
    CHECK_EQ(pb_loader_batches_per_epoch(l), 3);
    for (int e = 0; e < EPOCHS; e++) {
      if (e > 0) {
        if (round >= 2) sleep_ms(3);
        CHECK_OK(pb_loader_reset(l, e, &err), &err);
      }
      drain_epoch(l, e, &got[e]);
      CHECK_EQ(got[e].nbatches, 3);
      check_once_per_epoch(&got[e], 37, 37);
      check_same(&ref[e], &got[e]);
      pb_loader_stats st;
      pb_loader_get_stats(l, &st);
      CHECK_EQ(st.batches, 3 * (e + 1));
      CHECK_EQ(st.samples, 37 * (e + 1));
    }
    free_runs(got, EPOCHS);
    pb_loader_free(l);
  }
  free_runs(ref, EPOCHS);
}

/* Resets l to epoch `reset` (none when -1), reads epoch e in full and checks it against ref[e]. */
static void expect_epoch(pb_loader *l, int64_t reset, int64_t e, const epoch_run *ref) {
  struct pb_error err = {{0}};
  if (reset >= 0) CHECK_OK(pb_loader_reset(l, reset, &err), &err);
  epoch_run r;
  drain_epoch(l, e, &r);
  check_same(&ref[e], &r);
  free(r.data);
}

/* After the workers have gone ahead into epoch 1, resets elsewhere discard what they built. */
static void test_other_resets(void) {
  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  p.batch_size = 4;
  p.shuffle = 1;
  p.seed = 21;
  p.transform = PB_TRANSFORM_AUGMENT;
  p.workers = 0;
  enum { N = 8 };
  epoch_run ref[N];
  run_consecutive(&p, N, 0, ref);
  const int workers[] = {2, 8};
  for (int wi = 0; wi < 2; wi++) {
    p.workers = workers[wi];
    p.prefetch = 2;
    struct pb_error err = {{0}};
    pb_loader *l = NULL;
    CHECK_OK(pb_loader_new(path37, &p, &l, &err), &err);
    /* Epoch 0 in full, workers ahead into 1, then epoch 3: 3 from its first batch. */
    expect_epoch(l, -1, 0, ref);
    sleep_ms(5);
    expect_epoch(l, 3, 3, ref);
    /* The same epoch again (ahead into 4 meanwhile), then 4 as the next one. */
    sleep_ms(5);
    expect_epoch(l, 3, 3, ref);
    expect_epoch(l, 4, 4, ref);
    /* The next epoch before this one is over: nothing of 5 is lost or repeated. */
    CHECK_OK(pb_loader_reset(l, 5, &err), &err);
    pb_batch *b = NULL;
    CHECK_OK(pb_loader_next(l, &b, &err), &err);
    CHECK(b != NULL);
    CHECK_EQ(b->epoch, 5);
    pb_batch_free(b);
    sleep_ms(2);
    expect_epoch(l, 6, 6, ref);
    /* Backwards, then forwards again. */
    expect_epoch(l, 1, 1, ref);
    expect_epoch(l, 2, 2, ref);
    /* Reset twice to the next epoch: the second is a restart of it. */
    CHECK_OK(pb_loader_reset(l, 3, &err), &err);
    expect_epoch(l, 4, 4, ref);
    pb_loader_free(l);
  }
  free_runs(ref, N);
}

/* A sample that fails in every epoch: the error of a batch built ahead comes when that batch
 * is delivered, at the same place as without threads; skipped samples likewise. */
static void test_errors_ahead(void) {
  pb__raw_read_hook = test_read_hook;
  atomic_store(&test_fail_index, 17);
  for (int skip = 0; skip < 2; skip++) {
    pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
    p.batch_size = 4;
    p.shuffle = 1;
    p.seed = 5;
    p.skip_errors = skip;
    p.workers = 0;
    epoch_run ref[EPOCHS], got[EPOCHS];
    run_consecutive(&p, EPOCHS, 0, ref);
    for (int e = 0; e < EPOCHS; e++) {
      int errors = 0;
      for (int64_t k = 0; k < ref[e].nbatches; k++) errors += ref[e].rcs[k] != PB_OK;
      CHECK_EQ(errors, skip ? 0 : 1);
      CHECK_EQ(ref[e].nsamples, skip ? 36 : 33);
    }
    p.workers = 6;
    p.prefetch = 2;
    run_consecutive(&p, EPOCHS, 5, got);
    for (int e = 0; e < EPOCHS; e++) check_same(&ref[e], &got[e]);
    free_runs(got, EPOCHS);
    free_runs(ref, EPOCHS);
  }
  atomic_store(&test_fail_index, -1);
  pb__raw_read_hook = NULL;
}

/* Freeing while the workers are ahead (some of them mid-batch, slowed down) returns at once
 * and leaks nothing (AddressSanitizer). */
static void test_free_ahead(void) {
  pb__raw_read_hook = test_read_hook;
  for (int round = 0; round < 6; round++) {
    atomic_store(&test_read_delay_us, round % 2 ? 300 : 0);
    pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
    p.batch_size = 13;
    p.shuffle = 1;
    p.workers = 8;
    p.prefetch = 1 + round % 3;
    struct pb_error err = {{0}};
    pb_loader *l = NULL;
    CHECK_OK(pb_loader_new(path37, &p, &l, &err), &err);
    epoch_run r;
    drain_epoch(l, 0, &r);
    free(r.data);
    if (round >= 2) {
      sleep_ms(round);
      CHECK_OK(pb_loader_reset(l, 1, &err), &err);
    }
    pb_batch *kept = NULL;
    if (round >= 4) {
      CHECK_OK(pb_loader_next(l, &kept, &err), &err);
      CHECK(kept != NULL);
    }
    sleep_ms(round % 3);
    int64_t t0 = pb_now_ns();
    pb_loader_free(l);
    CHECK(pb_now_ns() - t0 < 2000000000LL);
    if (kept != NULL) {
      CHECK_EQ(kept->epoch, 1);
      CHECK_EQ(kept->shape[0], 13); /* a batch handed out outlives the loader */
      pb_batch_free(kept);
    }
  }
  atomic_store(&test_read_delay_us, 0);
  pb__raw_read_hook = NULL;
}

int main(void) {
  test_tmpdir(dir, sizeof dir);
  snprintf(path37, sizeof path37, "%s/d37.raw", dir);
  test_make_raw(path37, 37, PB_UINT16, 2, 1, 6, 5);
  test_same_batches();
  test_few_batches();
  test_other_resets();
  test_errors_ahead();
  test_free_ahead();
  pb__remove_tree(dir);
  printf("loader ahead: ok\n");
  return 0;
}
