/* The GPU's name comes from nvidia-smi run through the process runner: its first line is read,
 * and one that hangs is stopped at the time limit instead of holding the run. The program is
 * PIPEBENCH_NVIDIA_SMI here (fakes in a temporary folder). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "common/env.h"
#include "common/fs.h"
#include "loader/loader_test.h"

static void script(const char *path, const char *body) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  fprintf(f, "#!/bin/sh\n%s\n", body);
  fclose(f);
  CHECK(chmod(path, 0755) == 0);
}

int main(void) {
  char dir[512], fake[700], hang[700];
  test_tmpdir(dir, sizeof dir);
  snprintf(fake, sizeof fake, "%s/fake-smi", dir);
  snprintf(hang, sizeof hang, "%s/hang-smi", dir);
  script(fake, "echo 'Fake GPU 80GB HBM3, 555.42.06'; echo 'Second GPU, 1.0'; echo noise >&2");
  script(hang, "exec sleep 600");

  pb_env env;
  setenv("PIPEBENCH_NVIDIA_SMI", fake, 1);
  CHECK_OK(pb_env_collect(&env, NULL), NULL);
  EXPECT_STREQ(env.gpu, "Fake GPU 80GB HBM3");
  EXPECT_STREQ(env.gpu_driver, "555.42.06");

  setenv("PIPEBENCH_NVIDIA_SMI", hang, 1);
  int64_t t0 = pb_now_ns();
  CHECK_OK(pb_env_collect(&env, NULL), NULL);
  double s = (double)(pb_now_ns() - t0) / 1e9;
  EXPECT_STREQ(env.gpu, "");
  /* stopped at its limit (10 s), far before the 600 s it asked for */
  if (s > 120.0) EXPECT_FAIL("a hanging nvidia-smi held pb_env_collect for %.0f s", s);

  unsetenv("PIPEBENCH_NVIDIA_SMI");
  pb__remove_tree(dir);
  printf("env gpu: ok (a hanging nvidia-smi stopped after %.1f s)\n", s);
  return check_failures() != 0;
}
