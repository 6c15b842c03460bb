/* ome-zarr region reads touch only the chunks a crop needs: a 256x256 crop of a 4096x4096 image
 * stored in 512x512 chunks reads the stored bytes of the one to four chunks it meets (plus, when
 * sharded, each touched shard's index), counted by pb_stage_times.bytes_read and checked against
 * the chunk files' sizes (or the shard indexes' byte counts) on disk. Of an uncompressed chunk
 * only the span from the crop's first byte in it to its last is read. v2 and v3, unsharded and
 * sharded, compressed and not; the pixels are checked too; whole images read every stored byte
 * once. */
#include <sys/stat.h>

#include "zarr_test.h"

#define H 4096
#define W 4096
#define CH 2
#define CK 512 /* chunk edge */
#define CROP 256

typedef struct cfg {
  const char *options, *compression;
  int version, sharded;
} cfg;

static uint16_t pixel(int64_t c, int64_t y, int64_t x) {
  uint64_t v = (uint64_t)(c * 7919 + y * 131 + x * 17) ^ (uint64_t)(y * x);
  return (uint16_t)(v * 2654435761u >> 13);
}

/* The stored bytes of chunk (c, cy, cx): its file's size, or for a sharded array its entry in
 * the shard index (2x2 chunks per shard, index at the end: 16 bytes per chunk + crc32c). */
static int64_t chunk_bytes(const char *adir, const cfg *c, int64_t ch, int64_t cy, int64_t cx) {
  char p[1024];
  if (!c->sharded) {
    if (c->version == 2)
      snprintf(p, sizeof p, "%s/0/%lld/0/%lld/%lld", adir, (long long)ch, (long long)cy,
               (long long)cx);
    else
      snprintf(p, sizeof p, "%s/c/0/%lld/0/%lld/%lld", adir, (long long)ch, (long long)cy,
               (long long)cx);
    struct stat sb;
    if (stat(p, &sb) != 0) FAIL("chunk file %s missing", p);
    return (int64_t)sb.st_size;
  }
  snprintf(p, sizeof p, "%s/c/0/%lld/0/%lld/%lld", adir, (long long)ch, (long long)(cy / 2),
           (long long)(cx / 2));
  FILE *f = fopen(p, "rb");
  if (f == NULL) FAIL("shard file %s missing", p);
  unsigned char idx[68];
  if (fseek(f, -68, SEEK_END) != 0 || fread(idx, 1, 68, f) != 68) FAIL("%s: no index", p);
  fclose(f);
  int lin = (int)((cy % 2) * 2 + cx % 2);
  uint64_t nb = 0;
  for (int i = 7; i >= 0; i--) nb = nb << 8 | idx[16 * lin + 8 + i];
  return (int64_t)nb;
}

static void check_config(const cfg *c, const uint16_t *pix) {
  char dir[256], path[512], adir[600];
  zt_tmpdir(dir, sizeof dir, "rb");
  snprintf(path, sizeof path, "%s/ds", dir);
  struct pb_error err = {""};
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.compression = c->compression;
  wp.options = c->options;
  const int64_t chunk[PB_NDIM] = {1, 1, 1, CK, CK};
  memcpy(wp.chunk, chunk, sizeof wp.chunk);
  pb_writer *w;
  CHECK_OK(pb_writer_new(path, "ome-zarr", &wp, &w, &err), &err);
  const int64_t shape[PB_NDIM] = {1, CH, 1, H, W};
  pb_image_meta m;
  pb_image_meta_init(&m, "a.zarr", PB_UINT16, shape);
  CHECK_OK(pb_writer_add(w, &m, pix, &err), &err);
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
  snprintf(adir, sizeof adir, "%s/a.zarr/0", path);

  pb_dataset *ds;
  CHECK_OK(pb_dataset_open(path, "ome-zarr", &ds, &err), &err);
  pb_rng rng;
  pb_rng_init(&rng, 16);
  uint16_t *got = malloc((size_t)CH * CROP * CROP * 2);
  uint16_t *want = malloc((size_t)CH * CROP * CROP * 2);
  int seen[5] = {0};
  for (int trial = 0; trial < 40; trial++) {
    pb_region r = {{0, 0, 0, 0, 0}, {1, 1, 1, CROP, CROP}};
    if (trial == 0) { /* inside one chunk */
      r.start[PB_Y] = CK;
      r.start[PB_X] = 2 * CK + 100;
    } else if (trial == 1) { /* across four */
      r.start[PB_Y] = CK - CROP / 2;
      r.start[PB_X] = 3 * CK - CROP / 2;
    } else if (trial == 2) { /* the last corner, both channels */
      r.start[PB_Y] = H - CROP;
      r.start[PB_X] = W - CROP;
      r.count[PB_C] = CH;
    } else {
      r.start[PB_C] = (int64_t)pb_rng_below(&rng, CH);
      r.start[PB_Y] = (int64_t)pb_rng_below(&rng, H - CROP + 1);
      r.start[PB_X] = (int64_t)pb_rng_below(&rng, W - CROP + 1);
    }
    size_t n = (size_t)r.count[PB_C] * CROP * CROP * 2;
    pb_stage_times t;
    CHECK_OK(pb_dataset_read_region(ds, 0, &r, got, n, &t, &err), &err);
    size_t k = 0;
    for (int64_t ch = r.start[PB_C]; ch < r.start[PB_C] + r.count[PB_C]; ch++)
      for (int64_t y = r.start[PB_Y]; y < r.start[PB_Y] + CROP; y++)
        for (int64_t x = r.start[PB_X]; x < r.start[PB_X] + CROP; x++) want[k++] = pixel(ch, y, x);
    if (memcmp(got, want, n) != 0)
      FAIL("%s %s: crop at c%lld y%lld x%lld differs", c->options, c->compression,
           (long long)r.start[PB_C], (long long)r.start[PB_Y], (long long)r.start[PB_X]);
    int64_t expect = 0, chunks = 0;
    int64_t y0 = r.start[PB_Y] / CK, y1 = (r.start[PB_Y] + CROP - 1) / CK;
    int64_t x0 = r.start[PB_X] / CK, x1 = (r.start[PB_X] + CROP - 1) / CK;
    for (int64_t ch = r.start[PB_C]; ch < r.start[PB_C] + r.count[PB_C]; ch++) {
      for (int64_t cy = y0; cy <= y1; cy++)
        for (int64_t cx = x0; cx <= x1; cx++) {
          if (strcmp(c->compression, "none") == 0) { /* the crop's span in the chunk */
            int64_t ya = r.start[PB_Y] > cy * CK ? r.start[PB_Y] : cy * CK;
            int64_t yb = r.start[PB_Y] + CROP < (cy + 1) * CK ? r.start[PB_Y] + CROP : (cy + 1) * CK;
            int64_t xa = r.start[PB_X] > cx * CK ? r.start[PB_X] : cx * CK;
            int64_t xb = r.start[PB_X] + CROP < (cx + 1) * CK ? r.start[PB_X] + CROP : (cx + 1) * CK;
            CHECK_EQ(chunk_bytes(adir, c, ch, cy, cx), (int64_t)CK * CK * 2);
            expect += ((yb - ya - 1) * CK + (xb - xa)) * 2;
          } else {
            expect += chunk_bytes(adir, c, ch, cy, cx);
          }
          chunks++;
        }
      if (c->sharded) /* one index (4 entries + crc32c) per shard met */
        expect += 68 * (y1 / 2 - y0 / 2 + 1) * (x1 / 2 - x0 / 2 + 1);
    }
    if (r.count[PB_C] == 1) {
      CHECK(chunks >= 1 && chunks <= 4);
      seen[chunks]++;
    }
    if (t.bytes_read != expect)
      FAIL("%s %s: crop at c%lld y%lld x%lld read %lld bytes; its %lld chunks hold %lld",
           c->options, c->compression, (long long)r.start[PB_C], (long long)r.start[PB_Y],
           (long long)r.start[PB_X], (long long)t.bytes_read, (long long)chunks,
           (long long)expect);
    CHECK_EQ(t.bytes_decoded, (int64_t)n);
  }
  CHECK(seen[1] > 0 && seen[4] > 0);
  free(got);
  free(want);
  /* The whole image reads every chunk once. */
  size_t all = (size_t)CH * H * W * 2;
  uint16_t *img = malloc(all);
  pb_stage_times t;
  CHECK_OK(pb_dataset_read(ds, 0, img, all, &t, &err), &err);
  if (memcmp(img, pix, all) != 0) FAIL("%s %s: whole image differs", c->options, c->compression);
  int64_t expect = 0;
  for (int64_t ch = 0; ch < CH; ch++)
    for (int64_t cy = 0; cy < H / CK; cy++)
      for (int64_t cx = 0; cx < W / CK; cx++) expect += chunk_bytes(adir, c, ch, cy, cx);
  if (c->sharded) expect += 68 * CH * (H / CK / 2) * (W / CK / 2);
  CHECK_EQ(t.bytes_read, expect);
  free(img);
  pb_dataset_free(ds);
  pb__remove_tree(dir);
}

/* Crops of uncompressed chunks holding many planes and tall rows: one crop's span needs more
 * than one preadv (over 1,024 pieces, and gaps between planes longer than the junk buffer).
 * Pixels exact; bytes read at least the pixels and at most the spans (a gap where one preadv
 * ends and the next begins is not read). */
static void tall_chunks(void) {
  enum { C = 2, Z = 3, TH = 1100, TW = 300, CW = 200 };
  char dir[256], path[512];
  zt_tmpdir(dir, sizeof dir, "tall");
  snprintf(path, sizeof path, "%s/ds", dir);
  struct pb_error err = {""};
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.compression = "none";
  const int64_t chunk[PB_NDIM] = {1, C, Z, TH, CW}, shape[PB_NDIM] = {1, C, Z, TH, TW};
  memcpy(wp.chunk, chunk, sizeof wp.chunk);
  size_t n = (size_t)C * Z * TH * TW;
  uint16_t *pix = malloc(n * 2), *got = malloc(n * 2);
  for (size_t i = 0; i < n; i++) pix[i] = (uint16_t)(i * 40503u >> 3);
  pb_writer *w;
  CHECK_OK(pb_writer_new(path, "ome-zarr", &wp, &w, &err), &err);
  pb_image_meta m;
  pb_image_meta_init(&m, "t.zarr", PB_UINT16, shape);
  CHECK_OK(pb_writer_add(w, &m, pix, &err), &err);
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
  pb_dataset *ds;
  CHECK_OK(pb_dataset_open(path, "ome-zarr", &ds, &err), &err);
  const int64_t boxes[][4] = {{0, TH, 50, 200}, {0, 2, 150, 100}, {1000, 100, 0, TW}, {7, 1, 199, 2}};
  for (size_t b = 0; b < sizeof boxes / sizeof boxes[0]; b++) {
    pb_region r = {{0, 0, 0, boxes[b][0], boxes[b][2]}, {1, C, Z, boxes[b][1], boxes[b][3]}};
    size_t k = 0, bytes = (size_t)C * Z * (size_t)r.count[PB_Y] * (size_t)r.count[PB_X] * 2;
    pb_stage_times t;
    CHECK_OK(pb_dataset_read_region(ds, 0, &r, got, bytes, &t, &err), &err);
    int64_t expect = 0;
    for (int64_t cx = r.start[PB_X] / CW; cx <= (r.start[PB_X] + r.count[PB_X] - 1) / CW; cx++) {
      int64_t xa = r.start[PB_X] > cx * CW ? r.start[PB_X] : cx * CW;
      int64_t xe = r.start[PB_X] + r.count[PB_X], xb = xe < (cx + 1) * CW ? xe : (cx + 1) * CW;
      int64_t cw = CW; /* edge chunks are stored full size */
      if (xa == cx * CW && xb - xa == cw && r.count[PB_Y] == TH) {
        expect += (int64_t)C * Z * TH * cw * 2; /* needed whole */
        continue;
      }
      /* per plane, the span from its first needed byte to its last; planes whose gap exceeds
       * the 64 KiB junk buffer are separate reads, the others are bridged */
      int64_t span = ((r.count[PB_Y] - 1) * cw + (xb - xa)) * 2;
      int64_t gap = (TH - r.count[PB_Y]) * cw * 2 + (cw - (xb - xa)) * 2;
      expect += (int64_t)C * Z * span + (gap <= 65536 ? (int64_t)(C * Z - 1) * gap : 0);
    }
    for (int64_t c = 0; c < C; c++)
      for (int64_t z = 0; z < Z; z++)
        for (int64_t y = r.start[PB_Y]; y < r.start[PB_Y] + r.count[PB_Y]; y++)
          for (int64_t x = r.start[PB_X]; x < r.start[PB_X] + r.count[PB_X]; x++)
            CHECK_EQ(got[k++], pix[((c * Z + z) * TH + y) * TW + x]);
    if (t.bytes_read < (int64_t)bytes || t.bytes_read > expect)
      FAIL("tall crop %zu read %lld bytes: not within [%zu, %lld]", b, (long long)t.bytes_read,
           bytes, (long long)expect);
  }
  pb_dataset_free(ds);
  free(pix);
  free(got);
  pb__remove_tree(dir);
}

int main(void) {
  tall_chunks();
  uint16_t *pix = malloc((size_t)CH * H * W * 2);
  size_t k = 0;
  for (int64_t c = 0; c < CH; c++)
    for (int64_t y = 0; y < H; y++)
      for (int64_t x = 0; x < W; x++) pix[k++] = pixel(c, y, x);
  const cfg cfgs[] = {
      {"zarr=2", "none", 2, 0},
      {"zarr=2", "zstd", 2, 0},
      {"zarr=3", "blosc-zstd", 3, 0},
      {"zarr=3,shard=1x1x1x2x2", "zstd", 3, 1},
      {"zarr=3,shard=1x1x1x2x2", "none", 3, 1},
  };
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) check_config(&cfgs[i], pix);
  free(pix);
  printf("ok: region reads touch only their chunks\n");
  return 0;
}
