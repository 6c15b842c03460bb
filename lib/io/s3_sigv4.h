/* AWS Signature Version 4 for S3 requests: SHA-256, HMAC-SHA-256 and the Authorization header,
 * written from AWS's description of the signing process (docs/remote.md). Pure functions, no
 * libcurl: built in every configuration and tested against AWS's published examples. Internal. */
#ifndef PB_IO_S3_SIGV4_H
#define PB_IO_S3_SIGV4_H

#include <stddef.h>
#include <stdint.h>

void pb__sha256(const void *data, size_t n, uint8_t out[32]);
void pb__hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen, uint8_t out[32]);
/* 64 lowercase hex digits and a NUL into out. */
void pb__hex(const uint8_t *in, size_t n, char *out);

/* One header that is signed: lowercase name, value as sent. */
typedef struct pb__sigv4_header {
  const char *name;
  const char *value;
} pb__sigv4_header;

typedef struct pb__sigv4_request {
  const char *method;       /* "GET" */
  const char *path;         /* the URI path exactly as sent (already percent-encoded) */
  const char *query;        /* the query as sent, without '?' (encoded), "" for none */
  const pb__sigv4_header *headers; /* the signed headers (host and x-amz-date at least) */
  size_t nheaders;
  const char *payload_hash; /* hex SHA-256 of the body, or "UNSIGNED-PAYLOAD" */
  const char *amz_date;     /* "20150830T123600Z" */
  const char *region;
  const char *service;      /* "s3" */
  const char *key_id;
  const char *secret;
} pb__sigv4_request;

/* The Authorization header's value into out (cap bytes). canonical (may be NULL, ccap bytes):
 * the canonical request, for tests. 0, or PB_EINVAL when a buffer is too small. */
int pb__sigv4_authorization(const pb__sigv4_request *rq, char *out, size_t cap, char *canonical,
                            size_t ccap);

/* Percent-encodes s as SigV4 wants (unreserved A-Z a-z 0-9 - _ . ~ kept; '/' kept when
 * keep_slash) into a malloc'd string; NULL on no memory. */
char *pb__sigv4_encode(const char *s, int keep_slash);

#endif
