/* Small CUDA kernels the libraries lack: layout and dtype conversion, bias/activation/residual
 * epilogues, pooling, layer norm, softmax, GELU and the ViT token glue. Activations are NHWC
 * (images) or row-major (tokens) in T = float, __nv_bfloat16 or __half; statistics in float. */
#ifndef PB_ENGINES_CUDA_KERNELS_CUH
#define PB_ENGINES_CUDA_KERNELS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace pbk {

__device__ __forceinline__ float tof(float x) { return x; }
__device__ __forceinline__ float tof(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float tof(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T fromf(float x);
template <> __device__ __forceinline__ float fromf<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 fromf<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half fromf<__half>(float x) { return __float2half_rn(x); }

__device__ __forceinline__ float act_apply(float v, int act) {
  if (act == 1) return v > 0.f ? v : 0.f;
  if (act == 2) return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
  return v;
}

/* float32 NCHW (the API's input) -> T NHWC with channels zero-padded to Cp. */
template <typename T>
__global__ void k_nchw_to_nhwc(const float *__restrict__ in, T *__restrict__ out, int64_t N,
                               int C, int H, int W, int Cp) {
  int64_t total = N * H * W * Cp;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int c = (int)(i % Cp);
    int64_t p = i / Cp; /* n*H*W + h*W + w */
    int64_t hw = p % ((int64_t)H * W), n = p / ((int64_t)H * W);
    float v = c < C ? in[(n * C + c) * (int64_t)H * W + hw] : 0.f;
    out[i] = fromf<T>(v);
  }
}

/* y = act(y + bias[c] (+ res)) in place, C the innermost dimension. */
template <typename T>
__global__ void k_bias_act(T *__restrict__ y, const float *__restrict__ bias, int64_t total, int C,
                           int act) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    float v = tof(y[i]) + (bias ? bias[i % C] : 0.f);
    y[i] = fromf<T>(act_apply(v, act));
  }
}

template <typename T>
__global__ void k_act(T *__restrict__ y, int64_t total, int act) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = fromf<T>(act_apply(tof(y[i]), act));
}

/* Max pooling, NHWC; padding never wins (it is -inf, as in torch). */
template <typename T>
__global__ void k_maxpool(const T *__restrict__ in, T *__restrict__ out, int64_t N, int C, int H,
                          int W, int Ho, int Wo, int k, int s, int pad) {
  int64_t total = N * Ho * Wo * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int c = (int)(i % C);
    int64_t p = i / C;
    int wo = (int)(p % Wo), ho = (int)((p / Wo) % Ho);
    int64_t n = p / ((int64_t)Wo * Ho);
    float m = -INFINITY;
    for (int dy = 0; dy < k; dy++) {
      int y = ho * s - pad + dy;
      if (y < 0 || y >= H) continue;
      for (int dx = 0; dx < k; dx++) {
        int x = wo * s - pad + dx;
        if (x < 0 || x >= W) continue;
        float v = tof(in[((n * H + y) * W + x) * C + c]);
        m = v > m ? v : m;
      }
    }
    out[i] = fromf<T>(m);
  }
}

/* Global average pooling: NHWC -> (N, C). */
template <typename T>
__global__ void k_gap(const T *__restrict__ in, T *__restrict__ out, int64_t N, int C, int HW) {
  int64_t total = N * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int c = (int)(i % C);
    int64_t n = i / C;
    const T *p = in + n * HW * (int64_t)C + c;
    float acc = 0.f;
    for (int j = 0; j < HW; j++) acc += tof(p[(int64_t)j * C]);
    out[i] = fromf<T>(acc / (float)HW);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* Layer norm over rows of length D (one warp a row; up to 32*MAXV values kept in registers). */
template <typename T, int MAXV>
__global__ void k_layernorm(const T *__restrict__ x, T *__restrict__ y, const float *__restrict__ g,
                            const float *__restrict__ b, int64_t rows, int D, float eps) {
  int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T *xr = x + row * D;
  float v[MAXV];
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < MAXV; j++) {
    int d = lane + 32 * j;
    v[j] = d < D ? tof(xr[d]) : 0.f;
    s += v[j];
  }
  float mean = warp_sum(s) / (float)D;
  float q = 0.f;
#pragma unroll
  for (int j = 0; j < MAXV; j++) {
    int d = lane + 32 * j;
    float t = d < D ? v[j] - mean : 0.f;
    q += t * t;
  }
  float rstd = rsqrtf(warp_sum(q) / (float)D + eps);
  T *yr = y + row * D;
#pragma unroll
  for (int j = 0; j < MAXV; j++) {
    int d = lane + 32 * j;
    if (d < D) yr[d] = fromf<T>((v[j] - mean) * rstd * g[d] + b[d]);
  }
}

/* Softmax over rows of length L: float scores in, T probabilities out (one warp a row). */
template <typename T, int MAXV>
__global__ void k_softmax(const float *__restrict__ s, T *__restrict__ p, int64_t rows, int L) {
  int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float *sr = s + row * L;
  float v[MAXV];
  float m = -INFINITY;
#pragma unroll
  for (int j = 0; j < MAXV; j++) {
    int d = lane + 32 * j;
    v[j] = d < L ? sr[d] : -INFINITY;
    m = fmaxf(m, v[j]);
  }
  m = warp_max(m);
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < MAXV; j++) {
    int d = lane + 32 * j;
    v[j] = d < L ? __expf(v[j] - m) : 0.f;
    sum += v[j];
  }
  float inv = 1.f / warp_sum(sum);
  T *pr = p + row * L;
#pragma unroll
  for (int j = 0; j < MAXV; j++) {
    int d = lane + 32 * j;
    if (d < L) pr[d] = fromf<T>(v[j] * inv);
  }
}

/* Tokens: row 0 of each image = class token + pos[0]; row 1 + p = patch p (+ bias) + pos[1 + p]. */
template <typename T>
__global__ void k_patch_tokens(const T *__restrict__ patches, T *__restrict__ out,
                               const float *__restrict__ bias, const float *__restrict__ cls,
                               const float *__restrict__ pos, int64_t N, int P, int D) {
  int64_t Tn = P + 1, total = N * Tn * D;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int d = (int)(i % D);
    int64_t t = (i / D) % Tn, n = i / (D * Tn);
    float v = t == 0 ? cls[d] : tof(patches[(n * P + (t - 1)) * D + d]) + bias[d];
    out[i] = fromf<T>(v + pos[t * D + d]);
  }
}

/* (N, Tn, D) -> (N, D): the first token of each image. */
template <typename T>
__global__ void k_take_cls(const T *__restrict__ x, T *__restrict__ y, int64_t N, int Tn, int D) {
  int64_t total = N * D;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = x[(i / D) * Tn * D + i % D];
}

template <typename T>
__global__ void k_to_f32(const T *__restrict__ x, float *__restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = tof(x[i]);
}

template <typename T>
__global__ void k_from_f32(const float *__restrict__ x, T *__restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = fromf<T>(x[i]);
}

/* Deterministic pseudo-random fill in [-1, 1) (calibration inputs must not be zeros). */
template <typename T>
__global__ void k_fill_random(T *__restrict__ y, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
    y[i] = fromf<T>((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
}

__global__ void k_probe(int *x);

} /* namespace pbk */

#endif
