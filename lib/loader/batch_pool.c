/* Batches and the pool that recycles their buffers (see loader_impl.h). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/format_internal.h"
#include "formats/raw/raw.h"
#include "loader/loader_impl.h"

static void batch_destroy(buf_pool *p, batch_impl *bi) {
  if (bi == NULL) return;
  if (bi->pub.data != NULL) p->alloc.free(p->alloc.ctx, bi->pub.data, p->size);
  free(bi->pub.indices);
  free(bi->pub.labels);
  free(bi);
}

buf_pool *pb__pool_new(const pb_allocator *alloc, size_t size, size_t nidx, int nlists,
                       int cap) {
  buf_pool *p = calloc(1, sizeof *p);
  if (p == NULL) return NULL;
  p->alloc = *alloc;
  p->lists = calloc((size_t)nlists, sizeof *p->lists);
  int ok = p->lists != NULL;
  for (int i = 0; ok && i < nlists; i++) {
    p->lists[i].items = calloc((size_t)cap, sizeof *p->lists[i].items);
    ok = p->lists[i].items != NULL;
  }
  if (!ok) {
    for (int i = 0; p->lists != NULL && i < nlists; i++) free(p->lists[i].items);
    free(p->lists);
    free(p);
    return NULL;
  }
  for (int i = 0; i < nlists; i++) pthread_mutex_init(&p->lists[i].mu, NULL);
  atomic_init(&p->refs, 1);
  p->size = size;
  p->nidx = nidx;
  p->nlists = nlists;
  p->cap = cap;
  return p;
}

void pb__pool_unref(buf_pool *p) {
  if (p == NULL || atomic_fetch_sub(&p->refs, 1) != 1) return;
  for (int i = 0; i < p->nlists; i++) {
    pool_list *q = &p->lists[i];
    for (int j = 0; j < q->n; j++) batch_destroy(p, q->items[j]);
    pthread_mutex_destroy(&q->mu);
    free(q->items);
  }
  free(p->lists);
  free(p);
}

/* A batch from list home (recycled or new) in *out, holding one pool reference. Its header
 * fields are the caller's to fill. */
int pb__pool_get(buf_pool *p, int home, batch_impl **out, struct pb_error *err) {
  *out = NULL;
  pool_list *q = &p->lists[home];
  batch_impl *bi = NULL;
  pthread_mutex_lock(&q->mu);
  if (q->n > 0) bi = q->items[--q->n];
  pthread_mutex_unlock(&q->mu);
  if (bi == NULL) {
    bi = calloc(1, sizeof *bi);
    if (bi == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory for a batch header");
    bi->pub.indices = malloc(p->nidx * sizeof(int64_t));
    bi->pub.labels = malloc(p->nidx * sizeof(int64_t));
    bi->pub.data = p->alloc.alloc(p->alloc.ctx, p->size, 64);
    if (bi->pub.indices == NULL || bi->pub.labels == NULL || bi->pub.data == NULL) {
      batch_destroy(p, bi);
      return pb_error_set(err, PB_ENOMEM, "out of memory for a batch of %zu bytes", p->size);
    }
    if ((uintptr_t)bi->pub.data % 64 != 0) {
      void *bad = bi->pub.data;
      batch_destroy(p, bi); /* the buffer goes back to the allocator it came from */
      return pb_error_set(err, PB_EINVAL,
                          "loader: the batch allocator returned %p for %zu bytes, which is not "
                          "aligned to 64 bytes as asked",
                          bad, p->size);
    }
    bi->home = home;
    bi->pool = p;
  }
  atomic_init(&bi->refs, 1);
  atomic_fetch_add(&p->refs, 1);
  *out = bi;
  return PB_OK;
}

/* At pb_loader_free: spare buffers go back to the allocator now (pinned memory is scarce),
 * and batches still out are freed when released instead of being kept. */
void pb__pool_close(buf_pool *p) {
  if (p == NULL) return;
  for (int i = 0; i < p->nlists; i++) {
    pool_list *q = &p->lists[i];
    pthread_mutex_lock(&q->mu);
    q->closed = 1;
    int n = q->n;
    q->n = 0;
    batch_impl **spare = q->items;
    for (int j = 0; j < n; j++) batch_destroy(p, spare[j]);
    pthread_mutex_unlock(&q->mu);
  }
}

static void pool_put(buf_pool *p, batch_impl *bi) {
  pool_list *q = &p->lists[bi->home];
  pthread_mutex_lock(&q->mu);
  if (!q->closed && q->n < p->cap) {
    q->items[q->n++] = bi;
    bi = NULL;
  }
  pthread_mutex_unlock(&q->mu);
  batch_destroy(p, bi);
}

size_t pb_out_dtype_size(pb_out_dtype d) {
  switch (d) {
    case PB_OUT_FLOAT32: return 4;
    case PB_OUT_FLOAT16:
    case PB_OUT_BFLOAT16: return 2;
    case PB_OUT_NATIVE: return 0;
  }
  return 0;
}

size_t pb_batch_element_size(const pb_batch *batch) {
  if (batch == NULL) return 0;
  return batch->dtype == PB_OUT_NATIVE ? pb_dtype_size(batch->native_dtype)
                                       : pb_out_dtype_size(batch->dtype);
}

const char *pb_out_dtype_name(pb_out_dtype d) {
  switch (d) {
    case PB_OUT_FLOAT32: return "float32";
    case PB_OUT_FLOAT16: return "float16";
    case PB_OUT_BFLOAT16: return "bfloat16";
    case PB_OUT_NATIVE: return "native";
  }
  return "invalid";
}

void pb__batch_release(batch_impl *bi) {
  if (bi == NULL) return;
  if (atomic_fetch_sub(&bi->refs, 1) != 1) return;
  buf_pool *p = bi->pool;
  pool_put(p, bi);
  pb__pool_unref(p);
}

void pb_batch_free(pb_batch *batch) { pb__batch_release((batch_impl *)batch); }
