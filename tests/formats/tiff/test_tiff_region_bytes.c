/* tiff region reads touch only the tiles or strips a crop needs: a 256x256 crop of a 4096x4096
 * two-channel image reads, per channel page, the stored bytes of the tiles (512x512) or strips it
 * meets, counted by pb_stage_times.bytes_read and checked against libtiff's own byte counts for
 * those blocks. Uncompressed strips read through the cached layout fetch only the crop's bytes of
 * each row. Pixels are checked too. */
#include <tiffio.h>

#include "tiff_test.h"

#define H 4096
#define W 4096
#define CH 2
#define CROP 256

typedef struct cfg {
  const char *compression, *options;
  int direct; /* PB_TIFF_DIRECT on (the cached layout may serve uncompressed strips) */
} cfg;

static uint16_t pixel(int64_t c, int64_t y, int64_t x) {
  uint64_t v = (uint64_t)(c * 7919 + y * 131 + x * 17) ^ (uint64_t)(y * x);
  return (uint16_t)(v * 2654435761u >> 13);
}

/* Stored bytes of the blocks of page ch that meet rows [y0, y1) and columns [x0, x1). */
static int64_t block_bytes(TIFF *tif, int64_t ch, int64_t y0, int64_t y1, int64_t x0, int64_t x1) {
  if (!TIFFSetDirectory(tif, (tdir_t)ch)) FAIL("no page %lld", (long long)ch);
  int64_t sum = 0;
  if (TIFFIsTiled(tif)) {
    uint32_t tw = 0, th = 0;
    TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw);
    TIFFGetField(tif, TIFFTAG_TILELENGTH, &th);
    for (int64_t ty = y0 / th; ty <= (y1 - 1) / th; ty++)
      for (int64_t tx = x0 / tw; tx <= (x1 - 1) / tw; tx++)
        sum += (int64_t)TIFFGetStrileByteCount(
            tif, TIFFComputeTile(tif, (uint32_t)(tx * tw), (uint32_t)(ty * th), 0, 0));
    return sum;
  }
  uint32_t rps = H;
  TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rps);
  for (int64_t s = y0 / rps; s <= (y1 - 1) / rps; s++)
    sum += (int64_t)TIFFGetStrileByteCount(tif, (uint32_t)s);
  return sum;
}

static void check_config(const cfg *c, const uint16_t *pix) {
  char dir[256], path[512], file[700];
  tt_tempdir(dir, sizeof dir, "rb");
  snprintf(path, sizeof path, "%s/ds", dir);
  struct pb_error err = {""};
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.compression = c->compression;
  wp.options = c->options;
  pb_writer *w;
  CHECK_OK(pb_writer_new(path, "tiff", &wp, &w, &err), &err);
  const int64_t shape[PB_NDIM] = {1, CH, 1, H, W};
  pb_image_meta m;
  pb_image_meta_init(&m, "a.ome.tif", PB_UINT16, shape);
  CHECK_OK(pb_writer_add(w, &m, pix, &err), &err);
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
  snprintf(file, sizeof file, "%s/a.ome.tif", path);
  TIFF *tif = TIFFOpen(file, "r");
  if (tif == NULL) FAIL("libtiff cannot open %s", file);
  uint16_t comp = COMPRESSION_NONE;
  TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &comp);
  int bytewise = c->direct && comp == COMPRESSION_NONE && !TIFFIsTiled(tif);

  setenv("PB_TIFF_DIRECT", c->direct ? "1" : "0", 1);
  pb_dataset *ds;
  CHECK_OK(pb_dataset_open(path, "tiff", &ds, &err), &err);
  pb_rng rng;
  pb_rng_init(&rng, 16);
  uint16_t *got = malloc((size_t)CH * CROP * CROP * 2);
  uint16_t *want = malloc((size_t)CH * CROP * CROP * 2);
  for (int trial = 0; trial < 30; trial++) {
    pb_region r = {{0, 0, 0, 0, 0}, {1, 1, 1, CROP, CROP}};
    if (trial == 0) { /* across four tiles */
      r.start[PB_Y] = 512 - CROP / 2;
      r.start[PB_X] = 1536 - CROP / 2;
    } else if (trial == 1) { /* the last corner, both channels */
      r.start[PB_Y] = H - CROP;
      r.start[PB_X] = W - CROP;
      r.count[PB_C] = CH;
    } else {
      r.start[PB_C] = (int64_t)pb_rng_below(&rng, CH);
      r.start[PB_Y] = (int64_t)pb_rng_below(&rng, H - CROP + 1);
      r.start[PB_X] = (int64_t)pb_rng_below(&rng, W - CROP + 1);
    }
    size_t n = (size_t)r.count[PB_C] * CROP * CROP * 2;
    pb_stage_times t;
    CHECK_OK(pb_dataset_read_region(ds, 0, &r, got, n, &t, &err), &err);
    size_t k = 0;
    for (int64_t ch = r.start[PB_C]; ch < r.start[PB_C] + r.count[PB_C]; ch++)
      for (int64_t y = r.start[PB_Y]; y < r.start[PB_Y] + CROP; y++)
        for (int64_t x = r.start[PB_X]; x < r.start[PB_X] + CROP; x++) want[k++] = pixel(ch, y, x);
    if (memcmp(got, want, n) != 0)
      FAIL("%s %s: crop at c%lld y%lld x%lld differs", c->compression, c->options,
           (long long)r.start[PB_C], (long long)r.start[PB_Y], (long long)r.start[PB_X]);
    int64_t expect = 0;
    for (int64_t ch = r.start[PB_C]; ch < r.start[PB_C] + r.count[PB_C]; ch++)
      expect += bytewise ? (int64_t)CROP * CROP * 2
                         : block_bytes(tif, ch, r.start[PB_Y], r.start[PB_Y] + CROP,
                                       r.start[PB_X], r.start[PB_X] + CROP);
    if (t.bytes_read != expect)
      FAIL("%s %s (direct %d): crop at c%lld y%lld x%lld read %lld bytes; its blocks hold %lld",
           c->compression, c->options, c->direct, (long long)r.start[PB_C],
           (long long)r.start[PB_Y], (long long)r.start[PB_X], (long long)t.bytes_read,
           (long long)expect);
    CHECK_EQ(t.bytes_decoded, (int64_t)n);
  }
  free(got);
  free(want);
  size_t all = (size_t)CH * H * W * 2;
  uint16_t *img = malloc(all);
  pb_stage_times t;
  CHECK_OK(pb_dataset_read(ds, 0, img, all, &t, &err), &err);
  if (memcmp(img, pix, all) != 0) FAIL("%s %s: whole image differs", c->compression, c->options);
  int64_t expect = 0;
  for (int64_t ch = 0; ch < CH; ch++) expect += block_bytes(tif, ch, 0, H, 0, W);
  CHECK_EQ(t.bytes_read, expect);
  free(img);
  TIFFClose(tif);
  pb_dataset_free(ds);
  tt_rmtree(dir);
}

int main(void) {
  uint16_t *pix = malloc((size_t)CH * H * W * 2);
  size_t k = 0;
  for (int64_t c = 0; c < CH; c++)
    for (int64_t y = 0; y < H; y++)
      for (int64_t x = 0; x < W; x++) pix[k++] = pixel(c, y, x);
  const cfg cfgs[] = {
      {"none", "tile=512x512", 1},
      {"zstd", "tile=512x512", 1},
      {"deflate", "tile=512x512", 1},
      {"zstd", NULL, 1},
      {"none", NULL, 1},
      {"none", NULL, 0},
  };
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) check_config(&cfgs[i], pix);
  free(pix);
  printf("ok: region reads touch only their tiles and strips\n");
  return 0;
}
