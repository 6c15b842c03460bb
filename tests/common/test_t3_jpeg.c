/* Track 3's feeder for --decode gpu (programs/tracks/track3_jpeg.c), without a GPU: which files'
 * headers send them to the GPU, and batches from many workers over several passes and a reset:
 * every batch full, JPEGs handed over as their files' bytes, PNGs decoded on the CPU to their
 * own size, each pass a permutation's first batches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "pipebench/format.h"
#include "tracks/track3_jpeg.h"

#define N 13

static void make_tree(const char *path, int png) {
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.options = png ? "png=1,classes=2" : "classes=2";
  pb_writer *w = NULL;
  struct pb_error err;
  CHECK_OK(pb_writer_new(path, "imagefolder", &wp, &w, &err), &err);
  for (int i = 0; i < N; i++) {
    int64_t shape[PB_NDIM] = {1, 3, 1, 20 + i, 30 - i};
    pb_image_meta m;
    char name[32];
    snprintf(name, sizeof name, "img_%02d", i);
    pb_image_meta_init(&m, name, PB_UINT8, shape);
    size_t bytes = pb_image_bytes(&m);
    unsigned char *px = malloc(bytes);
    for (size_t k = 0; k < bytes; k++) px[k] = (unsigned char)(k * 7 + (size_t)i);
    CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
    free(px);
  }
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
}

/* Passes over the tree: batch size 4 of 13 images gives 3 batches a pass. */
static void feed(const char *path, int png) {
  struct pb_error err;
  pb__t3_jpeg *j = NULL;
  CHECK_OK(pb__t3_jpeg_new(path, 4, 16, 12, 8, 4, 7, &j, &err), &err);
  for (int round = 0; round < 2; round++) {
    if (round == 1) CHECK_OK(pb__t3_jpeg_reset(j, &err), &err);
    char seen[3][N][512];
    for (int b = 0; b < 3 * 3; b++) {
      const pb_jpeg_item *items = NULL;
      int n = 0;
      CHECK_OK(pb__t3_jpeg_next(j, &items, &n, &err), &err);
      CHECK_EQ(n, 4);
      for (int k = 0; k < n; k++) {
        const pb_jpeg_item *it = &items[k];
        CHECK(it->name != NULL && strncmp(it->name, path, strlen(path)) == 0);
        CHECK(it->data != NULL && it->size > 0);
        EXPECT_EQ(it->decoded, png ? 2 : 0);
        if (png) { /* cropped on the CPU: the finished 12 x 12 crop */
          EXPECT_EQ(it->channels, 3);
          EXPECT_EQ(it->width, 12);
          EXPECT_EQ(it->height, 12);
          EXPECT_EQ((size_t)12 * 12 * 3, it->size);
        } else {
          EXPECT(pb__t3_jpeg_for_gpu(it->data, it->size));
        }
        snprintf(seen[b / 3][(b % 3) * 4 + k], sizeof seen[0][0], "%s", it->name);
      }
    }
    /* every pass hands out the same 12 images (one shuffled order), none twice */
    for (int p = 0; p < 3; p++)
      for (int a = 0; a < 12; a++) {
        int same = 0, found = 0;
        for (int c = 0; c < 12; c++) {
          same += strcmp(seen[p][a], seen[p][c]) == 0;
          found += strcmp(seen[p][a], seen[0][c]) == 0;
        }
        EXPECT_EQ(same, 1);
        EXPECT_EQ(found, 1);
      }
  }
  EXPECT_EQ(pb__t3_jpeg_cpu_decoded(j) > 0, png);
  pb__t3_jpeg_free(j);
}

/* The CPU share: positions 0 and 2 of each batch of 4 cropped on the CPU when the share is 2,
 * the rest handed over as bytes; the tuning's three cases, and a fixed share left alone. */
static void share(const char *path) {
  struct pb_error err;
  pb__t3_jpeg *j = NULL;
  CHECK_OK(pb__t3_jpeg_new(path, 4, 16, 12, 3, 4, 7, &j, &err), &err);
  EXPECT_EQ(pb__t3_jpeg_cpu_chosen(j), 0); /* no share yet */
  pb__t3_jpeg_set_share(j, 2, 1);
  CHECK_OK(pb__t3_jpeg_reset(j, &err), &err); /* batches from here on take the share */
  int64_t before = 0;
  for (int b = 0; b < 5; b++) {
    const pb_jpeg_item *items = NULL;
    int n = 0;
    CHECK_OK(pb__t3_jpeg_next(j, &items, &n, &err), &err);
    for (int k = 0; k < n; k++) {
      EXPECT_EQ(items[k].decoded, k % 2 == 0 ? 2 : 0);
      if (k % 2 == 0) EXPECT_EQ(items[k].size, (size_t)3 * 12 * 12);
    }
  }
  EXPECT(pb__t3_jpeg_cpu_chosen(j) - before >= 10);
  EXPECT(pb__t3_jpeg_cpu_ms(j) > 0);
  pb__t3_jpeg_tune(j, 5000000, 0); /* fixed: unchanged */
  EXPECT_EQ(pb__t3_jpeg_share(j), 2);
  pb__t3_jpeg_set_share(j, 2, 0);
  pb__t3_jpeg_tune(j, 5000000, 0); /* the feeder was waited for: back off */
  EXPECT_EQ(pb__t3_jpeg_share(j), 0);
  pb__t3_jpeg_tune(j, 5000000, 0); /* not below 0 */
  EXPECT_EQ(pb__t3_jpeg_share(j), 0);
  pb__t3_jpeg_tune(j, 0, 0); /* neither the feeder nor the model held the step: take more */
  EXPECT_EQ(pb__t3_jpeg_share(j), 1);
  pb__t3_jpeg_tune(j, 0, 5000000); /* the model's pace: unchanged */
  EXPECT_EQ(pb__t3_jpeg_share(j), 1);
  pb__t3_jpeg_set_share(j, 9, 0);
  EXPECT_EQ(pb__t3_jpeg_share(j), 4); /* at most the batch */
  pb__t3_jpeg_free(j);
}

int main(void) {
  /* headers: baseline and extended sequential go to the GPU; progressive, a scan before any
   * frame, four components and PNG do not */
  static const unsigned char sof0[] = {0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 0, 0, 0xFF, 0xC0, 0, 17,
                                       8, 0, 16, 0, 16, 3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1};
  unsigned char v[sizeof sof0];
  EXPECT(pb__t3_jpeg_for_gpu(sof0, sizeof sof0));
  memcpy(v, sof0, sizeof v);
  v[9] = 0xC1;
  EXPECT(pb__t3_jpeg_for_gpu(v, sizeof v));
  v[9] = 0xC2;
  EXPECT(!pb__t3_jpeg_for_gpu(v, sizeof v));
  v[9] = 0xDA;
  EXPECT(!pb__t3_jpeg_for_gpu(v, sizeof v));
  memcpy(v, sof0, sizeof v);
  v[17] = 4;
  EXPECT(!pb__t3_jpeg_for_gpu(v, sizeof v));
  static const unsigned char png[] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  EXPECT(!pb__t3_jpeg_for_gpu(png, sizeof png));
  EXPECT(!pb__t3_jpeg_for_gpu(sof0, 12)); /* cut before the frame header */

  char root[] = "/tmp/pb_t3_jpeg_XXXXXX", path[128];
  CHECK(mkdtemp(root) != NULL);
  snprintf(path, sizeof path, "%s/jpeg", root);
  make_tree(path, 0);
  feed(path, 0);
  share(path);
  snprintf(path, sizeof path, "%s/png", root);
  make_tree(path, 1);
  feed(path, 1);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
  return check_failures() ? 1 : 0;
}
