/* JPEG decoding on the GPU (cuda_jpeg.cu): nvJPEG opened at run time, batched decode into device
 * memory, and the evaluation crop (resize of the shorter side, centre crop) with the normalise
 * as one kernel. */
#ifndef PB_ENGINES_CUDA_JPEG_H
#define PB_ENGINES_CUDA_JPEG_H

#include <cuda_runtime.h>

#include "engines/engine_internal.h"

/* 0 when libnvjpeg loads and a decoder starts on the current device, else PB_EUNSUPPORTED with
 * one line in why. */
int pbc_jpeg_status(char *why, size_t why_len);

/* Decodes items (JPEG bytes, or pixels a CPU decoded) and writes their crops, normalised, into
 * input (n x 3 x crop x crop float32, device memory) on stream st. The decode and crop stay
 * queued; the items' bytes must stay valid until the next call returns (which waits for this
 * decode), or until the engine is synchronised.
 * *gpu_n: items nvJPEG decoded. A JPEG nvJPEG cannot read: PB_EFORMAT naming the item; the
 * decoder stays usable. */
int pbc_jpeg_to_input(const pb_jpeg_item *items, int n, int resize, int crop, const float *mean,
                      const float *std, float *input, cudaStream_t st, int *gpu_n,
                      struct pb_error *err);

/* The decoder's counts and host times since it started (zeros before). */
int pbc_jpeg_stats(pb_jpeg_gpu_stats *out);

/* The module's jpeg_crops: the same decode into host memory, for tests. */
int pbc_jpeg_crops(const pb_jpeg_item *items, int n, int resize, int crop, uint8_t **full,
                   uint8_t *crops, struct pb_error *err);

/* cuda_input.cu: the engine's forward from JPEG items (module jpeg_forward). */
int pbc_forward_jpeg(pb_engine *e, const pb_jpeg_item *items, int n, int resize,
                     const float *mean, const float *std, void *output, int *gpu_n,
                     struct pb_error *err);

#endif
