/* pb_infer_run: a model's forward pass across batch sizes, on pipebench's engine and on the
 * framework peers (torch eager, torch.compile, JAX), one row per framework and batch size. The
 * peers are Python programs run as child processes; the statistics of every framework come from
 * the same code here.
 *
 * Under mpirun every rank runs the engine on its own device over its shard of the data source;
 * each batch size's timed passes start together on every rank and end when the last rank is done
 * (the common window), and rank 0 gathers every rank's latencies and alone writes the rows: one
 * per rank and one for all ranks together (docs/scaling.md). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipebench/engine.h"
#include "pipebench/format.h"
#include "pipebench/infer.h"
#include "pipebench/report.h"
#include "pipebench/stats.h"

#include "pipebench/sys.h"
#include "infer/infer_internal.h"
#include "tracks/device.h"
#include "tracks/ranks.h"

void pb_infer_params_init(pb_infer_params *params) {
  pb_infer_params d = PB_INFER_PARAMS_DEFAULTS;
  *params = d;
}

void pb__infer_note(const pb_infer_params *p, int level, const char *fmt, ...) {
  if (p->note == NULL || pb__ranks_rank() != 0) return; /* across ranks rank 0 speaks */
  char line[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  p->note(p->note_ctx, level, line);
}

/* ---- parameters ---------------------------------------------------------------------------- */

static int parse_frameworks(const char *list, unsigned *mask, struct pb_error *err) {
  static const struct {
    const char *name;
    unsigned mask;
  } names[] = {{"pipebench", PB__FW_ENGINE},
               {"onednn", PB__FW_ENGINE | PB__FW_ONEDNN},
               {"cuda", PB__FW_ENGINE | PB__FW_CUDA},
               {"cudnn", PB__FW_ENGINE | PB__FW_CUDA},
               {"torch", PB__FW_TORCH},
               {"pytorch", PB__FW_TORCH},
               {"torch-compile", PB__FW_TORCH_COMPILE},
               {"pytorch-compile", PB__FW_TORCH_COMPILE},
               {"jax", PB__FW_JAX},
               {"both", PB__FW_TORCH | PB__FW_JAX},
               {"peers", PB__FW_PEERS},
               {"all", PB__FW_ENGINE | PB__FW_PEERS}};
  *mask = 0;
  const char *p = list != NULL ? list : "pipebench";
  while (*p) {
    size_t n = strcspn(p, ",");
    unsigned m = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && n > 0; i++)
      if (strlen(names[i].name) == n && strncmp(p, names[i].name, n) == 0) m = names[i].mask;
    if (m == 0)
      return pb_error_set(err, PB_EINVAL,
                          "unknown framework '%.*s' (available: pipebench (or onednn, cuda), "
                          "pytorch (or torch), torch-compile, jax, both (pytorch and jax), "
                          "peers, all)",
                          (int)n, p);
    *mask |= m;
    p += n + (p[n] == ',');
  }
  if ((*mask & PB__FW_ONEDNN) && (*mask & PB__FW_CUDA))
    return pb_error_set(err, PB_EINVAL, "onednn and cuda run on different devices: one call "
                                        "takes one of them");
  return *mask ? PB_OK : pb_error_set(err, PB_EINVAL, "no framework given");
}

static int check_name(const char *what, const char *v, const char *list, struct pb_error *err) {
  size_t n = strlen(v);
  for (const char *p = list; (p = strstr(p, v)) != NULL; p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0')) return PB_OK;
  return pb_error_set(err, PB_EINVAL, "unknown %s '%s' (available: %s)", what, v, list);
}

/* "cpu", plus "cuda" when an engine can run there: what this machine has. */
static void devices_here(char *buf, size_t size) {
  snprintf(buf, size, "cpu%s", pb_engine_device_status("cuda", NULL, 0) == PB_OK ? ", cuda" : "");
}

static int resolve_device(const pb_infer_params *p, pb__infer_ctx *c, struct pb_error *err) {
  const char *want = p->device ? p->device : "auto";
  char here[64];
  devices_here(here, sizeof here);
  if (strcmp(want, "mps") == 0 || strcmp(want, "tpu") == 0)
    return pb_error_set(err, PB_EINVAL, "device '%s' is not available on this machine (it has: %s)",
                        want, here);
  if ((c->mask & PB__FW_ONEDNN) && strcmp(want, "auto") == 0) want = "cpu";
  if ((c->mask & PB__FW_CUDA) && strcmp(want, "auto") == 0) want = "cuda";
  c->device = pb__device_resolve(want, c->device_why, sizeof c->device_why);
  if (c->device == NULL)
    return pb_error_set(err, PB_EINVAL, "unknown device '%s' (available: %s; this machine has: %s)",
                        want, pb_engine_device_list(), here);
  if ((c->mask & PB__FW_ONEDNN) && strcmp(c->device, "cpu") != 0)
    return pb_error_set(err, PB_EINVAL, "framework onednn runs on the cpu, not on %s", c->device);
  if ((c->mask & PB__FW_CUDA) && strcmp(c->device, "cuda") != 0)
    return pb_error_set(err, PB_EINVAL, "framework cuda runs on the GPU, not on %s", c->device);
  /* One GPU per rank: the rank's place on its host modulo the GPUs there. A device the user
   * numbered (cuda:N) stays as asked. */
  int gpu = pb__ranks_size() > 1 ? pb__ranks_local_gpu() : -1;
  if (strcmp(c->device, "cuda") == 0 && pb__ranks_size() > 1 && strchr(want, ':') != NULL) {
    snprintf(c->device_buf, sizeof c->device_buf, "%s", want);
    c->device = c->device_buf;
  } else if (strcmp(c->device, "cuda") == 0 && gpu >= 0) {
    snprintf(c->device_buf, sizeof c->device_buf, "cuda:%d", gpu);
    c->device = c->device_buf;
  }
  return PB_OK;
}

/* Splits the model list into c->models ("both": resnet50 and vit_b_16), each checked. */
static int parse_models(const char *list, pb__infer_models *m, struct pb_error *err) {
  m->n = 0;
  const char *p = list != NULL && list[0] != '\0' ? list : "embed";
  while (*p) {
    size_t n = strcspn(p, ",");
    const char *names[2] = {NULL, NULL};
    char one[32];
    if (n == 0 || n >= sizeof one)
      return pb_error_set(err, PB_EINVAL, "unknown model '%.*s' (available: %s, both)", (int)n, p,
                          pb_engine_model_list());
    memcpy(one, p, n);
    one[n] = '\0';
    if (strcmp(one, "both") == 0) names[0] = "resnet50", names[1] = "vit_b_16";
    else names[0] = one;
    for (int k = 0; k < 2 && names[k] != NULL; k++) {
      PB_RETURN_NOT_OK(check_name("model", names[k], pb_engine_model_list(), err));
      int dup = 0;
      for (int i = 0; i < m->n; i++) dup |= strcmp(m->names[i], names[k]) == 0;
      if (dup) continue;
      if (m->n == PB__INFER_MAX_MODELS)
        return pb_error_set(err, PB_EINVAL, "at most %d models", PB__INFER_MAX_MODELS);
      snprintf(m->names[m->n++], sizeof m->names[0], "%s", names[k]);
    }
    p += n + (p[n] == ',');
  }
  return PB_OK;
}

static int check_params(const pb_infer_params *p, pb__infer_ctx *c, pb__infer_models *models,
                        struct pb_error *err) {
  PB_RETURN_NOT_OK(parse_frameworks(p->frameworks, &c->mask, err));
  if (pb__ranks_size() > 1 && (c->mask & PB__FW_PEERS))
    return pb_error_set(err, PB_EINVAL, "across %d ranks only pipebench's engine runs (the peers "
                        "pytorch, torch-compile and jax time one process): name pipebench, "
                        "onednn or cuda, or leave --framework out", pb__ranks_size());
  PB_RETURN_NOT_OK(parse_models(p->model, models, err));
  c->model = models->names[0];
  c->dtype = p->dtype ? p->dtype : "float32";
  c->source = p->data_source ? p->data_source : "synthetic";
  PB_RETURN_NOT_OK(check_name("dtype", c->dtype, "float32, bfloat16, float16", err));
  PB_RETURN_NOT_OK(resolve_device(p, c, err));
  if (p->iterations < 1 || p->warmup < 0 || p->threads < 0)
    return pb_error_set(err, PB_EINVAL, "iterations must be >= 1, warmup and threads >= 0");
  if (p->n_batch_sizes < 0 || p->n_batch_sizes > PB_INFER_MAX_BATCH_SIZES ||
      (p->n_batch_sizes > 0 && p->batch_sizes == NULL))
    return pb_error_set(err, PB_EINVAL, "from 1 to %d batch sizes", PB_INFER_MAX_BATCH_SIZES);
  static const int dflt[] = {1, 8, 32, 128};
  c->nbs = p->n_batch_sizes > 0 ? p->n_batch_sizes : 4;
  for (int i = 0; i < c->nbs; i++) {
    c->bss[i] = p->n_batch_sizes > 0 ? p->batch_sizes[i] : dflt[i];
    if (c->bss[i] < 1 || c->bss[i] > 65536)
      return pb_error_set(err, PB_EINVAL, "batch sizes go from 1 to 65536, not %d", c->bss[i]);
  }
  return PB_OK;
}

/* ---- input --------------------------------------------------------------------------------- */

/* Fills batch x (c,h,w) from the dataset, cycling over this rank's shard of its images (images
 * rank, rank + N, rank + 2N, ... of the first n - n mod N: all of them in one process), or with
 * seeded noise. */
static int fill_input(pb_dataset *ds, int batch, int c, int h, int w, uint64_t seed, float *x,
                      struct pb_error *err) {
  size_t per = (size_t)c * (size_t)h * (size_t)w;
  if (ds == NULL) {
    pb_rng rng;
    pb_rng_init(&rng, seed);
    for (size_t i = 0; i < (size_t)batch * per; i++) x[i] = (float)pb_rng_normal(&rng);
    return PB_OK;
  }
  int64_t ranks = pb__ranks_size(), shard = pb_dataset_count(ds) / ranks;
  for (int b = 0; b < batch; b++) {
    pb_image_meta meta;
    int64_t idx = pb__ranks_rank() + (b % shard) * ranks;
    PB_RETURN_NOT_OK(pb_dataset_meta(ds, idx, &meta, err));
    size_t bytes = pb_image_bytes(&meta);
    void *pix = malloc(bytes ? bytes : 1);
    if (pix == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    int rc = pb_dataset_read(ds, idx, pix, bytes, NULL, err);
    if (rc == PB_OK) rc = pb_image_to_chw(&meta, pix, c, h, w, x + (size_t)b * per, err);
    free(pix);
    if (rc != PB_OK) return rc;
  }
  return PB_OK;
}

/* The model's input shape (embed takes the data's own, the others 3x224x224) and one input per
 * batch size. */
static int make_inputs(pb__infer_ctx *c, uint64_t seed, struct pb_error *err) {
  pb_dataset *ds = NULL;
  c->c = 1, c->h = 100, c->w = 100;
  if (strcmp(c->source, "synthetic") != 0) {
    PB_RETURN_NOT_OK(pb_dataset_open(c->source, c->source_format, &ds, err));
    pb_image_meta m;
    int64_t n = pb_dataset_count(ds);
    int rc = n < 1 ? pb_error_set(err, PB_EFORMAT, "%s holds no images", c->source)
             : n < pb__ranks_size()
                 ? pb_error_set(err, PB_EINVAL, "%s holds %lld images, fewer than the %d ranks "
                                "(each reads its own shard)", c->source, (long long)n,
                                pb__ranks_size())
                 : pb_dataset_meta(ds, 0, &m, err); /* every rank: the same shape */
    if (rc != PB_OK) {
      pb_dataset_free(ds);
      return rc;
    }
    c->c = (int)m.shape[PB_C], c->h = (int)m.shape[PB_Y], c->w = (int)m.shape[PB_X];
  }
  if (strcmp(c->model, "embed") != 0) c->c = 3, c->h = 224, c->w = 224;
  int rc = PB_OK;
  size_t per = (size_t)c->c * (size_t)c->h * (size_t)c->w;
  for (int i = 0; i < c->nbs && rc == PB_OK; i++) {
    c->inputs[i] = malloc((size_t)c->bss[i] * per * sizeof(float));
    if (c->inputs[i] == NULL)
      rc = pb_error_set(err, PB_ENOMEM, "out of memory for the input of batch %d", c->bss[i]);
    else
      rc = fill_input(ds, c->bss[i], c->c, c->h, c->w, seed, c->inputs[i], err);
  }
  pb_dataset_free(ds);
  return rc;
}

/* ---- rows ---------------------------------------------------------------------------------- */

void pb__infer_add_row(pb__infer_ctx *c, const pb__infer_row *r, const double *lat_s, size_t n,
                       const double *dev_lat_s, size_t n_dev) {
  pb_table *t = c->rows;
  pb_summary s;
  pb_summarize(lat_s, n, &s);
  double thr = (double)r->batch / s.mean;
  char shape[64];
  snprintf(shape, sizeof shape, "%dx%dx%dx%d", r->batch, c->c, c->h, c->w);
  pb_table_append_row(t);
  pb_table_set_str(t, "framework", r->framework);
  pb_table_set_str(t, "framework_version", r->version);
  pb_table_set_str(t, "versions", r->versions);
  pb_table_set_str(t, "model", c->model);
  pb_table_set_str(t, "device", r->device_name);
  pb_table_set_str(t, "device_type", r->device_type);
  pb_table_set_str(t, "isa", r->isa);
  pb_table_set_i64(t, "threads", r->threads);
  pb_table_set_i64(t, "batch_size", r->batch);
  pb_table_set_str(t, "input_shape", shape);
  pb_table_set_str(t, "memory_format", r->memory_format);
  pb_table_set_str(t, "dtype", c->dtype);
  char shown[4400];
  pb_location_shown(c->source, shown, sizeof shown); /* a URL's credentials stay out */
  pb_table_set_str(t, "data_source", shown);
  pb_table_set_f64(t, "latency_p50_ms", s.p50 * 1e3);
  pb_table_set_f64(t, "latency_p95_ms", s.p95 * 1e3);
  pb_table_set_f64(t, "latency_p99_ms", s.p99 * 1e3);
  pb_table_set_f64(t, "latency_mean_ms", s.mean * 1e3);
  pb_table_set_f64(t, "latency_std_ms", s.stddev * 1e3);
  pb_table_set_f64(t, "latency_min_ms", s.min * 1e3);
  pb_table_set_f64(t, "latency_max_ms", s.max * 1e3);
  pb_table_set_f64(t, "latency_median_ci_lo_ms", s.median_ci_lo * 1e3);
  pb_table_set_f64(t, "latency_median_ci_hi_ms", s.median_ci_hi * 1e3);
  pb_table_set_f64(t, "latency_cv", s.cv);
  pb_table_set_bool(t, "p95_reliable", s.p95_reliable);
  pb_table_set_bool(t, "p99_reliable", s.p99_reliable);
  pb_table_set_bool(t, "unstable", s.unstable);
  pb_summary d;
  pb_summarize(dev_lat_s, n_dev, &d); /* NaN (a NULL cell) without device timings */
  pb_table_set_f64(t, "device_latency_p50_ms", d.p50 * 1e3);
  pb_table_set_f64(t, "device_latency_p95_ms", d.p95 * 1e3);
  pb_table_set_f64(t, "throughput_ips", thr);
  pb_table_set_f64(t, "gflops_per_image", c->flops / 1e9);
  pb_table_set_f64(t, "achieved_gflops", c->flops * thr / 1e9);
  pb_table_set_f64(t, "memory_mb", r->memory_mb);
  pb_table_set_str(t, "memory_kind", r->memory_kind);
  pb_table_set_f64(t, "compilation_time_ms", r->compile_ms);
  pb_table_set_i64(t, "n", (int64_t)s.n);
  pb_table_set_i64(t, "warmup", c->warmup);
  pb_table_set_i64(t, "seed", (int64_t)c->seed);
  pb_table_set_str(t, "timestamp", c->env.timestamp_utc);
  pb_table_set_str(t, "git_commit", pb_git_commit());
}

/* ---- pipebench's engine -------------------------------------------------------------------- */

/* Host wall time per forward (launch to synchronised: each interval, and so each rate made from
 * them, starts and ends on an idle device), and on a device also the forward's own
 * device time from CUDA events (*n_dev of them; 0 on the CPU, whose clock is the host's). Across
 * ranks the timed passes start together after every rank's warm-up, and *window_s is this rank's
 * time from that start to the moment the last rank has finished; a failure here is prefixed with
 * the batch size and agreed with the other ranks at one of those two points. */
static int time_engine(const pb_infer_params *p, pb_engine *e, int batch, pb_tensor *x,
                       pb_tensor *y, double *lat, double *dev_lat, size_t *n_dev, double *rss_mb,
                       double *window_s, struct pb_error *err) {
  int64_t start = pb_now_ns();
  pb_engine_info info;
  pb_engine_get_info(e, &info);
  int on_device = strcmp(info.device, "cpu") != 0;
  int speak = p->progress != NULL && pb__ranks_rank() == 0;
  *n_dev = 0;
  long total = (long)p->warmup + p->iterations;
  double mark = NAN;
  int rc = PB_OK;
  int64_t w0 = 0;
  for (long it = 0; it < total && rc == PB_OK; it++) {
    if (pb_stop_requested() != 0) { /* the flag of params->cancel: within one pass */
      rc = pb_error_set(err, PB_ECANCELED, "interrupted");
      break;
    }
    if (it == p->warmup) {
      /* the ranks' timed passes start together: the common window opens */
      if (pb__ranks_size() > 1) {
        rc = pb__ranks_agree(rc, err);
        if (rc != PB_OK) break;
      }
      w0 = pb_now_ns();
      mark = pb__infer_rss_mark();
    }
    int64_t t0 = pb_now_ns();
    rc = pb_engine_forward(e, x, y, err);
    if (rc == PB_OK) rc = pb_engine_synchronize(e, err); /* the clock is read once the device is done */
    int64_t t1 = pb_now_ns();
    if (rc == PB_OK && it >= p->warmup) lat[it - p->warmup] = (double)(t1 - t0) / 1e9;
    if (rc == PB_OK && it >= p->warmup && on_device) {
      int64_t dns = 0;
      rc = pb_engine_forward_time(e, &dns, err);
      if (rc == PB_OK) dev_lat[(*n_dev)++] = (double)dns / 1e9;
    }
    if (speak && it % 5 == 4)
      p->progress(p->progress_ctx, "infer", it + 1, total, (double)(pb_now_ns() - start) / 1e9);
  }
  if (rc != PB_OK && !pb__ranks_failed()) pb_error_prefix(err, "batch %d: ", batch);
  /* closes when the last rank is done (a rank that failed comes here at once) */
  rc = pb__ranks_agree(rc, err);
  *window_s = (double)(pb_now_ns() - w0) / 1e9;
  *rss_mb = pb__infer_rss_growth_mb(mark);
  if (speak) p->progress(p->progress_ctx, "", 0, 0, 0);
  return rc;
}

/* The rows of one batch size across ranks, on rank 0: one per rank (its own latencies, its
 * memory and compile time) and one for all ranks (the latencies pooled, images/s over the common
 * window), each with the ranks' columns. Collective. */
static int add_rank_rows(const pb_infer_params *p, pb__infer_ctx *c, const pb__infer_row *mine,
                         const double *lat, const double *dev_lat, size_t n_dev,
                         double window_s, struct pb_error *err) {
  int n = pb__ranks_size(), batch = mine->batch;
  double own_s = 0;
  for (int k = 0; k < p->iterations; k++) own_s += lat[k];
  pb__ranks_window w;
  PB_RETURN_NOT_OK(pb__ranks_window_gather((int64_t)batch * p->iterations, own_s, window_s, &w, err));
  /* what differs between ranks besides the latencies */
  int gpu = strncmp(c->device, "cuda:", 5) == 0 ? atoi(c->device + 5) : -1;
  double facts[4] = {mine->memory_mb, mine->compile_ms, (double)n_dev, (double)gpu};
  double *lat_all = NULL, *dev_all = NULL, *facts_all = NULL;
  size_t n_lat = 0, n_dev_all = 0, n_facts = 0;
  int rc = pb__ranks_gather_f64(lat, (size_t)p->iterations, &lat_all, &n_lat, err);
  if (rc == PB_OK) rc = pb__ranks_gather_f64(dev_lat, n_dev, &dev_all, &n_dev_all, err);
  if (rc == PB_OK) rc = pb__ranks_gather_f64(facts, 4, &facts_all, &n_facts, err);
  if (rc == PB_OK && pb__ranks_rank() == 0) {
    pb_table *t = c->rows;
    size_t dev_off = 0;
    double mem_sum = 0, compile_max = 0;
    for (int r = 0; r <= n; r++) {
      pb__infer_row row = *mine;
      char device[40];
      if (r < n) {
        const double *f = facts_all + 4 * r;
        size_t nd = (size_t)f[2];
        if (f[3] >= 0) snprintf(device, sizeof device, "%s:%d", mine->device_type, (int)f[3]);
        else snprintf(device, sizeof device, "%s", mine->device_type);
        row.device_type = device;
        row.memory_mb = f[0], row.compile_ms = f[1];
        mem_sum += f[0];
        if (f[1] > compile_max) compile_max = f[1];
        pb__infer_add_row(c, &row, lat_all + (size_t)r * (size_t)p->iterations,
                          (size_t)p->iterations, dev_all + dev_off, nd);
        dev_off += nd;
        snprintf(device, sizeof device, "%d", r);
        pb_table_set_str(t, "rank", device);
      } else { /* all ranks: every latency pooled; the images of all ranks over the window */
        row.memory_mb = mem_sum, row.compile_ms = compile_max;
        pb__infer_add_row(c, &row, lat_all, n_lat, dev_all, n_dev_all);
        pb_table_set_f64(t, "throughput_ips", w.rate);
        pb_table_set_f64(t, "achieved_gflops", c->flops * w.rate / 1e9);
        pb_table_set_str(t, "rank", "all");
      }
      pb__ranks_window_columns(t, &w);
    }
  }
  free(lat_all);
  free(dev_all);
  free(facts_all);
  return rc;
}

static int run_engine_batch(const pb_infer_params *p, pb__infer_ctx *c, int i, double *lat,
                            double *dev_lat, struct pb_error *err) {
  pb_engine_params ep = PB_ENGINE_PARAMS_DEFAULTS;
  ep.model = c->model, ep.device = c->device, ep.dtype = c->dtype, ep.batch_size = c->bss[i];
  ep.channels = c->c, ep.height = c->h, ep.width = c->w, ep.seed = c->seed;
  ep.threads = p->threads;
  pb_engine *e = NULL;
  pb_tensor *x = NULL, *y = NULL;
  int rc = pb_engine_new(&ep, &e, err);
  if (rc == PB_OK) rc = pb_engine_tensor_new(e, PB_TENSOR_INPUT, &x, err);
  if (rc == PB_OK) rc = pb_engine_tensor_new(e, PB_TENSOR_OUTPUT, &y, err);
  if (rc == PB_OK) rc = pb_tensor_write(x, c->inputs[i], pb_tensor_bytes(x), err);
  pb_engine_info in;
  double rss_mb = NAN, window_s = NAN;
  size_t n_dev = 0;
  if (rc == PB_OK) {
    pb_engine_get_info(e, &in);
    if (i == 0)
      pb__infer_note(p, 0, "device: %s (%s%s%s, %s, %d threads, %s%s%s)", in.device,
                     c->device_why, c->device_why[0] ? "; " : "", in.device_name, in.isa,
                     in.threads, in.backend, in.versions[0] ? "; " : "", in.versions);
    c->flops = in.flops_per_image;
    c->engine_threads = in.threads;
    rc = time_engine(p, e, c->bss[i], x, y, lat, dev_lat, &n_dev, &rss_mb, &window_s, err);
  } else {
    pb_error_prefix(err, "batch %d: ", c->bss[i]);
    rc = pb__ranks_agree(rc, err); /* the others learn it where their timed passes would start */
  }
  if (rc == PB_OK) {
    pb__infer_row r = {0};
    r.framework = in.backend;
    /* oneDNN's version alone, as rows always had it; other backends name their libraries */
    r.version = strcmp(in.backend, "onednn") == 0 ? c->env.onednn_version : in.versions;
    r.versions = in.versions, r.device_name = in.device_name, r.device_type = in.device;
    r.isa = in.isa, r.threads = in.threads, r.batch = c->bss[i];
    r.memory_format = strcmp(in.device, "cpu") == 0 ? "backend_chosen" : "channels_last";
    /* The same meaning as the peers' rows on the device: on the CPU the growth of the peak
     * resident memory over the timed passes, on a GPU the device memory the engine holds (all
     * of it allocated before the passes, none during them). */
    if (strcmp(in.device, "cpu") == 0) r.memory_mb = rss_mb, r.memory_kind = "cpu_peak_rss_growth";
    else r.memory_mb = (double)in.bytes_total / 1048576.0, r.memory_kind = "device_peak_allocated";
    r.compile_ms = in.compile_ms;
    if (pb__ranks_size() > 1)
      rc = add_rank_rows(p, c, &r, lat, dev_lat, n_dev, window_s, err);
    else
      pb__infer_add_row(c, &r, lat, (size_t)p->iterations, dev_lat, n_dev);
  }
  pb_tensor_free(x);
  pb_tensor_free(y);
  pb_engine_free(e);
  return rc;
}

static int run_engine(const pb_infer_params *p, pb__infer_ctx *c, struct pb_error *err) {
  double *lat = calloc((size_t)p->iterations, sizeof *lat);
  double *dev_lat = calloc((size_t)p->iterations, sizeof *dev_lat);
  int rc = PB_OK;
  if (lat == NULL || dev_lat == NULL) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  for (int i = 0; i < c->nbs && rc == PB_OK; i++) {
    rc = run_engine_batch(p, c, i, lat, dev_lat, err);
    /* each batch size's row on disk as it finishes (one process; across ranks at the end) */
    if (rc == PB_OK && pb__ranks_size() == 1) rc = pb__infer_save(p, c, err);
  }
  free(lat);
  free(dev_lat);
  return rc;
}

/* The FLOP count of the model, for peers-only runs (an engine on the CPU is built for it). */
static void count_flops(pb__infer_ctx *c) {
  pb_engine_params ep = PB_ENGINE_PARAMS_DEFAULTS;
  ep.model = c->model, ep.channels = c->c, ep.height = c->h, ep.width = c->w, ep.device = "cpu";
  pb_engine *e = NULL;
  if (pb_engine_new(&ep, &e, NULL) == PB_OK) {
    pb_engine_info in;
    pb_engine_get_info(e, &in);
    c->flops = in.flops_per_image;
  }
  pb_engine_free(e);
}

/* ---- output -------------------------------------------------------------------------------- */

static int new_rows(pb__infer_ctx *c, struct pb_error *err) {
  if (pb_table_new(&c->rows) != PB_OK) return pb_error_set(err, PB_ENOMEM, "out of memory");
  pb_table_set_env(c->rows, &c->env);
  pb_table_set_meta(c->rows, "command", "infer");
  if (pb__ranks_size() > 1) {
    char n[16];
    snprintf(n, sizeof n, "%d", pb__ranks_size());
    pb_table_set_meta(c->rows, "ranks", n);
  }
  return PB_OK;
}

static int write_outputs(const pb_infer_params *p, pb__infer_ctx *c, struct pb_error *err) {
  PB_RETURN_NOT_OK(pb__infer_save(p, c, err));
  pb__infer_note(p, 0, "results: %s", c->csv_path); /* a line of its own: scripts take the path */
  pb__infer_note(p, 0, "environment: %s", c->env_path);
  if (!p->plot) return PB_OK;
  if (pb__ranks_size() > 1) { /* the plot folds a configuration's rows into one point */
    pb__infer_note(p, 1, "no plot across ranks: the CSV holds a row per rank and one for all "
                         "ranks of each batch size");
    return PB_OK;
  }
  /* The plot goes beside the raw folder, into images/ (results/raw -> results/images); a plot
   * that cannot be drawn is a warning, the CSV is the result; one that cannot be written fails. */
  char img_dir[4096], png[4200];
  snprintf(img_dir, sizeof img_dir, "%s", p->output_dir);
  size_t l = strlen(img_dir);
  while (l > 1 && img_dir[l - 1] == '/') img_dir[--l] = '\0';
  char *slash = strrchr(img_dir, '/');
  if (slash != NULL) snprintf(slash, sizeof img_dir - (size_t)(slash - img_dir), "/images");
  else snprintf(img_dir, sizeof img_dir, "images");
  snprintf(png, sizeof png, "%s/pipebench_infer.png", img_dir);
  struct pb_error perr = {{0}};
  int prc = pb_mkdirs(img_dir, &perr);
  if (prc == PB_OK) prc = pb_report_plot_infer(p->output_dir, png, &perr);
  if (prc == PB_OK) {
    pb__infer_note(p, 0, "plot: %s", png);
  } else if (prc == PB_ENOTFOUND || prc == PB_EFORMAT || prc == PB_EUNSUPPORTED ||
             prc == PB_ESTATE) {
    pb__infer_note(p, 1, "no plot: %s", perr.message);
  } else { /* drawn but not written (a full disk): the command fails */
    return pb_error_set(err, prc, "%s", perr.message);
  }
  return PB_OK;
}

/* One model: its inputs, the engine, the peers. */
static int run_model(const pb_infer_params *p, pb__infer_ctx *c, struct pb_error *err) {
  int rc = make_inputs(c, p->seed, err);
  rc = pb__ranks_agree(rc, err); /* every rank has its inputs (one process: rc as it is) */
  if (rc == PB_OK && (c->mask & PB__FW_ENGINE)) rc = run_engine(p, c, err);
  if (rc == PB_OK && (c->mask & PB__FW_PEERS)) {
    if (!(c->mask & PB__FW_ENGINE)) count_flops(c);
    rc = pb__infer_peers(p, c, err);
  }
  for (int i = 0; i < c->nbs; i++) {
    free(c->inputs[i]);
    c->inputs[i] = NULL;
  }
  if (rc != PB_OK && c->nmodels > 1) pb_error_prefix(err, "%s: ", c->model);
  return rc;
}

int pb_infer_run(const pb_infer_params *p, pb_table **rows, char *csv_path, size_t csv_path_size,
                 struct pb_error *err) {
  if (rows != NULL) *rows = NULL;
  if (csv_path != NULL && csv_path_size > 0) csv_path[0] = '\0';
  if (p == NULL) return pb_error_set(err, PB_EINVAL, "no parameters");
  pb__infer_ctx *c = calloc(1, sizeof *c);
  pb__infer_models *models = calloc(1, sizeof *models);
  if (c == NULL || models == NULL) {
    free(c);
    free(models);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  c->seed = p->seed, c->warmup = p->warmup;
  char source[4400], source_format[64];
  int rc = pb__ranks_init(err); /* under mpirun: one rank per process, rank 0 writes */
  if (rc == PB_OK) rc = check_params(p, c, models, err);
  if (rc == PB_OK && strcmp(c->source, "synthetic") != 0) {
    rc = pb__infer_resolve_source(c->source, p->data_format, source, sizeof source, source_format,
                                  sizeof source_format, err);
    c->source = source;
    c->source_format = source_format[0] ? source_format : NULL;
  }
  char made[4096] = "";
  if (rc == PB_OK && pb__ranks_rank() == 0) /* first: before any pass runs */
    rc = pb__infer_check_output(p->output_dir, made, sizeof made, err);
  rc = pb__ranks_agree(rc, err);
  if (rc == PB_OK) {
    pb_env_collect(&c->env, NULL);
    rc = new_rows(c, err);
  }
  /* the CSV is named after the start, so that its name is known while rows come in */
  time_t now = time(NULL);
  struct tm tmv;
  gmtime_r(&now, &tmv);
  strftime(c->stamp, sizeof c->stamp, "%Y%m%d_%H%M%S", &tmv);
  if (p->cancel != NULL) pb_stop_flag_set(p->cancel);
  c->nmodels = models->n;
  for (int m = 0; m < models->n && rc == PB_OK; m++) {
    c->model = models->names[m];
    rc = pb_stop_requested() != 0 ? pb_error_set(err, PB_ECANCELED, "interrupted")
                                    : run_model(p, c, err);
  }
  int writer = pb__ranks_rank() == 0; /* across ranks the others hold no rows */
  if (rc == PB_OK && writer && pb_table_rows(c->rows) == 0)
    rc = pb_error_set(err, PB_EUNSUPPORTED,
                      "nothing could run: every framework asked for was skipped (see above); "
                      "nothing written");
  else if (rc == PB_OK && writer && p->output_dir != NULL)
    rc = write_outputs(p, c, err);
  /* a failure or a stop after some rows finished: they are in the CSV already (rewritten
   * here with every row so far), and the message says where */
  if (rc != PB_OK && writer && pb_table_rows(c->rows) > 0 && c->csv_path[0] != '\0') {
    struct pb_error e2 = {{0}};
    if (pb__infer_save(p, c, &e2) == PB_OK && err != NULL) {
      size_t u = strlen(err->message);
      snprintf(err->message + u, sizeof err->message - u,
               "; the %zu row%s that finished %s in %s", pb_table_rows(c->rows),
               pb_table_rows(c->rows) == 1 ? "" : "s", pb_table_rows(c->rows) == 1 ? "is" : "are",
               c->csv_path);
    }
  }
  if (p->cancel != NULL) pb_stop_flag_set(NULL);
  if (csv_path != NULL && csv_path_size > 0) snprintf(csv_path, csv_path_size, "%s", c->csv_path);
  rc = pb__ranks_agree(rc, err); /* every rank ends with rank 0's writing */
  if (rc != PB_OK && c->csv_path[0] == '\0')
    pb__infer_unmake_output(p->output_dir, made); /* empty folders only */
  if (rc == PB_OK && rows != NULL) *rows = c->rows;
  else pb_table_free(c->rows);
  free(c);
  free(models);
  return rc;
}
