/* The raw backend: round trip of pixels and metadata, regions, detection, atomic writes, and
 * truncated or corrupt files giving PB_EFORMAT (never a crash). */
#include <fcntl.h>
#include <sys/stat.h>

#include "formats/format_internal.h"
#include "formats/raw/raw.h"
#include "loader/loader_test.h"

static char dir[512];

static void write_mixed(const char *path) {
  struct pb_error err = {{0}};
  pb_writer *wr = NULL;
  CHECK_OK(pb_writer_new(path, "raw", NULL, &wr, &err), &err);
  const pb_dtype dts[] = {PB_UINT8, PB_UINT16, PB_FLOAT32, PB_INT16, PB_FLOAT64};
  for (int i = 0; i < 5; i++) {
    int64_t shape[PB_NDIM] = {1 + (i == 4), 1 + i % 3, 1 + (i == 2), 7 + i, 5 + 2 * i};
    char name[32];
    snprintf(name, sizeof name, "image-%d.ome.tif", i);
    pb_image_meta m;
    pb_image_meta_init(&m, name, dts[i], shape);
    snprintf(m.id, sizeof m.id, "id-%d", i);
    m.physical_size[0] = 0.25 * (i + 1);
    m.physical_size[2] = 1.5;
    snprintf(m.physical_unit[0], sizeof m.physical_unit[0], "µm");
    m.n_channels = (int)shape[PB_C];
    for (int c = 0; c < m.n_channels; c++) {
      snprintf(m.channels[c].name, sizeof m.channels[c].name, "ch%d-%d", i, c);
      m.channels[c].emission_um = 0.5f + (float)c;
      m.channels[c].color_rgba = 0xff0000ffu + (uint32_t)c;
    }
    size_t nb = pb_image_bytes(&m);
    unsigned char *px = malloc(nb);
    for (size_t k = 0; k < nb; k++) px[k] = (unsigned char)(k * 31 + (size_t)i);
    CHECK_OK(pb_writer_add(wr, &m, px, &err), &err);
    free(px);
  }
  CHECK_OK(pb_writer_finish(wr, &err), &err);
  pb_writer_free(wr);
}

static void test_round_trip(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/mixed.raw", dir);
  write_mixed(path);
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err); /* detected by its magic */
  CHECK(strcmp(pb_dataset_format(ds), "raw") == 0);
  CHECK_EQ(pb_dataset_count(ds), 5);
  const pb_dtype dts[] = {PB_UINT8, PB_UINT16, PB_FLOAT32, PB_INT16, PB_FLOAT64};
  for (int i = 0; i < 5; i++) {
    pb_image_meta m;
    CHECK_OK(pb_dataset_meta(ds, i, &m, &err), &err);
    char name[32];
    snprintf(name, sizeof name, "image-%d.ome.tif", i);
    CHECK(strcmp(m.name, name) == 0);
    CHECK_EQ(m.dtype, dts[i]);
    CHECK_EQ(m.shape[PB_X], 5 + 2 * i);
    CHECK_EQ(m.shape[PB_C], 1 + i % 3);
    CHECK(m.physical_size[0] == 0.25 * (i + 1));
    CHECK(strcmp(m.physical_unit[0], "µm") == 0);
    CHECK_EQ(m.n_channels, m.shape[PB_C]);
    CHECK(m.channels[m.n_channels - 1].color_rgba == 0xff0000ffu + (uint32_t)(m.n_channels - 1));
    size_t nb = pb_image_bytes(&m);
    unsigned char *px = malloc(nb);
    pb_stage_times st;
    CHECK_OK(pb_dataset_read(ds, i, px, nb, &st, &err), &err);
    CHECK_EQ(st.bytes_read, nb);
    for (size_t k = 0; k < nb; k++) CHECK_EQ(px[k], (unsigned char)(k * 31 + (size_t)i));
    /* A region: the lower right 3x2 corner of the last plane. */
    pb_region r;
    pb__region_full(&r, m.shape);
    r.start[PB_T] = m.shape[PB_T] - 1;
    r.count[PB_T] = 1;
    r.start[PB_Y] = m.shape[PB_Y] - 3;
    r.count[PB_Y] = 3;
    r.start[PB_X] = m.shape[PB_X] - 2;
    r.count[PB_X] = 2;
    size_t es = pb_dtype_size(m.dtype);
    size_t rb = (size_t)(r.count[PB_C] * r.count[PB_Z] * 6) * es;
    unsigned char *reg = malloc(rb);
    CHECK_OK(pb_dataset_read_region(ds, i, &r, reg, rb, NULL, &err), &err);
    size_t o = 0;
    for (int64_t c = 0; c < r.count[PB_C]; c++)
      for (int64_t z = 0; z < r.count[PB_Z]; z++)
        for (int64_t y = r.start[PB_Y]; y < m.shape[PB_Y]; y++)
          for (int64_t x = r.start[PB_X]; x < m.shape[PB_X]; x++) {
            int64_t pix = (((r.start[PB_T] * m.shape[PB_C] + c) * m.shape[PB_Z] + z) * m.shape[PB_Y] + y) *
                              m.shape[PB_X] + x;
            CHECK(memcmp(reg + o, px + (size_t)pix * es, es) == 0);
            o += es;
          }
    free(reg);
    free(px);
  }
  /* Pixel blocks are 64-byte aligned inside the map. */
  pb_dataset_free(ds);
  void *st = NULL;
  CHECK_OK(pb__raw_open_mapped(path, &st, &err), &err);
  for (int64_t i = 0; i < 5; i++) CHECK_EQ((uintptr_t)pb__raw_pixels(st, i, NULL) % 64, 0);
  pb__format_raw.close(st);
}

static void truncate_copy(const char *src, const char *dst, off_t size) {
  void *data;
  size_t n;
  struct pb_error err;
  CHECK_OK(pb__read_file(src, &data, &n, &err), &err);
  CHECK_OK(pb__write_file(dst, data, (size_t)size < n ? (size_t)size : n, &err), &err);
  pb_free(data, n);
}

static void expect_format_error(const char *path) {
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  int rc = pb_dataset_open(path, "raw", &ds, &err);
  if (rc != PB_EFORMAT) fprintf(stderr, "rc %d: %s\n", rc, err.message);
  CHECK_EQ(rc, PB_EFORMAT);
  CHECK(ds == NULL);
  CHECK_CONTAINS(err.message, path);
}

static void test_truncated_and_corrupt(void) {
  char good[600], bad[600];
  snprintf(good, sizeof good, "%s/mixed.raw", dir);
  snprintf(bad, sizeof bad, "%s/bad.raw", dir);
  struct stat st;
  CHECK(stat(good, &st) == 0);
  const off_t sizes[] = {0, 10, 63, 64, 200, st.st_size / 2, st.st_size - 1};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    truncate_copy(good, bad, sizes[k]);
    expect_format_error(bad);
  }
  /* Header claims the right size, but an index record points past the end. */
  void *data;
  size_t n;
  struct pb_error err;
  CHECK_OK(pb__read_file(good, &data, &n, &err), &err);
  unsigned char *d = data;
  uint64_t index_off;
  memcpy(&index_off, d + 24, 8);
  uint64_t far = (uint64_t)n + 64;
  memcpy(d + index_off + 512 * 2, &far, 8); /* image 2's pixel offset */
  CHECK_OK(pb__write_file(bad, d, n, &err), &err);
  pb_free(data, n);
  expect_format_error(bad);
  /* A shape that disagrees with the byte count. */
  CHECK_OK(pb__read_file(good, &data, &n, &err), &err);
  d = data;
  int64_t huge = (int64_t)1 << 40;
  memcpy(d + index_off + 512 * 3 + 32 + 8 * 4, &huge, 8);
  CHECK_OK(pb__write_file(bad, d, n, &err), &err);
  pb_free(data, n);
  expect_format_error(bad);
}

static int count_entries(const char *path) {
  char **names;
  size_t n;
  struct pb_error err;
  CHECK_OK(pb__list_dir(path, &names, &n, &err), &err);
  pb__free_names(names, n);
  return (int)n;
}

static void test_atomic_writer(void) {
  char sub[600], path[700];
  snprintf(sub, sizeof sub, "%s/atomic", dir);
  struct pb_error err = {{0}};
  CHECK_OK(pb__mkdirs(sub, &err), &err);
  snprintf(path, sizeof path, "%s/x.raw", sub);
  pb_writer *wr = NULL;
  CHECK_OK(pb_writer_new(path, "raw", NULL, &wr, &err), &err);
  int64_t shape[PB_NDIM] = {1, 1, 1, 4, 4};
  pb_image_meta m;
  pb_image_meta_init(&m, "a", PB_UINT8, shape);
  unsigned char px[16] = {0};
  CHECK_OK(pb_writer_add(wr, &m, px, &err), &err);
  CHECK_EQ(access(path, F_OK), -1); /* nothing visible before finish */
  pb_writer_free(wr);               /* abandoned: the temporary file goes too */
  CHECK_EQ(count_entries(sub), 0);
  /* An empty dataset is valid. */
  CHECK_OK(pb_writer_new(path, "raw", NULL, &wr, &err), &err);
  CHECK_OK(pb_writer_finish(wr, &err), &err);
  pb_writer_free(wr);
  CHECK_EQ(count_entries(sub), 1);
  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  CHECK_EQ(pb_dataset_count(ds), 0);
  pb_dataset_free(ds);
}

/* A path whose folders do not exist yet: they are made, as the folder formats make theirs;
 * one under a file is refused with the folder named. */
static void test_missing_parents(void) {
  char path[700];
  snprintf(path, sizeof path, "%s/new/deeper/x.raw", dir);
  struct pb_error err = {{0}};
  pb_writer *wr = NULL;
  CHECK_OK(pb_writer_new(path, "raw", NULL, &wr, &err), &err);
  int64_t shape[PB_NDIM] = {1, 1, 1, 2, 3};
  pb_image_meta m;
  pb_image_meta_init(&m, "a", PB_UINT8, shape);
  unsigned char px[6] = {1, 2, 3, 4, 5, 6};
  CHECK_OK(pb_writer_add(wr, &m, px, &err), &err);
  CHECK_OK(pb_writer_finish(wr, &err), &err);
  pb_writer_free(wr);
  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  CHECK_EQ(pb_dataset_count(ds), 1);
  pb_dataset_free(ds);
  /* a parent that is a file */
  char under[800];
  snprintf(under, sizeof under, "%s/sub/y.raw", path);
  wr = NULL;
  int rc = pb_writer_new(under, "raw", NULL, &wr, &err);
  CHECK(rc != PB_OK);
  CHECK(wr == NULL);
  CHECK_CONTAINS(err.message, path);
}

int main(void) {
  test_tmpdir(dir, sizeof dir);
  test_round_trip();
  test_truncated_and_corrupt();
  test_atomic_writer();
  test_missing_parents();
  pb__remove_tree(dir);
  printf("raw format: ok\n");
  return 0;
}
