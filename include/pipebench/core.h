/* pipebench core: status codes, errors, allocator hooks, clock, RNG, thread pool, environment. */
#ifndef PIPEBENCH_CORE_H
#define PIPEBENCH_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(PB_BUILDING)
#define PB_API __attribute__((visibility("default")))
#else
#define PB_API
#endif

/** @name Status codes
 * Fallible functions return int: 0 on success, a negative code otherwise. errno values are
 * returned as -errno (they are all above PB_E_FIRST). Codes are append-only. */
enum {
  PB_OK = 0,
  PB_E_FIRST = -10000,
  PB_EINVAL = -10000,      /**< invalid argument or option */
  PB_ENOMEM = -10001,      /**< out of memory */
  PB_EIO = -10002,         /**< input/output failure */
  PB_EFORMAT = -10003,     /**< a file is malformed, truncated or of the wrong kind */
  PB_EUNSUPPORTED = -10004,/**< valid, but not supported by this build or backend */
  PB_ENOTFOUND = -10005,   /**< a named file, image, column or key does not exist */
  PB_ERANGE = -10006,      /**< an index or region lies outside the data */
  PB_EDUCKDB = -10007,     /**< DuckDB reported an error */
  PB_ECODEC = -10008,      /**< a codec (zstd, blosc, zlib, lz4) failed to decode */
  PB_ECANCELED = -10009,   /**< the operation was interrupted */
  PB_ESTATE = -10010,      /**< a call made in the wrong state */
  PB_ECHILD = -10011,      /**< a child process failed */
  PB_E_LAST = -10011
};

/** Short English name of a status code (also for -errno). Never NULL; static storage. */
PB_API const char *pb_strerror(int code);

/** Optional error details. Every function taking `struct pb_error *` accepts NULL. */
struct pb_error {
  char message[1024];
};

/** Stores a printf-style message into err (if not NULL) and returns code unchanged. */
PB_API int pb_error_set(struct pb_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Prefixes err->message with a printf-style context ("file x: " + old message). */
PB_API void pb_error_prefix(struct pb_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** Evaluates expr once; returns its value from the caller when it is non-zero. */
#define PB_RETURN_NOT_OK(expr)                                                                 \
  do {                                                                                         \
    int pb_rc_ = (expr);                                                                       \
    if (pb_rc_ != 0) return pb_rc_;                                                            \
  } while (0)

/** @name Allocator hooks
 * All large buffers (images, batches, tables) come from the current allocator, so pinned or
 * device-visible memory can back them. The default uses aligned malloc/free. */
typedef struct pb_allocator {
  void *(*alloc)(void *ctx, size_t size, size_t alignment); /**< NULL on failure */
  void (*free)(void *ctx, void *ptr, size_t size);
  void *ctx;
} pb_allocator;

/** Installs alloc as the process-wide allocator (NULL restores the default). Not thread-safe:
 * call before any other pipebench function. */
PB_API void pb_set_allocator(const pb_allocator *alloc);
/** The allocator in use. */
PB_API const pb_allocator *pb_get_allocator(void);
/** Allocates size bytes aligned to 64 from the current allocator; NULL on failure. */
PB_API void *pb_alloc(size_t size);
/** Releases memory from pb_alloc; size must be the size asked for. NULL is ignored. */
PB_API void pb_free(void *ptr, size_t size);

/** @name Clock */
/** Monotonic time in nanoseconds (CLOCK_MONOTONIC). */
PB_API int64_t pb_now_ns(void);
/** Wall-clock UTC time as ISO 8601 with seconds ("2026-11-26T02:03:04Z") into buf. */
PB_API void pb_utc_iso8601(char *buf, size_t size);

/** @name Seeded RNG: xoshiro256** seeded through splitmix64. The stream depends only on the
 * seed, never on the platform. */
typedef struct pb_rng {
  uint64_t s[4];
} pb_rng;
PB_API void pb_rng_init(pb_rng *rng, uint64_t seed);
PB_API uint64_t pb_rng_next(pb_rng *rng);
/** Uniform integer in [0, bound) without modulo bias; bound > 0. */
PB_API uint64_t pb_rng_below(pb_rng *rng, uint64_t bound);
/** Uniform double in [0, 1) with 53 random bits. */
PB_API double pb_rng_uniform(pb_rng *rng);
/** Standard normal (Box-Muller; consumes two draws). */
PB_API double pb_rng_normal(pb_rng *rng);
/** Fisher-Yates shuffle of n int64 values. */
PB_API void pb_rng_shuffle_i64(pb_rng *rng, int64_t *v, size_t n);
/** A seed derived from (seed, a, b) that is independent of the stream order (for per-sample
 * streams that must not depend on which worker draws them). */
PB_API uint64_t pb_seed_mix(uint64_t seed, uint64_t a, uint64_t b);

/** @name Thread pool: a fixed set of threads running submitted jobs in FIFO order. */
typedef struct pb_pool pb_pool;
typedef void (*pb_pool_fn)(void *arg);
/** Starts n_threads (>= 1) threads. *out is freed with pb_pool_free. */
PB_API int pb_pool_new(int n_threads, pb_pool **out);
/** Queues fn(arg); returns PB_ESTATE after pb_pool_free has begun. */
PB_API int pb_pool_submit(pb_pool *pool, pb_pool_fn fn, void *arg);
/** Blocks until every submitted job has finished. */
PB_API void pb_pool_wait(pb_pool *pool);
/** Number of threads. */
PB_API int pb_pool_size(const pb_pool *pool);
/** Runs fn(arg, i) for i in [0, n) spread over the pool's threads and the caller; returns when
 * all are done. pool may be NULL (runs in the caller). */
PB_API void pb_pool_parallel_for(pb_pool *pool, int64_t n, void (*fn)(void *arg, int64_t i),
                                 void *arg);
/** Finishes queued jobs, joins the threads, frees the pool. NULL is ignored. */
PB_API void pb_pool_free(pb_pool *pool);

/** @name Environment metadata: what every result row carries. */
typedef struct pb_env {
  char pipebench_version[32];
  char git_commit[48];
  char hostname[128];
  char timestamp_utc[32];
  char os[128];
  char cpu_model[128];
  char cpu_flags[128];  /**< the SIMD features that matter: avx2 avx512f avx512_bf16 amx ... */
  int cpu_cores;        /**< online logical CPUs */
  int64_t memory_bytes; /**< physical memory */
  char gpu[128];        /**< "" when none */
  char gpu_driver[64];
  char compiler[64];
  char duckdb_version[32];
  char libtiff_version[64];
  char blosc_version[32];
  char zstd_version[32];
  char zlib_lib_version[32];
  char lz4_version[32];
  char cjson_version[32];
  char onednn_version[32];
} pb_env;

/** Fills env with this machine's facts. The GPU is probed with nvidia-smi when present. */
PB_API int pb_env_collect(pb_env *env, struct pb_error *err);

/** Number of (key, value) string pairs that pb_env_field returns. */
PB_API int pb_env_field_count(void);
/** The i-th field of env as a key and a value (pointers into env or static storage). */
PB_API void pb_env_field(const pb_env *env, int i, const char **key, const char **value,
                         char *tmp, size_t tmp_size);

/** pipebench's version ("0.1.0") and git commit ("abc123def456" or "unknown"). */
PB_API const char *pb_version(void);
PB_API const char *pb_git_commit(void);

#ifdef __cplusplus
}
#endif
#endif
