/* Helpers the backends share: options, whole-image regions and box copies (files and folders: common/fs.c). */
#include <stdio.h>
#include <string.h>

#include "formats/format_internal.h"

int pb__opt_get(const char *options, const char *key, char *buf, size_t size) {
  if (options == NULL || key == NULL) return 0;
  size_t klen = strlen(key);
  const char *p = options;
  while (*p != '\0') {
    const char *end = strchr(p, ',');
    if (end == NULL) end = p + strlen(p);
    if ((size_t)(end - p) > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
      size_t vlen = (size_t)(end - p) - klen - 1;
      if (vlen >= size) vlen = size - 1;
      memcpy(buf, p + klen + 1, vlen);
      buf[vlen] = '\0';
      return 1;
    }
    p = *end == ',' ? end + 1 : end;
  }
  return 0;
}

void pb__region_full(pb_region *r, const int64_t shape[PB_NDIM]) {
  for (int k = 0; k < PB_NDIM; k++) {
    r->start[k] = 0;
    r->count[k] = shape[k];
  }
}

void pb__copy_box(void *dst, const int64_t dst_origin[PB_NDIM], const int64_t dst_shape[PB_NDIM],
                  const void *src, const int64_t src_origin[PB_NDIM],
                  const int64_t src_shape[PB_NDIM], size_t esize) {
  int64_t lo[PB_NDIM], n[PB_NDIM];
  for (int k = 0; k < PB_NDIM; k++) {
    int64_t a = src_origin[k] > dst_origin[k] ? src_origin[k] : dst_origin[k];
    int64_t b1 = src_origin[k] + src_shape[k], b2 = dst_origin[k] + dst_shape[k];
    int64_t b = b1 < b2 ? b1 : b2;
    if (b <= a) return;
    lo[k] = a;
    n[k] = b - a;
  }
  /* Strides in elements. */
  int64_t ss[PB_NDIM], ds[PB_NDIM];
  ss[PB_NDIM - 1] = ds[PB_NDIM - 1] = 1;
  for (int k = PB_NDIM - 2; k >= 0; k--) {
    ss[k] = ss[k + 1] * src_shape[k + 1];
    ds[k] = ds[k + 1] * dst_shape[k + 1];
  }
  size_t row = (size_t)n[PB_X] * esize;
  const unsigned char *s = src;
  unsigned char *d = dst;
  for (int64_t t = 0; t < n[0]; t++)
    for (int64_t c = 0; c < n[1]; c++)
      for (int64_t z = 0; z < n[2]; z++)
        for (int64_t y = 0; y < n[3]; y++) {
          int64_t so = (lo[0] + t - src_origin[0]) * ss[0] + (lo[1] + c - src_origin[1]) * ss[1] +
                       (lo[2] + z - src_origin[2]) * ss[2] + (lo[3] + y - src_origin[3]) * ss[3] +
                       (lo[4] - src_origin[4]);
          int64_t dof = (lo[0] + t - dst_origin[0]) * ds[0] + (lo[1] + c - dst_origin[1]) * ds[1] +
                        (lo[2] + z - dst_origin[2]) * ds[2] + (lo[3] + y - dst_origin[3]) * ds[3] +
                        (lo[4] - dst_origin[4]);
          memcpy(d + (size_t)dof * esize, s + (size_t)so * esize, row);
        }
}
