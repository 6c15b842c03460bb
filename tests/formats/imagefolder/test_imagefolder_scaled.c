/* Scaled and partial JPEG decoding (pb__imagefolder_decode_jpeg_box, the imagefolder's read_scaled):
 * any box of the image decoded at 1/1, 1/2, 1/4 or 1/8 equals the same box cut from the whole
 * image decoded at that scale by TurboJPEG, for 4:2:0, 4:2:2, 4:4:4, grey and progressive files.
 * Also through the dataset (pb__read_scaled): the box it reports, PNG falling back to scale 1,
 * and a truncated JPEG refused naming the file; one decoder kept across images and failures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "check.h"
#include "common/fs.h"
#include "formats/format_internal.h"
#include "formats/imagefolder/if_codec.h"
#include "pipebench/gen.h"

/* The whole image at 1/scale, planar, through TurboJPEG's scaled decoding. */
static unsigned char *decode_whole(const unsigned char *jpg, size_t size, const pb__imagefolder_info *in,
                                   int scale, int *sw, int *sh) {
  *sw = (in->width + scale - 1) / scale;
  *sh = (in->height + scale - 1) / scale;
  size_t n = (size_t)*sw * (size_t)*sh, ch = (size_t)in->channels;
  unsigned char *il = malloc(n * ch), *planar = malloc(n * ch);
  CHECK(il != NULL && planar != NULL);
  tjhandle tj = tjInitDecompress();
  CHECK(tj != NULL);
  int rc = tjDecompress2(tj, jpg, (unsigned long)size, il, *sw, 0, *sh,
                         ch == 1 ? TJPF_GRAY : TJPF_RGB, TJFLAG_ACCURATEDCT);
  if (rc != 0) FAIL("tjDecompress2 at 1/%d: %s", scale, tjGetErrorStr2(tj));
  tjDestroy(tj);
  for (size_t p = 0; p < n; p++)
    for (size_t c = 0; c < ch; c++) planar[c * n + p] = il[p * ch + c];
  free(il);
  return planar;
}

/* Every scale, boxes at the corners, the middle, one pixel, whole rows and seeded others. */
static void check_file(const char *label, const unsigned char *jpg, size_t size) {
  struct pb_error err = {{0}};
  pb__imagefolder_info in;
  CHECK_OK(pb__imagefolder_header(label, jpg, size, &in, &err), &err);
  for (int scale = 1; scale <= 8; scale *= 2) {
    int sw, sh;
    unsigned char *whole = decode_whole(jpg, size, &in, scale, &sw, &sh);
    pb_rng rng;
    pb_rng_init(&rng, (uint64_t)(scale * 1000 + in.width));
    for (int t = 0; t < 24; t++) {
      int x0, y0, w, h;
      switch (t) {
      case 0: x0 = 0, y0 = 0, w = sw, h = sh; break;
      case 1: x0 = 0, y0 = 0, w = 1, h = 1; break;
      case 2: x0 = sw - 1, y0 = sh - 1, w = 1, h = 1; break;
      case 3: x0 = 0, y0 = sh / 2, w = sw, h = sh - sh / 2; break;
      case 4: x0 = sw / 3, y0 = 0, w = sw - sw / 3, h = sh; break;
      default:
        w = 1 + (int)pb_rng_below(&rng, (uint64_t)sw);
        h = 1 + (int)pb_rng_below(&rng, (uint64_t)sh);
        x0 = (int)pb_rng_below(&rng, (uint64_t)(sw - w + 1));
        y0 = (int)pb_rng_below(&rng, (uint64_t)(sh - h + 1));
      }
      size_t n = (size_t)w * (size_t)h * (size_t)in.channels;
      unsigned char *box = malloc(n);
      CHECK(box != NULL);
      CHECK_OK(pb__imagefolder_decode_jpeg_box(label, jpg, size, &in, scale, y0, x0, h, w, box, n, &err), &err);
      long bad = 0, first = -1;
      for (int c = 0; c < in.channels; c++)
        for (int y = 0; y < h; y++)
          for (int x = 0; x < w; x++) {
            unsigned char got = box[((size_t)c * (size_t)h + (size_t)y) * (size_t)w + (size_t)x];
            unsigned char want = whole[((size_t)c * (size_t)sh + (size_t)(y0 + y)) * (size_t)sw + (size_t)(x0 + x)];
            if (got != want && bad++ == 0) first = (long)((c * h + y) * w + x);
          }
      if (bad != 0)
        EXPECT_FAIL("%s at 1/%d: box %dx%d at (%d,%d): %ld pixels differ from the whole decode "
                    "(first at %ld)", label, scale, w, h, x0, y0, bad, first);
      free(box);
    }
    free(whole);
  }
}

static unsigned char *synth_jpeg(int w, int h, int channels, pb__imagefolder_subsampling sub, size_t *size) {
  const int64_t shape[PB_NDIM] = {1, channels, 1, h, w};
  pb_image_meta m;
  pb_image_meta_init(&m, "x", PB_UINT8, shape);
  uint8_t *px = malloc(pb_image_bytes(&m));
  CHECK(px != NULL);
  pb_synth_image(&m, 7, w, px);
  unsigned char *jpg;
  struct pb_error err = {{0}};
  CHECK_OK(pb__imagefolder_encode("x", px, w, h, channels, 0, 90, sub, &jpg, size, &err), &err);
  free(px);
  return jpg;
}

static void check_corpus(const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/formats/imagefolder/corpus/%s", PIPEBENCH_SOURCE_DIR, name);
  void *data;
  size_t size;
  struct pb_error err = {{0}};
  CHECK_OK(pb__read_file(path, &data, &size, &err), &err);
  check_file(name, data, size);
  pb_free(data, size);
}

/* One decoder kept across images (as a dataset handle keeps it): images of other sizes and
 * kinds, a truncated file, a file that is not a JPEG, a CMYK-free header read and then ended
 * unread, and a box outside the image each leave it decoding the next image exactly as a fresh
 * decoder does. */
static void check_reuse(void) {
  static const struct {
    int w, h, c;
    pb__imagefolder_subsampling sub;
  } kinds[] = {{203, 157, 3, PB__IF_420}, {75, 61, 1, PB__IF_444}, {131, 77, 3, PB__IF_422},
               {99, 141, 3, PB__IF_444}};
  unsigned char *jpg[4];
  size_t size[4];
  for (int k = 0; k < 4; k++) jpg[k] = synth_jpeg(kinds[k].w, kinds[k].h, kinds[k].c, kinds[k].sub, &size[k]);
  pb__imagefolder_jpeg *dec = pb__imagefolder_jpeg_new();
  CHECK(dec != NULL);
  struct pb_error err = {{0}};
  pb_rng rng;
  pb_rng_init(&rng, 99);
  for (int t = 0; t < 40; t++) {
    int k = (int)pb_rng_below(&rng, 4);
    pb__imagefolder_info in;
    switch (t % 5) {
    case 1: /* truncated: the header reads, the rows do not */
      CHECK_OK(pb__imagefolder_jpeg_header(dec, "cut.jpg", jpg[k], size[k] / 3, &in, &err), &err);
      {
        size_t n = (size_t)in.width * (size_t)in.height * (size_t)in.channels;
        unsigned char *a = malloc(n);
        CHECK(a != NULL);
        EXPECT_EQ(pb__imagefolder_jpeg_box(dec, "cut.jpg", &in, 1, 0, 0, in.height, in.width, a, n, &err),
                  PB_EFORMAT);
        EXPECT_CONTAINS(err.message, "cut.jpg");
        free(a);
      }
      continue;
    case 2: /* not a JPEG at all */
      EXPECT_EQ(pb__imagefolder_jpeg_header(dec, "png.jpg", (const unsigned char *)"\x89PNG\r\n\x1a\n", 8, &in, &err),
                PB_EFORMAT);
      continue;
    case 3: /* a header read, then the image ended without decoding */
      CHECK_OK(pb__imagefolder_jpeg_header(dec, "x.jpg", jpg[k], size[k], &in, &err), &err);
      pb__imagefolder_jpeg_end(dec);
      continue;
    case 4: /* a box outside the image */
      CHECK_OK(pb__imagefolder_jpeg_header(dec, "x.jpg", jpg[k], size[k], &in, &err), &err);
      EXPECT_EQ(pb__imagefolder_jpeg_box(dec, "x.jpg", &in, 1, 0, 0, in.height + 1, 1, NULL, 0, &err), PB_ERANGE);
      continue;
    default: break;
    }
    CHECK_OK(pb__imagefolder_jpeg_header(dec, "x.jpg", jpg[k], size[k], &in, &err), &err);
    EXPECT_EQ(in.width, kinds[k].w);
    EXPECT_EQ(in.channels, kinds[k].c);
    int scale = 1 << pb_rng_below(&rng, 4);
    int sw = (in.width + scale - 1) / scale, sh = (in.height + scale - 1) / scale;
    int w = 1 + (int)pb_rng_below(&rng, (uint64_t)sw), h = 1 + (int)pb_rng_below(&rng, (uint64_t)sh);
    int x0 = (int)pb_rng_below(&rng, (uint64_t)(sw - w + 1)), y0 = (int)pb_rng_below(&rng, (uint64_t)(sh - h + 1));
    size_t n = (size_t)w * (size_t)h * (size_t)in.channels;
    unsigned char *a = malloc(n), *b = malloc(n);
    CHECK(a != NULL && b != NULL);
    CHECK_OK(pb__imagefolder_jpeg_box(dec, "x.jpg", &in, scale, y0, x0, h, w, a, n, &err), &err);
    CHECK_OK(pb__imagefolder_decode_jpeg_box("x.jpg", jpg[k], size[k], &in, scale, y0, x0, h, w, b, n, &err), &err);
    if (memcmp(a, b, n) != 0)
      EXPECT_FAIL("reused decoder, image %d at 1/%d, box %dx%d at (%d,%d): differs from a fresh one",
                  k, scale, w, h, x0, y0);
    free(a);
    free(b);
  }
  pb__imagefolder_jpeg_free(dec);
  for (int k = 0; k < 4; k++) free(jpg[k]);
}

/* Through the dataset: the reported box, PNG at scale 1, a truncated JPEG. */
static void check_dataset(void) {
  char dir[] = "/tmp/pb_if_scaled_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[4200], file[4300];
  snprintf(path, sizeof path, "%s/tree", dir);
  struct pb_error err = {{0}};
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  pb_writer *w;
  CHECK_OK(pb_writer_new(path, "imagefolder", &wp, &w, &err), &err);
  const int64_t shape[PB_NDIM] = {1, 3, 1, 101, 173};
  pb_image_meta m;
  pb_image_meta_init(&m, "a/x", PB_UINT8, shape);
  uint8_t *px = malloc(pb_image_bytes(&m));
  CHECK(px != NULL);
  pb_synth_image(&m, 3, 0, px);
  CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
  wp.options = "png=1";
  snprintf(file, sizeof file, "%s/png", dir);
  CHECK_OK(pb_writer_new(file, "imagefolder", &wp, &w, &err), &err);
  pb_image_meta_init(&m, "a/y", PB_UINT8, shape);
  CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);

  const pb_region r = {{0, 0, 0, 13, 21}, {1, 3, 1, 50, 99}};
  size_t cap = 3 * 50 * 99;
  uint8_t *a = malloc(cap), *b = malloc(cap);
  CHECK(a != NULL && b != NULL);
  pb_dataset *ds;
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  int scale = 4;
  pb_region box;
  pb_stage_times st;
  CHECK_OK(pb__read_scaled(ds, 0, &r, &scale, a, cap, &box, &st, &err), &err);
  EXPECT_EQ(scale, 4);
  EXPECT_EQ(box.start[PB_Y], 3); /* floor(13 / 4) */
  EXPECT_EQ(box.start[PB_X], 5);
  EXPECT_EQ(box.count[PB_Y], 16 - 3); /* ceil(63 / 4) */
  EXPECT_EQ(box.count[PB_X], 30 - 5); /* ceil(120 / 4) */
  EXPECT(st.bytes_read > 0);
  scale = 1; /* scale 1 is the region read */
  CHECK_OK(pb__read_scaled(ds, 0, &r, &scale, a, cap, &box, NULL, &err), &err);
  CHECK_OK(pb_dataset_read_region(ds, 0, &r, b, cap, NULL, &err), &err);
  EXPECT(memcmp(a, b, cap) == 0);
  scale = 3;
  EXPECT_EQ(pb__read_scaled(ds, 0, &r, &scale, a, cap, &box, NULL, &err), PB_EINVAL);
  pb_dataset_free(ds);

  CHECK_OK(pb_dataset_open(file, NULL, &ds, &err), &err);
  scale = 2;
  CHECK_OK(pb__read_scaled(ds, 0, &r, &scale, a, cap, &box, NULL, &err), &err);
  EXPECT_EQ(scale, 1); /* PNG: no reduced decoding */
  EXPECT_EQ(box.count[PB_X], 99);
  CHECK_OK(pb_dataset_read_region(ds, 0, &r, b, cap, NULL, &err), &err);
  EXPECT(memcmp(a, b, cap) == 0);
  pb_dataset_free(ds);

  /* Cut the JPEG short: refused, naming the file, at every scale. */
  snprintf(file, sizeof file, "%s/a/x.jpg", path);
  void *data;
  size_t size;
  CHECK_OK(pb__read_file(file, &data, &size, &err), &err);
  CHECK_OK(pb__write_file(file, data, size / 2, &err), &err);
  pb_free(data, size);
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  for (scale = 2; scale <= 8; scale *= 2) {
    int s = scale;
    err.message[0] = '\0';
    EXPECT_EQ(pb__read_scaled(ds, 0, &r, &s, a, cap, &box, NULL, &err), PB_EFORMAT);
    EXPECT_CONTAINS(err.message, "x.jpg");
  }
  pb_dataset_free(ds);
  free(a);
  free(b);
  free(px);
  pb__remove_tree(dir);
}

int main(void) {
  static const struct {
    int w, h, c;
    pb__imagefolder_subsampling sub;
    const char *label;
  } cases[] = {{203, 157, 3, PB__IF_420, "synthetic 203x157 4:2:0"},
               {160, 96, 3, PB__IF_420, "synthetic 160x96 4:2:0"},
               {131, 77, 3, PB__IF_422, "synthetic 131x77 4:2:2"},
               {99, 141, 3, PB__IF_444, "synthetic 99x141 4:4:4"},
               {75, 61, 1, PB__IF_444, "synthetic 75x61 grey"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t size;
    unsigned char *jpg = synth_jpeg(cases[i].w, cases[i].h, cases[i].c, cases[i].sub, &size);
    check_file(cases[i].label, jpg, size);
    free(jpg);
  }
  check_corpus("baseline.jpg");
  check_corpus("progressive.jpg");
  check_corpus("grey.jpg");
  check_corpus("s444.jpg");
  check_dataset();
  check_reuse();
  return check_failures() != 0;
}
