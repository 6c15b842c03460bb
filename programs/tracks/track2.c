/* Track 2: loader throughput. Batches over batch sizes x workers x cache modes; the first
 * batch (start-up) is reported on its own, steady state from the second batch on. A batch's
 * time runs from asking the loader for it to holding it, complete, in memory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tracks/run_internal.h"
#include "tools/peer.h"
#include "formats/format_internal.h"
#include "pipebench/loader.h"

static const char *const cache_names[] = {"none", "preload", "shared"};

enum { T2_MAX_PILOT = 1024, T2_MAX_GROUP = 4096 };

typedef struct t2_best {
  double sps;
  char format[32];
  int bs, workers;
} t2_best;

/* One round (repeat r) of one configuration: a fresh loader, its first batch, a pilot, the
 * steady window. Rounds of all configurations are interleaved by the caller. */
static int measure(pb_run_ctx *c, pb_table *t, int fi, int cache, int bs, int workers, int r,
                   double **latp, size_t *lat_cap, t2_best *best, struct pb_error *err) {
  pb_loader_params lp = PB_LOADER_PARAMS_DEFAULTS;
  lp.format = c->formats[fi];
  lp.batch_size = bs;
  lp.workers = workers;
  lp.prefetch = 2;
  lp.shuffle = 0;
  lp.seed = c->p.seed;
  lp.transform = PB_TRANSFORM_NORMALIZE;
  lp.cache = (pb_cache_mode)cache;
  char cache_path[4200];
  if (cache == PB_CACHE_SHARED) {
    /* One shared cache file per format, reused by every configuration (that is its point). */
    snprintf(cache_path, sizeof cache_path, "%s/cache/%s.pbraw", c->p.out, c->formats[fi]);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/cache", c->p.out);
    struct pb_error e2;
    pb__mkdirs(dir, &e2);
    lp.cache_path = cache_path;
  }
  pb_loader *ld = NULL;
  PB_RETURN_NOT_OK(pb_loader_new(c->paths[fi], &lp, &ld, err));
  pb_loader_stats st0;
  pb_loader_get_stats(ld, &st0);
  /* The steady window must be long next to what the workers can hold ready: batches sitting
   * in the prefetch queue when the first one arrives cost the consumer nothing, and a window
   * they cover would time queue pops, not loading. So it is at least 8 queue-fulls long, and
   * runs on across epochs (the reset between them is timed too, as a training loop sees it). */
  int64_t capacity = (int64_t)lp.prefetch * (lp.workers > 0 ? lp.workers : 1);
  int64_t want = c->p.batches;
  if (want < 8 * capacity) want = 8 * capacity;
  int64_t epoch = 0;
  int rc = PB_OK;
  do {
    if (c->p.cold && (rc = pb_evict_path(c->paths[fi], err)) < 0) break;
    rc = PB_OK;
    int64_t t0 = pb_now_ns();
    if ((rc = pb_loader_reset(ld, epoch++, err)) != PB_OK) break;
    pb_batch *b = NULL;
    if ((rc = pb_loader_next(ld, &b, err)) != PB_OK) break;
    double first = (double)(pb_now_ns() - t0) / 1e9;
    pb_batch_free(b);
    /* Pilot: the next batches, timed one by one and kept out of the window, set how many
     * batches each timed interval holds (a prefetched batch is a sub-microsecond queue pop;
     * groups keep the timer under 1% of every interval). */
    int64_t n_pilot = 2 * capacity < 16 ? 16 : 2 * capacity;
    double pilot[T2_MAX_PILOT];
    if (n_pilot > T2_MAX_PILOT) n_pilot = T2_MAX_PILOT;
    for (int64_t k = 0; k < n_pilot && rc == PB_OK; k++) {
      int64_t a = pb_now_ns();
      rc = pb_loader_next(ld, &b, err);
      if (rc == PB_OK && b == NULL) {
        rc = pb_loader_reset(ld, epoch++, err);
        if (rc == PB_OK) rc = pb_loader_next(ld, &b, err);
      }
      pilot[k] = (double)(pb_now_ns() - a) / 1e9;
      if (b == NULL && rc == PB_OK)
        rc = pb_error_set(err, PB_EFORMAT, "the loader gave no batch after a reset");
      pb_batch_free(b);
    }
    if (rc != PB_OK) break;
    int g = pb__timer_group(c->cal.timer_overhead_ns, pilot, (size_t)n_pilot, T2_MAX_GROUP);
    int n = 0, regroups = 0;
    double tcost = c->cal.timer_overhead_ns / 1e9;
    int64_t items = 0, samples = 0, bytes = 0;
    pb_batch_times sum = {0};
    int64_t steady0 = pb_now_ns();
    /* Also long enough in time: a window of a few milliseconds cannot show how workers scale. */
    int64_t min_ns = (int64_t)(c->p.window_ms * 1e6);
    int64_t a = 0;
    while (items % g != 0 || items < want ||
           (pb_now_ns() - steady0 < min_ns && items < 10000000)) {
      if ((size_t)n >= *lat_cap) {
        size_t ncap = *lat_cap * 2 + 64;
        double *nl = realloc(*latp, ncap * sizeof *nl);
        if (nl == NULL) {
          rc = pb_error_set(err, PB_ENOMEM, "out of memory");
          break;
        }
        *latp = nl;
        *lat_cap = ncap;
      }
      if (items % g == 0) a = pb_now_ns();
      rc = pb_loader_next(ld, &b, err);
      if (rc == PB_OK && b == NULL) {
        rc = pb_loader_reset(ld, epoch++, err);
        if (rc == PB_OK) rc = pb_loader_next(ld, &b, err);
      }
      if (rc != PB_OK || b == NULL) break;
      if (++items % g == 0) {
        double span = (double)(pb_now_ns() - a) / 1e9;
        (*latp)[n++] = span / g;
        if (span < 100 * tcost && g < T2_MAX_GROUP && regroups < 4) {
          /* Shorter than the pilot foresaw (a batch that happened to be ready): restart the
           * window with larger groups rather than keep an interval the timer distorts. */
          g = pb__timer_regroup(c->cal.timer_overhead_ns, span, g, T2_MAX_GROUP);
          regroups++;
          n = 0;
          items = samples = bytes = 0;
          memset(&sum, 0, sizeof sum);
          pb_batch_free(b);
          steady0 = pb_now_ns();
          continue;
        }
      }
      samples += b->shape[0];
      bytes += (int64_t)b->nbytes;
      sum.read_ns += b->times.read_ns;
      sum.decompress_ns += b->times.decompress_ns;
      sum.decode_ns += b->times.decode_ns;
      sum.convert_ns += b->times.convert_ns;
      sum.collate_ns += b->times.collate_ns;
      sum.bytes_read += b->times.bytes_read;
      pb_batch_free(b);
    }
    double steady = (double)(pb_now_ns() - steady0) / 1e9;
    if (rc != PB_OK) break;
    pb_summary s;
    if ((rc = pb_summarize(*latp, (size_t)n, &s)) != PB_OK) break;
    pb__row_common(c, t, c->formats[fi], r);
    pb_table_set_str(t, "loader", "pipebench");
    pb_table_set_str(t, "cache", cache_names[cache]);
    pb_table_set_i64(t, "batch_size", bs);
    pb_table_set_i64(t, "num_workers", workers);
    pb_table_set_i64(t, "prefetch", lp.prefetch);
    pb_table_set_str(t, "transform", "normalize");
    pb_table_set_f64(t, "first_batch_time", first);
    pb_table_set_i64(t, "num_batches", items);
    pb_table_set_i64(t, "num_intervals", n);
    pb_table_set_i64(t, "timer_group", g);
    pb_table_set_i64(t, "pilot_batches", n_pilot);
    pb_table_set_i64(t, "timer_regroups", regroups);
    pb_table_set_i64(t, "queue_capacity", capacity);
    pb__add_summary_columns(t, &s, "batch_time_");
    double sps = steady > 0 ? (double)samples / steady : NAN;
    double mbps = steady > 0 ? (double)bytes / steady / 1e6 : NAN;
    pb_table_set_f64(t, "samples_per_sec", sps);
    pb_table_set_f64(t, "mb_per_sec", mbps);
    pb_table_set_f64(t, "memcpy_fraction", mbps / 1e3 / c->cal.memcpy_mt_gbps.value);
    pb_table_set_f64(t, "bytes_read_per_sec", steady > 0 ? (double)sum.bytes_read / steady : NAN);
    pb_table_set_f64(t, "read_s", (double)sum.read_ns / 1e9);
    pb_table_set_f64(t, "decompress_s", (double)sum.decompress_ns / 1e9);
    pb_table_set_f64(t, "decode_s", (double)sum.decode_ns / 1e9);
    pb_table_set_f64(t, "convert_s", (double)sum.convert_ns / 1e9);
    pb_table_set_f64(t, "collate_s", (double)sum.collate_ns / 1e9);
    pb_table_set_f64(t, "preload_s", (double)st0.preload_ns / 1e9);
    pb_table_set_i64(t, "preload_bytes", st0.preload_bytes);
    /* The timer's share of the shortest interval timed (a group of g batches). */
    double tof = n > 0 ? c->cal.timer_overhead_ns / 1e9 / (s.min * g) : NAN;
    pb_table_set_f64(t, "timer_overhead_fraction", tof);
    pb_table_set_bool(t, "timer_limited", tof > 0.01);
    if (cache == PB_CACHE_NONE && isfinite(sps) && (best->format[0] == '\0' || sps > best->sps)) {
      best->sps = sps;
      best->bs = bs;
      best->workers = workers;
      snprintf(best->format, sizeof best->format, "%s", c->formats[fi]);
    }
  } while (0);
  pb_loader_free(ld);
  if (rc != PB_OK) pb_error_prefix(err, "track 2, %s: ", c->formats[fi]);
  return rc;
}

int pb__track2(pb_run_ctx *c, struct pb_error *err) {
  int bss[16], ws[16];
  int nb = pb__parse_int_list(c->p.batch_sizes, bss, 16, 1, 65536, "batch sizes", err);
  if (nb < 0) return nb;
  int nw = pb__parse_int_list(c->p.workers, ws, 16, 0, 256, "workers", err);
  if (nw < 0) return nw;
  int caches[3], nc = 0;
  for (int k = 0; k < 3; k++)
    if (pb__list_has(c->p.caches, cache_names[k])) caches[nc++] = k;
  if (nc == 0)
    return pb_error_set(err, PB_EINVAL, "no known cache mode in '%s' (none, preload, shared)", c->p.caches);
  pb_table *t = NULL;
  PB_RETURN_NOT_OK(pb__new_table(c, "2", &t, err));
  /* Room for the longest window: 8 queue-fulls at the largest worker count. */
  int maxw = 1;
  for (int w = 0; w < nw; w++)
    if (ws[w] > maxw) maxw = ws[w];
  size_t cap = (size_t)c->p.batches > (size_t)16 * (size_t)maxw ? (size_t)c->p.batches : (size_t)16 * (size_t)maxw;
  double *lat = calloc(cap + 1, sizeof *lat);
  cap += 1;
  if (lat == NULL) {
    pb_table_free(t);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  c->step = 0;
  t2_best best = {0};
  int rc = PB_OK;
  /* With a preload or shared cache the timed loop reads decoded pixels from RAM or a memory
   * map, whatever the source format was: the full grid is measured for the first format only,
   * and the others get one configuration (batch 16, 2 workers, or the nearest in the lists) that
   * shows their cache build time. */
  int ref_b = 0, ref_w = 0;
  for (int b = 0; b < nb; b++)
    if (abs(bss[b] - 16) < abs(bss[ref_b] - 16)) ref_b = b;
  for (int w = 0; w < nw; w++)
    if (abs(ws[w] - 2) < abs(ws[ref_w] - 2)) ref_w = w;
  c->total_steps = ((long)nb * nw * (c->nf + (nc - 1)) + (long)(c->nf - 1) * (nc - 1)) *
                   c->p.repeats;
  /* Repeats outermost: every configuration gets one round before any gets a second, so a
   * drift of the machine (clock speed, other load) spreads over all of them alike and ratios
   * between configurations (1 vs 2 workers, say) compare rounds taken side by side. */
  for (int r = 0; r < c->p.repeats && rc == PB_OK; r++)
    for (int fi = 0; fi < c->nf && rc == PB_OK; fi++)
      for (int k = 0; k < nc && rc == PB_OK; k++)
        for (int b = 0; b < nb && rc == PB_OK; b++)
          for (int w = 0; w < nw && rc == PB_OK; w++) {
            if (caches[k] != PB_CACHE_NONE && fi > 0 && (b != ref_b || w != ref_w)) continue;
            char what[160];
            snprintf(what, sizeof what, "track 2: %s cache=%s batch=%d workers=%d (round %d of %d)",
                     c->formats[fi], cache_names[caches[k]], bss[b], ws[w], r + 1, c->p.repeats);
            pb__run_progress(c, what);
            rc = measure(c, t, fi, caches[k], bss[b], ws[w], r, &lat, &cap, &best, err);
          }
  free(lat);
  if (rc == PB_OK && c->p.peer) rc = pb__track2_peer(c, t, bss, nb, ws, nw, err);
  if (rc == PB_OK) rc = pb__write_table(c, t, "pipebench_track2.parquet", err);
  if (rc == PB_OK) {
    cJSON *s = cJSON_AddObjectToObject(cJSON_GetObjectItem(c->summary, "tracks"), "2");
    cJSON_AddNumberToObject(s, "rows", (double)pb_table_rows(t));
    if (best.format[0]) {
      cJSON_AddStringToObject(s, "fastest_bulk_format", best.format);
      cJSON_AddNumberToObject(s, "fastest_bulk_samples_per_sec", best.sps);
      cJSON_AddNumberToObject(s, "fastest_bulk_batch_size", best.bs);
      cJSON_AddNumberToObject(s, "fastest_bulk_workers", best.workers);
      pb__run_report(c, "track 2: fastest bulk loading from storage: %s, %.0f samples/s (batch %d, %d workers)",
                     best.format, best.sps, best.bs, best.workers);
    }
  }
  pb_table_free(t);
  return rc;
}
