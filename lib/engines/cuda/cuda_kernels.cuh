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

/* The same for 16-bit T and Cp = 8 (the engine's padding of 3 channels): a thread per pixel, its
 * channels read from the C planes (neighbouring threads, neighbouring floats) and written as one
 * 16-byte store, with 32-bit indices (fewer than 2^31 pixels). */
template <typename T>
__global__ void k_nchw_to_nhwc8(const float *__restrict__ in, T *__restrict__ out, int N, int C,
                                int HW) {
  const int total = N * HW;
  for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < total; p += gridDim.x * blockDim.x) {
    const int n = p / HW, hw = p - n * HW;
    uint4 o;
    T *ov = reinterpret_cast<T *>(&o);
#pragma unroll
    for (int c = 0; c < 8; c++) ov[c] = fromf<T>(c < C ? in[((int64_t)n * C + c) * HW + hw] : 0.f);
    reinterpret_cast<uint4 *>(out)[p] = o;
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

/* The same, 16 bytes a thread (C * sizeof(T) a multiple of 16, y 16-byte aligned) and 32-bit
 * indices (total under 2^31): the scalar kernel's 64-bit division per value made the bias of a
 * downsampling convolution at batch 256 cost 0.36 ms on an H200. */
template <typename T>
__global__ void k_bias_act_vec(T *__restrict__ y, const float *__restrict__ bias, int total, int C,
                               int act) {
  constexpr int V = 16 / (int)sizeof(T);
  const int nv = total / V, cv = C / V;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += gridDim.x * blockDim.x) {
    const int c = (i % cv) * V;
    uint4 u = reinterpret_cast<uint4 *>(y)[i];
    T *v = reinterpret_cast<T *>(&u);
#pragma unroll
    for (int j = 0; j < V; j++)
      v[j] = fromf<T>(act_apply(tof(v[j]) + (bias ? bias[c + j] : 0.f), act));
    reinterpret_cast<uint4 *>(y)[i] = u;
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

/* Multi-head attention for 16-bit types on the tensor cores, flash style: one block per (image,
 * head) reads that head's q, k and v in place from the qkv projection (N, Tn, 3, H, 64) into
 * shared memory (16-byte asynchronous copies, rows past Tn zero), and each warp takes 16 queries
 * at a time through all keys, 64 keys per step: S = Q K^T and O += P V on mma.sync m16n8k16 with
 * float accumulators, the softmax online (running row maximum and sum in registers, P rounded to
 * T as flash attention does, exponentials in base 2). The output (N, Tn, H*64) has heads side
 * by side; nothing but q, k, v and the output touches device memory. */
#define ATT_DH 64
#define ATT_WARPS 8
#define ATT_LDK 72 /* rows padded from 64 to 72 values: ldmatrix reads without bank conflicts */
/* shared memory of one block: Q, K and V, Tp rows each */
#define ATT_SMEM(Tp) ((size_t)3 * (size_t)(Tp) * ATT_LDK * 2)

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void ldsm_x4(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3,
                                        const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3,
                                          const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_u32(p)));
}
/* d += a b, 16x8x16, float accumulators; a and b bfloat16 or float16 */
template <typename T>
__device__ __forceinline__ void mma16816(float *d, const uint32_t *a, uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float *d, const uint32_t *a, uint32_t b0,
                                                        uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__half>(float *d, const uint32_t *a, uint32_t b0,
                                                 uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* One step over NS * 16 keys from key k0 for a warp's 16 queries (qa: the Q fragments). The
 * thread holds rows g = lane / 4 and g + 8 of S and O, columns 2 (lane % 4) and the next. */
template <typename T, int NS>
__device__ __forceinline__ void att_step(const uint32_t (&qa)[ATT_DH / 16][4], const T *Ks,
                                         const T *Vs, int k0, int Tn, float sl2, float (&o)[8][4],
                                         float (&m)[2], float (&l)[2], int lane) {
  float s[2 * NS][4];
#pragma unroll
  for (int j = 0; j < 2 * NS; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
  const int mi = lane / 8, r = lane % 8;
#pragma unroll
  for (int kk = 0; kk < ATT_DH / 16; kk++) {
#pragma unroll
    for (int sb = 0; sb < NS; sb++) {
      /* matrices: keys 0-7 dims 0-7, keys 0-7 dims 8-15, keys 8-15 dims 0-7, keys 8-15 dims 8-15 */
      uint32_t b0, b1, b2, b3;
      ldsm_x4(b0, b1, b2, b3,
              Ks + (size_t)(k0 + sb * 16 + r + (mi >> 1) * 8) * ATT_LDK + kk * 16 + (mi & 1) * 8);
      mma16816<T>(s[2 * sb], qa[kk], b0, b1);
      mma16816<T>(s[2 * sb + 1], qa[kk], b2, b3);
    }
  }
  const int t2 = 2 * (lane % 4);
  float mx0 = m[0], mx1 = m[1];
#pragma unroll
  for (int j = 0; j < 2 * NS; j++) {
    int c = k0 + 8 * j + t2;
    if (c >= Tn) s[j][0] = s[j][2] = -INFINITY;
    if (c + 1 >= Tn) s[j][1] = s[j][3] = -INFINITY;
    mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
    mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  /* the first step has a key below Tn in every row, so the maxima are finite from here on */
  const float a0 = fast_exp2((m[0] - mx0) * sl2), a1 = fast_exp2((m[1] - mx1) * sl2);
  m[0] = mx0, m[1] = mx1;
  const float ms0 = mx0 * sl2, ms1 = mx1 * sl2;
  float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
  for (int j = 0; j < 2 * NS; j++) {
    s[j][0] = fast_exp2(fmaf(s[j][0], sl2, -ms0));
    s[j][1] = fast_exp2(fmaf(s[j][1], sl2, -ms0));
    s[j][2] = fast_exp2(fmaf(s[j][2], sl2, -ms1));
    s[j][3] = fast_exp2(fmaf(s[j][3], sl2, -ms1));
    sum0 += s[j][0] + s[j][1];
    sum1 += s[j][2] + s[j][3];
  }
  l[0] = l[0] * a0 + sum0, l[1] = l[1] * a1 + sum1;
#pragma unroll
  for (int j = 0; j < 8; j++) o[j][0] *= a0, o[j][1] *= a0, o[j][2] *= a1, o[j][3] *= a1;
#pragma unroll
  for (int sb = 0; sb < NS; sb++) {
    /* P's A fragment for keys 16 sb .. 16 sb + 15 straight from the accumulators */
    uint32_t pa[4] = {pack2<T>(s[2 * sb][0], s[2 * sb][1]), pack2<T>(s[2 * sb][2], s[2 * sb][3]),
                      pack2<T>(s[2 * sb + 1][0], s[2 * sb + 1][1]),
                      pack2<T>(s[2 * sb + 1][2], s[2 * sb + 1][3])};
#pragma unroll
    for (int dp = 0; dp < ATT_DH / 16; dp++) {
      /* matrices (transposed): keys 0-7 dims 0-7, keys 8-15 dims 0-7, keys 0-7 dims 8-15, keys
       * 8-15 dims 8-15 */
      uint32_t b0, b1, b2, b3;
      ldsm_x4_t(b0, b1, b2, b3,
                Vs + (size_t)(k0 + sb * 16 + r + (mi & 1) * 8) * ATT_LDK + dp * 16 + (mi >> 1) * 8);
      mma16816<T>(o[2 * dp], pa, b0, b1);
      mma16816<T>(o[2 * dp + 1], pa, b2, b3);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(ATT_WARPS * 32, 2)
    k_attention(const T *__restrict__ qkv, T *__restrict__ out, int Tn, int Tp, int H,
                float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int D = H * ATT_DH, ld3 = 3 * D;
  const int nh = blockIdx.x, n = nh / H, h = nh % H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  T *Qs = reinterpret_cast<T *>(smem); /* Tp x ATT_LDK each */
  T *Ks = Qs + (size_t)Tp * ATT_LDK;
  T *Vs = Ks + (size_t)Tp * ATT_LDK;
  const T *base = qkv + (size_t)n * Tn * ld3 + h * ATT_DH;
  const int vpr = ATT_DH * (int)sizeof(T) / 16; /* 16-byte pieces per row */
  for (int i = threadIdx.x; i < 3 * Tp * vpr; i += blockDim.x) {
    int w = i / (Tp * vpr), t = (i / vpr) % Tp, c = i % vpr;
    T *dst = Qs + ((size_t)w * Tp + t) * ATT_LDK + c * (16 / (int)sizeof(T));
    if (t < Tn) {
      const T *src = base + (size_t)t * ld3 + w * D + c * (16 / (int)sizeof(T));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src));
    } else {
      *reinterpret_cast<uint4 *>(dst) = make_uint4(0, 0, 0, 0);
    }
  }
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
  __syncthreads();
  const float sl2 = scale * 1.4426950408889634f; /* scores in base 2 */
  const int ntiles = (Tn + 15) / 16, nfull = Tp / 64, rest = (Tp % 64) / 16;
  const int mi = lane / 8, r = lane % 8, g = lane / 4, t2 = 2 * (lane % 4);
  for (int qt = warp; qt < ntiles; qt += ATT_WARPS) {
    const int q0 = qt * 16;
    uint32_t qa[ATT_DH / 16][4];
#pragma unroll
    for (int kk = 0; kk < ATT_DH / 16; kk++)
      ldsm_x4(qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3],
              Qs + (size_t)(q0 + r + (mi & 1) * 8) * ATT_LDK + kk * 16 + (mi >> 1) * 8);
    float o[8][4];
#pragma unroll
    for (int j = 0; j < 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    for (int c = 0; c < nfull; c++) att_step<T, 4>(qa, Ks, Vs, c * 64, Tn, sl2, o, m, l, lane);
    if (rest == 1) att_step<T, 1>(qa, Ks, Vs, nfull * 64, Tn, sl2, o, m, l, lane);
    else if (rest == 2) att_step<T, 2>(qa, Ks, Vs, nfull * 64, Tn, sl2, o, m, l, lane);
    else if (rest == 3) att_step<T, 3>(qa, Ks, Vs, nfull * 64, Tn, sl2, o, m, l, lane);
#pragma unroll
    for (int i = 0; i < 2; i++) {
      l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
      l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
    const float i0 = 1.f / l[0], i1 = 1.f / l[1];
    /* O through this warp's own 16 rows of Qs (already in registers), then out 16 bytes a lane:
     * each row's 128 bytes in whole sectors */
    T *Ow = Qs + (size_t)q0 * ATT_LDK;
    __syncwarp(); /* every lane's ldmatrix of these Q rows comes before any lane's store */
#pragma unroll
    for (int j = 0; j < 8; j++) {
      *reinterpret_cast<uint32_t *>(Ow + (size_t)g * ATT_LDK + 8 * j + t2) =
          pack2<T>(o[j][0] * i0, o[j][1] * i0);
      *reinterpret_cast<uint32_t *>(Ow + (size_t)(g + 8) * ATT_LDK + 8 * j + t2) =
          pack2<T>(o[j][2] * i1, o[j][3] * i1);
    }
    __syncwarp();
    const int vpr8 = ATT_DH * (int)sizeof(T) / 16;
#pragma unroll
    for (int i = lane; i < 16 * vpr8; i += 32) {
      int rr = i / vpr8, c = i % vpr8;
      if (q0 + rr < Tn)
        reinterpret_cast<uint4 *>(out + ((size_t)n * Tn + q0 + rr) * D + h * ATT_DH)[c] =
            reinterpret_cast<const uint4 *>(Ow + (size_t)rr * ATT_LDK)[c];
    }
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

/* The same, 16 bytes of channels a thread (C * sizeof(T) a multiple of 16) and 32-bit index
 * arithmetic (fewer than 2^31 input values): the scalar kernel's 64-bit divisions per value and
 * 2-byte loads made ResNet-50's max pool cost 1.1 ms of a 10 ms batch of 256 on an H200. */
template <typename T>
__global__ void k_maxpool_vec(const T *__restrict__ in, T *__restrict__ out, int N, int C, int H,
                              int W, int Ho, int Wo, int k, int s, int pad) {
  constexpr int V = 16 / (int)sizeof(T);
  const int cv = C / V, total = N * Ho * Wo * cv;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const int c = (i % cv) * V, p = i / cv;
    const int wo = p % Wo, t = p / Wo, ho = t % Ho, n = t / Ho;
    float m[V];
#pragma unroll
    for (int j = 0; j < V; j++) m[j] = -INFINITY;
    for (int dy = 0; dy < k; dy++) {
      const int y = ho * s - pad + dy;
      if (y < 0 || y >= H) continue;
      for (int dx = 0; dx < k; dx++) {
        const int x = wo * s - pad + dx;
        if (x < 0 || x >= W) continue;
        const uint4 raw = *reinterpret_cast<const uint4 *>(in + ((n * H + y) * W + x) * C + c);
        const T *v = reinterpret_cast<const T *>(&raw);
#pragma unroll
        for (int j = 0; j < V; j++) {
          const float f = tof(v[j]);
          m[j] = f > m[j] ? f : m[j];
        }
      }
    }
    uint4 o;
    T *ov = reinterpret_cast<T *>(&o);
#pragma unroll
    for (int j = 0; j < V; j++) ov[j] = fromf<T>(m[j]);
    *reinterpret_cast<uint4 *>(out + p * C + c) = o;
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

/* The same, 16 bytes a thread per load and store (D * sizeof(T) a multiple of 16, rows 16-byte
 * aligned; up to 32 * NV vectors a row in registers). */
template <typename T, int NV>
__global__ void k_layernorm_vec(const T *__restrict__ x, T *__restrict__ y,
                                const float *__restrict__ g, const float *__restrict__ b,
                                int64_t rows, int D, float eps) {
  constexpr int VE = 16 / (int)sizeof(T); /* values per vector */
  int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32, nvec = D / VE;
  if (row >= rows) return;
  const uint4 *xr = reinterpret_cast<const uint4 *>(x + row * D);
  float v[NV][VE];
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < NV; j++) {
    int c = lane + 32 * j;
    uint4 u = c < nvec ? xr[c] : make_uint4(0, 0, 0, 0);
    const T *t = reinterpret_cast<const T *>(&u);
#pragma unroll
    for (int e = 0; e < VE; e++) v[j][e] = tof(t[e]), s += v[j][e];
  }
  float mean = warp_sum(s) / (float)D;
  float q = 0.f;
#pragma unroll
  for (int j = 0; j < NV; j++) {
    bool in = lane + 32 * j < nvec;
#pragma unroll
    for (int e = 0; e < VE; e++) {
      float d = in ? v[j][e] - mean : 0.f;
      q += d * d;
    }
  }
  float rstd = rsqrtf(warp_sum(q) / (float)D + eps);
  uint4 *yr = reinterpret_cast<uint4 *>(y + row * D);
#pragma unroll
  for (int j = 0; j < NV; j++) {
    int c = lane + 32 * j;
    if (c >= nvec) continue;
    uint4 u;
    T *t = reinterpret_cast<T *>(&u);
    /* gamma and beta 16 bytes at a time too (device allocations: 256-byte aligned) */
    float gv[VE], bv[VE];
#pragma unroll
    for (int e = 0; e < VE; e += 4) {
      *reinterpret_cast<float4 *>(gv + e) = reinterpret_cast<const float4 *>(g + c * VE)[e / 4];
      *reinterpret_cast<float4 *>(bv + e) = reinterpret_cast<const float4 *>(b + c * VE)[e / 4];
    }
#pragma unroll
    for (int e = 0; e < VE; e++) t[e] = fromf<T>((v[j][e] - mean) * rstd * gv[e] + bv[e]);
    yr[c] = u;
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
