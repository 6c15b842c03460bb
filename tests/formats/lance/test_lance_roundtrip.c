/* The lance backend against the Lance engine: every layout written by lancedb through the
 * helper reads back with the same pixels (CRC-32 and bytes), metadata and region reads; the
 * engine's own timings come back for every offset. Skips (77) where the engine is not
 * installed, saying why. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "common/fs.h"
#include "formats/lance/lance.h"
#include "pipebench/format.h"

enum { N_IMAGES = 4 };

static void fill(pb_image_meta *m, void *px, int i, pb_dtype d) {
  /* odd sizes: edge chunks smaller than the grid */
  int64_t shape[PB_NDIM] = {1, 2, 3, 37 + i, 45};
  char name[32];
  snprintf(name, sizeof name, "img_%05d", i);
  pb_image_meta_init(m, name, d, shape);
  snprintf(m->id, sizeof m->id, "id-%d", i);
  m->physical_size[0] = 0.25;
  m->physical_size[1] = 0.5;
  m->physical_size[2] = 2.0;
  snprintf(m->physical_unit[0], sizeof m->physical_unit[0], "µm");
  m->n_channels = 2;
  snprintf(m->channels[0].name, sizeof m->channels[0].name, "DNA");
  m->channels[1].color_rgba = 0x00FF00FFu;
  m->channels[1].emission_um = 0.5f;
  size_t n = pb_image_bytes(m);
  uint32_t s = 2463534242u + (uint32_t)i;
  for (size_t k = 0; k < n; k++) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    ((unsigned char *)px)[k] = (unsigned char)s;
  }
}

static void write_and_check(const char *dir, const char *layout, pb_dtype d) {
  char path[512], opts[64];
  snprintf(path, sizeof path, "%s/%s-%s.lance", dir, layout, pb_dtype_name(d));
  snprintf(opts, sizeof opts, "layout=%s", layout);
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.options = opts;
  wp.chunk[PB_Y] = 16; /* several chunks per plane */
  wp.chunk[PB_X] = 32;
  struct pb_error err = {{0}};
  pb_writer *w = NULL;
  CHECK_OK(pb_writer_new(path, "lance", &wp, &w, &err), &err);
  pb_image_meta m[N_IMAGES];
  void *px[N_IMAGES];
  uint32_t crc[N_IMAGES];
  for (int i = 0; i < N_IMAGES; i++) {
    px[i] = malloc(1 << 20);
    CHECK(px[i] != NULL);
    fill(&m[i], px[i], i, d);
    crc[i] = pb_image_crc32(&m[i], px[i]);
    CHECK_OK(pb_writer_add(w, &m[i], px[i], &err), &err);
  }
  struct stat st;
  EXPECT(stat(path, &st) != 0); /* nothing at the path before finish */
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);

  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err); /* detected by probe */
  EXPECT_STREQ(pb_dataset_format(ds), "lance");
  CHECK_EQ(pb_dataset_count(ds), N_IMAGES);
  void *back = malloc(1 << 20);
  CHECK(back != NULL);
  for (int i = 0; i < N_IMAGES; i++) {
    pb_image_meta r;
    CHECK_OK(pb_dataset_meta(ds, i, &r, &err), &err);
    for (int k = 0; k < PB_NDIM; k++) EXPECT_EQ(r.shape[k], m[i].shape[k]);
    EXPECT_EQ(r.dtype, d);
    if (strcmp(layout, "bytes") != 0) {
      EXPECT_STREQ(r.name, m[i].name);
      EXPECT_NEAR(r.physical_size[2], 2.0, 1e-6);
      EXPECT_STREQ(r.physical_unit[0], "µm");
      EXPECT_EQ(r.n_channels, 2);
      EXPECT_STREQ(r.channels[0].name, "DNA");
      EXPECT_EQ(r.channels[1].color_rgba, 0x00FF00FFu);
    }
    EXPECT_STREQ(r.id, m[i].id);
    pb_stage_times t = {0};
    memset(back, 0xAB, 1 << 20);
    CHECK_OK(pb_dataset_read(ds, i, back, 1 << 20, &t, &err), &err);
    EXPECT_EQ(pb_image_crc32(&r, back), crc[i]);
    EXPECT(memcmp(back, px[i], pb_image_bytes(&m[i])) == 0);
    EXPECT_EQ(t.bytes_read, (int64_t)pb_image_bytes(&m[i]));
    /* a crop: channel 1, z 1..2, rows 5..14, columns 30..44 */
    pb_region g = {{0, 1, 1, 5, 30}, {1, 1, 2, 10, 15}};
    unsigned char crop[2 * 10 * 15 * 8];
    CHECK_OK(pb_dataset_read_region(ds, i, &g, crop, sizeof crop, NULL, &err), &err);
    size_t es = pb_dtype_size(d), o = 0;
    for (int z = 1; z < 3; z++)
      for (int y = 5; y < 15; y++) {
        size_t src = (size_t)((((1 * 3 + z) * m[i].shape[PB_Y] + y) * 45 + 30)) * es;
        EXPECT(memcmp(crop + o, (unsigned char *)px[i] + src, 15 * es) == 0);
        o += 15 * es;
      }
  }
  struct pb_error e2 = {{0}};
  EXPECT(pb_dataset_read(ds, N_IMAGES, back, 1 << 20, NULL, &e2) != PB_OK);
  pb_dataset_free(ds);

  /* the engine's own timings over an order: one per offset, or one per batch */
  pb__lance *l = NULL;
  CHECK_OK(pb__lance_open(path, NULL, &l, &err), &err);
  int64_t order[] = {3, 0, 2, 1, 1, 3, 0};
  int64_t *ns = NULL, bytes = 0;
  size_t calls = 0;
  CHECK_OK(pb__lance_take_times(l, order, 7, 0, &ns, &calls, &bytes, &err), &err);
  EXPECT_EQ(calls, 7);
  for (size_t k = 0; k < calls; k++) EXPECT(ns[k] > 0);
  EXPECT(bytes > 0);
  free(ns);
  CHECK_OK(pb__lance_take_times(l, order, 7, 3, &ns, &calls, &bytes, &err), &err);
  EXPECT_EQ(calls, 3);
  free(ns);
  pb__lance_free(l);
  for (int i = 0; i < N_IMAGES; i++) free(px[i]);
  free(back);
}

int main(void) {
  char engine[64];
  struct pb_error err = {{0}};
  if (pb__lance_engine(engine, sizeof engine, &err) != PB_OK) {
    printf("skipped: %s\n", err.message);
    return 77;
  }
  printf("engine: %s\n", engine);
  char dir[] = "/tmp/pb-lance-test-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  write_and_check(dir, "chunks", PB_UINT16);
  write_and_check(dir, "planes", PB_UINT16);
  write_and_check(dir, "bytes", PB_UINT16);
  write_and_check(dir, "chunks", PB_FLOAT32);
  write_and_check(dir, "bytes", PB_UINT8);
  pb__remove_tree(dir);
  return check_failures() != 0;
}
