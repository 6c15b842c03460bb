/* The file floor shared by the perf programs (bench_formats, files_scaling, regions): the data
 * files of a dataset folder, and reading one whole file through a caller's buffer with no
 * parsing, which is what a one-file-per-image (or per-chunk) reader cannot go below. */
#ifndef PB_PERF_DATA_FILES_H
#define PB_PERF_DATA_FILES_H

#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct perf_files {
  char **paths;
  size_t n, cap;
} perf_files;

static perf_files *perf_files_into; /* nftw's callback takes no context */

static inline int perf_files_add(const char *fpath, const struct stat *sb, int type,
                                 struct FTW *ftw) {
  (void)sb;
  const char *base = fpath + ftw->base;
  size_t len = strlen(base);
  if (type != FTW_F || base[0] == '.' || (len > 5 && strcmp(base + len - 5, ".json") == 0))
    return 0;
  perf_files *f = perf_files_into;
  if (f->n == f->cap) {
    size_t ncap = f->cap * 2 + 1024;
    char **np = realloc(f->paths, ncap * sizeof *np);
    if (np == NULL) return 1;
    f->paths = np;
    f->cap = ncap;
  }
  return (f->paths[f->n++] = strdup(fpath)) == NULL;
}

/* Appends to *f every regular file under dir except metadata (names starting with '.', and
 * *.json), in the order nftw walks them, links not followed. 0 on success. */
static inline int perf_files_list(const char *dir, perf_files *f) {
  perf_files_into = f;
  return nftw(dir, perf_files_add, 32, FTW_PHYS);
}

static inline void perf_files_free(perf_files *f) {
  for (size_t i = 0; i < f->n; i++) free(f->paths[i]);
  free(f->paths);
  f->paths = NULL;
  f->n = f->cap = 0;
}

/* Opens, reads whole through buf (cap bytes at a time) and closes path; its bytes, or -1 when
 * it cannot be opened. */
static inline int64_t perf_read_whole(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t r;
  off_t off = 0;
  while ((r = pread(fd, buf, cap, off)) > 0) off += r;
  close(fd);
  return (int64_t)off;
}

#endif
