/* http:// and https:// objects read with range requests through libcurl's multi interface
 * (lib/io/http.h), and the nginx JSON index (autoindex_format json) as a folder listing. */
#include "io/http.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#define DEFAULT_IN_FLIGHT 16
#define DEFAULT_TIMEOUT_S 30.0
#define DEFAULT_RETRIES 3
#define DEFAULT_BLOCK (8u << 20) /* a larger range is split into requests of this size */
#define MAX_REDIRECTS 5
#define MAX_LIST_BODY (64u << 20)

typedef struct http_file {
  pb__io_file base;
  char *url;
  pb_read_options o;
  pb__http_signer signer;
  void (*free_ctx)(void *);
  CURLM *multi;
  pthread_mutex_t lock; /* one read at a time drives the multi handle */
  char etag[256];
  char modified[128];
  char *cache_dir; /* the disk cache of ranges (read option cache "disk:PATH"), or NULL */
} http_file;

/* A part of a request's bytes that goes somewhere: absolute offset, length, destination. */
typedef struct seg {
  uint64_t off;
  size_t len;
  unsigned char *dst;
} seg;

/* One range request and what its answer said. Its bytes go to segs[0..nseg) in order; bytes
 * between two segments (a small gap read to save a request) are dropped. */
typedef struct xfer {
  http_file *f;
  CURL *easy;
  struct curl_slist *headers;
  seg *segs;
  size_t nseg, cur;
  uint64_t off;
  size_t len, got;
  int overflow, ignored;
  long status;
  char etag[256], modified[128];
  int have_crange;
  uint64_t cr_first, cr_last, cr_total;
  int64_t clen;
  int attempt;
  int64_t start_ns, retry_at_ns;
  char errbuf[CURL_ERROR_SIZE];
} xfer;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void resolve(const pb_read_options *in, pb_read_options *o) {
  pb_read_options d = PB_READ_OPTIONS_DEFAULTS;
  *o = in ? *in : d;
  if (o->in_flight <= 0) o->in_flight = DEFAULT_IN_FLIGHT;
  if (!(o->timeout_s > 0)) o->timeout_s = DEFAULT_TIMEOUT_S;
  if (o->retries < 0) o->retries = DEFAULT_RETRIES;
  if (o->block_size == 0) o->block_size = DEFAULT_BLOCK;
}

/* ---- credentials masked in everything shown ----------------------------------------------- */

static int secret_param(const char *name, size_t n) {
  static const char *const words[] = {"sig", "token", "credential", "key", "password", "secret"};
  for (size_t w = 0; w < sizeof words / sizeof *words; w++) {
    size_t wl = strlen(words[w]);
    for (size_t i = 0; i + wl <= n; i++)
      if (strncasecmp(name + i, words[w], wl) == 0) return 1;
  }
  return 0;
}

char *pb__http_mask(const char *url) {
  size_t n = strlen(url);
  char *out = malloc(n + 4 * 32 + 8);
  if (!out) return NULL;
  size_t o = 0;
  const char *p = url;
  const char *sch = strstr(url, "://");
  if (sch) {
    size_t head = (size_t)(sch + 3 - url);
    memcpy(out, url, head);
    o = head;
    p = sch + 3;
    const char *end = p + strcspn(p, "/?#");
    const char *at = NULL;
    for (const char *q = p; q < end; q++)
      if (*q == '@') at = q;
    if (at) {
      memcpy(out + o, "***", 3);
      o += 3;
      p = at;
    }
  }
  size_t masked = 0;
  while (*p && *p != '?') out[o++] = *p++;
  while (*p) { /* the query: name=value pairs */
    out[o++] = *p++;
    const char *name = p;
    size_t nl = strcspn(p, "=&#");
    memcpy(out + o, p, nl);
    o += nl;
    p += nl;
    if (*p != '=') continue;
    out[o++] = *p++;
    size_t vl = strcspn(p, "&#");
    if (secret_param(name, nl) && masked < 32) {
      memcpy(out + o, "***", 3);
      o += 3;
      masked++;
    } else {
      memcpy(out + o, p, vl);
      o += vl;
    }
    p += vl;
    if (*p == '#') break;
  }
  out[o] = 0;
  return out;
}

/* ---- one easy handle ---------------------------------------------------------------------- */

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud) {
  xfer *x = ud;
  size_t n = size * nmemb;
  if (x->status >= 300 || x->status < 200) return n; /* an error page: not data */
  if (x->status == 200 && !(x->off == 0 && x->len == x->f->base.size)) {
    x->ignored = 1; /* the whole object for a part of it: stop it now */
    return 0;
  }
  if (n > x->len - x->got) {
    x->overflow = 1;
    return 0; /* aborts the transfer: more bytes than the range holds */
  }
  const char *p = ptr;
  size_t left = n;
  while (left > 0 && x->cur < x->nseg) {
    const seg *sg = &x->segs[x->cur];
    uint64_t pos = x->off + x->got;
    size_t take;
    if (pos < sg->off) { /* a gap between segments */
      take = sg->off - pos < left ? (size_t)(sg->off - pos) : left;
    } else {
      size_t in = (size_t)(pos - sg->off);
      take = sg->len - in < left ? sg->len - in : left;
      memcpy(sg->dst + in, p, take);
      if (in + take == sg->len) x->cur++;
    }
    p += take;
    left -= take;
    x->got += take;
  }
  return n;
}

static void header_value(const char *line, size_t n, char *dst, size_t cap) {
  const char *c = memchr(line, ':', n);
  if (!c) return;
  c++;
  const char *end = line + n;
  while (c < end && (*c == ' ' || *c == '\t')) c++;
  while (end > c && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ')) end--;
  size_t l = (size_t)(end - c);
  if (l >= cap) l = cap - 1;
  memcpy(dst, c, l);
  dst[l] = 0;
}

static int starts(const char *line, size_t n, const char *key) {
  size_t k = strlen(key);
  return n > k && strncasecmp(line, key, k) == 0;
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *ud) {
  xfer *x = ud;
  size_t n = size * nmemb;
  char v[256];
  if (starts(line, n, "HTTP/")) { /* a new answer (after a redirect or 100): forget the last */
    x->etag[0] = x->modified[0] = 0;
    x->have_crange = 0;
    x->clen = -1;
    const char *sp = memchr(line, ' ', n);
    x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
  } else if (starts(line, n, "etag:")) {
    header_value(line, n, x->etag, sizeof x->etag);
  } else if (starts(line, n, "last-modified:")) {
    header_value(line, n, x->modified, sizeof x->modified);
  } else if (starts(line, n, "content-length:")) {
    header_value(line, n, v, sizeof v);
    x->clen = strtoll(v, NULL, 10);
  } else if (starts(line, n, "content-range:")) {
    header_value(line, n, v, sizeof v);
    unsigned long long a, b, t;
    if (sscanf(v, "bytes %llu-%llu/%llu", &a, &b, &t) == 3) {
      x->have_crange = 1;
      x->cr_first = a;
      x->cr_last = b;
      x->cr_total = t;
    }
  }
  return n;
}

/* Options every request shares. */
static void common_opts(CURL *e, const pb_read_options *o, char *errbuf) {
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
  errbuf[0] = 0;
  long ms = (long)(o->timeout_s * 1000.0);
  if (ms < 1) ms = 1;
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, ms);
  /* a request that moves no byte for timeout_s fails; a large range on a slow link that keeps
   * moving does not (a fixed total would fail it) */
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (ms + 999) / 1000);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
  curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
  curl_easy_setopt(e, CURLOPT_MAXREDIRS, (long)MAX_REDIRECTS);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_USERAGENT, "pipebench");
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, o->insecure ? 0L : 1L);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, o->insecure ? 0L : 2L);
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
}

static void trace(const pb_read_options *o, CURL *e, const char *method, const char *shown,
                  uint64_t off, size_t len, int ranged, long status, int64_t start_ns,
                  const char *fail) {
  curl_off_t got = 0;
  curl_easy_getinfo(e, CURLINFO_SIZE_DOWNLOAD_T, &got);
  pb__io_count(1, (int64_t)got); /* every request passes here: the rows' requests per image */
  pb__io_count_time(now_ns() - start_ns);
  if (!o->trace_requests) return;
  long v = 0;
  curl_easy_getinfo(e, CURLINFO_HTTP_VERSION, &v);
  const char *ver = v == CURL_HTTP_VERSION_2_0 ? "HTTP/2" : v == CURL_HTTP_VERSION_3 ? "HTTP/3"
                    : v == CURL_HTTP_VERSION_1_0                                   ? "HTTP/1.0"
                                                                                    : "HTTP/1.1";
  double ms = (double)(now_ns() - start_ns) / 1e6;
  char range[64] = "-";
  if (ranged)
    snprintf(range, sizeof range, "bytes=%llu-%llu", (unsigned long long)off,
             (unsigned long long)(off + len - 1));
  if (fail)
    fprintf(stderr, "pipebench: %s %s %s -> %s %.1f ms\n", method, shown, range, fail, ms);
  else
    fprintf(stderr, "pipebench: %s %s %s -> %ld %s %.1f ms\n", method, shown, range, status, ver,
            ms);
}

static const char *status_text(long s) {
  switch (s) {
  case 400: return "bad request";
  case 401: return "not authorized";
  case 403: return "access denied";
  case 404: return "not found";
  case 416: return "range not satisfiable";
  default: return s >= 500 ? "server error" : "unexpected answer";
  }
}

static int status_code(long s) { return s == 404 || s == 410 ? PB_ENOTFOUND : PB_EIO; }

/* A transport failure worth repeating: the connection reset, closed early or refused. */
static int transient_curl(CURLcode c) {
  return c == CURLE_RECV_ERROR || c == CURLE_SEND_ERROR || c == CURLE_GOT_NOTHING ||
         c == CURLE_PARTIAL_FILE || c == CURLE_COULDNT_CONNECT || c == CURLE_HTTP2 ||
         c == CURLE_HTTP2_STREAM;
}

static int transient_status(long s) { return s == 500 || s == 502 || s == 503 || s == 504 || s == 429; }

static int64_t backoff_ns(int attempt) {
  int64_t base = 50000000LL << (attempt < 6 ? attempt : 6); /* 50 ms, 100 ms, ... 3.2 s */
  return base + (int64_t)(rand() % 20) * base / 100;
}

static const char *curl_cause(CURLcode c, const char *errbuf, char *buf, size_t cap) {
  const char *what;
  switch (c) {
  case CURLE_OPERATION_TIMEDOUT: what = "no answer within the timeout"; break;
  case CURLE_PARTIAL_FILE: what = "truncated body"; break;
  case CURLE_RECV_ERROR:
  case CURLE_GOT_NOTHING: what = "connection closed or reset by the server"; break;
  case CURLE_TOO_MANY_REDIRECTS: what = "too many redirects (a redirect loop?)"; break;
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_CACERT_BADFILE: what = "certificate not trusted (insecure option to accept it)"; break;
  case CURLE_COULDNT_CONNECT: what = "could not connect"; break;
  case CURLE_COULDNT_RESOLVE_HOST: what = "unknown host"; break;
  default: what = curl_easy_strerror(c); break;
  }
  snprintf(buf, cap, "%s (%s)", what, errbuf[0] ? errbuf : curl_easy_strerror(c));
  return buf;
}

/* ---- one whole request (open's HEAD, listings) -------------------------------------------- */

static size_t on_whole(char *ptr, size_t size, size_t nmemb, void *ud) {
  void **st = ud; /* {pb__strbuf-like: char **buf, size_t *len, size_t *max} */
  char **buf = st[0];
  size_t *len = st[1], max = *(size_t *)st[2];
  size_t n = size * nmemb;
  if (*len + n > max) return 0;
  char *nb = realloc(*buf, *len + n + 1);
  if (!nb) return 0;
  memcpy(nb + *len, ptr, n);
  *len += n;
  nb[*len] = 0;
  *buf = nb;
  return n;
}

/* pb__http_request, and for a whole-object read: ranged asks "Range: bytes=0-" (so the answer's
 * Content-Range tells the object's size), *blen_out the body's length, *x_out the answer's
 * headers. */
static int request_x(const char *url, const char *shown, const pb_read_options *opts,
                     const pb__http_signer *signer, int follow, long *status, char **body,
                     size_t max_body, int64_t *size, char **location, struct pb_error *err,
                     int ranged, size_t *blen_out, xfer *x_out);

int pb__http_request(const char *url, const char *shown, const pb_read_options *opts,
                     const pb__http_signer *signer, int follow, long *status, char **body,
                     size_t max_body, int64_t *size, char **location, struct pb_error *err) {
  return request_x(url, shown, opts, signer, follow, status, body, max_body, size, location, err,
                   0, NULL, NULL);
}

static int request_x(const char *url, const char *shown, const pb_read_options *opts,
                     const pb__http_signer *signer, int follow, long *status, char **body,
                     size_t max_body, int64_t *size, char **location, struct pb_error *err,
                     int ranged, size_t *blen_out, xfer *x_out) {
  pthread_once(&curl_once, curl_init_once);
  pb_read_options o;
  resolve(opts, &o);
  if (location) *location = NULL;
  for (int attempt = 0;; attempt++) {
    CURL *e = curl_easy_init();
    if (!e) return pb_error_set(err, PB_ENOMEM, "%s: out of memory", shown);
    xfer x;
    memset(&x, 0, sizeof x);
    x.clen = -1;
    common_opts(e, &o, x.errbuf);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, follow ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &x);
    char *buf = NULL;
    size_t blen = 0;
    void *st[3] = {&buf, &blen, &max_body};
    if (body) {
      curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_whole);
      curl_easy_setopt(e, CURLOPT_WRITEDATA, st);
      if (ranged) curl_easy_setopt(e, CURLOPT_RANGE, "0-");
    } else {
      curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    }
    struct curl_slist *hdr = NULL;
    if (signer && signer->sign) {
      int rc = signer->sign(signer->ctx, body ? "GET" : "HEAD", url, &hdr, err);
      if (rc != 0) {
        curl_easy_cleanup(e);
        return rc;
      }
      curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdr);
    }
    int64_t t0 = now_ns();
    CURLcode c = curl_easy_perform(e);
    long st_code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &st_code);
    char cause[CURL_ERROR_SIZE + 128];
    trace(&o, e, body ? "GET" : "HEAD", shown, 0, 0, 0, st_code, t0,
          c == CURLE_OK ? NULL : curl_cause(c, x.errbuf, cause, sizeof cause));
    if (c == CURLE_OK && location && !follow && st_code >= 300 && st_code < 400) {
      char *redir = NULL;
      curl_easy_getinfo(e, CURLINFO_REDIRECT_URL, &redir);
      if (redir) *location = strdup(redir);
    }
    curl_easy_cleanup(e);
    curl_slist_free_all(hdr);
    int again = attempt < o.retries &&
                ((c != CURLE_OK && transient_curl(c)) || (c == CURLE_OK && transient_status(st_code)));
    if (again) {
      free(buf);
      struct timespec ts = {0, 0};
      int64_t w = backoff_ns(attempt);
      ts.tv_sec = (time_t)(w / 1000000000);
      ts.tv_nsec = (long)(w % 1000000000);
      nanosleep(&ts, NULL);
      continue;
    }
    if (c != CURLE_OK) {
      free(buf);
      if (c == CURLE_WRITE_ERROR && body)
        return pb_error_set(err, PB_EUNSUPPORTED, "%s: body larger than %zu bytes", shown, max_body);
      return pb_error_set(err, c == CURLE_OPERATION_TIMEDOUT ? PB_EIO : PB_EIO, "%s: %s", shown,
                          curl_cause(c, x.errbuf, cause, sizeof cause));
    }
    *status = st_code;
    if (size) *size = x.clen;
    if (blen_out) *blen_out = blen;
    if (x_out) *x_out = x;
    if (body) {
      if (!buf) buf = calloc(1, 1);
      if (!buf) return pb_error_set(err, PB_ENOMEM, "%s: out of memory", shown);
      *body = buf;
    }
    return PB_OK;
  }
}

/* ---- a whole object in one request -------------------------------------------------------- */

/* A small object whole: one GET with "Range: bytes=0-" instead of open's HEAD and then a range
 * (a chunk, a metadata file: half the round trips). The answer is checked as a range's is: its
 * Content-Range against the bytes received, or a 200's Content-Length. */
int pb__http_read_whole(const char *url, const char *shown, const pb_read_options *opts,
                        const pb__http_signer *signer, size_t max, void **data, size_t *size,
                        struct pb_error *err) {
  *data = NULL;
  *size = 0;
  long status = 0;
  char *body = NULL;
  size_t blen = 0;
  xfer x;
  memset(&x, 0, sizeof x);
  int rc = request_x(url, shown, opts, signer, 1, &status, &body, max, NULL, NULL, err, 1, &blen,
                     &x);
  if (rc == PB_EUNSUPPORTED) /* larger than max */
    rc = pb_error_set(err, PB_EUNSUPPORTED,
                      "%s: more than the %zu bytes pipebench reads from such a file", shown, max);
  if (rc == PB_OK && status == 416) {
    blen = 0; /* an empty object has no byte 0 */
  } else if (rc == PB_OK && status == 206) {
    if (!x.have_crange || x.cr_first != 0 || x.cr_total != x.cr_last + 1)
      rc = pb_error_set(err, PB_EIO, "%s: an answer without the whole object's Content-Range",
                        shown);
    else if (x.clen >= 0 && (uint64_t)x.clen != x.cr_total)
      rc = pb_error_set(err, PB_EIO, "%s: bytes 0-%llu: wrong Content-Length %lld for %llu bytes",
                        shown, (unsigned long long)x.cr_last, (long long)x.clen,
                        (unsigned long long)x.cr_total);
    else if ((uint64_t)blen != x.cr_total)
      rc = pb_error_set(err, PB_EIO, "%s: bytes 0-%llu: truncated body (%zu of %llu bytes)",
                        shown, (unsigned long long)x.cr_last, blen,
                        (unsigned long long)x.cr_total);
  } else if (rc == PB_OK && status == 200) {
    if (x.clen >= 0 && (uint64_t)x.clen != (uint64_t)blen)
      rc = pb_error_set(err, PB_EIO, "%s: truncated body (%zu of %lld bytes)", shown, blen,
                        (long long)x.clen);
  } else if (rc == PB_OK) {
    rc = pb_error_set(err, status_code(status), "%s: %s (HTTP %ld)", shown, status_text(status),
                      status);
  }
  if (rc == PB_OK) {
    void *buf = pb_alloc(blen);
    if (buf == NULL && blen > 0) {
      rc = pb_error_set(err, PB_ENOMEM, "%s: out of memory for %zu bytes", shown, blen);
    } else {
      if (blen > 0) memcpy(buf, body, blen);
      *data = buf;
      *size = blen;
    }
  }
  free(body);
  return rc;
}

static int http_read_file(const char *location, const pb_read_options *opts, size_t max,
                          void **data, size_t *size, struct pb_error *err) {
  char *shown = pb__http_mask(location);
  if (!shown) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int rc = pb__http_read_whole(location, shown, opts, NULL, max, data, size, err);
  free(shown);
  return rc;
}

/* ---- open, reads, close ------------------------------------------------------------------- */

static int open_url(const pb__io_backend *be, const char *url, const char *shown,
                    const pb_read_options *opts, const pb__http_signer *signer,
                    void (*free_ctx)(void *), const pb__io_known *known, pb__io_file **out,
                    struct pb_error *err);

int pb__http_open_url(const pb__io_backend *be, const char *url, const char *shown,
                      const pb_read_options *opts, const pb__http_signer *signer,
                      void (*free_ctx)(void *), pb__io_file **out, struct pb_error *err) {
  return open_url(be, url, shown, opts, signer, free_ctx, NULL, out, err);
}

int pb__http_open_url_known(const pb__io_backend *be, const char *url, const char *shown,
                            const pb_read_options *opts, const pb__http_signer *signer,
                            void (*free_ctx)(void *), const pb__io_known *known,
                            pb__io_file **out, struct pb_error *err) {
  return open_url(be, url, shown, opts, signer, free_ctx, known, out, err);
}

static int open_url(const pb__io_backend *be, const char *url, const char *shown,
                    const pb_read_options *opts, const pb__http_signer *signer,
                    void (*free_ctx)(void *), const pb__io_known *known, pb__io_file **out,
                    struct pb_error *err) {
  pthread_once(&curl_once, curl_init_once);
  *out = NULL;
  http_file *f = calloc(1, sizeof *f);
  if (!f) {
    if (free_ctx && signer) free_ctx(signer->ctx);
    return pb_error_set(err, PB_ENOMEM, "%s: out of memory", shown);
  }
  f->base.be = be;
  f->base.location = strdup(shown);
  f->url = strdup(url);
  resolve(opts, &f->o);
  const char *cdir = pb__io_cache_dir(opts);
  f->cache_dir = cdir != NULL ? strdup(cdir) : NULL;
  f->o.cache = NULL;
  if (signer) f->signer = *signer;
  f->free_ctx = free_ctx;
  pthread_mutex_init(&f->lock, NULL);
  f->multi = curl_multi_init();
  if (!f->base.location || !f->url || !f->multi) {
    pb__http_close(&f->base);
    return pb_error_set(err, PB_ENOMEM, "%s: out of memory", shown);
  }
  curl_multi_setopt(f->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
  curl_multi_setopt(f->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)f->o.in_flight);
  curl_multi_setopt(f->multi, CURLMOPT_MAXCONNECTS, (long)f->o.in_flight);
  if (known != NULL) { /* what an earlier open's HEAD said: no request now */
    f->base.size = known->size;
    snprintf(f->etag, sizeof f->etag, "%s", known->etag);
    snprintf(f->modified, sizeof f->modified, "%s", known->modified);
    *out = &f->base;
    return PB_OK;
  }

  /* HEAD: size and validator. Its own easy handle, through the same checks as ranges. */
  CURL *e = curl_easy_init();
  if (!e) {
    pb__http_close(&f->base);
    return pb_error_set(err, PB_ENOMEM, "%s: out of memory", shown);
  }
  int rc = PB_OK;
  for (int attempt = 0;; attempt++) {
    xfer x;
    memset(&x, 0, sizeof x);
    x.clen = -1;
    curl_easy_reset(e);
    common_opts(e, &f->o, x.errbuf);
    curl_easy_setopt(e, CURLOPT_URL, f->url);
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &x);
    struct curl_slist *hdr = NULL;
    if (f->signer.sign) {
      rc = f->signer.sign(f->signer.ctx, "HEAD", f->url, &hdr, err);
      if (rc != 0) break;
      curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdr);
    }
    int64_t t0 = now_ns();
    CURLcode c = curl_easy_perform(e);
    curl_slist_free_all(hdr);
    char cause[CURL_ERROR_SIZE + 128];
    trace(&f->o, e, "HEAD", shown, 0, 0, 0, x.status, t0,
          c == CURLE_OK ? NULL : curl_cause(c, x.errbuf, cause, sizeof cause));
    f->base.stats.requests++;
    int again = attempt < f->o.retries &&
                ((c != CURLE_OK && transient_curl(c)) || (c == CURLE_OK && transient_status(x.status)));
    if (again) {
      f->base.stats.retries++;
      int64_t w = backoff_ns(attempt);
      struct timespec ts = {(time_t)(w / 1000000000), (long)(w % 1000000000)};
      nanosleep(&ts, NULL);
      continue;
    }
    if (c != CURLE_OK) {
      rc = pb_error_set(err, PB_EIO, "%s: %s", shown, curl_cause(c, x.errbuf, cause, sizeof cause));
    } else if (x.status != 200) {
      rc = pb_error_set(err, status_code(x.status), "%s: %s (HTTP %ld)%s", shown,
                        status_text(x.status), x.status,
                        attempt ? " after repeating" : "");
    } else if (x.clen < 0) {
      rc = pb_error_set(err, PB_EUNSUPPORTED, "%s: the server gave no Content-Length", shown);
    } else {
      f->base.size = (uint64_t)x.clen;
      snprintf(f->etag, sizeof f->etag, "%s", x.etag);
      snprintf(f->modified, sizeof f->modified, "%s", x.modified);
    }
    break;
  }
  curl_easy_cleanup(e);
  if (rc != 0) {
    pb__http_close(&f->base);
    return rc;
  }
  *out = &f->base;
  return PB_OK;
}

void pb__http_close(pb__io_file *file) {
  if (!file) return;
  http_file *f = (http_file *)file;
  if (f->multi) curl_multi_cleanup(f->multi);
  if (f->free_ctx) f->free_ctx(f->signer.ctx);
  pthread_mutex_destroy(&f->lock);
  free(f->url);
  free(f->cache_dir);
  free(f->base.location);
  free(f);
}

static int start_xfer(http_file *f, xfer *x, struct pb_error *err) {
  if (!x->easy) x->easy = curl_easy_init();
  if (!x->easy) return pb_error_set(err, PB_ENOMEM, "%s: out of memory", f->base.location);
  CURL *e = x->easy;
  curl_easy_reset(e);
  x->got = 0;
  x->cur = 0;
  x->overflow = x->ignored = 0;
  x->status = 0;
  x->clen = -1;
  x->have_crange = 0;
  x->etag[0] = x->modified[0] = 0;
  common_opts(e, &f->o, x->errbuf);
  curl_easy_setopt(e, CURLOPT_URL, f->url);
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
  char range[64];
  snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)x->off,
           (unsigned long long)(x->off + x->len - 1));
  curl_easy_setopt(e, CURLOPT_RANGE, range);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
  curl_easy_setopt(e, CURLOPT_PRIVATE, x);
  curl_slist_free_all(x->headers);
  x->headers = NULL;
  if (f->signer.sign) {
    PB_RETURN_NOT_OK(f->signer.sign(f->signer.ctx, "GET", f->url, &x->headers, err));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
  }
  x->start_ns = now_ns();
  f->base.stats.requests++;
  if (curl_multi_add_handle(f->multi, e) != CURLM_OK)
    return pb_error_set(err, PB_EIO, "%s: could not start a request", f->base.location);
  return PB_OK;
}

/* The answer of a finished range request: PB_OK, 1 to repeat it, or an error. */
static int check_xfer(http_file *f, xfer *x, CURLcode c, struct pb_error *err) {
  const char *shown = f->base.location;
  char cause[CURL_ERROR_SIZE + 128];
  char what[96];
  snprintf(what, sizeof what, "bytes %llu-%llu", (unsigned long long)x->off,
           (unsigned long long)(x->off + x->len - 1));
  trace(&f->o, x->easy, "GET", shown, x->off, x->len, 1, x->status, x->start_ns,
        c == CURLE_OK ? NULL : curl_cause(c, x->errbuf, cause, sizeof cause));
  f->base.stats.bytes += (int64_t)x->got;
  int can_retry = x->attempt < f->o.retries;
  if (x->ignored)
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: %s: the server ignored the range (HTTP 200)",
                        shown, what);
  if (x->overflow)
    return pb_error_set(err, PB_EFORMAT, "%s: %s: the server sent more bytes than asked", shown,
                        what);
  /* a changed object: checked first, so that no retry ever mixes two versions */
  if (x->status >= 200 && x->status < 300) {
    if (f->etag[0] && x->etag[0] && strcmp(f->etag, x->etag) != 0)
      return pb_error_set(err, PB_EIO, "%s: the object changed since it was opened (ETag %s, now %s)",
                          shown, f->etag, x->etag);
    if (!f->etag[0] && f->modified[0] && x->modified[0] && strcmp(f->modified, x->modified) != 0)
      return pb_error_set(err, PB_EIO,
                          "%s: the object changed since it was opened (Last-Modified %s, now %s)",
                          shown, f->modified, x->modified);
  }
  if (c != CURLE_OK) {
    if (can_retry && transient_curl(c)) return 1;
    return pb_error_set(err, PB_EIO, "%s: %s: %s%s", shown, what,
                        curl_cause(c, x->errbuf, cause, sizeof cause),
                        x->attempt ? " (after repeating)" : "");
  }
  if (x->status != 206 && x->status != 200) {
    if (can_retry && transient_status(x->status)) return 1;
    return pb_error_set(err, status_code(x->status), "%s: %s: %s (HTTP %ld)%s", shown, what,
                        status_text(x->status), x->status, x->attempt ? " after repeating" : "");
  }
  if (x->clen >= 0 && (uint64_t)x->clen != x->len && x->status == 206)
    return pb_error_set(err, PB_EFORMAT, "%s: %s: wrong Content-Length %lld for %zu bytes", shown,
                        what, (long long)x->clen, x->len);
  /* fewer bytes, or an answer whose head was cut (curl may end such a transfer without an
   * error): a dropped connection, repeated like one */
  if (x->got != x->len || (x->status == 206 && !x->have_crange)) {
    if (can_retry) return 1;
    return pb_error_set(err, PB_EIO, "%s: %s: truncated %s (%zu of %zu bytes)%s", shown, what,
                        x->got ? "body" : "answer", x->got, x->len,
                        x->attempt ? " after repeating" : "");
  }
  if ((f->etag[0] && !x->etag[0]) || (!f->etag[0] && f->modified[0] && !x->modified[0]))
    return pb_error_set(err, PB_EIO, "%s: %s: the answer lacks the %s the object had at open",
                        shown, what, f->etag[0] ? "ETag" : "Last-Modified");
  if (x->status == 200) { /* the whole object: only right when the range was all of it */
    if (!(x->off == 0 && x->len == f->base.size))
      return pb_error_set(err, PB_EFORMAT, "%s: %s: the server ignored the range (HTTP 200)",
                          shown, what);
  } else {
    if (!x->have_crange)
      return pb_error_set(err, PB_EFORMAT, "%s: %s: HTTP 206 without a Content-Range", shown,
                          what);
    if (x->cr_first != x->off || x->cr_last != x->off + x->len - 1)
      return pb_error_set(err, PB_EFORMAT, "%s: %s: the server answered bytes %llu-%llu", shown,
                          what, (unsigned long long)x->cr_first, (unsigned long long)x->cr_last);
    if (x->cr_total != f->base.size)
      return pb_error_set(err, PB_EIO,
                          "%s: the object changed since it was opened (size %llu, now %llu)",
                          shown, (unsigned long long)f->base.size,
                          (unsigned long long)x->cr_total);
  }
  return PB_OK;
}

/* Ranges closer than this are read by one request, the bytes between them dropped: a
 * request costs a round trip, 32 KiB a fraction of one at any link speed that matters. */
#define COALESCE_GAP (32u << 10)

static int cmp_range(const void *a, const void *b, void *ranges) {
  const pb__io_range *r = ranges;
  const pb__io_range *x = &r[*(const size_t *)a], *y = &r[*(const size_t *)b];
  return x->off < y->off ? -1 : x->off > y->off;
}

/* The requests for a scattered read: ranges sorted by offset; a range longer than block_size
 * split into requests of block_size; neighbours (disjoint, at most COALESCE_GAP apart, together
 * at most block_size) joined into one request. *segs_out holds every request's segments. */
static xfer *plan(http_file *f, const pb__io_range *r, size_t n, size_t *count, seg **segs_out) {
  size_t bs = f->o.block_size, total = 0;
  for (size_t i = 0; i < n; i++) total += r[i].len ? (r[i].len + bs - 1) / bs : 0;
  size_t *idx = malloc((n ? n : 1) * sizeof *idx);
  seg *segs = calloc(total ? total : 1, sizeof *segs);
  xfer *xs = calloc(total ? total : 1, sizeof *xs);
  if (!idx || !segs || !xs) {
    free(idx);
    free(segs);
    free(xs);
    return NULL;
  }
  for (size_t i = 0; i < n; i++) idx[i] = i;
  qsort_r(idx, n, sizeof *idx, cmp_range, (void *)r);
  size_t ns = 0, k = 0;
  for (size_t ii = 0; ii < n; ii++) { /* first the segments, in offset order */
    const pb__io_range *q = &r[idx[ii]];
    for (size_t done = 0; done < q->len; done += bs)
      segs[ns++] = (seg){q->off + done, q->len - done < bs ? q->len - done : bs,
                         (unsigned char *)q->dst + done};
  }
  for (size_t i = 0; i < ns;) { /* then requests over runs of them */
    xfer *x = &xs[k++];
    x->f = f;
    x->segs = &segs[i];
    x->off = segs[i].off;
    uint64_t end = segs[i].off + segs[i].len;
    size_t j = i + 1;
    while (j < ns && segs[j].off >= end && segs[j].off - end <= COALESCE_GAP &&
           segs[j].off + segs[j].len - x->off <= bs) {
      end = segs[j].off + segs[j].len;
      j++;
    }
    x->nseg = j - i;
    x->len = (size_t)(end - x->off);
    i = j;
  }
  free(idx);
  *count = k;
  *segs_out = segs;
  return xs;
}

static int run_all(http_file *f, xfer *xs, size_t count, struct pb_error *err) {
  size_t next = 0, active = 0, finished = 0;
  int rc = PB_OK;
  xfer **waiting = calloc(count ? count : 1, sizeof *waiting); /* repeats, by due time */
  size_t nwait = 0;
  if (!waiting) return pb_error_set(err, PB_ENOMEM, "%s: out of memory", f->base.location);
  while (rc == PB_OK && finished < count) {
    int64_t now = now_ns();
    /* start what may start: repeats that are due first, then new ranges */
    for (size_t w = 0; w < nwait && active < (size_t)f->o.in_flight;) {
      if (waiting[w]->retry_at_ns <= now) {
        xfer *x = waiting[w];
        waiting[w] = waiting[--nwait];
        rc = start_xfer(f, x, err);
        if (rc != PB_OK) break;
        active++;
      } else {
        w++;
      }
    }
    while (rc == PB_OK && next < count && active < (size_t)f->o.in_flight) {
      rc = start_xfer(f, &xs[next++], err);
      if (rc == PB_OK) active++;
    }
    if (rc != PB_OK) break;
    int running = 0;
    curl_multi_perform(f->multi, &running);
    CURLMsg *m;
    int left;
    while (rc == PB_OK && (m = curl_multi_info_read(f->multi, &left))) {
      if (m->msg != CURLMSG_DONE) continue;
      xfer *x = NULL;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
      CURLcode c = m->data.result;
      curl_multi_remove_handle(f->multi, m->easy_handle);
      active--;
      int r = check_xfer(f, x, c, err);
      if (r == 1) {
        f->base.stats.retries++;
        x->retry_at_ns = now_ns() + backoff_ns(x->attempt);
        x->attempt++;
        waiting[nwait++] = x;
      } else if (r == PB_OK) {
        finished++;
      } else {
        rc = r;
      }
    }
    if (rc != PB_OK || finished == count) break;
    int wait_ms = 100;
    if (active == 0 && nwait > 0) {
      int64_t soonest = waiting[0]->retry_at_ns;
      for (size_t w = 1; w < nwait; w++)
        if (waiting[w]->retry_at_ns < soonest) soonest = waiting[w]->retry_at_ns;
      int64_t d = (soonest - now_ns()) / 1000000;
      wait_ms = d < 0 ? 0 : d > 1000 ? 1000 : (int)d;
    }
    if (active > 0 || wait_ms > 0) curl_multi_poll(f->multi, NULL, 0, wait_ms, NULL);
  }
  /* stop whatever is still running (after an error) and free the handles */
  for (size_t i = 0; i < count; i++) {
    if (xs[i].easy) {
      curl_multi_remove_handle(f->multi, xs[i].easy);
      curl_easy_cleanup(xs[i].easy);
    }
    curl_slist_free_all(xs[i].headers);
  }
  free(waiting);
  return rc;
}

static int preadv_net(http_file *f, const pb__io_range *r, size_t n, struct pb_error *err);

/* A range's key in the disk cache: the object as opened (URL and validator) and the bytes. */
static void cache_key(const http_file *f, const pb__io_range *r, char *key, size_t size) {
  snprintf(key, size, "%s\n%s\n%s\n%llu+%zu", f->url, f->etag, f->modified,
           (unsigned long long)r->off, r->len);
}

static int cmp_range_off(const void *a, const void *b) {
  const pb__io_range *x = *(pb__io_range *const *)a, *y = *(pb__io_range *const *)b;
  return x->off < y->off ? -1 : x->off > y->off;
}

/* With a disk cache: the caller's ranges joined where they touch or overlap into spans (a raw
 * image's rows are one span), each span one entry; spans on disk are copied out, the rest
 * fetched in one scattered read, then kept. */
int pb__http_preadv(pb__io_file *file, const pb__io_range *r, size_t n, struct pb_error *err) {
  http_file *f = (http_file *)file;
  if (f->cache_dir == NULL || (f->etag[0] == '\0' && f->modified[0] == '\0'))
    return preadv_net(f, r, n, err);
  const pb__io_range **by = malloc((n ? n : 1) * sizeof *by);
  pb__io_range *span = malloc((n ? n : 1) * sizeof *span);
  size_t *first = malloc((n ? n : 1) * sizeof *first), ns = 0, m = 0;
  int rc = by && span && first ? PB_OK : pb_error_set(err, PB_ENOMEM, "%s: out of memory",
                                                      f->base.location);
  for (size_t i = 0; i < n && rc == PB_OK; i++)
    if (r[i].len > 0) by[m++] = &r[i];
  if (rc == PB_OK) qsort(by, m, sizeof *by, cmp_range_off);
  for (size_t i = 0; i < m && rc == PB_OK; i++) {
    uint64_t end = by[i]->off + by[i]->len;
    if (ns > 0 && by[i]->off <= span[ns - 1].off + span[ns - 1].len) {
      if (end > span[ns - 1].off + span[ns - 1].len)
        span[ns - 1].len = (size_t)(end - span[ns - 1].off);
    } else {
      span[ns] = (pb__io_range){by[i]->off, by[i]->len, NULL};
      first[ns++] = i;
    }
  }
  for (size_t s = 0; s < ns && rc == PB_OK; s++)
    if ((span[s].dst = malloc(span[s].len)) == NULL)
      rc = pb_error_set(err, PB_ENOMEM, "%s: out of memory", f->base.location);
  pb__io_range *miss = rc == PB_OK ? malloc((ns ? ns : 1) * sizeof *miss) : NULL;
  if (rc == PB_OK && miss == NULL) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  size_t k = 0;
  char key[8192];
  for (size_t s = 0; s < ns && rc == PB_OK; s++) {
    cache_key(f, &span[s], key, sizeof key);
    if (!pb__io_cache_get(f->cache_dir, key, span[s].dst, span[s].len)) miss[k++] = span[s];
  }
  if (rc == PB_OK && k > 0) rc = preadv_net(f, miss, k, err);
  for (size_t i = 0; i < k && rc == PB_OK; i++) {
    cache_key(f, &miss[i], key, sizeof key);
    pb__io_cache_put(f->cache_dir, key, miss[i].dst, miss[i].len);
  }
  for (size_t s = 0; s < ns && rc == PB_OK; s++) { /* each range from its span */
    size_t end = s + 1 < ns ? first[s + 1] : m;
    for (size_t i = first[s]; i < end; i++)
      memcpy(by[i]->dst, (unsigned char *)span[s].dst + (by[i]->off - span[s].off), by[i]->len);
  }
  for (size_t s = 0; s < ns && span != NULL; s++) free(span[s].dst);
  free(miss);
  free(first);
  free(span);
  free(by);
  return rc;
}

static int preadv_net(http_file *f, const pb__io_range *r, size_t n, struct pb_error *err) {
  for (size_t i = 0; i < n; i++)
    if (r[i].off > f->base.size || r[i].len > f->base.size - r[i].off)
      return pb_error_set(err, PB_ERANGE, "%s: bytes %llu-%llu lie past its end (%llu bytes)",
                          f->base.location, (unsigned long long)r[i].off,
                          (unsigned long long)(r[i].off + r[i].len),
                          (unsigned long long)f->base.size);
  size_t count = 0;
  seg *segs = NULL;
  xfer *xs = plan(f, r, n, &count, &segs);
  if (!xs) return pb_error_set(err, PB_ENOMEM, "%s: out of memory", f->base.location);
  pthread_mutex_lock(&f->lock);
  int rc = count ? run_all(f, xs, count, err) : PB_OK;
  pthread_mutex_unlock(&f->lock);
  free(xs);
  free(segs);
  return rc;
}

int pb__http_pread(pb__io_file *f, void *dst, size_t len, uint64_t off, struct pb_error *err) {
  pb__io_range r = {off, len, dst};
  return pb__http_preadv(f, &r, 1, err);
}

/* ---- the http/https backend --------------------------------------------------------------- */

static int http_open_known(const char *location, const pb_read_options *opts,
                           const pb__io_known *known, pb__io_file **out, struct pb_error *err) {
  char *shown = pb__http_mask(location);
  if (!shown) return pb_error_set(err, PB_ENOMEM, "out of memory");
  const pb__io_backend *be =
      strncasecmp(location, "https:", 6) == 0 ? &pb__io_https_backend : &pb__io_http_backend;
  int rc = open_url(be, location, shown, opts, NULL, NULL, known, out, err);
  free(shown);
  return rc;
}

void pb__http_describe(const pb__io_file *file, pb__io_known *k) {
  const http_file *f = (const http_file *)file;
  k->set = 1;
  k->size = f->base.size;
  snprintf(k->etag, sizeof k->etag, "%s", f->etag);
  snprintf(k->modified, sizeof k->modified, "%s", f->modified);
}

static int http_open(const char *location, const pb_read_options *opts, pb__io_file **out,
                     struct pb_error *err) {
  char *shown = pb__http_mask(location);
  if (!shown) return pb_error_set(err, PB_ENOMEM, "out of memory");
  const pb__io_backend *be =
      strncasecmp(location, "https:", 6) == 0 ? &pb__io_https_backend : &pb__io_http_backend;
  int rc = pb__http_open_url(be, location, shown, opts, NULL, NULL, out, err);
  free(shown);
  return rc;
}

/* The path of a URL (from the first '/' after the host), or the URL itself when relative. */
static const char *url_path(const char *u) {
  const char *h = strstr(u, "://");
  if (h == NULL) return u;
  const char *p = strchr(h + 3, '/');
  return p != NULL ? p : "";
}

/* Is target location + "/" (the same path; a proxy between may make the host differ)? */
static int slash_redirect(const char *location, const char *target) {
  if (target == NULL) return 0;
  const char *a = url_path(location), *b = url_path(target);
  size_t n = strlen(a);
  return strlen(b) == n + 1 && b[n] == '/' && strncmp(a, b, n) == 0;
}

static int manifest_lists(const char *location, const pb_read_options *opts) {
  char **names = NULL;
  size_t n = 0;
  if (pb__http_list_manifest(location, opts, &names, &n, NULL) != PB_OK) return 0;
  pb__io_free_names(names, n);
  return 1;
}

static int http_stat(const char *location, const pb_read_options *opts, pb__io_kind *kind,
                     uint64_t *size, struct pb_error *err) {
  char *shown = pb__http_mask(location);
  if (!shown) return pb_error_set(err, PB_ENOMEM, "out of memory");
  long status = 0;
  int64_t len = -1;
  char *loc = NULL;
  int rc = pb__http_request(location, shown, opts, NULL, 0, &status, NULL, 0, &len, &loc, err);
  if (rc == PB_OK) {
    size_t ll = strlen(location);
    *size = 0;
    const char *host = strstr(location, "://");
    int root = host != NULL && strchr(host + 3, '/') == NULL; /* "http://host:port": its "/" */
    if (status == 200 && ((ll && location[ll - 1] == '/') || root)) {
      *kind = PB__IO_DIR;
    } else if (status == 200) {
      *kind = PB__IO_FILE;
      *size = len < 0 ? 0 : (uint64_t)len;
    } else if ((status == 301 || status == 302 || status == 307 || status == 308) &&
               slash_redirect(location, loc)) {
      *kind = PB__IO_DIR; /* nginx sends a folder's name without its slash to name/ */
    } else if (status == 301 || status == 302 || status == 303 || status == 307 ||
               status == 308) {
      /* another redirect: followed (at most 5), as a read would */
      free(loc);
      loc = NULL;
      rc = pb__http_request(location, shown, opts, NULL, 1, &status, NULL, 0, &len, NULL, err);
      if (rc == PB_OK && status == 200) {
        *kind = PB__IO_FILE;
        *size = len < 0 ? 0 : (uint64_t)len;
      } else if (rc == PB_OK && (status == 404 || status == 410)) {
        *kind = PB__IO_MISSING;
      } else if (rc == PB_OK) {
        rc = pb_error_set(err, status_code(status), "%s: %s (HTTP %ld)", shown,
                          status_text(status), status);
      }
    } else if ((status == 403 || status == 404) && ll && location[ll - 1] == '/' &&
               manifest_lists(location, opts)) {
      *kind = PB__IO_DIR; /* a folder without an index, listed by its manifest */
    } else if (status == 404 || status == 410) {
      *kind = PB__IO_MISSING;
    } else {
      rc = pb_error_set(err, status_code(status), "%s: %s (HTTP %ld)", shown, status_text(status),
                        status);
    }
  }
  free(loc);
  free(shown);
  return rc;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int http_list(const char *location, const pb_read_options *opts, char ***names,
                     size_t *n, struct pb_error *err) {
  *names = NULL;
  *n = 0;
  size_t ll = strlen(location);
  char *url = malloc(ll + 2);
  if (!url) return pb_error_set(err, PB_ENOMEM, "out of memory");
  memcpy(url, location, ll + 1);
  if (ll == 0 || location[ll - 1] != '/') strcat(url, "/");
  char *shown = pb__http_mask(url);
  long status = 0;
  char *body = NULL;
  int rc = shown ? pb__http_request(url, shown, opts, NULL, 1, &status, &body, MAX_LIST_BODY, NULL,
                                    NULL, err)
                 : pb_error_set(err, PB_ENOMEM, "out of memory");
  free(url);
  if (rc == PB_OK && status != 200)
    rc = pb_error_set(err, status_code(status), "%s: %s (HTTP %ld)", shown, status_text(status),
                      status);
  cJSON *j = NULL;
  if (rc == PB_OK) {
    j = cJSON_Parse(body);
    if (!cJSON_IsArray(j))
      rc = pb_error_set(err, PB_EFORMAT,
                        "%s: not a JSON folder index (nginx: autoindex on; autoindex_format json)",
                        shown);
  }
  if (rc == PB_OK) {
    size_t cap = (size_t)cJSON_GetArraySize(j);
    char **v = calloc(cap ? cap : 1, sizeof *v);
    size_t k = 0;
    const cJSON *it;
    if (!v) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    cJSON_ArrayForEach(it, j) {
      if (rc != PB_OK) break;
      const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
      if (!cJSON_IsString(nm) || !nm->valuestring[0] || strchr(nm->valuestring, '/') ||
          !strcmp(nm->valuestring, ".") || !strcmp(nm->valuestring, ".."))
        continue;
      if (!(v[k] = strdup(nm->valuestring))) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
      else k++;
    }
    if (rc == PB_OK) {
      qsort(v, k, sizeof *v, cmp_names);
      *names = v;
      *n = k;
    } else if (v) {
      for (size_t i = 0; i < k; i++) free(v[i]);
      free(v);
    }
  }
  cJSON_Delete(j);
  free(body);
  free(shown);
  /* no JSON index (autoindex off, another server): the manifest beside the dataset lists it */
  if (rc == PB_EFORMAT || rc == PB_ENOTFOUND || status == 403) {
    struct pb_error e2;
    int mrc = pb__http_list_manifest(location, opts, names, n, &e2);
    if (mrc == PB_OK) return PB_OK;
    if (mrc != PB_ENOTFOUND && err != NULL) *err = e2;
    if (mrc != PB_ENOTFOUND) rc = mrc;
  }
  return rc;
}

const pb__io_backend pb__io_http_backend = {
    .scheme = "http", .open = http_open, .pread = pb__http_pread, .preadv = pb__http_preadv,
    .map = NULL, .close = pb__http_close, .stat = http_stat, .list = http_list,
    .read_file = http_read_file, .open_known = http_open_known, .describe = pb__http_describe};
const pb__io_backend pb__io_https_backend = {
    .scheme = "https", .open = http_open, .pread = pb__http_pread, .preadv = pb__http_preadv,
    .map = NULL, .close = pb__http_close, .stat = http_stat, .list = http_list,
    .read_file = http_read_file, .open_known = http_open_known, .describe = pb__http_describe};
