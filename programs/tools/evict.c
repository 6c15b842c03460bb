/* Cold-cache control: drop a dataset's files from the page cache. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipebench/bench.h"
#include "pipebench/format.h"

static int evict(const char *path, int depth, struct pb_error *err) {
  struct stat st;
  if (stat(path, &st) != 0) return pb_error_set(err, PB_ENOTFOUND, "%s: %s", path, strerror(errno));
  if (S_ISREG(st.st_mode)) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return pb_error_set(err, -errno, "%s: %s", path, strerror(errno));
    /* Dirty pages cannot be dropped; write them back first. */
    fdatasync(fd);
    int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    if (rc != 0) return pb_error_set(err, -rc, "%s: posix_fadvise: %s", path, strerror(rc));
    return 1;
  }
  if (!S_ISDIR(st.st_mode) || depth > 32) return 0;
  DIR *d = opendir(path);
  if (d == NULL) return pb_error_set(err, -errno, "%s: %s", path, strerror(errno));
  int total = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char child[4096];
    snprintf(child, sizeof child, "%s/%s", path, e->d_name);
    int n = evict(child, depth + 1, err);
    if (n < 0) {
      closedir(d);
      return n;
    }
    total += n;
  }
  closedir(d);
  return total;
}

int pb_evict_path(const char *path, struct pb_error *err) {
  if (pb_location_is_url(path)) return 0; /* a server's caches are its own: nothing to drop here */
  return evict(path, 0, err);
}
