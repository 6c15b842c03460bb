/* JPEG decoding on the GPU (pb_jpeg_gpu_crops) against the CPU path, on a machine with a GPU
 * and libnvjpeg (label gpu). JPEGs of a photograph-like image are written with libjpeg: 4:2:0,
 * 4:4:4, 4:2:2, grey, 4:2:0 with restart markers, and a portrait 4:2:0 of a size that is no
 * multiple of 16 (Pillow 9, the machines' PIL, cannot write restart markers). Each is decoded
 * by nvJPEG and by libjpeg-turbo (pb_dataset_read of the image folder), and cropped by the GPU
 * and by pipebench's loader (center_crop_resize 256 -> 224); the per-channel max and mean
 * absolute differences are printed and held to the bounds docs/gpu.md states. A CPU-decoded
 * item goes through the GPU's crop alone and must match the loader's crop within 1; in a batch
 * of 40 (split over the decoder's parts) every JPEG crops as alone and finished crops (a CPU's
 * crop, decoded 2) pass through unchanged. A corrupt
 * and a truncated JPEG fail naming the file, and the next batch decodes as before. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

#include "check.h"
#include "pipebench/engine.h"
#include "pipebench/format.h"
#include "pipebench/loader.h"

/* The bounds (docs/gpu.md), in 8-bit levels, per channel: 4:4:4 and grey decode as
 * libjpeg-turbo does; subsampled chroma is upsampled otherwise (libjpeg-turbo's "fancy"
 * triangle filter against nvJPEG's), which moves the pixels near colour edges. */
#define FULL_MAX_444 2
#define FULL_MEAN_444 0.1
#define CROP_MAX_444 2
#define CROP_MEAN_444 0.1
#define FULL_MAX_SUB 80
#define FULL_MEAN_SUB 12.0
#define CROP_MAX_SUB 60
#define CROP_MEAN_SUB 8.0

#define CROP 224
#define NIMG 6

static const struct {
  const char *name;
  int w, h, comps, hs, vs, restart;
} kinds[NIMG] = {
    {"a_s420.jpg", 500, 375, 3, 2, 2, 0}, {"b_s444.jpg", 500, 375, 3, 1, 1, 0},
    {"c_s422.jpg", 500, 375, 3, 2, 1, 0}, {"d_grey.jpg", 500, 375, 1, 1, 1, 0},
    {"e_rst420.jpg", 500, 375, 3, 2, 2, 3}, {"f_tall420.jpg", 251, 333, 3, 2, 2, 0},
};

/* A photograph-like picture: smooth shading, texture and a few hard edges. */
static unsigned char pixel(int x, int y, int c, int seed) {
  double v = 120 + 70 * sin(x / (9.0 + c + seed)) * cos(y / (7.0 + seed)) +
             30 * sin((x + 2 * y) / 2.3 + c) + ((x / 40 + y / 30 + c) % 3 == 0 ? 40 : -20);
  unsigned h = (unsigned)x * 73856093u ^ (unsigned)y * 19349663u ^ (unsigned)(c + seed) * 83492791u;
  v += (double)(h % 17) - 8.0;
  return (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static void write_jpeg(const char *path, int k) {
  struct jpeg_compress_struct ci;
  struct jpeg_error_mgr jerr;
  ci.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&ci);
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  jpeg_stdio_dest(&ci, f);
  ci.image_width = (JDIMENSION)kinds[k].w;
  ci.image_height = (JDIMENSION)kinds[k].h;
  ci.input_components = kinds[k].comps;
  ci.in_color_space = kinds[k].comps == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&ci);
  jpeg_set_quality(&ci, 90, TRUE);
  if (kinds[k].comps == 3) {
    ci.comp_info[0].h_samp_factor = kinds[k].hs;
    ci.comp_info[0].v_samp_factor = kinds[k].vs;
  }
  ci.restart_interval = (unsigned)kinds[k].restart;
  jpeg_start_compress(&ci, TRUE);
  int rowlen = kinds[k].w * kinds[k].comps;
  JSAMPLE *row = malloc((size_t)rowlen);
  for (int y = 0; y < kinds[k].h; y++) {
    for (int x = 0; x < kinds[k].w; x++)
      for (int c = 0; c < kinds[k].comps; c++) row[x * kinds[k].comps + c] = pixel(x, y, c, k);
    JSAMPROW rp = row;
    jpeg_write_scanlines(&ci, &rp, 1);
  }
  jpeg_finish_compress(&ci);
  jpeg_destroy_compress(&ci);
  fclose(f);
  free(row);
}

static void read_all(const char *path, unsigned char **data, size_t *size) {
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *data = malloc((size_t)n);
  CHECK(fread(*data, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  *size = (size_t)n;
}

static void write_all(const char *path, const unsigned char *data, size_t size) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  CHECK(fwrite(data, 1, size, f) == size);
  fclose(f);
}

/* Max and mean |a - b| over n bytes (strides in bytes between compared samples). */
static void diff(const unsigned char *a, const unsigned char *b, size_t n, int *mx, double *mean) {
  long sum = 0;
  *mx = 0;
  for (size_t i = 0; i < n; i++) {
    int d = abs((int)a[i] - (int)b[i]);
    sum += d;
    if (d > *mx) *mx = d;
  }
  *mean = (double)sum / (double)n;
}

/* `test_jpeg_gpu TREE N`: the differences over the first N images of an RGB image folder (e.g.
 * `pipebench gen --preset imagenet`), per channel, printed (docs/gpu.md); no bounds held. */
static int measure_tree(const char *tree, int n) {
  struct pb_error err;
  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(tree, "imagefolder", &ds, &err), &err);
  if (n > pb_dataset_count(ds)) n = (int)pb_dataset_count(ds);
  pb_loader_params lp = PB_LOADER_PARAMS_DEFAULTS;
  lp.format = "imagefolder";
  lp.batch_size = 1;
  lp.transform = PB_TRANSFORM_CENTER_CROP_RESIZE;
  lp.out_dtype = PB_OUT_NATIVE;
  pb_loader *ld = NULL;
  CHECK_OK(pb_loader_new(tree, &lp, &ld, &err), &err);
  int fmax[3] = {0}, cmax[3] = {0};
  double fsum[3] = {0}, csum[3] = {0}, fpx = 0;
  size_t cp = (size_t)CROP * CROP;
  unsigned char *gcrop = malloc(3 * cp), *full = NULL, *cpu = NULL;
  for (int i = 0; i < n; i++) {
    pb_image_meta m;
    CHECK_OK(pb_dataset_meta(ds, i, &m, &err), &err);
    CHECK(m.shape[PB_C] == 3);
    size_t plane = (size_t)(m.shape[PB_Y] * m.shape[PB_X]);
    full = realloc(full, 3 * plane), cpu = realloc(cpu, 3 * plane);
    CHECK_OK(pb_dataset_read(ds, i, cpu, 3 * plane, NULL, &err), &err);
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", pb_dataset_path(ds), m.name);
    unsigned char *bytes;
    size_t size;
    read_all(path, &bytes, &size);
    pb_jpeg_item it = {bytes, size, path, 0, 0, 0, 0};
    CHECK_OK(pb_jpeg_gpu_crops(&it, 1, 256, CROP, &full, gcrop, &err), &err);
    free(bytes);
    pb_batch *b = NULL;
    CHECK_OK(pb_loader_next(ld, &b, &err), &err);
    CHECK(b != NULL && b->indices[0] == i);
    for (int c = 0; c < 3; c++) {
      int mx;
      double mean;
      diff(full + (size_t)c * plane, cpu + (size_t)c * plane, plane, &mx, &mean);
      fmax[c] = mx > fmax[c] ? mx : fmax[c];
      fsum[c] += mean * (double)plane;
      diff(gcrop + (size_t)c * cp, (const unsigned char *)b->data + (size_t)c * cp, cp, &mx, &mean);
      cmax[c] = mx > cmax[c] ? mx : cmax[c];
      csum[c] += mean;
    }
    fpx += (double)plane;
    pb_batch_free(b);
  }
  for (int c = 0; c < 3; c++)
    printf("%s, %d images, channel %d: decode max %d mean %.3f | crop max %d mean %.3f\n", tree, n,
           c, fmax[c], fsum[c] / fpx, cmax[c], csum[c] / n);
  free(gcrop), free(full), free(cpu);
  pb_loader_free(ld);
  pb_dataset_free(ds);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3) return measure_tree(argv[1], atoi(argv[2]));
  setenv("PIPEBENCH_JPEG_DECODERS", "2", 0); /* the batch of 40 below goes in two parts */
  char why[512] = "";
  if (pb_jpeg_gpu_status(why, sizeof why) != 0) {
    fprintf(stderr, "JPEG decoding on the GPU unavailable: %s\n", why);
    return 1;
  }
  char root[] = "/tmp/pb_jpeg_gpu_XXXXXX", dir[300], path[400];
  CHECK(mkdtemp(root) != NULL);
  struct pb_error err;

  /* the CPU: libjpeg-turbo's decode, and the loader's crops (one tree per image: a loader's
   * batches need one channel count) */
  pb_jpeg_item items[NIMG];
  unsigned char *bytes[NIMG], *cpu[NIMG], *gpu_full[NIMG];
  char names[NIMG][400];
  int ch[NIMG];
  unsigned char *loader_crops = calloc(NIMG, 3 * CROP * CROP);
  for (int i = 0; i < NIMG; i++) {
    snprintf(path, sizeof path, "%s/t%d", root, i);
    snprintf(dir, sizeof dir, "%s/a", path);
    CHECK(mkdir(path, 0755) == 0 && mkdir(dir, 0755) == 0);
    snprintf(names[i], sizeof names[i], "%s/%s", dir, kinds[i].name);
    write_jpeg(names[i], i);
    pb_dataset *ds = NULL;
    CHECK_OK(pb_dataset_open(path, "imagefolder", &ds, &err), &err);
    pb_image_meta m;
    CHECK_OK(pb_dataset_meta(ds, 0, &m, &err), &err);
    ch[i] = (int)m.shape[PB_C];
    cpu[i] = malloc(pb_image_bytes(&m));
    CHECK_OK(pb_dataset_read(ds, 0, cpu[i], pb_image_bytes(&m), NULL, &err), &err);
    pb_dataset_free(ds);
    gpu_full[i] = malloc((size_t)(3 * m.shape[PB_Y] * m.shape[PB_X]));
    size_t n = 0;
    read_all(names[i], &bytes[i], &n);
    items[i] = (pb_jpeg_item){bytes[i], n, names[i], 0, 0, 0, 0};
    pb_loader_params lp = PB_LOADER_PARAMS_DEFAULTS;
    lp.format = "imagefolder";
    lp.batch_size = 1;
    lp.transform = PB_TRANSFORM_CENTER_CROP_RESIZE;
    lp.out_dtype = PB_OUT_NATIVE;
    pb_loader *ld = NULL;
    pb_batch *b = NULL;
    CHECK_OK(pb_loader_new(path, &lp, &ld, &err), &err);
    CHECK_OK(pb_loader_next(ld, &b, &err), &err);
    CHECK(b != NULL);
    memcpy(loader_crops + (size_t)i * 3 * CROP * CROP, b->data, b->nbytes);
    pb_batch_free(b);
    pb_loader_free(ld);
  }

  /* the GPU, and the differences per image and channel */
  unsigned char *crops = calloc(NIMG, 3 * CROP * CROP), *again = calloc(NIMG, 3 * CROP * CROP);
  CHECK_OK(pb_jpeg_gpu_crops(items, NIMG, 256, CROP, gpu_full, crops, &err), &err);
  for (int i = 0; i < NIMG; i++) {
    size_t plane = (size_t)kinds[i].w * (size_t)kinds[i].h, cp = (size_t)CROP * CROP;
    for (int c = 0; c < 3; c++) {
      int c_cpu = ch[i] == 1 ? 0 : c, fm, cm;
      double fa, ca;
      diff(gpu_full[i] + (size_t)c * plane, cpu[i] + (size_t)c_cpu * plane, plane, &fm, &fa);
      diff(crops + ((size_t)i * 3 + (size_t)c) * cp, loader_crops + (size_t)i * 3 * cp + (size_t)c_cpu * cp,
           cp, &cm, &ca);
      printf("%-14s channel %d: decode max %3d mean %.3f | crop max %3d mean %.3f\n",
             kinds[i].name, c, fm, fa, cm, ca);
      int sub = kinds[i].comps == 3 && (kinds[i].hs > 1 || kinds[i].vs > 1);
      EXPECT(fm <= (sub ? FULL_MAX_SUB : FULL_MAX_444) && fa <= (sub ? FULL_MEAN_SUB : FULL_MEAN_444));
      EXPECT(cm <= (sub ? CROP_MAX_SUB : CROP_MAX_444) && ca <= (sub ? CROP_MEAN_SUB : CROP_MEAN_444));
    }
  }

  /* a CPU-decoded item: the GPU's crop alone against the loader's */
  pb_jpeg_item dec = {cpu[0], (size_t)(3 * kinds[0].w * kinds[0].h), "cpu-decoded", 1,
                      kinds[0].w, kinds[0].h, 3};
  unsigned char *one = calloc(1, 3 * CROP * CROP);
  CHECK_OK(pb_jpeg_gpu_crops(&dec, 1, 256, CROP, NULL, one, &err), &err);
  int m1;
  double a1;
  diff(one, loader_crops, 3 * CROP * CROP, &m1, &a1);
  printf("crop of CPU-decoded pixels: max %d mean %.4f\n", m1, a1);
  EXPECT(m1 <= 1);

  /* a batch of 40 (split over the decoder's parts) with finished crops among the JPEGs: each
   * JPEG's crop as in the batch above, each finished crop passed through unchanged */
  enum { BIG = 40 };
  size_t cb = (size_t)3 * CROP * CROP;
  pb_jpeg_item big[BIG];
  for (int i = 0; i < BIG; i++)
    big[i] = i % 5 == 4 ? (pb_jpeg_item){loader_crops + (size_t)(i % NIMG) * cb, cb, "finished crop",
                                         2, CROP, CROP, 3}
                        : items[i % NIMG];
  unsigned char *crops_big = calloc(BIG, cb);
  CHECK_OK(pb_jpeg_gpu_crops(big, BIG, 256, CROP, NULL, crops_big, &err), &err);
  for (int i = 0; i < BIG; i++) {
    const unsigned char *want = (i % 5 == 4 ? loader_crops : crops) + (size_t)(i % NIMG) * cb;
    if (memcmp(crops_big + (size_t)i * cb, want, cb) != 0)
      EXPECT_FAIL("batch of %d, item %d (%s): its crop differs", BIG, i, big[i].name);
  }
  pb_jpeg_item wrong = big[4];
  wrong.width = CROP - 1;
  EXPECT_EQ(pb_jpeg_gpu_crops(&wrong, 1, 256, CROP, NULL, crops_big, &err), PB_EINVAL);
  EXPECT(strstr(err.message, "finished crop") != NULL);
  free(crops_big);

  /* corrupt and truncated files fail naming themselves; the next batch decodes as before */
  unsigned char *bad = malloc(items[0].size);
  memcpy(bad, bytes[0], items[0].size);
  for (size_t k = 2; k < 60; k++) bad[k] = 0xAB; /* the segments after SOI */
  char corrupt[400], trunc[400];
  snprintf(corrupt, sizeof corrupt, "%s/corrupt.jpg", root);
  snprintf(trunc, sizeof trunc, "%s/truncated.jpg", root);
  write_all(corrupt, bad, items[0].size);
  write_all(trunc, bytes[0], items[0].size * 6 / 10);
  pb_jpeg_item bad_items[2][NIMG];
  for (int t = 0; t < 2; t++) {
    memcpy(bad_items[t], items, sizeof items);
    bad_items[t][2] = (pb_jpeg_item){t == 0 ? bad : bytes[0], t == 0 ? items[0].size : items[0].size * 6 / 10,
                                     t == 0 ? corrupt : trunc, 0, 0, 0, 0};
    int rc = pb_jpeg_gpu_crops(bad_items[t], NIMG, 256, CROP, NULL, again, &err);
    printf("%s: rc %d: %s\n", t == 0 ? "corrupt" : "truncated", rc, err.message);
    EXPECT_EQ(rc, PB_EFORMAT);
    EXPECT(strstr(err.message, t == 0 ? "corrupt.jpg" : "truncated.jpg") != NULL);
    /* refused by the header walk, before nvJPEG sees the batch */
    EXPECT(strstr(err.message, t == 0 ? "(corrupt header)" : "truncated JPEG") != NULL);
    memset(again, 0, (size_t)NIMG * 3 * CROP * CROP);
    CHECK_OK(pb_jpeg_gpu_crops(items, NIMG, 256, CROP, NULL, again, &err), &err);
    EXPECT(memcmp(again, crops, (size_t)NIMG * 3 * CROP * CROP) == 0);
  }

  for (int i = 0; i < NIMG; i++) free(bytes[i]), free(cpu[i]), free(gpu_full[i]);
  free(loader_crops), free(crops), free(again), free(one), free(bad);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
  return check_failures() ? 1 : 0;
}
