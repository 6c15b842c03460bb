/* xoshiro256** (Blackman and Vigna), seeded with splitmix64: the same stream on every
 * platform, since it uses only 64-bit unsigned arithmetic. */
#include <math.h>

#include "pipebench/core.h"

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void pb_rng_init(pb_rng *rng, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&x);
}

uint64_t pb_rng_next(pb_rng *rng) {
  uint64_t *s = rng->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

uint64_t pb_rng_below(pb_rng *rng, uint64_t bound) {
  /* Rejection sampling: drop the top partial range so every value is equally likely. */
  uint64_t limit = UINT64_MAX - (UINT64_MAX % bound + 1) % bound;
  uint64_t r;
  do {
    r = pb_rng_next(rng);
  } while (r > limit);
  return r % bound;
}

double pb_rng_uniform(pb_rng *rng) {
  return (double)(pb_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
}

double pb_rng_normal(pb_rng *rng) {
  double u1 = pb_rng_uniform(rng), u2 = pb_rng_uniform(rng);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void pb_rng_shuffle_i64(pb_rng *rng, int64_t *v, size_t n) {
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)pb_rng_below(rng, (uint64_t)i);
    int64_t t = v[i - 1];
    v[i - 1] = v[j];
    v[j] = t;
  }
}

uint64_t pb_seed_mix(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t x = seed;
  uint64_t h = splitmix64(&x);
  x = h ^ a;
  h = splitmix64(&x);
  x = h ^ b;
  return splitmix64(&x);
}
