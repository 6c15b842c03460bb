/* Loader pieces that need no threads: half-precision rounding, normalisation against a
 * double-precision reference, augmentation sanity, 3D layout, shape checks, DLPack export,
 * option parsing. */
#include <math.h>

#include "formats/format_internal.h"
#include "loader/loader_internal.h"
#include "loader_test.h"

static char dir[512];

/* Checks that h is a correctly rounded binary16 (or bfloat16) of x: no neighbour is nearer,
 * and a tie picks the even one. */
static void check_rounding(float x, uint16_t h, float (*widen)(uint16_t), const char *what) {
  if (isnan(x)) {
    CHECK(isnan(widen(h)));
    return;
  }
  double v = widen(h), d = fabs(v - (double)x);
  for (int step = -1; step <= 1; step += 2) {
    uint16_t nb = (uint16_t)(h + step);
    if ((nb & 0x7fffu) == 0 && (h & 0x7fffu) == 0) continue;
    double w = widen(nb);
    if (isnan(w) || (signbit(w) != signbit(v) && v != 0.0)) continue;
    if (isinf(v) && !isinf(x)) {
      /* overflow to infinity: only beyond the largest finite value plus half an ulp */
      continue;
    }
    double dn = fabs(w - (double)x);
    if (dn < d || (dn == d && (h & 1u))) {
      fprintf(stderr, "%s: %.9g -> 0x%04x (%.9g), neighbour 0x%04x (%.9g) is nearer or even\n",
              what, (double)x, h, v, nb, w);
      exit(1);
    }
  }
}

static void test_half_precision(void) {
  /* Exhaustive round trip of every half and bfloat16 value. */
  for (uint32_t h = 0; h < 65536; h++) {
    float f = pb__f16_to_f32((uint16_t)h);
    if (!isnan(f)) CHECK_EQ(pb__f32_to_f16(f), h);
    float g = pb__bf16_to_f32((uint16_t)h);
    if (!isnan(g)) CHECK_EQ(pb__f32_to_bf16(g), h);
  }
  CHECK_EQ(pb__f32_to_f16(65504.0f), 0x7bff);
  CHECK_EQ(pb__f32_to_f16(65520.0f), 0x7c00); /* the midpoint to infinity rounds up (even) */
  CHECK_EQ(pb__f32_to_f16(65519.0f), 0x7bff);
  CHECK_EQ(pb__f32_to_f16(1.0f + 1.0f / 2048.0f), 0x3c00); /* tie to even */
  CHECK_EQ(pb__f32_to_f16(-0.0f), 0x8000);
  CHECK_EQ(pb__f32_to_f16(5.9604645e-8f), 0x0001);          /* smallest subnormal */
  CHECK_EQ(pb__f32_to_f16(INFINITY), 0x7c00);
  CHECK(isnan(pb__f16_to_f32(pb__f32_to_f16(NAN))));
  CHECK_EQ(pb__f32_to_bf16(1.0f + 1.0f / 256.0f), 0x3f80); /* tie to even */
  CHECK(isnan(pb__bf16_to_f32(pb__f32_to_bf16(NAN))));
  /* Random floats over a wide range, with a nearest-neighbour check. */
  pb_rng rng;
  pb_rng_init(&rng, 7);
  for (int k = 0; k < 200000; k++) {
    uint32_t bits = (uint32_t)pb_rng_next(&rng);
    float x;
    memcpy(&x, &bits, sizeof x);
    if (fabsf(x) < 70000.0f || isnan(x)) check_rounding(x, pb__f32_to_f16(x), pb__f16_to_f32, "f16");
    if (!isinf(x)) check_rounding(x, pb__f32_to_bf16(x), pb__bf16_to_f32, "bf16");
    float y = (float)((pb_rng_uniform(&rng) - 0.5) * 4.0);
    check_rounding(y, pb__f32_to_f16(y), pb__f16_to_f32, "f16");
    check_rounding(y, pb__f32_to_bf16(y), pb__bf16_to_f32, "bf16");
  }
}

static pb_batch *first_batch(const char *path, pb_loader_params *p, pb_loader **out) {
  struct pb_error err = {{0}};
  CHECK_OK(pb_loader_new(path, p, out, &err), &err);
  pb_batch *b = NULL;
  CHECK_OK(pb_loader_next(*out, &b, &err), &err);
  CHECK(b != NULL);
  return b;
}

static double batch_value(const pb_batch *b, size_t i) {
  switch (b->dtype) {
    case PB_OUT_FLOAT32: return ((const float *)b->data)[i];
    case PB_OUT_FLOAT16: return pb__f16_to_f32(((const uint16_t *)b->data)[i]);
    case PB_OUT_BFLOAT16: return pb__bf16_to_f32(((const uint16_t *)b->data)[i]);
    case PB_OUT_NATIVE: break; /* not used here: test_loader_native covers it */
  }
  return 0;
}

static void test_normalize(void) {
  char path[600];
  const pb_dtype dts[] = {PB_UINT8, PB_UINT16};
  for (int d = 0; d < 2; d++) {
    snprintf(path, sizeof path, "%s/norm%d.raw", dir, d);
    test_make_raw(path, 6, dts[d], 2, 1, 9, 11);
    double maxv = dts[d] == PB_UINT8 ? 255.0 : 65535.0;
    for (int o = 0; o < 3; o++) {
      for (int t = 0; t < 2; t++) {
        pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
        p.batch_size = 4;
        p.out_dtype = (pb_out_dtype)o;
        p.transform = t ? PB_TRANSFORM_NORMALIZE : PB_TRANSFORM_NONE;
        p.mean = 0.25f;
        p.std = 0.2f;
        pb_loader *l;
        pb_batch *b = first_batch(path, &p, &l);
        CHECK_EQ(b->ndim, 4);
        CHECK_EQ(b->shape[0], 4);
        CHECK_EQ(b->shape[1], 2);
        CHECK_EQ(b->shape[2], 9);
        CHECK_EQ(b->shape[3], 11);
        CHECK_EQ(b->nbytes, 4 * 2 * 9 * 11 * (o == 0 ? 4 : 2));
        double tol = o == 0 ? 1e-5 : o == 1 ? 1e-3 : 8e-3; /* relative, per output type */
        for (int64_t s = 0; s < 4; s++)
          for (int64_t px = 0; px < 2 * 9 * 11; px++) {
            uint16_t raw = test_pixel(b->indices[s], px);
            if (dts[d] == PB_UINT8) raw &= 0xff;
            double want = t ? ((double)raw / maxv - 0.25) / 0.2 : (double)raw;
            double got = batch_value(b, (size_t)(s * 2 * 9 * 11 + px));
            if (fabs(got - want) > tol * (1.0 + fabs(want))) {
              fprintf(stderr, "dtype %d out %d t %d: sample %lld px %lld: %g != %g\n", d, o, t,
                      (long long)s, (long long)px, got, want);
              exit(1);
            }
          }
        pb_batch_free(b);
        pb_loader_free(l);
      }
    }
  }
}

static void test_augment_and_3d(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/vol.raw", dir);
  /* Constant images: after augmentation the centre keeps the value, and everything is a
   * blend of the value and the fill. */
  struct pb_error err = {{0}};
  pb_writer *wr = NULL;
  CHECK_OK(pb_writer_new(path, "raw", NULL, &wr, &err), &err);
  int64_t shape[PB_NDIM] = {1, 2, 3, 21, 21};
  unsigned char px[2 * 3 * 21 * 21];
  memset(px, 255, sizeof px);
  for (int i = 0; i < 40; i++) {
    pb_image_meta m;
    pb_image_meta_init(&m, "c", PB_UINT8, shape);
    CHECK_OK(pb_writer_add(wr, &m, px, &err), &err);
  }
  CHECK_OK(pb_writer_finish(wr, &err), &err);
  pb_writer_free(wr);
  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  p.batch_size = 40;
  p.transform = PB_TRANSFORM_AUGMENT;
  pb_loader *l;
  pb_batch *b = first_batch(path, &p, &l);
  CHECK_EQ(b->ndim, 5);
  CHECK_EQ(b->shape[0], 40);
  CHECK_EQ(b->shape[1], 2);
  CHECK_EQ(b->shape[2], 3);
  CHECK_EQ(b->shape[3], 21);
  CHECK_EQ(b->shape[4], 21);
  const float *f = b->data;
  int corners_filled = 0;
  for (int s = 0; s < 40; s++)
    for (int plane = 0; plane < 6; plane++) {
      const float *q = f + (s * 6 + plane) * 441;
      CHECK(fabsf(q[10 * 21 + 10] - 1.0f) < 1e-6f);
      for (int k = 0; k < 441; k++) CHECK(q[k] >= -1.0f - 1e-6f && q[k] <= 1.0f + 1e-6f);
      if (q[0] < 0.99f) corners_filled++;
    }
  CHECK(corners_filled > 6 * 20); /* most rotations pull fill into a corner */
  pb_batch_free(b);
  pb_loader_free(l);

  /* The warp itself: angle 0 is the identity, a flip mirrors, 90 degrees turns the plane. */
  enum { H = 5, W = 4 };
  pb__warp_entry table[H * W];
  float padded[(H + 2) * (W + 2)], outp[H * W];
  for (int k = 0; k < (H + 2) * (W + 2); k++) padded[k] = -7.0f;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) padded[(y + 1) * (W + 2) + x + 1] = (float)(10 * y + x);
  pb__warp_plan(table, H, W, 0.0, 0);
  pb__warp_apply(table, H, W, padded, -7.0f, outp);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) CHECK(outp[y * W + x] == (float)(10 * y + x));
  pb__warp_plan(table, H, W, 0.0, 1);
  pb__warp_apply(table, H, W, padded, -7.0f, outp);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) CHECK(outp[y * W + x] == (float)(10 * y + (W - 1 - x)));
  pb__warp_entry table5[25];
  pb__warp_plan(table5, 5, 5, 90.0, 0); /* square plane: a quarter turn maps pixels to pixels */
  float sq[7 * 7], out5[25];
  for (int k = 0; k < 49; k++) sq[k] = -7.0f;
  for (int y = 0; y < 5; y++)
    for (int x = 0; x < 5; x++) sq[(y + 1) * 7 + x + 1] = (float)(10 * y + x);
  pb__warp_apply(table5, 5, 5, sq, -7.0f, out5);
  for (int y = 0; y < 5; y++)
    for (int x = 0; x < 5; x++) {
      /* out(x, y) = in(cx + c dx - s dy, cy + s dx + c dy) with c = 0, s = 1 */
      int sx = 2 - (y - 2), sy = 2 + (x - 2);
      CHECK(fabsf(out5[y * 5 + x] - (float)(10 * sy + sx)) < 1e-4f);
    }
}

static void test_shape_checks(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/mixed.raw", dir);
  struct pb_error err = {{0}};
  pb_writer *wr = NULL;
  CHECK_OK(pb_writer_new(path, "raw", NULL, &wr, &err), &err);
  unsigned char px[64] = {0};
  for (int i = 0; i < 3; i++) {
    int64_t shape[PB_NDIM] = {1, 1, 1, 4, i == 2 ? 5 : 4};
    pb_image_meta m;
    char name[16];
    snprintf(name, sizeof name, "odd%d", i);
    pb_image_meta_init(&m, name, PB_UINT8, shape);
    CHECK_OK(pb_writer_add(wr, &m, px, &err), &err);
  }
  CHECK_OK(pb_writer_finish(wr, &err), &err);
  pb_writer_free(wr);
  pb_loader *l = NULL;
  CHECK_EQ(pb_loader_new(path, NULL, &l, &err), PB_EFORMAT);
  CHECK(l == NULL);
  CHECK_CONTAINS(err.message, "image 2 ('odd2')");

  CHECK_OK(pb_writer_new(path, "raw", NULL, &wr, &err), &err);
  int64_t tshape[PB_NDIM] = {3, 1, 1, 4, 4};
  pb_image_meta m;
  pb_image_meta_init(&m, "movie", PB_UINT8, tshape);
  unsigned char px3[48] = {0};
  CHECK_OK(pb_writer_add(wr, &m, px3, &err), &err);
  CHECK_OK(pb_writer_finish(wr, &err), &err);
  pb_writer_free(wr);
  CHECK_EQ(pb_loader_new(path, NULL, &l, &err), PB_EUNSUPPORTED);
  CHECK_CONTAINS(err.message, "T = 3");

  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  p.rank = 2;
  p.world_size = 2;
  CHECK_EQ(pb_loader_new(path, &p, &l, &err), PB_EINVAL);
}

static void test_dlpack(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/dl.raw", dir);
  test_make_raw(path, 5, PB_UINT16, 1, 1, 6, 7);
  for (int o = 0; o < 3; o++) {
    pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
    p.batch_size = 3;
    p.out_dtype = (pb_out_dtype)o;
    pb_loader *l;
    pb_batch *b = first_batch(path, &p, &l);
    struct pb_error err;
    DLManagedTensor *a = NULL, *c = NULL;
    CHECK_OK(pb_batch_to_dlpack(b, &a, &err), &err);
    CHECK_OK(pb_batch_to_dlpack(b, &c, &err), &err);
    CHECK(a->dl_tensor.data == b->data);
    CHECK_EQ(a->dl_tensor.ndim, 4);
    CHECK_EQ(a->dl_tensor.device.device_type, kDLCPU);
    CHECK_EQ(a->dl_tensor.dtype.bits, o == 0 ? 32 : 16);
    CHECK_EQ(a->dl_tensor.dtype.code, o == 2 ? kDLBfloat : kDLFloat);
    CHECK_EQ(a->dl_tensor.dtype.lanes, 1);
    CHECK_EQ(a->dl_tensor.shape[0], 3);
    CHECK_EQ(a->dl_tensor.shape[3], 7);
    CHECK_EQ(a->dl_tensor.strides[0], 42);
    CHECK_EQ(a->dl_tensor.strides[3], 1);
    const void *data = b->data;
    pb_batch_free(b); /* the tensors keep the memory alive */
    CHECK(a->dl_tensor.data == data);
    if (o == 0) CHECK(((const float *)a->dl_tensor.data)[41] == (float)test_pixel(0, 41));
    a->deleter(a);
    CHECK(((const unsigned char *)c->dl_tensor.data)[0] == ((const unsigned char *)data)[0]);
    c->deleter(c);
    pb_loader_free(l);
  }
}

static void test_params_and_epochs(void) {
  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  struct pb_error err;
  CHECK_OK(pb_loader_params_set(&p, "batch_size", "7", &err), &err);
  CHECK_OK(pb_loader_params_set(&p, "transform", "augment", &err), &err);
  CHECK_OK(pb_loader_params_set(&p, "dtype", "bfloat16", &err), &err);
  CHECK_OK(pb_loader_params_set(&p, "cache", "shared", &err), &err);
  CHECK_OK(pb_loader_params_set(&p, "seed", "123", &err), &err);
  CHECK_OK(pb_loader_params_set(&p, "std", "0.25", &err), &err);
  CHECK_EQ(p.batch_size, 7);
  CHECK_EQ(p.transform, PB_TRANSFORM_AUGMENT);
  CHECK_EQ(p.out_dtype, PB_OUT_BFLOAT16);
  CHECK_EQ(p.cache, PB_CACHE_SHARED);
  CHECK_EQ(p.seed, 123);
  CHECK(p.std == 0.25f);
  CHECK_EQ(pb_loader_params_set(&p, "batch_size", "0", &err), PB_EINVAL);
  CHECK_EQ(pb_loader_params_set(&p, "std", "0", &err), PB_EINVAL);
  CHECK_EQ(pb_loader_params_set(&p, "colour", "red", &err), PB_EINVAL);
  CHECK_CONTAINS(err.message, "colour");

  /* Epochs: end of epoch is a NULL batch, reset reshuffles, the same epoch repeats. */
  char path[600];
  snprintf(path, sizeof path, "%s/ep.raw", dir);
  test_make_raw(path, 10, PB_UINT16, 1, 1, 2, 2);
  pb_loader_params q = PB_LOADER_PARAMS_DEFAULTS;
  q.batch_size = 10;
  q.shuffle = 1;
  pb_loader *l;
  CHECK_OK(pb_loader_new(path, &q, &l, &err), &err);
  int64_t order[3][10];
  const int64_t epochs[3] = {0, 1, 0};
  for (int e = 0; e < 3; e++) {
    CHECK_OK(pb_loader_reset(l, epochs[e], &err), &err);
    pb_batch *b;
    CHECK_OK(pb_loader_next(l, &b, &err), &err);
    memcpy(order[e], b->indices, sizeof order[e]);
    CHECK_EQ(b->epoch, epochs[e]);
    pb_batch_free(b);
    CHECK_OK(pb_loader_next(l, &b, &err), &err);
    CHECK(b == NULL);
    CHECK_OK(pb_loader_next(l, &b, &err), &err);
    CHECK(b == NULL);
  }
  CHECK(memcmp(order[0], order[1], sizeof order[0]) != 0);
  CHECK(memcmp(order[0], order[2], sizeof order[0]) == 0);
  pb_loader_free(l);
  pb_loader_free(NULL);
  pb_batch_free(NULL);
}

int main(void) {
  test_tmpdir(dir, sizeof dir);
  test_half_precision();
  test_normalize();
  test_augment_and_3d();
  test_shape_checks();
  test_dlpack();
  test_params_and_epochs();
  pb__remove_tree(dir);
  printf("loader conversions: ok\n");
  return 0;
}
