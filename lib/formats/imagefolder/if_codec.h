/* JPEG (TurboJPEG) and PNG (libpng) in memory: what the imagefolder backend and its fuzz target
 * decode and encode. Internal. */
#ifndef PB_IF_CODEC_H
#define PB_IF_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "pipebench/format.h"

/** Images claiming more pixels than this (width x height) are refused from their header, before
 * anything is allocated for them: 2^28, e.g. 16384 x 16384. */
#define PB__IF_MAX_PIXELS ((int64_t)1 << 28)

/** A JPEG of more scans than this is refused before it is decoded: every scan of a progressive
 * JPEG is a pass over the whole image, so a small file of many scans costs minutes (883 scans
 * of 16384 x 16384: 49 s). libjpeg's own progressions use 6 (grey) or 10 (colour). */
#define PB__IF_MAX_SCANS 256

/** Decoding work is bounded by the file's size: a JPEG whose scans x pixels exceed
 * PB__IF_WORK_PER_BYTE for each byte of its file, and PB__IF_WORK_FLOOR in all, is refused
 * before it is decoded. The densest ordinary file, a blank image in libjpeg's default
 * progression, comes to about 3,500; photographs to under 100. */
#define PB__IF_WORK_PER_BYTE ((int64_t)8192)
#define PB__IF_WORK_FLOOR ((int64_t)1 << 28)

typedef enum { PB__IF_UNKNOWN = 0, PB__IF_JPEG = 1, PB__IF_PNG = 2 } pb__imagefolder_kind;

/** What a header says: width, height, channels (1 grey or 3 RGB) and the pixel type (uint8;
 * uint16 for 16-bit PNG). */
typedef struct pb__imagefolder_info {
  pb__imagefolder_kind kind;
  int width, height, channels;
  pb_dtype dtype;
} pb__imagefolder_info;

/** The kind of encoded image data from its signature bytes. */
pb__imagefolder_kind pb__imagefolder_sniff(const unsigned char *data, size_t size);

/** Reads the header of an encoded JPEG or PNG: PB_EFORMAT when it is neither or is corrupt,
 * PB_EUNSUPPORTED for CMYK JPEG and images over PB__IF_MAX_PIXELS; messages name `name`. */
int pb__imagefolder_header(const char *name, const unsigned char *data, size_t size, pb__imagefolder_info *info,
                  struct pb_error *err);

/** Decodes into dst, planar C,Y,X (the image's T,C,Z,Y,X order with T = Z = 1): dst_size must be
 * width * height * channels * element size, as pb__imagefolder_header reported. Any decoder warning
 * (truncated data, a corrupt segment) is an error: PB_EFORMAT naming `name`. A JPEG past
 * PB__IF_MAX_SCANS or PB__IF_WORK_PER_BYTE: PB_EUNSUPPORTED, nothing decoded. */
int pb__imagefolder_decode(const char *name, const unsigned char *data, size_t size,
                  const pb__imagefolder_info *info, void *dst, size_t dst_size, struct pb_error *err);

/** Decodes the box of rows y0..y0+h and columns x0..x0+w of a JPEG's image scaled by 1/scale
 * (1, 2, 4 or 8: libjpeg-turbo's DCT scaling, whose image is ceil(width / scale) x
 * ceil(height / scale)) into dst, planar C,Y,X (dst_size >= h * w * channels). Rows below the
 * box are not decoded, rows above it are skipped (entropy-decoded only) and only the box's
 * columns, widened to whole iMCUs, go through the inverse DCT and upsampling. Pixels equal
 * those of the same scaled image decoded whole. Errors as pb__imagefolder_decode. */
int pb__imagefolder_decode_jpeg_box(const char *name, const unsigned char *data, size_t size,
                           const pb__imagefolder_info *info, int scale, int y0, int x0, int h, int w,
                           void *dst, size_t dst_size, struct pb_error *err);

/** A JPEG decoder kept from image to image (one per dataset handle, so one per loader worker):
 * its libjpeg object, source manager and row buffer are made once, so a decode allocates only
 * libjpeg's per-image buffers. Used by one thread at a time. */
typedef struct pb__imagefolder_jpeg pb__imagefolder_jpeg;

/** A new decoder, or NULL when out of memory. */
pb__imagefolder_jpeg *pb__imagefolder_jpeg_new(void);
void pb__imagefolder_jpeg_free(pb__imagefolder_jpeg *dec);

/** Reads the header of the JPEG in data (which must stay valid until pb__imagefolder_jpeg_box returns)
 * into *info, with pb__imagefolder_header's checks and errors (CMYK refused, sizes checked before
 * anything is allocated). data is the whole file: its scans are counted too, and a file past
 * PB__IF_MAX_SCANS or PB__IF_WORK_PER_BYTE is refused (PB_EUNSUPPORTED naming `name`). On
 * success the decoder holds the image for pb__imagefolder_jpeg_box. */
int pb__imagefolder_jpeg_header(pb__imagefolder_jpeg *dec, const char *name, const unsigned char *data, size_t size,
                       pb__imagefolder_info *info, struct pb_error *err);

/** pb__imagefolder_decode_jpeg_box for the image whose header pb__imagefolder_jpeg_header just read (info is what
 * it reported). The decoder is ready for the next image afterwards, whatever the result. */
int pb__imagefolder_jpeg_box(pb__imagefolder_jpeg *dec, const char *name, const pb__imagefolder_info *info, int scale, int y0,
                    int x0, int h, int w, void *dst, size_t dst_size, struct pb_error *err);

/** Ends the image a header was read for without decoding it (nothing when there is none). */
void pb__imagefolder_jpeg_end(pb__imagefolder_jpeg *dec);

/** JPEG chroma subsampling for encoding. */
typedef enum { PB__IF_444 = 0, PB__IF_422 = 1, PB__IF_420 = 2 } pb__imagefolder_subsampling;

/** Encodes planar uint8 C,Y,X pixels (channels 1 or 3) as JPEG (quality 1..100) or, when png is
 * non-zero, as 8-bit PNG. *out is malloc'd (free with free), *out_size its length. */
int pb__imagefolder_encode(const char *name, const uint8_t *pixels, int width, int height, int channels,
                  int png, int quality, pb__imagefolder_subsampling sub, unsigned char **out,
                  size_t *out_size, struct pb_error *err);

#endif
