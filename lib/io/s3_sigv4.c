/* SigV4 signing (lib/io/s3_sigv4.h): SHA-256 as FIPS 180-4 gives it, HMAC as RFC 2104, and the
 * canonical request, string to sign and key derivation of AWS Signature Version 4. */
#include "io/s3_sigv4.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipebench/core.h"

/* ---- SHA-256 ------------------------------------------------------------------------------ */

typedef struct sha256_ctx {
  uint32_t h[8];
  uint64_t bits;
  uint8_t buf[64];
  size_t n;
} sha256_ctx;

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha256_block(sha256_ctx *c, const uint8_t *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
           (uint32_t)p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3], e = c->h[4], f = c->h[5],
           g = c->h[6], h = c->h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
    uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = cc;
    cc = b;
    b = a;
    a = t1 + t2;
  }
  c->h[0] += a;
  c->h[1] += b;
  c->h[2] += cc;
  c->h[3] += d;
  c->h[4] += e;
  c->h[5] += f;
  c->h[6] += g;
  c->h[7] += h;
}

static void sha256_init(sha256_ctx *c) {
  static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(c->h, h0, sizeof h0);
  c->bits = 0;
  c->n = 0;
}

static void sha256_update(sha256_ctx *c, const void *data, size_t n) {
  const uint8_t *p = data;
  c->bits += (uint64_t)n * 8;
  while (n > 0) {
    size_t take = 64 - c->n < n ? 64 - c->n : n;
    memcpy(c->buf + c->n, p, take);
    c->n += take;
    p += take;
    n -= take;
    if (c->n == 64) {
      sha256_block(c, c->buf);
      c->n = 0;
    }
  }
}

static void sha256_final(sha256_ctx *c, uint8_t out[32]) {
  uint64_t bits = c->bits;
  uint8_t pad = 0x80, zero = 0;
  sha256_update(c, &pad, 1);
  while (c->n != 56) sha256_update(c, &zero, 1);
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = (uint8_t)(bits >> (56 - 8 * i));
  sha256_update(c, len, 8);
  for (int i = 0; i < 8; i++) {
    out[4 * i] = (uint8_t)(c->h[i] >> 24);
    out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
    out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
    out[4 * i + 3] = (uint8_t)c->h[i];
  }
}

void pb__sha256(const void *data, size_t n, uint8_t out[32]) {
  sha256_ctx c;
  sha256_init(&c);
  sha256_update(&c, data, n);
  sha256_final(&c, out);
}

void pb__hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen, uint8_t out[32]) {
  uint8_t k[64] = {0}, ipad[64], opad[64], inner[32];
  if (klen > 64)
    pb__sha256(key, klen, k);
  else
    memcpy(k, key, klen);
  for (int i = 0; i < 64; i++) {
    ipad[i] = k[i] ^ 0x36;
    opad[i] = k[i] ^ 0x5c;
  }
  sha256_ctx c;
  sha256_init(&c);
  sha256_update(&c, ipad, 64);
  sha256_update(&c, msg, mlen);
  sha256_final(&c, inner);
  sha256_init(&c);
  sha256_update(&c, opad, 64);
  sha256_update(&c, inner, 32);
  sha256_final(&c, out);
}

void pb__hex(const uint8_t *in, size_t n, char *out) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = d[in[i] >> 4];
    out[2 * i + 1] = d[in[i] & 15];
  }
  out[2 * n] = 0;
}

/* ---- the signature ------------------------------------------------------------------------ */

char *pb__sigv4_encode(const char *s, int keep_slash) {
  size_t n = strlen(s);
  char *out = malloc(3 * n + 1);
  if (!out) return NULL;
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    unsigned char ch = *p;
    if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
        ch == '-' || ch == '_' || ch == '.' || ch == '~' || (keep_slash && ch == '/')) {
      out[o++] = (char)ch;
    } else {
      o += (size_t)snprintf(out + o, 4, "%%%02X", ch);
    }
  }
  out[o] = 0;
  return out;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_hdr(const void *a, const void *b) {
  return strcmp(((const pb__sigv4_header *)a)->name, ((const pb__sigv4_header *)b)->name);
}

/* Appends printf output to out at *o; 0 or PB_EINVAL when it does not fit. */
static int put(char *out, size_t cap, size_t *o, const char *s, size_t n) {
  if (*o + n + 1 > cap) return PB_EINVAL;
  memcpy(out + *o, s, n);
  *o += n;
  out[*o] = 0;
  return 0;
}
#define PUTS(buf, cap, o, s) put(buf, cap, o, s, strlen(s))

/* The query's name=value pairs, sorted (as sent: already encoded). */
static int canonical_query(const char *q, char *out, size_t cap, size_t *o) {
  if (!q || !*q) return 0;
  char *copy = strdup(q);
  size_t n = 1;
  for (const char *p = q; *p; p++) n += *p == '&';
  char **parts = calloc(n, sizeof *parts);
  if (!copy || !parts) {
    free(copy);
    free(parts);
    return PB_ENOMEM;
  }
  size_t k = 0;
  for (char *save = NULL, *t = strtok_r(copy, "&", &save); t; t = strtok_r(NULL, "&", &save))
    parts[k++] = t;
  qsort(parts, k, sizeof *parts, cmp_str);
  int rc = 0;
  for (size_t i = 0; i < k && rc == 0; i++) {
    if (i) rc = PUTS(out, cap, o, "&");
    if (rc == 0) rc = PUTS(out, cap, o, parts[i]);
    if (rc == 0 && !strchr(parts[i], '=')) rc = PUTS(out, cap, o, "=");
  }
  free(parts);
  free(copy);
  return rc;
}

int pb__sigv4_authorization(const pb__sigv4_request *rq, char *out, size_t cap, char *canonical,
                            size_t ccap) {
  enum { MAXH = 16 };
  if (rq->nheaders > MAXH) return PB_EINVAL;
  pb__sigv4_header h[MAXH];
  memcpy(h, rq->headers, rq->nheaders * sizeof *h);
  qsort(h, rq->nheaders, sizeof *h, cmp_hdr);

  size_t bcap = 16384, o = 0;
  char *creq = malloc(bcap);
  char signed_names[512] = "";
  size_t so = 0;
  if (!creq) return PB_ENOMEM;
  creq[0] = 0;
  int rc = 0;
  rc |= PUTS(creq, bcap, &o, rq->method);
  rc |= PUTS(creq, bcap, &o, "\n");
  rc |= PUTS(creq, bcap, &o, rq->path && *rq->path ? rq->path : "/");
  rc |= PUTS(creq, bcap, &o, "\n");
  if (rc == 0) rc = canonical_query(rq->query, creq, bcap, &o);
  rc |= PUTS(creq, bcap, &o, "\n");
  for (size_t i = 0; i < rq->nheaders && rc == 0; i++) {
    rc |= PUTS(creq, bcap, &o, h[i].name);
    rc |= PUTS(creq, bcap, &o, ":");
    /* the value trimmed, runs of spaces as one */
    const char *v = h[i].value;
    while (*v == ' ') v++;
    size_t vl = strlen(v);
    while (vl && v[vl - 1] == ' ') vl--;
    for (size_t j = 0; j < vl && rc == 0; j++)
      if (!(v[j] == ' ' && j > 0 && v[j - 1] == ' ')) rc |= put(creq, bcap, &o, v + j, 1);
    rc |= PUTS(creq, bcap, &o, "\n");
    if (i) rc |= PUTS(signed_names, sizeof signed_names, &so, ";");
    rc |= PUTS(signed_names, sizeof signed_names, &so, h[i].name);
  }
  rc |= PUTS(creq, bcap, &o, "\n");
  rc |= PUTS(creq, bcap, &o, signed_names);
  rc |= PUTS(creq, bcap, &o, "\n");
  rc |= PUTS(creq, bcap, &o, rq->payload_hash);
  if (rc != 0) {
    free(creq);
    return PB_EINVAL;
  }
  if (canonical) snprintf(canonical, ccap, "%s", creq);

  uint8_t dig[32];
  char hexd[65];
  pb__sha256(creq, o, dig);
  pb__hex(dig, 32, hexd);
  free(creq);
  char date[9];
  snprintf(date, sizeof date, "%.8s", rq->amz_date);
  char scope[256], sts[512];
  snprintf(scope, sizeof scope, "%s/%s/%s/aws4_request", date, rq->region, rq->service);
  int sl = snprintf(sts, sizeof sts, "AWS4-HMAC-SHA256\n%s\n%s\n%s", rq->amz_date, scope, hexd);
  if (sl < 0 || (size_t)sl >= sizeof sts) return PB_EINVAL;

  /* kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request") */
  size_t sk = strlen(rq->secret);
  char *k0 = malloc(sk + 5);
  if (!k0) return PB_ENOMEM;
  memcpy(k0, "AWS4", 4);
  memcpy(k0 + 4, rq->secret, sk + 1);
  uint8_t k1[32], k2[32], k3[32], k4[32], sig[32];
  pb__hmac_sha256(k0, sk + 4, date, strlen(date), k1);
  memset(k0, 0, sk + 4);
  free(k0);
  pb__hmac_sha256(k1, 32, rq->region, strlen(rq->region), k2);
  pb__hmac_sha256(k2, 32, rq->service, strlen(rq->service), k3);
  pb__hmac_sha256(k3, 32, "aws4_request", 12, k4);
  pb__hmac_sha256(k4, 32, sts, (size_t)sl, sig);
  char sighex[65];
  pb__hex(sig, 32, sighex);
  int n = snprintf(out, cap, "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s",
                   rq->key_id, scope, signed_names, sighex);
  return n < 0 || (size_t)n >= cap ? PB_EINVAL : 0;
}
