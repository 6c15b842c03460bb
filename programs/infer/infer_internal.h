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
  PB__FW_PEERS = 2u | 4u | 8u
};

/** One pb_infer_run: what was asked, the inputs, the rows so far. */
typedef struct pb__infer_ctx {
  unsigned mask; /**< PB__FW_* */
  const char *model, *dtype, *source, *device; /**< device: resolved ("cpu", "cuda") */
  int bss[PB_INFER_MAX_BATCH_SIZES], nbs;
  int c, h, w;                                  /**< the model's input */
  float *inputs[PB_INFER_MAX_BATCH_SIZES];      /**< one float32 NCHW batch per batch size */
  uint64_t seed;
  int warmup;
  int engine_threads;
  double flops;                                 /**< per image, forward */
  pb_env env;
  pb_table *rows;
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
/** Runs the peers c->mask asks for (torch eager and torch.compile in one child, JAX in
 * another) and appends their rows. A missing framework is a warning note, not an error. */
int pb__infer_peers(const pb_infer_params *p, pb__infer_ctx *c, struct pb_error *err);

#endif
