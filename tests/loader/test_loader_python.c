/* Drives the Python binding's test: writes a dataset and the C loader's batches (augmented,
 * shuffled, two workers), then runs tests/loader/test_binding.py, which must read the same
 * pixels through the shared library and hand them to torch without a copy. */
#include <sys/wait.h>

#include "formats/format_internal.h"
#include "loader_test.h"

int main(void) {
  char dir[512], data[600], dump[600], idx[600];
  test_tmpdir(dir, sizeof dir);
  snprintf(data, sizeof data, "%s/d.raw", dir);
  snprintf(dump, sizeof dump, "%s/batches.bin", dir);
  snprintf(idx, sizeof idx, "%s/indices.bin", dir);
  test_make_raw(data, 23, PB_UINT8, 1, 1, 16, 12);

  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  p.batch_size = 5;
  p.workers = 2;
  p.shuffle = 1;
  p.seed = 7;
  p.transform = PB_TRANSFORM_AUGMENT;
  struct pb_error err = {{0}};
  pb_loader *l;
  CHECK_OK(pb_loader_new(data, &p, &l, &err), &err);
  FILE *fd = fopen(dump, "wb"), *fi = fopen(idx, "wb");
  CHECK(fd != NULL && fi != NULL);
  for (;;) {
    pb_batch *b;
    CHECK_OK(pb_loader_next(l, &b, &err), &err);
    if (b == NULL) break;
    CHECK_EQ(fwrite(b->data, 1, b->nbytes, fd), b->nbytes);
    CHECK_EQ(fwrite(b->indices, sizeof(int64_t), (size_t)b->shape[0], fi), b->shape[0]);
    pb_batch_free(b);
  }
  fclose(fd);
  fclose(fi);
  pb_loader_free(l);

  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "PIPEBENCH_LIB='%s' PYTHONPATH='%s/python' '%s' '%s/tests/loader/test_binding.py' "
           "'%s' '%s' '%s'",
           PB_SHARED_LIB, PIPEBENCH_SOURCE_DIR, PIPEBENCH_PYTHON, PIPEBENCH_SOURCE_DIR, data, dump, idx);
  int status = system(cmd);
  pb__remove_tree(dir);
  CHECK(status != -1 && WIFEXITED(status));
  CHECK_EQ(WEXITSTATUS(status), 0);
  printf("python binding: ok\n");
  return 0;
}
