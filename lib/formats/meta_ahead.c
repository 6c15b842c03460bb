/* Metadata read ahead for folders of images over a URL (docs/remote.md, "Opening a folder of
 * images"): a scan that asks for image i, then i + 1, ... (the loader's shape check, inspect,
 * verify) would wait one round trip or two per image; here the next images' metadata are
 * fetched at once on a few threads, so the scan waits about once per meta_in_flight images. */
#include <pthread.h>
#include <stdatomic.h>

#include "formats/format_internal.h"
#include "io/io.h"

typedef struct ahead_job {
  void *ctx;
  void (*load)(void *ctx, int64_t i);
  int64_t end;
  _Atomic int64_t next;
} ahead_job;

static void *ahead_main(void *arg) {
  ahead_job *j = arg;
  for (;;) {
    int64_t i = atomic_fetch_add(&j->next, 1);
    if (i >= j->end) break;
    j->load(j->ctx, i);
  }
  return NULL;
}

static int ahead_reads(const pb_read_options *opts) {
  int n = opts->meta_in_flight;
  return n <= 0 ? PB__AHEAD_READS : n > PB__AHEAD_MAX ? PB__AHEAD_MAX : n;
}

int64_t pb__meta_ahead_images(const pb_read_options *opts) {
  int n = ahead_reads(opts);
  return n < 2 ? 0 : 8 * (int64_t)n; /* a few images per thread: one wait per batch */
}

void pb__meta_ahead(const pb_read_options *opts, void *ctx, int64_t from, int64_t n,
                    void (*load)(void *ctx, int64_t i)) {
  if (n < 2) return; /* one image: the caller's own load costs the same */
  ahead_job j;
  j.ctx = ctx;
  j.load = load;
  j.end = from + n;
  atomic_init(&j.next, from);
  pthread_t th[PB__AHEAD_MAX];
  int started = 0, reads = ahead_reads(opts);
  int want = n < reads ? (int)n : reads;
  while (started < want && pthread_create(&th[started], NULL, ahead_main, &j) == 0) started++;
  /* No thread at all (out of resources): nothing is read ahead, the caller loads as before. */
  for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
}
