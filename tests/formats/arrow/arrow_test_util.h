/* Small helpers shared by the OME-Arrow backend tests. */
#ifndef PB_ARROW_TEST_UTIL_H
#define PB_ARROW_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipebench/format.h"

#include "check.h"

/* A fresh folder under /tmp for one test. */
static inline void tmp_dir(char *buf, size_t size, const char *tag) {
  snprintf(buf, size, "/tmp/pb-arrow-%s-XXXXXX", tag);
  if (mkdtemp(buf) == NULL) {
    perror("mkdtemp");
    exit(1);
  }
}

/* Deterministic pixels of any dtype: value depends on index and image number. */
static inline void fill_pixels(const pb_image_meta *m, void *p, unsigned seed) {
  int64_t n = pb_image_pixels(m);
  for (int64_t i = 0; i < n; i++) {
    uint32_t v = (uint32_t)(i * 2654435761u + seed * 40503u);
    v ^= v >> 13;
    switch (m->dtype) {
      case PB_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
      case PB_UINT16: ((uint16_t *)p)[i] = (uint16_t)(i % 7 == 0 ? 0 : v); break;
      case PB_UINT32: ((uint32_t *)p)[i] = v; break;
      case PB_INT16: ((int16_t *)p)[i] = (int16_t)(int32_t)(v & 0xffff) ; break;
      case PB_FLOAT32: ((float *)p)[i] = (float)(int32_t)v * 0.25f; break;
      case PB_FLOAT64: ((double *)p)[i] = (double)(int32_t)v * 1e-3; break;
      default: break;
    }
  }
}

/* Writes n uint16 images of the given shape (pixels fill_pixels(seed0 + i)) as format, with
 * params' compression and options as given. */
static inline void write_images(const char *path, const char *format, const char *comp,
                                const char *opt, const int64_t shape[PB_NDIM], int n,
                                unsigned seed0) {
  struct pb_error err = {{0}};
  pb_write_params p = PB_WRITE_PARAMS_DEFAULTS;
  p.compression = comp;
  p.options = opt;
  pb_writer *w = NULL;
  CHECK_OK(pb_writer_new(path, format, &p, &w, &err), &err);
  pb_image_meta m;
  pb_image_meta_init(&m, "bad", PB_UINT16, shape);
  void *px = malloc(pb_image_bytes(&m));
  CHECK(px != NULL);
  for (int i = 0; i < n; i++) {
    fill_pixels(&m, px, seed0 + (unsigned)i);
    CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
  }
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
  free(px);
}

#endif
