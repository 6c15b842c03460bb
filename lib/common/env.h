/* The environment registry: each part of pipebench registers the versions of the libraries it
 * links, and pb_env_collect (env.c) reads them, knowing none of those libraries itself. Internal.
 *
 * A part registers from the file that uses the library, with a constructor:
 *
 *     static void zstd_version(char *buf, size_t size) { snprintf(buf, size, "%s", ...); }
 *     PB__ENV_VERSION(register_zstd, "zstd_version", zstd_version)
 *
 * A module loaded at run time (the CUDA engine, through dlopen) calls pb__env_register_version
 * itself once it is loaded, e.g. pb__env_register_version("cudnn_version", fn): result rows
 * collected after that carry the value. Keys of pb_env's fields (duckdb_version, libtiff_version,
 * blosc_version, zstd_version, zlib_version, lz4_version, cjson_version, onednn_version) fill
 * those fields; "cudnn_version" fills the field of that name in pb_env_field; any other key is
 * added after them as a field of its own. */
#ifndef PB_COMMON_ENV_H
#define PB_COMMON_ENV_H

#include <stddef.h>

/** Writes a library's version into buf (NUL-terminated, at most size bytes). Called each time
 * the environment is collected; must not fail (write "" when the version is unknown). */
typedef void (*pb__version_fn)(char *buf, size_t size);

/** Registers fn as the source of the version called key ("<library>_version"; the string must
 * outlive the process, a literal). Registering a key again replaces its function; fn NULL
 * removes it. Thread-safe; may be called from constructors, before main. */
void pb__env_register_version(const char *key, pb__version_fn fn);

/** Registers fn under key when the library containing this line is loaded. */
#define PB__ENV_VERSION(name, key, fn)                                                          \
  __attribute__((constructor)) static void name(void) { pb__env_register_version(key, fn); }

/** The CPU's model name ("" when /proc/cpuinfo does not say) and the SIMD features that matter
 * for the engines ("avx2 fma avx512f ...", space-separated), from /proc/cpuinfo. Either buffer
 * may be NULL. */
void pb__cpu_info(char *model, size_t model_size, char *flags, size_t flags_size);
/** The CPU's model name, "cpu" when unknown (an engine's device name). */
void pb__cpu_model(char *buf, size_t size);

#endif
