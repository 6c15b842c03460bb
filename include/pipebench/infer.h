/* pipebench infer and train: a model's forward pass timed across batch sizes (on pipebench's own
 * engine and on the framework peers, torch and JAX, in the same call), and a plain SGD training
 * loop fed by the loader. The command line and the Python binding both call these. See
 * docs/infer.md. */
#ifndef PIPEBENCH_INFER_H
#define PIPEBENCH_INFER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "pipebench/core.h"
#include "pipebench/results.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Most batch sizes one call takes. */
#define PB_INFER_MAX_BATCH_SIZES 32

/** A line for the user: level 0 is information (the device, where files went), level 1 a
 * warning (a peer skipped because its framework is missing, a plot not drawn). The text has no
 * newline and lives for the call only. */
typedef void (*pb_infer_note_fn)(void *ctx, int level, const char *line);
/** Progress of a long loop: `done` of `total` steps, `elapsed_s` since it began. Called from
 * the calling thread. */
typedef void (*pb_infer_progress_fn)(void *ctx, const char *what, long done, long total,
                                     double elapsed_s);

/** What pb_infer_run measures. Start from PB_INFER_PARAMS_DEFAULTS (or pb_infer_params_init);
 * every pointer is borrowed for the call. */
typedef struct pb_infer_params {
  /** Comma-separated list of what runs, each giving its own rows: "pipebench" (pipebench's
   * engine on the device), "onednn" (the engine on the CPU), "cuda" (the engine on the GPU;
   * "cudnn" too), "pytorch" or "torch" (eager), "torch-compile" (torch.compile), "jax"
   * (jax.jit), "both" (pytorch and jax), "peers" (pytorch, torch-compile, jax), "all". NULL:
   * "pipebench". */
  const char *frameworks;
  /** Comma-separated models, each run in turn: "embed" (NULL), "resnet50", "vit_b_16";
   * "both" is resnet50 and vit_b_16. */
  const char *model;
  const char *dtype;       /**< "float32" (NULL), "bfloat16", "float16" */
  const char *device;      /**< "auto" (NULL), "cpu", "cuda"; the engine and the peers all run
                                on the device "auto" resolves to */
  const int *batch_sizes;  /**< n_batch_sizes sizes from 1 to 65536; NULL: 1, 8, 32, 128 */
  int n_batch_sizes;       /**< 0 to PB_INFER_MAX_BATCH_SIZES */
  int iterations;          /**< timed passes per batch size (>= 1) */
  int warmup;              /**< untimed passes first, dropped (>= 0) */
  int threads;             /**< compute threads; 0: all online CPUs */
  uint64_t seed;           /**< weights and synthetic input */
  /** "synthetic" (NULL: seeded normal noise), a dataset path, or a folder `pipebench gen`
   * wrote (its data_format, or the first of its formats that opens) */
  const char *data_source;
  const char *output_dir;  /**< where benchmark_results_YYYYMMDD_HHMMSS.csv goes (made when
                                missing; the stamp is the call's start, and a name another
                                call already took gets _2, _3, ...); NULL: no file */
  int plot;                /**< 1: also draw output_dir/../images/pipebench_infer.png */
  const char *python;      /**< Python for the peers; NULL: $PIPEBENCH_PYTHON, else the configured one */
  double peer_timeout_s;   /**< a peer that runs longer is stopped with its process group;
                                0: one hour */
  pb_infer_note_fn note;   /**< NULL: no notes */
  void *note_ctx;
  pb_infer_progress_fn progress; /**< NULL: none */
  void *progress_ctx;
  const char *data_format; /**< format of data_source (NULL: detected, or a gen folder's first) */
  /** Set by a signal handler to stop the call (the signal's number, by convention): the pass
   * under way and any peer (with its process group) stop within a second, the peers' temporary
   * folder is removed, the rows finished so far stay in the CSV, and the call returns
   * PB_ECANCELED. NULL: not stoppable this way. */
  volatile sig_atomic_t *cancel;
} pb_infer_params;

#define PB_INFER_PARAMS_DEFAULTS                                                               \
  {.frameworks = NULL, .model = NULL, .dtype = NULL, .device = NULL, .batch_sizes = NULL,      \
   .n_batch_sizes = 0, .iterations = 20, .warmup = 3, .threads = 0, .seed = 42,                \
   .data_source = NULL, .output_dir = NULL, .plot = 0, .python = NULL, .peer_timeout_s = 0,    \
   .note = NULL, .note_ctx = NULL, .progress = NULL, .progress_ctx = NULL, .data_format = NULL, \
   .cancel = NULL}

/** Fills params with PB_INFER_PARAMS_DEFAULTS (for bindings that cannot use the macro). */
PB_API void pb_infer_params_init(pb_infer_params *params);

/** Runs every framework of params->frameworks over every batch size: the model is built once per
 * batch size (its build time is compilation_time_ms), --warmup passes are dropped, then each
 * timed pass runs from the call to the finished output (on a GPU: synchronised before the clock
 * is read). One row per framework and batch size in *rows (a new table the caller frees with
 * pb_table_free; NULL when the call fails), with the columns of docs/infer.md. A peer whose
 * framework is missing (or cannot reach the device) gives no rows and one warning note.
 * When output_dir is set it is checked first (made, and a file created and removed in it), and
 * the rows are written there as a plain CSV with the environment in a JSON file of the same stem
 * (both atomically), each time rows finish (a batch size of the engine, a peer), so that a later
 * failure, a peer's timeout or a stop keeps them (the error message then names the file); the
 * CSV's path goes into csv_path (may be NULL). Returns 0; PB_ECANCELED when stopped through
 * params->cancel; PB_EINVAL for a
 * bad parameter (the message names it and lists what is available; a device this machine lacks,
 * such as "mps" or "tpu", is one); PB_EUNSUPPORTED when the device cannot run the engine, or when
 * every framework asked for was skipped (the message says why); PB_ECHILD when a peer failed;
 * PB_EIO for an output folder that takes no file; other codes for I/O. */
PB_API int pb_infer_run(const pb_infer_params *params, pb_table **rows, char *csv_path,
                        size_t csv_path_size, struct pb_error *err);

/** What pb_train_run does. Start from PB_TRAIN_PARAMS_DEFAULTS (or pb_train_params_init). */
typedef struct pb_train_params {
  const char *data;     /**< a dataset in any format pipebench reads, read through the loader;
                             "synthetic" (NULL): num_images seeded uniform 1x100x100 images */
  int64_t num_images;   /**< synthetic images (>= 1) */
  const char *model;    /**< "embed" (NULL), "resnet50", "vit_b_16" */
  const char *loss;     /**< "cross_entropy" (NULL) or "mse" */
  const char *dtype;    /**< "float32" (NULL) */
  const char *device;   /**< "auto" (NULL), "cpu", "cuda" */
  int epochs;           /**< >= 1 */
  int batch_size;       /**< images per step; a last partial batch is dropped */
  double lr;            /**< SGD learning rate (>= 0) */
  int threads;          /**< compute threads; 0: all online CPUs */
  int workers;          /**< loader worker threads (0: batches are read in the calling thread) */
  uint64_t seed;        /**< weights, labels, shuffling, synthetic pixels */
  const char *metrics_path; /**< write the metrics as JSON here (atomically); NULL: none */
  pb_infer_note_fn note;    /**< the device line and one line per epoch; NULL: none */
  void *note_ctx;
  pb_infer_progress_fn progress;
  void *progress_ctx;
  int reads_in_flight;      /**< the loader's sample reads in flight (pb_loader_params); 0: auto */
  int64_t bytes_in_flight;  /**< most bytes those reads hold at once; 0: auto */
} pb_train_params;

#define PB_TRAIN_PARAMS_DEFAULTS                                                               \
  {.data = NULL, .num_images = 256, .model = NULL, .loss = NULL, .dtype = NULL,                \
   .device = NULL, .epochs = 1, .batch_size = 16, .lr = 0.01, .threads = 0, .workers = 0,      \
   .seed = 42, .metrics_path = NULL, .note = NULL, .note_ctx = NULL, .progress = NULL,         \
   .progress_ctx = NULL, .reads_in_flight = 0, .bytes_in_flight = 0}

PB_API void pb_train_params_init(pb_train_params *params);

/** What a training run measured. Plain data. Times in seconds. */
typedef struct pb_train_result {
  char backend[16], device[16], device_name[128], isa[48];
  int threads;
  int64_t parameters;
  int64_t images;        /**< images in the dataset (or synthetic) */
  int channels, height, width; /**< the model's input */
  int64_t steps;
  double total_s, first_epoch_s;
  double first_batch_data_s, first_batch_compute_s; /**< the first step, kept out of steady state */
  double data_s, compute_s;     /**< summed over every step */
  double data_wait_fraction;    /**< data / (data + compute) over the steps after the first; NaN
                                     when there is only one step */
  double throughput_ips;
  double first_loss, final_loss;
  double peak_rss_mb, engine_memory_mb;
  double gflops_per_image_forward;
} pb_train_result;

/** Trains params->model with plain SGD for params->epochs: each epoch visits the images in a
 * seeded shuffled order (the loader's shuffle), batch by batch. A step's data time runs from
 * asking the loader for the batch to the batch in the input tensor; its compute time is the
 * forward, loss, backward and update. Labels depend only on the seed and the image index.
 * Fills *result (may be NULL). Errors: PB_EINVAL for a bad parameter (including a batch larger
 * than the data), the dataset's or the engine's code otherwise. */
PB_API int pb_train_run(const pb_train_params *params, pb_train_result *result,
                        struct pb_error *err);

#ifdef __cplusplus
}
#endif
#endif
