/* The on-disk cache of remote reads (read option cache = "disk:PATH", or PIPEBENCH_READ_CACHE):
 * each range fetched is kept in PATH under the SHA-256 of its key (URL, the object's ETag or
 * Last-Modified at open, offset and length), filled on first read, as Mosaic Streaming's local
 * cache is. A changed object has another validator, so another key: old bytes are never served
 * for it. Files are named by hex digits only, created beneath PATH's own descriptor without
 * following links, written to a temporary name and renamed into place: nothing is written
 * outside PATH, and a reader never sees half an entry. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io.h"
#include "io/s3_sigv4.h"

#define MAGIC "PBRDC001"

const char *pb__io_cache_dir(const pb_read_options *opts) {
  const char *c = opts != NULL ? opts->cache : NULL;
  pb_read_options env;
  if (c == NULL) { /* formats keep no pointer to the caller's string: the override, then */
    pb__io_options_resolve(NULL, &env);
    c = env.cache;
  }
  if (c == NULL || strncmp(c, "disk:", 5) != 0 || c[5] == '\0') return NULL;
  return c + 5;
}

/* The entry's folder (dir/ab, opened beneath dir without following links) and file name. */
static int entry_at(const char *dir, const char *key, int create, char name[65]) {
  uint8_t h[32];
  pb__sha256(key, strlen(key), h);
  for (int i = 0; i < 32; i++) snprintf(name + 2 * i, 3, "%02x", h[i]);
  if (create) (void)mkdir(dir, 0700);
  int top = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (top < 0) return -1;
  char sub[3] = {name[0], name[1], '\0'};
  if (create) (void)mkdirat(top, sub, 0700);
  int fd = openat(top, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  close(top);
  return fd;
}

static int read_full(int fd, void *dst, size_t n) {
  unsigned char *p = dst;
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static int write_full(int fd, const void *src, size_t n) {
  const unsigned char *p = src;
  while (n > 0) {
    ssize_t r = write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

int pb__io_cache_get(const char *dir, const char *key, void *dst, size_t len) {
  char name[65];
  int d = entry_at(dir, key, 0, name);
  if (d < 0) return 0;
  int fd = openat(d, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  close(d);
  if (fd < 0) return 0;
  char magic[8];
  uint64_t klen = 0, dlen = 0;
  int hit = read_full(fd, magic, 8) == 0 && memcmp(magic, MAGIC, 8) == 0 &&
            read_full(fd, &klen, 8) == 0 && klen == strlen(key) && klen < 65536;
  if (hit) { /* the key itself, so a digest collision can never serve other bytes */
    char *k = malloc((size_t)klen);
    hit = k != NULL && read_full(fd, k, (size_t)klen) == 0 && memcmp(k, key, (size_t)klen) == 0;
    free(k);
  }
  hit = hit && read_full(fd, &dlen, 8) == 0 && dlen == (uint64_t)len &&
        read_full(fd, dst, len) == 0;
  close(fd);
  return hit;
}

void pb__io_cache_put(const char *dir, const char *key, const void *src, size_t len) {
  char name[65], tmp[96];
  int d = entry_at(dir, key, 1, name);
  if (d < 0) return;
  snprintf(tmp, sizeof tmp, ".%s.%ld.tmp", name, (long)getpid());
  int fd = openat(d, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    close(d);
    return;
  }
  uint64_t klen = strlen(key), dlen = len;
  int ok = write_full(fd, MAGIC, 8) == 0 && write_full(fd, &klen, 8) == 0 &&
           write_full(fd, key, (size_t)klen) == 0 && write_full(fd, &dlen, 8) == 0 &&
           write_full(fd, src, len) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || renameat(d, tmp, d, name) != 0) (void)unlinkat(d, tmp, 0);
  close(d);
}
