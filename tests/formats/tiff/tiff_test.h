/* Small helpers shared by the tiff backend's tests: temporary folders and seeded test images
 * (the checks are tests/check.h). */
#ifndef PB_TIFF_TEST_H
#define PB_TIFF_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipebench/core.h"
#include "pipebench/format.h"

#include "check.h"

/* A fresh folder under /tmp, removed by tt_rmtree. */
static inline void tt_tempdir(char *buf, size_t size, const char *tag) {
  snprintf(buf, size, "/tmp/pb_tiff_%s_%d_XXXXXX", tag, (int)getpid());
  if (mkdtemp(buf) == NULL) {
    perror("mkdtemp");
    exit(1);
  }
}

static inline void tt_rmtree(const char *path) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", path);
}

/* Fills pixels with a seeded pattern: ramps plus noise, so compression has work to do and
 * every value is checked. */
static inline void tt_fill(const pb_image_meta *m, void *pixels, uint64_t seed) {
  pb_rng rng;
  pb_rng_init(&rng, seed);
  int64_t n = pb_image_pixels(m);
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = pb_rng_next(&rng);
    double v = (double)(i % 251) + (double)(r % 7);
    switch (m->dtype) {
      case PB_UINT8: ((uint8_t *)pixels)[i] = (uint8_t)((uint64_t)v & 0xff); break;
      case PB_UINT16: ((uint16_t *)pixels)[i] = (uint16_t)(v * 211); break;
      case PB_UINT32: ((uint32_t *)pixels)[i] = (uint32_t)(v * 16777) + (uint32_t)(r >> 40); break;
      case PB_INT16: ((int16_t *)pixels)[i] = (int16_t)(v * 97 - 12000); break;
      case PB_FLOAT32: ((float *)pixels)[i] = (float)(v * 0.37 - 20.0); break;
      case PB_FLOAT64: ((double *)pixels)[i] = v * 1e-3 + (double)(r % 1000) * 1e-9; break;
      default: break;
    }
  }
}

/* Extracts a region of a full T,C,Z,Y,X image into out (C order over the counts). */
static inline void tt_extract(const pb_image_meta *m, const void *full, const pb_region *r,
                              void *out) {
  size_t es = pb_dtype_size(m->dtype);
  const unsigned char *s = full;
  unsigned char *d = out;
  const int64_t *sh = m->shape;
  for (int64_t t = 0; t < r->count[0]; t++)
    for (int64_t c = 0; c < r->count[1]; c++)
      for (int64_t z = 0; z < r->count[2]; z++)
        for (int64_t y = 0; y < r->count[3]; y++) {
          int64_t so = ((((r->start[0] + t) * sh[1] + r->start[1] + c) * sh[2] + r->start[2] + z) *
                            sh[3] + r->start[3] + y) * sh[4] + r->start[4];
          memcpy(d, s + (size_t)so * es, (size_t)r->count[4] * es);
          d += (size_t)r->count[4] * es;
        }
}

#endif
