/* pipebench report: plots (PNG, through PLplot's pngcairo driver) and a written report
 * (Markdown and self-contained HTML) from a results folder, without running anything. */
#ifndef PIPEBENCH_REPORT_H
#define PIPEBENCH_REPORT_H

#include "pipebench/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Told about every file the report functions write (status 0, path of the new file, message
 * NULL) and every input they had to skip or replace (status < 0, path of the input, message
 * saying why). Called on the caller's thread. */
typedef void (*pb_report_note_fn)(void *ctx, int status, const char *path, const char *message);

/** Draws a PNG for every result table in out_dir (a `pipebench run --out` folder): reads
 * out_dir/data/pipebench_track{1,2,3,4}.parquet (or the .csv twin when the Parquet file is
 * missing or unreadable) and any benchmark_results_*.csv of `pipebench infer` in out_dir or
 * out_dir/data, and writes out_dir/images/pipebench_track{1,2,3,4}.png and
 * pipebench_infer.png (each atomically). A missing or corrupt table is skipped; the others are
 * still drawn. *n_written (may be NULL) counts the PNGs written.
 *
 * Returns 0 when at least one PNG was written; then err->message lists what was skipped ("" if
 * nothing). Otherwise: PB_ENOTFOUND (no folder, or no table in it), the code of the first table
 * that could not be read, PB_EUNSUPPORTED when PLplot's pngcairo driver is not installed, or an
 * I/O error. PLplot is serialised by a process-wide lock; while it draws, this thread's
 * stdout and stderr (file descriptors 1 and 2) point to a scratch file so that nothing PLplot
 * prints reaches the terminal (output of other threads in those moments is dropped too). */
PB_API int pb_report_plots(const char *out_dir, int *n_written, struct pb_error *err);
/** pb_report_plots with a note callback (NULL for none). */
PB_API int pb_report_plots_ex(const char *out_dir, pb_report_note_fn note, void *note_ctx,
                              int *n_written, struct pb_error *err);

/** Writes out_dir/report.md and out_dir/report.html (self-contained: the PNGs of
 * out_dir/images are embedded as base64 data URIs), both atomically. They open with the
 * answers (fastest format for random access and for bulk loading, whether the model loop is
 * data-bound, throughput against the calibrated limits, pipebench against the torch peer,
 * unstable measurements), then one section per track with its plot and a compact table.
 * Unreadable tables are named in the report and skipped. Returns 0, PB_ENOTFOUND when out_dir
 * holds neither a table nor pipebench_summary.json, or an I/O error. */
PB_API int pb_report_write(const char *out_dir, struct pb_error *err);
PB_API int pb_report_write_ex(const char *out_dir, pb_report_note_fn note, void *note_ctx,
                              struct pb_error *err);

/** Checks that out_dir can be redrawn now, without writing anything: no `pipebench run` or
 * report holds its lock (the folder's .pipebench.lock; -EWOULDBLOCK naming the holder's pid),
 * and its result tables and pipebench_summary.json come from one run (their run ids agree;
 * PB_EFORMAT naming the files of each run otherwise). pb_report_plots and pb_report_write
 * check the same, and hold the lock while they write; they also never replace a report.md or
 * report.html that pipebench did not write (-EEXIST naming it). Returns 0 when the folder is
 * fine; PB_ENOTFOUND when it does not exist. */
PB_API int pb_report_check(const char *out_dir, struct pb_error *err);

/** Draws `pipebench infer` results: every benchmark_results_*.csv in csv_dir (for a
 * framework/model/device/batch size found in several files, the newest file wins) as latency
 * p50 and throughput against batch size, one line per model and framework, into png_path
 * (atomically; NULL: csv_dir/pipebench_infer.png). PB_ENOTFOUND when csv_dir holds no such
 * file; PB_EUNSUPPORTED without the pngcairo driver. */
PB_API int pb_report_plot_infer(const char *csv_dir, const char *png_path, struct pb_error *err);

/** Draws a `pipebench revs` results file (the JSON list of runs): every (experiment, metric,
 * branch) that pb_revs_compare finds against the baseline is one row with the ratio of medians
 * to the baseline as a marker and its 99% bootstrap interval as a bar, a line at 1 and dashed
 * lines at the change threshold, significant changes coloured and marked (worse: vermillion
 * triangle; better: blue inverted triangle). The ratio axis is logarithmic when the ratios
 * span more than a factor 4. Writes png_path atomically (NULL: pb_report_revs_plot_path's
 * name, the folder created). The baseline is the
 * branch of the first run and the factor 1.1, as in pb_revs_compare(path, NULL, 0, ...).
 * Returns 0; PB_EFORMAT for a file that is not a revs list; PB_ENOTFOUND when nothing can be
 * compared; PB_EUNSUPPORTED without the pngcairo driver; or an I/O error. */
PB_API int pb_report_plot_revs(const char *revs_json, const char *png_path, struct pb_error *err);
/** The default name of a revs plot: dirname(revs_json)/images/pipebench_revs_<stem>.png, stem
 * the results file's name without .json, followed by _vs_<baseline> when a baseline is named
 * (characters other than letters, digits, '-', '_' and '.' become '-'), so that each
 * comparison has a file of its own. */
PB_API void pb_report_revs_plot_path(const char *revs_json, const char *baseline, char *out,
                                     size_t size);
/** pb_report_plot_revs with the baseline branch (NULL: the first run's) and the factor of
 * pb_revs_compare (<= 0: 1.1), so that the plot matches a `--compare --baseline --factor` table. */
PB_API int pb_report_plot_revs_ex(const char *revs_json, const char *png_path, const char *baseline,
                                  double factor, struct pb_error *err);

#ifdef __cplusplus
}
#endif
#endif
