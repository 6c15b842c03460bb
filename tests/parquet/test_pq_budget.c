/* The block budget of reader handles: PB_OA_CACHE_MB wins, then the budget the opening thread set
 * (pb_run sets 0, so every caller of pb_run gets the same "cache none" rows), then the reader's
 * default; a thread's setting never reaches another thread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "parquet/pq_cache.h"

static void *other_thread(void *arg) {
  size_t *got = arg;
  *got = pb__pq_cache_budget(77);
  return NULL;
}

int main(void) {
  CHECK_EQ(unsetenv("PB_OA_CACHE_MB"), 0);
  EXPECT_EQ(pb__pq_cache_budget(77), 77);             /* nothing set: the reader's default */
  EXPECT_EQ(pb__pq_cache_budget_set(0), -1);          /* the previous setting comes back */
  EXPECT_EQ(pb__pq_cache_budget(77), 0);              /* this thread's budget */
  size_t seen = 0;
  pthread_t th;
  CHECK_EQ(pthread_create(&th, NULL, other_thread, &seen), 0);
  CHECK_EQ(pthread_join(th, NULL), 0);
  EXPECT_EQ(seen, 77);                                /* not another thread's */
  CHECK_EQ(setenv("PB_OA_CACHE_MB", "5", 1), 0);
  EXPECT_EQ(pb__pq_cache_budget(77), (size_t)5 << 20); /* the environment wins */
  CHECK_EQ(setenv("PB_OA_CACHE_MB", "lots", 1), 0);
  EXPECT_EQ(pb__pq_cache_budget(77), 0);              /* a malformed value is ignored */
  CHECK_EQ(unsetenv("PB_OA_CACHE_MB"), 0);
  EXPECT_EQ(pb__pq_cache_budget_set(1 << 20), 0);
  EXPECT_EQ(pb__pq_cache_budget(77), (size_t)1 << 20);
  EXPECT_EQ(pb__pq_cache_budget_set(-1), 1 << 20);    /* put back: the default again */
  EXPECT_EQ(pb__pq_cache_budget(77), 77);
  if (check_failures() == 0) printf("block budget ok\n");
  return check_failures() != 0;
}
