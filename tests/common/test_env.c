/* The environment registry (common/env.h): parts' library versions fill pb_env, a version a
 * module registers later (the CUDA engine's cuDNN) shows in the row fields, other keys are
 * added after the fixed ones, and the CPU facts come from /proc/cpuinfo. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "common/env.h"

static void fake_cudnn(char *buf, size_t size) { snprintf(buf, size, "9.1.0"); }
static void fake_runtime(char *buf, size_t size) { snprintf(buf, size, "12.4"); }
static void fake_zstd(char *buf, size_t size) { snprintf(buf, size, "0.0.1-test"); }

/* The value of field key, "" when there is no such field; *n gets the field count. */
static const char *field(const pb_env *env, const char *key, int *n, char *tmp, size_t size) {
  *n = pb_env_field_count();
  for (int i = 0; i < *n; i++) {
    const char *k, *v;
    pb_env_field(env, i, &k, &v, tmp, size);
    if (strcmp(k, key) == 0) return v;
  }
  return "";
}

int main(void) {
  pb_env env;
  char tmp[256];
  int n0, n;
  CHECK_OK(pb_env_collect(&env, NULL), NULL);
  /* the parts linked here registered their libraries */
  EXPECT(env.duckdb_version[0] && env.libtiff_version[0] && env.blosc_version[0]);
  EXPECT(env.zstd_version[0] && env.zlib_lib_version[0] && env.lz4_version[0]);
  EXPECT(env.cjson_version[0] && env.onednn_version[0]);
  EXPECT(field(&env, "libjpeg_turbo_version", &n0, tmp, sizeof tmp)[0]); /* imagefolder */
  EXPECT(field(&env, "libpng_version", &n0, tmp, sizeof tmp)[0]);
  EXPECT_STREQ(field(&env, "cudnn_version", &n0, tmp, sizeof tmp), "");
#ifdef PB_TEST_MPI /* a build with MPI names its library (ranks.c) */
  EXPECT_CONTAINS(field(&env, "mpi_version", &n, tmp, sizeof tmp), "MPI");
  EXPECT_EQ(n0, 24);
#else
  EXPECT_EQ(n0, 23);
#endif

  /* a module loaded later: its known key fills its field, a new key is a field of its own */
  pb__env_register_version("cudnn_version", fake_cudnn);
  pb__env_register_version("cuda_runtime_version", fake_runtime);
  CHECK_OK(pb_env_collect(&env, NULL), NULL);
  EXPECT_STREQ(field(&env, "cudnn_version", &n, tmp, sizeof tmp), "9.1.0");
  EXPECT_EQ(n, n0 + 1);
  EXPECT_STREQ(field(&env, "cuda_runtime_version", &n, tmp, sizeof tmp), "12.4");
  /* registering again replaces; NULL removes */
  pb__env_register_version("zstd_version", fake_zstd);
  CHECK_OK(pb_env_collect(&env, NULL), NULL);
  EXPECT_STREQ(env.zstd_version, "0.0.1-test");
  pb__env_register_version("cuda_runtime_version", NULL);
  pb__env_register_version("cudnn_version", NULL);
  EXPECT_STREQ(field(&env, "cudnn_version", &n, tmp, sizeof tmp), "");
  EXPECT_EQ(n, n0);
  const char *k, *v;
  pb_env_field(&env, n0, &k, &v, tmp, sizeof tmp); /* past the end: empty */
  EXPECT_STREQ(k, "");

  /* the CPU: a model name and only the flags asked about */
  char model[128], flags[128];
  pb__cpu_info(model, sizeof model, flags, sizeof flags);
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f != NULL) {
    char line[4096];
    int has_model = 0;
    while (fgets(line, sizeof line, f) != NULL) has_model |= strncmp(line, "model name", 10) == 0;
    fclose(f);
    if (has_model) EXPECT(model[0] != '\0' && model[strlen(model) - 1] != '\n');
  }
  for (char *t = strtok(flags, " "); t != NULL; t = strtok(NULL, " "))
    EXPECT(strstr(" avx2 fma avx512f avx512_bf16 avx512_vnni amx_bf16 amx_tile ", t) != NULL);
  char m2[128];
  pb__cpu_model(m2, sizeof m2);
  EXPECT(m2[0] != '\0');
  if (model[0]) EXPECT_STREQ(m2, model);
  if (check_failures() == 0) printf("test_env: all checks passed\n");
  return check_failures() != 0;
}
