/* Worker threads, the ordered prefetch queue they fill, and batch assembly. */
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
#include "loader/loader_impl.h"

/* The batch's samples read at once by the reader team, each into its own slot; then, with
 * skip_errors, those that failed are closed up, labels and indices following in order. */
static int team_samples(pb_loader *l, worker *w, int64_t epoch, const int64_t *idx, int64_t n,
                        pb_batch *pb, int64_t *kept, struct pb_error *err) {
  unsigned char *data = pb->data;
  size_t sb = l->sample_bytes;
  int rc = pb__team_read(l, epoch, idx, n, data, w->rc, &pb->times, err);
  if (rc != PB_OK && !l->p.skip_errors) return rc;
  int64_t t0 = pb_now_ns(), k = 0;
  for (int64_t j = 0; j < n; j++) {
    if (w->rc[j] != PB_OK) {
      pb->skipped++;
      continue;
    }
    if (k != j) memmove(data + (size_t)k * sb, data + (size_t)j * sb, sb);
    pb->labels[k] = l->labels != NULL ? l->labels[idx[j]] : -1;
    pb->indices[k++] = idx[j];
  }
  pb->times.collate_ns += pb_now_ns() - t0;
  *kept = k;
  return PB_OK;
}

int pb__loader_build_batch(pb_loader *l, worker *w, int64_t epoch, const int64_t *order, int64_t b,
                           batch_impl **out, struct pb_error *err) {
  *out = NULL;
  int64_t t0 = pb_now_ns();
  int64_t first = b * l->p.batch_size;
  int64_t n = l->per_rank - first < l->p.batch_size ? l->per_rank - first : l->p.batch_size;
  batch_impl *bi = NULL;
  PB_RETURN_NOT_OK(pb__pool_get(l->pool, w->home, &bi, err));
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
  pb->times.collate_ns += pb_now_ns() - t0;
  int64_t k = 0;
  if (l->team != NULL) {
    int rc = team_samples(l, w, epoch, order + first, n, pb, &k, err);
    if (rc != PB_OK) {
      pb__batch_release(bi);
      return rc;
    }
    pb->shape[0] = k;
    pb->nbytes = (size_t)k * l->sample_bytes;
    *out = bi;
    return PB_OK;
  }
  /* Native samples are plain copies of a few kB: two clock reads per sample would cost up to a
   * tenth of the copy where reading the clock is slow (VMs), so the loop is timed as a whole
   * and what the backend did not report as its own stages counts as collate. */
  const pb_batch_times *bt = &pb->times;
  int native = l->p.out_dtype == PB_OUT_NATIVE;
  int64_t loop0 = native ? pb_now_ns() : 0, stages0 = pb__stages_ns(bt);
  for (int64_t j = 0; j < n; j++) {
    int64_t idx = order[first + j];
    int rc = pb__loader_load_sample(l, w, epoch, idx, (unsigned char *)pb->data + (size_t)k * l->sample_bytes,
                         &pb->times, err);
    if (rc != PB_OK) {
      if (l->p.skip_errors) {
        pb->skipped++;
        continue;
      }
      pb__batch_release(bi);
      return rc;
    }
    pb->labels[k] = l->labels != NULL ? l->labels[idx] : -1;
    pb->indices[k++] = idx;
  }
  if (native) {
    int64_t rest = pb_now_ns() - loop0 - (pb__stages_ns(bt) - stages0);
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

void *pb__loader_worker_main(void *arg) {
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
    int rc = pb__loader_build_batch(l, w, epoch, order, b, &bi, &e);

    pthread_mutex_lock(&l->mu);
    l->busy--;
    if (l->stop) {
      pb__batch_release(bi);
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

int pb__loader_worker_init(pb_loader *l, worker *w, struct pb_error *err) {
  w->l = l;
  size_t plane = (size_t)(l->h * l->w);
  if (l->nreaders > 0 && (w->rc = malloc((size_t)l->p.batch_size * sizeof *w->rc)) == NULL)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
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

void pb__loader_worker_destroy(pb_loader *l, worker *w) {
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
  free(w->rc);
  pb_dataset_free(w->ds);
}
