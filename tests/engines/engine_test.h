/* Small assertion helpers for the engine tests: print both operands on failure. */
#ifndef PB_ENGINE_TEST_H
#define PB_ENGINE_TEST_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);                 \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

#define CHECK_EQ_LL(a, b)                                                                      \
  do {                                                                                         \
    long long a_ = (long long)(a), b_ = (long long)(b);                                        \
    if (a_ != b_) {                                                                            \
      fprintf(stderr, "%s:%d: %s == %s failed: %lld vs %lld\n", __FILE__, __LINE__, #a, #b,   \
              a_, b_);                                                                         \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

#define CHECK_OK(expr, err)                                                                    \
  do {                                                                                         \
    int rc_ = (expr);                                                                          \
    if (rc_ != 0) {                                                                            \
      fprintf(stderr, "%s:%d: %s returned %d (%s): %s\n", __FILE__, __LINE__, #expr, rc_,     \
              pb_strerror(rc_), (err).message);                                                \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                                  \
  do {                                                                                         \
    double a_ = (double)(a), b_ = (double)(b);                                                 \
    if (!(fabs(a_ - b_) <= (tol))) {                                                           \
      fprintf(stderr, "%s:%d: |%s - %s| <= %g failed: %.9g vs %.9g\n", __FILE__, __LINE__,    \
              #a, #b, (double)(tol), a_, b_);                                                  \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

#endif
