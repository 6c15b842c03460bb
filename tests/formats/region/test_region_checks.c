/* Bad reads through the public API, for every format that can write here: regions out of
 * bounds, with a negative start or count, with a count whose end overflows, of zero size, no
 * region at all, indexes out of range and destinations too small. format.c checks them once,
 * so each gets the same error (code and message, naming the dataset) whichever format holds
 * the image; good regions still read the right pixels. */
#include <limits.h>
#include <stdint.h>

#include "common/fs.h"
#include "formats/format_internal.h"
#include "loader/loader_test.h"

static char dir[512];

enum { H = 8, W = 12 };
static const int64_t shape[PB_NDIM] = {1, 1, 1, H, W};
static unsigned char pixels[H * W];

/* The output name each format gets (folders for those that write folders). */
static const char *out_name(const char *fmt) {
  if (strcmp(fmt, "raw") == 0) return "img.raw";
  if (strcmp(fmt, "ome-parquet") == 0) return "img.parquet";
  if (strcmp(fmt, "duckdb") == 0) return "img.duckdb";
  if (strcmp(fmt, "oa-dataset") == 0) return "img-oa";
  if (strcmp(fmt, "ome-zarr") == 0) return "img-zarr";
  if (strcmp(fmt, "lance") == 0) return "img.lance";
  return "img-dir";
}

/* Writes one H x W uint8 image; 1 when the format cannot write here (lance without its helper). */
static int write_one(const char *fmt, const char *path) {
  struct pb_error err = {{0}};
  pb_writer *w = NULL;
  int rc = pb_writer_new(path, fmt, NULL, &w, &err);
  pb_image_meta m;
  pb_image_meta_init(&m, strcmp(fmt, "imagefolder") == 0 ? "a/img.png" : "img", PB_UINT8, shape);
  if (rc == PB_OK) rc = pb_writer_add(w, &m, pixels, &err);
  if (rc == PB_OK) rc = pb_writer_finish(w, &err);
  pb_writer_free(w);
  if (rc != PB_OK && strcmp(fmt, "lance") == 0) {
    printf("  %s: cannot write here, left out (%s)\n", fmt, err.message);
    return 1;
  }
  CHECK_OK(rc, &err);
  return 0;
}

/* One bad read: the status and the message must be exactly these. */
static void expect_error(const char *fmt, const char *what, int rc, const struct pb_error *err,
                         int want_rc, const char *want) {
  if (rc != want_rc || strcmp(err->message, want) != 0)
    EXPECT_FAIL("%s, %s: got %d '%s', want %d '%s'", fmt, what, rc, err->message, want_rc, want);
}

static void bad_region(pb_dataset *ds, const char *fmt, int axis, int64_t start, int64_t count) {
  static const char axes[] = "TCZYX";
  pb_region r;
  pb__region_full(&r, shape);
  r.start[axis] = start;
  r.count[axis] = count;
  unsigned char buf[H * W];
  char want[1400], what[96];
  snprintf(want, sizeof want,
           "%s: image 0: region axis %c [%lld, +%lld) lies outside the image (size %lld)",
           pb_dataset_path(ds), axes[axis], (long long)start, (long long)count,
           (long long)shape[axis]);
  snprintf(what, sizeof what, "region %c [%lld, +%lld)", axes[axis], (long long)start,
           (long long)count);
  struct pb_error err = {{0}};
  int rc = pb_dataset_read_region(ds, 0, &r, buf, sizeof buf, NULL, &err);
  expect_error(fmt, what, rc, &err, PB_ERANGE, want);
  /* the reduced-resolution entry point takes the same check */
  pb_region out;
  int scale = 2;
  memset(&err, 0, sizeof err);
  rc = pb__read_scaled(ds, 0, &r, &scale, buf, sizeof buf, &out, NULL, &err);
  expect_error(fmt, what, rc, &err, PB_ERANGE, want);
}

static void check_format(const char *fmt) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s-%s", dir, fmt, out_name(fmt));
  if (write_one(fmt, path) != 0) return;
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(path, fmt, &ds, &err), &err);
  CHECK_EQ(pb_dataset_count(ds), 1);
  const char *p = pb_dataset_path(ds);

  bad_region(ds, fmt, PB_Y, 4, H);             /* out of bounds */
  bad_region(ds, fmt, PB_X, W, 1);             /* starts past the end */
  bad_region(ds, fmt, PB_X, -1, 2);            /* negative start */
  bad_region(ds, fmt, PB_T, 0, -1);            /* negative count */
  bad_region(ds, fmt, PB_X, 2, INT64_MAX);     /* start + count overflows */
  bad_region(ds, fmt, PB_Y, INT64_MAX, 2);     /* start + count overflows */
  bad_region(ds, fmt, PB_Z, 0, 0);             /* zero size */
  bad_region(ds, fmt, PB_C, 0, 2);             /* an axis the image does not have twice */

  unsigned char buf[H * W + 16];
  char want[1400];
  int rc;
  /* no region */
  memset(&err, 0, sizeof err);
  rc = pb_dataset_read_region(ds, 0, NULL, buf, sizeof buf, NULL, &err);
  snprintf(want, sizeof want, "%s: image 0: no region given", p);
  expect_error(fmt, "NULL region", rc, &err, PB_EINVAL, want);
  /* indexes */
  const int64_t bad_index[] = {-1, 1, INT64_MAX};
  for (int k = 0; k < 3; k++) {
    snprintf(want, sizeof want, "%s: image index %lld out of range (dataset has 1)", p,
             (long long)bad_index[k]);
    pb_region r;
    pb__region_full(&r, shape);
    memset(&err, 0, sizeof err);
    rc = pb_dataset_read(ds, bad_index[k], buf, sizeof buf, NULL, &err);
    expect_error(fmt, "read index", rc, &err, PB_ERANGE, want);
    memset(&err, 0, sizeof err);
    rc = pb_dataset_read_region(ds, bad_index[k], &r, buf, sizeof buf, NULL, &err);
    expect_error(fmt, "region index", rc, &err, PB_ERANGE, want);
    pb_image_meta m;
    memset(&err, 0, sizeof err);
    rc = pb_dataset_meta(ds, bad_index[k], &m, &err);
    expect_error(fmt, "meta index", rc, &err, PB_ERANGE, want);
  }
  /* destinations too small, or none */
  memset(&err, 0, sizeof err);
  rc = pb_dataset_read(ds, 0, buf, H * W - 1, NULL, &err);
  snprintf(want, sizeof want, "%s: image 0: destination holds %d bytes, the image needs %d", p,
           H * W - 1, H * W);
  expect_error(fmt, "small destination", rc, &err, PB_EINVAL, want);
  memset(&err, 0, sizeof err);
  rc = pb_dataset_read(ds, 0, NULL, sizeof buf, NULL, &err);
  snprintf(want, sizeof want, "%s: image 0: destination holds 0 bytes, the image needs %d", p,
           H * W);
  expect_error(fmt, "no destination", rc, &err, PB_EINVAL, want);
  pb_region r;
  pb__region_full(&r, shape);
  r.start[PB_Y] = 2;
  r.count[PB_Y] = 3;
  r.start[PB_X] = 5;
  r.count[PB_X] = 4;
  memset(&err, 0, sizeof err);
  rc = pb_dataset_read_region(ds, 0, &r, buf, 11, NULL, &err);
  snprintf(want, sizeof want, "%s: image 0: destination holds 11 bytes, the region needs 12", p);
  expect_error(fmt, "small region destination", rc, &err, PB_EINVAL, want);

  /* good reads still read the right pixels (the whole image's: imagefolder writes JPEG) */
  unsigned char whole[H * W];
  EXPECT_OK(pb_dataset_read(ds, 0, whole, sizeof whole, NULL, &err), &err);
  if (strcmp(fmt, "imagefolder") != 0) EXPECT(memcmp(whole, pixels, H * W) == 0);
  memset(buf, 0xee, sizeof buf);
  EXPECT_OK(pb_dataset_read_region(ds, 0, &r, buf, 12, NULL, &err), &err);
  for (int y = 0; y < 3; y++)
    for (int x = 0; x < 4; x++)
      if (buf[y * 4 + x] != whole[(2 + y) * W + 5 + x])
        EXPECT_FAIL("%s: region pixel (%d, %d) is %d, want %d", fmt, y, x, buf[y * 4 + x],
                    whole[(2 + y) * W + 5 + x]);
  pb_dataset_free(ds);
  printf("  %s: ok\n", fmt);
}

int main(void) {
  test_tmpdir(dir, sizeof dir);
  for (int k = 0; k < H * W; k++) pixels[k] = (unsigned char)(k * 7 + 3);
  int n = 0;
  for (int i = 0; i < pb_format_count(); i++) {
    const pb_format_info *f = pb_format_at(i);
    if (!f->can_read || !f->can_write) continue;
    check_format(f->name);
    n++;
  }
  CHECK(n >= 7);
  pb__remove_tree(dir);
  printf("region checks: %d formats\n", n);
  return check_failures() != 0;
}
