/* pipebench run: prepares the data, measures the machine, runs the tracks, writes results. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tracks/ranks.h"
#include "tracks/tracks.h"
#include "formats/format_internal.h"
#include "parquet/pq_cache.h"
#include "pipebench/gen.h"

#define PB_RUN_DEFAULT_FORMATS "raw,tiff,ome-zarr,oa-dataset,ome-parquet"

/* ---- data ----------------------------------------------------------------------------------- */

static int read_manifest(pb_run_ctx *c, const char *dir, struct pb_error *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  void *data = NULL;
  size_t size = 0;
  PB_RETURN_NOT_OK(pb__read_file(path, &data, &size, err));
  char *text = malloc(size + 1);
  if (text == NULL) {
    pb_free(data, size);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  memcpy(text, data, size);
  text[size] = '\0';
  pb_free(data, size);
  cJSON *root = cJSON_Parse(text);
  free(text);
  const cJSON *formats = cJSON_GetObjectItemCaseSensitive(root, "formats");
  if (root == NULL || !cJSON_IsObject(formats)) {
    cJSON_Delete(root);
    return pb_error_set(err, PB_EFORMAT, "%s: not a pipebench dataset manifest", path);
  }
  c->nf = 0;
  const cJSON *f;
  cJSON_ArrayForEach(f, formats) {
    if (!cJSON_IsString(f) || f->string == NULL || c->nf == PB_RUN_MAX_FORMATS) continue;
    if (c->p.formats != NULL && !pb__list_has(c->p.formats, f->string)) continue;
    snprintf(c->formats[c->nf], sizeof c->formats[c->nf], "%s", f->string);
    snprintf(c->paths[c->nf], sizeof c->paths[c->nf], "%s/%s", dir, f->valuestring);
    c->nf++;
  }
  cJSON_Delete(root);
  if (c->p.formats != NULL) {
    /* Every format asked for must be there. */
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", c->p.formats);
    char *save = NULL;
    for (char *tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
      int found = 0;
      for (int i = 0; i < c->nf; i++) found |= strcmp(c->formats[i], tok) == 0;
      if (!found) {
        if (pb_format_find(tok) == NULL)
          return pb_error_set(err, PB_EINVAL, "unknown format '%s'", tok);
        return pb_error_set(err, PB_ENOTFOUND, "%s holds no '%s' data (its manifest lists the formats it has)", dir, tok);
      }
    }
  }
  if (c->nf == 0) return pb_error_set(err, PB_ENOTFOUND, "%s: no formats to measure", path);
  return PB_OK;
}

static void gen_progress(void *ctx, int64_t done, int64_t total) {
  pb_run_ctx *c = ctx;
  if (c->p.progress != NULL && (done % 25 == 0 || done == total))
    c->p.progress(c->p.progress_ctx, "generating the dataset", (long)done, (long)total);
}

static int prepare_data(pb_run_ctx *c, struct pb_error *err) {
  struct stat st;
  if (c->p.data != NULL) {
    if (stat(c->p.data, &st) != 0)
      return pb_error_set(err, PB_ENOTFOUND, "%s: no such file or folder", c->p.data);
    char m[4200];
    snprintf(m, sizeof m, "%s/manifest.json", c->p.data);
    snprintf(c->data_dir, sizeof c->data_dir, "%s", c->p.data);
    if (S_ISDIR(st.st_mode) && stat(m, &st) == 0) return read_manifest(c, c->p.data, err);
    /* A single dataset: measure it in the format it is in. */
    pb_dataset *ds = NULL;
    const char *fmt = NULL;
    if (c->p.formats != NULL && strchr(c->p.formats, ',') == NULL) fmt = c->p.formats;
    PB_RETURN_NOT_OK(pb_dataset_open(c->p.data, fmt, &ds, err));
    snprintf(c->formats[0], sizeof c->formats[0], "%s", pb_dataset_format(ds));
    snprintf(c->paths[0], sizeof c->paths[0], "%s", c->p.data);
    pb_dataset_free(ds);
    c->nf = 1;
    return PB_OK;
  }
  pb_gen_params g = PB_GEN_PARAMS_DEFAULTS;
  g.seed = c->p.seed;
  if (strcmp(c->p.preset, "microscopy") == 0) {
    g.rows = 200;
    g.shape[PB_C] = 3;
    g.shape[PB_Y] = g.shape[PB_X] = 1080;
  } else if (strcmp(c->p.preset, "default") != 0) {
    return pb_error_set(err, PB_EINVAL, "unknown preset '%s' (default, microscopy)", c->p.preset);
  }
  /* OME-Arrow in Parquet is read page by page (docs/format-ome-arrow.md), so it belongs in the
   * default comparison; the DuckDB database format costs tens of milliseconds per random image
   * (one query each) and is measured when asked for with --formats or present in --data. */
  g.formats = c->p.formats != NULL ? c->p.formats : PB_RUN_DEFAULT_FORMATS;
  g.progress = gen_progress;
  g.progress_ctx = c;
  snprintf(c->data_dir, sizeof c->data_dir, "%s/dataset-%s", c->p.out, c->p.preset);
  /* Reuse a dataset made earlier with the same settings; formats it lacks are added to it (gen
   * writes the same images, so its manifest takes them in). */
  char m[4200], missing[512] = "";
  snprintf(m, sizeof m, "%s/manifest.json", c->data_dir);
  if (stat(m, &st) == 0) {
    struct pb_error e2;
    const char *asked = c->p.formats;
    c->p.formats = NULL; /* what the dataset has */
    int have = read_manifest(c, c->data_dir, &e2) == PB_OK;
    c->p.formats = asked;
    if (have) {
      char tmp[512];
      snprintf(tmp, sizeof tmp, "%s", g.formats);
      char *save = NULL;
      for (char *tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < c->nf; i++) found |= strcmp(c->formats[i], tok) == 0;
        size_t u = strlen(missing);
        if (!found) snprintf(missing + u, sizeof missing - u, "%s%s", u ? "," : "", tok);
      }
      if (missing[0] == '\0' && read_manifest(c, c->data_dir, &e2) == PB_OK) {
        pb__run_report(c, "using the dataset in %s (delete it to make a new one)", c->data_dir);
        return PB_OK;
      }
      if (missing[0] != '\0') g.formats = missing;
    }
  }
  pb__run_report(c, "generating the %s dataset (%lld images of %lldx%lldx%lld %s) as %s into %s",
                 c->p.preset, (long long)g.rows, (long long)g.shape[PB_C], (long long)g.shape[PB_Y],
                 (long long)g.shape[PB_X], pb_dtype_name(g.dtype), g.formats, c->data_dir);
  PB_RETURN_NOT_OK(pb_gen(c->data_dir, &g, err));
  return read_manifest(c, c->data_dir, err);
}

/* ---- summary -------------------------------------------------------------------------------- */

static void add_calibration(cJSON *root, const pb_calibration *cal) {
  cJSON *o = cJSON_AddObjectToObject(root, "calibration");
  cJSON_AddNumberToObject(o, "memcpy_gbps", cal->memcpy_gbps.value);
  cJSON_AddNumberToObject(o, "memcpy_mt_gbps", cal->memcpy_mt_gbps.value);
  cJSON_AddNumberToObject(o, "read_warm_gbps", cal->read_warm_gbps.value);
  cJSON_AddNumberToObject(o, "read_cold_gbps", cal->read_cold_gbps.value);
  cJSON_AddNumberToObject(o, "zstd_gbps", cal->zstd_gbps.value);
  cJSON_AddNumberToObject(o, "blosc_gbps", cal->blosc_gbps.value);
  cJSON_AddNumberToObject(o, "timer_overhead_ns", cal->timer_overhead_ns);
  cJSON_AddNumberToObject(o, "timer_resolution_ns", cal->timer_resolution_ns);
}

static int write_summary(pb_run_ctx *c, const char *name, struct pb_error *err) {
  cJSON *root = c->summary;
  cJSON *cfg = cJSON_AddObjectToObject(root, "configuration");
  cJSON_AddStringToObject(cfg, "data", c->data_dir);
  cJSON_AddStringToObject(cfg, "tracks", c->p.tracks);
  cJSON_AddStringToObject(cfg, "preset", c->p.preset);
  cJSON_AddStringToObject(cfg, "cache_state", c->p.cold ? "cold" : "warm");
  cJSON_AddNumberToObject(cfg, "repeats", c->p.repeats);
  cJSON_AddNumberToObject(cfg, "warmup", c->p.warmup);
  cJSON_AddNumberToObject(cfg, "samples", c->p.samples);
  cJSON_AddNumberToObject(cfg, "batches", c->p.batches);
  cJSON_AddNumberToObject(cfg, "window_ms", c->p.window_ms);
  cJSON_AddStringToObject(cfg, "batch_sizes", c->p.batch_sizes);
  cJSON_AddStringToObject(cfg, "workers", c->p.workers);
  cJSON_AddStringToObject(cfg, "caches", c->p.caches);
  cJSON_AddStringToObject(cfg, "transforms", c->p.transforms);
  cJSON_AddNumberToObject(cfg, "seed", (double)c->p.seed);
  cJSON_AddNumberToObject(cfg, "ranks", pb__ranks_size());
  cJSON *fm = cJSON_AddObjectToObject(cfg, "formats");
  for (int i = 0; i < c->nf; i++) cJSON_AddStringToObject(fm, c->formats[i], c->paths[i]);
  cJSON *env = cJSON_AddObjectToObject(root, "env");
  char tmp[64];
  for (int i = 0; i < pb_env_field_count(); i++) {
    const char *k, *v;
    pb_env_field(&c->env, i, &k, &v, tmp, sizeof tmp);
    cJSON_AddStringToObject(env, k, v);
  }
  add_calibration(root, &c->cal);
  char *text = cJSON_Print(root);
  if (text == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  char path[4096];
  snprintf(path, sizeof path, "%s/data/%s", c->p.out, name);
  int rc = pb_write_file_atomic(path, text, strlen(text), err);
  free(text);
  if (rc == PB_OK) pb__run_report(c, "wrote %s", path);
  return rc;
}

/* ---- the run -------------------------------------------------------------------------------- */

static void calib_progress(void *ctx, const char *what, int step, int steps) {
  pb_run_ctx *c = ctx;
  char buf[128];
  snprintf(buf, sizeof buf, "calibrating: %s", what);
  if (c->p.progress != NULL) c->p.progress(c->p.progress_ctx, buf, step, steps);
}

/* Every item of --tracks must name a track of the table. */
static int check_tracks(const char *list, struct pb_error *err) {
  char tmp[64], known[128] = "";
  for (size_t k = 0; k < pb__track_count(); k++) {
    size_t u = strlen(known);
    snprintf(known + u, sizeof known - u, "%s%s", k ? ", " : "", pb__track_at(k)->view.id);
  }
  snprintf(tmp, sizeof tmp, "%s", list ? list : "");
  char *save = NULL;
  int any = 0;
  for (char *tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (pb__track_find(tok) == NULL)
      return pb_error_set(err, PB_EINVAL, "unknown track '%s' (tracks are %s)", tok, known);
    any = 1;
  }
  if (!any) return pb_error_set(err, PB_EINVAL, "no track given");
  return PB_OK;
}

/* Options are checked before anything is measured, so a typo costs no time and leaves no
 * half-made results behind. */
static int validate(const pb_run_params *p, struct pb_error *err) {
  PB_RETURN_NOT_OK(check_tracks(p->tracks, err));
  if (p->repeats < 1 || p->samples < 1 || p->batches < 1 || p->warmup < 0)
    return pb_error_set(err, PB_EINVAL, "repeats, samples and batches must be at least 1");
  for (size_t k = 0; k < pb__track_count(); k++) {
    const pb__track *tr = pb__track_at(k);
    if (tr->validate != NULL && pb__list_has(p->tracks, tr->view.id))
      PB_RETURN_NOT_OK(tr->validate(p, err));
  }
  if (p->formats != NULL) {
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", p->formats);
    char *save = NULL;
    for (char *tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
      if (pb_format_find(tok) == NULL) return pb_error_set(err, PB_EINVAL, "unknown format '%s'", tok);
  }
  return PB_OK;
}

/* The tracks asked for, in the table's order; stops at the first failure. */
static int measure_tracks(pb_run_ctx *c, struct pb_error *err) {
  int rc = PB_OK;
  for (size_t k = 0; k < pb__track_count() && rc == PB_OK; k++) {
    const pb__track *tr = pb__track_at(k);
    if (!pb__list_has(c->p.tracks, tr->view.id)) continue;
    c->schema = tr->view.schema;
    rc = tr->measure(c, err);
    c->schema = NULL;
    rc = pb__ranks_agree(rc, err); /* a rank that failed inside the track meets the others here */
  }
  return rc;
}

/* Across ranks (mpirun), tracks 2 and 3 measure the job as a whole; tracks 1 and 4 time one
 * sample at a time in one process, so they are run without mpirun. */
static int check_ranked_tracks(const char *tracks, struct pb_error *err) {
  if (pb__ranks_size() > 1 && (pb__list_has(tracks, "1") || pb__list_has(tracks, "4")))
    return pb_error_set(err, PB_EINVAL, "tracks 1 and 4 measure one process; across %d ranks "
                        "run tracks 2 and 3 (--tracks 2,3)", pb__ranks_size());
  return PB_OK;
}

/* The dataset and the machine's limits: made and measured by rank 0 alone (ranks generating or
 * calibrating side by side would disturb each other), then the others read the same dataset and
 * take rank 0's calibration. */
static int prepare_ranks(pb_run_ctx *c, struct pb_error *err) {
  int rc = pb__ranks_rank() == 0 ? prepare_data(c, err) : PB_OK;
  rc = pb__ranks_agree(rc, err);
  if (rc == PB_OK && pb__ranks_rank() != 0) rc = prepare_data(c, err);
  rc = pb__ranks_agree(rc, err);
  if (rc != PB_OK) return rc;
  if (pb__ranks_rank() == 0) {
    /* The machine's limits, measured in this run (small buffers: a few seconds). */
    pb_calibrate_params cp = PB_CALIBRATE_PARAMS_DEFAULTS;
    cp.memory_bytes = cp.file_bytes = (size_t)64 << 20;
    cp.rounds = 3;
    cp.matmul = 0;
    cp.dir = c->p.out;
    cp.progress = calib_progress;
    cp.progress_ctx = c;
    rc = pb_calibrate(&cp, &c->cal, err);
  }
  rc = pb__ranks_agree(rc, err);
  if (rc == PB_OK) rc = pb__ranks_bcast(&c->cal, sizeof c->cal, err);
  if (rc != PB_OK) return rc;
  pb__run_report(c, "machine: memory copy %.1f GB/s (%d threads), file read %.1f GB/s warm, %.2f GB/s cold; timer %.0f ns",
                 c->cal.memcpy_mt_gbps.value, c->cal.memcpy_threads, c->cal.read_warm_gbps.value,
                 c->cal.read_cold_gbps.value, c->cal.timer_overhead_ns);
  if (pb__ranks_size() > 1)
    pb__run_report(c, "%d ranks: tracks 2 and 3 report each rank and the aggregate; rank 0 writes",
                   pb__ranks_size());
  return PB_OK;
}

int pb_run(const pb_run_params *params, struct pb_error *err) {
  PB_RETURN_NOT_OK(pb__ranks_init(err));
  pb_run_ctx *c = calloc(1, sizeof *c);
  if (c == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  pb_run_params defaults = PB_RUN_PARAMS_DEFAULTS;
  c->p = params != NULL ? *params : defaults;
  if (pb__ranks_rank() != 0) c->p.progress = NULL, c->p.report = NULL; /* rank 0 speaks */
  char all[256] = ""; /* no tracks named: every track of the table (2 and 3 across ranks) */
  for (size_t k = 0; c->p.tracks == NULL && k < pb__track_count(); k++) {
    const char *id = pb__track_at(k)->view.id;
    if (pb__ranks_size() > 1 && check_ranked_tracks(id, NULL) != PB_OK) continue;
    size_t u = strlen(all);
    snprintf(all + u, sizeof all - u, "%s%s", u ? "," : "", id);
  }
  if (c->p.tracks == NULL) c->p.tracks = all;
  int rc = validate(&c->p, err);
  if (rc == PB_OK) rc = check_ranked_tracks(c->p.tracks, err);
  rc = pb__ranks_agree(rc, err);
  if (rc != PB_OK) {
    free(c);
    return rc;
  }
  /* "cache none" rows read every block from storage: the OME-Arrow readers this run opens keep
   * one decoded block at a time (unless PB_OA_CACHE_MB chooses a budget), for the command line
   * and every other caller of pb_run alike. */
  long long budget = pb__pq_cache_budget_set(0);
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/data", c->p.out);
  rc = pb__mkdirs(dir, err);
  if (rc == PB_OK) rc = pb_env_collect(&c->env, err);
  if ((rc = pb__ranks_agree(rc, err)) != PB_OK) goto done;
  if ((rc = prepare_ranks(c, err)) != PB_OK) goto done;

  c->summary = cJSON_CreateObject();
  cJSON_AddStringToObject(c->summary, "kind", "pipebench.run");
  cJSON_AddItemToObject(c->summary, "tracks", cJSON_CreateObject());
  if (rc == PB_OK) rc = measure_tracks(c, err);
  if (pb__ranks_rank() != 0) {
    /* rank 0 alone writes the summary and the report */
  } else if (rc != PB_OK) {
    /* A failed run leaves the last good summary alone; what it did and why it stopped go to
     * a file of their own. */
    cJSON_AddStringToObject(c->summary, "error", err ? err->message : pb_strerror(rc));
    struct pb_error e2;
    write_summary(c, "pipebench_summary_failed.json", &e2);
  } else {
    rc = write_summary(c, "pipebench_summary.json", err);
    if (rc == PB_OK && (rc = pb__tracks_report(c->p.out, c->p.report, c->p.report_ctx)) != PB_OK)
      pb_error_set(err, rc, "%s: the plots or the report could not be written (see above)", c->p.out);
  }
  rc = pb__ranks_agree(rc, err); /* every rank ends with the run's status */
done:
  pb__pq_cache_budget_set(budget);
  cJSON_Delete(c->summary);
  free(c);
  return rc;
}
