/* Round trips through ome-parquet, duckdb and oa-dataset for every variant, codec and dtype. */
#include <math.h>

#include "arrow_test_util.h"
#include "formats/format_internal.h"

static void make_meta(pb_image_meta *m, pb_dtype d, const int64_t shape[PB_NDIM], int i) {
  char name[64];
  snprintf(name, sizeof name, "img_%05d", i);
  pb_image_meta_init(m, name, d, shape);
  snprintf(m->id, sizeof m->id, "id-%d", i);
  m->physical_size[0] = 0.325;
  m->physical_size[1] = 0.325;
  m->physical_size[2] = shape[PB_Z] > 1 ? 1.5 : 0;
  snprintf(m->physical_unit[0], sizeof m->physical_unit[0], "µm");
  snprintf(m->physical_unit[1], sizeof m->physical_unit[1], "µm");
  if (shape[PB_Z] > 1) snprintf(m->physical_unit[2], sizeof m->physical_unit[2], "µm");
  m->n_channels = (int)shape[PB_C];
  for (int c = 0; c < m->n_channels; c++) {
    snprintf(m->channels[c].id, sizeof m->channels[c].id, "Channel:0:%d", c);
    snprintf(m->channels[c].name, sizeof m->channels[c].name, "ch%d", c);
    m->channels[c].emission_um = 0.5f + 0.01f * (float)c;
    m->channels[c].excitation_um = 0.45f;
    snprintf(m->channels[c].illumination, sizeof m->channels[c].illumination, "Epifluorescence");
    m->channels[c].color_rgba = 0xFF00FFFFu - (uint32_t)c;
  }
}

static void check_meta(const pb_image_meta *a, const pb_image_meta *b) {
  CHECK(strcmp(a->name, b->name) == 0);
  CHECK(strcmp(a->id, b->id) == 0);
  CHECK_EQ(a->dtype, b->dtype);
  for (int k = 0; k < PB_NDIM; k++) CHECK_EQ(a->shape[k], b->shape[k]);
  for (int k = 0; k < 3; k++) {
    CHECK(fabs(a->physical_size[k] - b->physical_size[k]) < 1e-6);
    CHECK(strcmp(a->physical_unit[k], b->physical_unit[k]) == 0);
  }
  CHECK_EQ(a->n_channels, b->n_channels);
  for (int c = 0; c < a->n_channels; c++) {
    CHECK(strcmp(a->channels[c].id, b->channels[c].id) == 0);
    CHECK(strcmp(a->channels[c].name, b->channels[c].name) == 0);
    CHECK(strcmp(a->channels[c].illumination, b->channels[c].illumination) == 0);
    CHECK(a->channels[c].emission_um == b->channels[c].emission_um);
    CHECK(a->channels[c].excitation_um == b->channels[c].excitation_um);
    CHECK_EQ(a->channels[c].color_rgba, b->channels[c].color_rgba);
  }
}

/* Writes n images, reads them back whole and as a region, compares. */
static void roundtrip(const char *dir, const char *format, const char *file, pb_dtype d,
                      const char *compression, const char *options, const int64_t shape[PB_NDIM],
                      const int64_t chunk[PB_NDIM], int n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  struct pb_error err = {{0}};
  pb_write_params params = PB_WRITE_PARAMS_DEFAULTS;
  params.compression = compression;
  params.options = options;
  if (chunk != NULL)
    for (int k = 0; k < PB_NDIM; k++) params.chunk[k] = chunk[k];
  pb_writer *w = NULL;
  CHECK_OK(pb_writer_new(path, format, &params, &w, &err), &err);
  pb_image_meta *metas = calloc((size_t)n, sizeof *metas);
  void **pix = calloc((size_t)n, sizeof *pix);
  for (int i = 0; i < n; i++) {
    make_meta(&metas[i], d, shape, i);
    pix[i] = malloc(pb_image_bytes(&metas[i]));
    fill_pixels(&metas[i], pix[i], (unsigned)i + 1);
    CHECK_OK(pb_writer_add(w, &metas[i], pix[i], &err), &err);
  }
  CHECK(access(path, F_OK) != 0); /* nothing visible before finish */
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);

  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  CHECK(strcmp(pb_dataset_format(ds), format) == 0);
  CHECK_EQ(pb_dataset_count(ds), n);
  for (int i = 0; i < n; i++) {
    pb_image_meta m;
    CHECK_OK(pb_dataset_meta(ds, i, &m, &err), &err);
    check_meta(&metas[i], &m);
    size_t nb = pb_image_bytes(&m);
    void *got = malloc(nb);
    memset(got, 0xAB, nb);
    pb_stage_times times;
    CHECK_OK(pb_dataset_read(ds, i, got, nb, &times, &err), &err);
    if (memcmp(got, pix[i], nb) != 0) {
      fprintf(stderr, "%s %s %s: image %d pixels differ\n", format, pb_dtype_name(d),
              compression ? compression : "-", i);
      exit(1);
    }
    /* A region in the middle: one t and c, part of Z, Y and X. */
    pb_region reg;
    for (int k = 0; k < PB_NDIM; k++) {
      reg.start[k] = shape[k] / 3;
      reg.count[k] = shape[k] - reg.start[k] - (shape[k] > 2 ? 1 : 0);
      if (reg.count[k] < 1) reg.count[k] = 1;
    }
    size_t es = pb_dtype_size(d), rb = es;
    for (int k = 0; k < PB_NDIM; k++) rb *= (size_t)reg.count[k];
    void *rgot = malloc(rb), *rwant = malloc(rb);
    int64_t zero[PB_NDIM] = {0, 0, 0, 0, 0};
    pb__copy_box(rwant, reg.start, reg.count, pix[i], zero, shape, es);
    CHECK_OK(pb_dataset_read_region(ds, i, &reg, rgot, rb, NULL, &err), &err);
    CHECK(memcmp(rgot, rwant, rb) == 0);
    free(rgot);
    free(rwant);
    free(got);
  }
  pb_dataset_free(ds);
  for (int i = 0; i < n; i++) free(pix[i]);
  free(pix);
  free(metas);
  printf("ok %-12s %-8s %-5s %-28s %lldx%lldx%lldx%lldx%lld x%d\n", format, pb_dtype_name(d),
         compression ? compression : "-", options ? options : "", (long long)shape[0],
         (long long)shape[1], (long long)shape[2], (long long)shape[3], (long long)shape[4], n);
}

int main(void) {
  char dir[256];
  tmp_dir(dir, sizeof dir, "rt");
  static const pb_dtype dtypes[] = {PB_UINT8, PB_UINT16, PB_UINT32, PB_INT16, PB_FLOAT32,
                                    PB_FLOAT64};
  const int64_t small[PB_NDIM] = {1, 1, 1, 20, 24};
  const int64_t multi[PB_NDIM] = {2, 3, 4, 33, 17};
  const int64_t chunk[PB_NDIM] = {1, 1, 2, 16, 8};
  const char *formats[][2] = {{"ome-parquet", "x.parquet"}, {"duckdb", "x.duckdb"},
                              {"oa-dataset", "x.oa"}};
  char file[128];
  int nf = 3;
  const char *only = getenv("PIPEBENCH_ARROW_ONLY");
  for (int f = 0; f < nf; f++) {
    if (only != NULL && strcmp(only, formats[f][0]) != 0) continue;
    int is_ds = f == 2;
    for (size_t di = 0; di < sizeof dtypes / sizeof dtypes[0]; di++) {
      snprintf(file, sizeof file, "%s-%d", formats[f][1], (int)di);
      roundtrip(dir, formats[f][0], file, dtypes[di], NULL, NULL, small, NULL, 3);
      snprintf(file, sizeof file, "m%s-%d", formats[f][1], (int)di);
      roundtrip(dir, formats[f][0], file, dtypes[di], is_ds ? "zstd" : "lz4",
                is_ds ? NULL : "variant=bytes", multi, chunk, 2);
    }
    static const char *codecs[] = {"none", "zstd", "lz4"};
    for (int c = 0; c < 3; c++) {
      if (is_ds && c == 2) continue;
      snprintf(file, sizeof file, "c%d%s", c, formats[f][1]);
      roundtrip(dir, formats[f][0], file, PB_UINT16, codecs[c], is_ds ? NULL : "variant=bytes",
                multi, NULL, 2);
    }
    snprintf(file, sizeof file, "n%s", formats[f][1]);
    roundtrip(dir, formats[f][0], file, PB_UINT16, NULL,
              is_ds ? NULL : "variant=numeric,parquet_codec=snappy,row_group_rows=2", multi, NULL,
              5);
  }
  pb__remove_tree(dir);
  return 0;
}
