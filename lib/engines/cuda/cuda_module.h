/* The contract between libpipebench (engine.c) and the CUDA module libpipebench-cuda.so, which
 * engine.c opens with dlopen so that libpipebench itself never links CUDA: one build runs on a
 * machine with no GPU or no driver. The module exports one C function, PB__CUDA_ENTRY. */
#ifndef PB_ENGINES_CUDA_MODULE_H
#define PB_ENGINES_CUDA_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "engines/engine_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever this header, pb__engine_vtable, struct pb_engine or pb_engine_info change:
 * a module of another ABI is refused rather than run on mismatched structs. */
#define PB__CUDA_ABI 8
#define PB__CUDA_ENTRY "pb_cuda_module_open"
#define PB__CUDA_MODULE_FILE "libpipebench-cuda.so"

/* What the module found on device 0, read at run time. */
typedef struct pb__cuda_device {
  char name[128];
  int cc_major, cc_minor;
  int sms;
  int64_t memory_bytes;       /* total device memory */
  int64_t l2_bytes;
  int driver_version;         /* CUDA's encoding: 13000 is 13.0 */
  int runtime_version;
  int64_t cudnn_version;      /* cudnnGetVersion(): 91400 is 9.14.0 */
  int64_t cublaslt_version;   /* cublasLtGetVersion() */
  char versions[192];         /* "driver 13.0, runtime 13.0, cuDNN 9.14.0, cuBLASLt 13.1.0" */
} pb__cuda_device;

typedef struct pb__cuda_module {
  int abi;
  const pb__engine_vtable *backend; /* device "cuda" */
  /* Fills d for device 0. */
  int (*device)(pb__cuda_device *d, struct pb_error *err);
  /* Matrix-product peak through cuBLASLt on large square matrices, best repeat over about
   * `seconds`, in GFLOP/s. dtype: "bfloat16", "float16", "tf32" or "float32" (no TF32). */
  int (*peak_gflops)(const char *dtype, double seconds, double *gflops, struct pb_error *err);
  /* Copy bandwidth in GB/s (1e9 bytes/s), best repeat over about `seconds`. kind: "h2d_pinned",
   * "h2d_pageable", "d2h_pinned", "d2d" (d2d counts bytes read plus bytes written). */
  int (*bandwidth)(const char *kind, size_t bytes, double seconds, double *gbps,
                   struct pb_error *err);
  /* JPEG on the GPU (cuda_jpeg.cu). jpeg_status: 0 where nvJPEG loads and starts, else
   * PB_EUNSUPPORTED with one line in why. jpeg_forward: decode, crop to the engine's input
   * (resize of the shorter side to `resize`), normalise per channel (mean, std: 3 each), then
   * forward; *gpu_n: images nvJPEG decoded. jpeg_crops: the decode and crop into host memory
   * (crops: n x 3 x crop x crop uint8; full[i], when full and full[i] are not NULL: image i
   * decoded, planar, 3 x h x w, or h x w for a grey image decoded on the CPU). */
  int (*jpeg_status)(char *why, size_t why_len);
  int (*jpeg_forward)(pb_engine *e, const pb_jpeg_item *items, int n, int resize,
                      const float *mean, const float *std, void *output, int *gpu_n,
                      struct pb_error *err);
  int (*jpeg_crops)(const pb_jpeg_item *items, int n, int resize, int crop, uint8_t **full,
                    uint8_t *crops, struct pb_error *err);
  /* jpeg_stats: the decoder's counts and host times since it started (zeros before). */
  int (*jpeg_stats)(pb_jpeg_gpu_stats *out);
} pb__cuda_module;

/* The module's entry: the table when CUDA is usable here (driver, a device of a supported
 * compute capability, cuDNN 9 and cuBLASLt), else NULL with one line in why saying what is
 * missing. abi must equal PB__CUDA_ABI. */
typedef const pb__cuda_module *(*pb__cuda_open_fn)(int abi, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
