/* Checked arithmetic for offsets, lengths, counts and shapes read from files.
 *
 * A size that comes from a file is not to be believed: adding or multiplying two of them may
 * wrap (undefined behaviour for signed types) and turn a corrupt file into a wild read or a
 * tiny allocation. Each helper stores the result in *out and returns 1 when it fits, or returns
 * 0 (leaving *out unspecified) on overflow; callers then refuse the file. */
#ifndef PB_COMMON_CHECKED_H
#define PB_COMMON_CHECKED_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

static inline int pb__add_i64_ok(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

static inline int pb__mul_i64_ok(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

static inline int pb__add_u64_ok(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

static inline int pb__mul_u64_ok(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

static inline int pb__add_size_ok(size_t a, size_t b, size_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

static inline int pb__mul_size_ok(size_t a, size_t b, size_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

/* The product of n non-negative extents (a shape, a chunk grid) in *out; 0 when one is
 * negative or the product passes INT64_MAX. */
static inline int pb__prod_i64_ok(const int64_t *v, size_t n, int64_t *out) {
  int64_t p = 1;
  for (size_t k = 0; k < n; k++) {
    if (v[k] < 0 || __builtin_mul_overflow(p, v[k], &p)) return 0;
  }
  *out = p;
  return 1;
}

/* 1 when [off, off + len) lies inside [0, size): all three non-negative and no overflow. */
static inline int pb__range_in_ok(int64_t off, int64_t len, int64_t size) {
  int64_t end;
  return off >= 0 && len >= 0 && size >= 0 && !__builtin_add_overflow(off, len, &end) &&
         end <= size;
}

/* The largest image a reader believes its metadata about before allocating for it: 64 GiB,
 * or PIPEBENCH_MAX_IMAGE_BYTES from the environment (a byte count; docs/formats.md). A claimed size
 * above it is refused with the metadata file and the claimed shape named. */
#define PB_MAX_IMAGE_BYTES_DEFAULT ((int64_t)64 << 30)

static inline int64_t pb__max_image_bytes(void) {
  const char *s = getenv("PIPEBENCH_MAX_IMAGE_BYTES");
  if (s == NULL || *s == '\0') return PB_MAX_IMAGE_BYTES_DEFAULT;
  char *end;
  long long v = strtoll(s, &end, 10);
  return *end == '\0' && v > 0 ? (int64_t)v : PB_MAX_IMAGE_BYTES_DEFAULT;
}

#endif
