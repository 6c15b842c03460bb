/* pipebench revs: tasks across git branches or commits, with a comparison against a baseline. */
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipebench/report.h"
#include "pipebench/revs.h"

#define CMD "revs"

#define P pb_revs_params
static const P revs_defaults = PB_REVS_PARAMS_DEFAULTS;

/* One line per option (docs/options.md). */
static const cli_opt revs_opts[] = {
    {.name = "config", .arg = "FILE", .type = CLI_STRING, CLI_AT(P, config), .help = "task file (CSV): training, inference or command tasks (docs/revs.md)"},
    {.name = "output", .arg = "FILE", .type = CLI_STRING, CLI_AT(P, output), .help = "results JSON (default {}), written atomically"},
    {.name = "repo", .arg = "PATH", .type = CLI_STRING, CLI_AT(P, repo), .help = "repository measured (default: the one holding the current folder)"},
    {.name = "repeats", .arg = "N", .type = CLI_INT, CLI_AT(P, repeats), .lo = 1, .hi = 100000, .help = "runs per task, interleaved across tasks (default {})"},
    {.name = "timeout", .arg = "S", .type = CLI_DOUBLE, CLI_AT(P, timeout_s), .dlo = 0.001, .dhi = 1e7, .help = "seconds a build or a run may take before it is stopped (default {})"},
    {.name = "skip-failed", .type = CLI_FLAG, CLI_AT(P, skip_failed), .help = "record a failed task and go on (default: stop at the first, exit 2)"},
    {.name = "build-cmd", .arg = "CMD", .type = CLI_STRING, CLI_AT(P, build_cmd), .help = "shell command run once in each worktree (default: cmake build of pipebench for train/infer tasks, none for command tasks)"},
    {.name = "binary", .arg = "PATH", .type = CLI_STRING, CLI_AT(P, binary), .help = "pipebench binary of train/infer tasks, worktree-relative or absolute (default build/pipebench)"},
    {.name = "train-cmd", .arg = "TEMPLATE", .type = CLI_STRING, CLI_AT(P, train_cmd), .help = "your training command for training tasks, with {experiment} {trainer} {max_epochs} {batch_size} {overrides} ... (default: .pipebench/revs.json of the revision, else pipebench train)"},
    {.name = "infer-cmd", .arg = "TEMPLATE", .type = CLI_STRING, CLI_AT(P, infer_cmd), .help = "your prediction command for inference tasks, with {experiment} {checkpoint_path} {data_path} {trainer} {batch_size} {overrides} ... (default: .pipebench/revs.json, else pipebench infer)"},
    {.name = "tmp-dir", .arg = "DIR", .type = CLI_STRING, CLI_AT(P, tmp_dir), .help = "where the worktrees go (default $TMPDIR or /tmp)"},
    {.name = "compare", .type = CLI_FLAG, .help = "compare each branch with the baseline (table on stdout); without --config, compares an existing --output"},
    {.name = "baseline", .arg = "BRANCH", .type = CLI_STRING, .help = "baseline of --compare (default: the first branch in the file)"},
    {.name = "factor", .arg = "X", .type = CLI_DOUBLE, .dlo = 1.0, .dhi = 1e6, .dflt = "1.1", .help = "smallest ratio that counts as a change (default {})"},
    {.name = "fail-on-regression", .type = CLI_FLAG, .help = "exit 3 when a time got significantly longer (with --compare)"},
    {.name = NULL}};

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
  int wm = (int)strlen("metric");
  for (size_t i = 0; i < n; i++)
    if ((int)strlen(c[i].metric) > wm) wm = (int)strlen(c[i].metric);
  const char *last_exp = "", *last_branch = "";
  for (size_t i = 0; i < n; i++) {
    const pb_revs_comparison *x = &c[i];
    if (strcmp(x->experiment, last_exp) != 0 || strcmp(x->branch, last_branch) != 0) {
      printf("%s%s: %s against %s (%zu/%zu repeats)\n", i ? "\n" : "", x->experiment, x->branch,
             x->baseline, x->n, x->n_baseline);
      printf("  %-*s  %11s  %11s  %-14s  %9s  %-21s  %8s  %s\n", wm, "metric", "baseline",
             "candidate", "speedup", "change", "99% interval", "p", "verdict");
      last_exp = x->experiment;
      last_branch = x->branch;
    }
    /* speedup as the guide's users read it: how many times faster the candidate is (for a
     * throughput, how many times more it does); change: candidate against baseline in % */
    double r = x->ratio.ratio, lo = x->ratio.lo, hi = x->ratio.hi;
    char speed[48], change[32], ci[64];
    int is_time = !x->higher_is_better && strstr(x->metric, "memory") == NULL &&
                  strstr(x->metric, "rss") == NULL;
    double sp = x->higher_is_better ? r : 1.0 / r;
    /* a ratio that rounds to 1.00 names no direction ("1.00× faster" for +0.0 % would) */
    char times[16];
    snprintf(times, sizeof times, "%.2f", !(r > 0) || !isfinite(r) ? 0.0 : r >= 1 ? r : 1.0 / r);
    if (!(r > 0) || !isfinite(r))
      snprintf(speed, sizeof speed, "-");
    else if (strcmp(times, "1.00") == 0)
      snprintf(speed, sizeof speed, "1.00\u00d7");
    else if (is_time || x->higher_is_better)
      snprintf(speed, sizeof speed, "%.2f\u00d7 %s", sp >= 1 ? sp : 1.0 / sp,
               sp >= 1 ? "faster" : "slower");
    else
      snprintf(speed, sizeof speed, "%.2f\u00d7 %s", r >= 1 ? r : 1.0 / r,
               r >= 1 ? "more" : "less");
    /* a ratio of two zero medians (no GPU memory on either side, say) has no change to show;
     * one that rounds to 0.0 % is "no change", never "+0.0 %" beside a direction */
    if (isfinite(r) && fabs(100.0 * (r - 1.0)) < 0.05) snprintf(change, sizeof change, "no change");
    else if (isfinite(r)) snprintf(change, sizeof change, "%+.1f %%", 100.0 * (r - 1.0));
    else snprintf(change, sizeof change, "-");
    if (isfinite(lo) && isfinite(hi))
      snprintf(ci, sizeof ci, "[%+.1f %%, %+.1f %%]", 100.0 * (lo - 1.0), 100.0 * (hi - 1.0));
    else snprintf(ci, sizeof ci, "-");
    /* the multiplication sign is two bytes and one column: one more byte of width */
    printf("  %-*s  %11.4g  %11.4g  %-15s  %9s  %-21s  %8.2g  %s%s\n", wm, x->metric,
           x->median_baseline, x->median, speed, change, ci, x->p, x->verdict_text,
           x->regression ? " (regression)" : "");
    *regressed |= x->regression;
  }
  printf("\nbaseline, candidate: medians; change: candidate/baseline - 1 with its bootstrap 99%% "
         "interval; significant: ratio beyond %.3g either way and (Mann-Whitney p < 0.002 or the "
         "medians' 99%% intervals do not overlap)\n",
         factor > 0 ? factor : 1.1);
  free(c);
  return CLI_OK;
}

static int run_revs(const cli_args *a) {
  pb_revs_params p = revs_defaults;
  double factor;
  PB_RETURN_NOT_OK(cli_fill(a, &p));
  PB_RETURN_NOT_OK(cli_double(a, "factor", &factor));
  const char *output = p.output;
  int compare = cli_has(a, "compare");
  if (cli_has(a, "fail-on-regression") && !compare)
    return cli_usage_error(CMD, "--fail-on-regression needs --compare");
  if (cli_has(a, "baseline") && !compare)
    return cli_usage_error(CMD, "--baseline needs --compare");
  const char *config = p.config;
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
  char png[4400];
  pb_report_revs_plot_path(output, cli_get(a, "baseline"), png, sizeof png);
  if (pb_report_plot_revs_ex(output, NULL, cli_get(a, "baseline"), factor, &perr) != 0)
    fprintf(stderr, "pipebench revs: note: no plot: %s\n", perr.message);
  else
    printf("plot: %s\n", png);
  fflush(stdout);
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
        "built first, then the tasks run in --repeats interleaved rounds. Task files:\n"
        "  branch,experiment,trainer,max_epochs,batch_size,overrides           (training)\n"
        "  branch,experiment,checkpoint_path,data_path,trainer,batch_size,overrides (inference)\n"
        "  branch,experiment,command,metrics        (your command writes the metrics JSON)\n"
        "overrides: a comma-separated list, quoted (\"a=1,b=2\"). Training and inference tasks\n"
        "run your command from --train-cmd/--infer-cmd or the revision's .pipebench/revs.json,\n"
        "e.g. 'python -m pkg.train experiment={experiment} trainer={trainer}\n"
        "data.batch_size={batch_size} {overrides}', else pipebench's own train/infer. Every\n"
        "task may write its timings as JSON to $PIPEBENCH_METRICS (python: pipebench.revs.\n"
        "Recorder); pipebench adds wall time, the process tree's peak RSS and, where\n"
        "nvidia-smi answers, its GPU memory. --skip-failed with every task\n"
        "failed exits 2. See docs/revs.md for the formats, the output and the comparison.",
    .opts = revs_opts,
    .defaults = &revs_defaults,
    .params = "pb_revs_params",
    .max_pos = 0,
    .min_pos = 0,
    .run = run_revs,
};
