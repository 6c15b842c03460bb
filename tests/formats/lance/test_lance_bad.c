/* The lance backend on bad input: a dataset missing a data file, garbage in _versions, a
 * helper killed mid-read, a write whose engine fails. Each is an error naming the dataset and
 * the problem; a failed write leaves nothing at the path and no temporary beside it. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "common/fs.h"
#include "formats/lance/lance.h"
#include "pipebench/format.h"

static void make(const char *path, int n) {
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.options = "layout=bytes";
  struct pb_error err = {{0}};
  pb_writer *w = NULL;
  CHECK_OK(pb_writer_new(path, "lance", &wp, &w, &err), &err);
  int64_t shape[PB_NDIM] = {1, 1, 1, 20, 30};
  unsigned short px[600];
  for (int i = 0; i < n; i++) {
    pb_image_meta m;
    pb_image_meta_init(&m, "x", PB_UINT16, shape);
    for (int k = 0; k < 600; k++) px[k] = (unsigned short)(k * 7 + i);
    CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
  }
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
}

static void copy_tree(const char *from, const char *to) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", from, to);
  CHECK_EQ(system(cmd), 0);
}

/* Opens path and reads every image: the first error's status, and its message in err. */
static int open_and_read(const char *path, struct pb_error *err) {
  pb_dataset *ds = NULL;
  int rc = pb_dataset_open(path, "lance", &ds, err);
  unsigned short px[600];
  for (int64_t i = 0; rc == PB_OK && i < pb_dataset_count(ds); i++)
    rc = pb_dataset_read(ds, i, px, sizeof px, NULL, err);
  pb_dataset_free(ds);
  return rc;
}

/* Each file of folder dir/sub, by name, to f. */
static void each_file(const char *dir, const char *sub, void (*f)(const char *)) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", dir, sub);
  DIR *d = opendir(p);
  CHECK(d != NULL);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char q[1400];
    snprintf(q, sizeof q, "%s/%s", p, e->d_name);
    f(q);
  }
  closedir(d);
}

static void drop(const char *p) { CHECK_EQ(unlink(p), 0); }
static void garble(const char *p) {
  FILE *f = fopen(p, "w");
  CHECK(f != NULL);
  fputs("this is not a manifest\n", f);
  fclose(f);
}

/* The helper serving path: the process whose command line holds "serve" then path. */
static pid_t helper_of(const char *path) {
  DIR *d = opendir("/proc");
  CHECK(d != NULL);
  struct dirent *e;
  pid_t found = 0;
  while (found == 0 && (e = readdir(d)) != NULL) {
    char p[300], buf[4096];
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    snprintf(p, sizeof p, "/proc/%s/cmdline", e->d_name);
    FILE *f = fopen(p, "r");
    if (f == NULL) continue;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    for (size_t k = 0; k + 1 < n; k += strlen(buf + k) + 1)
      if (strcmp(buf + k, "serve") == 0 && k + 6 < n && strcmp(buf + k + 6, path) == 0)
        found = (pid_t)atoi(e->d_name);
  }
  closedir(d);
  return found;
}

int main(void) {
  struct pb_error err = {{0}};
  if (pb__lance_engine(NULL, 0, &err) != PB_OK) {
    printf("skipped: %s\n", err.message);
    return 77;
  }
  char dir[] = "/tmp/pb-lance-bad-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char good[600], p[600];
  snprintf(good, sizeof good, "%s/good.lance", dir);
  make(good, 3);
  CHECK_OK(open_and_read(good, &err), &err);

  /* a data file missing */
  snprintf(p, sizeof p, "%s/nodata.lance", dir);
  copy_tree(good, p);
  each_file(p, "data", drop);
  EXPECT(open_and_read(p, &err) != PB_OK);
  EXPECT_CONTAINS(err.message, p);
  printf("missing data file: %s\n", err.message);

  /* garbage in _versions */
  snprintf(p, sizeof p, "%s/garbage.lance", dir);
  copy_tree(good, p);
  each_file(p, "_versions", garble);
  EXPECT(open_and_read(p, &err) != PB_OK);
  EXPECT_CONTAINS(err.message, p);
  printf("garbage in _versions: %s\n", err.message);

  /* the helper killed between reads */
  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(good, "lance", &ds, &err), &err);
  unsigned short px[600];
  CHECK_OK(pb_dataset_read(ds, 0, px, sizeof px, NULL, &err), &err);
  pid_t h = helper_of(good);
  CHECK(h > 0);
  CHECK_EQ(kill(h, SIGKILL), 0);
  EXPECT_EQ(pb_dataset_read(ds, 1, px, sizeof px, NULL, &err), PB_ECHILD);
  EXPECT_CONTAINS(err.message, good);
  EXPECT_CONTAINS(err.message, "mid-read");
  EXPECT_CONTAINS(err.message, "signal 9");
  printf("helper killed: %s\n", err.message);
  pb_dataset_free(ds);

  /* a write whose engine fails: nothing at the path, no temporary left */
  snprintf(p, sizeof p, "%s/failed.lance", dir);
  setenv("PIPEBENCH_NODE", "/bin/false", 1);
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  pb_writer *w = NULL;
  CHECK_OK(pb_writer_new(p, "lance", &wp, &w, &err), &err);
  int64_t shape[PB_NDIM] = {1, 1, 1, 20, 30};
  pb_image_meta m;
  pb_image_meta_init(&m, "x", PB_UINT16, shape);
  CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
  EXPECT_EQ(pb_writer_finish(w, &err), PB_ECHILD);
  EXPECT_CONTAINS(err.message, p);
  pb_writer_free(w);
  unsetenv("PIPEBENCH_NODE");
  struct stat st;
  EXPECT(stat(p, &st) != 0);
  char **names = NULL;
  size_t count = 0;
  CHECK_OK(pb__list_dir(dir, &names, &count, &err), &err);
  for (size_t k = 0; k < count; k++) EXPECT(strstr(names[k], "pbtmp") == NULL);
  pb__free_names(names, count);

  /* a folder that is no Lance dataset is not replaced */
  snprintf(p, sizeof p, "%s/keep", dir);
  CHECK(mkdir(p, 0755) == 0);
  char q[700];
  snprintf(q, sizeof q, "%s/notes.txt", p);
  garble(q);
  EXPECT(pb_writer_new(p, "lance", &wp, &w, &err) != PB_OK);
  EXPECT_CONTAINS(err.message, "not a Lance dataset");
  EXPECT(stat(q, &st) == 0);
  pb__remove_tree(dir);
  return check_failures() != 0;
}
