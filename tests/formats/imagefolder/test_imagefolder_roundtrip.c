/* imagefolder writing: PNG round trips exactly, JPEG stays close for smooth images at every
 * subsampling, other dtypes are scaled to uint8 as documented, class folders come from
 * "class/file" names or go round `classes`, and bad options are refused listing valid keys. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "pipebench/format.h"

enum { H = 24, W = 40 };

static void smooth(uint8_t *px, int c, int seed) {
  for (int k = 0; k < c; k++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++)
        px[(k * H + y) * W + x] = (uint8_t)(128 + 90 * sin((x + seed) / 6.0 + k) * cos(y / 5.0));
}

/* Writes n images of c channels (uint8) with options; returns the path. */
static void write_set(const char *path, const char *options, int n, int c, int named) {
  struct pb_error err = {{0}};
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.options = options;
  pb_writer *w;
  CHECK_OK(pb_writer_new(path, "imagefolder", &wp, &w, &err), &err);
  uint8_t px[3 * H * W];
  const int64_t shape[PB_NDIM] = {1, c, 1, H, W};
  for (int i = 0; i < n; i++) {
    pb_image_meta m;
    char name[64];
    if (named) snprintf(name, sizeof name, "%s/img%d.ome.tif", i % 2 ? "zebra" : "ant", i);
    else snprintf(name, sizeof name, "img_%05d", i);
    pb_image_meta_init(&m, name, PB_UINT8, shape);
    smooth(px, c, i);
    CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
  }
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
}

/* Largest absolute difference between image i and what smooth() made for it. */
static int max_diff(pb_dataset *ds, int64_t i, int seed) {
  struct pb_error err = {{0}};
  pb_image_meta m;
  CHECK_OK(pb_dataset_meta(ds, i, &m, &err), &err);
  int c = (int)m.shape[PB_C];
  CHECK_EQ(m.shape[PB_Y], H);
  CHECK_EQ(m.shape[PB_X], W);
  CHECK_EQ(m.dtype, PB_UINT8);
  uint8_t got[3 * H * W], want[3 * H * W];
  CHECK_OK(pb_dataset_read(ds, i, got, sizeof got, NULL, &err), &err);
  smooth(want, c, seed);
  int d = 0;
  for (int k = 0; k < c * H * W; k++) {
    int e = abs((int)got[k] - (int)want[k]);
    if (e > d) d = e;
  }
  return d;
}

int main(void) {
  char root[] = "/tmp/pb_if_rt_XXXXXX";
  CHECK(mkdtemp(root) != NULL);
  char path[512];
  struct pb_error err = {{0}};
  pb_dataset *ds;

  /* PNG: exact; 5 unnamed images over 2 classes: class_000 gets 0,2,4 and class_001 1,3. */
  snprintf(path, sizeof path, "%s/png", root);
  write_set(path, "png=1,classes=2", 5, 3, 0);
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  CHECK_STREQ(pb_dataset_format(ds), "imagefolder");
  CHECK_EQ(pb_dataset_count(ds), 5);
  static const int order[5] = {0, 2, 4, 1, 3};
  for (int i = 0; i < 5; i++) {
    pb_image_meta m;
    CHECK_OK(pb_dataset_meta(ds, i, &m, &err), &err);
    char want[64];
    snprintf(want, sizeof want, "class_%03d/img_%05d.png", order[i] % 2, order[i]);
    EXPECT_STREQ(m.name, want);
    EXPECT_EQ(pb_dataset_label(ds, i), order[i] % 2);
    EXPECT_EQ(max_diff(ds, i, order[i]), 0);
  }
  pb_dataset_free(ds);

  /* JPEG at each subsampling, RGB and grey; names with a class keep it. */
  static const char *const subs[] = {"444", "422", "420"};
  for (int s = 0; s < 3; s++) {
    for (int c = 1; c <= 3; c += 2) {
      char opts[64];
      snprintf(opts, sizeof opts, "quality=95,subsampling=%s", subs[s]);
      snprintf(path, sizeof path, "%s/jpeg_%s_%d", root, subs[s], c);
      write_set(path, opts, 4, c, 1);
      CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
      CHECK_EQ(pb_dataset_count(ds), 4);
      pb_image_meta m;
      CHECK_OK(pb_dataset_meta(ds, 0, &m, &err), &err);
      EXPECT_STREQ(m.name, "ant/img0.jpg");
      EXPECT_EQ(m.shape[PB_C], c);
      EXPECT_EQ(pb_dataset_label(ds, 0), 0);
      EXPECT_EQ(pb_dataset_label(ds, 2), 1);
      int d = max_diff(ds, 0, 0);
      /* chroma subsampling costs colour detail; 4:4:4 keeps it */
      if (d > (s == 0 ? 10 : 24)) EXPECT_FAIL("jpeg %s c=%d: max difference %d", subs[s], c, d);
      pb_dataset_free(ds);
    }
  }

  /* Other dtypes scale to uint8: uint16 over 0..65535, float32 from 0..1 (clamped). */
  snprintf(path, sizeof path, "%s/scaled", root);
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.options = "png=1";
  pb_writer *w;
  CHECK_OK(pb_writer_new(path, "imagefolder", &wp, &w, &err), &err);
  const int64_t shape[PB_NDIM] = {1, 1, 1, 1, 4};
  pb_image_meta m;
  pb_image_meta_init(&m, "a/u16", PB_UINT16, shape);
  const uint16_t u16[4] = {0, 257, 32896, 65535};
  CHECK_OK(pb_writer_add(w, &m, u16, &err), &err);
  pb_image_meta_init(&m, "a/f32", PB_FLOAT32, shape);
  const float f32[4] = {-1.0f, 0.5f, 1.0f, 7.0f};
  CHECK_OK(pb_writer_add(w, &m, f32, &err), &err);
  const int64_t bad_shape[PB_NDIM] = {1, 2, 1, 4, 4};
  pb_image_meta_init(&m, "a/two", PB_UINT8, bad_shape);
  uint8_t zeros[32] = {0};
  EXPECT_EQ(pb_writer_add(w, &m, zeros, &err), PB_EUNSUPPORTED);
  EXPECT(strstr(err.message, "a/two") != NULL);
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
  CHECK_OK(pb_dataset_open(path, "imagefolder", &ds, &err), &err);
  uint8_t got[4];
  CHECK_OK(pb_dataset_read(ds, 0, got, 4, NULL, &err), &err); /* a/f32.png sorts first */
  EXPECT_EQ(got[0], 0);
  EXPECT_EQ(got[1], 128);
  EXPECT_EQ(got[2], 255);
  EXPECT_EQ(got[3], 255);
  CHECK_OK(pb_dataset_read(ds, 1, got, 4, NULL, &err), &err);
  EXPECT_EQ(got[0], 0);
  EXPECT_EQ(got[1], 1);
  EXPECT_EQ(got[2], 128);
  EXPECT_EQ(got[3], 255);
  pb_dataset_free(ds);

  /* Options: bad values and unknown keys are PB_EINVAL naming the problem. */
  static const char *const bad[] = {"quality=0", "quality=101", "subsampling=411", "png=2",
                                    "classes=0", "tile=8x8"};
  static const char *const says[] = {"quality", "quality", "444, 422 or 420", "png", "classes",
                                     "valid: quality=1..100, subsampling=444|422|420"};
  for (int i = 0; i < 6; i++) {
    snprintf(path, sizeof path, "%s/bad%d", root, i);
    wp.options = bad[i];
    w = NULL;
    EXPECT_EQ(pb_writer_new(path, "imagefolder", &wp, &w, &err), PB_EINVAL);
    EXPECT(strstr(err.message, says[i]) != NULL);
    pb_writer_free(w);
    struct stat st;
    EXPECT(stat(path, &st) != 0);
  }
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  CHECK_EQ(system(cmd), 0);
  return check_failures() != 0;
}
