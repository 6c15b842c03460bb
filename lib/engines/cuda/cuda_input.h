/* The CUDA module's data path (cuda_input.cu): pinned host batches, and raw pixels copied to the
 * device on a stream of their own and converted there into the engine's float32 input. */
#ifndef PB_ENGINES_CUDA_INPUT_H
#define PB_ENGINES_CUDA_INPUT_H

#include <cuda_runtime.h>

#include "engines/engine_internal.h"

/* The engine's compute stream (cuda_engine.cu): the conversion runs on it, before the model. */
cudaStream_t pbc_engine_stream(pb_engine *e);

/* cudaHostAlloc / cudaFreeHost, for pb_loader_params.allocator. */
extern const pb_allocator pbc_pinned_allocator;
/* pb__engine_vtable's forward_native, copy_in and native_release for the cuda backend. */
int pbc_forward_native(pb_engine *e, const pb_native_batch *in, void *output, int64_t *h2d_ns,
                       struct pb_error *err);
/* pb__engine_vtable's train_native: the same data path into a training step. */
int pbc_train_native(pb_engine *e, const pb_native_batch *in, const void *target, float lr,
                     int64_t *h2d_ns, struct pb_error *err);
int pbc_copy_in(pb_engine *e, const void *src, size_t bytes, int64_t *ns, struct pb_error *err);
void pbc_native_release(pb_engine *e);
/* pb__engine_vtable's device_mark and device_spans: the device window of forward_native. */
int pbc_device_mark(pb_engine *e, int64_t *host_ns, struct pb_error *err);
int pbc_device_spans(pb_engine *e, pb_device_span *spans, size_t cap, size_t *n,
                     struct pb_error *err);

#endif
