/* The CUDA module's training step (cuda_train.cu), which cuda_engine.cu's backend runs when an
 * engine is built with params.training. */
#ifndef PB_ENGINES_CUDA_TRAIN_H
#define PB_ENGINES_CUDA_TRAIN_H

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "engines/engine_internal.h"

typedef struct pbc_train pbc_train;

/* Compiles g for training on stream st with the engine's handles (which stay the caller's);
 * fills e->info's byte counts. dtype bfloat16 (autocast) or float32. Free with pbc_train_free. */
int pbc_train_new(pb_engine *e, const pb__graph *g, cudaStream_t st, cudnnHandle_t dnn,
                  cublasLtHandle_t lt, pbc_train **out, struct pb_error *err);
void pbc_train_free(pbc_train *t);
/* One step on device tensors (float32 NCHW input; int32 labels or float32 mse targets), queued
 * on the stream; loss (may be NULL) waits for it and checks the labels. */
int pbc_train_step(pbc_train *t, const void *input, const void *target, float lr, float *loss,
                   struct pb_error *err);
/* Waits for the queued steps and gives the last one's loss (then checks the labels). */
int pbc_train_step_loss(pbc_train *t, float *loss, struct pb_error *err);
/* PB_EINVAL naming the first label outside [0, outputs) seen since the last check. Waits. */
int pbc_train_check(pbc_train *t, struct pb_error *err);
/* The forward pass alone (batch statistics; running averages untouched): float32 logits. */
int pbc_train_forward(pbc_train *t, const void *input, void *output, struct pb_error *err);
/* Parameter i (torch's name and layout): its values and gradient into host arrays of *count
 * floats (either may be NULL; both NULL only gives the count). Running statistics come with a
 * zero gradient. PB_EINVAL past the last. Waits for the stream. */
int pbc_train_param(pbc_train *t, int i, char *name, size_t name_len, int64_t *count,
                    float *value, float *grad, struct pb_error *err);

#endif
