/* pb_endpoint_calibrate: round-trip time and bandwidth to one remote object, through the same
 * backends every format reads with (so what is measured is what a read pays). */
#include "pipebench/endpoint.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"

#define MAX_ROUND_BYTES ((uint64_t)64 << 20)
#define MAX_PROBES 1000
#define MAX_ROUNDS 100
#define MAX_STREAMS 256

/* Reads [0, bytes) of the object opened with in_flight requests of bytes / streams each; *mbps
 * gets 10^6 bytes per second. */
static int read_round(const char *url, const pb_read_options *base, uint64_t bytes, int streams,
                      void *buf, double *mbps, int64_t *requests, struct pb_error *err) {
  pb_read_options o = *base;
  o.in_flight = streams;
  uint64_t per = (bytes + (uint64_t)streams - 1) / (uint64_t)streams;
  o.block_size = (size_t)(per > 0 ? per : 1);
  pb__io_file *f = NULL;
  PB_RETURN_NOT_OK(pb__io_open(url, &o, &f, err));
  /* the open's own request (HEAD) is not part of the transfer: the clock starts after it */
  int64_t t0 = pb_now_ns();
  int rc = pb__io_pread(f, buf, (size_t)bytes, 0, err);
  int64_t dt = pb_now_ns() - t0;
  *requests += f->stats.requests + f->stats.retries;
  pb__io_close(f);
  if (rc != PB_OK) return rc;
  *mbps = (double)bytes / 1e6 / ((double)(dt > 0 ? dt : 1) / 1e9);
  return PB_OK;
}

static int check_params(const pb_endpoint_params *p, struct pb_error *err) {
  if (p == NULL || p->url == NULL || p->url[0] == '\0')
    return pb_error_set(err, PB_EINVAL, "endpoint: no URL given");
  if (!pb__io_is_url(p->url))
    return pb_error_set(err, PB_EINVAL, "endpoint %s: not a URL (http://, https:// or s3://); "
                        "calibrate measures local storage on its own", p->url);
  if (p->probes < 1 || p->probes > MAX_PROBES)
    return pb_error_set(err, PB_EINVAL, "endpoint: probes %d (1 to %d)", p->probes, MAX_PROBES);
  if (p->rounds < 1 || p->rounds > MAX_ROUNDS)
    return pb_error_set(err, PB_EINVAL, "endpoint: rounds %d (1 to %d)", p->rounds, MAX_ROUNDS);
  if (p->streams < 1 || p->streams > MAX_STREAMS)
    return pb_error_set(err, PB_EINVAL, "endpoint: streams %d (1 to %d)", p->streams,
                        MAX_STREAMS);
  return PB_OK;
}

/* One-byte reads at seeded random offsets, each a request of its own: request to last byte. */
static int probe_rtt(pb__io_file *f, int probes, pb_endpoint_calibration *out,
                     struct pb_error *err) {
  double *ms = malloc((size_t)probes * sizeof *ms);
  if (ms == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  pb_rng rng;
  pb_rng_init(&rng, 20261127u);
  int rc = PB_OK;
  for (int i = 0; i < probes && rc == PB_OK; i++) {
    unsigned char byte;
    uint64_t at = pb_rng_below(&rng, out->object_bytes);
    int64_t t0 = pb_now_ns();
    rc = pb__io_pread(f, &byte, 1, at, err);
    ms[i] = (double)(pb_now_ns() - t0) / 1e6;
  }
  if (rc == PB_OK) pb_summarize(ms, (size_t)probes, &out->rtt_ms);
  free(ms);
  return rc;
}

static int bandwidth(const pb_endpoint_params *p, const pb_read_options *base, int streams,
                     void *buf, pb_summary *out, int64_t *requests, struct pb_error *err,
                     uint64_t bytes) {
  double v[MAX_ROUNDS];
  for (int r = 0; r < p->rounds; r++)
    PB_RETURN_NOT_OK(read_round(p->url, base, bytes, streams, buf, &v[r], requests, err));
  pb_summarize(v, (size_t)p->rounds, out);
  return PB_OK;
}

int pb_endpoint_calibrate(const pb_endpoint_params *p, pb_endpoint_calibration *out,
                          struct pb_error *err) {
  PB_RETURN_NOT_OK(check_params(p, err));
  memset(out, 0, sizeof *out);
  int64_t start = pb_now_ns();
  const char *colon = strchr(p->url, ':');
  size_t sl = (size_t)(colon - p->url);
  memcpy(out->scheme, p->url, sl < sizeof out->scheme ? sl : sizeof out->scheme - 1);
  out->streams = p->streams;
  pb_read_options base = p->read;
  base.cache = NULL; /* every byte from the endpoint, none from a local copy */
  pb_read_options one = base;
  one.in_flight = 1;
  pb__io_file *f = NULL;
  PB_RETURN_NOT_OK(pb__io_open(p->url, &one, &f, err));
  out->object_bytes = pb__io_size(f);
  snprintf(out->location, sizeof out->location, "%s", f->location);
  int rc = PB_OK;
  if (out->object_bytes == 0)
    rc = pb_error_set(err, PB_EINVAL, "endpoint %s: the object is empty: give one of at least "
                      "a few MB", f->location);
  if (rc == PB_OK) rc = probe_rtt(f, p->probes, out, err);
  out->requests += f->stats.requests + f->stats.retries;
  pb__io_close(f);
  if (rc != PB_OK) return rc;
  uint64_t bytes = p->bytes > 0 ? p->bytes : MAX_ROUND_BYTES;
  if (bytes > out->object_bytes) bytes = out->object_bytes;
  out->round_bytes = bytes;
  void *buf = malloc((size_t)bytes);
  if (buf == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory (%llu bytes)",
                                       (unsigned long long)bytes);
  rc = bandwidth(p, &base, 1, buf, &out->single_mbps, &out->requests, err, bytes);
  if (rc == PB_OK)
    rc = bandwidth(p, &base, p->streams, buf, &out->many_mbps, &out->requests, err, bytes);
  free(buf);
  out->seconds = (double)(pb_now_ns() - start) / 1e9;
  return rc;
}
