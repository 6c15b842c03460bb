/* Track 1: per-sample access. One sample at a time through the loader (batch 1, no worker
 * threads), timed from asking for it to holding it as a model-ready float tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tracks/run_internal.h"
#include "pipebench/loader.h"

enum { PB_T1_PILOT = 8, PB_T1_MAX_GROUP = 1024 };

static const char *const transform_names[] = {"none", "normalize", "augment"};
static const char *const cache_names[] = {"none", "preload"};

typedef struct t1_best {
  double p50;
  char format[32];
  int noted; /* 1 + the format whose short epochs were already reported */
} t1_best;

static int measure(pb_run_ctx *c, pb_table *t, int fi, int random, int tr, int cache,
                   double *lat, t1_best *best, struct pb_error *err) {
  pb_loader_params lp = PB_LOADER_PARAMS_DEFAULTS;
  lp.format = c->formats[fi];
  lp.batch_size = 1;
  lp.workers = 0;
  lp.shuffle = random;
  lp.seed = c->p.seed;
  lp.transform = (pb_transform)tr;
  lp.cache = cache ? PB_CACHE_PRELOAD : PB_CACHE_NONE;
  pb_loader *ld = NULL;
  PB_RETURN_NOT_OK(pb_loader_new(c->paths[fi], &lp, &ld, err));
  int rc = PB_OK;
  int64_t epoch = 0;
  /* Warm-up samples are timed one by one as a pilot: when the shortest is under 100 timer
   * readings, samples are timed in groups of g (each interval then costs the timer at most
   * 1%) and every statistic is of the per-sample group means. */
  int warm = c->p.warmup < PB_T1_PILOT ? PB_T1_PILOT : c->p.warmup;
  double pilot[PB_T1_PILOT];
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
    pb_batch_times sum = {0};
    int measured = 0, g = 1, in_group = 0, regroups = 0, empty = 0;
    double tcost = c->cal.timer_overhead_ns / 1e9;
    int64_t items = 0, g0 = 0;
    for (int k = 0; rc == PB_OK && (k < warm || measured < c->p.samples);) {
      pb_batch *b = NULL;
      int64_t t0 = pb_now_ns();
      rc = pb_loader_next(ld, &b, err);
      int64_t t1 = pb_now_ns();
      if (rc != PB_OK) break;
      if (b == NULL) { /* epoch over: start the next one, untimed */
        if (++empty > 1) {
          rc = pb_error_set(err, PB_EFORMAT, "the loader gave no sample after a reset");
          break;
        }
        rc = pb_loader_reset(ld, epoch++, err);
        in_group = 0; /* a group never spans the untimed reset: a partial one is dropped */
        continue;
      }
      empty = 0;
      if (k < warm) {
        if (k >= warm - PB_T1_PILOT) pilot[k - (warm - PB_T1_PILOT)] = (double)(t1 - t0) / 1e9;
        if (k == warm - 1)
          g = pb__timer_group(c->cal.timer_overhead_ns, pilot, PB_T1_PILOT, cap);
      } else {
        if (in_group == 0) g0 = t0;
        items++;
        if (++in_group == g) {
          double span = (double)(t1 - g0) / 1e9;
          lat[measured++] = span / g;
          in_group = 0;
          if (span < 100 * tcost && g < cap && regroups < 4) {
            /* Shorter than the pilot foresaw: start over with larger groups. */
            g = pb__timer_regroup(c->cal.timer_overhead_ns, span, g, cap);
            regroups++;
            measured = 0;
            items = 0;
            memset(&sum, 0, sizeof sum);
            pb_batch_free(b);
            continue;
          }
        }
        sum.read_ns += b->times.read_ns;
        sum.decompress_ns += b->times.decompress_ns;
        sum.decode_ns += b->times.decode_ns;
        sum.convert_ns += b->times.convert_ns;
        sum.transform_ns += b->times.transform_ns;
        sum.bytes_read += b->times.bytes_read;
      }
      pb_batch_free(b);
      k++;
    }
    if (rc != PB_OK) break;
    pb_summary s;
    if ((rc = pb_summarize(lat, (size_t)measured, &s)) != PB_OK) break;
    pb__row_common(c, t, c->formats[fi], r);
    pb_table_set_str(t, "access_pattern", random ? "random" : "sequential");
    pb_table_set_str(t, "transform", transform_names[tr]);
    pb_table_set_str(t, "cache", cache_names[cache]);
    pb_table_set_i64(t, "num_samples", (int64_t)measured * g);
    pb_table_set_i64(t, "num_intervals", measured);
    pb_table_set_i64(t, "timer_group", g);
    pb_table_set_i64(t, "timer_regroups", regroups);
    pb_table_set_i64(t, "warmup", warm);
    pb__add_summary_columns(t, &s, "");
    double total = 0;
    for (int k = 0; k < measured; k++) total += lat[k];
    pb_table_set_f64(t, "samples_per_sec", (double)measured / total);
    double n = items > 0 ? (double)items : 1.0;
    pb_table_set_f64(t, "read_us_mean", (double)sum.read_ns / n / 1e3);
    pb_table_set_f64(t, "decompress_us_mean", (double)sum.decompress_ns / n / 1e3);
    pb_table_set_f64(t, "decode_us_mean", (double)sum.decode_ns / n / 1e3);
    pb_table_set_f64(t, "convert_us_mean", (double)sum.convert_ns / n / 1e3);
    pb_table_set_f64(t, "transform_us_mean", (double)sum.transform_ns / n / 1e3);
    pb_table_set_f64(t, "bytes_read_mean", (double)sum.bytes_read / n);
    /* The timer's share of the shortest interval timed (a group of g samples). */
    double tof = c->cal.timer_overhead_ns / 1e9 / (s.min * g);
    pb_table_set_f64(t, "timer_overhead_fraction", tof);
    pb_table_set_bool(t, "timer_limited", tof > 0.01);
    if (tof > 0.01 && g == cap && cap < PB_T1_MAX_GROUP && best->noted != fi + 1) {
      best->noted = fi + 1;
      pb__run_report(c, "track 1, %s: an epoch holds only %lld images, so a timed group holds "
                        "at most that many and the timer can weigh over 1%% on an interval "
                        "(rows flagged timer_limited)", c->formats[fi], (long long)per_epoch);
    }
    if (random && tr == 0 && cache == 0 && (best->format[0] == '\0' || s.p50 < best->p50)) {
      best->p50 = s.p50;
      snprintf(best->format, sizeof best->format, "%s", c->formats[fi]);
    }
  }
  pb_loader_free(ld);
  if (rc != PB_OK) pb_error_prefix(err, "track 1, %s: ", c->formats[fi]);
  return rc;
}

int pb__track1(pb_run_ctx *c, struct pb_error *err) {
  int trs[3], ntr = 0;
  for (int k = 0; k < 3; k++)
    if (pb__list_has(c->p.transforms, transform_names[k])) trs[ntr++] = k;
  if (ntr == 0)
    return pb_error_set(err, PB_EINVAL, "no known transform in '%s' (none, normalize, augment)",
                        c->p.transforms);
  pb_table *t = NULL;
  PB_RETURN_NOT_OK(pb__new_table(c, "1", &t, err));
  double *lat = calloc((size_t)c->p.samples, sizeof *lat);
  if (lat == NULL) {
    pb_table_free(t);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  c->step = 0;
  c->total_steps = (long)c->nf * 2 * 2 * ntr;
  t1_best best = {0};
  int rc = PB_OK;
  for (int fi = 0; fi < c->nf && rc == PB_OK; fi++)
    for (int cache = 0; cache < 2 && rc == PB_OK; cache++)
      for (int random = 0; random < 2 && rc == PB_OK; random++)
        for (int k = 0; k < ntr && rc == PB_OK; k++) {
          char what[128];
          snprintf(what, sizeof what, "track 1: %s %s %s cache=%s", c->formats[fi],
                   random ? "random" : "sequential", transform_names[trs[k]], cache_names[cache]);
          pb__run_progress(c, what);
          rc = measure(c, t, fi, random, trs[k], cache, lat, &best, err);
        }
  free(lat);
  if (rc == PB_OK) rc = pb__write_table(c, t, "pipebench_track1.parquet", err);
  if (rc == PB_OK) {
    cJSON *s = cJSON_AddObjectToObject(cJSON_GetObjectItem(c->summary, "tracks"), "1");
    cJSON_AddNumberToObject(s, "rows", (double)pb_table_rows(t));
    if (best.format[0]) {
      cJSON_AddStringToObject(s, "fastest_random_access_format", best.format);
      cJSON_AddNumberToObject(s, "fastest_random_access_p50_s", best.p50);
      pb__run_report(c, "track 1: fastest random single-sample access from storage: %s (p50 %.1f us)",
                     best.format, best.p50 * 1e6);
    }
  }
  pb_table_free(t);
  return rc;
}
