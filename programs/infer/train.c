/* pb_train_run: plain SGD (the engine's train step) over a dataset read through the loader (or seeded synthetic images) on
 * a model engine, data loading and compute timed apart; metrics as JSON. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cjson/cJSON.h>

#include "pipebench/engine.h"
#include "pipebench/format.h"
#include "pipebench/infer.h"
#include "pipebench/loader.h"

#include "infer/infer_internal.h"
#include "tracks/device.h"
#include "tracks/ranks.h"

void pb_train_params_init(pb_train_params *params) {
  pb_train_params d = PB_TRAIN_PARAMS_DEFAULTS;
  *params = d;
}

/* Where the images come from: the loader over a dataset, or seeded uniform pixels. */
typedef struct train_src {
  pb_loader *ld;
  int64_t count;
  int c, h, w;            /**< the model's input */
  pb_image_meta sample;   /**< a float32 sample as the loader delivers it (for the crop/pad) */
  int64_t *order;         /**< synthetic: this epoch's order */
  pb_rng rng;             /**< synthetic: the shuffle */
} train_src;

typedef struct train_run {
  const pb_train_params *p;
  const char *model, *loss, *data;
  pb_engine *e;
  pb_engine_info in;
  pb_tensor *x, *t;
  float *xh;              /**< host staging of the input (the tensor itself on a host device) */
  unsigned char *th;      /**< host staging of the targets */
  float *xs;
  unsigned char *ts;      /**< allocated staging, freed at the end */
  double *epoch_s, *epoch_loss;
  pb_train_result r;
  char device_why[640];   /**< why auto took the cpu ("" otherwise) */
  int reads_in_flight;    /**< the loader's sample reads in flight (0: no loader) */
} train_run;

static void tnote(const pb_train_params *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void tnote(const pb_train_params *p, const char *fmt, ...) {
  if (p->note == NULL) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  p->note(p->note_ctx, 0, line);
}

/* Labels depend only on (seed, image index), so every order and every rank agrees on them. */
static void make_target(uint64_t seed, int64_t idx, int mse, int64_t outputs, void *dst) {
  if (!mse) {
    *(int32_t *)dst = (int32_t)(pb_seed_mix(seed, (uint64_t)idx, 0) % (uint64_t)outputs);
    return;
  }
  pb_rng rng;
  pb_rng_init(&rng, pb_seed_mix(seed, (uint64_t)idx, 1));
  for (int64_t k = 0; k < outputs; k++) ((float *)dst)[k] = (float)pb_rng_normal(&rng);
}

static int check_params(const pb_train_params *p, train_run *tr, struct pb_error *err) {
  tr->model = p->model ? p->model : "embed";
  tr->loss = p->loss ? p->loss : "cross_entropy";
  tr->data = p->data ? p->data : "synthetic";
  const char *dtype = p->dtype ? p->dtype : "float32";
  int known = 0;
  for (int i = 0; i < pb_engine_model_count(); i++)
    known |= strcmp(tr->model, pb_engine_model_name(i)) == 0;
  if (!known)
    return pb_error_set(err, PB_EINVAL, "unknown model '%s' (available: %s)", tr->model,
                        pb_engine_model_list());
  if (strcmp(tr->loss, "cross_entropy") != 0 && strcmp(tr->loss, "mse") != 0)
    return pb_error_set(err, PB_EINVAL, "unknown loss '%s' (available: cross_entropy, mse)", tr->loss);
  if (strcmp(dtype, "float32") && strcmp(dtype, "bfloat16") && strcmp(dtype, "float16"))
    return pb_error_set(err, PB_EINVAL, "unknown dtype '%s' (available: %s)", dtype,
                        pb_engine_dtype_list());
  if (pb__device_resolve(p->device, NULL, 0) == NULL)
    return pb_error_set(err, PB_EINVAL, "unknown device '%s' (available: %s)", p->device,
                        pb_engine_device_list());
  if (p->epochs < 1 || p->batch_size < 1 || p->num_images < 1 || p->threads < 0 ||
      p->workers < 0 || !(p->lr >= 0))
    return pb_error_set(err, PB_EINVAL, "epochs, batch size and images must be >= 1; lr, threads "
                                        "and workers >= 0");
  if (p->reads_in_flight < 0 || p->reads_in_flight > 4096 || p->bytes_in_flight < 0)
    return pb_error_set(err, PB_EINVAL, "reads in flight must be from 0 to 4096 and bytes in "
                                        "flight >= 0 (0: auto), not %d and %lld",
                        p->reads_in_flight, (long long)p->bytes_in_flight);
  return PB_OK;
}

static int open_source(const train_run *tr, train_src *s, struct pb_error *err) {
  const pb_train_params *p = tr->p;
  s->count = p->num_images, s->c = 1, s->h = 100, s->w = 100;
  if (strcmp(tr->data, "synthetic") != 0) {
    /* Integers scaled to [0, 1] by their type's maximum, as the engine's input convention is:
     * the loader's normalize with mean 0 and std 1. */
    pb_loader_params lp = PB_LOADER_PARAMS_DEFAULTS;
    lp.batch_size = p->batch_size, lp.workers = p->workers, lp.shuffle = 1;
    lp.reads_in_flight = p->reads_in_flight, lp.bytes_in_flight = p->bytes_in_flight;
    lp.seed = pb_seed_mix(p->seed, 3, 0), lp.drop_last = 1;
    lp.rank = pb__ranks_rank(), lp.world_size = pb__ranks_size(); /* a rank trains on its shard */
    lp.transform = PB_TRANSFORM_NORMALIZE, lp.mean = 0.0f, lp.std = 1.0f;
    PB_RETURN_NOT_OK(pb_loader_new(tr->data, &lp, &s->ld, err));
    const pb_image_meta *m = pb_loader_meta(s->ld);
    s->count = pb_loader_samples_per_epoch(s->ld);
    s->c = (int)m->shape[PB_C], s->h = (int)m->shape[PB_Y], s->w = (int)m->shape[PB_X];
    pb_image_meta_init(&s->sample, "sample", PB_FLOAT32, m->shape);
  }
  if (strcmp(tr->model, "embed") != 0) s->c = 3, s->h = 224, s->w = 224;
  if (s->count < p->batch_size)
    return pb_error_set(err, PB_EINVAL, "batch size %d is larger than the %lld images",
                        p->batch_size, (long long)s->count);
  if (s->ld == NULL) {
    s->order = malloc((size_t)s->count * sizeof *s->order);
    if (s->order == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    pb_rng_init(&s->rng, pb_seed_mix(p->seed, 3, 0));
  }
  return PB_OK;
}

static int start_epoch(train_src *s, int64_t epoch, struct pb_error *err) {
  if (s->ld != NULL) return epoch == 0 ? PB_OK : pb_loader_reset(s->ld, epoch, err);
  for (int64_t i = 0; i < s->count; i++) s->order[i] = i;
  pb_rng_shuffle_i64(&s->rng, s->order, (size_t)s->count);
  return PB_OK;
}

/* Step st's batch into the staging buffers (and the tensors when they live on a device). */
static int load_batch(train_run *tr, train_src *s, int64_t st, struct pb_error *err) {
  const pb_train_params *p = tr->p;
  size_t per = (size_t)s->c * (size_t)s->h * (size_t)s->w;
  size_t tbytes = pb_tensor_bytes(tr->t) / (size_t)p->batch_size;
  int mse = strcmp(tr->loss, "mse") == 0;
  if (s->ld == NULL) {
    for (int b = 0; b < p->batch_size; b++) {
      int64_t idx = s->order[st * p->batch_size + b];
      pb_rng rng;
      pb_rng_init(&rng, pb_seed_mix(p->seed, (uint64_t)idx, 2));
      float *dst = tr->xh + (size_t)b * per;
      for (size_t i = 0; i < per; i++) dst[i] = (float)pb_rng_uniform(&rng);
      make_target(p->seed, idx, mse, tr->in.outputs, tr->th + (size_t)b * tbytes);
    }
  } else {
    pb_batch *bt = NULL;
    PB_RETURN_NOT_OK(pb_loader_next(s->ld, &bt, err));
    if (bt == NULL || bt->shape[0] != p->batch_size) {
      pb_batch_free(bt);
      return pb_error_set(err, PB_ESTATE, "%s: the loader's epoch ended early", tr->data);
    }
    size_t in_per = bt->nbytes / (size_t)bt->shape[0];
    int rc = PB_OK;
    for (int b = 0; b < p->batch_size && rc == PB_OK; b++) {
      rc = pb_image_to_chw(&s->sample, (const unsigned char *)bt->data + (size_t)b * in_per, s->c,
                           s->h, s->w, tr->xh + (size_t)b * per, err);
      make_target(p->seed, bt->indices[b], mse, tr->in.outputs, tr->th + (size_t)b * tbytes);
    }
    pb_batch_free(bt);
    PB_RETURN_NOT_OK(rc);
  }
  if (tr->xs != NULL) PB_RETURN_NOT_OK(pb_tensor_write(tr->x, tr->xs, pb_tensor_bytes(tr->x), err));
  if (tr->ts != NULL) PB_RETURN_NOT_OK(pb_tensor_write(tr->t, tr->ts, pb_tensor_bytes(tr->t), err));
  return PB_OK;
}

static int build_engine(train_run *tr, const train_src *s, struct pb_error *err) {
  const pb_train_params *p = tr->p;
  pb_engine_params ep = PB_ENGINE_PARAMS_DEFAULTS;
  /* auto: the GPU where an engine can run there and train, else the CPU, saying why */
  const char *d = pb__device_resolve(p->device, tr->device_why, sizeof tr->device_why);
  int left = pb__device_is_auto(p->device);
  ep.model = tr->model, ep.device = left ? d : p->device, ep.dtype = p->dtype;
  /* on a GPU, bfloat16 as torch autocast trains unless a dtype was named */
  if (ep.dtype == NULL && strncmp(ep.device, "cuda", 4) == 0) ep.dtype = "bfloat16";
  ep.batch_size = p->batch_size, ep.channels = s->c, ep.height = s->h, ep.width = s->w;
  ep.seed = p->seed, ep.threads = p->threads, ep.training = 1, ep.loss = tr->loss;
  struct pb_error gpu_err = {{0}};
  int rc = pb_engine_new(&ep, &tr->e, left && strcmp(d, "cpu") != 0 ? &gpu_err : err);
  if (rc == PB_EUNSUPPORTED && left && strcmp(d, "cpu") != 0) {
    snprintf(tr->device_why, sizeof tr->device_why, "no usable GPU for training: %s",
             gpu_err.message);
    ep.device = "cpu", ep.dtype = p->dtype;
    rc = pb_engine_new(&ep, &tr->e, err);
  } else if (rc != PB_OK && left && strcmp(d, "cpu") != 0) {
    pb_error_set(err, rc, "%s", gpu_err.message);
  }
  PB_RETURN_NOT_OK(rc);
  PB_RETURN_NOT_OK(pb_engine_tensor_new(tr->e, PB_TENSOR_INPUT, &tr->x, err));
  PB_RETURN_NOT_OK(pb_engine_tensor_new(tr->e, PB_TENSOR_TARGET, &tr->t, err));
  pb_engine_get_info(tr->e, &tr->in);
  /* Staging buffers on the host; on a host-visible device they are the tensors themselves. */
  tr->xh = pb_tensor_host_data(tr->x);
  tr->th = pb_tensor_host_data(tr->t);
  if (tr->xh == NULL) tr->xh = tr->xs = malloc(pb_tensor_bytes(tr->x));
  if (tr->th == NULL) tr->th = tr->ts = malloc(pb_tensor_bytes(tr->t));
  tr->epoch_s = calloc((size_t)p->epochs, sizeof *tr->epoch_s);
  tr->epoch_loss = calloc((size_t)p->epochs, sizeof *tr->epoch_loss);
  if (tr->xh == NULL || tr->th == NULL || tr->epoch_s == NULL || tr->epoch_loss == NULL)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  return PB_OK;
}

static int train_epochs(train_run *tr, train_src *s, struct pb_error *err) {
  const pb_train_params *p = tr->p;
  pb_train_result *r = &tr->r;
  int64_t steps_per_epoch = s->ld != NULL ? pb_loader_batches_per_epoch(s->ld) : s->count / p->batch_size;
  double data_steady = 0, step_steady = 0;
  int64_t t_start = pb_now_ns();
  for (int ep = 0; ep < p->epochs; ep++) {
    int64_t ep0 = pb_now_ns();
    PB_RETURN_NOT_OK(start_epoch(s, ep, err));
    double lsum = 0;
    for (int64_t st = 0; st < steps_per_epoch; st++) {
      int64_t t0 = pb_now_ns();
      int rc = load_batch(tr, s, st, err);
      if (rc != PB_OK) {
        pb_error_prefix(err, "step %lld: ", (long long)r->steps);
        return rc;
      }
      int64_t t1 = pb_now_ns();
      float l = 0;
      rc = pb_engine_train_step(tr->e, tr->x, tr->t, (float)p->lr, &l, err);
      if (rc != PB_OK) {
        pb_error_prefix(err, "step %lld: ", (long long)r->steps);
        return rc;
      }
      int64_t t2 = pb_now_ns();
      double d = (double)(t1 - t0) / 1e9, cpt = (double)(t2 - t1) / 1e9;
      if (r->steps == 0) {
        r->first_batch_data_s = d, r->first_batch_compute_s = cpt, r->first_loss = l;
      } else { /* the first step (start-up) stays out of the steady-state data-wait fraction */
        data_steady += d;
        step_steady += d + cpt;
      }
      r->data_s += d, r->compute_s += cpt, lsum += l, r->final_loss = l;
      r->steps++;
      if (p->progress != NULL && r->steps % 4 == 0)
        p->progress(p->progress_ctx, "train", (long)r->steps, (long)(steps_per_epoch * p->epochs),
                    (double)(pb_now_ns() - t_start) / 1e9);
    }
    /* times end on an idle device (each step reads its loss, which waits for it, already) */
    PB_RETURN_NOT_OK(pb_engine_synchronize(tr->e, err));
    tr->epoch_s[ep] = (double)(pb_now_ns() - ep0) / 1e9;
    tr->epoch_loss[ep] = steps_per_epoch ? lsum / (double)steps_per_epoch : NAN;
    if (p->progress != NULL) p->progress(p->progress_ctx, "", 0, 0, 0);
    tnote(p, "epoch %d: %.3f s, mean loss %.5f", ep + 1, tr->epoch_s[ep], tr->epoch_loss[ep]);
  }
  r->total_s = (double)(pb_now_ns() - t_start) / 1e9;
  r->data_wait_fraction = step_steady > 0 ? data_steady / step_steady : NAN;
  return PB_OK;
}

/* Across ranks: every rank's images per second (its steps over its own time), and all of them
 * together over the slowest rank's time, into the metrics as "ranks" (rank 0 writes them). */
typedef struct train_ranks {
  int n;
  double ips_all, ips_slowest;
  char per_rank[512];
} train_ranks;

static int gather_ranks(const train_run *tr, train_ranks *g, struct pb_error *err) {
  memset(g, 0, sizeof *g);
  g->n = pb__ranks_size();
  double mine[2] = {(double)(tr->r.steps * tr->p->batch_size), tr->r.total_s};
  double *all = malloc((size_t)g->n * 2 * sizeof *all), *ips = malloc((size_t)g->n * sizeof *ips);
  int rc = pb__ranks_agree(all && ips ? PB_OK : pb_error_set(err, PB_ENOMEM, "out of memory"), err);
  if (rc == PB_OK) rc = pb__ranks_allgather_f64(mine, 2, all, err);
  if (rc == PB_OK) {
    double images = 0, longest = 0;
    g->ips_slowest = INFINITY;
    for (int k = 0; k < g->n; k++) {
      images += all[2 * k];
      if (all[2 * k + 1] > longest) longest = all[2 * k + 1];
      ips[k] = all[2 * k + 1] > 0 ? all[2 * k] / all[2 * k + 1] : NAN;
      if (ips[k] < g->ips_slowest) g->ips_slowest = ips[k];
    }
    g->ips_all = longest > 0 ? images / longest : NAN;
    pb__ranks_list(ips, g->n, g->per_rank, sizeof g->per_rank);
  }
  free(all);
  free(ips);
  return rc;
}

static int write_metrics(const train_run *tr, const train_ranks *g, const char *path,
                         struct pb_error *err) {
  const pb_train_params *p = tr->p;
  const pb_train_result *r = &tr->r;
  cJSON *j = cJSON_CreateObject();
  if (j == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  char ts[32];
  pb_utc_iso8601(ts, sizeof ts);
  cJSON_AddStringToObject(j, "command", "train");
  cJSON_AddStringToObject(j, "model", tr->model);
  cJSON_AddStringToObject(j, "backend", tr->in.backend);
  cJSON_AddStringToObject(j, "device", tr->in.device);
  cJSON_AddStringToObject(j, "device_name", tr->in.device_name);
  if (tr->device_why[0]) cJSON_AddStringToObject(j, "device_note", tr->device_why);
  cJSON_AddStringToObject(j, "versions", tr->in.versions);
  cJSON_AddStringToObject(j, "dtype", tr->in.dtype);
  cJSON_AddStringToObject(j, "data", tr->data);
  cJSON_AddStringToObject(j, "loader", strcmp(tr->data, "synthetic") != 0 ? "pipebench" : "none");
  cJSON_AddStringToObject(j, "loss", tr->loss);
  cJSON_AddNumberToObject(j, "images", (double)r->images);
  cJSON_AddNumberToObject(j, "batch_size", p->batch_size);
  cJSON_AddNumberToObject(j, "epochs", p->epochs);
  cJSON_AddNumberToObject(j, "lr", p->lr);
  cJSON_AddNumberToObject(j, "threads", r->threads);
  cJSON_AddNumberToObject(j, "workers", p->workers);
  cJSON_AddNumberToObject(j, "reads_in_flight", tr->reads_in_flight); /* what the loader used */
  cJSON_AddNumberToObject(j, "bytes_in_flight", (double)p->bytes_in_flight);
  cJSON_AddNumberToObject(j, "seed", (double)p->seed);
  cJSON_AddNumberToObject(j, "steps", (double)r->steps);
  cJSON_AddNumberToObject(j, "total_time_s", r->total_s);
  cJSON_AddNumberToObject(j, "first_epoch_time_s", r->first_epoch_s);
  cJSON_AddItemToObject(j, "epoch_times_s", cJSON_CreateDoubleArray(tr->epoch_s, p->epochs));
  cJSON_AddItemToObject(j, "epoch_mean_loss", cJSON_CreateDoubleArray(tr->epoch_loss, p->epochs));
  cJSON_AddNumberToObject(j, "first_batch_data_s", r->first_batch_data_s);
  cJSON_AddNumberToObject(j, "first_batch_compute_s", r->first_batch_compute_s);
  cJSON_AddNumberToObject(j, "data_time_s", r->data_s);
  cJSON_AddNumberToObject(j, "compute_time_s", r->compute_s);
  if (isfinite(r->data_wait_fraction))
    cJSON_AddNumberToObject(j, "data_wait_fraction", r->data_wait_fraction);
  else
    cJSON_AddNullToObject(j, "data_wait_fraction");
  cJSON_AddNumberToObject(j, "throughput_ips", r->throughput_ips);
  cJSON_AddNumberToObject(j, "first_loss", r->first_loss);
  cJSON_AddNumberToObject(j, "final_loss", r->final_loss);
  cJSON_AddNumberToObject(j, "peak_rss_mb", r->peak_rss_mb);
  cJSON_AddNumberToObject(j, "engine_memory_mb", r->engine_memory_mb);
  cJSON_AddNumberToObject(j, "gflops_per_image_forward", r->gflops_per_image_forward);
  if (g->n > 1) {
    cJSON *o = cJSON_AddObjectToObject(j, "ranks");
    cJSON_AddNumberToObject(o, "count", g->n);
    cJSON_AddNumberToObject(o, "throughput_ips_all_ranks", g->ips_all);
    cJSON_AddNumberToObject(o, "throughput_ips_slowest_rank", g->ips_slowest);
    cJSON_AddStringToObject(o, "throughput_ips_per_rank", g->per_rank);
  }
  cJSON_AddStringToObject(j, "git_commit", pb_git_commit());
  cJSON_AddStringToObject(j, "timestamp", ts);
  char *text = cJSON_Print(j);
  cJSON_Delete(j);
  if (text == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int rc = pb_write_file_atomic(path, text, strlen(text), err);
  free(text);
  return rc;
}

static void fill_result(train_run *tr, const train_src *s) {
  pb_train_result *r = &tr->r;
  snprintf(r->backend, sizeof r->backend, "%s", tr->in.backend);
  snprintf(r->device, sizeof r->device, "%s", tr->in.device);
  snprintf(r->device_name, sizeof r->device_name, "%s", tr->in.device_name);
  snprintf(r->isa, sizeof r->isa, "%s", tr->in.isa);
  r->threads = tr->in.threads, r->parameters = tr->in.parameters;
  r->images = s->ld != NULL ? pb_loader_samples_per_epoch(s->ld) : s->count;
  r->channels = s->c, r->height = s->h, r->width = s->w;
  r->first_epoch_s = tr->epoch_s[0];
  r->throughput_ips = (double)(r->steps * tr->p->batch_size) / r->total_s;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  r->peak_rss_mb = (double)ru.ru_maxrss / 1024.0;
  r->engine_memory_mb = (double)tr->in.bytes_total / 1048576.0;
  r->gflops_per_image_forward = tr->in.flops_per_image / 1e9;
}

int pb_train_run(const pb_train_params *params, pb_train_result *result, struct pb_error *err) {
  if (result != NULL) memset(result, 0, sizeof *result);
  if (params == NULL) return pb_error_set(err, PB_EINVAL, "no parameters");
  train_run tr;
  memset(&tr, 0, sizeof tr);
  tr.p = params;
  tr.r.first_loss = tr.r.final_loss = NAN;
  train_src s;
  memset(&s, 0, sizeof s);
  int rc = pb__ranks_init(err);
  if (rc != PB_OK) return rc;
  rc = check_params(params, &tr, err);
  if (rc == PB_OK) rc = open_source(&tr, &s, err);
  if (rc == PB_OK && s.ld != NULL) tr.reads_in_flight = pb_loader_reads_in_flight(s.ld);
  if (rc == PB_OK) rc = build_engine(&tr, &s, err);
  if (rc == PB_OK) {
    tnote(params, "device: %s (%s%s%s, %s, %d threads); model %s, %lld parameters; %lld images "
          "of %dx%dx%d%s", tr.in.device, tr.device_why, tr.device_why[0] ? "; " : "",
          tr.in.device_name, tr.in.isa, tr.in.threads, tr.in.model,
          (long long)tr.in.parameters, (long long)s.count, s.c, s.h, s.w,
          s.ld != NULL ? " through the loader" : "");
    rc = train_epochs(&tr, &s, err);
  }
  if (rc == PB_OK) fill_result(&tr, &s);
  /* under mpirun every rank trains on its shard and rank 0 alone writes the metrics */
  rc = pb__ranks_agree(rc, err);
  train_ranks g;
  if (rc == PB_OK) rc = gather_ranks(&tr, &g, err);
  if (rc == PB_OK && params->metrics_path != NULL && pb__ranks_rank() == 0)
    rc = write_metrics(&tr, &g, params->metrics_path, err);
  rc = pb__ranks_agree(rc, err);
  if (rc == PB_OK && result != NULL) *result = tr.r;
  free(tr.epoch_s);
  free(tr.epoch_loss);
  free(tr.xs);
  free(tr.ts);
  pb_tensor_free(tr.x);
  pb_tensor_free(tr.t);
  pb_engine_free(tr.e);
  pb_loader_free(s.ld);
  free(s.order);
  return rc;
}
