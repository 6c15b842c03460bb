/* Helpers shared by the CUDA module's files. */
#ifndef PB_ENGINES_CUDA_SHARED_H
#define PB_ENGINES_CUDA_SHARED_H

#include <cuda_runtime.h>

#include "engines/cuda/cuda_module.h"

/* printf into err (may be NULL); returns code. */
int pbc_err(struct pb_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A CUDA error as a pb code: PB_ENOMEM (with free and total device memory) or PB_EIO. */
int pbc_cuda_err(struct pb_error *err, cudaError_t e, const char *what);
int64_t pbc_now_ns(void);
/* Device 0 and the library versions loaded, read at run time. */
int pbc_device_probe(pb__cuda_device *d, struct pb_error *err);
/* Copies the versions line into the engine's info. */
void pbc_engine_versions(pb_engine *e, const pb__cuda_device *d);

/* Captures the work `queue` (a callable returning 0 on success) puts on stream st into one CUDA
 * graph, which *graph keeps, and instantiates it into *exec. Returns 1 on success; on any
 * failure the error is cleared, *exec is NULL and 0 comes back, so the caller runs the work
 * eagerly instead. Used for inference (cuda_engine.cu) and training steps (cuda_train.cu). */
template <typename F>
static inline int pbc_capture_graph(cudaStream_t st, F queue, cudaGraph_t *graph,
                                    cudaGraphExec_t *exec) {
  cudaGraph_t gr = NULL;
  int ok = cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  int rs = ok ? queue() : -1;
  ok = cudaStreamEndCapture(st, &gr) == cudaSuccess && ok && rs == 0;
  if (ok) ok = cudaGraphInstantiate(exec, gr, 0) == cudaSuccess;
  if (gr != NULL) *graph = gr;
  if (!ok) {
    cudaGetLastError();
    if (*exec) cudaGraphExecDestroy(*exec);
    *exec = NULL;
  }
  return ok;
}

extern "C" const pb__engine_vtable pbc_backend;

#endif
