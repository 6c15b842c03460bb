/* pipebench report: redraws the plots and the report of a results folder from its saved tables. */
#include <stdio.h>

#include "cli.h"
#include "pipebench/report.h"

static const cli_opt opts[] = {
    {.name = "no-plots", .type = CLI_FLAG, .help = "only rewrite report.md and report.html (keep the PNGs there are)"},
    {.name = NULL},
};

static void on_note(void *ctx, int status, const char *path, const char *message) {
  int *bad = ctx;
  if (status == 0) {
    fprintf(stderr, "report: wrote %s\n", path);
  } else {
    (*bad)++;
    fprintf(stderr, "pipebench report: %s (%s)\n", message ? message : path, pb_strerror(status));
  }
}

static int run(const cli_args *a) {
  const char *dir = a->pos[0];
  int bad = 0, n = 0, plots_rc = PB_OK;
  struct pb_error err = {{0}};
  /* A run writing there now, or tables and summary of different runs: nothing is drawn. */
  if (pb_report_check(dir, &err) != PB_OK) return cli_fail("report", "%s", err.message);
  if (!cli_has(a, "no-plots")) {
    int rc = plots_rc = pb_report_plots_ex(dir, on_note, &bad, &n, &err);
    if (rc != PB_OK) {
      cli_fail("report", "%s", err.message);
      if (rc == PB_EUNSUPPORTED || rc == PB_ENOTFOUND) return CLI_FAIL;
    }
  }
  err.message[0] = '\0';
  int rc = pb_report_write_ex(dir, on_note, &bad, &err);
  if (rc != PB_OK) return cli_fail("report", "%s", err.message);
  if (!cli_has(a, "no-plots") && n == 0) return cli_fail("report", "no plot could be drawn from %s", dir);
  if (plots_rc != PB_OK) return CLI_FAIL; /* a plot after the first ones could not be written */
  if (bad > 0) fprintf(stderr, "report: %d input(s) skipped, the rest drawn from what could be read\n", bad);
  return CLI_OK;
}

const cli_command cli_cmd_report = {
    .name = "report",
    .summary = "redraw the plots and report.md/.html of a results folder, without running anything",
    .usage = "DIR [--no-plots]",
    .details = "Reads DIR/data/pipebench_track{1,2,3,4}.parquet (the .csv twin when the Parquet file\n"
               "is missing or unreadable), pipebench_summary.json and any benchmark_results_*.csv\n"
               "of 'pipebench infer'; writes DIR/images/*.png, DIR/report.md and DIR/report.html.\n"
               "A missing or corrupt table is named on stderr and skipped; the others are drawn.\n"
               "Exit 2 only when no plot could be drawn (or the report could not be written),\n"
               "when a run is writing into DIR, when its tables and summary come from different\n"
               "runs, or when a report.md/report.html there is not one pipebench wrote.",
    .opts = opts,
    .max_pos = 1,
    .min_pos = 1,
    .run = run,
};
