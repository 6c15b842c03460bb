/* The timing harness: settings helpers, timer groups, the timed window, rows and tables. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipebench/sys.h"
#include "pipebench/format.h"
#include "tracks/harness.h"
#include "tracks/ranks.h"

/* ---- settings and messages ---------------------------------------------------------------------- */

int pb__parse_int_list(const char *text, int *v, int max, int lo, int hi, const char *what,
                       struct pb_error *err) {
  int n = 0;
  const char *p = text;
  while (p != NULL && *p != '\0') {
    char *end;
    errno = 0;
    long x = strtol(p, &end, 10);
    if (end == p || errno != 0 || x < lo || x > hi || (*end != ',' && *end != '\0'))
      return pb_error_set(err, PB_EINVAL, "%s: '%s' is not a list of integers from %d to %d", what,
                          text, lo, hi);
    if (n == max) return pb_error_set(err, PB_EINVAL, "%s: more than %d values", what, max);
    v[n++] = (int)x;
    p = *end == ',' ? end + 1 : end;
  }
  if (n == 0) return pb_error_set(err, PB_EINVAL, "%s: empty list", what);
  return n;
}

int pb__list_has(const char *list, const char *word) {
  size_t len = strlen(word);
  for (const char *p = list; p != NULL && *p != '\0';) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == len && strncmp(p, word, len) == 0) return 1;
    p = end ? end + 1 : NULL;
  }
  return 0;
}

int pb__check_names(const char *list, const char *what, const char *const *names,
                       struct pb_error *err) {
  char tmp[512];
  snprintf(tmp, sizeof tmp, "%s", list ? list : "");
  char *save = NULL;
  int n = 0;
  for (char *tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save), n++) {
    int ok = 0;
    for (int k = 0; names[k] != NULL; k++) ok |= strcmp(tok, names[k]) == 0;
    if (!ok) {
      char known[256] = "";
      for (int k = 0; names[k] != NULL; k++) {
        if (k) strncat(known, ", ", sizeof known - strlen(known) - 1);
        strncat(known, names[k], sizeof known - strlen(known) - 1);
      }
      return pb_error_set(err, PB_EINVAL, "unknown %s '%s' (%s)", what, tok, known);
    }
  }
  if (n == 0) return pb_error_set(err, PB_EINVAL, "no %s given", what);
  return PB_OK;
}

void pb__run_progress(pb_run_ctx *c, const char *what) {
  c->step++;
  if (c->p.progress != NULL) c->p.progress(c->p.progress_ctx, what, c->step, c->total_steps);
}

void pb__run_report(pb_run_ctx *c, const char *fmt, ...) {
  if (c->p.report == NULL) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  c->p.report(c->p.report_ctx, line);
}

void pb__run_written(pb_run_ctx *c, const char *fmt, ...) {
  size_t u = strlen(c->written);
  if (u + 2 >= sizeof c->written) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(c->written + u, sizeof c->written - u - 1, fmt, ap);
  va_end(ap);
  if (n < 0) {
    c->written[u] = '\0';
    return;
  }
  u = strlen(c->written);
  c->written[u] = '\n';
  c->written[u + 1] = '\0';
}

int pb__run_stopped(void) { return pb_stop_requested(); }

int pb__run_stop_error(struct pb_error *err) {
  int sig = pb_stop_requested();
  const char *name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : NULL;
  if (name != NULL) return pb_error_set(err, PB_ECANCELED, "interrupted by %s", name);
  return pb_error_set(err, PB_ECANCELED, "interrupted");
}

cJSON *pb__run_summary(pb_run_ctx *c, const char *track_id) {
  cJSON *tracks = cJSON_GetObjectItem(c->summary, "tracks");
  cJSON *o = cJSON_GetObjectItem(tracks, track_id);
  return o != NULL ? o : cJSON_AddObjectToObject(tracks, track_id);
}

/* ---- timer groups --------------------------------------------------------------------------- */

int pb__timer_group(double overhead_ns, const double *pilot_s, size_t n, int cap) {
  if (n == 0 || !(overhead_ns > 0) || cap < 1) return 1;
  double lo = pilot_s[0];
  for (size_t k = 1; k < n; k++)
    if (pilot_s[k] < lo) lo = pilot_s[k];
  /* The timer at 0.5% of the pilot's shortest interval: a margin for later intervals that are
   * shorter still, so that the 1% bound holds for every interval timed. */
  double want = 200.0 * overhead_ns * 1e-9;
  if (!(lo > 0)) return cap;                  /* below the clock's resolution */
  double g = ceil(want / lo * (1 - 1e-12)); /* 5 us / 1 us is 5, whatever the rounding */
  if (!(g >= 1)) return 1;
  return g > (double)cap ? cap : (int)g;
}

int pb__timer_regroup(double overhead_ns, double span_s, int g, int cap) {
  double per = g > 0 ? span_s / g : span_s;
  int ng = pb__timer_group(overhead_ns, &per, 1, cap);
  int twice = 2 * (long)g < (long)cap ? 2 * g : cap;
  return ng > twice ? ng : twice;
}

/* ---- the timed window ----------------------------------------------------------------------- */

int pb__window_init(pb__window *w, double overhead_ns, int cap, size_t room, struct pb_error *err) {
  memset(w, 0, sizeof *w);
  w->overhead_ns = overhead_ns;
  w->tcost = overhead_ns / 1e9;
  w->cap = cap < 1 ? 1 : cap;
  w->g = 1;
  w->lat_cap = room > 0 ? room : 64;
  w->lat = calloc(w->lat_cap, sizeof *w->lat);
  if (w->lat == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  return PB_OK;
}

void pb__window_destroy(pb__window *w) {
  free(w->lat);
  memset(w, 0, sizeof *w);
}

void pb__window_pilot(pb__window *w, const double *pilot_s, size_t n) {
  w->g = pb__timer_group(w->overhead_ns, pilot_s, n, w->cap);
}

int pb__window_close(pb__window *w, int64_t end_ns, struct pb_error *err) {
  w->in_group = 0;
  if (pb_stop_requested() != 0) return pb__run_stop_error(err);
  double span = (double)(end_ns - w->g0) / 1e9;
  if (w->n == w->lat_cap) {
    size_t ncap = w->lat_cap * 2 + 64;
    double *nl = realloc(w->lat, ncap * sizeof *nl);
    if (nl == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    w->lat = nl;
    w->lat_cap = ncap;
  }
  w->lat[w->n++] = span / w->g;
  if (span < 100 * w->tcost && w->g < w->cap && w->regroups < 4) {
    /* Shorter than the pilot foresaw: start over with larger groups rather than keep an
     * interval the timer distorts. */
    w->g = pb__timer_regroup(w->overhead_ns, span, w->g, w->cap);
    w->regroups++;
    w->n = 0;
    w->items = 0;
    return PB__WINDOW_RESTART;
  }
  return PB__WINDOW_INTERVAL;
}

int pb__window_summarize(const pb__window *w, pb_summary *s) { return pb_summarize(w->lat, w->n, s); }

double pb__window_timer_fraction(const pb__window *w, const pb_summary *s) {
  return w->n > 0 ? w->overhead_ns / 1e9 / (s->min * w->g) : NAN;
}

/* ---- rows and tables ------------------------------------------------------------------------ */

void pb__add_summary_columns(pb_table *t, const pb_summary *s, const char *prefix) {
  static const char *const names[] = {PB__SUMMARY_COLUMNS("")};
  const double v[] = {s->p50, s->p95, s->p99, s->mean, s->stddev, s->min, s->max, s->cv,
                      s->median_ci_lo, s->median_ci_hi};
  char k[96];
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    snprintf(k, sizeof k, "%s%s", prefix, names[i]);
    pb_table_set_f64(t, k, v[i]);
  }
  snprintf(k, sizeof k, "%s%s", prefix, names[10]);
  pb_table_set_i64(t, k, (int64_t)s->n_outliers);
  snprintf(k, sizeof k, "%s%s", prefix, names[11]);
  pb_table_set_bool(t, k, s->unstable);
  snprintf(k, sizeof k, "%s%s", prefix, names[12]);
  pb_table_set_bool(t, k, s->p99_reliable);
}

int pb__new_table(pb_run_ctx *c, const char *track, pb_table **out, struct pb_error *err) {
  int rc = pb_table_new(out);
  if (rc != PB_OK) return pb_error_set(err, rc, "out of memory");
  pb_table_set_env(*out, &c->env);
  pb_table_set_meta(*out, "pipebench.track", track);
  if (c->run_id[0]) pb_table_set_meta(*out, "pipebench.run_id", c->run_id);
  pb_table_set_meta(*out, "pipebench.cache_state", c->p.cold ? "cold" : "warm");
  char seed[32];
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)c->p.seed);
  pb_table_set_meta(*out, "pipebench.seed", seed);
  char shown[sizeof c->data_dir];
  pb_location_shown(c->data_dir, shown, sizeof shown); /* a URL's credentials stay out */
  pb_table_set_meta(*out, "pipebench.dataset", shown);
  char overhead[64];
  snprintf(overhead, sizeof overhead, "%.1f", c->cal.timer_overhead_ns);
  pb_table_set_meta(*out, "pipebench.timer_overhead_ns", overhead);
  return PB_OK;
}

/* Columns every row carries, so a row read on its own says where it came from. */
void pb__row_common(pb_run_ctx *c, pb_table *t, const char *format, int repeat) {
  pb_table_append_row(t);
  pb_table_set_str(t, PB__COL_FORMAT, format);
  pb_table_set_str(t, PB__COL_CACHE_STATE, c->p.cold ? "cold" : "warm");
  pb_table_set_i64(t, PB__COL_REPEAT, repeat);
  pb_table_set_str(t, PB__COL_TIMESTAMP, c->env.timestamp_utc);
  pb_table_set_str(t, PB__COL_GIT_COMMIT, c->env.git_commit);
  pb_table_set_str(t, PB__COL_HOSTNAME, c->env.hostname);
  pb_table_set_i64(t, PB__COL_SEED, (int64_t)c->p.seed);
}

void pb__io_round_start(pb__io_round *r) {
  pb_io_counters(&r->requests, &r->bytes);
  pb_io_request_time(&r->request_ns);
  r->wall_ns = pb_now_ns();
}

void pb__io_round_end(pb__io_round *r) {
  int64_t q, b, ns;
  pb_io_counters(&q, &b);
  pb_io_request_time(&ns);
  r->requests = q - r->requests;
  r->bytes = b - r->bytes;
  r->request_ns = ns - r->request_ns;
  r->wall_ns = pb_now_ns() - r->wall_ns;
}

void pb__io_columns(const pb_run_ctx *c, pb_table *t, const char *format, const char *path,
                    int64_t images, const pb__io_round *r) {
  static const pb__io_round unknown = {0, 0, 0, 0};
  int counted = strcmp(format, "lance") != 0 && r != NULL;
  if (r == NULL) r = &unknown;
  pb_table_set_str(t, PB__COL_ENDPOINT, pb_location_endpoint(path));
  double n = images > 0 && counted ? (double)images : NAN;
  pb_table_set_f64(t, PB__COL_REQUESTS_PER_IMAGE, (double)r->requests / n);
  pb_table_set_f64(t, PB__COL_FETCHED_PER_IMAGE, (double)r->bytes / n);
  int remote = pb_location_is_url(path);
  pb_table_set_f64(t, PB__COL_IN_FLIGHT, remote && counted && r->wall_ns > 0
                                             ? (double)r->request_ns / (double)r->wall_ns
                                             : NAN);
  const pb_endpoint_calibration *e = &c->cal.endpoint;
  int have = remote && c->have_cal && c->cal.endpoint_measured;
  pb_table_set_f64(t, PB__COL_ENDPOINT_RTT, have ? e->rtt_ms.p50 : NAN);
  pb_table_set_f64(t, PB__COL_ENDPOINT_MBPS,
                   have && e->object_bytes >= PB__ENDPOINT_MIN_BYTES ? e->many_mbps.p50 : NAN);
}

int pb__schema_has(const char *const *schema, const char *col) {
  for (size_t i = 0; schema != NULL && schema[i] != NULL; i++)
    if (strcmp(schema[i], col) == 0) return 1;
  return 0;
}

int pb__write_table(pb_run_ctx *c, pb_table *t, const char *name, struct pb_error *err) {
  for (size_t k = 0; c->schema != NULL && k < pb_table_cols(t); k++)
    if (!pb__schema_has(c->schema, pb_table_col_name(t, k)))
      return pb_error_set(err, PB_ESTATE, "%s: column '%s' is not in the track's schema", name,
                          pb_table_col_name(t, k));
  char path[4096];
  snprintf(path, sizeof path, "%s/data/%s", c->p.out, name);
  int rc = pb_table_write(t, path, PB_SINK_AUTO, err);
  /* written into the staging folder; named where it will stand once the run is complete */
  if (rc == PB_OK)
    pb__run_written(c, "wrote %s/data/%s (%zu rows)", c->out[0] ? c->out : c->p.out, name,
                    pb_table_rows(t));
  /* A CSV twin, readable without any Parquet reader. */
  char *dot = strrchr(path, '.');
  if (rc == PB_OK && dot != NULL) {
    snprintf(dot, sizeof path - (size_t)(dot - path), ".csv");
    rc = pb_table_write(t, path, PB_SINK_CSV, err);
  }
  return rc;
}

/* ---- images of different sizes ------------------------------------------------------------- */

int pb__run_find_crops(pb_run_ctx *c, struct pb_error *err) {
  for (int fi = 0; fi < c->nf; fi++) {
    c->crop[fi] = 0;
    pb_dataset *ds = NULL;
    PB_RETURN_NOT_OK(pb_dataset_open(c->paths[fi], c->formats[fi], &ds, err));
    int64_t n = pb_dataset_count(ds), first = -1;
    pb_image_meta m0, m;
    int rc = PB_OK;
    for (int64_t i = 0; i < n && rc == PB_OK; i++) {
      if ((rc = pb_dataset_meta(ds, i, i == 0 ? &m0 : &m, err)) != PB_OK) break;
      if (i > 0 && memcmp(m.shape, m0.shape, sizeof m.shape) != 0) {
        /* only height and width: other differences cannot be cropped to one shape, and the
         * loader's own message about them stands */
        if (m.dtype == m0.dtype && m.shape[PB_T] == m0.shape[PB_T] &&
            m.shape[PB_C] == m0.shape[PB_C] && m.shape[PB_Z] == m0.shape[PB_Z])
          first = i;
        break;
      }
    }
    if (rc == PB_OK && first > 0) {
      c->crop[fi] = PB_RUN_CROP;
      if (pb__ranks_rank() == 0)
        pb__run_report(c, "%s: images differ in size (image %lld is %lldx%lld, image 0 %lldx%lld): "
                        "every track reads them through center_crop_resize to %dx%d (shorter "
                        "side %d first), with cache none",
                     c->formats[fi], (long long)first, (long long)m.shape[PB_Y],
                     (long long)m.shape[PB_X], (long long)m0.shape[PB_Y],
                     (long long)m0.shape[PB_X], PB_RUN_CROP, PB_RUN_CROP, PB_RUN_CROP_RESIZE);
    }
    pb_dataset_free(ds);
    if (rc != PB_OK) return rc;
  }
  return PB_OK;
}

void pb__run_loader_crop(const pb_run_ctx *c, int fi, pb_loader_params *lp) {
  if (c->crop[fi] <= 0) return;
  lp->transform = PB_TRANSFORM_CENTER_CROP_RESIZE;
  lp->crop_h = lp->crop_w = c->crop[fi];
  lp->resize = PB_RUN_CROP_RESIZE;
  lp->cache = PB_CACHE_NONE;
}

int pb__run_cache_ok(const pb_run_ctx *c, int fi, int cache) {
  return c->crop[fi] <= 0 || cache == PB_CACHE_NONE;
}

const char *pb__run_transform_name(const pb_run_ctx *c, int fi, const char *tr) {
  return c->crop[fi] > 0 ? "center_crop_resize" : tr;
}
