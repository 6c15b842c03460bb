/* Small CUDA kernels the libraries lack: layout and dtype conversion, bias/activation/residual
 * epilogues, pooling, layer norm, softmax, GELU and the ViT token glue. Activations are NHWC
 * (images) or row-major (tokens) in T = float, __nv_bfloat16 or __half; statistics in float. */
#ifndef PB_ENGINES_CUDA_KERNELS_CUH
#define PB_ENGINES_CUDA_KERNELS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>
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

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
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

/* The same, 16 bytes a thread (total a multiple of 16 / sizeof(T), y 16-byte aligned). */
template <typename T>
__global__ void k_act_vec(T *__restrict__ y, int64_t total, int act) {
  const int vec = 16 / (int)sizeof(T);
  int64_t nv = total / vec;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nv;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint4 u = reinterpret_cast<uint4 *>(y)[i];
    T *v = reinterpret_cast<T *>(&u);
#pragma unroll
    for (int j = 0; j < 16 / (int)sizeof(T); j++) v[j] = fromf<T>(act_apply(tof(v[j]), act));
    reinterpret_cast<uint4 *>(y)[i] = u;
  }
}

/* Multi-head attention for 16-bit types on the tensor cores (WMMA), one block per (image, head),
 * reading q, k, v in place from the qkv projection (N, Tn, 3, H, 64) and writing (N, Tn, H*64)
 * with heads side by side. All Tn <= ATT_TMAX keys sit in shared memory, so each warp computes
 * whole rows of scores (float), their softmax (probabilities rounded to T, as flash attention
 * does) and P V, 16 queries at a time; nothing but q, k, v and the output touches device memory. */
#define ATT_DH 64
#define ATT_WARPS 4
#define ATT_LDK 72 /* K, V and Q rows padded from 64 to 72 values: no shared-memory bank conflicts */
template <typename T>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    k_attention(const T *__restrict__ qkv, T *__restrict__ out, int Tn, int Tp, int H,
                float scale) {
  using namespace nvcuda;
  extern __shared__ __align__(128) unsigned char smem[];
  const int D = H * ATT_DH, ld3 = 3 * D;
  const int nh = blockIdx.x, n = nh / H, h = nh % H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int lds = Tp + 4, ldp = 2 * lds; /* scores (float) and P (T) row strides, padded */
  T *Ks = reinterpret_cast<T *>(smem);                 /* Tp x ATT_LDK */
  T *Vs = Ks + (size_t)Tp * ATT_LDK;                     /* Tp x ATT_LDK */
  unsigned char *wbase = smem + (size_t)2 * Tp * ATT_LDK * sizeof(T);
  /* a warp's space holds the larger of its scores and its output (16 x 68 floats) */
  const size_t wbytes = (size_t)16 * (lds > ATT_DH + 4 ? lds : ATT_DH + 4) * sizeof(float);
  /* per warp: its 16 queries, then 16 x Tp scores, then P, then O (each read before the next is
   * written), so that two blocks fit on an SM */
  float *Sw = reinterpret_cast<float *>(wbase + warp * wbytes);
  T *Qw = reinterpret_cast<T *>(Sw);
  const T *base = qkv + (size_t)n * Tn * ld3 + h * ATT_DH;
  /* K and V rows, 16 bytes a thread, zero past Tn */
  const int vpr = ATT_DH * (int)sizeof(T) / 16; /* 16-byte pieces per row */
  for (int i = threadIdx.x; i < Tp * vpr; i += blockDim.x) {
    int t = i / vpr, c = i % vpr;
    uint4 kz = make_uint4(0, 0, 0, 0), vz = kz;
    if (t < Tn) {
      kz = reinterpret_cast<const uint4 *>(base + (size_t)t * ld3 + D)[c];
      vz = reinterpret_cast<const uint4 *>(base + (size_t)t * ld3 + 2 * D)[c];
    }
    reinterpret_cast<uint4 *>(Ks + (size_t)t * ATT_LDK)[c] = kz;
    reinterpret_cast<uint4 *>(Vs + (size_t)t * ATT_LDK)[c] = vz;
  }
  __syncthreads();
  T *Pw = reinterpret_cast<T *>(Sw); /* row r of P (Tp values of T) overwrites scores already read */
  const int ntiles = Tp / 16, nq = (Tn + 15) / 16;
  for (int qt = warp; qt < nq; qt += ATT_WARPS) {
    const int q0 = qt * 16;
    for (int i = lane; i < 16 * vpr; i += 32) {
      int r = i / vpr, c = i % vpr;
      uint4 z = make_uint4(0, 0, 0, 0);
      if (q0 + r < Tn) z = reinterpret_cast<const uint4 *>(base + (size_t)(q0 + r) * ld3)[c];
      reinterpret_cast<uint4 *>(Qw + r * ATT_LDK)[c] = z;
    }
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> qa[ATT_DH / 16];
#pragma unroll
    for (int kk = 0; kk < ATT_DH / 16; kk++) wmma::load_matrix_sync(qa[kk], Qw + kk * 16, ATT_LDK);
    __syncwarp(); /* the scores overwrite the queries */
    for (int j = 0; j < ntiles; j++) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
#pragma unroll
      for (int kk = 0; kk < ATT_DH / 16; kk++) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kb;
        wmma::load_matrix_sync(kb, Ks + (size_t)j * 16 * ATT_LDK + kk * 16, ATT_LDK);
        wmma::mma_sync(acc, qa[kk], kb, acc);
      }
      wmma::store_matrix_sync(Sw + j * 16, acc, lds, wmma::mem_row_major);
    }
    __syncwarp();
    /* softmax row by row; a row's P is written only after the whole warp has read its scores */
    for (int r = 0; r < 16; r++) {
      float v[8];
      float m = -INFINITY;
#pragma unroll
      for (int i = 0; i < 8; i++) {
        int c = lane + 32 * i;
        v[i] = c < Tn ? Sw[(size_t)r * lds + c] * scale : -INFINITY;
        m = fmaxf(m, v[i]);
      }
      m = warp_max(m);
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < 8; i++) {
        int c = lane + 32 * i;
        v[i] = c < Tn ? __expf(v[i] - m) : 0.f;
        sum += v[i];
      }
      float inv = 1.f / warp_sum(sum);
      __syncwarp();
#pragma unroll
      for (int i = 0; i < 8; i++) {
        int c = lane + 32 * i;
        if (c < Tp) Pw[(size_t)r * ldp + c] = fromf<T>(v[i] * inv);
      }
      __syncwarp();
    }
    /* O (16 x 64) = P (16 x Tp) V (Tp x 64), staged as float in the scores' space after P */
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> o[ATT_DH / 16];
#pragma unroll
    for (int j = 0; j < ATT_DH / 16; j++) wmma::fill_fragment(o[j], 0.f);
    for (int kk = 0; kk < ntiles; kk++) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pa;
      wmma::load_matrix_sync(pa, Pw + kk * 16, ldp);
#pragma unroll
      for (int j = 0; j < ATT_DH / 16; j++) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vb;
        wmma::load_matrix_sync(vb, Vs + (size_t)kk * 16 * ATT_LDK + j * 16, ATT_LDK);
        wmma::mma_sync(o[j], pa, vb, o[j]);
      }
    }
    __syncwarp();
    float *Ow = Sw; /* 16 x 68 floats: P is no longer needed */
#pragma unroll
    for (int j = 0; j < ATT_DH / 16; j++)
      wmma::store_matrix_sync(Ow + j * 16, o[j], ATT_DH + 4, wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 16 * ATT_DH; i += 32) {
      int r = i / ATT_DH, c = i % ATT_DH;
      if (q0 + r < Tn)
        out[((size_t)n * Tn + q0 + r) * D + h * ATT_DH + c] = fromf<T>(Ow[r * (ATT_DH + 4) + c]);
    }
    __syncwarp();
  }
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

/* qkv (N, Tn, 3, H, dh) -> q, k, v, each (N, H, Tn, dh) contiguous, so attention's products run
 * as one batch over images and heads (16-byte moves). */
template <typename T>
__global__ void k_split_qkv(const T *__restrict__ qkv, T *__restrict__ out, int64_t N, int Tn,
                            int H, int dh) {
  const int vec = 16 / (int)sizeof(T), dv = dh / vec;
  int64_t total = N * Tn * 3 * H * dv, one = N * H * Tn * dh;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int d = (int)(i % dv);
    int64_t r = i / dv;
    int h = (int)(r % H);
    r /= H;
    int w = (int)(r % 3);
    r /= 3;
    int t = (int)(r % Tn);
    int64_t n = r / Tn;
    int64_t dst = w * one + ((n * H + h) * Tn + t) * dh + (int64_t)d * vec;
    reinterpret_cast<uint4 *>(out + dst)[0] = reinterpret_cast<const uint4 *>(qkv)[i];
  }
}

/* (N, H, Tn, dh) -> (N, Tn, H * dh): heads side by side again. */
template <typename T>
__global__ void k_merge_heads(const T *__restrict__ o, T *__restrict__ out, int64_t N, int Tn,
                              int H, int dh) {
  const int vec = 16 / (int)sizeof(T), dv = dh / vec;
  int64_t total = N * Tn * H * dv;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int d = (int)(i % dv);
    int64_t r = i / dv;
    int h = (int)(r % H);
    r /= H;
    int t = (int)(r % Tn);
    int64_t n = r / Tn;
    int64_t src = ((n * H + h) * Tn + t) * dh + (int64_t)d * vec;
    reinterpret_cast<uint4 *>(out)[i] = reinterpret_cast<const uint4 *>(o + src)[0];
  }
}

/* NHWC image (channels padded to Cp) -> (N * P, C * k * k) rows of patches, columns in torch's
 * weight order (c, ky, kx), so the patch embedding is one matrix product with the weights as
 * they are. */
template <typename T>
__global__ void k_patchify(const T *__restrict__ x, T *__restrict__ out, int64_t N, int C, int Cp,
                           int H, int W, int k) {
  int gw = W / k, P = (H / k) * gw, K = C * k * k;
  int64_t total = N * P * (int64_t)K;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int col = (int)(i % K);
    int64_t row = i / K;
    int p = (int)(row % P);
    int64_t n = row / P;
    int c = col / (k * k), ky = (col / k) % k, kx = col % k;
    int y = (p / gw) * k + ky, xx = (p % gw) * k + kx;
    out[i] = x[((n * H + y) * W + xx) * Cp + c];
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
