/* s3://bucket/key: the http reader (lib/io/http.h) with SigV4-signed requests, and
 * ListObjectsV2 for folders.
 *
 * Where things come from, as the AWS command-line tools take them:
 *   endpoint     AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, endpoint_url in the profile's config;
 *                else https://BUCKET.s3.REGION.amazonaws.com. A named endpoint is addressed
 *                path-style (ENDPOINT/BUCKET/KEY), as radosgw and MinIO expect.
 *   region       AWS_REGION, AWS_DEFAULT_REGION, region in the profile's config; else us-east-1
 *   credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN); else the
 *                profile (AWS_PROFILE, else "default") in AWS_SHARED_CREDENTIALS_FILE or
 *                ~/.aws/credentials, then AWS_CONFIG_FILE or ~/.aws/config; none: anonymous
 *                (unsigned) requests, as public buckets allow.
 * Keys and secrets stay in memory only: no message, trace line or location shows them. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

#include "io/http.h"
#include "io/s3_sigv4.h"

#define MAX_LIST_BODY (16u << 20)
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

typedef struct s3_cfg {
  char *endpoint; /* without a trailing slash; NULL: AWS */
  char *region;
  char *key_id, *secret, *token; /* NULL key_id: anonymous */
} s3_cfg;

static void cfg_free(void *p) {
  s3_cfg *c = p;
  if (!c) return;
  free(c->endpoint);
  free(c->region);
  free(c->key_id);
  if (c->secret) {
    memset(c->secret, 0, strlen(c->secret));
    free(c->secret);
  }
  free(c->token);
  free(c);
}

static char *env_dup(const char *name) {
  const char *v = getenv(name);
  return v && *v ? strdup(v) : NULL;
}

/* key = value in [section] of an ini file; malloc'd or NULL. */
static char *ini_get(const char *path, const char *section, const char *key) {
  FILE *f = path ? fopen(path, "r") : NULL;
  if (!f) return NULL;
  char line[1024];
  int in = 0;
  char *found = NULL;
  while (!found && fgets(line, sizeof line, f)) {
    char *s = line;
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    if (*s == '[') {
      char *e = strchr(s, ']');
      if (e) *e = 0;
      char *name = s + 1;
      while (*name == ' ') name++;
      in = strcmp(name, section) == 0;
      continue;
    }
    if (!in || *s == '#' || *s == ';') continue;
    char *eq = strchr(s, '=');
    if (!eq) continue;
    char *k = s, *ke = eq;
    while (ke > k && isspace((unsigned char)ke[-1])) ke--;
    if ((size_t)(ke - k) != strlen(key) || strncmp(k, key, strlen(key)) != 0) continue;
    char *v = eq + 1;
    while (isspace((unsigned char)*v)) v++;
    found = strdup(v);
  }
  fclose(f);
  return found;
}

static char *home_file(const char *env, const char *rel) {
  const char *v = getenv(env);
  if (v && *v) return strdup(v);
  const char *home = getenv("HOME");
  if (!home || !*home) return NULL;
  size_t n = strlen(home) + strlen(rel) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", home, rel);
  return p;
}

static s3_cfg *cfg_load(void) {
  s3_cfg *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  const char *profile = getenv("AWS_PROFILE");
  if (!profile || !*profile) profile = "default";
  char cfg_section[300];
  if (strcmp(profile, "default") == 0)
    snprintf(cfg_section, sizeof cfg_section, "default");
  else
    snprintf(cfg_section, sizeof cfg_section, "profile %s", profile);
  char *creds = home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  char *config = home_file("AWS_CONFIG_FILE", ".aws/config");

  c->endpoint = env_dup("AWS_ENDPOINT_URL_S3");
  if (!c->endpoint) c->endpoint = env_dup("AWS_ENDPOINT_URL");
  if (!c->endpoint) c->endpoint = ini_get(config, cfg_section, "endpoint_url");
  c->region = env_dup("AWS_REGION");
  if (!c->region) c->region = env_dup("AWS_DEFAULT_REGION");
  if (!c->region) c->region = ini_get(config, cfg_section, "region");
  if (!c->region) c->region = strdup("us-east-1");

  c->key_id = env_dup("AWS_ACCESS_KEY_ID");
  if (c->key_id) {
    c->secret = env_dup("AWS_SECRET_ACCESS_KEY");
    c->token = env_dup("AWS_SESSION_TOKEN");
  } else {
    const char *files[2] = {creds, config};
    const char *sections[2] = {profile, cfg_section};
    for (int i = 0; i < 2 && !c->key_id; i++) {
      c->key_id = ini_get(files[i], sections[i], "aws_access_key_id");
      if (c->key_id) {
        c->secret = ini_get(files[i], sections[i], "aws_secret_access_key");
        c->token = ini_get(files[i], sections[i], "aws_session_token");
      }
    }
  }
  if (c->key_id && !c->secret) { /* half a credential signs nothing: anonymous */
    free(c->key_id);
    c->key_id = NULL;
  }
  if (c->endpoint) {
    size_t n = strlen(c->endpoint);
    while (n && c->endpoint[n - 1] == '/') c->endpoint[--n] = 0;
  }
  free(creds);
  free(config);
  if (!c->region) {
    cfg_free(c);
    return NULL;
  }
  return c;
}

/* ---- signing ------------------------------------------------------------------------------ */

static int s3_sign(void *ctx, const char *method, const char *url, struct curl_slist **headers,
                   struct pb_error *err) {
  const s3_cfg *c = ctx;
  const char *p = strstr(url, "://");
  if (!p) return pb_error_set(err, PB_EINVAL, "s3: malformed request URL");
  p += 3;
  size_t hl = strcspn(p, "/?");
  char host[512], path[4096], query[4096];
  snprintf(host, sizeof host, "%.*s", (int)hl, p);
  const char *rest = p + hl;
  size_t pl = strcspn(rest, "?");
  snprintf(path, sizeof path, "%.*s", (int)pl, pl ? rest : "/");
  snprintf(query, sizeof query, "%s", rest[pl] == '?' ? rest + pl + 1 : "");

  char amz_date[32];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(amz_date, sizeof amz_date, "%Y%m%dT%H%M%SZ", &tm);

  pb__sigv4_header h[4] = {{"host", host},
                           {"x-amz-content-sha256", EMPTY_SHA256},
                           {"x-amz-date", amz_date},
                           {"x-amz-security-token", c->token ? c->token : ""}};
  pb__sigv4_request rq = {.method = method, .path = path, .query = query, .headers = h,
                          .nheaders = c->token ? 4 : 3, .payload_hash = EMPTY_SHA256,
                          .amz_date = amz_date, .region = c->region, .service = "s3",
                          .key_id = c->key_id, .secret = c->secret};
  char auth[1024];
  if (pb__sigv4_authorization(&rq, auth, sizeof auth, NULL, 0) != 0)
    return pb_error_set(err, PB_EINVAL, "s3: request too long to sign");
  char line[1200];
  struct curl_slist *l = *headers;
  snprintf(line, sizeof line, "x-amz-date: %s", amz_date);
  l = curl_slist_append(l, line);
  if (l) l = curl_slist_append(l, "x-amz-content-sha256: " EMPTY_SHA256);
  if (l && c->token) {
    char *tl = malloc(strlen(c->token) + 32);
    if (tl) {
      sprintf(tl, "x-amz-security-token: %s", c->token);
      l = curl_slist_append(l, tl);
      free(tl);
    }
  }
  if (l) {
    snprintf(line, sizeof line, "Authorization: %s", auth);
    l = curl_slist_append(l, line);
  }
  if (!l) return pb_error_set(err, PB_ENOMEM, "s3: out of memory");
  *headers = l;
  return PB_OK;
}

/* ---- locations ---------------------------------------------------------------------------- */

/* s3://bucket/key into bucket and key (key may be ""). */
static int split(const char *location, char **bucket, char **key, struct pb_error *err) {
  if (strncasecmp(location, "s3://", 5) != 0)
    return pb_error_set(err, PB_EINVAL, "%s: not an s3:// location", location);
  const char *b = location + 5;
  size_t bl = strcspn(b, "/");
  if (bl == 0) return pb_error_set(err, PB_EINVAL, "%s: no bucket name", location);
  *bucket = strndup(b, bl);
  *key = strdup(b[bl] ? b + bl + 1 : "");
  if (!*bucket || !*key) {
    free(*bucket);
    free(*key);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  return PB_OK;
}

/* The URL of bucket + encoded key (+ "?query"); malloc'd. */
static char *object_url(const s3_cfg *c, const char *bucket, const char *key, const char *query) {
  char *ek = pb__sigv4_encode(key, 1);
  if (!ek) return NULL;
  size_t n = strlen(ek) + strlen(bucket) + strlen(c->region) + (c->endpoint ? strlen(c->endpoint) : 0) +
             (query ? strlen(query) : 0) + 64;
  char *u = malloc(n);
  if (u) {
    if (c->endpoint)
      snprintf(u, n, "%s/%s/%s%s%s", c->endpoint, bucket, ek, query ? "?" : "", query ? query : "");
    else
      snprintf(u, n, "https://%s.s3.%s.amazonaws.com/%s%s%s", bucket, c->region, ek,
               query ? "?" : "", query ? query : "");
  }
  free(ek);
  return u;
}

static int load(s3_cfg **c, pb__http_signer *signer, struct pb_error *err) {
  *c = cfg_load();
  if (!*c) return pb_error_set(err, PB_ENOMEM, "out of memory");
  signer->sign = (*c)->key_id ? s3_sign : NULL;
  signer->ctx = *c;
  return PB_OK;
}

int pb__io_s3_env(char ***env, struct pb_error *err) {
  *env = NULL;
  s3_cfg *c = cfg_load();
  char **e = calloc(6, sizeof *e);
  if (c == NULL || e == NULL) {
    cfg_free(c);
    free(e);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  const char *names[5] = {"PB_S3_REGION", "PB_S3_ENDPOINT", "PB_S3_KEY_ID", "PB_S3_SECRET",
                          "PB_S3_TOKEN"};
  const char *values[5] = {c->region, c->endpoint, c->key_id, c->key_id ? c->secret : NULL,
                           c->key_id ? c->token : NULL};
  int rc = PB_OK;
  for (size_t i = 0, k = 0; i < 5 && rc == PB_OK; i++) {
    if (values[i] == NULL) continue;
    size_t n = strlen(names[i]) + strlen(values[i]) + 2;
    if ((e[k] = malloc(n)) == NULL) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    else snprintf(e[k++], n, "%s=%s", names[i], values[i]);
  }
  cfg_free(c);
  if (rc != PB_OK) {
    pb__io_s3_env_free(e);
    return rc;
  }
  *env = e;
  return PB_OK;
}

void pb__io_s3_env_free(char **env) {
  for (size_t i = 0; env != NULL && env[i] != NULL; i++) {
    memset(env[i], 0, strlen(env[i]));
    free(env[i]);
  }
  free(env);
}

/* known NULL: open with a HEAD; else with the size and validator an earlier open told. */
static int open_object(const char *location, const pb_read_options *opts,
                       const pb__io_known *known, pb__io_file **out, struct pb_error *err) {
  char *bucket, *key;
  PB_RETURN_NOT_OK(split(location, &bucket, &key, err));
  s3_cfg *c;
  pb__http_signer signer;
  int rc = load(&c, &signer, err);
  char *url = NULL;
  if (rc == PB_OK && !*key) rc = pb_error_set(err, PB_EINVAL, "%s: no object key", location);
  if (rc == PB_OK && !(url = object_url(c, bucket, key, NULL)))
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  if (rc == PB_OK) {
    char *shown = pb__http_mask(location);
    rc = shown ? pb__http_open_url_known(&pb__io_s3_backend, url, shown, opts, &signer,
                                         cfg_free, known, out, err)
               : pb_error_set(err, PB_ENOMEM, "out of memory");
    free(shown);
    c = NULL; /* the open file owns it now, or freed it on failure */
  }
  cfg_free(c);
  free(url);
  free(bucket);
  free(key);
  return rc;
}

static int s3_open(const char *location, const pb_read_options *opts, pb__io_file **out,
                   struct pb_error *err) {
  return open_object(location, opts, NULL, out, err);
}

/* A TIFF read opens with what its scan learnt: no HEAD per image, as over HTTP. */
static int s3_open_known(const char *location, const pb_read_options *opts,
                         const pb__io_known *known, pb__io_file **out, struct pb_error *err) {
  return open_object(location, opts, known, out, err);
}

/* An object whole in one signed GET (a chunk, a metadata file, an image file): half the round
 * trips of open's HEAD and then a range, as over HTTP. */
static int s3_read_file(const char *location, const pb_read_options *opts, size_t max,
                        void **data, size_t *size, struct pb_error *err) {
  char *bucket, *key;
  PB_RETURN_NOT_OK(split(location, &bucket, &key, err));
  s3_cfg *c;
  pb__http_signer signer;
  int rc = load(&c, &signer, err);
  char *url = NULL, *shown = NULL;
  if (rc == PB_OK && !*key) rc = pb_error_set(err, PB_EINVAL, "%s: no object key", location);
  if (rc == PB_OK) {
    url = object_url(c, bucket, key, NULL);
    shown = pb__http_mask(location);
    if (!url || !shown) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  if (rc == PB_OK) rc = pb__http_read_whole(url, shown, opts, &signer, max, data, size, err);
  cfg_free(c);
  free(shown);
  free(url);
  free(bucket);
  free(key);
  return rc;
}

/* ---- ListObjectsV2 ------------------------------------------------------------------------ */

/* The text of <tag>...</tag> from *p on, XML entities decoded; malloc'd; *p after it. */
static char *xml_next(const char **p, const char *end, const char *tag) {
  char open[64], close[64];
  snprintf(open, sizeof open, "<%s>", tag);
  snprintf(close, sizeof close, "</%s>", tag);
  const char *a = strstr(*p, open);
  if (!a || a >= end) return NULL;
  a += strlen(open);
  const char *b = strstr(a, close);
  if (!b || b > end) return NULL;
  *p = b + strlen(close);
  char *out = malloc((size_t)(b - a) + 1);
  if (!out) return NULL;
  size_t o = 0;
  for (const char *s = a; s < b;) {
    static const struct {
      const char *ent;
      char ch;
    } ents[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    int done = 0;
    for (size_t e = 0; e < sizeof ents / sizeof *ents && *s == '&'; e++) {
      size_t el = strlen(ents[e].ent);
      if ((size_t)(b - s) >= el && strncmp(s, ents[e].ent, el) == 0) {
        out[o++] = ents[e].ch;
        s += el;
        done = 1;
        break;
      }
    }
    if (!done) out[o++] = *s++;
  }
  out[o] = 0;
  return out;
}

typedef struct names {
  char **v;
  size_t n, cap;
} names;

static int names_add(names *ns, const char *s, size_t len) {
  if (len == 0) return PB_OK;
  if (ns->n == ns->cap) {
    size_t cap = ns->cap ? 2 * ns->cap : 64;
    char **v = realloc(ns->v, cap * sizeof *v);
    if (!v) return PB_ENOMEM;
    ns->v = v;
    ns->cap = cap;
  }
  if (!(ns->v[ns->n] = strndup(s, len))) return PB_ENOMEM;
  ns->n++;
  return PB_OK;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Entries directly under prefix (keys and common prefixes, the prefix cut off); max_keys 0:
 * all pages. */
static int list_prefix(const char *location, const s3_cfg *c, const pb__http_signer *signer,
                       const pb_read_options *opts, const char *bucket, const char *prefix,
                       int max_keys, names *ns, struct pb_error *err) {
  char *token = NULL;
  int rc = PB_OK;
  size_t plen = strlen(prefix);
  char *ep = pb__sigv4_encode(prefix, 0);
  if (!ep) return pb_error_set(err, PB_ENOMEM, "out of memory");
  do {
    char *et = token ? pb__sigv4_encode(token, 0) : NULL;
    size_t qn = strlen(ep) + (et ? strlen(et) : 0) + 128;
    char *q = malloc(qn);
    if (!q) {
      free(et);
      rc = pb_error_set(err, PB_ENOMEM, "out of memory");
      break;
    }
    int w = snprintf(q, qn, "list-type=2&delimiter=%%2F&prefix=%s", ep);
    if (max_keys > 0) w += snprintf(q + w, qn - (size_t)w, "&max-keys=%d", max_keys);
    if (et) snprintf(q + w, qn - (size_t)w, "&continuation-token=%s", et);
    free(et);
    char *url = object_url(c, bucket, "", q);
    free(q);
    if (!url) {
      rc = pb_error_set(err, PB_ENOMEM, "out of memory");
      break;
    }
    long status = 0;
    char *body = NULL;
    rc = pb__http_request(url, location, opts, signer, 1, &status, &body, MAX_LIST_BODY, NULL,
                          NULL, err);
    free(url);
    free(token);
    token = NULL;
    if (rc == PB_OK && status != 200) {
      char *code = NULL;
      const char *bp = body ? body : "";
      if (body) code = xml_next(&bp, body + strlen(body), "Code");
      rc = pb_error_set(err, status == 404 ? PB_ENOTFOUND : PB_EIO, "%s: listing failed (HTTP %ld%s%s)",
                        location, status, code ? ", " : "", code ? code : "");
      free(code);
    }
    if (rc == PB_OK) {
      const char *end = body + strlen(body);
      const char *p = body;
      char *k;
      while (rc == PB_OK && (k = xml_next(&p, end, "Key"))) {
        if (strncmp(k, prefix, plen) == 0) rc = names_add(ns, k + plen, strlen(k + plen));
        free(k);
      }
      p = body;
      while (rc == PB_OK && (k = xml_next(&p, end, "Prefix"))) {
        size_t kl = strlen(k);
        if (kl > plen && strncmp(k, prefix, plen) == 0 && k[kl - 1] == '/')
          rc = names_add(ns, k + plen, kl - plen - 1);
        free(k);
      }
      if (rc != PB_OK) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
      p = body;
      char *trunc = xml_next(&p, end, "IsTruncated");
      if (rc == PB_OK && max_keys == 0 && trunc && strcmp(trunc, "true") == 0) {
        p = body;
        token = xml_next(&p, end, "NextContinuationToken");
      }
      free(trunc);
    }
    free(body);
  } while (rc == PB_OK && token);
  free(token);
  free(ep);
  return rc;
}

static int s3_list(const char *location, const pb_read_options *opts, char ***out, size_t *n,
                   struct pb_error *err) {
  *out = NULL;
  *n = 0;
  char *bucket, *key;
  PB_RETURN_NOT_OK(split(location, &bucket, &key, err));
  s3_cfg *c;
  pb__http_signer signer;
  int rc = load(&c, &signer, err);
  char *prefix = NULL;
  if (rc == PB_OK) {
    size_t kl = strlen(key);
    prefix = malloc(kl + 2);
    if (prefix) snprintf(prefix, kl + 2, "%s%s", key, kl && key[kl - 1] != '/' ? "/" : "");
    else rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  names ns = {0};
  if (rc == PB_OK) rc = list_prefix(location, c, &signer, opts, bucket, prefix, 0, &ns, err);
  if (rc == PB_OK) {
    qsort(ns.v, ns.n, sizeof *ns.v, cmp_names);
    size_t k = 0; /* a key "a" and a prefix "a/" name one entry */
    for (size_t i = 0; i < ns.n; i++) {
      if (k && strcmp(ns.v[k - 1], ns.v[i]) == 0) {
        free(ns.v[i]);
        continue;
      }
      ns.v[k++] = ns.v[i];
    }
    *out = ns.v;
    *n = k;
  } else {
    for (size_t i = 0; i < ns.n; i++) free(ns.v[i]);
    free(ns.v);
  }
  free(prefix);
  cfg_free(c);
  free(bucket);
  free(key);
  return rc;
}

static int s3_stat(const char *location, const pb_read_options *opts, pb__io_kind *kind,
                   uint64_t *size, struct pb_error *err) {
  char *bucket, *key;
  PB_RETURN_NOT_OK(split(location, &bucket, &key, err));
  s3_cfg *c;
  pb__http_signer signer;
  int rc = load(&c, &signer, err);
  *size = 0;
  *kind = PB__IO_MISSING;
  size_t kl = strlen(key);
  if (rc == PB_OK && kl && key[kl - 1] != '/') { /* an object? */
    char *url = object_url(c, bucket, key, NULL);
    long status = 0;
    int64_t len = -1;
    rc = url ? pb__http_request(url, location, opts, &signer, 1, &status, NULL, 0, &len, NULL, err)
             : pb_error_set(err, PB_ENOMEM, "out of memory");
    free(url);
    if (rc == PB_OK && status == 200) {
      *kind = PB__IO_FILE;
      *size = len < 0 ? 0 : (uint64_t)len;
    } else if (rc == PB_OK && status != 404) {
      rc = pb_error_set(err, PB_EIO, "%s: HTTP %ld", location, status);
    }
  }
  if (rc == PB_OK && *kind == PB__IO_MISSING) { /* a folder: anything under key/ */
    char *prefix = malloc(kl + 2);
    names ns = {0};
    if (!prefix) {
      rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    } else {
      snprintf(prefix, kl + 2, "%s%s", key, kl && key[kl - 1] != '/' ? "/" : "");
      rc = list_prefix(location, c, &signer, opts, bucket, prefix, 1, &ns, err);
      if (rc == PB_ENOTFOUND) rc = PB_OK; /* no such bucket: nothing there */
      else if (rc == PB_OK && (ns.n > 0 || kl == 0)) *kind = PB__IO_DIR;
    }
    for (size_t i = 0; i < ns.n; i++) free(ns.v[i]);
    free(ns.v);
    free(prefix);
  }
  cfg_free(c);
  free(bucket);
  free(key);
  return rc;
}

const pb__io_backend pb__io_s3_backend = {
    .scheme = "s3", .open = s3_open, .pread = pb__http_pread, .preadv = pb__http_preadv,
    .map = NULL, .close = pb__http_close, .stat = s3_stat, .list = s3_list,
    .read_file = s3_read_file, .open_known = s3_open_known, .describe = pb__http_describe};
