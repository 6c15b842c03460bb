/* lib/parquet's block cache: least recently used blocks go first, by block count and by bytes;
 * blocks own their DuckDB data chunks. */
#include <duckdb.h>
#include <string.h>

#include "check.h"
#include "parquet/pq_cache.h"

/* A block for keys [first, last] counting bytes against the limit (no data chunks). */
static pb__pq_block *add(pb__pq_cache *c, int64_t first, int64_t last, size_t bytes) {
  pb__pq_block b;
  CHECK_OK(pb__pq_block_init(&b, first, last), NULL);
  b.bytes = bytes;
  pb__pq_block *in = pb__pq_cache_add(c, &b);
  EXPECT(b.chunk_of == NULL && b.bytes == 0); /* taken: the caller's copy is left empty */
  EXPECT_EQ(in->first, first);
  return in;
}

static int holds(pb__pq_cache *c, int64_t key) {
  /* look without touching the use order */
  for (size_t k = 0; k < c->n; k++)
    if (c->blocks[k].first <= key && key <= c->blocks[k].last) return 1;
  return 0;
}

static void test_eviction_order(void) {
  pb__pq_cache c;
  CHECK_OK(pb__pq_cache_init(&c, 3, 1 << 20), NULL);
  add(&c, 0, 9, 100);
  add(&c, 10, 19, 100);
  add(&c, 20, 29, 100);
  EXPECT_EQ(c.n, 3);
  EXPECT_EQ(c.bytes, 300);
  /* use the first two again: the third is now the least recently used */
  pb__pq_block *b = pb__pq_cache_find(&c, 15);
  CHECK(b != NULL);
  EXPECT_EQ(b->first, 10);
  b = pb__pq_cache_find(&c, 0);
  CHECK(b != NULL);
  EXPECT_EQ(b->last, 9);
  EXPECT(pb__pq_cache_find(&c, 30) == NULL);
  add(&c, 30, 39, 100); /* full by count: one goes */
  EXPECT_EQ(c.n, 3);
  EXPECT(!holds(&c, 25));
  EXPECT(holds(&c, 5) && holds(&c, 15) && holds(&c, 35));
  /* now 15's block is the oldest */
  pb__pq_cache_find(&c, 5);
  pb__pq_cache_find(&c, 35);
  add(&c, 40, 49, 100);
  EXPECT(!holds(&c, 15));
  EXPECT(holds(&c, 5) && holds(&c, 35) && holds(&c, 45));
  EXPECT_EQ(c.bytes, 300);
  pb__pq_cache_destroy(&c);
  EXPECT_EQ(c.n, 0);
  pb__pq_cache_destroy(&c); /* twice is harmless */
}

static void test_byte_limit(void) {
  pb__pq_cache c;
  CHECK_OK(pb__pq_cache_init(&c, 100, 250), NULL);
  add(&c, 0, 0, 100);
  add(&c, 1, 1, 100);
  EXPECT_EQ(c.n, 2);
  add(&c, 2, 2, 100); /* 300 > 250: the oldest goes */
  EXPECT_EQ(c.n, 2);
  EXPECT_EQ(c.bytes, 200);
  EXPECT(!holds(&c, 0));
  pb__pq_cache_find(&c, 1);
  add(&c, 3, 3, 100); /* 2 is older than 1 now */
  EXPECT(holds(&c, 1) && holds(&c, 3) && !holds(&c, 2));
  /* a block larger than the whole limit: everything else goes, it stays */
  add(&c, 10, 20, 1000);
  EXPECT_EQ(c.n, 1);
  EXPECT_EQ(c.bytes, 1000);
  EXPECT(holds(&c, 15));
  /* and the next one replaces it */
  add(&c, 30, 30, 10);
  EXPECT_EQ(c.n, 1);
  EXPECT_EQ(c.bytes, 10);
  /* several small blocks may go for one */
  add(&c, 31, 31, 10);
  add(&c, 32, 32, 10);
  add(&c, 33, 33, 235); /* 30 + 235 > 250: 30 goes, 20 + 235 still too many: 31 goes */
  EXPECT_EQ(c.bytes, 245);
  EXPECT(holds(&c, 32) && holds(&c, 33) && !holds(&c, 31) && !holds(&c, 30));
  pb__pq_cache_destroy(&c);
}

/* Blocks own their data chunks: many pushed (the array grows), all released by the cache. */
static void test_block_chunks(void) {
  duckdb_logical_type t = duckdb_create_logical_type(DUCKDB_TYPE_BIGINT);
  pb__pq_cache c;
  CHECK_OK(pb__pq_cache_init(&c, 2, 1 << 20), NULL);
  for (int blk = 0; blk < 4; blk++) { /* the first two are evicted with their chunks */
    pb__pq_block b;
    CHECK_OK(pb__pq_block_init(&b, blk * 100, blk * 100 + 99), NULL);
    for (int k = 0; k < 100; k++) {
      EXPECT_EQ(b.chunk_of[k], -1);
      EXPECT_EQ(b.row_of[k], -1);
    }
    for (int k = 0; k < 37; k++) {
      duckdb_data_chunk ch = duckdb_create_data_chunk(&t, 1);
      CHECK(ch != NULL);
      int32_t at = -1;
      CHECK_OK(pb__pq_block_push(&b, ch, &at), NULL);
      EXPECT_EQ(at, k);
      b.chunk_of[k] = at;
      b.row_of[k] = 0;
    }
    EXPECT_EQ(b.n_chunks, 37);
    pb__pq_block *in = pb__pq_cache_add(&c, &b);
    EXPECT_EQ(in->n_chunks, 37);
    EXPECT(in->chunks[36] != NULL);
  }
  EXPECT_EQ(c.n, 2);
  pb__pq_block *b = pb__pq_cache_find(&c, 336);
  CHECK(b != NULL);
  EXPECT_EQ(b->chunk_of[36], 36);
  EXPECT_EQ(b->chunk_of[37], -1);
  pb__pq_cache_destroy(&c);
  /* a block that never reached a cache is freed on its own; a zeroed one too */
  pb__pq_block lone;
  CHECK_OK(pb__pq_block_init(&lone, 5, 5), NULL);
  int32_t at;
  CHECK_OK(pb__pq_block_push(&lone, duckdb_create_data_chunk(&t, 1), &at), NULL);
  pb__pq_block_free(&lone);
  EXPECT(lone.chunks == NULL && lone.n_chunks == 0);
  pb__pq_block_free(&lone);
  duckdb_destroy_logical_type(&t);
}

int main(void) {
  test_eviction_order();
  test_byte_limit();
  test_block_chunks();
  if (check_failures() == 0) printf("test_pq_cache: all checks passed\n");
  return check_failures() != 0;
}
