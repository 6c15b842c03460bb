/* An endpoint's own limits: round-trip time and single- and many-stream bandwidth to one object
 * over http(s):// or s3://, so remote rows can be read as shares of what the network allows. */
#ifndef PIPEBENCH_ENDPOINT_H
#define PIPEBENCH_ENDPOINT_H

#include <stdint.h>

#include "pipebench/core.h"
#include "pipebench/format.h"
#include "pipebench/stats.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pb_endpoint_params {
  const char *url;       /**< an object at the endpoint: http(s)://host/path or s3://bucket/key */
  pb_read_options read;  /**< timeouts, retries, --insecure; in_flight and block_size are set
                              by each measurement */
  int probes;            /**< one-byte reads for the round-trip time (default 20) */
  int rounds;            /**< rounds of each bandwidth measurement (default 3) */
  uint64_t bytes;        /**< bytes per bandwidth round; 0: the object's size, at most 64 MiB */
  int streams;           /**< requests in flight for the many-stream bandwidth (default 16) */
} pb_endpoint_params;
#define PB_ENDPOINT_PARAMS_DEFAULTS \
  {.url = NULL, .read = PB_READ_OPTIONS_DEFAULTS, .probes = 20, .rounds = 3, .bytes = 0, .streams = 16}

typedef struct pb_endpoint_calibration {
  char scheme[8];        /**< "http", "https" or "s3" */
  char location[512];    /**< the URL as shown (credentials masked) */
  uint64_t object_bytes; /**< the object's size */
  uint64_t round_bytes;  /**< bytes read per bandwidth round */
  pb_summary rtt_ms;     /**< one-byte ranged reads at random offsets: request to last byte */
  pb_summary single_mbps;/**< one request per round for round_bytes: MB/s (10^6 bytes) */
  pb_summary many_mbps;  /**< round_bytes as `streams` requests in flight: MB/s */
  int streams;
  int64_t requests;      /**< requests made in all (retries included) */
  double seconds;        /**< how long it took */
} pb_endpoint_calibration;

/** Measures the endpoint behind params->url. Errors name the URL (credentials masked) and the
 * cause; a local path is refused (calibrate measures local storage itself). */
PB_API int pb_endpoint_calibrate(const pb_endpoint_params *params, pb_endpoint_calibration *out,
                                 struct pb_error *err);

#ifdef __cplusplus
}
#endif
#endif
