/* Small helpers shared by the ome-zarr tests: checks that print both sides, temp folders. */
#ifndef ZARR_TEST_H
#define ZARR_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/format_internal.h"
#include "pipebench/core.h"
#include "pipebench/format.h"

#define ZT_FAIL(...)                                                                           \
  do {                                                                                         \
    fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                            \
    fprintf(stderr, __VA_ARGS__);                                                              \
    fprintf(stderr, "\n");                                                                     \
    exit(1);                                                                                   \
  } while (0)

#define ZT_EQ(a, b)                                                                            \
  do {                                                                                         \
    long long za_ = (long long)(a), zb_ = (long long)(b);                                      \
    if (za_ != zb_) ZT_FAIL("%s == %s failed: %lld != %lld", #a, #b, za_, zb_);                \
  } while (0)

#define ZT_OK(expr, errp)                                                                      \
  do {                                                                                         \
    int zr_ = (expr);                                                                          \
    if (zr_ != 0) ZT_FAIL("%s failed: %s: %s", #expr, pb_strerror(zr_), (errp)->message);      \
  } while (0)

#define ZT_TRUE(c)                                                                             \
  do {                                                                                         \
    if (!(c)) ZT_FAIL("%s is false", #c);                                                      \
  } while (0)

/* A fresh temporary folder (removed with pb__remove_tree by the caller). */
static inline void zt_tmpdir(char *buf, size_t size, const char *tag) {
  snprintf(buf, size, "/tmp/pb-zarr-%s-XXXXXX", tag);
  if (mkdtemp(buf) == NULL) ZT_FAIL("mkdtemp failed");
}

#endif
