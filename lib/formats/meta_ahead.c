/* Metadata read ahead for folders of images over a URL (docs/remote.md, "Opening a folder of
 * images"): a scan that asks for image i, then i + 1, ... (the loader's shape check, inspect,
 * verify) would wait one round trip or two per image; here the next images' metadata are
 * fetched at once on a few threads, so the scan waits about once per PB__AHEAD_READS images. */
#include <pthread.h>
#include <stdatomic.h>

#include "formats/format_internal.h"

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

void pb__meta_ahead(void *ctx, int64_t from, int64_t n, void (*load)(void *ctx, int64_t i)) {
  if (n < 2) return; /* one image: the caller's own load costs the same */
  ahead_job j;
  j.ctx = ctx;
  j.load = load;
  j.end = from + n;
  atomic_init(&j.next, from);
  pthread_t th[PB__AHEAD_READS];
  int started = 0;
  int want = n < PB__AHEAD_READS ? (int)n : PB__AHEAD_READS;
  while (started < want && pthread_create(&th[started], NULL, ahead_main, &j) == 0) started++;
  /* No thread at all (out of resources): nothing is read ahead, the caller loads as before. */
  for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
}
