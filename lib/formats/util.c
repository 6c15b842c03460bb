/* Helpers the backends share: options, regions, box copies, files and folders. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/format_internal.h"

int pb__opt_get(const char *options, const char *key, char *buf, size_t size) {
  if (options == NULL || key == NULL) return 0;
  size_t klen = strlen(key);
  const char *p = options;
  while (*p != '\0') {
    const char *end = strchr(p, ',');
    if (end == NULL) end = p + strlen(p);
    if ((size_t)(end - p) > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
      size_t vlen = (size_t)(end - p) - klen - 1;
      if (vlen >= size) vlen = size - 1;
      memcpy(buf, p + klen + 1, vlen);
      buf[vlen] = '\0';
      return 1;
    }
    p = *end == ',' ? end + 1 : end;
  }
  return 0;
}

int pb__region_check(const pb_region *r, const int64_t shape[PB_NDIM], struct pb_error *err) {
  static const char axes[] = "TCZYX";
  for (int k = 0; k < PB_NDIM; k++) {
    if (r->start[k] < 0 || r->count[k] < 1 || r->start[k] + r->count[k] > shape[k])
      return pb_error_set(err, PB_ERANGE,
                          "region axis %c [%lld, +%lld) lies outside the image (size %lld)",
                          axes[k], (long long)r->start[k], (long long)r->count[k],
                          (long long)shape[k]);
  }
  return PB_OK;
}

void pb__region_full(pb_region *r, const int64_t shape[PB_NDIM]) {
  for (int k = 0; k < PB_NDIM; k++) {
    r->start[k] = 0;
    r->count[k] = shape[k];
  }
}

void pb__copy_box(void *dst, const int64_t dst_origin[PB_NDIM], const int64_t dst_shape[PB_NDIM],
                  const void *src, const int64_t src_origin[PB_NDIM],
                  const int64_t src_shape[PB_NDIM], size_t esize) {
  int64_t lo[PB_NDIM], n[PB_NDIM];
  for (int k = 0; k < PB_NDIM; k++) {
    int64_t a = src_origin[k] > dst_origin[k] ? src_origin[k] : dst_origin[k];
    int64_t b1 = src_origin[k] + src_shape[k], b2 = dst_origin[k] + dst_shape[k];
    int64_t b = b1 < b2 ? b1 : b2;
    if (b <= a) return;
    lo[k] = a;
    n[k] = b - a;
  }
  /* Strides in elements. */
  int64_t ss[PB_NDIM], ds[PB_NDIM];
  ss[PB_NDIM - 1] = ds[PB_NDIM - 1] = 1;
  for (int k = PB_NDIM - 2; k >= 0; k--) {
    ss[k] = ss[k + 1] * src_shape[k + 1];
    ds[k] = ds[k + 1] * dst_shape[k + 1];
  }
  size_t row = (size_t)n[PB_X] * esize;
  const unsigned char *s = src;
  unsigned char *d = dst;
  for (int64_t t = 0; t < n[0]; t++)
    for (int64_t c = 0; c < n[1]; c++)
      for (int64_t z = 0; z < n[2]; z++)
        for (int64_t y = 0; y < n[3]; y++) {
          int64_t so = (lo[0] + t - src_origin[0]) * ss[0] + (lo[1] + c - src_origin[1]) * ss[1] +
                       (lo[2] + z - src_origin[2]) * ss[2] + (lo[3] + y - src_origin[3]) * ss[3] +
                       (lo[4] - src_origin[4]);
          int64_t dof = (lo[0] + t - dst_origin[0]) * ds[0] + (lo[1] + c - dst_origin[1]) * ds[1] +
                        (lo[2] + z - dst_origin[2]) * ds[2] + (lo[3] + y - dst_origin[3]) * ds[3] +
                        (lo[4] - dst_origin[4]);
          memcpy(d + (size_t)dof * esize, s + (size_t)so * esize, row);
        }
}

int pb__mkdirs(const char *path, struct pb_error *err) {
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
    return pb_error_set(err, PB_EINVAL, "%s: path too long", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return pb_error_set(err, -errno, "%s: cannot create folder: %s", buf, strerror(errno));
    *p = '/';
  }
  if (mkdir(buf, 0777) != 0 && errno != EEXIST)
    return pb_error_set(err, -errno, "%s: cannot create folder: %s", buf, strerror(errno));
  return PB_OK;
}

int pb__remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return errno == ENOENT ? PB_OK : -errno;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    if (d == NULL) return -errno;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      char child[4096];
      snprintf(child, sizeof child, "%s/%s", path, e->d_name);
      pb__remove_tree(child);
    }
    closedir(d);
    return rmdir(path) == 0 ? PB_OK : -errno;
  }
  return unlink(path) == 0 ? PB_OK : -errno;
}

int pb__read_file(const char *path, void **data, size_t *size, struct pb_error *err) {
  *data = NULL;
  *size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return pb_error_set(err, errno == ENOENT ? PB_ENOTFOUND : -errno, "%s: %s", path,
                                  strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return pb_error_set(err, PB_EIO, "%s: not a regular file", path);
  }
  size_t n = (size_t)st.st_size;
  unsigned char *buf = pb_alloc(n);
  if (buf == NULL) {
    close(fd);
    return pb_error_set(err, PB_ENOMEM, "%s: out of memory for %zu bytes", path, n);
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = r < 0 ? errno : EIO;
      close(fd);
      pb_free(buf, n);
      return pb_error_set(err, PB_EIO, "%s: read failed: %s", path, strerror(e));
    }
    got += (size_t)r;
  }
  close(fd);
  *data = buf;
  *size = n;
  return PB_OK;
}

int pb__write_file(const char *path, const void *data, size_t size, struct pb_error *err) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return pb_error_set(err, -errno, "%s: cannot create: %s", path, strerror(errno));
  const unsigned char *p = data;
  size_t done = 0;
  while (done < size) {
    ssize_t w = write(fd, p + done, size - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = errno;
      close(fd);
      return pb_error_set(err, PB_EIO, "%s: write failed: %s", path, strerror(e));
    }
    done += (size_t)w;
  }
  if (close(fd) != 0) return pb_error_set(err, PB_EIO, "%s: close failed: %s", path, strerror(errno));
  return PB_OK;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int pb__list_dir(const char *dir, char ***names, size_t *count, struct pb_error *err) {
  *names = NULL;
  *count = 0;
  DIR *d = opendir(dir);
  if (d == NULL) return pb_error_set(err, -errno, "%s: cannot list folder: %s", dir, strerror(errno));
  size_t cap = 0, n = 0;
  char **v = NULL;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      char **nv = realloc(v, cap * sizeof *v);
      if (nv == NULL) {
        closedir(d);
        pb__free_names(v, n);
        return pb_error_set(err, PB_ENOMEM, "out of memory");
      }
      v = nv;
    }
    v[n] = strdup(e->d_name);
    if (v[n] == NULL) {
      closedir(d);
      pb__free_names(v, n);
      return pb_error_set(err, PB_ENOMEM, "out of memory");
    }
    n++;
  }
  closedir(d);
  if (n > 1) qsort(v, n, sizeof *v, cmp_names);
  *names = v;
  *count = n;
  return PB_OK;
}

void pb__free_names(char **names, size_t count) {
  for (size_t i = 0; i < count; i++) free(names[i]);
  free(names);
}

void pb__temp_sibling(const char *path, char *buf, size_t size) {
  static atomic_int counter;
  int n = atomic_fetch_add(&counter, 1);
  const char *slash = strrchr(path, '/');
  if (slash == NULL)
    snprintf(buf, size, ".%s.tmp-%d-%d", path, (int)getpid(), n);
  else
    snprintf(buf, size, "%.*s/.%s.tmp-%d-%d", (int)(slash - path), path, slash + 1, (int)getpid(), n);
}
