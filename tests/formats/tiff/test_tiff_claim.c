/* A TIFF whose ImageWidth and ImageLength tags claim far more pixels than the file holds. A
 * compressed or sparse TIFF may legitimately be much smaller than its pixels, so the claim is
 * held to PIPEBENCH_MAX_IMAGE_BYTES (docs/formats.md) before anything is allocated: the metadata call
 * must fail naming the file and the claimed shape, not report a 2 TiB image for the caller to
 * allocate. Raising the limit through the environment lets a large enough claim through. */
#include <tiffio.h>

#include "tiff_test.h"

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *fp = fopen(path, "rb");
  CHECK(fp != NULL);
  CHECK(fseek(fp, 0, SEEK_END) == 0);
  *n = (size_t)ftell(fp);
  CHECK(fseek(fp, 0, SEEK_SET) == 0);
  unsigned char *b = malloc(*n);
  CHECK(b != NULL);
  CHECK(fread(b, 1, *n, fp) == *n);
  fclose(fp);
  return b;
}

static void spit(const char *path, const void *b, size_t n) {
  FILE *fp = fopen(path, "wb");
  CHECK(fp != NULL);
  CHECK(fwrite(b, 1, n, fp) == n);
  CHECK(fclose(fp) == 0);
}

static uint32_t rd32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static void wr16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}
static void wr32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Rewrites tag's entry in the first IFD of a classic little-endian TIFF as one LONG v. */
static void set_long(unsigned char *b, uint16_t tag, uint32_t v) {
  uint32_t ifd = rd32(b + 4);
  uint16_t n = rd16(b + ifd);
  for (uint16_t i = 0; i < n; i++) {
    unsigned char *e = b + ifd + 2 + 12u * i;
    if (rd16(e) != tag) continue;
    wr16(e + 2, 4); /* LONG */
    wr32(e + 4, 1);
    wr32(e + 8, v);
    return;
  }
  FAIL("tag %u not found", tag);
}

/* One deflate-compressed 16x16 uint16 page, no description. */
static void write_small(const char *path) {
  TIFF *tif = TIFFOpen(path, "w");
  CHECK(tif != NULL);
  uint16_t row[16] = {0};
  TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, 16);
  TIFFSetField(tif, TIFFTAG_IMAGELENGTH, 16);
  TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 16);
  TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_UINT);
  TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 1);
  TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
  TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(tif, TIFFTAG_COMPRESSION, COMPRESSION_ADOBE_DEFLATE);
  TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, 16);
  for (uint32_t y = 0; y < 16; y++) {
    for (int x = 0; x < 16; x++) row[x] = (uint16_t)(y * 16 + (uint32_t)x);
    CHECK(TIFFWriteScanline(tif, row, y, 0) == 1);
  }
  CHECK(TIFFWriteDirectory(tif));
  TIFFClose(tif);
}

/* Opens path and asks for image 0's metadata: the result code and, on success, its bytes. */
static int meta_of(const char *path, size_t *bytes, struct pb_error *err) {
  pb_dataset *ds = NULL;
  int rc = pb_dataset_open(path, "tiff", &ds, err);
  if (rc != PB_OK) return rc;
  pb_image_meta m;
  rc = pb_dataset_meta(ds, 0, &m, err);
  if (rc == PB_OK) *bytes = pb_image_bytes(&m);
  pb_dataset_free(ds);
  return rc;
}

int main(void) {
  char root[256], path[600];
  tt_tempdir(root, sizeof root, "claim");
  snprintf(path, sizeof path, "%s/big.tif", root);
  write_small(path);
  struct pb_error err = {{0}};
  size_t bytes = 0;
  CHECK_OK(meta_of(path, &bytes, &err), &err);
  CHECK_EQ(bytes, 512);

  /* 2^20 x 2^20 uint16 in one strip: 2 TiB claimed by a file of a few hundred bytes */
  size_t n;
  unsigned char *b = slurp(path, &n);
  set_long(b, TIFFTAG_IMAGEWIDTH, 1u << 20);
  set_long(b, TIFFTAG_IMAGELENGTH, 1u << 20);
  set_long(b, TIFFTAG_ROWSPERSTRIP, 1u << 20);
  spit(path, b, n);
  free(b);
  bytes = 0;
  int rc = meta_of(path, &bytes, &err);
  if (rc == PB_OK) FAIL("%s: a claim of %zu bytes was believed", path, bytes);
  CHECK_EQ(rc, PB_EUNSUPPORTED);
  CHECK_CONTAINS(err.message, path);
  CHECK_CONTAINS(err.message, "1048576x1048576");
  CHECK_CONTAINS(err.message, "PIPEBENCH_MAX_IMAGE_BYTES");
  printf("ok refused: %s\n", err.message);

  /* the limit is the documented one: raised above the claim, the metadata is reported */
  setenv("PIPEBENCH_MAX_IMAGE_BYTES", "3000000000000", 1);
  rc = meta_of(path, &bytes, &err);
  unsetenv("PIPEBENCH_MAX_IMAGE_BYTES");
  CHECK_OK(rc, &err);
  CHECK_EQ(bytes, (size_t)2 << 40);
  printf("ok believed under a raised limit: %zu bytes\n", bytes);
  tt_rmtree(root);
  return 0;
}
