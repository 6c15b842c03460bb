/* Standalone driver for fuzz targets (ome-zarr metadata and chunks, Parquet pages) when
 * libFuzzer is absent: replays every file of a corpus folder, then runs seeded random mutations
 * of those seeds, so CTest keeps them as regression tests.
 * Usage: TARGET [CORPUS_DIR [ITERATIONS]] (default: the target's corpus folder, PIPEBENCH_FUZZ_CORPUS,
 * and 4000 mutations). Seeds are read in name order (pb__list_dir sorts with strcmp), so the
 * seeded mutations are the same in every clone, whatever order the file system lists. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/format_internal.h"

#ifndef PIPEBENCH_FUZZ_CORPUS
#define PIPEBENCH_FUZZ_CORPUS "corpus"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef PB_LIBFUZZER
static void mutate(pb_rng *rng, uint8_t *buf, size_t *n, size_t cap) {
  int steps = 1 + (int)pb_rng_below(rng, 4);
  for (int i = 0; i < steps; i++) {
    size_t len = *n;
    switch (pb_rng_below(rng, 6)) {
    case 0: /* flip a bit */
      if (len > 0) buf[pb_rng_below(rng, len)] ^= (uint8_t)(1u << pb_rng_below(rng, 8));
      break;
    case 1: { /* an interesting byte */
      static const uint8_t v[] = {0, 0xFF, 0x7F, 0x80, 1, '"', '[', '{', '-', '9'};
      if (len > 0) buf[pb_rng_below(rng, len)] = v[pb_rng_below(rng, sizeof v)];
      break;
    }
    case 2: /* truncate */
      if (len > 0) *n = pb_rng_below(rng, len);
      break;
    case 3: /* insert a random byte */
      if (len < cap) {
        size_t at = pb_rng_below(rng, len + 1);
        memmove(buf + at + 1, buf + at, len - at);
        buf[at] = (uint8_t)pb_rng_next(rng);
        *n = len + 1;
      }
      break;
    case 4: /* overwrite 8 bytes (offsets, sizes, headers) */
      if (len >= 8) {
        uint64_t r = pb_rng_next(rng);
        memcpy(buf + pb_rng_below(rng, len - 7), &r, 8);
      }
      break;
    default: /* duplicate a block */
      if (len > 1 && len < cap) {
        size_t from = pb_rng_below(rng, len), cnt = 1 + pb_rng_below(rng, len - from);
        if (cnt > cap - len) cnt = cap - len;
        size_t at = pb_rng_below(rng, len + 1);
        memmove(buf + at + cnt, buf + at, len - at);
        memmove(buf + at, buf + (from >= at ? from + cnt : from), cnt);
        *n = len + cnt;
      }
      break;
    }
  }
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : PIPEBENCH_FUZZ_CORPUS;
  long iters = argc > 2 ? strtol(argv[2], NULL, 10) : 4000;
  struct pb_error err;
  char **names;
  size_t count;
  if (pb__list_dir(dir, &names, &count, &err) != PB_OK || count == 0) {
    fprintf(stderr, "%s: no corpus (%s)\n", dir, err.message);
    return 1;
  }
  uint8_t **seeds = calloc(count, sizeof *seeds);
  size_t *sizes = calloc(count, sizeof *sizes);
  for (size_t i = 0; i < count; i++) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    void *data;
    if (pb__read_file(p, &data, &sizes[i], &err) != PB_OK) {
      fprintf(stderr, "%s\n", err.message);
      return 1;
    }
    seeds[i] = data;
    LLVMFuzzerTestOneInput(seeds[i], sizes[i]);
  }
  pb_rng rng;
  pb_rng_init(&rng, 20240611);
  enum { CAP = 1 << 16 };
  uint8_t *buf = malloc(CAP);
  for (long it = 0; it < iters; it++) {
    size_t s = pb_rng_below(&rng, count), n = sizes[s] < CAP ? sizes[s] : CAP;
    memcpy(buf, seeds[s], n);
    mutate(&rng, buf, &n, CAP);
    /* an exact-size copy, so sanitizers see reads past the end */
    uint8_t *exact = malloc(n > 0 ? n : 1);
    memcpy(exact, buf, n);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
  }
  printf("%s: %zu seeds and %ld mutations ran cleanly\n", argv[0], count, iters);
  for (size_t i = 0; i < count; i++) pb_free(seeds[i], sizes[i]);
  free(seeds);
  free(sizes);
  free(buf);
  pb__free_names(names, count);
  return 0;
}
#endif
