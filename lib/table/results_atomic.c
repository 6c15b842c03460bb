/* Atomic file replacement: temporary sibling, fsync, rename(2), fsync of the folder. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "table/results_internal.h"

#define TMP_TAG ".pbtmp-"

/* A short hash of the host name, so a sweep never touches another host's temporaries on a
 * shared file system (where its pids mean nothing here). */
static unsigned host_hash(void) {
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  uint32_t h = 2166136261u;
  for (const char *p = host; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
  return h;
}

static void split_path(const char *path, char *dir, size_t dir_size, const char **base) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL) {
    snprintf(dir, dir_size, ".");
    *base = path;
  } else if (slash == path) {
    snprintf(dir, dir_size, "/");
    *base = slash + 1;
  } else {
    snprintf(dir, dir_size, "%.*s", (int)(slash - path), path);
    *base = slash + 1;
  }
}

static uint64_t random_bits(void) {
  static atomic_uint_fast64_t counter; /* writers may run on several threads */
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 16) ^
               ((uint64_t)(atomic_fetch_add(&counter, 1) + 1) * 0x9e3779b97f4a7c15ull);
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  return x;
}

int pb__atomic_open(const char *path, char *tmp, size_t tmp_size, int *fd,
                    struct pb_error *err) {
  *fd = -1;
  if (path == NULL || path[0] == '\0') return pb_error_set(err, PB_EINVAL, "empty output path");
  char dir[4096];
  const char *base;
  split_path(path, dir, sizeof dir, &base);
  if (base[0] == '\0') return pb_error_set(err, PB_EINVAL, "%s: names a folder, not a file", path);
  unsigned hh = host_hash();
  for (int attempt = 0; attempt < 16; attempt++) {
    int n;
    if (strrchr(path, '/') == NULL)
      n = snprintf(tmp, tmp_size, ".%s" TMP_TAG "%08x-%ld-%012llx", base, hh, (long)getpid(),
                   (unsigned long long)(random_bits() & 0xffffffffffffull));
    else
      n = snprintf(tmp, tmp_size, "%s/.%s" TMP_TAG "%08x-%ld-%012llx",
                   strcmp(dir, "/") == 0 ? "" : dir, base, hh, (long)getpid(),
                   (unsigned long long)(random_bits() & 0xffffffffffffull));
    if (n < 0 || (size_t)n >= tmp_size)
      return pb_error_set(err, PB_EINVAL, "%s: path too long for a temporary name", path);
    /* O_EXCL: never reuse someone else's file; 0666 so umask decides, as for a plain create. */
    int f = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (f >= 0) {
      *fd = f;
      return PB_OK;
    }
    if (errno != EEXIST)
      return pb_error_set(err, -errno, "%s: cannot create temporary file %s: %s", path, tmp,
                          strerror(errno));
  }
  return pb_error_set(err, PB_EIO, "%s: no free temporary name", path);
}

void pb__atomic_abort(const char *tmp) {
  if (tmp != NULL && tmp[0] != '\0') unlink(tmp);
}

int pb__atomic_commit(const char *tmp, const char *path, struct pb_error *err) {
  int fd = open(tmp, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    pb__atomic_abort(tmp);
    return pb_error_set(err, -e, "%s: temporary file %s vanished: %s", path, tmp, strerror(e));
  }
  /* The data must be on disk before the rename makes them visible under the real name. */
  if (fsync(fd) != 0) {
    int e = errno;
    close(fd);
    pb__atomic_abort(tmp);
    return pb_error_set(err, PB_EIO, "%s: fsync of %s failed: %s", path, tmp, strerror(e));
  }
  close(fd);
  if (rename(tmp, path) != 0) {
    int e = errno;
    pb__atomic_abort(tmp);
    return pb_error_set(err, -e, "%s: cannot rename %s into place: %s", path, tmp, strerror(e));
  }
  /* Best effort: make the rename itself durable. Some file systems refuse fsync on a folder. */
  char dir[4096];
  const char *base;
  split_path(path, dir, sizeof dir, &base);
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  return PB_OK;
}

int pb__atomic_sweep(const char *path) {
  if (path == NULL) return 0;
  char dir[4096], prefix[1024];
  const char *base;
  split_path(path, dir, sizeof dir, &base);
  int n = snprintf(prefix, sizeof prefix, ".%s" TMP_TAG "%08x-", base, host_hash());
  if (n < 0 || (size_t)n >= sizeof prefix) return 0;
  DIR *d = opendir(dir);
  if (d == NULL) return 0;
  int removed = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    /* DuckDB's COPY writes through a file of its own, "tmp_" + the target's name, so a writer
     * killed inside COPY leaves that one. */
    const char *name = e->d_name;
    if (strncmp(name, "tmp_", 4) == 0) name += 4;
    if (strncmp(name, prefix, (size_t)n) != 0) continue;
    char *end;
    long pid = strtol(name + n, &end, 10);
    if (end == name + n || *end != '-' || pid <= 0) continue;
    /* Only a writer that is gone for sure: ESRCH. A live or foreign (EPERM) pid is left. */
    if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    char full[8192];
    int m = snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
    if (m < 0 || (size_t)m >= sizeof full) continue;
    if (unlink(full) == 0) removed++;
  }
  closedir(d);
  return removed;
}

int pb__write_all(int fd, const void *data, size_t size, const char *name, struct pb_error *err) {
  const unsigned char *p = data;
  size_t done = 0;
  while (done < size) {
    ssize_t w = write(fd, p + done, size - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = w < 0 ? errno : EIO;
      return pb_error_set(err, PB_EIO, "%s: write failed: %s", name, strerror(e));
    }
    done += (size_t)w;
  }
  return PB_OK;
}

int pb__results_slurp(const char *path, char **data, size_t *size, struct pb_error *err) {
  *data = NULL;
  *size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return pb_error_set(err, e == ENOENT ? PB_ENOTFOUND : -e, "%s: cannot open: %s", path,
                        strerror(e));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return pb_error_set(err, PB_EIO, "%s: not a regular file", path);
  }
  size_t n = (size_t)st.st_size;
  char *buf = malloc(n + 1);
  if (buf == NULL) {
    close(fd);
    return pb_error_set(err, PB_ENOMEM, "%s: out of memory for %zu bytes", path, n);
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      free(buf);
      return pb_error_set(err, PB_EIO, "%s: read failed: %s", path, strerror(e));
    }
    if (r == 0) break; /* shrank while reading: take what is there */
    got += (size_t)r;
  }
  close(fd);
  buf[got] = '\0';
  *data = buf;
  *size = got;
  return PB_OK;
}

int pb_write_file_atomic(const char *path, const void *data, size_t size,
                         struct pb_error *err) {
  if (path == NULL || (data == NULL && size > 0))
    return pb_error_set(err, PB_EINVAL, "pb_write_file_atomic: invalid argument");
  pb__atomic_sweep(path);
  char tmp[4096];
  int fd;
  PB_RETURN_NOT_OK(pb__atomic_open(path, tmp, sizeof tmp, &fd, err));
  int rc = pb__write_all(fd, data, size, tmp, err);
  if (close(fd) != 0 && rc == 0)
    rc = pb_error_set(err, PB_EIO, "%s: close of %s failed: %s", path, tmp, strerror(errno));
  if (rc != 0) {
    pb__atomic_abort(tmp);
    return rc;
  }
  return pb__atomic_commit(tmp, path, err);
}
