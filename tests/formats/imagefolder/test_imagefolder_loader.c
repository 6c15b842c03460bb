/* The loader's batches carry each sample's class label from an image folder (shuffled, with
 * worker threads), and -1 for a format without labels. */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "pipebench/format.h"
#include "pipebench/loader.h"

enum { N = 14, CLASSES = 4 };

static void write_set(const char *path, const char *format, const char *options) {
  struct pb_error err = {{0}};
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.options = options;
  pb_writer *w;
  CHECK_OK(pb_writer_new(path, format, &wp, &w, &err), &err);
  const int64_t shape[PB_NDIM] = {1, 3, 1, 8, 8};
  uint8_t px[3 * 8 * 8];
  for (int i = 0; i < N; i++) {
    pb_image_meta m;
    char name[32];
    snprintf(name, sizeof name, "img_%02d", i);
    pb_image_meta_init(&m, name, PB_UINT8, shape);
    for (int k = 0; k < 3 * 8 * 8; k++) px[k] = (uint8_t)(i * 10 + k);
    CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
  }
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
}

/* Runs one epoch and checks every sample's label; returns how many samples came. */
static int64_t epoch(const char *path, int workers, int with_labels) {
  struct pb_error err = {{0}};
  pb_dataset *ds;
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  p.batch_size = 3;
  p.shuffle = 1;
  p.workers = workers;
  pb_loader *l;
  CHECK_OK(pb_loader_new(path, &p, &l, &err), &err);
  int64_t seen = 0;
  int64_t labelled[CLASSES] = {0};
  for (;;) {
    pb_batch *b = NULL;
    int rc = pb_loader_next(l, &b, &err);
    CHECK_OK(rc, &err);
    if (b == NULL) break; /* end of the epoch */
    CHECK(b->labels != NULL);
    for (int64_t k = 0; k < b->shape[0]; k++) {
      int64_t want = pb_dataset_label(ds, b->indices[k]);
      EXPECT_EQ(b->labels[k], want);
      if (with_labels) {
        EXPECT(want >= 0 && want < CLASSES);
        if (want >= 0 && want < CLASSES) labelled[want]++;
      } else {
        EXPECT_EQ(want, -1);
      }
    }
    seen += b->shape[0];
    pb_batch_free(b);
  }
  if (with_labels) /* classes=4 over 14 images: 4, 4, 3, 3 */
    for (int c = 0; c < CLASSES; c++) EXPECT_EQ(labelled[c], c < 2 ? 4 : 3);
  pb_loader_free(l);
  pb_dataset_free(ds);
  return seen;
}

int main(void) {
  char root[] = "/tmp/pb_if_loader_XXXXXX";
  CHECK(mkdtemp(root) != NULL);
  char tree[512], raw[512], cmd[600];
  snprintf(tree, sizeof tree, "%s/tree", root);
  snprintf(raw, sizeof raw, "%s/images.pbraw", root);
  write_set(tree, "imagefolder", "png=1,classes=4");
  write_set(raw, "raw", NULL);
  EXPECT_EQ(epoch(tree, 0, 1), N);
  EXPECT_EQ(epoch(tree, 2, 1), N);
  EXPECT_EQ(epoch(raw, 2, 0), N);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  CHECK_EQ(system(cmd), 0);
  return check_failures() != 0;
}
