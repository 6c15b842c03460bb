/* pipebench calibrate: this machine's own limits, measured in the same run as the results
 * they are compared with. */
#ifndef PIPEBENCH_CALIBRATE_H
#define PIPEBENCH_CALIBRATE_H

#include "pipebench/core.h"
#include "pipebench/endpoint.h"
#include "pipebench/stats.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pb_calibrate_params {
  const char *dir;        /**< folder for the scratch file (NULL: $TMPDIR or /tmp) */
  size_t memory_bytes;    /**< buffer size for memory copy and codecs */
  size_t file_bytes;      /**< scratch file size for read bandwidth */
  int rounds;             /**< measured rounds per quantity (after one warm-up round) */
  int threads;            /**< threads for the multi-threaded copy (0: all cores) */
  int matmul;             /**< also measure peak matmul GFLOP/s through the engine (1/0) */
  int gpu;                /**< also measure the GPU (cuda) where it is usable (1/0): copy
                               bandwidths, and with matmul the cuBLASLt peaks */
  void (*progress)(void *ctx, const char *what, int step, int steps); /**< may be NULL */
  void *progress_ctx;
  const char *endpoint;   /**< also measure this remote object's endpoint (round trip, one- and
                               many-stream bandwidth; docs/remote.md), or NULL */
  int insecure;           /**< endpoint over https: accept a certificate that does not verify */
  int jpeg_images;        /**< JPEG decoding on a standard set of this many images (0: not
                               measured): the CPU's rate, and the GPU's where nvJPEG is usable */
} pb_calibrate_params;
#define PB_CALIBRATE_PARAMS_DEFAULTS \
  {NULL, (size_t)256 << 20, (size_t)256 << 20, 5, 0, 1, 1, NULL, NULL, NULL, 0, 256}

/** One measured quantity: the median of `rounds` rounds and their summary. */
typedef struct pb_calib_value {
  double value;    /**< median, in the unit named below */
  pb_summary s;    /**< over the rounds */
} pb_calib_value;

typedef struct pb_calibration {
  pb_env env;
  pb_calib_value memcpy_gbps;         /**< one thread, GB/s copied (bytes of destination) */
  pb_calib_value memcpy_mt_gbps;      /**< all threads */
  int memcpy_threads;
  pb_calib_value read_warm_gbps;      /**< read(2) of a cached file */
  pb_calib_value read_cold_gbps;      /**< after posix_fadvise(DONTNEED) each pass */
  int cold_evicted;                   /**< 1 if eviction was confirmed by mincore */
  pb_calib_value zstd_gbps;           /**< decompressed bytes per second, one thread */
  double zstd_ratio;
  pb_calib_value blosc_gbps;          /**< blosc lz4 + byte shuffle, one thread */
  double blosc_ratio;
  pb_calib_value matmul_f32_gflops;   /**< NaN when not measured */
  pb_calib_value matmul_bf16_gflops;  /**< NaN when not measured or not supported */
  double timer_overhead_ns;           /**< mean cost of one pb_now_ns() call */
  double timer_resolution_ns;         /**< smallest non-zero step seen (and clock_getres) */
  double seconds;                     /**< how long calibration took */
  /* The GPU (params.gpu): every value NaN where it was not measured. */
  int gpu_measured;                   /**< 1: cuda was usable and measured */
  char gpu_why[256];                  /**< why not ("" when measured or not asked for) */
  char gpu_name[128];
  int gpu_cc_major, gpu_cc_minor, gpu_multiprocessors;
  int64_t gpu_memory_bytes;
  char gpu_versions[192];             /**< driver, runtime, cuDNN, cuBLASLt */
  pb_calib_value gpu_bf16_gflops;     /**< cuBLASLt bfloat16 8192^3 peak */
  pb_calib_value gpu_tf32_gflops;     /**< cuBLASLt TF32 8192^3 peak */
  pb_calib_value gpu_h2d_pinned_gbps; /**< host-to-device from pinned memory */
  pb_calib_value gpu_h2d_pageable_gbps;
  pb_calib_value gpu_d2h_pinned_gbps;
  pb_calib_value gpu_d2d_gbps;        /**< device-to-device, bytes read plus written */
  int endpoint_measured;              /**< 1: params.endpoint was measured into endpoint */
  pb_endpoint_calibration endpoint;
  /* JPEG decoding (params.jpeg_images): a standard set of photo-like RGB JPEGs of about 500 x
   * 375 at quality 95 (gen --preset imagenet's images, seed 42), each decoded and cut to the
   * evaluation crop (shorter side resized to 256, centre 224 x 224), images per second. */
  int jpeg_images;                    /**< images in the set (0: not measured) */
  double jpeg_set_bytes;              /**< their files' total size */
  int jpeg_threads;                   /**< CPU workers */
  pb_calib_value jpeg_cpu_ips;        /**< libjpeg-turbo through the loader, float16 batches */
  pb_calib_value jpeg_gpu_ips;        /**< nvJPEG, crops copied back (NaN: see jpeg_gpu_why) */
  char jpeg_gpu_why[256];             /**< why the GPU's rate is missing ("" when measured) */
} pb_calibration;

/** Measures every limit. Takes a few seconds with the defaults. */
PB_API int pb_calibrate(const pb_calibrate_params *params, pb_calibration *out,
                        struct pb_error *err);
/** JSON text of a calibration (malloc'd; free with free()). */
PB_API char *pb_calibration_to_json(const pb_calibration *cal);
/** Loads the headline values from a JSON file written by pb_calibration_to_json (summaries
 * other than n and value are not restored). */
PB_API int pb_calibration_load(const char *path, pb_calibration *out, struct pb_error *err);

#ifdef __cplusplus
}
#endif
#endif
