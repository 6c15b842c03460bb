/* The public face of the I/O layer's location calls (include/pipebench/format.h), for the
 * programs, which see only include/: a manifest beside a remote dataset is read as the
 * dataset's files are. */
#include <string.h>
#include <strings.h>

#include "io/io.h"

int pb_location_is_url(const char *location) { return pb__io_is_url(location); }

int pb_location_stat(const char *location, int *kind, uint64_t *size, struct pb_error *err) {
  pb_read_options o;
  pb__io_options_resolve(NULL, &o);
  pb__io_kind k = PB__IO_MISSING;
  int rc = pb__io_stat(location, &o, &k, size, err);
  *kind = k == PB__IO_FILE ? 1 : k == PB__IO_DIR ? 2 : k == PB__IO_OTHER ? 3 : 0;
  return rc;
}

int pb_location_read(const char *location, size_t max, void **data, size_t *size,
                     struct pb_error *err) {
  pb_read_options o;
  pb__io_options_resolve(NULL, &o);
  return pb__io_read_file(location, &o, max, data, size, err);
}

/* "user:password@" of a URL's authority: its length (0 when there is none) and start. */
static size_t userinfo(const char *location, const char **start) {
  const char *host = location != NULL ? strstr(location, "://") : NULL;
  if (host == NULL || !pb__io_is_url(location)) return 0;
  host += 3;
  size_t alen = strcspn(host, "/?#");
  const char *at = NULL;
  for (const char *q = host; q < host + alen; q++)
    if (*q == '@') at = q;
  *start = host;
  return at != NULL ? (size_t)(at + 1 - host) : 0;
}

/* in with every "user:password@" of location written "***@", into out (size bytes). */
static void mask_into(const char *location, const char *in, char *out, size_t size) {
  const char *u = NULL;
  size_t ulen = userinfo(location, &u), o = 0;
  for (const char *m = in; *m != '\0' && o + 5 < size;) {
    if (ulen > 0 && strncmp(m, u, ulen) == 0) {
      memcpy(out + o, "***@", 4);
      o += 4;
      m += ulen;
    } else {
      out[o++] = *m++;
    }
  }
  if (size > 0) out[o < size ? o : size - 1] = '\0';
}

void pb_location_shown(const char *location, char *buf, size_t size) {
  mask_into(location, location != NULL ? location : "", buf, size);
}

void pb_location_mask_error(const char *location, struct pb_error *err) {
  const char *u = NULL;
  if (err == NULL || userinfo(location, &u) == 0) return;
  char out[sizeof err->message];
  mask_into(location, err->message, out, sizeof out);
  memcpy(err->message, out, strlen(out) + 1);
}

const char *pb_location_endpoint(const char *location) {
  if (!pb__io_is_url(location)) return "file";
  if (strncasecmp(location, "https:", 6) == 0) return "https";
  if (strncasecmp(location, "http:", 5) == 0) return "http";
  if (strncasecmp(location, "s3:", 3) == 0) return "s3";
  return "other";
}
