/* The epoch sampler: which dataset indices a rank reads in an epoch, and in what order. */
#include <stdlib.h>

#include "loader/loader_internal.h"

int64_t pb__sampler_per_rank(int64_t n, int world, int pad) {
  if (n <= 0 || world < 1) return 0;
  return pad ? (n + world - 1) / world : n / world;
}

int pb__sampler_plan(int64_t n, int rank, int world, int shuffle, uint64_t seed, int64_t epoch,
                     int64_t per_rank, int64_t *order) {
  if (n <= 0 || per_rank <= 0) return 0;
  int64_t *full = malloc((size_t)n * sizeof *full);
  if (full == NULL) return -1;
  for (int64_t i = 0; i < n; i++) full[i] = i;
  if (shuffle) {
    pb_rng rng;
    pb_rng_init(&rng, pb_seed_mix(seed, (uint64_t)epoch, 0x5348u /* "SH" */));
    pb_rng_shuffle_i64(&rng, full, (size_t)n);
  }
  /* Position rank + j * world of the epoch's order; with padding, positions past the end wrap
   * to its start. Without padding per_rank * world <= n, so no position wraps. */
  for (int64_t j = 0; j < per_rank; j++) order[j] = full[(rank + j * (int64_t)world) % n];
  free(full);
  return 0;
}

/* The public name (pipebench/loader.h). */
int pb_sampler_plan(int64_t n, int rank, int world, int shuffle, uint64_t seed, int64_t epoch,
                    int64_t per_rank, int64_t *order) {
  return pb__sampler_plan(n, rank, world, shuffle, seed, epoch, per_rank, order);
}
