/* The timing harness of pipebench run: the state a run shares with its tracks, the timed window
 * (pilot -> timer group -> regroup) that turns items into per-item interval times, and the
 * helpers that make a track's rows and tables. Tracks call these; they never call run.c.
 *
 * Every per-interval time a track keeps goes through a pb__window: that is the one place where
 * raw timings live before they are summarised (and where a reduction over ranks would go). */
#ifndef PB_HARNESS_H
#define PB_HARNESS_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "pipebench/bench.h"
#include "pipebench/calibrate.h"
#include "pipebench/loader.h"
#include "pipebench/results.h"
#include "pipebench/stats.h"

#define PB_RUN_MAX_FORMATS 16

/** What a run knows while its tracks measure: the settings, the machine, the formats. */
typedef struct pb_run_ctx {
  pb_run_params p; /**< p.out is the run's staging folder while the tracks measure */
  char out[4096];  /**< the results folder the user named (what messages show) */
  char stage[4096]; /**< the staging folder inside out ("" before it exists) */
  char phase[64];   /**< what the run is doing (the failed summary says where it stopped) */
  char track[16];   /**< the track measuring now ("" between tracks) */
  char done_tracks[64]; /**< tracks finished, "1,2" */
  /** this run's id ("20261127T155908Z-<16 hex digits>"): in every table's metadata
   * (pipebench.run_id), the summary and the report, so that files of two runs are told apart */
  char run_id[48];
  int have_env, have_cal;
  /** "wrote ..." lines of files made in the staging folder, said once they are in place
   * (pb__run_written); lines end in '\n' */
  char written[4096];
  pb_env env;
  pb_calibration cal;
  /** the saved calibration the run takes instead of measuring (pb_run_params.calibration, else
   * PIPEBENCH_CALIBRATION), or NULL */
  const char *cal_path;
  char data_dir[4096];
  int nf;
  char formats[PB_RUN_MAX_FORMATS][32];
  char paths[PB_RUN_MAX_FORMATS][4096];
  /** Where a format's images differ in size (photograph trees): the output side of the crop
   * the tracks read them through (pb__run_loader_crop); 0 where they share one size. */
  int crop[PB_RUN_MAX_FORMATS];
  cJSON *summary; /**< "tracks" object collects each track's summary */
  long step, total_steps;
  const char *const *schema; /**< columns the measuring track may write (NULL: any) */
} pb_run_ctx;

/* ---- settings and messages ------------------------------------------------------------------ */

/** The crop for images of different sizes: the evaluation transform's 224 x 224 out of the
 * shorter side resized to 256, which every model here takes and which decodes what it needs
 * (docs/format-imagefolder.md, "Images of different sizes"). */
#define PB_RUN_CROP 224
#define PB_RUN_CROP_RESIZE 256
/** Finds, for every format of the run, whether its images differ in height or width only
 * (c->crop), and says so. Reads each image's size once (a JPEG tree: its headers). */
int pb__run_find_crops(pb_run_ctx *c, struct pb_error *err);
/** Loader settings for format fi: unchanged where its images share one size; else the crop
 * (center_crop_resize to PB_RUN_CROP, resize PB_RUN_CROP_RESIZE), which needs cache none. */
void pb__run_loader_crop(const pb_run_ctx *c, int fi, pb_loader_params *lp);
/** Whether format fi can be measured with this cache mode (a crop needs cache none). */
int pb__run_cache_ok(const pb_run_ctx *c, int fi, int cache);
/** The transform a track's rows name for format fi: tr, or center_crop_resize under a crop. */
const char *pb__run_transform_name(const pb_run_ctx *c, int fi, const char *tr);

/** Parses "1,4,16" into v (at most max values in [lo, hi]); returns the count or an error. */
int pb__parse_int_list(const char *text, int *v, int max, int lo, int hi, const char *what,
                       struct pb_error *err);
/** Is word one of the comma-separated items of list? */
int pb__list_has(const char *list, const char *word);
/** Every item of the comma-separated list must be one of names (NULL-terminated); an empty
 * list is an error too. */
int pb__check_names(const char *list, const char *what, const char *const *names,
                    struct pb_error *err);
/** One step of the current track done: tells the progress callback. */
void pb__run_progress(pb_run_ctx *c, const char *what);
/** A line for the user through the report callback. */
void pb__run_report(pb_run_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** Keeps a "wrote FILE" line until the run's set is in place (said then by run.c): a file
 * made in the staging folder is not yet where the line says. */
void pb__run_written(pb_run_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** The track's object in the summary's "tracks" (created on first use; NULL when out of
 * memory). */
cJSON *pb__run_summary(pb_run_ctx *c, const char *track_id);

/** Has a stop been asked for (pb_run_params.cancel, through pb_stop_flag_set)? The signal's
 * number, or 0. Loops that may run for more than a fraction of a second ask it each time round
 * and return pb__run_stop_error when it says yes. */
int pb__run_stopped(void);
/** The error of a stopped run: PB_ECANCELED, "interrupted by SIGINT" (or the signal named). */
int pb__run_stop_error(struct pb_error *err);

/* ---- timer groups --------------------------------------------------------------------------- */

/** How many consecutive items to time as one interval so that the timer (overhead_ns per
 * reading) costs under 1% of every interval: ceil(200 * overhead / shortest pilot interval),
 * within [1, cap] (twice the bound, as a margin). pilot_s holds n single-item times in seconds;
 * n == 0 gives 1. */
int pb__timer_group(double overhead_ns, const double *pilot_s, size_t n, int cap);
/** The larger group for a window restarted because an interval of g items lasted only span_s:
 * what pb__timer_group asks for at span_s / g per item, and at least twice g, within cap. */
int pb__timer_regroup(double overhead_ns, double span_s, int g, int cap);

/* ---- the timed window ----------------------------------------------------------------------- */

/** Items timed in groups of g: one interval per group, its time divided by g kept as the
 * per-item time of that interval. An interval shorter than 100 timer readings restarts the
 * window with a larger group (at most 4 times, up to cap). */
typedef struct pb__window {
  double overhead_ns; /**< one timer reading, ns (from the calibration) */
  double tcost;       /**< the same in seconds */
  int cap;            /**< the largest group */
  int g;              /**< items per interval */
  int regroups;       /**< restarts so far */
  int in_group;       /**< items of the open group */
  int64_t g0;         /**< start of the open group, ns */
  int64_t items;      /**< items added since the window (re)started */
  double *lat;        /**< per-item time of each closed interval, seconds (owned) */
  size_t n, lat_cap;  /**< intervals closed; room in lat */
} pb__window;

/** What pb__window_add did with an item. */
enum {
  PB__WINDOW_ITEM = 0,     /**< counted in the open group */
  PB__WINDOW_INTERVAL = 1, /**< closed an interval */
  PB__WINDOW_RESTART = 2,  /**< closed a too-short interval: the window starts over with a
                                larger group (n and items are 0 again; the caller drops what
                                it summed for this window, this item included) */
};

/** Starts an empty window with groups of 1 and room for room intervals. Free with
 * pb__window_destroy. */
int pb__window_init(pb__window *w, double overhead_ns, int cap, size_t room, struct pb_error *err);
void pb__window_destroy(pb__window *w);
/** Sets the group from a pilot of n single-item times (pb__timer_group). */
void pb__window_pilot(pb__window *w, const double *pilot_s, size_t n);
/** Does the next item open a group (read the clock before asking for it)? */
static inline int pb__window_opens(const pb__window *w) { return w->in_group == 0; }
/** Does the next item close a group (read the clock after holding it)? */
static inline int pb__window_closes(const pb__window *w) { return w->in_group + 1 == w->g; }
/** Closes the open group at end_ns (pb__window_add does this at a group's last item). A stop
 * asked for (pb__run_stopped) makes it return PB_ECANCELED: every timed loop ends within one
 * interval of a signal. */
int pb__window_close(pb__window *w, int64_t end_ns, struct pb_error *err);
/** Adds an item asked for at start_ns and held at end_ns (only start_ns of a group's first
 * item and end_ns of its last are used). Returns a PB__WINDOW_* value, or PB_ENOMEM. Inline:
 * items inside a group are timed with the bookkeeping between them, which stays this small. */
static inline int pb__window_add(pb__window *w, int64_t start_ns, int64_t end_ns,
                                 struct pb_error *err) {
  if (w->in_group == 0) w->g0 = start_ns;
  w->items++;
  if (++w->in_group < w->g) return PB__WINDOW_ITEM;
  return pb__window_close(w, end_ns, err);
}
/** Drops the open group (an untimed pause, such as an epoch reset, fell inside it). */
static inline void pb__window_drop_group(pb__window *w) { w->in_group = 0; }
/** Summary of the window's per-item interval times. */
int pb__window_summarize(const pb__window *w, pb_summary *s);
/** The timer's share of the shortest interval timed (a group of g items); NaN without one. */
double pb__window_timer_fraction(const pb__window *w, const pb_summary *s);

/* ---- rows and tables ------------------------------------------------------------------------ */

/** A new table for a track with the run's metadata. Free with pb_table_free. */
int pb__new_table(pb_run_ctx *c, const char *track, pb_table **out, struct pb_error *err);
/** Appends a row with the columns every row carries (format, cache state, repeat, ...). */
void pb__row_common(pb_run_ctx *c, pb_table *t, const char *format, int repeat);

/* Where the data came from and what it cost in storage requests (tracks 1 and 2): the endpoint
 * kind (file, http, https, s3), requests and bytes fetched per image over the round, the mean
 * requests in flight during it (remote data: summed request durations / the round's time), and
 * the endpoint's round trip and many-stream bandwidth as the run measured them (empty for local
 * data; the bandwidth also where the largest object was under PB__ENDPOINT_MIN_BYTES). The
 * lance format's reads are made inside its engine (the Node helper), which pipebench's counters
 * do not see: its requests, bytes and requests in flight are unknown (NaN), never 0. */
#define PB__COL_ENDPOINT "endpoint"
#define PB__COL_REQUESTS_PER_IMAGE "requests_per_image"
#define PB__COL_FETCHED_PER_IMAGE "fetched_bytes_per_image"
#define PB__COL_IN_FLIGHT "requests_in_flight_mean"
#define PB__COL_ENDPOINT_RTT "endpoint_rtt_ms"
#define PB__COL_ENDPOINT_MBPS "endpoint_mbps"
#define PB__ENDPOINT_MIN_BYTES ((uint64_t)1 << 20)
#define PB__IO_COLUMNS                                                                       \
  PB__COL_ENDPOINT, PB__COL_REQUESTS_PER_IMAGE, PB__COL_FETCHED_PER_IMAGE, PB__COL_IN_FLIGHT, \
      PB__COL_ENDPOINT_RTT, PB__COL_ENDPOINT_MBPS
/* The storage a round used: counters of the I/O layer around it (pb_io_counters,
 * pb_io_request_time) and its length. */
typedef struct pb__io_round {
  int64_t requests, bytes, request_ns, wall_ns;
} pb__io_round;
void pb__io_round_start(pb__io_round *r);
void pb__io_round_end(pb__io_round *r);
void pb__io_columns(const pb_run_ctx *c, pb_table *t, const char *format, const char *path,
                    int64_t images, const pb__io_round *r);
/** Adds p50..max, cv, CI, outliers, unstable, p99_reliable columns (names get prefix). */
void pb__add_summary_columns(pb_table *t, const pb_summary *s, const char *prefix);
/** Writes OUT/data/name and its CSV twin. With c->schema set, every column of t must be one
 * it names: a column outside it is an error (PB_ESTATE) naming it, and nothing is written. */
int pb__write_table(pb_run_ctx *c, pb_table *t, const char *name, struct pb_error *err);
/** Is col one of the NULL-terminated names? */
int pb__schema_has(const char *const *schema, const char *col);

/* ---- column names --------------------------------------------------------------------------- */

/* The columns pb__row_common writes: every track's schema starts with PB__COMMON_COLUMNS. */
#define PB__COL_FORMAT "format"
#define PB__COL_CACHE_STATE "cache_state"
#define PB__COL_REPEAT "repeat"
#define PB__COL_TIMESTAMP "timestamp"
#define PB__COL_GIT_COMMIT "git_commit"
#define PB__COL_HOSTNAME "hostname"
#define PB__COL_SEED "seed"
#define PB__COMMON_COLUMNS                                                                     \
  PB__COL_FORMAT, PB__COL_CACHE_STATE, PB__COL_REPEAT, PB__COL_TIMESTAMP, PB__COL_GIT_COMMIT, \
      PB__COL_HOSTNAME, PB__COL_SEED

/* The columns of a timed window (tracks 1 and 2). */
#define PB__COL_NUM_INTERVALS "num_intervals"
#define PB__COL_TIMER_GROUP "timer_group"
#define PB__COL_TIMER_REGROUPS "timer_regroups"
#define PB__COL_TIMER_OVERHEAD_FRACTION "timer_overhead_fraction"
#define PB__COL_TIMER_LIMITED "timer_limited"

/* The columns pb__add_summary_columns writes after its prefix (a string literal or ""). */
#define PB__SUM_P50 "p50"
#define PB__SUM_P95 "p95"
#define PB__SUM_P99 "p99"
#define PB__SUM_MEAN "mean"
#define PB__SUM_UNSTABLE "unstable"
#define PB__SUMMARY_COLUMNS(prefix)                                                            \
  prefix PB__SUM_P50, prefix PB__SUM_P95, prefix PB__SUM_P99, prefix PB__SUM_MEAN,             \
      prefix "std", prefix "min", prefix "max", prefix "cv", prefix "median_ci_lo",            \
      prefix "median_ci_hi", prefix "n_outliers", prefix PB__SUM_UNSTABLE, prefix "p99_reliable"

#endif
