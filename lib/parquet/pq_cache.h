/* The block cache the DuckDB read paths of the OME-Arrow formats share: a block holds the rows
 * of a run of consecutive keys (a Parquet row group, a window of chunks, a stretch of a DuckDB
 * table), fetched by one query and kept as DuckDB data chunks, because DuckDB's cost per query
 * is mostly per row group, not per row returned. Least recently used blocks go first when a
 * block count or a byte limit would be passed. Internal. */
#ifndef PB_PARQUET_PQ_CACHE_H
#define PB_PARQUET_PQ_CACHE_H

#include <duckdb.h>
#include <stddef.h>
#include <stdint.h>

#include "pipebench/core.h"

/** Keys [first, last] and where each one's row lies. */
typedef struct pb__pq_block {
  int64_t first, last;
  duckdb_data_chunk *chunks; /**< owned; destroyed with the block */
  size_t n_chunks;
  int32_t *chunk_of, *row_of; /**< key first + k: its data chunk and row (-1: absent) */
  size_t bytes;               /**< what the block counts against the cache's byte limit */
  uint64_t used;              /**< the cache's clock at the last use */
} pb__pq_block;

/** Makes b an empty block for keys [first, last] (every key absent). PB_ENOMEM. */
int pb__pq_block_init(pb__pq_block *b, int64_t first, int64_t last);
/** Appends a data chunk the block then owns; *index gets its place. On failure (PB_ENOMEM, or
 * more chunks than an int32 counts) the chunk is destroyed. */
int pb__pq_block_push(pb__pq_block *b, duckdb_data_chunk chunk, int32_t *index);
/** Releases what the block holds and zeroes it (a zeroed block is fine too). */
void pb__pq_block_free(pb__pq_block *b);

/** Zero-initialise, then pb__pq_cache_init; release with pb__pq_cache_destroy. */
typedef struct pb__pq_cache {
  pb__pq_block *blocks;
  size_t n, max_blocks;
  size_t bytes, limit; /**< held, and the most to hold (a single block may pass it) */
  uint64_t clock;
} pb__pq_cache;

/** Room for max_blocks (>= 1) blocks, at most limit bytes. PB_ENOMEM. */
int pb__pq_cache_init(pb__pq_cache *c, size_t max_blocks, size_t limit);
void pb__pq_cache_destroy(pb__pq_cache *c);
/** The block holding key, marked as just used; NULL when none does. */
pb__pq_block *pb__pq_cache_find(pb__pq_cache *c, int64_t key);
/** Takes *b (left zeroed) into the cache, first freeing least recently used blocks while the
 * cache is full or would pass its byte limit; returns where the block now lies (valid until
 * the next add). */
pb__pq_block *pb__pq_cache_add(pb__pq_cache *c, pb__pq_block *b);

/** The byte limit for a cache that a reader opening a handle now, on this thread, should use:
 * PIPEBENCH_CACHE_MB (MiB; older name PB_OA_CACHE_MB) when the environment sets it; else the budget this thread set with
 * pb__pq_cache_budget_set; else dflt. */
size_t pb__pq_cache_budget(size_t dflt);
/** Sets the calling thread's budget for the handles it opens from now on (-1: none, readers use
 * their default); returns the previous setting so the caller can put it back. pb_run sets 0,
 * so the "cache none" rows of a run read every block from storage, whoever calls pb_run. */
long long pb__pq_cache_budget_set(long long bytes);

#endif
