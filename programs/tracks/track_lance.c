/* Lance inside its own engine: the helper (lib/formats/lance) times takeOffsets calls over
 * pipebench's own sample order and hands back each call's time in ns; the percentiles and the
 * rest of the row come from pipebench's statistics, as for every other row. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipebench/lance.h"
#include "pipebench/loader.h"
#include "tracks/track2.h"
#include "tracks/track_lance.h"

/* Epochs of the sampler's order, back to back, until want samples: the order a loader with
 * the same seed reads (one rank). */
static int lance_order(int64_t n, int shuffle, uint64_t seed, int64_t epoch0, size_t want,
                       int64_t **out, struct pb_error *err) {
  int64_t *o = malloc((want + (size_t)n) * sizeof *o);
  if (o == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  for (size_t k = 0; k < want; k += (size_t)n)
    if (pb_sampler_plan(n, 0, 1, shuffle, seed, epoch0 + (int64_t)(k / (size_t)n), n, o + k) != 0) {
      free(o);
      return pb_error_set(err, PB_ENOMEM, "out of memory");
    }
  *out = o;
  return PB_OK;
}

/* Times calls in the engine; drops the first `drop` (warm-up) and summarises the rest in
 * seconds per item (per call / items per call). */
static int lance_timed(pb_lance *l, const int64_t *order, size_t n, int batch, size_t drop,
                       pb_summary *s, double *total_s, double *first_s, int64_t *bytes,
                       size_t *kept, struct pb_error *err) {
  int64_t *ns = NULL;
  size_t calls = 0;
  PB_RETURN_NOT_OK(pb_lance_take_times(l, order, n, batch, &ns, &calls, bytes, err));
  if (calls <= drop) {
    free(ns);
    return pb_error_set(err, PB_ESTATE, "the engine timed %zu calls, none after the warm-up", calls);
  }
  double *v = malloc((calls - drop) * sizeof *v);
  if (v == NULL) {
    free(ns);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  *total_s = 0;
  *first_s = (double)ns[0] / 1e9;
  for (size_t k = drop; k < calls; k++) *total_s += (v[k - drop] = (double)ns[k] / 1e9);
  *kept = calls - drop;
  int rc = pb_summarize(v, calls - drop, s);
  free(v);
  free(ns);
  return rc == PB_OK ? PB_OK : pb_error_set(err, rc, "no times to summarise");
}

static int track1_rows(pb_run_ctx *c, pb_table *t, pb_lance *l, int fi, const char *engine,
                       struct pb_error *err) {
  int64_t n = pb_lance_count(l);
  size_t warm = (size_t)(c->p.warmup < 8 ? 8 : c->p.warmup), want = warm + (size_t)c->p.samples;
  for (int random = 0; random < 2; random++)
    for (int r = 0; r < c->p.repeats; r++) {
      char what[128];
      snprintf(what, sizeof what, "track 1: %s %s inside %s", c->formats[fi],
               random ? "random" : "sequential", engine);
      pb__run_progress(c, what);
      if (c->p.cold) {
        int e = pb_evict_path(c->paths[fi], err);
        if (e < 0) return e;
      }
      int64_t *order = NULL;
      PB_RETURN_NOT_OK(lance_order(n, random, c->p.seed, r, want, &order, err));
      pb_summary s;
      double total, first;
      int64_t bytes;
      size_t kept;
      int rc = lance_timed(l, order, want, 0, warm, &s, &total, &first, &bytes, &kept, err);
      free(order);
      if (rc != PB_OK) return rc;
      /* Track 1's plots and report group rows by format, cache and transform only: a format
       * label of its own keeps these apart from pipebench's loader over the same dataset. */
      char label[48];
      snprintf(label, sizeof label, "%s (engine)", c->formats[fi]);
      pb__row_common(c, t, label, r);
      pb_table_set_str(t, PB__COL_ENGINE, engine);
      pb_table_set_str(t, "access_pattern", random ? "random" : "sequential");
      pb_table_set_str(t, "transform", "none");
      pb_table_set_str(t, "cache", "none");
      pb_table_set_i64(t, "num_samples", (int64_t)kept);
      pb_table_set_i64(t, PB__COL_NUM_INTERVALS, (int64_t)kept);
      pb_table_set_i64(t, PB__COL_TIMER_GROUP, 1);
      pb_table_set_i64(t, "warmup", (int64_t)warm);
      pb__add_summary_columns(t, &s, "");
      pb_table_set_f64(t, "samples_per_sec", total > 0 ? (double)kept / total : NAN);
      pb_table_set_f64(t, "bytes_read_mean", (double)bytes / (double)want);
      pb__io_columns(c, t, "lance", c->paths[fi], (int64_t)kept, NULL);
      double tof = s.min > 0 ? c->cal.timer_overhead_ns / 1e9 / s.min : NAN;
      pb_table_set_f64(t, PB__COL_TIMER_OVERHEAD_FRACTION, tof);
      pb_table_set_bool(t, PB__COL_TIMER_LIMITED, tof > 0.01);
      if (random && r == 0)
        pb__run_report(c, "track 1, %s inside %s: random takeOffsets p50 %.1f us (n=%zu)",
                       c->formats[fi], engine, s.p50 * 1e6, kept);
    }
  return PB_OK;
}

static int track2_rows(pb_run_ctx *c, pb_table *t, pb_lance *l, int fi, const char *engine,
                       const int *bss, int nb, struct pb_error *err) {
  int64_t n = pb_lance_count(l);
  for (int b = 0; b < nb; b++)
    for (int r = 0; r < c->p.repeats; r++) {
      char what[128];
      snprintf(what, sizeof what, "track 2: %s batch %d inside %s", c->formats[fi], bss[b], engine);
      pb__run_progress(c, what);
      if (c->p.cold) {
        int e = pb_evict_path(c->paths[fi], err);
        if (e < 0) return e;
      }
      /* the first batch stands apart (start-up); the rest are the steady state */
      size_t calls = 1 + (size_t)c->p.batches, want = calls * (size_t)bss[b];
      int64_t *order = NULL;
      PB_RETURN_NOT_OK(lance_order(n, 1, c->p.seed, r, want, &order, err));
      pb_summary s;
      double total, first;
      int64_t bytes;
      size_t kept;
      int rc = lance_timed(l, order, want, bss[b], 1, &s, &total, &first, &bytes, &kept, err);
      free(order);
      if (rc != PB_OK) return rc;
      double samples = (double)kept * bss[b];
      pb__row_common(c, t, c->formats[fi], r);
      pb_table_set_str(t, PB__COL_ENGINE, engine);
      pb_table_set_str(t, T2_LOADER, "lancedb-node");
      pb_table_set_str(t, T2_DECODE, "cpu"); /* the Node helper */
      pb_table_set_str(t, T2_CACHE, "none");
      pb_table_set_i64(t, T2_BATCH_SIZE, bss[b]);
      pb_table_set_i64(t, T2_NUM_WORKERS, 0);
      pb_table_set_str(t, "transform", "none");
      pb_table_set_f64(t, T2_FIRST_BATCH_TIME, first);
      pb_table_set_i64(t, "num_batches", (int64_t)kept);
      pb_table_set_i64(t, PB__COL_NUM_INTERVALS, (int64_t)kept);
      pb_table_set_i64(t, PB__COL_TIMER_GROUP, 1);
      pb__add_summary_columns(t, &s, T2_SUMMARY_PREFIX);
      double sps = total > 0 ? samples / total : NAN;
      double mbps = total > 0 ? (double)bytes * ((double)kept / (double)calls) / total / 1e6 : NAN;
      pb_table_set_f64(t, T2_SAMPLES_PER_SEC, sps);
      pb_table_set_f64(t, T2_MB_PER_SEC, mbps);
      pb_table_set_f64(t, T2_MEMCPY_FRACTION, mbps / 1e3 / c->cal.memcpy_mt_gbps.value);
      pb__io_columns(c, t, "lance", c->paths[fi], (int64_t)samples, NULL);
      double tof = s.min > 0 ? c->cal.timer_overhead_ns / 1e9 / s.min : NAN;
      pb_table_set_f64(t, PB__COL_TIMER_OVERHEAD_FRACTION, tof);
      pb_table_set_bool(t, PB__COL_TIMER_LIMITED, tof > 0.01);
      if (r == 0)
        pb__run_report(c, "track 2, %s inside %s: batch %d, %.0f samples/s", c->formats[fi],
                       engine, bss[b], sps);
    }
  return PB_OK;
}

int pb__track_lance(pb_run_ctx *c, pb_table *t, int track, const int *batch_sizes, int nb,
                    struct pb_error *err) {
  int rc = PB_OK;
  for (int fi = 0; fi < c->nf && rc == PB_OK; fi++) {
    if (strcmp(c->formats[fi], "lance") != 0) continue;
    char engine[64];
    PB_RETURN_NOT_OK(pb_lance_engine(engine, sizeof engine, err));
    pb__run_report(c, "track %d, lance: pipebench's loader rows read through the %s helper, one "
                      "image per request; the rows with engine=%s are timed inside the engine",
                   track, engine, engine);
    pb_lance *l = NULL;
    rc = pb_lance_open(c->paths[fi], &l, err);
    if (rc == PB_OK)
      rc = track == 1 ? track1_rows(c, t, l, fi, engine, err)
                      : track2_rows(c, t, l, fi, engine, batch_sizes, nb, err);
    pb_lance_free(l);
    if (rc != PB_OK) pb_error_prefix(err, "track %d, %s inside the Lance engine: ", track, c->formats[fi]);
  }
  return rc;
}
