/* Environment metadata: the facts every result row carries. */
#include <blosc.h>
#include <cjson/cJSON.h>
#include <lz4.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <tiffio.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "duckdb.h"
#include "oneapi/dnnl/dnnl.h"
#include "pb_gitinfo.h"
#include "pipebench/core.h"

const char *pb_version(void) { return PB_VERSION_STRING; }
const char *pb_git_commit(void) { return PB_GIT_COMMIT; }

static void trim(char *s) {
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\r')) s[--n] = '\0';
}

static void cpu_info(pb_env *env) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f == NULL) return;
  char line[4096];
  int have_model = 0, have_flags = 0;
  while (fgets(line, sizeof line, f) != NULL && !(have_model && have_flags)) {
    char *colon = strchr(line, ':');
    if (colon == NULL) continue;
    if (!have_model && strncmp(line, "model name", 10) == 0) {
      snprintf(env->cpu_model, sizeof env->cpu_model, "%s", colon + 2);
      trim(env->cpu_model);
      have_model = 1;
    } else if (!have_flags && strncmp(line, "flags", 5) == 0) {
      static const char *const wanted[] = {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni",
                                           "amx_bf16", "amx_tile"};
      char *flags = colon + 1;
      for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        char pat[32];
        snprintf(pat, sizeof pat, " %s", wanted[i]);
        char *hit = strstr(flags, pat);
        if (hit != NULL && (hit[strlen(pat)] == ' ' || hit[strlen(pat)] == '\n')) {
          size_t used = strlen(env->cpu_flags);
          snprintf(env->cpu_flags + used, sizeof env->cpu_flags - used, "%s%s", used ? " " : "",
                   wanted[i]);
        }
      }
      have_flags = 1;
    }
  }
  fclose(f);
}

static void gpu_info(pb_env *env) {
  /* nvidia-smi is the one portable way to name the GPU without linking CUDA. */
  if (access("/usr/bin/nvidia-smi", X_OK) != 0 && access("/usr/local/bin/nvidia-smi", X_OK) != 0)
    return;
  FILE *p = popen("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null", "r");
  if (p == NULL) return;
  char line[256];
  if (fgets(line, sizeof line, p) != NULL) {
    trim(line);
    char *comma = strchr(line, ',');
    if (comma != NULL) {
      *comma = '\0';
      snprintf(env->gpu, sizeof env->gpu, "%s", line);
      snprintf(env->gpu_driver, sizeof env->gpu_driver, "%s", comma + 1 + (comma[1] == ' '));
    }
  }
  pclose(p);
}

int pb_env_collect(pb_env *env, struct pb_error *err) {
  (void)err;
  memset(env, 0, sizeof *env);
  snprintf(env->pipebench_version, sizeof env->pipebench_version, "%s", pb_version());
  snprintf(env->git_commit, sizeof env->git_commit, "%s", pb_git_commit());
  gethostname(env->hostname, sizeof env->hostname - 1);
  pb_utc_iso8601(env->timestamp_utc, sizeof env->timestamp_utc);
  struct utsname u;
  if (uname(&u) == 0) snprintf(env->os, sizeof env->os, "%s %s %s", u.sysname, u.release, u.machine);
  cpu_info(env);
  env->cpu_cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  env->memory_bytes = (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGESIZE);
  gpu_info(env);
#if defined(__clang__)
  snprintf(env->compiler, sizeof env->compiler, "clang %s", __clang_version__);
#elif defined(__GNUC__)
  snprintf(env->compiler, sizeof env->compiler, "gcc %d.%d.%d", __GNUC__, __GNUC_MINOR__,
           __GNUC_PATCHLEVEL__);
#endif
  snprintf(env->duckdb_version, sizeof env->duckdb_version, "%s", duckdb_library_version());
  /* TIFFGetVersion() is a multi-line banner; keep its first line's version number. */
  const char *tv = TIFFGetVersion();
  const char *num = tv ? strstr(tv, "Version ") : NULL;
  snprintf(env->libtiff_version, sizeof env->libtiff_version, "%s", num ? num + 8 : (tv ? tv : ""));
  trim(env->libtiff_version);
  char *nl = strchr(env->libtiff_version, '\n');
  if (nl != NULL) *nl = '\0';
  snprintf(env->blosc_version, sizeof env->blosc_version, "%s", BLOSC_VERSION_STRING);
  snprintf(env->zstd_version, sizeof env->zstd_version, "%s", ZSTD_versionString());
  snprintf(env->zlib_lib_version, sizeof env->zlib_lib_version, "%s", zlibVersion());
  snprintf(env->lz4_version, sizeof env->lz4_version, "%s", LZ4_versionString());
  snprintf(env->cjson_version, sizeof env->cjson_version, "%s", cJSON_Version());
  const dnnl_version_t *dv = dnnl_version();
  snprintf(env->onednn_version, sizeof env->onednn_version, "%d.%d.%d", dv->major, dv->minor,
           dv->patch);
  return PB_OK;
}

int pb_env_field_count(void) { return 21; }

void pb_env_field(const pb_env *env, int i, const char **key, const char **value, char *tmp,
                  size_t tmp_size) {
  *key = "";
  *value = "";
  switch (i) {
#define S(n, k, f) \
  case n: *key = k; *value = env->f; break;
    S(0, "pipebench_version", pipebench_version)
    S(1, "git_commit", git_commit)
    S(2, "hostname", hostname)
    S(3, "timestamp_utc", timestamp_utc)
    S(4, "os", os)
    S(5, "cpu_model", cpu_model)
    S(6, "cpu_flags", cpu_flags)
    case 7:
      *key = "cpu_cores";
      snprintf(tmp, tmp_size, "%d", env->cpu_cores);
      *value = tmp;
      break;
    case 8:
      *key = "memory_bytes";
      snprintf(tmp, tmp_size, "%lld", (long long)env->memory_bytes);
      *value = tmp;
      break;
    S(9, "gpu", gpu)
    S(10, "gpu_driver", gpu_driver)
    S(11, "compiler", compiler)
    S(12, "duckdb_version", duckdb_version)
    S(13, "libtiff_version", libtiff_version)
    S(14, "blosc_version", blosc_version)
    S(15, "zstd_version", zstd_version)
    S(16, "zlib_version", zlib_lib_version)
    S(17, "lz4_version", lz4_version)
    S(18, "cjson_version", cjson_version)
    S(19, "onednn_version", onednn_version)
    case 20:
      *key = "cudnn_version";
      *value = "";
      break;
#undef S
    default: break;
  }
}
