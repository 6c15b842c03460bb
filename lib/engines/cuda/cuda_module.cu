/* The CUDA module's entry (pb_cuda_module_open) and what calibrate asks of it: the device and
 * library versions read at run time, the cuBLASLt matrix-product peak and copy bandwidths. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "engines/cuda/cuda_kernels.cuh"
#include "engines/cuda/cuda_jpeg.h"
#include "engines/cuda/cuda_shared.h"

/* The oldest cuDNN whose legacy convolution API and NHWC bf16 kernels this module relies on. */
#define PBC_MIN_CUDNN 90000

__global__ void pbk::k_probe(int *x) {
  if (x != NULL) *x = 1;
}

int64_t pbc_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void ver3(char *buf, size_t n, int64_t v, int64_t major_div, int64_t minor_div) {
  snprintf(buf, n, "%lld.%lld.%lld", (long long)(v / major_div),
           (long long)(v % major_div / minor_div), (long long)(v % minor_div));
}

int pbc_device_probe(pb__cuda_device *d, struct pb_error *err) {
  memset(d, 0, sizeof *d);
  cudaDriverGetVersion(&d->driver_version);
  cudaRuntimeGetVersion(&d->runtime_version);
  d->cudnn_version = (int64_t)cudnnGetVersion();
  d->cublaslt_version = (int64_t)cublasLtGetVersion();
  char cd[32], cl[32];
  ver3(cd, sizeof cd, d->cudnn_version, 10000, 100);
  ver3(cl, sizeof cl, d->cublaslt_version, 10000, 100);
  snprintf(d->versions, sizeof d->versions, "CUDA driver %d.%d, runtime %d.%d, cuDNN %s, cuBLASLt %s",
           d->driver_version / 1000, d->driver_version % 1000 / 10, d->runtime_version / 1000,
           d->runtime_version % 1000 / 10, cd, cl);
  if (d->driver_version == 0)
    return pbc_err(err, PB_EUNSUPPORTED,
                   "no CUDA driver on this machine (libcuda.so.1 not found: no NVIDIA GPU driver "
                   "installed)");
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (e == cudaErrorInsufficientDriver)
      return pbc_err(err, PB_EUNSUPPORTED,
                     "the CUDA driver (%d.%d) is older than this module's runtime (%d.%d)",
                     d->driver_version / 1000, d->driver_version % 1000 / 10,
                     d->runtime_version / 1000, d->runtime_version % 1000 / 10);
    return pbc_err(err, PB_EUNSUPPORTED, "CUDA driver %d.%d found, but no usable GPU: %s",
                   d->driver_version / 1000, d->driver_version % 1000 / 10, cudaGetErrorString(e));
  }
  if (n == 0) return pbc_err(err, PB_EUNSUPPORTED, "CUDA driver found, but no GPU");
  cudaDeviceProp p;
  e = cudaGetDeviceProperties(&p, 0);
  if (e != cudaSuccess) return pbc_cuda_err(err, e, "cudaGetDeviceProperties");
  snprintf(d->name, sizeof d->name, "%s", p.name);
  d->cc_major = p.major, d->cc_minor = p.minor;
  d->sms = p.multiProcessorCount;
  d->memory_bytes = (int64_t)p.totalGlobalMem;
  d->l2_bytes = (int64_t)p.l2CacheSize;
  return 0;
}

/* Why CUDA is not usable here, or 0. */
static int usable(pb__cuda_device *d, struct pb_error *err) {
  PB_RETURN_NOT_OK(pbc_device_probe(d, err));
  if (d->cc_major != 9)
    return pbc_err(err, PB_EUNSUPPORTED,
                   "GPU %s has compute capability %d.%d; this module is built for 9.0 (sm_90, "
                   "Hopper) only",
                   d->name, d->cc_major, d->cc_minor);
  cudaFuncAttributes fa;
  cudaError_t e = cudaFuncGetAttributes(&fa, pbk::k_probe);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return pbc_err(err, PB_EUNSUPPORTED, "GPU %s cannot run this module's kernels: %s", d->name,
                   cudaGetErrorString(e));
  }
  if (d->cudnn_version < PBC_MIN_CUDNN)
    return pbc_err(err, PB_EUNSUPPORTED, "cuDNN %lld found; the cuda backend needs cuDNN 9",
                   (long long)d->cudnn_version);
  return 0;
}

void pbc_engine_versions(pb_engine *e, const pb__cuda_device *d) {
  snprintf(e->info.versions, sizeof e->info.versions, "%s", d->versions);
}

/* ---- calibration --------------------------------------------------------------------------- */

#define CU(call, what)                                                                         \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      rc = pbc_cuda_err(err, e_, what);                                                        \
      goto done;                                                                               \
    }                                                                                          \
  } while (0)

static int peak_gflops(const char *dtype, double seconds, double *gflops, struct pb_error *err) {
  *gflops = 0;
  cudaDataType_t t;
  cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
  size_t es;
  if (strcmp(dtype, "bfloat16") == 0) t = CUDA_R_16BF, es = 2;
  else if (strcmp(dtype, "float16") == 0) t = CUDA_R_16F, es = 2;
  else if (strcmp(dtype, "tf32") == 0) t = CUDA_R_32F, es = 4, ct = CUBLAS_COMPUTE_32F_FAST_TF32;
  else if (strcmp(dtype, "float32") == 0) t = CUDA_R_32F, es = 4;
  else return pbc_err(err, PB_EINVAL, "peak: dtype %s (bfloat16, float16, tf32, float32)", dtype);
  const int64_t S = 8192;
  int rc = 0;
  void *a = NULL, *b = NULL, *c = NULL, *ws = NULL;
  size_t wss = (size_t)64 << 20;
  cublasLtHandle_t lt = NULL;
  cublasLtMatmulDesc_t md = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  cublasLtMatmulHeuristicResult_t hr;
  int nr = 0;
  double best = 1e300;
  cublasOperation_t opt = CUBLAS_OP_T;
  CU(cudaMalloc(&a, (size_t)(S * S) * es), "cudaMalloc");
  CU(cudaMalloc(&b, (size_t)(S * S) * es), "cudaMalloc");
  CU(cudaMalloc(&c, (size_t)(S * S) * es), "cudaMalloc");
  CU(cudaMalloc(&ws, wss), "cudaMalloc");
  /* random operands: products of zeros run faster than real data */
  if (es == 2 && t == CUDA_R_16BF) {
    pbk::k_fill_random<<<4096, 256>>>((__nv_bfloat16 *)a, S * S, 1u);
    pbk::k_fill_random<<<4096, 256>>>((__nv_bfloat16 *)b, S * S, 2u);
  } else if (es == 2) {
    pbk::k_fill_random<<<4096, 256>>>((__half *)a, S * S, 1u);
    pbk::k_fill_random<<<4096, 256>>>((__half *)b, S * S, 2u);
  } else {
    pbk::k_fill_random<<<4096, 256>>>((float *)a, S * S, 1u);
    pbk::k_fill_random<<<4096, 256>>>((float *)b, S * S, 2u);
  }
  CU(cudaGetLastError(), "fill");
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescCreate(&md, ct, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescSetAttribute(md, CUBLASLT_MATMUL_DESC_TRANSA, &opt, sizeof opt) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&la, t, S, S, S) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&lb, t, S, S, S) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&lc, t, S, S, S) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) {
    rc = pbc_err(err, PB_EIO, "cuBLASLt setup failed");
    goto done;
  }
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wss,
                                       sizeof wss);
  if (cublasLtMatmulAlgoGetHeuristic(lt, md, la, lb, lc, lc, pref, 1, &hr, &nr) !=
          CUBLAS_STATUS_SUCCESS ||
      nr == 0) {
    rc = pbc_err(err, PB_EUNSUPPORTED, "cuBLASLt has no %s algorithm for %lld^3", dtype,
                 (long long)S);
    goto done;
  }
  CU(cudaEventCreate(&e0), "event");
  CU(cudaEventCreate(&e1), "event");
  {
    int64_t t_end = pbc_now_ns() + (int64_t)(seconds * 1e9);
    for (int it = 0; it < 4 || pbc_now_ns() < t_end; it++) {
      float one = 1.f, zero = 0.f;
      CU(cudaEventRecord(e0, 0), "event");
      for (int r = 0; r < 5; r++)
        if (cublasLtMatmul(lt, md, &one, a, la, b, lb, &zero, c, lc, c, lc, &hr.algo, ws, wss, 0) !=
            CUBLAS_STATUS_SUCCESS) {
          rc = pbc_err(err, PB_EIO, "cuBLASLt matmul failed");
          goto done;
        }
      CU(cudaEventRecord(e1, 0), "event");
      CU(cudaEventSynchronize(e1), "event");
      float ms = 0;
      CU(cudaEventElapsedTime(&ms, e0, e1), "event");
      if (it > 0 && ms / 5 < best) best = ms / 5; /* the first round warms clocks and caches */
    }
    *gflops = 2.0 * (double)S * (double)S * (double)S / (best / 1e3) / 1e9;
  }
done:
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (lc) cublasLtMatrixLayoutDestroy(lc);
  if (md) cublasLtMatmulDescDestroy(md);
  if (lt) cublasLtDestroy(lt);
  cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(ws);
  return rc;
}

static int bandwidth(const char *kind, size_t bytes, double seconds, double *gbps,
                     struct pb_error *err) {
  *gbps = 0;
  int h2d = strncmp(kind, "h2d", 3) == 0, d2h = strncmp(kind, "d2h", 3) == 0;
  int pinned = strstr(kind, "pinned") != NULL, d2d = strcmp(kind, "d2d") == 0;
  if (!(d2d || ((h2d || d2h) && (pinned || strstr(kind, "pageable") != NULL))))
    return pbc_err(err, PB_EINVAL, "bandwidth: kind %s (h2d_pinned, h2d_pageable, d2h_pinned, "
                   "d2h_pageable, d2d)", kind);
  if (bytes == 0) bytes = d2d ? (size_t)1 << 30 : (size_t)256 << 20;
  int rc = 0;
  void *dev = NULL, *dev2 = NULL, *host = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  cudaStream_t st = NULL;
  double best = 1e300;
  CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
  CU(cudaMalloc(&dev, bytes), "cudaMalloc");
  if (d2d) CU(cudaMalloc(&dev2, bytes), "cudaMalloc");
  else if (pinned) CU(cudaMallocHost(&host, bytes), "cudaMallocHost");
  else {
    host = malloc(bytes);
    if (host == NULL) {
      rc = pbc_err(err, PB_ENOMEM, "out of host memory");
      goto done;
    }
  }
  if (host) memset(host, 1, bytes); /* touch every page before timing */
  else CU(cudaMemset(dev2, 1, bytes), "cudaMemset");
  CU(cudaEventCreate(&e0), "event");
  CU(cudaEventCreate(&e1), "event");
  {
    int64_t t_end = pbc_now_ns() + (int64_t)(seconds * 1e9);
    for (int it = 0; it < 4 || pbc_now_ns() < t_end; it++) {
      CU(cudaEventRecord(e0, st), "event");
      if (d2d) CU(cudaMemcpyAsync(dev, dev2, bytes, cudaMemcpyDeviceToDevice, st), "copy");
      else if (h2d) CU(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, st), "copy");
      else CU(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, st), "copy");
      CU(cudaEventRecord(e1, st), "event");
      CU(cudaEventSynchronize(e1), "event");
      float ms = 0;
      CU(cudaEventElapsedTime(&ms, e0, e1), "event");
      if (it > 0 && ms < best) best = ms;
    }
    *gbps = (double)bytes * (d2d ? 2.0 : 1.0) / (best / 1e3) / 1e9;
  }
done:
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  if (d2d || !pinned) free(d2d ? NULL : host);
  else cudaFreeHost(host);
  cudaFree(dev), cudaFree(dev2);
  if (st) cudaStreamDestroy(st);
  return rc;
}

static int device_info(pb__cuda_device *d, struct pb_error *err) { return pbc_device_probe(d, err); }

static const pb__cuda_module the_module = {PB__CUDA_ABI,    &pbc_backend,     device_info,
                                           peak_gflops,     bandwidth,        pbc_jpeg_status,
                                           pbc_forward_jpeg, pbc_jpeg_crops,  pbc_jpeg_stats};

extern "C" __attribute__((visibility("default"))) const pb__cuda_module *
pb_cuda_module_open(int abi, char *why, size_t why_len) {
  struct pb_error err;
  err.message[0] = '\0';
  if (abi != PB__CUDA_ABI) {
    if (why) snprintf(why, why_len, "CUDA module ABI %d, libpipebench expects %d (rebuild both)",
                      PB__CUDA_ABI, abi);
    return NULL;
  }
  pb__cuda_device d;
  if (usable(&d, &err) != 0) {
    if (why) snprintf(why, why_len, "%s", err.message);
    return NULL;
  }
  return &the_module;
}
