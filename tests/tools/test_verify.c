/* pipebench verify (programs/tools/verify.c): a byte flipped inside the uncompressed pixels of
 * a raw, tiff or ome-zarr dataset reads back with exit 0 from every reader, and only verify
 * sees it: it names the image (index, name, expected and got CRC-32) and exits 2. Also: the
 * manifest convert writes, inspect --json as --manifest, and missing or malformed manifests. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "common/fs.h"
#include "pipebench/format.h"
#include "pipebench/gen.h"
#include "pipebench/verify.h"

static char dir[512];

typedef struct seen {
  int n;
  int64_t index;
  char name[256];
  uint32_t expected, got;
} seen;

static void on_mismatch(void *ctx, const pb_verify_image *img) {
  seen *s = ctx;
  s->n++;
  s->index = img->index;
  snprintf(s->name, sizeof s->name, "%s", img->name);
  s->expected = img->expected;
  s->got = img->got;
}

/* Runs a shell command line; its stdout goes into out, its exit code is returned. */
static int run(const char *cmd, char *out, size_t size) {
  FILE *p = popen(cmd, "r");
  CHECK(p != NULL);
  size_t n = fread(out, 1, size - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Looks for the n bytes of needle in every regular file under path; the file and offset of
 * the first hit go into file/at. 1 found, 0 not. */
static int find_bytes(const char *path, const void *needle, size_t n, char *file, size_t fsize,
                      size_t *at) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  if (S_ISDIR(st.st_mode)) {
    char **names;
    size_t count;
    struct pb_error err;
    if (pb__list_dir(path, &names, &count, &err) != PB_OK) return 0;
    int found = 0;
    for (size_t i = 0; i < count && !found; i++) {
      char sub[1024];
      snprintf(sub, sizeof sub, "%s/%s", path, names[i]);
      found = find_bytes(sub, needle, n, file, fsize, at);
    }
    pb__free_names(names, count);
    return found;
  }
  void *data;
  size_t len;
  struct pb_error err;
  if (pb__read_file(path, &data, &len, &err) != PB_OK) return 0;
  const unsigned char *hit = memmem(data, len, needle, n);
  if (hit != NULL) {
    snprintf(file, fsize, "%s", path);
    *at = (size_t)(hit - (const unsigned char *)data);
  }
  pb_free(data, len);
  return hit != NULL;
}

static void flip(const char *file, size_t at) {
  FILE *f = fopen(file, "r+b");
  CHECK(f != NULL);
  CHECK(fseek(f, (long)at, SEEK_SET) == 0);
  int c = fgetc(f);
  CHECK(c != EOF);
  CHECK(fseek(f, (long)at, SEEK_SET) == 0);
  CHECK(fputc(c ^ 0x10, f) != EOF);
  CHECK(fclose(f) == 0);
}

/* One format: all match; a flipped pixel byte in image 2 is read back without error, and
 * verify names image 2; flipped back, all match again. */
static void flipped_pixel(const char *entry) {
  char path[1024], cmd[4096], out[8192];
  snprintf(path, sizeof path, "%s/ds/%s", dir, entry);
  struct pb_error err = {{0}};
  seen s = {0};
  pb_verify_params p = PB_VERIFY_PARAMS_DEFAULTS;
  p.on_mismatch = on_mismatch;
  p.ctx = &s;
  pb_verify_result r;
  CHECK_OK(pb_verify(path, &p, &r, &err), &err);
  EXPECT_EQ(r.images, 5);
  EXPECT_EQ(r.mismatched, 0);
  EXPECT_CONTAINS(r.manifest, "ds/manifest.json");

  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  pb_image_meta m;
  CHECK_OK(pb_dataset_meta(ds, 2, &m, &err), &err);
  size_t nb = pb_image_bytes(&m);
  unsigned char *px = malloc(nb), *px2 = malloc(nb);
  CHECK(px != NULL && px2 != NULL);
  CHECK_OK(pb_dataset_read(ds, 2, px, nb, NULL, &err), &err);
  uint32_t crc = pb_image_crc32(&m, px);
  pb_dataset_free(ds);

  char file[1024];
  size_t at = 0;
  if (!find_bytes(path, px, nb, file, sizeof file, &at))
    FAIL("%s: image 2's pixels are not stored uncompressed anywhere under it", entry);
  flip(file, at + nb / 2);

  /* every reader still reads it, as other pixels */
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  CHECK_OK(pb_dataset_read(ds, 2, px2, nb, NULL, &err), &err);
  EXPECT(memcmp(px, px2, nb) != 0);
  pb_dataset_free(ds);

  memset(&s, 0, sizeof s);
  CHECK_OK(pb_verify(path, &p, &r, &err), &err);
  EXPECT_EQ(r.mismatched, 1);
  EXPECT_EQ(s.n, 1);
  EXPECT_EQ(s.index, 2);
  EXPECT_STREQ(s.name, m.name);
  EXPECT_EQ(s.expected, crc);
  EXPECT_EQ(s.got, pb_image_crc32(&m, px2));

  snprintf(cmd, sizeof cmd, "'%s' verify '%s' 2>/dev/null", PIPEBENCH_CLI, path);
  EXPECT_EQ(run(cmd, out, sizeof out), 2);
  char line[512];
  snprintf(line, sizeof line, "image 2 '%s': expected %08x, got %08x\n", m.name, crc,
           pb_image_crc32(&m, px2));
  EXPECT_STREQ(out, line);
  snprintf(cmd, sizeof cmd, "'%s' verify '%s' 2>&1 >/dev/null", PIPEBENCH_CLI, path);
  EXPECT_EQ(run(cmd, out, sizeof out), 2);
  EXPECT_CONTAINS(out, "1 of 5 images");
  EXPECT_CONTAINS(out, "manifest.json");

  flip(file, at + nb / 2);
  snprintf(cmd, sizeof cmd, "'%s' verify '%s' 2>/dev/null", PIPEBENCH_CLI, path);
  EXPECT_EQ(run(cmd, out, sizeof out), 0);
  EXPECT_STREQ(out, "");
  free(px);
  free(px2);
}

static void write_text(const char *path, const char *text) {
  struct pb_error err;
  CHECK_OK(pb__write_file(path, text, strlen(text), &err), &err);
}

static void manifests(void) {
  char path[1024], man[1024], cmd[4096], out[65536];
  struct pb_error err = {{0}};
  snprintf(path, sizeof path, "%s/ds/images.pbraw", dir);

  /* inspect --json's output is a manifest too */
  snprintf(man, sizeof man, "%s/inspect.json", dir);
  snprintf(cmd, sizeof cmd, "'%s' inspect --json '%s' > '%s'", PIPEBENCH_CLI, path, man);
  CHECK_EQ(run(cmd, out, sizeof out), 0);
  pb_verify_params p = PB_VERIFY_PARAMS_DEFAULTS;
  p.manifest = man;
  pb_verify_result r;
  CHECK_OK(pb_verify(path, &p, &r, &err), &err);
  EXPECT_EQ(r.mismatched, 0);
  EXPECT_STREQ(r.manifest, man);

  /* malformed: each refused with PB_EFORMAT naming the file */
  static const char *const bad[] = {
      "not json", "[1,2]", "{\"rows\":5}", "{\"crc32\":\"00000000\"}",
      "{\"crc32\":[1,2,3,4,5]}", "{\"crc32\":[\"0000000g\",\"0\",\"0\",\"0\",\"0\"]}",
      "{\"images\":[{\"index\":0}]}", "{\"crc32\":[\"00000000\"]}",
  };
  snprintf(man, sizeof man, "%s/bad.json", dir);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    write_text(man, bad[i]);
    int rc = pb_verify(path, &p, &r, &err);
    EXPECT_EQ(rc, PB_EFORMAT);
    EXPECT_CONTAINS(err.message, man);
    snprintf(cmd, sizeof cmd, "'%s' verify '%s' --manifest '%s' 2>&1", PIPEBENCH_CLI, path, man);
    EXPECT_EQ(run(cmd, out, sizeof out), 2);
    EXPECT_CONTAINS(out, man);
  }
  /* a manifest that is a folder, or missing */
  p.manifest = dir;
  EXPECT(pb_verify(path, &p, &r, &err) != PB_OK);
  EXPECT_CONTAINS(err.message, dir);
  snprintf(man, sizeof man, "%s/missing.json", dir);
  p.manifest = man;
  EXPECT_EQ(pb_verify(path, &p, &r, &err), PB_ENOTFOUND);
  EXPECT_CONTAINS(err.message, man);

  /* no manifest at all: a copy of the raw file in a folder without one */
  char lone[1024];
  snprintf(lone, sizeof lone, "%s/lone", dir);
  CHECK_OK(pb__mkdirs(lone, &err), &err);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s/'", path, lone);
  CHECK_EQ(run(cmd, out, sizeof out), 0);
  snprintf(cmd, sizeof cmd, "'%s' verify '%s/images.pbraw' 2>&1", PIPEBENCH_CLI, lone);
  EXPECT_EQ(run(cmd, out, sizeof out), 2);
  EXPECT_CONTAINS(out, "no manifest");
  EXPECT_CONTAINS(out, "images.pbraw.manifest.json");

  /* convert writes DST.manifest.json, which verify finds; flipping a pixel there is seen */
  snprintf(cmd, sizeof cmd, "'%s' convert '%s' --to raw --out '%s/x.pbraw' 2>/dev/null",
           PIPEBENCH_CLI, path, dir);
  CHECK_EQ(run(cmd, out, sizeof out), 0);
  char conv[1024], side[1024];
  snprintf(conv, sizeof conv, "%s/x.pbraw", dir);
  CHECK_OK(pb_verify_find_manifest(conv, side, sizeof side, &err), &err);
  EXPECT_CONTAINS(side, "/x.pbraw.manifest.json");
  p.manifest = NULL;
  CHECK_OK(pb_verify(conv, &p, &r, &err), &err);
  EXPECT_EQ(r.images, 5);
  EXPECT_EQ(r.mismatched, 0);
  /* the manifest's CRC-32s equal gen's (convert is lossless for raw) */
  void *a, *b;
  size_t an, bn;
  char genm[1024];
  snprintf(genm, sizeof genm, "%s/ds/manifest.json", dir);
  CHECK_OK(pb__read_file(genm, &a, &an, &err), &err);
  CHECK_OK(pb__read_file(side, &b, &bn, &err), &err);
  const char *crc_a = strstr(a, "\"crc32\""), *crc_b = strstr(b, "\"crc32\"");
  CHECK(crc_a != NULL && crc_b != NULL);
  EXPECT_EQ(strncmp(crc_a, crc_b, 5 * 14), 0);
  pb_free(a, an);
  pb_free(b, bn);
}

/* pb_verify_write_dataset's fill: copies `n` images of the source, then fails when `fail`. */
typedef struct fill_job {
  pb_dataset *src;
  int64_t n;
  int fail;
} fill_job;

static int fill_from(void *ctx, pb_writer *w, struct pb_error *err) {
  fill_job *j = ctx;
  for (int64_t i = 0; i < j->n; i++) {
    pb_image_meta m;
    PB_RETURN_NOT_OK(pb_dataset_meta(j->src, i, &m, err));
    size_t bytes = pb_image_bytes(&m);
    void *px = malloc(bytes);
    if (px == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    int rc = pb_dataset_read(j->src, i, px, bytes, NULL, err);
    if (rc == PB_OK) rc = pb_writer_add(w, &m, px, err);
    free(px);
    PB_RETURN_NOT_OK(rc);
  }
  return j->fail ? pb_error_set(err, PB_EIO, "the source went away") : PB_OK;
}

static int64_t count_at(const char *path) {
  pb_dataset *ds = NULL;
  struct pb_error err;
  if (pb_dataset_open(path, NULL, &ds, &err) != PB_OK) return -1;
  int64_t n = pb_dataset_count(ds);
  pb_dataset_free(ds);
  return n;
}

/* A dataset and its manifest are placed together: a failure keeps the earlier pair whole and
 * leaves nothing of its own; a folder that is no dataset of the format is not replaced. */
static void dataset_with_manifest(void) {
  struct pb_error err = {{0}};
  char src_path[700], out[700], side[800], leftover[900];
  snprintf(src_path, sizeof src_path, "%s/ds/images.pbraw", dir);
  snprintf(out, sizeof out, "%s/pair/out.zarr", dir);
  snprintf(side, sizeof side, "%s.manifest.json", out);
  fill_job j = {NULL, 5, 0};
  CHECK_OK(pb_dataset_open(src_path, NULL, &j.src, &err), &err);
  int started = 0;
  CHECK_OK(pb_verify_write_dataset(out, "ome-zarr", NULL, src_path, fill_from, &j, &started, &err),
           &err);
  EXPECT_EQ(started, 1);
  EXPECT_EQ(count_at(out), 5);
  pb_verify_result r;
  CHECK_OK(pb_verify(out, NULL, &r, &err), &err);
  EXPECT_EQ(r.images, 5);
  EXPECT_EQ(r.mismatched, 0);

  /* a second one that fails after writing 3 images: the earlier pair is untouched */
  j.n = 3;
  j.fail = 1;
  int rc = pb_verify_write_dataset(out, "ome-zarr", NULL, src_path, fill_from, &j, &started, &err);
  EXPECT_EQ(rc, PB_EIO);
  EXPECT_EQ(count_at(out), 5);
  CHECK_OK(pb_verify(out, NULL, &r, &err), &err);
  EXPECT_EQ(r.images, 5);
  EXPECT_EQ(r.mismatched, 0);
  /* one that succeeds with 3 replaces both */
  j.fail = 0;
  CHECK_OK(pb_verify_write_dataset(out, "ome-zarr", NULL, src_path, fill_from, &j, &started, &err),
           &err);
  EXPECT_EQ(count_at(out), 3);
  CHECK_OK(pb_verify(out, NULL, &r, &err), &err);
  EXPECT_EQ(r.images, 3);
  EXPECT_EQ(r.mismatched, 0);
  /* nothing but the pair in the folder */
  char **names = NULL;
  size_t n = 0;
  snprintf(leftover, sizeof leftover, "%s/pair", dir);
  CHECK_OK(pb__list_dir(leftover, &names, &n, &err), &err);
  EXPECT_EQ(n, 2);
  pb__free_names(names, n);

  /* a folder that holds something pipebench did not write is refused before the writer opens */
  snprintf(out, sizeof out, "%s/pair/notes", dir);
  snprintf(leftover, sizeof leftover, "%s/keep.txt", out);
  CHECK_OK(pb__mkdirs(out, &err), &err);
  write_text(leftover, "mine");
  rc = pb_verify_write_dataset(out, "ome-zarr", NULL, src_path, fill_from, &j, &started, &err);
  EXPECT_EQ(rc, PB_EIO);
  EXPECT_EQ(started, 0);
  EXPECT_CONTAINS(err.message, "refusing to replace");
  struct stat st;
  EXPECT_EQ(stat(leftover, &st), 0);
  pb_dataset_free(j.src);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/pb_test_verify_%d", (int)getpid());
  struct pb_error err = {{0}};
  pb_gen_params g = PB_GEN_PARAMS_DEFAULTS;
  g.rows = 5;
  g.shape[PB_Y] = 24;
  g.shape[PB_X] = 20;
  g.seed = 11;
  g.formats = "raw,tiff,ome-zarr";
  g.write.compression = "none";
  char ds[600];
  snprintf(ds, sizeof ds, "%s/ds", dir);
  CHECK_OK(pb_gen(ds, &g, &err), &err);
  flipped_pixel("images.pbraw");
  flipped_pixel("tiff");
  flipped_pixel("ome-zarr");
  manifests();
  dataset_with_manifest();
  pb__remove_tree(dir);
  return check_failures() != 0;
}
