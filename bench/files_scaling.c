/* The machine's own limit for one-file-per-image formats, and how it scales with threads:
 * open + read everything + close of every file in a folder, shared among N threads (each takes
 * the next file from a common counter), best of 3 passes per thread count. The loader's
 * "1 -> 2 workers" ratio for such formats is judged next to this floor's own ratio.
 * usage: files_scaling DIR [threads list, default 1,2,4,8] -> one JSON object per thread count */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipebench/core.h"

#include "data_files.h"

typedef struct shared {
  char **paths;
  size_t n;
  atomic_size_t next;
  atomic_llong bytes;
} shared;

static void *worker(void *arg) {
  shared *s = arg;
  size_t cap = (size_t)1 << 20;
  char *buf = malloc(cap);
  long long bytes = 0;
  for (size_t i; buf != NULL && (i = atomic_fetch_add(&s->next, 1)) < s->n;) {
    int64_t n = perf_read_whole(s->paths[i], buf, cap);
    if (n > 0) bytes += n;
  }
  atomic_fetch_add(&s->bytes, bytes);
  free(buf);
  return NULL;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: files_scaling DIR [threads,...]\n");
    return 1;
  }
  DIR *d = opendir(argv[1]);
  if (d == NULL) {
    perror(argv[1]);
    return 1;
  }
  shared s = {0};
  size_t cap = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.' || e->d_type == DT_DIR) continue;
    if (s.n == cap) {
      cap = cap * 2 + 1024;
      char **np = realloc(s.paths, cap * sizeof *np);
      if (np == NULL) return 1;
      s.paths = np;
    }
    if (asprintf(&s.paths[s.n++], "%s/%s", argv[1], e->d_name) < 0) return 1;
  }
  closedir(d);
  if (s.n == 0) {
    fprintf(stderr, "%s: no files\n", argv[1]);
    return 1;
  }
  qsort(s.paths, s.n, sizeof *s.paths, by_name);
  const char *list = argc > 2 ? argv[2] : "1,2,4,8";
  shared warm = s;
  atomic_init(&warm.next, 0);
  worker(&warm); /* page cache warm */
  double base = 0;
  for (const char *p = list; *p != '\0';) {
    int t = atoi(p);
    if (t < 1 || t > 256) {
      fprintf(stderr, "bad thread count in '%s'\n", list);
      return 1;
    }
    double best = 0;
    for (int pass = 0; pass < 3; pass++) {
      atomic_store(&s.next, 0);
      atomic_store(&s.bytes, 0);
      pthread_t th[256];
      int64_t t0 = pb_now_ns();
      for (int k = 0; k < t; k++) pthread_create(&th[k], NULL, worker, &s);
      for (int k = 0; k < t; k++) pthread_join(th[k], NULL);
      double sec = (double)(pb_now_ns() - t0) / 1e9;
      double fps = (double)s.n / sec;
      if (fps > best) best = fps;
    }
    if (base == 0) base = best;
    printf("{\"threads\":%d,\"files\":%zu,\"files_per_s\":%.0f,\"vs_first\":%.3f}\n", t, s.n, best,
           best / base);
    const char *c = strchr(p, ',');
    p = c ? c + 1 : p + strlen(p);
  }
  for (size_t i = 0; i < s.n; i++) free(s.paths[i]);
  free(s.paths);
  return 0;
}
