/* tiff backend: write then read back every compression, striped and tiled (with edge tiles),
 * all dtypes, T/C/Z, regions, metadata, stage times and the writer's folder handling. */
#include <pthread.h>
#include <sys/stat.h>

#include "formats/format_internal.h"
#include "formats/tiff/tiff_backend.h"
#include "tiff_test.h"

static const char *const compressions[] = {"none", "deflate", "lzw", "zstd", "packbits"};
#define N_COMP (sizeof compressions / sizeof compressions[0])

static void set_meta(pb_image_meta *m, const char *name, pb_dtype dt, const int64_t shape[PB_NDIM]) {
  pb_image_meta_init(m, name, dt, shape);
  m->physical_size[0] = 0.325;
  m->physical_size[1] = 0.325;
  m->physical_size[2] = 1.5;
  snprintf(m->physical_unit[0], sizeof m->physical_unit[0], "µm");
  snprintf(m->physical_unit[1], sizeof m->physical_unit[1], "µm");
  snprintf(m->physical_unit[2], sizeof m->physical_unit[2], "nm");
  m->n_channels = (int)shape[PB_C];
  for (int c = 0; c < m->n_channels; c++) {
    snprintf(m->channels[c].name, sizeof m->channels[c].name, "ch%d <&\"'>", c);
    m->channels[c].color_rgba = 0xFF000000u >> (8 * c) | 0xFF;
    m->channels[c].emission_um = 0.5f + 0.1f * (float)c;
  }
}

static void check_meta(const pb_image_meta *want, const pb_image_meta *got) {
  CHECK_EQ(got->dtype, want->dtype);
  for (int k = 0; k < PB_NDIM; k++) CHECK_EQ(got->shape[k], want->shape[k]);
  for (int k = 0; k < 3; k++) {
    CHECK(got->physical_size[k] == want->physical_size[k]);
    CHECK_CONTAINS(got->physical_unit[k], want->physical_unit[k]);
  }
  CHECK_EQ(got->n_channels, want->n_channels);
  for (int c = 0; c < want->n_channels; c++) {
    CHECK(strcmp(got->channels[c].name, want->channels[c].name) == 0);
    CHECK_EQ(got->channels[c].color_rgba, want->channels[c].color_rgba);
    CHECK(got->channels[c].emission_um > want->channels[c].emission_um - 1e-4f &&
          got->channels[c].emission_um < want->channels[c].emission_um + 1e-4f);
  }
}

/* Reads the full image and a handful of regions, comparing with the source pixels. */
static void check_reads(pb_dataset *ds, int64_t i, const pb_image_meta *m, const void *want,
                        uint64_t seed) {
  struct pb_error err = {{0}};
  size_t bytes = pb_image_bytes(m);
  unsigned char *got = malloc(bytes), *ref = malloc(bytes);
  CHECK(got != NULL && ref != NULL);
  memset(got, 0xAB, bytes);
  pb_stage_times tm;
  CHECK_OK(pb_dataset_read(ds, i, got, bytes, &tm, &err), &err);
  CHECK(memcmp(got, want, bytes) == 0);
  CHECK_EQ(tm.bytes_decoded, bytes);
  CHECK(tm.bytes_read > 0);
  CHECK(tm.read_ns > 0);
  pb_rng rng;
  pb_rng_init(&rng, seed);
  for (int rep = 0; rep < 12; rep++) {
    pb_region r;
    for (int k = 0; k < PB_NDIM; k++) {
      r.start[k] = (int64_t)pb_rng_below(&rng, (uint64_t)m->shape[k]);
      r.count[k] = 1 + (int64_t)pb_rng_below(&rng, (uint64_t)(m->shape[k] - r.start[k]));
    }
    if (rep == 0) { /* full-width rows: the direct-to-destination path */
      r.start[PB_X] = 0;
      r.count[PB_X] = m->shape[PB_X];
    }
    size_t rb = pb_dtype_size(m->dtype);
    for (int k = 0; k < PB_NDIM; k++) rb *= (size_t)r.count[k];
    memset(got, 0xCD, rb);
    CHECK_OK(pb_dataset_read_region(ds, i, &r, got, rb, &tm, &err), &err);
    tt_extract(m, want, &r, ref);
    if (memcmp(got, ref, rb) != 0) {
      fprintf(stderr, "region %d mismatch: start %lld %lld %lld %lld %lld count %lld %lld %lld %lld %lld\n",
              rep, (long long)r.start[0], (long long)r.start[1], (long long)r.start[2],
              (long long)r.start[3], (long long)r.start[4], (long long)r.count[0],
              (long long)r.count[1], (long long)r.count[2], (long long)r.count[3],
              (long long)r.count[4]);
      exit(1);
    }
    CHECK_EQ(tm.bytes_decoded, rb);
  }
  free(got);
  free(ref);
}

/* One dataset per (compression, layout); every dtype is one image in it. */
static void roundtrip_all(const char *root) {
  struct pb_error err = {{0}};
  /* Small, but with T, C and Z, several strips and edge tiles: libtiff re-initialises its
   * codec per strip or tile, which dominates under sanitizers. */
  const int64_t shape[PB_NDIM] = {2, 2, 2, 37, 53};
  const char *layouts[] = {NULL, "tile=32x48", "tile=16x32,predictor=2", "predictor=2"};
  int n_runs = 0;
  for (size_t ci = 0; ci < N_COMP; ci++) {
    for (size_t li = 0; li < 4; li++) {
      if (li >= 2 && strcmp(compressions[ci], "none") == 0) continue; /* no predictor */
      char path[512];
      snprintf(path, sizeof path, "%s/ds_%s_%zu", root, compressions[ci], li);
      pb_write_params p = PB_WRITE_PARAMS_DEFAULTS;
      p.compression = compressions[ci];
      p.options = layouts[li];
      p.level = 1; /* fast codec set-up per strip keeps the sanitizer build quick */
      pb_writer *w;
      CHECK_OK(pb_writer_new(path, "tiff", &p, &w, &err), &err);
      pb_image_meta metas[PB_DTYPE_COUNT];
      void *pix[PB_DTYPE_COUNT];
      for (int d = 0; d < PB_DTYPE_COUNT; d++) {
        set_meta(&metas[d], "", (pb_dtype)d, shape);
        pix[d] = malloc(pb_image_bytes(&metas[d]));
        tt_fill(&metas[d], pix[d], 100 + (uint64_t)d);
        CHECK_OK(pb_writer_add(w, &metas[d], pix[d], &err), &err);
      }
      CHECK_OK(pb_writer_finish(w, &err), &err);
      pb_writer_free(w);

      pb_dataset *ds;
      CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
      CHECK(strcmp(pb_dataset_format(ds), "tiff") == 0);
      CHECK_EQ(pb_dataset_count(ds), PB_DTYPE_COUNT);
      for (int d = 0; d < PB_DTYPE_COUNT; d++) {
        pb_image_meta got;
        CHECK_OK(pb_dataset_meta(ds, d, &got, &err), &err);
        char want_name[64];
        snprintf(want_name, sizeof want_name, "img_%05d.ome.tif", d);
        CHECK(strcmp(got.name, want_name) == 0);
        check_meta(&metas[d], &got);
        check_reads(ds, d, &metas[d], pix[d], 7 * ci + li + (uint64_t)d);
        free(pix[d]);
        n_runs++;
      }
      pb_dataset_free(ds);
    }
  }
  printf("roundtrip: %d images over %zu compressions and 4 layouts ok\n", n_runs, N_COMP);
}

/* Several strips per plane; also reading one file path directly; names ending in .tif kept. */
static void multi_strip_and_single_file(const char *root) {
  struct pb_error err = {{0}};
  char path[512];
  snprintf(path, sizeof path, "%s/multistrip", root);
  pb_write_params p = PB_WRITE_PARAMS_DEFAULTS;
  p.compression = "zstd";
  p.options = "bigtiff=1";
  pb_writer *w;
  CHECK_OK(pb_writer_new(path, "tiff", &p, &w, &err), &err);
  const int64_t shape[PB_NDIM] = {1, 2, 3, 300, 301};
  pb_image_meta m;
  set_meta(&m, "sample_b.tiff", PB_UINT16, shape);
  void *pix = malloc(pb_image_bytes(&m));
  tt_fill(&m, pix, 5);
  CHECK_OK(pb_writer_add(w, &m, pix, &err), &err);
  pb_image_meta m2 = m;
  snprintf(m2.name, sizeof m2.name, "sample_a.tif");
  CHECK_OK(pb_writer_add(w, &m2, pix, &err), &err);
  /* The same name twice is refused. */
  CHECK(pb_writer_add(w, &m2, pix, &err) == PB_EINVAL);
  CHECK_CONTAINS(err.message, "sample_a.tif");
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);

  pb_dataset *ds;
  CHECK_OK(pb_dataset_open(path, "tiff", &ds, &err), &err);
  CHECK_EQ(pb_dataset_count(ds), 2);
  pb_image_meta got;
  CHECK_OK(pb_dataset_meta(ds, 0, &got, &err), &err);
  CHECK(strcmp(got.name, "sample_a.tif") == 0); /* name order */
  check_reads(ds, 0, &m, pix, 99);
  check_reads(ds, 1, &m, pix, 98);
  pb_dataset_free(ds);

  char file[600];
  snprintf(file, sizeof file, "%s/sample_b.tiff", path);
  CHECK_OK(pb_dataset_open(file, NULL, &ds, &err), &err);
  CHECK(strcmp(pb_dataset_format(ds), "tiff") == 0);
  CHECK_EQ(pb_dataset_count(ds), 1);
  CHECK_OK(pb_dataset_meta(ds, 0, &got, &err), &err);
  check_meta(&m, &got);
  check_reads(ds, 0, &m, pix, 97);
  pb_dataset_free(ds);
  free(pix);
  printf("multi-strip, bigtiff, names, single file ok\n");
}

static void writer_folder_handling(const char *root) {
  struct pb_error err = {{0}};
  char path[512];
  snprintf(path, sizeof path, "%s/abandoned", root);
  pb_writer *w;
  CHECK_OK(pb_writer_new(path, "tiff", NULL, &w, &err), &err);
  const int64_t shape[PB_NDIM] = {1, 1, 1, 8, 8};
  pb_image_meta m;
  pb_image_meta_init(&m, "", PB_UINT8, shape);
  unsigned char px[64] = {0};
  CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
  pb_writer_free(w); /* no finish: nothing may remain */
  struct stat sb;
  CHECK(stat(path, &sb) != 0);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -q abandoned", root);
  CHECK(system(cmd) != 0); /* no temporary sibling left either */

  /* Bad options are refused up front with the option named. */
  pb_write_params p = PB_WRITE_PARAMS_DEFAULTS;
  p.options = "tile=100x100";
  CHECK(pb_writer_new(path, "tiff", &p, &w, &err) == PB_EINVAL);
  CHECK_CONTAINS(err.message, "tile=100x100");
  p.options = NULL;
  p.compression = "brotli";
  CHECK(pb_writer_new(path, "tiff", &p, &w, &err) == PB_EINVAL);
  CHECK_CONTAINS(err.message, "brotli");

  /* Finishing onto a non-empty folder fails and names it. */
  snprintf(path, sizeof path, "%s/occupied", root);
  mkdir(path, 0777);
  snprintf(cmd, sizeof cmd, "touch '%s/other'", path);
  CHECK(system(cmd) == 0);
  CHECK_OK(pb_writer_new(path, "tiff", NULL, &w, &err), &err);
  CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
  CHECK(pb_writer_finish(w, &err) != PB_OK);
  CHECK_CONTAINS(err.message, "occupied");
  pb_writer_free(w);
  printf("writer folder handling ok\n");
}

/* One handle per thread (as the loader does): concurrent reads of the same files agree. */
typedef struct thread_job {
  const char *path;
  uint32_t crc[PB_DTYPE_COUNT];
  int rc;
} thread_job;

static void *read_all_images(void *arg) {
  thread_job *j = arg;
  struct pb_error err = {{0}};
  pb_dataset *ds;
  j->rc = pb_dataset_open(j->path, "tiff", &ds, &err);
  if (j->rc != PB_OK) return NULL;
  for (int64_t i = 0; i < pb_dataset_count(ds) && j->rc == PB_OK; i++) {
    pb_image_meta m;
    j->rc = pb_dataset_meta(ds, i, &m, &err);
    if (j->rc != PB_OK) break;
    void *buf = malloc(pb_image_bytes(&m));
    j->rc = pb_dataset_read(ds, i, buf, pb_image_bytes(&m), NULL, &err);
    if (j->rc == PB_OK) j->crc[i] = pb_image_crc32(&m, buf);
    free(buf);
  }
  pb_dataset_free(ds);
  return NULL;
}

static void threads_agree(const char *root) {
  char path[512];
  snprintf(path, sizeof path, "%s/ds_deflate_1", root);
  thread_job jobs[4];
  pthread_t th[4];
  for (int t = 0; t < 4; t++) {
    memset(&jobs[t], 0, sizeof jobs[t]);
    jobs[t].path = path;
    CHECK(pthread_create(&th[t], NULL, read_all_images, &jobs[t]) == 0);
  }
  for (int t = 0; t < 4; t++) {
    CHECK(pthread_join(th[t], NULL) == 0);
    CHECK_EQ(jobs[t].rc, PB_OK);
    for (int i = 0; i < PB_DTYPE_COUNT; i++) CHECK_EQ(jobs[t].crc[i], jobs[0].crc[i]);
  }
  printf("4 threads, one handle each: same pixels\n");
}

/* A clone (a loader worker's handle): the same images, and no file scanned again that its
 * source had scanned; a file its source had not scanned, it scans itself. */
static void clone_shares_layouts(const char *root) {
  char path[512];
  snprintf(path, sizeof path, "%s/ds_deflate_1", root);
  struct pb_error err;
  pb_dataset *ds = NULL, *c = NULL;
  CHECK_OK(pb_dataset_open(path, "tiff", &ds, &err), &err);
  int64_t n = pb_dataset_count(ds);
  CHECK(n >= 2);
  for (int64_t i = 0; i < n - 1; i++) { /* every file but the last scanned by the source */
    pb_image_meta m;
    CHECK_OK(pb_dataset_meta(ds, i, &m, &err), &err);
  }
  long before = pb__tiff_scans();
  pb_read_options ro = PB_READ_OPTIONS_DEFAULTS;
  CHECK_OK(pb__dataset_clone(ds, &ro, &c, &err), &err);
  CHECK_EQ(pb_dataset_count(c), n);
  for (int64_t i = 0; i < n - 1; i++) {
    pb_image_meta a, b;
    CHECK_OK(pb_dataset_meta(ds, i, &a, &err), &err);
    CHECK_OK(pb_dataset_meta(c, i, &b, &err), &err);
    CHECK(strcmp(a.name, b.name) == 0);
    check_meta(&a, &b);
    size_t bytes = pb_image_bytes(&a);
    unsigned char *pa = malloc(bytes), *pc = malloc(bytes);
    CHECK(pa != NULL && pc != NULL);
    CHECK_OK(pb_dataset_read(ds, i, pa, bytes, NULL, &err), &err);
    CHECK_OK(pb_dataset_read(c, i, pc, bytes, NULL, &err), &err);
    CHECK(memcmp(pa, pc, bytes) == 0);
    free(pa), free(pc);
  }
  CHECK_EQ(pb__tiff_scans(), before); /* the clone scanned nothing again */
  pb_image_meta last;
  CHECK_OK(pb_dataset_meta(c, n - 1, &last, &err), &err);
  CHECK_EQ(pb__tiff_scans(), before + 1); /* the one the source had not scanned */
  pb_dataset_free(ds); /* the clone's layouts are its own */
  CHECK_OK(pb_dataset_meta(c, 0, &last, &err), &err);
  pb_dataset_free(c);
  printf("clone: %lld images, no file scanned twice\n", (long long)n);
}

int main(void) {
  char root[256];
  tt_tempdir(root, sizeof root, "rt");
  roundtrip_all(root);
  threads_agree(root);
  clone_shares_layouts(root);
  multi_strip_and_single_file(root);
  writer_folder_handling(root);
  tt_rmtree(root);
  return 0;
}
