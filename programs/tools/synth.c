/* Seeded synthetic microscopy-like images: round "cells" on a smooth background, with noise.
 * Cheap enough to make 1080x1080x3 fields in milliseconds. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipebench/gen.h"

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
