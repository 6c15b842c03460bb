/* The remote reader shared by the http/https and s3 backends (libcurl's multi interface).
 * Internal; built only where libcurl is found (PB_HAVE_CURL).
 *
 * One open object keeps one multi handle: its connections are reused from request to request
 * (HTTP/2 multiplexed where the server offers it), and a scattered read puts up to
 * opts->in_flight range requests in flight at once. Every answer is checked: status, the
 * Content-Range against the range asked, the body length, and the ETag (else Last-Modified)
 * against the one seen at open, so a changed object is an error and never mixed data. */
#ifndef PB_IO_HTTP_H
#define PB_IO_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "io/io.h"

struct curl_slist;

/* Adds the headers a request needs (S3: SigV4's Authorization, x-amz-date, ...) to *headers.
 * method: "GET" or "HEAD"; url: the exact URL requested. */
typedef struct pb__http_signer {
  int (*sign)(void *ctx, const char *method, const char *url, struct curl_slist **headers,
              struct pb_error *err);
  void *ctx;
} pb__http_signer;

/* Opens url (checked with a HEAD request). shown: the location for messages (credentials
 * masked). signer may be NULL. The file is closed with pb__http_close, which also calls
 * free_ctx(signer ctx) when free_ctx is not NULL. */
int pb__http_open_url(const pb__io_backend *be, const char *url, const char *shown,
                      const pb_read_options *opts, const pb__http_signer *signer,
                      void (*free_ctx)(void *), pb__io_file **out, struct pb_error *err);
/* pb__http_open_url without its HEAD: size and validator from known (what pb__http_describe
 * told of an earlier open of the same object). */
int pb__http_open_url_known(const pb__io_backend *be, const char *url, const char *shown,
                            const pb_read_options *opts, const pb__http_signer *signer,
                            void (*free_ctx)(void *), const pb__io_known *known,
                            pb__io_file **out, struct pb_error *err);
/* The size and validator an open learnt, for pb__http_open_url_known. */
void pb__http_describe(const pb__io_file *f, pb__io_known *known);
int pb__http_pread(pb__io_file *f, void *dst, size_t len, uint64_t off, struct pb_error *err);
int pb__http_preadv(pb__io_file *f, const pb__io_range *r, size_t n, struct pb_error *err);
void pb__http_close(pb__io_file *f);

/* One request of a whole (small) body: GET url into a malloc'd, NUL-terminated *body (free()),
 * or HEAD when body is NULL. *status: the final HTTP status; *size: Content-Length (or -1);
 * *location: a redirect's target when redirects are not followed (follow 0), else NULL
 * (free()). Transport failures are errors naming shown; an HTTP error status is not. */
int pb__http_request(const char *url, const char *shown, const pb_read_options *opts,
                     const pb__http_signer *signer, int follow, long *status, char **body,
                     size_t max_body, int64_t *size, char **location, struct pb_error *err);

/* A small object whole in one GET with "Range: bytes=0-" (no HEAD first), its Content-Range or
 * Content-Length checked against the bytes received: *data (pb_alloc'd, pb_free) and *size.
 * More than max bytes is PB_EUNSUPPORTED. signer may be NULL; shown names url in messages. */
int pb__http_read_whole(const char *url, const char *shown, const pb_read_options *opts,
                        const pb__http_signer *signer, size_t max, void **data, size_t *size,
                        struct pb_error *err);

/* The names under the folder at location from the manifest gen or convert wrote beside the
 * dataset (lib/io/http_manifest.c), for servers without a JSON index. PB_ENOTFOUND (err not
 * set) when no manifest lists the folder. */
int pb__http_list_manifest(const char *location, const pb_read_options *opts, char ***names,
                           size_t *n, struct pb_error *err);

/* url with user:password@ and signature or token query values replaced by "***"; malloc'd. */
char *pb__http_mask(const char *url);

extern const pb__io_backend pb__io_http_backend;
extern const pb__io_backend pb__io_https_backend;
extern const pb__io_backend pb__io_s3_backend;

#endif
