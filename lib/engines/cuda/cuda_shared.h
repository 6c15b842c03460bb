/* Helpers shared by the CUDA module's files (cuda_engine.cu, cuda_module.cu). */
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

extern "C" const pb__engine_vtable pbc_backend;

#endif
