/* tiff backend against tifffile (Debian python3-tifffile, run through PIPEBENCH_PYTHON):
 * tifffile writes, pipebench reads the same pixels; pipebench writes, tifffile reads the same
 * pixels and the shape the OME-XML implies. */
#include "tiff_test.h"

long pb__tiff_direct_reads(void);

static void *read_all(const char *path, size_t *size) {
  FILE *fp = fopen(path, "rb");
  if (fp == NULL) {
    fprintf(stderr, "cannot open %s\n", path);
    exit(1);
  }
  fseek(fp, 0, SEEK_END);
  long n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  void *buf = malloc((size_t)n + 1);
  CHECK(buf != NULL && fread(buf, 1, (size_t)n, fp) == (size_t)n);
  fclose(fp);
  *size = (size_t)n;
  return buf;
}

static void run_python(const char *mode, const char *ds, const char *exp) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' '%s/tests/formats/tiff/interop.py' %s '%s' '%s'", PIPEBENCH_PYTHON,
           PIPEBENCH_SOURCE_DIR, mode, ds, exp);
  int rc = system(cmd);
  if (rc != 0) {
    fprintf(stderr, "python side failed (%d): %s\n", rc, cmd);
    exit(1);
  }
}

/* Reads every file tifffile wrote and compares with tifffile's pixels, whole and a region.
 * Run twice: with the cached layout for uncompressed strips (direct) and through libtiff only;
 * both must give tifffile's bytes. */
static void read_tifffile_output(const char *root, int direct) {
  char ds_path[512], exp[512];
  snprintf(ds_path, sizeof ds_path, "%s/from_tifffile", root);
  snprintf(exp, sizeof exp, "%s/expect_in", root);
  if (direct) run_python("write", ds_path, exp);
  setenv("PB_TIFF_DIRECT", direct ? "1" : "0", 1);
  long direct0 = pb__tiff_direct_reads();
  struct pb_error err = {{0}};
  pb_dataset *ds;
  CHECK_OK(pb_dataset_open(ds_path, NULL, &ds, &err), &err);
  CHECK(strcmp(pb_dataset_format(ds), "tiff") == 0);
  int64_t n = pb_dataset_count(ds);
  CHECK_EQ(n, 10);
  for (int64_t i = 0; i < n; i++) {
    pb_image_meta m;
    CHECK_OK(pb_dataset_meta(ds, i, &m, &err), &err);
    char file[1024];
    snprintf(file, sizeof file, "%s/%s.shape", exp, m.name);
    FILE *fp = fopen(file, "r");
    CHECK(fp != NULL);
    long long s[5];
    char dt[16];
    CHECK(fscanf(fp, "%lld %lld %lld %lld %lld %15s", &s[0], &s[1], &s[2], &s[3], &s[4], dt) == 6);
    fclose(fp);
    for (int k = 0; k < PB_NDIM; k++) {
      if (m.shape[k] != s[k]) {
        fprintf(stderr, "%s: axis %d is %lld, tifffile says %lld\n", m.name, k,
                (long long)m.shape[k], s[k]);
        exit(1);
      }
    }
    CHECK(strcmp(pb_dtype_name(m.dtype), dt) == 0);
    snprintf(file, sizeof file, "%s/%s.raw", exp, m.name);
    size_t want_size;
    void *want = read_all(file, &want_size);
    size_t bytes = pb_image_bytes(&m);
    CHECK_EQ(want_size, bytes);
    void *got = malloc(bytes);
    CHECK_OK(pb_dataset_read(ds, i, got, bytes, NULL, &err), &err);
    if (memcmp(got, want, bytes) != 0) {
      fprintf(stderr, "%s: pixels differ from tifffile's\n", m.name);
      exit(1);
    }
    /* A region inside: last channel, last z, inner rows and columns. */
    pb_region r = {{m.shape[0] - 1, m.shape[1] - 1, m.shape[2] - 1, 1, 2},
                   {1, 1, 1, m.shape[3] - 2, m.shape[4] - 3}};
    size_t rb = pb_dtype_size(m.dtype) * (size_t)(r.count[3] * r.count[4]);
    void *ref = malloc(rb);
    tt_extract(&m, want, &r, ref);
    CHECK_OK(pb_dataset_read_region(ds, i, &r, got, rb, NULL, &err), &err);
    CHECK(memcmp(got, ref, rb) == 0);
    printf("read %s (%s %lldx%lldx%lldx%lldx%lld) ok\n", m.name, dt, s[0], s[1], s[2], s[3], s[4]);
    free(ref);
    free(got);
    free(want);
  }
  pb_dataset_free(ds);
  /* Uncompressed striped files: d, e, g, h, j (2 reads each) take the cached layout. */
  long used = pb__tiff_direct_reads() - direct0;
  if (direct ? used != 10 : used != 0) {
    fprintf(stderr, "direct=%d: %ld reads took the cached layout\n", direct, used);
    exit(1);
  }
}

static void write_for_tifffile(const char *root) {
  char out[512], exp[512];
  snprintf(out, sizeof out, "%s/for_tifffile", root);
  snprintf(exp, sizeof exp, "%s/expect_out", root);
  CHECK(mkdir(exp, 0777) == 0);
  struct {
    const char *name, *comp, *opts;
    pb_dtype dt;
    int64_t shape[PB_NDIM];
  } cases[] = {
      {"a_u16_deflate_pred.ome.tif", "deflate", "predictor=2", PB_UINT16, {1, 3, 4, 45, 61}},
      {"b_u8_tiled.ome.tif", "none", "tile=32x32", PB_UINT8, {1, 2, 1, 70, 50}},
      {"c_f32_tiled_deflate.ome.tif", "deflate", "tile=16x32", PB_FLOAT32, {2, 2, 1, 40, 33}},
      {"d_i16_tzyx.ome.tif", "none", NULL, PB_INT16, {3, 1, 2, 21, 19}},
      {"e_f64_bigtiff.ome.tif", "deflate", "bigtiff=1", PB_FLOAT64, {1, 1, 3, 17, 23}},
      {"f_u32.ome.tif", "none", "tile=16x16", PB_UINT32, {1, 2, 2, 20, 20}},
  };
  struct pb_error err = {{0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s_%zu", out, i);
    pb_write_params p = PB_WRITE_PARAMS_DEFAULTS;
    p.compression = cases[i].comp;
    p.options = cases[i].opts;
    pb_writer *w;
    CHECK_OK(pb_writer_new(dir, "tiff", &p, &w, &err), &err);
    pb_image_meta m;
    pb_image_meta_init(&m, cases[i].name, cases[i].dt, cases[i].shape);
    m.physical_size[0] = m.physical_size[1] = 0.5;
    m.n_channels = (int)cases[i].shape[PB_C];
    for (int c = 0; c < m.n_channels; c++)
      snprintf(m.channels[c].name, sizeof m.channels[c].name, "ch%d", c);
    size_t bytes = pb_image_bytes(&m);
    void *pix = malloc(bytes);
    tt_fill(&m, pix, 40 + i);
    CHECK_OK(pb_writer_add(w, &m, pix, &err), &err);
    CHECK_OK(pb_writer_finish(w, &err), &err);
    pb_writer_free(w);
    char file[800];
    snprintf(file, sizeof file, "%s/%s.shape", exp, cases[i].name);
    FILE *fp = fopen(file, "w");
    fprintf(fp, "%lld %lld %lld %lld %lld %s\n", (long long)m.shape[0], (long long)m.shape[1],
            (long long)m.shape[2], (long long)m.shape[3], (long long)m.shape[4],
            pb_dtype_name(m.dtype));
    fclose(fp);
    snprintf(file, sizeof file, "%s/%s.raw", exp, cases[i].name);
    fp = fopen(file, "wb");
    CHECK(fwrite(pix, 1, bytes, fp) == bytes);
    fclose(fp);
    free(pix);
    run_python("check", dir, exp);
  }
}

int main(void) {
  char root[256];
  tt_tempdir(root, sizeof root, "interop");
  read_tifffile_output(root, 1);
  read_tifffile_output(root, 0);
  write_for_tifffile(root);
  tt_rmtree(root);
  return 0;
}
