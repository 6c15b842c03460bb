/* File-system helpers and the one temporary-name scheme (see fs.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/fs.h"
#include "pipebench/results.h"

#define TMP_TAG ".pbtmp-"

void pb__path_split(const char *path, char *dir, size_t dir_size, const char **base) {
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

int pb__mkdirs(const char *path, struct pb_error *err) {
  char buf[4096];
  if (path == NULL || path[0] == '\0') return pb_error_set(err, PB_EINVAL, "empty folder name");
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
    return pb_error_set(err, PB_EINVAL, "%s: path too long", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return pb_error_set(err, -errno, "%s: cannot create folder: %s", buf, strerror(errno));
    *p = '/';
  }
  if (mkdir(buf, 0777) != 0) {
    int e = errno;
    struct stat st;
    if (e != EEXIST) return pb_error_set(err, -e, "%s: cannot create folder: %s", buf, strerror(e));
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
      return pb_error_set(err, PB_EIO, "%s exists and is not a folder", buf);
  }
  return PB_OK;
}

int pb_mkdirs(const char *dir, struct pb_error *err) { return pb__mkdirs(dir, err); }

const char *pb__file_kind(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "a special file";
}

int pb__check_file_kind(const char *path, int dir_ok, const char *what, struct pb_error *err) {
  struct stat st;
  if (stat(path, &st) != 0)
    return pb_error_set(err, errno == ENOENT ? PB_ENOTFOUND : -errno, "%s: %s", path,
                        strerror(errno));
  if (S_ISREG(st.st_mode) || (dir_ok && S_ISDIR(st.st_mode))) return PB_OK;
  return pb_error_set(err, PB_EFORMAT, "%s is %s, not %s", path, pb__file_kind(st.st_mode), what);
}

int pb__open_regular(const char *path, const char *what, int *fd, struct pb_error *err) {
  *fd = -1;
  int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f < 0)
    return pb_error_set(err, errno == ENOENT ? PB_ENOTFOUND : -errno, "%s: %s", path,
                        strerror(errno));
  struct stat st;
  if (fstat(f, &st) != 0) {
    int e = errno;
    close(f);
    return pb_error_set(err, -e, "%s: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(f);
    return pb_error_set(err, PB_EFORMAT, "%s is %s, not %s", path, pb__file_kind(st.st_mode),
                        what);
  }
  *fd = f;
  return PB_OK;
}

int pb__output_check(const char *path, struct pb_error *err) {
  if (path == NULL || path[0] == '\0') return pb_error_set(err, PB_EINVAL, "empty output path");
  struct stat st;
  if (stat(path, &st) != 0) {
    if (errno == ENOENT) return PB_OK; /* missing, or a link to nothing: made anew */
    return pb_error_set(err, -errno, "%s: %s", path, strerror(errno));
  }
  if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) return PB_OK;
  return pb_error_set(err, PB_EIO,
                      "%s is %s; a dataset is a file or a folder, and renaming one into place "
                      "would replace it",
                      path, pb__file_kind(st.st_mode));
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

/* Reads the n bytes fstat gave of the open regular file fd into a new pb_alloc'd buffer (a file
 * that grows meanwhile is not followed) and closes fd, whatever happens. */
static int read_whole(int fd, size_t n, const char *path, void **data, size_t *size,
                      struct pb_error *err) {
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
      int e = errno;
      close(fd);
      pb_free(buf, n);
      if (r == 0)
        return pb_error_set(err, PB_EIO, "%s: the file shrank while it was read (%zu of %zu bytes)",
                            path, got, n);
      return pb_error_set(err, PB_EIO, "%s: read failed: %s", path, strerror(e));
    }
    got += (size_t)r;
  }
  close(fd);
  *data = buf;
  *size = n;
  return PB_OK;
}

int pb__read_file(const char *path, void **data, size_t *size, struct pb_error *err) {
  *data = NULL;
  *size = 0;
  /* O_NONBLOCK: a FIFO under this name must not stall the open; it is refused below. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
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
  return read_whole(fd, (size_t)st.st_size, path, data, size, err);
}

int pb__write_all(int fd, const void *data, size_t size, const char *name, struct pb_error *err) {
  const unsigned char *p = data;
  size_t done = 0;
  while (done < size) {
    ssize_t w = write(fd, p + done, size - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int e = errno;
      return pb_error_set(err, -e, "%s: write failed: %s", name, strerror(e));
    }
    /* write() returns 0 only when nothing more fits; errno is not set then. */
    if (w == 0)
      return pb_error_set(err, -ENOSPC, "%s: write failed: %s", name, strerror(ENOSPC));
    done += (size_t)w;
  }
  return PB_OK;
}

int pb__write_file(const char *path, const void *data, size_t size, struct pb_error *err) {
  /* O_NOFOLLOW: its callers write into folders pipebench just made; a link there is not ours. */
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) return pb_error_set(err, -errno, "%s: cannot create: %s", path, strerror(errno));
  int rc = pb__write_all(fd, data, size, path, err);
  if (close(fd) != 0 && rc == PB_OK)
    rc = pb_error_set(err, -errno, "%s: close failed: %s", path, strerror(errno));
  return rc;
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

int pb__file_ends_with(const char *path, const void *tail, size_t n) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st;
  unsigned char buf[64];
  int ok = n <= sizeof buf && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
           (size_t)st.st_size >= n &&
           pread(fd, buf, n, (off_t)((size_t)st.st_size - n)) == (ssize_t)n &&
           memcmp(buf, tail, n) == 0;
  close(fd);
  return ok;
}

/* ---- temporary names ------------------------------------------------------------------------- */

/* A short hash of the host name, so a sweep never touches another host's temporaries on a
 * shared file system (where its pids mean nothing here). */
static unsigned host_hash(void) {
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  uint32_t h = 2166136261u;
  for (const char *p = host; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
  return h;
}

/* Distinct on every call, across threads, and unlikely to repeat across processes (a reused
 * pid must not find a dead writer's folder under the name it picks). */
static uint64_t random_bits(void) {
  static atomic_uint_fast64_t counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 16) ^
               ((uint64_t)(atomic_fetch_add(&counter, 1) + 1) * 0x9e3779b97f4a7c15ull);
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  return x;
}

int pb__temp_name_in(const char *dir, const char *path, char *buf, size_t size) {
  if (size > 0) buf[0] = '\0';
  if (path == NULL || path[0] == '\0') return PB_EINVAL;
  char own[4096];
  const char *base;
  pb__path_split(path, own, sizeof own, &base);
  if (base[0] == '\0') return PB_EINVAL;
  int n = snprintf(buf, size, "%s/.%s" TMP_TAG "%08x-%ld-%012llx",
                   strcmp(dir, "/") == 0 ? "" : dir, base, host_hash(), (long)getpid(),
                   (unsigned long long)(random_bits() & 0xffffffffffffull));
  if (n < 0 || (size_t)n >= size) {
    if (size > 0) buf[0] = '\0';
    return PB_EINVAL;
  }
  return PB_OK;
}

int pb__temp_sibling(const char *path, char *buf, size_t size) {
  if (size > 0) buf[0] = '\0';
  if (path == NULL || path[0] == '\0') return PB_EINVAL;
  if (strchr(path, '/') == NULL) { /* keep relative names relative: ".name.pbtmp-..." */
    int n = snprintf(buf, size, ".%s" TMP_TAG "%08x-%ld-%012llx", path, host_hash(),
                     (long)getpid(), (unsigned long long)(random_bits() & 0xffffffffffffull));
    if (n < 0 || (size_t)n >= size) {
      if (size > 0) buf[0] = '\0';
      return PB_EINVAL;
    }
    return PB_OK;
  }
  char dir[4096];
  const char *base;
  pb__path_split(path, dir, sizeof dir, &base);
  return pb__temp_name_in(dir, path, buf, size);
}

int pb__temp_sweep_in(const char *dir, const char *path) {
  if (dir == NULL || path == NULL) return 0;
  char own[4096], prefix[1024];
  const char *base;
  pb__path_split(path, own, sizeof own, &base);
  if (base[0] == '\0') return 0;
  int n = snprintf(prefix, sizeof prefix, ".%s" TMP_TAG "%08x-", base, host_hash());
  if (n < 0 || (size_t)n >= sizeof prefix) return 0;
  DIR *d = opendir(dir);
  if (d == NULL) return 0;
  /* Collect first: removing while readdir walks the same folder may skip entries. */
  char **dead = NULL;
  size_t ndead = 0, cap = 0;
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
    if (ndead == cap) {
      cap = cap ? 2 * cap : 8;
      char **nv = realloc(dead, cap * sizeof *nv);
      if (nv == NULL) break;
      dead = nv;
    }
    dead[ndead] = strdup(e->d_name);
    if (dead[ndead] != NULL) ndead++;
  }
  closedir(d);
  int removed = 0;
  for (size_t i = 0; i < ndead; i++) {
    char full[8192];
    int m = snprintf(full, sizeof full, "%s/%s", dir, dead[i]);
    if (m > 0 && (size_t)m < sizeof full && pb__remove_tree(full) == PB_OK) removed++;
  }
  pb__free_names(dead, ndead);
  return removed;
}

int pb__temp_sweep(const char *path) {
  if (path == NULL || path[0] == '\0') return 0;
  char dir[4096];
  const char *base;
  pb__path_split(path, dir, sizeof dir, &base);
  return pb__temp_sweep_in(dir, path);
}

int pb__read_file_max(const char *path, size_t max, void **data, size_t *size,
                      struct pb_error *err) {
  *data = NULL;
  *size = 0;
  int fd;
  PB_RETURN_NOT_OK(pb__open_regular(path, "a regular file", &fd, err));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return pb_error_set(err, -e, "%s: %s", path, strerror(e));
  }
  if ((uint64_t)st.st_size > (uint64_t)max) {
    close(fd);
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: %lld bytes, more than the %zu pipebench reads "
                        "from such a file", path, (long long)st.st_size, max);
  }
  return read_whole(fd, (size_t)st.st_size, path, data, size, err);
}
