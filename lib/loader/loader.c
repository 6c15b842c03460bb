/* The loader: set-up, iteration, reset and release; the sampler's epochs. The other
 * concerns live beside it (loader_impl.h lists them). Design notes in docs/loader.md. */
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

/* Batches in one of this rank's epochs. */
int64_t pb__loader_epoch_batches(const pb_loader *l) {
  return l->p.drop_last ? l->per_rank / l->p.batch_size
                        : (l->per_rank + l->p.batch_size - 1) / l->p.batch_size;
}

/* Builds this epoch's order for this rank (lib/loader/sampler.c). */
int pb__loader_plan_epoch(pb_loader *l, int64_t epoch, struct pb_error *err) {
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
void pb__loader_sample_error(pb_loader *l, pb_dataset *ds, int64_t idx, struct pb_error *err) {
  if (err == NULL) return;
  pb_image_meta m;
  const char *name = "?";
  if (ds != NULL && pb_dataset_meta(ds, idx, &m, NULL) == PB_OK) name = m.name;
  pb_error_prefix(err, "sample %lld (image '%s' of %s): ", (long long)idx, name, l->path);
}

static int check_params(const pb_loader_params *p, struct pb_error *err) {
  if (p->batch_size < 1) return pb_error_set(err, PB_EINVAL, "loader: batch_size must be >= 1");
  if (p->workers < 0) return pb_error_set(err, PB_EINVAL, "loader: workers must be >= 0");
  if (p->prefetch < 1) return pb_error_set(err, PB_EINVAL, "loader: prefetch must be >= 1");
  if (p->reads_in_flight < 0 || p->bytes_in_flight < 0)
    return pb_error_set(err, PB_EINVAL, "loader: reads_in_flight and bytes_in_flight must be >= 0 "
                        "(0: auto)");
  if (p->world_size < 1 || p->rank < 0 || p->rank >= p->world_size)
    return pb_error_set(err, PB_EINVAL, "loader: rank %d is outside world size %d", p->rank,
                        p->world_size);
  if (!(p->std > 0.0f) || !isfinite(p->mean))
    return pb_error_set(err, PB_EINVAL, "loader: std must be > 0 and mean finite");
  if ((unsigned)p->transform > PB_TRANSFORM_CENTER_CROP_RESIZE || (unsigned)p->out_dtype > PB_OUT_NATIVE ||
      (unsigned)p->cache > PB_CACHE_SHARED)
    return pb_error_set(err, PB_EINVAL, "loader: transform, dtype or cache mode out of range");
  if (p->out_dtype == PB_OUT_NATIVE && p->transform != PB_TRANSFORM_NONE &&
      p->transform < PB_TRANSFORM_RANDOM_CROP)
    return pb_error_set(err, PB_EINVAL,
                        "loader: dtype native keeps the pixels' values, so transform must be none "
                        "or a crop (not %s); normalise and augment on the consumer's side (e.g. the "
                        "GPU)", p->transform == PB_TRANSFORM_NORMALIZE ? "normalize" : "augment");
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

/* Sizes of a sample in the batch, and the normalisation folded into out = x * a + b. */
static void output_layout(pb_loader *l) {
  l->img_bytes = pb_image_bytes(&l->meta);
  l->out_esize = l->p.out_dtype == PB_OUT_NATIVE ? pb_dtype_size(l->meta.dtype)
                                                 : pb_out_dtype_size(l->p.out_dtype);
  l->h = l->crop ? l->p.crop_h : l->meta.shape[PB_Y];
  l->w = l->crop ? l->p.crop_w : l->meta.shape[PB_X];
  l->planes = l->meta.shape[PB_C] * l->meta.shape[PB_Z];
  l->sample_bytes = (size_t)(l->planes * l->h * l->w) * l->out_esize;
  if (l->p.transform == PB_TRANSFORM_NONE || l->p.out_dtype == PB_OUT_NATIVE) {
    /* native crops keep the pixels' own scale: the consumer normalises */
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
}

/* The dataset's labels, where it has them: looked up once, not per sample. */
static int load_labels(pb_loader *l, pb_dataset *ds0, struct pb_error *err) {
  if (pb_dataset_label(ds0, 0) < 0) return PB_OK;
  l->labels = malloc((size_t)l->count * sizeof *l->labels);
  if (l->labels == NULL)
    return pb_error_set(err, PB_ENOMEM, "out of memory for %lld labels", (long long)l->count);
  for (int64_t i = 0; i < l->count; i++) l->labels[i] = pb_dataset_label(ds0, i);
  return PB_OK;
}

/* The workers' contexts and, with cache none, the dataset handles: one per worker (the first
 * takes *ds0, the others are its clones), or the reader team's when there is one. */
static int open_contexts(pb_loader *l, const pb_read_options *ro, pb_dataset **ds0,
                         struct pb_error *err) {
  int nctx = l->nthreads > 0 ? l->nthreads : 1;
  l->wk = calloc((size_t)nctx, sizeof *l->wk);
  if (l->wk == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  for (int i = 0; i < nctx; i++) {
    l->wk[i].home = i;
    PB_RETURN_NOT_OK(pb__loader_worker_init(l, &l->wk[i], err));
    if (l->p.cache != PB_CACHE_NONE || l->nreaders > 0) continue;
    if (i == 0) {
      l->wk[0].ds = *ds0; /* the caller no longer uses it after set-up */
      *ds0 = NULL;
    } else { /* a clone keeps what the first handle learnt (listing, layouts): no requests */
      PB_RETURN_NOT_OK(pb__dataset_clone(l->wk[0].ds, ro, &l->wk[i].ds, err));
    }
  }
  return l->nreaders > 0 ? pb__team_start(l, l->nreaders, ds0, ro, err) : PB_OK;
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
  /* cache none with a cache_path: remote reads kept in that folder (docs/remote.md) */
  pb_read_options ro = PB_READ_OPTIONS_DEFAULTS;
  char disk[4200];
  if (params->cache == PB_CACHE_NONE && params->cache_path != NULL) {
    snprintf(disk, sizeof disk, "disk:%s", params->cache_path);
    ro.cache = disk; /* the I/O layer keeps its own copy */
  }
  /* reads in flight asked for bound the set-up's metadata scan of a remote folder too */
  if (params->reads_in_flight > 0) ro.meta_in_flight = params->reads_in_flight;
  rc = pb_dataset_open_opts(path, params->format, &ro, &ds0, err);
  if (rc != PB_OK) goto fail;
  l->count = pb_dataset_count(ds0);
  if (l->count < 1) {
    rc = pb_error_set(err, PB_EFORMAT, "%s: the dataset has no images", path);
    goto fail;
  }
  l->crop = l->p.transform >= PB_TRANSFORM_RANDOM_CROP;
  rc = check_images(l, ds0, err);
  if (rc != PB_OK) goto fail;
  rc = load_labels(l, ds0, err);
  if (rc != PB_OK) goto fail;
  output_layout(l);
  l->per_rank = pb__sampler_per_rank(l->count, l->p.world_size, l->p.shard_pad);
  if (l->per_rank < 1) {
    rc = pb_error_set(err, PB_EINVAL,
                      "loader: %lld images cannot be shared among %d ranks without padding "
                      "(fewer images than ranks); set shard_pad=1 or use fewer ranks",
                      (long long)l->count, l->p.world_size);
    goto fail;
  }
  l->nbatches = pb__loader_epoch_batches(l);
  l->stats.dataset_count = l->count;
  l->nreaders = pb__loader_team_size(l, path);

  if (l->p.cache == PB_CACHE_PRELOAD) rc = pb__loader_build_preload(l, ds0, err);
  else if (l->p.cache == PB_CACHE_SHARED) {
    l->p.cache_path = params->cache_path; /* borrowed only during this call */
    rc = pb__loader_build_shared(l, ds0, err);
    l->p.cache_path = NULL;
  }
  if (rc != PB_OK) goto fail;
  rc = pb__loader_plan_epoch(l, 0, err);
  if (rc != PB_OK) goto fail;

  int nctx = l->nthreads > 0 ? l->nthreads : 1;
  rc = open_contexts(l, &ro, &ds0, err);
  if (rc != PB_OK) goto fail;
  pb_dataset_free(ds0);
  ds0 = NULL;
  /* One free list per worker, each keeping enough batches for that worker's share of the
   * queue, the one it is building and a few held by the caller. */
  l->pool = pb__pool_new(params->allocator != NULL ? params->allocator : pb_get_allocator(),
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
      if (pthread_create(&l->wk[i].thread, NULL, pb__loader_worker_main, &l->wk[i]) != 0) {
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
  int64_t t0 = pb_now_ns();
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
      rc = pb__loader_build_batch(l, &l->wk[0], l->epoch, l->order, b, &bi, err);
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
    pb__batch_release(bi);
    bi = NULL;
  }
  bi->pub.times.wait_ns = pb_now_ns() - t0;
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
    pb__batch_release(l->slots[i].batch);
    l->slots[i].batch = NULL;
    l->slots[i].ready = 0;
  }
  free(l->ahead);
  l->ahead = NULL;
  l->ahead_failed = 0;
  int rc = pb__loader_plan_epoch(l, epoch, err);
  l->base = l->next_claim = l->next_deliver = 0;
  /* no order: an empty epoch rather than a stale one; a later reset that plans one restores it */
  l->nbatches = rc == PB_OK ? pb__loader_epoch_batches(l) : 0;
  l->pausing = 0;
  l->running = 1;
  pthread_cond_broadcast(&l->cv_work);
  pthread_mutex_unlock(&l->mu);
  return rc;
}

int64_t pb_loader_batches_per_epoch(const pb_loader *l) { return l->nbatches; }
int64_t pb_loader_samples_per_epoch(const pb_loader *l) { return l->per_rank; }
const pb_image_meta *pb_loader_meta(const pb_loader *l) { return &l->meta; }
int pb_loader_reads_in_flight(const pb_loader *l) {
  return l->nreaders > 0 ? l->nreaders : l->nthreads > 0 ? l->nthreads : 1;
}

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
    for (int i = 0; i < nctx; i++) pb__loader_worker_destroy(l, &l->wk[i]);
  }
  pb__team_free(l, l->team); /* after the workers: none waits on it now */
  for (int64_t i = 0; l->slots != NULL && i < l->nslots; i++) pb__batch_release(l->slots[i].batch);
  free(l->slots);
  pb__pool_close(l->pool);
  pb__pool_unref(l->pool); /* batches still out keep it alive */
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
