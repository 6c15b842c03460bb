/* pipebench gen: seeded synthetic images written in several formats at once. */
#ifndef PIPEBENCH_GEN_H
#define PIPEBENCH_GEN_H

#include "pipebench/core.h"
#include "pipebench/format.h"

#include <signal.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Fills pixels (pb_image_bytes(meta) bytes) with image `index` of the stream of `seed`:
 * cell-like blobs over a smooth background with noise, scaled to the dtype (integers use their
 * lower 12 bits' range for uint16/uint32 like a 12-bit camera, the full range for uint8;
 * floats lie in [0, 1]). The result depends only on (seed, index, shape, dtype). */
PB_API void pb_synth_image(const pb_image_meta *meta, uint64_t seed, int64_t index, void *pixels);

typedef struct pb_gen_params {
  int64_t rows;             /**< number of images */
  int64_t shape[PB_NDIM];   /**< t, c, z, y, x */
  pb_dtype dtype;
  uint64_t seed;
  const char *formats;      /**< comma-separated names; NULL: every writable format */
  pb_write_params write;    /**< passed to every writer; options may be scoped to one format
                                 with a prefix: "oa-dataset:chunks_per_row_group=256" */
  void (*progress)(void *ctx, int64_t done, int64_t total); /**< may be NULL */
  void *progress_ctx;
  /** When non-NULL and non-zero (a SIGINT/SIGTERM handler sets it to the signal's number), gen
   * stops within one image with PB_ECANCELED and leaves dir as it was. Borrowed. */
  volatile sig_atomic_t *cancel;
} pb_gen_params;
#define PB_GEN_PARAMS_DEFAULTS \
  {1000, {1, 1, 1, 100, 100}, PB_UINT16, 42, NULL, PB_WRITE_PARAMS_DEFAULTS, NULL, NULL, NULL}

/** Where gen puts a format inside its output folder ("ome-zarr" -> "ome-zarr", "ome-parquet"
 * -> "images.parquet", ...), written into buf. */
PB_API void pb_gen_format_path(const char *dir, const char *format, char *buf, size_t size);

/** Writes the same images in every format asked into dir (one entry per format, named by
 * pb_gen_format_path) and dir/manifest.json (parameters, formats, per-image CRC-32, and the
 * inventory of every file gen wrote). Everything is written into a staging folder in dir and put
 * into place by one journaled commit: at every instant, a SIGKILL included, either the earlier
 * outputs and manifest or the new ones are complete (the next gen, or a reader, finishes an
 * interrupted commit). Something already at an output name is replaced only when dir/manifest.json
 * is pipebench's and lists exactly its files; otherwise PB_EIO naming it and what is in the way
 * (params->write.force: a regular file may be replaced all the same; a folder never). Nothing
 * else in dir is touched. */
PB_API int pb_gen(const char *dir, const pb_gen_params *params, struct pb_error *err);

#ifdef __cplusplus
}
#endif
#endif
