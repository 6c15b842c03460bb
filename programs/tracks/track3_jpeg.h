/* Track 3 with the JPEG decode on the GPU (--decode gpu|auto): CPU workers read an image
 * folder's files and look at their headers; the baseline JPEGs go to the GPU as bytes (nvJPEG
 * decodes and crops them there, pb_engine_forward_jpeg), the rest (progressive or CMYK JPEGs,
 * PNGs) the workers decode and crop on the CPU and hand over as finished crops. With a CPU share
 * (--decode auto), that many images of each batch are cropped on the CPU as well, so the
 * workers and the GPU decoder share the decoding. */
#ifndef PB_TRACKS_TRACK3_JPEG_H
#define PB_TRACKS_TRACK3_JPEG_H

#include <stdint.h>

#include "pipebench/engine.h"

typedef struct pb__t3_jpeg pb__t3_jpeg;

/* A feeder of batches of `batch` images of the image folder at path (drop-last, one shuffled
 * order from seed), built by `workers` threads (at least 1) into `prefetch` slots (at least 3:
 * two held by the caller, the rest built ahead). CPU crops are the evaluation crop (shorter
 * side to `resize`, centre crop x crop), uint8. The CPU share starts at 0. */
int pb__t3_jpeg_new(const char *path, int batch, int resize, int crop, int workers, int prefetch,
                    uint64_t seed, pb__t3_jpeg **out, struct pb_error *err);
/* Starts again from the first batch. */
int pb__t3_jpeg_reset(pb__t3_jpeg *j, struct pb_error *err);
/* The next batch (waiting for it): *items holds `batch` items, valid until the call after the
 * next (pb_engine_forward_jpeg reads a batch's bytes until its next call returns). An
 * image that cannot be read or decoded: its error, naming the file. */
int pb__t3_jpeg_next(pb__t3_jpeg *j, const pb_jpeg_item **items, int *n, struct pb_error *err);
/* Images handed over so far (since new) as crops a CPU worker made: all of them, and those
 * of the share (the rest could not go to nvJPEG). */
int64_t pb__t3_jpeg_cpu_decoded(pb__t3_jpeg *j);
int64_t pb__t3_jpeg_cpu_chosen(pb__t3_jpeg *j);
/* The workers' mean time per CPU crop (read, decode, crop), ms; 0 before any. */
double pb__t3_jpeg_cpu_ms(pb__t3_jpeg *j);
/* The CPU share: images per batch cropped on the CPU although nvJPEG could decode them. It
 * applies to batches whose first image is not yet taken. fixed: pb__t3_jpeg_tune leaves it. */
int pb__t3_jpeg_share(pb__t3_jpeg *j);
void pb__t3_jpeg_set_share(pb__t3_jpeg *j, int cpu_n, int fixed);
/* One step's signals into the share: the caller's wait for this feeder, and its wait for the
 * model's pace (pb_jpeg_gpu_stats' wait_crop_ns), both in the step. */
void pb__t3_jpeg_tune(pb__t3_jpeg *j, int64_t feeder_wait_ns, int64_t model_wait_ns);
void pb__t3_jpeg_free(pb__t3_jpeg *j);

/* What a file's first bytes say about where it is decoded: 1 a JPEG nvJPEG decodes (baseline or
 * extended sequential Huffman, 1 or 3 components), 0 anything else (the CPU decodes it). */
int pb__t3_jpeg_for_gpu(const unsigned char *p, size_t n);

#endif
