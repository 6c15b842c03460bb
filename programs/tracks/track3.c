/* Track 3: the end-to-end loop, loader -> model. Each step waits for a batch (data wait) and
 * then computes on it; accelerator utilisation AU = compute / step time with the first step
 * (start-up) excluded, as DLIO and MLPerf Storage define it. A compute-emulation mode replaces
 * the model by a fixed busy time per batch, so storage can be judged without a model.
 *
 * On cuda (--device auto, the default, where a GPU is usable, or --device cuda) the loader hands
 * over raw batches (PB_OUT_NATIVE) in pinned memory from the engine's allocator, and
 * pb_engine_forward_native copies them to the GPU and converts them there (pad to the model's
 * input, grey -> RGB, normalise). The loop does not wait for each forward: it runs as far ahead
 * as the engine's two staging buffers allow. The host's time to queue a step is therefore not
 * the step: the timed steps run in a window that opens and closes on an idle device, a step ends
 * when its work ends on the device (CUDA events), images/s is over the window and AU is the
 * device's busy time over the window (gpu_window.h; docs/measuring.md). */
#include <math.h>
#include <plplot.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/plot_kit.h"
#include "tracks/device.h"
#include "tracks/gpu_window.h"
#include "tracks/ranks.h"
#include "tracks/track3_jpeg.h"
#include "tracks/track3_torch.h"
#include "tracks/tracks.h"
#include "pipebench/engine.h"
#include "pipebench/loader.h"

static const char *const cache_names[] = {"none", "preload"};

/* ---- schema ---------------------------------------------------------------------------------- */

#define T3_CACHE "cache"
#define T3_MODEL "model"
#define T3_MODE "mode"
#define T3_DEVICE "device"
#define T3_DTYPE "dtype"
#define T3_BATCH_SIZE "batch_size"
#define T3_NUM_WORKERS "num_workers"
#define T3_STEP_PREFIX "step_time_"
#define T3_STEP_MEAN T3_STEP_PREFIX PB__SUM_MEAN
#define T3_STEP_P50 T3_STEP_PREFIX PB__SUM_P50
#define T3_DATA_WAIT_MEAN "data_wait_mean"
#define T3_DATA_WAIT_FRACTION "data_wait_fraction"
#define T3_AU "accelerator_utilisation"
#define T3_IMAGES_PER_SEC "images_per_sec"
#define T3_RANK_AU "rank_accelerator_utilisation"
#define T3_AU_MIN "accelerator_utilisation_min"
#define T3_AU90 "accelerators_au90"

static const char *const t3_schema[] = {
    PB__COMMON_COLUMNS, T3_CACHE, T3_MODEL, T3_MODE, T3_DEVICE, T3_DTYPE, "emulate_ms",
    T3_BATCH_SIZE, T3_NUM_WORKERS,
    "num_steps", "first_step_time", PB__SUMMARY_COLUMNS(T3_STEP_PREFIX), T3_DATA_WAIT_MEAN,
    "data_wait_p50", T3_DATA_WAIT_FRACTION, T3_AU, "data_bound", T3_IMAGES_PER_SEC,
    "device_time_mean", "decode", "h2d_time_mean", "h2d_time_p50", "h2d_bytes_per_batch", "h2d_gbps", PB__RANK_COLUMNS, T3_RANK_AU, T3_AU_MIN, T3_AU90,
    PB__T3_TORCH_COLUMNS, NULL};

/* ---- the model loop -------------------------------------------------------------------------- */

static void busy_wait_ns(int64_t ns) {
  int64_t end = pb_now_ns() + ns;
  while (pb_now_ns() < end) {
  }
}

typedef struct t3_state {
  pb_engine *engine;
  pb_tensor *in, *out, *target;
  int64_t out_count;
  int gpu;                 /* raw batches through pb_engine_forward_native */
  int batch;               /* the batch size the engine was built for */
  float mean, std;         /* the loader's normalisation, applied on the GPU */
  int imagenet;            /* RGB photographs on the GPU: ImageNet's mean and std per channel */
  int64_t h2d_ns, h2d_bytes, h2d_n; /* host-to-device copies of the timed steps */
  int64_t busy_ns;         /* the GPU's time on the timed steps' forwards (CUDA events) */
  double *h2d_s;           /* each timed step's copy, seconds (h2d_cap entries) */
  int64_t h2d_cap;
  pb_device_span *spans;   /* the timed steps' device spans (h2d_cap entries) */
  pb__t3_jpeg *jpeg;       /* --decode gpu: the feeder (not owned), else NULL */
  int64_t gpu_decoded;     /* images nvJPEG decoded (--decode gpu) */
  pb_jpeg_gpu_stats jstats; /* the GPU decoder's counts at the step before (the share's tuning) */
} t3_state;

static void state_free(t3_state *s) {
  free(s->spans);
  free(s->h2d_s);
  pb_tensor_free(s->target);
  pb_tensor_free(s->out);
  pb_tensor_free(s->in);
  pb_engine_free(s->engine);
  memset(s, 0, sizeof *s);
}

/* The training target: seeded class labels (the loop measures time, not learning). */
static int seed_labels(pb_run_ctx *c, t3_state *s, struct pb_error *err) {
  PB_RETURN_NOT_OK(pb_engine_tensor_new(s->engine, PB_TENSOR_TARGET, &s->target, err));
  size_t n = pb_tensor_bytes(s->target) / sizeof(int32_t);
  int32_t *labels = calloc(n, sizeof *labels);
  pb_rng rng;
  pb_rng_init(&rng, c->p.seed);
  for (size_t i = 0; labels != NULL && i < n; i++) labels[i] = (int32_t)pb_rng_below(&rng, 10);
  int rc = labels ? pb_tensor_write(s->target, labels, n * sizeof *labels, err)
                  : pb_error_set(err, PB_ENOMEM, "out of memory");
  free(labels);
  return rc;
}

static int state_new(pb_run_ctx *c, const pb_image_meta *m, int bs, t3_state *s, struct pb_error *err) {
  memset(s, 0, sizeof *s);
  if (c->p.emulate_ms > 0) return PB_OK;
  if (m->shape[PB_Z] != 1)
    return pb_error_set(err, PB_EUNSUPPORTED, "track 3 runs 2D models; the images have Z = %lld (use --emulate-ms)",
                        (long long)m->shape[PB_Z]);
  pb_engine_params ep = PB_ENGINE_PARAMS_DEFAULTS;
  ep.model = c->p.model;
  ep.device = "cpu";
  ep.batch_size = bs;
  ep.channels = (int)m->shape[PB_C];
  ep.height = (int)m->shape[PB_Y];
  ep.width = (int)m->shape[PB_X];
  ep.seed = c->p.seed;
  ep.training = c->p.train;
  ep.threads = 0;
  int rc = pb_engine_new(&ep, &s->engine, err);
  if (rc == PB_OK) rc = pb_engine_tensor_new(s->engine, PB_TENSOR_INPUT, &s->in, err);
  if (rc == PB_OK) rc = pb_engine_tensor_new(s->engine, PB_TENSOR_OUTPUT, &s->out, err);
  if (rc == PB_OK && c->p.train) rc = seed_labels(c, s, err);
  if (rc != PB_OK) state_free(s);
  return rc;
}

/* The GPU engine: the model's own input size (224x224 for resnet50 and vit_b_16), raw batches
 * padded and replicated to it on the device. Kept across formats and cache modes. */
static int state_new_gpu(pb_run_ctx *c, const char *device, int bs, t3_state *s,
                         struct pb_error *err) {
  memset(s, 0, sizeof *s);
  pb_engine_params ep = PB_ENGINE_PARAMS_DEFAULTS;
  ep.model = c->p.model;
  ep.device = device;
  ep.dtype = c->p.dtype ? c->p.dtype : "bfloat16";
  ep.batch_size = bs;
  ep.seed = c->p.seed;
  ep.training = c->p.train; /* the cuda engine's own training step */
  int rc = pb_engine_new(&ep, &s->engine, err);
  if (rc == PB_OK) rc = pb_engine_tensor_new(s->engine, PB_TENSOR_OUTPUT, &s->out, err);
  if (rc == PB_OK && c->p.train) rc = seed_labels(c, s, err);
  s->h2d_cap = (int64_t)c->p.steps + 1;
  if (rc == PB_OK && ((s->h2d_s = calloc((size_t)s->h2d_cap, sizeof *s->h2d_s)) == NULL ||
                      (s->spans = calloc((size_t)s->h2d_cap, sizeof *s->spans)) == NULL))
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  if (rc != PB_OK) {
    state_free(s);
    return rc;
  }
  s->gpu = 1;
  s->batch = bs;
  return PB_OK;
}

/* ImageNet's per-channel mean and std, which models of RGB photographs are trained with: the
 * GPU paths normalise crops of 3-channel photographs with them (the engine's input kernel, or
 * the JPEG crop kernel); other images, and the CPU path's loader, use the loader's one mean and
 * std. The work per pixel is the same either way. */
static const float imagenet_mean[3] = {0.485f, 0.456f, 0.406f};
static const float imagenet_std[3] = {0.229f, 0.224f, 0.225f};

static int compute(pb_run_ctx *c, t3_state *s, const pb_batch *b, struct pb_error *err) {
  if (c->p.emulate_ms > 0) {
    busy_wait_ns((int64_t)(c->p.emulate_ms * 1e6));
    return PB_OK;
  }
  if (s->gpu) {
    int five = b->ndim == 5;
    /* raw pixels or crops in the images' own type; the GPU scales and normalises them */
    pb_native_batch nb = {b->data, b->dtype == PB_OUT_NATIVE ? b->native_dtype : PB_FLOAT32,
                          b->shape[0], b->shape[1],
                          five ? b->shape[2] : 1, b->shape[five ? 3 : 2], b->shape[five ? 4 : 3],
                          s->mean, s->std, NULL, NULL};
    if (s->imagenet && nb.c == 3) nb.channel_mean = imagenet_mean, nb.channel_std = imagenet_std;
    int64_t ns = 0;
    if (c->p.train) PB_RETURN_NOT_OK(pb_engine_train_native(s->engine, &nb, s->target, 0.01f, &ns, err));
    else PB_RETURN_NOT_OK(pb_engine_forward_native(s->engine, &nb, s->out, &ns, err));
    s->h2d_ns += ns;
    if (s->h2d_n < s->h2d_cap) s->h2d_s[s->h2d_n] = (double)ns / 1e9;
    s->h2d_bytes += (int64_t)b->nbytes;
    s->h2d_n++;
    return PB_OK; /* not waited for: the copy of the next batch overlaps this forward */
  }
  PB_RETURN_NOT_OK(pb_tensor_write(s->in, b->data, b->nbytes, err));
  if (c->p.train) return pb_engine_train_step(s->engine, s->in, s->target, 0.01f, NULL, err);
  PB_RETURN_NOT_OK(pb_engine_forward(s->engine, s->in, s->out, err));
  return pb_engine_synchronize(s->engine, err);
}

/* --decode gpu: the batch's JPEGs decoded and cropped on the GPU, then the forward, queued. */
static int compute_jpeg(t3_state *s, const pb_jpeg_item *items, int n, struct pb_error *err) {
  float mean[3] = {s->mean, s->mean, s->mean}, std[3] = {s->std, s->std, s->std};
  if (s->imagenet) {
    memcpy(mean, imagenet_mean, sizeof mean);
    memcpy(std, imagenet_std, sizeof std);
  }
  int gpu_n = 0;
  PB_RETURN_NOT_OK(pb_engine_forward_jpeg(s->engine, items, n, PB_RUN_CROP_RESIZE, mean, std,
                                          s->out, &gpu_n, err));
  s->gpu_decoded += gpu_n;
  for (int i = 0; i < n; i++) s->h2d_bytes += (int64_t)items[i].size;
  if (s->h2d_n < s->h2d_cap) s->h2d_s[s->h2d_n] = 0;
  s->h2d_n++;
  return PB_OK;
}

/* What t3_steps measured. */
typedef struct t3_steps_out {
  int n;                        /* steps timed (the first excluded) */
  double first_step;            /* the first step, seconds */
  double sum_step, sum_wait;    /* over the timed steps, seconds */
  int64_t samples;              /* images in the timed steps */
  double own_s;                 /* what the rate is over: the steps' sum on the CPU, where each
                                   step's compute ends when the host's call returns; the
                                   synchronised window on the GPU */
  double au;                    /* accelerator utilisation */
} t3_steps_out;

/* The loop a training or inference job runs: wait for a batch, compute on it; steps + 1 steps,
 * going on into the next epoch when one ends. step_s and wait_s get each step after the first
 * (room for steps). On the CPU a step runs from asking the loader for its batch to the end of
 * its compute. On the GPU the first step is waited for, the window opens on the idle device (*w0,
 * just before the engine's mark) and closes once the device is idle again after the last step;
 * a step ends when its work ends on the device, from the end of the step before it (the mark for
 * the first), so it holds the wait for its data as well as its compute. wait_s is the host's
 * time in pb_loader_next either way. */
static int t3_steps(pb_run_ctx *c, pb_loader *ld, int64_t *epoch, t3_state *s, double *step_s,
                    double *wait_s, t3_steps_out *o, int64_t *w0, struct pb_error *err) {
  int n = 0, empty = 0, rc = PB_OK, opened = 0;
  double first_step = NAN, sum_step = 0, sum_wait = 0;
  int64_t samples = 0;
  for (int k = 0; k <= c->p.steps && rc == PB_OK;) {
    if (pb__run_stopped()) { /* SIGINT/SIGTERM: end within a step */
      rc = pb__run_stop_error(err);
      break;
    }
    pb_batch *b = NULL;
    const pb_jpeg_item *items = NULL;
    int n_items = 0;
    int64_t t0 = pb_now_ns();
    rc = s->jpeg ? pb__t3_jpeg_next(s->jpeg, &items, &n_items, err) : pb_loader_next(ld, &b, err);
    int64_t t1 = pb_now_ns();
    if (rc != PB_OK) break;
    if (b == NULL && items == NULL) { /* epoch over: go on with the next, as a training loop does */
      if (++empty > 1) {
        rc = pb_error_set(err, PB_EFORMAT, "the loader gave no batch after a reset");
        break;
      }
      rc = pb_loader_reset(ld, (*epoch)++, err);
      continue;
    }
    empty = 0;
    rc = items ? compute_jpeg(s, items, n_items, err) : compute(c, s, b, err);
    int64_t t2 = pb_now_ns();
    if (items != NULL && rc == PB_OK) { /* the CPU share follows each step's waits after the
                                         * first (whose wait is the pipeline filling) */
      pb_jpeg_gpu_stats now;
      if (pb_jpeg_gpu_stats_get(&now, NULL) == PB_OK) {
        if (k > 0) pb__t3_jpeg_tune(s->jpeg, t1 - t0, now.wait_crop_ns - s->jstats.wait_crop_ns);
        s->jstats = now;
      }
    }
    if (k == 0) {
      first_step = (double)(t2 - t0) / 1e9;
    } else {
      step_s[n] = (double)(t2 - t0) / 1e9;
      wait_s[n] = (double)(t1 - t0) / 1e9;
      sum_step += step_s[n];
      sum_wait += wait_s[n];
      samples += b ? b->shape[0] : n_items;
      n++;
    }
    pb_batch_free(b);
    if (k == 0 && s->gpu && rc == PB_OK) {
      /* the first step (excluded) ends when the device has done it */
      rc = pb_engine_synchronize(s->engine, err);
      first_step = (double)(pb_now_ns() - t0) / 1e9;
      s->h2d_ns = s->h2d_bytes = s->h2d_n = 0;
    }
    if (k == 0) { /* the ranks' timed steps start together: the common window opens */
      rc = pb__ranks_agree(rc, err);
      opened = 1;
      /* on the GPU on the idle device, before the mark the steps' device times count from */
      if (rc == PB_OK && s->gpu) rc = pb_engine_device_mark(s->engine, w0, err);
      else *w0 = pb_now_ns();
    }
    k++;
  }
  if (!opened) rc = pb__ranks_agree(rc, err); /* a rank that failed at its first step */
  double own_s = sum_step, au = sum_step > 0 ? (sum_step - sum_wait) / sum_step : NAN;
  if (rc == PB_OK && s->gpu) {
    size_t ns = 0;
    rc = pb_engine_device_spans(s->engine, s->spans, (size_t)s->h2d_cap, &ns, err);
    int64_t w1 = pb_now_ns(); /* the device is idle: the window closes */
    if (rc == PB_OK && ns != (size_t)n)
      rc = pb_error_set(err, PB_ESTATE, "the device timed %zu forwards for %d steps", ns, n);
    pb__gpu_window gw;
    if (rc == PB_OK) rc = pb__gpu_window_stats(*w0, w1, s->spans, ns, samples, &gw, step_s, err);
    if (rc == PB_OK) {
      sum_step = 0;
      for (int i = 0; i < n; i++) sum_step += step_s[i];
      own_s = gw.window_s, au = gw.au;
      s->busy_ns = (int64_t)llround(gw.busy_s * 1e9);
    }
  }
  *o = (t3_steps_out){n, first_step, sum_step, sum_wait, samples, own_s, au};
  return rc;
}

/* One round of every rank, on rank 0: the common window, each rank's AU, and (with more than
 * one rank) every rank's step and wait times pooled. */
typedef struct t3_ranks {
  pb__ranks_window w;
  double au_mean, au_min;
  int au90;                 /* ranks at AU >= 90%: accelerators the storage keeps fed */
  char au_list[512];
  double sum_step, sum_wait; /* over every rank's timed steps */
  double *step_s, *wait_s;   /* pooled (rank 0, more than one rank; owned) */
  size_t n_steps;
  double first_step;         /* the slowest rank's first step */
  double h2d_s_sum, h2d_bytes, h2d_n, busy_s, steps; /* summed over ranks */
  double *h2d_s;             /* every rank's copy times pooled (more than one rank; owned) */
  size_t n_h2d;
} t3_ranks;

static void t3_ranks_free(t3_ranks *r) {
  free(r->step_s);
  free(r->wait_s);
  free(r->h2d_s);
  r->step_s = r->wait_s = r->h2d_s = NULL;
}

enum { T3_MINE = 9 }; /* what each rank sends besides its step times */

static int t3_gather(const t3_steps_out *st, const t3_state *sx, double au, double window_s,
                     const double *step_s, const double *wait_s, t3_ranks *r,
                     struct pb_error *err) {
  memset(r, 0, sizeof *r);
  int n = pb__ranks_size();
  PB_RETURN_NOT_OK(pb__ranks_window_gather(st->samples, st->own_s, window_s, &r->w, err));
  int64_t nh = sx->h2d_n < sx->h2d_cap ? sx->h2d_n : sx->h2d_cap;
  double mine[T3_MINE] = {au, st->sum_step, st->sum_wait, st->first_step,
                          (double)sx->h2d_ns / 1e9, (double)sx->h2d_bytes, (double)sx->h2d_n,
                          sx->gpu ? (double)sx->busy_ns / 1e9 : NAN, (double)st->n};
  double *all = malloc((size_t)n * T3_MINE * sizeof *all), *aus = malloc((size_t)n * sizeof *aus);
  int rc = pb__ranks_agree(all && aus ? PB_OK : pb_error_set(err, PB_ENOMEM, "out of memory"), err);
  if (rc == PB_OK) rc = pb__ranks_allgather_f64(mine, T3_MINE, all, err);
  if (rc == PB_OK) {
    r->au_min = INFINITY;
    r->first_step = -INFINITY;
    for (int k = 0; k < n; k++) {
      const double *a = all + (size_t)k * T3_MINE;
      aus[k] = a[0];
      r->au_mean += aus[k] / n;
      if (aus[k] < r->au_min) r->au_min = aus[k];
      r->au90 += aus[k] >= 0.9;
      r->sum_step += a[1];
      r->sum_wait += a[2];
      if (!(a[3] <= r->first_step)) r->first_step = a[3]; /* NaN wins: a rank without one */
      r->h2d_s_sum += a[4], r->h2d_bytes += a[5], r->h2d_n += a[6];
      r->busy_s += a[7], r->steps += a[8];
    }
    pb__ranks_list(aus, n, r->au_list, sizeof r->au_list);
  }
  if (rc == PB_OK && n > 1) {
    size_t nw = 0;
    rc = pb__ranks_gather_f64(step_s, (size_t)st->n, &r->step_s, &r->n_steps, err);
    if (rc == PB_OK) rc = pb__ranks_gather_f64(wait_s, (size_t)st->n, &r->wait_s, &nw, err);
    if (rc == PB_OK) rc = pb__ranks_gather_f64(sx->h2d_s, (size_t)nh, &r->h2d_s, &r->n_h2d, err);
  }
  free(all);
  free(aus);
  if (rc != PB_OK) t3_ranks_free(r);
  return rc;
}

/* The loader track 3 measures: shuffled drop-last batches of --t3-batch, normalised on the CPU;
 * on a GPU raw pixels (or crops in the images' own type) in the engine's pinned memory, which the
 * GPU normalises. A dataset of fewer images than one batch is measured with a batch of all of
 * them, and the GPU state is rebuilt for that batch. */
static int open_loader(pb_run_ctx *c, int fi, int cache, const char *device, int gpu, int jpeg,
                       t3_state *gs, pb_loader_params *lp_out, pb_loader **out,
                       struct pb_error *err) {
  *out = NULL;
  pb_loader_params lp = PB_LOADER_PARAMS_DEFAULTS;
  lp.format = c->formats[fi];
  lp.batch_size = c->p.t3_batch;
  lp.workers = jpeg ? 0 : c->p.t3_workers; /* --decode gpu: the JPEG feeder's workers instead */
  lp.prefetch = 2;
  lp.shuffle = 1;
  lp.seed = c->p.seed;
  lp.rank = pb__ranks_rank(); /* each rank feeds its accelerator from its shard of every epoch */
  lp.world_size = pb__ranks_size();
  lp.drop_last = 1; /* the model is built for one batch size */
  lp.transform = PB_TRANSFORM_NORMALIZE;
  lp.cache = cache ? PB_CACHE_PRELOAD : PB_CACHE_NONE;
  lp.reads_in_flight = c->p.reads_in_flight;
  lp.bytes_in_flight = c->p.bytes_in_flight;
  if (gpu) { /* raw pixels in pinned memory; the GPU normalises */
    if (gs->engine == NULL || gs->batch != lp.batch_size) {
      state_free(gs);
      PB_RETURN_NOT_OK(state_new_gpu(c, device, lp.batch_size, gs, err));
    }
    gs->mean = lp.mean, gs->std = lp.std;
    lp.transform = PB_TRANSFORM_NONE;
    lp.out_dtype = PB_OUT_NATIVE;
    lp.allocator = pb_engine_host_allocator(gs->engine);
  }
  if (c->crop[fi] > 0) {
    /* Images of different sizes: the loader crops on the CPU. For the GPU the crops stay in the
     * images' own type (uint8 for photographs: a quarter of float32's bytes over PCIe) and the
     * GPU normalises them as it does whole images; on the CPU the loader normalises (float32). */
    pb__run_loader_crop(c, fi, &lp);
    lp.out_dtype = gpu ? PB_OUT_NATIVE : PB_OUT_FLOAT32;
  }
  pb_loader *ld = NULL;
  PB_RETURN_NOT_OK(pb_loader_new(c->paths[fi], &lp, &ld, err));
  int64_t per_epoch = pb_loader_samples_per_epoch(ld);
  if (pb_loader_batches_per_epoch(ld) < 1) {
    /* Fewer images than one batch: drop-last would give empty epochs. Measure with a batch of
     * the whole dataset instead, and say so. */
    pb_loader_free(ld);
    ld = NULL;
    if (per_epoch < 1)
      return pb_error_set(err, PB_EINVAL, "track 3, %s: the dataset has no images to measure",
                          c->formats[fi]);
    if (cache == 0)
      pb__run_report(c, "track 3, %s: the dataset has %lld images, fewer than batch %d: measured "
                      "with batch %lld", c->formats[fi], (long long)per_epoch, lp.batch_size,
                   (long long)per_epoch);
    lp.batch_size = (int)per_epoch;
    if (gpu) {
      state_free(gs);
      PB_RETURN_NOT_OK(state_new_gpu(c, device, lp.batch_size, gs, err));
      gs->mean = lp.mean, gs->std = lp.std;
      lp.allocator = pb_engine_host_allocator(gs->engine);
    }
    PB_RETURN_NOT_OK(pb_loader_new(c->paths[fi], &lp, &ld, err));
  }
  if (jpeg) { /* the feeder's workers read and decode instead of the loader's */
    pb_engine_info ei;
    pb_engine_get_info(gs->engine, &ei);
    int rc = pb__t3_jpeg_new(c->paths[fi], lp.batch_size, PB_RUN_CROP_RESIZE, ei.height,
                             c->p.t3_workers, 4, c->p.seed, &gs->jpeg, err);
    if (rc != PB_OK) {
      pb_loader_free(ld);
      return rc;
    }
    gs->gpu_decoded = 0, lp.workers = c->p.t3_workers;
    pb_jpeg_gpu_stats_get(&gs->jstats, NULL);
    /* --decode gpu: every JPEG nvJPEG reads goes to it; auto: the workers take a share of each
     * batch, tuned from each step's waits, from a quarter. PIPEBENCH_JPEG_CPU_SHARE (0 to 1)
     * fixes the share instead. */
    const char *fixed = getenv("PIPEBENCH_JPEG_CPU_SHARE");
    int is_auto = c->p.decode != NULL && strcmp(c->p.decode, "auto") == 0;
    if (fixed != NULL && *fixed != '\0')
      pb__t3_jpeg_set_share(gs->jpeg, (int)lround(atof(fixed) * lp.batch_size), 1);
    else
      pb__t3_jpeg_set_share(gs->jpeg, is_auto ? lp.batch_size / 4 : 0, !is_auto);
  }
  *lp_out = lp;
  *out = ld;
  return PB_OK;
}

/* The rows' decode column: where the images were decoded. */
static void decode_column(pb_table *t, pb__t3_jpeg *jf, const t3_state *sx) {
  char where[96] = "cpu";
  int64_t on_cpu = jf ? pb__t3_jpeg_cpu_decoded(jf) : 0, on_gpu = jf ? sx->gpu_decoded : 0;
  if (jf && on_cpu == 0) snprintf(where, sizeof where, "gpu");
  else if (jf)
    snprintf(where, sizeof where, "mixed (gpu %lld, cpu %lld)", (long long)on_gpu, (long long)on_cpu);
  pb_table_set_str(t, "decode", where);
}

/* --decode gpu|auto: one line on how the decoding was shared. */
static void decode_report(pb_run_ctx *c, int fi, pb__t3_jpeg *jf, const t3_state *sx, int batch) {
  int64_t on_cpu = pb__t3_jpeg_cpu_decoded(jf), chosen = pb__t3_jpeg_cpu_chosen(jf);
  int64_t all = on_cpu + sx->gpu_decoded;
  pb__run_report(c, "track 3, %s: decode: %lld images on the GPU, %lld on the CPU (%.0f%%; %lld "
                 "as its share, %d of each %d at the end), %.2f ms per CPU crop and worker",
                 c->formats[fi], (long long)sx->gpu_decoded, (long long)on_cpu,
                 all > 0 ? 100.0 * (double)on_cpu / (double)all : 0.0, (long long)chosen,
                 pb__t3_jpeg_share(jf), batch, pb__t3_jpeg_cpu_ms(jf));
}

/* The summary's entry for a format and cache mode: its last round. */
static void summary_entry(cJSON *o, double au, double wait_frac, double step_p50, double ips,
                          double h2d_gbps, const t3_ranks *rk) {
  cJSON_AddNumberToObject(o, "accelerator_utilisation", au);
  cJSON_AddNumberToObject(o, "data_wait_fraction", wait_frac);
  cJSON_AddNumberToObject(o, "step_time_p50_s", step_p50);
  cJSON_AddBoolToObject(o, "data_bound", au < 0.9);
  cJSON_AddNumberToObject(o, "images_per_sec", isfinite(ips) ? ips : 0);
  if (h2d_gbps > 0) cJSON_AddNumberToObject(o, "h2d_gbps", h2d_gbps);
  if (pb__ranks_size() > 1) {
    cJSON_AddNumberToObject(o, "ranks", pb__ranks_size());
    cJSON_AddNumberToObject(o, "accelerators_au90", rk->au90);
    cJSON_AddNumberToObject(o, "slowest_rank", rk->w.slowest);
    cJSON_AddNumberToObject(o, "rank_imbalance", rk->w.imbalance);
  }
}

static int measure(pb_run_ctx *c, pb_table *t, int fi, int cache, const char *device, int jpeg,
                   t3_state *gs, double *step_s, double *wait_s, cJSON *summary,
                   struct pb_error *err) {
  int gpu = strcmp(device, "cpu") != 0 && c->p.emulate_ms <= 0;
  pb_loader_params lp = PB_LOADER_PARAMS_DEFAULTS;
  pb_loader *ld = NULL;
  jpeg = jpeg && gpu;
  PB_RETURN_NOT_OK(open_loader(c, fi, cache, device, gpu, jpeg, gs, &lp, &ld, err));
  pb__t3_jpeg *jf = gs->jpeg; /* --decode gpu: open_loader's feeder, freed here */
  t3_state local, *sp = gpu ? gs : &local;
  pb_image_meta shape = *pb_loader_meta(ld); /* image 0; under a crop, the crop's size */
  /* photographs (an image folder cropped for the model) in RGB: ImageNet's normalisation */
  if (gpu) gs->imagenet = c->crop[fi] > 0 && (jf != NULL || shape.shape[PB_C] == 3);
  if (c->crop[fi] > 0) shape.shape[PB_Y] = shape.shape[PB_X] = c->crop[fi];
  int rc = gpu ? PB_OK : state_new(c, &shape, lp.batch_size, &local, err);
  if (rc != PB_OK) {
    pb_loader_free(ld);
    return rc;
  }
  t3_state *sx = sp;
  pb_engine_info einfo;
  memset(&einfo, 0, sizeof einfo);
  if (sx->engine != NULL) pb_engine_get_info(sx->engine, &einfo);
  int64_t epoch = 0;
  for (int r = 0; r < c->p.repeats && rc == PB_OK; r++) {
    if (c->p.cold && (rc = pb_evict_path(c->paths[fi], err)) < 0) break;
    rc = jf ? pb__t3_jpeg_reset(jf, err) : pb_loader_reset(ld, epoch++, err);
    t3_steps_out st = {0};
    int64_t w0 = pb_now_ns();
    if (rc == PB_OK) rc = t3_steps(c, ld, &epoch, sx, step_s, wait_s, &st, &w0, err);
    rc = pb__ranks_agree(rc, err); /* the common window closes when the last rank is done */
    double window_s = (double)(pb_now_ns() - w0) / 1e9;
    if (rc != PB_OK) break;
    /* AU: on the CPU the loop's compute time over step time; on the GPU the device's busy time
     * (CUDA events around each forward) over the synchronised window, since the loop runs ahead
     * of the GPU and a wait for data need not leave the GPU idle */
    double au = st.au;
    t3_ranks rk;
    if ((rc = t3_gather(&st, sx, au, window_s, step_s, wait_s, &rk, err)) != PB_OK) break;
    if (pb__ranks_rank() != 0) continue; /* rank 0 writes every rank's row */
    pb_summary ss, ws;
    int n = st.n;
    rc = pb_summarize(rk.step_s ? rk.step_s : step_s, rk.step_s ? rk.n_steps : (size_t)n, &ss);
    if (rc == PB_OK)
      rc = pb_summarize(rk.wait_s ? rk.wait_s : wait_s, rk.wait_s ? rk.n_steps : (size_t)n, &ws);
    if (rc != PB_OK) {
      t3_ranks_free(&rk);
      break;
    }
    if (pb__ranks_size() > 1) au = rk.au_mean;
    double wait_frac = rk.sum_step > 0 ? rk.sum_wait / rk.sum_step : NAN;
    double ips = pb__ranks_size() > 1 ? rk.w.rate
                 : st.own_s > 0 ? (double)st.samples / st.own_s : NAN;
    pb__row_common(c, t, c->formats[fi], r);
    pb_table_set_str(t, T3_CACHE, cache_names[cache]);
    pb_table_set_str(t, T3_MODEL, c->p.emulate_ms > 0 ? "emulated" : c->p.model);
    pb_table_set_str(t, T3_MODE, c->p.train ? "train" : "inference");
    pb_table_set_str(t, T3_DEVICE, c->p.emulate_ms > 0 ? "emulated" : device);
    pb_table_set_str(t, T3_DTYPE, einfo.dtype[0] ? einfo.dtype : "");
    pb_table_set_f64(t, "emulate_ms", c->p.emulate_ms);
    pb_table_set_i64(t, T3_BATCH_SIZE, lp.batch_size);
    pb_table_set_i64(t, T3_NUM_WORKERS, lp.workers);
    pb_table_set_i64(t, "num_steps", n);
    /* across ranks: the slowest rank's first step; the rest over every rank's steps */
    pb_table_set_f64(t, "first_step_time", rk.first_step);
    pb_table_set_f64(t, T3_STEP_MEAN, ss.mean);
    pb_table_set_f64(t, T3_STEP_P50, ss.p50);
    pb_table_set_f64(t, "step_time_p95", ss.p95);
    pb__add_summary_columns(t, &ss, T3_STEP_PREFIX);
    pb_table_set_f64(t, T3_DATA_WAIT_MEAN, ws.mean);
    pb_table_set_f64(t, "data_wait_p50", ws.p50);
    pb_table_set_f64(t, T3_DATA_WAIT_FRACTION, wait_frac);
    pb_table_set_f64(t, "device_time_mean", sx->gpu && rk.steps > 0 ? rk.busy_s / rk.steps : NAN);
    decode_column(t, jf, sx);
    pb_table_set_f64(t, T3_AU, au);
    pb_table_set_bool(t, "data_bound", au < 0.9);
    pb_table_set_f64(t, T3_IMAGES_PER_SEC, ips);
    pb__ranks_window_columns(t, &rk.w);
    pb_table_set_str(t, T3_RANK_AU, rk.au_list);
    pb_table_set_f64(t, T3_AU_MIN, rk.au_min);
    pb_table_set_i64(t, T3_AU90, rk.au90);
    /* the copies' rate at their median time: a copy whose closing event the busy GPU wrote
     * late reads slow, and the median is robust to those few */
    double h2d_mean = rk.h2d_n > 0 ? rk.h2d_s_sum / rk.h2d_n : NAN;
    double per_batch = rk.h2d_n > 0 ? rk.h2d_bytes / rk.h2d_n : NAN;
    pb_summary hs;
    double h2d_p50 = NAN;
    int64_t nh = sx->h2d_n < sx->h2d_cap ? sx->h2d_n : sx->h2d_cap;
    const double *h2d_all = rk.h2d_s ? rk.h2d_s : sx->h2d_s;
    size_t n_h2d_all = rk.h2d_s ? rk.n_h2d : (size_t)nh;
    if (n_h2d_all > 0 && pb_summarize(h2d_all, n_h2d_all, &hs) == PB_OK) h2d_p50 = hs.p50;
    double h2d_gbps = h2d_p50 > 0 ? per_batch / h2d_p50 / 1e9 : NAN;
    pb_table_set_f64(t, "h2d_time_mean", h2d_mean);
    pb_table_set_f64(t, "h2d_time_p50", h2d_p50);
    pb_table_set_f64(t, "h2d_bytes_per_batch", per_batch);
    pb_table_set_f64(t, "h2d_gbps", h2d_gbps);
    if (r == c->p.repeats - 1) {
      char key[64];
      snprintf(key, sizeof key, "%s/%s", c->formats[fi], cache_names[cache]);
      summary_entry(cJSON_AddObjectToObject(summary, key), au, wait_frac, ss.p50, ips, h2d_gbps, &rk);
    }
    t3_ranks_free(&rk);
  }
  if (!gpu) state_free(&local);
  if (jf != NULL && rc == PB_OK && pb__ranks_rank() == 0) decode_report(c, fi, jf, sx, lp.batch_size);
  gs->jpeg = NULL; /* queued forwards read nothing of the feeder's (the decode has read them) */
  pb__t3_jpeg_free(jf);
  pb_loader_free(ld); /* its pinned batches go back through the engine's allocator (which stays valid) */
  if (rc != PB_OK) pb_error_prefix(err, "track 3, %s: ", c->formats[fi]);
  return rc;
}

/* The device track 3 computes on: p->device, where "auto" (NULL, the default) takes cuda when an
 * engine can run there (training too: the cuda engine has its own training step); why (may be
 * NULL) says why auto found no usable GPU ("" when it did, or the device was named). */
static int t3_device(const pb_run_params *p, const char **device, char *why, size_t why_len,
                     struct pb_error *err) {
  char reason[640] = "", st[512] = "";
  const char *d = pb__device_resolve(p->device, reason, sizeof reason);
  if (d == NULL)
    return pb_error_set(err, PB_EINVAL, "unknown device '%s' (available: %s)", p->device,
                        pb_engine_device_list());
  if (strcmp(d, "cpu") != 0 && pb_engine_device_status(d, st, sizeof st) != 0)
    return pb_error_set(err, PB_EUNSUPPORTED, "track 3: device %s is unavailable here: %s", d, st);
  if (why != NULL && why_len > 0) snprintf(why, why_len, "%s", reason);
  *device = d;
  return PB_OK;
}

/* --decode gpu where nvJPEG cannot run, or with a loop it does not serve: refused up front. */
static int t3_decode_check(const pb_run_params *p, const char *device, struct pb_error *err) {
  if (p->decode == NULL || strcmp(p->decode, "gpu") != 0) return PB_OK;
  char why[512] = "";
  if (pb_jpeg_gpu_status(why, sizeof why) != 0)
    return pb_error_set(err, PB_EUNSUPPORTED, "track 3: --decode gpu: JPEG decoding on the GPU is "
                        "unavailable here (%s)", why);
  if (strcmp(device, "cpu") == 0 || p->train || p->emulate_ms > 0 || pb__t3_torch_wanted(p))
    return pb_error_set(err, PB_EUNSUPPORTED, "track 3: --decode gpu serves inference on --device "
                        "cuda (not %s%s)", p->train ? "--train" : p->emulate_ms > 0 ? "--emulate-ms"
                        : pb__t3_torch_wanted(p) ? "--framework torch" : "device ", p->train ||
                        p->emulate_ms > 0 || pb__t3_torch_wanted(p) ? "" : device);
  return PB_OK;
}

static int t3_validate(const pb_run_params *p, struct pb_error *err) {
  PB_RETURN_NOT_OK(pb__t3_torch_validate(p, err));
  const char *d = "cpu";
  if (!pb__t3_torch_wanted(p)) /* else the framework picks its device */
    PB_RETURN_NOT_OK(t3_device(p, &d, NULL, 0, err));
  return t3_decode_check(p, d, err);
}

/* Whether format fi is decoded on the GPU: --decode gpu, or auto where nvJPEG runs (else one
 * line says why not), for an image folder cropped for the model. */
static int t3_jpeg_wanted(pb_run_ctx *c, int fi, const char *device) {
  const char *dec = c->p.decode ? c->p.decode : "cpu";
  if (strcmp(dec, "cpu") == 0) return 0;
  char why[512] = "";
  if (strcmp(dec, "auto") == 0 && pb_jpeg_gpu_status(why, sizeof why) != 0) {
    pb__run_report(c, "track 3, %s: --decode auto: decoding on the CPU (%s)", c->formats[fi], why);
    return 0;
  }
  if (strcmp(device, "cpu") == 0 || c->p.train || c->p.emulate_ms > 0) {
    pb__run_report(c, "track 3, %s: --decode auto: decoding on the CPU (the GPU decode serves "
                   "inference on cuda)", c->formats[fi]);
    return 0;
  }
  if (strcmp(c->formats[fi], "imagefolder") != 0 || c->crop[fi] <= 0) {
    pb__run_report(c, "track 3, %s: --decode %s: decoding on the CPU (the GPU decodes image "
                   "folders of photographs of different sizes)", c->formats[fi], dec);
    return 0;
  }
  return 1;
}

static void t3_summary_medians(const pb_table *t, cJSON *per, cJSON *s);
static void t3_headline(const pb_table *t, char *text, size_t size);

static int t3_run(pb_run_ctx *c, struct pb_error *err) {
  if (pb__t3_torch_wanted(&c->p)) return pb__t3_torch_run(c, err);
  if (c->p.steps < 1) return pb_error_set(err, PB_EINVAL, "track 3 needs at least one step");
  const char *device = "cpu";
  char why[640];
  PB_RETURN_NOT_OK(t3_device(&c->p, &device, why, sizeof why, err));
  PB_RETURN_NOT_OK(t3_decode_check(&c->p, device, err));
  /* the run said which device it found; training is the one case track 3 does not take it */
  if (c->p.train && c->p.emulate_ms <= 0 && strncmp(why, "no usable GPU for training", 26) == 0)
    pb__run_report(c, "track 3: device: cpu (%s)", why);
  /* One GPU per rank: the rank's place on its host modulo the GPUs there. */
  char ranked[32];
  int gpu = pb__ranks_size() > 1 ? pb__ranks_local_gpu() : -1;
  if (strcmp(device, "cuda") == 0 && gpu >= 0) {
    snprintf(ranked, sizeof ranked, "cuda:%d", gpu);
    device = ranked;
  }
  t3_state gs;
  memset(&gs, 0, sizeof gs);
  pb_table *t = NULL;
  PB_RETURN_NOT_OK(pb__new_table(c, "3", &t, err));
  double *step_s = calloc((size_t)c->p.steps + 1, sizeof *step_s);
  double *wait_s = calloc((size_t)c->p.steps + 1, sizeof *wait_s);
  cJSON *s = pb__run_summary(c, "3");
  int rc = step_s && wait_s ? PB_OK : pb_error_set(err, PB_ENOMEM, "out of memory");
  c->step = 0;
  c->total_steps = 0;
  for (int fi = 0; fi < c->nf; fi++) c->total_steps += c->crop[fi] > 0 ? 1 : 2; /* crop: cache none */
  cJSON_AddStringToObject(s, "model", c->p.emulate_ms > 0 ? "emulated" : c->p.model);
  cJSON_AddStringToObject(s, "device", c->p.emulate_ms > 0 ? "emulated" : device);
  cJSON *per = cJSON_AddObjectToObject(s, "per_format");
  for (int fi = 0; fi < c->nf && rc == PB_OK; fi++)
    for (int cache = 0; cache < 2 && rc == PB_OK; cache++) {
      if (!pb__run_cache_ok(c, fi, cache ? PB_CACHE_PRELOAD : PB_CACHE_NONE)) continue;
      char what[192];
      snprintf(what, sizeof what, "track 3: %s cache=%s -> %s%s%s", c->formats[fi],
               cache_names[cache], c->p.emulate_ms > 0 ? "emulated compute" : c->p.model,
               c->p.emulate_ms > 0 ? "" : " on ", c->p.emulate_ms > 0 ? "" : device);
      pb__run_progress(c, what);
      rc = measure(c, t, fi, cache, device, t3_jpeg_wanted(c, fi, device), &gs, step_s, wait_s,
                   per, err);
    }
  state_free(&gs);
  free(step_s);
  free(wait_s);
  if (rc == PB_OK && pb__ranks_rank() == 0)
    rc = pb__write_table(c, t, "pipebench_track3.parquet", err);
  if (rc == PB_OK && pb__ranks_rank() == 0) {
    char text[1200];
    t3_summary_medians(t, per, s);
    t3_headline(t, text, sizeof text);
    char plain[1200]; /* the console has no bold: the report's words without the ** marks */
    size_t o = 0;
    for (size_t i = 0; text[i] != '\0' && o + 1 < sizeof plain; i++) {
      if (text[i] == '*' && text[i + 1] == '*') {
        i++;
        continue;
      }
      plain[o++] = text[i];
    }
    plain[o] = '\0';
    pb__run_report(c, "track 3: %s", plain);
  }
  pb_table_free(t);
  return rc;
}

/* ---- the report: plot, answer, section ------------------------------------------------------ */

static void t3_draw(const void *ctx, pb__plot_page *pg) {
  const pb_table *t = ctx;
  /* rows of a torch model: one bar per feeder instead of per cache mode */
  const char *cat = pb__t3_torch_table(t) ? PB__T3_FEEDER : T3_CACHE;
  const char *cat_label = pb__t3_torch_table(t) ? "feeder" : "cache mode";
  const char *formats[PB__RP_MAX_DISTINCT], *caches[4];
  int nf = pb__report_distinct_str(t, PB__COL_FORMAT, NULL, 0, formats, PB__RP_MAX_DISTINCT);
  int nc = pb__report_distinct_str(t, cat, NULL, 0, caches, 4);
  double hi = 0, whi = 0;
  for (size_t r = 0; r < pb_table_rows(t); r++) {
    double v = pb__report_f64(t, r, T3_STEP_MEAN), w = pb__report_f64(t, r, T3_DATA_WAIT_FRACTION);
    if (v > hi) hi = v;
    if (w > whi) whi = w;
  }
  const char *unit;
  double us = pb__plot_time_unit(hi, &unit);
  pb__plot_layout L = {pg, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  L.top = 1.0 - 4.2 * pb__plot_chr_y(&L, PB__PL_BIG);
  L.bottom = 4.0 * pb__plot_chr_y(&L, PB__PL_TXT);
  char sub[256];
  const char *model = pb__report_str(t, 0, T3_MODEL), *mode = pb__report_str(t, 0, T3_MODE);
  snprintf(sub, sizeof sub, "model %s (%s), batch %.0f, %.0f workers, first step excluded; medians over rounds",
           model ? model : "?", mode ? mode : "?", pb__report_f64(t, 0, T3_BATCH_SIZE), pb__report_f64(t, 0, T3_NUM_WORKERS));
  pb__plot_title(&L, "Track 3: model loop - step time and time spent waiting for data", sub);
  char ylab[64];
  snprintf(ylab, sizeof ylab, "mean step time (%s)", unit);
  double gw = 0.8, bw = gw / (nf > 0 ? nf : 1);
  pb__plot_panel(&L, 0, -0.5, nc - 0.5, 0, hi * us * 1.15, 0, "step time: compute (solid) + data wait (hatched)",
        cat_label, ylab, caches, nc, NULL);
  for (int c = 0; c < nc; c++)
    for (int f = 0; f < nf; f++) {
      pb__report_filter fl[2] = {{PB__COL_FORMAT, formats[f], 0}, {cat, caches[c], 0}};
      double step = pb__report_median(t, T3_STEP_MEAN, fl, 2, NULL) * us;
      double wait = pb__report_median(t, T3_DATA_WAIT_MEAN, fl, 2, NULL) * us;
      if (!(step > 0)) continue;
      if (!(wait >= 0)) wait = 0;
      double x0 = c - gw / 2 + f * bw;
      uint32_t col = pb__report_format_color(formats[f]);
      pb__plot_rect(x0 + 0.08 * bw, x0 + 0.92 * bw, 0, step - wait, col, 0);
      if (wait > 0) pb__plot_rect(x0 + 0.08 * bw, x0 + 0.92 * bw, step - wait, step, col, 1);
    }
  double ymax = whi * 100 * 1.25;
  if (ymax < 15) ymax = 15;
  pb__plot_panel(&L, 1, -0.5, nc - 0.5, 0, ymax, 0, "data-wait fraction (1 - accelerator utilisation)", cat_label,
        "data wait (% of step time)", caches, nc, NULL);
  pb__plot_color(0xB00000);
  plwidth(3);
  PLINT mark = 2500, space = 1500;
  plstyl(1, &mark, &space);
  PLFLT lx[2] = {-0.5, nc - 0.5}, ly[2] = {10, 10};
  plline(2, lx, ly);
  plstyl(0, NULL, NULL);
  plptex(nc - 0.55, 10 + ymax * 0.03, 1, 0, 1, "data-bound above 10% (AU < 90%)");
  for (int c = 0; c < nc; c++)
    for (int f = 0; f < nf; f++) {
      pb__report_filter fl[2] = {{PB__COL_FORMAT, formats[f], 0}, {cat, caches[c], 0}};
      double v = pb__report_median(t, T3_DATA_WAIT_FRACTION, fl, 2, NULL) * 100;
      if (!isfinite(v)) continue;
      if (v < 0) v = 0;
      double x0 = c - gw / 2 + f * bw;
      pb__plot_rect(x0 + 0.08 * bw, x0 + 0.92 * bw, 0, v, pb__report_format_color(formats[f]), 0);
    }
  pb__plot_format_legend(&L, formats, nf, NULL, 0, 3.2 * pb__plot_chr_y(&L, PB__PL_TXT));
}

static int t3_plot(const pb_table *t, const char *png, struct pb_error *err) {
  return pb__plot_png(png, 1800, 800, t3_draw, t, err);
}

/* The headline of track 3, from the table alone: per format and cache mode the median
 * accelerator utilisation over rounds; those under 90% listed in bound ("raw/cache none (AU
 * 85%), ..."), the lowest in *lo and lo_at. The run's console line, pipebench_summary.json
 * and the report all take it from here, so the three say the same. */
static void t3_bound(const pb_table *t, char *bound, size_t bsize, double *lo, char *lo_at,
                     size_t lsize) {
  const char *formats[PB__RP_MAX_DISTINCT], *caches[4];
  int nf = pb__report_distinct_str(t, PB__COL_FORMAT, NULL, 0, formats, PB__RP_MAX_DISTINCT);
  int nc = pb__report_distinct_str(t, T3_CACHE, NULL, 0, caches, 4);
  bound[0] = '\0';
  lo_at[0] = '\0';
  *lo = INFINITY;
  for (int f = 0; f < nf; f++)
    for (int c = 0; c < nc; c++) {
      pb__report_filter fl[2] = {{PB__COL_FORMAT, formats[f], 0}, {T3_CACHE, caches[c], 0}};
      double au = pb__report_median(t, T3_AU, fl, 2, NULL);
      if (!isfinite(au)) continue;
      if (au < *lo) {
        *lo = au;
        snprintf(lo_at, lsize, "%s, cache %s", formats[f], caches[c]);
      }
      if (au < 0.9) {
        size_t u = strlen(bound);
        snprintf(bound + u, bsize - u, "%s%s/cache %s (AU %.0f%%)", u ? ", " : "", formats[f], caches[c], 100 * au);
      }
    }
}

/* The headline in words, for the report and the console alike. */
static void t3_headline(const pb_table *t, char *text, size_t size) {
  if (pb__t3_torch_table(t)) {
    pb__t3_torch_headline(t, text, size);
    return;
  }
  char bound[768], lo_at[96];
  double lo;
  t3_bound(t, bound, sizeof bound, &lo, lo_at, sizeof lo_at);
  const char *model = pb__report_str(t, 0, T3_MODEL);
  if (!isfinite(lo))
    snprintf(text, size, "Data-bound: track 3 has no accelerator utilisation.");
  else if (bound[0])
    snprintf(text, size, "**The model loop is data-bound** (track 3, %s: accelerator utilisation AU < 90%%) with %s; the model waits for data there.",
             model ? model : "model", bound);
  else
    snprintf(text, size, "**The model loop is not data-bound** (track 3, %s): AU >= 90%% with every format and cache mode (lowest %.1f%%, %s).",
             model ? model : "model", 100 * lo, lo_at);
}

/* The summary's per-format entries as the table's medians over rounds (they held the last
 * round's values), and any_data_bound from the same medians. */
static void t3_summary_medians(const pb_table *t, cJSON *per, cJSON *s) {
  cJSON *o;
  int bound = 0;
  cJSON_ArrayForEach(o, per) {
    char fmt[96];
    snprintf(fmt, sizeof fmt, "%s", o->string ? o->string : "");
    char *slash = strrchr(fmt, '/');
    if (slash == NULL) continue;
    *slash = '\0';
    pb__report_filter fl[2] = {{PB__COL_FORMAT, fmt, 0}, {T3_CACHE, slash + 1, 0}};
    static const char *const cols[][2] = {{T3_AU, "accelerator_utilisation"},
                                          {T3_DATA_WAIT_FRACTION, "data_wait_fraction"},
                                          {T3_STEP_P50, "step_time_p50_s"},
                                          {T3_IMAGES_PER_SEC, "images_per_sec"}};
    for (size_t k = 0; k < sizeof cols / sizeof cols[0]; k++) {
      double v = pb__report_median(t, cols[k][0], fl, 2, NULL);
      if (isfinite(v)) cJSON_ReplaceItemInObjectCaseSensitive(o, cols[k][1], cJSON_CreateNumber(v));
    }
    double au = pb__report_median(t, T3_AU, fl, 2, NULL);
    if (isfinite(au)) {
      cJSON_ReplaceItemInObjectCaseSensitive(o, "data_bound", cJSON_CreateBool(au < 0.9));
      bound |= au < 0.9;
    }
  }
  cJSON_AddBoolToObject(s, "any_data_bound", bound);
}

static void t3_answer(pb__report_doc *d, const pb_table *t, const cJSON *sum) {
  (void)sum;
  if (t == NULL) {
    pb__report_li(d, "Data-bound: not measured here (no track 3 table).");
    return;
  }
  char text[1200];
  t3_headline(t, text, sizeof text);
  pb__report_li(d, "%s", text);
}

static void t3_section(pb__report_doc *d, const pb_table *t, char (*cells)[64]) {
  if (pb__t3_torch_table(t)) {
    pb__t3_torch_section(d, t, cells);
    return;
  }
  pb__report_p(d, "The loader feeding a model: step time (wait for the batch + compute), data-wait fraction = 1 - AU, first step excluded. AU below 90%% means data-bound.");
  static const char *const head[] = {PB__COL_FORMAT, T3_CACHE, "step p50", "data wait", "AU", "data-bound", "images/s"};
  int nc = 7, n = 0;
  for (int c = 0; c < nc; c++) snprintf(cells[n++], 64, "%s", head[c]);
  const char *formats[PB__RP_MAX_DISTINCT], *caches[4];
  int nf = pb__report_distinct_str(t, PB__COL_FORMAT, NULL, 0, formats, PB__RP_MAX_DISTINCT);
  int ncache = pb__report_distinct_str(t, T3_CACHE, NULL, 0, caches, 4);
  for (int f = 0; f < nf; f++)
    for (int c = 0; c < ncache && n + nc <= PB__RP_MAXCELLS; c++) {
      pb__report_filter fl[2] = {{PB__COL_FORMAT, formats[f], 0}, {T3_CACHE, caches[c], 0}};
      int rounds = 0;
      double au = pb__report_median(t, T3_AU, fl, 2, &rounds);
      if (rounds == 0) continue;
      snprintf(cells[n++], 64, "%s", formats[f]);
      snprintf(cells[n++], 64, "%s", caches[c]);
      pb__report_fmt_time(pb__report_median(t, T3_STEP_P50, fl, 2, NULL), cells[n++], 64);
      snprintf(cells[n++], 64, "%.1f%%", 100 * pb__report_median(t, T3_DATA_WAIT_FRACTION, fl, 2, NULL));
      snprintf(cells[n++], 64, "%.1f%%", 100 * au);
      snprintf(cells[n++], 64, "%s", au < 0.9 ? "**yes**" : "no");
      pb__report_fmt_num(pb__report_median(t, T3_IMAGES_PER_SEC, fl, 2, NULL), cells[n++], 64);
    }
  pb__report_table(d, cells, n / nc, nc);
}

/* ---- the descriptor -------------------------------------------------------------------------- */

static const char *const t3_round_keys[] = {PB__COL_FORMAT, T3_CACHE, T3_MODEL, T3_MODE, T3_BATCH_SIZE, T3_NUM_WORKERS, PB__COL_CACHE_STATE, PB__T3_FEEDER, NULL};

static const char *const t3_options[] = {"repeats", "model",      "steps", "t3_batch", "t3_workers",
                                         "emulate_ms", "train", "cold",  "seed", "device",
                                         "dtype", "framework", "torch_model", "reads_in_flight",
                                         "bytes_in_flight", NULL};

const pb__track pb__track3 = {
    .name = "model loop",
    .options = t3_options,
    .validate = t3_validate,
    .measure = t3_run,
    .view = {
        .id = "3",
        .title = "Track 3: model loop",
        .table = "pipebench_track3",
        .schema = t3_schema,
        .plot_needs = T3_STEP_MEAN,
        .plot = t3_plot,
        .answer = t3_answer,
        .answer_peer = NULL,
        .section = t3_section,
        .round_keys = t3_round_keys,
        .round_metric = T3_STEP_P50,
        .round_what = "step time p50",
    },
};
