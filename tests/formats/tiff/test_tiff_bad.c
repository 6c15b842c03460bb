/* tiff backend on bad input: truncated files, broken IFDs, loops, files that are not TIFF,
 * unsupported samples, inconsistent OME-XML, corrupt pixel data, folders without TIFFs.
 * Every case must fail cleanly with a message that names the file. */
#include <tiffio.h>

#include "tiff_test.h"

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *fp = fopen(path, "rb");
  CHECK(fp != NULL);
  fseek(fp, 0, SEEK_END);
  *n = (size_t)ftell(fp);
  fseek(fp, 0, SEEK_SET);
  unsigned char *b = malloc(*n);
  CHECK(fread(b, 1, *n, fp) == *n);
  fclose(fp);
  return b;
}

static void spit(const char *path, const void *b, size_t n) {
  FILE *fp = fopen(path, "wb");
  CHECK(fp != NULL);
  CHECK(fwrite(b, 1, n, fp) == n);
  fclose(fp);
}

static uint32_t rd32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static void wr32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Offset of the 12-byte entry of tag in the first IFD of a classic little-endian TIFF. */
static size_t find_tag(const unsigned char *b, uint16_t tag) {
  uint32_t ifd = rd32(b + 4);
  uint16_t n = rd16(b + ifd);
  for (uint16_t i = 0; i < n; i++) {
    size_t e = ifd + 2 + 12u * i;
    if (rd16(b + e) == tag) return e;
  }
  fprintf(stderr, "tag %u not found\n", tag);
  exit(1);
}

/* Opens path as a tiff dataset and reads image 0; expects failure naming needle (a file). */
static void expect_failure(const char *path, const char *needle, const char *what) {
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  int rc = pb_dataset_open(path, "tiff", &ds, &err);
  if (rc == PB_OK) {
    pb_image_meta m;
    rc = pb_dataset_meta(ds, 0, &m, &err);
    if (rc == PB_OK) {
      size_t bytes = pb_image_bytes(&m);
      void *buf = malloc(bytes);
      rc = pb_dataset_read(ds, 0, buf, bytes, NULL, &err);
      free(buf);
    }
    pb_dataset_free(ds);
  }
  if (rc == PB_OK) {
    fprintf(stderr, "%s: expected a failure for %s\n", what, path);
    exit(1);
  }
  CHECK_CONTAINS(err.message, needle);
  printf("%-28s -> %s: %s\n", what, pb_strerror(rc), err.message);
}

/* Opens and reads image 0 of path; either outcome is fine as long as a failure names it. */
static void expect_failure_or_ok(const char *path, const char *what) {
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  int rc = pb_dataset_open(path, "tiff", &ds, &err);
  if (rc == PB_OK) {
    pb_image_meta m;
    rc = pb_dataset_meta(ds, 0, &m, &err);
    if (rc == PB_OK) {
      size_t bytes = pb_image_bytes(&m);
      void *buf = malloc(bytes);
      rc = pb_dataset_read(ds, 0, buf, bytes, NULL, &err);
      free(buf);
    }
    pb_dataset_free(ds);
  }
  if (rc != PB_OK) CHECK_CONTAINS(err.message, path);
  printf("%-28s -> %s%s%s\n", what, pb_strerror(rc), rc ? ": " : "", rc ? err.message : "");
}

/* A valid one-image dataset: 2 pages of 16x16 uint16 in one strip each. */
static void make_valid(const char *dir, const char *comp) {
  struct pb_error err = {{0}};
  pb_write_params p = PB_WRITE_PARAMS_DEFAULTS;
  p.compression = comp;
  pb_writer *w;
  CHECK_OK(pb_writer_new(dir, "tiff", &p, &w, &err), &err);
  const int64_t shape[PB_NDIM] = {1, 1, 2, 16, 16};
  pb_image_meta m;
  pb_image_meta_init(&m, "", PB_UINT16, shape);
  uint16_t px[512];
  tt_fill(&m, px, 3);
  CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
}

/* A TIFF written directly with libtiff: pages of w x h with the given sample layout. */
static void write_custom(const char *path, uint16_t bps, uint16_t fmt, uint16_t spp, int pages,
                         const char *desc) {
  TIFF *tif = TIFFOpen(path, "w");
  CHECK(tif != NULL);
  unsigned char row[64 * 8 * 4] = {0};
  for (int p = 0; p < pages; p++) {
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, 16);
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, 8);
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, bps);
    TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT, fmt);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, spp);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
    TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
    TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, 8);
    if (p == 0 && desc != NULL) TIFFSetField(tif, TIFFTAG_IMAGEDESCRIPTION, desc);
    for (uint32_t y = 0; y < 8; y++) CHECK(TIFFWriteScanline(tif, row, y, 0) == 1);
    CHECK(TIFFWriteDirectory(tif));
  }
  TIFFClose(tif);
}

int main(void) {
  char root[256], dir[512], file[700], bad[700];
  tt_tempdir(root, sizeof root, "bad");
  snprintf(dir, sizeof dir, "%s/valid", root);
  make_valid(dir, "none");
  snprintf(file, sizeof file, "%s/img_00000.ome.tif", dir);
  size_t n;
  unsigned char *orig = slurp(file, &n);
  unsigned char *b = malloc(n);

  /* Truncations at several lengths, each in its own file. */
  const size_t cuts[] = {0, 3, 8, 20, n / 3, n / 2, n - 40, n - 1};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    snprintf(bad, sizeof bad, "%s/trunc_%zu.tif", root, cuts[i]);
    spit(bad, orig, cuts[i]);
    expect_failure(bad, bad, "truncated file");
  }

  /* Cut inside the OME-XML: the pixels may still be whole, but libtiff would only warn and
   * drop the description, so the file must be refused, naming the tag. */
  {
    size_t e = find_tag(orig, 270);
    size_t at = rd32(orig + e + 8) + rd32(orig + e + 4) / 2;
    if (at < n) {
      snprintf(bad, sizeof bad, "%s/trunc_description.tif", root);
      spit(bad, orig, at);
      expect_failure(bad, "tag 270 of the first directory", "truncated OME-XML");
    }
  }

  /* First IFD offset beyond the end. */
  memcpy(b, orig, n);
  wr32(b + 4, 0x7FFFFFF0u);
  snprintf(bad, sizeof bad, "%s/ifd_offset.tif", root);
  spit(bad, b, n);
  expect_failure(bad, bad, "IFD offset past end");

  /* IFD loop: the first directory's next pointer points at itself. */
  memcpy(b, orig, n);
  uint32_t ifd0 = rd32(b + 4);
  wr32(b + ifd0 + 2 + 12u * rd16(b + ifd0), ifd0);
  snprintf(bad, sizeof bad, "%s/ifd_loop.tif", root);
  spit(bad, b, n);
  expect_failure(bad, "loop", "cyclic IFD chain");

  /* IFD with an absurd entry count. */
  memcpy(b, orig, n);
  b[ifd0] = 0xFF;
  b[ifd0 + 1] = 0xFF;
  snprintf(bad, sizeof bad, "%s/ifd_count.tif", root);
  spit(bad, b, n);
  expect_failure(bad, bad, "IFD entry count");

  /* Strip offset beyond the end of the file. */
  memcpy(b, orig, n);
  size_t e = find_tag(b, TIFFTAG_STRIPOFFSETS);
  wr32(b + e + 8, (uint32_t)n + 1000);
  snprintf(bad, sizeof bad, "%s/strip_offset.tif", root);
  spit(bad, b, n);
  expect_failure(bad, bad, "strip offset past end");

  /* Strip byte count larger than the file. */
  memcpy(b, orig, n);
  e = find_tag(b, TIFFTAG_STRIPBYTECOUNTS);
  wr32(b + e + 8, 0x7FFFFFFFu);
  snprintf(bad, sizeof bad, "%s/strip_count.tif", root);
  spit(bad, b, n);
  /* libtiff repairs implausible counts of uncompressed strips from the image size, so this
   * one may read fine; it must not crash or read past the end. */
  expect_failure_or_ok(bad, "strip byte count");

  /* Not a TIFF at all, with a .tif name. */
  snprintf(bad, sizeof bad, "%s/zip.tif", root);
  static const char zip[] = "PK\003\004 this is a zip archive, not an image";
  spit(bad, zip, sizeof zip - 1);
  expect_failure(bad, "zip.tif", "not a TIFF");

  /* Unsupported sample formats. */
  snprintf(bad, sizeof bad, "%s/int8.tif", root);
  write_custom(bad, 8, SAMPLEFORMAT_INT, 1, 1, NULL);
  expect_failure(bad, "int8.tif", "signed 8-bit samples");
  snprintf(bad, sizeof bad, "%s/complex.tif", root);
  write_custom(bad, 64, SAMPLEFORMAT_COMPLEXIEEEFP, 1, 1, NULL);
  expect_failure(bad, "complex.tif", "complex samples");
  snprintf(bad, sizeof bad, "%s/bits12.tif", root);
  write_custom(bad, 12, SAMPLEFORMAT_UINT, 1, 1, NULL);
  expect_failure(bad, "bits12.tif", "12-bit samples");

  /* OME-XML that does not match the file. */
  const char *ome_more =
      "<?xml version=\"1.0\"?><OME xmlns=\"http://www.openmicroscopy.org/Schemas/OME/2016-06\">"
      "<Image ID=\"Image:0\"><Pixels ID=\"Pixels:0\" DimensionOrder=\"XYZCT\" Type=\"uint8\" "
      "SizeX=\"16\" SizeY=\"8\" SizeZ=\"5\" SizeC=\"1\" SizeT=\"1\"><TiffData/></Pixels></Image></OME>";
  snprintf(bad, sizeof bad, "%s/ome_more_planes.ome.tif", root);
  write_custom(bad, 8, SAMPLEFORMAT_UINT, 1, 2, ome_more);
  expect_failure(bad, "ome_more_planes.ome.tif", "OME more planes than pages");
  const char *ome_size =
      "<OME><Image ID=\"Image:0\"><Pixels DimensionOrder=\"XYZCT\" Type=\"uint8\" SizeX=\"17\" "
      "SizeY=\"8\" SizeZ=\"1\" SizeC=\"1\" SizeT=\"1\"/></Image></OME>";
  snprintf(bad, sizeof bad, "%s/ome_size.ome.tif", root);
  write_custom(bad, 8, SAMPLEFORMAT_UINT, 1, 1, ome_size);
  expect_failure(bad, "ome_size.ome.tif", "OME size mismatch");
  const char *ome_broken = "<OME><Image ID=\"Image:0\"><Pixels DimensionOrder=\"XYZCT\" SizeX=\"1";
  snprintf(bad, sizeof bad, "%s/ome_broken.ome.tif", root);
  write_custom(bad, 8, SAMPLEFORMAT_UINT, 1, 1, ome_broken);
  expect_failure(bad, "ome_broken.ome.tif", "malformed OME-XML");
  const char *ome_order =
      "<OME><Image ID=\"Image:0\"><Pixels DimensionOrder=\"XYZZT\" Type=\"uint8\" SizeX=\"16\" "
      "SizeY=\"8\" SizeZ=\"1\" SizeC=\"1\" SizeT=\"1\"/></Image></OME>";
  snprintf(bad, sizeof bad, "%s/ome_order.ome.tif", root);
  write_custom(bad, 8, SAMPLEFORMAT_UINT, 1, 1, ome_order);
  expect_failure(bad, "ome_order.ome.tif", "bad DimensionOrder");

  /* Corrupt compressed data. */
  snprintf(dir, sizeof dir, "%s/deflated", root);
  make_valid(dir, "deflate");
  snprintf(file, sizeof file, "%s/img_00000.ome.tif", dir);
  free(orig);
  orig = slurp(file, &n);
  e = find_tag(orig, TIFFTAG_STRIPOFFSETS);
  uint32_t so = rd32(orig + e + 8);
  for (uint32_t k = 0; k < 16; k++) orig[so + k] ^= 0x5A;
  spit(file, orig, n);
  expect_failure(file, "img_00000.ome.tif", "corrupt deflate data");

  /* Folders: unrelated files only, and empty. */
  snprintf(dir, sizeof dir, "%s/unrelated", root);
  CHECK(mkdir(dir, 0777) == 0);
  snprintf(bad, sizeof bad, "%s/notes.txt", dir);
  spit(bad, "hello", 5);
  expect_failure(dir, "notes.txt", "folder of unrelated files");
  snprintf(dir, sizeof dir, "%s/empty", root);
  CHECK(mkdir(dir, 0777) == 0);
  expect_failure(dir, dir, "empty folder");

  /* A directory named like a TIFF inside a dataset folder. */
  snprintf(dir, sizeof dir, "%s/withdir", root);
  CHECK(mkdir(dir, 0777) == 0);
  snprintf(bad, sizeof bad, "%s/fake.tif", dir);
  CHECK(mkdir(bad, 0777) == 0);
  expect_failure(dir, "fake.tif", "directory named .tif");

  free(orig);
  free(b);
  tt_rmtree(root);
  printf("bad input ok\n");
  return 0;
}
