/* Track 3 with the user's framework: a torch model (a torchvision name, `embed`, or the user's
 * own --torch-model file.py:build) fed in interleaved rounds by pipebench's loader, by torch's
 * DataLoader over the same files, and by one device-resident batch (the compute bound). The
 * Python side (python/pipebench_track3_torch.py) runs the model and times it; this side gives it
 * a spec per format, runs it through the one process runner, and turns what it measured into
 * track 3's rows: per feeder and round images/s over a window that opens and closes on a
 * synchronised device, AU = the device's busy time (CUDA events; compute time on the cpu) over
 * that window, the host's data-wait share, and the share of the same round's compute bound. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "pipebench/sys.h"
#include "pipebench/results.h"
#include "tools/peer.h"
#include "tracks/ranks.h"
#include "tracks/track3_torch.h"

#define FEEDER_PB "pipebench"
#define FEEDER_DL "torch-dataloader"
#define FEEDER_RES "resident"

int pb__t3_torch_wanted(const pb_run_params *p) { return p->framework != NULL; }

/* "file.py:build" -> the file's path in path ("file.py" alone: build). */
static void model_file(const char *spec, char *path, size_t size) {
  snprintf(path, size, "%s", spec);
  char *colon = strrchr(path, ':');
  if (colon != NULL && strchr(colon, '/') == NULL) *colon = '\0';
}

int pb__t3_torch_validate(const pb_run_params *p, struct pb_error *err) {
  if (p->framework == NULL) {
    if (p->torch_model != NULL)
      return pb_error_set(err, PB_EINVAL, "--torch-model needs --framework torch");
    return PB_OK;
  }
  if (strcmp(p->framework, "torch") != 0)
    return pb_error_set(err, PB_EINVAL, "unknown --framework '%s' (torch; without --framework "
                        "track 3 runs pipebench's own engine)", p->framework);
  if (p->emulate_ms > 0)
    return pb_error_set(err, PB_EINVAL, "--emulate-ms replaces the model; --framework torch "
                        "runs one: give one of them");
  const char *d = p->device;
  if (d != NULL && strcmp(d, "auto") != 0 && strcmp(d, "cpu") != 0 && strcmp(d, "cuda") != 0 &&
      strncmp(d, "cuda:", 5) != 0)
    return pb_error_set(err, PB_EINVAL, "--framework torch runs on --device auto, cpu or "
                        "cuda[:N], not '%s'", d);
  const char *t = p->dtype;
  if (t != NULL && strcmp(t, "bfloat16") != 0 && strcmp(t, "float16") != 0 &&
      strcmp(t, "float32") != 0)
    return pb_error_set(err, PB_EINVAL, "--framework torch computes in bfloat16, float16 or "
                        "float32 (--dtype), not '%s'", t);
  if (p->torch_model != NULL) {
    char path[4096];
    model_file(p->torch_model, path, sizeof path);
    if (path[0] == '\0')
      return pb_error_set(err, PB_EINVAL, "--torch-model takes FILE.py[:FUNCTION]");
    if (access(path, R_OK) != 0)
      return pb_error_set(err, PB_ENOTFOUND, "--torch-model %s: %s: no such file (or not "
                          "readable)", p->torch_model, path);
  }
  return PB_OK;
}

/* ---- one format -------------------------------------------------------------------------- */

static int write_spec(pb_run_ctx *c, int fi, const char *path, struct pb_error *err) {
  cJSON *s = cJSON_CreateObject();
  if (s == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  cJSON_AddStringToObject(s, "format", c->formats[fi]);
  cJSON_AddStringToObject(s, "path", c->paths[fi]);
  cJSON_AddStringToObject(s, "model", c->p.model);
  if (c->p.torch_model != NULL) {
    /* the child runs elsewhere: give it the file's absolute path */
    char file[4096], *abs = NULL;
    model_file(c->p.torch_model, file, sizeof file);
    abs = realpath(file, NULL);
    const char *fn = c->p.torch_model + strlen(file);
    char full[4400];
    snprintf(full, sizeof full, "%s%s", abs ? abs : file, fn);
    free(abs);
    cJSON_AddStringToObject(s, "torch_model", full);
  }
  cJSON_AddBoolToObject(s, "train", c->p.train);
  cJSON_AddNumberToObject(s, "batch", c->p.t3_batch);
  cJSON_AddNumberToObject(s, "workers", c->p.t3_workers);
  cJSON_AddNumberToObject(s, "steps", c->p.steps);
  cJSON_AddNumberToObject(s, "repeats", c->p.repeats);
  cJSON_AddNumberToObject(s, "seed", (double)c->p.seed);
  cJSON_AddStringToObject(s, "device", c->p.device ? c->p.device : "auto");
  if (c->p.dtype != NULL) cJSON_AddStringToObject(s, "dtype", c->p.dtype);
  if (c->p.library != NULL) cJSON_AddStringToObject(s, "library", c->p.library);
  cJSON_AddNumberToObject(s, "crop", PB_RUN_CROP);
  cJSON_AddNumberToObject(s, "resize", PB_RUN_CROP_RESIZE);
  cJSON_AddBoolToObject(s, "vary", c->crop[fi] > 0);
  char *text = cJSON_Print(s);
  cJSON_Delete(s);
  /* atomic: a link planted at the name is replaced, never written through */
  int rc = text ? pb_write_file_atomic(path, text, strlen(text), err)
                : pb_error_set(err, PB_ENOMEM, "out of memory");
  free(text);
  return rc;
}

/* Runs the driver for format fi; *out gets its result (the caller frees it). Bad input the
 * driver recognised (its result's "error") comes back as one line, PB_EFORMAT. */
static int run_driver(pb_run_ctx *c, int fi, cJSON **out, struct pb_error *err) {
  char spec[4200], res[4200], log[4200], script[4200];
  snprintf(spec, sizeof spec, "%s/data/.t3torch-%s.json", c->p.out, c->formats[fi]);
  snprintf(res, sizeof res, "%s/data/.t3torch-%s.result.json", c->p.out, c->formats[fi]);
  snprintf(log, sizeof log, "%s/data/.t3torch-%s.log", c->p.out, c->formats[fi]);
  snprintf(script, sizeof script, "%s/pipebench_track3_torch.py", pb__python_dir());
  PB_RETURN_NOT_OK(write_spec(c, fi, spec, err));
  unlink(res);
  char *argv[] = {(char *)c->p.python, script, spec, res, NULL};
  int rc = pb__run_child(argv, 3600.0, log, err);
  if (rc != PB_OK && rc != PB_ECANCELED && access(res, R_OK) == 0) {
    struct pb_error ignored;
    cJSON *r = pb_load_json(res, &ignored);
    const cJSON *e = cJSON_GetObjectItem(r, "error");
    if (cJSON_IsString(e)) rc = pb_error_set(err, PB_EFORMAT, "%s", e->valuestring);
    cJSON_Delete(r);
  }
  if (rc == PB_OK) {
    *out = pb_load_json(res, err);
    if (*out == NULL) rc = PB_EFORMAT;
  }
  if (rc == PB_OK) unlink(log); /* kept on failure: the whole of what Python said */
  unlink(spec);
  unlink(res);
  return rc;
}

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItem(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *str(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItem(o, k);
  return cJSON_IsString(v) ? v->valuestring : "";
}

/* images/s of a feeder's row of round r, NaN if none */
static double round_ips(const cJSON *rows, const char *feeder, double r) {
  const cJSON *row;
  cJSON_ArrayForEach(row, rows) {
    if (strcmp(str(row, "feeder"), feeder) != 0 || num(row, "round") != r) continue;
    double w = num(row, "window_s");
    return w > 0 ? num(row, "samples") / w : NAN;
  }
  return NAN;
}

/* The series of a row ("step_s", "wait_s") into v (room for cap); returns the count. */
static size_t series(const cJSON *row, const char *k, double *v, size_t cap, double *sum) {
  size_t n = 0;
  *sum = 0;
  const cJSON *x;
  cJSON_ArrayForEach(x, cJSON_GetObjectItem(row, k)) {
    if (n < cap && cJSON_IsNumber(x)) *sum += (v[n++] = x->valuedouble);
  }
  return n;
}

static int add_rows(pb_run_ctx *c, pb_table *t, int fi, const cJSON *res, struct pb_error *err) {
  const cJSON *rows = cJSON_GetObjectItem(res, "rows"), *row;
  const cJSON *vers = cJSON_GetObjectItem(res, "versions");
  char framework[64];
  snprintf(framework, sizeof framework, "torch %s", str(vers, "torch"));
  size_t cap = (size_t)c->p.steps + 1;
  double *step = calloc(cap, sizeof *step), *wait = calloc(cap, sizeof *wait);
  if (step == NULL || wait == NULL) {
    free(step);
    free(wait);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  int rc = PB_OK;
  cJSON_ArrayForEach(row, rows) {
    double sum_step, sum_wait;
    size_t n = series(row, "step_s", step, cap, &sum_step);
    size_t nw = series(row, "wait_s", wait, cap, &sum_wait);
    pb_summary ss, ws;
    if (n == 0 || nw != n || pb_summarize(step, n, &ss) != PB_OK ||
        pb_summarize(wait, nw, &ws) != PB_OK) {
      rc = pb_error_set(err, PB_EFORMAT, "track 3 (torch, %s): the driver's row of %s has no "
                        "step times", c->formats[fi], str(row, "feeder"));
      break;
    }
    const char *feeder = str(row, "feeder");
    double r = num(row, "round"), window = num(row, "window_s"), busy = num(row, "busy_s");
    double ips = window > 0 ? num(row, "samples") / window : NAN;
    double au = window > 0 ? busy / window : NAN;
    double res_ips = round_ips(rows, FEEDER_RES, r), dl_ips = round_ips(rows, FEEDER_DL, r);
    pb__row_common(c, t, c->formats[fi], (int)r);
    pb_table_set_str(t, "cache", strcmp(feeder, FEEDER_RES) == 0 ? "resident" : "none");
    pb_table_set_str(t, "model", str(res, "model"));
    pb_table_set_str(t, "mode", c->p.train ? "train" : "inference");
    pb_table_set_str(t, "device", str(res, "device"));
    pb_table_set_str(t, "device_name", str(res, "device_name"));
    pb_table_set_str(t, "dtype", str(res, "dtype"));
    pb_table_set_f64(t, "emulate_ms", 0);
    pb_table_set_i64(t, "batch_size", (int64_t)num(res, "batch"));
    pb_table_set_i64(t, "num_workers", strcmp(feeder, FEEDER_RES) == 0 ? 0 : c->p.t3_workers);
    pb_table_set_i64(t, "num_steps", (int64_t)n);
    pb_table_set_f64(t, "first_step_time", num(row, "first_step_s"));
    pb__add_summary_columns(t, &ss, "step_time_");
    pb_table_set_f64(t, "data_wait_mean", ws.mean);
    pb_table_set_f64(t, "data_wait_p50", ws.p50);
    pb_table_set_f64(t, "data_wait_fraction", window > 0 ? sum_wait / window : NAN);
    pb_table_set_f64(t, "accelerator_utilisation", au);
    pb_table_set_bool(t, "data_bound", au < 0.9);
    pb_table_set_f64(t, "images_per_sec", ips);
    pb_table_set_f64(t, "device_time_mean", busy / (double)n);
    pb_table_set_str(t, PB__T3_FRAMEWORK, framework);
    pb_table_set_str(t, PB__T3_FEEDER, feeder);
    pb_table_set_str(t, "loader", str(row, "loader"));
    pb_table_set_f64(t, "window_s", window);
    pb_table_set_f64(t, "device_busy_s", busy);
    pb_table_set_f64(t, PB__T3_SHARE, ips / res_ips);
    if (strcmp(feeder, FEEDER_PB) == 0) pb_table_set_f64(t, "over_dataloader", ips / dl_ips);
    pb_table_set_i64(t, "drained_batches", (int64_t)num(row, "drained"));
  }
  free(step);
  free(wait);
  return rc;
}

/* ---- the track --------------------------------------------------------------------------- */

static double med(const pb_table *t, const char *col, const char *format, const char *feeder) {
  pb__report_filter f[2] = {{"format", format, 0}, {PB__T3_FEEDER, feeder, 0}};
  return pb__report_median(t, col, f, 2, NULL);
}

static void summarise(const pb_table *t, cJSON *s) {
  const char *formats[PB__RP_MAX_DISTINCT], *feeders[8];
  int nf = pb__report_distinct_str(t, "format", NULL, 0, formats, PB__RP_MAX_DISTINCT);
  int nd = pb__report_distinct_str(t, PB__T3_FEEDER, NULL, 0, feeders, 8);
  cJSON *per = cJSON_AddObjectToObject(s, "per_format");
  for (int f = 0; f < nf; f++)
    for (int k = 0; k < nd; k++) {
      double ips = med(t, "images_per_sec", formats[f], feeders[k]);
      if (!isfinite(ips)) continue;
      char key[96];
      snprintf(key, sizeof key, "%s/%s", formats[f], feeders[k]);
      cJSON *o = cJSON_AddObjectToObject(per, key);
      cJSON_AddNumberToObject(o, "images_per_sec", ips);
      double au = med(t, "accelerator_utilisation", formats[f], feeders[k]);
      double w = med(t, "data_wait_fraction", formats[f], feeders[k]);
      double sh = med(t, PB__T3_SHARE, formats[f], feeders[k]);
      if (isfinite(au)) cJSON_AddNumberToObject(o, "accelerator_utilisation", au);
      if (isfinite(w)) cJSON_AddNumberToObject(o, "data_wait_fraction", w);
      if (isfinite(sh)) cJSON_AddNumberToObject(o, "compute_bound_share", sh);
    }
}

int pb__t3_torch_run(pb_run_ctx *c, struct pb_error *err) {
  if (c->p.steps < 1) return pb_error_set(err, PB_EINVAL, "track 3 needs at least one step");
  if (pb__ranks_size() > 1)
    return pb_error_set(err, PB_EUNSUPPORTED, "track 3 --framework torch runs in one process; "
                        "leave out --ranks");
  pb_table *t = NULL;
  PB_RETURN_NOT_OK(pb__new_table(c, "3", &t, err));
  cJSON *s = pb__run_summary(c, "3");
  c->step = 0;
  c->total_steps = c->nf;
  int rc = PB_OK;
  char device[160] = "";
  for (int fi = 0; fi < c->nf && rc == PB_OK; fi++) {
    char what[256];
    snprintf(what, sizeof what, "track 3: %s -> torch %s (%s), fed by pipebench, torch's "
             "DataLoader and device-resident input", c->formats[fi],
             c->p.torch_model ? c->p.torch_model : c->p.model, c->p.train ? "train" : "inference");
    pb__run_progress(c, what);
    cJSON *res = NULL;
    rc = run_driver(c, fi, &res, err);
    if (rc == PB_OK) {
      const char *dn = str(res, "device_name");
      char now[160];
      snprintf(now, sizeof now, "%s%s%s%s, %s", str(res, "device"), dn[0] ? " (" : "", dn,
               dn[0] ? ")" : "", str(res, "dtype"));
      if (strcmp(now, device) != 0) {
        snprintf(device, sizeof device, "%s", now);
        pb__run_report(c, "track 3: torch %s runs on %s", str(cJSON_GetObjectItem(res, "versions"),
                       "torch"), device);
      }
      const cJSON *note;
      cJSON_ArrayForEach(note, cJSON_GetObjectItem(res, "notes")) {
        if (cJSON_IsString(note)) pb__run_report(c, "track 3, %s: %s", c->formats[fi], note->valuestring);
      }
      if (fi == 0) {
        cJSON_AddStringToObject(s, "framework", "torch");
        cJSON_AddStringToObject(s, "model", str(res, "model"));
        cJSON_AddStringToObject(s, "device", str(res, "device"));
      }
      rc = add_rows(c, t, fi, res, err);
    }
    cJSON_Delete(res);
    if (rc != PB_OK && rc != PB_ECANCELED && err != NULL && strncmp(err->message, "track 3", 7) != 0)
      pb_error_prefix(err, "track 3 (torch, %s): ", c->formats[fi]);
  }
  if (rc == PB_OK) rc = pb__write_table(c, t, "pipebench_track3.parquet", err);
  if (rc == PB_OK) {
    summarise(t, s);
    char text[1200], plain[1200];
    pb__t3_torch_headline(t, text, sizeof text);
    size_t o = 0; /* the console has no bold */
    for (size_t i = 0; text[i] != '\0' && o + 1 < sizeof plain; i++) {
      if (text[i] == '*' && text[i + 1] == '*') {
        i++;
        continue;
      }
      plain[o++] = text[i];
    }
    plain[o] = '\0';
    cJSON_AddStringToObject(s, "answer", plain);
    pb__run_report(c, "track 3: %s", plain);
  }
  pb_table_free(t);
  return rc;
}

/* ---- the report -------------------------------------------------------------------------- */

int pb__t3_torch_table(const pb_table *t) {
  const char *feeders[8];
  return pb_table_col_index(t, PB__T3_FEEDER) >= 0 &&
         pb__report_distinct_str(t, PB__T3_FEEDER, NULL, 0, feeders, 8) > 0;
}

void pb__t3_torch_headline(const pb_table *t, char *text, size_t size) {
  const char *formats[PB__RP_MAX_DISTINCT];
  int nf = pb__report_distinct_str(t, "format", NULL, 0, formats, PB__RP_MAX_DISTINCT);
  const char *model = pb__report_str(t, 0, "model"), *mode = pb__report_str(t, 0, "mode");
  const char *device = pb__report_str(t, 0, "device");
  double lo = INFINITY;
  char per[900] = "";
  for (int f = 0; f < nf; f++) {
    double pb = med(t, "images_per_sec", formats[f], FEEDER_PB);
    double dl = med(t, "images_per_sec", formats[f], FEEDER_DL);
    double res = med(t, "images_per_sec", formats[f], FEEDER_RES);
    double share = pb / res; /* the medians' ratio: the sentence's numbers agree */
    if (!isfinite(pb)) continue;
    if (share < lo) lo = share;
    size_t u = strlen(per);
    snprintf(per + u, sizeof per - u, "%s%s: %.0f images/s, %.0f%% of the %.0f images/s on "
             "device-resident input", u ? "; " : "", formats[f], pb, 100 * share, res);
    u = strlen(per);
    if (isfinite(dl))
      snprintf(per + u, sizeof per - u, ", %.2fx torch's DataLoader (%.0f images/s, %.0f%% of "
               "the bound)", pb / dl, dl, 100 * dl / res);
    else
      snprintf(per + u, sizeof per - u, ", no torch DataLoader for this format");
  }
  if (!isfinite(lo)) {
    snprintf(text, size, "Track 3 (torch) has no rows fed by pipebench's loader.");
    return;
  }
  snprintf(text, size, "**torch %s %s on %s: pipebench's loader %s** (lowest %.0f%% of the "
           "compute bound; %s).", model ? model : "model",
           mode && strcmp(mode, "train") == 0 ? "training" : "inference", device ? device : "?",
           lo >= 0.9 ? "keeps the model fed" : "leaves the model waiting for data", 100 * lo, per);
}

void pb__t3_torch_section(pb__report_doc *d, const pb_table *t, char (*cells)[64]) {
  pb__report_p(d, "A torch model fed three ways in interleaved rounds (--framework torch): pipebench's "
              "loader, torch's DataLoader over the same files, and one batch resident on the "
              "device (the compute bound). images/s over a window opened and closed on a "
              "synchronised device; AU = the device's busy time over that window; data wait = "
              "the host's time waiting for batches over that window; medians over rounds.");
  static const char *const head[] = {"format", "feeder", "images/s", "AU", "data wait",
                                     "of the compute bound", "step p50"};
  int nc = 7, n = 0;
  for (int k = 0; k < nc; k++) snprintf(cells[n++], 64, "%s", head[k]);
  const char *formats[PB__RP_MAX_DISTINCT], *feeders[8];
  int nf = pb__report_distinct_str(t, "format", NULL, 0, formats, PB__RP_MAX_DISTINCT);
  int nd = pb__report_distinct_str(t, PB__T3_FEEDER, NULL, 0, feeders, 8);
  for (int f = 0; f < nf; f++)
    for (int k = 0; k < nd && n + nc <= PB__RP_MAXCELLS; k++) {
      double ips = med(t, "images_per_sec", formats[f], feeders[k]);
      if (!isfinite(ips)) continue;
      snprintf(cells[n++], 64, "%s", formats[f]);
      snprintf(cells[n++], 64, "%s", feeders[k]);
      pb__report_fmt_num(ips, cells[n++], 64);
      snprintf(cells[n++], 64, "%.1f%%", 100 * med(t, "accelerator_utilisation", formats[f], feeders[k]));
      snprintf(cells[n++], 64, "%.1f%%", 100 * med(t, "data_wait_fraction", formats[f], feeders[k]));
      snprintf(cells[n++], 64, "%.1f%%", 100 * med(t, PB__T3_SHARE, formats[f], feeders[k]));
      pb__report_fmt_time(med(t, "step_time_p50", formats[f], feeders[k]), cells[n++], 64);
    }
  pb__report_table(d, cells, n / nc, nc);
}
