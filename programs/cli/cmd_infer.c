/* pipebench infer: a model's forward pass across batch sizes, on oneDNN or on torch (a Python
 * subprocess timed by the same rules), one CSV row per batch size. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "pipebench/engine.h"
#include "pipebench/report.h"
#include "pipebench/format.h"
#include "pipebench/results.h"
#include "pipebench/stats.h"

#define CMD "infer"
#define MAX_BS 32

static const cli_opt infer_opts[] = {
    {"framework", "NAME", "onednn (default) or torch (Debian torch in a Python subprocess)"},
    {"model", "NAME", "embed (default), resnet50, vit_b_16"},
    {"batch-sizes", "LIST...", "batch sizes to run (default: 1 8 32 128)"},
    {"iterations", "N", "timed forward passes per batch size (default 20)"},
    {"warmup", "N", "untimed passes first, dropped (default 3)"},
    {"dtype", "NAME", "float32 (default), bfloat16, float16"},
    {"device", "NAME", "auto (default), cpu, cuda"},
    {"data-source", "SRC", "synthetic (default, seeded normal noise) or a dataset path"},
    {"output-dir", "DIR", "where the CSV goes (default results/raw)"},
    {"threads", "N", "compute threads (default: all CPUs)"},
    {"seed", "N", "weights and synthetic input (default 42)"},
    {NULL, NULL, NULL}};

static int mkdir_p(const char *path) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(tmp, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

/* Fills batch x (c,h,w) from the dataset, cycling over its images, or with seeded noise. */
static int fill_input(pb_dataset *ds, int batch, int c, int h, int w, uint64_t seed, float *x,
                      struct pb_error *err) {
  size_t per = (size_t)c * (size_t)h * (size_t)w;
  if (ds == NULL) {
    pb_rng rng;
    pb_rng_init(&rng, seed);
    for (size_t i = 0; i < (size_t)batch * per; i++) x[i] = (float)pb_rng_normal(&rng);
    return 0;
  }
  int64_t n = pb_dataset_count(ds);
  for (int b = 0; b < batch; b++) {
    pb_image_meta meta;
    int64_t idx = b % n;
    PB_RETURN_NOT_OK(pb_dataset_meta(ds, idx, &meta, err));
    size_t bytes = pb_image_bytes(&meta);
    void *pix = malloc(bytes ? bytes : 1);
    if (pix == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    int rc = pb_dataset_read(ds, idx, pix, bytes, NULL, err);
    if (rc == 0) rc = pb_image_to_chw(&meta, pix, c, h, w, x + (size_t)b * per, err);
    free(pix);
    if (rc != 0) return rc;
  }
  return 0;
}

/* Where python/ is: $PB_SOURCE_DIR, else the source tree this file was compiled from. */
static void source_root(char *buf, size_t size) {
  const char *env = getenv("PB_SOURCE_DIR");
  if (env != NULL && env[0] != '\0') {
    snprintf(buf, size, "%s", env);
    return;
  }
  snprintf(buf, size, "%s", __FILE__);
  char *cut = strstr(buf, "/programs/cli/");
  if (cut != NULL) *cut = '\0';
  else snprintf(buf, size, ".");
}

typedef struct run_result {
  int batch;
  double *lat_s;
  size_t n;
  double compile_ms;
  double memory_mb;
} run_result;

/* torch: writes input_<bs>.npy files, runs the peer script, reads its JSON. */
static int run_torch(const char *model, const char *dtype, long threads, long warmup, long iters,
                     uint64_t seed, const int *bss, int nbs, float **inputs, int c, int h, int w,
                     run_result *res, char *version, size_t vsize) {
  char dir[] = "/tmp/pipebench_torch_XXXXXX";
  if (mkdtemp(dir) == NULL) return cli_fail(CMD, "cannot make a temporary folder: %s", strerror(errno));
  struct pb_error err = {{0}};
  char cmd[8192], root[4096];
  source_root(root, sizeof root);
  int off = snprintf(cmd, sizeof cmd,
                     "%s %s/python/pipebench_torch_infer.py --model %s --dtype %s --threads %ld "
                     "--warmup %ld --iterations %ld --seed %llu --input-dir %s --batch-sizes",
                     getenv("PB_PYTHON") ? getenv("PB_PYTHON") : "/usr/bin/python3",
                     root, model,
                     dtype, threads, warmup, iters, (unsigned long long)seed, dir);
  int rc = 0;
  for (int i = 0; i < nbs && rc == 0; i++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/input_%d.npy", dir, bss[i]);
    int64_t shape[4] = {bss[i], c, h, w};
    if (pb_npy_write_f32(path, inputs[i], shape, 4, &err) != 0) rc = cli_fail(CMD, "%s", err.message);
    off += snprintf(cmd + off, sizeof cmd - (size_t)off, " %d", bss[i]);
  }
  char *text = NULL;
  size_t len = 0;
  if (rc == 0) {
    FILE *p = popen(cmd, "r");
    if (p == NULL) {
      rc = cli_fail(CMD, "cannot start %s", cmd);
    } else {
      char buf[65536];
      size_t got;
      while ((got = fread(buf, 1, sizeof buf, p)) > 0) {
        char *t = realloc(text, len + got + 1);
        if (t == NULL) break;
        text = t;
        memcpy(text + len, buf, got);
        len += got;
        text[len] = '\0';
      }
      int st = pclose(p);
      if (st != 0 || text == NULL) rc = cli_fail(CMD, "torch subprocess failed (status %d): %s", st, cmd);
    }
  }
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "pipebench infer: could not remove %s\n", dir);
  if (rc != 0) {
    free(text);
    return rc;
  }
  cJSON *j = cJSON_Parse(text);
  free(text);
  if (j == NULL) return cli_fail(CMD, "torch subprocess printed no JSON");
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
  if (cJSON_IsString(e)) {
    rc = cli_fail(CMD, "torch: %s", e->valuestring);
    cJSON_Delete(j);
    return rc;
  }
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "framework_version");
  snprintf(version, vsize, "%s", cJSON_IsString(v) ? v->valuestring : "");
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "results");
  int k = 0;
  const cJSON *r;
  cJSON_ArrayForEach(r, rs) {
    if (k >= nbs) break;
    const cJSON *lat = cJSON_GetObjectItemCaseSensitive(r, "latencies_ns");
    int n = cJSON_GetArraySize(lat);
    res[k].batch = bss[k];
    res[k].lat_s = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    res[k].n = (size_t)n;
    for (int i = 0; i < n && res[k].lat_s; i++)
      res[k].lat_s[i] = cJSON_GetArrayItem(lat, i)->valuedouble / 1e9;
    res[k].compile_ms = cJSON_GetObjectItemCaseSensitive(r, "compile_ms")->valuedouble;
    res[k].memory_mb = cJSON_GetObjectItemCaseSensitive(r, "peak_rss_bytes")->valuedouble / 1048576.0;
    k++;
  }
  cJSON_Delete(j);
  return k == nbs ? 0 : cli_fail(CMD, "torch subprocess returned %d of %d results", k, nbs);
}

static int run_infer(const cli_args *a) {
  const char *framework = cli_get(a, "framework") ? cli_get(a, "framework") : "onednn";
  const char *model = cli_get(a, "model") ? cli_get(a, "model") : "embed";
  const char *dtype = cli_get(a, "dtype") ? cli_get(a, "dtype") : "float32";
  const char *device_opt = cli_get(a, "device") ? cli_get(a, "device") : "auto";
  const char *source = cli_get(a, "data-source") ? cli_get(a, "data-source") : "synthetic";
  const char *outdir = cli_get(a, "output-dir") ? cli_get(a, "output-dir") : "results/raw";
  long iters, warmup, threads, seed;
  if (strcmp(framework, "onednn") != 0 && strcmp(framework, "torch") != 0)
    return cli_usage_error(CMD, "unknown framework '%s' (available: onednn, torch)", framework);
  int known = 0;
  for (int i = 0; i < pb_engine_model_count(); i++) known |= strcmp(model, pb_engine_model_name(i)) == 0;
  if (!known)
    return cli_usage_error(CMD, "unknown model '%s' (available: %s)", model, pb_engine_model_list());
  if (strcmp(dtype, "float32") && strcmp(dtype, "bfloat16") && strcmp(dtype, "float16"))
    return cli_usage_error(CMD, "unknown dtype '%s' (available: %s)", dtype, pb_engine_dtype_list());
  const char *device = pb_engine_resolve_device(device_opt);
  if (device == NULL)
    return cli_usage_error(CMD, "unknown device '%s' (available: %s)", device_opt,
                           pb_engine_device_list());
  if (cli_get_long(a, CMD, "iterations", 20, 1, 1000000, &iters) ||
      cli_get_long(a, CMD, "warmup", 3, 0, 1000000, &warmup) ||
      cli_get_long(a, CMD, "threads", 0, 0, 4096, &threads) ||
      cli_get_long(a, CMD, "seed", 42, 0, 0x7fffffffL, &seed))
    return CLI_USAGE;
  int bss[MAX_BS], nbs = 0;
  const char *list = cli_get(a, "batch-sizes") ? cli_get(a, "batch-sizes") : "1,8,32,128";
  for (const char *p = list; *p;) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno || v < 1 || v > 65536 || (*end != ',' && *end != '\0'))
      return cli_usage_error(CMD, "--batch-sizes takes integers from 1 to 65536, not '%s'", list);
    if (nbs == MAX_BS) return cli_usage_error(CMD, "at most %d batch sizes", MAX_BS);
    bss[nbs++] = (int)v;
    p = *end ? end + 1 : end;
  }
  if (strcmp(framework, "torch") == 0 && strcmp(device, "cpu") != 0)
    return cli_fail(CMD, "the torch peer runs on the CPU only here");

  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  int c = 0, h = 0, w = 0, dc = 0, dh = 0, dw = 0;
  if (strcmp(source, "synthetic") != 0) {
    if (pb_dataset_open(source, NULL, &ds, &err) != 0) return cli_fail(CMD, "%s", err.message);
    if (pb_dataset_count(ds) < 1) {
      pb_dataset_free(ds);
      return cli_fail(CMD, "%s holds no images", source);
    }
    pb_image_meta m;
    if (pb_dataset_meta(ds, 0, &m, &err) != 0) {
      pb_dataset_free(ds);
      return cli_fail(CMD, "%s", err.message);
    }
    dc = (int)m.shape[PB_C], dh = (int)m.shape[PB_Y], dw = (int)m.shape[PB_X];
  }
  /* embed takes the data's own shape; the others their 3x224x224 */
  if (strcmp(model, "embed") == 0) {
    c = ds ? dc : 1, h = ds ? dh : 100, w = ds ? dw : 100;
  } else {
    c = 3, h = 224, w = 224;
  }
  float *inputs[MAX_BS] = {0};
  int rc = 0;
  for (int i = 0; i < nbs && rc == 0; i++) {
    inputs[i] = malloc((size_t)bss[i] * (size_t)c * (size_t)h * (size_t)w * sizeof(float));
    if (inputs[i] == NULL) rc = cli_fail(CMD, "out of memory for batch %d", bss[i]);
    else if (fill_input(ds, bss[i], c, h, w, (uint64_t)seed, inputs[i], &err) != 0)
      rc = cli_fail(CMD, "%s", err.message);
  }
  pb_dataset_free(ds);

  pb_env env;
  pb_env_collect(&env, NULL);
  run_result res[MAX_BS];
  memset(res, 0, sizeof res);
  char fw_version[64] = "";
  char device_name[160] = "", isa[48] = "";
  double flops = 0;
  int n_threads = (int)threads;
  if (rc == 0 && strcmp(framework, "torch") == 0) {
    /* torch defaults to physical cores; give it what oneDNN gets (all online CPUs) */
    if (threads == 0) threads = env.cpu_cores > 0 ? env.cpu_cores : 1;
    printf("device: cpu (%s, torch in a subprocess, %ld threads)\n", env.cpu_model, threads);
    fflush(stdout);
    rc = run_torch(model, dtype, threads, warmup, iters, (uint64_t)seed, bss, nbs, inputs, c, h, w,
                   res, fw_version, sizeof fw_version);
    snprintf(device_name, sizeof device_name, "%s", env.cpu_model);
    pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
    p.model = model, p.channels = c, p.height = h, p.width = w;
    pb_engine *e = NULL; /* for the FLOP count only */
    if (rc == 0 && pb_engine_new(&p, &e, NULL) == 0) {
      pb_engine_info in;
      pb_engine_get_info(e, &in);
      flops = in.flops_per_image;
      if (n_threads == 0) n_threads = in.threads;
    }
    pb_engine_free(e);
  }
  for (int i = 0; rc == 0 && strcmp(framework, "onednn") == 0 && i < nbs; i++) {
    pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
    p.model = model, p.device = device, p.dtype = dtype, p.batch_size = bss[i];
    p.channels = c, p.height = h, p.width = w, p.seed = (uint64_t)seed, p.threads = (int)threads;
    pb_engine *e = NULL;
    pb_tensor *x = NULL, *y = NULL;
    if (pb_engine_new(&p, &e, &err) != 0 || pb_engine_tensor_new(e, PB_TENSOR_INPUT, &x, &err) != 0 ||
        pb_engine_tensor_new(e, PB_TENSOR_OUTPUT, &y, &err) != 0 ||
        pb_tensor_write(x, inputs[i], pb_tensor_bytes(x), &err) != 0) {
      rc = cli_fail(CMD, "batch %d: %s", bss[i], err.message);
    } else {
      pb_engine_info in;
      pb_engine_get_info(e, &in);
      if (i == 0) {
        printf("device: %s (%s, %s, %d threads, oneDNN)\n", in.device, in.device_name, in.isa,
               in.threads);
        fflush(stdout);
      }
      snprintf(device_name, sizeof device_name, "%s", in.device_name);
      snprintf(isa, sizeof isa, "%s", in.isa);
      snprintf(fw_version, sizeof fw_version, "%s", env.onednn_version);
      flops = in.flops_per_image;
      n_threads = in.threads;
      res[i].batch = bss[i];
      res[i].compile_ms = in.compile_ms;
      res[i].memory_mb = (double)in.bytes_total / 1048576.0;
      res[i].lat_s = calloc((size_t)iters, sizeof(double));
      res[i].n = (size_t)iters;
      for (long it = 0; rc == 0 && it < warmup + iters; it++) {
        int64_t t0 = pb_now_ns();
        int frc = pb_engine_forward(e, x, y, &err);
        if (frc == 0) frc = pb_engine_synchronize(e, &err);
        int64_t t1 = pb_now_ns();
        if (frc != 0) rc = cli_fail(CMD, "batch %d: %s", bss[i], err.message);
        else if (it >= warmup) res[i].lat_s[it - warmup] = (double)(t1 - t0) / 1e9;
        if (cli_progress_enabled() && it % 5 == 4)
          cli_progress("infer", it + 1, warmup + iters, (double)(t1 - t0) / 1e9 * (double)(it + 1));
      }
      cli_progress("", 0, 0, 0);
    }
    pb_tensor_free(x);
    pb_tensor_free(y);
    pb_engine_free(e);
  }
  for (int i = 0; i < nbs; i++) free(inputs[i]);

  pb_table *t = NULL;
  char path[4400] = "";
  if (rc == 0) {
    if (pb_table_new(&t) != 0) rc = cli_fail(CMD, "out of memory");
    else pb_table_set_env(t, &env);
  }
  for (int i = 0; rc == 0 && i < nbs; i++) {
    pb_summary s;
    pb_summarize(res[i].lat_s, res[i].n, &s);
    double thr = (double)res[i].batch / s.mean;
    char shape[64];
    snprintf(shape, sizeof shape, "%dx%dx%dx%d", res[i].batch, c, h, w);
    printf("batch %4d: p50 %9.3f ms  throughput %9.1f images/s  %7.1f GFLOP/s  memory %8.1f MiB%s\n",
           res[i].batch, s.p50 * 1e3, thr, flops * thr / 1e9, res[i].memory_mb,
           s.unstable ? "  (unstable: cv > 5% or outliers)" : "");
    pb_table_append_row(t);
    pb_table_set_str(t, "framework", framework);
    pb_table_set_str(t, "framework_version", fw_version);
    pb_table_set_str(t, "model", model);
    pb_table_set_str(t, "device", device_name);
    pb_table_set_str(t, "device_type", strcmp(framework, "torch") == 0 ? "cpu" : device);
    pb_table_set_str(t, "isa", isa);
    pb_table_set_i64(t, "threads", n_threads);
    pb_table_set_i64(t, "batch_size", res[i].batch);
    pb_table_set_str(t, "input_shape", shape);
    pb_table_set_str(t, "dtype", dtype);
    pb_table_set_str(t, "data_source", source);
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
    pb_table_set_f64(t, "throughput_ips", thr);
    pb_table_set_f64(t, "gflops_per_image", flops / 1e9);
    pb_table_set_f64(t, "achieved_gflops", flops * thr / 1e9);
    pb_table_set_f64(t, "memory_mb", res[i].memory_mb);
    pb_table_set_str(t, "memory_kind", strcmp(framework, "torch") == 0 ? "process_peak_rss" : "engine_bytes");
    pb_table_set_f64(t, "compilation_time_ms", res[i].compile_ms);
    pb_table_set_i64(t, "n", (int64_t)s.n);
    pb_table_set_i64(t, "warmup", warmup);
    pb_table_set_i64(t, "seed", seed);
    pb_table_set_str(t, "timestamp", env.timestamp_utc);
    pb_table_set_str(t, "git_commit", pb_git_commit());
  }
  if (rc == 0) {
    int n = 0;
    for (int i = 0; i < nbs; i++) n += res[i].n > 0 && res[i].n < pb_percentile_min_n(0.99);
    fflush(stdout);
    if (n > 0)
      fprintf(stderr, "note: p99 of fewer than %zu samples is close to the maximum; raise --iterations\n",
              pb_percentile_min_n(0.99));
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d_%H%M%S", &tmv);
    snprintf(path, sizeof path, "%s/benchmark_results_%s.csv", outdir, stamp);
    if (mkdir_p(outdir) != 0) rc = cli_fail(CMD, "cannot create %s: %s", outdir, strerror(errno));
    else if (pb_table_write(t, path, PB_SINK_CSV, &err) != 0) rc = cli_fail(CMD, "%s", err.message);
    else printf("results: %s\n", path);
    if (rc == CLI_OK) {
      /* The plot goes beside the raw folder, into images/ (results/raw -> results/images); a
       * plot that cannot be drawn is a note, the CSV is the result. */
      char img_dir[4096], png[4200];
      snprintf(img_dir, sizeof img_dir, "%s", outdir);
      char *slash = strrchr(img_dir, '/');
      if (slash != NULL) snprintf(slash, sizeof img_dir - (size_t)(slash - img_dir), "/images");
      else snprintf(img_dir, sizeof img_dir, "images");
      snprintf(png, sizeof png, "%s/pipebench_infer.png", img_dir);
      struct pb_error perr = {{0}};
      if (mkdir_p(img_dir) != 0 || pb_report_plot_infer(outdir, png, &perr) != PB_OK)
        fprintf(stderr, "note: no plot: %s\n", perr.message[0] ? perr.message : strerror(errno));
      else
        fprintf(stderr, "plot: %s\n", png);
    }
  }
  pb_table_free(t);
  for (int i = 0; i < nbs; i++) free(res[i].lat_s);
  return rc;
}

const cli_command cli_cmd_infer = {
    .name = "infer",
    .summary = "model inference across batch sizes (oneDNN, or torch as a peer)",
    .usage = "[options]",
    .details = "Builds the model once per batch size (primitive creation is reported as\n"
               "compilation_time_ms), runs --warmup passes that are dropped, then times each of\n"
               "--iterations passes from the call to the finished output. Writes\n"
               "OUTDIR/benchmark_results_YYYYMMDD_HHMMSS.csv (UTC). A dataset is read image by\n"
               "image (cycling when the batch is larger), its middle z plane at t=0 centre-\n"
               "cropped or zero-padded to the model's input; embed takes the data's own shape.",
    .opts = infer_opts,
    .max_pos = 0,
    .min_pos = 0,
    .run = run_infer,
};
