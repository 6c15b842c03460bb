/* The I/O layer's dispatch: a location's scheme picks the backend; what every backend shares
 * (read_all, join, the options and their environment overrides) lives here once. */
#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"

static _Atomic int64_t io_requests, io_bytes, io_request_ns;

void pb__io_count(int64_t requests, int64_t bytes) {
  atomic_fetch_add_explicit(&io_requests, requests, memory_order_relaxed);
  atomic_fetch_add_explicit(&io_bytes, bytes, memory_order_relaxed);
}

void pb__io_count_time(int64_t ns) {
  atomic_fetch_add_explicit(&io_request_ns, ns, memory_order_relaxed);
}

void pb_io_counters(int64_t *requests, int64_t *bytes) {
  *requests = atomic_load_explicit(&io_requests, memory_order_relaxed);
  *bytes = atomic_load_explicit(&io_bytes, memory_order_relaxed);
}

void pb_io_request_time(int64_t *ns) {
  *ns = atomic_load_explicit(&io_request_ns, memory_order_relaxed);
}

/* The largest remote object opened so far at each endpoint (scheme://authority): what a run
 * measures the endpoint of its data on. A few endpoints are kept; past that, the first ones. */
#define LARGEST_ENDPOINTS 16
static pthread_mutex_t largest_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  char loc[4096];
  size_t key_len; /* the endpoint: loc's first key_len bytes */
  uint64_t size;
} largest[LARGEST_ENDPOINTS];
static int n_largest;

/* Length of location's "scheme://authority", 0 when it has none. */
static size_t endpoint_len(const char *location) {
  const char *s = strstr(location, "://");
  if (s == NULL) return 0;
  return (size_t)(s + 3 - location) + strcspn(s + 3, "/");
}

static void saw_object(const pb__io_backend *be, const char *location, const pb__io_file *f) {
  size_t key = endpoint_len(location);
  if (be == &pb__io_file_backend || f == NULL || key == 0 ||
      strlen(location) >= sizeof largest[0].loc)
    return;
  pthread_mutex_lock(&largest_mu);
  int i = 0;
  while (i < n_largest &&
         !(largest[i].key_len == key && strncmp(largest[i].loc, location, key) == 0))
    i++;
  if (i == n_largest && n_largest < LARGEST_ENDPOINTS) {
    n_largest++;
    largest[i].loc[0] = '\0';
  }
  if (i < n_largest && (largest[i].loc[0] == '\0' || f->size > largest[i].size)) {
    snprintf(largest[i].loc, sizeof largest[i].loc, "%s", location);
    largest[i].key_len = key;
    largest[i].size = f->size;
  }
  pthread_mutex_unlock(&largest_mu);
}

int pb_io_largest_object(const char *at, char *location, size_t size, uint64_t *bytes) {
  size_t key = at != NULL ? endpoint_len(at) : 0;
  if (key == 0) return 0;
  pthread_mutex_lock(&largest_mu);
  int have = 0;
  for (int i = 0; i < n_largest && !have; i++)
    if (largest[i].key_len == key && strncmp(largest[i].loc, at, key) == 0 &&
        strlen(largest[i].loc) < size) {
      snprintf(location, size, "%s", largest[i].loc);
      *bytes = largest[i].size;
      have = 1;
    }
  pthread_mutex_unlock(&largest_mu);
  return have;
}

/* The remote backends (lib/io/http.c, lib/io/s3.c) are optional parts of a build: weak, so a
 * build without them links and names the scheme as unreadable. */
extern const pb__io_backend pb__io_http_backend __attribute__((weak));
extern const pb__io_backend pb__io_s3_backend __attribute__((weak));

#ifndef PB_HAVE_CURL
/* lib/io/s3.c is not built: nothing to hand a helper. */
int pb__io_s3_env(char ***env, struct pb_error *err) {
  *env = NULL;
  return pb_error_set(err, PB_EUNSUPPORTED,
                      "this build reads no s3:// locations (libcurl was not found when it was "
                      "built; scripts/setup.sh installs libcurl4-openssl-dev)");
}

void pb__io_s3_env_free(char **env) { (void)env; }
#endif

/* Length of "scheme" in "scheme://..." (RFC 3986 letters), 0 when location has none. */
static size_t scheme_len(const char *location) {
  size_t n = 0;
  if (location == NULL || !isalpha((unsigned char)location[0])) return 0;
  while (isalnum((unsigned char)location[n]) || location[n] == '+' || location[n] == '-' ||
         location[n] == '.')
    n++;
  return strncmp(location + n, "://", 3) == 0 ? n : 0;
}

static int scheme_is(const char *location, size_t n, const char *name) {
  return strlen(name) == n && strncasecmp(location, name, n) == 0;
}

int pb__io_is_url(const char *location) {
  size_t n = scheme_len(location);
  return n > 0 && !scheme_is(location, n, "file");
}

/* A file:// URL names a local path: the part after the scheme. */
static const char *local_path(const char *location) {
  size_t n = scheme_len(location);
  return n > 0 && scheme_is(location, n, "file") ? location + n + 3 : location;
}

const pb__io_backend *pb__io_backend_for(const char *location, struct pb_error *err) {
  if (location == NULL) {
    pb_error_set(err, PB_EINVAL, "no location given");
    return NULL;
  }
  size_t n = scheme_len(location);
  if (n == 0 || scheme_is(location, n, "file")) return &pb__io_file_backend;
  const pb__io_backend *be = NULL;
  if (scheme_is(location, n, "http") || scheme_is(location, n, "https")) be = &pb__io_http_backend;
  else if (scheme_is(location, n, "s3")) be = &pb__io_s3_backend;
  if (be == NULL && (scheme_is(location, n, "http") || scheme_is(location, n, "https") ||
                     scheme_is(location, n, "s3")))
    pb_error_set(err, PB_EUNSUPPORTED,
                 "%s: this build reads no %.*s:// locations (libcurl was not found when it was "
                 "built; scripts/setup.sh installs libcurl4-openssl-dev)", location, (int)n,
                 location);
  else if (be == NULL)
    pb_error_set(err, PB_EUNSUPPORTED, "%s: this build cannot read %.*s:// locations", location,
                 (int)n, location);
  return be;
}

int pb__io_open(const char *location, const pb_read_options *opts, pb__io_file **out,
                struct pb_error *err) {
  *out = NULL;
  const pb__io_backend *be = pb__io_backend_for(location, err);
  if (be == NULL) return location == NULL ? PB_EINVAL : PB_EUNSUPPORTED;
  pb_read_options o;
  if (opts == NULL) {
    pb__io_options_resolve(NULL, &o);
    opts = &o;
  }
  int rc = be->open(be == &pb__io_file_backend ? local_path(location) : location, opts, out, err);
  if (rc == PB_OK) saw_object(be, location, *out);
  return rc;
}

void pb__io_known_get(const pb__io_file *f, pb__io_known *k) {
  memset(k, 0, sizeof *k);
  if (f != NULL && f->be->describe != NULL) f->be->describe(f, k);
}

int pb__io_open_known(const char *location, const pb_read_options *opts, const pb__io_known *k,
                      pb__io_file **out, struct pb_error *err) {
  const pb__io_backend *be = k != NULL && k->set ? pb__io_backend_for(location, NULL) : NULL;
  if (be == NULL || be->open_known == NULL) return pb__io_open(location, opts, out, err);
  *out = NULL;
  pb_read_options o;
  if (opts == NULL) {
    pb__io_options_resolve(NULL, &o);
    opts = &o;
  }
  int rc = be->open_known(location, opts, k, out, err);
  if (rc == PB_OK) saw_object(be, location, *out);
  return rc;
}

static int check_range(pb__io_file *f, uint64_t off, size_t len, struct pb_error *err) {
  if (off > f->size || len > f->size - off)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: bytes [%llu, %llu) lie past the end of the file (%llu bytes; "
                        "truncated?)",
                        f->location, (unsigned long long)off,
                        (unsigned long long)(off + (uint64_t)len), (unsigned long long)f->size);
  return PB_OK;
}

int pb__io_pread(pb__io_file *f, void *dst, size_t len, uint64_t off, struct pb_error *err) {
  PB_RETURN_NOT_OK(check_range(f, off, len, err));
  if (len == 0) return PB_OK;
  return f->be->pread(f, dst, len, off, err);
}

int pb__io_preadv(pb__io_file *f, const pb__io_range *r, size_t n, struct pb_error *err) {
  size_t nonempty = 0;
  for (size_t i = 0; i < n; i++) {
    PB_RETURN_NOT_OK(check_range(f, r[i].off, r[i].len, err));
    nonempty += r[i].len > 0;
  }
  if (nonempty == 0) return PB_OK;
  if (f->be->preadv != NULL) return f->be->preadv(f, r, n, err);
  for (size_t i = 0; i < n; i++)
    if (r[i].len > 0) PB_RETURN_NOT_OK(f->be->pread(f, r[i].dst, r[i].len, r[i].off, err));
  return PB_OK;
}

int pb__io_read_all(pb__io_file *f, size_t max, void **data, size_t *size, struct pb_error *err) {
  *data = NULL;
  *size = 0;
  if (f->size > (uint64_t)max)
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "%s: %llu bytes, more than the %zu pipebench reads from such a file",
                        f->location, (unsigned long long)f->size, max);
  size_t n = (size_t)f->size;
  void *buf = pb_alloc(n);
  if (buf == NULL)
    return pb_error_set(err, PB_ENOMEM, "%s: out of memory for %zu bytes", f->location, n);
  /* then the file must still be the one opened: a whole-file read changed under it fails */
  int rc = n > 0 ? f->be->pread(f, buf, n, 0, err) : PB_OK;
  if (rc == PB_OK) rc = pb__io_check(f, err);
  if (rc != PB_OK) {
    pb_free(buf, n);
    return rc;
  }
  *data = buf;
  *size = n;
  return PB_OK;
}

int pb__io_map(pb__io_file *f, const void **data, struct pb_error *err) {
  *data = NULL;
  if (f->be->map == NULL)
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: cannot be mapped (%s)", f->location,
                        f->be->scheme);
  return f->be->map(f, data, err);
}

void pb__io_close(pb__io_file *f) {
  if (f != NULL) f->be->close(f);
}

int pb__io_stat(const char *location, const pb_read_options *opts, pb__io_kind *kind,
                uint64_t *size, struct pb_error *err) {
  *kind = PB__IO_MISSING;
  uint64_t ignored;
  if (size == NULL) size = &ignored; /* the backends always set it */
  *size = 0;
  const pb__io_backend *be = pb__io_backend_for(location, err);
  if (be == NULL) return location == NULL ? PB_EINVAL : PB_EUNSUPPORTED;
  return be->stat(be == &pb__io_file_backend ? local_path(location) : location, opts, kind, size,
                  err);
}

int pb__io_list(const char *location, const pb_read_options *opts, char ***names, size_t *n,
                struct pb_error *err) {
  *names = NULL;
  *n = 0;
  const pb__io_backend *be = pb__io_backend_for(location, err);
  if (be == NULL) return location == NULL ? PB_EINVAL : PB_EUNSUPPORTED;
  if (be->list == NULL)
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: %s locations cannot be listed", location,
                        be->scheme);
  return be->list(be == &pb__io_file_backend ? local_path(location) : location, opts, names, n,
                  err);
}

void pb__io_free_names(char **names, size_t n) {
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
}

char *pb__io_join(const char *location, const char *name) {
  size_t lead = strlen(location);
  const char *query = pb__io_is_url(location) ? strchr(location, '?') : NULL;
  if (query != NULL) lead = (size_t)(query - location);
  while (lead > 1 && location[lead - 1] == '/') lead--;
  while (name[0] == '/') name++;
  size_t tail = query != NULL ? strlen(query) : 0, nn = strlen(name);
  int sep = lead > 0 && location[lead - 1] != '/';
  char *out = malloc(lead + (size_t)sep + nn + tail + 1);
  if (out == NULL) return NULL;
  memcpy(out, location, lead);
  if (sep) out[lead] = '/';
  memcpy(out + lead + (size_t)sep, name, nn);
  if (tail > 0) memcpy(out + lead + (size_t)sep + nn, query, tail);
  out[lead + (size_t)sep + nn + tail] = '\0';
  return out;
}

int pb__io_read_file(const char *location, const pb_read_options *opts, size_t max, void **data,
                     size_t *size, struct pb_error *err) {
  *data = NULL;
  *size = 0;
  const pb__io_backend *be = pb__io_backend_for(location, NULL);
  pb_read_options o;
  if (opts == NULL) {
    pb__io_options_resolve(NULL, &o);
    opts = &o;
  }
  /* with a disk cache: open (its HEAD gives the validator the cached ranges are keyed by) */
  if (be != NULL && be->read_file != NULL && pb__io_cache_dir(opts) == NULL)
    return be->read_file(location, opts, max, data, size, err);
  pb__io_file *f;
  PB_RETURN_NOT_OK(pb__io_open(location, opts, &f, err));
  int rc = pb__io_read_all(f, max, data, size, err);
  pb__io_close(f);
  return rc;
}

/* ---- options ------------------------------------------------------------------------------- */

/* The first of names that the environment sets to something non-empty, or NULL. */
static const char *env_first(const char *const *names) {
  for (; *names != NULL; names++) {
    const char *v = getenv(*names);
    if (v != NULL && v[0] != '\0') return v;
  }
  return NULL;
}

/* An integer override in [lo, hi]; a malformed value is ignored (the option keeps its value). */
static void env_int(const char *const *names, long long lo, long long hi, long long *v) {
  const char *s = env_first(names);
  if (s == NULL) return;
  char *end;
  long long x = strtoll(s, &end, 10);
  if (end != s && *end == '\0' && x >= lo && x <= hi) *v = x;
}

/* The documented overrides (docs/io.md). The PB_* names are the older spellings, kept as
 * aliases; the PIPEBENCH_* name wins where both are set. */
static const char *const ENV_MAP[] = {"PIPEBENCH_MAP", "PB_OA_MMAP", NULL};
static const char *const ENV_DIRECT[] = {"PIPEBENCH_DIRECT_IO", NULL};
static const char *const ENV_BLOCK[] = {"PIPEBENCH_BLOCK_SIZE", NULL};
static const char *const ENV_IN_FLIGHT[] = {"PIPEBENCH_IN_FLIGHT", NULL};
static const char *const ENV_TIMEOUT[] = {"PIPEBENCH_TIMEOUT", NULL};
static const char *const ENV_RETRIES[] = {"PIPEBENCH_RETRIES", NULL};
static const char *const ENV_INSECURE[] = {"PIPEBENCH_INSECURE", NULL};
static const char *const ENV_TRACE[] = {"PIPEBENCH_TRACE_REQUESTS", NULL};
static const char *const ENV_PAGES[] = {"PIPEBENCH_PAGE_READER", "PB_OA_DIRECT", NULL};
static const char *const ENV_STRIPS[] = {"PIPEBENCH_TIFF_STRIPS", "PB_TIFF_DIRECT", NULL};
static const char *const ENV_CACHE[] = {"PIPEBENCH_CACHE_MB", "PB_OA_CACHE_MB", NULL};
static const char *const ENV_READ_CACHE[] = {"PIPEBENCH_READ_CACHE", NULL};
static const char *const ENV_META[] = {"PIPEBENCH_META_IN_FLIGHT", NULL};

/* The read cache's text for the life of the process, so that every handle may keep the pointer
 * (a handful of distinct strings: one per cache folder a process uses). */
static const char *intern(const char *s) {
  static struct kept { struct kept *next; char text[]; } *head;
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  if (s == NULL) return NULL;
  pthread_mutex_lock(&lock);
  struct kept *k = head;
  while (k != NULL && strcmp(k->text, s) != 0) k = k->next;
  if (k == NULL && (k = malloc(sizeof *k + strlen(s) + 1)) != NULL) {
    strcpy(k->text, s);
    k->next = head;
    head = k;
  }
  pthread_mutex_unlock(&lock);
  return k != NULL ? k->text : NULL;
}

void pb__io_options_resolve(const pb_read_options *in, pb_read_options *out) {
  static const pb_read_options defaults = PB_READ_OPTIONS_DEFAULTS;
  pb_read_options o = in != NULL ? *in : defaults;
  long long v;
  v = o.map;
  env_int(ENV_MAP, -1, 1, &v);
  o.map = v < 0 ? -1 : (int)v;
  v = o.direct;
  env_int(ENV_DIRECT, 0, 1, &v);
  o.direct = (int)v;
  v = (long long)o.block_size;
  env_int(ENV_BLOCK, 0, (long long)1 << 40, &v);
  o.block_size = (size_t)v;
  v = o.in_flight;
  env_int(ENV_IN_FLIGHT, 0, 1 << 16, &v);
  o.in_flight = (int)v;
  const char *t = env_first(ENV_TIMEOUT);
  if (t != NULL) {
    char *end;
    double x = strtod(t, &end);
    if (end != t && *end == '\0' && x >= 0 && x < 1e9) o.timeout_s = x;
  }
  v = o.retries;
  env_int(ENV_RETRIES, -1, 1000, &v);
  o.retries = (int)v;
  v = o.insecure;
  env_int(ENV_INSECURE, 0, 1, &v);
  o.insecure = (int)v;
  v = o.trace_requests;
  env_int(ENV_TRACE, 0, 1, &v);
  o.trace_requests = (int)v;
  v = o.page_reader;
  env_int(ENV_PAGES, -1, 1, &v);
  o.page_reader = (int)v;
  v = o.tiff_strips;
  env_int(ENV_STRIPS, -1, 1, &v);
  o.tiff_strips = (int)v;
  v = o.cache_mb;
  env_int(ENV_CACHE, -1, (long long)1 << 40, &v);
  o.cache_mb = v;
  v = o.meta_in_flight;
  env_int(ENV_META, 0, PB__AHEAD_MAX, &v);
  o.meta_in_flight = v < 0 ? 0 : v > PB__AHEAD_MAX ? PB__AHEAD_MAX : (int)v;
  const char *rc = env_first(ENV_READ_CACHE);
  if (rc != NULL) o.cache = rc;
  o.cache = intern(o.cache); /* handles keep it: formats copy the options they open with */
  /* Negative values other than the documented -1 mean the default too. */
  if (o.map < -1 || o.map > 1) o.map = -1;
  if (o.page_reader < -1) o.page_reader = -1;
  if (o.tiff_strips < -1) o.tiff_strips = -1;
  if (o.cache_mb < -1) o.cache_mb = -1;
  *out = o;
}
