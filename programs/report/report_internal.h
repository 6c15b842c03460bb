/* Internals shared by the plots and the written report (not public API). */
#ifndef PB_REPORT_INTERNAL_H
#define PB_REPORT_INTERNAL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "pipebench/report.h"
#include "pipebench/results.h"

#define PB__RP_MAX_DISTINCT 32
#define PB__RP_TRACKS 16 /* the most tracks a report shows */
#define PB__RP_MAXCELLS 4096 /* cells of one report table */

typedef struct pb__report_doc pb__report_doc;
typedef struct pb__report_data pb__report_data;

/* How the report shows one track's table: the part of a track's descriptor (tracks/tracks.h)
 * that the plots and the written report use. They know no track but through these. */
typedef struct pb__report_view {
  const char *id;            /* "1": the track's name on the command line and in the text */
  const char *title;         /* the report's heading: "Track 1: per-sample access" */
  const char *table;         /* file name stem: data/<table>.parquet|.csv, images/<table>.png */
  const char *const *schema; /* every column the table may hold, NULL-terminated */
  const char *plot_needs;    /* a column a table of this track always has */
  /* Draws the table into png (atomically). */
  int (*plot)(const pb_table *t, const char *png, struct pb_error *err);
  /* Its answer in "The answer" (t NULL: the table is absent); may be NULL. */
  void (*answer)(pb__report_doc *d, const pb_table *t, const cJSON *summary);
  /* Its line comparing pipebench with a peer (after every track's answer); may be NULL. */
  void (*answer_peer)(pb__report_doc *d, const pb_table *t);
  /* Its section under the plot: a paragraph and a table built in cells (PB__RP_MAXCELLS). */
  void (*section)(pb__report_doc *d, const pb_table *t, char (*cells)[64]);
  /* Round-to-round stability: the columns that make a configuration (NULL-terminated; NULL:
   * not reported), the metric compared over rounds and its name in the text. */
  const char *const *round_keys;
  const char *round_metric, *round_what;
} pb__report_view;

/* A row filter: column == string (s != NULL) or column == integer. */
typedef struct pb__report_filter {
  const char *col;
  const char *s;
  int64_t i;
} pb__report_filter;

/* The tables of a results folder, loaded once: t[k] is the table of views[k], NULL when it
 * could not be read; then status[k] < 0 and why[k] says why (PB_ENOTFOUND: simply absent). */
struct pb__report_data {
  char dir[4096];
  const pb__report_view *const *views;
  size_t n; /* views (at most PB__RP_TRACKS) */
  pb_table *t[PB__RP_TRACKS];
  int status[PB__RP_TRACKS];
  char path[PB__RP_TRACKS][4200]; /* the file used (or tried first) */
  char why[PB__RP_TRACKS][1024];
  pb_table *infer; /* merged benchmark_results_*.csv rows, or NULL */
  char infer_dir[4200];
  int infer_files;
};

/* Loads the table of each of the n views of dir, and the infer CSVs of infer_root or
 * infer_root/data (infer_root NULL: dir); each failure or fallback is passed to note. */
void pb__report_load(const char *dir, const char *infer_root, const pb__report_view *const *views,
                 size_t n, pb__report_data *d, pb_report_note_fn note, void *ctx);
void pb__report_free(pb__report_data *d);
/* Reads and merges the infer CSVs of one folder (newest file wins per configuration). */
int pb__report_load_infer(const char *dir, pb_table **out, int *n_files, struct pb_error *err);

/* Row helpers; a missing column reads as NULL / NaN. */
int pb__report_match(const pb_table *t, size_t row, const pb__report_filter *f, int nf);
const char *pb__report_str(const pb_table *t, size_t row, const char *col);
double pb__report_f64(const pb_table *t, size_t row, const char *col);
/* Median of col over matching rows (NaN if none; *n gets the count when not NULL). */
double pb__report_median(const pb_table *t, const char *col, const pb__report_filter *f, int nf, int *n);
/* Distinct values of a string column among matching rows, in order of first appearance. */
int pb__report_distinct_str(const pb_table *t, const char *col, const pb__report_filter *f, int nf,
                        const char **out, int max);
/* Distinct values of an integer column among matching rows, sorted ascending. */
int pb__report_distinct_i64(const pb_table *t, const char *col, const pb__report_filter *f, int nf,
                        int64_t *out, int max);
/* Number of matching rows whose bool column is true. */
int pb__report_count_true(const pb_table *t, const char *col, const pb__report_filter *f, int nf);

/* The fixed colour of a format (0xRRGGBB), the same in every plot. */
uint32_t pb__report_format_color(const char *format);

/* For tests: fn is told every table and column name the row helpers above look up on this
 * thread (NULL: stop telling). */
typedef void (*pb__report_col_watch_fn)(void *ctx, const pb_table *t, const char *col);
void pb__report_watch_columns(pb__report_col_watch_fn fn, void *ctx);

/* ---- whose files these are ---------------------------------------------------------------- */

/* Checks that path (OUT/report.md or report.html) may be replaced: absent, or a regular file
 * whose first lines carry the mark pipebench writes ("<!-- pipebench report", or the first
 * lines of a report from before the mark). Otherwise -EEXIST naming it: a user's own file of
 * that name (or a link, a folder) is never replaced. */
int pb__report_ours(const char *path, struct pb_error *err);
/* Checks that the tables loaded in d and d->dir's summary come from one run: the summary's
 * "run_id" and each table's "pipebench.run_id" metadata agree (all absent: a folder of a
 * pipebench from before run ids). PB_EFORMAT naming the files of each run otherwise. */
int pb__report_check_run(const pb__report_data *d, struct pb_error *err);

/* ---- what the public calls do, for the views they are given (the tracks' table) ------------ */

/* pb_report_plots_ex over these views: views[k] draws images/<table>.png. */
int pb__report_plots(const pb__report_view *const *views, size_t n, const char *out_dir,
                 pb_report_note_fn note, void *note_ctx, int *n_written, struct pb_error *err);
/* pb_report_write_ex over these views, in their order. */
int pb__report_write(const pb__report_view *const *views, size_t n, const char *out_dir,
                 pb_report_note_fn note, void *note_ctx, struct pb_error *err);
/* The same, with the infer CSVs taken from infer_root or infer_root/data (NULL: out_dir's). */
int pb__report_plots_from(const pb__report_view *const *views, size_t n, const char *out_dir,
                      const char *infer_root, pb_report_note_fn note, void *note_ctx,
                      int *n_written, struct pb_error *err);
int pb__report_write_from(const pb__report_view *const *views, size_t n, const char *out_dir,
                      const char *infer_root, pb_report_note_fn note, void *note_ctx,
                      struct pb_error *err);

/* The end of pb_run: draws the plots and writes the report of out_dir over these views,
 * telling each outcome to line (may be NULL). The infer CSVs come from infer_root or
 * infer_root/data (the run's OUT, when out_dir is its staging folder; NULL: out_dir).
 * Returns the first failure to write a file; a table that cannot be drawn is only told. */
int pb__report_after_run(const pb__report_view *const *views, size_t n, const char *out_dir,
                         const char *infer_root, void (*line)(void *ctx, const char *text),
                         void *ctx);

/* ---- building the written report (for the views' answers and sections) --------------------- */

/* A paragraph, a list item (consecutive items make one list): text with **bold** and `code`. */
void pb__report_p(pb__report_doc *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pb__report_li(pb__report_doc *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A table of nrows x ncols cells (row-major; row 0 is the header). */
void pb__report_table(pb__report_doc *d, char (*cells)[64], int nrows, int ncols);
/* A time in seconds or a number, in words for a table cell ("-" for NaN). */
const char *pb__report_fmt_time(double s, char *buf, size_t size);
const char *pb__report_fmt_num(double v, char *buf, size_t size);
/* The number at o.a (b NULL) or o.a.b in a JSON object (the run's summary), or NaN. */
double pb__report_json_num(const cJSON *o, const char *a, const char *b);

#endif
