/* pipebench run: prepares the data, measures the machine, runs the tracks, writes results. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tracks/dirlock.h"
#include "pipebench/sys.h"
#include "tracks/device.h"
#include "tracks/ranks.h"
#include "tracks/tracks.h"
#include "pipebench/format.h"
#include "pipebench/engine.h"
#include "pipebench/gen.h"

#define PB_RUN_DEFAULT_FORMATS "raw,tiff,ome-zarr,oa-dataset,ome-parquet"

/* ---- work that cannot stop by itself ---------------------------------------------------------- */

/* Dataset generation, calibration and the plots have no way to stop half-way. When the run can
 * be stopped (pb_run_params.cancel), each runs in a forked copy of this process that a stop
 * ends at once (pb_proc_fork); what the copy finds comes back through shared memory. */
typedef struct forked_out {
  int rc;
  struct pb_error err;
  pb_calibration cal;
  char written[4096];
} forked_out;

typedef struct forked_job {
  pb_run_ctx *c;
  int (*work)(pb_run_ctx *c, void *arg, struct pb_error *err);
  void *arg;
  forked_out *out;
} forked_job;

static int forked_main(void *ctx) {
  forked_job *j = ctx;
  j->out->rc = j->work(j->c, j->arg, &j->out->err);
  j->out->cal = j->c->cal;
  memcpy(j->out->written, j->c->written, sizeof j->out->written);
  return j->out->rc;
}

/* work(c, arg, err) here, or in a forked copy when the run can be stopped; with_cal: the
 * copy's calibration is brought back into c->cal. */
static int run_stoppable(pb_run_ctx *c, int (*work)(pb_run_ctx *c, void *arg, struct pb_error *err),
                         void *arg, int with_cal, struct pb_error *err) {
  /* Not under MPI: Open MPI's transports do not survive a fork of a rank; there a stop waits
   * for the step to end. */
  if (c->p.cancel == NULL || pb__ranks_size() > 1) return work(c, arg, err);
  if (pb__run_stopped()) return pb__run_stop_error(err);
  forked_out *o = mmap(NULL, sizeof *o, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (o == MAP_FAILED) return pb_error_set(err, PB_ENOMEM, "out of memory (shared mapping)");
  memset(o, 0, sizeof *o);
  o->rc = PB_ECHILD;
  forked_job j = {c, work, arg, o};
  struct pb_error why = {{0}};
  int rc = pb_proc_fork(forked_main, &j, NULL, NULL, &why);
  if (rc == PB_ECANCELED || pb__run_stopped()) {
    rc = pb__run_stop_error(err);
  } else if (rc == PB_OK || o->rc != PB_OK) {
    rc = o->rc;
    if (rc != PB_OK) pb_error_set(err, rc, "%s", o->err.message);
    else if (with_cal) c->cal = o->cal;
    if (rc == PB_OK) memcpy(c->written, o->written, sizeof c->written); /* the report's lines */
  } else {
    rc = pb_error_set(err, rc, "%s", why.message); /* the copy died (a crash, the OOM killer) */
  }
  munmap(o, sizeof *o);
  return rc;
}

static int gen_work(pb_run_ctx *c, void *arg, struct pb_error *err) {
  return pb_gen(c->data_dir, arg, err);
}

/* pb_gen into c->data_dir; a stopped one leaves no staging folder and no empty dataset folder. */
static int run_gen(pb_run_ctx *c, pb_gen_params *g, struct pb_error *err) {
  struct stat st;
  int existed = stat(c->data_dir, &st) == 0;
  int rc = run_stoppable(c, gen_work, g, 0, err);
  if (rc != PB_OK) {
    char stage[4300];
    snprintf(stage, sizeof stage, "%s/gen-staging", c->data_dir);
    pb_temp_sweep(stage); /* the copy that was stopped is reaped: its staging folder goes */
    if (!existed) rmdir(c->data_dir);
  }
  return rc;
}

/* ---- data ----------------------------------------------------------------------------------- */

/* A manifest's entry names a path inside its dataset folder: relative, not empty, no ".."
 * component (a manifest copied or edited by hand must not send a run elsewhere). */
static int entry_inside(const char *entry) {
  if (entry[0] == '\0' || entry[0] == '/') return 0;
  for (const char *q = entry; *q != '\0';) {
    size_t len = strcspn(q, "/");
    if (len == 2 && q[0] == '.' && q[1] == '.') return 0;
    q += len + (q[len] == '/');
  }
  return 1;
}

static int read_manifest(pb_run_ctx *c, const char *dir, struct pb_error *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  void *data = NULL;
  size_t size = 0;
  int url = pb_location_is_url(dir);
  if (url) PB_RETURN_NOT_OK(pb_location_read(path, (size_t)256 << 20, &data, &size, err));
  else PB_RETURN_NOT_OK(pb_read_file(path, &data, &size, err));
  cJSON *root = NULL;
  int prc = pb_json_parse(data, size, path, &root, err);
  pb_free(data, size);
  if (prc != PB_OK) return prc;
  const cJSON *formats = cJSON_GetObjectItemCaseSensitive(root, "formats");
  if (root == NULL || !cJSON_IsObject(formats)) {
    cJSON_Delete(root);
    return pb_error_set(err, PB_EFORMAT, "%s: not a pipebench dataset manifest", path);
  }
  c->nf = 0;
  const cJSON *f;
  cJSON_ArrayForEach(f, formats) {
    if (cJSON_IsString(f) && f->string != NULL && !entry_inside(f->valuestring)) {
      int rc = pb_error_set(err, PB_EFORMAT, "%s: the entry of format '%s', '%s', is not a path "
                            "inside the dataset folder", path, f->string, f->valuestring);
      cJSON_Delete(root);
      return rc;
    }
    /* ... nor through a symbolic link that points out of it. */
    int irc = cJSON_IsString(f) && f->string != NULL && !url
                  ? pb_entry_inside(dir, f->valuestring, "the dataset folder", err)
                  : PB_OK;
    if (irc != PB_OK) {
      cJSON_Delete(root);
      return irc;
    }
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

static int prepare_data_in(pb_run_ctx *c, struct pb_error *err);

static int prepare_data(pb_run_ctx *c, struct pb_error *err) {
  int rc = prepare_data_in(c, err);
  if (rc != PB_OK && c->p.data != NULL) pb_location_mask_error(c->p.data, err);
  return rc;
}

static int prepare_data_in(pb_run_ctx *c, struct pb_error *err) {
  struct stat st;
  if (c->p.data != NULL) {
    char m[4200];
    snprintf(m, sizeof m, "%s/manifest.json", c->p.data);
    snprintf(c->data_dir, sizeof c->data_dir, "%s", c->p.data);
    if (pb_location_is_url(c->p.data)) { /* a folder gen wrote has its manifest inside */
      int kind = 0;
      PB_RETURN_NOT_OK(pb_location_stat(c->p.data, &kind, NULL, err));
      if (kind == 0) return pb_error_set(err, PB_ENOTFOUND, "%s: not found", c->p.data);
      if (kind == 2) PB_RETURN_NOT_OK(pb_location_stat(m, &kind, NULL, err));
      else kind = 0;
      if (kind == 1) return read_manifest(c, c->p.data, err);
    } else {
      if (stat(c->p.data, &st) != 0)
        return pb_error_set(err, PB_ENOTFOUND, "%s: no such file or folder", c->p.data);
      if (S_ISDIR(st.st_mode) && stat(m, &st) == 0) return read_manifest(c, c->p.data, err);
    }
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
  PB_RETURN_NOT_OK(run_gen(c, &g, err));
  return read_manifest(c, c->data_dir, err);
}

/* ---- summary -------------------------------------------------------------------------------- */

static void add_calibration(cJSON *root, const pb_calibration *cal, const char *saved_in) {
  cJSON *o = cJSON_AddObjectToObject(root, "calibration");
  /* when the limits were measured, and the file they came from when the run did not measure */
  cJSON_AddStringToObject(o, "measured_utc", cal->env.timestamp_utc);
  if (saved_in != NULL) cJSON_AddStringToObject(o, "saved_in", saved_in);
  cJSON_AddNumberToObject(o, "memcpy_gbps", cal->memcpy_gbps.value);
  cJSON_AddNumberToObject(o, "memcpy_mt_gbps", cal->memcpy_mt_gbps.value);
  cJSON_AddNumberToObject(o, "read_warm_gbps", cal->read_warm_gbps.value);
  cJSON_AddNumberToObject(o, "read_cold_gbps", cal->read_cold_gbps.value);
  cJSON_AddNumberToObject(o, "zstd_gbps", cal->zstd_gbps.value);
  cJSON_AddNumberToObject(o, "blosc_gbps", cal->blosc_gbps.value);
  cJSON_AddNumberToObject(o, "timer_overhead_ns", cal->timer_overhead_ns);
  cJSON_AddNumberToObject(o, "timer_resolution_ns", cal->timer_resolution_ns);
  if (cal->endpoint_measured) { /* the data's endpoint, measured by this run */
    const pb_endpoint_calibration *e = &cal->endpoint;
    cJSON *ep = cJSON_AddObjectToObject(o, "endpoint");
    cJSON_AddStringToObject(ep, "scheme", e->scheme);
    cJSON_AddStringToObject(ep, "object", e->location); /* credentials masked */
    cJSON_AddNumberToObject(ep, "object_bytes", (double)e->object_bytes);
    cJSON_AddNumberToObject(ep, "rtt_ms_p50", e->rtt_ms.p50);
    cJSON_AddNumberToObject(ep, "rtt_probes", (double)e->rtt_ms.n);
    if (e->object_bytes >= PB__ENDPOINT_MIN_BYTES) {
      cJSON_AddNumberToObject(ep, "single_stream_mbps", e->single_mbps.p50);
      cJSON_AddNumberToObject(ep, "many_stream_mbps", e->many_mbps.p50);
      cJSON_AddNumberToObject(ep, "streams", e->streams);
    }
  }
}

/* The run's settings, environment and (once measured) calibration into root. */
static void add_run(pb_run_ctx *c, cJSON *root) {
  cJSON *cfg = cJSON_AddObjectToObject(root, "configuration");
  char shown[sizeof c->data_dir];
  pb_location_shown(c->data_dir, shown, sizeof shown); /* a URL's credentials stay out */
  cJSON_AddStringToObject(cfg, "data", shown);
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
  if (c->have_env) {
    cJSON *env = cJSON_AddObjectToObject(root, "env");
    char tmp[64];
    for (int i = 0; i < pb_env_field_count(); i++) {
      const char *k, *v;
      pb_env_field(&c->env, i, &k, &v, tmp, sizeof tmp);
      cJSON_AddStringToObject(env, k, v);
    }
  }
  if (c->have_cal) add_calibration(root, &c->cal, c->cal_path);
}

/* root (with the run's settings added) to path, atomically; shown: the path for messages. */
static int write_json(pb_run_ctx *c, cJSON *root, const char *path, const char *shown,
                      struct pb_error *err) {
  add_run(c, root);
  char *text = cJSON_Print(root);
  if (text == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int rc = pb_write_file_atomic(path, text, strlen(text), err);
  free(text);
  if (rc == PB_OK && strcmp(path, shown) == 0) pb__run_report(c, "wrote %s", shown);
  else if (rc == PB_OK) pb__run_written(c, "wrote %s", shown); /* staged: said once in place */
  return rc;
}

/* ---- a stopped or failed run ---------------------------------------------------------------- */

static const char *signal_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "signal";
}

/* OUT/data/pipebench_summary_failed.json: what the run did, where and why it stopped. The
 * earlier results are not touched: this file is the only thing a failed run leaves. */
static void write_failed(pb_run_ctx *c, int rc, const struct pb_error *e) {
  cJSON *root = c->summary;
  cJSON_AddStringToObject(root, "error", e != NULL && e->message[0] ? e->message : pb_strerror(rc));
  cJSON_AddStringToObject(root, "stopped_in", c->phase);
  cJSON *done = cJSON_AddArrayToObject(root, "completed_tracks");
  char tmp[64];
  snprintf(tmp, sizeof tmp, "%s", c->done_tracks);
  char *save = NULL;
  for (char *tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
    cJSON_AddItemToArray(done, cJSON_CreateString(tok));
  int sig = pb__run_stopped();
  if (sig != 0) {
    cJSON *in = cJSON_AddObjectToObject(root, "interrupted");
    cJSON_AddStringToObject(in, "signal", signal_name(sig));
    cJSON_AddNumberToObject(in, "signal_number", sig);
    cJSON_AddStringToObject(in, "phase", c->phase);
    if (c->track[0]) cJSON_AddStringToObject(in, "track", c->track);
    else cJSON_AddNullToObject(in, "track");
  }
  char dir[4200], path[4300];
  snprintf(dir, sizeof dir, "%s/data", c->out);
  snprintf(path, sizeof path, "%s/pipebench_summary_failed.json", dir);
  struct pb_error e2;
  if (pb_mkdirs(dir, &e2) == PB_OK) write_json(c, root, path, path, &e2);
}

/* ---- the results folder: its lock, its reports, the run's id ------------------------------- */

/* A run's id: the UTC second it began and 64 random bits, "20261127T155908Z-0123456789abcdef".
 * Every table, the summary and the report carry it (docs/results.md). */
static void make_run_id(char *id, size_t size) {
  uint64_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
    r = (uint64_t)pb_now_ns() * UINT64_C(0x9e3779b97f4a7c15) ^ (uint64_t)getpid();
  time_t now = time(NULL);
  struct tm tm;
  char ts[32] = "00000000T000000Z";
  if (gmtime_r(&now, &tm) != NULL) strftime(ts, sizeof ts, "%Y%m%dT%H%M%SZ", &tm);
  snprintf(id, size, "%s-%016llx", ts, (unsigned long long)r);
}

/* OUT/report.md and OUT/report.html are replaced only when pipebench wrote them: a user's own
 * file of either name fails the run, before anything is measured and again before the swap. */
static int check_reports(const pb_run_ctx *c, struct pb_error *err) {
  static const char *const names[] = {"report.md", "report.html"};
  for (size_t i = 0; i < 2; i++) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", c->out, names[i]);
    PB_RETURN_NOT_OK(pb__report_ours(path, err));
  }
  return PB_OK;
}

/* OUT made and locked for the whole run (common/dirlock.h): a second run, or a report, into
 * the same folder fails at once instead of mixing its files with this run's. */
static int take_out(pb_run_ctx *c, pb__dirlock **lock, struct pb_error *err) {
  PB_RETURN_NOT_OK(pb_mkdirs(c->out, err));
  PB_RETURN_NOT_OK(pb__dirlock_take(c->out, "run --out", lock, err));
  return check_reports(c, err);
}

/* ---- the staging folder and the swap ------------------------------------------------------- */

/* OUT/.run.pbtmp-...: everything this run writes (tables, CSV twins, summary, plots, report, the
 * peers' scratch files, track 2's shared cache) goes here first. A killed run's staging folder
 * is removed by the next run over the same OUT (pb_temp_sweep). */
static int make_stage(pb_run_ctx *c, struct pb_error *err) {
  PB_RETURN_NOT_OK(pb_mkdirs(c->out, err));
  char name[4200], data[4300];
  snprintf(name, sizeof name, "%s/run", c->out);
  pb_temp_sweep(name);
  if (pb_temp_sibling(name, c->stage, sizeof c->stage) != PB_OK)
    return pb_error_set(err, PB_EINVAL, "%s: path too long", c->out);
  snprintf(data, sizeof data, "%s/data", c->stage);
  int rc = pb_mkdirs(data, err);
  if (rc != PB_OK) c->stage[0] = '\0';
  return rc;
}

/* One file of the set: from the staging folder (or a copy beside its destination) to OUT. */
typedef struct set_item {
  char rel[300];   /* its path inside OUT */
  char from[4400]; /* what is renamed onto OUT/rel; "" when this run made no such file */
  int copied;      /* from is a temporary copy beside the destination */
} set_item;

enum { SET_MAX = 4 * 8 + 4 };

static void sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
}

/* A copy of from as a temporary beside to, on disk (fsync): for a destination on another file
 * system than the staging folder (OUT/images a mount of its own), where rename cannot go. */
static int copy_beside(const char *from, const char *to, char *tmp, size_t tmp_size,
                       struct pb_error *err) {
  void *data = NULL;
  size_t size = 0;
  PB_RETURN_NOT_OK(pb_read_file(from, &data, &size, err));
  int rc = PB_OK, fd = -1;
  if (pb_temp_sibling(to, tmp, tmp_size) != PB_OK) {
    rc = pb_error_set(err, PB_EINVAL, "%s: path too long", to);
  } else if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666)) < 0) {
    rc = pb_error_set(err, -errno, "cannot write %s: %s", to, strerror(errno));
  } else {
    rc = pb_write_all(fd, data, size, to, err);
    if (rc == PB_OK && fsync(fd) != 0)
      rc = pb_error_set(err, -errno, "cannot write %s: %s", to, strerror(errno));
    if (close(fd) != 0 && rc == PB_OK)
      rc = pb_error_set(err, -errno, "cannot write %s: %s", to, strerror(errno));
    if (rc != PB_OK) unlink(tmp);
  }
  pb_free(data, size);
  return rc;
}

/* The set's files, in the order they are swapped in (see commit). Files bound for another file
 * system are copied beside their destination first, so that the swap is renames only and a
 * full disk fails the run before anything of the earlier set is touched. */
static int prepare_set(pb_run_ctx *c, set_item *items, size_t *n, struct pb_error *err) {
  *n = 0;
  for (size_t k = 0; k < pb__track_count() && *n + 4 <= SET_MAX; k++) {
    const char *table = pb__track_at(k)->view.table;
    snprintf(items[(*n)++].rel, sizeof items[0].rel, "data/%s.parquet", table);
    snprintf(items[(*n)++].rel, sizeof items[0].rel, "data/%s.csv", table);
    snprintf(items[(*n)++].rel, sizeof items[0].rel, "data/%s.csv-metadata.json", table);
    snprintf(items[(*n)++].rel, sizeof items[0].rel, "images/%s.png", table);
  }
  /* the plot of infer's CSVs in OUT, drawn with the report */
  snprintf(items[(*n)++].rel, sizeof items[0].rel, "images/pipebench_infer.png");
  static const char *const last[] = {"data/pipebench_summary.json", "report.html", "report.md"};
  for (size_t i = 0; i < 3; i++) snprintf(items[(*n)++].rel, sizeof items[0].rel, "%s", last[i]);
  struct stat sst;
  if (stat(c->stage, &sst) != 0)
    return pb_error_set(err, -errno, "%s: %s", c->stage, strerror(errno));
  for (size_t i = 0; i < *n; i++) {
    set_item *it = &items[i];
    char staged[4400], to[4400], dir[4400];
    snprintf(staged, sizeof staged, "%s/%s", c->stage, it->rel);
    snprintf(to, sizeof to, "%s/%s", c->out, it->rel);
    it->from[0] = '\0';
    it->copied = 0;
    struct stat st;
    if (lstat(staged, &st) != 0) continue;
    const char *base;
    pb_path_split(to, dir, sizeof dir, &base);
    if (stat(dir, &st) == 0 && st.st_dev != sst.st_dev) {
      int rc = copy_beside(staged, to, it->from, sizeof it->from, err);
      if (rc != PB_OK) return rc;
      it->copied = 1;
    } else {
      snprintf(it->from, sizeof it->from, "%s", staged);
    }
  }
  return PB_OK;
}

static void drop_copies(set_item *items, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (items[i].copied) unlink(items[i].from);
}

/* items[i] onto OUT/rel; with nothing made by this run, OUT/rel is removed (it belongs to the
 * earlier run). */
static int move_in(pb_run_ctx *c, set_item *it, struct pb_error *err) {
  char to[4400];
  snprintf(to, sizeof to, "%s/%s", c->out, it->rel);
  if (it->from[0] == '\0') {
    if (unlink(to) != 0 && errno != ENOENT)
      return pb_error_set(err, -errno, "cannot remove %s: %s", to, strerror(errno));
    return PB_OK;
  }
  if (rename(it->from, to) != 0)
    return pb_error_set(err, -errno, "cannot move %s to %s: %s", it->from, to, strerror(errno));
  it->copied = 0;
  return PB_OK;
}

/* The run's set replaces the earlier one (docs/results.md, "A run's outputs"). In this order:
 *   0. files bound for another file system are copied beside their destination (a failure
 *      here leaves the earlier set untouched); a report.md or report.html that pipebench did
 *      not write fails the run here too;
 *   1. the files that name a run go: report.md, report.html, data/pipebench_summary.json and
 *      data/pipebench_summary_failed.json;
 *   2. per track of the table: data/<table>.parquet, data/<table>.csv and its sidecar
 *      data/<table>.csv-metadata.json, images/<table>.png are
 *      renamed over the old ones (or the old ones removed, for a track this run did not make),
 *      then images/pipebench_infer.png the same way;
 *   3. data/pipebench_summary.json comes in;
 *   4. report.html, then report.md.
 * Steps 1 to 4 are renames and unlinks within one file system each. A crash (power loss,
 * SIGKILL) between them leaves the earlier tables, or some of the new ones, without a summary
 * or report that could name them: never a report over tables of another run; `pipebench
 * report OUT` redraws one from them when they are of one run, and names them when they are of
 * two (their run ids). The folder's lock keeps other runs out meanwhile. SIGINT, SIGTERM and
 * SIGHUP are held back during the swap, so a signal never splits it. */
static int commit(pb_run_ctx *c, struct pb_error *err) {
  set_item *items = calloc(SET_MAX, sizeof *items);
  if (items == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  sigset_t hold, old;
  sigemptyset(&hold);
  sigaddset(&hold, SIGINT);
  sigaddset(&hold, SIGTERM);
  sigaddset(&hold, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &hold, &old);
  char dir[4300];
  size_t n = 0;
  snprintf(dir, sizeof dir, "%s/data", c->out);
  int rc = pb_mkdirs(dir, err);
  snprintf(dir, sizeof dir, "%s/images", c->out);
  if (rc == PB_OK) rc = pb_mkdirs(dir, err);
  if (rc == PB_OK) rc = prepare_set(c, items, &n, err);
  if (rc == PB_OK) rc = check_reports(c, err); /* one the user put there while the run ran */
  static const char *const namers[] = {"report.md", "report.html", "data/pipebench_summary.json",
                                       "data/pipebench_summary_failed.json"};
  for (size_t i = 0; i < 4 && rc == PB_OK; i++) {
    char to[4400];
    snprintf(to, sizeof to, "%s/%s", c->out, namers[i]);
    if (unlink(to) != 0 && errno != ENOENT)
      rc = pb_error_set(err, -errno, "cannot remove %s: %s", to, strerror(errno));
  }
  /* tables and plots, then the summary */
  for (size_t i = 0; i + 2 < n && rc == PB_OK; i++) rc = move_in(c, &items[i], err);
  snprintf(dir, sizeof dir, "%s/data", c->out);
  sync_dir(dir);
  snprintf(dir, sizeof dir, "%s/images", c->out);
  sync_dir(dir);
  /* the report last */
  for (size_t i = n >= 2 ? n - 2 : n; i < n && rc == PB_OK; i++) rc = move_in(c, &items[i], err);
  sync_dir(c->out);
  drop_copies(items, n);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  free(items);
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
    snprintf(c->track, sizeof c->track, "%s", tr->view.id);
    snprintf(c->phase, sizeof c->phase, "track %s", tr->view.id);
    c->schema = tr->view.schema;
    rc = pb__run_stopped() ? pb__run_stop_error(err) : tr->measure(c, err);
    c->schema = NULL;
    rc = pb__ranks_agree(rc, err); /* a rank that failed inside the track meets the others here */
    if (rc == PB_OK) {
      size_t u = strlen(c->done_tracks);
      snprintf(c->done_tracks + u, sizeof c->done_tracks - u, "%s%s", u ? "," : "", tr->view.id);
      c->track[0] = '\0';
    }
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
/* A calibration saved by `pipebench calibrate` (cal_path): taken only where it was measured on
 * this machine (host name, CPU model and cores as this run reads them). */
static int load_calibration(pb_run_ctx *c, const char *cal_path, struct pb_error *err) {
  int rc = pb_calibration_load(cal_path, &c->cal, err);
  if (rc != PB_OK) {
    pb_error_prefix(err, "calibration: ");
    return rc;
  }
  const pb_env *was = &c->cal.env, *now = &c->env;
  if (strcmp(was->hostname, now->hostname) != 0 || strcmp(was->cpu_model, now->cpu_model) != 0 ||
      was->cpu_cores != now->cpu_cores)
    return pb_error_set(err, PB_EFORMAT,
                        "calibration %s was measured on %s (%s, %d cores), not on this machine "
                        "(%s, %s, %d cores): run `pipebench calibrate --out %s` here, or leave "
                        "the calibration out to measure it in this run",
                        cal_path, was->hostname[0] ? was->hostname : "an unnamed machine",
                        was->cpu_model, was->cpu_cores, now->hostname, now->cpu_model,
                        now->cpu_cores, cal_path);
  return PB_OK;
}

/* A run over a URL measures the endpoint its data lives at: the round trip (one-byte reads) and
 * one- and many-stream bandwidth on the largest object the dataset's open fetched at that
 * endpoint (not one another dataset of the same process opened elsewhere), so that the
 * rows of tracks 1 and 2 say what the network allowed. Bandwidth over an object smaller than
 * PB__ENDPOINT_MIN_BYTES would be mostly round trips: it is left out then. */
static int measure_endpoint(pb_run_ctx *c, struct pb_error *err) {
  c->cal.endpoint_measured = 0;
  char loc[4096];
  uint64_t size = 0;
  if (!pb_location_is_url(c->data_dir) ||
      !pb_io_largest_object(c->data_dir, loc, sizeof loc, &size))
    return PB_OK;
  pb_endpoint_params ep = PB_ENDPOINT_PARAMS_DEFAULTS;
  ep.url = loc;
  ep.probes = 10;
  ep.rounds = 2;
  ep.bytes = size < ((uint64_t)16 << 20) ? size : (uint64_t)16 << 20;
  calib_progress(c, "endpoint", 0, 1);
  int rc = pb_endpoint_calibrate(&ep, &c->cal.endpoint, err);
  if (rc != PB_OK) {
    pb_error_prefix(err, "measuring the data's endpoint: ");
    return rc;
  }
  c->cal.endpoint_measured = 1;
  return PB_OK;
}

static int calibrate_work(pb_run_ctx *c, void *arg, struct pb_error *err) {
  (void)arg;
  if (c->cal_path != NULL) {
    PB_RETURN_NOT_OK(load_calibration(c, c->cal_path, err));
    return measure_endpoint(c, err);
  }
  /* The machine's limits, measured in this run (small buffers: a few seconds). */
  pb_calibrate_params cp = PB_CALIBRATE_PARAMS_DEFAULTS;
  cp.memory_bytes = cp.file_bytes = (size_t)64 << 20;
  cp.rounds = 3;
  cp.matmul = 0;
  cp.gpu = 0; /* the GPU's limits come from `pipebench calibrate` (--calibration) */
  cp.jpeg_images = 0; /* the calibrate command measures JPEG decoding; a run does not wait for it */
  cp.dir = c->stage; /* its scratch file is unlinked at once; a stop leaves nothing */
  cp.progress = calib_progress;
  cp.progress_ctx = c;
  PB_RETURN_NOT_OK(pb_calibrate(&cp, &c->cal, err));
  return measure_endpoint(c, err);
}

static int prepare_ranks(pb_run_ctx *c, struct pb_error *err) {
  snprintf(c->phase, sizeof c->phase, "preparing the data");
  int rc = pb__ranks_rank() == 0 ? prepare_data(c, err) : PB_OK;
  rc = pb__ranks_agree(rc, err);
  if (rc == PB_OK && pb__ranks_rank() != 0) rc = prepare_data(c, err);
  rc = pb__ranks_agree(rc, err);
  if (rc == PB_OK) rc = pb__run_find_crops(c, err); /* every rank: its loaders need them */
  rc = pb__ranks_agree(rc, err);
  if (rc == PB_OK) rc = make_stage(c, err); /* every rank: its scratch files stay its own */
  rc = pb__ranks_agree(rc, err);
  if (rc != PB_OK) return rc;
  snprintf(c->phase, sizeof c->phase, "calibration");
  if (pb__ranks_rank() == 0) rc = run_stoppable(c, calibrate_work, NULL, 1, err);
  rc = pb__ranks_agree(rc, err);
  if (rc == PB_OK) rc = pb__ranks_bcast(&c->cal, sizeof c->cal, err);
  if (rc != PB_OK) return rc;
  c->have_cal = 1;
  char from[4400] = "";
  if (c->cal_path != NULL)
    snprintf(from, sizeof from, " (saved in %s at %s)", c->cal_path, c->cal.env.timestamp_utc);
  pb__run_report(c, "machine: memory copy %.1f GB/s (%d threads), file read %.1f GB/s warm, %.2f GB/s cold; timer %.0f ns%s",
                 c->cal.memcpy_mt_gbps.value, c->cal.memcpy_threads, c->cal.read_warm_gbps.value,
                 c->cal.read_cold_gbps.value, c->cal.timer_overhead_ns, from);
  if (c->cal.endpoint_measured) {
    const pb_endpoint_calibration *e = &c->cal.endpoint;
    char bw[160] = "";
    if (e->object_bytes >= PB__ENDPOINT_MIN_BYTES)
      snprintf(bw, sizeof bw, ", %.1f MB/s one stream, %.1f MB/s with %d in flight",
               e->single_mbps.p50, e->many_mbps.p50, e->streams);
    else
      snprintf(bw, sizeof bw, "; bandwidth not measured: the largest object is %llu bytes",
               (unsigned long long)e->object_bytes);
    pb__run_report(c, "endpoint: %s, round trip %.2f ms (p50 of %zu)%s (on %s)", e->scheme,
                   e->rtt_ms.p50, e->rtt_ms.n, bw, e->location);
  }
  if (pb__ranks_size() > 1)
    pb__run_report(c, "%d ranks: tracks 2 and 3 report each rank and the aggregate; rank 0 writes",
                   pb__ranks_size());
  return PB_OK;
}

/* Tracks 3 and 4 compute on a device: say which, and why auto took the CPU, in the run's lines
 * and in the summary. */
static void report_device(pb_run_ctx *c) {
  if (!pb__list_has(c->p.tracks, "3") && !pb__list_has(c->p.tracks, "4")) return;
  char why[640], line[800];
  const char *d = pb__device_resolve(c->p.device, why, sizeof why);
  if (d == NULL) return; /* validate() refused it already */
  pb_gpu_info gi;
  if (strcmp(d, "cpu") != 0)
    snprintf(line, sizeof line, "%s (%s)", d,
             pb_engine_gpu_info(&gi, NULL) == PB_OK ? gi.name : "GPU");
  else
    snprintf(line, sizeof line, "cpu (%s)", why[0] ? why : c->env.cpu_model);
  pb__run_report(c, "device: %s", line);
  cJSON_AddStringToObject(c->summary, "device", d);
  if (why[0]) cJSON_AddStringToObject(c->summary, "device_note", why);
}

/* The report's lines name OUT, not the staging folder they were written in. */
static void report_line(void *ctx, const char *text) {
  pb_run_ctx *c = ctx;
  size_t n = strlen(c->stage);
  const char *at = n > 0 ? strstr(text, c->stage) : NULL;
  if (strncmp(text, "wrote ", 6) != 0) { /* what went wrong is said at once */
    if (at == NULL) pb__run_report(c, "%s", text);
    else pb__run_report(c, "%.*s%s%s", (int)(at - text), text, c->out, at + n);
  } else if (at == NULL) {
    pb__run_written(c, "%s", text);
  } else {
    pb__run_written(c, "%.*s%s%s", (int)(at - text), text, c->out, at + n);
  }
}

static int report_work(pb_run_ctx *c, void *arg, struct pb_error *err) {
  (void)arg;
  /* infer's benchmark_results_*.csv stay in OUT (they are not the run's): read them there */
  int rc = pb__tracks_report(c->stage, c->out, report_line, c);
  if (rc != PB_OK) pb_error_set(err, rc, "the plots or the report could not be written");
  return rc;
}

int pb_run(const pb_run_params *params, struct pb_error *err) {
  PB_RETURN_NOT_OK(pb__ranks_init(err));
  pb_run_ctx *c = calloc(1, sizeof *c);
  if (c == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  pb_run_params defaults = PB_RUN_PARAMS_DEFAULTS;
  c->p = params != NULL ? *params : defaults;
  c->cal_path = c->p.calibration;
  if (c->cal_path == NULL || c->cal_path[0] == '\0') c->cal_path = getenv("PIPEBENCH_CALIBRATION");
  if (c->cal_path != NULL && c->cal_path[0] == '\0') c->cal_path = NULL;
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
  snprintf(c->out, sizeof c->out, "%s", c->p.out);
  make_run_id(c->run_id, sizeof c->run_id);
  struct stat st;
  int out_existed = stat(c->out, &st) == 0;
  pb__dirlock *lock = NULL; /* rank 0 writes OUT, and holds its lock */
  if (pb__ranks_rank() == 0) rc = take_out(c, &lock, err);
  rc = pb__ranks_agree(rc, err);
  if (rc != PB_OK) {
    pb__dirlock_release(lock);
    if (!out_existed) rmdir(c->out);
    free(c);
    return rc;
  }
  /* "cache none" rows read every block from storage: the OME-Arrow readers this run opens keep
   * one decoded block at a time (unless PB_OA_CACHE_MB chooses a budget), for the command line
   * and every other caller of pb_run alike. */
  long long budget = pb_pq_cache_budget_set(0);
  if (c->p.cancel != NULL) pb_stop_flag_set(c->p.cancel);
  c->summary = cJSON_CreateObject();
  cJSON_AddStringToObject(c->summary, "kind", "pipebench.run");
  cJSON_AddStringToObject(c->summary, "run_id", c->run_id);
  cJSON_AddItemToObject(c->summary, "tracks", cJSON_CreateObject());
  snprintf(c->phase, sizeof c->phase, "reading the environment");
  rc = pb_env_collect(&c->env, err);
  c->have_env = rc == PB_OK;
  if ((rc = pb__ranks_agree(rc, err)) == PB_OK) rc = prepare_ranks(c, err);
  if (rc == PB_OK) report_device(c);
  if (rc == PB_OK) {
    c->p.out = c->stage; /* the tracks write into the staging folder */
    rc = measure_tracks(c, err);
  }
  if (rc == PB_OK && pb__ranks_rank() == 0) {
    char path[4300], shown[4300];
    snprintf(c->phase, sizeof c->phase, "summary");
    snprintf(path, sizeof path, "%s/data/pipebench_summary.json", c->stage);
    snprintf(shown, sizeof shown, "%s/data/pipebench_summary.json", c->out);
    rc = write_json(c, c->summary, path, shown, err);
    snprintf(c->phase, sizeof c->phase, "report");
    if (rc == PB_OK && (rc = run_stoppable(c, report_work, NULL, 0, err)) != PB_OK && rc != PB_ECANCELED)
      pb_error_set(err, rc, "%s: the plots or the report could not be written (see above)", c->out);
    /* A stop that came in time undoes the run; one during the swap waits for its end. */
    if (rc == PB_OK && pb__run_stopped()) rc = pb__run_stop_error(err);
    if (rc == PB_OK) {
      snprintf(c->phase, sizeof c->phase, "replacing the earlier results");
      rc = commit(c, err);
    }
    for (char *line = c->written, *nl; rc == PB_OK && (nl = strchr(line, '\n')) != NULL; line = nl + 1)
      pb__run_report(c, "%.*s", (int)(nl - line), line);
  }
  rc = pb__ranks_agree(rc, err); /* every rank ends with the run's status */
  /* whatever failed after a stop failed because of it (a child killed, a read cut short) */
  if (rc != PB_OK && pb__run_stopped()) rc = pb__run_stop_error(err);
  if (rc != PB_OK && pb__ranks_rank() == 0) write_failed(c, rc, err);
  if (c->stage[0]) pb_remove_tree(c->stage);
  pb__dirlock_release(lock); /* removes the lock file, so that an empty OUT can go */
  if (!out_existed) rmdir(c->out); /* a run that left nothing leaves no empty folder */
  if (c->p.cancel != NULL) pb_stop_flag_set(NULL);
  pb_pq_cache_budget_set(budget);
  cJSON_Delete(c->summary);
  free(c);
  return rc;
}
