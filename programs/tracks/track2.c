/* Track 2: loader throughput. Batches over batch sizes x workers x cache modes; the first
 * batch (start-up) is reported on its own, steady state from the second batch on. A batch's
 * time runs from asking the loader for it to holding it, complete, in memory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/peer.h"
#include "tracks/tracks.h"
#include "formats/format_internal.h"
#include "pipebench/loader.h"

static const char *const cache_names[] = {"none", "preload", "shared"};

enum { T2_MAX_PILOT = 1024, T2_MAX_GROUP = 4096 };

/* ---- schema ---------------------------------------------------------------------------------- */

#define T2_LOADER "loader"
#define T2_CACHE "cache"
#define T2_BATCH_SIZE "batch_size"
#define T2_NUM_WORKERS "num_workers"
#define T2_FIRST_BATCH_TIME "first_batch_time"
#define T2_SAMPLES_PER_SEC "samples_per_sec"
#define T2_MB_PER_SEC "mb_per_sec"
#define T2_MEMCPY_FRACTION "memcpy_fraction"
#define T2_OVER_PEER "pipebench_over_peer" /* rows of the torch DataLoader peer (tools/peer.c) */
#define T2_SUMMARY_PREFIX "batch_time_"

static const char *const t2_schema[] = {
    PB__COMMON_COLUMNS, T2_LOADER, T2_CACHE, T2_BATCH_SIZE, T2_NUM_WORKERS, "prefetch",
    "transform", T2_FIRST_BATCH_TIME, "num_batches", PB__COL_NUM_INTERVALS, PB__COL_TIMER_GROUP,
    "pilot_batches", PB__COL_TIMER_REGROUPS, "queue_capacity",
    PB__SUMMARY_COLUMNS(T2_SUMMARY_PREFIX), T2_SAMPLES_PER_SEC, T2_MB_PER_SEC,
    T2_MEMCPY_FRACTION, "bytes_read_per_sec", "read_s", "decompress_s", "decode_s", "convert_s",
    "collate_s", "preload_s", "preload_bytes", PB__COL_TIMER_OVERHEAD_FRACTION,
    PB__COL_TIMER_LIMITED, "peer_version", T2_OVER_PEER, NULL};

/* ---- measuring ------------------------------------------------------------------------------- */

typedef struct t2_best {
  double sps;
  char format[32];
  int bs, workers;
} t2_best;

/* One configuration of track 2. */
typedef struct t2_config {
  int fi, cache, bs, workers, r;
} t2_config;

/* What one round measured. */
typedef struct t2_round {
  double first;          /* first batch, seconds */
  int64_t n_pilot;       /* batches of the pilot */
  pb__window w;          /* the steady window */
  int64_t samples, bytes;
  pb_batch_times sum;
  double steady;         /* the window's length, seconds */
  pb_loader_stats st0;   /* before the first batch: the cache build */
  int64_t capacity;      /* batches the workers can hold ready */
} t2_round;

static int t2_open(pb_run_ctx *c, const t2_config *cf, pb_loader_params *lp, char *cache_path,
                   size_t cache_size, pb_loader **ld, struct pb_error *err) {
  *lp = (pb_loader_params)PB_LOADER_PARAMS_DEFAULTS;
  lp->format = c->formats[cf->fi];
  lp->batch_size = cf->bs;
  lp->workers = cf->workers;
  lp->prefetch = 2;
  lp->shuffle = 0;
  lp->seed = c->p.seed;
  lp->transform = PB_TRANSFORM_NORMALIZE;
  lp->cache = (pb_cache_mode)cf->cache;
  if (cf->cache == PB_CACHE_SHARED) {
    /* One shared cache file per format, reused by every configuration (that is its point). */
    snprintf(cache_path, cache_size, "%s/cache/%s.pbraw", c->p.out, c->formats[cf->fi]);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/cache", c->p.out);
    struct pb_error e2;
    pb__mkdirs(dir, &e2);
    lp->cache_path = cache_path;
  }
  return pb_loader_new(c->paths[cf->fi], lp, ld, err);
}

/* The next batch, going on into the next epoch when one ends (the reset is timed with it). */
static int t2_next(pb_loader *ld, int64_t *epoch, pb_batch **b, struct pb_error *err) {
  int rc = pb_loader_next(ld, b, err);
  if (rc == PB_OK && *b == NULL) {
    rc = pb_loader_reset(ld, (*epoch)++, err);
    if (rc == PB_OK) rc = pb_loader_next(ld, b, err);
  }
  return rc;
}

/* Pilot: the batches after the first, timed one by one and kept out of the window, set how
 * many batches each timed interval holds (a prefetched batch is a sub-microsecond queue pop;
 * groups keep the timer under 1% of every interval). */
static int t2_pilot(pb_loader *ld, int64_t *epoch, t2_round *m, struct pb_error *err) {
  int64_t n_pilot = 2 * m->capacity < 16 ? 16 : 2 * m->capacity;
  double pilot[T2_MAX_PILOT];
  if (n_pilot > T2_MAX_PILOT) n_pilot = T2_MAX_PILOT;
  int rc = PB_OK;
  for (int64_t k = 0; k < n_pilot && rc == PB_OK; k++) {
    pb_batch *b = NULL;
    int64_t a = pb_now_ns();
    rc = t2_next(ld, epoch, &b, err);
    pilot[k] = (double)(pb_now_ns() - a) / 1e9;
    if (b == NULL && rc == PB_OK)
      rc = pb_error_set(err, PB_EFORMAT, "the loader gave no batch after a reset");
    pb_batch_free(b);
  }
  m->n_pilot = n_pilot;
  if (rc == PB_OK) pb__window_pilot(&m->w, pilot, (size_t)n_pilot);
  return rc;
}

/* The steady window: at least want batches and window_ms long, whole groups only. */
static int t2_steady(pb_run_ctx *c, pb_loader *ld, int64_t *epoch, int64_t want, t2_round *m,
                     struct pb_error *err) {
  pb__window *w = &m->w;
  int rc = PB_OK;
  int64_t steady0 = pb_now_ns();
  /* Also long enough in time: a window of a few milliseconds cannot show how workers scale. */
  int64_t min_ns = (int64_t)(c->p.window_ms * 1e6);
  while (!pb__window_opens(w) || w->items < want ||
         (pb_now_ns() - steady0 < min_ns && w->items < 10000000)) {
    pb_batch *b = NULL;
    int64_t a = pb__window_opens(w) ? pb_now_ns() : 0;
    rc = t2_next(ld, epoch, &b, err);
    if (rc != PB_OK || b == NULL) break;
    int64_t z = pb__window_closes(w) ? pb_now_ns() : 0;
    int ev = pb__window_add(w, a, z, err);
    if (ev == PB__WINDOW_RESTART) {
      m->samples = m->bytes = 0;
      memset(&m->sum, 0, sizeof m->sum);
      pb_batch_free(b);
      steady0 = pb_now_ns();
      continue;
    }
    if (ev < 0) {
      pb_batch_free(b);
      rc = ev;
      break;
    }
    m->samples += b->shape[0];
    m->bytes += (int64_t)b->nbytes;
    m->sum.read_ns += b->times.read_ns;
    m->sum.decompress_ns += b->times.decompress_ns;
    m->sum.decode_ns += b->times.decode_ns;
    m->sum.convert_ns += b->times.convert_ns;
    m->sum.collate_ns += b->times.collate_ns;
    m->sum.bytes_read += b->times.bytes_read;
    pb_batch_free(b);
  }
  m->steady = (double)(pb_now_ns() - steady0) / 1e9;
  return rc;
}

/* The row of one round; returns its samples per second. */
static double t2_row(pb_run_ctx *c, pb_table *t, const t2_config *cf, const pb_loader_params *lp,
                     const t2_round *m, const pb_summary *s) {
  const pb__window *w = &m->w;
  pb__row_common(c, t, c->formats[cf->fi], cf->r);
  pb_table_set_str(t, T2_LOADER, "pipebench");
  pb_table_set_str(t, T2_CACHE, cache_names[cf->cache]);
  pb_table_set_i64(t, T2_BATCH_SIZE, cf->bs);
  pb_table_set_i64(t, T2_NUM_WORKERS, cf->workers);
  pb_table_set_i64(t, "prefetch", lp->prefetch);
  pb_table_set_str(t, "transform", "normalize");
  pb_table_set_f64(t, T2_FIRST_BATCH_TIME, m->first);
  pb_table_set_i64(t, "num_batches", w->items);
  pb_table_set_i64(t, PB__COL_NUM_INTERVALS, (int64_t)w->n);
  pb_table_set_i64(t, PB__COL_TIMER_GROUP, w->g);
  pb_table_set_i64(t, "pilot_batches", m->n_pilot);
  pb_table_set_i64(t, PB__COL_TIMER_REGROUPS, w->regroups);
  pb_table_set_i64(t, "queue_capacity", m->capacity);
  pb__add_summary_columns(t, s, T2_SUMMARY_PREFIX);
  double steady = m->steady;
  double sps = steady > 0 ? (double)m->samples / steady : NAN;
  double mbps = steady > 0 ? (double)m->bytes / steady / 1e6 : NAN;
  pb_table_set_f64(t, T2_SAMPLES_PER_SEC, sps);
  pb_table_set_f64(t, T2_MB_PER_SEC, mbps);
  pb_table_set_f64(t, T2_MEMCPY_FRACTION, mbps / 1e3 / c->cal.memcpy_mt_gbps.value);
  pb_table_set_f64(t, "bytes_read_per_sec", steady > 0 ? (double)m->sum.bytes_read / steady : NAN);
  pb_table_set_f64(t, "read_s", (double)m->sum.read_ns / 1e9);
  pb_table_set_f64(t, "decompress_s", (double)m->sum.decompress_ns / 1e9);
  pb_table_set_f64(t, "decode_s", (double)m->sum.decode_ns / 1e9);
  pb_table_set_f64(t, "convert_s", (double)m->sum.convert_ns / 1e9);
  pb_table_set_f64(t, "collate_s", (double)m->sum.collate_ns / 1e9);
  pb_table_set_f64(t, "preload_s", (double)m->st0.preload_ns / 1e9);
  pb_table_set_i64(t, "preload_bytes", m->st0.preload_bytes);
  double tof = pb__window_timer_fraction(w, s);
  pb_table_set_f64(t, PB__COL_TIMER_OVERHEAD_FRACTION, tof);
  pb_table_set_bool(t, PB__COL_TIMER_LIMITED, tof > 0.01);
  return sps;
}

/* One round (repeat cf->r) of one configuration: a fresh loader, its first batch, a pilot, the
 * steady window. Rounds of all configurations are interleaved by the caller. */
static int t2_measure(pb_run_ctx *c, pb_table *t, const t2_config *cf, size_t room, t2_best *best,
                      struct pb_error *err) {
  pb_loader_params lp;
  char cache_path[4200];
  pb_loader *ld = NULL;
  PB_RETURN_NOT_OK(t2_open(c, cf, &lp, cache_path, sizeof cache_path, &ld, err));
  t2_round m = {0};
  pb_loader_get_stats(ld, &m.st0);
  /* The steady window must be long next to what the workers can hold ready: batches sitting
   * in the prefetch queue when the first one arrives cost the consumer nothing, and a window
   * they cover would time queue pops, not loading. So it is at least 8 queue-fulls long, and
   * runs on across epochs (the reset between them is timed too, as a training loop sees it). */
  m.capacity = (int64_t)lp.prefetch * (lp.workers > 0 ? lp.workers : 1);
  int64_t want = c->p.batches;
  if (want < 8 * m.capacity) want = 8 * m.capacity;
  int64_t epoch = 0;
  int rc = pb__window_init(&m.w, c->cal.timer_overhead_ns, T2_MAX_GROUP, room, err);
  if (rc == PB_OK && c->p.cold) {
    int e = pb_evict_path(c->paths[cf->fi], err);
    if (e < 0) rc = e;
  }
  if (rc == PB_OK) {
    int64_t t0 = pb_now_ns();
    pb_batch *b = NULL;
    rc = pb_loader_reset(ld, epoch++, err);
    if (rc == PB_OK) rc = pb_loader_next(ld, &b, err);
    m.first = (double)(pb_now_ns() - t0) / 1e9;
    pb_batch_free(b);
  }
  if (rc == PB_OK) rc = t2_pilot(ld, &epoch, &m, err);
  if (rc == PB_OK) rc = t2_steady(c, ld, &epoch, want, &m, err);
  pb_summary s;
  if (rc == PB_OK) rc = pb__window_summarize(&m.w, &s);
  if (rc == PB_OK) {
    double sps = t2_row(c, t, cf, &lp, &m, &s);
    if (cf->cache == PB_CACHE_NONE && isfinite(sps) && (best->format[0] == '\0' || sps > best->sps)) {
      best->sps = sps;
      best->bs = cf->bs;
      best->workers = cf->workers;
      snprintf(best->format, sizeof best->format, "%s", c->formats[cf->fi]);
    }
  }
  pb__window_destroy(&m.w);
  pb_loader_free(ld);
  if (rc != PB_OK) pb_error_prefix(err, "track 2, %s: ", c->formats[cf->fi]);
  return rc;
}

static int t2_validate(const pb_run_params *p, struct pb_error *err) {
  static const char *const caches[] = {"none", "preload", "shared", NULL};
  int v[64];
  PB_RETURN_NOT_OK(pb__check_names(p->caches, "cache mode", caches, err));
  int rc = pb__parse_int_list(p->batch_sizes, v, 64, 1, 65536, "batch sizes", err);
  if (rc < 0) return rc;
  rc = pb__parse_int_list(p->workers, v, 64, 0, 256, "workers", err);
  return rc < 0 ? rc : PB_OK;
}

static int t2_run(pb_run_ctx *c, struct pb_error *err) {
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
  size_t room = (size_t)c->p.batches > (size_t)16 * (size_t)maxw ? (size_t)c->p.batches : (size_t)16 * (size_t)maxw;
  room += 1;
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
            t2_config cf = {fi, caches[k], bss[b], ws[w], r};
            rc = t2_measure(c, t, &cf, room, &best, err);
          }
  if (rc == PB_OK && c->p.peer) rc = pb__track2_peer(c, t, bss, nb, ws, nw, err);
  if (rc == PB_OK) rc = pb__write_table(c, t, "pipebench_track2.parquet", err);
  if (rc == PB_OK) {
    cJSON *s = pb__run_summary(c, "2");
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

/* ---- the descriptor -------------------------------------------------------------------------- */

static const char *const t2_options[] = {"repeats", "batches", "window_ms", "batch_sizes", "workers", "caches", "peer", "python",
                                       "cold", "seed", NULL};

const pb__track pb__track2 = {
    .name = "loader throughput",
    .options = t2_options,
    .validate = t2_validate,
    .measure = t2_run,
    .view = {.id = "2", .title = "Track 2: loader throughput", .table = "pipebench_track2", .schema = t2_schema,
             .plot_needs = T2_BATCH_SIZE},
};
