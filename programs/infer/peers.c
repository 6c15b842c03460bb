/* The framework peers of pb_infer_run: python/pipebench_torch_infer.py (eager and torch.compile)
 * and python/pipebench_jax_infer.py, each a child process in a process group of its own. They get
 * the very inputs the engine gets (input_<batch>.npy in a temporary folder), time the passes by
 * the same rules, and write their latencies as JSON; the statistics are computed here. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "pipebench/engine.h"
#include "pipebench/infer.h"

#include "pipebench/sys.h"
#include "infer/infer_internal.h"
#include "tools/peer.h"

static const char *python_of(const pb_infer_params *p) {
  if (p->python != NULL && p->python[0] != '\0') return p->python;
  const char *env = getenv("PIPEBENCH_PYTHON");
  return env != NULL && env[0] != '\0' ? env : "/usr/bin/python3";
}

static int write_inputs(const pb__infer_ctx *c, const char *dir, struct pb_error *err) {
  for (int i = 0; i < c->nbs; i++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/input_%d.npy", dir, c->bss[i]);
    int64_t shape[4] = {c->bss[i], c->c, c->h, c->w};
    PB_RETURN_NOT_OK(pb_npy_write_f32(path, c->inputs[i], shape, 4, err));
  }
  return PB_OK;
}

/* Values of a JSON array of nanoseconds, in seconds, into a new array (*out NULL when empty). */
static int seconds_of(const cJSON *arr, double **out, size_t *n, struct pb_error *err) {
  *out = NULL;
  *n = (size_t)cJSON_GetArraySize(arr);
  if (*n == 0) return PB_OK;
  *out = malloc(*n * sizeof **out);
  if (*out == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  size_t k = 0;
  const cJSON *v;
  cJSON_ArrayForEach(v, arr) (*out)[k++] = cJSON_IsNumber(v) ? v->valuedouble / 1e9 : NAN;
  return PB_OK;
}

static const char *str_of(const cJSON *o, const char *key, const char *dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) && v->valuestring[0] != '\0' ? v->valuestring : dflt;
}

static double num_of(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* One run of a peer's result ("torch" eager, "torch-compile", "jax"): one row per batch size. */
static int add_run(pb__infer_ctx *c, const cJSON *top, const cJSON *run, const char *script,
                   struct pb_error *err) {
  pb__infer_row r = {0};
  /* torch's rows are named as its users name it: pytorch (eager) and pytorch-compile */
  r.framework = str_of(run, "framework", "?");
  if (strcmp(r.framework, "torch") == 0) r.framework = "pytorch";
  else if (strcmp(r.framework, "torch-compile") == 0) r.framework = "pytorch-compile";
  r.version = str_of(top, "framework_version", "");
  char versions[192];
  snprintf(versions, sizeof versions, "%s %s", str_of(top, "framework", "?"), r.version);
  r.versions = str_of(top, "versions", versions);
  r.device_name = str_of(top, "device_name", c->env.cpu_model);
  r.device_type = str_of(top, "device", c->device);
  r.isa = "";
  r.memory_format = str_of(run, "memory_format", "");
  double th = num_of(top, "threads");
  r.threads = isfinite(th) ? (int)th : 0;
  const cJSON *res = cJSON_GetObjectItemCaseSensitive(run, "results"), *b;
  int k = 0;
  cJSON_ArrayForEach(b, res) {
    double *lat = NULL, *dev = NULL;
    size_t n = 0, nd = 0;
    int rc = seconds_of(cJSON_GetObjectItemCaseSensitive(b, "latencies_ns"), &lat, &n, err);
    if (rc == PB_OK)
      rc = seconds_of(cJSON_GetObjectItemCaseSensitive(b, "device_latencies_ns"), &dev, &nd, err);
    double bs = num_of(b, "batch_size");
    if (rc == PB_OK && (n == 0 || !(bs >= 1)))
      rc = pb_error_set(err, PB_EFORMAT, "%s: a result without latencies or batch size", script);
    if (rc == PB_OK) {
      r.batch = (int)bs;
      r.compile_ms = num_of(b, "compile_ms");
      r.memory_mb = num_of(b, "memory_bytes") / 1048576.0;
      r.memory_kind = str_of(b, "memory_kind", "");
      pb__infer_add_row(c, &r, lat, n, dev, nd);
      k++;
    }
    free(lat);
    free(dev);
    if (rc != PB_OK) return rc;
  }
  if (k != c->nbs)
    return pb_error_set(err, PB_EFORMAT, "%s gave %d of %d batch sizes for %s", script, k, c->nbs,
                        r.framework);
  return PB_OK;
}

/* Reads a peer's result file: rows, or a skip note, or its error. */
static int take_result(const pb_infer_params *p, pb__infer_ctx *c, const char *path,
                       const char *script, struct pb_error *err) {
  void *data = NULL;
  size_t size = 0;
  PB_RETURN_NOT_OK(pb_read_file(path, &data, &size, err));
  cJSON *j = cJSON_ParseWithLength(data, size);
  pb_free(data, size);
  if (j == NULL) return pb_error_set(err, PB_EFORMAT, "%s wrote no valid JSON to %s", script, path);
  const char *fw = str_of(j, "framework", script);
  const char *skipped = str_of(j, "skipped", NULL), *error = str_of(j, "error", NULL);
  int rc = PB_OK;
  if (error != NULL) {
    rc = pb_error_set(err, PB_ECHILD, "%s peer: %s", fw, error);
  } else if (skipped != NULL) {
    pb__infer_note(p, 1, "%s: rows skipped: %s", fw, skipped);
  } else {
    const cJSON *modes = cJSON_GetObjectItemCaseSensitive(j, "skipped_modes"), *m;
    cJSON_ArrayForEach(m, modes)
      if (cJSON_IsString(m)) pb__infer_note(p, 1, "%s-%s: rows skipped: %s", fw, m->string, m->valuestring);
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(j, "runs"), *run;
    cJSON_ArrayForEach(run, runs) {
      if (rc == PB_OK) rc = add_run(c, j, run, script, err);
    }
  }
  cJSON_Delete(j);
  return rc;
}

/* What the user sees while a peer runs (a ViT on a CPU takes minutes): the peer's own
 * progress lines ("pipebench-progress: DONE TOTAL what", in its log) as the progress line,
 * and as a note when they change (at most every 10 s) or, without news, every 30 s. */
typedef struct peer_watch {
  const pb_infer_params *p;
  const char *label, *log;
  char last[256];
  double last_note_s;
  int noted;
} peer_watch;

static void peer_tick(void *ctx, double elapsed_s) {
  peer_watch *w = ctx;
  char tail[4096], text[256] = "";
  long done = 0, total = 0;
  pb_proc_tail(w->log, 40, tail, sizeof tail);
  for (char *line = tail; line != NULL && *line != '\0';) {
    char *nl = strchr(line, '\n');
    if (nl != NULL) *nl = '\0';
    int off = 0;
    long d, t;
    if (sscanf(line, "pipebench-progress: %ld %ld %n", &d, &t, &off) == 2 && off > 0) {
      done = d, total = t;
      snprintf(text, sizeof text, "%s", line + off);
    }
    line = nl != NULL ? nl + 1 : NULL;
  }
  if (w->p->progress != NULL && total > 0) {
    char what[320];
    snprintf(what, sizeof what, "%s: %s", w->label, text);
    w->p->progress(w->p->progress_ctx, what, done, total, elapsed_s);
  }
  int news = text[0] != '\0' && strcmp(text, w->last) != 0;
  if ((news && (!w->noted || elapsed_s - w->last_note_s >= 10.0)) ||
      elapsed_s - w->last_note_s >= 30.0) {
    if (text[0] != '\0')
      pb__infer_note(w->p, 0, "%s: %s (%.0f s)", w->label, text, elapsed_s);
    else
      pb__infer_note(w->p, 0, "%s: still starting (%.0f s)", w->label, elapsed_s);
    snprintf(w->last, sizeof w->last, "%s", text);
    w->last_note_s = elapsed_s;
    w->noted = 1;
  }
}

static void add_arg(const char **argv, int *n, char (*store)[32], int *ns, long v) {
  snprintf(store[*ns], 32, "%ld", v);
  argv[(*n)++] = store[(*ns)++];
}

/* Runs one peer script over the inputs in dir. modes: "eager,compile" for torch, NULL for JAX. */
static int run_peer(const pb_infer_params *p, pb__infer_ctx *c, const char *dir, const char *script,
                    const char *modes, struct pb_error *err) {
  char path[4200], out[4200], log[4200];
  snprintf(path, sizeof path, "%s/%s", pb__python_dir(), script);
  snprintf(out, sizeof out, "%s/%s.json", dir, script);
  snprintf(log, sizeof log, "%s/%s.log", dir, script);
  int threads = p->threads > 0 ? p->threads : (c->env.cpu_cores > 0 ? c->env.cpu_cores : 1);
  const char *argv[64];
  char nums[PB_INFER_MAX_BATCH_SIZES + 8][32];
  int n = 0, ns = 0;
  argv[n++] = python_of(p), argv[n++] = path;
  argv[n++] = "--model", argv[n++] = c->model, argv[n++] = "--dtype", argv[n++] = c->dtype;
  argv[n++] = "--device", argv[n++] = c->device, argv[n++] = "--input-dir", argv[n++] = dir;
  argv[n++] = "--out", argv[n++] = out;
  argv[n++] = "--threads";
  add_arg(argv, &n, nums, &ns, threads);
  argv[n++] = "--warmup";
  add_arg(argv, &n, nums, &ns, p->warmup);
  argv[n++] = "--iterations";
  add_arg(argv, &n, nums, &ns, p->iterations);
  argv[n++] = "--seed";
  add_arg(argv, &n, nums, &ns, (long)(c->seed & 0x7fffffff));
  if (modes != NULL) argv[n++] = "--modes", argv[n++] = modes;
  argv[n++] = "--batch-sizes";
  for (int i = 0; i < c->nbs; i++) add_arg(argv, &n, nums, &ns, c->bss[i]);
  argv[n] = NULL;
  pb_proc pr = {0};
  pr.argv = argv;
  pr.stdout_path = log, pr.stderr_path = log;
  pr.timeout_s = p->peer_timeout_s > 0 ? p->peer_timeout_s : 3600.0;
  char label[96];
  snprintf(label, sizeof label, "peer %s", modes != NULL ? "torch" : "jax");
  peer_watch watch = {p, label, log, "", 0, 0};
  pr.tick = peer_tick, pr.tick_ctx = &watch;
  int rc = pb_proc_run(&pr, NULL, err);
  if (rc != PB_OK) {
    pb_error_prefix(err, "%s: ", script);
    return rc;
  }
  return take_result(p, c, out, script, err);
}

int pb__infer_peers(const pb_infer_params *p, pb__infer_ctx *c, struct pb_error *err) {
  /* The inputs for the peers go to $TMPDIR (else /tmp), as other programs' temporaries do. */
  const char *base = pb_tmp_dir();
  char dir[4096];
  int n = snprintf(dir, sizeof dir, "%s/pipebench_infer_XXXXXX", base);
  if (n < 0 || (size_t)n >= sizeof dir)
    return pb_error_set(err, PB_EINVAL, "TMPDIR is too long: %s", base);
  if (mkdtemp(dir) == NULL)
    return pb_error_set(err, PB_EIO, "cannot make a temporary folder in %s: %s", base,
                        strerror(errno));
  int rc = write_inputs(c, dir, err);
  const char *modes = (c->mask & PB__FW_TORCH) && (c->mask & PB__FW_TORCH_COMPILE) ? "eager,compile"
                      : (c->mask & PB__FW_TORCH)                                   ? "eager"
                                                                                   : "compile";
  if (rc == PB_OK && (c->mask & (PB__FW_TORCH | PB__FW_TORCH_COMPILE))) {
    pb__infer_note(p, 0, "peer: torch (%s) on %s", modes, c->device);
    rc = run_peer(p, c, dir, "pipebench_torch_infer.py", modes, err);
    if (rc == PB_OK) rc = pb__infer_save(p, c, err); /* kept whatever the next peer does */
  }
  if (rc == PB_OK && (c->mask & PB__FW_JAX)) {
    pb__infer_note(p, 0, "peer: jax on %s", c->device);
    rc = run_peer(p, c, dir, "pipebench_jax_infer.py", NULL, err);
    if (rc == PB_OK) rc = pb__infer_save(p, c, err);
  }
  if (pb_remove_tree(dir) != 0) pb__infer_note(p, 1, "could not remove %s", dir);
  return rc;
}
