/* ome-zarr: write with pipebench, read back; every codec, v2/v3/sharded, dtypes, edge chunks,
 * both separators, regions, metadata. */
#include <math.h>

#include "zarr_test.h"

typedef struct cfg {
  const char *options;
  const char *compression;
  int64_t chunk[PB_NDIM];
  pb_dtype dtype;
  int64_t shape[PB_NDIM];
} cfg;

static void fill_pixels(void *p, const pb_image_meta *m, uint64_t seed) {
  pb_rng rng;
  pb_rng_init(&rng, seed);
  int64_t n = pb_image_pixels(m);
  for (int64_t i = 0; i < n; i++) {
    /* smooth-ish data with noise, so compressors have something to do */
    uint64_t r = pb_rng_next(&rng);
    double v = (double)(i % 97) + (double)(r % 7);
    switch (m->dtype) {
    case PB_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case PB_UINT16: ((uint16_t *)p)[i] = (uint16_t)(v * 300); break;
    case PB_UINT32: ((uint32_t *)p)[i] = (uint32_t)(r >> 40); break;
    case PB_INT16: ((int16_t *)p)[i] = (int16_t)(v * 100 - 5000); break;
    case PB_FLOAT32: ((float *)p)[i] = (float)(v * 0.25 - 3.0); break;
    case PB_FLOAT64: ((double *)p)[i] = v / 3.0; break;
    default: break;
    }
  }
}

static void check_regions(pb_dataset *ds, int64_t idx, const pb_image_meta *m, const void *pix,
                          uint64_t seed) {
  struct pb_error err = {""};
  pb_rng rng;
  pb_rng_init(&rng, seed);
  size_t es = pb_dtype_size(m->dtype);
  static const int64_t zero[PB_NDIM] = {0, 0, 0, 0, 0};
  for (int trial = 0; trial < 12; trial++) {
    pb_region r;
    size_t n = es;
    for (int k = 0; k < PB_NDIM; k++) {
      r.start[k] = (int64_t)pb_rng_below(&rng, (uint64_t)m->shape[k]);
      r.count[k] = 1 + (int64_t)pb_rng_below(&rng, (uint64_t)(m->shape[k] - r.start[k]));
      n *= (size_t)r.count[k];
    }
    if (trial == 0) pb__region_full(&r, m->shape), n = pb_image_bytes(m);
    unsigned char *want = malloc(n), *got = malloc(n);
    memset(got, 0xAB, n);
    pb__copy_box(want, r.start, r.count, pix, zero, m->shape, es);
    pb_stage_times t;
    CHECK_OK(pb_dataset_read_region(ds, idx, &r, got, n, &t, &err), &err);
    if (memcmp(want, got, n) != 0)
      FAIL("region %d of image %lld differs (start %lld,%lld,%lld,%lld,%lld count "
              "%lld,%lld,%lld,%lld,%lld)",
              trial, (long long)idx, (long long)r.start[0], (long long)r.start[1],
              (long long)r.start[2], (long long)r.start[3], (long long)r.start[4],
              (long long)r.count[0], (long long)r.count[1], (long long)r.count[2],
              (long long)r.count[3], (long long)r.count[4]);
    CHECK_EQ(t.bytes_decoded, n);
    free(want);
    free(got);
  }
}

static void roundtrip(const cfg *c, int ci) {
  char dir[256], path[512];
  zt_tmpdir(dir, sizeof dir, "rt");
  snprintf(path, sizeof path, "%s/ds", dir);
  struct pb_error err = {""};
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.compression = c->compression;
  wp.options = c->options;
  memcpy(wp.chunk, c->chunk, sizeof wp.chunk);
  pb_writer *w;
  CHECK_OK(pb_writer_new(path, "ome-zarr", &wp, &w, &err), &err);
  pb_image_meta m[2];
  void *pix[2];
  for (int i = 0; i < 2; i++) {
    pb_image_meta_init(&m[i], i == 0 ? "first.zarr" : "not-a-zarr-name", c->dtype, c->shape);
    m[i].physical_size[0] = 0.325;
    m[i].physical_size[1] = 0.5;
    m[i].physical_size[2] = i == 0 ? 2.0 : 0;
    strcpy(m[i].physical_unit[0], "µm");
    strcpy(m[i].physical_unit[1], "nm");
    m[i].n_channels = (int)c->shape[PB_C];
    for (int ch = 0; ch < m[i].n_channels; ch++) {
      snprintf(m[i].channels[ch].name, sizeof m[i].channels[ch].name, "ch%d-%d", i, ch);
      m[i].channels[ch].color_rgba = 0x00FF00FFu + (uint32_t)ch * 0x100u;
    }
    pix[i] = malloc(pb_image_bytes(&m[i]));
    fill_pixels(pix[i], &m[i], (uint64_t)(ci * 10 + i));
    CHECK_OK(pb_writer_add(w, &m[i], pix[i], &err), &err);
  }
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);

  pb_dataset *ds;
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  CHECK(strcmp(pb_dataset_format(ds), "ome-zarr") == 0);
  CHECK_EQ(pb_dataset_count(ds), 2);
  /* name order: "first.zarr" < "img_00001.zarr" */
  const char *names[2] = {"first.zarr", "img_00001.zarr"};
  for (int i = 0; i < 2; i++) {
    pb_image_meta got;
    CHECK_OK(pb_dataset_meta(ds, i, &got, &err), &err);
    if (strcmp(got.name, names[i]) != 0) FAIL("name %s != %s", got.name, names[i]);
    CHECK_EQ(got.dtype, c->dtype);
    for (int k = 0; k < PB_NDIM; k++) CHECK_EQ(got.shape[k], c->shape[k]);
    CHECK(fabs(got.physical_size[0] - 0.325) < 1e-12);
    CHECK(strcmp(got.physical_unit[0], "µm") == 0);
    CHECK(strcmp(got.physical_unit[1], "nm") == 0);
    CHECK(fabs(got.physical_size[2] - (i == 0 ? 2.0 : 0.0)) < 1e-12);
    CHECK_EQ(got.n_channels, c->shape[PB_C]);
    char want_name[32];
    snprintf(want_name, sizeof want_name, "ch%d-%d", i, got.n_channels - 1);
    if (strcmp(got.channels[got.n_channels - 1].name, want_name) != 0)
      FAIL("channel name %s != %s", got.channels[got.n_channels - 1].name, want_name);
    CHECK_EQ(got.channels[0].color_rgba, 0x00FF00FFu);
    size_t n = pb_image_bytes(&got);
    void *buf = malloc(n);
    pb_stage_times t;
    CHECK_OK(pb_dataset_read(ds, i, buf, n, &t, &err), &err);
    if (memcmp(buf, pix[i], n) != 0) FAIL("config %d image %d: pixels differ", ci, i);
    CHECK_EQ(t.bytes_decoded, n);
    CHECK(t.bytes_read > 0);
    free(buf);
    check_regions(ds, i, &m[i], pix[i], (uint64_t)ci * 7 + (uint64_t)i);
  }
  pb_dataset_free(ds);

  /* One image group opened on its own. */
  char one[600];
  snprintf(one, sizeof one, "%s/first.zarr", path);
  CHECK_OK(pb_dataset_open(one, "ome-zarr", &ds, &err), &err);
  CHECK_EQ(pb_dataset_count(ds), 1);
  size_t n = pb_image_bytes(&m[0]);
  void *buf = malloc(n);
  CHECK_OK(pb_dataset_read(ds, 0, buf, n, NULL, &err), &err);
  CHECK(memcmp(buf, pix[0], n) == 0);
  free(buf);
  pb_dataset_free(ds);
  for (int i = 0; i < 2; i++) free(pix[i]);
  pb__remove_tree(dir);
}

static void writer_lifecycle(void) {
  char dir[256], path[512], other[512];
  zt_tmpdir(dir, sizeof dir, "wl");
  snprintf(path, sizeof path, "%s/ds", dir);
  struct pb_error err = {""};
  int64_t shape[PB_NDIM] = {1, 1, 1, 8, 8};
  pb_image_meta m;
  pb_image_meta_init(&m, "x", PB_UINT8, shape);
  unsigned char pix[64] = {1, 2, 3};
  pb_writer *w;
  /* free without finish: nothing left behind */
  CHECK_OK(pb_writer_new(path, "ome-zarr", NULL, &w, &err), &err);
  CHECK_OK(pb_writer_add(w, &m, pix, &err), &err);
  pb_writer_free(w);
  char **names;
  size_t count;
  CHECK_OK(pb__list_dir(dir, &names, &count, &err), &err);
  CHECK_EQ(count, 0);
  pb__free_names(names, count);
  /* write, then replace with a second dataset */
  for (int round = 0; round < 2; round++) {
    CHECK_OK(pb_writer_new(path, "ome-zarr", NULL, &w, &err), &err);
    for (int i = 0; i <= round; i++) CHECK_OK(pb_writer_add(w, &m, pix, &err), &err);
    CHECK_OK(pb_writer_finish(w, &err), &err);
    pb_writer_free(w);
    pb_dataset *ds;
    CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
    CHECK_EQ(pb_dataset_count(ds), round + 1);
    pb_dataset_free(ds);
  }
  /* never replace a folder that is not ours */
  snprintf(other, sizeof other, "%s/mine", dir);
  CHECK_OK(pb__mkdirs(other, &err), &err);
  char f[600];
  snprintf(f, sizeof f, "%s/notes.txt", other);
  CHECK_OK(pb__write_file(f, "hi", 2, &err), &err);
  CHECK_EQ(pb_writer_new(other, "ome-zarr", NULL, &w, &err), PB_EINVAL);
  /* bad options */
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  const char *bad_opts[] = {"zarr=4", "separator=-", "shard=1x1x1x2x2", "zarr=3,shard=1x2",
                            "shuffle=x", "colour=red"};
  for (size_t i = 0; i < sizeof bad_opts / sizeof bad_opts[0]; i++) {
    wp.options = bad_opts[i];
    int rc = pb_writer_new(path, "ome-zarr", &wp, &w, &err);
    if (rc != PB_EINVAL) FAIL("options %s gave %d", bad_opts[i], rc);
  }
  wp.options = NULL;
  wp.compression = "lz5";
  CHECK_EQ(pb_writer_new(path, "ome-zarr", &wp, &w, &err), PB_EINVAL);
  wp.compression = "zlib";
  wp.options = "zarr=3";
  CHECK_EQ(pb_writer_new(path, "ome-zarr", &wp, &w, &err), PB_EINVAL);
  pb__remove_tree(dir);
}

int main(void) {
  static const cfg cfgs[] = {
      {NULL, NULL, {0}, PB_UINT16, {1, 2, 3, 50, 70}},
      {"separator=.", "zstd", {1, 1, 2, 16, 20}, PB_UINT8, {2, 1, 5, 33, 47}},
      {NULL, "gzip", {1, 2, 3, 8, 8}, PB_FLOAT32, {1, 3, 4, 31, 29}},
      {"separator=/", "zlib", {1, 1, 1, 13, 64}, PB_UINT16, {1, 1, 2, 40, 40}},
      {NULL, "none", {2, 1, 1, 7, 9}, PB_UINT8, {3, 1, 2, 20, 20}},
      {"shuffle=bit", "blosc-zstd", {1, 1, 1, 16, 16}, PB_FLOAT32, {1, 2, 1, 33, 35}},
      {"shuffle=none", "blosc-lz4hc", {1, 1, 2, 10, 10}, PB_INT16, {1, 1, 3, 25, 25}},
      {NULL, "blosc-blosclz", {0}, PB_UINT32, {1, 1, 1, 30, 30}},
      {"shuffle=byte", "blosc-zlib", {1, 1, 1, 9, 11}, PB_FLOAT64, {1, 2, 2, 19, 23}},
      {"zarr=3", NULL, {1, 1, 2, 16, 16}, PB_UINT16, {1, 2, 3, 40, 45}},
      {"zarr=3,separator=.", "zstd", {1, 1, 1, 8, 32}, PB_FLOAT32, {2, 1, 2, 17, 40}},
      {"zarr=3", "gzip", {1, 1, 1, 11, 11}, PB_UINT8, {1, 3, 1, 30, 30}},
      {"zarr=3", "none", {0}, PB_INT16, {1, 1, 2, 12, 12}},
      {"zarr=3,shard=1x1x2x2x2", "zstd", {1, 1, 1, 8, 8}, PB_UINT16, {1, 2, 5, 37, 41}},
      {"zarr=3,shard=1x2x1x3x1", "none", {1, 1, 2, 5, 16}, PB_UINT32, {1, 3, 3, 16, 30}},
      {"zarr=3,shard=1x1x1x4x4,separator=.,shuffle=bit", "blosc-lz4", {1, 1, 1, 6, 6},
       PB_FLOAT64, {1, 1, 1, 20, 26}},
  };
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) roundtrip(&cfgs[i], (int)i);
  writer_lifecycle();
  printf("ome-zarr round trip: %zu configurations ok\n", sizeof cfgs / sizeof cfgs[0]);
  return 0;
}
