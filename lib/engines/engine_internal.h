/* What a backend implements, and the engine handle that dispatches to it. */
#ifndef PB_ENGINES_ENGINE_INTERNAL_H
#define PB_ENGINES_ENGINE_INTERNAL_H

#include "engines/graph.h"
#include "pipebench/engine.h"

/* One backend: a device kind and the functions that run a compiled graph on it. Backends are
 * listed in engine.c's table, as formats are in the format registry; the CUDA backend's table
 * lives in a module loaded at run time (engines/cuda/cuda_module.h: change PB__CUDA_ABI when
 * this struct, struct pb_engine or pb_engine_info change). */
typedef struct pb__engine_vtable {
  const char *name;   /* "onednn" */
  const char *device; /* "cpu" */
  /* Compiles g (which the backend may keep or drop: the engine frees it after create) for
   * e->params; fills e->info's device, isa, byte counts and compile time; sets e->impl. */
  int (*create)(pb_engine *e, const pb__graph *g, struct pb_error *err);
  void (*destroy)(pb_engine *e);
  /* Device memory for tensors (host memory on the CPU). */
  void *(*tensor_alloc)(pb_engine *e, size_t bytes);
  void (*tensor_release)(pb_engine *e, void *ptr, size_t bytes);
  int (*tensor_write)(pb_engine *e, void *dst, const void *src, size_t bytes, struct pb_error *err);
  int (*tensor_read)(pb_engine *e, void *dst, const void *src, size_t bytes, struct pb_error *err);
  int host_visible; /* tensor memory can be touched by the CPU */
  int (*forward)(pb_engine *e, const void *input, void *output, struct pb_error *err);
  int (*train_step)(pb_engine *e, const void *input, const void *target, float lr, float *loss,
                    struct pb_error *err);
  int (*synchronize)(pb_engine *e, struct pb_error *err);
  /* The GPU data path (NULL where the backend reads host memory in place: engine.c converts on
   * the host and calls forward). host_allocator: pinned host memory for batches.
   * forward_native: copy raw pixels in (h2d_ns: the copy's device time), convert on the device
   * into the float32 input, then forward; in has been checked against the engine's shapes.
   * copy_in: one timed host-to-device copy. native_release: frees e->native (staging). */
  const pb_allocator *host_allocator;
  int (*forward_native)(pb_engine *e, const pb_native_batch *in, void *output, int64_t *h2d_ns,
                        struct pb_error *err);
  int (*copy_in)(pb_engine *e, const void *src, size_t bytes, int64_t *ns, struct pb_error *err);
  void (*native_release)(pb_engine *e);
  /* The device window (pb_engine_device_mark / pb_engine_device_spans): mark waits for queued
   * work, reads the host clock, then marks the stream; spans waits and gives forward_native's
   * spans since the mark (NULL on host backends). */
  int (*device_mark)(pb_engine *e, int64_t *host_ns, struct pb_error *err);
  int (*device_spans)(pb_engine *e, pb_device_span *spans, size_t cap, size_t *n,
                      struct pb_error *err);
  /* Waits for the most recent forward and gives its device time (NULL on host backends). */
  int (*forward_time)(pb_engine *e, int64_t *ns, struct pb_error *err);
  /* forward_native's data path into a training step instead of a forward: its spans and
   * device window cover the step (NULL where the backend does not train on the device). */
  int (*train_native)(pb_engine *e, const pb_native_batch *in, const void *target, float lr,
                      int64_t *h2d_ns, struct pb_error *err);
  /* A training engine's parameter i in torch's name and layout: values and gradient into host
   * arrays of *count floats (either may be NULL); PB_EINVAL past the last (NULL: not offered). */
  int (*train_param)(pb_engine *e, int i, char *name, size_t name_len, int64_t *count,
                     float *value, float *grad, struct pb_error *err);
} pb__engine_vtable;

struct pb_engine {
  const pb__engine_vtable *vt;
  pb_engine_info info;
  uint64_t seed;
  int training;
  int loss_mse; /* 0: cross-entropy, 1: mean squared error */
  float momentum, weight_decay; /* SGD (params.momentum, params.weight_decay) */
  int device_index; /* N of "cuda:N" (0 for "cuda"); the backend computes on that device */
  void *impl;
  pb_tensor *host_in, *host_out; /* kept for pb_engine_forward_host */
  void *native;                  /* the backend's staging for forward_native (native_release) */
  float *native_host;            /* host-side conversion target of forward_native (cpu) */
};

struct pb_tensor {
  pb_engine *e;
  pb_tensor_role role;
  size_t bytes;
  void *ptr;
};

extern const pb__engine_vtable pb__onednn_backend;

/* Builds an engine from a graph made elsewhere (tests build small ones); takes ownership of g.
 * params must already be checked; vt NULL: the first backend. */
int pb__engine_new_graph(const pb_engine_params *params, const pb__engine_vtable *vt,
                         pb__graph *g, pb_engine **out, struct pb_error *err);
/* The backend for device ("cpu", "cuda"), loading the CUDA module on first use; NULL with the
 * reason in why when the device is unknown or unavailable here. */
const pb__engine_vtable *pb__engine_backend(const char *device, char *why, size_t why_len);
/* A training engine's parameter i (vtable train_param): PB_EUNSUPPORTED where not offered. */
int pb__engine_train_param(pb_engine *e, int i, char *name, size_t name_len, int64_t *count,
                           float *value, float *grad, struct pb_error *err);
/* oneDNN matmul peak (onednn.c). */
int pb__onednn_peak_gflops(const char *dtype, int threads, double seconds, double *gflops,
                           struct pb_error *err);

#endif
