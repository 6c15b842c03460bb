/* imagefolder against PIL and torchvision (Debian python3-pil, python3-torchvision, run through
 * PIPEBENCH_PYTHON): make_tree.py writes JPEG (baseline, progressive, 4:2:0, 4:4:4, grey, one with its
 * frame header 100 kB in) and PNG (RGB, grey, palette, RGBA, 16-bit grey) files into class
 * folders, with PIL's pixels and torchvision's ImageFolder samples; pipebench must list the same
 * files in the same order with the same labels and decode the same pixels, whole and as a
 * region. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pipebench/format.h"

static unsigned char *read_all(const char *path, size_t *size) {
  FILE *fp = fopen(path, "rb");
  if (fp == NULL) FAIL("cannot open %s", path);
  fseek(fp, 0, SEEK_END);
  long n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  unsigned char *buf = malloc((size_t)n + 1);
  CHECK(buf != NULL && fread(buf, 1, (size_t)n, fp) == (size_t)n);
  fclose(fp);
  *size = (size_t)n;
  return buf;
}

int main(void) {
  char root[] = "/tmp/pb_if_pil_XXXXXX";
  CHECK(mkdtemp(root) != NULL);
  char tree[512], exp[512], cmd[2048];
  snprintf(tree, sizeof tree, "%s/tree", root);
  snprintf(exp, sizeof exp, "%s/expect", root);
  snprintf(cmd, sizeof cmd, "'%s' '%s/tests/formats/imagefolder/make_tree.py' '%s' '%s'", PIPEBENCH_PYTHON,
           PIPEBENCH_SOURCE_DIR, tree, exp);
  CHECK_EQ(system(cmd), 0);

  struct pb_error err = {{0}};
  pb_dataset *ds;
  CHECK_OK(pb_dataset_open(tree, NULL, &ds, &err), &err);
  CHECK_STREQ(pb_dataset_format(ds), "imagefolder");
  char list[600];
  snprintf(list, sizeof list, "%s/list.txt", exp);
  FILE *fp = fopen(list, "r");
  CHECK(fp != NULL);
  char rel[256], dtype[16];
  int label, c, h, w;
  int64_t n = 0;
  while (fscanf(fp, "%255s %d %15s %d %d %d", rel, &label, dtype, &c, &h, &w) == 6) {
    CHECK(n < pb_dataset_count(ds));
    pb_image_meta m;
    CHECK_OK(pb_dataset_meta(ds, n, &m, &err), &err);
    EXPECT_STREQ(m.name, rel);
    EXPECT_EQ(pb_dataset_label(ds, n), label);
    EXPECT_STREQ(pb_dtype_name(m.dtype), dtype);
    EXPECT_EQ(m.shape[PB_T], 1);
    EXPECT_EQ(m.shape[PB_C], c);
    EXPECT_EQ(m.shape[PB_Z], 1);
    EXPECT_EQ(m.shape[PB_Y], h);
    EXPECT_EQ(m.shape[PB_X], w);
    char bin[600];
    snprintf(bin, sizeof bin, "%s/%lld.bin", exp, (long long)n);
    size_t want_size;
    unsigned char *want = read_all(bin, &want_size);
    size_t bytes = pb_image_bytes(&m);
    EXPECT_EQ(bytes, want_size);
    unsigned char *got = malloc(bytes);
    CHECK(got != NULL);
    pb_stage_times t;
    CHECK_OK(pb_dataset_read(ds, n, got, bytes, &t, &err), &err);
    if (bytes == want_size && memcmp(got, want, bytes) != 0) {
      size_t k = 0;
      while (got[k] == want[k]) k++;
      EXPECT_FAIL("%s: pixels differ from PIL's, first at byte %zu: %u vs %u", rel, k, got[k],
                  want[k]);
    }
    EXPECT(t.bytes_read > 0 && t.bytes_decoded == (int64_t)bytes);
    /* A region: the last channel, rows 2.., columns 1..w-2. */
    pb_region r = {{0, c - 1, 0, 2, 1}, {1, 1, 1, h - 2, w - 2}};
    size_t es = pb_dtype_size(m.dtype), rb = es * (size_t)(h - 2) * (size_t)(w - 2);
    unsigned char *reg = malloc(rb);
    CHECK_OK(pb_dataset_read_region(ds, n, &r, reg, rb, NULL, &err), &err);
    for (int y = 0; y < h - 2; y++) {
      const unsigned char *src = want + es * ((size_t)(c - 1) * (size_t)h * (size_t)w +
                                              (size_t)(y + 2) * (size_t)w + 1);
      if (memcmp(reg + es * (size_t)y * (size_t)(w - 2), src, es * (size_t)(w - 2)) != 0) {
        EXPECT_FAIL("%s: region row %d differs from PIL's", rel, y);
        break;
      }
    }
    free(reg);
    free(got);
    free(want);
    n++;
  }
  fclose(fp);
  EXPECT_EQ(n, pb_dataset_count(ds));
  EXPECT_EQ(n, 11);
  EXPECT_EQ(pb_dataset_label(ds, n), -1);
  pb_dataset_free(ds);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  CHECK_EQ(system(cmd), 0);
  return check_failures() != 0;
}
