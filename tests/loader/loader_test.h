/* Shared bits of the loader and raw-format tests: a seeded synthetic raw dataset whose pixels
 * tell which image they came from (the checks are tests/check.h). */
#ifndef PB_LOADER_TEST_H
#define PB_LOADER_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipebench/format.h"
#include "pipebench/loader.h"

#include "check.h"

/* Pixel p of image i: pixel 0 is i itself, so a sample names its image. */
static inline uint16_t test_pixel(int64_t i, int64_t p) {
  int64_t v = p == 0 ? i : (i * 131 + p * 7 + (p * p) % 13) & 0xffff;
  return (uint16_t)v;
}

/* Writes n uint16 (or uint8, values masked) images of shape 1,c,z,h,w to path (raw). */
static inline void test_make_raw(const char *path, int64_t n, pb_dtype dt, int64_t c, int64_t z,
                                 int64_t h, int64_t w) {
  struct pb_error err = {{0}};
  pb_writer *wr = NULL;
  CHECK_OK(pb_writer_new(path, "raw", NULL, &wr, &err), &err);
  int64_t shape[PB_NDIM] = {1, c, z, h, w};
  pb_image_meta m;
  size_t px = (size_t)(c * z * h * w);
  void *buf = malloc(px * pb_dtype_size(dt));
  CHECK(buf != NULL);
  for (int64_t i = 0; i < n; i++) {
    char name[64];
    snprintf(name, sizeof name, "img_%05lld", (long long)i);
    pb_image_meta_init(&m, name, dt, shape);
    for (size_t p = 0; p < px; p++) {
      uint16_t v = test_pixel(i, (int64_t)p);
      if (dt == PB_UINT8) ((uint8_t *)buf)[p] = (uint8_t)v;
      else ((uint16_t *)buf)[p] = v;
    }
    CHECK_OK(pb_writer_add(wr, &m, buf, &err), &err);
  }
  CHECK_OK(pb_writer_finish(wr, &err), &err);
  pb_writer_free(wr);
  free(buf);
}

/* A fresh temporary folder; the caller removes it. */
static inline void test_tmpdir(char *buf, size_t size) {
  const char *base = getenv("TMPDIR");
  snprintf(buf, size, "%s/pbtest-XXXXXX", base && *base ? base : "/tmp");
  CHECK(mkdtemp(buf) != NULL);
}

#endif
