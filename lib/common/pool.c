/* A fixed-size thread pool with a FIFO job queue. */
#include <pthread.h>
#include <stdlib.h>

#include "pipebench/core.h"

typedef struct job {
  pb_pool_fn fn;
  void *arg;
  struct job *next;
} job;

struct pb_pool {
  pthread_mutex_t mu;
  pthread_cond_t has_work, idle;
  job *head, *tail;
  int pending; /* queued + running */
  int stopping;
  int n;
  pthread_t *threads;
};

static void *worker(void *p) {
  pb_pool *pool = p;
  pthread_mutex_lock(&pool->mu);
  for (;;) {
    while (pool->head == NULL && !pool->stopping) pthread_cond_wait(&pool->has_work, &pool->mu);
    if (pool->head == NULL && pool->stopping) break;
    job *j = pool->head;
    pool->head = j->next;
    if (pool->head == NULL) pool->tail = NULL;
    pthread_mutex_unlock(&pool->mu);
    j->fn(j->arg);
    free(j);
    pthread_mutex_lock(&pool->mu);
    if (--pool->pending == 0) pthread_cond_broadcast(&pool->idle);
  }
  pthread_mutex_unlock(&pool->mu);
  return NULL;
}

int pb_pool_new(int n_threads, pb_pool **out) {
  *out = NULL;
  if (n_threads < 1) return PB_EINVAL;
  pb_pool *pool = calloc(1, sizeof *pool);
  if (pool == NULL) return PB_ENOMEM;
  pool->threads = calloc((size_t)n_threads, sizeof *pool->threads);
  if (pool->threads == NULL) {
    free(pool);
    return PB_ENOMEM;
  }
  pthread_mutex_init(&pool->mu, NULL);
  pthread_cond_init(&pool->has_work, NULL);
  pthread_cond_init(&pool->idle, NULL);
  for (int i = 0; i < n_threads; i++) {
    if (pthread_create(&pool->threads[i], NULL, worker, pool) != 0) {
      pool->n = i;
      pb_pool_free(pool);
      return PB_ENOMEM;
    }
    pool->n = i + 1;
  }
  *out = pool;
  return PB_OK;
}

int pb_pool_submit(pb_pool *pool, pb_pool_fn fn, void *arg) {
  job *j = malloc(sizeof *j);
  if (j == NULL) return PB_ENOMEM;
  j->fn = fn;
  j->arg = arg;
  j->next = NULL;
  pthread_mutex_lock(&pool->mu);
  if (pool->stopping) {
    pthread_mutex_unlock(&pool->mu);
    free(j);
    return PB_ESTATE;
  }
  if (pool->tail != NULL) pool->tail->next = j;
  else pool->head = j;
  pool->tail = j;
  pool->pending++;
  pthread_cond_signal(&pool->has_work);
  pthread_mutex_unlock(&pool->mu);
  return PB_OK;
}

void pb_pool_wait(pb_pool *pool) {
  pthread_mutex_lock(&pool->mu);
  while (pool->pending > 0) pthread_cond_wait(&pool->idle, &pool->mu);
  pthread_mutex_unlock(&pool->mu);
}

int pb_pool_size(const pb_pool *pool) { return pool->n; }

typedef struct pfor {
  pthread_mutex_t mu;
  pthread_cond_t done;
  int64_t next, n;
  int running; /* helper jobs not yet returned */
  void (*fn)(void *, int64_t);
  void *arg;
} pfor;

static void pfor_run(void *p) {
  pfor *f = p;
  for (;;) {
    pthread_mutex_lock(&f->mu);
    int64_t i = f->next++;
    pthread_mutex_unlock(&f->mu);
    if (i >= f->n) return;
    f->fn(f->arg, i);
  }
}

static void pfor_helper(void *p) {
  pfor *f = p;
  pfor_run(f);
  pthread_mutex_lock(&f->mu);
  if (--f->running == 0) pthread_cond_signal(&f->done);
  pthread_mutex_unlock(&f->mu);
}

void pb_pool_parallel_for(pb_pool *pool, int64_t n, void (*fn)(void *arg, int64_t i), void *arg) {
  if (pool == NULL || n <= 1) {
    for (int64_t i = 0; i < n; i++) fn(arg, i);
    return;
  }
  pfor f = {.next = 0, .n = n, .fn = fn, .arg = arg};
  pthread_mutex_init(&f.mu, NULL);
  pthread_cond_init(&f.done, NULL);
  int helpers = pool->n < n - 1 ? pool->n : (int)(n - 1);
  /* Waits for its own helpers only, so it works while other jobs run on the pool. */
  for (int k = 0; k < helpers; k++) {
    pthread_mutex_lock(&f.mu);
    f.running++;
    pthread_mutex_unlock(&f.mu);
    if (pb_pool_submit(pool, pfor_helper, &f) != PB_OK) {
      pthread_mutex_lock(&f.mu);
      f.running--;
      pthread_mutex_unlock(&f.mu);
      break;
    }
  }
  pfor_run(&f);
  pthread_mutex_lock(&f.mu);
  while (f.running > 0) pthread_cond_wait(&f.done, &f.mu);
  pthread_mutex_unlock(&f.mu);
  pthread_cond_destroy(&f.done);
  pthread_mutex_destroy(&f.mu);
}

void pb_pool_free(pb_pool *pool) {
  if (pool == NULL) return;
  pthread_mutex_lock(&pool->mu);
  pool->stopping = 1;
  pthread_cond_broadcast(&pool->has_work);
  pthread_mutex_unlock(&pool->mu);
  for (int i = 0; i < pool->n; i++) pthread_join(pool->threads[i], NULL);
  pthread_mutex_destroy(&pool->mu);
  pthread_cond_destroy(&pool->has_work);
  pthread_cond_destroy(&pool->idle);
  free(pool->threads);
  free(pool);
}
