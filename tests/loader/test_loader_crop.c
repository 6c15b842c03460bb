/* The loader's crop transforms (random_crop, random_resized_crop, center_crop_resize) on image
 * folders whose images differ in size: every sample against a straightforward reference written
 * here from the definitions (the random draws of torchvision's RandomResizedCrop from the same
 * seeded stream, then a direct two-dimensional triangle-filter resample of the full image),
 * batches the same for 0, 1 and 3 workers, shapes, bounds, half-precision outputs, JPEG at
 * reduced scale within a documented tolerance of the full-resolution result, a zarr dataset
 * read by regions, caches, and refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/fs.h"
#include "loader/loader_internal.h"
#include "pipebench/format.h"
#include "pipebench/gen.h"
#include "pipebench/loader.h"

enum { N = 13, CLASSES = 3 };

static char g_dir[] = "/tmp/pb_loader_crop_XXXXXX";

/* Image i: RGB uint8, 41..118 pixels high and wide (some smaller than 64 on one side). */
static void image_size(int i, int64_t *h, int64_t *w) {
  *h = 41 + (i * 37) % 78;
  *w = 50 + (i * 53) % 69;
}

static void write_tree(const char *path, const char *options, int same_size) {
  struct pb_error err = {{0}};
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.options = options;
  pb_writer *w;
  CHECK_OK(pb_writer_new(path, "imagefolder", &wp, &w, &err), &err);
  for (int i = 0; i < N; i++) {
    int64_t h = 96, wd = 112;
    if (!same_size) image_size(i, &h, &wd);
    const int64_t shape[PB_NDIM] = {1, 3, 1, h, wd};
    pb_image_meta m;
    char name[64];
    snprintf(name, sizeof name, "c%d/img_%02d", i % CLASSES, i);
    pb_image_meta_init(&m, name, PB_UINT8, shape);
    uint8_t *px = malloc(pb_image_bytes(&m));
    CHECK(px != NULL);
    pb_synth_image(&m, 11, i, px);
    CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
    free(px);
  }
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
}

/* ---- the reference ------------------------------------------------------------------------- */

/* Triangle-filter weight of source pixel x for an output centred at `center` (PIL's bilinear
 * with antialiasing): normalised later over the pixels in [lo, hi). */
static double tri(double x, double center, double support) {
  double t = 1.0 - fabs((x + 0.5 - center) / support);
  return t > 0.0 ? t : 0.0;
}

/* One output value: the image's plane c (h x w, uint8) resampled at output (i, j) of an n_y x
 * n_x grid over the span [ay, ay + ly) x [ax, ax + lx), with source pixels limited to
 * [y_lo, y_hi) x [x_lo, x_hi). Computed directly in two dimensions. */
static double ref_value(const uint8_t *plane, int64_t w, int i, int j, int ny, int nx, double ay,
                        double ly, double ax, double lx, int64_t y_lo, int64_t y_hi, int64_t x_lo,
                        int64_t x_hi) {
  double sy = ly / ny, sx = lx / nx;
  double supy = sy > 1 ? sy : 1, supx = sx > 1 ? sx : 1;
  double cy = ay + (i + 0.5) * sy, cx = ax + (j + 0.5) * sx;
  int64_t y0 = (int64_t)floor(cy - supy + 0.5), y1 = (int64_t)floor(cy + supy + 0.5);
  int64_t x0 = (int64_t)floor(cx - supx + 0.5), x1 = (int64_t)floor(cx + supx + 0.5);
  y0 = y0 < y_lo ? y_lo : y0;
  x0 = x0 < x_lo ? x_lo : x0;
  y1 = y1 > y_hi ? y_hi : y1;
  x1 = x1 > x_hi ? x_hi : x1;
  double sum = 0, wsum = 0;
  for (int64_t y = y0; y < y1; y++)
    for (int64_t x = x0; x < x1; x++) {
      double k = tri((double)y, cy, supy) * tri((double)x, cx, supx);
      sum += k * plane[y * w + x];
      wsum += k;
    }
  return sum / wsum;
}

/* torchvision's RandomResizedCrop.get_params, from the loader's per-sample stream. */
static void ref_rrc(pb_rng *rng, int64_t H, int64_t W, int64_t out[4]) {
  double area = (double)(H * W), lr0 = log(0.75f), lr1 = log(1.33333333f);
  for (int k = 0; k < 10; k++) {
    double target = area * (0.08f + pb_rng_uniform(rng) * (1.0f - 0.08f));
    double ratio = exp(lr0 + pb_rng_uniform(rng) * (lr1 - lr0));
    int64_t w = llround(sqrt(target * ratio)), h = llround(sqrt(target / ratio));
    if (w > 0 && w <= W && h > 0 && h <= H) {
      out[0] = (int64_t)pb_rng_below(rng, (uint64_t)(H - h + 1));
      out[1] = (int64_t)pb_rng_below(rng, (uint64_t)(W - w + 1));
      out[2] = h;
      out[3] = w;
      return;
    }
  }
  double r = (double)W / (double)H;
  int64_t h = H, w = W;
  if (r < 0.75f) h = llround((double)W / 0.75f);
  else if (r > 1.33333333f) w = llround((double)H * 1.33333333f);
  out[0] = (H - h) / 2;
  out[1] = (W - w) / 2;
  out[2] = h;
  out[3] = w;
}

/* Python's round(x / 2) (halves to even), for the centre crop's offsets. */
static int64_t py_round_half(int64_t x) {
  double v = (double)x / 2.0, f = floor(v);
  if (v - f != 0.5) return llround(v);
  return ((int64_t)f % 2 == 0) ? (int64_t)f : (int64_t)f + 1;
}

/* The expected sample (3 x ch x cw floats, normalised with mean and std 0.5) from the full image. */
static void reference(pb_transform tr, const uint8_t *px, int64_t H, int64_t W, uint64_t seed,
                      int64_t epoch, int64_t idx, int ch, int cw, int resize, float *out) {
  pb_rng rng;
  pb_rng_init(&rng, pb_seed_mix(seed, (uint64_t)epoch, (uint64_t)idx));
  for (int c = 0; c < 3; c++) {
    const uint8_t *plane = px + c * H * W;
    float *o = out + (size_t)c * (size_t)(ch * cw);
    pb_rng r = rng; /* each plane sees the same draws */
    if (tr == PB_TRANSFORM_RANDOM_CROP) {
      int64_t y = (int64_t)pb_rng_below(&r, (uint64_t)(H - ch + 1));
      int64_t x = (int64_t)pb_rng_below(&r, (uint64_t)(W - cw + 1));
      int flip = pb_rng_uniform(&r) < 0.5;
      for (int i = 0; i < ch; i++)
        for (int j = 0; j < cw; j++) {
          int64_t sx = flip ? x + cw - 1 - j : x + j;
          o[i * cw + j] = (float)((plane[(y + i) * W + sx] / 255.0 - 0.5) / 0.5);
        }
    } else if (tr == PB_TRANSFORM_RANDOM_RESIZED_CROP) {
      int64_t b[4];
      ref_rrc(&r, H, W, b);
      int flip = pb_rng_uniform(&r) < 0.5;
      /* Crop, then resize: the filter sees the crop only. */
      for (int i = 0; i < ch; i++)
        for (int j = 0; j < cw; j++) {
          int jj = flip ? cw - 1 - j : j;
          double v = ref_value(plane, W, i, jj, ch, cw, (double)b[0], (double)b[2], (double)b[1],
                               (double)b[3], b[0], b[0] + b[2], b[1], b[1] + b[3]);
          o[i * cw + j] = (float)((v / 255.0 - 0.5) / 0.5);
        }
    } else {
      /* Resize the whole image (shorter side to `resize`), then cut the centre. */
      int64_t rh, rw;
      if (H <= W) {
        rh = resize;
        rw = (int64_t)((double)resize * (double)W / (double)H);
      } else {
        rw = resize;
        rh = (int64_t)((double)resize * (double)H / (double)W);
      }
      int64_t top = py_round_half(rh - ch), left = py_round_half(rw - cw);
      for (int i = 0; i < ch; i++)
        for (int j = 0; j < cw; j++) {
          double v = ref_value(plane, W, (int)(top + i), (int)(left + j), (int)rh, (int)rw, 0.0,
                               (double)H, 0.0, (double)W, 0, H, 0, W);
          o[i * cw + j] = (float)((v / 255.0 - 0.5) / 0.5);
        }
    }
  }
}

/* ---- running the loader -------------------------------------------------------------------- */

typedef struct epoch_out {
  int64_t n;
  int64_t idx[N];
  int64_t labels[N];
  float *data; /* n samples */
} epoch_out;

static pb_loader_params params(pb_transform tr, int workers) {
  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  p.transform = tr;
  p.batch_size = 4;
  p.workers = workers;
  p.shuffle = 1;
  p.seed = 1234;
  p.crop_h = 32;
  p.crop_w = 40;
  p.resize = 48;
  return p;
}

/* Epoch `epoch` of a loader with p: samples as float32 (half outputs widened). */
static void run_epoch(const char *path, const pb_loader_params *p, int64_t epoch, epoch_out *out) {
  struct pb_error err = {{0}};
  pb_loader *l;
  CHECK_OK(pb_loader_new(path, p, &l, &err), &err);
  if (epoch != 0) CHECK_OK(pb_loader_reset(l, epoch, &err), &err);
  size_t sample = (size_t)(3 * p->crop_h * p->crop_w);
  out->data = calloc(N * sample, sizeof(float));
  CHECK(out->data != NULL);
  out->n = 0;
  for (;;) {
    pb_batch *b = NULL;
    CHECK_OK(pb_loader_next(l, &b, &err), &err);
    if (b == NULL) break;
    CHECK_EQ(b->ndim, 4);
    CHECK_EQ(b->shape[1], 3);
    CHECK_EQ(b->shape[2], p->crop_h);
    CHECK_EQ(b->shape[3], p->crop_w);
    CHECK_EQ(b->nbytes, (size_t)b->shape[0] * sample * pb_batch_element_size(b));
    for (int64_t k = 0; k < b->shape[0]; k++) {
      CHECK(out->n < N);
      out->idx[out->n] = b->indices[k];
      out->labels[out->n] = b->labels[k];
      float *dst = out->data + (size_t)out->n * sample;
      for (size_t q = 0; q < sample; q++) {
        size_t at = (size_t)k * sample + q;
        if (p->out_dtype == PB_OUT_NATIVE) { /* uint8 crops: normalised here as the GPU does */
          CHECK_EQ(b->native_dtype, PB_UINT8);
          dst[q] = ((float)((const uint8_t *)b->data)[at] / 255.0f - p->mean) / p->std;
        } else if (p->out_dtype == PB_OUT_FLOAT32) dst[q] = ((const float *)b->data)[at];
        else if (p->out_dtype == PB_OUT_FLOAT16) dst[q] = pb__f16_to_f32(((const uint16_t *)b->data)[at]);
        else dst[q] = pb__bf16_to_f32(((const uint16_t *)b->data)[at]);
      }
      out->n++;
    }
    pb_batch_free(b);
  }
  pb_loader_free(l);
}

/* Largest and mean absolute difference of every sample from the reference. */
static void compare(const char *path, const pb_loader_params *p, int64_t epoch, const epoch_out *got,
                    double *max_diff, double *mean_diff) {
  struct pb_error err = {{0}};
  pb_dataset *ds;
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  size_t sample = (size_t)(3 * p->crop_h * p->crop_w);
  float *want = malloc(sample * sizeof *want);
  CHECK(want != NULL);
  double mx = 0, sum = 0;
  for (int64_t s = 0; s < got->n; s++) {
    pb_image_meta m;
    CHECK_OK(pb_dataset_meta(ds, got->idx[s], &m, &err), &err);
    uint8_t *px = malloc(pb_image_bytes(&m));
    CHECK(px != NULL);
    CHECK_OK(pb_dataset_read(ds, got->idx[s], px, pb_image_bytes(&m), NULL, &err), &err);
    reference(p->transform, px, m.shape[PB_Y], m.shape[PB_X], p->seed, epoch, got->idx[s],
              p->crop_h, p->crop_w, p->resize, want);
    EXPECT_EQ(got->labels[s], pb_dataset_label(ds, got->idx[s]));
    for (size_t q = 0; q < sample; q++) {
      double d = fabs((double)got->data[s * (int64_t)sample + (int64_t)q] - (double)want[q]);
      if (d > mx) mx = d;
      sum += d;
    }
    free(px);
  }
  *max_diff = mx;
  *mean_diff = sum / ((double)got->n * (double)sample);
  free(want);
  pb_dataset_free(ds);
}

static const pb_transform transforms[] = {PB_TRANSFORM_RANDOM_CROP, PB_TRANSFORM_RANDOM_RESIZED_CROP,
                                          PB_TRANSFORM_CENTER_CROP_RESIZE};
static const char *const tnames[] = {"random_crop", "random_resized_crop", "center_crop_resize"};

/* Native crops (dtype native, for a consumer that normalises itself, like the GPU): the
 * images' uint8 values, so the reference to within half a step of 8 bits after rounding, and
 * random_crop (no resampling) exactly; a quarter of float32's bytes. */
static void check_native(const char *png) {
  for (int t = 0; t < 3; t++) {
    pb_loader_params p = params(transforms[t], t == 1 ? 2 : 0);
    if (t == 0) {
      p.crop_h = 24;
      p.crop_w = 30;
    }
    p.out_dtype = PB_OUT_NATIVE;
    epoch_out e;
    run_epoch(png, &p, 1, &e);
    EXPECT_EQ(e.n, N);
    double mx, mean;
    compare(png, &p, 1, &e, &mx, &mean);
    double bound = t == 0 ? 2e-5 : (0.5 / 255.0) / p.std + 2e-5;
    printf("native %s: max difference %.3g from the float reference (bound %.3g), mean %.3g\n",
           tnames[t], mx, bound, mean);
    if (mx > bound) EXPECT_FAIL("native %s: max difference %g over %g", tnames[t], mx, bound);
    free(e.data);
  }
  /* normalize and augment stay refused with native output */
  struct pb_error err = {{0}};
  pb_loader_params p = params(PB_TRANSFORM_AUGMENT, 0);
  p.out_dtype = PB_OUT_NATIVE;
  pb_loader *l = NULL;
  EXPECT_EQ(pb_loader_new(png, &p, &l, &err), PB_EINVAL);
  EXPECT_CONTAINS(err.message, "none or a crop");
}

/* PNG (lossless, no reduced decoding): the reference to float rounding, any worker count. */
static void check_png(const char *png) {
  /* The resize transforms twice: 40 wide, and 48 wide, where whole groups of 8 output rows go to
   * the batch in 64-byte lines (the streaming stores). */
  static const struct {
    int t, wide;
  } cases[] = {{0, 0}, {1, 0}, {1, 1}, {2, 0}, {2, 1}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int t = cases[c].t, wide = cases[c].wide;
    pb_loader_params p = params(transforms[t], 0);
    if (t == 0) { /* random_crop needs images at least as large as the crop */
      p.crop_h = 24;
      p.crop_w = 30;
    } else if (wide) {
      p.crop_w = 48;
    }
    for (int64_t epoch = 0; epoch < 2; epoch++) {
      epoch_out e0, e;
      run_epoch(png, &p, epoch, &e0);
      EXPECT_EQ(e0.n, N);
      double mx, mean;
      compare(png, &p, epoch, &e0, &mx, &mean);
      if (mx > 2e-5) EXPECT_FAIL("%s, epoch %lld: max difference %g from the reference", tnames[t], (long long)epoch, mx);
      /* Bounds: normalised uint8 lies in [-1, 1]. */
      size_t total = (size_t)e0.n * (size_t)(3 * p.crop_h * p.crop_w);
      for (size_t q = 0; q < total; q++)
        if (!(e0.data[q] >= -1.00001f && e0.data[q] <= 1.00001f)) {
          EXPECT_FAIL("%s: value %g out of [-1, 1]", tnames[t], (double)e0.data[q]);
          break;
        }
      for (int workers = 1; workers <= 3; workers += 2) {
        pb_loader_params pw = p;
        pw.workers = workers;
        run_epoch(png, &pw, epoch, &e);
        EXPECT_EQ(e.n, e0.n);
        EXPECT(memcmp(e.idx, e0.idx, sizeof e.idx) == 0);
        if (memcmp(e.data, e0.data, total * sizeof(float)) != 0)
          EXPECT_FAIL("%s, %d workers: samples differ from 0 workers", tnames[t], workers);
        free(e.data);
      }
      /* Epochs draw new crops. */
      if (epoch == 1) {
        epoch_out a;
        run_epoch(png, &p, 0, &a);
        EXPECT(memcmp(a.data, e0.data, total * sizeof(float)) != 0 || t == 2);
        free(a.data);
      }
      free(e0.data);
    }
    /* Half-precision outputs: the float32 samples rounded. */
    for (int od = 1; od <= 2; od++) {
      pb_loader_params ph = p;
      ph.out_dtype = (pb_out_dtype)od;
      epoch_out f, h;
      run_epoch(png, &p, 0, &f);
      run_epoch(png, &ph, 0, &h);
      size_t total = (size_t)f.n * (size_t)(3 * p.crop_h * p.crop_w);
      for (size_t q = 0; q < total; q++) {
        uint16_t bits;
        if (od == 1) bits = pb__f32_to_f16(f.data[q]);
        else pb__pack_bf16(&f.data[q], &bits, 1);
        float want = od == 1 ? pb__f16_to_f32(bits) : pb__bf16_to_f32(bits);
        if (h.data[q] != want) {
          EXPECT_FAIL("%s, %s: sample value %zu is %g, want %g", tnames[t], od == 1 ? "float16" : "bfloat16", q,
                      (double)h.data[q], (double)want);
          break;
        }
      }
      free(f.data);
      free(h.data);
    }
  }
}

/* JPEG: at full resolution the reference to float rounding; with reduced decoding (1/2 .. 1/8)
 * within the documented tolerance (docs/loader.md): mean absolute difference at most 0.02 and
 * largest at most 0.35 on the [-1, 1] scale (0.01 and 0.18 of the pixel range). */
static void check_jpeg(const char *jpg) {
  for (int t = 1; t < 3; t++) {
    pb_loader_params p = params(transforms[t], 2);
    p.crop_h = 16; /* small outputs from ~100-pixel images: reductions of 2 and 4 happen */
    p.crop_w = 12;
    p.resize = 16;
    p.reduced_decode = 0;
    epoch_out e;
    double mx, mean;
    run_epoch(jpg, &p, 0, &e);
    compare(jpg, &p, 0, &e, &mx, &mean);
    if (mx > 2e-5) EXPECT_FAIL("%s, JPEG at full resolution: max difference %g", tnames[t], mx);
    free(e.data);
    p.reduced_decode = 1;
    run_epoch(jpg, &p, 0, &e);
    compare(jpg, &p, 0, &e, &mx, &mean);
    printf("%s, JPEG with reduced decoding: max |difference| %.4f, mean %.5f\n", tnames[t], mx, mean);
    EXPECT(mx > 0.0); /* it did decode at a reduced scale */
    if (mean > 0.02 || mx > 0.35)
      EXPECT_FAIL("%s, JPEG with reduced decoding: max %g, mean %g beyond the tolerance", tnames[t], mx, mean);
    free(e.data);
  }
}

/* Same-size images: caches give what reading does (at full resolution), and a zarr copy of the
 * same pixels read by regions gives the same random crops. */
static void check_caches_and_regions(const char *same) {
  char zarr[4200];
  snprintf(zarr, sizeof zarr, "%s/same.zarr", g_dir);
  struct pb_error err = {{0}};
  pb_dataset *ds;
  CHECK_OK(pb_dataset_open(same, NULL, &ds, &err), &err);
  pb_writer *w;
  CHECK_OK(pb_writer_new(zarr, "ome-zarr", NULL, &w, &err), &err);
  for (int64_t i = 0; i < pb_dataset_count(ds); i++) {
    pb_image_meta m;
    CHECK_OK(pb_dataset_meta(ds, i, &m, &err), &err);
    void *px = malloc(pb_image_bytes(&m));
    CHECK(px != NULL);
    CHECK_OK(pb_dataset_read(ds, i, px, pb_image_bytes(&m), NULL, &err), &err);
    snprintf(m.name, sizeof m.name, "img_%02lld", (long long)i);
    CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
    free(px);
  }
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
  pb_dataset_free(ds);
  for (int t = 0; t < 3; t++) {
    pb_loader_params p = params(transforms[t], 1);
    p.reduced_decode = 0;
    p.shuffle = 0; /* the zarr copy lists images in its own order; unshuffled both are 0..n-1 */
    epoch_out base, other;
    run_epoch(same, &p, 0, &base);
    size_t total = (size_t)base.n * (size_t)(3 * p.crop_h * p.crop_w) * sizeof(float);
    for (int cache = PB_CACHE_PRELOAD; cache <= PB_CACHE_SHARED; cache++) {
      pb_loader_params pc = p;
      pc.cache = (pb_cache_mode)cache;
      run_epoch(same, &pc, 0, &other);
      if (memcmp(base.data, other.data, total) != 0)
        EXPECT_FAIL("%s, cache %d: samples differ from cache none", tnames[t], cache);
      free(other.data);
    }
    run_epoch(zarr, &p, 0, &other);
    EXPECT_EQ(other.n, base.n);
    if (memcmp(base.data, other.data, total) != 0)
      EXPECT_FAIL("%s: samples from the zarr copy differ from the image folder's", tnames[t]);
    free(other.data);
    free(base.data);
  }
}

static void check_refusals(const char *png) {
  struct pb_error err = {{0}};
  pb_loader *l = NULL;
  pb_loader_params p = params(PB_TRANSFORM_RANDOM_CROP, 0);
  p.crop_h = 64; /* image 0 is 41 high */
  EXPECT_EQ(pb_loader_new(png, &p, &l, &err), PB_EFORMAT);
  EXPECT_CONTAINS(err.message, "smaller than the random crop 64x40");
  p = params(PB_TRANSFORM_CENTER_CROP_RESIZE, 0);
  p.resize = 30;
  EXPECT_EQ(pb_loader_new(png, &p, &l, &err), PB_EINVAL);
  EXPECT_CONTAINS(err.message, "resize 30 is smaller than the crop");
  p = params(PB_TRANSFORM_RANDOM_RESIZED_CROP, 0);
  p.cache = PB_CACHE_PRELOAD;
  EXPECT_EQ(pb_loader_new(png, &p, &l, &err), PB_EUNSUPPORTED);
  EXPECT_CONTAINS(err.message, "cache none");
  p = params(PB_TRANSFORM_NORMALIZE, 0); /* sizes differ: only a crop transform stacks them */
  EXPECT_EQ(pb_loader_new(png, &p, &l, &err), PB_EFORMAT);
  EXPECT_CONTAINS(err.message, "crop transform");
  EXPECT(l == NULL);
  /* Options from text. */
  p = params(PB_TRANSFORM_NONE, 0);
  CHECK_OK(pb_loader_params_set(&p, "transform", "random_resized_crop", &err), &err);
  EXPECT_EQ(p.transform, PB_TRANSFORM_RANDOM_RESIZED_CROP);
  CHECK_OK(pb_loader_params_set(&p, "crop", "100x120", &err), &err);
  EXPECT_EQ(p.crop_h, 100);
  EXPECT_EQ(p.crop_w, 120);
  CHECK_OK(pb_loader_params_set(&p, "crop", "224", &err), &err);
  EXPECT_EQ(p.crop_w, 224);
  CHECK_OK(pb_loader_params_set(&p, "scale", "0.25,0.5", &err), &err);
  EXPECT_NEAR(p.scale_min, 0.25, 1e-7);
  EXPECT_NEAR(p.scale_max, 0.5, 1e-7);
  CHECK_OK(pb_loader_params_set(&p, "ratio", "0.5,2", &err), &err);
  EXPECT_NEAR(p.ratio_max, 2.0, 1e-7);
  EXPECT_EQ(pb_loader_params_set(&p, "scale", "0.5,0.25", &err), PB_EINVAL);
  EXPECT_EQ(pb_loader_params_set(&p, "crop", "0x5", &err), PB_EINVAL);
  EXPECT_EQ(pb_loader_params_set(&p, "crop", "5x", &err), PB_EINVAL);
  CHECK_OK(pb_loader_params_set(&p, "reduced_decode", "0", &err), &err);
  EXPECT_EQ(p.reduced_decode, 0);
}

/* pb_eval_crop_u8, one image's evaluation crop outside a loader: the same bytes as a loader's
 * center_crop_resize with native output, image for image (the JPEG tree's larger images are
 * decoded at 1/2 or 1/4 by both), and its refusals. */
static void check_eval_crop(const char *path) {
  struct pb_error err = {{0}};
  enum { C = 20, R = 24 };
  pb_loader_params p = params(PB_TRANSFORM_CENTER_CROP_RESIZE, 0);
  p.crop_h = p.crop_w = C;
  p.resize = R;
  p.out_dtype = PB_OUT_NATIVE;
  pb_loader *l = NULL;
  CHECK_OK(pb_loader_new(path, &p, &l, &err), &err);
  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(path, "imagefolder", &ds, &err), &err);
  static uint8_t out[3 * C * C];
  int checked = 0;
  for (;;) {
    pb_batch *b = NULL;
    CHECK_OK(pb_loader_next(l, &b, &err), &err);
    if (b == NULL) break;
    for (int64_t k = 0; k < b->shape[0]; k++) {
      int ch = 0;
      memset(out, 0xAB, sizeof out);
      CHECK_OK(pb_eval_crop_u8(ds, b->indices[k], R, C, out, sizeof out, &ch, &err), &err);
      EXPECT_EQ(ch, 3);
      if (memcmp(out, (const uint8_t *)b->data + (size_t)k * sizeof out, sizeof out) != 0)
        EXPECT_FAIL("%s: image %lld: the eval crop differs from the loader's", path,
                    (long long)b->indices[k]);
      checked++;
    }
    pb_batch_free(b);
  }
  EXPECT_EQ(checked, N);
  EXPECT_EQ(pb_eval_crop_u8(ds, 0, R, C, out, sizeof out - 1, NULL, &err), PB_EINVAL);
  EXPECT_CONTAINS(err.message, "need 1200 bytes");
  EXPECT_EQ(pb_eval_crop_u8(ds, 0, C - 1, C, out, sizeof out, NULL, &err), PB_EINVAL);
  EXPECT(pb_eval_crop_u8(ds, N, R, C, out, sizeof out, NULL, &err) != PB_OK);
  pb_loader_free(l);
  pb_dataset_free(ds);
}

int main(void) {
  CHECK(mkdtemp(g_dir) != NULL);
  char png[4200], jpg[4200], same[4200];
  snprintf(png, sizeof png, "%s/png", g_dir);
  snprintf(jpg, sizeof jpg, "%s/jpg", g_dir);
  snprintf(same, sizeof same, "%s/same", g_dir);
  write_tree(png, "png=1", 0);
  write_tree(jpg, "quality=95", 0);
  write_tree(same, "png=1", 1);
  check_png(png);
  check_native(png);
  check_jpeg(jpg);
  check_caches_and_regions(same);
  check_refusals(png);
  check_eval_crop(png);
  check_eval_crop(jpg);
  pb__remove_tree(g_dir);
  return check_failures() != 0;
}
