/* pipebench infer: options in, pb_infer_run, a line per row out. The measuring is in the library
 * (programs/infer), which the Python binding calls too. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipebench/bench.h"
#include "pipebench/infer.h"
#include "pipebench/results.h"
#include "pipebench/stats.h"

#define CMD "infer"

#define P pb_infer_params
static const P infer_defaults = PB_INFER_PARAMS_DEFAULTS;

static int set_batch_sizes(void *params, void *field, const cli_opt *o, const char *cmd,
                           const char *value);

/* One line per option (docs/options.md); .py names the keyword of pipebench.infer(). */
static const cli_opt infer_opts[] = {
    {.name = "framework", .arg = "LIST...", .type = CLI_LIST, CLI_AT(P, frameworks), .py = "frameworks", .help = "pipebench (default: its engine on the device), onednn (on the cpu), cuda (on the GPU), pytorch (or torch), torch-compile, jax, both (pytorch and jax), peers (pytorch, torch-compile, jax), all"},
    {.name = "model", .arg = "LIST...", .type = CLI_LIST, CLI_AT(P, model), .py = "model", .help = "embed (default), resnet50, vit_b_16, both (resnet50 and vit_b_16)"},
    {.name = "batch-sizes", .arg = "LIST...", .type = CLI_LIST, CLI_AT(P, batch_sizes), .set = set_batch_sizes, .py = "batch_sizes", .help = "batch sizes to run (default: 1 8 32 128)"},
    {.name = "iterations", .arg = "N", .type = CLI_INT, CLI_AT(P, iterations), .lo = 1, .hi = 1000000, .py = "iterations", .help = "timed forward passes per batch size (default {})"},
    {.name = "warmup", .arg = "N", .type = CLI_INT, CLI_AT(P, warmup), .lo = 0, .hi = 1000000, .py = "warmup", .help = "untimed passes first, dropped (default {})"},
    {.name = "dtype", .arg = "NAME", .type = CLI_STRING, CLI_AT(P, dtype), .py = "dtype", .help = "float32 (default), bfloat16, float16"},
    {.name = "device", .arg = "NAME", .type = CLI_STRING, CLI_AT(P, device), .py = "device", .help = "auto (default), cpu, cuda: for the engine and the peers alike"},
    {.name = "data-source", .arg = "SRC", .type = CLI_STRING, CLI_AT(P, data_source), .py = "data_source", .help = "synthetic (default, seeded normal noise), a dataset, or a folder `pipebench gen` wrote"},
    {.name = "format", .arg = "NAME", .type = CLI_STRING, CLI_AT(P, data_format), .py = "data_format", .help = "the format to read in a gen folder (default: the first that opens)"},
    {.name = "output-dir", .arg = "DIR", .type = CLI_STRING, CLI_AT(P, output_dir), .dflt = "results/raw", .py = "output_dir", .help = "where the CSV goes (default {})"},
    {.name = "threads", .arg = "N", .type = CLI_INT, CLI_AT(P, threads), .lo = 0, .hi = 4096, .py = "threads", .help = "compute threads (default: all CPUs)"},
    {.name = "seed", .arg = "N", .type = CLI_INT, CLI_AT(P, seed), .lo = 0, .hi = 0x7fffffffL, .py = "seed", .help = "weights and synthetic input (default {})"},
    {.name = "python", .arg = "PATH", .type = CLI_STRING, CLI_AT(P, python), .py = "python", .help = "Python for the peers (default: $PIPEBENCH_PYTHON, else /usr/bin/python3)"},
    {.name = "peer-timeout", .arg = "S", .type = CLI_DOUBLE, CLI_AT(P, peer_timeout_s), .dlo = 1, .dhi = 1e7, .dflt = "3600", .py = "peer_timeout_s", .help = "stop a peer (and all it started) after S seconds (default {})"},
    CLI_REMOTE_OPTS,
    {.name = NULL}};

/* The signal that asked infer to stop (0: none); the handler only stores it. */
static volatile sig_atomic_t stop_signal = 0;

static void on_signal(int sig) { stop_signal = sig; }

static void on_note(void *ctx, int level, const char *line) {
  (void)ctx;
  cli_progress("", 0, 0, 0); /* a line of its own, not over the progress line */
  if (level == 0) {
    printf("%s\n", line);
    fflush(stdout);
  } else {
    fprintf(stderr, "%s\n", line);
  }
}

static void on_progress(void *ctx, const char *what, long done, long total, double elapsed_s) {
  (void)ctx;
  if (cli_progress_enabled()) cli_progress(what, done, total, elapsed_s);
}

/* --batch-sizes 1 8 32: into a static array (one command per process) that params points to. */
static int set_batch_sizes(void *params, void *field, const cli_opt *o, const char *cmd,
                           const char *list) {
  static int bss[PB_INFER_MAX_BATCH_SIZES];
  pb_infer_params *p = params;
  (void)field, (void)o;
  int n = 0;
  for (const char *s = list; *s;) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || errno || v < 1 || v > 65536 || (*end != ',' && *end != '\0'))
      return cli_usage_error(cmd, "--batch-sizes takes integers from 1 to 65536, not '%s'", list);
    if (n == PB_INFER_MAX_BATCH_SIZES)
      return cli_usage_error(cmd, "at most %d batch sizes", PB_INFER_MAX_BATCH_SIZES);
    bss[n++] = (int)v;
    s = *end ? end + 1 : end;
  }
  p->batch_sizes = bss;
  p->n_batch_sizes = n;
  return CLI_OK;
}

static double cell(const pb_table *t, size_t r, const char *col) {
  long c = pb_table_col_index(t, col);
  return c < 0 || pb_table_is_null(t, r, (size_t)c) ? NAN : pb_table_get_f64(t, r, (size_t)c);
}

static void print_rows(const pb_table *t) {
  long fw = pb_table_col_index(t, "framework"), bs = pb_table_col_index(t, "batch_size");
  long un = pb_table_col_index(t, "unstable"), n = pb_table_col_index(t, "n");
  long md = pb_table_col_index(t, "model");
  long rk = pb_table_col_index(t, "rank"); /* across ranks: a row per rank and one for all */
  int few = 0;
  for (size_t r = 0; r < pb_table_rows(t); r++) {
    if (rk >= 0) {
      const char *who = pb_table_get_str(t, r, (size_t)rk);
      if (strcmp(who, "all") == 0) printf("all ranks ");
      else printf("rank %-4s ", who);
    }
    /* throughput is batch / mean latency: the mean goes beside it, the p50 after */
    printf("%-16s %-9s batch %4lld: mean %9.3f ms  throughput %9.1f images/s  (p50 %9.3f ms)"
           "  %7.1f GFLOP/s  memory %8.1f MiB%s\n",
           pb_table_get_str(t, r, (size_t)fw), pb_table_get_str(t, r, (size_t)md),
           (long long)pb_table_get_i64(t, r, (size_t)bs), cell(t, r, "latency_mean_ms"),
           cell(t, r, "throughput_ips"), cell(t, r, "latency_p50_ms"),
           cell(t, r, "achieved_gflops"), cell(t, r, "memory_mb"),
           pb_table_get_bool(t, r, (size_t)un) ? "  (unstable: cv > 5% or outliers)" : "");
    few |= pb_table_get_i64(t, r, (size_t)n) < (int64_t)pb_percentile_min_n(0.99);
  }
  fflush(stdout);
  if (few)
    fprintf(stderr, "note: p99 of fewer than %zu samples is close to the maximum; raise --iterations\n",
            pb_percentile_min_n(0.99));
}

static int run_infer(const cli_args *a) {
  pb_infer_params p = infer_defaults;
  PB_RETURN_NOT_OK(cli_fill(a, &p));
  p.plot = 1;
  p.note = on_note, p.progress = on_progress;
  pb_table *rows = NULL;
  struct pb_error err = {{0}};
  /* SIGINT/SIGTERM stop it within a second: the peer and its temporary folder go, the rows that
   * finished stay in the CSV. SA_RESETHAND: a second Ctrl-C ends the program at once. */
  struct sigaction sa, old_int, old_term;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = (int)(SA_RESETHAND | SA_RESTART);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  p.cancel = &stop_signal;
  int rc = pb_infer_run(&p, &rows, NULL, 0, &err);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  cli_progress("", 0, 0, 0);
  int sig = stop_signal;
  /* Under mpirun every rank ends with the same (agreed) status and message, and rank 0 alone
   * holds the rows: it says what happened. */
  if (pb_mpi_env_rank() != 0) {
    pb_table_free(rows);
    return rc == PB_OK ? CLI_OK : rc == PB_ECANCELED && sig ? 128 + sig : rc == PB_EINVAL ? CLI_USAGE : CLI_FAIL;
  }
  if (rc == PB_ECANCELED && sig != 0) {
    fprintf(stderr, "pipebench infer: stopped by signal %d (%s)\n", sig, err.message);
    return 128 + sig;
  }
  if (rc == PB_EINVAL) return cli_usage_error(CMD, "%s", err.message);
  if (rc != PB_OK) return cli_fail(CMD, "%s", err.message);
  print_rows(rows);
  pb_table_free(rows);
  return CLI_OK;
}

const cli_command cli_cmd_infer = {
    .name = "infer",
    .summary = "model inference across batch sizes (pipebench's engine, torch and JAX as peers)",
    .usage = "[options]",
    .details = "Builds the model once per batch size (its build, or a peer's compile, is reported\n"
               "as compilation_time_ms), runs --warmup passes that are dropped, then times each\n"
               "of --iterations passes from the call to the finished output (on a GPU after a\n"
               "synchronise). The peers run as Python child processes over the same inputs; a\n"
               "peer whose framework is missing is skipped with one line (exit 2 only when\n"
               "nothing could run). Writes OUTDIR/benchmark_results_YYYYMMDD_HHMMSS.csv (UTC, the\n"
               "start; _2, _3, ... when taken; a plain CSV, rewritten as each batch size or peer\n"
               "finishes, so a failure, --peer-timeout or Ctrl-C keeps the finished rows), the\n"
               "environment in the .json of the same stem, and the plot in\n"
               "OUTDIR/../images/pipebench_infer.png. A dataset is read image by\n"
               "image (cycling when the batch is larger), its middle z plane at t=0 centre-\n"
               "cropped or zero-padded to the model's input; embed takes the data's own shape.\n"
               "Under mpirun each rank runs the engine on its own GPU (rank modulo the GPUs)\n"
               "or the CPU over its shard of the data source; rank 0 writes a row per rank and\n"
               "one for all ranks (images/s over the common window; docs/scaling.md).",
    .opts = infer_opts,
    .defaults = &infer_defaults,
    .params = "pb_infer_params",
    .python = "infer",
    .max_pos = 0,
    .min_pos = 0,
    .run = run_infer,
};
