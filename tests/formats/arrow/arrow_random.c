/* Random-order and sequential reads through ome-parquet, duckdb and oa-dataset return the
 * pixels that were written (checked by CRC), including with several rows per row group and
 * reads that jump between row groups.
 *
 * Also with PB_OA_CACHE_MB=0 (the readers' block cache holds one block at a time).
 *
 * With arguments it is a small timing tool instead:
 *   arrow_random PATH [random|seq] [FORMAT]
 * prints microseconds per image for reading every image once in that order. */
#include <time.h>

#include "arrow_test_util.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* A permutation of 0..n-1 from a fixed seed (xorshift, Fisher-Yates). */
static void shuffle(int64_t *order, int64_t n, uint32_t seed) {
  for (int64_t i = 0; i < n; i++) order[i] = i;
  uint32_t s = seed ? seed : 1;
  for (int64_t i = n - 1; i > 0; i--) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    int64_t j = (int64_t)(s % (uint32_t)(i + 1));
    int64_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}

static int bench(int argc, char **argv) {
  const char *path = argv[1];
  int random = argc < 3 || strcmp(argv[2], "seq") != 0;
  const char *format = argc >= 4 ? argv[3] : NULL;
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  double t0 = now_us();
  CHECK_OK(pb_dataset_open(path, format, &ds, &err), &err);
  double t_open = now_us() - t0;
  int64_t n = pb_dataset_count(ds);
  int64_t *order = malloc((size_t)n * sizeof *order);
  CHECK(order != NULL);
  if (random) shuffle(order, n, 12345u);
  else
    for (int64_t i = 0; i < n; i++) order[i] = i;
  void *buf = NULL;
  size_t cap = 0;
  uint32_t acc = 0;
  t0 = now_us();
  for (int64_t k = 0; k < n; k++) {
    pb_image_meta m;
    CHECK_OK(pb_dataset_meta(ds, order[k], &m, &err), &err);
    size_t b = pb_image_bytes(&m);
    if (b > cap) {
      free(buf);
      buf = malloc(b);
      CHECK(buf != NULL);
      cap = b;
    }
    CHECK_OK(pb_dataset_read(ds, order[k], buf, cap, NULL, &err), &err);
    acc ^= pb_image_crc32(&m, buf);
  }
  double t = now_us() - t0;
  printf("%s %s (%s): open %.0f us, %lld images, %.1f us/image (crc xor %08x)\n", path,
         random ? "random" : "seq", pb_dataset_format(ds), t_open, (long long)n,
         n > 0 ? t / (double)n : 0.0, acc);
  free(buf);
  free(order);
  pb_dataset_free(ds);
  return 0;
}

/* Writes n images of shape (1,1,1,Y,X) uint16 (image i's values from seed i), then reads
 * them in sequential, random and back-and-forth order, checking each CRC. */
static void check_format(const char *dir, const char *format, const char *file,
                         const char *compression, const char *options, int n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  struct pb_error err = {{0}};
  pb_write_params params = PB_WRITE_PARAMS_DEFAULTS;
  params.compression = compression;
  params.options = options;
  const int64_t shape[PB_NDIM] = {1, 1, 1, 24, 20};
  uint32_t *crc = malloc((size_t)n * sizeof *crc);
  CHECK(crc != NULL);
  pb_image_meta m;
  pb_image_meta_init(&m, "x", PB_UINT16, shape);
  size_t bytes = pb_image_bytes(&m);
  void *px = malloc(bytes), *got = malloc(bytes);
  CHECK(px != NULL && got != NULL);
  pb_writer *w = NULL;
  CHECK_OK(pb_writer_new(path, format, &params, &w, &err), &err);
  for (int i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "img_%05d", i);
    pb_image_meta_init(&m, name, PB_UINT16, shape);
    fill_pixels(&m, px, (unsigned)i + 1u);
    crc[i] = pb_image_crc32(&m, px);
    CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
  }
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);

  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(path, format, &ds, &err), &err);
  CHECK_EQ(pb_dataset_count(ds), n);
  int64_t *order = malloc((size_t)(3 * n + 4) * sizeof *order);
  CHECK(order != NULL);
  int64_t k = 0;
  for (int i = 0; i < n; i++) order[k++] = i;          /* sequential */
  shuffle(order + k, n, 777u);                          /* random */
  k += n;
  for (int i = 0; i < n; i++) order[k++] = (i % 2) ? n - 1 - i / 2 : i / 2; /* both ends */
  for (int64_t j = 0; j < k; j++) {
    int64_t i = order[j];
    CHECK_OK(pb_dataset_meta(ds, i, &m, &err), &err);
    memset(got, 0xAB, bytes);
    CHECK_OK(pb_dataset_read(ds, i, got, bytes, NULL, &err), &err);
    if (pb_image_crc32(&m, got) != crc[i]) {
      fprintf(stderr, "%s: image %lld (read %lld): CRC mismatch\n", path, (long long)i,
              (long long)j);
      exit(1);
    }
    /* A region read after a whole read of the same image (cached data must be sliced). */
    if (j % 17 == 0) {
      pb_region reg;
      const int64_t st[PB_NDIM] = {0, 0, 0, 3, 5}, ct[PB_NDIM] = {1, 1, 1, 7, 9};
      for (int a = 0; a < PB_NDIM; a++) {
        reg.start[a] = st[a];
        reg.count[a] = ct[a];
      }
      uint16_t sub[63];
      CHECK_OK(pb_dataset_read_region(ds, i, &reg, sub, sizeof sub, NULL, &err), &err);
      const uint16_t *full = got;
      for (int y = 0; y < 7; y++)
        for (int x = 0; x < 9; x++) CHECK_EQ(sub[y * 9 + x], full[(3 + y) * 20 + 5 + x]);
    }
  }
  /* Bad index still gives an error, not a crash. */
  CHECK(pb_dataset_read(ds, n, got, bytes, NULL, &err) != 0);
  pb_dataset_free(ds);
  free(order);
  free(px);
  free(got);
  free(crc);
}

int main(int argc, char **argv) {
  if (argc >= 2) return bench(argc, argv);
  char dir[256];
  tmp_dir(dir, sizeof dir, "random");
  const int n = 150;
  check_format(dir, "ome-parquet", "a.parquet", NULL, NULL, n);
  check_format(dir, "ome-parquet", "b.parquet", NULL, "row_group_rows=7", n);
  check_format(dir, "ome-parquet", "c.parquet", "zstd", "row_group_rows=16", n);
  check_format(dir, "ome-parquet", "d.parquet", NULL, "row_group_rows=1", 40);
  check_format(dir, "duckdb", "e.duckdb", NULL, NULL, n);
  check_format(dir, "duckdb", "f.duckdb", "lz4", NULL, n);
  check_format(dir, "oa-dataset", "g", NULL, NULL, n);
  check_format(dir, "oa-dataset", "h", "zstd", "chunks_per_row_group=9", n);
  /* No cache budget: every block is evicted for the next, so reads reload constantly. */
  CHECK(setenv("PB_OA_CACHE_MB", "0", 1) == 0);
  check_format(dir, "ome-parquet", "i.parquet", NULL, "row_group_rows=7", 60);
  check_format(dir, "duckdb", "j.duckdb", NULL, NULL, 60);
  check_format(dir, "oa-dataset", "k", NULL, "chunks_per_row_group=4", 60);
  CHECK(unsetenv("PB_OA_CACHE_MB") == 0);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
  printf("arrow_random: ok\n");
  return 0;
}
