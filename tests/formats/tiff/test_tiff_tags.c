/* tiff backend on files whose strip or tile tags disagree with the image: RowsPerStrip,
 * TileWidth/TileLength, the number of StripOffsets/StripByteCounts/TileOffsets/TileByteCounts
 * entries against what the image needs, a missing StripByteCounts, and offsets plus counts
 * that leave the file. libtiff pads short arrays with zeros and ignores long ones, so without
 * a check these files read as zeros or from the wrong bytes. Each case starts from a good file
 * written with libtiff, patches one tag, and must be refused (PB_EFORMAT) with a message that
 * names the file and the tag, on both read paths (PB_TIFF_DIRECT on and off). */
#include <tiffio.h>

#include "tiff_test.h"

#define W 6
#define H 8
#define TS 16 /* tiled files: 32x32 pixels in 16x16 tiles */

/* ---- files ----------------------------------------------------------------------------- */

static uint16_t px(int y, int x) { return (uint16_t)(1000 + 37 * y + x); }

/* A W x H uint16 image in strips of two rows (4 strips), uncompressed or deflate. */
static void write_strips(const char *path, uint16_t comp) {
  TIFF *t = TIFFOpen(path, "w");
  CHECK(t != NULL);
  TIFFSetField(t, TIFFTAG_IMAGEWIDTH, (uint32_t)W);
  TIFFSetField(t, TIFFTAG_IMAGELENGTH, (uint32_t)H);
  TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 16);
  TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 1);
  TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
  TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(t, TIFFTAG_COMPRESSION, comp);
  TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, (uint32_t)2);
  uint16_t rows[2 * W];
  for (int s = 0; s < H / 2; s++) {
    for (int y = 0; y < 2; y++)
      for (int x = 0; x < W; x++) rows[y * W + x] = px(2 * s + y, x);
    CHECK(TIFFWriteEncodedStrip(t, (uint32_t)s, rows, (tmsize_t)sizeof rows) > 0);
  }
  CHECK(TIFFWriteDirectory(t));
  TIFFClose(t);
}

/* A 2*TS x 2*TS uint16 image in four TS x TS tiles. */
static void write_tiles(const char *path) {
  TIFF *t = TIFFOpen(path, "w");
  CHECK(t != NULL);
  TIFFSetField(t, TIFFTAG_IMAGEWIDTH, (uint32_t)(2 * TS));
  TIFFSetField(t, TIFFTAG_IMAGELENGTH, (uint32_t)(2 * TS));
  TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 16);
  TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 1);
  TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
  TIFFSetField(t, TIFFTAG_COMPRESSION, COMPRESSION_NONE);
  TIFFSetField(t, TIFFTAG_TILEWIDTH, (uint32_t)TS);
  TIFFSetField(t, TIFFTAG_TILELENGTH, (uint32_t)TS);
  uint16_t tile[TS * TS];
  for (int k = 0; k < 4; k++) {
    int oy = (k / 2) * TS, ox = (k % 2) * TS;
    for (int y = 0; y < TS; y++)
      for (int x = 0; x < TS; x++) tile[y * TS + x] = px(oy + y, ox + x);
    CHECK(TIFFWriteEncodedTile(t, (uint32_t)k, tile, (tmsize_t)sizeof tile) > 0);
  }
  CHECK(TIFFWriteDirectory(t));
  TIFFClose(t);
}

/* ---- patching the first directory of a classic little-endian TIFF ------------------------- */

typedef struct file_buf {
  unsigned char *b;
  size_t n;
} file_buf;

static file_buf slurp(const char *path) {
  file_buf f = {NULL, 0};
  FILE *fp = fopen(path, "rb");
  CHECK(fp != NULL);
  CHECK(fseek(fp, 0, SEEK_END) == 0);
  f.n = (size_t)ftell(fp);
  CHECK(fseek(fp, 0, SEEK_SET) == 0);
  f.b = malloc(f.n);
  CHECK(f.b != NULL && fread(f.b, 1, f.n, fp) == f.n);
  fclose(fp);
  return f;
}

static void spit(const char *path, const file_buf *f) {
  FILE *fp = fopen(path, "wb");
  CHECK(fp != NULL);
  CHECK(fwrite(f->b, 1, f->n, fp) == f->n);
  fclose(fp);
}

static uint32_t rd16(const unsigned char *p) { return (uint32_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void wr16(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}
static void wr32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* The 12-byte entry of tag in the first directory. */
static unsigned char *entry(const file_buf *f, uint16_t tag) {
  CHECK(f->b[0] == 'I' && rd16(f->b + 2) == 42);
  uint32_t ifd = rd32(f->b + 4);
  uint32_t n = rd16(f->b + ifd);
  for (uint32_t i = 0; i < n; i++) {
    unsigned char *e = f->b + ifd + 2 + 12u * i;
    if (rd16(e) == tag) return e;
  }
  FAIL("tag %u not in the file", tag);
}

/* Sets a one-value SHORT or LONG entry. */
static void set_scalar(file_buf *f, uint16_t tag, uint32_t v) {
  unsigned char *e = entry(f, tag);
  CHECK(rd32(e + 4) == 1);
  if (rd16(e + 2) == 3) wr16(e + 8, v);
  else wr32(e + 8, v);
}

static void set_count(file_buf *f, uint16_t tag, uint32_t count) { wr32(entry(f, tag) + 4, count); }

/* Where value k of an out-of-line SHORT or LONG array (StripOffsets, ...) lies; *size: 2 or 4. */
static unsigned char *value_at(file_buf *f, uint16_t tag, uint32_t k, uint32_t *size) {
  unsigned char *e = entry(f, tag);
  *size = rd16(e + 2) == 3 ? 2 : 4;
  CHECK(rd16(e + 2) == 3 || rd16(e + 2) == 4);
  CHECK(rd32(e + 4) * *size > 4 && k < rd32(e + 4));
  return f->b + rd32(e + 8) + *size * k;
}

static void set_value(file_buf *f, uint16_t tag, uint32_t k, uint32_t v) {
  uint32_t size;
  unsigned char *p = value_at(f, tag, k, &size);
  if (size == 2) {
    CHECK(v <= 0xffff);
    wr16(p, v);
  } else {
    wr32(p, v);
  }
}

static uint32_t get_value(file_buf *f, uint16_t tag, uint32_t k) {
  uint32_t size;
  unsigned char *p = value_at(f, tag, k, &size);
  return size == 2 ? rd16(p) : rd32(p);
}

/* ---- reading ------------------------------------------------------------------------------ */

/* Opens path (tiff) and reads image 0 into a fresh buffer; returns the status. */
static int read_image0(const char *path, struct pb_error *err, pb_image_meta *m, void **pixels) {
  pb_dataset *ds = NULL;
  *pixels = NULL;
  int rc = pb_dataset_open(path, "tiff", &ds, err);
  if (rc == PB_OK) rc = pb_dataset_meta(ds, 0, m, err);
  if (rc == PB_OK) {
    size_t bytes = pb_image_bytes(m);
    *pixels = malloc(bytes);
    CHECK(*pixels != NULL);
    rc = pb_dataset_read(ds, 0, *pixels, bytes, NULL, err);
  }
  pb_dataset_free(ds);
  return rc;
}

static void expect_good(const char *path, int w, int h) {
  struct pb_error err = {{0}};
  pb_image_meta m;
  void *p;
  CHECK_OK(read_image0(path, &err, &m, &p), &err);
  CHECK_EQ(m.shape[PB_X], w);
  CHECK_EQ(m.shape[PB_Y], h);
  const uint16_t *v = p;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      if (v[y * w + x] != px(y, x)) FAIL("%s: pixel (%d, %d) is %u, not %u", path, y, x,
                                         v[y * w + x], px(y, x));
  free(p);
}

/* The patched file must be refused on both read paths with a message naming file and tag. */
static void expect_refused(const char *path, const char *tag, const char *what) {
  const char *modes[2] = {"1", "0"};
  for (int i = 0; i < 2; i++) {
    setenv("PB_TIFF_DIRECT", modes[i], 1);
    struct pb_error err = {{0}};
    pb_image_meta m;
    void *p;
    int rc = read_image0(path, &err, &m, &p);
    free(p);
    if (rc == PB_OK) {
      EXPECT_FAIL("%s (direct=%s): read with PB_OK, expected a refusal naming %s", what,
                  modes[i], tag);
      continue;
    }
    EXPECT_EQ(rc, PB_EFORMAT);
    EXPECT_CONTAINS(err.message, path);
    EXPECT_CONTAINS(err.message, tag);
    if (i == 0) printf("%-44s -> %s\n", what, err.message);
  }
  unsetenv("PB_TIFF_DIRECT");
}

typedef void (*patch_fn)(file_buf *f);

/* Writes the good file's bytes, patched, to dir/name.tif and checks it is refused. */
static void patched(const char *dir, const file_buf *good, const char *name, patch_fn fn,
                    const char *tag) {
  file_buf f = {malloc(good->n), good->n};
  CHECK(f.b != NULL);
  memcpy(f.b, good->b, good->n);
  fn(&f);
  char path[600];
  snprintf(path, sizeof path, "%s/%s.tif", dir, name);
  spit(path, &f);
  free(f.b);
  expect_refused(path, tag, name);
}

/* ---- the cases ---------------------------------------------------------------------------- */

static void rps_one(file_buf *f) { set_scalar(f, TIFFTAG_ROWSPERSTRIP, 1); }   /* needs 8 */
static void rps_four(file_buf *f) { set_scalar(f, TIFFTAG_ROWSPERSTRIP, 4); }  /* needs 2 */
static void rps_zero(file_buf *f) { set_scalar(f, TIFFTAG_ROWSPERSTRIP, 0); }
static void soff_short(file_buf *f) { set_count(f, TIFFTAG_STRIPOFFSETS, 3); }
static void soff_long(file_buf *f) { set_count(f, TIFFTAG_STRIPOFFSETS, 5); }
static void scnt_short(file_buf *f) { set_count(f, TIFFTAG_STRIPBYTECOUNTS, 2); }
static void scnt_missing(file_buf *f) { wr16(entry(f, TIFFTAG_STRIPBYTECOUNTS), 65000); }
static void soff_past_end(file_buf *f) {
  set_value(f, TIFFTAG_STRIPOFFSETS, 3, (uint32_t)f->n - 4); /* 24 bytes from 4 before EOF */
}
static void scnt_past_end(file_buf *f) {
  set_value(f, TIFFTAG_STRIPBYTECOUNTS, 1, (uint32_t)f->n); /* from strip 1 on: past the end */
}
static void soff_header(file_buf *f) { set_value(f, TIFFTAG_STRIPOFFSETS, 0, 0); }
static void tw_zero(file_buf *f) { set_scalar(f, TIFFTAG_TILEWIDTH, 0); }
static void tl_zero(file_buf *f) { set_scalar(f, TIFFTAG_TILELENGTH, 0); }
static void tw_wide(file_buf *f) { set_scalar(f, TIFFTAG_TILEWIDTH, 2 * TS); } /* needs 2 */
static void tl_small(file_buf *f) { set_scalar(f, TIFFTAG_TILELENGTH, TS / 2); } /* needs 8 */
static void toff_short(file_buf *f) { set_count(f, TIFFTAG_TILEOFFSETS, 3); }
static void tcnt_short(file_buf *f) { set_count(f, TIFFTAG_TILEBYTECOUNTS, 2); }
static void toff_past_end(file_buf *f) {
  set_value(f, TIFFTAG_TILEOFFSETS, 2, get_value(f, TIFFTAG_TILEOFFSETS, 2) + (uint32_t)f->n);
}

int main(void) {
  char dir[256];
  tt_tempdir(dir, sizeof dir, "tags");
  char p[600];

  snprintf(p, sizeof p, "%s/good_strips.tif", dir);
  write_strips(p, COMPRESSION_NONE);
  expect_good(p, W, H);
  file_buf strips = slurp(p);
  patched(dir, &strips, "rowsperstrip_1", rps_one, "RowsPerStrip");
  patched(dir, &strips, "rowsperstrip_4", rps_four, "RowsPerStrip");
  patched(dir, &strips, "rowsperstrip_0", rps_zero, "RowsPerStrip");
  patched(dir, &strips, "stripoffsets_3_of_4", soff_short, "StripOffsets");
  patched(dir, &strips, "stripoffsets_5_of_4", soff_long, "StripOffsets");
  patched(dir, &strips, "stripbytecounts_2_of_4", scnt_short, "StripByteCounts");
  patched(dir, &strips, "stripbytecounts_missing", scnt_missing, "StripByteCounts");
  patched(dir, &strips, "stripoffset_past_end", soff_past_end, "StripOffsets entry 3");
  patched(dir, &strips, "stripbytecount_past_end", scnt_past_end, "StripByteCounts entry 1");
  patched(dir, &strips, "stripoffset_in_header", soff_header, "StripOffsets entry 0");
  free(strips.b);

  /* Compressed strips go through libtiff's decoder: the same checks come first. */
  snprintf(p, sizeof p, "%s/good_deflate.tif", dir);
  write_strips(p, COMPRESSION_ADOBE_DEFLATE);
  expect_good(p, W, H);
  file_buf deflate = slurp(p);
  patched(dir, &deflate, "deflate_rowsperstrip_1", rps_one, "RowsPerStrip");
  patched(dir, &deflate, "deflate_stripoffsets_3_of_4", soff_short, "StripOffsets");
  free(deflate.b);

  snprintf(p, sizeof p, "%s/good_tiles.tif", dir);
  write_tiles(p);
  expect_good(p, 2 * TS, 2 * TS);
  file_buf tiles = slurp(p);
  patched(dir, &tiles, "tilewidth_0", tw_zero, "TileWidth");
  patched(dir, &tiles, "tilelength_0", tl_zero, "TileLength");
  patched(dir, &tiles, "tilewidth_wider", tw_wide, "TileWidth");
  patched(dir, &tiles, "tilelength_shorter", tl_small, "TileLength");
  patched(dir, &tiles, "tileoffsets_3_of_4", toff_short, "TileOffsets");
  patched(dir, &tiles, "tilebytecounts_2_of_4", tcnt_short, "TileByteCounts");
  patched(dir, &tiles, "tileoffset_past_end", toff_past_end, "TileOffsets entry 2");
  free(tiles.b);

  /* The good files still read after all that (nothing cached a refusal). */
  snprintf(p, sizeof p, "%s/good_strips.tif", dir);
  expect_good(p, W, H);
  tt_rmtree(dir);
  return check_failures() != 0;
}
