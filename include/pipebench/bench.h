/* pipebench run: the benchmark tracks over formats, loader settings and cache modes. */
#ifndef PIPEBENCH_BENCH_H
#define PIPEBENCH_BENCH_H

#include <signal.h>

#include "pipebench/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Settings of `pipebench run`. Lists are comma-separated text. */
typedef struct pb_run_params {
  const char *data;        /**< a `pipebench gen` folder (manifest.json) or one dataset; NULL:
                                generate the preset into OUT/dataset */
  const char *out;         /**< results folder: tables and summary go to OUT/data */
  const char *formats;     /**< NULL: every format present in data */
  const char *tracks;      /**< e.g. "1,2,4"; NULL: every track (pb_run_track) */
  const char *preset;      /**< "default" (1000 x 100x100 uint16, 1 channel) or "microscopy"
                                (200 x 3 x 1080x1080 uint16) */
  int cold;                /**< 1: evict dataset files from the page cache before each round */
  int repeats;             /**< rounds per configuration */
  int warmup;              /**< track 1: samples run and dropped before each round */
  int samples;             /**< track 1: samples measured per round */
  int batches;             /**< track 2: batches measured per round (after the first) */
  double window_ms;        /**< track 2: a round's steady window lasts at least this long */
  const char *batch_sizes; /**< track 2 */
  const char *workers;     /**< track 2 */
  const char *caches;      /**< track 2: none, preload, shared */
  const char *transforms;  /**< track 1: none, normalize, augment */
  uint64_t seed;
  const char *python;      /**< Python with numpy and torch for track 4 and the peers */
  const char *library;     /**< path of libpipebench.so for the Python binding (NULL: find) */
  int peer;                /**< 1: also run the torch DataLoader peer in track 2 */
  const char *model;       /**< track 3: engine model (embed, resnet50, vit_b_16) */
  int steps;               /**< track 3: steps measured per round (after the first) */
  int t3_batch, t3_workers;/**< track 3: loader batch size and workers */
  double emulate_ms;       /**< track 3: > 0: a fixed busy time per batch instead of a model */
  int train;               /**< track 3: 1: an SGD step per batch instead of a forward pass */
  const char *device;      /**< track 3 (and 4's host-to-device stage): "auto" (NULL: cuda
                                when an engine can run there, else cpu; a track 3 --train
                                loop on cpu, as the cuda engine runs inference only), "cpu",
                                "cuda" */
  const char *dtype;       /**< track 3: the engine's compute type; NULL: float32 on cpu,
                                bfloat16 on cuda */
  /** Progress: what is running, how many steps of how many are done. May be NULL. */
  void (*progress)(void *ctx, const char *what, long done, long total);
  void *progress_ctx;
  /** One line of text for the user (a result or a warning). May be NULL. */
  void (*report)(void *ctx, const char *line);
  void *report_ctx;
  /** Set by a signal handler to stop the run (the signal's number, by convention): within a
   * second every loop and child process ends, nothing of this run replaces the earlier results,
   * and pb_run returns PB_ECANCELED after writing OUT/data/pipebench_summary_failed.json. NULL:
   * the run cannot be stopped this way. */
  volatile sig_atomic_t *cancel;
  const char *framework;   /**< track 3: NULL: pipebench's own engine; "torch": a torch model fed
                                by pipebench's loader, torch's DataLoader and device-resident
                                input in interleaved rounds (docs/track3-torch.md) */
  const char *torch_model; /**< track 3 with framework "torch": "FILE.py[:FUNCTION]" whose
                                FUNCTION (default build) returns a torch.nn.Module; NULL: model
                                names a torchvision model (or embed) */
  int torch_compile;       /**< track 3 with framework "torch": the model goes through
                                torch.compile (torch 2.0 or later) before the first step */
  int reads_in_flight;     /**< tracks 2 and 3: the loader's sample reads in flight
                                (pb_loader_params; 0: auto) */
  int64_t bytes_in_flight; /**< tracks 2 and 3: the bytes those reads may hold (0: auto) */
  const char *calibration; /**< the machine's limits saved by `pipebench calibrate --out FILE` on
                                this machine, used instead of measuring them in this run; NULL:
                                PIPEBENCH_CALIBRATION when set, else measured */
  const char *decode;      /**< track 3 on cuda over an image folder: "cpu" (NULL, the default:
                                the loader's workers decode and crop), "gpu" (the workers read
                                the files, nvJPEG decodes and the GPU crops; PB_EUNSUPPORTED
                                where nvJPEG is unavailable) or "auto" (gpu where nvJPEG is
                                available, else cpu, said in a report line) */
} pb_run_params;

#define PB_RUN_PARAMS_DEFAULTS                                                                  \
  {                                                                                             \
    .data = NULL, .out = "results/run", .formats = NULL, .tracks = NULL,                          \
    .preset = "default", .cold = 0, .repeats = 3, .warmup = 10, .samples = 100, .batches = 50,  \
    .window_ms = 100,                                                                           \
    .batch_sizes = "1,4,16,64", .workers = "0,1,2,4", .caches = "none,preload,shared",          \
    .transforms = "none,normalize,augment", .seed = 42, .python = "/usr/bin/python3",           \
    .library = NULL, .peer = 1, .model = "embed", .steps = 50, .t3_batch = 16,                  \
    .t3_workers = 2, .emulate_ms = 0, .train = 0, .device = NULL, .dtype = NULL, .progress = NULL, .progress_ctx = NULL, .report = NULL,         \
    .report_ctx = NULL, .cancel = NULL, .framework = NULL, .torch_model = NULL,                 \
    .torch_compile = 0, .reads_in_flight = 0, .bytes_in_flight = 0, .calibration = NULL,        \
    .decode = NULL                                                                              \
  }

/** Track i of pb_run, counting from 0 in the order it runs them: returns its id (what tracks
 * lists, "1") and sets *name (when name is not NULL) to a few words saying what it measures;
 * both are static strings. NULL (and *name NULL) past the last track. */
PB_API const char *pb_run_track(size_t i, const char **name);

/** Runs the tracks and writes their tables, the summary, the plots and the report. They are
 * made in a staging folder inside OUT and replace the earlier set as one only when everything
 * succeeded; on a failure or a stop the earlier set stays as it was, and
 * OUT/data/pipebench_summary_failed.json says what was finished and why the run stopped.
 * Returns the first error (PB_ECANCELED when stopped through params->cancel). */
PB_API int pb_run(const pb_run_params *params, struct pb_error *err);

/** Drops every regular file under path (a file or a folder) from the page cache with
 * posix_fadvise(POSIX_FADV_DONTNEED). Returns the number of files evicted, or an error. */
PB_API int pb_evict_path(const char *path, struct pb_error *err);

/** What the MPI launcher (mpirun, a PMIx launcher) told this process in its environment, read
 * without MPI: the number of ranks it started (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE; 1
 * when only PMIX_RANK is set; 0 when no launcher started this process), and this process's rank
 * (OMPI_COMM_WORLD_RANK, else PMI_RANK, else PMIX_RANK; 0 when none is set). The one place
 * pipebench reads them: the CLI lets rank 0 alone speak and write. */
PB_API int pb_mpi_env_size(void);
PB_API int pb_mpi_env_rank(void);

#ifdef __cplusplus
}
#endif
#endif
