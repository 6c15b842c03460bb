/* pipebench train: options in, pb_train_run (programs/infer/train.c), the summary out. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipebench/bench.h"
#include "pipebench/engine.h"
#include "pipebench/infer.h"
#include "pipebench/loader.h"

#define CMD "train"

#define P pb_train_params
static const P train_defaults = PB_TRAIN_PARAMS_DEFAULTS;

/* One line per option (docs/options.md); .py names the keyword of pipebench.train(). */
static const cli_opt train_opts[] = {
    {.name = "data", .arg = "PATH", .type = CLI_STRING, CLI_AT(P, data), .py = "data", .help = "dataset in any format pipebench reads (through the loader), or 'synthetic' (default)"},
    {.name = "num-images", .arg = "N", .type = CLI_INT, CLI_AT(P, num_images), .lo = 1, .hi = 100000000, .py = "num_images", .help = "synthetic images (default {}; 1x100x100 like origin.md's)"},
    {.name = "model", .arg = "NAME", .type = CLI_STRING, CLI_AT(P, model), .py = "model", .help = "embed (default; the only model with a training path on oneDNN)"},
    {.name = "epochs", .arg = "E", .type = CLI_INT, CLI_AT(P, epochs), .lo = 1, .hi = 1000000, .py = "epochs", .help = "passes over the data (default {})"},
    {.name = "batch-size", .arg = "N", .type = CLI_INT, CLI_AT(P, batch_size), .lo = 1, .hi = 65536, .py = "batch_size", .help = "images per step (default {}); a last partial batch is dropped"},
    {.name = "lr", .arg = "X", .type = CLI_DOUBLE, CLI_AT(P, lr), .dlo = 0.0, .dhi = 1e6, .py = "lr", .help = "SGD learning rate (default {})"},
    {.name = "loss", .arg = "NAME", .type = CLI_STRING, CLI_AT(P, loss), .py = "loss", .help = "cross_entropy (default; seeded random class per image) or mse (seeded random target vector per image)"},
    {.name = "dtype", .arg = "NAME", .type = CLI_STRING, CLI_AT(P, dtype), .help = "float32 (training runs in float32)"},
    {.name = "device", .arg = "NAME", .type = CLI_STRING, CLI_AT(P, device), .py = "device", .help = "auto (default), cpu, cuda"},
    {.name = "threads", .arg = "N", .type = CLI_INT, CLI_AT(P, threads), .lo = 0, .hi = 4096, .py = "threads", .help = "compute threads (default: all CPUs)"},
    {.name = "workers", .arg = "N", .type = CLI_INT, CLI_AT(P, workers), .lo = 0, .hi = 256, .py = "workers", .help = "loader worker threads for --data (default {}: read in the training thread)"},
    {.name = "reads-in-flight", .arg = "N", .type = CLI_INT, CLI_AT(P, reads_in_flight), .lo = 0, .hi = 4096, .py = "reads_in_flight", .help = "--data: sample reads in flight across the loader's workers (0: auto, 32 for a URL, one per worker for a path), as run's"},
    {.name = "bytes-in-flight", .arg = "SIZE", .type = CLI_STRING, CLI_AT(P, bytes_in_flight), .set = cli_set_bytes_in_flight, .show = cli_show_i64, .py = "bytes_in_flight", .help = "--data: most bytes those reads hold at once, an image's decoded size each (K, M, G suffixes; 0: auto, 64M)"},
    {.name = "seed", .arg = "N", .type = CLI_INT, CLI_AT(P, seed), .lo = 0, .hi = 0x7fffffffL, .py = "seed", .help = "weights, labels, shuffling, synthetic pixels (default {})"},
    {.name = "metrics-out", .arg = "FILE", .type = CLI_STRING, CLI_AT(P, metrics_path), .py = "metrics_path", .help = "write the metrics as JSON here (atomically)"},
    {.name = NULL}};

static void on_note(void *ctx, int level, const char *line) {
  (void)ctx;
  FILE *f = level == 0 ? stdout : stderr;
  fprintf(f, "%s\n", line);
  fflush(f);
}

static void on_progress(void *ctx, const char *what, long done, long total, double elapsed_s) {
  (void)ctx;
  if (cli_progress_enabled()) cli_progress(what, done, total, elapsed_s);
}

static int run_train(const cli_args *a) {
  pb_train_params p = train_defaults;
  PB_RETURN_NOT_OK(cli_fill(a, &p));
  p.note = on_note, p.progress = on_progress;
  pb_train_result r;
  struct pb_error err = {{0}};
  int rc = pb_train_run(&p, &r, &err);
  cli_progress("", 0, 0, 0);
  /* under mpirun every rank ends with the same (agreed) status and message: rank 0 says it, and
   * rank 0 alone writes the metrics */
  int writer = pb_mpi_env_rank() == 0;
  if (!writer && rc != PB_OK) return rc == PB_EINVAL ? CLI_USAGE : CLI_FAIL;
  if (rc == PB_EINVAL) return cli_usage_error(CMD, "%s", err.message);
  if (rc != PB_OK) return cli_fail(CMD, "%s", err.message);
  printf("total %.3f s (first epoch %.3f s), %.1f images/s; data %.3f s, compute %.3f s, "
         "data-wait %.1f%%\nfirst batch: data %.2f ms, compute %.2f ms; loss %.5f -> %.5f; "
         "peak RSS %.1f MiB, engine %.1f MiB\n",
         r.total_s, r.first_epoch_s, r.throughput_ips, r.data_s, r.compute_s,
         100.0 * r.data_wait_fraction, r.first_batch_data_s * 1e3, r.first_batch_compute_s * 1e3,
         r.first_loss, r.final_loss, r.peak_rss_mb, r.engine_memory_mb);
  if (p.metrics_path != NULL && writer)
    printf("metrics: %s\n", p.metrics_path);
  return CLI_OK;
}

const cli_command cli_cmd_train = {
    .name = "train",
    .summary = "SGD training loop on a model engine, data loading and compute timed apart",
    .usage = "[options]",
    .details = "Each epoch visits the images in a seeded shuffled order, batch by batch (a last\n"
               "partial batch is dropped: engines are built for one batch size); a dataset is\n"
               "read through pipebench's loader (--workers threads). A step's data time runs\n"
               "from asking for the batch to the batch in the input tensor; its compute time is\n"
               "the forward, loss, backward and SGD update. Labels: cross_entropy uses a seeded\n"
               "random class per image (of the model's outputs), mse a seeded normal target\n"
               "vector per image; both depend only on --seed and the image index.",
    .opts = train_opts,
    .defaults = &train_defaults,
    .params = "pb_train_params",
    .python = "train",
    .max_pos = 0,
    .min_pos = 0,
    .run = run_train,
};
