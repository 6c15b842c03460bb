/* pipebench revs: tasks across git branches or commits, with a comparison against a baseline. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipebench/report.h"
#include "pipebench/revs.h"

#define CMD "revs"

static const cli_opt revs_opts[] = {
    {"config", "FILE", "task file (CSV): training, inference or command tasks (docs/revs.md)"},
    {"output", "FILE", "results JSON (default results/train_benchmark.json), written atomically"},
    {"repo", "PATH", "repository measured (default: the one holding the current folder)"},
    {"repeats", "N", "runs per task, interleaved across tasks (default 3)"},
    {"timeout", "S", "seconds a build or a run may take before it is stopped (default 1800)"},
    {"skip-failed", NULL, "record a failed task and go on (default: stop at the first, exit 2)"},
    {"build-cmd", "CMD", "shell command run once in each worktree (default: cmake build of "
                         "pipebench for train/infer tasks, none for command tasks)"},
    {"binary", "PATH", "pipebench binary of train/infer tasks, worktree-relative or absolute "
                       "(default build/pipebench)"},
    {"tmp-dir", "DIR", "where the worktrees go (default $TMPDIR or /tmp)"},
    {"compare", NULL, "compare each branch with the baseline (table on stdout); without "
                      "--config, compares an existing --output"},
    {"baseline", "BRANCH", "baseline of --compare (default: the first branch in the file)"},
    {"factor", "X", "smallest ratio that counts as a change (default 1.1)"},
    {"fail-on-regression", NULL, "exit 3 when a time got significantly longer (with --compare)"},
    {NULL, NULL, NULL}};

static volatile sig_atomic_t stop_flag = 0;

static void on_signal(int sig) {
  (void)sig;
  stop_flag = 1;
}

static void on_report(void *ctx, const char *line) {
  (void)ctx;
  cli_progress("", 0, 0, 0);
  fprintf(stderr, "pipebench revs: %s\n", line);
}

typedef struct progress_state {
  int64_t t0;
} progress_state;

static void on_progress(void *ctx, const char *what, long done, long total) {
  progress_state *s = ctx;
  cli_progress(what, done, total, (double)(pb_now_ns() - s->t0) / 1e9);
}

static int print_comparison(const char *output, const char *baseline, double factor, int *regressed) {
  struct pb_error err = {{0}};
  pb_revs_comparison *c = NULL;
  size_t n = 0;
  *regressed = 0;
  if (pb_revs_compare(output, baseline, factor, &c, &n, &err) != 0)
    return cli_fail(CMD, "%s", err.message);
  if (n == 0) {
    printf("nothing to compare: no successful run of another branch shares an experiment with "
           "the baseline\n");
    free(c);
    return CLI_OK;
  }
  int we = (int)strlen("experiment"), wm = (int)strlen("metric"), wb = (int)strlen("branch"),
      wbl = (int)strlen("baseline");
  for (size_t i = 0; i < n; i++) {
    int l;
    if ((l = (int)strlen(c[i].experiment)) > we) we = l;
    if ((l = (int)strlen(c[i].metric)) > wm) wm = l;
    if ((l = (int)strlen(c[i].branch)) > wb) wb = l;
    if ((l = (int)strlen(c[i].baseline)) > wbl) wbl = l;
  }
  printf("%-*s  %-*s  %-*s  %-*s  %5s  %10s  %10s  %7s  %7s  %-19s  %8s  %s\n", we, "experiment", wm,
         "metric", wb, "branch", wbl, "baseline", "n", "median", "base med", "ratio", "+-",
         "99% interval", "p", "verdict");
  for (size_t i = 0; i < n; i++) {
    char nn[32], ci[64], pm[32];
    snprintf(nn, sizeof nn, "%zu/%zu", c[i].n, c[i].n_baseline);
    snprintf(ci, sizeof ci, "[%.3f, %.3f]", c[i].ratio.lo, c[i].ratio.hi);
    snprintf(pm, sizeof pm, "%.1f%%", 100.0 * c[i].ratio.rel_err);
    printf("%-*s  %-*s  %-*s  %-*s  %5s  %10.4g  %10.4g  %7.3f  %7s  %-19s  %8.2g  %s%s\n", we,
           c[i].experiment, wm, c[i].metric, wb, c[i].branch, wbl, c[i].baseline, nn, c[i].median,
           c[i].median_baseline, c[i].ratio.ratio, pm, ci, c[i].p, c[i].verdict_text,
           c[i].regression ? " (regression)" : "");
    *regressed |= c[i].regression;
  }
  printf("ratio = branch / baseline (medians); significant: ratio beyond %.3g either way and "
         "(Mann-Whitney p < 0.002 or the medians' 99%% intervals do not overlap)\n",
         factor > 0 ? factor : 1.1);
  free(c);
  return CLI_OK;
}

static int run_revs(const cli_args *a) {
  const char *output = cli_get(a, "output") ? cli_get(a, "output") : "results/train_benchmark.json";
  long repeats;
  double timeout, factor;
  if (cli_get_long(a, CMD, "repeats", 3, 1, 100000, &repeats) ||
      cli_get_double(a, CMD, "timeout", 1800.0, 0.001, 1e7, &timeout) ||
      cli_get_double(a, CMD, "factor", 1.1, 1.0, 1e6, &factor))
    return CLI_USAGE;
  int compare = cli_has(a, "compare");
  if (cli_has(a, "fail-on-regression") && !compare)
    return cli_usage_error(CMD, "--fail-on-regression needs --compare");
  if (cli_has(a, "baseline") && !compare)
    return cli_usage_error(CMD, "--baseline needs --compare");
  const char *config = cli_get(a, "config");
  if (config == NULL && !compare)
    return cli_usage_error(CMD, "--config FILE is needed (or --compare to compare an existing "
                                "--output)");
  if (config != NULL) {
    struct pb_error err = {{0}};
    if (cli_mkdir_parent(output) != 0) return cli_fail(CMD, "cannot create the folder of %s", output);
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: waits wake up and look at the flag */
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    progress_state ps = {pb_now_ns()};
    pb_revs_params p = PB_REVS_PARAMS_DEFAULTS;
    p.config = config;
    p.output = output;
    p.repo = cli_get(a, "repo");
    p.build_cmd = cli_get(a, "build-cmd");
    p.binary = cli_get(a, "binary");
    p.tmp_dir = cli_get(a, "tmp-dir");
    p.repeats = (int)repeats;
    p.timeout_s = timeout;
    p.skip_failed = cli_has(a, "skip-failed");
    p.cancel = &stop_flag;
    p.progress = on_progress;
    p.progress_ctx = &ps;
    p.report = on_report;
    int n_failed = 0;
    int rc = pb_revs_run(&p, &n_failed, &err);
    cli_progress("", 0, 0, 0);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (rc == PB_ECANCELED) return cli_fail(CMD, "%s", err.message);
    if (rc != 0) {
      int shown = cli_fail(CMD, "%s", err.message);
      if (n_failed > 0)
        fprintf(stderr, "pipebench revs: stopped at the first failed task (--skip-failed goes "
                        "on); worktrees removed\n");
      return shown;
    }
    printf("results: %s\n", output);
    if (n_failed > 0)
      fprintf(stderr, "pipebench revs: %d task(s) failed; their errors are in %s\n", n_failed,
              output);
    fflush(stdout);
  }
  if (!compare) return CLI_OK;
  int regressed = 0;
  int rc = print_comparison(output, cli_get(a, "baseline"), factor, &regressed);
  if (rc != CLI_OK) return rc;
  fflush(stdout);
  struct pb_error perr = {{0}};
  if (pb_report_plot_revs_ex(output, NULL, cli_get(a, "baseline"), factor, &perr) != 0)
    fprintf(stderr, "pipebench revs: note: no plot: %s\n", perr.message);
  if (regressed && cli_has(a, "fail-on-regression")) {
    fprintf(stderr, "pipebench revs: a significant slowdown against the baseline (exit 3)\n");
    return CLI_REGRESSION;
  }
  return CLI_OK;
}

const cli_command cli_cmd_revs = {
    .name = "revs",
    .summary = "runs tasks across git branches or commits, records metrics, compares",
    .usage = "--config FILE [--output FILE] [--compare] [options]",
    .details =
        "Each task runs in its own detached worktree of its revision (git worktree add\n"
        "--detach), so your working tree, index and branch are never touched; worktrees are\n"
        "removed afterwards, also on failure and on Ctrl-C. Revisions are checked out and\n"
        "built first, then the tasks run in --repeats interleaved rounds. Each run's wall\n"
        "time (monotonic) and peak RSS (wait4) are measured here; first-epoch, first-batch,\n"
        "throughput and loss come from the metrics JSON the task writes. Task files:\n"
        "  branch,experiment,trainer,max_epochs,batch_size,overrides        (pipebench train)\n"
        "  branch,experiment,checkpoint_path,data_path,trainer,batch_size,overrides (infer)\n"
        "  branch,experiment,command,metrics        (your command writes the metrics JSON)\n"
        "See docs/revs.md for the formats, the output and the comparison rule.",
    .opts = revs_opts,
    .max_pos = 0,
    .min_pos = 0,
    .run = run_revs,
};
