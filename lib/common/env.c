/* Environment metadata: the facts every result row carries. Library versions come from the
 * registry (env.h) that each part fills; this file links none of those libraries. */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "common/env.h"
#include "common/proc.h"
#include "pb_gitinfo.h"
#include "pipebench/core.h"

const char *pb_version(void) { return PB_VERSION_STRING; }
const char *pb_git_commit(void) { return PB_GIT_COMMIT; }

static void trim(char *s) {
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\r')) s[--n] = '\0';
}

/* ---- the version registry ------------------------------------------------------------------ */

enum { MAX_VERSIONS = 32 };
static struct {
  const char *key;
  pb__version_fn fn;
} versions[MAX_VERSIONS];
static size_t n_versions;
static pthread_mutex_t versions_mu = PTHREAD_MUTEX_INITIALIZER;

void pb__env_register_version(const char *key, pb__version_fn fn) {
  pthread_mutex_lock(&versions_mu);
  size_t k = 0;
  while (k < n_versions && strcmp(versions[k].key, key) != 0) k++;
  if (fn == NULL) {
    if (k < n_versions) {
      memmove(&versions[k], &versions[k + 1], (n_versions - k - 1) * sizeof versions[0]);
      n_versions--;
    }
  } else if (k < n_versions) {
    versions[k].fn = fn;
  } else if (n_versions < MAX_VERSIONS) {
    versions[n_versions].key = key;
    versions[n_versions].fn = fn;
    n_versions++;
  }
  pthread_mutex_unlock(&versions_mu);
}

/* The registered version called key into buf ("" when nothing registered it). */
static void version_of(const char *key, char *buf, size_t size) {
  pb__version_fn fn = NULL;
  pthread_mutex_lock(&versions_mu);
  for (size_t k = 0; k < n_versions && fn == NULL; k++)
    if (strcmp(versions[k].key, key) == 0) fn = versions[k].fn;
  pthread_mutex_unlock(&versions_mu);
  buf[0] = '\0';
  if (fn != NULL) fn(buf, size);
}

/* pb_env's version fields, in pb_env_field's order (indexes 12 to 19). */
static const struct {
  const char *key;
  size_t off, size;
} fixed[] = {
#define F(k, f) {k, offsetof(pb_env, f), sizeof(((pb_env *)0)->f)}
    F("duckdb_version", duckdb_version), F("libtiff_version", libtiff_version),
    F("blosc_version", blosc_version),   F("zstd_version", zstd_version),
    F("zlib_version", zlib_lib_version), F("lz4_version", lz4_version),
    F("cjson_version", cjson_version),   F("onednn_version", onednn_version),
#undef F
};
enum { N_FIXED = sizeof fixed / sizeof fixed[0], N_FIELDS = 21 };
static const char *const cudnn_key = "cudnn_version"; /* a field without a pb_env member */

static int is_known(const char *key) {
  for (size_t k = 0; k < N_FIXED; k++)
    if (strcmp(fixed[k].key, key) == 0) return 1;
  return strcmp(key, cudnn_key) == 0;
}

/* The k-th registered key that pb_env has no field for, or NULL. */
static const char *extra_key(int k) {
  const char *key = NULL;
  pthread_mutex_lock(&versions_mu);
  for (size_t i = 0; i < n_versions && key == NULL; i++)
    if (!is_known(versions[i].key) && k-- == 0) key = versions[i].key;
  pthread_mutex_unlock(&versions_mu);
  return key;
}

/* ---- the CPU ------------------------------------------------------------------------------- */

void pb__cpu_info(char *model, size_t model_size, char *flags, size_t flags_size) {
  if (model != NULL && model_size > 0) model[0] = '\0';
  if (flags != NULL && flags_size > 0) flags[0] = '\0';
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f == NULL) return;
  char line[4096];
  int have_model = model == NULL, have_flags = flags == NULL;
  while (!(have_model && have_flags) && fgets(line, sizeof line, f) != NULL) {
    char *colon = strchr(line, ':');
    if (colon == NULL) continue;
    const char *value = colon + 1;
    while (*value == ' ' || *value == '\t') value++;
    if (!have_model && strncmp(line, "model name", 10) == 0) {
      snprintf(model, model_size, "%s", value);
      trim(model);
      have_model = 1;
    } else if (!have_flags && strncmp(line, "flags", 5) == 0) {
      static const char *const wanted[] = {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni",
                                           "amx_bf16", "amx_tile"};
      for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        char pat[32];
        snprintf(pat, sizeof pat, " %s", wanted[i]);
        char *hit = strstr(colon, pat);
        if (hit != NULL && (hit[strlen(pat)] == ' ' || hit[strlen(pat)] == '\n')) {
          size_t used = strlen(flags);
          snprintf(flags + used, flags_size - used, "%s%s", used ? " " : "", wanted[i]);
        }
      }
      have_flags = 1;
    }
  }
  fclose(f);
}

void pb__cpu_model(char *buf, size_t size) {
  pb__cpu_info(buf, size, NULL, 0);
  if (size > 0 && buf[0] == '\0') snprintf(buf, size, "cpu");
}

/* ---- collecting ---------------------------------------------------------------------------- */

/* nvidia-smi is the one portable way to name the GPU without linking CUDA. It runs through the
 * process runner (no shell, its own process group, a time limit): a driver that hangs costs
 * GPU_QUERY_S, not the run. PIPEBENCH_NVIDIA_SMI names another program (tests; docs/results.md). */
#define GPU_QUERY_S 10.0

static void gpu_info(pb_env *env) {
  const char *exe = getenv("PIPEBENCH_NVIDIA_SMI");
  if (exe == NULL || exe[0] == '\0') {
    exe = access("/usr/bin/nvidia-smi", X_OK) == 0         ? "/usr/bin/nvidia-smi"
          : access("/usr/local/bin/nvidia-smi", X_OK) == 0 ? "/usr/local/bin/nvidia-smi"
                                                           : NULL;
  }
  if (exe == NULL) return;
  const char *argv[] = {exe, "--query-gpu=name,driver_version", "--format=csv,noheader", NULL};
  pb__proc p;
  memset(&p, 0, sizeof p);
  p.argv = argv;
  p.stderr_path = "/dev/null";
  p.capture_stdout = 1;
  p.timeout_s = GPU_QUERY_S;
  pb__proc_result res;
  int rc = pb__proc_run(&p, &res, NULL);
  if (rc == PB_OK && res.out != NULL) {
    char line[256];
    size_t n = strcspn(res.out, "\n");
    snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line - 1 ? n : sizeof line - 1), res.out);
    trim(line);
    char *comma = strchr(line, ',');
    if (comma != NULL) {
      *comma = '\0';
      snprintf(env->gpu, sizeof env->gpu, "%s", line);
      snprintf(env->gpu_driver, sizeof env->gpu_driver, "%s", comma + 1 + (comma[1] == ' '));
    }
  }
  free(res.out);
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
  pb__cpu_info(env->cpu_model, sizeof env->cpu_model, env->cpu_flags, sizeof env->cpu_flags);
  env->cpu_cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  env->memory_bytes = (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGESIZE);
  gpu_info(env);
#if defined(__clang__)
  snprintf(env->compiler, sizeof env->compiler, "clang %s", __clang_version__);
#elif defined(__GNUC__)
  snprintf(env->compiler, sizeof env->compiler, "gcc %d.%d.%d", __GNUC__, __GNUC_MINOR__,
           __GNUC_PATCHLEVEL__);
#endif
  for (size_t k = 0; k < N_FIXED; k++)
    version_of(fixed[k].key, (char *)env + fixed[k].off, fixed[k].size);
  return PB_OK;
}

int pb_env_field_count(void) {
  int n = N_FIELDS;
  while (extra_key(n - N_FIELDS) != NULL) n++;
  return n;
}

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
      *key = cudnn_key;
      version_of(cudnn_key, tmp, tmp_size);
      *value = tmp;
      break;
#undef S
    default:
      if (i >= N_FIELDS && (*key = extra_key(i - N_FIELDS)) != NULL) {
        version_of(*key, tmp, tmp_size);
        *value = tmp;
      } else {
        *key = "";
      }
      break;
  }
}
