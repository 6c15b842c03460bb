/* The centre crop of an image resized on its shorter side (torchvision's Resize(resize) then
 * CenterCrop), in the source image's pixels. One definition for the loader's crop
 * (lib/loader/transforms.c) and the GPU's (lib/engines/cuda/cuda_jpeg.cu), so that both sample
 * the same span. Header only: the CUDA module compiles it too. */
#ifndef PB_LOADER_CENTER_SPAN_H
#define PB_LOADER_CENTER_SPAN_H

#include <stdint.h>

/* For an h x w image, the shorter side resized to rs (the longer one int(rs * long / short), as
 * torchvision) and the centre ch x cw taken (offsets rounded half to even, as Python's round):
 * the crop starts at (*ay, *ax) in source pixels and each output pixel spans (*fy, *fx) source
 * pixels. */
static inline void pb__center_span(int64_t h, int64_t w, int64_t rs, int64_t ch, int64_t cw,
                                   double *ay, double *ax, double *fy, double *fx) {
  int64_t rh, rw;
  if (h <= w) {
    rh = rs;
    rw = (int64_t)((double)rs * (double)w / (double)h);
  } else {
    rw = rs;
    rh = (int64_t)((double)rs * (double)h / (double)w);
  }
  *fy = (double)h / (double)rh;
  *fx = (double)w / (double)rw;
  int64_t dy = rh - ch, dx = rw - cw, oy = dy / 2, ox = dx / 2;
  if (dy % 2 != 0 && oy % 2 != 0) oy++;
  if (dx % 2 != 0 && ox % 2 != 0) ox++;
  *ay = (double)oy * *fy;
  *ax = (double)ox * *fx;
}

#endif
