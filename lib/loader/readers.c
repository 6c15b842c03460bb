/* The reader team: a batch's sample reads in flight at once (docs/loader.md, "Reads in flight").
 * A worker that builds a batch queues its samples as one job and waits; the team's threads take
 * samples from the oldest job, each reading with its own dataset handle into the sample's own
 * slot of the batch, so the reads of one batch overlap their round trips. The team is shared by
 * all workers: its size is the loader's bound on reads in flight. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "formats/format_internal.h"
#include "loader/loader_impl.h"

enum { AUTO_URL_READS = 32 };
#define AUTO_BYTES_IN_FLIGHT ((int64_t)64 << 20)

int pb__loader_team_size(const pb_loader *l, const char *path) {
  if (l->p.cache != PB_CACHE_NONE) return 0; /* samples come from RAM or a map */
  int64_t n = l->p.reads_in_flight;
  if (n == 0) {
    if (!pb_location_is_url(path)) return 0; /* local: each worker reads its own batch */
    n = AUTO_URL_READS;
  }
  /* A read holds at most one image's decoded bytes (the largest, with the crop transforms). */
  int64_t cap = l->p.bytes_in_flight > 0 ? l->p.bytes_in_flight : AUTO_BYTES_IN_FLIGHT;
  int64_t per = l->crop ? l->max_h * l->max_w * l->planes * (int64_t)pb_dtype_size(l->meta.dtype)
                        : (int64_t)l->img_bytes;
  if (per > 0 && cap / per < n) n = cap / per;
  /* More readers than samples that can be waiting would never all be busy. */
  int64_t most = (int64_t)(l->nthreads > 0 ? l->nthreads : 1) * l->p.batch_size;
  if (most > l->per_rank) most = l->per_rank;
  if (n > most) n = most;
  /* One read at a time and no workers: the caller's thread reads, as without a team (track 1's
   * single samples pay no hand-over to another thread). */
  if (n <= 1 && l->nthreads == 0) return 0;
  return n < 1 ? 1 : (int)n;
}

static void add_times(pb_batch_times *to, const pb_batch_times *t) {
  to->read_ns += t->read_ns;
  to->decompress_ns += t->decompress_ns;
  to->decode_ns += t->decode_ns;
  to->convert_ns += t->convert_ns;
  to->transform_ns += t->transform_ns;
  to->collate_ns += t->collate_ns;
  to->bytes_read += t->bytes_read;
  to->bytes_decoded += t->bytes_decoded;
}

/* One sample read by reader w into dst, outside the team's lock. */
static int read_one(pb_loader *l, worker *w, int64_t epoch, int64_t idx, unsigned char *dst,
                    pb_batch_times *bt, struct pb_error *e) {
  /* Native samples: as build_batch's loop, what the backend did not report as its own stages
   * counts as collate (here per sample: a remote read dwarfs two clock reads). */
  int native = l->p.out_dtype == PB_OUT_NATIVE;
  int64_t t0 = native ? pb_now_ns() : 0;
  int rc = pb__loader_load_sample(l, w, epoch, idx, dst, bt, e);
  if (native) {
    int64_t rest = pb_now_ns() - t0 - pb__stages_ns(bt);
    bt->collate_ns += rest > 0 ? rest : 0;
  }
  return rc;
}

static void *reader_main(void *arg) {
  worker *w = arg;
  pb_loader *l = w->l;
  read_team *t = l->team;
  pthread_mutex_lock(&t->mu);
  for (;;) {
    while (!t->stop && t->head == NULL) pthread_cond_wait(&t->cv_work, &t->mu);
    if (t->stop) break;
    read_job *j = t->head;
    int64_t k = j->next++;
    if (j->next == j->n) { /* every sample claimed: the job leaves the queue */
      t->head = j->after;
      if (t->head == NULL) t->tail = NULL;
    }
    if (k > j->fail && !l->p.skip_errors) { /* the batch fails at an earlier sample anyway */
      j->rc[k] = PB__READ_NOT_DONE;
      if (++j->done == j->n) pthread_cond_broadcast(&t->cv_done);
      continue;
    }
    int64_t epoch = j->epoch, idx = j->idx[k];
    unsigned char *dst = j->data + (size_t)k * l->sample_bytes;
    pthread_mutex_unlock(&t->mu);

    pb_batch_times bt;
    memset(&bt, 0, sizeof bt);
    struct pb_error e;
    e.message[0] = '\0';
    int rc = read_one(l, w, epoch, idx, dst, &bt, &e);

    pthread_mutex_lock(&t->mu);
    add_times(&j->times, &bt);
    j->rc[k] = rc;
    if (rc != PB_OK && k < j->fail) { /* the error reported is the batch's first, as in order */
      j->fail = k;
      memcpy(j->message, e.message, sizeof j->message);
    }
    /* After this the job may be gone (its builder returns): not touched again. */
    if (++j->done == j->n) pthread_cond_broadcast(&t->cv_done);
  }
  pthread_mutex_unlock(&t->mu);
  return NULL;
}

int pb__team_read(pb_loader *l, int64_t epoch, const int64_t *idx, int64_t n, unsigned char *data,
                  int *rc, pb_batch_times *times, struct pb_error *err) {
  if (n <= 0) return PB_OK;
  read_team *t = l->team;
  read_job j;
  memset(&j, 0, sizeof j);
  j.epoch = epoch;
  j.idx = idx;
  j.n = n;
  j.data = data;
  j.rc = rc;
  j.fail = n;
  pthread_mutex_lock(&t->mu);
  if (t->tail != NULL) t->tail->after = &j;
  else t->head = &j;
  t->tail = &j;
  pthread_cond_broadcast(&t->cv_work);
  while (j.done < j.n) pthread_cond_wait(&t->cv_done, &t->mu);
  pthread_mutex_unlock(&t->mu);
  add_times(times, &j.times);
  if (j.fail == n) return PB_OK;
  if (err != NULL) memcpy(err->message, j.message, sizeof err->message);
  return rc[j.fail];
}

int pb__team_start(pb_loader *l, int n, pb_dataset **ds0, const pb_read_options *ro,
                   struct pb_error *err) {
  read_team *t = calloc(1, sizeof *t);
  if (t == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->cv_work, NULL);
  pthread_cond_init(&t->cv_done, NULL);
  l->team = t; /* from here pb_loader_free frees it, whatever happens below */
  t->rd = calloc((size_t)n, sizeof *t->rd);
  if (t->rd == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  t->n = n;
  for (int i = 0; i < n; i++) {
    worker *w = &t->rd[i];
    PB_RETURN_NOT_OK(pb__loader_worker_init(l, w, err));
    if (i == 0) {
      w->ds = *ds0;
      *ds0 = NULL;
    } else {
      /* A clone keeps what the first handle learnt (listings, metadata): no requests. */
      PB_RETURN_NOT_OK(pb__dataset_clone(t->rd[0].ds, ro, &w->ds, err));
    }
  }
  for (int i = 0; i < n; i++) {
    if (pthread_create(&t->rd[i].thread, NULL, reader_main, &t->rd[i]) != 0)
      return pb_error_set(err, PB_ENOMEM, "loader: cannot start reader thread %d", i);
    t->rd[i].started = 1;
  }
  return PB_OK;
}

void pb__team_free(pb_loader *l, read_team *t) {
  if (t == NULL) return;
  pthread_mutex_lock(&t->mu);
  t->stop = 1;
  pthread_cond_broadcast(&t->cv_work);
  pthread_mutex_unlock(&t->mu);
  for (int i = 0; t->rd != NULL && i < t->n; i++)
    if (t->rd[i].started) pthread_join(t->rd[i].thread, NULL);
  for (int i = 0; t->rd != NULL && i < t->n; i++) pb__loader_worker_destroy(l, &t->rd[i]);
  free(t->rd);
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->cv_work);
  pthread_cond_destroy(&t->cv_done);
  free(t);
}
