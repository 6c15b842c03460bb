/* Seeded synthetic microscopy-like images: round "cells" on a smooth background, with noise.
 * Cheap enough to make 1080x1080x3 fields in milliseconds. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipebench/gen.h"
#include "tools/synth.h"

static double dtype_scale(pb_dtype d) {
  switch (d) {
    case PB_UINT8: return 255.0;
    case PB_UINT16:
    case PB_UINT32: return 4095.0; /* a 12-bit camera */
    case PB_INT16: return 4095.0;
    default: return 1.0;
  }
}

static void store(void *pixels, pb_dtype d, size_t i, double v, double scale) {
  if (v < 0) v = 0;
  if (v > 1) v = 1;
  double s = v * scale;
  switch (d) {
    case PB_UINT8: ((uint8_t *)pixels)[i] = (uint8_t)lrint(s); break;
    case PB_UINT16: ((uint16_t *)pixels)[i] = (uint16_t)lrint(s); break;
    case PB_UINT32: ((uint32_t *)pixels)[i] = (uint32_t)lrint(s); break;
    case PB_INT16: ((int16_t *)pixels)[i] = (int16_t)lrint(s); break;
    case PB_FLOAT32: ((float *)pixels)[i] = (float)v; break;
    case PB_FLOAT64: ((double *)pixels)[i] = v; break;
    default: break;
  }
}

void pb_synth_image(const pb_image_meta *meta, uint64_t seed, int64_t index, void *pixels) {
  const int64_t T = meta->shape[PB_T], C = meta->shape[PB_C], Z = meta->shape[PB_Z];
  const int64_t H = meta->shape[PB_Y], W = meta->shape[PB_X];
  const double scale = dtype_scale(meta->dtype);
  pb_rng rng;
  pb_rng_init(&rng, pb_seed_mix(seed, (uint64_t)index, 0));
  /* Cells are placed once per image and shared by every plane, so channels correlate like
   * stains of the same cells do. */
  int n_cells = 3 + (int)pb_rng_below(&rng, 10);
  double cx[16], cy[16], r[16], amp[16];
  double base_r = (double)(H < W ? H : W) / 12.0 + 1.0;
  for (int k = 0; k < n_cells; k++) {
    cx[k] = pb_rng_uniform(&rng) * (double)W;
    cy[k] = pb_rng_uniform(&rng) * (double)H;
    r[k] = base_r * (0.6 + 0.8 * pb_rng_uniform(&rng));
    amp[k] = 0.3 + 0.5 * pb_rng_uniform(&rng);
  }
  double *row = malloc((size_t)W * sizeof *row);
  if (row == NULL) {
    memset(pixels, 0, pb_image_bytes(meta));
    return;
  }
  size_t i = 0;
  for (int64_t t = 0; t < T; t++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t z = 0; z < Z; z++) {
        double level = 0.08 + 0.04 * (double)c;
        double zfall = Z > 1 ? 1.0 - 0.5 * fabs((double)z - (double)(Z - 1) / 2.0) / (double)Z : 1.0;
        pb_rng prng;
        pb_rng_init(&prng, pb_seed_mix(seed, (uint64_t)index, (uint64_t)(1 + (t * C + c) * Z + z)));
        for (int64_t y = 0; y < H; y++) {
          for (int64_t x = 0; x < W; x++)
            row[x] = level + 0.03 * sin(0.05 * (double)x + (double)c) * cos(0.04 * (double)y);
          for (int k = 0; k < n_cells; k++) {
            double dy = (double)y - cy[k];
            if (fabs(dy) >= r[k]) continue;
            double half = sqrt(r[k] * r[k] - dy * dy);
            int64_t x0 = (int64_t)ceil(cx[k] - half), x1 = (int64_t)floor(cx[k] + half);
            if (x0 < 0) x0 = 0;
            if (x1 >= W) x1 = W - 1;
            double a = amp[k] * zfall / (1.0 + 0.5 * (double)((c + k) % 3));
            for (int64_t x = x0; x <= x1; x++) {
              double dx = (double)x - cx[k];
              row[x] += a * (1.0 - (dx * dx + dy * dy) / (r[k] * r[k]));
            }
          }
          for (int64_t x = 0; x < W; x++) {
            /* Uniform noise of +-2% from 16 random bits: cheap and reproducible. */
            double noise = ((double)(pb_rng_next(&prng) >> 48) / 65535.0 - 0.5) * 0.04;
            store(pixels, meta->dtype, i++, row[x] + noise, scale);
          }
        }
      }
  free(row);
}

/* ---- photograph-like images (the imagenet preset) ---------------------------------------------- */

/* Adds one octave of value noise to f (W x H): uniform values in [-amp, amp] on a lattice every
 * `cell` pixels, blended with a smoothstep between lattice points. */
static int add_octave(float *f, int64_t W, int64_t H, double cell, float amp, pb_rng *rng) {
  int64_t gw = (int64_t)((double)W / cell) + 2, gh = (int64_t)((double)H / cell) + 2;
  float *lat = malloc((size_t)(gw * gh) * sizeof *lat);
  int32_t *xi = malloc((size_t)W * sizeof *xi);
  float *xw = malloc((size_t)W * sizeof *xw);
  if (lat == NULL || xi == NULL || xw == NULL) {
    free(lat);
    free(xi);
    free(xw);
    return -1;
  }
  for (int64_t k = 0; k < gw * gh; k++)
    lat[k] = amp * (float)(2.0 * ((double)(pb_rng_next(rng) >> 40) / 16777216.0) - 1.0);
  for (int64_t x = 0; x < W; x++) {
    double gx = (double)x / cell, fl = floor(gx), t = gx - fl;
    xi[x] = (int32_t)fl;
    xw[x] = (float)(t * t * (3.0 - 2.0 * t));
  }
  for (int64_t y = 0; y < H; y++) {
    double gy = (double)y / cell, fl = floor(gy), t = gy - fl;
    float wy = (float)(t * t * (3.0 - 2.0 * t));
    const float *r0 = lat + (int64_t)fl * gw, *r1 = r0 + gw;
    float *row = f + y * W;
    for (int64_t x = 0; x < W; x++) {
      int32_t i = xi[x];
      float a = r0[i] + xw[x] * (r0[i + 1] - r0[i]), b = r1[i] + xw[x] * (r1[i + 1] - r1[i]);
      row[x] += a + wy * (b - a);
    }
  }
  free(lat);
  free(xi);
  free(xw);
  return 0;
}

/* Octaves from `largest` pixels down to 2, amplitude falling as the wavelength (1/f). */
static int add_fractal(float *f, int64_t W, int64_t H, double largest, float amp, double fine,
                       pb_rng *rng) {
  for (double cell = largest; cell >= 2.0; cell /= 2.0) {
    float a = amp * (float)pow(cell / largest, fine);
    if (add_octave(f, W, H, cell, a, rng) != 0) return -1;
  }
  return 0;
}

void pb__synth_photo_size(uint64_t seed, int64_t index, int64_t nominal_long, int64_t *h,
                          int64_t *w) {
  pb_rng rng;
  pb_rng_init(&rng, pb_seed_mix(seed, (uint64_t)index, 0x5175e));
  double u = pb_rng_uniform(&rng);
  int64_t lng = u < 0.7 ? nominal_long : (int64_t)((double)nominal_long * (0.75 + 0.25 * pb_rng_uniform(&rng)));
  double v = pb_rng_uniform(&rng), aspect = v < 0.5 ? 0.75 : v < 0.8 ? 2.0 / 3.0 : 0.6 + 0.4 * pb_rng_uniform(&rng);
  int64_t shrt = (int64_t)llround((double)lng * aspect);
  if (shrt < 1) shrt = 1;
  if (pb_rng_uniform(&rng) < 0.25) {
    *h = lng;
    *w = shrt;
  } else {
    *h = shrt;
    *w = lng;
  }
}

#define GRAIN 0.09
int pb__synth_photo(const pb_image_meta *meta, uint64_t seed, int64_t index, void *pixels) {
  const int64_t C = meta->shape[PB_C], H = meta->shape[PB_Y], W = meta->shape[PB_X];
  const int64_t planes = meta->shape[PB_T] * C * meta->shape[PB_Z];
  const double scale = meta->dtype == PB_UINT8 ? 255.0 : dtype_scale(meta->dtype);
  size_t n = (size_t)(H * W);
  float *lum = calloc(n, sizeof *lum), *ca = calloc(n, sizeof *ca), *cb = calloc(n, sizeof *cb);
  int rc = lum != NULL && ca != NULL && cb != NULL ? 0 : -1;
  pb_rng rng;
  pb_rng_init(&rng, pb_seed_mix(seed, (uint64_t)index, 0x9407));
  double big = (double)(H > W ? H : W) / 3.0;
  /* Scenes differ in how much fine texture they have (sky to foliage). */
  double fine = 0.05 + 0.25 * pb_rng_uniform(&rng);
  if (rc == 0) rc = add_fractal(lum, W, H, big, 0.26f, fine, &rng);
  if (rc == 0) rc = add_fractal(ca, W, H, big, 0.10f, 1.3, &rng);
  if (rc == 0) rc = add_fractal(cb, W, H, big, 0.10f, 1.3, &rng);
  /* Objects: ellipses with hard edges, their own level, colour and grain of texture. */
  int objects = 2 + (int)pb_rng_below(&rng, 6);
  for (int k = 0; rc == 0 && k < objects; k++) {
    double cx = pb_rng_uniform(&rng) * (double)W, cy = pb_rng_uniform(&rng) * (double)H;
    double rx = (0.05 + 0.25 * pb_rng_uniform(&rng)) * (double)W;
    double ry = (0.05 + 0.25 * pb_rng_uniform(&rng)) * (double)H;
    float dl = (float)(pb_rng_uniform(&rng) - 0.5) * 0.5f, da = (float)(pb_rng_uniform(&rng) - 0.5) * 0.3f;
    float db = (float)(pb_rng_uniform(&rng) - 0.5) * 0.3f, tex = (float)(0.02 + 0.1 * pb_rng_uniform(&rng));
    int64_t y0 = (int64_t)(cy - ry), y1 = (int64_t)(cy + ry), x0 = (int64_t)(cx - rx), x1 = (int64_t)(cx + rx);
    y0 = y0 < 0 ? 0 : y0;
    x0 = x0 < 0 ? 0 : x0;
    y1 = y1 >= H ? H - 1 : y1;
    x1 = x1 >= W ? W - 1 : x1;
    for (int64_t y = y0; y <= y1; y++)
      for (int64_t x = x0; x <= x1; x++) {
        double u = ((double)x - cx) / rx, v = ((double)y - cy) / ry;
        if (u * u + v * v > 1.0) continue;
        size_t i = (size_t)(y * W + x);
        /* Stripes of the object's own texture, as fabric or bark. */
        float stripe = tex * (float)sin(((double)x * (1 + k % 3) + (double)y * (k % 2)) * 0.9);
        lum[i] += dl + stripe;
        ca[i] += da;
        cb[i] += db;
      }
  }
  if (rc == 0) {
    pb_rng grain, chroma;
    pb_rng_init(&chroma, pb_seed_mix(seed, (uint64_t)index, 0xc407));
    size_t at = 0;
    for (int64_t p = 0; p < planes; p++) {
      int64_t c = C > 0 ? p % C : 0;
      /* The same grain in every channel: detail in luminance, which JPEG keeps at full
       * resolution, as a photograph's fine texture is. */
      pb_rng_init(&grain, pb_seed_mix(seed, (uint64_t)index, 0x6a11));
      for (size_t i = 0; i < n; i++) {
        double l = 0.45 + lum[i], v;
        if (C < 3) v = l;
        else if (c == 0) v = l + 0.9 * ca[i];
        else if (c == 1) v = l - 0.35 * ca[i] - 0.35 * cb[i];
        else v = l + 0.9 * cb[i];
        v += ((double)(pb_rng_next(&grain) >> 48) / 65535.0 - 0.5) * GRAIN;
        v += ((double)(pb_rng_next(&chroma) >> 48) / 65535.0 - 0.5) * 0.01;
        store(pixels, meta->dtype, at++, v, scale);
      }
    }
  }
  free(lum);
  free(ca);
  free(cb);
  return rc;
}
