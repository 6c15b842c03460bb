/* The one codec table every format uses: none, zstd, lz4 (three framings), gzip/zlib, blosc
 * and snappy, each decoded (and, for what writers produce, encoded) by id with its sizes
 * checked. A reader keeps one pb__codec_ctx so that a zstd context and a zlib stream are set up
 * once, not per page or chunk. Internal. */
#ifndef PB_CODECS_CODEC_H
#define PB_CODECS_CODEC_H

#include <stddef.h>

#include "pipebench/core.h"

typedef enum pb__codec_id {
  PB__CODEC_NONE = 0,
  PB__CODEC_ZSTD,
  PB__CODEC_LZ4,     /**< an LZ4 frame, a block after a 4-byte little-endian size (python-lz4's
                          lz4.block), or a bare block, tried in that order; encodes the second */
  PB__CODEC_LZ4_RAW, /**< a bare LZ4 block only (Parquet's LZ4_RAW) */
  PB__CODEC_GZIP,    /**< deflate in a gzip wrapper; a zlib wrapper is accepted when decoding */
  PB__CODEC_ZLIB,    /**< deflate in a zlib wrapper; a gzip wrapper is accepted when decoding */
  PB__CODEC_BLOSC,   /**< a c-blosc 1 buffer (its own header says the codec and the size) */
  PB__CODEC_SNAPPY,  /**< a snappy block (raw format, not framed); decode only */
  PB__CODEC_COUNT
} pb__codec_id;

/** Returned by pb__codec_decode (never by anything public) when dst is too small: *out_n then
 * holds a size worth retrying with. */
#define PB__CODEC_TOO_SMALL 1

/** Reusable state of one reader or writer: zero-initialise; release with
 * pb__codec_ctx_destroy. Not for two threads at once. */
typedef struct pb__codec_ctx {
  struct ZSTD_DCtx_s *zstd_d;  /**< created on the first zstd decode */
  struct ZSTD_CCtx_s *zstd_c;  /**< created on the first zstd encode */
  struct z_stream_s *inflate;  /**< created on the first gzip/zlib decode, reset after */
} pb__codec_ctx;

void pb__codec_ctx_destroy(pb__codec_ctx *ctx);

/** The codec called name ("none", "zstd", "lz4", "lz4_raw", "gzip", "zlib", "blosc",
 * "snappy"; also "" for none). PB_EUNSUPPORTED, naming the codec, when there is none. */
int pb__codec_by_name(const char *name, pb__codec_id *out, struct pb_error *err);
/** The codec's name as pb__codec_by_name takes it; "unknown" for an id out of range. */
const char *pb__codec_name(pb__codec_id id);

/** Decodes n bytes at src into dst (cap bytes); *out_n receives the decoded size. Returns 0;
 * PB__CODEC_TOO_SMALL when the result does not fit (*out_n: a size to retry with); PB_ECODEC
 * (message "<codec>: what went wrong") for corrupt or truncated input; PB_EUNSUPPORTED for a
 * size the codec's library cannot take (lz4 and blosc: 2 GiB, zlib: 4 GiB) or an id that
 * does not decode. ctx may be NULL (contexts are then made for the call). */
int pb__codec_decode(pb__codec_ctx *ctx, pb__codec_id id, const void *src, size_t n, void *dst,
                     size_t cap, size_t *out_n, struct pb_error *err);

/** pb__codec_decode for a format that knows the decoded size: PB_OK only when src decodes to
 * exactly dst_n bytes, PB_ECODEC ("<codec>: decodes to 100 bytes, expected 200", or more than
 * expected) otherwise. */
int pb__codec_decode_exact(pb__codec_ctx *ctx, pb__codec_id id, const void *src, size_t n,
                           void *dst, size_t dst_n, struct pb_error *err);

/** How an encoder is set: level 0 means the codec's default (zstd 3, zlib 6, blosc 5). */
typedef struct pb__codec_params {
  int level;
  int shuffle;            /**< blosc: 0 none, 1 byte, 2 bit shuffle */
  size_t typesize;        /**< blosc: bytes per element (1 when 0) */
  const char *blosc_cname;/**< blosc: the inner codec ("lz4", "zstd", ...; NULL: "lz4") */
} pb__codec_params;

/** The most bytes encoding n bytes can take (size a dst with it); 0 when n is too large for
 * the codec or it does not encode. */
size_t pb__codec_bound(pb__codec_id id, size_t n);

/** Encodes n bytes at src into dst (cap bytes, at least pb__codec_bound); *out_n receives the
 * encoded size. zstd frames carry zstd's content checksum, which the decoder verifies.
 * PB_EUNSUPPORTED for a codec that does not encode (snappy, lz4_raw) or a size it cannot take;
 * PB_EINVAL when cap is below the bound; PB_ECODEC when the library fails. params and ctx may
 * be NULL. */
int pb__codec_encode(pb__codec_ctx *ctx, pb__codec_id id, const pb__codec_params *params,
                     const void *src, size_t n, void *dst, size_t cap, size_t *out_n,
                     struct pb_error *err);

#endif
