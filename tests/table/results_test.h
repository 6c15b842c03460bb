/* Small helpers for the results tests: temporary folders (the checks are tests/check.h). */
#ifndef PB_RESULTS_TEST_H
#define PB_RESULTS_TEST_H

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipebench/results.h"

#include "check.h"

static inline char *rt_tmpdir(void) {
  const char *base = getenv("TMPDIR");
  static char dir[512];
  snprintf(dir, sizeof dir, "%s/pb_results_XXXXXX", base && *base ? base : "/tmp");
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    exit(1);
  }
  return dir;
}

static inline void rt_rmdir(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return;
  struct dirent *e;
  char p[1024];
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

/* Number of entries in dir whose name contains needle. */
static inline int rt_count(const char *dir, const char *needle) {
  DIR *d = opendir(dir);
  if (d == NULL) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strstr(e->d_name, needle) != NULL) n++;
  closedir(d);
  return n;
}

static inline char *rt_slurp(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) buf[n] = '\0';
  if (size) *size = (size_t)n;
  return buf;
}

static inline void rt_spit(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(data, 1, n, f) != n) {
    perror(path);
    exit(1);
  }
  fclose(f);
}

#endif
