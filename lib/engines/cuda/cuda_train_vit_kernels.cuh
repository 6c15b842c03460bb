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


/* ---- attention backward, flash style ------------------------------------------------------
 * One block per (image, head), as the forward's k_attention (cuda_kernels.cuh), whose shared
 * memory layout and tensor-core fragments it shares: q, k, v (from the qkv projection) and dO
 * (the output's gradient) in shared memory, Tp rows each; D_i = rowsum(dO_i O_i) from the
 * forward's output. Phase 1, a warp per 16 queries: each row's log-sum-exp (base 2) from
 * S = Q K^T, then P = exp2(S sl2 - lse), dP = dO V^T, dS = P (dP - D) and dQ = scale dS K.
 * Phase 2, a warp per 16 keys: S^T = K Q^T and dP^T = V dO^T again, dV = P^T dO and
 * dK = scale dS^T Q. P and dS are rounded to T for their products, as flash attention does;
 * nothing but q, k, v, O, dO and the gradients touches device memory. */
#define ATB_SMEM(Tp) ((size_t)4 * (size_t)(Tp) * ATT_LDK * 2 + (size_t)2 * (size_t)(Tp) * 4)

/* A fragments of 16 rows (from r0) of As, all 64 dims. */
template <typename T>
__device__ __forceinline__ void atb_frag(uint32_t (&a)[4][4], const T *As, int r0, int lane) {
  const int mi = lane / 8, r = lane % 8;
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
    pbk::ldsm_x4(a[kk][0], a[kk][1], a[kk][2], a[kk][3],
                 As + (size_t)(r0 + r + (mi & 1) * 8) * ATT_LDK + kk * 16 + (mi >> 1) * 8);
}

/* s (16 x 16) = A (fragments, 16 x 64) times rows b0 .. b0 + 15 of Bs, transposed. */
template <typename T>
__device__ __forceinline__ void atb_s16(float (&s)[2][4], const uint32_t (&a)[4][4], const T *Bs,
                                        int b0, int lane) {
  const int mi = lane / 8, r = lane % 8;
#pragma unroll
  for (int j = 0; j < 2; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < 4; kk++) {
    uint32_t x0, x1, x2, x3;
    pbk::ldsm_x4(x0, x1, x2, x3,
                 Bs + (size_t)(b0 + r + (mi >> 1) * 8) * ATT_LDK + kk * 16 + (mi & 1) * 8);
    pbk::mma16816<T>(s[0], a[kk], x0, x1);
    pbk::mma16816<T>(s[1], a[kk], x2, x3);
  }
}

/* acc (16 x 64) += p (16 x 16, accumulators, rounded to T) times rows b0 .. b0 + 15 of Bs. */
template <typename T>
__device__ __forceinline__ void atb_pv(float (&acc)[8][4], const float (&p)[2][4], const T *Bs,
                                       int b0, int lane) {
  const int mi = lane / 8, r = lane % 8;
  uint32_t pa[4] = {pbk::pack2<T>(p[0][0], p[0][1]), pbk::pack2<T>(p[0][2], p[0][3]),
                    pbk::pack2<T>(p[1][0], p[1][1]), pbk::pack2<T>(p[1][2], p[1][3])};
#pragma unroll
  for (int dp = 0; dp < 4; dp++) {
    uint32_t x0, x1, x2, x3;
    pbk::ldsm_x4_t(x0, x1, x2, x3,
                   Bs + (size_t)(b0 + r + (mi & 1) * 8) * ATT_LDK + dp * 16 + (mi >> 1) * 8);
    pbk::mma16816<T>(acc[2 * dp], pa, x0, x1);
    pbk::mma16816<T>(acc[2 * dp + 1], pa, x2, x3);
  }
}

/* Rows r0 + g and r0 + g + 8 of acc (times scale) to out (rows ld apart), those below Tn. */
template <typename T>
__device__ __forceinline__ void atb_store(const float (&acc)[8][4], float scale, T *out,
                                          size_t ld, int r0, int Tn, int lane) {
  const int g = lane / 4, t2 = 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < 8; j++) {
    if (r0 + g < Tn)
      *reinterpret_cast<uint32_t *>(out + (size_t)(r0 + g) * ld + 8 * j + t2) =
          pbk::pack2<T>(acc[j][0] * scale, acc[j][1] * scale);
    if (r0 + g + 8 < Tn)
      *reinterpret_cast<uint32_t *>(out + (size_t)(r0 + g + 8) * ld + 8 * j + t2) =
          pbk::pack2<T>(acc[j][2] * scale, acc[j][3] * scale);
  }
}

/* Phase 1 for the queries q0 .. q0 + 15: their log-sum-exp into lse, dQ into dq. */
template <typename T>
__device__ void atb_dq(const T *Qs, const T *Ks, const T *Vs, const T *Ds, float *lse,
                       const float *Dd, int q0, int Tn, int Tp, float sl2, float scale, T *dq,
                       size_t ld, int lane) {
  const int g = lane / 4, t2 = 2 * (lane % 4);
  uint32_t qa[4][4], da[4][4];
  atb_frag<T>(qa, Qs, q0, lane);
  atb_frag<T>(da, Ds, q0, lane);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  for (int k0 = 0; k0 < Tp; k0 += 16) {
    float s[2][4];
    atb_s16<T>(s, qa, Ks, k0, lane);
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < 2; j++) {
      int c = k0 + 8 * j + t2;
      if (c >= Tn) s[j][0] = s[j][2] = -INFINITY;
      if (c + 1 >= Tn) s[j][1] = s[j][3] = -INFINITY;
      mx[0] = fmaxf(mx[0], fmaxf(s[j][0], s[j][1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[j][2], s[j][3]));
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
      l[i] *= exp2f((m[i] - mx[i]) * sl2); /* the first tile has a key below Tn: mx finite */
      m[i] = mx[i];
    }
#pragma unroll
    for (int j = 0; j < 2; j++) {
      l[0] += exp2f((s[j][0] - m[0]) * sl2) + exp2f((s[j][1] - m[0]) * sl2);
      l[1] += exp2f((s[j][2] - m[1]) * sl2) + exp2f((s[j][3] - m[1]) * sl2);
    }
  }
  float L[2], dd[2] = {Dd[q0 + g], Dd[q0 + g + 8]};
#pragma unroll
  for (int i = 0; i < 2; i++) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    L[i] = m[i] * sl2 + log2f(l[i]);
  }
  if (lane % 4 == 0) {
    lse[q0 + g] = q0 + g < Tn ? L[0] : INFINITY; /* rows past Tn: no probability anywhere */
    lse[q0 + g + 8] = q0 + g + 8 < Tn ? L[1] : INFINITY;
  }
  float acc[8][4];
#pragma unroll
  for (int j = 0; j < 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  for (int k0 = 0; k0 < Tp; k0 += 16) {
    float s[2][4], dp[2][4];
    atb_s16<T>(s, qa, Ks, k0, lane);
    atb_s16<T>(dp, da, Vs, k0, lane);
#pragma unroll
    for (int j = 0; j < 2; j++) {
      int c = k0 + 8 * j + t2;
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float p = c + (e & 1) < Tn ? exp2f(s[j][e] * sl2 - L[e >> 1]) : 0.f;
        s[j][e] = p * (dp[j][e] - dd[e >> 1]);
      }
    }
    atb_pv<T>(acc, s, Ks, k0, lane);
  }
  atb_store<T>(acc, scale, dq, ld, q0, Tn, lane);
}

/* Phase 2 for the keys k0 .. k0 + 15: dK into dk, dV into dv. */
template <typename T>
__device__ void atb_dkv(const T *Qs, const T *Ks, const T *Vs, const T *Ds, const float *lse,
                        const float *Dd, int k0, int Tn, int Tp, float sl2, float scale, T *dk,
                        T *dv, size_t ld, int lane) {
  const int t2 = 2 * (lane % 4);
  uint32_t ka[4][4], va[4][4];
  atb_frag<T>(ka, Ks, k0, lane);
  atb_frag<T>(va, Vs, k0, lane);
  float ak[8][4], av[8][4];
#pragma unroll
  for (int j = 0; j < 8; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) ak[j][e] = av[j][e] = 0.f;
  for (int q0 = 0; q0 < Tp; q0 += 16) {
    float st[2][4], dpt[2][4];
    atb_s16<T>(st, ka, Qs, q0, lane);
    atb_s16<T>(dpt, va, Ds, q0, lane);
#pragma unroll
    for (int j = 0; j < 2; j++) {
      int c = q0 + 8 * j + t2;
      float lc[2] = {lse[c], lse[c + 1]}, dc[2] = {Dd[c], Dd[c + 1]};
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float p = exp2f(st[j][e] * sl2 - lc[e & 1]);
        st[j][e] = p;
        dpt[j][e] = p * (dpt[j][e] - dc[e & 1]);
      }
    }
    atb_pv<T>(av, st, Ds, q0, lane);
    atb_pv<T>(ak, dpt, Qs, q0, lane);
  }
  atb_store<T>(ak, scale, dk, ld, k0, Tn, lane);
  atb_store<T>(av, 1.f, dv, ld, k0, Tn, lane);
}

/* qkv (N, Tn, 3, H, 64), o and dout (N, Tn, H * 64) -> dqkv (N, Tn, 3, H, 64). Tp: Tn rounded
 * up to 16; ATB_SMEM(Tp) bytes of shared memory. */
template <typename T>
__global__ void __launch_bounds__(ATT_WARPS * 32, 1)
    k_attention_bwd(const T *__restrict__ qkv, const T *__restrict__ o, const T *__restrict__ dout,
                    T *__restrict__ dqkv, int Tn, int Tp, int H, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int D = H * ATT_DH, ld3 = 3 * D;
  const int n = blockIdx.x / H, h = blockIdx.x % H, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  T *Qs = reinterpret_cast<T *>(smem), *Ks = Qs + (size_t)Tp * ATT_LDK;
  T *Vs = Ks + (size_t)Tp * ATT_LDK, *Ds = Vs + (size_t)Tp * ATT_LDK;
  float *lse = reinterpret_cast<float *>(Ds + (size_t)Tp * ATT_LDK), *Dd = lse + Tp;
  const int vpr = ATT_DH * (int)sizeof(T) / 16, ve = 16 / (int)sizeof(T);
  for (int i = threadIdx.x; i < 4 * Tp * vpr; i += blockDim.x) {
    int w = i / (Tp * vpr), t = (i / vpr) % Tp, c = i % vpr;
    T *dst = Qs + ((size_t)w * Tp + t) * ATT_LDK + c * ve;
    if (t < Tn) {
      const T *src = w < 3 ? qkv + ((size_t)n * Tn + t) * ld3 + w * D + h * ATT_DH + c * ve
                           : dout + ((size_t)n * Tn + t) * D + h * ATT_DH + c * ve;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(pbk::smem_u32(dst)), "l"(src));
    } else {
      *reinterpret_cast<uint4 *>(dst) = make_uint4(0, 0, 0, 0);
    }
  }
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
  __syncthreads();
  for (int i = threadIdx.x; i < Tp; i += blockDim.x) {
    float s = 0.f;
    if (i < Tn) {
      const T *orow = o + ((size_t)n * Tn + i) * D + h * ATT_DH;
      for (int d = 0; d < ATT_DH; d++) s += tof(Ds[(size_t)i * ATT_LDK + d]) * tof(orow[d]);
    }
    Dd[i] = s;
  }
  __syncthreads();
  const float sl2 = scale * 1.4426950408889634f;
  const int ntiles = Tp / 16;
  T *base = dqkv + (size_t)n * Tn * ld3 + h * ATT_DH;
  for (int qt = warp; qt < ntiles; qt += ATT_WARPS)
    atb_dq<T>(Qs, Ks, Vs, Ds, lse, Dd, qt * 16, Tn, Tp, sl2, scale, base, (size_t)ld3, lane);
  __syncthreads();
  for (int kt = warp; kt < ntiles; kt += ATT_WARPS)
    atb_dkv<T>(Qs, Ks, Vs, Ds, lse, Dd, kt * 16, Tn, Tp, sl2, scale, base + D, base + 2 * D,
               (size_t)ld3, lane);
}

} /* namespace pbt */

#endif
