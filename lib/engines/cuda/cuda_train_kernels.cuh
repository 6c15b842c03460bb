/* Kernels of the CUDA training step (cuda_train.cu): batch norm in training mode (batch
 * statistics, running averages), its backward, ReLU masks, pooling backward, the softmax
 * cross-entropy and MSE losses in float32, and one SGD-with-momentum launch over every
 * parameter. Activations are NHWC in T (bfloat16, or float for the float32 mode); statistics,
 * losses, gradients of batch norm and biases, and master weights are float. */
#ifndef PB_ENGINES_CUDA_TRAIN_KERNELS_CUH
#define PB_ENGINES_CUDA_TRAIN_KERNELS_CUH

#include "engines/cuda/cuda_kernels.cuh"

namespace pbt {

using pbk::fromf;
using pbk::tof;

#define PBT_VEC 8      /* channels a thread handles (C must be a multiple) */
#define PBT_THREADS 256

/* Eight values moved together: one 16-byte access in bfloat16, two in float. */
template <typename T> struct alignas(16) v8 {
  T x[PBT_VEC];
};
template <typename T> __device__ __forceinline__ v8<T> ld8(const T *p) {
  return *reinterpret_cast<const v8<T> *>(p);
}
template <typename T> __device__ __forceinline__ void st8(T *p, const v8<T> &v) {
  *reinterpret_cast<v8<T> *>(p) = v;
}

/* Column sums over M rows of C channels (NHWC: rows are n*h*w), per chunk of rows, into
 * p0[chunk * C + c] and p1[...]. mode 0: z and z^2 (batch statistics). mode 1 (backward of
 * batch norm): du = da * (relu ? a > 0 : 1) and du * xhat, xhat = (z - mean) * invstd; with a
 * NULL under ReLU the mask comes from z and mco, the forward's map (co_f). mode 2
 * (bias gradient): du only. Threads: tpr per row (C / VEC, at most 256), rows in parallel
 * 256 / tpr; blockIdx.y picks a group of 256 * VEC channels. */
template <typename T, int mode>
__global__ void __launch_bounds__(PBT_THREADS, 3)
    k_colsum(const T *__restrict__ z, const T *__restrict__ da, const T *__restrict__ a,
             int relu, const float *__restrict__ mean, const float *__restrict__ invstd,
             int64_t M, int C, int64_t rows_per_chunk, float *__restrict__ p0,
             float *__restrict__ p1, const float *__restrict__ mco = NULL) {
  __shared__ float s0[PBT_THREADS * PBT_VEC], s1[PBT_THREADS * PBT_VEC];
  const int cv = C / PBT_VEC;
  const int tpr = cv < PBT_THREADS ? cv : PBT_THREADS, R = PBT_THREADS / tpr;
  const int tx = threadIdx.x % tpr, ty = threadIdx.x / tpr;
  const int c0 = (blockIdx.y * tpr + tx) * PBT_VEC;
  const bool live = ty < R && c0 < C;
  float a0[PBT_VEC], a1[PBT_VEC], mu[PBT_VEC], is[PBT_VEC], mk[PBT_VEC], mb[PBT_VEC];
  const bool from_z = relu && a == NULL; /* ReLU's mask from z and the forward's map mco */
#pragma unroll
  for (int j = 0; j < PBT_VEC; j++) {
    a0[j] = a1[j] = 0.f;
    mu[j] = (mode == 1 && live) ? mean[c0 + j] : 0.f;
    is[j] = (mode == 1 && live) ? invstd[c0 + j] : 0.f;
    mk[j] = (from_z && live) ? mco[c0 + j] : 0.f;
    mb[j] = (from_z && live) ? mco[C + c0 + j] : 0.f;
  }
  int64_t r0 = blockIdx.x * rows_per_chunk, r1 = r0 + rows_per_chunk;
  if (r1 > M) r1 = M;
  if (live)
#pragma unroll(mode == 0 ? 4 : 2)
    for (int64_t r = r0 + ty; r < r1; r += R) {
      const int64_t at = r * C + c0;
      if (mode == 0) {
        v8<T> zv = ld8(z + at);
#pragma unroll
        for (int j = 0; j < PBT_VEC; j++) {
          float v = tof(zv.x[j]);
          a0[j] += v, a1[j] += v * v;
        }
      } else {
        v8<T> dv = ld8(da + at), av, zv;
        if (relu && !from_z) av = ld8(a + at);
        if (mode == 1 || from_z) zv = ld8(z + at);
#pragma unroll
        for (int j = 0; j < PBT_VEC; j++) {
          float d = tof(dv.x[j]);
          /* the forward's value, rounded as it stored it: the same mask bit for bit */
          float m = from_z ? tof(fromf<T>(fmaf(tof(zv.x[j]), mk[j], mb[j]))) : relu ? tof(av.x[j]) : 1.f;
          if (relu && !(m > 0.f)) d = 0.f;
          a0[j] += d;
          if (mode == 1) a1[j] += d * (tof(zv.x[j]) - mu[j]) * is[j];
        }
      }
    }
#pragma unroll
  for (int j = 0; j < PBT_VEC; j++) {
    s0[threadIdx.x * PBT_VEC + j] = a0[j];
    s1[threadIdx.x * PBT_VEC + j] = a1[j];
  }
  __syncthreads();
  if (ty == 0 && c0 < C) {
#pragma unroll
    for (int j = 0; j < PBT_VEC; j++) {
      float b0 = 0.f, b1 = 0.f;
      for (int y = 0; y < R; y++) {
        b0 += s0[(y * tpr + tx) * PBT_VEC + j];
        b1 += s1[(y * tpr + tx) * PBT_VEC + j];
      }
      p0[blockIdx.x * (int64_t)C + c0 + j] = b0;
      p1[blockIdx.x * (int64_t)C + c0 + j] = b1;
    }
  }
}

/* k_colsum with its mode fixed at compile time (the others' registers and branches left out). */
template <typename T>
static void colsum_launch(dim3 grid, cudaStream_t st, int mode, const T *z, const T *da,
                          const T *a, int relu, const float *mean, const float *invstd, int64_t M,
                          int C, int64_t rows_per_chunk, float *p0, float *p1,
                          const float *mco = NULL) {
  if (mode == 0)
    k_colsum<T, 0><<<grid, PBT_THREADS, 0, st>>>(z, da, a, relu, mean, invstd, M, C,
                                                 rows_per_chunk, p0, p1, mco);
  else if (mode == 1)
    k_colsum<T, 1><<<grid, PBT_THREADS, 0, st>>>(z, da, a, relu, mean, invstd, M, C,
                                                 rows_per_chunk, p0, p1, mco);
  else
    k_colsum<T, 2><<<grid, PBT_THREADS, 0, st>>>(z, da, a, relu, mean, invstd, M, C,
                                                 rows_per_chunk, p0, p1, mco);
}

/* Sums the chunks per channel (in double). mode 0: mean and invstd of the batch, the affine
 * map of the forward (co[c] = gamma invstd, co[C + c] = beta - mean gamma invstd; gamma NULL: 1
 * and beta as given or 0) and, when momentum > 0, the running averages as torch keeps them
 * (unbiased variance). mode 1: dbeta = sum du into g0, dgamma = sum du xhat into g1, and the
 * backward's map dz = co[c] du + co[C + c] z + co[2C + c]. mode 2: the bias gradient into g0.
 * mode 3: both sums as they are, p0's into g0 and p1's into g1 (layer norm's beta and gamma). */
__global__ void k_colsum_finish(int mode, const float *__restrict__ p0,
                                const float *__restrict__ p1, int chunks, int C, int64_t M,
                                float eps, float momentum, float *__restrict__ mean,
                                float *__restrict__ invstd, float *__restrict__ rmean,
                                float *__restrict__ rvar, float *__restrict__ g0,
                                float *__restrict__ g1, const float *__restrict__ gamma,
                                const float *__restrict__ beta, float *__restrict__ co) {
  /* 32 channels a block (threadIdx.x), the chunks spread over 32 lanes (threadIdx.y): a
   * thread alone would wait on one load per chunk in turn */
  __shared__ double r0[32][33], r1[32][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  double s0 = 0, s1 = 0;
  if (c < C)
#pragma unroll 4
    for (int k = threadIdx.y; k < chunks; k += 32)
      s0 += p0[(int64_t)k * C + c], s1 += p1[(int64_t)k * C + c];
  r0[threadIdx.y][threadIdx.x] = s0, r1[threadIdx.y][threadIdx.x] = s1;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int y = 1; y < 32; y++) s0 += r0[y][threadIdx.x], s1 += r1[y][threadIdx.x];
  if (mode == 0) {
    double m = s0 / (double)M, var = s1 / (double)M - m * m;
    if (var < 0) var = 0;
    double is = 1.0 / sqrt(var + (double)eps), k = gamma[c] * is;
    mean[c] = (float)m;
    invstd[c] = (float)is;
    co[c] = (float)k;
    co[C + c] = (float)((beta ? beta[c] : 0.0) - m * k);
    if (momentum > 0.f) {
      double unb = M > 1 ? var * (double)M / (double)(M - 1) : var;
      rmean[c] = (float)((1.0 - momentum) * rmean[c] + momentum * m);
      rvar[c] = (float)((1.0 - momentum) * rvar[c] + momentum * unb);
    }
  } else {
    g0[c] = (float)s0;
    if (mode == 3) g1[c] = (float)s1;
    if (mode == 1) {
      g1[c] = (float)s1;
      double is = invstd[c], k = gamma[c] * is, inv_m = 1.0 / (double)M;
      co[c] = (float)k;
      co[C + c] = (float)(-k * s1 * is * inv_m);
      co[2 * C + c] = (float)(-k * s0 * inv_m + k * s1 * is * mean[c] * inv_m);
    }
  }
}

/* The elementwise kernels below run a grid of at most a few blocks per multiprocessor over the
 * tensor (grid_ew in cuda_train.cu), each thread taking PBT_UNROLL vectors of eight channels
 * a pass (the backward U: it holds five coefficient vectors, so one vector a pass at three
 * blocks a multiprocessor, or two at two), their loads issued before any is used. When the grid's stride in values is a
 * multiple of C (every channel count dividing 2048), a thread's channels never change, so its
 * per-channel coefficients are loaded once; otherwise they are loaded per vector. Loading them
 * per vector from the cache (160 bytes of coefficients for each 16 bytes of data in the
 * backward) held both kernels to about 60% of the memory's bandwidth on an H200. */
#define PBT_UNROLL 2

/* out = act(z co[c] + co[C + c] (+ res)) (co from k_colsum_finish); without batch norm (co
 * NULL): out = act(z + bias[c] (+ res)), bias may be NULL. Eight channels a vector (C a
 * multiple of 8). */
template <typename T>
__global__ void __launch_bounds__(PBT_THREADS)
    k_bn_apply(const T *__restrict__ z, T *__restrict__ out, const T *__restrict__ res,
               const float *__restrict__ co, const float *__restrict__ bias, int64_t total,
               int C, int relu) {
  const int64_t nv = total / PBT_VEC, stride = (int64_t)gridDim.x * blockDim.x;
  const bool fixed = (stride * PBT_VEC) % C == 0;
  int cl = -1;
  v8<float> a, b;
  for (int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i0 < nv;
       i0 += PBT_UNROLL * stride) {
    v8<T> zv[PBT_UNROLL], rv[PBT_UNROLL];
#pragma unroll
    for (int u = 0; u < PBT_UNROLL; u++) {
      const int64_t i = i0 + u * stride;
      if (i >= nv) break;
      zv[u] = ld8(z + i * PBT_VEC);
      if (res != NULL) rv[u] = ld8(res + i * PBT_VEC);
    }
#pragma unroll
    for (int u = 0; u < PBT_UNROLL; u++) {
      const int64_t i = i0 + u * stride;
      if (i >= nv) break;
      const int c0 = (fixed && cl >= 0) ? cl : (int)((i * PBT_VEC) % C);
      if (c0 != cl) {
        cl = c0;
        if (co != NULL) {
          a = ld8(co + c0), b = ld8(co + C + c0);
        } else {
#pragma unroll
          for (int j = 0; j < PBT_VEC; j++) a.x[j] = 1.f, b.x[j] = bias ? bias[c0 + j] : 0.f;
        }
      }
      v8<T> ov;
#pragma unroll
      for (int j = 0; j < PBT_VEC; j++) {
        float v = fmaf(tof(zv[u].x[j]), a.x[j], b.x[j]);
        if (res != NULL) v += tof(rv[u].x[j]);
        if (relu && !(v > 0.f)) v = 0.f;
        ov.x[j] = fromf<T>(v);
      }
      st8(out + i * PBT_VEC, ov);
    }
  }
}

/* Backward of k_bn_apply. du = da * (relu ? a > 0 : 1); a NULL: the mask from z and mco, the
 * forward's map (as k_colsum). With batch norm (co not NULL, the map
 * of k_colsum_finish's mode 1): dz = co[c] du + co[C + c] z + co[2C + c]; without: dz = du.
 * dres (may be NULL) gets du, added to what it holds when res_add. Eight channels a vector. */
template <typename T, int U>
__global__ void __launch_bounds__(PBT_THREADS, U == 1 ? 3 : 2)
    k_bn_backward(const T *__restrict__ da, const T *__restrict__ a, const T *__restrict__ z,
                  T *__restrict__ dz, T *__restrict__ dres, int res_add,
                  const float *__restrict__ co, int64_t total, int C, int relu,
                  const float *__restrict__ mco = NULL) {
  const int64_t nv = total / PBT_VEC, stride = (int64_t)gridDim.x * blockDim.x;
  const bool fixed = (stride * PBT_VEC) % C == 0;
  const bool from_z = relu && a == NULL; /* ReLU's mask from z and the forward's map mco */
  const bool need_z = co != NULL || from_z;
  int cl = -1;
  v8<float> k1, k2, k3, m1, m2;
  for (int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i0 < nv;
       i0 += U * stride) {
    v8<T> dv[U], av[U], zv[U], rv[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t i = i0 + u * stride;
      if (i >= nv) break;
      const int64_t at = i * PBT_VEC;
      dv[u] = ld8(da + at);
      if (relu && !from_z) av[u] = ld8(a + at);
      if (need_z) zv[u] = ld8(z + at);
      if (dres != NULL && res_add) rv[u] = ld8(dres + at);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t i = i0 + u * stride;
      if (i >= nv) break;
      const int64_t at = i * PBT_VEC;
      const int c0 = (fixed && cl >= 0) ? cl : (int)(at % C);
      if (c0 != cl) {
        cl = c0;
        if (co != NULL) k1 = ld8(co + c0), k2 = ld8(co + C + c0), k3 = ld8(co + 2 * C + c0);
        if (from_z) m1 = ld8(mco + c0), m2 = ld8(mco + C + c0);
      }
      v8<T> gv;
#pragma unroll
      for (int j = 0; j < PBT_VEC; j++) {
        float d = tof(dv[u].x[j]);
        float m = from_z ? tof(fromf<T>(fmaf(tof(zv[u].x[j]), m1.x[j], m2.x[j])))
                  : relu ? tof(av[u].x[j])
                         : 1.f;
        if (relu && !(m > 0.f)) d = 0.f;
        if (dres != NULL) rv[u].x[j] = fromf<T>(res_add ? tof(rv[u].x[j]) + d : d);
        gv.x[j] = fromf<T>(co != NULL ? fmaf(k1.x[j], d, fmaf(k2.x[j], tof(zv[u].x[j]), k3.x[j])) : d);
      }
      if (dres != NULL) st8(dres + at, rv[u]);
      st8(dz + at, gv);
    }
  }
}

/* Max pooling, NHWC, that also keeps where each maximum came from (its place in the window, a
 * byte), for the backward pass; padding never wins, the first maximum does (as torch). Eight
 * channels a thread (C a multiple of 8): 16-byte loads of the input, 8 bytes of places. */
template <typename T>
__global__ void k_maxpool_arg(const T *__restrict__ in, T *__restrict__ out,
                              uint8_t *__restrict__ arg, int64_t N, int C, int H, int W, int Ho,
                              int Wo, int k, int s, int pad) {
  const int cv = C / PBT_VEC;
  const int64_t total = N * Ho * Wo * cv;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int c = (int)(i % cv) * PBT_VEC;
    const int64_t p = i / cv;
    const int wo = (int)(p % Wo), ho = (int)((p / Wo) % Ho);
    const int64_t n = p / ((int64_t)Wo * Ho);
    float m[PBT_VEC];
    uint8_t best[PBT_VEC];
#pragma unroll
    for (int j = 0; j < PBT_VEC; j++) m[j] = -INFINITY, best[j] = 0;
    for (int dy = 0; dy < k; dy++) {
      const int y = ho * s - pad + dy;
      if (y < 0 || y >= H) continue;
      for (int dx = 0; dx < k; dx++) {
        const int x = wo * s - pad + dx;
        if (x < 0 || x >= W) continue;
        v8<T> v = ld8(in + ((n * H + y) * W + x) * C + c);
#pragma unroll
        for (int j = 0; j < PBT_VEC; j++) {
          const float f = tof(v.x[j]);
          if (f > m[j]) m[j] = f, best[j] = (uint8_t)(dy * k + dx);
        }
      }
    }
    v8<T> o;
    uint2 ab;
    uint8_t *a8 = reinterpret_cast<uint8_t *>(&ab);
#pragma unroll
    for (int j = 0; j < PBT_VEC; j++) o.x[j] = fromf<T>(m[j]), a8[j] = best[j];
    st8(out + p * C + c, o);
    *reinterpret_cast<uint2 *>(arg + p * C + c) = ab;
  }
}

/* Its backward as a gather: each input element sums the gradients of the windows whose
 * maximum it was. Eight channels a thread (C a multiple of 8, tensors under 2^31 values). */
template <typename T>
__global__ void k_maxpool_backward(const uint8_t *__restrict__ arg, const T *__restrict__ dy,
                                   T *__restrict__ dx, int add, int64_t N, int C, int H, int W,
                                   int Ho, int Wo, int k, int s, int pad) {
  const int cv = C / PBT_VEC, total = (int)(N * H * W) * cv;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const int c = (i % cv) * PBT_VEC, p = i / cv;
    const int xw = p % W, yh = (p / W) % H, n = p / (W * H);
    float g[PBT_VEC];
#pragma unroll
    for (int j = 0; j < PBT_VEC; j++) g[j] = 0.f;
    int oy0 = yh + pad - k + s < 0 ? 0 : (yh + pad - k + s) / s, oy1 = (yh + pad) / s;
    int ox0 = xw + pad - k + s < 0 ? 0 : (xw + pad - k + s) / s, ox1 = (xw + pad) / s;
    for (int oy = oy0; oy <= oy1 && oy < Ho; oy++)
      for (int ox = ox0; ox <= ox1 && ox < Wo; ox++) {
        const int o = ((n * Ho + oy) * Wo + ox) * C + c;
        const int want = (yh - (oy * s - pad)) * k + (xw - (ox * s - pad));
        uint2 ab = *reinterpret_cast<const uint2 *>(arg + o);
        const uint8_t *a8 = reinterpret_cast<const uint8_t *>(&ab);
        v8<T> dv = ld8(dy + o);
#pragma unroll
        for (int j = 0; j < PBT_VEC; j++)
          if (a8[j] == want) g[j] += tof(dv.x[j]);
      }
    const int64_t at = (int64_t)p * C + c;
    v8<T> out;
    if (add) out = ld8(dx + at);
#pragma unroll
    for (int j = 0; j < PBT_VEC; j++) out.x[j] = fromf<T>(add ? tof(out.x[j]) + g[j] : g[j]);
    st8(dx + at, out);
  }
}

/* Global average pooling backward: dx[n, hw, c] = dy[n, c] / HW. */
template <typename T>
__global__ void k_gap_backward(const T *__restrict__ dy, T *__restrict__ dx, int add, int64_t N,
                               int C, int HW) {
  int64_t total = N * HW * (int64_t)C;
  const float inv = 1.f / (float)HW;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int c = (int)(i % C);
    int64_t n = i / ((int64_t)HW * C);
    float g = tof(dy[n * C + c]) * inv;
    dx[i] = fromf<T>(add ? tof(dx[i]) + g : g);
  }
}

/* Softmax cross-entropy in float32, one block a row of K logits: loss_rows[n] and
 * dlogits = (softmax - onehot) / N, in float (dl32) and in T (dlt, for the products). A label
 * outside [0, K) sets *bad to its row + 1 (the first such row wins) and gives that row 0. */
template <typename T>
__global__ void k_cross_entropy(const float *__restrict__ y, const int32_t *__restrict__ lab,
                                int64_t N, int K, float *__restrict__ loss_rows,
                                float *__restrict__ dl32, T *__restrict__ dlt,
                                int *__restrict__ bad) {
  __shared__ float red[32];
  int64_t n = blockIdx.x;
  const float *r = y + n * K;
  int c = lab[n];
  bool ok = c >= 0 && c < K;
  if (!ok && threadIdx.x == 0) atomicCAS(bad, 0, (int)n + 1);
  float m = -INFINITY;
  for (int k = threadIdx.x; k < K; k += blockDim.x) m = fmaxf(m, r[k]);
  m = pbk::warp_max(m);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : -INFINITY;
    v = pbk::warp_max(v);
    if (threadIdx.x == 0) red[0] = v;
  }
  __syncthreads();
  m = red[0];
  __syncthreads();
  float s = 0.f;
  for (int k = threadIdx.x; k < K; k += blockDim.x) s += expf(r[k] - m);
  s = pbk::warp_sum(s);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.f;
    v = pbk::warp_sum(v);
    if (threadIdx.x == 0) red[0] = v;
  }
  __syncthreads();
  s = red[0];
  const float inv_n = 1.f / (float)N, inv_s = 1.f / s;
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    float g = ok ? (expf(r[k] - m) * inv_s - (k == c ? 1.f : 0.f)) * inv_n : 0.f;
    dl32[n * K + k] = g;
    dlt[n * K + k] = fromf<T>(g);
  }
  if (threadIdx.x == 0) loss_rows[n] = ok ? logf(s) + m - r[c] : 0.f;
}

/* Mean squared error over all N * K outputs: loss_rows[n] (each row's sum / (N K)) and
 * dlogits = 2 (y - t) / (N K). */
template <typename T>
__global__ void k_mse(const float *__restrict__ y, const float *__restrict__ t, int64_t N, int K,
                      float *__restrict__ loss_rows, float *__restrict__ dl32,
                      T *__restrict__ dlt) {
  __shared__ float red[32];
  int64_t n = blockIdx.x;
  const float sc = 1.f / ((float)N * (float)K);
  float acc = 0.f;
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    float d = y[n * K + k] - t[n * K + k];
    acc += d * d;
    dl32[n * K + k] = 2.f * d * sc;
    dlt[n * K + k] = fromf<T>(2.f * d * sc);
  }
  acc = pbk::warp_sum(acc);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float v = 0.f;
    for (unsigned w = 0; w < blockDim.x / 32; w++) v += red[w];
    loss_rows[n] = v * sc;
  }
}

/* The batch's loss: the mean (cross-entropy) or sum (mse, rows already scaled) of the rows. */
__global__ void k_loss_sum(const float *__restrict__ rows, int64_t N, float scale,
                           float *__restrict__ loss) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double s = 0;
  for (int64_t n = 0; n < N; n++) s += rows[n];
  *loss = (float)(s * scale);
}

/* Bias gradient of a linear layer: db[k] = sum over rows of dy[n, k] (float). */
__global__ void k_rowsum(const float *__restrict__ dy, int64_t N, int K, float *__restrict__ db) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= K) return;
  float s = 0.f;
  for (int64_t n = 0; n < N; n++) s += dy[n * K + k];
  db[k] = s;
}

__global__ void k_set(float *p, float v) { *p = v; }

/* One parameter for the SGD launch. grad is float, or T when grad_t (cuDNN's filter gradient
 * in the compute type); wc (may be NULL) gets the updated weight in T for the next forward. */
struct sgd_param {
  float *w;
  const void *grad;
  float *mom;
  void *wc;
  int64_t n;
  int grad_t;
};

/* torch.optim.SGD: g += wd w; buf = momentum buf + g (buf starts at 0, which equals torch's
 * first-step copy); w -= lr buf. blockIdx.y is the parameter; *lr is read on the device so a
 * captured graph takes the caller's rate. */
template <typename T>
__global__ void k_sgd(const sgd_param *__restrict__ ps, const float *__restrict__ lr,
                      float momentum, float wd) {
  const sgd_param p = ps[blockIdx.y];
  const float l = *lr;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < p.n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float g = p.grad_t ? tof(((const T *)p.grad)[i]) : ((const float *)p.grad)[i];
    float w = p.w[i];
    g += wd * w;
    float b = g;
    if (momentum != 0.f) {
      b = momentum * p.mom[i] + g;
      p.mom[i] = b;
    }
    w -= l * b;
    p.w[i] = w;
    if (p.wc != NULL) ((T *)p.wc)[i] = fromf<T>(w);
  }
}

} /* namespace pbt */

#endif
