/* Small helpers for the results tests: checks that print both sides, temp folders. */
#ifndef PB_RESULTS_TEST_H
#define PB_RESULTS_TEST_H

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipebench/results.h"

static int rt_failures;

#define CHECK(cond)                                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);              \
      rt_failures++;                                                                         \
    }                                                                                        \
  } while (0)

#define CHECK_EQ_I(a, b)                                                                     \
  do {                                                                                       \
    long long a_ = (long long)(a), b_ = (long long)(b);                                      \
    if (a_ != b_) {                                                                          \
      fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b,  \
              a_, b_);                                                                       \
      rt_failures++;                                                                         \
    }                                                                                        \
  } while (0)

#define CHECK_EQ_S(a, b)                                                                     \
  do {                                                                                       \
    const char *a_ = (a), *b_ = (b);                                                         \
    if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0) {                                   \
      fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n", __FILE__, __LINE__, #a,  \
              #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");                                   \
      rt_failures++;                                                                         \
    }                                                                                        \
  } while (0)

/* Stops the test: a failed call makes the rest meaningless. */
#define REQUIRE_OK(expr, err)                                                                \
  do {                                                                                       \
    int rc_ = (expr);                                                                        \
    if (rc_ != 0) {                                                                          \
      fprintf(stderr, "%s:%d: %s returned %d (%s): %s\n", __FILE__, __LINE__, #expr, rc_,    \
              pb_strerror(rc_), (err)->message);                                             \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

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
