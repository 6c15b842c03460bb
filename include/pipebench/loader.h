/* pipebench loader: a dataset in any format turned into model-ready batches, on worker
 * threads, with seeded shuffling, sharding, transforms and cache modes. See docs/loader.md. */
#ifndef PIPEBENCH_LOADER_H
#define PIPEBENCH_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "pipebench/core.h"
#include "pipebench/dlpack.h"
#include "pipebench/format.h"

#ifdef __cplusplus
extern "C" {
#endif

/** What is done to each sample after it is read. */
typedef enum {
  PB_TRANSFORM_NONE = 0,      /**< pixel values cast to the output type, no scaling */
  PB_TRANSFORM_NORMALIZE = 1, /**< integers scaled to [0,1] by the dtype's maximum (floats as
                                   they are), then (x - mean) / std */
  PB_TRANSFORM_AUGMENT = 2,   /**< random horizontal flip (p = 0.5), random rotation in
                                   [-15, +15] degrees (bilinear, fill 0), then normalize */
  PB_TRANSFORM_RANDOM_CROP = 3, /**< a crop_h x crop_w window at a random position, read as a
                                   region (only the chunks, tiles or rows it needs), flipped
                                   horizontally with p = 0.5 when flip, then normalize */
  PB_TRANSFORM_RANDOM_RESIZED_CROP = 4, /**< ImageNet training: a random area fraction in
                                   [scale_min, scale_max] and aspect ratio in [ratio_min,
                                   ratio_max] (10 tries, then a centre crop, as torchvision's
                                   RandomResizedCrop), resized to crop_h x crop_w, flipped with
                                   p = 0.5 when flip, then normalize */
  PB_TRANSFORM_CENTER_CROP_RESIZE = 5 /**< evaluation: the shorter side resized to `resize`,
                                   then the centre crop_h x crop_w, then normalize */
} pb_transform;

/** Where samples come from during the epoch. */
typedef enum {
  PB_CACHE_NONE = 0,    /**< every sample is read from the dataset's storage for each batch */
  PB_CACHE_PRELOAD = 1, /**< all images are decoded into one RAM buffer at pb_loader_new */
  PB_CACHE_SHARED = 2   /**< all images are decoded once into a raw file and read from its
                             memory map (shared by processes through the page cache) */
} pb_cache_mode;

/** Element type of batches. */
typedef enum {
  PB_OUT_FLOAT32 = 0,
  PB_OUT_FLOAT16 = 1, /**< IEEE binary16, rounded to nearest even */
  PB_OUT_BFLOAT16 = 2, /**< bfloat16, rounded to nearest even */
  PB_OUT_NATIVE = 3    /**< the images' own pixel type (pb_batch.native_dtype), bytes copied
                            unchanged: no cast, no scaling. Only PB_TRANSFORM_NONE is accepted
                            (normalisation and geometric transforms belong to the consumer,
                            e.g. a GPU kernel); mean and std are ignored. */
} pb_out_dtype;

/** Loader options. Start from PB_LOADER_PARAMS_DEFAULTS and change what you need. */
typedef struct pb_loader_params {
  const char *format;   /**< format of the dataset; NULL: detect from the path */
  int batch_size;       /**< samples per batch (>= 1) */
  int workers;          /**< 0: batches are built in the caller's thread inside
                             pb_loader_next; N: N threads, each with its own dataset handle */
  int prefetch;         /**< batches in flight per worker (>= 1); the queue holds at most
                             prefetch * workers batches; ignored when workers is 0 */
  int shuffle;          /**< 0: dataset order; 1: seeded shuffle, new each epoch */
  uint64_t seed;        /**< shuffle and augmentation seed */
  int drop_last;        /**< drop the last batch of a rank when it is not full */
  int rank, world_size; /**< shard: this rank's part of the order (0 <= rank < world_size) */
  pb_transform transform;
  float mean, std;      /**< used by NORMALIZE and AUGMENT; std > 0 */
  pb_out_dtype out_dtype;
  pb_cache_mode cache;
  const char *cache_path; /**< SHARED: the raw file to use (reused if it exists and matches,
                               built otherwise); NULL: an anonymous temporary file. NONE: a
                               folder where ranges read from URLs are kept on disk, filled on
                               first read (docs/remote.md); NULL: none */
  int skip_errors;      /**< 1: samples that fail to read are left out of their batch and
                             counted; 0: the failure is returned by pb_loader_next */
  const pb_allocator *allocator; /**< where batch data buffers come from (nothing else: caches
                             and scratch use the process-wide allocator); NULL: the process-wide
                             one, pb_get_allocator(), as it is at pb_loader_new. The struct is
                             copied at pb_loader_new; its functions and ctx must stay valid until
                             the last batch (DLPack exports included) is freed, which may be after
                             pb_loader_free. Pointers it returns must be 64-byte aligned. */
  int shard_pad;        /**< with world_size > 1: 0 drops the last n mod world_size samples of
                             each epoch's order so every rank reads floor(n / world_size); 1
                             pads by wrapping round to the start, ceil(n / world_size) each */
  /* The crop transforms (RANDOM_CROP, RANDOM_RESIZED_CROP, CENTER_CROP_RESIZE). Their images
   * may differ in height and width (not in dtype, C or Z); batches are N,C,crop_h,crop_w.
   * Resizing is separable bilinear with antialiasing (a triangle filter widened by the
   * reduction factor), as PIL and torchvision's antialias=True; see docs/loader.md. */
  int crop_h, crop_w;   /**< output size (default 224 x 224) */
  int resize;           /**< CENTER_CROP_RESIZE: the shorter side's size before the crop (256) */
  float scale_min, scale_max; /**< RANDOM_RESIZED_CROP: area fraction (0.08, 1) */
  float ratio_min, ratio_max; /**< RANDOM_RESIZED_CROP: width / height (3/4, 4/3) */
  int flip;             /**< RANDOM_CROP and RANDOM_RESIZED_CROP: 1 flips horizontally with
                             p = 0.5 (default), 0 never */
  int reduced_decode;   /**< 1 (default): formats that can decode at 1/2, 1/4 or 1/8 (JPEG) do
                             so when the output still gets at least its resolution; 0: always
                             full resolution */
  /* Sample reads in flight (cache none; docs/loader.md). A batch's samples are read at once by
   * a team of reader threads, each with its own dataset handle, shared by all workers; this is
   * beside the I/O layer's in_flight (requests of one read of one object, pb_read_options). */
  int reads_in_flight;  /**< most sample reads in flight across the loader's workers; 0: auto
                             (a URL: 32; a local path: one read per worker, no team) */
  int64_t bytes_in_flight; /**< most bytes those reads may hold at once, counting each read as
                             one image's decoded size; 0: auto (64 MiB). Reads in flight are
                             min(reads_in_flight, bytes_in_flight / image bytes), at least 1 */
} pb_loader_params;

#define PB_LOADER_PARAMS_DEFAULTS                                                              \
  {                                                                                            \
    .format = NULL, .batch_size = 16, .workers = 0, .prefetch = 2, .shuffle = 0, .seed = 42,   \
    .drop_last = 0, .rank = 0, .world_size = 1, .transform = PB_TRANSFORM_NONE, .mean = 0.5f,  \
    .std = 0.5f, .out_dtype = PB_OUT_FLOAT32, .cache = PB_CACHE_NONE, .cache_path = NULL,      \
    .skip_errors = 0, .allocator = NULL, .shard_pad = 0, .crop_h = 224, .crop_w = 224,       \
    .resize = 256, .scale_min = 0.08f, .scale_max = 1.0f, .ratio_min = 0.75f,                   \
    .ratio_max = 1.33333333f, .flip = 1, .reduced_decode = 1, .reads_in_flight = 0,          \
    .bytes_in_flight = 0                                                                       \
  }

/** Fills params with PB_LOADER_PARAMS_DEFAULTS (for bindings that cannot use the macro). */
PB_API void pb_loader_params_init(pb_loader_params *params);

/** Sets one option from text, as the CLI and the Python binding give them: batch_size,
 * workers, prefetch, shuffle, seed, drop_last, rank, world_size, transform (none | normalize |
 * augment | random_crop | random_resized_crop | center_crop_resize), mean, std, dtype (float32 |
 * float16 | bfloat16 | native), cache (none | preload | shared), skip_errors, shard_pad, crop (N or
 * HxW), resize, scale (MIN,MAX), ratio (MIN,MAX), flip, reduced_decode, reads_in_flight,
 * bytes_in_flight (bytes, or with a K, M or G suffix: powers of 1024). String options (format, cache_path) are not set this way: the params struct
 * would only borrow the text. */
PB_API int pb_loader_params_set(pb_loader_params *params, const char *key, const char *value,
                                struct pb_error *err);

/** Where one batch's time went, in nanoseconds. read/decompress/decode are the backend's
 * pb_stage_times summed over the batch's samples; convert is native to float with
 * normalisation (fused with writing into the batch when there is no geometric transform);
 * transform is flip and rotation (fused with writing into the batch); collate is allocating
 * and assembling the batch. These are CPU times summed over samples, so they can exceed the
 * batch's wall time when several workers run. wait_ns is the wall time the caller spent
 * inside pb_loader_next for this batch, including waiting for workers. */
typedef struct pb_batch_times {
  int64_t read_ns, decompress_ns, decode_ns, convert_ns, transform_ns, collate_ns;
  int64_t wait_ns;
  int64_t bytes_read, bytes_decoded;
} pb_batch_times;

/** One batch. Fields are read-only for callers. data holds shape[0] samples, C order, laid
 * out N,C,H,W (ndim 4, when the images have Z = 1) or N,C,Z,H,W (ndim 5). Its elements are of
 * type dtype, or of type native_dtype when dtype is PB_OUT_NATIVE. */
typedef struct pb_batch {
  void *data;
  size_t nbytes;         /**< bytes of data in use: product of shape * element size */
  pb_out_dtype dtype;
  int ndim;
  int64_t shape[5];
  int64_t *indices;      /**< dataset index of each sample (shape[0] entries) */
  int64_t number;        /**< batch number within the epoch, from 0 */
  int64_t epoch;
  int64_t skipped;       /**< samples of this batch left out by skip_errors */
  pb_batch_times times;
  pb_dtype native_dtype; /**< the dataset's pixel type; the element type of data when dtype
                              is PB_OUT_NATIVE */
  int64_t *labels;       /**< class label of each sample (shape[0] entries): pb_dataset_label
                              of its image, -1 for formats without labels */
} pb_batch;

/** Releases the caller's reference to batch. Memory is returned when every DLPack tensor
 * exported from it has been deleted too. NULL is ignored. */
PB_API void pb_batch_free(pb_batch *batch);

/** Exports batch as a DLPack tensor (CPU, compact row-major; native batches with their pixel
 * type: kDLUInt 8/16/32, kDLInt 16, kDLFloat 32/64). Each call makes a new tensor that
 * holds its own reference to the batch: the consumer calls (*out)->deleter(*out) once, and
 * the caller still calls pb_batch_free for its own reference. Thread-safe with respect to
 * other references. */
PB_API int pb_batch_to_dlpack(pb_batch *batch, DLManagedTensor **out, struct pb_error *err);

/** Bytes per element of a batch type (4 or 2); 0 for PB_OUT_NATIVE, whose size depends on the
 * dataset (see pb_batch_element_size). */
PB_API size_t pb_out_dtype_size(pb_out_dtype d);
/** "float32", "float16", "bfloat16", "native". */
PB_API const char *pb_out_dtype_name(pb_out_dtype d);
/** Bytes per element of this batch's data, native batches included. */
PB_API size_t pb_batch_element_size(const pb_batch *batch);

/** A loader. Its functions are called from one thread at a time (the consumer); the worker
 * threads are internal. */
typedef struct pb_loader pb_loader;

/** Opens the dataset at path and prepares epoch 0. Checks that every image has the same
 * dtype and shape with T = 1 (errors name the first image that differs). With PRELOAD or
 * SHARED cache, decodes every image before returning. Worker threads start here but do no
 * work until the first pb_loader_next or pb_loader_reset. *out is freed with pb_loader_free. */
PB_API int pb_loader_new(const char *path, const pb_loader_params *params, pb_loader **out,
                         struct pb_error *err);

/** The next batch of the current epoch in *batch (the caller frees it with pb_batch_free),
 * or *batch = NULL and 0 when the epoch is over. Batches come in the same order with the same
 * contents whatever the worker count. A failed sample (when skip_errors is 0) makes this
 * return its error, with a message naming the dataset index, the image name and the file;
 * that batch is consumed, and the next call continues with the following batch. */
PB_API int pb_loader_next(pb_loader *loader, pb_batch **batch, struct pb_error *err);

/** Starts epoch `epoch` (reshuffled with seed and epoch) from its first batch, dropping
 * batches prefetched for the old one; workers start prefetching at once. */
PB_API int pb_loader_reset(pb_loader *loader, int64_t epoch, struct pb_error *err);

/** Number of batches in one epoch of this rank (the same on every rank). */
PB_API int64_t pb_loader_batches_per_epoch(const pb_loader *loader);
/** Samples this rank sees per epoch (ceil(count / world_size); the order is padded by
 * wrapping around so every rank has the same number). */
PB_API int64_t pb_loader_samples_per_epoch(const pb_loader *loader);
/** Sample reads this loader keeps in flight at most: its reader team's size, or (no team: a
 * local path with reads_in_flight 0, a cache mode other than none, or one read with workers 0)
 * one per worker thread (1 with workers 0). */
PB_API int pb_loader_reads_in_flight(const pb_loader *loader);
/** Metadata of image 0 (all images share dtype and shape). */
PB_API const pb_image_meta *pb_loader_meta(const pb_loader *loader);

/** Totals since pb_loader_new. */
typedef struct pb_loader_stats {
  int64_t batches, samples, skipped;
  pb_batch_times times;      /**< sums over delivered batches */
  int64_t preload_ns;        /**< PRELOAD: decoding into RAM; SHARED: building or opening the
                                  raw file; 0 otherwise */
  int64_t preload_bytes;     /**< PRELOAD: bytes of the RAM buffer; SHARED: bytes of the raw
                                  file; 0 otherwise */
  int64_t dataset_count;     /**< images in the dataset */
} pb_loader_stats;
PB_API void pb_loader_get_stats(const pb_loader *loader, pb_loader_stats *out);

/** Stops the workers (a batch being built is finished, then dropped), frees undelivered
 * batches, closes the dataset handles. Batches already handed out stay valid. NULL is
 * ignored. */
PB_API void pb_loader_free(pb_loader *loader);

/** One image's evaluation crop outside a loader, as a loader with transform
 * PB_TRANSFORM_CENTER_CROP_RESIZE (resize, crop x crop), out_dtype native and reduced_decode on
 * gives it: image i of ds (8-bit, 2-D) resized on its shorter side to `resize` (antialiased
 * bilinear), the centre crop x crop taken, rounded to 8 bits, planar channels x crop x crop into
 * out (out_size bytes at least). Only the pixels the crop needs are read, at 1/2, 1/4 or 1/8
 * scale where the format decodes so and the crop keeps its resolution. *channels (may be
 * NULL): the image's channels. Errors name the image. */
PB_API int pb_eval_crop_u8(pb_dataset *ds, int64_t i, int resize, int crop, uint8_t *out,
                           size_t out_size, int *channels, struct pb_error *err);

/** The dataset indices that rank (of world) reads in epoch, as the loader's sampler orders
 * them: order[0..per_rank) from the epoch's order of 0..n-1 (shuffled from seed and epoch when
 * shuffle) at positions rank, rank + world, ... Returns 0, or -1 when out of memory. */
PB_API int pb_sampler_plan(int64_t n, int rank, int world, int shuffle, uint64_t seed,
                           int64_t epoch, int64_t per_rank, int64_t *order);

#ifdef __cplusplus
}
#endif
#endif
