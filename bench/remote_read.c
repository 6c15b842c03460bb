/* remote_read: raw image reads from one remote object (a raw file of fixed-size images) through
 * the http/s3 backend, as bench/remote.sh runs it behind pipebench-netem.
 *
 *   remote_read URL IMAGE_BYTES IMAGES IN_FLIGHT [SEED]
 *
 * Reads IMAGES images at random positions (seeded) in batches of IN_FLIGHT, each batch one
 * scattered read (all its ranges in flight at once), and prints one line:
 *   in_flight N images N seconds S images_per_s X mb_per_s X requests_per_image X
 *   bytes_per_image X retries N
 * The open (one HEAD) is counted in the requests. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/http.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: remote_read URL IMAGE_BYTES IMAGES IN_FLIGHT [SEED]\n");
    return 1;
  }
  const char *url = argv[1];
  size_t img = (size_t)strtoull(argv[2], NULL, 10);
  long images = atol(argv[3]);
  int in_flight = atoi(argv[4]);
  uint64_t s = argc > 5 ? strtoull(argv[5], NULL, 10) : 1;
  if (img == 0 || images <= 0 || in_flight <= 0) return 1;
  const pb__io_backend *be = !strncmp(url, "s3://", 5)        ? &pb__io_s3_backend
                             : !strncmp(url, "https://", 8) ? &pb__io_https_backend
                                                            : &pb__io_http_backend;
  pb_read_options o = PB_READ_OPTIONS_DEFAULTS;
  o.in_flight = in_flight;
  struct pb_error e = {{0}};
  pb__io_file *f = NULL;
  if (be->open(url, &o, &f, &e) != 0) {
    fprintf(stderr, "%s\n", e.message);
    return 2;
  }
  uint64_t count = f->size / img;
  if (count == 0) {
    fprintf(stderr, "%s: smaller than one image\n", url);
    return 2;
  }
  unsigned char *buf = malloc(img * (size_t)in_flight);
  pb__io_range *r = calloc((size_t)in_flight, sizeof *r);
  if (!buf || !r) return 1;
  double t0 = now_s();
  for (long done = 0; done < images;) {
    size_t n = 0;
    for (; n < (size_t)in_flight && done + (long)n < images; n++) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      r[n] = (pb__io_range){(s % count) * img, img, buf + n * img};
    }
    if (be->preadv(f, r, n, &e) != 0) {
      fprintf(stderr, "%s\n", e.message);
      return 2;
    }
    done += (long)n;
  }
  double dt = now_s() - t0;
  printf("in_flight %d images %ld seconds %.3f images_per_s %.1f mb_per_s %.1f "
         "requests_per_image %.3f bytes_per_image %.0f retries %lld\n",
         in_flight, images, dt, (double)images / dt, (double)images * (double)img / dt / 1e6,
         (double)f->stats.requests / (double)images, (double)f->stats.bytes / (double)images,
         (long long)f->stats.retries);
  be->close(f);
  free(buf);
  free(r);
  return 0;
}
