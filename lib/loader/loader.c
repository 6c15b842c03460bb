/* The loader: sampler, worker threads, ordered prefetch queue, transforms, batches, cache
 * modes, DLPack export. Design notes in docs/loader.md. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/format_internal.h"
#include "formats/raw/raw.h"
#include "loader/loader_internal.h"

/* ---- batches -------------------------------------------------------------------------------- */

/* Whole batches (header, index array, data buffer) are recycled: fresh large allocations
 * would fault in new pages for every batch (and, with threads, unmapping them costs TLB
 * shootdowns on every core). Each worker has its own free list and a batch goes back to the
 * list of the worker that built it, so a worker keeps writing into buffers that are still in
 * its own cache; from one shared list, a buffer last written on one core would be rewritten
 * on another, every cache line moving between cores (a fixed cost per batch that made small
 * batches scale poorly). The pool is shared by the loader and its live batches and freed by
 * the last of them. */
typedef struct batch_impl batch_impl;

typedef struct pool_list {
  pthread_mutex_t mu;
  batch_impl **items;
  int n;
  int closed; /* the loader is gone: batches returned here are freed, not kept */
  char pad[64]; /* keeps neighbouring lists' hot fields off one cache line */
} pool_list;

typedef struct buf_pool {
  atomic_int refs;
  pb_allocator alloc; /* data buffers only; a copy, so pb_set_allocator later changes nothing */
  size_t size;    /* bytes of each data buffer */
  size_t nidx;    /* entries of each index array */
  int nlists, cap; /* cap: batches kept per list */
  pool_list *lists;
} buf_pool;

struct batch_impl {
  pb_batch pub; /* first, so a pb_batch * is a batch_impl * */
  atomic_int refs;
  int home;       /* the free list it returns to */
  buf_pool *pool; /* where it goes back to; holds a reference */
};

static void batch_destroy(buf_pool *p, batch_impl *bi) {
  if (bi == NULL) return;
  if (bi->pub.data != NULL) p->alloc.free(p->alloc.ctx, bi->pub.data, p->size);
  free(bi->pub.indices);
  free(bi->pub.labels);
  free(bi);
}

static buf_pool *pool_new(const pb_allocator *alloc, size_t size, size_t nidx, int nlists,
                          int cap) {
  buf_pool *p = calloc(1, sizeof *p);
  if (p == NULL) return NULL;
  p->alloc = *alloc;
  p->lists = calloc((size_t)nlists, sizeof *p->lists);
  int ok = p->lists != NULL;
  for (int i = 0; ok && i < nlists; i++) {
    p->lists[i].items = calloc((size_t)cap, sizeof *p->lists[i].items);
    ok = p->lists[i].items != NULL;
  }
  if (!ok) {
    for (int i = 0; p->lists != NULL && i < nlists; i++) free(p->lists[i].items);
    free(p->lists);
    free(p);
    return NULL;
  }
  for (int i = 0; i < nlists; i++) pthread_mutex_init(&p->lists[i].mu, NULL);
  atomic_init(&p->refs, 1);
  p->size = size;
  p->nidx = nidx;
  p->nlists = nlists;
  p->cap = cap;
  return p;
}

static void pool_unref(buf_pool *p) {
  if (p == NULL || atomic_fetch_sub(&p->refs, 1) != 1) return;
  for (int i = 0; i < p->nlists; i++) {
    pool_list *q = &p->lists[i];
    for (int j = 0; j < q->n; j++) batch_destroy(p, q->items[j]);
    pthread_mutex_destroy(&q->mu);
    free(q->items);
  }
  free(p->lists);
  free(p);
}

/* A batch from list home (recycled or new) in *out, holding one pool reference. Its header
 * fields are the caller's to fill. */
static int pool_get(buf_pool *p, int home, batch_impl **out, struct pb_error *err) {
  *out = NULL;
  pool_list *q = &p->lists[home];
  batch_impl *bi = NULL;
  pthread_mutex_lock(&q->mu);
  if (q->n > 0) bi = q->items[--q->n];
  pthread_mutex_unlock(&q->mu);
  if (bi == NULL) {
    bi = calloc(1, sizeof *bi);
    if (bi == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory for a batch header");
    bi->pub.indices = malloc(p->nidx * sizeof(int64_t));
    bi->pub.labels = malloc(p->nidx * sizeof(int64_t));
    bi->pub.data = p->alloc.alloc(p->alloc.ctx, p->size, 64);
    if (bi->pub.indices == NULL || bi->pub.labels == NULL || bi->pub.data == NULL) {
      batch_destroy(p, bi);
      return pb_error_set(err, PB_ENOMEM, "out of memory for a batch of %zu bytes", p->size);
    }
    if ((uintptr_t)bi->pub.data % 64 != 0) {
      void *bad = bi->pub.data;
      batch_destroy(p, bi); /* the buffer goes back to the allocator it came from */
      return pb_error_set(err, PB_EINVAL,
                          "loader: the batch allocator returned %p for %zu bytes, which is not "
                          "aligned to 64 bytes as asked",
                          bad, p->size);
    }
    bi->home = home;
    bi->pool = p;
  }
  atomic_init(&bi->refs, 1);
  atomic_fetch_add(&p->refs, 1);
  *out = bi;
  return PB_OK;
}

/* At pb_loader_free: spare buffers go back to the allocator now (pinned memory is scarce),
 * and batches still out are freed when released instead of being kept. */
static void pool_close(buf_pool *p) {
  if (p == NULL) return;
  for (int i = 0; i < p->nlists; i++) {
    pool_list *q = &p->lists[i];
    pthread_mutex_lock(&q->mu);
    q->closed = 1;
    int n = q->n;
    q->n = 0;
    batch_impl **spare = q->items;
    for (int j = 0; j < n; j++) batch_destroy(p, spare[j]);
    pthread_mutex_unlock(&q->mu);
  }
}

static void pool_put(buf_pool *p, batch_impl *bi) {
  pool_list *q = &p->lists[bi->home];
  pthread_mutex_lock(&q->mu);
  if (!q->closed && q->n < p->cap) {
    q->items[q->n++] = bi;
    bi = NULL;
  }
  pthread_mutex_unlock(&q->mu);
  batch_destroy(p, bi);
}

size_t pb_out_dtype_size(pb_out_dtype d) {
  switch (d) {
    case PB_OUT_FLOAT32: return 4;
    case PB_OUT_FLOAT16:
    case PB_OUT_BFLOAT16: return 2;
    case PB_OUT_NATIVE: return 0;
  }
  return 0;
}

size_t pb_batch_element_size(const pb_batch *batch) {
  if (batch == NULL) return 0;
  return batch->dtype == PB_OUT_NATIVE ? pb_dtype_size(batch->native_dtype)
                                       : pb_out_dtype_size(batch->dtype);
}

const char *pb_out_dtype_name(pb_out_dtype d) {
  switch (d) {
    case PB_OUT_FLOAT32: return "float32";
    case PB_OUT_FLOAT16: return "float16";
    case PB_OUT_BFLOAT16: return "bfloat16";
    case PB_OUT_NATIVE: return "native";
  }
  return "invalid";
}

static void batch_release(batch_impl *bi) {
  if (bi == NULL) return;
  if (atomic_fetch_sub(&bi->refs, 1) != 1) return;
  buf_pool *p = bi->pool;
  pool_put(p, bi);
  pool_unref(p);
}

void pb_batch_free(pb_batch *batch) { batch_release((batch_impl *)batch); }

typedef struct dl_export {
  DLManagedTensor mt;
  int64_t shape[5], strides[5];
  batch_impl *bi;
} dl_export;

static void dl_deleter(DLManagedTensor *self) {
  if (self == NULL) return;
  dl_export *x = self->manager_ctx;
  batch_release(x->bi);
  free(x);
}

int pb_batch_to_dlpack(pb_batch *batch, DLManagedTensor **out, struct pb_error *err) {
  *out = NULL;
  if (batch == NULL) return pb_error_set(err, PB_EINVAL, "pb_batch_to_dlpack: batch is NULL");
  dl_export *x = calloc(1, sizeof *x);
  if (x == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  batch_impl *bi = (batch_impl *)batch;
  atomic_fetch_add(&bi->refs, 1);
  x->bi = bi;
  int64_t stride = 1;
  for (int k = batch->ndim - 1; k >= 0; k--) {
    x->shape[k] = batch->shape[k];
    x->strides[k] = stride;
    stride *= batch->shape[k];
  }
  DLTensor *t = &x->mt.dl_tensor;
  t->data = batch->data;
  t->device.device_type = kDLCPU;
  t->device.device_id = 0;
  t->ndim = batch->ndim;
  if (batch->dtype == PB_OUT_NATIVE) {
    pb_dtype d = batch->native_dtype;
    t->dtype.code = (uint8_t)(d == PB_INT16 ? kDLInt : d == PB_FLOAT32 || d == PB_FLOAT64 ? kDLFloat
                                                                                         : kDLUInt);
  } else {
    t->dtype.code = (uint8_t)(batch->dtype == PB_OUT_BFLOAT16 ? kDLBfloat : kDLFloat);
  }
  t->dtype.bits = (uint8_t)(8 * pb_batch_element_size(batch));
  t->dtype.lanes = 1;
  t->shape = x->shape;
  t->strides = x->strides;
  t->byte_offset = 0;
  x->mt.manager_ctx = x;
  x->mt.deleter = dl_deleter;
  *out = &x->mt;
  return PB_OK;
}

/* ---- params --------------------------------------------------------------------------------- */

void pb_loader_params_init(pb_loader_params *params) {
  const pb_loader_params d = PB_LOADER_PARAMS_DEFAULTS;
  *params = d;
}

static int parse_int(const char *key, const char *v, long long lo, long long hi, long long *out,
                     struct pb_error *err) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi)
    return pb_error_set(err, PB_EINVAL, "loader option %s: '%s' is not an integer in [%lld, %lld]",
                        key, v, lo, hi);
  *out = x;
  return PB_OK;
}

int pb_loader_params_set(pb_loader_params *p, const char *key, const char *value,
                         struct pb_error *err) {
  if (p == NULL || key == NULL || value == NULL)
    return pb_error_set(err, PB_EINVAL, "pb_loader_params_set: NULL argument");
  long long x = 0;
  struct {
    const char *name;
    int *field;
    long long lo, hi;
  } ints[] = {{"batch_size", &p->batch_size, 1, 1 << 24}, {"workers", &p->workers, 0, 1024},
              {"prefetch", &p->prefetch, 1, 1024},       {"shuffle", &p->shuffle, 0, 1},
              {"drop_last", &p->drop_last, 0, 1},        {"rank", &p->rank, 0, 1 << 24},
              {"world_size", &p->world_size, 1, 1 << 24}, {"skip_errors", &p->skip_errors, 0, 1},
              {"shard_pad", &p->shard_pad, 0, 1},        {"resize", &p->resize, 1, 65536},
              {"flip", &p->flip, 0, 1},                  {"reduced_decode", &p->reduced_decode, 0, 1}};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    if (strcmp(key, ints[i].name) != 0) continue;
    PB_RETURN_NOT_OK(parse_int(key, value, ints[i].lo, ints[i].hi, &x, err));
    *ints[i].field = (int)x;
    return PB_OK;
  }
  if (strcmp(key, "seed") == 0) {
    char *end;
    errno = 0;
    unsigned long long s = strtoull(value, &end, 0);
    if (errno != 0 || end == value || *end != '\0')
      return pb_error_set(err, PB_EINVAL, "loader option seed: '%s' is not an integer", value);
    p->seed = (uint64_t)s;
    return PB_OK;
  }
  if (strcmp(key, "mean") == 0 || strcmp(key, "std") == 0) {
    char *end;
    float f = strtof(value, &end);
    if (end == value || *end != '\0' || !isfinite(f) || (key[0] == 's' && !(f > 0.0f)))
      return pb_error_set(err, PB_EINVAL, "loader option %s: '%s' is not a valid number", key, value);
    if (key[0] == 'm') p->mean = f;
    else p->std = f;
    return PB_OK;
  }
  if (strcmp(key, "transform") == 0) {
    if (strcmp(value, "none") == 0) p->transform = PB_TRANSFORM_NONE;
    else if (strcmp(value, "normalize") == 0) p->transform = PB_TRANSFORM_NORMALIZE;
    else if (strcmp(value, "augment") == 0) p->transform = PB_TRANSFORM_AUGMENT;
    else if (strcmp(value, "random_crop") == 0) p->transform = PB_TRANSFORM_RANDOM_CROP;
    else if (strcmp(value, "random_resized_crop") == 0) p->transform = PB_TRANSFORM_RANDOM_RESIZED_CROP;
    else if (strcmp(value, "center_crop_resize") == 0) p->transform = PB_TRANSFORM_CENTER_CROP_RESIZE;
    else
      return pb_error_set(err, PB_EINVAL,
                          "loader option transform: '%s' (want none, normalize, augment, "
                          "random_crop, random_resized_crop or center_crop_resize)",
                          value);
    return PB_OK;
  }
  if (strcmp(key, "crop") == 0) {
    long long h = 0, w = 0;
    char *end;
    errno = 0;
    h = strtoll(value, &end, 10);
    if (end != value && *end == 'x') w = strtoll(end + 1, &end, 10);
    else w = h;
    if (errno != 0 || end == value || *end != '\0' || h < 1 || w < 1 || h > 65536 || w > 65536)
      return pb_error_set(err, PB_EINVAL,
                          "loader option crop: '%s' (want N or HxW, each from 1 to 65536)", value);
    p->crop_h = (int)h;
    p->crop_w = (int)w;
    return PB_OK;
  }
  if (strcmp(key, "scale") == 0 || strcmp(key, "ratio") == 0) {
    char *end, *end2 = NULL;
    float lo = strtof(value, &end), hi = *end == ',' ? strtof(end + 1, &end2) : NAN;
    if (end == value || end2 == NULL || end2 == end + 1 || *end2 != '\0' || !isfinite(lo) ||
        !isfinite(hi) || !(lo > 0.0f) || !(hi >= lo))
      return pb_error_set(err, PB_EINVAL, "loader option %s: '%s' (want MIN,MAX with 0 < MIN <= MAX)",
                          key, value);
    if (key[0] == 's') {
      p->scale_min = lo;
      p->scale_max = hi;
    } else {
      p->ratio_min = lo;
      p->ratio_max = hi;
    }
    return PB_OK;
  }
  if (strcmp(key, "dtype") == 0) {
    if (strcmp(value, "float32") == 0) p->out_dtype = PB_OUT_FLOAT32;
    else if (strcmp(value, "float16") == 0) p->out_dtype = PB_OUT_FLOAT16;
    else if (strcmp(value, "bfloat16") == 0) p->out_dtype = PB_OUT_BFLOAT16;
    else if (strcmp(value, "native") == 0) p->out_dtype = PB_OUT_NATIVE;
    else
      return pb_error_set(err, PB_EINVAL,
                          "loader option dtype: '%s' (want float32, float16, bfloat16 or native)",
                          value);
    return PB_OK;
  }
  if (strcmp(key, "cache") == 0) {
    if (strcmp(value, "none") == 0) p->cache = PB_CACHE_NONE;
    else if (strcmp(value, "preload") == 0) p->cache = PB_CACHE_PRELOAD;
    else if (strcmp(value, "shared") == 0) p->cache = PB_CACHE_SHARED;
    else
      return pb_error_set(err, PB_EINVAL,
                          "loader option cache: '%s' (want none, preload or shared)", value);
    return PB_OK;
  }
  return pb_error_set(err, PB_EINVAL, "unknown loader option '%s'", key);
}

/* ---- the loader ----------------------------------------------------------------------------- */

typedef struct worker {
  struct pb_loader *l;
  pb_dataset *ds;     /* own handle (cache none only) */
  void *native;       /* one image, native pixels */
  float *padded;      /* (h+2) x (w+2) plane with a fill border, for the warp */
  float *plane;       /* h x w floats, for half-precision output of the warp */
  pb__warp_entry *table;
  /* crop transforms */
  unsigned char *region; /* a region's native pixels, up to the largest image */
  size_t region_size;
  float *rowf;           /* one source row as floats */
  float *tmp;            /* one row of the vertical pass */
  pb__rs_axis ax, ay;    /* resampling plans */
  pthread_t thread;
  int started;
  int home; /* its free list in the batch pool */
} worker;

typedef struct slot {
  int ready;
  int rc;
  batch_impl *batch;
  char message[sizeof(((struct pb_error *)0)->message)];
} slot;

struct pb_loader {
  pb_loader_params p;
  char *path;
  pb_image_meta meta;
  int64_t count;
  int64_t *labels; /* class label per dataset image; NULL when the format has none */
  int crop;        /* a crop transform: images may differ in height and width */
  int64_t *ih, *iw; /* crop transforms: each image's height and width */
  int64_t max_h, max_w;
  size_t img_bytes, out_esize, sample_bytes;
  int64_t planes, h, w;
  float a, b; /* normalisation folded into out = x * a + b */

  /* sampler */
  int64_t epoch;
  int64_t *order; /* this rank's dataset indices for the epoch */
  int64_t per_rank, nbatches;
  int64_t *ahead;  /* the order of epoch + 1 once a worker has planned it, else NULL */
  int planning;    /* a worker is planning epoch + 1 outside the lock */
  int ahead_failed; /* planning epoch + 1 ran out of memory: no running ahead until a reset */

  /* caches */
  unsigned char *preload;
  size_t preload_size;
  unsigned char *bad; /* images that failed while caching (skip_errors) */
  void *raw;          /* raw state (shared mode) */
  buf_pool *pool;     /* batch buffers */

  /* workers and the ordered queue */
  int nthreads; /* 0: caller's thread */
  worker *wk;   /* max(nthreads, 1) */
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_ready, cv_idle;
  slot *slots;
  int64_t nslots;
  /* Batches are numbered by one sequence across epochs: batch b of the current epoch is number
   * base + b, batch b of the next one base + nbatches + b, and number s uses slot s mod nslots.
   * Workers that have claimed the whole epoch go on into the next (at most one epoch ahead). */
  int64_t base, next_claim, next_deliver;
  int running, pausing, stop, busy;

  pb_loader_stats stats;
};

static int64_t now(void) { return pb_now_ns(); }

/* Batches in one of this rank's epochs. */
static int64_t epoch_batches(const pb_loader *l) {
  return l->p.drop_last ? l->per_rank / l->p.batch_size
                        : (l->per_rank + l->p.batch_size - 1) / l->p.batch_size;
}

/* Builds this epoch's order for this rank (lib/loader/sampler.c). */
static int plan_epoch(pb_loader *l, int64_t epoch, struct pb_error *err) {
  int64_t *order = malloc((size_t)l->per_rank * sizeof *order);
  if (order == NULL || pb__sampler_plan(l->count, l->p.rank, l->p.world_size, l->p.shuffle,
                                        l->p.seed, epoch, l->per_rank, order) != 0) {
    free(order);
    return pb_error_set(err, PB_ENOMEM, "out of memory for the sample order");
  }
  free(l->order);
  l->order = order;
  l->epoch = epoch;
  return PB_OK;
}

/* Names a sample in error messages: index, image name and file. */
static void sample_error(pb_loader *l, pb_dataset *ds, int64_t idx, struct pb_error *err) {
  if (err == NULL) return;
  pb_image_meta m;
  const char *name = "?";
  if (ds != NULL && pb_dataset_meta(ds, idx, &m, NULL) == PB_OK) name = m.name;
  pb_error_prefix(err, "sample %lld (image '%s' of %s): ", (long long)idx, name, l->path);
}

/* Native pixels to the batch slot at dst, with the transform. */
static void process_sample(pb_loader *l, worker *w, int64_t epoch, int64_t idx, const void *px,
                           unsigned char *dst, pb_batch_times *t) {
  if (l->p.out_dtype == PB_OUT_NATIVE) { /* a copy, timed per batch by build_batch */
    if (px != dst) memcpy(dst, px, l->sample_bytes);
    return;
  }
  if (l->p.transform != PB_TRANSFORM_AUGMENT) {
    int64_t t0 = now();
    pb__convert_affine(px, l->meta.dtype, dst, l->p.out_dtype, l->sample_bytes / l->out_esize,
                       l->a, l->b);
    t->convert_ns += now() - t0;
    return;
  }
  /* Per-sample stream: the same pixels whichever worker draws the sample. */
  pb_rng rng;
  pb_rng_init(&rng, pb_seed_mix(l->p.seed, (uint64_t)epoch, (uint64_t)idx));
  int flip = pb_rng_uniform(&rng) < 0.5;
  double angle = (pb_rng_uniform(&rng) * 2.0 - 1.0) * 15.0;
  int64_t t0 = now();
  pb__warp_plan(w->table, l->h, l->w, angle, flip);
  int64_t t1 = now(), conv = 0, tr = t1 - t0;
  size_t es = pb_dtype_size(l->meta.dtype), plane_px = (size_t)(l->h * l->w);
  const unsigned char *src = px;
  for (int64_t p = 0; p < l->planes; p++) {
    int64_t c0 = now();
    for (int64_t y = 0; y < l->h; y++)
      pb__convert_affine_f32(src + ((size_t)p * plane_px + (size_t)(y * l->w)) * es, l->meta.dtype,
                             w->padded + (y + 1) * (l->w + 2) + 1, (size_t)l->w, l->a, l->b);
    int64_t c1 = now();
    unsigned char *out = dst + (size_t)p * plane_px * l->out_esize;
    if (l->p.out_dtype == PB_OUT_FLOAT32) {
      pb__warp_apply(w->table, l->h, l->w, w->padded, l->b, (float *)(void *)out);
    } else {
      pb__warp_apply(w->table, l->h, l->w, w->padded, l->b, w->plane);
      if (l->p.out_dtype == PB_OUT_FLOAT16) pb__pack_f16(w->plane, (uint16_t *)(void *)out, plane_px);
      else pb__pack_bf16(w->plane, (uint16_t *)(void *)out, plane_px);
    }
    int64_t c2 = now();
    conv += c1 - c0;
    tr += c2 - c1;
  }
  t->convert_ns += conv;
  t->transform_ns += tr;
}


/* ---- the crop transforms ----------------------------------------------------------------------- */

/* Python's round() of x / 2 for an integer x: halves go to the even neighbour (torchvision's
 * centre crop rounds its offsets this way). */
static int64_t half_round_even(int64_t x) {
  int64_t k = x / 2;
  return (x % 2 != 0 && k % 2 != 0) ? k + 1 : k;
}

/* torchvision's RandomResizedCrop.get_params: 10 tries of a random area and log-uniform aspect
 * ratio, then a centre crop clamped to the ratio range. */
static void rrc_params(const pb_loader_params *p, pb_rng *rng, int64_t H, int64_t W, int64_t *y,
                       int64_t *x, int64_t *h, int64_t *w) {
  double area = (double)H * (double)W;
  double lr0 = log((double)p->ratio_min), lr1 = log((double)p->ratio_max);
  for (int k = 0; k < 10; k++) {
    double target = area * ((double)p->scale_min + pb_rng_uniform(rng) * (double)(p->scale_max - p->scale_min));
    double ratio = exp(lr0 + pb_rng_uniform(rng) * (lr1 - lr0));
    int64_t cw = (int64_t)llround(sqrt(target * ratio)), ch = (int64_t)llround(sqrt(target / ratio));
    if (cw > 0 && cw <= W && ch > 0 && ch <= H) {
      *y = (int64_t)pb_rng_below(rng, (uint64_t)(H - ch + 1));
      *x = (int64_t)pb_rng_below(rng, (uint64_t)(W - cw + 1));
      *h = ch;
      *w = cw;
      return;
    }
  }
  double in_ratio = (double)W / (double)H;
  if (in_ratio < (double)p->ratio_min) {
    *w = W;
    *h = (int64_t)llround((double)W / (double)p->ratio_min);
  } else if (in_ratio > (double)p->ratio_max) {
    *h = H;
    *w = (int64_t)llround((double)H * (double)p->ratio_max);
  } else {
    *w = W;
    *h = H;
  }
  if (*h > H) *h = H;
  if (*w > W) *w = W;
  if (*h < 1) *h = 1;
  if (*w < 1) *w = 1;
  *y = (H - *h) / 2;
  *x = (W - *w) / 2;
}

/* Region r (full-resolution coordinates) of sample idx into w->region, at 1/(*scale) where the
 * format can; *box: what w->region holds, in the scaled image's coordinates. */
static int get_region(pb_loader *l, worker *w, int64_t idx, const pb_region *r, int *scale,
                      pb_region *box, pb_batch_times *t, struct pb_error *err) {
  if (l->p.cache == PB_CACHE_NONE) {
    pb_stage_times st;
    int rc = pb__read_scaled(w->ds, idx, r, scale, w->region, w->region_size, box, &st, err);
    t->read_ns += st.read_ns;
    t->decompress_ns += st.decompress_ns;
    t->decode_ns += st.decode_ns;
    t->bytes_read += st.bytes_read;
    t->bytes_decoded += st.bytes_decoded;
    if (rc != PB_OK) sample_error(l, w->ds, idx, err);
    return rc;
  }
  if (l->bad != NULL && l->bad[idx])
    return pb_error_set(err, PB_EIO, "sample %lld of %s: failed to read while caching",
                        (long long)idx, l->path);
  int64_t t0 = now();
  const void *px = l->p.cache == PB_CACHE_PRELOAD ? (const void *)(l->preload + (size_t)idx * l->img_bytes)
                                                  : pb__raw_pixels(l->raw, idx, NULL);
  static const int64_t zero[PB_NDIM] = {0, 0, 0, 0, 0};
  pb__copy_box(w->region, r->start, r->count, px, zero, l->meta.shape, pb_dtype_size(l->meta.dtype));
  *scale = 1;
  *box = *r;
  t->read_ns += now() - t0;
  int64_t bytes = (int64_t)pb_dtype_size(l->meta.dtype);
  for (int k = 0; k < PB_NDIM; k++) bytes *= r->count[k];
  t->bytes_read += bytes;
  t->bytes_decoded += bytes;
  return PB_OK;
}

/* Writes a float plane into the batch in its output type. */
static void store_plane(pb_loader *l, const float *src, unsigned char *out, size_t n) {
  if (l->p.out_dtype == PB_OUT_FLOAT32) {
    if ((const void *)src != (void *)out) memcpy(out, src, n * sizeof(float));
  } else if (l->p.out_dtype == PB_OUT_FLOAT16) {
    pb__pack_f16(src, (uint16_t *)(void *)out, n);
  } else {
    pb__pack_bf16(src, (uint16_t *)(void *)out, n);
  }
}

/* One sample of a crop transform into dst. The random draws come from a stream of (seed, epoch,
 * index), so a sample is the same whichever worker builds it. */
static int crop_sample(pb_loader *l, worker *w, int64_t epoch, int64_t idx, unsigned char *dst,
                       pb_batch_times *t, struct pb_error *err) {
  const int64_t H = l->ih[idx], W = l->iw[idx], ch = l->p.crop_h, cw = l->p.crop_w;
  pb_rng rng;
  pb_rng_init(&rng, pb_seed_mix(l->p.seed, (uint64_t)epoch, (uint64_t)idx));
  pb_region r;
  for (int k = 0; k < PB_NDIM; k++) {
    r.start[k] = 0;
    r.count[k] = l->meta.shape[k];
  }
  size_t plane_out = (size_t)(ch * cw), es = pb_dtype_size(l->meta.dtype);
  int flip = 0;
  if (l->p.transform == PB_TRANSFORM_RANDOM_CROP) {
    r.start[PB_Y] = (int64_t)pb_rng_below(&rng, (uint64_t)(H - ch + 1));
    r.start[PB_X] = (int64_t)pb_rng_below(&rng, (uint64_t)(W - cw + 1));
    r.count[PB_Y] = ch;
    r.count[PB_X] = cw;
    flip = l->p.flip && pb_rng_uniform(&rng) < 0.5;
    int scale = 1;
    pb_region box;
    PB_RETURN_NOT_OK(get_region(l, w, idx, &r, &scale, &box, t, err));
    int64_t t0 = now();
    for (int64_t p = 0; p < l->planes; p++) {
      const unsigned char *src = w->region + (size_t)p * plane_out * es;
      unsigned char *out = dst + (size_t)p * plane_out * l->out_esize;
      float *f = l->p.out_dtype == PB_OUT_FLOAT32 ? (float *)(void *)out : w->plane;
      for (int64_t y = 0; y < ch; y++) {
        float *row = f + y * cw;
        if (!flip) {
          pb__convert_affine_f32(src + (size_t)(y * cw) * es, l->meta.dtype, row, (size_t)cw, l->a, l->b);
        } else {
          pb__convert_affine_f32(src + (size_t)(y * cw) * es, l->meta.dtype, w->rowf, (size_t)cw, l->a, l->b);
          for (int64_t x = 0; x < cw; x++) row[x] = w->rowf[cw - 1 - x];
        }
      }
      store_plane(l, f, out, plane_out);
    }
    t->convert_ns += now() - t0;
    return PB_OK;
  }
  /* The sampled span of the image, in full-resolution pixels: [ay, ay + ly) x [ax, ax + lx). */
  double ay, ly, ax, lx;
  if (l->p.transform == PB_TRANSFORM_RANDOM_RESIZED_CROP) {
    int64_t y, x, h, wd;
    rrc_params(&l->p, &rng, H, W, &y, &x, &h, &wd);
    flip = l->p.flip && pb_rng_uniform(&rng) < 0.5;
    r.start[PB_Y] = y;
    r.start[PB_X] = x;
    r.count[PB_Y] = h;
    r.count[PB_X] = wd;
    ay = (double)y;
    ax = (double)x;
    ly = (double)h;
    lx = (double)wd;
  } else { /* centre crop of the image resized to `resize` on its shorter side */
    int64_t rs = l->p.resize, rh, rw;
    if (H <= W) {
      rh = rs;
      rw = (int64_t)((double)rs * (double)W / (double)H);
    } else {
      rw = rs;
      rh = (int64_t)((double)rs * (double)H / (double)W);
    }
    double fy = (double)H / (double)rh, fx = (double)W / (double)rw;
    ay = (double)half_round_even(rh - ch) * fy;
    ax = (double)half_round_even(rw - cw) * fx;
    ly = (double)ch * fy;
    lx = (double)cw * fx;
    /* The resize sees pixels around the crop too: read the filter's reach on each side. */
    double my = (fy > 1.0 ? fy : 1.0) + 1.0, mx = (fx > 1.0 ? fx : 1.0) + 1.0;
    int64_t y0 = (int64_t)floor(ay - my), y1 = (int64_t)ceil(ay + ly + my);
    int64_t x0 = (int64_t)floor(ax - mx), x1 = (int64_t)ceil(ax + lx + mx);
    y0 = y0 < 0 ? 0 : y0;
    x0 = x0 < 0 ? 0 : x0;
    y1 = y1 > H ? H : y1;
    x1 = x1 > W ? W : x1;
    r.start[PB_Y] = y0;
    r.start[PB_X] = x0;
    r.count[PB_Y] = y1 - y0;
    r.count[PB_X] = x1 - x0;
  }
  /* The largest reduction that still leaves at least the output's resolution. */
  int scale = 1;
  if (l->p.reduced_decode && l->p.cache == PB_CACHE_NONE)
    for (int d = 8; d > 1 && scale == 1; d /= 2)
      if (ly / d >= (double)ch && lx / d >= (double)cw) scale = d;
  pb_region box;
  PB_RETURN_NOT_OK(get_region(l, w, idx, &r, &scale, &box, t, err));
  int64_t t0 = now();
  int64_t bh = box.count[PB_Y], bw = box.count[PB_X];
  double d = (double)scale;
  if (pb__rs_plan(&w->ay, (int)ch, ay / d - (double)box.start[PB_Y], ly / d, 0, (int)bh, 0) != 0 ||
      pb__rs_plan(&w->ax, (int)cw, ax / d - (double)box.start[PB_X], lx / d, 0, (int)bw, flip) != 0)
    return pb_error_set(err, PB_ENOMEM, "out of memory for a resampling plan");
  for (int64_t p = 0; p < l->planes; p++) {
    const unsigned char *src = w->region + (size_t)(p * bh * bw) * es;
    unsigned char *out = dst + (size_t)p * plane_out * l->out_esize;
    float *f = l->p.out_dtype == PB_OUT_FLOAT32 ? (float *)(void *)out : w->plane;
    pb__rs_apply(&w->ax, &w->ay, src, l->meta.dtype, bw, w->rowf, w->tmp, l->a, l->b, f,
                 f != w->plane);
    store_plane(l, f, out, plane_out);
  }
  t->transform_ns += now() - t0;
  return PB_OK;
}

/* Reads (or finds in the cache) sample idx and writes it into dst. */
static int load_sample(pb_loader *l, worker *w, int64_t epoch, int64_t idx, unsigned char *dst,
                       pb_batch_times *t, struct pb_error *err) {
  if (l->crop) return crop_sample(l, w, epoch, idx, dst, t, err);
  const void *px;
  if (l->p.cache == PB_CACHE_NONE) {
    pb_stage_times st;
    /* Native output needs no conversion: the backend decodes straight into the batch. */
    void *into = l->p.out_dtype == PB_OUT_NATIVE ? (void *)dst : w->native;
    int rc = pb_dataset_read(w->ds, idx, into, l->img_bytes, &st, err);
    t->read_ns += st.read_ns;
    t->decompress_ns += st.decompress_ns;
    t->decode_ns += st.decode_ns;
    t->bytes_read += st.bytes_read;
    t->bytes_decoded += st.bytes_decoded;
    if (rc != PB_OK) {
      sample_error(l, w->ds, idx, err);
      return rc;
    }
    px = into;
  } else {
    if (l->bad != NULL && l->bad[idx])
      return pb_error_set(err, PB_EIO, "sample %lld of %s: failed to read while caching",
                          (long long)idx, l->path);
    if (l->p.cache == PB_CACHE_PRELOAD) {
      px = l->preload + (size_t)idx * l->img_bytes;
    } else if (l->p.out_dtype == PB_OUT_NATIVE) {
      px = pb__raw_pixels(l->raw, idx, NULL); /* the map is read by the copy, in collate */
    } else {
      int64_t t0 = now();
      px = pb__raw_pixels(l->raw, idx, NULL);
      t->read_ns += now() - t0;
    }
    t->bytes_read += (int64_t)l->img_bytes;
    t->bytes_decoded += (int64_t)l->img_bytes;
  }
  process_sample(l, w, epoch, idx, px, dst, t);
  return PB_OK;
}

static int build_batch(pb_loader *l, worker *w, int64_t epoch, const int64_t *order, int64_t b,
                       batch_impl **out, struct pb_error *err) {
  *out = NULL;
  int64_t t0 = now();
  int64_t first = b * l->p.batch_size;
  int64_t n = l->per_rank - first < l->p.batch_size ? l->per_rank - first : l->p.batch_size;
  batch_impl *bi = NULL;
  PB_RETURN_NOT_OK(pool_get(l->pool, w->home, &bi, err));
  pb_batch *pb = &bi->pub;
  void *data = pb->data;
  int64_t *indices = pb->indices, *labels = pb->labels;
  memset(pb, 0, sizeof *pb); /* a recycled batch keeps nothing of its last use */
  pb->data = data;
  pb->indices = indices;
  pb->labels = labels;
  pb->dtype = l->p.out_dtype;
  pb->native_dtype = l->meta.dtype;
  pb->number = b;
  pb->epoch = epoch;
  if (l->meta.shape[PB_Z] > 1) {
    pb->ndim = 5;
    pb->shape[1] = l->meta.shape[PB_C];
    pb->shape[2] = l->meta.shape[PB_Z];
    pb->shape[3] = l->h;
    pb->shape[4] = l->w;
  } else {
    pb->ndim = 4;
    pb->shape[1] = l->meta.shape[PB_C];
    pb->shape[2] = l->h;
    pb->shape[3] = l->w;
  }
  pb->times.collate_ns += now() - t0;
  /* Native samples are plain copies of a few kB: two clock reads per sample would cost up to a
   * tenth of the copy where reading the clock is slow (VMs), so the loop is timed as a whole
   * and what the backend did not report as its own stages counts as collate. */
  const pb_batch_times *bt = &pb->times;
  int native = l->p.out_dtype == PB_OUT_NATIVE;
  int64_t loop0 = native ? now() : 0, stages0 = bt->read_ns + bt->decompress_ns + bt->decode_ns;
  int64_t k = 0;
  for (int64_t j = 0; j < n; j++) {
    int64_t idx = order[first + j];
    int rc = load_sample(l, w, epoch, idx, (unsigned char *)pb->data + (size_t)k * l->sample_bytes,
                         &pb->times, err);
    if (rc != PB_OK) {
      if (l->p.skip_errors) {
        pb->skipped++;
        continue;
      }
      batch_release(bi);
      return rc;
    }
    pb->labels[k] = l->labels != NULL ? l->labels[idx] : -1;
    pb->indices[k++] = idx;
  }
  if (native) {
    int64_t rest = now() - loop0 - (bt->read_ns + bt->decompress_ns + bt->decode_ns - stages0);
    pb->times.collate_ns += rest > 0 ? rest : 0;
  }
  pb->shape[0] = k;
  pb->nbytes = (size_t)k * l->sample_bytes;
  *out = bi;
  return PB_OK;
}

/* Under the lock: whether a worker may claim number next_claim now. Backpressure: only when
 * its slot (number mod nslots) has been consumed; past the current epoch only into the next one,
 * once its order is planned. */
static int claimable(const pb_loader *l) {
  if (l->next_claim >= l->next_deliver + l->nslots) return 0;
  int64_t end = l->base + l->nbatches;
  return l->next_claim < end || (l->ahead != NULL && l->next_claim < end + l->nbatches);
}

/* Under the lock: every batch of the current epoch is claimed and nobody has planned the next. */
static int plannable(const pb_loader *l) {
  return l->nbatches > 0 && l->ahead == NULL && !l->planning && !l->ahead_failed &&
         l->next_claim >= l->base + l->nbatches;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  pb_loader *l = w->l;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->stop && (!l->running || l->pausing || (!claimable(l) && !plannable(l))))
      pthread_cond_wait(&l->cv_work, &l->mu);
    if (l->stop) break;
    if (!claimable(l)) {
      /* Plan the next epoch's order outside the lock (a large dataset's shuffle takes
       * milliseconds); counted as busy so a draining reset waits for it. */
      int64_t next = l->epoch + 1;
      l->planning = 1;
      l->busy++;
      pthread_mutex_unlock(&l->mu);
      int64_t *order = malloc((size_t)l->per_rank * sizeof *order);
      if (order != NULL && pb__sampler_plan(l->count, l->p.rank, l->p.world_size, l->p.shuffle,
                                            l->p.seed, next, l->per_rank, order) != 0) {
        free(order);
        order = NULL;
      }
      pthread_mutex_lock(&l->mu);
      l->planning = 0;
      l->busy--;
      if (order != NULL) l->ahead = order;
      else l->ahead_failed = 1; /* the reset to the next epoch plans it and reports the error */
      pthread_cond_broadcast(&l->cv_work);
      pthread_cond_broadcast(&l->cv_idle);
      continue;
    }
    int64_t seq = l->next_claim++, b = seq - l->base, epoch = l->epoch;
    const int64_t *order = l->order;
    if (b >= l->nbatches) { /* running ahead: a batch of the next epoch */
      b -= l->nbatches;
      epoch++;
      order = l->ahead;
    }
    l->busy++;
    pthread_mutex_unlock(&l->mu);

    struct pb_error e;
    e.message[0] = '\0';
    batch_impl *bi = NULL;
    int rc = build_batch(l, w, epoch, order, b, &bi, &e);

    pthread_mutex_lock(&l->mu);
    l->busy--;
    if (l->stop) {
      batch_release(bi);
    } else {
      slot *s = &l->slots[seq % l->nslots];
      s->batch = bi;
      s->rc = rc;
      memcpy(s->message, e.message, sizeof s->message);
      s->ready = 1;
      pthread_cond_broadcast(&l->cv_ready);
    }
    if (l->busy == 0) pthread_cond_broadcast(&l->cv_idle);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

/* ---- set-up --------------------------------------------------------------------------------- */

static int worker_init(pb_loader *l, worker *w, struct pb_error *err) {
  w->l = l;
  size_t plane = (size_t)(l->h * l->w);
  if (l->crop) {
    /* Up to the largest image at full resolution (the most a region read returns). */
    w->region_size = (size_t)(l->max_h * l->max_w * l->planes) * pb_dtype_size(l->meta.dtype);
    w->region = pb_alloc(w->region_size);
    w->rowf = pb_alloc((size_t)l->max_w * sizeof(float));
    w->tmp = pb_alloc(pb__rs_tmp_floats(l->max_w, l->p.crop_w) * sizeof(float));
    w->plane = pb_alloc(plane * sizeof(float));
    if (w->region == NULL || w->rowf == NULL || w->tmp == NULL || w->plane == NULL)
      return pb_error_set(err, PB_ENOMEM, "out of memory for a worker's crop buffers");
    return PB_OK;
  }
  if (l->p.cache == PB_CACHE_NONE && l->p.out_dtype != PB_OUT_NATIVE) {
    w->native = pb_alloc(l->img_bytes);
    if (w->native == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  if (l->p.transform == PB_TRANSFORM_AUGMENT) {
    size_t padded = (size_t)((l->h + 2) * (l->w + 2));
    w->padded = pb_alloc(padded * sizeof(float));
    w->plane = pb_alloc(plane * sizeof(float));
    w->table = pb_alloc(plane * sizeof(pb__warp_entry));
    if (w->padded == NULL || w->plane == NULL || w->table == NULL)
      return pb_error_set(err, PB_ENOMEM, "out of memory");
    /* The border is never written by the conversion, so it keeps the fill value. */
    for (size_t i = 0; i < padded; i++) w->padded[i] = l->b;
  }
  return PB_OK;
}

static void worker_destroy(pb_loader *l, worker *w) {
  size_t plane = (size_t)(l->h * l->w);
  if (w->l == NULL) return; /* never initialised */
  pb_free(w->native, l->img_bytes);
  pb_free(w->padded, (size_t)((l->h + 2) * (l->w + 2)) * sizeof(float));
  pb_free(w->plane, plane * sizeof(float));
  pb_free(w->table, plane * sizeof(pb__warp_entry));
  pb_free(w->region, w->region_size);
  pb_free(w->rowf, (size_t)l->max_w * sizeof(float));
  pb_free(w->tmp, pb__rs_tmp_floats(l->max_w, l->p.crop_w) * sizeof(float));
  pb__rs_free(&w->ax);
  pb__rs_free(&w->ay);
  pb_dataset_free(w->ds);
}

static int check_params(const pb_loader_params *p, struct pb_error *err) {
  if (p->batch_size < 1) return pb_error_set(err, PB_EINVAL, "loader: batch_size must be >= 1");
  if (p->workers < 0) return pb_error_set(err, PB_EINVAL, "loader: workers must be >= 0");
  if (p->prefetch < 1) return pb_error_set(err, PB_EINVAL, "loader: prefetch must be >= 1");
  if (p->world_size < 1 || p->rank < 0 || p->rank >= p->world_size)
    return pb_error_set(err, PB_EINVAL, "loader: rank %d is outside world size %d", p->rank,
                        p->world_size);
  if (!(p->std > 0.0f) || !isfinite(p->mean))
    return pb_error_set(err, PB_EINVAL, "loader: std must be > 0 and mean finite");
  if ((unsigned)p->transform > PB_TRANSFORM_CENTER_CROP_RESIZE || (unsigned)p->out_dtype > PB_OUT_NATIVE ||
      (unsigned)p->cache > PB_CACHE_SHARED)
    return pb_error_set(err, PB_EINVAL, "loader: transform, dtype or cache mode out of range");
  if (p->out_dtype == PB_OUT_NATIVE && p->transform != PB_TRANSFORM_NONE)
    return pb_error_set(err, PB_EINVAL,
                        "loader: dtype native copies pixels unchanged, so transform must be none "
                        "(not %s); normalise and augment on the consumer's side (e.g. the GPU)",
                        p->transform == PB_TRANSFORM_NORMALIZE ? "normalize" : "a geometric one");
  if (p->transform >= PB_TRANSFORM_RANDOM_CROP) {
    if (p->crop_h < 1 || p->crop_w < 1 || p->crop_h > 65536 || p->crop_w > 65536)
      return pb_error_set(err, PB_EINVAL, "loader: crop %dx%d: each side must be from 1 to 65536",
                          p->crop_h, p->crop_w);
    if (p->transform == PB_TRANSFORM_CENTER_CROP_RESIZE &&
        (p->resize < p->crop_h || p->resize < p->crop_w))
      return pb_error_set(err, PB_EINVAL,
                          "loader: resize %d is smaller than the crop %dx%d (the centre crop would "
                          "not fit)", p->resize, p->crop_h, p->crop_w);
    if (!(p->scale_min > 0.0f) || !(p->scale_max >= p->scale_min) || !isfinite(p->scale_max) ||
        !(p->ratio_min > 0.0f) || !(p->ratio_max >= p->ratio_min) || !isfinite(p->ratio_max))
      return pb_error_set(err, PB_EINVAL, "loader: scale and ratio must be 0 < min <= max");
  }
  if (p->allocator != NULL && (p->allocator->alloc == NULL || p->allocator->free == NULL))
    return pb_error_set(err, PB_EINVAL, "loader: the batch allocator has no alloc or free function");
  return PB_OK;
}

/* Every image must match image 0 in dtype and shape, with T = 1, so samples stack. The crop
 * transforms make samples of one size from images of any height and width: there only dtype, C
 * and Z must match, and each image's size is kept. */
static int check_images(pb_loader *l, pb_dataset *ds, struct pb_error *err) {
  PB_RETURN_NOT_OK(pb_dataset_meta(ds, 0, &l->meta, err));
  if (l->meta.shape[PB_T] != 1)
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "%s: image 0 ('%s') has T = %lld; the loader takes one time point per "
                        "image (split time points into images first)",
                        l->path, l->meta.name, (long long)l->meta.shape[PB_T]);
  if (l->crop) {
    l->ih = malloc((size_t)l->count * sizeof *l->ih);
    l->iw = malloc((size_t)l->count * sizeof *l->iw);
    if (l->ih == NULL || l->iw == NULL)
      return pb_error_set(err, PB_ENOMEM, "out of memory for %lld image sizes", (long long)l->count);
  }
  int same_size = 1;
  pb_image_meta m = l->meta;
  for (int64_t i = 0; i < l->count; i++) {
    if (i > 0) PB_RETURN_NOT_OK(pb_dataset_meta(ds, i, &m, err));
    int same = m.dtype == l->meta.dtype;
    for (int k = 0; k < PB_NDIM; k++)
      if (m.shape[k] != l->meta.shape[k]) {
        if (l->crop && (k == PB_Y || k == PB_X)) same_size = 0;
        else same = 0;
      }
    if (!same) /* a property of the data, not of the call: not PB_EINVAL */
      return pb_error_set(err, PB_EFORMAT,
                          "%s: image %lld ('%s') is %s %lldx%lldx%lldx%lldx%lld but image 0 ('%s') "
                          "is %s %lldx%lldx%lldx%lldx%lld (TCZYX); batches need one shape%s",
                          l->path, (long long)i, m.name, pb_dtype_name(m.dtype),
                          (long long)m.shape[0], (long long)m.shape[1], (long long)m.shape[2],
                          (long long)m.shape[3], (long long)m.shape[4], l->meta.name,
                          pb_dtype_name(l->meta.dtype), (long long)l->meta.shape[0],
                          (long long)l->meta.shape[1], (long long)l->meta.shape[2],
                          (long long)l->meta.shape[3], (long long)l->meta.shape[4],
                          l->crop ? " (a crop transform lets height and width differ, not dtype, "
                                    "T, C or Z)"
                                  : " (or a crop transform: random_crop, random_resized_crop, "
                                    "center_crop_resize)");
    if (!l->crop) continue;
    l->ih[i] = m.shape[PB_Y];
    l->iw[i] = m.shape[PB_X];
    if (m.shape[PB_Y] > l->max_h) l->max_h = m.shape[PB_Y];
    if (m.shape[PB_X] > l->max_w) l->max_w = m.shape[PB_X];
    if (l->p.transform == PB_TRANSFORM_RANDOM_CROP &&
        (m.shape[PB_Y] < l->p.crop_h || m.shape[PB_X] < l->p.crop_w))
      return pb_error_set(err, PB_EFORMAT,
                          "%s: image %lld ('%s') is %lldx%lld, smaller than the random crop %dx%d",
                          l->path, (long long)i, m.name, (long long)m.shape[PB_Y],
                          (long long)m.shape[PB_X], l->p.crop_h, l->p.crop_w);
  }
  if (l->crop && !same_size && l->p.cache != PB_CACHE_NONE)
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "%s: images of different sizes are cached one size only; use cache none "
                        "with the crop transforms here",
                        l->path);
  return PB_OK;
}

/* Reads image i into dst for a cache; with skip_errors a failure marks it bad. */
static int cache_read(pb_loader *l, pb_dataset *ds, int64_t i, void *dst, struct pb_error *err) {
  int rc = pb_dataset_read(ds, i, dst, l->img_bytes, NULL, err);
  if (rc == PB_OK) return PB_OK;
  if (!l->p.skip_errors) {
    sample_error(l, ds, i, err);
    return rc;
  }
  if (l->bad == NULL && (l->bad = calloc((size_t)l->count, 1)) == NULL)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  l->bad[i] = 1;
  memset(dst, 0, l->img_bytes);
  return PB_OK;
}

static int build_preload(pb_loader *l, pb_dataset *ds, struct pb_error *err) {
  int64_t t0 = now();
  l->preload_size = (size_t)l->count * l->img_bytes;
  l->preload = pb_alloc(l->preload_size);
  if (l->preload == NULL)
    return pb_error_set(err, PB_ENOMEM, "preload: out of memory for %zu bytes", l->preload_size);
  for (int64_t i = 0; i < l->count; i++)
    PB_RETURN_NOT_OK(cache_read(l, ds, i, l->preload + (size_t)i * l->img_bytes, err));
  l->stats.preload_ns = now() - t0;
  l->stats.preload_bytes = (int64_t)l->preload_size;
  return PB_OK;
}

static int open_raw_checked(pb_loader *l, const char *file, struct pb_error *err) {
  PB_RETURN_NOT_OK(pb__raw_open_mapped(file, &l->raw, err));
  pb_image_meta m;
  int same = pb__format_raw.count(l->raw) == l->count;
  if (same) {
    PB_RETURN_NOT_OK(pb__format_raw.meta(l->raw, 0, &m, err));
    same = m.dtype == l->meta.dtype;
    for (int k = 0; k < PB_NDIM; k++) same = same && m.shape[k] == l->meta.shape[k];
  }
  if (!same)
    return pb_error_set(err, PB_EFORMAT,
                        "cache file %s does not match dataset %s (image count or shape differs); "
                        "remove it or give another cache_path",
                        file, l->path);
  return PB_OK;
}

static int build_shared(pb_loader *l, pb_dataset *ds, struct pb_error *err) {
  int64_t t0 = now();
  const char *given = l->p.cache_path;
  if (given == NULL && strcmp(pb_dataset_format(ds), "raw") == 0) {
    /* Already decoded pixels in one file: map the dataset itself. */
    PB_RETURN_NOT_OK(open_raw_checked(l, l->path, err));
  } else if (given != NULL && access(given, F_OK) == 0) {
    PB_RETURN_NOT_OK(open_raw_checked(l, given, err));
  } else {
    static atomic_int counter;
    char tmp[4096];
    if (given == NULL) {
      const char *dir = getenv("TMPDIR");
      if (dir == NULL || dir[0] == '\0') dir = "/tmp";
      snprintf(tmp, sizeof tmp, "%s/pipebench-cache-%d-%d.raw", dir, (int)getpid(),
               atomic_fetch_add(&counter, 1));
    }
    const char *file = given != NULL ? given : tmp;
    pb_writer *wr = NULL;
    PB_RETURN_NOT_OK(pb_writer_new(file, "raw", NULL, &wr, err));
    void *buf = pb_alloc(l->img_bytes);
    int rc = buf == NULL ? pb_error_set(err, PB_ENOMEM, "out of memory") : PB_OK;
    pb_image_meta m;
    for (int64_t i = 0; rc == PB_OK && i < l->count; i++) {
      rc = pb_dataset_meta(ds, i, &m, err);
      if (rc == PB_OK) rc = cache_read(l, ds, i, buf, err);
      if (rc == PB_OK) rc = pb_writer_add(wr, &m, buf, err);
    }
    if (rc == PB_OK) rc = pb_writer_finish(wr, err);
    pb_writer_free(wr);
    pb_free(buf, l->img_bytes);
    if (rc != PB_OK) {
      pb_error_prefix(err, "building cache file %s: ", file);
      return rc;
    }
    rc = open_raw_checked(l, file, err);
    /* An anonymous cache lives only as long as its map: nothing is left behind, even on a
     * crash after this point. */
    if (given == NULL) unlink(file);
    PB_RETURN_NOT_OK(rc);
  }
  l->stats.preload_ns = now() - t0;
  l->stats.preload_bytes = (int64_t)pb__raw_file_size(l->raw);
  return PB_OK;
}

int pb_loader_new(const char *path, const pb_loader_params *params, pb_loader **out,
                  struct pb_error *err) {
  *out = NULL;
  pb_loader_params defaults = PB_LOADER_PARAMS_DEFAULTS;
  if (params == NULL) params = &defaults;
  PB_RETURN_NOT_OK(check_params(params, err));
  pb_loader *l = calloc(1, sizeof *l);
  if (l == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  l->p = *params;
  l->p.format = NULL;     /* borrowed text is not kept */
  l->p.cache_path = NULL;
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv_work, NULL);
  pthread_cond_init(&l->cv_ready, NULL);
  pthread_cond_init(&l->cv_idle, NULL);
  l->nthreads = params->workers;
  int rc = PB_OK;
  pb_dataset *ds0 = NULL;
  if ((l->path = strdup(path)) == NULL) {
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    goto fail;
  }
  rc = pb_dataset_open(path, params->format, &ds0, err);
  if (rc != PB_OK) goto fail;
  l->count = pb_dataset_count(ds0);
  if (l->count < 1) {
    rc = pb_error_set(err, PB_EFORMAT, "%s: the dataset has no images", path);
    goto fail;
  }
  l->crop = l->p.transform >= PB_TRANSFORM_RANDOM_CROP;
  rc = check_images(l, ds0, err);
  if (rc != PB_OK) goto fail;
  if (pb_dataset_label(ds0, 0) >= 0) { /* labels are looked up once, not per sample */
    l->labels = malloc((size_t)l->count * sizeof *l->labels);
    if (l->labels == NULL) {
      rc = pb_error_set(err, PB_ENOMEM, "out of memory for %lld labels", (long long)l->count);
      goto fail;
    }
    for (int64_t i = 0; i < l->count; i++) l->labels[i] = pb_dataset_label(ds0, i);
  }
  l->img_bytes = pb_image_bytes(&l->meta);
  l->out_esize = l->p.out_dtype == PB_OUT_NATIVE ? pb_dtype_size(l->meta.dtype)
                                                 : pb_out_dtype_size(l->p.out_dtype);
  l->h = l->crop ? l->p.crop_h : l->meta.shape[PB_Y];
  l->w = l->crop ? l->p.crop_w : l->meta.shape[PB_X];
  l->planes = l->meta.shape[PB_C] * l->meta.shape[PB_Z];
  l->sample_bytes = (size_t)(l->planes * l->h * l->w) * l->out_esize;
  if (l->p.transform == PB_TRANSFORM_NONE) {
    l->a = 1.0f;
    l->b = 0.0f;
  } else {
    double scale = 1.0;
    switch (l->meta.dtype) {
      case PB_UINT8: scale = 1.0 / 255.0; break;
      case PB_UINT16: scale = 1.0 / 65535.0; break;
      case PB_UINT32: scale = 1.0 / 4294967295.0; break;
      case PB_INT16: scale = 1.0 / 32767.0; break;
      default: break;
    }
    l->a = (float)(scale / (double)l->p.std);
    l->b = (float)(-(double)l->p.mean / (double)l->p.std);
  }
  l->per_rank = pb__sampler_per_rank(l->count, l->p.world_size, l->p.shard_pad);
  if (l->per_rank < 1) {
    rc = pb_error_set(err, PB_EINVAL,
                      "loader: %lld images cannot be shared among %d ranks without padding "
                      "(fewer images than ranks); set shard_pad=1 or use fewer ranks",
                      (long long)l->count, l->p.world_size);
    goto fail;
  }
  l->nbatches = epoch_batches(l);
  l->stats.dataset_count = l->count;

  if (l->p.cache == PB_CACHE_PRELOAD) rc = build_preload(l, ds0, err);
  else if (l->p.cache == PB_CACHE_SHARED) {
    l->p.cache_path = params->cache_path; /* borrowed only during this call */
    rc = build_shared(l, ds0, err);
    l->p.cache_path = NULL;
  }
  if (rc != PB_OK) goto fail;
  rc = plan_epoch(l, 0, err);
  if (rc != PB_OK) goto fail;

  int nctx = l->nthreads > 0 ? l->nthreads : 1;
  l->wk = calloc((size_t)nctx, sizeof *l->wk);
  if (l->wk == NULL) {
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    goto fail;
  }
  for (int i = 0; i < nctx; i++) {
    l->wk[i].home = i;
    rc = worker_init(l, &l->wk[i], err);
    if (rc != PB_OK) goto fail;
    if (l->p.cache == PB_CACHE_NONE) {
      if (i == 0) {
        l->wk[0].ds = ds0; /* the caller no longer uses it after set-up */
        ds0 = NULL;
      } else {
        rc = pb_dataset_open(path, params->format, &l->wk[i].ds, err);
        if (rc != PB_OK) goto fail;
      }
    }
  }
  pb_dataset_free(ds0);
  ds0 = NULL;
  /* One free list per worker, each keeping enough batches for that worker's share of the
   * queue, the one it is building and a few held by the caller. */
  l->pool = pool_new(params->allocator != NULL ? params->allocator : pb_get_allocator(),
                     (size_t)l->p.batch_size * l->sample_bytes, (size_t)l->p.batch_size, nctx,
                     l->p.prefetch + 1 + 4);
  if (l->pool == NULL) {
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    goto fail;
  }
  if (l->nthreads > 0) {
    l->nslots = (int64_t)l->nthreads * l->p.prefetch;
    l->slots = calloc((size_t)l->nslots, sizeof *l->slots);
    if (l->slots == NULL) {
      rc = pb_error_set(err, PB_ENOMEM, "out of memory");
      goto fail;
    }
    for (int i = 0; i < l->nthreads; i++) {
      if (pthread_create(&l->wk[i].thread, NULL, worker_main, &l->wk[i]) != 0) {
        rc = pb_error_set(err, PB_ENOMEM, "loader: cannot start worker thread %d", i);
        goto fail;
      }
      l->wk[i].started = 1;
    }
  }
  *out = l;
  return PB_OK;
fail:
  pb_dataset_free(ds0);
  pb_loader_free(l);
  return rc;
}

/* ---- iteration ------------------------------------------------------------------------------ */

static void account(pb_loader *l, batch_impl *bi) {
  pb_loader_stats *s = &l->stats;
  const pb_batch_times *t = &bi->pub.times;
  s->batches++;
  s->samples += bi->pub.shape[0];
  s->skipped += bi->pub.skipped;
  s->times.read_ns += t->read_ns;
  s->times.decompress_ns += t->decompress_ns;
  s->times.decode_ns += t->decode_ns;
  s->times.convert_ns += t->convert_ns;
  s->times.transform_ns += t->transform_ns;
  s->times.collate_ns += t->collate_ns;
  s->times.wait_ns += t->wait_ns;
  s->times.bytes_read += t->bytes_read;
  s->times.bytes_decoded += t->bytes_decoded;
}

int pb_loader_next(pb_loader *l, pb_batch **batch, struct pb_error *err) {
  int64_t t0 = now();
  *batch = NULL;
  if (l == NULL) return pb_error_set(err, PB_EINVAL, "pb_loader_next: loader is NULL");
  batch_impl *bi = NULL;
  pthread_mutex_lock(&l->mu);
  if (!l->running) {
    l->running = 1;
    pthread_cond_broadcast(&l->cv_work);
  }
  for (;;) {
    if (l->next_deliver >= l->base + l->nbatches) {
      pthread_mutex_unlock(&l->mu);
      return PB_OK; /* end of epoch (workers may already be building the next one's batches) */
    }
    int rc;
    if (l->nthreads == 0) {
      int64_t b = l->next_deliver++ - l->base;
      pthread_mutex_unlock(&l->mu);
      rc = build_batch(l, &l->wk[0], l->epoch, l->order, b, &bi, err);
      pthread_mutex_lock(&l->mu);
    } else {
      slot *s = &l->slots[l->next_deliver % l->nslots];
      while (!s->ready) pthread_cond_wait(&l->cv_ready, &l->mu);
      bi = s->batch;
      rc = s->rc;
      if (rc != PB_OK && err != NULL) memcpy(err->message, s->message, sizeof err->message);
      s->batch = NULL;
      s->ready = 0;
      l->next_deliver++;
      pthread_cond_broadcast(&l->cv_work);
    }
    if (rc != PB_OK) {
      pthread_mutex_unlock(&l->mu);
      return rc;
    }
    if (bi->pub.shape[0] > 0) break;
    /* Every sample of this batch was skipped: account for them and go on. */
    l->stats.skipped += bi->pub.skipped;
    batch_release(bi);
    bi = NULL;
  }
  bi->pub.times.wait_ns = now() - t0;
  account(l, bi);
  pthread_mutex_unlock(&l->mu);
  *batch = &bi->pub;
  return PB_OK;
}

int pb_loader_reset(pb_loader *l, int64_t epoch, struct pb_error *err) {
  if (l == NULL) return pb_error_set(err, PB_EINVAL, "pb_loader_reset: loader is NULL");
  if (epoch < 0) return pb_error_set(err, PB_EINVAL, "pb_loader_reset: epoch %lld < 0", (long long)epoch);
  pthread_mutex_lock(&l->mu);
  if (l->nthreads > 0 && epoch == l->epoch + 1 && l->next_deliver == l->base + l->nbatches) {
    /* The epoch after one delivered in full: keep what the workers built or are building for
     * it. Nobody still reads the old order (each of its batches was delivered, so built). */
    while (l->planning) pthread_cond_wait(&l->cv_idle, &l->mu);
    if (l->ahead != NULL) {
      free(l->order);
      l->order = l->ahead;
      l->ahead = NULL;
      l->epoch = epoch;
      l->base += l->nbatches;
      l->running = 1;
      pthread_cond_broadcast(&l->cv_work);
      pthread_mutex_unlock(&l->mu);
      return PB_OK;
    }
    /* Not planned (nothing claimed ahead, or planning failed): as any other reset. */
  }
  l->pausing = 1;
  while (l->busy > 0) pthread_cond_wait(&l->cv_idle, &l->mu);
  for (int64_t i = 0; i < l->nslots; i++) {
    batch_release(l->slots[i].batch);
    l->slots[i].batch = NULL;
    l->slots[i].ready = 0;
  }
  free(l->ahead);
  l->ahead = NULL;
  l->ahead_failed = 0;
  int rc = plan_epoch(l, epoch, err);
  l->base = l->next_claim = l->next_deliver = 0;
  /* no order: an empty epoch rather than a stale one; a later reset that plans one restores it */
  l->nbatches = rc == PB_OK ? epoch_batches(l) : 0;
  l->pausing = 0;
  l->running = 1;
  pthread_cond_broadcast(&l->cv_work);
  pthread_mutex_unlock(&l->mu);
  return rc;
}

int64_t pb_loader_batches_per_epoch(const pb_loader *l) { return l->nbatches; }
int64_t pb_loader_samples_per_epoch(const pb_loader *l) { return l->per_rank; }
const pb_image_meta *pb_loader_meta(const pb_loader *l) { return &l->meta; }

void pb_loader_get_stats(const pb_loader *loader, pb_loader_stats *out) {
  pb_loader *l = (pb_loader *)(uintptr_t)loader; /* the lock is not part of the value */
  pthread_mutex_lock(&l->mu);
  *out = l->stats;
  pthread_mutex_unlock(&l->mu);
}

void pb_loader_free(pb_loader *l) {
  if (l == NULL) return;
  pthread_mutex_lock(&l->mu);
  l->stop = 1;
  pthread_cond_broadcast(&l->cv_work);
  pthread_mutex_unlock(&l->mu);
  int nctx = l->nthreads > 0 ? l->nthreads : 1;
  if (l->wk != NULL) {
    for (int i = 0; i < nctx; i++)
      if (l->wk[i].started) pthread_join(l->wk[i].thread, NULL);
    for (int i = 0; i < nctx; i++) worker_destroy(l, &l->wk[i]);
  }
  for (int64_t i = 0; l->slots != NULL && i < l->nslots; i++) batch_release(l->slots[i].batch);
  free(l->slots);
  pool_close(l->pool);
  pool_unref(l->pool); /* batches still out keep it alive */
  free(l->wk);
  free(l->order);
  free(l->ahead);
  free(l->labels);
  free(l->ih);
  free(l->iw);
  pb_free(l->preload, l->preload_size);
  free(l->bad);
  if (l->raw != NULL) pb__format_raw.close(l->raw);
  free(l->path);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv_work);
  pthread_cond_destroy(&l->cv_ready);
  pthread_cond_destroy(&l->cv_idle);
  free(l);
}
