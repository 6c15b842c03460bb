/* Atomic file replacement: temporary sibling, fsync, rename(2), fsync of the folder; character
 * devices are written in place instead (see resolve_target). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"
#include "pipebench/sys.h"
#include "table/results_internal.h"

/* Where the bytes finally go. A symbolic link is never written through: a link to a regular
 * file, or to nothing, is itself replaced by the new file (the file it named stays as it was);
 * a link to a character device counts as that device. A character device (/dev/null, a
 * terminal) is written in place, because a rename would replace the device node with a regular
 * file; anything else that is not a regular file is refused. *device: 1 when final is a
 * character device. */
static int resolve_target(const char *path, char *final, size_t final_size, int *device,
                          struct pb_error *err) {
  *device = 0;
  if (path == NULL || path[0] == '\0') return pb_error_set(err, PB_EINVAL, "empty output path");
  const char *slash = strrchr(path, '/');
  if (slash != NULL && slash[1] == '\0')
    return pb_error_set(err, PB_EINVAL, "%s: names a folder, not a file", path);
  if (snprintf(final, final_size, "%s", path) >= (int)final_size)
    return pb_error_set(err, PB_EINVAL, "%s: path too long", path);
  struct stat st;
  if (lstat(path, &st) != 0) {
    if (errno != ENOENT)
      return pb_error_set(err, -errno, "%s: %s", path, strerror(errno));
    return PB_OK;
  }
  if (S_ISLNK(st.st_mode)) {
    if (stat(path, &st) != 0 || S_ISREG(st.st_mode)) return PB_OK; /* the link is replaced */
    if (S_ISCHR(st.st_mode)) {
      char *real = realpath(path, NULL);
      if (real == NULL)
        return pb_error_set(err, -errno, "%s: %s", path, strerror(errno));
      int n = snprintf(final, final_size, "%s", real);
      free(real);
      if (n < 0 || (size_t)n >= final_size)
        return pb_error_set(err, PB_EINVAL, "%s: resolved path too long", path);
      *device = 1;
      return PB_OK;
    }
    return pb_error_set(err, PB_EIO,
                        "%s is a symbolic link to %s; pipebench writes only regular files there",
                        path, pb__file_kind(st.st_mode));
  }
  if (S_ISREG(st.st_mode)) return PB_OK;
  if (S_ISCHR(st.st_mode)) {
    *device = 1;
    return PB_OK;
  }
  const char *kind = S_ISDIR(st.st_mode)    ? "a folder"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                                            : "a special file";
  return pb_error_set(err, PB_EIO, "%s is %s; pipebench writes only regular files there", path,
                      kind);
}

/* A character device's temporary lives in the system's temporary folder: the device's own
 * folder (/dev) is no place for files, and may not be writable. */
static const char *device_tmp_dir(void) {
  return pb_tmp_dir();
}

int pb__atomic_open(const char *path, char *tmp, size_t tmp_size, int *fd,
                    struct pb_error *err) {
  *fd = -1;
  if (tmp_size > 0) tmp[0] = '\0';
  char final[4096];
  int device;
  PB_RETURN_NOT_OK(resolve_target(path, final, sizeof final, &device, err));
  if (device) pb__temp_sweep_in(device_tmp_dir(), final);
  else pb__temp_sweep(final);
  for (int attempt = 0; attempt < 16; attempt++) {
    int rc = device ? pb__temp_name_in(device_tmp_dir(), final, tmp, tmp_size)
                    : pb__temp_sibling(final, tmp, tmp_size);
    if (rc != PB_OK)
      return pb_error_set(err, PB_EINVAL, "%s: path too long for a temporary name", path);
    /* O_EXCL: never reuse someone else's file; 0666 so umask decides, as for a plain create. */
    int f = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (f >= 0) {
      *fd = f;
      return PB_OK;
    }
    if (errno != EEXIST) {
      int e = errno;
      pb_error_set(err, -e, "%s: cannot create temporary file %s: %s", path, tmp, strerror(e));
      tmp[0] = '\0';
      return -e;
    }
  }
  tmp[0] = '\0';
  return pb_error_set(err, PB_EIO, "%s: no free temporary name", path);
}

void pb__atomic_abort(const char *tmp) {
  if (tmp == NULL || tmp[0] == '\0') return;
  unlink(tmp);
  /* DuckDB's COPY writes "tmp_<name>" first and renames it; a failed COPY may leave it. */
  char dir[4096], side[8192];
  const char *base;
  pb__path_split(tmp, dir, sizeof dir, &base);
  int n = snprintf(side, sizeof side, "%s/tmp_%s", dir, base);
  if (n > 0 && (size_t)n < sizeof side) unlink(side);
}

/* Copies the finished temporary into a character device, written in place: no O_CREAT, no
 * O_TRUNC, no rename. /dev/full reports ENOSPC here, as it should. */
static int copy_to_device(const char *tmp, const char *final, const char *path,
                          struct pb_error *err) {
  int in = open(tmp, O_RDONLY | O_CLOEXEC);
  if (in < 0) return pb_error_set(err, -errno, "%s: cannot reopen %s: %s", path, tmp, strerror(errno));
  int out = open(final, O_WRONLY | O_NOCTTY | O_CLOEXEC);
  if (out < 0) {
    int e = errno;
    close(in);
    return pb_error_set(err, -e, "%s: cannot open for writing: %s", path, strerror(e));
  }
  int rc = PB_OK;
  char buf[65536];
  for (;;) {
    ssize_t r = read(in, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      rc = pb_error_set(err, -errno, "%s: read of %s failed: %s", path, tmp, strerror(errno));
      break;
    }
    if (r == 0) break;
    if ((rc = pb__write_all(out, buf, (size_t)r, path, err)) != PB_OK) break;
  }
  if (close(out) != 0 && rc == PB_OK)
    rc = pb_error_set(err, -errno, "%s: close failed: %s", path, strerror(errno));
  close(in);
  return rc;
}

int pb__atomic_commit(const char *tmp, const char *path, struct pb_error *err) {
  char final[4096];
  int device, rc;
  if ((rc = resolve_target(path, final, sizeof final, &device, err)) != PB_OK) {
    pb__atomic_abort(tmp);
    return rc;
  }
  if (device) {
    rc = copy_to_device(tmp, final, path, err);
    pb__atomic_abort(tmp);
    return rc;
  }
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
    return pb_error_set(err, -e, "%s: fsync of %s failed: %s", path, tmp, strerror(e));
  }
  close(fd);
  if (rename(tmp, final) != 0) {
    int e = errno;
    pb__atomic_abort(tmp);
    return pb_error_set(err, -e, "%s: cannot rename %s into place: %s", path, tmp, strerror(e));
  }
  /* Best effort: make the rename itself durable. Some file systems refuse fsync on a folder. */
  char dir[4096];
  const char *base;
  pb__path_split(final, dir, sizeof dir, &base);
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  return PB_OK;
}

int pb__atomic_begin(const char *path, char *tmp, size_t tmp_size, struct pb_error *err) {
  int fd;
  PB_RETURN_NOT_OK(pb__atomic_open(path, tmp, tmp_size, &fd, err));
  close(fd);
  return PB_OK;
}

int pb__atomic_finish(const char *tmp, const char *path, int rc, struct pb_error *err) {
  if (rc != PB_OK) {
    pb__atomic_abort(tmp);
    return rc;
  }
  struct stat st;
  if (stat(tmp, &st) != 0 || st.st_size == 0) {
    pb__atomic_abort(tmp);
    return pb_error_set(err, PB_EIO, "%s: nothing was written", path);
  }
  return pb__atomic_commit(tmp, path, err);
}

int pb_write_file_atomic(const char *path, const void *data, size_t size,
                         struct pb_error *err) {
  if (path == NULL || (data == NULL && size > 0))
    return pb_error_set(err, PB_EINVAL, "pb_write_file_atomic: invalid argument");
  char tmp[4096];
  int fd;
  PB_RETURN_NOT_OK(pb__atomic_open(path, tmp, sizeof tmp, &fd, err));
  int rc = pb__write_all(fd, data, size, path, err);
  if (close(fd) != 0 && rc == 0)
    rc = pb_error_set(err, -errno, "%s: close of %s failed: %s", path, tmp, strerror(errno));
  if (rc != 0) {
    pb__atomic_abort(tmp);
    return rc;
  }
  return pb__atomic_commit(tmp, path, err);
}
