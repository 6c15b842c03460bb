/* Hot loops of the loader: native pixels to float with normalisation in one pass, packing to
 * half precision, and the precomputed bilinear warp used by augmentation. The loops are kept
 * simple (fixed-length inner blocks, no aliasing, no branches) so the compiler vectorises them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loader/loader_internal.h"

/* Inner blocks of a fixed length let GCC's cheap vectoriser at -O2 handle the body without a
 * scalar epilogue; the tail is a plain loop. */
#define BLOCK 64

#define AFFINE_LOOP(T)                                                                        \
  do {                                                                                        \
    const T *restrict s = (const T *)src;                                                     \
    size_t i = 0;                                                                             \
    for (; i + BLOCK <= n; i += BLOCK)                                                        \
      for (size_t j = 0; j < BLOCK; j++) dst[i + j] = (float)s[i + j] * a + b;                \
    for (; i < n; i++) dst[i] = (float)s[i] * a + b;                                          \
  } while (0)

void pb__convert_affine_f32(const void *src, pb_dtype dt, float *restrict dst, size_t n, float a,
                            float b) {
  switch (dt) {
    case PB_UINT8: AFFINE_LOOP(uint8_t); break;
    case PB_UINT16: AFFINE_LOOP(uint16_t); break;
    case PB_UINT32: AFFINE_LOOP(uint32_t); break;
    case PB_INT16: AFFINE_LOOP(int16_t); break;
    case PB_FLOAT32: AFFINE_LOOP(float); break;
    case PB_FLOAT64: {
      const double *restrict s = src;
      for (size_t i = 0; i < n; i++) dst[i] = (float)(s[i] * (double)a + (double)b);
      break;
    }
    default: memset(dst, 0, n * sizeof *dst); break;
  }
}

/* Bit-exact conversions; round to nearest, ties to even. Half: after F. Giesen's well-known
 * "float_to_half_fast3_rtne" arithmetic (subnormals through a float addition, normals by
 * re-biasing the exponent and adding the rounding bias). */
uint16_t pb__f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  uint32_t o;
  if (x >= 0x47800000u) {          /* >= 65536, inf or nan */
    o = x > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (x < 0x38800000u) {    /* below 2^-14: subnormal half (or zero) */
    float v;
    memcpy(&v, &x, sizeof v);
    v += 0.5f;                      /* aligns the half's subnormal step with float's last bit */
    uint32_t r;
    memcpy(&r, &v, sizeof r);
    o = r - 0x3f000000u;
  } else {
    uint32_t odd = (x >> 13) & 1u;
    x += 0xc8000fffu + odd; /* exponent bias 127 -> 15, plus rounding */
    o = x >> 13;
  }
  return (uint16_t)(o | sign);
}

float pb__f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float v;
  if (e == 0) {
    v = ldexpf((float)m, -24);
  } else if (e == 31) {
    uint32_t bits = 0x7f800000u | (m << 13);
    memcpy(&v, &bits, sizeof v);
  } else {
    uint32_t bits = ((e + 112u) << 23) | (m << 13);
    memcpy(&v, &bits, sizeof v);
  }
  uint32_t b;
  memcpy(&b, &v, sizeof b);
  b |= sign;
  memcpy(&v, &b, sizeof v);
  return v;
}

float pb__bf16_to_f32(uint16_t h) {
  uint32_t b = (uint32_t)h << 16;
  float v;
  memcpy(&v, &b, sizeof v);
  return v;
}

/* The packing loops repeat the conversions above without branches (every case computed, then
 * one picked with masks), in fixed-length blocks, so that they vectorise; same bits. */
static inline uint32_t pick(uint32_t cond, uint32_t a, uint32_t b) { /* cond 0/1: cond ? a : b */
  uint32_t m = 0u - cond;
  return (a & m) | (b & ~m);
}

static inline uint16_t f16_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  float v;
  memcpy(&v, &x, sizeof v);
  v += 0.5f;
  uint32_t sub;
  memcpy(&sub, &v, sizeof sub);
  sub -= 0x3f000000u;
  uint32_t norm = (x + 0xc8000fffu + ((x >> 13) & 1u)) >> 13;
  uint32_t big = 0x7c00u | ((uint32_t)(x > 0x7f800000u) << 9);
  uint32_t o = pick((uint32_t)(x < 0x38800000u), sub, norm);
  o = pick((uint32_t)(x >= 0x47800000u), big, o);
  return (uint16_t)(o | sign);
}

static inline uint16_t bf16_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  uint32_t nan = (x >> 16) | 0x40u;
  return (uint16_t)pick((uint32_t)((x & 0x7fffffffu) > 0x7f800000u), nan, rounded);
}

void pb__pack_f16(const float *restrict src, uint16_t *restrict dst, size_t n) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK)
    for (size_t j = 0; j < BLOCK; j++) dst[i + j] = f16_bits(src[i + j]);
  for (; i < n; i++) dst[i] = f16_bits(src[i]);
}

void pb__pack_bf16(const float *restrict src, uint16_t *restrict dst, size_t n) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK)
    for (size_t j = 0; j < BLOCK; j++) dst[i + j] = bf16_bits(src[i + j]);
  for (; i < n; i++) dst[i] = bf16_bits(src[i]);
}

void pb__convert_affine(const void *src, pb_dtype dt, void *dst, pb_out_dtype out, size_t n,
                        float a, float b) {
  if (out == PB_OUT_FLOAT32) {
    pb__convert_affine_f32(src, dt, dst, n, a, b);
    return;
  }
  /* Through a small float block that stays in L1, so it is still one pass over memory. */
  float tmp[1024];
  size_t es = pb_dtype_size(dt);
  const unsigned char *s = src;
  uint16_t *d = dst;
  for (size_t i = 0; i < n; i += 1024) {
    size_t k = n - i < 1024 ? n - i : 1024;
    pb__convert_affine_f32(s + i * es, dt, tmp, k, a, b);
    if (out == PB_OUT_FLOAT16) pb__pack_f16(tmp, d + i, k);
    else pb__pack_bf16(tmp, d + i, k);
  }
}

void pb__warp_plan(pb__warp_entry *table, int64_t h, int64_t w, double angle_deg, int flip) {
  const double pi = 3.14159265358979323846;
  double th = angle_deg * pi / 180.0, c = cos(th), s = sin(th);
  double cx = (double)(w - 1) * 0.5, cy = (double)(h - 1) * 0.5;
  int64_t wp = w + 2;
  for (int64_t y = 0; y < h; y++) {
    double dy = (double)y - cy;
    /* Inverse map: where in the flipped image each output pixel comes from; linear in x. */
    double sx0 = -c * cx - s * dy + cx, sy0 = -s * cx + c * dy + cy, sxd = c;
    if (flip) { /* the mirror folds into the row's coefficients */
      sx0 = (double)(w - 1) - sx0;
      sxd = -c;
    }
    pb__warp_entry *row = table + y * w;
    for (int64_t x = 0; x < w; x++) {
      double sx = sx0 + sxd * (double)x, sy = sy0 + s * (double)x;
      double px = sx + 1.0, py = sy + 1.0; /* into the padded plane */
      pb__warp_entry *e = &row[x];
      if (px < 0.0 || py < 0.0 || px >= (double)(w + 1) || py >= (double)(h + 1)) {
        e->idx = -1;
        e->fx = e->fy = 0.0f;
        continue;
      }
      int64_t ix = (int64_t)px, iy = (int64_t)py; /* floor: both are >= 0 here */
      e->idx = (int32_t)(iy * wp + ix);
      e->fx = (float)(px - (double)ix);
      e->fy = (float)(py - (double)iy);
    }
  }
}

void pb__warp_apply(const pb__warp_entry *restrict table, int64_t h, int64_t w,
                    const float *restrict padded, float fill, float *restrict dst) {
  int64_t wp = w + 2, n = h * w;
  for (int64_t p = 0; p < n; p++) {
    pb__warp_entry e = table[p];
    if (e.idx < 0) {
      dst[p] = fill;
      continue;
    }
    const float *q = padded + e.idx;
    float top = q[0] + e.fx * (q[1] - q[0]);
    float bot = q[wp] + e.fx * (q[wp + 1] - q[wp]);
    dst[p] = top + e.fy * (bot - top);
  }
}

/* ---- resampling (the crop transforms) -------------------------------------------------------- */

void pb__rs_free(pb__rs_axis *ax) {
  free(ax->first);
  free(ax->count);
  free(ax->w);
  memset(ax, 0, sizeof *ax);
}

int pb__rs_plan(pb__rs_axis *ax, int n, double a, double len, int lo, int hi, int flip) {
  double scale = len / n, support = scale > 1.0 ? scale : 1.0;
  int taps = (int)ceil(2.0 * support) + 1; /* the most pixels a window of 2 * support covers */
  if ((size_t)n > ax->cap_n) {
    int32_t *f = realloc(ax->first, (size_t)n * sizeof *f), *c = NULL;
    if (f != NULL) ax->first = f;
    if (f != NULL && (c = realloc(ax->count, (size_t)n * sizeof *c)) != NULL) ax->count = c;
    if (f == NULL || c == NULL) return -1;
    ax->cap_n = (size_t)n;
  }
  if ((size_t)n * (size_t)taps > ax->cap_w) {
    float *w = realloc(ax->w, (size_t)n * (size_t)taps * sizeof *w);
    if (w == NULL) return -1;
    ax->w = w;
    ax->cap_w = (size_t)n * (size_t)taps;
  }
  ax->n = n;
  ax->taps = taps;
  for (int i = 0; i < n; i++) {
    int o = flip ? n - 1 - i : i; /* a flip mirrors the output positions */
    double center = a + ((double)o + 0.5) * scale;
    int x0 = (int)floor(center - support + 0.5), x1 = (int)floor(center + support + 0.5);
    if (x0 < lo) x0 = lo;
    if (x1 > hi) x1 = hi;
    if (x1 - x0 > taps) x1 = x0 + taps;
    float *w = ax->w + (size_t)i * (size_t)taps;
    double sum = 0.0;
    for (int x = x0; x < x1; x++) {
      double t = 1.0 - fabs(((double)x + 0.5 - center) / support);
      w[x - x0] = (float)(t > 0.0 ? t : 0.0);
      sum += t > 0.0 ? t : 0.0;
    }
    if (!(sum > 0.0)) { /* no source pixel in reach (a sample outside the bounds): the nearest */
      x0 = (int)floor(center);
      x0 = x0 < lo ? lo : x0 >= hi ? hi - 1 : x0;
      x1 = x0 + 1;
      w[0] = 1.0f;
      sum = 1.0;
    }
    for (int x = 0; x < x1 - x0; x++) w[x] = (float)(w[x] / sum);
    /* Every output gets `taps` weights (zeros around its own) inside [lo, hi) where they fit,
     * so the horizontal pass runs a loop of one fixed length. */
    if (hi - lo >= taps) {
      int s = x0 + taps > hi ? hi - taps : x0, k0 = x0 - s, nk = x1 - x0;
      memmove(w + k0, w, (size_t)nk * sizeof *w);
      for (int k = 0; k < k0; k++) w[k] = 0.0f;
      for (int k = k0 + nk; k < taps; k++) w[k] = 0.0f;
      x0 = s;
      x1 = s + taps;
    }
    ax->first[i] = x0;
    ax->count[i] = x1 - x0;
  }
  return 0;
}

/* Vertical pass over one output row: acc[x] = sum_k w[k] * row(first + k)[x] for x < n, reading
 * the native rows directly (the loop over x vectorises, conversions included). */
#define RS_VERTICAL(T)                                                                             \
  do {                                                                                             \
    const T *s0 = (const T *)src + (size_t)first * (size_t)src_w;                                 \
    for (int64_t x = 0; x < src_w; x++) acc[x] = w[0] * (float)s0[x];                             \
    for (int k = 1; k < count; k++) {                                                             \
      const T *sk = s0 + (size_t)k * (size_t)src_w;                                               \
      float wk = w[k];                                                                             \
      for (int64_t x = 0; x < src_w; x++) acc[x] += wk * (float)sk[x];                            \
    }                                                                                              \
  } while (0)

/* The vertical loops are where a resize spends its time; -O2 leaves them scalar (its cost model
 * declines loops that need an epilogue) and the x86-64 baseline has no 8-wide conversions, so
 * GCC builds this function at -O3 and in an AVX2 clone picked at load time (not under the
 * sanitizers: the clone's resolver runs before their run-time is set up, and crashes TSan). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define PB_RS_FAST __attribute__((optimize("O3"), target_clones("avx2", "default")))
#else
#define PB_RS_FAST
#endif

/* Streaming (non-temporal) stores of the final output, where the processor has them (SSE, part
 * of x86-64's baseline; the stores are 16 bytes, so both clones use them). */
#if defined(__x86_64__) || defined(__SSE__)
#include <xmmintrin.h>
#define RS_STREAM 1
#else
#define RS_STREAM 0
#endif

/* Eight floats: one per output row of a group (the horizontal pass works on 8 rows at once).
 * The unaligned twin reads and writes anywhere. */
typedef float rs_v8 __attribute__((vector_size(32)));
typedef float rs_v8u __attribute__((vector_size(32), aligned(4)));

#if defined(__clang__)
#define RS_SHUF(x, y, a, b, c, d, e, f, g, h) __builtin_shufflevector(x, y, a, b, c, d, e, f, g, h)
#else
#define RS_SHUF(x, y, a, b, c, d, e, f, g, h) \
  __builtin_shuffle(x, y, (rs_i8){a, b, c, d, e, f, g, h})
#endif
typedef int32_t rs_i8 __attribute__((vector_size(32)));

/* Transposes the 8 x 8 block of rows in[0..7] (8 floats each) into out[0..7]. */
static inline void rs_transpose8(const rs_v8 in[8], rs_v8 out[8]) {
  rs_v8 t[8], u[8];
  for (int k = 0; k < 8; k += 2) {
    t[k] = RS_SHUF(in[k], in[k + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[k + 1] = RS_SHUF(in[k], in[k + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int k = 0; k < 8; k += 4) {
    u[k] = RS_SHUF(t[k], t[k + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[k + 1] = RS_SHUF(t[k], t[k + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[k + 2] = RS_SHUF(t[k + 1], t[k + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[k + 3] = RS_SHUF(t[k + 1], t[k + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int k = 0; k < 4; k++) {
    out[k] = RS_SHUF(u[k], u[k + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    out[k + 4] = RS_SHUF(u[k], u[k + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

/* Horizontal pass of a group: out[j] (8 rows' values of output column j) from the transposed
 * rows tr (column x of the 8 rows at tr[x]), n_taps weights per output. */
static inline void rs_columns(const pb__rs_axis *ax, const rs_v8 *restrict tr, rs_v8 *restrict out,
                              int n_taps) {
  for (int j = 0; j < ax->n; j++) {
    const float *wj = ax->w + (size_t)j * (size_t)ax->taps;
    const rs_v8 *s = tr + ax->first[j];
    rs_v8 v = s[0] * wj[0];
    for (int k = 1; k < n_taps; k++) v += s[k] * wj[k];
    out[j] = v;
  }
}

size_t pb__rs_tmp_floats(int64_t src_w, int n) {
  return 16 * (size_t)src_w + 8 * (size_t)n + 16;
}

PB_RS_FAST
void pb__rs_apply(const pb__rs_axis *ax, const pb__rs_axis *ay, const void *src, pb_dtype dt,
                  int64_t src_w, float *restrict rowf, float *restrict tmp, float a, float b,
                  float *restrict dst, int final) {
  int nx = ax->n, ny = ay->n;
#if RS_STREAM
  /* rows of whole 64-byte lines, aligned */
  int stream = final && nx % 16 == 0 && ((uintptr_t)dst & 63) == 0;
#else
  (void)final;
#endif
  size_t es = pb_dtype_size(dt);
  int fixed = 1;
  for (int j = 0; j < nx && fixed; j++) fixed = ax->count[j] == ax->taps;
  /* tmp, 32-byte aligned: 8 rows of the vertical pass, their transpose (column x of the 8 rows
   * in 8 consecutive floats) and the horizontal pass's 8-row columns. */
  float *base = (float *)(((uintptr_t)tmp + 31) & ~(uintptr_t)31);
  float *rows8 = base;
  rs_v8 *tr = (rs_v8 *)(void *)(base + 8 * (size_t)src_w);
  rs_v8 *cols = tr + src_w;
  /* Output rows in groups of 8. Vertical first: its inner loop runs along source rows,
   * contiguous and long, so it vectorises. The horizontal pass, whose taps sit at a different
   * place for every output, would read scattered floats one at a time; on the transposed
   * group it reads 8 rows' worth in one vector per tap instead. */
  for (int i0 = 0; i0 < ny; i0 += 8) {
    int nr = ny - i0 < 8 ? ny - i0 : 8;
    for (int r = 0; r < nr; r++) {
      const float *w = ay->w + (size_t)(i0 + r) * (size_t)ay->taps;
      int first = ay->first[i0 + r], count = ay->count[i0 + r];
      float *restrict acc = rows8 + (size_t)r * (size_t)src_w;
      switch (dt) {
        case PB_UINT8: RS_VERTICAL(uint8_t); break;
        case PB_UINT16: RS_VERTICAL(uint16_t); break;
        case PB_FLOAT32: RS_VERTICAL(float); break;
        default: /* other types through a float row */
          for (int64_t x = 0; x < src_w; x++) acc[x] = 0.0f;
          for (int k = 0; k < count; k++) {
            pb__convert_affine_f32((const unsigned char *)src + (size_t)(first + k) * (size_t)src_w * es,
                                   dt, rowf, (size_t)src_w, 1.0f, 0.0f);
            for (int64_t x = 0; x < src_w; x++) acc[x] += w[k] * rowf[x];
          }
          break;
      }
    }
    /* Rows past the last of a short group repeat it (their results are not stored). */
    const float *rp[8];
    for (int r = 0; r < 8; r++) rp[r] = rows8 + (size_t)(r < nr ? r : nr - 1) * (size_t)src_w;
    int64_t x = 0;
    for (; x + 8 <= src_w; x += 8) {
      rs_v8 in[8];
      for (int r = 0; r < 8; r++) in[r] = *(const rs_v8u *)(const void *)(rp[r] + x);
      rs_transpose8(in, tr + x);
    }
    for (; x < src_w; x++)
      for (int r = 0; r < 8; r++) tr[x][r] = rp[r][x];
    /* The common tap counts get loops of constant length, which the compiler unrolls. */
    if (fixed && ax->taps == 2) rs_columns(ax, tr, cols, 2);
    else if (fixed && ax->taps == 3) rs_columns(ax, tr, cols, 3);
    else if (fixed && ax->taps == 4) rs_columns(ax, tr, cols, 4);
    else if (fixed && ax->taps == 5) rs_columns(ax, tr, cols, 5);
    else if (fixed && ax->taps == 6) rs_columns(ax, tr, cols, 6);
    else if (fixed && ax->taps == 7) rs_columns(ax, tr, cols, 7);
    else if (fixed && ax->taps == 8) rs_columns(ax, tr, cols, 8);
    else
      for (int j = 0; j < nx; j++) {
        const float *wj = ax->w + (size_t)j * (size_t)ax->taps;
        const rs_v8 *sj = tr + ax->first[j];
        rs_v8 v = sj[0] * wj[0];
        for (int k = 1; k < ax->count[j]; k++) v += sj[k] * wj[k];
        cols[j] = v;
      }
    /* Back to rows, with the normalisation (weights sum to 1, so it commutes). */
    float *d = dst + (size_t)i0 * (size_t)nx;
    int j = 0;
#if RS_STREAM
    /* A whole group into the final output: 16 columns of 8 rows at a time, each row's 64 bytes
     * stored past the cache in one go (the output is not read again here: a batch goes to the
     * consumer or the GPU, and ordinary stores would first read every line they fill). */
    if (stream && nr == 8)
      for (; j + 16 <= nx; j += 16) {
        rs_v8 o0[8], o1[8];
        rs_transpose8(cols + j, o0);
        rs_transpose8(cols + j + 8, o1);
        for (int r = 0; r < 8; r++) {
          float *q = d + (size_t)r * (size_t)nx + (size_t)j;
          rs_v8 v0 = o0[r] * a + b, v1 = o1[r] * a + b;
          _mm_stream_ps(q, _mm_loadu_ps((const float *)&v0));
          _mm_stream_ps(q + 4, _mm_loadu_ps((const float *)&v0 + 4));
          _mm_stream_ps(q + 8, _mm_loadu_ps((const float *)&v1));
          _mm_stream_ps(q + 12, _mm_loadu_ps((const float *)&v1 + 4));
        }
      }
#endif
    for (; j + 8 <= nx; j += 8) {
      rs_v8 out[8];
      rs_transpose8(cols + j, out);
      for (int r = 0; r < nr; r++)
        *(rs_v8u *)(void *)(d + (size_t)r * (size_t)nx + (size_t)j) = out[r] * a + b;
    }
    for (; j < nx; j++)
      for (int r = 0; r < nr; r++) d[(size_t)r * (size_t)nx + (size_t)j] = cols[j][r] * a + b;
  }
#if RS_STREAM
  if (stream) _mm_sfence(); /* the streamed stores before whatever hands the output on */
#endif
}
