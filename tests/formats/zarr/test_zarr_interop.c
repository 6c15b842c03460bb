/* ome-zarr interop: zarr-python 2.13 writes v2, pipebench reads; pipebench writes v2, zarr-python
 * reads; a hand-built v3 dataset (numpy + zlib + json, see zarr_interop.py) read by pipebench. */
#include <math.h>
#include <sys/wait.h>

#include "zarr_test.h"

static int run_py(const char *args) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s %s/tests/formats/zarr/zarr_interop.py %s", PIPEBENCH_PYTHON,
           PIPEBENCH_SOURCE_DIR, args);
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Reads every image of root and compares with root.manifest. */
static void check_manifest(const char *root) {
  char mpath[600];
  snprintf(mpath, sizeof mpath, "%s.manifest", root);
  FILE *f = fopen(mpath, "r");
  if (f == NULL) FAIL("%s: cannot open", mpath);
  struct pb_error err = {""};
  pb_dataset *ds;
  CHECK_OK(pb_dataset_open(root, NULL, &ds, &err), &err);
  CHECK(strcmp(pb_dataset_format(ds), "ome-zarr") == 0);
  char name[256], dtype[32];
  long long shape[5];
  unsigned long crc;
  double phys;
  int nch, i = 0;
  while (fscanf(f, "%255s %31s %lld %lld %lld %lld %lld %lu %lf %d", name, dtype, &shape[0],
                &shape[1], &shape[2], &shape[3], &shape[4], &crc, &phys, &nch) == 10) {
    pb_image_meta m;
    CHECK_OK(pb_dataset_meta(ds, i, &m, &err), &err);
    if (strcmp(m.name, name) != 0) FAIL("image %d: name %s != %s", i, m.name, name);
    if (strcmp(pb_dtype_name(m.dtype), dtype) != 0)
      FAIL("%s: dtype %s != %s", name, pb_dtype_name(m.dtype), dtype);
    for (int k = 0; k < PB_NDIM; k++) CHECK_EQ(m.shape[k], shape[k]);
    if (fabs(m.physical_size[0] - phys) > 1e-9)
      FAIL("%s: physical x %g != %g", name, m.physical_size[0], phys);
    CHECK_EQ(m.n_channels, nch);
    size_t n = pb_image_bytes(&m);
    unsigned char *buf = malloc(n);
    pb_stage_times t;
    CHECK_OK(pb_dataset_read(ds, i, buf, n, &t, &err), &err);
    uint32_t got = pb_image_crc32(&m, buf);
    if (got != (uint32_t)crc) FAIL("%s: pixel crc %u != %lu", name, got, crc);
    /* regions agree with the full image */
    pb_rng rng;
    pb_rng_init(&rng, (uint64_t)i);
    static const int64_t zero[PB_NDIM] = {0, 0, 0, 0, 0};
    for (int trial = 0; trial < 8; trial++) {
      pb_region r;
      size_t rn = pb_dtype_size(m.dtype);
      for (int k = 0; k < PB_NDIM; k++) {
        r.start[k] = (int64_t)pb_rng_below(&rng, (uint64_t)m.shape[k]);
        r.count[k] = 1 + (int64_t)pb_rng_below(&rng, (uint64_t)(m.shape[k] - r.start[k]));
        rn *= (size_t)r.count[k];
      }
      unsigned char *want = malloc(rn), *reg = malloc(rn);
      pb__copy_box(want, r.start, r.count, buf, zero, m.shape, pb_dtype_size(m.dtype));
      CHECK_OK(pb_dataset_read_region(ds, i, &r, reg, rn, NULL, &err), &err);
      if (memcmp(want, reg, rn) != 0) FAIL("%s: region %d differs", name, trial);
      free(want);
      free(reg);
    }
    free(buf);
    i++;
  }
  fclose(f);
  CHECK_EQ(pb_dataset_count(ds), i);
  CHECK(i > 0);
  pb_dataset_free(ds);
  printf("%s: %d images read identically\n", root, i);
}

/* pipebench writes a v2 dataset with one codec setting, plus a manifest for zarr_interop.py. */
static void pb_write(const char *root, const char *compression, const char *options,
                     const int64_t chunk[PB_NDIM]) {
  struct pb_error err = {""};
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.compression = compression;
  wp.options = options;
  if (chunk != NULL) memcpy(wp.chunk, chunk, sizeof wp.chunk);
  pb_writer *w;
  CHECK_OK(pb_writer_new(root, "ome-zarr", &wp, &w, &err), &err);
  char mpath[600];
  snprintf(mpath, sizeof mpath, "%s.manifest", root);
  FILE *f = fopen(mpath, "w");
  static const struct {
    pb_dtype dt;
    int64_t shape[PB_NDIM];
  } imgs[] = {{PB_UINT16, {1, 2, 3, 37, 41}}, {PB_UINT8, {2, 1, 1, 30, 20}},
              {PB_FLOAT32, {1, 1, 2, 19, 33}}};
  for (int i = 0; i < 3; i++) {
    pb_image_meta m;
    pb_image_meta_init(&m, NULL, imgs[i].dt, imgs[i].shape);
    size_t n = pb_image_bytes(&m);
    unsigned char *pix = malloc(n);
    pb_rng rng;
    pb_rng_init(&rng, (uint64_t)i + 100);
    for (size_t b = 0; b < n; b++) pix[b] = (unsigned char)(pb_rng_below(&rng, 16) + b % 64);
    if (imgs[i].dt == PB_FLOAT32)
      for (size_t b = 0; b + 4 <= n; b += 4) ((float *)pix)[b / 4] = (float)(b % 1000) * 0.5f;
    CHECK_OK(pb_writer_add(w, &m, pix, &err), &err);
    fprintf(f, "img_%05d.zarr %s %lld %lld %lld %lld %lld %u 0 0\n", i, pb_dtype_name(m.dtype),
            (long long)m.shape[0], (long long)m.shape[1], (long long)m.shape[2],
            (long long)m.shape[3], (long long)m.shape[4], pb_image_crc32(&m, pix));
    free(pix);
  }
  fclose(f);
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
}

int main(void) {
  char dir[256], p[512], args[4096];
  zt_tmpdir(dir, sizeof dir, "interop");

  snprintf(p, sizeof p, "%s/py_v2", dir);
  snprintf(args, sizeof args, "v2write %s", p);
  CHECK_EQ(run_py(args), 0);
  check_manifest(p);

  snprintf(p, sizeof p, "%s/hand_v3", dir);
  snprintf(args, sizeof args, "v3write %s", p);
  CHECK_EQ(run_py(args), 0);
  check_manifest(p);

  static const int64_t odd[PB_NDIM] = {1, 1, 2, 16, 10};
  static const struct {
    const char *name, *compression, *options;
    const int64_t *chunk;
  } w[] = {{"pb_default", NULL, NULL, NULL},
           {"pb_blosc_bit_dot", "blosc-lz4", "shuffle=bit,separator=.", odd},
           {"pb_blosc_zstd", "blosc-zstd", "shuffle=none", odd},
           {"pb_zstd", "zstd", "separator=.", odd},
           {"pb_gzip", "gzip", NULL, odd},
           {"pb_zlib", "zlib", NULL, NULL},
           {"pb_none", "none", "separator=.", odd}};
  int len = snprintf(args, sizeof args, "check");
  for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, w[i].name);
    pb_write(p, w[i].compression, w[i].options, w[i].chunk);
    check_manifest(p);
    len += snprintf(args + len, sizeof args - (size_t)len, " %s", p);
  }
  CHECK_EQ(run_py(args), 0);
  pb__remove_tree(dir);
  return 0;
}
