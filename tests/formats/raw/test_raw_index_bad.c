/* A raw file whose index is inconsistent with its layout: an image's offset moved so that it
 * overlaps its neighbour or leaves a gap, two images' offsets swapped, channel entries that do
 * not follow one another, an index offset moved into the pixels. Each edit keeps every offset
 * and size inside the file, so only the layout check can see it: open must refuse the file
 * with PB_EFORMAT, naming it, instead of reading other pixels. */
#include <fcntl.h>
#include <stdint.h>

#include "formats/format_internal.h"
#include "loader/loader_test.h"

enum { N_IMAGES = 3, HEADER = 64, RECORD = 512 };

static char dir[512];

/* Three uint16 images of 2x6x10 (240 bytes: the next image starts 16 bytes of padding later),
 * two channels each. */
static void write_three(const char *path) {
  struct pb_error err = {{0}};
  pb_writer *wr = NULL;
  CHECK_OK(pb_writer_new(path, "raw", NULL, &wr, &err), &err);
  for (int i = 0; i < N_IMAGES; i++) {
    int64_t shape[PB_NDIM] = {1, 2, 1, 6, 10};
    pb_image_meta m;
    pb_image_meta_init(&m, "img", PB_UINT16, shape);
    m.n_channels = 2;
    size_t nb = pb_image_bytes(&m);
    unsigned char *px = malloc(nb);
    CHECK(px != NULL);
    for (size_t k = 0; k < nb; k++) px[k] = (unsigned char)(k * 7 + (size_t)i * 13);
    CHECK_OK(pb_writer_add(wr, &m, px, &err), &err);
    free(px);
  }
  CHECK_OK(pb_writer_finish(wr, &err), &err);
  pb_writer_free(wr);
}

static uint64_t get64(int fd, off_t at) {
  uint64_t v;
  CHECK_EQ(pread(fd, &v, 8, at), 8);
  return v;
}

static void put64(int fd, off_t at, uint64_t v) { CHECK_EQ(pwrite(fd, &v, 8, at), 8); }

/* Where field `field` of image i's index record lies. */
static off_t rec(int fd, int i, int field) {
  return (off_t)(get64(fd, 24) + (uint64_t)i * RECORD + (uint64_t)field);
}

static void expect_refused(const char *what, const char *path, const char *needle) {
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  int rc = pb_dataset_open(path, "raw", &ds, &err);
  if (rc == PB_OK) {
    EXPECT_FAIL("%s: opened (reads would return other pixels)", what);
    pb_dataset_free(ds);
    return;
  }
  EXPECT_EQ(rc, PB_EFORMAT);
  EXPECT_CONTAINS(err.message, path);
  EXPECT_CONTAINS(err.message, needle);
  printf("ok %-28s %s\n", what, err.message);
}

typedef void (*edit_fn)(int fd);

static void overlap_back(int fd) { /* image 1 starts 64 bytes early: inside image 0 */
  put64(fd, rec(fd, 1, 0), get64(fd, rec(fd, 1, 0)) - 64);
}
static void gap_forward(int fd) { /* image 2 starts 64 bytes late: into the index's padding */
  put64(fd, rec(fd, 2, 0), get64(fd, rec(fd, 2, 0)) + 64);
}
static void swapped(int fd) { /* images 0 and 1 trade places */
  uint64_t a = get64(fd, rec(fd, 0, 0)), b = get64(fd, rec(fd, 1, 0));
  put64(fd, rec(fd, 0, 0), b);
  put64(fd, rec(fd, 1, 0), a);
}
static void same_offset(int fd) { /* image 2 on top of image 1 */
  put64(fd, rec(fd, 2, 0), get64(fd, rec(fd, 1, 0)));
}
static void channels_shared(int fd) { /* image 1 reuses image 0's channel entries */
  put64(fd, rec(fd, 1, 24), 0);
}
static void first_not_at_header(int fd) { /* image 0 one alignment step later */
  put64(fd, rec(fd, 0, 0), HEADER + 64);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/pb-raw-index-XXXXXX");
  CHECK(mkdtemp(dir) != NULL);
  static const struct {
    const char *what, *needle;
    edit_fn edit;
  } cases[] = {
      {"overlapping images", "image 1", overlap_back},
      {"gap before an image", "image 2", gap_forward},
      {"swapped offsets", "image 0", swapped},
      {"two images at one offset", "image 2", same_offset},
      {"channel entries shared", "image 1", channels_shared},
      {"first image after a gap", "image 0", first_not_at_header},
  };
  char path[600];
  /* the unedited file opens and reads */
  snprintf(path, sizeof path, "%s/good.raw", dir);
  write_three(path);
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(path, "raw", &ds, &err), &err);
  CHECK_EQ(pb_dataset_count(ds), N_IMAGES);
  pb_dataset_free(ds);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    snprintf(path, sizeof path, "%s/case%zu.raw", dir, k);
    write_three(path);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    cases[k].edit(fd);
    close(fd);
    expect_refused(cases[k].what, path, cases[k].needle);
  }
  /* the index offset moved back over the last image's pixels (the records still fit) */
  snprintf(path, sizeof path, "%s/index.raw", dir);
  write_three(path);
  int fd = open(path, O_RDWR);
  CHECK(fd >= 0);
  uint64_t index_off = get64(fd, 24);
  unsigned char recs[N_IMAGES * RECORD];
  CHECK_EQ(pread(fd, recs, sizeof recs, (off_t)index_off), (long long)sizeof recs);
  CHECK_EQ(pwrite(fd, recs, sizeof recs, (off_t)(index_off - 64)), (long long)sizeof recs);
  put64(fd, 24, index_off - 64);
  close(fd);
  expect_refused("index over the pixels", path, "index");
  pb__remove_tree(dir);
  return check_failures() != 0;
}
