/* lib/codecs: every codec round-trips, corrupt or truncated input is refused with the codec
 * named, and sizes past what a buffer or a library can take are refused without a crash. */
#include <limits.h>
#include <lz4.h>
#include <lz4frame.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codecs/codec.h"

enum { N = 20000 };

/* Pixels like a microscope's: a smooth field with noise, so every codec has something to do. */
static void fill(unsigned char *p, size_t n, uint32_t seed) {
  uint32_t s = seed;
  for (size_t i = 0; i + 1 < n; i += 2) {
    s = s * 1664525u + 1013904223u;
    uint16_t v = (uint16_t)(1000 + (i / 2) % 100 * 7 + (s >> 28));
    memcpy(p + i, &v, 2);
  }
}

typedef struct enc_case {
  pb__codec_id id;
  pb__codec_params prm;
} enc_case;

static const enc_case encoders[] = {
    {PB__CODEC_NONE, {0}},
    {PB__CODEC_ZSTD, {0}},
    {PB__CODEC_ZSTD, {.level = 9}},
    {PB__CODEC_LZ4, {0}},
    {PB__CODEC_GZIP, {0}},
    {PB__CODEC_ZLIB, {.level = 1}},
    {PB__CODEC_BLOSC, {.shuffle = 1, .typesize = 2, .blosc_cname = "lz4"}},
    {PB__CODEC_BLOSC, {.level = 3, .shuffle = 2, .typesize = 2, .blosc_cname = "zstd"}},
};

static void test_names(void) {
  for (int i = 0; i < PB__CODEC_COUNT; i++) {
    pb__codec_id id;
    EXPECT_OK(pb__codec_by_name(pb__codec_name((pb__codec_id)i), &id, NULL), NULL);
    EXPECT_EQ(id, i);
  }
  pb__codec_id id = PB__CODEC_ZSTD;
  EXPECT_OK(pb__codec_by_name("", &id, NULL), NULL);
  EXPECT_EQ(id, PB__CODEC_NONE);
  struct pb_error e = {{0}};
  EXPECT_EQ(pb__codec_by_name("brotli", &id, &e), PB_EUNSUPPORTED);
  EXPECT_CONTAINS(e.message, "brotli");
  EXPECT_STREQ(pb__codec_name(PB__CODEC_COUNT), "unknown");
}

/* Encode, then decode with a kept context (twice, so the context is reused), without one, and
 * into a buffer sized exactly. */
static void test_round_trips(void) {
  /* the room given is N + 64; the 16 bytes after it must stay as they are */
  unsigned char *src = malloc(N), *dst = malloc(N + 64 + 16);
  CHECK(src != NULL && dst != NULL);
  fill(src, N, 7);
  pb__codec_ctx ctx = {0};
  for (size_t k = 0; k < sizeof encoders / sizeof encoders[0]; k++) {
    const enc_case *c = &encoders[k];
    size_t bound = pb__codec_bound(c->id, N);
    CHECK(bound >= (c->id == PB__CODEC_NONE ? (size_t)N : 1));
    unsigned char *enc = malloc(bound);
    CHECK(enc != NULL);
    size_t enc_n = 0;
    struct pb_error e = {{0}};
    EXPECT_OK(pb__codec_encode(&ctx, c->id, &c->prm, src, N, enc, bound, &enc_n, &e), &e);
    if (c->id != PB__CODEC_NONE) EXPECT(enc_n < N); /* smooth data compresses */
    for (int round = 0; round < 3; round++) {
      memset(dst, 0xAB, N + 64 + 16);
      size_t got = 0;
      pb__codec_ctx *use = round < 2 ? &ctx : NULL;
      EXPECT_OK(pb__codec_decode(use, c->id, enc, enc_n, dst, N + 64, &got, &e), &e);
      EXPECT_EQ(got, N);
      EXPECT(memcmp(dst, src, N) == 0);
      for (size_t g = N + 64; g < N + 64 + 16; g++) EXPECT_EQ(dst[g], 0xAB);
    }
    EXPECT_OK(pb__codec_decode_exact(&ctx, c->id, enc, enc_n, dst, N, &e), &e);
    EXPECT(memcmp(dst, src, N) == 0);
    free(enc);
  }
  /* zstd: the same bytes with or without a kept context (writers may use either) */
  size_t bound = pb__codec_bound(PB__CODEC_ZSTD, N), a_n = 0, b_n = 0;
  unsigned char *a = malloc(bound), *b = malloc(bound);
  CHECK(a != NULL && b != NULL);
  EXPECT_OK(pb__codec_encode(&ctx, PB__CODEC_ZSTD, NULL, src, N, a, bound, &a_n, NULL), NULL);
  EXPECT_OK(pb__codec_encode(NULL, PB__CODEC_ZSTD, NULL, src, N, b, bound, &b_n, NULL), NULL);
  EXPECT_EQ(a_n, b_n);
  EXPECT(a_n == b_n && memcmp(a, b, a_n) == 0);
  free(a);
  free(b);
  pb__codec_ctx_destroy(&ctx);
  pb__codec_ctx_destroy(&ctx); /* twice is harmless */
  free(src);
  free(dst);
}

/* LZ4 as other writers store it: a frame and a bare block (lz4, tolerant), a bare block
 * (lz4_raw, Parquet). */
static void test_lz4_framings(void) {
  unsigned char *src = malloc(N), *dst = malloc(N);
  CHECK(src != NULL && dst != NULL);
  fill(src, N, 11);
  size_t fcap = LZ4F_compressFrameBound(N, NULL);
  unsigned char *frame = malloc(fcap);
  CHECK(frame != NULL);
  size_t fn = LZ4F_compressFrame(frame, fcap, src, N, NULL);
  CHECK(!LZ4F_isError(fn));
  struct pb_error e = {{0}};
  EXPECT_OK(pb__codec_decode_exact(NULL, PB__CODEC_LZ4, frame, fn, dst, N, &e), &e);
  EXPECT(memcmp(dst, src, N) == 0);
  int bcap = LZ4_compressBound(N);
  char *block = malloc((size_t)bcap);
  CHECK(block != NULL);
  int bn = LZ4_compress_default((const char *)src, block, N, bcap);
  CHECK(bn > 0);
  EXPECT_OK(pb__codec_decode_exact(NULL, PB__CODEC_LZ4, block, (size_t)bn, dst, N, &e), &e);
  EXPECT(memcmp(dst, src, N) == 0);
  memset(dst, 0, N);
  EXPECT_OK(pb__codec_decode_exact(NULL, PB__CODEC_LZ4_RAW, block, (size_t)bn, dst, N, &e), &e);
  EXPECT(memcmp(dst, src, N) == 0);
  /* lz4_raw takes no frame */
  EXPECT_EQ(pb__codec_decode_exact(NULL, PB__CODEC_LZ4_RAW, frame, fn, dst, N, &e), PB_ECODEC);
  EXPECT_CONTAINS(e.message, "lz4_raw");
  free(frame);
  free(block);
  free(src);
  free(dst);
}

/* Snappy has no encoder here: a block written by hand from the format's description. A literal
 * "abc", a one-byte-offset copy of 9 bytes at distance 3, and a two-byte-offset copy of 12 bytes
 * at distance 12. */
static void test_snappy(void) {
  const unsigned char block[] = {24, 0x08, 'a', 'b', 'c', (5 << 2) | 1, 3, (11 << 2) | 2, 12, 0};
  const char *want = "abcabcabcabcabcabcabcabc";
  unsigned char dst[64];
  size_t got = 0;
  struct pb_error e = {{0}};
  EXPECT_OK(pb__codec_decode(NULL, PB__CODEC_SNAPPY, block, sizeof block, dst, sizeof dst, &got, &e),
            &e);
  EXPECT_EQ(got, 24);
  EXPECT(memcmp(dst, want, 24) == 0);
  /* too small a buffer: the header's length comes back as the size to retry with */
  EXPECT_EQ(pb__codec_decode(NULL, PB__CODEC_SNAPPY, block, sizeof block, dst, 10, &got, &e),
            PB__CODEC_TOO_SMALL);
  EXPECT_EQ(got, 24);
  /* a copy from before the start */
  const unsigned char bad_off[] = {12, 0x08, 'a', 'b', 'c', (5 << 2) | 1, 9};
  EXPECT_EQ(pb__codec_decode(NULL, PB__CODEC_SNAPPY, bad_off, sizeof bad_off, dst, sizeof dst, &got, &e),
            PB_ECODEC);
  EXPECT_CONTAINS(e.message, "snappy");
  /* a header saying more than the block holds */
  const unsigned char short_block[] = {40, 0x08, 'a', 'b', 'c'};
  EXPECT_EQ(pb__codec_decode(NULL, PB__CODEC_SNAPPY, short_block, sizeof short_block, dst,
                             sizeof dst, &got, &e),
            PB_ECODEC);
  /* a length header that never ends */
  const unsigned char endless[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80};
  EXPECT_EQ(pb__codec_decode(NULL, PB__CODEC_SNAPPY, endless, sizeof endless, dst, sizeof dst, &got, &e),
            PB_ECODEC);
  pb__codec_params prm = {0};
  EXPECT_EQ(pb__codec_encode(NULL, PB__CODEC_SNAPPY, &prm, want, 24, dst, sizeof dst, &got, &e),
            PB_EUNSUPPORTED);
  EXPECT_EQ(pb__codec_encode(NULL, PB__CODEC_LZ4_RAW, &prm, want, 24, dst, sizeof dst, &got, &e),
            PB_EUNSUPPORTED);
}

/* Truncated and damaged input: refused (never a crash, never a silent short result), and the
 * message names the codec. */
static void test_corrupt(void) {
  unsigned char *src = malloc(N), *dst = malloc(N);
  CHECK(src != NULL && dst != NULL);
  fill(src, N, 3);
  pb__codec_ctx ctx = {0};
  for (size_t k = 1; k < sizeof encoders / sizeof encoders[0]; k++) {
    const enc_case *c = &encoders[k];
    size_t bound = pb__codec_bound(c->id, N), enc_n = 0;
    unsigned char *enc = malloc(bound);
    CHECK(enc != NULL);
    CHECK_OK(pb__codec_encode(&ctx, c->id, &c->prm, src, N, enc, bound, &enc_n, NULL), NULL);
    const char *name = pb__codec_name(c->id);
    struct pb_error e = {{0}};
    /* cut short */
    int rc = pb__codec_decode_exact(&ctx, c->id, enc, enc_n / 2, dst, N, &e);
    EXPECT_EQ(rc, PB_ECODEC);
    EXPECT_CONTAINS(e.message, name);
    /* the header overwritten */
    unsigned char *bad = malloc(enc_n);
    CHECK(bad != NULL);
    memcpy(bad, enc, enc_n);
    memset(bad, 0x5A, enc_n < 16 ? enc_n : 16);
    e.message[0] = '\0';
    rc = pb__codec_decode_exact(&ctx, c->id, bad, enc_n, dst, N, &e);
    EXPECT_EQ(rc, PB_ECODEC);
    EXPECT_CONTAINS(e.message, name);
    /* the context still decodes good input after bad */
    EXPECT_OK(pb__codec_decode_exact(&ctx, c->id, enc, enc_n, dst, N, &e), &e);
    EXPECT(memcmp(dst, src, N) == 0);
    free(bad);
    free(enc);
  }
  /* none: a size other than the expected one */
  struct pb_error e = {{0}};
  EXPECT_EQ(pb__codec_decode_exact(NULL, PB__CODEC_NONE, src, N - 1, dst, N, &e), PB_ECODEC);
  EXPECT_CONTAINS(e.message, "expected");
  pb__codec_ctx_destroy(&ctx);
  free(src);
  free(dst);
}

/* A destination too small: PB__CODEC_TOO_SMALL with a size that works when retried, and
 * decode_exact refuses data that decodes to more than expected. */
static void test_too_small(void) {
  unsigned char *src = malloc(N);
  CHECK(src != NULL);
  fill(src, N, 5);
  for (size_t k = 0; k < sizeof encoders / sizeof encoders[0]; k++) {
    const enc_case *c = &encoders[k];
    if (c->id == PB__CODEC_LZ4) continue; /* a bare block cannot tell short room from damage */
    size_t bound = pb__codec_bound(c->id, N), enc_n = 0;
    unsigned char *enc = malloc(bound);
    CHECK(enc != NULL);
    CHECK_OK(pb__codec_encode(NULL, c->id, &c->prm, src, N, enc, bound, &enc_n, NULL), NULL);
    size_t cap = N / 4, got = 0;
    unsigned char *dst = malloc(cap);
    CHECK(dst != NULL);
    int rc;
    int tries = 0;
    while ((rc = pb__codec_decode(NULL, c->id, enc, enc_n, dst, cap, &got, NULL)) ==
               PB__CODEC_TOO_SMALL &&
           tries++ < 8) {
      EXPECT(got > cap);
      cap = got;
      free(dst);
      dst = malloc(cap);
      CHECK(dst != NULL);
    }
    EXPECT_OK(rc, NULL);
    EXPECT_EQ(got, N);
    EXPECT(got == N && memcmp(dst, src, N) == 0);
    struct pb_error e = {{0}};
    EXPECT_EQ(pb__codec_decode_exact(NULL, c->id, enc, enc_n, dst, N / 2, &e), PB_ECODEC);
    EXPECT_CONTAINS(e.message, "more than");
    free(dst);
    free(enc);
  }
  free(src);
}

/* Sizes past a library's reach are refused before any byte is read. */
static void test_limits(void) {
  unsigned char one = 0, out[16];
  size_t got = 0;
  struct pb_error e = {{0}};
  size_t huge = (size_t)INT_MAX + 1;
  EXPECT_EQ(pb__codec_bound(PB__CODEC_LZ4, huge), 0);
  EXPECT_EQ(pb__codec_bound(PB__CODEC_BLOSC, huge), 0);
  EXPECT_EQ(pb__codec_bound(PB__CODEC_SNAPPY, 10), 0);
  EXPECT_EQ(pb__codec_encode(NULL, PB__CODEC_LZ4, NULL, &one, huge, out, sizeof out, &got, &e),
            PB_EUNSUPPORTED);
  EXPECT_CONTAINS(e.message, "lz4");
  EXPECT_EQ(pb__codec_encode(NULL, PB__CODEC_BLOSC, NULL, &one, huge, out, sizeof out, &got, &e),
            PB_EUNSUPPORTED);
  EXPECT_EQ(pb__codec_decode(NULL, PB__CODEC_LZ4_RAW, &one, huge, out, sizeof out, &got, &e),
            PB_EUNSUPPORTED);
  if (sizeof(size_t) > 4) {
    size_t over4g = (size_t)UINT_MAX + 1;
    EXPECT_EQ(pb__codec_bound(PB__CODEC_GZIP, over4g), 0);
    EXPECT_EQ(pb__codec_decode(NULL, PB__CODEC_GZIP, &one, over4g, out, sizeof out, &got, &e),
              PB_EUNSUPPORTED);
    EXPECT_CONTAINS(e.message, "gzip");
  }
  /* room below the bound */
  unsigned char src[100] = {0};
  EXPECT_EQ(pb__codec_encode(NULL, PB__CODEC_ZSTD, NULL, src, sizeof src, out, sizeof out, &got, &e),
            PB_EINVAL);
  EXPECT_EQ(pb__codec_decode(NULL, PB__CODEC_COUNT, src, 1, out, sizeof out, &got, &e),
            PB_EUNSUPPORTED);
  /* empty input */
  EXPECT_OK(pb__codec_decode(NULL, PB__CODEC_NONE, src, 0, out, 0, &got, NULL), NULL);
  EXPECT_EQ(got, 0);
  size_t zb = pb__codec_bound(PB__CODEC_ZSTD, 0), zn = 0;
  unsigned char zbuf[64];
  CHECK(zb <= sizeof zbuf);
  EXPECT_OK(pb__codec_encode(NULL, PB__CODEC_ZSTD, NULL, src, 0, zbuf, sizeof zbuf, &zn, NULL), NULL);
  EXPECT_OK(pb__codec_decode_exact(NULL, PB__CODEC_ZSTD, zbuf, zn, out, 0, NULL), NULL);
}

int main(void) {
  test_names();
  test_round_trips();
  test_lz4_framings();
  test_snappy();
  test_corrupt();
  test_too_small();
  test_limits();
  if (check_failures() == 0) printf("test_codecs: all checks passed\n");
  return check_failures() != 0;
}
