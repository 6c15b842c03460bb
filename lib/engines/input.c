/* Images into model input: one plane set of a T,C,Z,Y,X image to a float32 C,H,W slot. */
#include <string.h>

#include "pipebench/engine.h"
#include "pipebench/format.h"

static double pixel(const void *p, pb_dtype d, size_t i) {
  switch (d) {
  case PB_UINT8: return ((const uint8_t *)p)[i] / 255.0;
  case PB_UINT16: return ((const uint16_t *)p)[i] / 65535.0;
  case PB_UINT32: return ((const uint32_t *)p)[i] / 4294967295.0;
  case PB_INT16: return ((const int16_t *)p)[i] / 32767.0;
  case PB_FLOAT32: return ((const float *)p)[i];
  case PB_FLOAT64: return ((const double *)p)[i];
  default: return 0.0;
  }
}

int pb_image_to_chw(const pb_image_meta *meta, const void *pixels, int c, int h, int w,
                    float *dst, struct pb_error *err) {
  if (c <= 0 || h <= 0 || w <= 0)
    return pb_error_set(err, PB_EINVAL, "target %dx%dx%d must be positive", c, h, w);
  if (pb_dtype_size(meta->dtype) == 0)
    return pb_error_set(err, PB_EINVAL, "image %s: unknown dtype", meta->name);
  const int64_t *s = meta->shape;
  int64_t ic = s[PB_C], iz = s[PB_Z], ih = s[PB_Y], iw = s[PB_X];
  int64_t z = iz / 2; /* the middle plane of a stack; t = 0 */
  /* centre crop when larger, centre pad with zeros when smaller */
  int64_t oy = (ih - h) / 2, ox = (iw - w) / 2;
  for (int ch = 0; ch < c; ch++) {
    int64_t sc = ch % ic; /* fewer channels than the model wants: repeat them (grey -> RGB) */
    size_t plane = (size_t)(((0 * ic + sc) * iz + z) * ih * iw);
    float *d = dst + (size_t)ch * (size_t)h * (size_t)w;
    for (int y = 0; y < h; y++) {
      int64_t sy = y + oy;
      for (int x = 0; x < w; x++) {
        int64_t sx = x + ox;
        d[(size_t)y * (size_t)w + (size_t)x] =
            (sy < 0 || sx < 0 || sy >= ih || sx >= iw)
                ? 0.0f
                : (float)pixel(pixels, meta->dtype, plane + (size_t)(sy * iw + sx));
      }
    }
  }
  return 0;
}
