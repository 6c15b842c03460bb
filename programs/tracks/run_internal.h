/* Internals of pipebench run shared by the track files. */
#ifndef PB_RUN_INTERNAL_H
#define PB_RUN_INTERNAL_H

#include <cjson/cJSON.h>

#include "pipebench/bench.h"
#include "pipebench/calibrate.h"
#include "pipebench/results.h"
#include "pipebench/stats.h"

#define PB_RUN_MAX_FORMATS 16

typedef struct pb_run_ctx {
  pb_run_params p;
  pb_env env;
  pb_calibration cal;
  char data_dir[4096];
  int nf;
  char formats[PB_RUN_MAX_FORMATS][32];
  char paths[PB_RUN_MAX_FORMATS][4096];
  cJSON *summary; /**< "tracks" object collects each track's summary */
  long step, total_steps;
} pb_run_ctx;

int pb__track1(pb_run_ctx *c, struct pb_error *err);
int pb__track2(pb_run_ctx *c, struct pb_error *err);
int pb__track3(pb_run_ctx *c, struct pb_error *err);
int pb__track4(pb_run_ctx *c, struct pb_error *err);

/** Parses "1,4,16" into v (at most max values in [lo, hi]); returns the count or an error. */
int pb__parse_int_list(const char *text, int *v, int max, int lo, int hi, const char *what,
                       struct pb_error *err);
/** Is word one of the comma-separated items of list? */
int pb__list_has(const char *list, const char *word);
void pb__run_progress(pb_run_ctx *c, const char *what);
void pb__run_report(pb_run_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int pb__new_table(pb_run_ctx *c, const char *track, pb_table **out, struct pb_error *err);
void pb__row_common(pb_run_ctx *c, pb_table *t, const char *format, int repeat);
/** Adds p50..max, cv, CI, outliers, unstable, p99_reliable columns (names get prefix). */
void pb__add_summary_columns(pb_table *t, const pb_summary *s, const char *prefix);
/** How many consecutive items to time as one interval so that the timer (overhead_ns per
 * reading) costs under 1% of every interval: ceil(200 * overhead / shortest pilot interval),
 * within [1, cap] (twice the bound, as a margin). pilot_s holds n single-item times in seconds;
 * n == 0 gives 1. */
int pb__timer_group(double overhead_ns, const double *pilot_s, size_t n, int cap);
/** The larger group for a window restarted because an interval of g items lasted only span_s:
 * what pb__timer_group asks for at span_s / g per item, and at least twice g, within cap. */
int pb__timer_regroup(double overhead_ns, double span_s, int g, int cap);
int pb__write_table(pb_run_ctx *c, pb_table *t, const char *name, struct pb_error *err);

#endif
