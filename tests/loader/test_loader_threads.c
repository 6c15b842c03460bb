/* The loader with worker threads: every sample once per epoch, ordered and identical batches
 * whatever the worker count, sharding, cache modes, waits counted in a batch's time, errors
 * naming the sample, skip_errors, and freeing mid-epoch. Runs under ThreadSanitizer in CI. */
#include <stdatomic.h>
#include <time.h>

#include "formats/format_internal.h"
#include "formats/raw/raw.h"
#include "loader_test.h"
#include "read_hook.h"

static char dir[512];
static char path37[600]; /* 37 uint16 images, 2 channels, 6 x 5 */

typedef struct epoch_run {
  int64_t nbatches, nsamples;
  int64_t indices[512];
  int64_t batch_sizes[128];
  unsigned char *data; /* all batches' bytes, concatenated */
  size_t data_size;
} epoch_run;

static void run_epoch(const char *path, const pb_loader_params *p, int64_t epoch, epoch_run *r) {
  struct pb_error err = {{0}};
  pb_loader *l = NULL;
  CHECK_OK(pb_loader_new(path, p, &l, &err), &err);
  if (epoch != 0) CHECK_OK(pb_loader_reset(l, epoch, &err), &err);
  memset(r, 0, sizeof *r);
  for (;;) {
    pb_batch *b = NULL;
    CHECK_OK(pb_loader_next(l, &b, &err), &err);
    if (b == NULL) break;
    CHECK_EQ(b->number, r->nbatches);
    CHECK(r->nbatches < 128 && r->nsamples + b->shape[0] <= 512);
    r->batch_sizes[r->nbatches++] = b->shape[0];
    memcpy(r->indices + r->nsamples, b->indices, (size_t)b->shape[0] * sizeof(int64_t));
    r->nsamples += b->shape[0];
    r->data = realloc(r->data, r->data_size + b->nbytes);
    memcpy(r->data + r->data_size, b->data, b->nbytes);
    r->data_size += b->nbytes;
    pb_batch_free(b);
  }
  CHECK_EQ(r->nbatches, pb_loader_batches_per_epoch(l));
  pb_loader_free(l);
}

static void check_same_run(const epoch_run *a, const epoch_run *b) {
  CHECK_EQ(a->nbatches, b->nbatches);
  CHECK_EQ(a->nsamples, b->nsamples);
  CHECK(memcmp(a->indices, b->indices, (size_t)a->nsamples * sizeof(int64_t)) == 0);
  CHECK_EQ(a->data_size, b->data_size);
  CHECK(memcmp(a->data, b->data, a->data_size) == 0);
}

static void test_exactly_once(void) {
  const int workers[] = {0, 1, 2, 4}, prefetch[] = {1, 2, 4};
  for (int dl = 0; dl < 2; dl++) {
    epoch_run ref;
    int have_ref = 0;
    for (int wi = 0; wi < 4; wi++)
      for (int pi = 0; pi < 3; pi++) {
        if (workers[wi] == 0 && pi > 0) continue; /* prefetch means nothing without threads */
        pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
        p.batch_size = 5;
        p.shuffle = 1;
        p.seed = 99;
        p.drop_last = dl;
        p.workers = workers[wi];
        p.prefetch = prefetch[pi];
        epoch_run r;
        run_epoch(path37, &p, 0, &r);
        CHECK_EQ(r.nbatches, dl ? 7 : 8);
        CHECK_EQ(r.nsamples, dl ? 35 : 37);
        int seen[37] = {0};
        for (int64_t k = 0; k < r.nsamples; k++) {
          CHECK(r.indices[k] >= 0 && r.indices[k] < 37);
          seen[r.indices[k]]++;
        }
        for (int i = 0; i < 37; i++) CHECK(seen[i] <= 1);
        /* The pixels are those of the named images (transform none: values as they are). */
        const float *f = (const float *)(void *)r.data;
        for (int64_t k = 0; k < r.nsamples; k++)
          for (int64_t px = 0; px < 60; px++)
            CHECK_EQ((long long)f[k * 60 + px], test_pixel(r.indices[k], px));
        if (!have_ref) {
          ref = r;
          have_ref = 1;
        } else {
          check_same_run(&ref, &r);
          free(r.data);
        }
      }
    free(ref.data);
  }
}

static void test_sharding(void) {
  for (int pad = 0; pad < 2; pad++) {
    for (int dl = 0; dl < 2; dl++) {
      int seen[37] = {0};
      int64_t batches = -1;
      for (int rank = 0; rank < 3; rank++) {
        pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
        p.batch_size = 4;
        p.shuffle = 1;
        p.workers = 2;
        p.rank = rank;
        p.world_size = 3;
        p.drop_last = dl;
        p.shard_pad = pad;
        epoch_run r;
        run_epoch(path37, &p, 3, &r);
        if (batches < 0) batches = r.nbatches;
        CHECK_EQ(r.nbatches, batches); /* equal on every rank */
        /* 37 over 3 ranks: 12 each dropping one sample, 13 each padding two */
        CHECK_EQ(r.nsamples, dl ? 12 : (pad ? 13 : 12));
        for (int64_t k = 0; k < r.nsamples; k++) seen[r.indices[k]]++;
        free(r.data);
      }
      CHECK_EQ(batches, pad && !dl ? 4 : 3);
      int total = 0, once = 0;
      for (int i = 0; i < 37; i++) {
        if (pad && !dl) CHECK(seen[i] >= 1); /* the union is the whole dataset */
        CHECK(seen[i] <= (pad ? 2 : 1));     /* without padding, at most once per epoch */
        total += seen[i];
        once += seen[i] == 1;
      }
      CHECK_EQ(total, dl ? 36 : (pad ? 39 : 36)); /* 39 = 3 ranks x 13, two wrapped */
      if (!pad) CHECK_EQ(once, 36);
    }
  }
  /* The epoch's order does not depend on the number of ranks: rank r of 3 reads positions
   * r, r+3, ... of what one rank reads. */
  pb_loader_params p1 = PB_LOADER_PARAMS_DEFAULTS;
  p1.batch_size = 37;
  p1.shuffle = 1;
  epoch_run whole;
  run_epoch(path37, &p1, 3, &whole);
  for (int rank = 0; rank < 3; rank++) {
    pb_loader_params p = p1;
    p.batch_size = 5;
    p.rank = rank;
    p.world_size = 3;
    epoch_run r;
    run_epoch(path37, &p, 3, &r);
    for (int64_t k = 0; k < r.nsamples; k++) CHECK_EQ(r.indices[k], whole.indices[rank + 3 * k]);
    free(r.data);
  }
  free(whole.data);
  /* Fewer images than ranks cannot be shared without padding. */
  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  p.world_size = 38;
  p.rank = 1;
  pb_loader *l = NULL;
  struct pb_error err;
  CHECK_EQ(pb_loader_new(path37, &p, &l, &err), PB_EINVAL);
  CHECK_CONTAINS(err.message, "fewer images than ranks");
  p.shard_pad = 1;
  CHECK_OK(pb_loader_new(path37, &p, &l, &err), &err);
  CHECK_EQ(pb_loader_samples_per_epoch(l), 1);
  pb_loader_free(l);
}

static void test_augment_determinism(void) {
  const pb_out_dtype outs[] = {PB_OUT_FLOAT32, PB_OUT_BFLOAT16};
  for (int o = 0; o < 2; o++) {
    epoch_run ref, other;
    const int workers[] = {0, 1, 2, 4};
    for (int wi = 0; wi < 4; wi++) {
      pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
      p.batch_size = 6;
      p.shuffle = 1;
      p.seed = 5;
      p.workers = workers[wi];
      p.transform = PB_TRANSFORM_AUGMENT;
      p.out_dtype = outs[o];
      epoch_run r;
      run_epoch(path37, &p, 2, &r);
      if (wi == 0) ref = r;
      else {
        check_same_run(&ref, &r); /* bit-identical pixels */
        free(r.data);
      }
    }
    pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
    p.batch_size = 6;
    p.shuffle = 0;
    p.seed = 6;
    p.workers = 2;
    p.transform = PB_TRANSFORM_AUGMENT;
    p.out_dtype = outs[o];
    run_epoch(path37, &p, 2, &other);
    CHECK_EQ(other.data_size, ref.data_size);
    CHECK(memcmp(other.data, ref.data, ref.data_size) != 0); /* another seed, other pixels */
    free(other.data);
    free(ref.data);
  }
}

static void test_cache_modes(void) {
  /* none, preload and shared (mapping the raw dataset itself, or a built cache file) give the
   * same batches. */
  char cache[600];
  snprintf(cache, sizeof cache, "%s/cache.raw", dir);
  epoch_run ref;
  for (int mode = 0; mode < 4; mode++) {
    pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
    p.batch_size = 8;
    p.shuffle = 1;
    p.workers = 2;
    p.transform = PB_TRANSFORM_NORMALIZE;
    p.cache = mode == 0 ? PB_CACHE_NONE : mode == 1 ? PB_CACHE_PRELOAD : PB_CACHE_SHARED;
    if (mode == 3) p.cache_path = cache;
    epoch_run r;
    run_epoch(path37, &p, 1, &r);
    if (mode == 0) ref = r;
    else {
      check_same_run(&ref, &r);
      free(r.data);
    }
  }
  CHECK_EQ(access(cache, F_OK), 0);
  /* A second loader reuses the cache file. */
  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  p.batch_size = 8;
  p.shuffle = 1;
  p.workers = 1;
  p.transform = PB_TRANSFORM_NORMALIZE;
  p.cache = PB_CACHE_SHARED;
  p.cache_path = cache;
  epoch_run r;
  run_epoch(path37, &p, 1, &r);
  check_same_run(&ref, &r);
  free(r.data);
  free(ref.data);
}

static long rss_anon_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "RssAnon: %ld kB", &kb) == 1) break;
  fclose(f);
  return kb;
}

static void test_preload_memory(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/big.raw", dir);
  test_make_raw(path, 48, PB_UINT16, 1, 1, 512, 512); /* 24 MiB of pixels */
  const int64_t pixel_bytes = 48LL * 512 * 512 * 2;
  struct pb_error err = {{0}};
  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  p.cache = PB_CACHE_PRELOAD;
  p.batch_size = 4;
  long before = rss_anon_kb();
  pb_loader *l;
  CHECK_OK(pb_loader_new(path, &p, &l, &err), &err);
  long after = rss_anon_kb();
  pb_loader_stats st;
  pb_loader_get_stats(l, &st);
  CHECK_EQ(st.preload_bytes, pixel_bytes);
  CHECK(st.preload_ns > 0);
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  const int measure = 0; /* shadow memory makes resident size meaningless */
#else
  const int measure = 1;
#endif
  if (measure && before >= 0 && after >= 0) {
    double grown = (double)(after - before) * 1024.0;
    printf("preload: %lld bytes reported, resident grew by %.0f bytes, %.1f ms\n",
           (long long)st.preload_bytes, grown, (double)st.preload_ns / 1e6);
    CHECK(grown > 0.9 * (double)pixel_bytes && grown < 1.1 * (double)pixel_bytes);
  }
  pb_batch *b;
  CHECK_OK(pb_loader_next(l, &b, &err), &err);
  CHECK_EQ(b->shape[0], 4);
  pb_batch_free(b);
  pb_loader_free(l);
}

/* ---- slow and failing reads, through the raw backend's test hook ------------------------- */

static void test_wait_counted(void) {
  pb__raw_read_hook = test_read_hook;
  atomic_store(&test_read_delay_us, 20000);
  const int workers[] = {0, 2};
  for (int wi = 0; wi < 2; wi++) {
    pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
    p.batch_size = 2;
    p.workers = workers[wi];
    p.prefetch = 1;
    struct pb_error err = {{0}};
    pb_loader *l;
    CHECK_OK(pb_loader_new(path37, &p, &l, &err), &err);
    for (int k = 0; k < 3; k++) {
      pb_batch *b;
      int64_t t0 = pb_now_ns();
      CHECK_OK(pb_loader_next(l, &b, &err), &err);
      int64_t outer = pb_now_ns() - t0;
      /* Nothing was prefetched before the first call, so the first batch waits for two
       * 20 ms reads (in parallel on two workers: at least 20 ms). */
      if (k == 0) {
        CHECK(outer >= 19000000);
        CHECK(b->times.wait_ns >= 19000000);
      }
      CHECK(b->times.wait_ns <= outer);
      /* The wait is the part of the call spent blocked on reads: what is left over (taking the
       * batch off the queue, its bookkeeping) is far below one 20 ms read, even under a
       * sanitizer on a loaded machine; a read whose sleep went uncounted would leave 20 ms. */
      CHECK(outer - b->times.wait_ns < 15000000);
      CHECK(b->times.read_ns < 1000000); /* the hook's sleep is outside the backend's timer */
      pb_batch_free(b);
    }
    pb_loader_stats st;
    pb_loader_get_stats(l, &st);
    CHECK_EQ(st.batches, 3);
    CHECK(st.times.wait_ns >= 19000000);
    pb_loader_free(l);
  }
  atomic_store(&test_read_delay_us, 0);
  pb__raw_read_hook = NULL;
}

static void test_errors(void) {
  pb__raw_read_hook = test_read_hook;
  atomic_store(&test_fail_index, 17);
  const int workers[] = {0, 1, 3};
  for (int wi = 0; wi < 3; wi++) {
    for (int skip = 0; skip < 2; skip++) {
      pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
      p.batch_size = 4;
      p.workers = workers[wi];
      p.shuffle = 1;
      p.skip_errors = skip;
      struct pb_error err = {{0}};
      pb_loader *l;
      CHECK_OK(pb_loader_new(path37, &p, &l, &err), &err);
      int errors = 0;
      int64_t samples = 0, batches = 0;
      for (;;) {
        pb_batch *b = NULL;
        int rc = pb_loader_next(l, &b, &err);
        if (rc != PB_OK) {
          CHECK_EQ(rc, PB_ECODEC);
          CHECK(b == NULL);
          CHECK_CONTAINS(err.message, "sample 17 (image 'img_00017' of ");
          CHECK_CONTAINS(err.message, path37);
          CHECK_CONTAINS(err.message, "zstd: corrupted block");
          errors++;
          batches++;
          continue; /* the loader goes on with the next batch */
        }
        if (b == NULL) break;
        for (int64_t k = 0; k < b->shape[0]; k++) CHECK(b->indices[k] != 17);
        samples += b->shape[0];
        batches++;
        pb_batch_free(b);
      }
      CHECK_EQ(batches, 10);
      pb_loader_stats st;
      pb_loader_get_stats(l, &st);
      if (skip) {
        CHECK_EQ(errors, 0);
        CHECK_EQ(samples, 36);
        CHECK_EQ(st.skipped, 1);
      } else {
        CHECK_EQ(errors, 1);
        CHECK_EQ(samples, 33); /* the failed batch's 4 samples are lost */
      }
      pb_loader_free(l);
    }
  }
  /* With a cache, the failure shows at set-up (or is skipped and counted later). */
  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  p.cache = PB_CACHE_PRELOAD;
  struct pb_error err = {{0}};
  pb_loader *l = NULL;
  CHECK_EQ(pb_loader_new(path37, &p, &l, &err), PB_ECODEC);
  CHECK_CONTAINS(err.message, "sample 17 (image 'img_00017'");
  p.skip_errors = 1;
  p.batch_size = 37;
  p.workers = 2;
  CHECK_OK(pb_loader_new(path37, &p, &l, &err), &err);
  pb_batch *b;
  CHECK_OK(pb_loader_next(l, &b, &err), &err);
  CHECK_EQ(b->shape[0], 36);
  CHECK_EQ(b->skipped, 1);
  pb_batch_free(b);
  pb_loader_free(l);
  atomic_store(&test_fail_index, -1);
  pb__raw_read_hook = NULL;
}

static void test_free_mid_epoch(void) {
  pb__raw_read_hook = test_read_hook;
  atomic_store(&test_read_delay_us, 2000);
  for (int take = 0; take < 3; take++) {
    pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
    p.batch_size = 3;
    p.workers = 4;
    p.prefetch = 4;
    p.transform = PB_TRANSFORM_AUGMENT;
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
    if (take == 2) CHECK_OK(pb_loader_reset(l, 1, &err), &err); /* prefetching, then freed */
    int64_t t0 = pb_now_ns();
    pb_loader_free(l);
    CHECK(pb_now_ns() - t0 < 2000000000LL);
    if (kept != NULL) {
      CHECK_EQ(kept->shape[0], 3); /* batches handed out outlive the loader */
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
  test_exactly_once();
  test_sharding();
  test_augment_determinism();
  test_cache_modes();
  test_preload_memory();
  test_wait_counted();
  test_errors();
  test_free_mid_epoch();
  pb__remove_tree(dir);
  printf("loader threads: ok\n");
  return 0;
}
