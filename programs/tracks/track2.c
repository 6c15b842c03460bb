/* Track 2: loader throughput. Batches over batch sizes x workers x cache modes; the first
 * batch (start-up) is reported on its own, steady state from the second batch on. A batch's
 * time runs from asking the loader for it to holding it, complete, in memory. */
#include <math.h>
#include <plplot.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/plot_kit.h"
#include "tracks/ranks.h"
#include "tracks/track2.h"
#include "tracks/track_lance.h"
#include "tracks/tracks.h"
#include "pipebench/sys.h"
#include "pipebench/loader.h"

static const char *const cache_names[] = {"none", "preload", "shared"};

enum { T2_MAX_PILOT = 1024, T2_MAX_GROUP = 4096 };

/* ---- schema ---------------------------------------------------------------------------------- */

/* the column names are in tracks/track2.h */

static const char *const t2_schema[] = {
    PB__COMMON_COLUMNS, T2_LOADER, T2_CACHE, T2_BATCH_SIZE, T2_NUM_WORKERS, "prefetch",
    "reads_in_flight", "transform", T2_FIRST_BATCH_TIME, "num_batches", PB__COL_NUM_INTERVALS, PB__COL_TIMER_GROUP,
    "pilot_batches", PB__COL_TIMER_REGROUPS, "queue_capacity",
    PB__SUMMARY_COLUMNS(T2_SUMMARY_PREFIX), T2_SAMPLES_PER_SEC, T2_MB_PER_SEC,
    T2_MEMCPY_FRACTION, "bytes_read_per_sec", "read_s", "decompress_s", "decode_s", "convert_s",
    "collate_s", "preload_s", "preload_bytes", PB__COL_TIMER_OVERHEAD_FRACTION,
    PB__COL_TIMER_LIMITED, "peer_version", T2_OVER_PEER, PB__RANK_COLUMNS, PB__COL_ENGINE,
    PB__IO_COLUMNS, T2_DECODE, NULL};

/* ---- measuring ------------------------------------------------------------------------------- */

/* The best configuration of cache none from the table (see t2_fastest). */
static int t2_headline(const pb_table *t, char *format, size_t size, double *sps, int64_t *bs,
                       int64_t *workers);

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
  pb__io_round io; /* storage requests during the steady window */
  int reads_in_flight;   /* the loader's sample reads in flight at most */
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
  lp->rank = pb__ranks_rank(); /* each rank loads its shard of every epoch */
  lp->world_size = pb__ranks_size();
  lp->transform = PB_TRANSFORM_NORMALIZE;
  lp->cache = (pb_cache_mode)cf->cache;
  lp->reads_in_flight = c->p.reads_in_flight;
  lp->bytes_in_flight = c->p.bytes_in_flight;
  pb__run_loader_crop(c, cf->fi, lp); /* images of different sizes (cache none only) */
  if (cf->cache == PB_CACHE_SHARED) {
    /* One shared cache file per format, reused by every configuration (that is its point). */
    snprintf(cache_path, cache_size, "%s/cache/%s.pbraw", c->p.out, c->formats[cf->fi]);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/cache", c->p.out);
    struct pb_error e2;
    pb_mkdirs(dir, &e2);
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
  pb__io_round_start(&m->io);
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
      pb__io_round_start(&m->io);
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
  pb__io_round_end(&m->io);
  return rc;
}

/* The row of one round; returns its samples per second. */
static double t2_row(pb_run_ctx *c, pb_table *t, const t2_config *cf, const pb_loader_params *lp,
                     const t2_round *m, const pb_summary *s) {
  const pb__window *w = &m->w;
  pb__row_common(c, t, c->formats[cf->fi], cf->r);
  pb_table_set_str(t, T2_LOADER, "pipebench");
  pb_table_set_str(t, T2_DECODE, "cpu"); /* the loader's workers */
  pb_table_set_str(t, T2_CACHE, cache_names[cf->cache]);
  pb_table_set_i64(t, T2_BATCH_SIZE, cf->bs);
  pb_table_set_i64(t, T2_NUM_WORKERS, cf->workers);
  pb_table_set_i64(t, "prefetch", lp->prefetch);
  pb_table_set_i64(t, "reads_in_flight", m->reads_in_flight);
  pb_table_set_str(t, "transform", pb__run_transform_name(c, cf->fi, "normalize"));
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
  pb__io_columns(c, t, c->formats[cf->fi], c->paths[cf->fi], m->samples, &m->io);
  return sps;
}

/* Across ranks: m (this rank's round) becomes, on rank 0, the round of all ranks together: their
 * samples, bytes and stage times summed, their intervals pooled, and the common window (from the
 * agree that opened the ranks' steady windows to the one that closed them) as its length. With
 * one rank, m is left as it is. */
static int t2_pool(t2_round *m, double window_s, double **pooled, struct pb_error *err) {
  *pooled = NULL;
  if (pb__ranks_size() == 1) return PB_OK;
  enum { K = 9 };
  int n = pb__ranks_size();
  int64_t mine[K] = {m->samples, m->bytes, m->sum.read_ns, m->sum.decompress_ns,
                     m->sum.decode_ns, m->sum.convert_ns, m->sum.collate_ns, m->sum.bytes_read, m->w.items};
  int64_t *all = malloc((size_t)n * K * sizeof *all);
  int rc = pb__ranks_agree(all != NULL ? PB_OK : pb_error_set(err, PB_ENOMEM, "out of memory"), err);
  if (rc == PB_OK) rc = pb__ranks_allgather_i64(mine, K, all, err);
  size_t total = 0;
  if (rc == PB_OK) rc = pb__ranks_gather_f64(m->w.lat, m->w.n, pooled, &total, err);
  if (rc == PB_OK) {
    int64_t s[K] = {0};
    for (int r = 0; r < n; r++)
      for (int k = 0; k < K; k++) s[k] += all[r * K + k];
    m->samples = s[0], m->bytes = s[1];
    m->sum.read_ns = s[2], m->sum.decompress_ns = s[3], m->sum.decode_ns = s[4];
    m->sum.convert_ns = s[5], m->sum.collate_ns = s[6], m->sum.bytes_read = s[7];
    m->w.items = s[8]; /* batches of every rank */
    m->steady = window_s;
    if (*pooled != NULL) { /* rank 0: the window's summary is over every rank's intervals */
      free(m->w.lat);
      m->w.lat = *pooled;
      m->w.n = m->w.lat_cap = total;
    }
  }
  free(all);
  return rc;
}

/* One round (repeat cf->r) of one configuration: a fresh loader, its first batch, a pilot, the
 * steady window. Rounds of all configurations are interleaved by the caller. */
static int t2_measure(pb_run_ctx *c, pb_table *t, const t2_config *cf, size_t room,
                      struct pb_error *err) {
  pb_loader_params lp;
  char cache_path[4200];
  pb_loader *ld = NULL;
  PB_RETURN_NOT_OK(t2_open(c, cf, &lp, cache_path, sizeof cache_path, &ld, err));
  t2_round m = {0};
  pb_loader_get_stats(ld, &m.st0);
  m.reads_in_flight = pb_loader_reads_in_flight(ld);
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
  /* The ranks' steady windows open together and the common window closes when the last ends;
   * with one rank both agrees return at once. */
  rc = pb__ranks_agree(rc, err);
  int64_t w0 = pb_now_ns();
  if (rc == PB_OK) rc = t2_steady(c, ld, &epoch, want, &m, err);
  rc = pb__ranks_agree(rc, err);
  double window_s = (double)(pb_now_ns() - w0) / 1e9;
  pb__ranks_window rw;
  double *pooled = NULL;
  if (rc == PB_OK) rc = pb__ranks_window_gather(m.samples, m.steady, window_s, &rw, err);
  if (rc == PB_OK) rc = t2_pool(&m, rw.window_s, &pooled, err); /* the ranks' longest window */
  pb_summary s;
  if (rc == PB_OK && pb__ranks_rank() == 0) rc = pb__window_summarize(&m.w, &s);
  if (rc == PB_OK && pb__ranks_rank() == 0) {
    (void)t2_row(c, t, cf, &lp, &m, &s);
    pb__ranks_window_columns(t, &rw);
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
  /* the configurations the loop below measures, counted with its own conditions */
  c->total_steps = 0;
  for (int fi = 0; fi < c->nf; fi++)
    for (int k = 0; k < nc; k++)
      for (int b = 0; b < nb; b++)
        for (int w = 0; w < nw; w++)
          c->total_steps += !(caches[k] != PB_CACHE_NONE && fi > 0 && (b != ref_b || w != ref_w)) &&
                            pb__run_cache_ok(c, fi, caches[k]);
  c->total_steps *= c->p.repeats;
  /* Repeats outermost: every configuration gets one round before any gets a second, so a
   * drift of the machine (clock speed, other load) spreads over all of them alike and ratios
   * between configurations (1 vs 2 workers, say) compare rounds taken side by side. */
  for (int r = 0; r < c->p.repeats && rc == PB_OK; r++)
    for (int fi = 0; fi < c->nf && rc == PB_OK; fi++)
      for (int k = 0; k < nc && rc == PB_OK; k++)
        for (int b = 0; b < nb && rc == PB_OK; b++)
          for (int w = 0; w < nw && rc == PB_OK; w++) {
            if (caches[k] != PB_CACHE_NONE && fi > 0 && (b != ref_b || w != ref_w)) continue;
            if (!pb__run_cache_ok(c, fi, caches[k])) continue; /* a crop reads cache none */
            char what[160];
            snprintf(what, sizeof what, "track 2: %s cache=%s batch=%d workers=%d (round %d of %d)",
                     c->formats[fi], cache_names[caches[k]], bss[b], ws[w], r + 1, c->p.repeats);
            pb__run_progress(c, what);
            t2_config cf = {fi, caches[k], bss[b], ws[w], r};
            rc = t2_measure(c, t, &cf, room, err);
          }
  if (rc == PB_OK && c->p.peer && pb__ranks_size() > 1)
    pb__run_report(c, "track 2: the torch DataLoader peer runs in one process (without mpirun)");
  else if (rc == PB_OK && c->p.peer) rc = pb__track2_peer(c, t, bss, nb, ws, nw, err);
  if (rc == PB_OK && pb__ranks_size() == 1) rc = pb__track_lance(c, t, 2, bss, nb, err); /* in its engine */
  if (pb__ranks_rank() != 0) {
    pb_table_free(t); /* rank 0 writes the table of every rank's measurements */
    return rc;
  }
  if (rc == PB_OK) rc = pb__write_table(c, t, "pipebench_track2.parquet", err);
  if (rc == PB_OK) {
    cJSON *s = pb__run_summary(c, "2");
    cJSON_AddNumberToObject(s, "rows", (double)pb_table_rows(t));
    char format[64];
    double sps;
    int64_t bs, workers;
    if (t2_headline(t, format, sizeof format, &sps, &bs, &workers)) {
      cJSON_AddStringToObject(s, "fastest_bulk_format", format);
      cJSON_AddNumberToObject(s, "fastest_bulk_samples_per_sec", sps);
      cJSON_AddNumberToObject(s, "fastest_bulk_batch_size", (double)bs);
      cJSON_AddNumberToObject(s, "fastest_bulk_workers", (double)workers);
      pb__run_report(c, "track 2: fastest bulk loading from storage: %s, %.0f samples/s at batch size %lld with %lld workers (cache none, median over rounds)",
                     format, sps, (long long)bs, (long long)workers);
    }
  }
  pb_table_free(t);
  return rc;
}

/* ---- the report: plot, answer, section ------------------------------------------------------ */

static const char *const peer_loader = "torch-dataloader";

/* What the panels of the plot share. */
typedef struct t2_plotdata {
  const pb_table *t;
  const char *formats[PB__RP_MAX_DISTINCT], *caches[4];
  int nf, nc, nb, nw, have_peer;
  const char *lines[4]; /* loaders drawn as lines: pipebench, then every other one (dashed) */
  int nlines;
  int64_t bss[32], ws[32];
  int ref;         /* the batch size nearest 16 */
  double ya, yb;   /* samples/s axis, log10 */
  double flo, fhi; /* first batch times, seconds */
} t2_plotdata;

/* Samples/s against batch size, a line per worker count (dashed: the peer). */
static void t2_draw_format(pb__plot_layout *L, const t2_plotdata *P, int f) {
  char bl[32][16];
  const char *blp[32];
  for (int b = 0; b < P->nb; b++) {
    snprintf(bl[b], sizeof bl[b], "%lld", (long long)P->bss[b]);
    blp[b] = bl[b];
  }
  char title[128];
  snprintf(title, sizeof title, "%s, cache none", P->formats[f]);
  uint32_t col = pb__report_format_color(P->formats[f]);
  pb__plot_panel(L, f, -0.3, P->nb - 0.7, P->ya, P->yb, 1, title, "batch size", "samples/s", blp, P->nb, NULL);
  for (int pass = 0; pass < P->nlines; pass++) {
    const char *loader = P->lines[pass];
    for (int w = 0; w < P->nw; w++) {
      PLFLT x[32], y[32];
      int n = 0;
      for (int b = 0; b < P->nb; b++) {
        pb__report_filter fl[5] = {{PB__COL_FORMAT, P->formats[f], 0}, {T2_LOADER, loader, 0}, {T2_CACHE, "none", 0},
                               {T2_BATCH_SIZE, NULL, P->bss[b]}, {T2_NUM_WORKERS, NULL, P->ws[w]}};
        double v = pb__report_median(P->t, T2_SAMPLES_PER_SEC, fl, 5, NULL);
        if (v > 0) {
          x[n] = b;
          y[n++] = pb__plot_lg(v);
        }
      }
      if (n == 0) continue;
      uint32_t c = pb__plot_tint(col, 0.45 * w / (P->nw > 1 ? P->nw - 1 : 1));
      pb__plot_color(c);
      plwidth(4);
      if (pass) { /* each other loader its own dash */
        PLINT mark = 3000 / pass, space = 2000;
        plstyl(1, &mark, &space);
      }
      plline(n, x, y);
      plstyl(0, NULL, NULL);
      for (int k = 0; k < n; k++) pb__plot_marker(L, x[k], y[k], w, 2.2, c, !pass);
    }
  }
}

/* First batch (start-up) at the reference batch size, per worker count. */
static void t2_draw_first(pb__plot_layout *L, const t2_plotdata *P) {
  const pb_table *t = P->t;
  int nf = P->nf, nw = P->nw, ref = P->ref;
  const char *unit;
  double us = pb__plot_time_unit(pb__report_median(t, T2_FIRST_BATCH_TIME, NULL, 0, NULL), &unit);
  double fa, fb;
  pb__plot_log_range(P->flo * us, P->fhi * us, &fa, &fb);
  char wl[32][16];
  const char *wlp[32];
  for (int w = 0; w < nw; w++) {
    snprintf(wl[w], sizeof wl[w], "%lld", (long long)P->ws[w]);
    wlp[w] = wl[w];
  }
  char title[128], ylab[64];
  snprintf(title, sizeof title, "first batch time, batch %lld", P->nb ? (long long)P->bss[ref] : 0LL);
  snprintf(ylab, sizeof ylab, "first batch time (%s)", unit);
  if (!(P->nb > 0 && P->fhi > 0)) {
    pb__plot_no_data(L, nf, title, "no first-batch times");
    return;
  }
  pb__plot_panel(L, nf, -0.5, nw - 0.5, fa, fb, 1, title, "worker threads", ylab, wlp, nw, NULL);
  int nbar = nf * (P->have_peer ? 2 : 1);
  double gw = 0.84, bw = gw / (nbar > 0 ? nbar : 1);
  for (int w = 0; w < nw; w++) {
    int slot = 0;
    for (int f = 0; f < nf; f++)
      for (int pass = 0; pass < (P->have_peer ? 2 : 1); pass++, slot++) {
        pb__report_filter fl[5] = {{PB__COL_FORMAT, P->formats[f], 0}, {T2_LOADER, pass ? peer_loader : "pipebench", 0},
                               {T2_CACHE, "none", 0}, {T2_BATCH_SIZE, NULL, P->bss[ref]}, {T2_NUM_WORKERS, NULL, P->ws[w]}};
        double v = pb__report_median(t, T2_FIRST_BATCH_TIME, fl, 5, NULL) * us;
        if (!(v > 0)) continue;
        double x0 = w - gw / 2 + slot * bw;
        pb__plot_rect(x0 + 0.06 * bw, x0 + 0.94 * bw, fa, pb__plot_lg(v), pb__report_format_color(P->formats[f]), pass);
      }
  }
}

/* Cache modes at the configuration every format has. */
static void t2_draw_caches(pb__plot_layout *L, const t2_plotdata *P) {
  int nf = P->nf, nc = P->nc, nb = P->nb, nw = P->nw, ref = P->ref;
  int refw = 0;
  for (int w = 0; w < nw; w++)
    if (llabs(P->ws[w] - 2) < llabs(P->ws[refw] - 2)) refw = w;
  char title[128];
  snprintf(title, sizeof title, "cache modes, batch %lld, %lld worker%s", nb ? (long long)P->bss[ref] : 0LL,
           nw ? (long long)P->ws[refw] : 0LL, nw && P->ws[refw] == 1 ? "" : "s");
  if (!(nc > 0 && nb > 0 && nw > 0)) return;
  pb__plot_panel(L, nf + 1, -0.5, nc - 0.5, P->ya, P->yb, 1, title, "cache mode", "samples/s", P->caches, nc, NULL);
  double gw = 0.8, bw = gw / (nf > 0 ? nf : 1);
  for (int c = 0; c < nc; c++)
    for (int f = 0; f < nf; f++) {
      pb__report_filter fl[5] = {{PB__COL_FORMAT, P->formats[f], 0}, {T2_LOADER, "pipebench", 0}, {T2_CACHE, P->caches[c], 0},
                             {T2_BATCH_SIZE, NULL, P->bss[ref]}, {T2_NUM_WORKERS, NULL, P->ws[refw]}};
      double v = pb__report_median(P->t, T2_SAMPLES_PER_SEC, fl, 5, NULL);
      if (!(v > 0)) continue;
      double x0 = c - gw / 2 + f * bw;
      pb__plot_rect(x0 + 0.08 * bw, x0 + 0.92 * bw, P->ya, pb__plot_lg(v), pb__report_format_color(P->formats[f]), 0);
    }
}

static void t2_draw(const void *ctx, pb__plot_page *pg) {
  t2_plotdata P = {.t = ctx};
  const pb_table *t = P.t;
  pb__report_filter own = {T2_LOADER, "pipebench", 0};
  P.nf = pb__report_distinct_str(t, PB__COL_FORMAT, &own, 1, P.formats, PB__RP_MAX_DISTINCT);
  P.nc = pb__report_distinct_str(t, T2_CACHE, &own, 1, P.caches, 4);
  P.nb = pb__report_distinct_i64(t, T2_BATCH_SIZE, NULL, 0, P.bss, 32);
  P.nw = pb__report_distinct_i64(t, T2_NUM_WORKERS, NULL, 0, P.ws, 32);
  P.have_peer = pb__report_distinct_str(t, T2_LOADER, &(pb__report_filter){T2_LOADER, peer_loader, 0}, 1,
                                    (const char *[1]){0}, 1) > 0;
  const char *loaders[PB__RP_MAX_DISTINCT];
  int nl = pb__report_distinct_str(t, T2_LOADER, NULL, 0, loaders, PB__RP_MAX_DISTINCT);
  P.lines[P.nlines++] = "pipebench";
  for (int i = 0; i < nl && P.nlines < 4; i++)
    if (strcmp(loaders[i], "pipebench") != 0) P.lines[P.nlines++] = loaders[i];
  double lo = INFINITY, hi = 0;
  P.flo = INFINITY;
  for (size_t r = 0; r < pb_table_rows(t); r++) {
    double v = pb__report_f64(t, r, T2_SAMPLES_PER_SEC), fb = pb__report_f64(t, r, T2_FIRST_BATCH_TIME);
    if (v > 0 && v < lo) lo = v;
    if (v > hi) hi = v;
    if (fb > 0 && fb < P.flo) P.flo = fb;
    if (fb > P.fhi) P.fhi = fb;
  }
  pb__plot_log_range(lo, hi, &P.ya, &P.yb);
  int npanels = P.nf + 2, cols = npanels < 3 ? npanels : 3;
  pb__plot_layout L = {pg, (npanels + cols - 1) / cols, cols, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  L.top = 1.0 - 4.2 * pb__plot_chr_y(&L, PB__PL_BIG);
  L.bottom = 7.8 * pb__plot_chr_y(&L, PB__PL_TXT); /* room for three lines of legend */
  char sub[256];
  const char *trs[4];
  int ntr = pb__report_distinct_str(t, "transform", NULL, 0, trs, 4);
  int cropped = 0;
  for (int k = 0; k < ntr; k++) cropped |= strcmp(trs[k], "center_crop_resize") == 0;
  snprintf(sub, sizeof sub, "steady state from the second batch; transform normalize%s; page cache %s; first batch: cache none; "
           "medians over rounds", cropped ? " (center_crop_resize where images differ in size)" : "",
           pb__plot_meta_or(t, "pipebench.cache_state", "?"));
  pb__plot_title(&L, "Track 2: loader throughput by batch size and worker threads", sub);
  for (int f = 0; f < P.nf; f++) t2_draw_format(&L, &P, f);
  for (int b = 0; b < P.nb; b++)
    if (llabs(P.bss[b] - 16) < llabs(P.bss[P.ref] - 16)) P.ref = b;
  t2_draw_first(&L, &P);
  t2_draw_caches(&L, &P);
  pb__plot_legend_item ex[20];
  int ne = 0, nw = P.nw;
  char wtext[16][32];
  for (int w = 0; w < nw && w < 12; w++) {
    snprintf(wtext[w], sizeof wtext[w], "%lld worker%s", (long long)P.ws[w], P.ws[w] == 1 ? "" : "s");
    ex[ne++] = (pb__plot_legend_item){2, pb__plot_tint(0x000000, 0.45 * w / (nw > 1 ? nw - 1 : 1)), w, 0, 0, wtext[w]};
  }
  ex[ne++] = (pb__plot_legend_item){2, 0x000000, -1, 0, 0, "pipebench"};
  char ltext[4][96];
  for (int i = 1; i < P.nlines; i++) {
    snprintf(ltext[i], sizeof ltext[i], "%s (dashed line, hollow marker)",
             strcmp(P.lines[i], peer_loader) == 0 ? "torch DataLoader" : P.lines[i]);
    ex[ne++] = (pb__plot_legend_item){2, 0x000000, 0, i, 1, ltext[i]};
  }
  if (P.have_peer) ex[ne++] = (pb__plot_legend_item){1, 0x555555, 0, 0, 0, "torch DataLoader (bar)"};
  pb__plot_format_legend(&L, P.formats, P.nf, ex, ne, 7.0 * pb__plot_chr_y(&L, PB__PL_TXT));
}

/* Draws the table: a panel per format, then first batch and cache modes, three to a row. */
static int t2_plot(const pb_table *t, const char *png, struct pb_error *err) {
  const char *f[PB__RP_MAX_DISTINCT];
  pb__report_filter own = {T2_LOADER, "pipebench", 0};
  int nf = pb__report_distinct_str(t, PB__COL_FORMAT, &own, 1, f, PB__RP_MAX_DISTINCT);
  int rows = (nf + 2 + 2) / 3;
  return pb__plot_png(png, 1800, 520 * rows + 360, t2_draw, t, err);
}

typedef struct best {
  char format[64];
  double value;
  int64_t bs, workers;
  int found;
} best;

static const pb__report_filter f_own = {T2_LOADER, "pipebench", 0};

/* Track 2 rows of pipebench itself (tables without a loader column count as pipebench). */
static int own_filter(const pb_table *t, pb__report_filter *f) {
  if (pb_table_col_index(t, T2_LOADER) < 0) return 0;
  *f = f_own;
  return 1;
}

/* The headline of track 2, from the table alone: per format of pipebench's own rows, the
 * configuration (batch size, workers) of cache none whose median samples/s over rounds is
 * highest, and the best of those in *bi (-1: none). The run's console line,
 * pipebench_summary.json and the report all take it from here, so the three say the same. */
static void t2_fastest(const pb_table *t, const char **formats, int *nf, best *per, int *bi) {
  pb__report_filter own;
  int no = own_filter(t, &own);
  *nf = pb__report_distinct_str(t, PB__COL_FORMAT, &own, no, formats, PB__RP_MAX_DISTINCT);
  int64_t bss[32], ws[32];
  int nb = pb__report_distinct_i64(t, T2_BATCH_SIZE, NULL, 0, bss, 32);
  int nw = pb__report_distinct_i64(t, T2_NUM_WORKERS, NULL, 0, ws, 32);
  *bi = -1;
  for (int f = 0; f < *nf; f++) {
    per[f].found = 0;
    for (int b = 0; b < nb; b++)
      for (int w = 0; w < nw; w++) {
        pb__report_filter fl[5] = {{PB__COL_FORMAT, formats[f], 0}, {T2_CACHE, "none", 0}, {T2_BATCH_SIZE, NULL, bss[b]},
                               {T2_NUM_WORKERS, NULL, ws[w]}, own};
        double v = pb__report_median(t, T2_SAMPLES_PER_SEC, fl, 4 + no, NULL);
        if (isfinite(v) && (!per[f].found || v > per[f].value)) {
          per[f] = (best){"", v, bss[b], ws[w], 1};
          snprintf(per[f].format, sizeof per[f].format, "%s", formats[f]);
        }
      }
    if (per[f].found && (*bi < 0 || per[f].value > per[*bi].value)) *bi = f;
  }
}

static int t2_headline(const pb_table *t, char *format, size_t size, double *sps, int64_t *bs,
                        int64_t *workers) {
  const char *formats[PB__RP_MAX_DISTINCT];
  best per[PB__RP_MAX_DISTINCT];
  int nf, bi;
  t2_fastest(t, formats, &nf, per, &bi);
  if (bi < 0) return 0;
  snprintf(format, size, "%s", formats[bi]);
  *sps = per[bi].value, *bs = per[bi].bs, *workers = per[bi].workers;
  return 1;
}

/* Data at a URL: per format, at its fastest configuration, how many requests the loader kept in
 * flight (the steady window's summed request time over its length) to reach that rate, at the
 * round trip this run measured to the endpoint. */
static void t2_answer_remote(pb__report_doc *d, const pb_table *t, const char **formats, int nf,
                             const best *per) {
  if (pb_table_col_index(t, PB__COL_IN_FLIGHT) < 0) return;
  pb__report_filter own;
  int no = own_filter(t, &own);
  char text[1024] = "";
  double rtt = NAN, mbps = NAN;
  const char *kind = NULL;
  for (int f = 0; f < nf; f++) {
    if (!per[f].found) continue;
    pb__report_filter fl[5] = {{PB__COL_FORMAT, formats[f], 0}, {T2_CACHE, "none", 0},
                               {T2_BATCH_SIZE, NULL, per[f].bs},
                               {T2_NUM_WORKERS, NULL, per[f].workers}, own};
    double in = pb__report_median(t, PB__COL_IN_FLIGHT, fl, 4 + no, NULL);
    double rpi = pb__report_median(t, PB__COL_REQUESTS_PER_IMAGE, fl, 4 + no, NULL);
    if (!isfinite(in)) continue;
    if (!isfinite(rtt)) {
      rtt = pb__report_median(t, PB__COL_ENDPOINT_RTT, fl, 4 + no, NULL);
      mbps = pb__report_median(t, PB__COL_ENDPOINT_MBPS, fl, 4 + no, NULL);
      const char *k[2];
      if (pb__report_distinct_str(t, PB__COL_ENDPOINT, fl, 4 + no, k, 2) == 1) kind = k[0];
    }
    size_t u = strlen(text);
    snprintf(text + u, sizeof text - u, "%s**%s needs %.0f requests in flight to reach %.0f "
             "images/s** (%.2f requests per image; batch size %lld, %lld workers)",
             u ? "; " : "", formats[f], in, per[f].value, rpi, (long long)per[f].bs,
             (long long)per[f].workers);
  }
  if (text[0] == '\0') return;
  char at[256] = "";
  if (isfinite(rtt) && isfinite(mbps))
    snprintf(at, sizeof at, "at a %.1f ms round trip and %.0f MB/s many-stream bandwidth", rtt,
             mbps);
  else if (isfinite(rtt))
    snprintf(at, sizeof at, "at a %.1f ms round trip", rtt);
  else
    snprintf(at, sizeof at, "over the network");
  pb__report_li(d, "**Remote data** (%s, %s, both measured by this run): %s. Requests in flight "
                "are the mean over the steady window (summed request time / the window's "
                "length); with N in flight a loader gets at most N / (round trip x requests per image) "
                "images/s.",
                kind ? kind : "remote", at, text);
}

static void t2_answer(pb__report_doc *d, const pb_table *t, const cJSON *sum) {
  if (t == NULL) {
    pb__report_li(d, "Bulk loading: not measured here (no track 2 table).");
    return;
  }
  pb__report_filter own;
  int no = own_filter(t, &own);
  const char *formats[PB__RP_MAX_DISTINCT];
  best per[PB__RP_MAX_DISTINCT];
  int nf, bi;
  t2_fastest(t, formats, &nf, per, &bi);
  if (bi < 0) {
    pb__report_li(d, "Bulk loading: track 2 has no row with cache none.");
    return;
  }
  char others[512] = "";
  for (int f = 0; f < nf; f++) {
    if (f == bi || !per[f].found) continue;
    size_t u = strlen(others);
    snprintf(others + u, sizeof others - u, "%s%s %.0f samples/s", u ? ", " : "; best of the others: ", formats[f], per[f].value);
  }
  pb__report_filter fl[5] = {{PB__COL_FORMAT, formats[bi], 0}, {T2_CACHE, "none", 0}, {T2_BATCH_SIZE, NULL, per[bi].bs},
                         {T2_NUM_WORKERS, NULL, per[bi].workers}, own};
  double mbps = pb__report_median(t, T2_MB_PER_SEC, fl, 4 + no, NULL);
  double frac = pb__report_median(t, T2_MEMCPY_FRACTION, fl, 4 + no, NULL);
  double lim = pb__report_json_num(sum, "calibration", "memcpy_mt_gbps");
  char lim_text[512] = "";
  if (isfinite(frac) && isfinite(mbps))
    snprintf(lim_text, sizeof lim_text, " It delivers %.2f GB/s of float tensors, %.0f%% of the memory-copy limit measured in the same run (%.2f GB/s, all cores)%s",
             mbps / 1e3, 100 * frac, lim,
             frac > 1.0 ? ": more than main memory can copy, so the working set (the data and "
                          "the recycled batch buffers) is served from the CPU caches; a dataset "
                          "larger than the caches (--preset microscopy) shows the memory-bound rate."
                        : ".");
  pb__report_li(d, "**Fastest format for bulk loading: %s** (track 2, cache none): %.0f samples/s at batch size %lld with %lld workers%s.%s",
         formats[bi], per[bi].value, (long long)per[bi].bs, (long long)per[bi].workers, others, lim_text);
  t2_answer_remote(d, t, formats, nf, per);
}

static void t2_answer_peer(pb__report_doc *d, const pb_table *t2) {
  char text[1024] = "";
  const char *formats[PB__RP_MAX_DISTINCT];
  pb__report_filter peer = {T2_LOADER, "torch-dataloader", 0};
  int nf = t2 ? pb__report_distinct_str(t2, PB__COL_FORMAT, &peer, 1, formats, PB__RP_MAX_DISTINCT) : 0;
  for (int f = 0; f < nf; f++) {
    pb__report_filter fl[3] = {{PB__COL_FORMAT, formats[f], 0}, peer, {T2_CACHE, "none", 0}};
    int n = 0;
    double r = pb__report_median(t2, T2_OVER_PEER, fl, 3, &n);
    if (!isfinite(r)) continue;
    size_t u = strlen(text);
    snprintf(text + u, sizeof text - u, "%s%s %.1fx", u ? ", " : "", formats[f], r);
  }
  if (text[0])
    pb__report_li(d, "pipebench against the torch DataLoader peer over the same files (track 2, cache none, median ratio of samples/s over matched batch sizes and workers): %s.",
           text);
}

static void t2_section(pb__report_doc *d, const pb_table *t, char (*cells)[64]) {
  pb__report_p(d, "Batches from the loader over batch sizes, worker threads and cache modes; steady state from the second batch. Per format, loader and cache mode the best configuration; medians over rounds.");
  static const char *const head[] = {PB__COL_FORMAT, T2_LOADER, T2_CACHE, "best samples/s", "batch", "workers", "first batch", "memcpy limit", "unstable rounds"};
  int nc = 9, n = 0;
  for (int c = 0; c < nc; c++) snprintf(cells[n++], 64, "%s", head[c]);
  const char *formats[PB__RP_MAX_DISTINCT], *caches[4], *loaders[4];
  int nf = pb__report_distinct_str(t, PB__COL_FORMAT, NULL, 0, formats, PB__RP_MAX_DISTINCT);
  int ncache = pb__report_distinct_str(t, T2_CACHE, NULL, 0, caches, 4);
  int nl = pb__report_distinct_str(t, T2_LOADER, NULL, 0, loaders, 4);
  if (nl == 0) loaders[nl++] = NULL;
  int64_t bss[32], ws[32];
  int nb = pb__report_distinct_i64(t, T2_BATCH_SIZE, NULL, 0, bss, 32);
  int nw = pb__report_distinct_i64(t, T2_NUM_WORKERS, NULL, 0, ws, 32);
  for (int f = 0; f < nf; f++)
    for (int l = 0; l < nl; l++)
      for (int c = 0; c < ncache && n + nc <= PB__RP_MAXCELLS; c++) {
        double bv = NAN;
        int bb = 0, bw = 0;
        for (int b = 0; b < nb; b++)
          for (int w = 0; w < nw; w++) {
            pb__report_filter fl[5] = {{PB__COL_FORMAT, formats[f], 0}, {T2_CACHE, caches[c], 0}, {T2_BATCH_SIZE, NULL, bss[b]},
                                   {T2_NUM_WORKERS, NULL, ws[w]}, {T2_LOADER, loaders[l], 0}};
            double v = pb__report_median(t, T2_SAMPLES_PER_SEC, fl, loaders[l] ? 5 : 4, NULL);
            if (isfinite(v) && !(v <= bv)) {
              bv = v;
              bb = b;
              bw = w;
            }
          }
        if (!isfinite(bv)) continue;
        pb__report_filter fl[5] = {{PB__COL_FORMAT, formats[f], 0}, {T2_CACHE, caches[c], 0}, {T2_BATCH_SIZE, NULL, bss[bb]},
                               {T2_NUM_WORKERS, NULL, ws[bw]}, {T2_LOADER, loaders[l], 0}};
        int nfl = loaders[l] ? 5 : 4, rounds = 0;
        pb__report_median(t, T2_SAMPLES_PER_SEC, fl, nfl, &rounds);
        snprintf(cells[n++], 64, "%s", formats[f]);
        snprintf(cells[n++], 64, "%s", loaders[l] ? loaders[l] : "pipebench");
        snprintf(cells[n++], 64, "%s", caches[c]);
        pb__report_fmt_num(bv, cells[n++], 64);
        snprintf(cells[n++], 64, "%lld", (long long)bss[bb]);
        snprintf(cells[n++], 64, "%lld", (long long)ws[bw]);
        pb__report_fmt_time(pb__report_median(t, T2_FIRST_BATCH_TIME, fl, nfl, NULL), cells[n++], 64);
        double fr = pb__report_median(t, T2_MEMCPY_FRACTION, fl, nfl, NULL);
        if (isfinite(fr)) snprintf(cells[n++], 64, "%.1f%%", 100 * fr);
        else snprintf(cells[n++], 64, "-");
        snprintf(cells[n++], 64, "%d/%d", pb__report_count_true(t, T2_SUMMARY_PREFIX PB__SUM_UNSTABLE, fl, nfl), rounds);
      }
  pb__report_table(d, cells, n / nc, nc);
}

/* ---- the descriptor -------------------------------------------------------------------------- */

static const char *const t2_round_keys[] = {T2_LOADER, PB__COL_FORMAT, T2_CACHE, T2_BATCH_SIZE, T2_NUM_WORKERS, PB__COL_CACHE_STATE, NULL};

static const char *const t2_options[] = {"repeats", "batches", "window_ms", "batch_sizes", "workers", "caches",
                                         "peer",    "python",  "cold",      "seed", "reads_in_flight",
                                         "bytes_in_flight", NULL};

const pb__track pb__track2 = {
    .name = "loader throughput",
    .options = t2_options,
    .validate = t2_validate,
    .measure = t2_run,
    .view = {
        .id = "2",
        .title = "Track 2: loader throughput",
        .table = "pipebench_track2",
        .schema = t2_schema,
        .plot_needs = T2_SAMPLES_PER_SEC,
        .plot = t2_plot,
        .answer = t2_answer,
        .answer_peer = t2_answer_peer,
        .section = t2_section,
        .round_keys = t2_round_keys,
        .round_metric = T2_SAMPLES_PER_SEC,
        .round_what = "samples/s",
    },
};
