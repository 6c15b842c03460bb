/* Track 1: per-sample access. One sample at a time through the loader (batch 1, no worker
 * threads), timed from asking for it to holding it as a model-ready float tensor. */
#include <math.h>
#include <plplot.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/plot_kit.h"
#include "tracks/tracks.h"
#include "tracks/track_lance.h"
#include "pipebench/loader.h"

enum { PB_T1_PILOT = 8, PB_T1_MAX_GROUP = 1024 };

static const char *const transform_names[] = {"none", "normalize", "augment"};
static const char *const cache_names[] = {"none", "preload"};

/* ---- schema ---------------------------------------------------------------------------------- */

#define T1_ACCESS "access_pattern"
#define T1_TRANSFORM "transform"
#define T1_CACHE "cache"
#define T1_NUM_SAMPLES "num_samples"
#define T1_SAMPLES_PER_SEC "samples_per_sec"
#define T1_BYTES_READ_MEAN "bytes_read_mean"

static const char *const t1_schema[] = {
    PB__COMMON_COLUMNS, T1_ACCESS, T1_TRANSFORM, T1_CACHE, T1_NUM_SAMPLES, PB__COL_NUM_INTERVALS,
    PB__COL_TIMER_GROUP, PB__COL_TIMER_REGROUPS, "warmup", PB__SUMMARY_COLUMNS(""),
    T1_SAMPLES_PER_SEC, "read_us_mean", "decompress_us_mean", "decode_us_mean", "convert_us_mean",
    "transform_us_mean", T1_BYTES_READ_MEAN, PB__COL_TIMER_OVERHEAD_FRACTION,
    PB__COL_TIMER_LIMITED, PB__COL_ENGINE, PB__IO_COLUMNS, NULL};

/* ---- measuring ------------------------------------------------------------------------------- */

typedef struct t1_best {
  int noted; /* 1 + the format whose short epochs were already reported */
} t1_best;

static void t1_fastest(const pb_table *t, const char **formats, int *nf, double *p50,
                       const char **tr, int *bi);

/* One configuration of track 1: which format, order, transform and cache. */
typedef struct t1_config {
  int fi, random, tr, cache;
} t1_config;

/* What one round measured. */
typedef struct t1_round {
  pb__window w;
  pb_batch_times sum;
  int warm;
  int64_t images;  /* the round's samples */
  pb__io_round io; /* and its storage requests */
} t1_round;

/* One round: warm-up samples (the last PB_T1_PILOT of them timed one by one as the pilot that
 * sets the group), then samples timed in groups until the window holds enough intervals. */
static int t1_measure_round(pb_run_ctx *c, pb_loader *ld, int64_t *epoch, t1_round *m,
                            struct pb_error *err) {
  double pilot[PB_T1_PILOT];
  int warm = m->warm, rc = PB_OK, empty = 0;
  pb__window *w = &m->w;
  pb__io_round_start(&m->io);
  for (int k = 0; rc == PB_OK && (k < warm || w->n < (size_t)c->p.samples);) {
    pb_batch *b = NULL;
    int64_t t0 = pb_now_ns();
    rc = pb_loader_next(ld, &b, err);
    int64_t t1 = pb_now_ns();
    if (rc != PB_OK) break;
    if (b == NULL) { /* epoch over: start the next one, untimed */
      if (++empty > 1) return pb_error_set(err, PB_EFORMAT, "the loader gave no sample after a reset");
      rc = pb_loader_reset(ld, (*epoch)++, err);
      pb__window_drop_group(w); /* a group never spans the untimed reset */
      continue;
    }
    empty = 0;
    m->images += b->shape[0];
    if (k < warm) {
      if (k >= warm - PB_T1_PILOT) pilot[k - (warm - PB_T1_PILOT)] = (double)(t1 - t0) / 1e9;
      if (k == warm - 1) pb__window_pilot(w, pilot, PB_T1_PILOT);
    } else {
      int ev = pb__window_add(w, t0, t1, err);
      if (ev < 0) {
        pb_batch_free(b);
        return ev;
      }
      if (ev == PB__WINDOW_RESTART) {
        memset(&m->sum, 0, sizeof m->sum);
        pb_batch_free(b);
        continue;
      }
      m->sum.read_ns += b->times.read_ns;
      m->sum.decompress_ns += b->times.decompress_ns;
      m->sum.decode_ns += b->times.decode_ns;
      m->sum.convert_ns += b->times.convert_ns;
      m->sum.transform_ns += b->times.transform_ns;
      m->sum.bytes_read += b->times.bytes_read;
    }
    pb_batch_free(b);
    k++;
  }
  pb__io_round_end(&m->io);
  return rc;
}

/* The row of one round. */
static void t1_row(pb_run_ctx *c, pb_table *t, const t1_config *cf, int r, const t1_round *m,
                   const pb_summary *s) {
  const pb__window *w = &m->w;
  pb__row_common(c, t, c->formats[cf->fi], r);
  pb_table_set_str(t, T1_ACCESS, cf->random ? "random" : "sequential");
  pb_table_set_str(t, T1_TRANSFORM, pb__run_transform_name(c, cf->fi, transform_names[cf->tr]));
  pb_table_set_str(t, T1_CACHE, cache_names[cf->cache]);
  pb_table_set_i64(t, T1_NUM_SAMPLES, (int64_t)w->n * w->g);
  pb_table_set_i64(t, PB__COL_NUM_INTERVALS, (int64_t)w->n);
  pb_table_set_i64(t, PB__COL_TIMER_GROUP, w->g);
  pb_table_set_i64(t, PB__COL_TIMER_REGROUPS, w->regroups);
  pb_table_set_i64(t, "warmup", m->warm);
  pb__add_summary_columns(t, s, "");
  double total = 0;
  for (size_t k = 0; k < w->n; k++) total += w->lat[k];
  pb_table_set_f64(t, T1_SAMPLES_PER_SEC, (double)w->n / total);
  double n = w->items > 0 ? (double)w->items : 1.0;
  pb_table_set_f64(t, "read_us_mean", (double)m->sum.read_ns / n / 1e3);
  pb_table_set_f64(t, "decompress_us_mean", (double)m->sum.decompress_ns / n / 1e3);
  pb_table_set_f64(t, "decode_us_mean", (double)m->sum.decode_ns / n / 1e3);
  pb_table_set_f64(t, "convert_us_mean", (double)m->sum.convert_ns / n / 1e3);
  pb_table_set_f64(t, "transform_us_mean", (double)m->sum.transform_ns / n / 1e3);
  pb_table_set_f64(t, T1_BYTES_READ_MEAN, (double)m->sum.bytes_read / n);
  double tof = pb__window_timer_fraction(w, s);
  pb_table_set_f64(t, PB__COL_TIMER_OVERHEAD_FRACTION, tof);
  pb_table_set_bool(t, PB__COL_TIMER_LIMITED, tof > 0.01);
  pb__io_columns(c, t, c->formats[cf->fi], c->paths[cf->fi], m->images, &m->io);
}

static int t1_measure(pb_run_ctx *c, pb_table *t, const t1_config *cf, t1_best *best,
                      struct pb_error *err) {
  int fi = cf->fi;
  pb_loader_params lp = PB_LOADER_PARAMS_DEFAULTS;
  lp.format = c->formats[fi];
  lp.batch_size = 1;
  lp.workers = 0;
  lp.shuffle = cf->random;
  lp.seed = c->p.seed;
  lp.transform = (pb_transform)cf->tr;
  lp.cache = cf->cache ? PB_CACHE_PRELOAD : PB_CACHE_NONE;
  pb__run_loader_crop(c, fi, &lp); /* images of different sizes */
  pb_loader *ld = NULL;
  PB_RETURN_NOT_OK(pb_loader_new(c->paths[fi], &lp, &ld, err));
  int rc = PB_OK;
  int64_t epoch = 0;
  /* Warm-up samples are timed one by one as a pilot: when the shortest is under 100 timer
   * readings, samples are timed in groups of g (each interval then costs the timer at most
   * 1%) and every statistic is of the per-sample group means. */
  int warm = c->p.warmup < PB_T1_PILOT ? PB_T1_PILOT : c->p.warmup;
  /* A group never spans the untimed reset between epochs, so it can hold at most one epoch's
   * samples: a larger one would be dropped at every reset and the window would never fill. */
  int64_t per_epoch = pb_loader_samples_per_epoch(ld);
  if (per_epoch < 1) {
    pb_loader_free(ld);
    return pb_error_set(err, PB_EINVAL, "track 1, %s: the dataset has no images to measure",
                        c->formats[fi]);
  }
  int cap = per_epoch < PB_T1_MAX_GROUP ? (int)per_epoch : PB_T1_MAX_GROUP;
  for (int r = 0; r < c->p.repeats && rc == PB_OK; r++) {
    if (c->p.cold && (rc = pb_evict_path(c->paths[fi], err)) < 0) break;
    rc = pb_loader_reset(ld, epoch++, err);
    t1_round m = {.warm = warm};
    if (rc == PB_OK)
      rc = pb__window_init(&m.w, c->cal.timer_overhead_ns, cap, (size_t)c->p.samples, err);
    if (rc != PB_OK) break;
    rc = t1_measure_round(c, ld, &epoch, &m, err);
    pb_summary s;
    if (rc == PB_OK) rc = pb__window_summarize(&m.w, &s);
    if (rc == PB_OK) {
      t1_row(c, t, cf, r, &m, &s);
      double tof = pb__window_timer_fraction(&m.w, &s);
      if (tof > 0.01 && m.w.g == cap && cap < PB_T1_MAX_GROUP && best->noted != fi + 1) {
        best->noted = fi + 1;
        pb__run_report(c, "track 1, %s: an epoch holds only %lld images, so a timed group holds "
                          "at most that many and the timer can weigh over 1%% on an interval "
                          "(rows flagged timer_limited)", c->formats[fi], (long long)per_epoch);
      }
    }
    pb__window_destroy(&m.w);
  }
  pb_loader_free(ld);
  if (rc != PB_OK) pb_error_prefix(err, "track 1, %s: ", c->formats[fi]);
  return rc;
}

static int t1_validate(const pb_run_params *p, struct pb_error *err) {
  static const char *const transforms[] = {"none", "normalize", "augment", NULL};
  return pb__check_names(p->transforms, "transform", transforms, err);
}

static int t1_run(pb_run_ctx *c, struct pb_error *err) {
  int trs[3], ntr = 0;
  for (int k = 0; k < 3; k++)
    if (pb__list_has(c->p.transforms, transform_names[k])) trs[ntr++] = k;
  if (ntr == 0)
    return pb_error_set(err, PB_EINVAL, "no known transform in '%s' (none, normalize, augment)",
                        c->p.transforms);
  pb_table *t = NULL;
  PB_RETURN_NOT_OK(pb__new_table(c, "1", &t, err));
  c->step = 0;
  c->total_steps = 0;
  for (int fi = 0; fi < c->nf; fi++) c->total_steps += c->crop[fi] > 0 ? 2 : 2 * 2 * ntr;
  t1_best best = {0};
  int rc = PB_OK;
  for (int fi = 0; fi < c->nf && rc == PB_OK; fi++)
    for (int cache = 0; cache < 2 && rc == PB_OK; cache++)
      for (int random = 0; random < 2 && rc == PB_OK; random++)
        for (int k = 0; k < ntr && rc == PB_OK; k++) {
          /* Images of different sizes: one configuration per order, the crop, cache none (the
           * row stands where "no transform" does for the others). */
          if (c->crop[fi] > 0 && (cache != 0 || k > 0)) continue;
          int tr = c->crop[fi] > 0 ? 0 : trs[k];
          char what[128];
          snprintf(what, sizeof what, "track 1: %s %s %s cache=%s", c->formats[fi],
                   random ? "random" : "sequential",
                   pb__run_transform_name(c, fi, transform_names[tr]), cache_names[cache]);
          pb__run_progress(c, what);
          t1_config cf = {fi, random, tr, cache};
          rc = t1_measure(c, t, &cf, &best, err);
        }
  if (rc == PB_OK) rc = pb__track_lance(c, t, 1, NULL, 0, err); /* Lance inside its engine */
  if (rc == PB_OK) rc = pb__write_table(c, t, "pipebench_track1.parquet", err);
  if (rc == PB_OK) {
    cJSON *s = pb__run_summary(c, "1");
    cJSON_AddNumberToObject(s, "rows", (double)pb_table_rows(t));
    const char *formats[PB__RP_MAX_DISTINCT], *tr[PB__RP_MAX_DISTINCT];
    double p50[PB__RP_MAX_DISTINCT];
    int nf, bi;
    t1_fastest(t, formats, &nf, p50, tr, &bi);
    if (bi >= 0) {
      char a[32];
      cJSON_AddStringToObject(s, "fastest_random_access_format", formats[bi]);
      cJSON_AddNumberToObject(s, "fastest_random_access_p50_s", p50[bi]);
      pb__run_report(c, "track 1: fastest random single-sample access from storage: %s (median p50 %s per sample)",
                     formats[bi], pb__report_fmt_time(p50[bi], a, sizeof a));
    }
  }
  pb_table_free(t);
  return rc;
}

/* ---- the report: plot, answer, section ------------------------------------------------------ */

static void t1_draw(const void *ctx, pb__plot_page *pg) {
  const pb_table *t = ctx;
  const char *formats[PB__RP_MAX_DISTINCT], *trs[8], *caches[4];
  int nf = pb__report_distinct_str(t, PB__COL_FORMAT, NULL, 0, formats, PB__RP_MAX_DISTINCT);
  int ntr = pb__report_distinct_str(t, T1_TRANSFORM, NULL, 0, trs, 8);
  int nc = pb__report_distinct_str(t, T1_CACHE, NULL, 0, caches, 4);
  static const char *const pats[] = {"random", "sequential"};
  double max_s = 0, lo = INFINITY, hi = 0, slo = INFINITY, shi = 0;
  for (size_t r = 0; r < pb_table_rows(t); r++) {
    double p50 = pb__report_f64(t, r, PB__SUM_P50), p99 = pb__report_f64(t, r, PB__SUM_P99), sps = pb__report_f64(t, r, T1_SAMPLES_PER_SEC);
    if (p50 > max_s) max_s = p50;
    if (p50 > 0 && p50 < lo) lo = p50;
    if (p99 > hi) hi = p99;
    if (sps > 0 && sps < slo) slo = sps;
    if (sps > shi) shi = sps;
  }
  const char *unit;
  double us = pb__plot_time_unit(max_s, &unit);
  double ya, yb, sa, sb;
  pb__plot_log_range(lo * us, hi * us, &ya, &yb);
  pb__plot_log_range(slo, shi, &sa, &sb);
  pb__plot_layout L = {pg, nc > 0 ? nc : 1, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  L.top = 1.0 - 4.2 * pb__plot_chr_y(&L, PB__PL_BIG);
  L.bottom = 4.0 * pb__plot_chr_y(&L, PB__PL_TXT);
  char sub[256];
  double ns = pb__report_median(t, T1_NUM_SAMPLES, NULL, 0, NULL);
  snprintf(sub, sizeof sub,
           "one sample at a time, no workers; page cache %s; %.0f samples per round; bars: median over rounds",
           pb__plot_meta_or(t, "pipebench.cache_state", "?"), ns);
  pb__plot_title(&L, "Track 1: per-sample latency by format, access pattern and cache", sub);
  for (int c = 0; c < nc; c++) {
    for (int a = 0; a < 2; a++) {
      char title[128], ylab[64];
      snprintf(title, sizeof title, "%s, cache %s", pats[a], caches[c]);
      snprintf(ylab, sizeof ylab, "latency per sample (%s)", unit);
      double gw = 0.8, bw = gw / (nf > 0 ? nf : 1);
      pb__plot_panel(&L, c * 3 + a, -0.5, ntr - 0.5, ya, yb, 1, title, T1_TRANSFORM, ylab, trs, ntr, NULL);
      for (int k = 0; k < ntr; k++)
        for (int f = 0; f < nf; f++) {
          pb__report_filter fl[4] = {{PB__COL_FORMAT, formats[f], 0}, {T1_CACHE, caches[c], 0},
                                 {T1_ACCESS, pats[a], 0}, {T1_TRANSFORM, trs[k], 0}};
          double p50 = pb__report_median(t, PB__SUM_P50, fl, 4, NULL) * us;
          double p95 = pb__report_median(t, PB__SUM_P95, fl, 4, NULL) * us;
          double p99 = pb__report_median(t, PB__SUM_P99, fl, 4, NULL) * us;
          if (!(p50 > 0)) continue;
          double x0 = k - gw / 2 + f * bw, xm = x0 + bw / 2;
          pb__plot_rect(x0 + 0.08 * bw, x0 + 0.92 * bw, ya, pb__plot_lg(p50), pb__report_format_color(formats[f]), 0);
          if (p99 > 0) {
            pb__plot_color(0x000000);
            plwidth(2.5);
            PLFLT wx[2] = {xm, xm}, wy[2] = {pb__plot_lg(p50), pb__plot_lg(p99)};
            plline(2, wx, wy);
            PLFLT tx[2] = {xm - 0.3 * bw, xm + 0.3 * bw}, ty[2] = {pb__plot_lg(p99), pb__plot_lg(p99)};
            plline(2, tx, ty);
            if (p95 > 0) {
              PLFLT ux[2] = {xm - 0.18 * bw, xm + 0.18 * bw}, uy[2] = {pb__plot_lg(p95), pb__plot_lg(p95)};
              plline(2, ux, uy);
            }
          }
        }
    }
    /* throughput per format and access pattern, first transform (none when measured) */
    const char *tr0 = ntr > 0 ? trs[0] : "none";
    for (int k = 0; k < ntr; k++)
      if (strcmp(trs[k], "none") == 0) tr0 = trs[k];
    char title[128];
    snprintf(title, sizeof title, "samples/s, cache %s", caches[c]);
    pb__plot_panel(&L, c * 3 + 2, -0.5, 1.5, sa, sb, 1, title, "access pattern", "samples/s", pats, 2, NULL);
    double gw = 0.8, bw = gw / (nf > 0 ? nf : 1);
    for (int a = 0; a < 2; a++)
      for (int f = 0; f < nf; f++) {
        pb__report_filter fl[4] = {{PB__COL_FORMAT, formats[f], 0}, {T1_CACHE, caches[c], 0},
                               {T1_ACCESS, pats[a], 0}, {T1_TRANSFORM, tr0, 0}};
        double v = pb__report_median(t, T1_SAMPLES_PER_SEC, fl, 4, NULL);
        if (!(v > 0)) continue;
        double x0 = a - gw / 2 + f * bw;
        pb__plot_rect(x0 + 0.08 * bw, x0 + 0.92 * bw, sa, pb__plot_lg(v), pb__report_format_color(formats[f]), 0);
      }
  }
  pb__plot_legend_item ex[1] = {{3, 0, 0, 0, 0, "|  bar: p50;  whisker: short tick p95, top p99"}};
  pb__plot_format_legend(&L, formats, nf, ex, 1, 3.2 * pb__plot_chr_y(&L, PB__PL_TXT));
}

/* Draws the table: one row of panels per cache mode. */
static int t1_plot(const pb_table *t, const char *png, struct pb_error *err) {
  const char *c[4];
  int nc = pb__report_distinct_str(t, T1_CACHE, NULL, 0, c, 4);
  return pb__plot_png(png, 1800, 520 * (nc > 0 ? nc : 1) + 240, t1_draw, t, err);
}

/* The headline of track 1, from the table alone (medians over rounds): the format with the
 * lowest p50 in random order, no transform (the crop for images of different sizes), no
 * cache. The run's console line, pipebench_summary.json and the report all take it from
 * here, so the three say the same. *bi is -1 when no row qualifies. */
static void t1_fastest(const pb_table *t, const char **formats, int *nf, double *p50,
                       const char **tr, int *bi) {
  *nf = pb__report_distinct_str(t, PB__COL_FORMAT, NULL, 0, formats, PB__RP_MAX_DISTINCT);
  /* a format of images of different sizes has the crop's rows where the others have no
   * transform (pb__run_loader_crop) */
  *bi = -1;
  for (int f = 0; f < *nf; f++) {
    pb__report_filter fl[4] = {{PB__COL_FORMAT, formats[f], 0}, {T1_ACCESS, "random", 0},
                           {T1_TRANSFORM, "none", 0}, {T1_CACHE, "none", 0}};
    tr[f] = "none";
    p50[f] = pb__report_median(t, PB__SUM_P50, fl, 4, NULL);
    if (!isfinite(p50[f])) {
      fl[2].s = tr[f] = "center_crop_resize";
      p50[f] = pb__report_median(t, PB__SUM_P50, fl, 4, NULL);
    }
    if (isfinite(p50[f]) && (*bi < 0 || p50[f] < p50[*bi])) *bi = f;
  }
}

static void t1_answer(pb__report_doc *d, const pb_table *t, const cJSON *sum) {
  if (t == NULL) {
    pb__report_li(d, "Random access: not measured here (no track 1 table).");
    return;
  }
  const char *formats[PB__RP_MAX_DISTINCT];
  double p50[PB__RP_MAX_DISTINCT];
  const char *tr[PB__RP_MAX_DISTINCT];
  int nf, bi;
  t1_fastest(t, formats, &nf, p50, tr, &bi);
  if (bi < 0) {
    pb__report_li(d, "Random access: track 1 has no row with random order, no transform and no cache.");
    return;
  }
  char a[32], others[512] = "";
  for (int f = 0; f < nf; f++) {
    if (f == bi || !isfinite(p50[f])) continue;
    size_t u = strlen(others);
    snprintf(others + u, sizeof others - u, "%s%s %.2fx slower", u ? ", " : "; then ", formats[f], p50[f] / p50[bi]);
  }
  /* the read rate against the file-read limit */
  pb__report_filter fl[4] = {{PB__COL_FORMAT, formats[bi], 0}, {T1_ACCESS, "random", 0},
                         {T1_TRANSFORM, tr[bi], 0}, {T1_CACHE, "none", 0}};
  double bytes = pb__report_median(t, T1_BYTES_READ_MEAN, fl, 4, NULL);
  double sps = pb__report_median(t, T1_SAMPLES_PER_SEC, fl, 4, NULL);
  const char *state = pb_table_get_meta(t, "pipebench.cache_state");
  int cold = state != NULL && strcmp(state, "cold") == 0;
  double lim = pb__report_json_num(sum, "calibration", cold ? "read_cold_gbps" : "read_warm_gbps");
  char lim_text[256] = "";
  /* data at a URL: the sample's time in the round trips this run measured to the endpoint (a
   * local file-read limit says nothing there) */
  double rtt = pb__report_median(t, PB__COL_ENDPOINT_RTT, fl, 4, NULL);
  double rpi = pb__report_median(t, PB__COL_REQUESTS_PER_IMAGE, fl, 4, NULL);
  char per[64] = "";
  if (isfinite(rpi)) snprintf(per, sizeof per, ", %.2f requests per image", rpi);
  if (isfinite(rtt) && rtt > 0 && isfinite(p50[bi]))
    snprintf(lim_text, sizeof lim_text, " Its data is remote: at the %.1f ms round trip measured in this run, a sample takes %.2f round trips%s.",
             rtt, p50[bi] * 1e3 / rtt, per);
  else if (isfinite(bytes) && bytes > 0 && isfinite(sps) && lim > 0)
    snprintf(lim_text, sizeof lim_text, " It reads %.3f GB/s from its files, %.1f%% of this machine's %s file-read limit (%.2f GB/s).",
             bytes * sps / 1e9, 100.0 * bytes * sps / 1e9 / lim, cold ? "cold" : "warm", lim);
  pb__report_li(d, "**Fastest format for random access: %s** (track 1: random order, %s, no cache; median p50 %s per sample%s).%s",
         formats[bi], strcmp(tr[bi], "none") == 0 ? "no transform" : "center_crop_resize (images of different sizes)",
         pb__report_fmt_time(p50[bi], a, sizeof a), others, lim_text);
}

static void t1_section(pb__report_doc *d, const pb_table *t, char (*cells)[64]) {
  pb__report_p(d, "Each sample alone through the loader (batch 1, no workers), timed from the request to a model-ready float tensor. Rows without a transform; medians over rounds.");
  static const char *const head[] = {PB__COL_FORMAT, "access", T1_CACHE, PB__SUM_P50, PB__SUM_P95, PB__SUM_P99, "samples/s", "unstable rounds"};
  int nc = 8, n = 0;
  for (int c = 0; c < nc; c++) snprintf(cells[n++], 64, "%s", head[c]);
  const char *formats[PB__RP_MAX_DISTINCT], *caches[4];
  int nf = pb__report_distinct_str(t, PB__COL_FORMAT, NULL, 0, formats, PB__RP_MAX_DISTINCT);
  int ncache = pb__report_distinct_str(t, T1_CACHE, NULL, 0, caches, 4);
  static const char *const pats[] = {"random", "sequential"};
  for (int f = 0; f < nf; f++)
    for (int c = 0; c < ncache; c++)
      for (int a = 0; a < 2 && n + nc <= PB__RP_MAXCELLS; a++) {
        pb__report_filter fl[4] = {{PB__COL_FORMAT, formats[f], 0}, {T1_CACHE, caches[c], 0}, {T1_ACCESS, pats[a], 0},
                               {T1_TRANSFORM, "none", 0}};
        int rounds = 0;
        double p50 = pb__report_median(t, PB__SUM_P50, fl, 4, &rounds);
        if (rounds == 0) continue;
        snprintf(cells[n++], 64, "%s", formats[f]);
        snprintf(cells[n++], 64, "%s", pats[a]);
        snprintf(cells[n++], 64, "%s", caches[c]);
        pb__report_fmt_time(p50, cells[n++], 64);
        pb__report_fmt_time(pb__report_median(t, PB__SUM_P95, fl, 4, NULL), cells[n++], 64);
        pb__report_fmt_time(pb__report_median(t, PB__SUM_P99, fl, 4, NULL), cells[n++], 64);
        pb__report_fmt_num(pb__report_median(t, T1_SAMPLES_PER_SEC, fl, 4, NULL), cells[n++], 64);
        snprintf(cells[n++], 64, "%d/%d", pb__report_count_true(t, PB__SUM_UNSTABLE, fl, 4), rounds);
      }
  pb__report_table(d, cells, n / nc, nc);
}

/* ---- the descriptor -------------------------------------------------------------------------- */

static const char *const t1_round_keys[] = {PB__COL_FORMAT, T1_ACCESS, T1_TRANSFORM, T1_CACHE, PB__COL_CACHE_STATE, NULL};

static const char *const t1_options[] = {"repeats", "warmup", "samples", "transforms", "cold", "seed", NULL};

const pb__track pb__track1 = {
    .name = "per-sample access",
    .options = t1_options,
    .validate = t1_validate,
    .measure = t1_run,
    .view = {
        .id = "1",
        .title = "Track 1: per-sample access",
        .table = "pipebench_track1",
        .schema = t1_schema,
        .plot_needs = PB__SUM_P50,
        .plot = t1_plot,
        .answer = t1_answer,
        .answer_peer = NULL,
        .section = t1_section,
        .round_keys = t1_round_keys,
        .round_metric = PB__SUM_P50,
        .round_what = "p50 per sample",
    },
};
