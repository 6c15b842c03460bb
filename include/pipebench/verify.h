/* pipebench verify: every image's pixels checked against the CRC-32 a manifest recorded. */
#ifndef PIPEBENCH_VERIFY_H
#define PIPEBENCH_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include "pipebench/core.h"
#include "pipebench/format.h"

#ifdef __cplusplus
extern "C" {
#endif

/** One image that does not match its manifest entry. Valid during the callback only. */
typedef struct pb_verify_image {
  int64_t index;
  const char *name;     /**< the image's name in the dataset */
  uint32_t expected;    /**< the manifest's CRC-32 */
  uint32_t got;         /**< pb_image_crc32 of the pixels read; 0 when error is set */
  const char *error;    /**< NULL, or why the image could not be read at all */
} pb_verify_image;

typedef struct pb_verify_params {
  const char *format;   /**< format of the dataset; NULL: detected */
  const char *manifest; /**< manifest file; NULL: the dataset's own (see pb_verify_find_manifest) */
  /** Called for every image that differs or cannot be read; may be NULL. */
  void (*on_mismatch)(void *ctx, const pb_verify_image *img);
  /** Called after each image; may be NULL. */
  void (*progress)(void *ctx, int64_t done, int64_t total);
  void *ctx;
} pb_verify_params;
#define PB_VERIFY_PARAMS_DEFAULTS {NULL, NULL, NULL, NULL, NULL}

typedef struct pb_verify_result {
  int64_t images;       /**< images compared */
  int64_t mismatched;   /**< of them, those that differ or could not be read */
  char manifest[4096];  /**< the manifest file used */
} pb_verify_result;

/** Reads every image of the dataset at path and compares pb_image_crc32 of its pixels with the
 * manifest's "crc32" list (the manifest gen and convert write, or inspect --json's output).
 * Returns PB_OK when every image was compared, whether or not all matched (result->mismatched
 * says); PB_ENOTFOUND when there is no manifest, PB_EFORMAT when it is malformed or lists a
 * different number of images, or the error that opening the dataset gave; messages name the
 * file. An image that cannot be read is counted as mismatched and the others are still read.
 * params and result may be NULL. */
PB_API int pb_verify(const char *path, const pb_verify_params *params, pb_verify_result *result,
                     struct pb_error *err);

/** The manifest that describes the dataset at path, written into buf: PATH.manifest.json
 * (what convert writes) when it exists, else manifest.json in path's folder when its "formats"
 * list path's name (what gen writes). PB_ENOTFOUND, naming both places, when neither does. */
PB_API int pb_verify_find_manifest(const char *path, char *buf, size_t size, struct pb_error *err);

/** Reads every image of the finished dataset at path (format NULL: detected) and writes
 * PATH.manifest.json atomically: each image's name and CRC-32, the format and the source it
 * came from (source may be NULL). The manifest then describes what a reader of this dataset
 * gets back, lossy formats included. */
PB_API int pb_verify_write_manifest(const char *path, const char *format, const char *source,
                                    struct pb_error *err);

/** Adds the images to w for pb_verify_write_dataset; returns PB_OK or an error set in err. */
typedef int (*pb_verify_fill_fn)(void *ctx, pb_writer *w, struct pb_error *err);

/** Writes a dataset of format at path together with its manifest PATH.manifest.json (as
 * pb_verify_write_manifest writes it), both or neither: the writer writes into a staging folder
 * beside path, fill adds the images, the manifest is made from what the finished dataset reads
 * back as (with the inventory of every file written at path), and only then are the two put
 * into place by one journaled commit (a SIGKILL at any step leaves the earlier pair or the new
 * one whole; the next writer or reader of path finishes it), replacing an earlier dataset and
 * manifest there; on any failure those stay as they were and nothing new is left. What stands
 * at path is replaced only when PATH.manifest.json is pipebench's and lists exactly its files
 * (or it is an empty folder; params->force: a regular file all the same); otherwise PB_EIO
 * naming what is in the way. An existing PATH.manifest.json must be pipebench's (PB_EIO).
 * *started (may be NULL) is set to 1 once the writer is open, so that a caller can tell a
 * refusal of what it asked for from a failure of the data. source may be NULL. */
PB_API int pb_verify_write_dataset(const char *path, const char *format,
                                   const pb_write_params *params, const char *source,
                                   pb_verify_fill_fn fill, void *ctx, int *started,
                                   struct pb_error *err);

#ifdef __cplusplus
}
#endif
#endif
