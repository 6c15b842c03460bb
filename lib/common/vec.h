/* The one growable array: room for `need` elements, kept when it moves, capacity doubling. Used
 * as `T *items; size_t cap;` beside the caller's own count. Internal. */
#ifndef PB_COMMON_VEC_H
#define PB_COMMON_VEC_H

#include <stdint.h>
#include <stdlib.h>

#include "pipebench/core.h"

/** Makes *p (an array of *cap elements of esize bytes, or NULL with *cap 0) hold at least need
 * elements, keeping those it has: PB_OK, or PB_ENOMEM (then *p and *cap are unchanged). Pass
 * `(void **)&items`. */
static inline int pb__vec_reserve(void **p, size_t *cap, size_t need, size_t esize) {
  if (need <= *cap) return PB_OK;
  size_t n = *cap ? *cap : 16;
  while (n < need) {
    if (n > SIZE_MAX / 2) return PB_ENOMEM;
    n *= 2;
  }
  if (esize > 0 && n > SIZE_MAX / esize) return PB_ENOMEM;
  void *q = realloc(*p, n * esize);
  if (q == NULL) return PB_ENOMEM;
  *p = q;
  *cap = n;
  return PB_OK;
}

#endif
