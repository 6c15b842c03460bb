/* pipebench train: plain SGD over a dataset (or seeded synthetic images) on a model engine,
 * timing data loading and compute separately; metrics as JSON. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "pipebench/engine.h"
#include "pipebench/format.h"
#include "pipebench/results.h"

#define CMD "train"

static const cli_opt train_opts[] = {
    {"data", "PATH", "dataset in any format pipebench reads, or 'synthetic' (default)"},
    {"num-images", "N", "synthetic images (default 256; 1x100x100 like origin.md's)"},
    {"model", "NAME", "embed (default; the only model with a training path on oneDNN)"},
    {"epochs", "E", "passes over the data (default 1)"},
    {"batch-size", "N", "images per step (default 16); a last partial batch is dropped"},
    {"lr", "X", "SGD learning rate (default 0.01)"},
    {"loss", "NAME", "cross_entropy (default; seeded random class per image) or mse (seeded "
                     "random target vector per image)"},
    {"dtype", "NAME", "float32 (training runs in float32)"},
    {"device", "NAME", "auto (default), cpu, cuda"},
    {"threads", "N", "compute threads (default: all CPUs)"},
    {"seed", "N", "weights, labels, shuffling, synthetic pixels (default 42)"},
    {"metrics-out", "FILE", "write the metrics as JSON here (atomically)"},
    {NULL, NULL, NULL}};

typedef struct source {
  pb_dataset *ds;
  int64_t count;
  int c, h, w;
  uint64_t seed;
  void *pix;
  size_t pix_size;
} source;

/* One image into its slot: from the dataset, or seeded uniform pixels in [0, 1). */
static int load_image(source *s, int64_t idx, float *dst, struct pb_error *err) {
  size_t per = (size_t)s->c * (size_t)s->h * (size_t)s->w;
  if (s->ds == NULL) {
    pb_rng rng;
    pb_rng_init(&rng, pb_seed_mix(s->seed, (uint64_t)idx, 2));
    for (size_t i = 0; i < per; i++) dst[i] = (float)pb_rng_uniform(&rng);
    return 0;
  }
  pb_image_meta m;
  PB_RETURN_NOT_OK(pb_dataset_meta(s->ds, idx, &m, err));
  size_t bytes = pb_image_bytes(&m);
  if (bytes > s->pix_size) {
    void *p = realloc(s->pix, bytes);
    if (p == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    s->pix = p, s->pix_size = bytes;
  }
  PB_RETURN_NOT_OK(pb_dataset_read(s->ds, idx, s->pix, bytes, NULL, err));
  return pb_image_to_chw(&m, s->pix, s->c, s->h, s->w, dst, err);
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

static int run_train(const cli_args *a) {
  const char *data = cli_get(a, "data") ? cli_get(a, "data") : "synthetic";
  const char *model = cli_get(a, "model") ? cli_get(a, "model") : "embed";
  const char *loss = cli_get(a, "loss") ? cli_get(a, "loss") : "cross_entropy";
  const char *dtype = cli_get(a, "dtype") ? cli_get(a, "dtype") : "float32";
  const char *device = cli_get(a, "device") ? cli_get(a, "device") : "auto";
  const char *metrics = cli_get(a, "metrics-out");
  long epochs, bs, threads, seed, nimg;
  double lr;
  if (cli_get_long(a, CMD, "epochs", 1, 1, 1000000, &epochs) ||
      cli_get_long(a, CMD, "batch-size", 16, 1, 65536, &bs) ||
      cli_get_long(a, CMD, "threads", 0, 0, 4096, &threads) ||
      cli_get_long(a, CMD, "seed", 42, 0, 0x7fffffffL, &seed) ||
      cli_get_long(a, CMD, "num-images", 256, 1, 100000000, &nimg) ||
      cli_get_double(a, CMD, "lr", 0.01, 0.0, 1e6, &lr))
    return CLI_USAGE;
  int known = 0;
  for (int i = 0; i < pb_engine_model_count(); i++) known |= strcmp(model, pb_engine_model_name(i)) == 0;
  if (!known)
    return cli_usage_error(CMD, "unknown model '%s' (available: %s)", model, pb_engine_model_list());
  if (strcmp(loss, "cross_entropy") != 0 && strcmp(loss, "mse") != 0)
    return cli_usage_error(CMD, "unknown loss '%s' (available: cross_entropy, mse)", loss);
  if (strcmp(dtype, "float32") && strcmp(dtype, "bfloat16") && strcmp(dtype, "float16"))
    return cli_usage_error(CMD, "unknown dtype '%s' (available: %s)", dtype, pb_engine_dtype_list());
  if (pb_engine_resolve_device(device) == NULL)
    return cli_usage_error(CMD, "unknown device '%s' (available: %s)", device, pb_engine_device_list());

  struct pb_error err = {{0}};
  source src = {NULL, nimg, 1, 100, 100, (uint64_t)seed, NULL, 0};
  if (strcmp(data, "synthetic") != 0) {
    if (pb_dataset_open(data, NULL, &src.ds, &err) != 0) return cli_fail(CMD, "%s", err.message);
    src.count = pb_dataset_count(src.ds);
    pb_image_meta m;
    if (src.count < 1 || pb_dataset_meta(src.ds, 0, &m, &err) != 0) {
      pb_dataset_free(src.ds);
      return cli_fail(CMD, "%s: %s", data, src.count < 1 ? "holds no images" : err.message);
    }
    src.c = (int)m.shape[PB_C], src.h = (int)m.shape[PB_Y], src.w = (int)m.shape[PB_X];
  }
  if (strcmp(model, "embed") != 0) src.c = 3, src.h = 224, src.w = 224;
  if (src.count < bs) {
    pb_dataset_free(src.ds);
    return cli_usage_error(CMD, "--batch-size %ld is larger than the %lld images", bs,
                           (long long)src.count);
  }

  pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
  p.model = model, p.device = device, p.dtype = dtype, p.batch_size = (int)bs;
  p.channels = src.c, p.height = src.h, p.width = src.w;
  p.seed = (uint64_t)seed, p.threads = (int)threads, p.training = 1, p.loss = loss;
  pb_engine *e = NULL;
  pb_tensor *x = NULL, *t = NULL;
  if (pb_engine_new(&p, &e, &err) != 0 || pb_engine_tensor_new(e, PB_TENSOR_INPUT, &x, &err) != 0 ||
      pb_engine_tensor_new(e, PB_TENSOR_TARGET, &t, &err) != 0) {
    int rc = cli_fail(CMD, "%s", err.message);
    pb_tensor_free(x);
    pb_engine_free(e);
    pb_dataset_free(src.ds);
    return rc;
  }
  pb_engine_info in;
  pb_engine_get_info(e, &in);
  printf("device: %s (%s, %s, %d threads); model %s, %lld parameters; %lld images of %dx%dx%d\n",
         in.device, in.device_name, in.isa, in.threads, in.model, (long long)in.parameters,
         (long long)src.count, src.c, src.h, src.w);
  fflush(stdout);

  size_t per = (size_t)src.c * (size_t)src.h * (size_t)src.w;
  size_t tbytes = pb_tensor_bytes(t) / (size_t)bs;
  /* Staging buffers on the host; on a host-visible device they are the tensors themselves. */
  float *xh = pb_tensor_host_data(x);
  unsigned char *th = pb_tensor_host_data(t);
  float *xs = xh ? NULL : malloc(pb_tensor_bytes(x));
  unsigned char *ts = th ? NULL : malloc(pb_tensor_bytes(t));
  if (xh == NULL) xh = xs;
  if (th == NULL) th = ts;
  int64_t *order = malloc((size_t)src.count * sizeof *order);
  int64_t steps_per_epoch = src.count / bs;
  double *epoch_s = calloc((size_t)epochs, sizeof *epoch_s), *epoch_loss = calloc((size_t)epochs, sizeof *epoch_loss);
  int rc = (xh && th && order && epoch_s && epoch_loss) ? 0 : cli_fail(CMD, "out of memory");
  pb_rng rng;
  pb_rng_init(&rng, pb_seed_mix((uint64_t)seed, 3, 0));
  double data_s = 0, compute_s = 0, data_steady = 0, step_steady = 0;
  double first_data = 0, first_compute = 0, first_loss = NAN, last_loss = NAN;
  int64_t t_start = pb_now_ns(), steps = 0;
  for (long ep = 0; rc == 0 && ep < epochs; ep++) {
    int64_t ep0 = pb_now_ns();
    for (int64_t i = 0; i < src.count; i++) order[i] = i;
    pb_rng_shuffle_i64(&rng, order, (size_t)src.count);
    double lsum = 0;
    for (int64_t st = 0; rc == 0 && st < steps_per_epoch; st++) {
      /* Data: read and convert one batch. This simple loop is where the loader library
       * (prefetching worker pool) plugs in; the timers around it stay as they are. */
      int64_t t0 = pb_now_ns();
      for (long b = 0; rc == 0 && b < bs; b++) {
        int64_t idx = order[st * bs + b];
        if (load_image(&src, idx, xh + (size_t)b * per, &err) != 0)
          rc = cli_fail(CMD, "image %lld: %s", (long long)idx, err.message);
        make_target((uint64_t)seed, idx, strcmp(loss, "mse") == 0, in.outputs, th + (size_t)b * tbytes);
      }
      if (rc == 0 && xs != NULL && (pb_tensor_write(x, xs, pb_tensor_bytes(x), &err) != 0 ||
                                    pb_tensor_write(t, ts, pb_tensor_bytes(t), &err) != 0))
        rc = cli_fail(CMD, "%s", err.message);
      int64_t t1 = pb_now_ns();
      float l = 0;
      if (rc == 0 && pb_engine_train_step(e, x, t, (float)lr, &l, &err) != 0)
        rc = cli_fail(CMD, "step %lld: %s", (long long)steps, err.message);
      int64_t t2 = pb_now_ns();
      double d = (double)(t1 - t0) / 1e9, c = (double)(t2 - t1) / 1e9;
      if (steps == 0) {
        first_data = d, first_compute = c, first_loss = l;
      } else {
        /* the first step (start-up) stays out of the steady-state data-wait fraction */
        data_steady += d;
        step_steady += d + c;
      }
      data_s += d, compute_s += c, lsum += l, last_loss = l;
      steps++;
      if (cli_progress_enabled() && steps % 4 == 0)
        cli_progress("train", (long)steps, (long)(steps_per_epoch * epochs),
                     (double)(pb_now_ns() - t_start) / 1e9);
    }
    epoch_s[ep] = (double)(pb_now_ns() - ep0) / 1e9;
    epoch_loss[ep] = steps_per_epoch ? lsum / (double)steps_per_epoch : NAN;
    cli_progress("", 0, 0, 0);
    if (rc == 0)
      printf("epoch %ld: %.3f s, mean loss %.5f\n", ep + 1, epoch_s[ep], epoch_loss[ep]);
  }
  double total_s = (double)(pb_now_ns() - t_start) / 1e9;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double rss_mb = (double)ru.ru_maxrss / 1024.0;
  double ips = (double)(steps * bs) / total_s;
  double wait = step_steady > 0 ? data_steady / step_steady : NAN;
  if (rc == 0) {
    printf("total %.3f s (first epoch %.3f s), %.1f images/s; data %.3f s, compute %.3f s, "
           "data-wait %.1f%%\nfirst batch: data %.2f ms, compute %.2f ms; loss %.5f -> %.5f; "
           "peak RSS %.1f MiB, engine %.1f MiB\n",
           total_s, epoch_s[0], ips, data_s, compute_s, 100.0 * wait, first_data * 1e3,
           first_compute * 1e3, first_loss, last_loss, rss_mb, (double)in.bytes_total / 1048576.0);
  }
  if (rc == 0 && metrics != NULL) {
    cJSON *j = cJSON_CreateObject();
    char ts_[32];
    pb_utc_iso8601(ts_, sizeof ts_);
    cJSON_AddStringToObject(j, "command", "train");
    cJSON_AddStringToObject(j, "model", model);
    cJSON_AddStringToObject(j, "backend", in.backend);
    cJSON_AddStringToObject(j, "device", in.device);
    cJSON_AddStringToObject(j, "device_name", in.device_name);
    cJSON_AddStringToObject(j, "dtype", in.dtype);
    cJSON_AddStringToObject(j, "data", data);
    cJSON_AddStringToObject(j, "loss", loss);
    cJSON_AddNumberToObject(j, "images", (double)src.count);
    cJSON_AddNumberToObject(j, "batch_size", (double)bs);
    cJSON_AddNumberToObject(j, "epochs", (double)epochs);
    cJSON_AddNumberToObject(j, "lr", lr);
    cJSON_AddNumberToObject(j, "threads", in.threads);
    cJSON_AddNumberToObject(j, "seed", (double)seed);
    cJSON_AddNumberToObject(j, "steps", (double)steps);
    cJSON_AddNumberToObject(j, "total_time_s", total_s);
    cJSON_AddNumberToObject(j, "first_epoch_time_s", epoch_s[0]);
    cJSON_AddItemToObject(j, "epoch_times_s", cJSON_CreateDoubleArray(epoch_s, (int)epochs));
    cJSON_AddItemToObject(j, "epoch_mean_loss", cJSON_CreateDoubleArray(epoch_loss, (int)epochs));
    cJSON_AddNumberToObject(j, "first_batch_data_s", first_data);
    cJSON_AddNumberToObject(j, "first_batch_compute_s", first_compute);
    cJSON_AddNumberToObject(j, "data_time_s", data_s);
    cJSON_AddNumberToObject(j, "compute_time_s", compute_s);
    if (isfinite(wait)) cJSON_AddNumberToObject(j, "data_wait_fraction", wait);
    else cJSON_AddNullToObject(j, "data_wait_fraction");
    cJSON_AddNumberToObject(j, "throughput_ips", ips);
    cJSON_AddNumberToObject(j, "first_loss", first_loss);
    cJSON_AddNumberToObject(j, "final_loss", last_loss);
    cJSON_AddNumberToObject(j, "peak_rss_mb", rss_mb);
    cJSON_AddNumberToObject(j, "engine_memory_mb", (double)in.bytes_total / 1048576.0);
    cJSON_AddNumberToObject(j, "gflops_per_image_forward", in.flops_per_image / 1e9);
    cJSON_AddStringToObject(j, "git_commit", pb_git_commit());
    cJSON_AddStringToObject(j, "timestamp", ts_);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (text == NULL) rc = cli_fail(CMD, "out of memory");
    else if (pb_write_file_atomic(metrics, text, strlen(text), &err) != 0)
      rc = cli_fail(CMD, "%s", err.message);
    else printf("metrics: %s\n", metrics);
    free(text);
  }
  free(order);
  free(epoch_s);
  free(epoch_loss);
  free(xs);
  free(ts);
  free(src.pix);
  pb_tensor_free(x);
  pb_tensor_free(t);
  pb_engine_free(e);
  pb_dataset_free(src.ds);
  return rc;
}

const cli_command cli_cmd_train = {
    .name = "train",
    .summary = "SGD training loop on a model engine, data loading and compute timed apart",
    .usage = "[options]",
    .details = "Each epoch visits the images in a seeded shuffled order, batch by batch (a last\n"
               "partial batch is dropped: engines are built for one batch size). A step's data\n"
               "time runs from the first read to the batch in the input tensor; its compute time\n"
               "is the forward, loss, backward and SGD update. Labels: cross_entropy uses a seeded\n"
               "random class per image (of the model's outputs), mse a seeded normal target\n"
               "vector per image; both depend only on --seed and the image index.",
    .opts = train_opts,
    .max_pos = 0,
    .min_pos = 0,
    .run = run_train,
};
