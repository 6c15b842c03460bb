/* core: status codes, errors, allocator hooks, clock, RNG (against an independent Python
 * reference), thread pool, environment. */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipebench/core.h"

#include "check.h"

static void test_errors(void) {
  EXPECT(strcmp(pb_strerror(PB_OK), "success") == 0);
  for (int c = PB_E_LAST; c <= PB_E_FIRST; c++) EXPECT(strcmp(pb_strerror(c), "unknown error") != 0);
  EXPECT(strcmp(pb_strerror(-ENOENT), strerror(ENOENT)) == 0);
  EXPECT(strcmp(pb_strerror(12345), "unknown error") == 0);
  struct pb_error e;
  EXPECT(pb_error_set(&e, PB_EFORMAT, "file %s: bad %d", "a.tif", 3) == PB_EFORMAT);
  EXPECT(strcmp(e.message, "file a.tif: bad 3") == 0);
  pb_error_prefix(&e, "image %d: ", 7);
  EXPECT(strcmp(e.message, "image 7: file a.tif: bad 3") == 0);
  EXPECT(pb_error_set(NULL, PB_EIO, "ignored") == PB_EIO);
  pb_error_prefix(NULL, "ignored");
}

static size_t live_bytes;
static int n_allocs;
static void *count_alloc(void *ctx, size_t size, size_t alignment) {
  (void)ctx;
  void *p = NULL;
  if (posix_memalign(&p, alignment, size ? size : 1) != 0) return NULL;
  live_bytes += size;
  n_allocs++;
  return p;
}
static void count_free(void *ctx, void *ptr, size_t size) {
  (void)ctx;
  live_bytes -= size;
  free(ptr);
}

static void test_alloc(void) {
  pb_allocator a = {count_alloc, count_free, NULL};
  pb_set_allocator(&a);
  void *p = pb_alloc(1000);
  EXPECT(p != NULL && ((uintptr_t)p % 64) == 0);
  EXPECT(live_bytes == 1000 && n_allocs == 1);
  pb_free(p, 1000);
  pb_free(NULL, 0);
  EXPECT(live_bytes == 0);
  pb_set_allocator(NULL);
  EXPECT(pb_get_allocator()->alloc != count_alloc);
}

static void test_clock(void) {
  int64_t prev = pb_now_ns();
  for (int i = 0; i < 100000; i++) {
    int64_t t = pb_now_ns();
    EXPECT(t >= prev);
    prev = t;
  }
  char ts[32];
  pb_utc_iso8601(ts, sizeof ts);
  EXPECT(strlen(ts) == 20 && ts[4] == '-' && ts[10] == 'T' && ts[19] == 'Z');
}

/* The stream must equal the reference for these seeds, including 0 and a 64-bit one. */
static void test_rng_reference(void) {
  static const uint64_t seeds[] = {0, 1, 42, 0xFFFFFFFFFFFFFFFFULL};
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s %s/tests/common/rng_reference.py 0 1 42 18446744073709551615",
           PIPEBENCH_PYTHON, PIPEBENCH_SOURCE_DIR);
  FILE *f = popen(cmd, "r");
  EXPECT(f != NULL);
  if (f == NULL) return;
  int lines = 0;
  for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
    pb_rng r;
    pb_rng_init(&r, seeds[s]);
    for (int k = 0; k < 8; k++) {
      unsigned long long want = 0;
      if (fscanf(f, "%llu", &want) != 1) {
        EXPECT(!"reference printed too few values");
        pclose(f);
        return;
      }
      EXPECT_EQ(pb_rng_next(&r), want);
    }
    lines++;
  }
  EXPECT(pclose(f) == 0);
  EXPECT(lines == 4);
}

static void test_rng_helpers(void) {
  pb_rng r;
  pb_rng_init(&r, 7);
  int hist[10] = {0};
  for (int i = 0; i < 100000; i++) {
    uint64_t v = pb_rng_below(&r, 10);
    EXPECT(v < 10);
    hist[v]++;
  }
  for (int k = 0; k < 10; k++) EXPECT(hist[k] > 9000 && hist[k] < 11000);
  double sum = 0;
  for (int i = 0; i < 100000; i++) {
    double u = pb_rng_uniform(&r);
    EXPECT(u >= 0 && u < 1);
    sum += u;
  }
  EXPECT(sum / 100000 > 0.49 && sum / 100000 < 0.51);
  int64_t v[1000];
  for (int i = 0; i < 1000; i++) v[i] = i;
  pb_rng_shuffle_i64(&r, v, 1000);
  int seen[1000] = {0}, moved = 0;
  for (int i = 0; i < 1000; i++) {
    EXPECT(v[i] >= 0 && v[i] < 1000);
    if (v[i] >= 0 && v[i] < 1000) seen[v[i]]++;
    moved += v[i] != i;
  }
  for (int i = 0; i < 1000; i++) EXPECT(seen[i] == 1);
  EXPECT(moved > 900);
  EXPECT(pb_seed_mix(1, 2, 3) == pb_seed_mix(1, 2, 3));
  EXPECT(pb_seed_mix(1, 2, 3) != pb_seed_mix(1, 3, 2));
}

static atomic_int counter;
static void bump(void *arg) {
  (void)arg;
  atomic_fetch_add(&counter, 1);
}

typedef struct pf_arg {
  atomic_int *hits;
} pf_arg;
static void mark(void *arg, int64_t i) {
  pf_arg *a = arg;
  atomic_fetch_add(&a->hits[i], 1);
}

static void test_pool(void) {
  pb_pool *pool = NULL;
  EXPECT(pb_pool_new(0, &pool) == PB_EINVAL && pool == NULL);
  EXPECT(pb_pool_new(3, &pool) == PB_OK && pb_pool_size(pool) == 3);
  atomic_store(&counter, 0);
  for (int i = 0; i < 10000; i++) EXPECT(pb_pool_submit(pool, bump, NULL) == PB_OK);
  pb_pool_wait(pool);
  EXPECT(atomic_load(&counter) == 10000);
  /* parallel_for touches every index exactly once, also while other jobs are queued. */
  static atomic_int hits[5000];
  for (int i = 0; i < 5000; i++) atomic_store(&hits[i], 0);
  for (int i = 0; i < 100; i++) pb_pool_submit(pool, bump, NULL);
  pf_arg a = {hits};
  pb_pool_parallel_for(pool, 5000, mark, &a);
  for (int i = 0; i < 5000; i++) EXPECT(atomic_load(&hits[i]) == 1);
  pb_pool_parallel_for(NULL, 10, mark, &a);
  for (int i = 0; i < 10; i++) EXPECT(atomic_load(&hits[i]) == 2);
  /* free finishes what was queued. The 100 jobs queued beside parallel_for may still be
   * running (it waits for its own helpers only): let them end before counting again. */
  pb_pool_wait(pool);
  EXPECT(atomic_load(&counter) == 10000 + 100);
  atomic_store(&counter, 0);
  for (int i = 0; i < 1000; i++) pb_pool_submit(pool, bump, NULL);
  pb_pool_free(pool);
  EXPECT(atomic_load(&counter) == 1000);
  pb_pool_free(NULL);
}

static void test_env(void) {
  pb_env env;
  EXPECT(pb_env_collect(&env, NULL) == PB_OK);
  EXPECT(env.hostname[0] != '\0' && env.cpu_cores >= 1 && env.memory_bytes > 0);
  EXPECT(strncmp(env.duckdb_version, "v1.4", 4) == 0);
  EXPECT(env.libtiff_version[0] && env.zstd_version[0] && env.blosc_version[0] && env.onednn_version[0]);
  char tmp[64];
  int found = 0;
  for (int i = 0; i < pb_env_field_count(); i++) {
    const char *k, *v;
    pb_env_field(&env, i, &k, &v, tmp, sizeof tmp);
    EXPECT(k[0] != '\0' && v != NULL);
    found += strcmp(k, "git_commit") == 0 && strcmp(v, pb_git_commit()) == 0;
  }
  EXPECT(found == 1);
}

int main(void) {
  test_errors();
  test_alloc();
  test_clock();
  test_rng_reference();
  test_rng_helpers();
  test_pool();
  test_env();
  printf("%s\n", check_failures() ? "core tests FAILED" : "core tests passed");
  return check_failures() != 0;
}
