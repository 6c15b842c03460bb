/* JPEG scan bombs: a valid progressive JPEG of many scans decodes in time that grows with the
 * scans times the pixels, not with the file's size (883 scans of 16384 x 16384 took 49 s). Files
 * past PB__IF_MAX_SCANS, or whose scans x pixels are far beyond their size, are refused naming
 * the file, through every decode path; ordinary progressive files still decode.
 *   test_imagefolder_scans [CORPUS_FILE]: with an argument, writes the 512 x 512, 694-scan file
 *   there (the fuzz corpus's scan_bomb.jpg) and exits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
/* jpeglib.h needs FILE and size_t first. */
#include <jpeglib.h>

#include "check.h"
#include "formats/imagefolder/if_codec.h"
#include "pipebench/format.h"

/* A grey w x h progressive JPEG (a smooth ramp) of `scans` scans: one DC scan, then AC scans of
 * one coefficient each, first at point transform 10 (libjpeg's most for 8 bits) and refined bit
 * by bit to 0, coefficient after coefficient (at most 1 + 63 x 11 = 694). Returns the malloc'd
 * file. */
static unsigned char *make_jpeg(int w, int h, int scans, unsigned long *size) {
  CHECK(scans >= 1 && scans <= 1 + 63 * 11);
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr e;
  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  unsigned char *out = NULL;
  jpeg_mem_dest(&c, &out, size);
  c.image_width = (JDIMENSION)w;
  c.image_height = (JDIMENSION)h;
  c.input_components = 1;
  c.in_color_space = JCS_GRAYSCALE;
  jpeg_set_defaults(&c);
  jpeg_scan_info *si = calloc((size_t)scans, sizeof *si);
  CHECK(si != NULL);
  si[0].comps_in_scan = 1; /* DC, whole */
  for (int k = 1; k < scans; k++) {
    int band = 1 + (k - 1) / 11, step = (k - 1) % 11; /* step 0: first scan at Al 10 */
    si[k].comps_in_scan = 1;
    si[k].Ss = si[k].Se = band;
    si[k].Ah = step == 0 ? 0 : 11 - step;
    si[k].Al = 10 - step;
  }
  c.scan_info = si;
  c.num_scans = scans;
  jpeg_start_compress(&c, TRUE);
  unsigned char *row = malloc((size_t)w);
  CHECK(row != NULL);
  while (c.next_scanline < c.image_height) {
    for (int x = 0; x < w; x++) row[x] = (unsigned char)((x + (int)c.next_scanline) * 255 / (w + h));
    JSAMPROW r = row;
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  free(row);
  free(si);
  return out;
}

static void write_file(const char *path, const unsigned char *data, unsigned long size) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  CHECK_EQ(fwrite(data, 1, size, f), (size_t)size);
  CHECK_EQ(fclose(f), 0);
}

/* Every decode path on one file: the codec's whole decode (TurboJPEG), its box decode (libjpeg),
 * and a dataset read of a one-image tree. want: 0 to decode, else a text the refusal holds. */
static void decode_all(const char *root, const char *tag, const unsigned char *data,
                       unsigned long size, const char *want) {
  struct pb_error err = {{0}};
  pb__imagefolder_info info;
  CHECK_OK(pb__imagefolder_header(tag, data, size, &info, &err), &err);
  size_t bytes = (size_t)info.width * (size_t)info.height;
  unsigned char *dst = malloc(bytes);
  CHECK(dst != NULL);
  int rc = pb__imagefolder_decode(tag, data, size, &info, dst, bytes, &err);
  int rc2 = pb__imagefolder_decode_jpeg_box(tag, data, size, &info, 2, 0, 0, 8, 8, dst, bytes, &err);
  char dir[600], cls[700], file[800];
  snprintf(dir, sizeof dir, "%s/%s", root, tag);
  snprintf(cls, sizeof cls, "%s/cls", dir);
  snprintf(file, sizeof file, "%s/a.jpg", cls);
  CHECK(mkdir(dir, 0777) == 0);
  CHECK(mkdir(cls, 0777) == 0);
  write_file(file, data, size);
  pb_dataset *ds;
  CHECK_OK(pb_dataset_open(dir, "imagefolder", &ds, &err), &err);
  struct pb_error rerr = {{0}};
  int rc3 = pb_dataset_read(ds, 0, dst, bytes, NULL, &rerr);
  pb_dataset_free(ds);
  if (want == NULL) {
    EXPECT_OK(rc, &err);
    EXPECT_OK(rc2, &err);
    EXPECT_OK(rc3, &rerr);
  } else {
    struct pb_error e1 = {{0}}, e2 = {{0}};
    EXPECT_EQ(pb__imagefolder_decode(tag, data, size, &info, dst, bytes, &e1), PB_EUNSUPPORTED);
    EXPECT_CONTAINS(e1.message, tag);
    EXPECT_CONTAINS(e1.message, want);
    EXPECT_EQ(pb__imagefolder_decode_jpeg_box(tag, data, size, &info, 2, 0, 0, 8, 8, dst, bytes, &e2),
              PB_EUNSUPPORTED);
    EXPECT_CONTAINS(e2.message, want);
    EXPECT_EQ(rc3, PB_EUNSUPPORTED);
    EXPECT_CONTAINS(rerr.message, "cls/a.jpg");
    EXPECT_CONTAINS(rerr.message, want);
  }
  free(dst);
}

int main(int argc, char **argv) {
  unsigned long size;
  if (argc == 2) {
    unsigned char *j = make_jpeg(512, 512, 694, &size);
    write_file(argv[1], j, size);
    free(j);
    return 0;
  }
  char root[] = "/tmp/pb_if_scans_XXXXXX";
  CHECK(mkdtemp(root) != NULL);

  /* 694 scans (as many as a grey 8-bit JPEG can have) of 512 x 512: past the scan bound. */
  unsigned char *j = make_jpeg(512, 512, 694, &size);
  decode_all(root, "bomb", j, size, "694 scans, more than the 256");
  free(j);
  /* 257 scans: one past it. */
  j = make_jpeg(64, 64, PB__IF_MAX_SCANS + 1, &size);
  decode_all(root, "over", j, size, "257 scans");
  free(j);
  /* 256 scans of a small image: at the bound, decoded. */
  j = make_jpeg(64, 64, PB__IF_MAX_SCANS, &size);
  decode_all(root, "at", j, size, NULL);
  free(j);
  /* 200 scans of 2048 x 2048 (under the scan bound) from a file of a few tens of kB: 800 million
   * pixel-scans, far more than PB__IF_WORK_PER_BYTE a byte. */
  j = make_jpeg(2048, 2048, 200, &size);
  EXPECT((int64_t)200 * 2048 * 2048 > (int64_t)size * PB__IF_WORK_PER_BYTE);
  decode_all(root, "work", j, size, "pixel-scans a byte");
  free(j);
  /* libjpeg's own progression (6 scans) of the same image: decoded. */
  j = make_jpeg(2048, 2048, 6, &size);
  decode_all(root, "plain", j, size, NULL);
  free(j);

  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  CHECK(system(cmd) == 0);
  return check_failures() != 0;
}
