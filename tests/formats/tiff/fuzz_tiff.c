/* Fuzz target for the tiff backend: the input bytes become one TIFF file, opened and read the
 * way a dataset would be (metadata, whole image, one region). Built with libFuzzer when
 * PB_LIBFUZZER is defined; otherwise main() replays tests/formats/tiff/corpus plus seeded
 * mutations of it, so CTest runs it as a regression test. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipebench/core.h"
#include "pipebench/format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Images larger than this are only opened, not read (the fuzzer should not chase memory). */
#define MAX_READ_BYTES ((size_t)64 << 20)

static char fuzz_path[256];

static void remove_fuzz_file(void) { unlink(fuzz_path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (fuzz_path[0] == '\0') { /* memory-backed when possible: rewriting a disk file is slow */
    snprintf(fuzz_path, sizeof fuzz_path, "%s/pb_fuzz_tiff_%d.tif",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
    atexit(remove_fuzz_file);
  }
  FILE *fp = fopen(fuzz_path, "wb");
  if (fp == NULL) return 0;
  if (size > 0 && fwrite(data, 1, size, fp) != size) {
    fclose(fp);
    return 0;
  }
  fclose(fp);
  struct pb_error err;
  pb_dataset *ds = NULL;
  if (pb_dataset_open(fuzz_path, "tiff", &ds, &err) != PB_OK) return 0;
  for (int64_t i = 0; i < pb_dataset_count(ds); i++) {
    pb_image_meta m;
    if (pb_dataset_meta(ds, i, &m, &err) != PB_OK) continue;
    size_t bytes = pb_image_bytes(&m);
    if (bytes == 0 || bytes > MAX_READ_BYTES) continue;
    void *buf = malloc(bytes);
    if (buf == NULL) continue;
    pb_stage_times tm;
    (void)pb_dataset_read(ds, i, buf, bytes, &tm, &err);
    pb_region r;
    for (int k = 0; k < PB_NDIM; k++) {
      r.start[k] = m.shape[k] / 2;
      r.count[k] = m.shape[k] - r.start[k];
    }
    (void)pb_dataset_read_region(ds, i, &r, buf, bytes, &tm, &err);
    free(buf);
  }
  pb_dataset_free(ds);
  return 0;
}

#ifndef PB_LIBFUZZER
#include "common/fs.h"

typedef struct seed {
  unsigned char *data;
  size_t size;
} seed;

/* The corpus in name order (pb__list_dir sorts), so that every clone replays the same seeds
 * and the same seeded mutations of them, whatever order the file system lists them in. */
static int load_corpus(const char *dir, seed **out, size_t *n) {
  char **names;
  size_t count;
  struct pb_error err;
  *out = NULL;
  *n = 0;
  if (pb__list_dir(dir, &names, &count, &err) != PB_OK) return -1;
  *out = calloc(count > 0 ? count : 1, sizeof **out);
  if (*out == NULL) {
    pb__free_names(names, count);
    return -1;
  }
  for (size_t i = 0; i < count; i++) {
    if (names[i][0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    void *data;
    size_t size;
    if (pb__read_file(path, &data, &size, &err) != PB_OK) continue;
    unsigned char *b = malloc(size + 1);
    if (b != NULL) memcpy(b, data, size);
    pb_free(data, size);
    if (b == NULL) continue;
    (*out)[*n].data = b;
    (*out)[*n].size = size;
    (*n)++;
  }
  pb__free_names(names, count);
  return 0;
}

/* One random edit of buf (size *len, capacity cap). */
static void mutate(pb_rng *rng, unsigned char *buf, size_t *len, size_t cap) {
  static const uint32_t magic[] = {0, 1, 2, 8, 16, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000,
                                   0x7FFFFFFF, 0x80000000u, 0xFFFFFFFFu};
  if (*len == 0) return;
  size_t at = (size_t)pb_rng_below(rng, *len);
  switch (pb_rng_below(rng, 6)) {
    case 0: buf[at] ^= (unsigned char)(1u << pb_rng_below(rng, 8)); break;
    case 1: buf[at] = (unsigned char)pb_rng_next(rng); break;
    case 2: { /* an interesting 16- or 32-bit value */
      uint32_t v = magic[pb_rng_below(rng, sizeof magic / sizeof magic[0])];
      size_t w = pb_rng_below(rng, 2) ? 4 : 2;
      for (size_t k = 0; k < w && at + k < *len; k++) buf[at + k] = (unsigned char)(v >> (8 * k));
      break;
    }
    case 3: *len = at; break; /* truncate */
    case 4: { /* copy a block elsewhere */
      size_t from = (size_t)pb_rng_below(rng, *len), n = 1 + (size_t)pb_rng_below(rng, 32);
      if (from + n > *len) n = *len - from;
      if (at + n > *len) n = *len - at;
      memmove(buf + at, buf + from, n);
      break;
    }
    default: /* grow with random bytes */
      while (*len < cap && pb_rng_below(rng, 8) != 0) buf[(*len)++] = (unsigned char)pb_rng_next(rng);
      break;
  }
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : PIPEBENCH_SOURCE_DIR "/tests/formats/tiff/corpus";
  long iterations = argc > 2 ? strtol(argv[2], NULL, 10) : 3000;
  seed *seeds;
  size_t n;
  if (load_corpus(dir, &seeds, &n) != 0 || n == 0) {
    fprintf(stderr, "fuzz_tiff: no corpus in %s\n", dir);
    return 1;
  }
  for (size_t i = 0; i < n; i++) LLVMFuzzerTestOneInput(seeds[i].data, seeds[i].size);
  pb_rng rng;
  pb_rng_init(&rng, 20240601);
  size_t cap = 1 << 16;
  unsigned char *buf = malloc(cap);
  for (long it = 0; it < iterations; it++) {
    const seed *s = &seeds[pb_rng_below(&rng, n)];
    size_t len = s->size < cap ? s->size : cap;
    memcpy(buf, s->data, len);
    int edits = 1 + (int)pb_rng_below(&rng, 4);
    for (int k = 0; k < edits; k++) mutate(&rng, buf, &len, cap);
    LLVMFuzzerTestOneInput(buf, len);
  }
  printf("fuzz_tiff: %zu seeds and %ld mutations ran cleanly\n", n, iterations);
  free(buf);
  for (size_t i = 0; i < n; i++) free(seeds[i].data);
  free(seeds);
  return 0;
}
#endif
