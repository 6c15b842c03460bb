/* The per-loader batch allocator: every batch buffer comes from it and goes back to it exactly
 * once (batches freed before and after pb_loader_free, DLPack exports deleted last), nothing
 * else does (caches use the process-wide allocator), NULL means the process-wide one, and a
 * misaligned allocator is refused with a clear error. Runs under ThreadSanitizer in CI. */
#include <pthread.h>
#include <stdint.h>

#include "formats/format_internal.h"
#include "loader_test.h"

#define MAX_LIVE 256

/* An allocator that remembers every live block (pointer and size) and counts calls. A free
 * of a pointer it did not hand out, or with another size, fails the test at once. */
typedef struct counting {
  pthread_mutex_t mu;
  void *live[MAX_LIVE];
  size_t live_size[MAX_LIVE];
  int nlive;
  int64_t allocs, frees;
  size_t odd_sizes; /* blocks whose size was not `expect` (when expect != 0) */
  size_t expect;
  int offset; /* > 0: hand out misaligned pointers, offset bytes into a 64-aligned block */
} counting;

static void *c_alloc(void *ctx, size_t size, size_t alignment) {
  counting *c = ctx;
  CHECK(alignment == 64);
  unsigned char *base = aligned_alloc(64, (size + (size_t)c->offset + 63) / 64 * 64);
  if (base == NULL) return NULL;
  void *p = base + c->offset;
  pthread_mutex_lock(&c->mu);
  CHECK(c->nlive < MAX_LIVE);
  c->live[c->nlive] = p;
  c->live_size[c->nlive++] = size;
  c->allocs++;
  if (c->expect != 0 && size != c->expect) c->odd_sizes++;
  pthread_mutex_unlock(&c->mu);
  return p;
}

static void c_free(void *ctx, void *ptr, size_t size) {
  counting *c = ctx;
  pthread_mutex_lock(&c->mu);
  int found = -1;
  for (int i = 0; i < c->nlive; i++)
    if (c->live[i] == ptr) found = i;
  if (found < 0 || c->live_size[found] != size) {
    fprintf(stderr, "free of %p (%zu bytes): %s\n", ptr, size,
            found < 0 ? "not allocated here, or freed twice" : "size differs from the allocation");
    exit(1);
  }
  c->live[found] = c->live[c->nlive - 1];
  c->live_size[found] = c->live_size[c->nlive - 1];
  c->nlive--;
  c->frees++;
  pthread_mutex_unlock(&c->mu);
  free((unsigned char *)ptr - c->offset);
}

static void counting_init(counting *c, size_t expect, int offset) {
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->mu, NULL);
  c->expect = expect;
  c->offset = offset;
}

static int live_of(counting *c) {
  pthread_mutex_lock(&c->mu);
  int n = c->nlive;
  pthread_mutex_unlock(&c->mu);
  return n;
}

static char dir[512], path[600];
enum { COUNT = 29, C = 2, H = 12, W = 10, BATCH = 4 };

/* A whole life of a loader with allocator a: batches freed at once, batches held past
 * pb_loader_free, DLPack exports deleted after everything else. */
static void one_life(const pb_allocator *a, counting *c, pb_out_dtype out, int workers,
                     pb_cache_mode cache) {
  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  p.batch_size = BATCH;
  p.workers = workers;
  p.out_dtype = out;
  p.cache = cache;
  p.allocator = a;
  struct pb_error err = {{0}};
  pb_loader *l = NULL;
  CHECK_OK(pb_loader_new(path, &p, &l, &err), &err);
  pb_batch *held[2] = {NULL, NULL};
  DLManagedTensor *exported[2] = {NULL, NULL};
  int64_t nb = 0;
  for (int epoch = 0; epoch < 2; epoch++) {
    if (epoch > 0) CHECK_OK(pb_loader_reset(l, epoch, &err), &err);
    for (;;) {
      pb_batch *b = NULL;
      CHECK_OK(pb_loader_next(l, &b, &err), &err);
      if (b == NULL) break;
      nb++;
      if (epoch == 0 && b->number < 2) {
        held[b->number] = b; /* kept past pb_loader_free */
        CHECK_OK(pb_batch_to_dlpack(b, &exported[b->number], &err), &err);
      } else if (epoch == 0 && b->number == 2) {
        DLManagedTensor *mt = NULL; /* exported and deleted while the loader lives */
        CHECK_OK(pb_batch_to_dlpack(b, &mt, &err), &err);
        pb_batch_free(b);
        mt->deleter(mt);
      } else {
        pb_batch_free(b);
      }
    }
  }
  CHECK_EQ(nb, 2 * ((COUNT + BATCH - 1) / BATCH));
  /* Workers may still be building batches of the next epoch (they run ahead), so what was
   * allocated is counted once pb_loader_free has stopped them. */
  pb_loader_free(l);
  pthread_mutex_lock(&c->mu);
  int64_t made = c->allocs;
  pthread_mutex_unlock(&c->mu);
  CHECK(made >= 2);
  /* The held batches still own their buffers; the pool's spares are gone. */
  CHECK_EQ(live_of(c), 2);
  pb_batch_free(held[0]);
  exported[0]->deleter(exported[0]);
  CHECK_EQ(live_of(c), 1);
  exported[1]->deleter(exported[1]); /* the export outlives its batch's own reference */
  CHECK_EQ(live_of(c), 1);
  pb_batch_free(held[1]);
  CHECK_EQ(live_of(c), 0);
  CHECK_EQ(c->allocs, made);   /* nothing allocated while tearing down */
  CHECK_EQ(c->frees, c->allocs);
  CHECK_EQ(c->odd_sizes, 0);   /* batch buffers only */
}

static void test_lives(void) {
  const pb_out_dtype outs[] = {PB_OUT_NATIVE, PB_OUT_FLOAT32, PB_OUT_BFLOAT16};
  const pb_cache_mode caches[] = {PB_CACHE_NONE, PB_CACHE_PRELOAD, PB_CACHE_SHARED};
  for (size_t o = 0; o < 3; o++)
    for (int w = 0; w <= 2; w += 2)
      for (size_t k = 0; k < 3; k++) {
        size_t esize = outs[o] == PB_OUT_NATIVE ? 2 : pb_out_dtype_size(outs[o]);
        counting c;
        counting_init(&c, (size_t)BATCH * C * H * W * esize, 0);
        pb_allocator a = {c_alloc, c_free, &c};
        one_life(&a, &c, outs[o], w, caches[k]);
        pthread_mutex_destroy(&c.mu);
      }
  printf("per-loader allocator: every batch buffer allocated and freed once\n");
}

/* NULL takes the process-wide allocator; a given one leaves it alone for batches. */
static void test_process_wide(void) {
  size_t batch_bytes = (size_t)BATCH * C * H * W * 2;
  counting global;
  counting_init(&global, 0, 0);
  pb_allocator g = {c_alloc, c_free, &global};
  pb_set_allocator(&g);

  counting mine;
  counting_init(&mine, batch_bytes, 0);
  pb_allocator a = {c_alloc, c_free, &mine};
  one_life(&a, &mine, PB_OUT_NATIVE, 2, PB_CACHE_PRELOAD);
  CHECK(global.allocs >= 1); /* the preload cache */
  CHECK_EQ(global.frees, global.allocs);
  int64_t cache_allocs = global.allocs;

  global.expect = batch_bytes;
  global.odd_sizes = 0;
  int64_t before = global.allocs;
  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  p.batch_size = BATCH;
  p.out_dtype = PB_OUT_NATIVE;
  struct pb_error err = {{0}};
  pb_loader *l = NULL;
  CHECK_OK(pb_loader_new(path, &p, &l, &err), &err); /* allocator NULL */
  pb_batch *b = NULL;
  CHECK_OK(pb_loader_next(l, &b, &err), &err);
  CHECK(b != NULL);
  CHECK(global.allocs > before);
  int found = 0;
  for (int i = 0; i < global.nlive; i++) found |= global.live[i] == b->data;
  CHECK(found);
  pb_loader_free(l);
  pb_set_allocator(NULL); /* the loader kept its own copy: the batch still goes to `global` */
  pb_batch_free(b);
  CHECK_EQ(global.nlive, 0);
  CHECK_EQ(global.frees, global.allocs);
  printf("process-wide allocator: caches (%lld blocks) and NULL-allocator batches\n",
         (long long)cache_allocs);
  pthread_mutex_destroy(&global.mu);
  pthread_mutex_destroy(&mine.mu);
}

static void test_misaligned(void) {
  counting c;
  counting_init(&c, 0, 16);
  pb_allocator a = {c_alloc, c_free, &c};
  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  p.batch_size = BATCH;
  p.out_dtype = PB_OUT_NATIVE;
  p.allocator = &a;
  struct pb_error err = {{0}};
  for (int w = 0; w <= 2; w += 2) {
    p.workers = w;
    pb_loader *l = NULL;
    CHECK_OK(pb_loader_new(path, &p, &l, &err), &err);
    pb_batch *b = NULL;
    err.message[0] = '\0';
    CHECK_EQ(pb_loader_next(l, &b, &err), PB_EINVAL);
    CHECK(b == NULL);
    CHECK_CONTAINS(err.message, "not aligned to 64 bytes");
    pb_loader_free(l);
    CHECK(c.allocs >= 1);
    CHECK_EQ(live_of(&c), 0);
    CHECK_EQ(c.frees, c.allocs);
  }
  /* An allocator without functions is refused at once. */
  pb_allocator none = {NULL, NULL, NULL};
  p.allocator = &none;
  pb_loader *l = NULL;
  CHECK_EQ(pb_loader_new(path, &p, &l, &err), PB_EINVAL);
  CHECK(l == NULL);
  CHECK_CONTAINS(err.message, "allocator");
  pthread_mutex_destroy(&c.mu);
  printf("misaligned and empty allocators: refused\n");
}

int main(void) {
  test_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/d.raw", dir);
  test_make_raw(path, COUNT, PB_UINT16, C, 1, H, W);
  test_lives();
  test_process_wide();
  test_misaligned();
  pb__remove_tree(dir);
  return 0;
}
