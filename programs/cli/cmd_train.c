/* pipebench train: options in, pb_train_run (programs/infer/train.c), the summary out. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipebench/bench.h"
#include "pipebench/engine.h"
#include "pipebench/infer.h"

#define CMD "train"

static const cli_opt train_opts[] = {
    {"data", "PATH", "dataset in any format pipebench reads (through the loader), or "
                     "'synthetic' (default)"},
    {"num-images", "N", "synthetic images (default 256; 1x100x100 like origin.md's)"},
    {"model", "NAME", "embed (default; the only model with a training path on oneDNN)"},
    {"epochs", "E", "passes over the data (default 1)"},
    {"batch-size", "N", "images per step (default 16); a last partial batch is dropped"},
    {"lr", "X", "SGD learning rate (default 0.01)"},
    {"loss", "NAME", "cross_entropy (default; seeded random class per image) or mse (seeded "
                     "random target vector per image)"},
    {"dtype", "NAME", "float32 (training runs in float32)"},
    {"device", "NAME", "auto (default), cpu, cuda"},
    {"threads", "N", "compute threads (default: all CPUs)"},
    {"workers", "N", "loader worker threads for --data (default 0: read in the training thread)"},
    {"seed", "N", "weights, labels, shuffling, synthetic pixels (default 42)"},
    {"metrics-out", "FILE", "write the metrics as JSON here (atomically)"},
    {NULL, NULL, NULL}};

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
  pb_train_params p = PB_TRAIN_PARAMS_DEFAULTS;
  long epochs, bs, threads, seed, nimg, workers;
  if (cli_get_long(a, CMD, "epochs", 1, 1, 1000000, &epochs) ||
      cli_get_long(a, CMD, "batch-size", 16, 1, 65536, &bs) ||
      cli_get_long(a, CMD, "threads", 0, 0, 4096, &threads) ||
      cli_get_long(a, CMD, "workers", 0, 0, 256, &workers) ||
      cli_get_long(a, CMD, "seed", 42, 0, 0x7fffffffL, &seed) ||
      cli_get_long(a, CMD, "num-images", 256, 1, 100000000, &nimg) ||
      cli_get_double(a, CMD, "lr", 0.01, 0.0, 1e6, &p.lr))
    return CLI_USAGE;
  p.data = cli_get(a, "data"), p.model = cli_get(a, "model"), p.loss = cli_get(a, "loss");
  p.dtype = cli_get(a, "dtype"), p.device = cli_get(a, "device");
  p.metrics_path = cli_get(a, "metrics-out");
  p.epochs = (int)epochs, p.batch_size = (int)bs, p.threads = (int)threads;
  p.workers = (int)workers, p.seed = (uint64_t)seed, p.num_images = nimg;
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
    .max_pos = 0,
    .min_pos = 0,
    .run = run_train,
};
