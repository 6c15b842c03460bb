/* lib/io, the local-file backend: reads exact or an error naming the file (past the end, cut
 * short, changed since open), scattered reads right for unsorted, adjacent, overlapping and
 * empty ranges (a seeded random sweep against plain reads), mapping on and off, FIFOs and devices
 * refused without blocking, folders listed in order, O_DIRECT where the file system has it,
 * read_all's bound, joins, schemes, and the environment overrides with their older names. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "io/io.h"

static char dir[512];

static void make_dir(void) {
  const char *t = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/pb_io_XXXXXX", t != NULL && t[0] ? t : "/tmp");
  CHECK(mkdtemp(dir) != NULL);
}

static unsigned char byte_at(uint64_t i) { return (unsigned char)((i * 131u + (i >> 8) * 7u) ^ 0x5a); }

/* A file of n pattern bytes at dir/name; returns the path (static buffer per call site). */
static void write_pattern(const char *path, size_t n) {
  unsigned char *b = malloc(n ? n : 1);
  CHECK(b != NULL);
  for (size_t i = 0; i < n; i++) b[i] = byte_at(i);
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  CHECK_EQ(fwrite(b, 1, n, f), n);
  CHECK_EQ(fclose(f), 0);
  free(b);
}

static int all_pattern(const unsigned char *p, size_t n, uint64_t off) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != byte_at(off + i)) return 0;
  return 1;
}

static void test_pread(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/data.bin", dir);
  const size_t n = (size_t)3 << 20;
  write_pattern(path, n);
  struct pb_error err = {{0}};
  pb__io_file *f;
  CHECK_OK(pb__io_open(path, NULL, &f, &err), &err);
  EXPECT_EQ(pb__io_size(f), (uint64_t)n);
  unsigned char *buf = malloc(n);
  CHECK(buf != NULL);
  static const uint64_t offs[] = {0, 1, 4095, 4096, 65537, (3u << 20) - 10};
  for (size_t k = 0; k < sizeof offs / sizeof offs[0]; k++) {
    size_t len = (size_t)(n - offs[k] < 200000 ? n - offs[k] : 200000);
    memset(buf, 0, len);
    CHECK_OK(pb__io_pread(f, buf, len, offs[k], &err), &err);
    EXPECT(all_pattern(buf, len, offs[k]));
  }
  CHECK_OK(pb__io_pread(f, buf, n, 0, &err), &err); /* the whole file */
  EXPECT(all_pattern(buf, n, 0));
  CHECK_OK(pb__io_pread(f, buf, 0, n, &err), &err); /* nothing, at the very end */
  /* past the end: an error naming the file, nothing read as if it were there */
  EXPECT_EQ(pb__io_pread(f, buf, 11, n - 10, &err), PB_EFORMAT);
  EXPECT_CONTAINS(err.message, path);
  EXPECT_CONTAINS(err.message, "past the end");
  EXPECT(f->stats.requests > 0 && f->stats.bytes >= (int64_t)n);
  /* read_all: bounded */
  void *all;
  size_t all_n;
  EXPECT_EQ(pb__io_read_all(f, n - 1, &all, &all_n, &err), PB_EUNSUPPORTED);
  EXPECT_CONTAINS(err.message, path);
  EXPECT(all == NULL);
  CHECK_OK(pb__io_read_all(f, n, &all, &all_n, &err), &err);
  EXPECT_EQ(all_n, n);
  EXPECT(all_pattern(all, all_n, 0));
  pb_free(all, all_n);
  pb__io_close(f);
  /* an empty file reads whole as nothing */
  char empty[600];
  snprintf(empty, sizeof empty, "%s/empty.bin", dir);
  write_pattern(empty, 0);
  CHECK_OK(pb__io_read_file(empty, NULL, 10, &all, &all_n, &err), &err);
  EXPECT_EQ(all_n, 0u);
  pb_free(all, all_n);
  /* missing */
  char missing[600];
  snprintf(missing, sizeof missing, "%s/none.bin", dir);
  EXPECT_EQ(pb__io_open(missing, NULL, &f, &err), PB_ENOTFOUND);
  EXPECT_CONTAINS(err.message, missing);
  free(buf);
  printf("ok pread\n");
}

/* The file cut short, grown, or touched after open: a read that runs into the new end, a
 * whole-file read and pb__io_check are errors naming it. */
static void test_changed(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/changing.bin", dir);
  write_pattern(path, 100000);
  struct pb_error err = {{0}};
  unsigned char buf[1000];
  pb__io_file *f;
  CHECK_OK(pb__io_open(path, NULL, &f, &err), &err);
  CHECK_OK(pb__io_pread(f, buf, sizeof buf, 50000, &err), &err);
  CHECK_EQ(truncate(path, 40000), 0);
  EXPECT(pb__io_pread(f, buf, sizeof buf, 50000, &err) != PB_OK); /* beyond the new end */
  EXPECT_CONTAINS(err.message, path);
  EXPECT_CONTAINS(err.message, "shrank");
  EXPECT(pb__io_check(f, &err) != PB_OK);
  EXPECT_CONTAINS(err.message, path);
  EXPECT_CONTAINS(err.message, "shrank");
  pb__io_close(f);

  write_pattern(path, 100000);
  CHECK_OK(pb__io_open(path, NULL, &f, &err), &err);
  CHECK_OK(pb__io_check(f, &err), &err);
  /* rewritten in place, same size: the modification time tells */
  struct timespec ts[2] = {{.tv_sec = 1000000000, .tv_nsec = 0}, {.tv_sec = 1000000000, .tv_nsec = 0}};
  CHECK_EQ(utimensat(AT_FDCWD, path, ts, 0), 0);
  EXPECT(pb__io_check(f, &err) != PB_OK);
  EXPECT_CONTAINS(err.message, path);
  EXPECT_CONTAINS(err.message, "changed");
  void *all = NULL;
  size_t all_n = 0;
  EXPECT(pb__io_read_all(f, 1 << 20, &all, &all_n, &err) != PB_OK);
  EXPECT(all == NULL);
  pb__io_close(f);

  /* grown by an append */
  CHECK_OK(pb__io_open(path, NULL, &f, &err), &err);
  FILE *a = fopen(path, "ab");
  CHECK(a != NULL);
  fputs("more", a);
  fclose(a);
  EXPECT(pb__io_check(f, &err) != PB_OK);
  EXPECT_CONTAINS(err.message, "changed");
  EXPECT(pb__io_read_all(f, 1 << 20, &all, &all_n, &err) != PB_OK);
  pb__io_close(f);
  printf("ok changed under a read\n");
}

/* A seeded sweep: random lists of ranges (unsorted, overlapping, adjacent, empty, near and
 * far) read by one scattered read must equal each range read alone. */
static void test_preadv(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/scatter.bin", dir);
  const size_t n = (size_t)1 << 20;
  write_pattern(path, n);
  struct pb_error err = {{0}};
  pb__io_file *f;
  CHECK_OK(pb__io_open(path, NULL, &f, &err), &err);
  pb_rng rng;
  pb_rng_init(&rng, 27);
  enum { MAXR = 3000 };
  pb__io_range *r = malloc(MAXR * sizeof *r);
  unsigned char *mem = malloc((size_t)MAXR * 512);
  CHECK(r != NULL && mem != NULL);
  for (int round = 0; round < 300; round++) {
    size_t nr = 1 + (size_t)pb_rng_below(&rng, round % 10 == 0 ? MAXR : 40);
    uint64_t at = pb_rng_below(&rng, n);
    for (size_t i = 0; i < nr; i++) {
      size_t len = (size_t)pb_rng_below(&rng, 512); /* 0 included */
      switch (pb_rng_below(&rng, 5)) {
        case 0: at = pb_rng_below(&rng, n); break;                  /* anywhere */
        case 1: break;                                              /* same start */
        case 2: at = at + pb_rng_below(&rng, 600); break;           /* near: adjacent or gap */
        case 3: at = at > 300 ? at - pb_rng_below(&rng, 300) : 0; break; /* overlapping, back */
        default: at = at + pb_rng_below(&rng, 200000); break;       /* far */
      }
      if (at >= n) at = pb_rng_below(&rng, n);
      if (len > n - at) len = (size_t)(n - at);
      r[i] = (pb__io_range){at, len, mem + i * 512};
      at += len;
      if (at >= n) at = 0;
    }
    memset(mem, 0xEE, nr * 512);
    CHECK_OK(pb__io_preadv(f, r, nr, &err), &err);
    for (size_t i = 0; i < nr; i++) {
      if (!all_pattern(r[i].dst, r[i].len, r[i].off))
        EXPECT_FAIL("round %d: range %zu (%llu+%zu) of %zu read wrong", round, i,
                    (unsigned long long)r[i].off, r[i].len, nr);
      if (r[i].len < 512 && ((unsigned char *)r[i].dst)[r[i].len] != 0xEE)
        EXPECT_FAIL("round %d: range %zu wrote past its end", round, i);
    }
  }
  /* the gap rule: two ranges far apart are two requests, two adjacent ones one */
  unsigned char a[8], b[8];
  int64_t before = f->stats.requests;
  pb__io_range two[2] = {{100, 8, a}, {108, 8, b}};
  CHECK_OK(pb__io_preadv(f, two, 2, &err), &err);
  EXPECT_EQ(f->stats.requests - before, 1);
  EXPECT(all_pattern(a, 8, 100) && all_pattern(b, 8, 108));
  before = f->stats.requests;
  two[1].off = 900000;
  CHECK_OK(pb__io_preadv(f, two, 2, &err), &err);
  EXPECT_EQ(f->stats.requests - before, 2);
  EXPECT(all_pattern(b, 8, 900000));
  /* one range past the end fails the whole read, naming the file */
  two[1].off = n - 4;
  EXPECT_EQ(pb__io_preadv(f, two, 2, &err), PB_EFORMAT);
  EXPECT_CONTAINS(err.message, path);
  pb__io_close(f);
  free(r);
  free(mem);
  printf("ok preadv\n");
}

static void test_map(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/map.bin", dir);
  write_pattern(path, 70000);
  struct pb_error err = {{0}};
  pb__io_file *f;
  const void *m;
  pb_read_options o = PB_READ_OPTIONS_DEFAULTS;
  CHECK_OK(pb__io_open(path, &o, &f, &err), &err); /* -1: may map */
  CHECK_OK(pb__io_map(f, &m, &err), &err);
  EXPECT(all_pattern(m, 70000, 0));
  const void *again;
  CHECK_OK(pb__io_map(f, &again, &err), &err);
  EXPECT(again == m);
  pb__io_close(f);
  o.map = 0;
  CHECK_OK(pb__io_open(path, &o, &f, &err), &err);
  EXPECT_EQ(pb__io_map(f, &m, &err), PB_EUNSUPPORTED);
  EXPECT(m == NULL);
  EXPECT_CONTAINS(err.message, path);
  pb__io_close(f);
  printf("ok map\n");
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "blocked on a FIFO or a device\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
  _exit(1);
}

static void test_special(void) {
  signal(SIGALRM, on_alarm);
  alarm(20); /* an open or read that blocks fails the test instead of hanging it */
  char fifo[600];
  snprintf(fifo, sizeof fifo, "%s/pipe", dir);
  CHECK_EQ(mkfifo(fifo, 0600), 0);
  struct pb_error err = {{0}};
  pb__io_file *f = NULL;
  EXPECT_EQ(pb__io_open(fifo, NULL, &f, &err), PB_EFORMAT);
  EXPECT(f == NULL);
  EXPECT_CONTAINS(err.message, fifo);
  EXPECT_CONTAINS(err.message, "FIFO");
  void *d;
  size_t dn;
  EXPECT_EQ(pb__io_read_file(fifo, NULL, 100, &d, &dn, &err), PB_EFORMAT);
  EXPECT_EQ(pb__io_open("/dev/zero", NULL, &f, &err), PB_EFORMAT);
  EXPECT_CONTAINS(err.message, "character device");
  EXPECT_EQ(pb__io_open(dir, NULL, &f, &err), PB_EFORMAT); /* a folder is no file either */
  EXPECT_CONTAINS(err.message, "folder");
  pb__io_kind kind;
  uint64_t size;
  CHECK_OK(pb__io_stat(fifo, NULL, &kind, &size, &err), &err);
  EXPECT_EQ(kind, PB__IO_OTHER);
  /* a descriptor handed over is held to the same rule */
  int fd = open("/dev/null", O_RDONLY);
  CHECK(fd >= 0);
  EXPECT_EQ(pb__io_file_from_fd(fd, "/dev/null", NULL, NULL, &f, &err), PB_EFORMAT);
  alarm(0);
  printf("ok FIFO and devices refused\n");
}

static void test_list(void) {
  char sub[600], p[700];
  snprintf(sub, sizeof sub, "%s/tree", dir);
  CHECK_EQ(mkdir(sub, 0700), 0);
  static const char *const names[] = {"b", "a", "10", "C", "a.b", "2"};
  for (size_t i = 0; i < 6; i++) {
    snprintf(p, sizeof p, "%s/%s", sub, names[i]);
    write_pattern(p, i);
  }
  struct pb_error err = {{0}};
  char **v;
  size_t n;
  CHECK_OK(pb__io_list(sub, NULL, &v, &n, &err), &err);
  CHECK_EQ(n, 6u);
  static const char *const want[] = {"10", "2", "C", "a", "a.b", "b"};
  for (size_t i = 0; i < n; i++) EXPECT_STREQ(v[i], want[i]);
  pb__io_free_names(v, n);
  pb__io_kind kind;
  uint64_t size;
  CHECK_OK(pb__io_stat(sub, NULL, &kind, &size, &err), &err);
  EXPECT_EQ(kind, PB__IO_DIR);
  snprintf(p, sizeof p, "%s/2", sub);
  CHECK_OK(pb__io_stat(p, NULL, &kind, &size, &err), &err);
  EXPECT_EQ(kind, PB__IO_FILE);
  EXPECT_EQ(size, 5u);
  snprintf(p, sizeof p, "%s/nothing", sub);
  CHECK_OK(pb__io_stat(p, NULL, &kind, &size, &err), &err);
  EXPECT_EQ(kind, PB__IO_MISSING);
  EXPECT(pb__io_list(p, NULL, &v, &n, &err) != PB_OK);
  printf("ok list\n");
}

static void test_direct(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/direct.bin", dir);
  const size_t n = (size_t)5 << 20 | 123; /* not a multiple of any block */
  write_pattern(path, n);
  struct pb_error err = {{0}};
  pb_read_options o = PB_READ_OPTIONS_DEFAULTS;
  o.direct = 1;
  o.block_size = 64 << 10; /* several bounce-buffer rounds per read */
  pb__io_file *f;
  CHECK_OK(pb__io_open(path, &o, &f, &err), &err);
  if (!pb__io_file_direct(f))
    printf("skip: O_DIRECT is not available on %s (reads fall back to the page cache)\n", dir);
  unsigned char *buf = malloc(n);
  CHECK(buf != NULL);
  static const uint64_t offs[] = {0, 1, 4095, 4097, 1000000, (5u << 20) - 5000};
  for (size_t k = 0; k < sizeof offs / sizeof offs[0]; k++) {
    size_t len = (size_t)(n - offs[k]) < 300000 ? (size_t)(n - offs[k]) : 300000;
    CHECK_OK(pb__io_pread(f, buf + 1, len - 1, offs[k], &err), &err); /* unaligned memory */
    EXPECT(all_pattern(buf + 1, len - 1, offs[k]));
  }
  CHECK_OK(pb__io_pread(f, buf, n, 0, &err), &err);
  EXPECT(all_pattern(buf, n, 0));
  pb__io_range r[3] = {{n - 7, 7, buf}, {3, 9000, buf + 100}, {5000, 10, buf + 20000}};
  CHECK_OK(pb__io_preadv(f, r, 3, &err), &err);
  for (int i = 0; i < 3; i++) EXPECT(all_pattern(r[i].dst, r[i].len, r[i].off));
  EXPECT_EQ(pb__io_pread(f, buf, 2, n - 1, &err), PB_EFORMAT);
  pb__io_close(f);
  free(buf);
  printf("ok direct\n");
}

static void test_fd_pread(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/fd.bin", dir);
  write_pattern(path, 1000);
  int fd = open(path, O_RDONLY);
  CHECK(fd >= 0);
  unsigned char b[100];
  struct pb_error err = {{0}};
  CHECK_OK(pb__io_fd_pread(fd, b, 100, 900, "spool", &err), &err);
  EXPECT(all_pattern(b, 100, 900));
  EXPECT_EQ(pb__io_fd_pread(fd, b, 100, 950, "spool", &err), PB_EIO);
  EXPECT_CONTAINS(err.message, "spool");
  close(fd);
  printf("ok fd pread\n");
}

static void test_names(void) {
  char *j = pb__io_join("a", "b");
  EXPECT_STREQ(j, "a/b");
  free(j);
  j = pb__io_join("a/", "/b");
  EXPECT_STREQ(j, "a/b");
  free(j);
  j = pb__io_join("/", "b");
  EXPECT_STREQ(j, "/b");
  free(j);
  j = pb__io_join("http://host/x/?v=1", "y.zarr");
  EXPECT_STREQ(j, "http://host/x/y.zarr?v=1");
  free(j);
  j = pb__io_join("s3://bucket/prefix", "k");
  EXPECT_STREQ(j, "s3://bucket/prefix/k");
  free(j);
  EXPECT(pb__io_is_url("https://h/p"));
  EXPECT(pb__io_is_url("s3://b/k"));
  EXPECT(!pb__io_is_url("file:///tmp/x"));
  EXPECT(!pb__io_is_url("/tmp/a://b"));
  EXPECT(!pb__io_is_url("relative/path"));
  struct pb_error err = {{0}};
  EXPECT(pb__io_backend_for("/tmp/x", &err) == &pb__io_file_backend);
  EXPECT(pb__io_backend_for("file:///tmp/x", &err) == &pb__io_file_backend);
  EXPECT(pb__io_backend_for("gopher://h/x", &err) == NULL);
  EXPECT_CONTAINS(err.message, "gopher://");
  /* file:// reads the local path */
  char path[600], url[700];
  snprintf(path, sizeof path, "%s/url.bin", dir);
  write_pattern(path, 10);
  snprintf(url, sizeof url, "file://%s", path);
  void *d;
  size_t n;
  CHECK_OK(pb__io_read_file(url, NULL, 100, &d, &n, &err), &err);
  EXPECT_EQ(n, 10u);
  pb_free(d, n);
  printf("ok names\n");
}

static void test_env(void) {
  static const char *const vars[] = {"PIPEBENCH_MAP", "PB_OA_MMAP", "PIPEBENCH_PAGE_READER",
                                     "PB_OA_DIRECT", "PIPEBENCH_TIFF_STRIPS", "PB_TIFF_DIRECT",
                                     "PIPEBENCH_CACHE_MB", "PB_OA_CACHE_MB", "PIPEBENCH_DIRECT_IO",
                                     "PIPEBENCH_BLOCK_SIZE", "PIPEBENCH_RETRIES",
                                     "PIPEBENCH_TIMEOUT"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
  pb_read_options o, d = PB_READ_OPTIONS_DEFAULTS;
  pb__io_options_resolve(NULL, &o);
  EXPECT_EQ(o.map, -1);
  EXPECT_EQ(o.page_reader, -1);
  EXPECT_EQ(o.tiff_strips, -1);
  EXPECT_EQ(o.cache_mb, -1);
  EXPECT_EQ(o.retries, -1);
  /* field by field: the padding between fields is not part of the value */
  EXPECT(o.map == d.map && o.direct == d.direct && o.block_size == d.block_size &&
         o.in_flight == d.in_flight && o.timeout_s == d.timeout_s && o.retries == d.retries &&
         o.insecure == d.insecure && o.trace_requests == d.trace_requests &&
         o.cache == d.cache && o.page_reader == d.page_reader &&
         o.tiff_strips == d.tiff_strips && o.cache_mb == d.cache_mb);
  /* the caller's options stand where the environment says nothing */
  d.map = 0;
  d.block_size = 8192;
  pb__io_options_resolve(&d, &o);
  EXPECT_EQ(o.map, 0);
  EXPECT_EQ(o.block_size, 8192u);
  /* the older names still work, the new ones win, nonsense is ignored */
  setenv("PB_OA_MMAP", "1", 1);
  setenv("PB_OA_DIRECT", "0", 1);
  setenv("PB_TIFF_DIRECT", "0", 1);
  setenv("PB_OA_CACHE_MB", "5", 1);
  pb__io_options_resolve(&d, &o);
  EXPECT_EQ(o.map, 1);
  EXPECT_EQ(o.page_reader, 0);
  EXPECT_EQ(o.tiff_strips, 0);
  EXPECT_EQ(o.cache_mb, 5);
  setenv("PIPEBENCH_MAP", "0", 1);
  setenv("PIPEBENCH_CACHE_MB", "lots", 1); /* ignored: the alias below it is not consulted */
  setenv("PIPEBENCH_DIRECT_IO", "1", 1);
  setenv("PIPEBENCH_BLOCK_SIZE", "65536", 1);
  setenv("PIPEBENCH_RETRIES", "3", 1);
  setenv("PIPEBENCH_TIMEOUT", "2.5", 1);
  pb__io_options_resolve(&d, &o);
  EXPECT_EQ(o.map, 0);
  EXPECT_EQ(o.cache_mb, -1);
  EXPECT_EQ(o.direct, 1);
  EXPECT_EQ(o.block_size, 65536u);
  EXPECT_EQ(o.retries, 3);
  EXPECT_NEAR(o.timeout_s, 2.5, 1e-9);
  pb__io_options_resolve(&o, &o); /* out may alias in */
  EXPECT_EQ(o.map, 0);
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
  printf("ok environment overrides\n");
}

static void cleanup(void) {
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void) {
  make_dir();
  test_pread();
  test_changed();
  test_preadv();
  test_map();
  test_special();
  test_list();
  test_direct();
  test_fd_pread();
  test_names();
  test_env();
  cleanup();
  return check_failures() != 0;
}
