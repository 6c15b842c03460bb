/* The local-file backend of the I/O layer: pread loops, scattered reads as sorted and merged
 * preadv calls, a mapping where it is safe, O_DIRECT through aligned bounce buffers. A file
 * that changes under a read (size or modification time since open) is an error naming it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/fs.h"
#include "io/io.h"

/* Two ranges of a scattered read this close are read in one preadv, the bytes between them
 * into a junk buffer: a system call costs more than copying this much from the page cache. */
#define GAP_MAX ((size_t)64 << 10)
/* Vectors per preadv (Linux's IOV_MAX is 1024). */
#define MAX_IOV 1024
/* O_DIRECT: offsets, lengths and buffers aligned to this (the largest logical block size in
 * common use), read through a bounce buffer of the options' block size (default below). */
#define DIRECT_ALIGN ((size_t)4096)
#define DIRECT_BLOCK ((size_t)1 << 20)

typedef struct file_io {
  pb__io_file h;
  int fd;
  int direct;          /* fd was opened with O_DIRECT */
  int may_map;         /* opts allow a mapping */
  size_t block;        /* bounce buffer size for O_DIRECT */
  struct timespec mtime;
  const void *map;     /* the mapping, once made */
  unsigned char *junk; /* GAP_MAX bytes for the holes of merged reads */
  unsigned char *bounce;
} file_io;

static file_io *as_file(pb__io_file *f) { return (file_io *)f; }

int pb__io_fd_pread(int fd, void *dst, size_t len, uint64_t off, const char *name,
                    struct pb_error *err) {
  size_t got = 0;
  while (got < len) {
    size_t want = len - got < (size_t)SSIZE_MAX ? len - got : (size_t)SSIZE_MAX;
    ssize_t r = pread(fd, (char *)dst + got, want, (off_t)(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return pb_error_set(err, -errno, "%s: read failed at byte %llu: %s", name,
                          (unsigned long long)(off + got), strerror(errno));
    if (r == 0)
      return pb_error_set(err, PB_EIO, "%s: ends at byte %llu, the read needs bytes up to %llu",
                          name, (unsigned long long)(off + got),
                          (unsigned long long)(off + len));
    got += (size_t)r;
  }
  return PB_OK;
}

/* ---- change detection -------------------------------------------------------------------- */

static int changed(const file_io *f, const struct stat *st) {
  return (uint64_t)st->st_size != f->h.size || st->st_mtim.tv_sec != f->mtime.tv_sec ||
         st->st_mtim.tv_nsec != f->mtime.tv_nsec;
}

static int changed_error(const file_io *f, const struct stat *st, struct pb_error *err) {
  if ((uint64_t)st->st_size < f->h.size)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: the file shrank from %llu to %lld bytes while it was open "
                        "(truncated in place)",
                        f->h.location, (unsigned long long)f->h.size, (long long)st->st_size);
  return pb_error_set(err, PB_EFORMAT,
                      "%s: the file changed while it was open (now %lld bytes, was %llu; "
                      "rewritten in place?)",
                      f->h.location, (long long)st->st_size, (unsigned long long)f->h.size);
}

int pb__io_check(pb__io_file *f, struct pb_error *err) {
  if (f->be != &pb__io_file_backend) return PB_OK;
  file_io *x = as_file(f);
  struct stat st;
  if (fstat(x->fd, &st) != 0)
    return pb_error_set(err, -errno, "%s: %s", f->location, strerror(errno));
  return changed(x, &st) ? changed_error(x, &st, err) : PB_OK;
}

/* After a read that ran into the end of the file: the message says how the file changed. */
static int short_read(file_io *f, uint64_t at, struct pb_error *err) {
  struct stat st;
  if (fstat(f->fd, &st) == 0 && changed(f, &st)) return changed_error(f, &st, err);
  return pb_error_set(err, PB_EFORMAT, "%s: ends at byte %llu, before the %llu bytes it had at open",
                      f->h.location, (unsigned long long)at, (unsigned long long)f->h.size);
}

/* ---- open, close ---------------------------------------------------------------------------- */

static int adopt(int fd, const char *location, const pb_read_options *opts,
                 const struct stat *known, file_io **out, struct pb_error *err) {
  *out = NULL;
  struct stat st;
  if (known != NULL) {
    st = *known;
  } else if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return pb_error_set(err, -e, "%s: %s", location, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return pb_error_set(err, PB_EFORMAT, "%s is %s, not a regular file", location,
                        pb__file_kind(st.st_mode));
  }
  file_io *f = calloc(1, sizeof *f);
  char *loc = strdup(location);
  if (f == NULL || loc == NULL) {
    free(f);
    free(loc);
    close(fd);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  f->h.be = &pb__io_file_backend;
  f->h.location = loc;
  f->h.size = (uint64_t)st.st_size;
  f->fd = fd;
  f->mtime = st.st_mtim;
  f->may_map = opts == NULL || opts->map != 0;
  f->block = opts != NULL && opts->block_size > 0 ? opts->block_size : DIRECT_BLOCK;
  f->block = (f->block + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
  if (opts != NULL && opts->direct == 1) {
    /* O_DIRECT on a second descriptor: where the file system refuses it (tmpfs), reads stay
     * buffered. The first descriptor keeps the fstat checks and a mapping possible. */
    int dfd = -1;
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    dfd = open(proc, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (dfd >= 0) {
      struct stat ds;
      if (fstat(dfd, &ds) == 0 && ds.st_ino == st.st_ino && ds.st_dev == st.st_dev) {
        close(fd);
        f->fd = dfd;
        f->direct = 1;
      } else {
        close(dfd);
      }
    }
  }
  *out = f;
  return PB_OK;
}

static int file_open(const char *location, const pb_read_options *opts, pb__io_file **out,
                     struct pb_error *err) {
  *out = NULL;
  /* O_NONBLOCK: a FIFO or a device under this name must not stall the open (adopt refuses it
   * after its one fstat). */
  int fd = open(location, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return pb_error_set(err, errno == ENOENT ? PB_ENOTFOUND : -errno, "%s: %s", location,
                        strerror(errno));
  file_io *f;
  PB_RETURN_NOT_OK(adopt(fd, location, opts, NULL, &f, err));
  *out = &f->h;
  return PB_OK;
}

int pb__io_file_from_fd(int fd, const char *location, const pb_read_options *opts,
                        const struct stat *st, pb__io_file **out, struct pb_error *err) {
  *out = NULL;
  file_io *f;
  PB_RETURN_NOT_OK(adopt(fd, location, opts, st, &f, err));
  *out = &f->h;
  return PB_OK;
}

int pb__io_file_direct(const pb__io_file *f) {
  return f->be == &pb__io_file_backend && ((const file_io *)f)->direct;
}

static void file_close(pb__io_file *h) {
  file_io *f = as_file(h);
  if (f->map != NULL) munmap((void *)f->map, (size_t)h->size);
  if (f->fd >= 0) close(f->fd);
  free(f->junk);
  free(f->bounce);
  free(h->location);
  free(f);
}

/* ---- reads ---------------------------------------------------------------------------------- */

/* O_DIRECT: the aligned blocks that hold [off, off + len), through the bounce buffer. */
static int direct_read(file_io *f, unsigned char *dst, size_t len, uint64_t off,
                       struct pb_error *err) {
  if (f->bounce == NULL) {
    void *b = NULL;
    if (posix_memalign(&b, DIRECT_ALIGN, f->block) != 0)
      return pb_error_set(err, PB_ENOMEM, "%s: out of memory for a %zu-byte read buffer",
                          f->h.location, f->block);
    f->bounce = b;
  }
  while (len > 0) {
    uint64_t a = off / DIRECT_ALIGN * DIRECT_ALIGN;
    size_t lead = (size_t)(off - a);
    size_t want = lead + len < f->block ? lead + len : f->block;
    size_t ask = (want + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
    ssize_t r;
    do r = pread(f->fd, f->bounce, ask, (off_t)a);
    while (r < 0 && errno == EINTR);
    if (r < 0)
      return pb_error_set(err, -errno, "%s: read failed at byte %llu: %s", f->h.location,
                          (unsigned long long)a, strerror(errno));
    if ((size_t)r < want) return short_read(f, a + (uint64_t)r, err);
    size_t take = want - lead;
    memcpy(dst, f->bounce + lead, take);
    dst += take;
    len -= take;
    off += take;
    f->h.stats.requests++;
    f->h.stats.bytes += r;
    pb__io_count(1, r);
  }
  return PB_OK;
}

/* Reads the vectors v[0..nv) from off on, looping over short reads and EINTR (v is consumed). */
static int readv_all(file_io *f, struct iovec *v, int nv, uint64_t off, struct pb_error *err) {
  while (nv > 0) {
    ssize_t r = nv == 1 ? pread(f->fd, v[0].iov_base, v[0].iov_len, (off_t)off)
                        : preadv(f->fd, v, nv, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return pb_error_set(err, -errno, "%s: read failed at byte %llu: %s", f->h.location,
                          (unsigned long long)off, strerror(errno));
    if (r == 0) return short_read(f, off, err);
    f->h.stats.requests++;
    f->h.stats.bytes += r;
    pb__io_count(1, r);
    off += (uint64_t)r;
    size_t skip = (size_t)r;
    int j = 0;
    while (j < nv && skip >= v[j].iov_len) skip -= v[j++].iov_len;
    v += j;
    nv -= j;
    if (nv > 0) {
      v[0].iov_base = (unsigned char *)v[0].iov_base + skip;
      v[0].iov_len -= skip;
    }
  }
  return PB_OK;
}

static int file_pread(pb__io_file *h, void *dst, size_t len, uint64_t off, struct pb_error *err) {
  file_io *f = as_file(h);
  if (f->direct) {
    PB_RETURN_NOT_OK(direct_read(f, dst, len, off, err));
  } else {
    while (len > 0) { /* a single pread moves at most about 2 GiB on Linux */
      size_t step = len < ((size_t)1 << 30) ? len : ((size_t)1 << 30);
      struct iovec v = {dst, step};
      PB_RETURN_NOT_OK(readv_all(f, &v, 1, off, err));
      dst = (unsigned char *)dst + step;
      len -= step;
      off += step;
    }
  }
  return PB_OK;
}

/* A range's place in file order: sorted by offset, ties by position in the caller's list. */
typedef struct range_key {
  uint64_t off;
  size_t i;
} range_key;

static int cmp_key(const void *a, const void *b) {
  const range_key *x = a, *y = b;
  if (x->off != y->off) return x->off < y->off ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

/* The ranges in file order, into k (n entries). Ranges that come sorted (the usual case: a
 * chunk's rows, a page's values) skip the sort. */
static range_key *range_order_into(const pb__io_range *r, size_t n, range_key *k) {
  int sorted = 1;
  for (size_t i = 0; i < n; i++) {
    k[i] = (range_key){r[i].off, i};
    if (i > 0 && r[i].off < r[i - 1].off) sorted = 0;
  }
  if (!sorted) qsort(k, n, sizeof *k, cmp_key);
  return k;
}

/* The same into a malloc'd array; NULL when out of memory. */
static range_key *range_order(const pb__io_range *r, size_t n) {
  range_key *k = malloc(n * sizeof *k);
  return k != NULL ? range_order_into(r, n, k) : NULL;
}

/* Ranges in file order become runs read by one preadv each: a range that starts at most GAP_MAX
 * bytes after the run's end joins it (the hole read into the junk buffer), so every byte goes
 * from the kernel straight to its place. A range that overlaps the run is read on its own
 * afterwards (rare: callers' ranges seldom overlap). */
static int file_preadv(pb__io_file *h, const pb__io_range *r, size_t n, struct pb_error *err) {
  file_io *f = as_file(h);
  if (f->direct) {
    for (size_t i = 0; i < n; i++)
      if (r[i].len > 0) PB_RETURN_NOT_OK(direct_read(f, r[i].dst, r[i].len, r[i].off, err));
    return PB_OK;
  }
  /* a few ranges (the usual case) need no allocation */
  enum { FEW = 32 };
  range_key k_few[FEW];
  size_t later_few[FEW];
  struct iovec v_few[2 * FEW + 1];
  int few = n <= FEW;
  range_key *k = few ? range_order_into(r, n, k_few) : range_order(r, n);
  size_t *later = few ? later_few : malloc(n * sizeof *later);
  size_t v_cap = few ? 2 * FEW + 1 : MAX_IOV;
  struct iovec *v = few ? v_few : malloc(MAX_IOV * sizeof *v);
  int rc = PB_OK;
  if (k == NULL || later == NULL || v == NULL) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  size_t n_later = 0, at = 0;
  while (rc == PB_OK && at < n) {
    while (at < n && r[k[at].i].len == 0) at++;
    if (at == n) break;
    const pb__io_range *first = &r[k[at].i];
    uint64_t start = first->off, pos = first->off + first->len;
    int nv = 1;
    v[0] = (struct iovec){first->dst, first->len};
    for (at++; at < n; at++) {
      const pb__io_range *q = &r[k[at].i];
      if (q->len == 0) continue;
      if (q->off < pos) { /* overlaps the run */
        later[n_later++] = k[at].i;
        continue;
      }
      if (q->off - pos > GAP_MAX || (size_t)nv + 2 > v_cap) break;
      if (q->off > pos) {
        if (f->junk == NULL && (f->junk = malloc(GAP_MAX)) == NULL) {
          rc = pb_error_set(err, PB_ENOMEM, "out of memory");
          break;
        }
        v[nv++] = (struct iovec){f->junk, (size_t)(q->off - pos)};
      }
      v[nv++] = (struct iovec){q->dst, q->len};
      pos = q->off + q->len;
    }
    if (rc == PB_OK) rc = readv_all(f, v, nv, start, err);
  }
  for (size_t j = 0; rc == PB_OK && j < n_later; j++) {
    struct iovec one = {r[later[j]].dst, r[later[j]].len};
    rc = readv_all(f, &one, 1, r[later[j]].off, err);
  }
  if (!few) {
    free(k);
    free(later);
    free(v);
  }
  return rc;
}

static int file_map(pb__io_file *h, const void **data, struct pb_error *err) {
  file_io *f = as_file(h);
  *data = NULL;
  if (!f->may_map)
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: mapping is off for this read", h->location);
  if (f->map == NULL) {
    if (h->size == 0 || h->size > (uint64_t)SIZE_MAX)
      return pb_error_set(err, PB_EUNSUPPORTED, "%s: a file of %llu bytes is not mapped",
                          h->location, (unsigned long long)h->size);
    void *m = mmap(NULL, (size_t)h->size, PROT_READ, MAP_SHARED, f->fd, 0);
    if (m == MAP_FAILED)
      return pb_error_set(err, PB_EUNSUPPORTED, "%s: cannot be mapped: %s", h->location,
                          strerror(errno));
    f->map = m;
  }
  *data = f->map;
  return PB_OK;
}

/* ---- folders -------------------------------------------------------------------------------- */

static int file_stat(const char *location, const pb_read_options *opts, pb__io_kind *kind,
                     uint64_t *size, struct pb_error *err) {
  (void)opts;
  struct stat st;
  *kind = PB__IO_MISSING;
  if (size != NULL) *size = 0;
  if (stat(location, &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return PB_OK;
    return pb_error_set(err, -errno, "%s: %s", location, strerror(errno));
  }
  *kind = S_ISREG(st.st_mode) ? PB__IO_FILE : S_ISDIR(st.st_mode) ? PB__IO_DIR : PB__IO_OTHER;
  if (size != NULL && S_ISREG(st.st_mode)) *size = (uint64_t)st.st_size;
  return PB_OK;
}

static int file_list(const char *location, const pb_read_options *opts, char ***names, size_t *n,
                     struct pb_error *err) {
  (void)opts;
  return pb__list_dir(location, names, n, err);
}

const pb__io_backend pb__io_file_backend = {
    .scheme = "file",
    .open = file_open,
    .pread = file_pread,
    .preadv = file_preadv,
    .map = file_map,
    .close = file_close,
    .stat = file_stat,
    .list = file_list,
};
