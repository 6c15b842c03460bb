/* Read options reach every format through pb_dataset_open_opts: each format written once, then
 * read whole and by region with the defaults, with mapping off, O_DIRECT, the page reader and
 * TIFF's strip path off, and with mapping preferred; every way gives the pixels written. A URL
 * scheme the build cannot read is refused naming it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "pipebench/format.h"

enum { N = 3 };
static const int64_t SHAPE[PB_NDIM] = {1, 2, 3, 37, 53};

static uint16_t px(int64_t img, int64_t k) { return (uint16_t)((img * 7919 + k * 31 + (k >> 5)) & 0xFFFF); }

static void write_set(const char *path, const char *format, const char *compression) {
  struct pb_error err = {{0}};
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.compression = compression;
  pb_writer *w;
  CHECK_OK(pb_writer_new(path, format, &wp, &w, &err), &err);
  pb_image_meta m;
  pb_image_meta_init(&m, "img", PB_UINT16, SHAPE);
  int64_t n = pb_image_pixels(&m);
  uint16_t *p = malloc((size_t)n * 2);
  CHECK(p != NULL);
  for (int64_t i = 0; i < N; i++) {
    snprintf(m.name, sizeof m.name, "img_%02lld", (long long)i);
    for (int64_t k = 0; k < n; k++) p[k] = px(i, k);
    CHECK_OK(pb_writer_add(w, &m, p, &err), &err);
  }
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
  free(p);
}

static void check_set(const char *path, const char *format, const pb_read_options *o,
                      const char *how) {
  struct pb_error err = {{0}};
  pb_dataset *ds;
  CHECK_OK(pb_dataset_open_opts(path, format, o, &ds, &err), &err);
  CHECK_EQ(pb_dataset_count(ds), N);
  size_t n = 1;
  for (int k = 0; k < PB_NDIM; k++) n *= (size_t)SHAPE[k];
  uint16_t *buf = malloc(n * 2);
  CHECK(buf != NULL);
  pb_region r = {{0, 1, 1, 5, 7}, {1, 1, 2, 20, 31}};
  for (int64_t i = N - 1; i >= 0; i--) {
    CHECK_OK(pb_dataset_read(ds, i, buf, n * 2, NULL, &err), &err);
    for (size_t k = 0; k < n; k++)
      if (buf[k] != px(i, (int64_t)k)) {
        EXPECT_FAIL("%s (%s): image %lld pixel %zu is %u, want %u", format, how, (long long)i, k,
                    buf[k], px(i, (int64_t)k));
        break;
      }
    CHECK_OK(pb_dataset_read_region(ds, i, &r, buf, n * 2, NULL, &err), &err);
    size_t at = 0;
    for (int64_t c = 0; c < r.count[PB_C]; c++)
      for (int64_t z = 0; z < r.count[PB_Z]; z++)
        for (int64_t y = 0; y < r.count[PB_Y]; y++)
          for (int64_t x = 0; x < r.count[PB_X]; x++, at++) {
            int64_t k = (((r.start[PB_C] + c) * SHAPE[PB_Z] + r.start[PB_Z] + z) * SHAPE[PB_Y] +
                         r.start[PB_Y] + y) * SHAPE[PB_X] + r.start[PB_X] + x;
            if (buf[at] != px(i, k)) {
              EXPECT_FAIL("%s (%s): image %lld region pixel %zu wrong", format, how, (long long)i,
                          at);
              c = r.count[PB_C];
              z = r.count[PB_Z];
              y = r.count[PB_Y];
              break;
            }
          }
  }
  free(buf);
  pb_dataset_free(ds);
}

int main(void) {
  char dir[512];
  const char *t = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/pb_iofmt_XXXXXX", t != NULL && t[0] ? t : "/tmp");
  CHECK(mkdtemp(dir) != NULL);
  struct {
    const char *format, *name, *compression;
  } sets[] = {{"raw", "a.raw", NULL},
              {"tiff", "tiff", "none"},
              {"tiff", "tiff_z", "zstd"},
              {"ome-zarr", "zarr", "none"},
              {"ome-zarr", "zarr_z", NULL},
              {"oa-dataset", "oa", "none"},
              {"ome-parquet", "op.parquet", NULL}};
  pb_read_options modes[3] = {PB_READ_OPTIONS_DEFAULTS, PB_READ_OPTIONS_DEFAULTS,
                              PB_READ_OPTIONS_DEFAULTS};
  const char *how[3] = {"defaults", "no map, O_DIRECT, page reader and strips off",
                        "map preferred, 8 KiB blocks"};
  modes[1].map = 0;
  modes[1].direct = 1;
  modes[1].page_reader = 0;
  modes[1].tiff_strips = 0;
  modes[2].map = 1;
  modes[2].block_size = 8192;
  for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, sets[s].name);
    write_set(path, sets[s].format, sets[s].compression);
    for (int m = 0; m < 3; m++) check_set(path, sets[s].format, &modes[m], how[m]);
    check_set(path, NULL, NULL, "detected, no options");
    printf("ok %s (%s)\n", sets[s].format, sets[s].name);
  }
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  EXPECT_EQ(pb_dataset_open_opts("gopher://host/data.zarr", "ome-zarr", NULL, &ds, &err),
            PB_EUNSUPPORTED);
  EXPECT_CONTAINS(err.message, "gopher://");
  EXPECT(ds == NULL);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return check_failures() != 0;
}
