/* Shared by programs/infer: the state of one pb_infer_run and the peer runner. Internal. */
#ifndef PB_INFER_INTERNAL_H
#define PB_INFER_INTERNAL_H

#include "pipebench/core.h"
#include "pipebench/infer.h"
#include "pipebench/results.h"

enum {
  PB__FW_ENGINE = 1u,
  PB__FW_TORCH = 2u,
  PB__FW_TORCH_COMPILE = 4u,
  PB__FW_JAX = 8u,
  PB__FW_PEERS = 2u | 4u | 8u,
  PB__FW_ONEDNN = 16u, /**< the engine named as onednn: the CPU */
  PB__FW_CUDA = 32u    /**< the engine named as cuda (or cudnn): the GPU */
};

#define PB__INFER_MAX_MODELS 8
/** The models of one call, in the order asked. */
typedef struct pb__infer_models {
  char names[PB__INFER_MAX_MODELS][32];
  int n;
} pb__infer_models;

/** One pb_infer_run: what was asked, the inputs, the rows so far. */
typedef struct pb__infer_ctx {
  unsigned mask; /**< PB__FW_* */
  const char *model, *dtype, *source, *device; /**< device: resolved ("cpu", "cuda") */
  const char *source_format;                    /**< format of source, NULL: detected */
  char device_buf[32];                          /**< across ranks: this rank's "cuda:N" */
  char device_why[640];                         /**< why auto took the cpu ("" otherwise) */
  int bss[PB_INFER_MAX_BATCH_SIZES], nbs;
  int c, h, w;                                  /**< the model's input */
  float *inputs[PB_INFER_MAX_BATCH_SIZES];      /**< one float32 NCHW batch per batch size */
  uint64_t seed;
  int warmup;
  int nmodels;
  int engine_threads;
  double flops;                                 /**< per image, forward */
  pb_env env;
  pb_table *rows;
  char stamp[32];          /**< the call's start, UTC, YYYYMMDD_HHMMSS: the CSV's name */
  char csv_path[4400];     /**< the CSV this call claimed ("" before its first rows) */
  char env_path[4400];     /**< the environment JSON beside it */
} pb__infer_ctx;

/** What a row says besides its latencies. Strings are borrowed. */
typedef struct pb__infer_row {
  const char *framework, *version, *versions, *device_name, *device_type, *isa, *memory_format;
  const char *memory_kind;
  int threads, batch;
  double memory_mb, compile_ms;
} pb__infer_row;

/** Appends one row: the statistics of n latencies (seconds, warm-up already dropped) and, where
 * the framework gave them, of n_dev device-side latencies (dev_lat_s may be NULL). */
void pb__infer_add_row(pb__infer_ctx *c, const pb__infer_row *r, const double *lat_s, size_t n,
                       const double *dev_lat_s, size_t n_dev);
/** Sends a formatted line to params->note, when there is one. */
void pb__infer_note(const pb_infer_params *p, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** Checks before any pass runs that dir (made when missing) takes a new file: PB_EIO naming it
 * otherwise. NULL: nothing to check. made gets the first folder this call created ("" when dir
 * existed), for pb__infer_unmake_output. */
int pb__infer_check_output(const char *dir, char *made, size_t made_size, struct pb_error *err);
/** Removes the empty folders from dir up to `made` (what pb__infer_check_output created) when
 * nothing was written after all. */
void pb__infer_unmake_output(const char *dir, const char *made);
/** The rows as a plain CSV (a header line, then the rows; NULL cells empty, booleans True/False)
 * written atomically. */
int pb__infer_write_csv(const pb_table *t, const char *path, struct pb_error *err);
/** Writes the rows so far (when params->output_dir is set and there are rows): the first time
 * it claims a name of its own, output_dir/benchmark_results_<stamp>[_N].csv (into
 * c->csv_path, with the environment in the .json of the same stem), later it replaces that
 * file atomically. */
int pb__infer_save(const pb_infer_params *p, pb__infer_ctx *c, struct pb_error *err);
/** The table's metadata (the environment, "env.*") as one JSON object, written atomically. */
int pb__infer_write_env(const pb_table *t, const char *path, struct pb_error *err);
/** A `pipebench gen` folder (manifest.json of kind pipebench.dataset) gives the path of
 * `format` in it, or of its first format that opens when format is NULL; any other path is
 * copied as it is. fmt_out gets the format ("" when unknown). */
int pb__infer_resolve_source(const char *src, const char *format, char *out, size_t out_size,
                             char *fmt_out, size_t fmt_size, struct pb_error *err);
/** Starts a resident-memory window (the peak is reset where the kernel allows); returns the
 * baseline in KiB. */
double pb__infer_rss_mark(void);
/** Growth of the peak resident memory since the mark, in MiB (0 when it did not grow). */
double pb__infer_rss_growth_mb(double mark_kib);
/** Runs the peers c->mask asks for (torch eager and torch.compile in one child, JAX in
 * another) and appends their rows. A missing framework is a warning note, not an error. */
int pb__infer_peers(const pb_infer_params *p, pb__infer_ctx *c, struct pb_error *err);

#endif
