/* Blocks of DuckDB data chunks, and the least-recently-used cache that keeps them. */
#include "io/io.h"
#include "parquet/pq_cache.h"

#include <stdlib.h>
#include <string.h>

int pb__pq_block_init(pb__pq_block *b, int64_t first, int64_t last) {
  memset(b, 0, sizeof *b);
  b->first = first;
  b->last = last;
  size_t span = last >= first ? (size_t)(last - first) + 1 : 0;
  b->chunk_of = malloc((span > 0 ? span : 1) * sizeof *b->chunk_of);
  b->row_of = malloc((span > 0 ? span : 1) * sizeof *b->row_of);
  if (b->chunk_of == NULL || b->row_of == NULL) {
    pb__pq_block_free(b);
    return PB_ENOMEM;
  }
  for (size_t k = 0; k < span; k++) b->chunk_of[k] = b->row_of[k] = -1;
  return PB_OK;
}

int pb__pq_block_push(pb__pq_block *b, duckdb_data_chunk chunk, int32_t *index) {
  /* the array grows in powers of two from 8, so n_chunks tells its capacity */
  size_t n = b->n_chunks;
  if (n >= INT32_MAX) {
    duckdb_destroy_data_chunk(&chunk);
    return PB_ENOMEM;
  }
  if (n == 0 || (n >= 8 && (n & (n - 1)) == 0)) {
    size_t cap = n == 0 ? 8 : n * 2;
    void *p = realloc(b->chunks, cap * sizeof *b->chunks);
    if (p == NULL) {
      duckdb_destroy_data_chunk(&chunk);
      return PB_ENOMEM;
    }
    b->chunks = p;
  }
  b->chunks[n] = chunk;
  b->n_chunks = n + 1;
  *index = (int32_t)n;
  return PB_OK;
}

void pb__pq_block_free(pb__pq_block *b) {
  for (size_t k = 0; k < b->n_chunks; k++) duckdb_destroy_data_chunk(&b->chunks[k]);
  free(b->chunks);
  free(b->chunk_of);
  free(b->row_of);
  memset(b, 0, sizeof *b);
}

int pb__pq_cache_init(pb__pq_cache *c, size_t max_blocks, size_t limit) {
  memset(c, 0, sizeof *c);
  c->blocks = calloc(max_blocks > 0 ? max_blocks : 1, sizeof *c->blocks);
  if (c->blocks == NULL) return PB_ENOMEM;
  c->max_blocks = max_blocks > 0 ? max_blocks : 1;
  c->limit = limit;
  return PB_OK;
}

void pb__pq_cache_destroy(pb__pq_cache *c) {
  if (c == NULL) return;
  for (size_t k = 0; k < c->n; k++) pb__pq_block_free(&c->blocks[k]);
  free(c->blocks);
  memset(c, 0, sizeof *c);
}

pb__pq_block *pb__pq_cache_find(pb__pq_cache *c, int64_t key) {
  for (size_t k = 0; k < c->n; k++)
    if (c->blocks[k].first <= key && key <= c->blocks[k].last) {
      c->blocks[k].used = ++c->clock;
      return &c->blocks[k];
    }
  return NULL;
}

pb__pq_block *pb__pq_cache_add(pb__pq_cache *c, pb__pq_block *b) {
  while (c->n > 0 && (c->n >= c->max_blocks || c->bytes + b->bytes > c->limit)) {
    size_t old = 0;
    for (size_t k = 1; k < c->n; k++)
      if (c->blocks[k].used < c->blocks[old].used) old = k;
    c->bytes -= c->blocks[old].bytes;
    pb__pq_block_free(&c->blocks[old]);
    c->blocks[old] = c->blocks[--c->n];
  }
  b->used = ++c->clock;
  c->blocks[c->n] = *b;
  c->bytes += b->bytes;
  memset(b, 0, sizeof *b);
  return &c->blocks[c->n++];
}

/* ---- the budget of handles opened now ------------------------------------------------------ */

/* Per thread: a run sets it in the thread that opens its handles (pb_dataset_open and
 * pb_loader_new open every handle in the calling thread), without touching other threads or
 * the process environment. */
static _Thread_local long long budget_of_thread = -1;

long long pb__pq_cache_budget_set(long long bytes) {
  long long old = budget_of_thread;
  budget_of_thread = bytes < 0 ? -1 : bytes;
  return old;
}

size_t pb__pq_cache_budget(size_t dflt) {
  /* PIPEBENCH_CACHE_MB (or its older name PB_OA_CACHE_MB), through the one place that reads
   * the I/O environment */
  pb_read_options o;
  pb__io_options_resolve(NULL, &o);
  if (o.cache_mb >= 0) return (size_t)o.cache_mb << 20;
  return budget_of_thread >= 0 ? (size_t)budget_of_thread : dflt;
}
