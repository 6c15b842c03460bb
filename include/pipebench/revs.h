/* pipebench revs: run tasks across git branches or commits, record metrics with git info,
 * compare branches against a baseline. The file formats are in ../docs/revs.md. */
#ifndef PIPEBENCH_REVS_H
#define PIPEBENCH_REVS_H

#include <signal.h>
#include <stddef.h>

#include "pipebench/core.h"
#include "pipebench/stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/** What a task runs. */
typedef enum {
  PB_REVS_TRAIN = 0,   /**< `pipebench train` of the revision (columns trainer, max_epochs, ...) */
  PB_REVS_INFER = 1,   /**< `pipebench infer` of the revision (checkpoint_path, data_path, ...) */
  PB_REVS_COMMAND = 2  /**< a shell command that writes a metrics JSON (command, metrics) */
} pb_revs_kind;

/** One row of a task file. Strings are owned by the task list (NULL when the column is
 * absent; "" when the field is empty). */
typedef struct pb_revs_task {
  int line;               /**< line of the file where the row starts (1 is the header) */
  pb_revs_kind kind;
  char *branch;           /**< branch, tag or commit */
  char *experiment;       /**< configuration name (configs/NAME or a preset), or a label */
  char *trainer;          /**< cpu, gpu, ddp, ... as written (train and infer tasks) */
  char *checkpoint_path;  /**< infer tasks */
  char *data_path;        /**< infer tasks */
  char *overrides;        /**< key=value items separated by commas, semicolons or spaces */
  char *command;          /**< command tasks: run with /bin/sh -c in the worktree */
  char *metrics;          /**< command tasks: the JSON file the command writes (worktree-relative) */
  long max_epochs;        /**< train tasks; 0 when absent */
  long batch_size;        /**< 0 when absent */
} pb_revs_task;

/** Parses a task file (CSV with a header, RFC 4180 quoting) held in text. name is used in
 * messages. On success *tasks (freed with pb_revs_tasks_free) holds *n >= 1 tasks. A malformed
 * file (no rows, unknown or missing columns, a row of the wrong width, a stray or unclosed
 * quote, a bad number, an empty trainer, a bad override, an unquoted overrides list that
 * spilled into extra fields) is PB_EFORMAT; the message names the line. */
PB_API int pb_revs_tasks_parse(const char *text, size_t size, const char *name,
                               pb_revs_task **tasks, size_t *n, struct pb_error *err);
/** Reads and parses a task file (PB_ENOTFOUND when it does not exist). */
PB_API int pb_revs_tasks_read(const char *path, pb_revs_task **tasks, size_t *n,
                              struct pb_error *err);
/** Frees a task list from pb_revs_tasks_parse/read. NULL is ignored. */
PB_API void pb_revs_tasks_free(pb_revs_task *tasks, size_t n);

/** Settings of `pipebench revs`. */
typedef struct pb_revs_params {
  const char *config;     /**< the task file */
  const char *output;     /**< results JSON, written atomically */
  const char *repo;       /**< repository measured; NULL: the one holding the current folder */
  const char *build_cmd;  /**< shell command run once in each worktree; NULL: cmake build of
                               pipebench for train/infer tasks, none for command tasks */
  const char *binary;     /**< pipebench binary for train/infer tasks, relative to the
                               worktree or absolute; NULL: build/pipebench */
  const char *tmp_dir;    /**< where worktrees go; NULL: $TMPDIR or /tmp */
  /** Command templates of training and inference tasks (run with /bin/sh -c in the worktree):
   * {experiment}, {trainer}, {max_epochs}, {batch_size}, {checkpoint_path}, {data_path},
   * {branch}, {commit}, {repeat}, {metrics} and {overrides} (space-separated key=value
   * arguments), each value shell-quoted. NULL: the revision's .pipebench/revs.json ("train",
   * "infer"), else pipebench's own train / infer. */
  const char *train_cmd;
  const char *infer_cmd;
  int repeats;            /**< runs per task (>= 1), interleaved across tasks */
  double timeout_s;       /**< per build and per run; a run past it is killed */
  int skip_failed;        /**< 1: a failed task is recorded and the others go on */
  /** Set (by a signal handler) to stop: children are killed, worktrees removed, and
   * pb_revs_run returns PB_ECANCELED without writing the output. May be NULL. */
  volatile sig_atomic_t *cancel;
  /** Progress: what runs now, step done of total. May be NULL. */
  void (*progress)(void *ctx, const char *what, long done, long total);
  void *progress_ctx;
  /** One line for the user: a task finished or failed, a warning. May be NULL. */
  void (*report)(void *ctx, const char *line);
  void *report_ctx;
} pb_revs_params;

#define PB_REVS_PARAMS_DEFAULTS                                                                 \
  {                                                                                             \
    .config = NULL, .output = "results/train_benchmark.json", .repo = NULL, .build_cmd = NULL,  \
    .binary = NULL, .tmp_dir = NULL, .train_cmd = NULL, .infer_cmd = NULL, .repeats = 3,      \
    .timeout_s = 1800.0, .skip_failed = 0,                                                      \
    .cancel = NULL, .progress = NULL, .progress_ctx = NULL, .report = NULL, .report_ctx = NULL  \
  }

/** Runs every task of params->config in its own detached worktree of its revision (the
 * user's working tree, index and branch are not touched), params->repeats times, and writes
 * one run record per task to params->output. Worktrees are removed before it returns, on
 * every path. *n_failed (may be NULL) receives the number of failed tasks. Returns 0 when the
 * output was written and either no task failed or skip_failed is set; the first task's error
 * (PB_ECHILD, PB_ENOTFOUND, ...) when a task failed without skip_failed (the output is still
 * written, recording it); PB_ECANCELED when stopped; PB_EFORMAT for a malformed task file. */
PB_API int pb_revs_run(const pb_revs_params *params, int *n_failed, struct pb_error *err);

/** One (experiment, metric, branch) against the baseline. */
typedef struct pb_revs_comparison {
  char experiment[128];
  char metric[160];                /**< dotted path in the run's metrics object */
  char branch[128];
  char baseline[128];
  size_t n, n_baseline;            /**< repeats of each */
  double median, median_baseline;
  pb_ratio ratio;                  /**< median / median_baseline with its 99% interval */
  double p;                        /**< Mann-Whitney p */
  pb_verdict verdict;              /**< pb_compare's verdict on the values as they are */
  int higher_is_better;            /**< 1 for throughput: PB_FASTER there means it fell */
  int regression;                  /**< a time got significantly longer, or a throughput lower */
  const char *verdict_text;        /**< "slower", "faster", "more memory", "less memory",
                                        "no significant change" (static storage) */
} pb_revs_comparison;

/** Compares every successful run of a results file against the runs of baseline (NULL: the
 * branch of the first run) with the same experiment, metric by metric (times, throughput,
 * peak memory), with pb_ratio_of and pb_compare at factor (<= 0: 1.1). *out is freed with
 * free(); *n may be 0. PB_ENOTFOUND when no run has the baseline branch. */
PB_API int pb_revs_compare(const char *results_path, const char *baseline, double factor,
                           pb_revs_comparison **out, size_t *n, struct pb_error *err);

#ifdef __cplusplus
}
#endif
#endif
