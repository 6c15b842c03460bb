/* Kernels of the CUDA training step for token models (vit_b_16): layer norm that keeps its row
 * statistics and its backward, exact (erf) GELU and its derivative, the attention softmax over
 * rows with a padded stride and its backward, moving heads between the token layout and one
 * block per head, and the backward passes of the patch embedding's token glue and of taking the
 * class token. Tokens are row-major (rows of D values) in T (bfloat16, or float for the float32
 * mode); statistics, softmax inputs and every parameter gradient are float. The forward glue
 * (patches as rows, class token and position embedding, splitting qkv, merging heads, taking
 * the class token) is the inference engine's (cuda_kernels.cuh). */
#ifndef PB_ENGINES_CUDA_TRAIN_VIT_KERNELS_CUH
#define PB_ENGINES_CUDA_TRAIN_VIT_KERNELS_CUH

#include "engines/cuda/cuda_train_kernels.cuh"

namespace pbt {

#define PBT_LN_NV 4        /* layer norm: up to 4 vectors of 8 a lane, D <= 1024 */
#define PBT_LN_BLOCKS 264  /* layer norm backward: blocks (each sums its rows' columns) */

/* Layer norm over rows of D values (D a multiple of 8), one warp a row, statistics in float:
 * y = (x - mean) rstd g + b; mean and rstd kept per row for the backward. */
template <typename T>
__global__ void k_ln_fwd(const T *__restrict__ x, T *__restrict__ y, const float *__restrict__ g,
                         const float *__restrict__ b, float *__restrict__ mean,
                         float *__restrict__ rstd, int64_t rows, int D, float eps) {
  int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32, nv = D / PBT_VEC;
  if (row >= rows) return;
  float v[PBT_LN_NV][PBT_VEC];
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < PBT_LN_NV; j++) {
    int c = lane + 32 * j;
    v8<T> u;
    if (c < nv) u = ld8(x + row * D + c * PBT_VEC);
#pragma unroll
    for (int e = 0; e < PBT_VEC; e++) v[j][e] = c < nv ? tof(u.x[e]) : 0.f, s += v[j][e];
  }
  float m = pbk::warp_sum(s) / (float)D, q = 0.f;
#pragma unroll
  for (int j = 0; j < PBT_LN_NV; j++)
#pragma unroll
    for (int e = 0; e < PBT_VEC; e++) {
      float d = lane + 32 * j < nv ? v[j][e] - m : 0.f;
      q += d * d;
    }
  float rs = rsqrtf(pbk::warp_sum(q) / (float)D + eps);
#pragma unroll
  for (int j = 0; j < PBT_LN_NV; j++) {
    int c = lane + 32 * j;
    if (c >= nv) continue;
    v8<T> u;
#pragma unroll
    for (int e = 0; e < PBT_VEC; e++) {
      int d = c * PBT_VEC + e;
      u.x[e] = fromf<T>((v[j][e] - m) * rs * g[d] + b[d]);
    }
    st8(y + row * D + c * PBT_VEC, u);
  }
  if (lane == 0) mean[row] = m, rstd[row] = rs;
}

/* Layer norm backward: dx (= or += when add) rstd (dxh - mean(dxh) - xh mean(dxh xh)) with
 * xh = (x - mean) rstd, dxh = dy g; each block's sums of dy (beta) and dy xh (gamma) per column
 * into p0 and p1 at row blockIdx.x (k_colsum_finish mode 3 adds the blocks up). 8 warps a
 * block, a warp a row at a time. */
template <typename T>
__global__ void __launch_bounds__(256)
    k_ln_bwd(const T *__restrict__ dy, const T *__restrict__ x, const float *__restrict__ g,
             const float *__restrict__ mean, const float *__restrict__ rstd, T *__restrict__ dx,
             int add, int64_t rows, int D, float *__restrict__ p0, float *__restrict__ p1) {
  __shared__ float s0[PBT_LN_NV * 32 * PBT_VEC], s1[PBT_LN_NV * 32 * PBT_VEC];
  for (int i = threadIdx.x; i < D; i += blockDim.x) s0[i] = s1[i] = 0.f;
  __syncthreads();
  const int lane = threadIdx.x % 32, nv = D / PBT_VEC;
  float ab[PBT_LN_NV][PBT_VEC], ag[PBT_LN_NV][PBT_VEC], gv[PBT_LN_NV][PBT_VEC];
#pragma unroll
  for (int j = 0; j < PBT_LN_NV; j++)
#pragma unroll
    for (int e = 0; e < PBT_VEC; e++) {
      int c = lane + 32 * j;
      ab[j][e] = ag[j][e] = 0.f;
      gv[j][e] = c < nv ? g[c * PBT_VEC + e] : 0.f;
    }
  for (int64_t row = blockIdx.x * 8 + threadIdx.x / 32; row < rows; row += gridDim.x * 8) {
    const float mu = mean[row], rs = rstd[row];
    float xh[PBT_LN_NV][PBT_VEC], dh[PBT_LN_NV][PBT_VEC], sd = 0.f, sdx = 0.f;
#pragma unroll
    for (int j = 0; j < PBT_LN_NV; j++) {
      int c = lane + 32 * j;
      v8<T> xv, dv;
      if (c < nv) xv = ld8(x + row * D + c * PBT_VEC), dv = ld8(dy + row * D + c * PBT_VEC);
#pragma unroll
      for (int e = 0; e < PBT_VEC; e++) {
        float xx = c < nv ? (tof(xv.x[e]) - mu) * rs : 0.f, d = c < nv ? tof(dv.x[e]) : 0.f;
        xh[j][e] = xx;
        ab[j][e] += d, ag[j][e] += d * xx;
        dh[j][e] = d * gv[j][e];
        sd += dh[j][e], sdx += dh[j][e] * xx;
      }
    }
    sd = pbk::warp_sum(sd) / (float)D, sdx = pbk::warp_sum(sdx) / (float)D;
#pragma unroll
    for (int j = 0; j < PBT_LN_NV; j++) {
      int c = lane + 32 * j;
      if (c >= nv) continue;
      v8<T> o, old;
      if (add) old = ld8(dx + row * D + c * PBT_VEC);
#pragma unroll
      for (int e = 0; e < PBT_VEC; e++)
        o.x[e] = fromf<T>(rs * (dh[j][e] - sd - xh[j][e] * sdx) + (add ? tof(old.x[e]) : 0.f));
      st8(dx + row * D + c * PBT_VEC, o);
    }
  }
#pragma unroll
  for (int j = 0; j < PBT_LN_NV; j++) {
    int c = lane + 32 * j;
    if (c >= nv) continue;
#pragma unroll
    for (int e = 0; e < PBT_VEC; e++) {
      atomicAdd(&s0[c * PBT_VEC + e], ab[j][e]);
      atomicAdd(&s1[c * PBT_VEC + e], ag[j][e]);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    p0[blockIdx.x * (int64_t)D + i] = s0[i];
    p1[blockIdx.x * (int64_t)D + i] = s1[i];
  }
}

__device__ __forceinline__ float gelu_f(float v) {
  return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
}
__device__ __forceinline__ float gelu_grad(float v) {
  return 0.5f * (1.f + erff(v * 0.70710678118654752f)) +
         v * 0.39894228040143268f * expf(-0.5f * v * v);
}

/* y = gelu(x), exact (erf) as torch's ViT; n a multiple of 8. */
template <typename T>
__global__ void k_gelu_fwd(const T *__restrict__ x, T *__restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n / PBT_VEC;
       i += (int64_t)gridDim.x * blockDim.x) {
    v8<T> u = ld8(x + i * PBT_VEC);
#pragma unroll
    for (int e = 0; e < PBT_VEC; e++) u.x[e] = fromf<T>(gelu_f(tof(u.x[e])));
    st8(y + i * PBT_VEC, u);
  }
}

/* dx = dy gelu'(x); n a multiple of 8. */
template <typename T>
__global__ void k_gelu_bwd(const T *__restrict__ dy, const T *__restrict__ x, T *__restrict__ dx,
                           int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n / PBT_VEC;
       i += (int64_t)gridDim.x * blockDim.x) {
    v8<T> u = ld8(x + i * PBT_VEC), d = ld8(dy + i * PBT_VEC), o;
#pragma unroll
    for (int e = 0; e < PBT_VEC; e++) o.x[e] = fromf<T>(tof(d.x[e]) * gelu_grad(tof(u.x[e])));
    st8(dx + i * PBT_VEC, o);
  }
}

/* Softmax over rows of L float scores (row stride ld, L <= 256) into T probabilities (same
 * stride); one warp a row. */
template <typename T>
__global__ void k_softmax_ld(const float *__restrict__ s, T *__restrict__ p, int64_t rows, int L,
                             int ld) {
  int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float *sr = s + row * ld;
  float v[8], m = -INFINITY, sum = 0.f;
#pragma unroll
  for (int j = 0; j < 8; j++) {
    int d = lane + 32 * j;
    v[j] = d < L ? sr[d] : -INFINITY;
    m = fmaxf(m, v[j]);
  }
  m = pbk::warp_max(m);
#pragma unroll
  for (int j = 0; j < 8; j++) {
    int d = lane + 32 * j;
    v[j] = d < L ? expf(v[j] - m) : 0.f;
    sum += v[j];
  }
  float inv = 1.f / pbk::warp_sum(sum);
#pragma unroll
  for (int j = 0; j < 8; j++) {
    int d = lane + 32 * j;
    if (d < L) p[row * ld + d] = fromf<T>(v[j] * inv);
  }
}

/* Softmax backward in place: p (probabilities in, gradient of the scaled scores out) =
 * scale p (dp - sum(p dp)), dp the float gradient of the probabilities; stride ld, L <= 256. */
template <typename T>
__global__ void k_softmax_bwd(T *__restrict__ p, const float *__restrict__ dp, int64_t rows,
                              int L, int ld, float scale) {
  int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float pv[8], dv[8], s = 0.f;
#pragma unroll
  for (int j = 0; j < 8; j++) {
    int d = lane + 32 * j;
    pv[j] = d < L ? tof(p[row * ld + d]) : 0.f;
    dv[j] = d < L ? dp[row * ld + d] : 0.f;
    s += pv[j] * dv[j];
  }
  s = pbk::warp_sum(s);
#pragma unroll
  for (int j = 0; j < 8; j++) {
    int d = lane + 32 * j;
    if (d < L) p[row * ld + d] = fromf<T>(scale * pv[j] * (dv[j] - s));
  }
}

/* Tokens (N, Tn, parts, H, dh) and `parts` blocks of (N, H, Tn, dh): to_heads 1 copies tokens
 * into heads, 0 back (16-byte moves; dh * sizeof(T) a multiple of 16). */
template <typename T>
__global__ void k_heads(const T *__restrict__ in, T *__restrict__ out, int64_t N, int Tn,
                        int parts, int H, int dh, int to_heads) {
  const int vec = 16 / (int)sizeof(T), dv = dh / vec;
  int64_t total = N * Tn * parts * H * dv, one = N * H * Tn * dh;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int d = (int)(i % dv);
    int64_t r = i / dv;
    int h = (int)(r % H);
    r /= H;
    int w = (int)(r % parts);
    r /= parts;
    int t = (int)(r % Tn);
    int64_t n = r / Tn;
    int64_t hd = w * one + ((n * H + h) * Tn + t) * dh + (int64_t)d * vec;
    if (to_heads)
      reinterpret_cast<uint4 *>(out + hd)[0] = reinterpret_cast<const uint4 *>(in)[i];
    else
      reinterpret_cast<uint4 *>(out)[i] = reinterpret_cast<const uint4 *>(in + hd)[0];
  }
}

/* Patch tokens backward, part 1: dpos[t, d] = sum over images of dy[n, t, d] (float). */
template <typename T>
__global__ void k_pos_grad(const T *__restrict__ dy, float *__restrict__ dpos, int64_t N, int Tn,
                           int D) {
  int64_t per = (int64_t)Tn * D;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < per;
       i += (int64_t)gridDim.x * blockDim.x) {
    float s = 0.f;
    for (int64_t n = 0; n < N; n++) s += tof(dy[n * per + i]);
    dpos[i] = s;
  }
}

/* Part 2: the class token's gradient (row 0 of dpos) and the patch bias's (rows 1.. summed). */
__global__ void k_cls_bias_grad(const float *__restrict__ dpos, float *__restrict__ dcls,
                                float *__restrict__ dbias, int Tn, int D) {
  int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= D) return;
  float s = 0.f;
  for (int t = 1; t < Tn; t++) s += dpos[(int64_t)t * D + d];
  dcls[d] = dpos[d];
  dbias[d] = s;
}

/* Part 3: the patch rows' gradient, dp[n P + t - 1] = dy[n, t] for t >= 1 (rows of D, D a
 * multiple of 8). */
template <typename T>
__global__ void k_patch_rows_grad(const T *__restrict__ dy, T *__restrict__ dp, int64_t N, int Tn,
                                  int D) {
  int64_t P = Tn - 1, dv = D / PBT_VEC, total = N * P * dv;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = i % dv, r = i / dv, n = r / P, t = r % P + 1;
    st8(dp + r * D + c * PBT_VEC, ld8(dy + (n * Tn + t) * D + c * PBT_VEC));
  }
}

/* Taking the class token, backward: dx[n, 0] = dy[n], every other token's gradient 0. */
template <typename T>
__global__ void k_take_cls_bwd(const T *__restrict__ dy, T *__restrict__ dx, int64_t N, int Tn,
                               int D) {
  int64_t total = N * Tn * D;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t d = i % D, t = (i / D) % Tn, n = i / ((int64_t)Tn * D);
    dx[i] = t == 0 ? dy[n * D + d] : fromf<T>(0.f);
  }
}

} /* namespace pbt */

#endif
