/* remote_check: drives the http/https/s3 backends directly (through their pb__io_backend) for
 * the scripts in tests/remote.
 *
 *   remote_check [options] read URL LOCAL     open, compare the size, then many scattered ranges
 *                                             (all in flight at once) and the whole object
 *                                             against LOCAL; prints "ok requests N bytes B
 *                                             retries R"
 *   remote_check [options] changed URL LOCAL  open, then rewrite LOCAL (the served file) with
 *                                             other bytes, then read: must fail
 *   remote_check [options] adjacent URL LOCAL 64 neighbouring 1000-byte ranges given in
 *                                             reverse order, and 8 ranges 40 KiB apart: prints
 *                                             "ok requests N" (N: after open's HEAD)
 *   remote_check [options] stat URL           prints "file SIZE", "dir" or "missing"
 *   remote_check [options] list URL           prints the names, one a line
 * options: --timeout S, --retries N, --in-flight N, --block BYTES, --insecure, --trace
 * A failure prints the error's message on stderr and exits 2. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/http.h"

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  fseek(fp, 0, SEEK_END);
  long sz = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  unsigned char *p = malloc(sz > 0 ? (size_t)sz : 1);
  if (p && fread(p, 1, (size_t)sz, fp) != (size_t)sz) {
    free(p);
    p = NULL;
  }
  fclose(fp);
  *n = (size_t)sz;
  return p;
}

static const pb__io_backend *backend(const char *url) {
  if (!strncmp(url, "https://", 8)) return &pb__io_https_backend;
  if (!strncmp(url, "http://", 7)) return &pb__io_http_backend;
  if (!strncmp(url, "s3://", 5)) return &pb__io_s3_backend;
  return NULL;
}

static int fail(const struct pb_error *e) {
  fprintf(stderr, "%s\n", e->message);
  return 2;
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static int do_read(const pb__io_backend *be, const char *url, const char *local,
                   const pb_read_options *o, int change) {
  struct pb_error e = {{0}};
  size_t n = 0;
  unsigned char *want = slurp(local, &n), *got = NULL;
  pb__io_file *f = NULL;
  int rc = 1;
  if (!want) {
    fprintf(stderr, "cannot read %s\n", local);
    return 1;
  }
  if (be->open(url, o, &f, &e) != 0) {
    rc = fail(&e);
    goto out;
  }
  if (f->size != n) {
    fprintf(stderr, "%s: size %llu, the local copy has %zu\n", url, (unsigned long long)f->size, n);
    goto out;
  }
  if (change) { /* other bytes, same size: only the validator tells */
    for (size_t i = 0; i < n; i++) want[i] ^= 0x5a;
    FILE *fp = fopen(local, "wb");
    int ok = fp && fwrite(want, 1, n, fp) == n;
    if (fp && fclose(fp) != 0) ok = 0;
    if (!ok) {
      fprintf(stderr, "cannot rewrite %s\n", local);
      goto out;
    }
  }
  got = malloc(n ? n : 1);
  if (!got) goto out;
  enum { NR = 200 };
  pb__io_range r[NR];
  size_t nr = 0;
  for (size_t i = 0; i < NR && n > 0; i++) { /* disjoint ranges at random places */
    uint64_t a = rnd() % n, len = 1 + rnd() % 5000;
    if (a + len > n) len = n - a;
    int overlap = 0;
    for (size_t k = 0; k < nr; k++)
      if (a < r[k].off + r[k].len && r[k].off < a + len) overlap = 1;
    if (overlap) continue;
    r[nr++] = (pb__io_range){a, (size_t)len, got + a};
  }
  memset(got, 0, n);
  if (be->preadv(f, r, nr, &e) != 0) {
    rc = fail(&e);
    goto out;
  }
  for (size_t k = 0; k < nr; k++)
    if (memcmp(got + r[k].off, want + r[k].off, r[k].len) != 0) {
      fprintf(stderr, "%s: range %llu+%zu differs from the local copy\n", url,
              (unsigned long long)r[k].off, r[k].len);
      goto out;
    }
  memset(got, 0, n);
  if (be->pread(f, got, n, 0, &e) != 0) {
    rc = fail(&e);
    goto out;
  }
  if (memcmp(got, want, n) != 0) {
    fprintf(stderr, "%s: the whole object differs from the local copy\n", url);
    goto out;
  }
  /* past the end: an error, never fewer bytes */
  if (n > 0 && be->pread(f, got, 2, n - 1, &e) != PB_ERANGE) {
    fprintf(stderr, "%s: a read past the end was not refused\n", url);
    goto out;
  }
  printf("ok requests %lld bytes %lld retries %lld\n", (long long)f->stats.requests,
         (long long)f->stats.bytes, (long long)f->stats.retries);
  rc = 0;
out:
  if (f) be->close(f);
  free(got);
  free(want);
  return rc;
}

static int do_adjacent(const pb__io_backend *be, const char *url, const char *local,
                       const pb_read_options *o) {
  struct pb_error e = {{0}};
  size_t n = 0;
  unsigned char *want = slurp(local, &n);
  enum { NA = 64, NF = 8, SZ = 1000, FAR = 40 << 10 };
  if (!want || n < NF * FAR + SZ) {
    fprintf(stderr, "%s: too small\n", local);
    free(want);
    return 1;
  }
  unsigned char *got = calloc(NA + NF, SZ);
  pb__io_range r[NA + NF];
  for (int i = 0; i < NA; i++) /* 64 neighbours, last first */
    r[i] = (pb__io_range){(uint64_t)(NA - 1 - i) * SZ, SZ, got + (size_t)(NA - 1 - i) * SZ};
  for (int i = 0; i < NF; i++) /* beyond the gap that is worth a read */
    r[NA + i] = (pb__io_range){(uint64_t)(NA * SZ) + (uint64_t)(i + 1) * FAR, SZ,
                               got + (size_t)(NA + i) * SZ};
  pb__io_file *f = NULL;
  int rc = 1;
  if (!got) goto out;
  if (be->open(url, o, &f, &e) != 0 || be->preadv(f, r, NA + NF, &e) != 0) {
    rc = fail(&e);
    goto out;
  }
  for (int i = 0; i < NA + NF; i++)
    if (memcmp(r[i].dst, want + r[i].off, SZ) != 0) {
      fprintf(stderr, "%s: range %d differs from the local copy\n", url, i);
      goto out;
    }
  printf("ok requests %lld\n", (long long)f->stats.requests - 1);
  rc = 0;
out:
  if (f) be->close(f);
  free(got);
  free(want);
  return rc;
}

int main(int argc, char **argv) {
  pb_read_options o = PB_READ_OPTIONS_DEFAULTS;
  int i = 1;
  for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
    if (!strcmp(argv[i], "--insecure")) o.insecure = 1;
    else if (!strcmp(argv[i], "--trace")) o.trace_requests = 1;
    else if (i + 1 < argc && !strcmp(argv[i], "--timeout")) o.timeout_s = atof(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--retries")) o.retries = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--in-flight")) o.in_flight = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--block")) o.block_size = (size_t)atol(argv[++i]);
    else return 1;
  }
  if (argc - i < 2) {
    fprintf(stderr, "usage: remote_check [options] read|changed|stat|list URL [LOCAL]\n");
    return 1;
  }
  const char *op = argv[i], *url = argv[i + 1];
  const pb__io_backend *be = backend(url);
  if (!be) {
    fprintf(stderr, "%s: no backend\n", url);
    return 1;
  }
  struct pb_error e = {{0}};
  if ((!strcmp(op, "read") || !strcmp(op, "changed")) && argc - i == 3)
    return do_read(be, url, argv[i + 2], &o, !strcmp(op, "changed"));
  if (!strcmp(op, "adjacent") && argc - i == 3) return do_adjacent(be, url, argv[i + 2], &o);
  if (!strcmp(op, "stat")) {
    pb__io_kind k;
    uint64_t size;
    if (be->stat(url, &o, &k, &size, &e) != 0) return fail(&e);
    if (k == PB__IO_FILE) printf("file %llu\n", (unsigned long long)size);
    else printf("%s\n", k == PB__IO_DIR ? "dir" : k == PB__IO_MISSING ? "missing" : "other");
    return 0;
  }
  if (!strcmp(op, "list")) {
    char **names;
    size_t n;
    if (be->list(url, &o, &names, &n, &e) != 0) return fail(&e);
    for (size_t k = 0; k < n; k++) {
      printf("%s\n", names[k]);
      free(names[k]);
    }
    free(names);
    return 0;
  }
  return 1;
}
