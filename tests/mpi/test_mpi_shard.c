/* Run under mpirun -np N (and alone, as one rank): the loader's shards across real ranks. Every
 * epoch each sample is read at most once across ranks and exactly n - n mod N of them are read;
 * every rank gets the same number of batches; the order is the one-process order dealt out by
 * rank. Also the ranks' own collectives: an agreed failure carries the failing rank's message to
 * every rank, and the common window's sums equal the sum of the ranks'. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader/loader_test.h"
#include "tracks/ranks.h"

enum { N_IMAGES = 103, BATCH = 4, EPOCHS = 2 };

/* This rank's dataset indices of one epoch, in the order its batches gave them. */
static int64_t read_epoch(const char *path, int rank, int world, int64_t epoch, double *idx,
                          int64_t *batches) {
  struct pb_error err = {{0}};
  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  p.batch_size = BATCH;
  p.workers = 2;
  p.shuffle = 1;
  p.seed = 7;
  p.rank = rank;
  p.world_size = world;
  pb_loader *ld = NULL;
  CHECK_OK(pb_loader_new(path, &p, &ld, &err), &err);
  CHECK_OK(pb_loader_reset(ld, epoch, &err), &err);
  int64_t n = 0;
  *batches = 0;
  for (;;) {
    pb_batch *b = NULL;
    CHECK_OK(pb_loader_next(ld, &b, &err), &err);
    if (b == NULL) break;
    for (int64_t k = 0; k < b->shape[0]; k++) idx[n++] = (double)b->indices[k];
    (*batches)++;
    pb_batch_free(b);
  }
  pb_loader_free(ld);
  return n;
}

static void test_shards(const char *path) {
  struct pb_error err = {{0}};
  int rank = pb__ranks_rank(), world = pb__ranks_size();
  double *mine = calloc(N_IMAGES, sizeof *mine), *single = calloc(N_IMAGES, sizeof *single);
  CHECK(mine != NULL && single != NULL);
  for (int64_t e = 0; e < EPOCHS; e++) {
    int64_t batches = 0;
    int64_t n = read_epoch(path, rank, world, e, mine, &batches);
    EXPECT_EQ(n, (int64_t)(N_IMAGES / world));
    int64_t *all_batches = calloc((size_t)world, sizeof *all_batches);
    CHECK(all_batches != NULL);
    CHECK_OK(pb__ranks_allgather_i64(&batches, 1, all_batches, &err), &err);
    for (int r = 0; r < world; r++) EXPECT_EQ(all_batches[r], all_batches[0]);
    free(all_batches);
    double *all = NULL;
    size_t total = 0;
    CHECK_OK(pb__ranks_gather_f64(mine, (size_t)n, &all, &total, &err), &err);
    if (rank == 0) {
      EXPECT_EQ(total, (size_t)(N_IMAGES - N_IMAGES % world));
      int seen[N_IMAGES] = {0};
      for (size_t k = 0; k < total; k++) {
        int64_t i = (int64_t)all[k];
        CHECK(i >= 0 && i < N_IMAGES);
        seen[i]++;
        if (seen[i] > 1) EXPECT_FAIL("epoch %lld: image %lld read twice", (long long)e, (long long)i);
      }
      /* the one-process order, dealt out: rank r's j-th sample is position r + j * world */
      int64_t b1 = 0;
      EXPECT_EQ(read_epoch(path, 0, 1, e, single, &b1), (int64_t)N_IMAGES);
      int64_t per = N_IMAGES / world;
      for (int r = 0; r < world; r++)
        for (int64_t j = 0; j < per; j++)
          EXPECT_EQ((int64_t)all[(size_t)(r * per + j)], (int64_t)single[r + j * world]);
    }
    free(all);
  }
  free(mine);
  free(single);
}

static void test_agree(void) {
  struct pb_error err = {{0}};
  int rank = pb__ranks_rank(), world = pb__ranks_size();
  EXPECT_EQ(pb__ranks_agree(PB_OK, &err), PB_OK);
  int last = world - 1, rc = PB_OK;
  if (rank == last) rc = pb_error_set(&err, PB_EIO, "rank-only failure %d", 17);
  EXPECT_EQ(pb__ranks_agree(rc, &err), PB_EIO);
  EXPECT_EQ(pb__ranks_failed(), world > 1);
  char want[128];
  if (world > 1) snprintf(want, sizeof want, "rank %d: rank-only failure 17", last);
  else snprintf(want, sizeof want, "rank-only failure 17");
  EXPECT_STREQ(err.message, want);
  /* known to every rank: later calls answer without communicating (one process passes its
   * status through) */
  EXPECT_EQ(pb__ranks_agree(PB_OK, &err), world > 1 ? PB_EIO : PB_OK);
  if (world > 1) EXPECT_STREQ(err.message, want); /* the caller's message stays */
  CHECK_OK(pb__ranks_init(&err), &err); /* a new run forgets it */
  EXPECT(!pb__ranks_failed());
  EXPECT_EQ(pb__ranks_agree(PB_OK, &err), PB_OK);
}

static void test_window(void) {
  struct pb_error err = {{0}};
  int rank = pb__ranks_rank(), world = pb__ranks_size();
  pb__ranks_window w;
  /* rank r: 10 * (world - r) samples in one second of its own; the last rank is the slowest */
  CHECK_OK(pb__ranks_window_gather(10 * (world - rank), 1.0, 2.0, &w, &err), &err);
  int64_t sum = 0;
  for (int r = 0; r < world; r++) sum += 10 * (world - r);
  EXPECT_EQ(w.n, world);
  EXPECT_EQ(w.samples, sum);
  EXPECT_NEAR(w.rate, (double)sum / 2.0, 1e-9);
  EXPECT_EQ(w.slowest, world - 1);
  EXPECT_NEAR(w.slowest_rate, 10.0, 1e-9);
  EXPECT_NEAR(w.imbalance, (double)world, 1e-9);
  char want[512] = "";
  for (int r = 0; r < world; r++) {
    size_t u = strlen(want);
    snprintf(want + u, sizeof want - u, "%s%d", r ? "," : "", 10 * (world - r));
  }
  EXPECT_STREQ(w.samples_list, want);
}

int main(void) {
  struct pb_error err = {{0}};
  CHECK_OK(pb__ranks_init(&err), &err);
  char dir[4096] = "", path[4200];
  if (pb__ranks_rank() == 0) {
    test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/images.pbraw", dir);
    test_make_raw(path, N_IMAGES, PB_UINT16, 1, 1, 8, 8);
  }
  CHECK_OK(pb__ranks_bcast(dir, sizeof dir, &err), &err);
  snprintf(path, sizeof path, "%s/images.pbraw", dir);
  test_shards(path);
  test_agree();
  test_window();
  CHECK_OK(pb__ranks_agree(PB_OK, &err), &err);
  if (pb__ranks_rank() == 0) {
    unlink(path);
    rmdir(dir);
  }
  if (pb__ranks_rank() == 0) printf("%d ranks: %s\n", pb__ranks_size(), check_failures() ? "FAILED" : "ok");
  return check_failures() ? 1 : 0;
}
