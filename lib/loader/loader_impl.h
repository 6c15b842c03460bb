/* The loader's shared state, split by concern across lib/loader: batch_pool.c (recycled batch
 * buffers), loader_dlpack.c (DLPack export), loader_params.c (the option parser), workers.c
 * (worker threads and the ordered queue), transforms.c (normalise, flip, rotate, crops),
 * cache_modes.c (preload and the shared raw cache), loader.c (set-up, iteration, the sampler's
 * epochs). Internal. */
#ifndef PB_LOADER_IMPL_H
#define PB_LOADER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "formats/format_internal.h"
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
  int *rc;  /* with a reader team: each sample's result, batch_size entries */
} worker;

/* One batch's samples handed to the reader team (readers.c): sample j of idx lands in slot j
 * of data. Lives on the stack of the thread building the batch, which waits for done == n. */
typedef struct read_job {
  int64_t epoch;
  const int64_t *idx;
  int64_t n;
  unsigned char *data;
  int *rc;               /* per sample: its read's result; PB__READ_NOT_DONE when left unread */
  int64_t next, done;    /* next sample to claim; samples finished */
  int64_t fail;          /* the first failed sample, n when none */
  pb_batch_times times;  /* the samples' stage times, summed */
  char message[sizeof(((struct pb_error *)0)->message)]; /* sample fail's error */
  struct read_job *after; /* the queue */
} read_job;

/* A sample the team left unread: an earlier one of its batch had failed (skip_errors 0). */
#define PB__READ_NOT_DONE 1

/* The reader team: nreaders threads, each with its own dataset handle and scratch buffers (a
 * worker struct without a batch), reading the samples of the queued batches, oldest first. */
typedef struct read_team {
  int n;
  worker *rd;
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done;
  read_job *head, *tail;
  int stop;
} read_team;

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

  int nreaders;    /* the team's size (pb__loader_team_size), 0: no team */
  read_team *team; /* NULL: each worker reads its batch's samples itself, one after another */

  pb_loader_stats stats;
};

/* The stages a sample's own timers report (a native crop times its transform as well). */
static inline int64_t pb__stages_ns(const pb_batch_times *t) {
  return t->read_ns + t->decompress_ns + t->decode_ns + t->transform_ns + t->convert_ns;
}

/* ---- batch_pool.c ---------------------------------------------------------------------------- */

/** A pool of nlists free lists of up to cap batches of size data bytes and nidx indices each;
 * NULL when out of memory. Shared by the loader and its live batches (reference counted). */
buf_pool *pb__pool_new(const pb_allocator *alloc, size_t size, size_t nidx, int nlists, int cap);
void pb__pool_unref(buf_pool *p);
int pb__pool_get(buf_pool *p, int home, batch_impl **out, struct pb_error *err);
void pb__pool_close(buf_pool *p);
void pb__batch_release(batch_impl *bi);

/* ---- loader.c -------------------------------------------------------------------------------- */

int64_t pb__loader_epoch_batches(const pb_loader *l);
int pb__loader_plan_epoch(pb_loader *l, int64_t epoch, struct pb_error *err);
void pb__loader_sample_error(pb_loader *l, pb_dataset *ds, int64_t idx, struct pb_error *err);

/* ---- transforms.c ---------------------------------------------------------------------------- */

/** Reads sample idx (dataset index) and writes it, transformed, to the batch slot at dst. */
int pb__loader_load_sample(pb_loader *l, worker *w, int64_t epoch, int64_t idx, unsigned char *dst,
                           pb_batch_times *t, struct pb_error *err);

/* ---- workers.c ------------------------------------------------------------------------------- */

int pb__loader_build_batch(pb_loader *l, worker *w, int64_t epoch, const int64_t *order, int64_t b,
                           batch_impl **out, struct pb_error *err);
void *pb__loader_worker_main(void *arg);
int pb__loader_worker_init(pb_loader *l, worker *w, struct pb_error *err);
void pb__loader_worker_destroy(pb_loader *l, worker *w);

/* ---- readers.c ------------------------------------------------------------------------------- */

/** The reader team's size for this loader (0: no team), from reads_in_flight, bytes_in_flight,
 * the cache mode, whether path is a URL, the workers and the batch size. */
int pb__loader_team_size(const pb_loader *l, const char *path);
/** Starts a team of n readers; reader 0 takes *ds0 (set to NULL), the others clone it. */
int pb__team_start(pb_loader *l, int n, pb_dataset **ds0, const pb_read_options *ro,
                   struct pb_error *err);
/** Stops and frees the team (no batch may be waiting on it). NULL is ignored. */
void pb__team_free(pb_loader *l, read_team *t);
/** Reads samples idx[0..n) of the batch at once into their slots of data; returns when every
 * one is done. rc[j]: each sample's result; the first failure's message in err (its rc
 * returned), PB_OK when none failed. */
int pb__team_read(pb_loader *l, int64_t epoch, const int64_t *idx, int64_t n, unsigned char *data,
                  int *rc, pb_batch_times *t, struct pb_error *err);

/* ---- cache_modes.c --------------------------------------------------------------------------- */

int pb__loader_build_preload(pb_loader *l, pb_dataset *ds, struct pb_error *err);
int pb__loader_build_shared(pb_loader *l, pb_dataset *ds, struct pb_error *err);

#endif
