/* Checksums pipebench's writers turn on: every zstd frame pipebench encodes carries zstd's
 * content checksum, so a byte flipped inside a stored (incompressible) block is refused instead
 * of decoded as other bytes; frames written without one (older files) still decode. Through
 * the ome-zarr backend, the refusal names the chunk file; a v3 shard whose crc32c-protected
 * index was changed is refused naming the shard. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "check.h"
#include "codecs/codec.h"
#include "common/fs.h"
#include "pipebench/format.h"

static char dir[512];

static void random_bytes(unsigned char *p, size_t n, uint64_t seed) {
  pb_rng rng;
  pb_rng_init(&rng, seed);
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)pb_rng_next(&rng);
}

static void codec_level(void) {
  enum { N = 65536 };
  unsigned char *src = malloc(N), *dst = malloc(N);
  size_t cap = pb__codec_bound(PB__CODEC_ZSTD, N), n = 0, got = 0;
  unsigned char *enc = malloc(cap);
  CHECK(src != NULL && dst != NULL && enc != NULL);
  random_bytes(src, N, 5);
  struct pb_error err = {{0}};
  pb__codec_ctx ctx = {0};
  for (int with_ctx = 0; with_ctx < 2; with_ctx++) {
    CHECK_OK(pb__codec_encode(with_ctx ? &ctx : NULL, PB__CODEC_ZSTD, NULL, src, N, enc, cap, &n,
                              &err),
             &err);
    /* Frame_Header_Descriptor: bit 2 is Content_Checksum_flag */
    EXPECT((enc[4] & 0x04) != 0);
    CHECK_OK(pb__codec_decode(&ctx, PB__CODEC_ZSTD, enc, n, dst, N, &got, &err), &err);
    EXPECT_EQ(got, (size_t)N);
    EXPECT(memcmp(src, dst, N) == 0);
    /* a flipped byte inside the stored block: only the checksum can see it */
    enc[n / 2] ^= 0x01;
    EXPECT_EQ(pb__codec_decode(&ctx, PB__CODEC_ZSTD, enc, n, dst, N, &got, &err), PB_ECODEC);
    EXPECT_CONTAINS(err.message, "zstd");
    EXPECT_CONTAINS(err.message, "checksum");
    EXPECT_EQ(pb__codec_decode_exact(NULL, PB__CODEC_ZSTD, enc, n, dst, N, &err), PB_ECODEC);
  }
  /* the level is still honoured on a reused context: each frame is the size zstd itself gives
   * at that level with a checksum, and levels 1 and 19 differ on these bytes */
  pb_rng rng;
  pb_rng_init(&rng, 3);
  for (size_t i = 0; i < N; i++) src[i] = (unsigned char)((i / 64) % 7 + pb_rng_below(&rng, 5) * 40);
  size_t sizes[2] = {0, 0};
  static const int levels[2] = {1, 19};
  for (int k = 0; k < 2; k++) {
    pb__codec_params prm = {.level = levels[k]};
    CHECK_OK(pb__codec_encode(&ctx, PB__CODEC_ZSTD, &prm, src, N, enc, cap, &sizes[k], &err), &err);
    ZSTD_CCtx *ref = ZSTD_createCCtx();
    CHECK(ref != NULL);
    ZSTD_CCtx_setParameter(ref, ZSTD_c_compressionLevel, levels[k]);
    ZSTD_CCtx_setParameter(ref, ZSTD_c_checksumFlag, 1);
    size_t want = ZSTD_compress2(ref, dst, N, src, N);
    ZSTD_freeCCtx(ref);
    CHECK(!ZSTD_isError(want));
    EXPECT_EQ(sizes[k], want);
  }
  EXPECT(sizes[0] != sizes[1]);
  /* a frame without a checksum (what earlier versions wrote) still decodes */
  size_t old = ZSTD_compress(enc, cap, src, N, 3);
  CHECK(!ZSTD_isError(old));
  EXPECT((enc[4] & 0x04) == 0);
  CHECK_OK(pb__codec_decode(&ctx, PB__CODEC_ZSTD, enc, old, dst, N, &got, &err), &err);
  EXPECT(memcmp(src, dst, N) == 0);
  pb__codec_ctx_destroy(&ctx);
  free(src);
  free(dst);
  free(enc);
}

/* The largest regular file under path that is not metadata (a chunk or shard), into out. */
static void largest_data_file(const char *path, char *out, size_t size, off_t *best) {
  struct stat st;
  if (stat(path, &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    char **names;
    size_t count;
    struct pb_error err;
    if (pb__list_dir(path, &names, &count, &err) != PB_OK) return;
    for (size_t i = 0; i < count; i++) {
      char sub[1024];
      snprintf(sub, sizeof sub, "%s/%s", path, names[i]);
      largest_data_file(sub, out, size, best);
    }
    pb__free_names(names, count);
    return;
  }
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if (base[0] == '.' || strcmp(base, "zarr.json") == 0) return;
  if (st.st_size > *best) {
    *best = st.st_size;
    snprintf(out, size, "%s", path);
  }
}

static void flip_at(const char *file, long at) {
  FILE *f = fopen(file, "r+b");
  CHECK(f != NULL);
  if (at < 0) CHECK(fseek(f, at, SEEK_END) == 0);
  else CHECK(fseek(f, at, SEEK_SET) == 0);
  long pos = ftell(f);
  int c = fgetc(f);
  CHECK(c != EOF);
  CHECK(fseek(f, pos, SEEK_SET) == 0);
  CHECK(fputc(c ^ 0x01, f) != EOF);
  CHECK(fclose(f) == 0);
}

/* Writes one 64x64 uint16 image of noise as ome-zarr with options, flips a byte of its data
 * file (at: from the start, or from the end when negative) and checks that reading it fails
 * naming that file and the wanted words. */
static void zarr_flip(const char *name, const char *options, long at, const char *word) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct pb_error err = {{0}};
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.compression = "zstd";
  wp.options = options;
  wp.chunk[PB_Y] = wp.chunk[PB_X] = 32;
  pb_writer *w = NULL;
  CHECK_OK(pb_writer_new(path, "ome-zarr", &wp, &w, &err), &err);
  int64_t shape[PB_NDIM] = {1, 1, 1, 64, 64};
  pb_image_meta m;
  pb_image_meta_init(&m, "img_0.zarr", PB_UINT16, shape);
  size_t nb = pb_image_bytes(&m);
  unsigned char *px = malloc(nb), *back = malloc(nb);
  CHECK(px != NULL && back != NULL);
  random_bytes(px, nb, 9);
  CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  CHECK_OK(pb_dataset_read(ds, 0, back, nb, NULL, &err), &err);
  EXPECT(memcmp(px, back, nb) == 0);
  pb_dataset_free(ds);

  char file[1024] = "";
  off_t best = 0;
  largest_data_file(path, file, sizeof file, &best);
  CHECK(file[0] != '\0');
  flip_at(file, at == 0 ? (long)best / 2 : at);
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  int rc = pb_dataset_read(ds, 0, back, nb, NULL, &err);
  EXPECT(rc == PB_ECODEC || rc == PB_EFORMAT);
  EXPECT_CONTAINS(err.message, file + strlen(dir) + 1);
  EXPECT_CONTAINS(err.message, word);
  pb_dataset_free(ds);
  free(px);
  free(back);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/pb_test_codec_checksum_%d", (int)getpid());
  struct pb_error err;
  CHECK_OK(pb__mkdirs(dir, &err), &err);
  codec_level();
  zarr_flip("v2.zarr", "zarr=2", 0, "checksum");
  zarr_flip("v3.zarr", "zarr=3", 0, "checksum");
  zarr_flip("v3s.zarr", "zarr=3,shard=1x1x1x2x2", 0, "checksum");
  /* the last index entry's length, inside the crc32c-protected shard index */
  zarr_flip("v3i.zarr", "zarr=3,shard=1x1x1x2x2", -6, "shard index checksum mismatch");
  pb__remove_tree(dir);
  return check_failures() != 0;
}
