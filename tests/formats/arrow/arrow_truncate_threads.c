/* A file cut short in place by another process while four threads read it at random through
 * the direct page reader (one handle each, pages read with pread, the default): no read may
 * crash (a mapped file would raise SIGBUS here), every read either returns the image's
 * pixels exactly or fails with an error naming the file and the image, and the reads of
 * images past the cut do fail. Cases: ome-parquet chunk-bytes (zstd chunks in uncompressed
 * pages, the layout whose pages are read in part), ome-parquet planes (uncompressed INT32
 * pages), oa-dataset (uncompressed pages of pixel_bytes). */
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "arrow_test_util.h"
#include "common/fs.h"

extern char **environ;

enum { N_IMAGES = 240, N_THREADS = 4 };
static const int64_t SHAPE[PB_NDIM] = {1, 1, 1, 48, 64};

typedef struct shared {
  const char *path, *file;
  unsigned char *ref; /* every image's pixels, read before the cut */
  size_t nb;
  atomic_int stop, cut;
  atomic_long reads, after_cut, errors, errors_after_cut, bad;
  pthread_barrier_t opened; /* every handle open before the file is cut */
} shared;

typedef struct worker {
  shared *s;
  unsigned seed;
} worker;

static void *reader(void *arg) {
  worker *w = arg;
  shared *s = w->s;
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  int rc = pb_dataset_open(s->path, NULL, &ds, &err);
  pthread_barrier_wait(&s->opened);
  if (rc != 0) {
    fprintf(stderr, "%s: open: %s\n", s->path, err.message);
    atomic_fetch_add(&s->bad, 1);
    return NULL;
  }
  unsigned char *buf = malloc(s->nb);
  CHECK(buf != NULL);
  uint64_t x = w->seed;
  while (!atomic_load(&s->stop)) {
    x = x * 6364136223846793005u + 1442695040888963407u;
    int64_t i = (int64_t)((x >> 33) % N_IMAGES);
    int cut = atomic_load(&s->cut);
    rc = pb_dataset_read(ds, i, buf, s->nb, NULL, &err);
    atomic_fetch_add(&s->reads, 1);
    if (cut) atomic_fetch_add(&s->after_cut, 1);
    if (rc == 0) {
      if (memcmp(buf, s->ref + (size_t)i * s->nb, s->nb) != 0) {
        fprintf(stderr, "%s: image %lld: wrong pixels with exit 0\n", s->path, (long long)i);
        atomic_fetch_add(&s->bad, 1);
      }
      continue;
    }
    char want[32];
    snprintf(want, sizeof want, "image %lld", (long long)i);
    atomic_fetch_add(&s->errors, 1);
    if (cut) atomic_fetch_add(&s->errors_after_cut, 1);
    if (strstr(err.message, s->file) == NULL || strstr(err.message, want) == NULL) {
      fprintf(stderr, "%s: image %lld: error without the file or the image named: %s\n",
              s->path, (long long)i, err.message);
      atomic_fetch_add(&s->bad, 1);
    }
  }
  free(buf);
  pb_dataset_free(ds);
  return NULL;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Waits (at most about 60 s) until the counter reaches at least n. */
static void wait_for(atomic_long *counter, long n) {
  for (int k = 0; k < 60000 && atomic_load(counter) < n; k++) sleep_ms(1);
}

static void run_case(const char *path, const char *file) {
  shared s = {.path = path, .file = file};
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  CHECK_EQ(pb_dataset_count(ds), N_IMAGES);
  pb_image_meta m;
  CHECK_OK(pb_dataset_meta(ds, 0, &m, &err), &err);
  s.nb = pb_image_bytes(&m);
  s.ref = malloc(s.nb * N_IMAGES);
  CHECK(s.ref != NULL);
  for (int64_t i = 0; i < N_IMAGES; i++)
    CHECK_OK(pb_dataset_read(ds, i, s.ref + (size_t)i * s.nb, s.nb, NULL, &err), &err);
  pb_dataset_free(ds);
  struct stat st;
  CHECK(stat(file, &st) == 0);

  CHECK(pthread_barrier_init(&s.opened, NULL, N_THREADS + 1) == 0);
  pthread_t th[N_THREADS];
  worker w[N_THREADS];
  for (int k = 0; k < N_THREADS; k++) {
    w[k] = (worker){&s, 1234u + 77u * (unsigned)k};
    CHECK(pthread_create(&th[k], NULL, reader, &w[k]) == 0);
  }
  pthread_barrier_wait(&s.opened);
  wait_for(&s.reads, 4 * N_IMAGES); /* every thread well into its reads */
  /* another process cuts the file in half: coreutils' truncate, spawned (no fork of this
   * process, whose DuckDB holds many locks) */
  char size_arg[32];
  snprintf(size_arg, sizeof size_arg, "%lld", (long long)(st.st_size / 2));
  char *argv[] = {"truncate", "-s", size_arg, (char *)file, NULL};
  pid_t pid;
  CHECK(posix_spawnp(&pid, "truncate", NULL, NULL, argv, environ) == 0);
  int ws = 0;
  CHECK(waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  atomic_store(&s.cut, 1);
  wait_for(&s.after_cut, 8 * N_IMAGES);
  atomic_store(&s.stop, 1);
  for (int k = 0; k < N_THREADS; k++) CHECK(pthread_join(th[k], NULL) == 0);
  printf("%s: %ld reads, %ld after the cut, %ld errors (%ld after the cut)\n", path,
         atomic_load(&s.reads), atomic_load(&s.after_cut), atomic_load(&s.errors),
         atomic_load(&s.errors_after_cut));
  CHECK_EQ(atomic_load(&s.bad), 0);
  CHECK(atomic_load(&s.after_cut) >= 8 * N_IMAGES);
  CHECK(atomic_load(&s.errors_after_cut) > 0);
  pthread_barrier_destroy(&s.opened);
  free(s.ref);
}

int main(void) {
  char dir[256], p[512], f[600];
  tmp_dir(dir, sizeof dir, "trth");
  unsetenv("PB_OA_MMAP");
  unsetenv("PB_OA_DIRECT");
  snprintf(p, sizeof p, "%s/cb.parquet", dir);
  write_images(p, "ome-parquet", "zstd",
               "layout=chunk-bytes,chunk_shape=1x16x64,parquet_codec=uncompressed,"
               "row_group_rows=60",
               SHAPE, N_IMAGES, 5);
  run_case(p, p);
  snprintf(p, sizeof p, "%s/planes.parquet", dir);
  write_images(p, "ome-parquet", NULL, "layout=planes,parquet_codec=uncompressed,row_group_rows=60",
               SHAPE, N_IMAGES, 9);
  run_case(p, p);
  snprintf(p, sizeof p, "%s/ds", dir);
  write_images(p, "oa-dataset", "none", NULL, SHAPE, N_IMAGES, 11);
  snprintf(f, sizeof f, "%s/chunks.parquet", p);
  run_case(p, f);
  pb__remove_tree(dir);
  return 0;
}
