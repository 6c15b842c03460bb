/* The per-sample transforms: normalisation, flip and rotation, and the crop transforms. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/format_internal.h"
#include "formats/raw/raw.h"
#include "loader/center_span.h"
#include "loader/loader_impl.h"

/* Native pixels to the batch slot at dst, with the transform. */
static void process_sample(pb_loader *l, worker *w, int64_t epoch, int64_t idx, const void *px,
                           unsigned char *dst, pb_batch_times *t) {
  if (l->p.out_dtype == PB_OUT_NATIVE) { /* a copy, timed per batch by build_batch */
    if (px != dst) memcpy(dst, px, l->sample_bytes);
    return;
  }
  if (l->p.transform != PB_TRANSFORM_AUGMENT) {
    int64_t t0 = pb_now_ns();
    pb__convert_affine(px, l->meta.dtype, dst, l->p.out_dtype, l->sample_bytes / l->out_esize,
                       l->a, l->b);
    t->convert_ns += pb_now_ns() - t0;
    return;
  }
  /* Per-sample stream: the same pixels whichever worker draws the sample. */
  pb_rng rng;
  pb_rng_init(&rng, pb_seed_mix(l->p.seed, (uint64_t)epoch, (uint64_t)idx));
  int flip = pb_rng_uniform(&rng) < 0.5;
  double angle = (pb_rng_uniform(&rng) * 2.0 - 1.0) * 15.0;
  int64_t t0 = pb_now_ns();
  pb__warp_plan(w->table, l->h, l->w, angle, flip);
  int64_t t1 = pb_now_ns(), conv = 0, tr = t1 - t0;
  size_t es = pb_dtype_size(l->meta.dtype), plane_px = (size_t)(l->h * l->w);
  const unsigned char *src = px;
  for (int64_t p = 0; p < l->planes; p++) {
    int64_t c0 = pb_now_ns();
    for (int64_t y = 0; y < l->h; y++)
      pb__convert_affine_f32(src + ((size_t)p * plane_px + (size_t)(y * l->w)) * es, l->meta.dtype,
                             w->padded + (y + 1) * (l->w + 2) + 1, (size_t)l->w, l->a, l->b);
    int64_t c1 = pb_now_ns();
    unsigned char *out = dst + (size_t)p * plane_px * l->out_esize;
    if (l->p.out_dtype == PB_OUT_FLOAT32) {
      pb__warp_apply(w->table, l->h, l->w, w->padded, l->b, (float *)(void *)out);
    } else {
      pb__warp_apply(w->table, l->h, l->w, w->padded, l->b, w->plane);
      if (l->p.out_dtype == PB_OUT_FLOAT16) pb__pack_f16(w->plane, (uint16_t *)(void *)out, plane_px);
      else pb__pack_bf16(w->plane, (uint16_t *)(void *)out, plane_px);
    }
    int64_t c2 = pb_now_ns();
    conv += c1 - c0;
    tr += c2 - c1;
  }
  t->convert_ns += conv;
  t->transform_ns += tr;
}


/* ---- the crop transforms ----------------------------------------------------------------------- */

/* torchvision's RandomResizedCrop.get_params: 10 tries of a random area and log-uniform aspect
 * ratio, then a centre crop clamped to the ratio range. */
static void rrc_params(const pb_loader_params *p, pb_rng *rng, int64_t H, int64_t W, int64_t *y,
                       int64_t *x, int64_t *h, int64_t *w) {
  double area = (double)H * (double)W;
  double lr0 = log((double)p->ratio_min), lr1 = log((double)p->ratio_max);
  for (int k = 0; k < 10; k++) {
    double target = area * ((double)p->scale_min + pb_rng_uniform(rng) * (double)(p->scale_max - p->scale_min));
    double ratio = exp(lr0 + pb_rng_uniform(rng) * (lr1 - lr0));
    int64_t cw = (int64_t)llround(sqrt(target * ratio)), ch = (int64_t)llround(sqrt(target / ratio));
    if (cw > 0 && cw <= W && ch > 0 && ch <= H) {
      *y = (int64_t)pb_rng_below(rng, (uint64_t)(H - ch + 1));
      *x = (int64_t)pb_rng_below(rng, (uint64_t)(W - cw + 1));
      *h = ch;
      *w = cw;
      return;
    }
  }
  double in_ratio = (double)W / (double)H;
  if (in_ratio < (double)p->ratio_min) {
    *w = W;
    *h = (int64_t)llround((double)W / (double)p->ratio_min);
  } else if (in_ratio > (double)p->ratio_max) {
    *h = H;
    *w = (int64_t)llround((double)H * (double)p->ratio_max);
  } else {
    *w = W;
    *h = H;
  }
  if (*h > H) *h = H;
  if (*w > W) *w = W;
  if (*h < 1) *h = 1;
  if (*w < 1) *w = 1;
  *y = (H - *h) / 2;
  *x = (W - *w) / 2;
}

/* The centre crop (ch x cw) of an H x W image resized to `resize` on its shorter side: the
 * sampled span [ay, ay + ly) x [ax, ax + lx) in full-resolution pixels, and in r's Y and X the
 * pixels the resize reads (the span and the filter's reach on each side). */
static void center_span(int64_t H, int64_t W, int64_t rs, int64_t ch, int64_t cw, double *ay,
                        double *ly, double *ax, double *lx, pb_region *r) {
  double fy, fx;
  pb__center_span(H, W, rs, ch, cw, ay, ax, &fy, &fx);
  *ly = (double)ch * fy;
  *lx = (double)cw * fx;
  double my = (fy > 1.0 ? fy : 1.0) + 1.0, mx = (fx > 1.0 ? fx : 1.0) + 1.0;
  int64_t y0 = (int64_t)floor(*ay - my), y1 = (int64_t)ceil(*ay + *ly + my);
  int64_t x0 = (int64_t)floor(*ax - mx), x1 = (int64_t)ceil(*ax + *lx + mx);
  y0 = y0 < 0 ? 0 : y0;
  x0 = x0 < 0 ? 0 : x0;
  y1 = y1 > H ? H : y1;
  x1 = x1 > W ? W : x1;
  r->start[PB_Y] = y0;
  r->start[PB_X] = x0;
  r->count[PB_Y] = y1 - y0;
  r->count[PB_X] = x1 - x0;
}

/* The largest reduction (1, 2, 4 or 8) that leaves a span of ly x lx at least ch x cw. */
static int reduction(double ly, double lx, int64_t ch, int64_t cw) {
  int scale = 1;
  for (int d = 8; d > 1 && scale == 1; d /= 2)
    if (ly / d >= (double)ch && lx / d >= (double)cw) scale = d;
  return scale;
}

/* Region r (full-resolution coordinates) of sample idx into w->region, at 1/(*scale) where the
 * format can; *box: what w->region holds, in the scaled image's coordinates. */
static int get_region(pb_loader *l, worker *w, int64_t idx, const pb_region *r, int *scale,
                      pb_region *box, pb_batch_times *t, struct pb_error *err) {
  if (l->p.cache == PB_CACHE_NONE) {
    pb_stage_times st;
    int rc = pb__read_scaled(w->ds, idx, r, scale, w->region, w->region_size, box, &st, err);
    t->read_ns += st.read_ns;
    t->decompress_ns += st.decompress_ns;
    t->decode_ns += st.decode_ns;
    t->bytes_read += st.bytes_read;
    t->bytes_decoded += st.bytes_decoded;
    if (rc != PB_OK) pb__loader_sample_error(l, w->ds, idx, err);
    return rc;
  }
  if (l->bad != NULL && l->bad[idx])
    return pb_error_set(err, PB_EIO, "sample %lld of %s: failed to read while caching",
                        (long long)idx, l->path);
  int64_t t0 = pb_now_ns();
  const void *px = l->p.cache == PB_CACHE_PRELOAD ? (const void *)(l->preload + (size_t)idx * l->img_bytes)
                                                  : pb__raw_pixels(l->raw, idx, NULL);
  static const int64_t zero[PB_NDIM] = {0, 0, 0, 0, 0};
  pb__copy_box(w->region, r->start, r->count, px, zero, l->meta.shape, pb_dtype_size(l->meta.dtype));
  *scale = 1;
  *box = *r;
  t->read_ns += pb_now_ns() - t0;
  int64_t bytes = (int64_t)pb_dtype_size(l->meta.dtype);
  for (int k = 0; k < PB_NDIM; k++) bytes *= r->count[k];
  t->bytes_read += bytes;
  t->bytes_decoded += bytes;
  return PB_OK;
}

/* A float plane of pixel values (unscaled) as the image's own type: rounded to the nearest
 * value and held to the type's range, as a resize of 8-bit images in PIL gives them. */
static void store_native(const float *src, pb_dtype dt, unsigned char *out, size_t n) {
  switch (dt) {
    case PB_UINT8:
      for (size_t i = 0; i < n; i++) {
        float v = rintf(src[i]);
        out[i] = (unsigned char)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
      }
      break;
    case PB_UINT16:
      for (size_t i = 0; i < n; i++) {
        float v = rintf(src[i]);
        ((uint16_t *)(void *)out)[i] = (uint16_t)(v < 0.0f ? 0.0f : v > 65535.0f ? 65535.0f : v);
      }
      break;
    case PB_INT16:
      for (size_t i = 0; i < n; i++) {
        float v = rintf(src[i]);
        ((int16_t *)(void *)out)[i] = (int16_t)(v < -32768.0f ? -32768.0f : v > 32767.0f ? 32767.0f : v);
      }
      break;
    case PB_UINT32:
      for (size_t i = 0; i < n; i++) {
        double v = rint((double)src[i]);
        ((uint32_t *)(void *)out)[i] = (uint32_t)(v < 0.0 ? 0.0 : v > 4294967295.0 ? 4294967295.0 : v);
      }
      break;
    case PB_FLOAT64:
      for (size_t i = 0; i < n; i++) ((double *)(void *)out)[i] = (double)src[i];
      break;
    default: memcpy(out, src, n * sizeof(float)); break;
  }
}

/* Writes a float plane into the batch in its output type. */
static void store_plane(pb_loader *l, const float *src, unsigned char *out, size_t n) {
  if (l->p.out_dtype == PB_OUT_NATIVE) {
    store_native(src, l->meta.dtype, out, n);
  } else if (l->p.out_dtype == PB_OUT_FLOAT32) {
    if ((const void *)src != (void *)out) memcpy(out, src, n * sizeof(float));
  } else if (l->p.out_dtype == PB_OUT_FLOAT16) {
    pb__pack_f16(src, (uint16_t *)(void *)out, n);
  } else {
    pb__pack_bf16(src, (uint16_t *)(void *)out, n);
  }
}

/* One sample of a crop transform into dst. The random draws come from a stream of (seed, epoch,
 * index), so a sample is the same whichever worker builds it. */
static int crop_sample(pb_loader *l, worker *w, int64_t epoch, int64_t idx, unsigned char *dst,
                       pb_batch_times *t, struct pb_error *err) {
  const int64_t H = l->ih[idx], W = l->iw[idx], ch = l->p.crop_h, cw = l->p.crop_w;
  pb_rng rng;
  pb_rng_init(&rng, pb_seed_mix(l->p.seed, (uint64_t)epoch, (uint64_t)idx));
  pb_region r;
  for (int k = 0; k < PB_NDIM; k++) {
    r.start[k] = 0;
    r.count[k] = l->meta.shape[k];
  }
  size_t plane_out = (size_t)(ch * cw), es = pb_dtype_size(l->meta.dtype);
  int flip = 0;
  if (l->p.transform == PB_TRANSFORM_RANDOM_CROP) {
    r.start[PB_Y] = (int64_t)pb_rng_below(&rng, (uint64_t)(H - ch + 1));
    r.start[PB_X] = (int64_t)pb_rng_below(&rng, (uint64_t)(W - cw + 1));
    r.count[PB_Y] = ch;
    r.count[PB_X] = cw;
    flip = l->p.flip && pb_rng_uniform(&rng) < 0.5;
    int scale = 1;
    pb_region box;
    PB_RETURN_NOT_OK(get_region(l, w, idx, &r, &scale, &box, t, err));
    int64_t t0 = pb_now_ns();
    for (int64_t p = 0; p < l->planes; p++) {
      const unsigned char *src = w->region + (size_t)p * plane_out * es;
      unsigned char *out = dst + (size_t)p * plane_out * l->out_esize;
      float *f = l->p.out_dtype == PB_OUT_FLOAT32 ? (float *)(void *)out : w->plane;
      for (int64_t y = 0; y < ch; y++) {
        float *row = f + y * cw;
        if (!flip) {
          pb__convert_affine_f32(src + (size_t)(y * cw) * es, l->meta.dtype, row, (size_t)cw, l->a, l->b);
        } else {
          pb__convert_affine_f32(src + (size_t)(y * cw) * es, l->meta.dtype, w->rowf, (size_t)cw, l->a, l->b);
          for (int64_t x = 0; x < cw; x++) row[x] = w->rowf[cw - 1 - x];
        }
      }
      store_plane(l, f, out, plane_out);
    }
    t->convert_ns += pb_now_ns() - t0;
    return PB_OK;
  }
  /* The sampled span of the image, in full-resolution pixels: [ay, ay + ly) x [ax, ax + lx). */
  double ay, ly, ax, lx;
  if (l->p.transform == PB_TRANSFORM_RANDOM_RESIZED_CROP) {
    int64_t y, x, h, wd;
    rrc_params(&l->p, &rng, H, W, &y, &x, &h, &wd);
    flip = l->p.flip && pb_rng_uniform(&rng) < 0.5;
    r.start[PB_Y] = y;
    r.start[PB_X] = x;
    r.count[PB_Y] = h;
    r.count[PB_X] = wd;
    ay = (double)y;
    ax = (double)x;
    ly = (double)h;
    lx = (double)wd;
  } else { /* centre crop of the image resized to `resize` on its shorter side */
    center_span(H, W, l->p.resize, ch, cw, &ay, &ly, &ax, &lx, &r);
  }
  /* The largest reduction that still leaves at least the output's resolution. */
  int scale = l->p.reduced_decode && l->p.cache == PB_CACHE_NONE ? reduction(ly, lx, ch, cw) : 1;
  pb_region box;
  PB_RETURN_NOT_OK(get_region(l, w, idx, &r, &scale, &box, t, err));
  int64_t t0 = pb_now_ns();
  int64_t bh = box.count[PB_Y], bw = box.count[PB_X];
  double d = (double)scale;
  if (pb__rs_plan(&w->ay, (int)ch, ay / d - (double)box.start[PB_Y], ly / d, 0, (int)bh, 0) != 0 ||
      pb__rs_plan(&w->ax, (int)cw, ax / d - (double)box.start[PB_X], lx / d, 0, (int)bw, flip) != 0)
    return pb_error_set(err, PB_ENOMEM, "out of memory for a resampling plan");
  for (int64_t p = 0; p < l->planes; p++) {
    const unsigned char *src = w->region + (size_t)(p * bh * bw) * es;
    unsigned char *out = dst + (size_t)p * plane_out * l->out_esize;
    float *f = l->p.out_dtype == PB_OUT_FLOAT32 ? (float *)(void *)out : w->plane;
    pb__rs_apply(&w->ax, &w->ay, src, l->meta.dtype, bw, w->rowf, w->tmp, l->a, l->b, f,
                 f != w->plane);
    store_plane(l, f, out, plane_out);
  }
  t->transform_ns += pb_now_ns() - t0;
  return PB_OK;
}

/* Reads (or finds in the cache) sample idx and writes it into dst. */
int pb__loader_load_sample(pb_loader *l, worker *w, int64_t epoch, int64_t idx, unsigned char *dst,
                           pb_batch_times *t, struct pb_error *err) {
  if (l->crop) return crop_sample(l, w, epoch, idx, dst, t, err);
  const void *px;
  if (l->p.cache == PB_CACHE_NONE) {
    pb_stage_times st;
    /* Native output needs no conversion: the backend decodes straight into the batch. */
    void *into = l->p.out_dtype == PB_OUT_NATIVE ? (void *)dst : w->native;
    int rc = pb_dataset_read(w->ds, idx, into, l->img_bytes, &st, err);
    t->read_ns += st.read_ns;
    t->decompress_ns += st.decompress_ns;
    t->decode_ns += st.decode_ns;
    t->bytes_read += st.bytes_read;
    t->bytes_decoded += st.bytes_decoded;
    if (rc != PB_OK) {
      pb__loader_sample_error(l, w->ds, idx, err);
      return rc;
    }
    px = into;
  } else {
    if (l->bad != NULL && l->bad[idx])
      return pb_error_set(err, PB_EIO, "sample %lld of %s: failed to read while caching",
                          (long long)idx, l->path);
    if (l->p.cache == PB_CACHE_PRELOAD) {
      px = l->preload + (size_t)idx * l->img_bytes;
    } else if (l->p.out_dtype == PB_OUT_NATIVE) {
      px = pb__raw_pixels(l->raw, idx, NULL); /* the map is read by the copy, in collate */
    } else {
      int64_t t0 = pb_now_ns();
      px = pb__raw_pixels(l->raw, idx, NULL);
      t->read_ns += pb_now_ns() - t0;
    }
    t->bytes_read += (int64_t)l->img_bytes;
    t->bytes_decoded += (int64_t)l->img_bytes;
  }
  process_sample(l, w, epoch, idx, px, dst, t);
  return PB_OK;
}

/* ---- one image's evaluation crop, outside a loader ------------------------------------------- */

int pb_eval_crop_u8(pb_dataset *ds, int64_t i, int resize, int crop, uint8_t *out, size_t out_size,
                    int *channels, struct pb_error *err) {
  if (ds == NULL || out == NULL || crop < 1 || resize < crop)
    return pb_error_set(err, PB_EINVAL, "eval crop: bad arguments (crop %d, resize %d)", crop, resize);
  pb_image_meta m;
  PB_RETURN_NOT_OK(pb_dataset_meta(ds, i, &m, err));
  const char *name = m.name[0] ? m.name : pb_dataset_path(ds);
  int64_t H = m.shape[PB_Y], W = m.shape[PB_X], C = m.shape[PB_C];
  if (m.dtype != PB_UINT8 || m.shape[PB_T] != 1 || m.shape[PB_Z] != 1)
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: %s, %lld x %lld planes: the evaluation crop "
                        "takes 8-bit 2-D images", name, pb_dtype_name(m.dtype),
                        (long long)m.shape[PB_T], (long long)m.shape[PB_Z]);
  size_t plane_out = (size_t)crop * (size_t)crop;
  if (out_size < (size_t)C * plane_out)
    return pb_error_set(err, PB_EINVAL, "%s: %lld channels of %d x %d need %zu bytes, not %zu", name,
                        (long long)C, crop, crop, (size_t)C * plane_out, out_size);
  if (channels != NULL) *channels = (int)C;
  pb_region r;
  for (int k = 0; k < PB_NDIM; k++) {
    r.start[k] = 0;
    r.count[k] = m.shape[k];
  }
  double ay, ly, ax, lx;
  center_span(H, W, resize, crop, crop, &ay, &ly, &ax, &lx, &r);
  int scale = reduction(ly, lx, crop, crop);
  size_t region_size = (size_t)(C * r.count[PB_Y] * r.count[PB_X]);
  size_t tmp_size = pb__rs_tmp_floats(r.count[PB_X], crop) * sizeof(float);
  unsigned char *region = pb_alloc(region_size);
  float *rowf = pb_alloc((size_t)r.count[PB_X] * sizeof(float));
  float *tmp = pb_alloc(tmp_size);
  float *f = pb_alloc(plane_out * sizeof(float));
  pb__rs_axis pax, pay;
  memset(&pax, 0, sizeof pax);
  memset(&pay, 0, sizeof pay);
  int rc = region && rowf && tmp && f ? PB_OK : pb_error_set(err, PB_ENOMEM, "%s: out of memory", name);
  pb_region box;
  memset(&box, 0, sizeof box);
  pb_stage_times st;
  memset(&st, 0, sizeof st);
  if (rc == PB_OK) rc = pb__read_scaled(ds, i, &r, &scale, region, region_size, &box, &st, err);
  int64_t bh = box.count[PB_Y], bw = box.count[PB_X];
  double d = (double)scale;
  if (rc == PB_OK &&
      (pb__rs_plan(&pay, crop, ay / d - (double)box.start[PB_Y], ly / d, 0, (int)bh, 0) != 0 ||
       pb__rs_plan(&pax, crop, ax / d - (double)box.start[PB_X], lx / d, 0, (int)bw, 0) != 0))
    rc = pb_error_set(err, PB_ENOMEM, "out of memory for a resampling plan");
  for (int64_t p = 0; rc == PB_OK && p < C; p++) {
    pb__rs_apply(&pax, &pay, region + (size_t)(p * bh * bw), PB_UINT8, bw, rowf, tmp, 1.0f, 0.0f,
                 f, 0);
    store_native(f, PB_UINT8, out + (size_t)p * plane_out, plane_out);
  }
  pb__rs_free(&pax);
  pb__rs_free(&pay);
  pb_free(region, region_size);
  pb_free(rowf, (size_t)r.count[PB_X] * sizeof(float));
  pb_free(tmp, tmp_size);
  pb_free(f, plane_out * sizeof(float));
  return rc;
}
