/* Opens that stay inside a dataset folder, and output opens that never write through a link
 * (see safe_open.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__linux__) && __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#ifdef SYS_openat2
#define PB_HAVE_OPENAT2 1
#endif
#endif

#include "common/safe_open.h"

static int outside(const char *root, const char *rel, const char *what, struct pb_error *err) {
  return pb_error_set(err, PB_EFORMAT,
                      "%s/%s leads outside %s %s (a symbolic link or '..' points elsewhere); "
                      "pipebench reads only what lies inside it",
                      root, rel, what, root);
}

/* realpath(root/rel) under realpath(root): for kernels without openat2. */
static int inside_by_realpath(const char *root, const char *rel, const char *what,
                              struct pb_error *err) {
  char full[PATH_MAX + 256];
  if (snprintf(full, sizeof full, "%s/%s", root, rel) >= (int)sizeof full)
    return pb_error_set(err, PB_EINVAL, "%s/%s: path too long", root, rel);
  char *r = realpath(root, NULL);
  if (r == NULL) return pb_error_set(err, -errno, "%s: %s", root, strerror(errno));
  char *f = realpath(full, NULL);
  int rc = PB_OK;
  if (f == NULL) {
    if (errno != ENOENT) rc = pb_error_set(err, -errno, "%s: %s", full, strerror(errno));
  } else {
    size_t n = strlen(r);
    int in = strcmp(r, "/") == 0 || (strncmp(f, r, n) == 0 && (f[n] == '/' || f[n] == '\0'));
    if (!in) rc = outside(root, rel, what, err);
  }
  free(f);
  free(r);
  return rc;
}

int pb__entry_inside(const char *root, const char *rel, const char *what, struct pb_error *err) {
  if (rel[0] == '/') return outside(root, rel, what, err);
#ifdef PB_HAVE_OPENAT2
  int dfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return pb_error_set(err, -errno, "%s: %s", root, strerror(errno));
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  int fd = (int)syscall(SYS_openat2, dfd, rel, &how, sizeof how);
  int e = errno;
  close(dfd);
  if (fd >= 0) {
    close(fd);
    return PB_OK;
  }
  if (e == EXDEV || e == ELOOP) return outside(root, rel, what, err);
  if (e != ENOSYS && e != EPERM && e != EINVAL && e != E2BIG) return PB_OK; /* the open tells */
#endif
  return inside_by_realpath(root, rel, what, err);
}

int pb__open_beneath(int dirfd, const char *rel, int flags) {
#ifdef PB_HAVE_OPENAT2
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (uint64_t)(unsigned)flags;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  int fd = (int)syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
  if (fd >= 0 || (errno != ENOSYS && errno != EPERM)) return fd;
#endif
  if (rel[0] == '/') {
    errno = EXDEV;
    return -1;
  }
  return openat(dirfd, rel, flags | O_NOFOLLOW);
}

int pb__open_output(const char *path, int *fd, struct pb_error *err) {
  *fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0666);
  if (*fd < 0 && errno == ELOOP) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISCHR(st.st_mode)) {
      *fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
    } else if (unlink(path) == 0 || errno == ENOENT) {
      /* The link goes, and O_EXCL makes sure the file made is a new one of its own. */
      *fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0666);
    }
  }
  if (*fd < 0) return pb_error_set(err, -errno, "cannot write %s: %s", path, strerror(errno));
  return PB_OK;
}
