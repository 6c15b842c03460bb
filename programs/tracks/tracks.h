/* The tracks of pipebench run, one descriptor each, listed in one table (tracks.c).
 *
 * A track is one file (trackN.c) that defines its descriptor: what it reads from the run's
 * settings, how it measures, the columns of its table, and how the report shows that table
 * (its plot and its section, through report/report_internal.h). pb_run, pb_report_plots and
 * pb_report_write walk the table; none of them names a track. Adding a track: write its file,
 * add its row to tracks.c (docs/architecture.md has the steps). */
#ifndef PB_TRACKS_H
#define PB_TRACKS_H

#include "report/report_internal.h"
#include "tracks/harness.h"

typedef struct pb__track {
  const char *id;              /**< what --tracks names ("1") */
  const char *name;            /**< a few words: "per-sample access" */
  const char *const *options;  /**< the pb_run_params fields it reads, NULL-terminated */
  /** Checks its options before anything runs (NULL: nothing to check). */
  int (*validate)(const pb_run_params *p, struct pb_error *err);
  /** Measures, writes OUT/data/<view.table>.parquet (and .csv) and its part of the summary. */
  int (*measure)(pb_run_ctx *c, struct pb_error *err);
  pb__report_view view;            /**< its table's file and schema, its plot and report section */
} pb__track;

/** The tracks in the order a run measures them and the report shows them. */
size_t pb__track_count(void);
const pb__track *pb__track_at(size_t i);
/** The track with this id, or NULL. */
const pb__track *pb__track_find(const char *id);

/** Plots and report of out_dir over every track, with the infer CSVs of infer_root (the end of
 *  pb_run; pb__report_after_run). */
int pb__tracks_report(const char *out_dir, const char *infer_root,
                      void (*line)(void *ctx, const char *text), void *ctx);

/* The descriptors (one per track file). */
extern const pb__track pb__track1;
extern const pb__track pb__track2;
extern const pb__track pb__track3;
extern const pb__track pb__track4;

#endif
