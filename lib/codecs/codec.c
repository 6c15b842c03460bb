/* The codec table: one decoder and one encoder per codec, sizes checked against what each
 * library can take. */
#include "codecs/codec.h"

#include <blosc.h>
#include <limits.h>
#include <lz4.h>
#include <lz4frame.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "common/env.h"

/* ---- the libraries' versions, for every result row (common/env.h) ------------------------ */

static void version_blosc(char *buf, size_t size) { snprintf(buf, size, "%s", BLOSC_VERSION_STRING); }
static void version_zstd(char *buf, size_t size) { snprintf(buf, size, "%s", ZSTD_versionString()); }
static void version_zlib(char *buf, size_t size) { snprintf(buf, size, "%s", zlibVersion()); }
static void version_lz4(char *buf, size_t size) { snprintf(buf, size, "%s", LZ4_versionString()); }
PB__ENV_VERSION(register_blosc, "blosc_version", version_blosc)
PB__ENV_VERSION(register_zstd, "zstd_version", version_zstd)
PB__ENV_VERSION(register_zlib, "zlib_version", version_zlib)
PB__ENV_VERSION(register_lz4, "lz4_version", version_lz4)

/* ---- names --------------------------------------------------------------------------------- */

static const char *const names[PB__CODEC_COUNT] = {"none", "zstd", "lz4", "lz4_raw",
                                                   "gzip", "zlib", "blosc", "snappy"};

const char *pb__codec_name(pb__codec_id id) {
  return (int)id >= 0 && id < PB__CODEC_COUNT ? names[id] : "unknown";
}

int pb__codec_by_name(const char *name, pb__codec_id *out, struct pb_error *err) {
  if (name[0] == '\0') {
    *out = PB__CODEC_NONE;
    return PB_OK;
  }
  for (int i = 0; i < PB__CODEC_COUNT; i++) {
    if (strcmp(name, names[i]) == 0) {
      *out = (pb__codec_id)i;
      return PB_OK;
    }
  }
  return pb_error_set(err, PB_EUNSUPPORTED, "unknown codec '%s'", name);
}

void pb__codec_ctx_destroy(pb__codec_ctx *ctx) {
  if (ctx == NULL) return;
  ZSTD_freeDCtx(ctx->zstd_d);
  ZSTD_freeCCtx(ctx->zstd_c);
  if (ctx->inflate != NULL) {
    inflateEnd(ctx->inflate);
    free(ctx->inflate);
  }
  memset(ctx, 0, sizeof *ctx);
}

/* ---- decoders: 0, PB__CODEC_TOO_SMALL (with *out_n a size to retry with) or an error -------- */

static int dec_none(const void *src, size_t n, void *dst, size_t cap, size_t *out_n) {
  *out_n = n;
  if (n > cap) return PB__CODEC_TOO_SMALL;
  if (n > 0) memcpy(dst, src, n);
  return PB_OK;
}

static int dec_zstd(pb__codec_ctx *ctx, const void *src, size_t n, void *dst, size_t cap,
                    size_t *out_n, struct pb_error *err) {
  size_t r;
  if (ctx != NULL) {
    /* one context per reader: setting one up costs about as much as a 20 kB page's decode */
    if (ctx->zstd_d == NULL && (ctx->zstd_d = ZSTD_createDCtx()) == NULL)
      return pb_error_set(err, PB_ENOMEM, "zstd: out of memory for a context");
    r = ZSTD_decompressDCtx(ctx->zstd_d, dst, cap, src, n);
  } else {
    r = ZSTD_decompress(dst, cap, src, n);
  }
  if (!ZSTD_isError(r)) {
    *out_n = r;
    return PB_OK;
  }
  if (ZSTD_getErrorCode(r) == ZSTD_error_dstSize_tooSmall) {
    unsigned long long fs = ZSTD_getFrameContentSize(src, n);
    *out_n = fs > cap && fs < (1ULL << 40) ? (size_t)fs : cap * 2 + 4096;
    return PB__CODEC_TOO_SMALL;
  }
  return pb_error_set(err, PB_ECODEC, "zstd: %s", ZSTD_getErrorName(r));
}

/* An LZ4 frame: 0 and *out_n when it decodes whole, PB__CODEC_TOO_SMALL, or -1 (not one). */
static int lz4_frame(const unsigned char *s, size_t n, void *dst, size_t cap, size_t *out_n) {
  if (n < 4 || s[0] != 0x04 || s[1] != 0x22 || s[2] != 0x4D || s[3] != 0x18) return -1;
  LZ4F_dctx *dc = NULL;
  if (LZ4F_isError(LZ4F_createDecompressionContext(&dc, LZ4F_VERSION))) return -1;
  size_t in = n, outn = cap;
  size_t r = LZ4F_decompress(dc, dst, &outn, s, &in, NULL);
  int rc = -1;
  if (!LZ4F_isError(r) && r == 0) {
    *out_n = outn;
    rc = PB_OK;
  } else if (!LZ4F_isError(r) && outn == cap) {
    LZ4F_frameInfo_t fi;
    size_t hin = n;
    LZ4F_dctx *hc = NULL;
    unsigned long long size = 0;
    if (!LZ4F_isError(LZ4F_createDecompressionContext(&hc, LZ4F_VERSION))) {
      if (!LZ4F_isError(LZ4F_getFrameInfo(hc, &fi, s, &hin))) size = fi.contentSize;
      LZ4F_freeDecompressionContext(hc);
    }
    *out_n = size > cap && size < (1ULL << 40) ? (size_t)size : cap * 2 + 4096;
    rc = PB__CODEC_TOO_SMALL;
  }
  LZ4F_freeDecompressionContext(dc);
  return rc;
}

static int dec_lz4(int raw_only, const void *src, size_t n, void *dst, size_t cap,
                   size_t *out_n, struct pb_error *err) {
  const char *name = raw_only ? "lz4_raw" : "lz4";
  if (n > (size_t)INT_MAX)
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: %zu bytes, more than lz4 takes", name, n);
  int icap = cap > (size_t)LZ4_MAX_INPUT_SIZE ? LZ4_MAX_INPUT_SIZE : (int)cap;
  const unsigned char *s = src;
  if (!raw_only) {
    int rc = lz4_frame(s, n, dst, cap, out_n);
    if (rc >= 0) return rc;
    if (n >= 4) { /* python-lz4's lz4.block: the size, little-endian, then a block */
      uint32_t sz = (uint32_t)s[0] | (uint32_t)s[1] << 8 | (uint32_t)s[2] << 16 |
                    (uint32_t)s[3] << 24;
      if (sz <= (uint32_t)icap &&
          LZ4_decompress_safe((const char *)s + 4, dst, (int)(n - 4), (int)sz) == (int)sz) {
        *out_n = sz;
        return PB_OK;
      }
    }
  }
  int got = LZ4_decompress_safe(src, dst, (int)n, icap);
  if (got >= 0) {
    *out_n = (size_t)got;
    return PB_OK;
  }
  if (raw_only)
    return pb_error_set(err, PB_ECODEC, "lz4_raw: cannot decompress %zu bytes into %zu", n, cap);
  return pb_error_set(err, PB_ECODEC,
                      "lz4: cannot decompress %zu bytes into %zu (tried a frame, a size-prefixed "
                      "block and a bare block)", n, cap);
}

static int dec_inflate(pb__codec_ctx *ctx, const char *name, const void *src, size_t n,
                       void *dst, size_t cap, size_t *out_n, struct pb_error *err) {
  if (n > UINT_MAX || cap > UINT_MAX)
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: more than 4 GiB", name);
  z_stream local, *zs = ctx != NULL ? ctx->inflate : NULL;
  if (zs == NULL) {
    zs = ctx != NULL ? calloc(1, sizeof *zs) : memset(&local, 0, sizeof local);
    if (zs == NULL) return pb_error_set(err, PB_ENOMEM, "%s: out of memory", name);
    if (inflateInit2(zs, 15 + 32) != Z_OK) { /* +32: a zlib or a gzip header */
      if (zs != &local) free(zs);
      return pb_error_set(err, PB_ENOMEM, "%s: cannot start inflate", name);
    }
    if (ctx != NULL) ctx->inflate = zs;
  } else if (inflateReset(zs) != Z_OK) {
    return pb_error_set(err, PB_ECODEC, "%s: cannot reset inflate", name);
  }
  zs->next_in = (Bytef *)(uintptr_t)src;
  zs->avail_in = (uInt)n;
  zs->next_out = dst;
  zs->avail_out = (uInt)cap;
  int r = inflate(zs, Z_FINISH);
  *out_n = cap - zs->avail_out;
  int rc = PB_OK;
  if (r == Z_STREAM_END) {
    rc = PB_OK;
  } else if ((r == Z_BUF_ERROR || r == Z_OK) && zs->avail_out == 0 && zs->avail_in > 0) {
    *out_n = cap * 2 + 4096;
    rc = PB__CODEC_TOO_SMALL;
  } else {
    rc = pb_error_set(err, PB_ECODEC, "%s: %s", name,
                      zs->msg != NULL ? zs->msg : "truncated or corrupt stream");
  }
  if (zs == &local) inflateEnd(zs);
  return rc;
}

static int dec_blosc(const void *src, size_t n, void *dst, size_t cap, size_t *out_n,
                     struct pb_error *err) {
  size_t nbytes = 0, cbytes = 0, bsize = 0;
  if (n < BLOSC_MIN_HEADER_LENGTH || blosc_cbuffer_validate(src, n, &nbytes) != 0)
    return pb_error_set(err, PB_ECODEC, "blosc: not a valid blosc buffer (%zu bytes)", n);
  blosc_cbuffer_sizes(src, &nbytes, &cbytes, &bsize);
  *out_n = nbytes;
  if (nbytes > cap) return PB__CODEC_TOO_SMALL;
  if (nbytes == 0) return PB_OK;
  int r = blosc_decompress_ctx(src, dst, cap, 1);
  if (r < 0 || (size_t)r != nbytes)
    return pb_error_set(err, PB_ECODEC, "blosc: decompression failed (code %d)", r);
  return PB_OK;
}

/* A snappy block: a varint of the decoded length, then literals and back-references. */
static int dec_snappy(const void *src, size_t n, void *dst, size_t cap, size_t *out_n,
                      struct pb_error *err) {
  const uint8_t *s = src;
  uint8_t *d = dst;
  size_t i = 0, o = 0;
  uint64_t len = 0;
  for (int sh = 0;; sh += 7) {
    if (i >= n || sh > 35) return pb_error_set(err, PB_ECODEC, "snappy: bad length header");
    uint8_t b = s[i++];
    len |= (uint64_t)(b & 0x7f) << sh;
    if ((b & 0x80) == 0) break;
  }
  *out_n = (size_t)len;
  if (len > cap) return PB__CODEC_TOO_SMALL;
  size_t dn = (size_t)len;
  while (i < n) {
    uint8_t tag = s[i++];
    size_t l, off;
    switch (tag & 3) {
      case 0:
        l = (size_t)(tag >> 2);
        if (l >= 60) {
          size_t nb = l - 59;
          if (n - i < nb) goto corrupt;
          l = 0;
          for (size_t k = 0; k < nb; k++) l |= (size_t)s[i + k] << (8 * k);
          i += nb;
        }
        l += 1;
        if (n - i < l || dn - o < l) goto corrupt;
        memcpy(d + o, s + i, l);
        i += l;
        o += l;
        continue;
      case 1:
        if (i >= n) goto corrupt;
        l = 4 + ((tag >> 2) & 7);
        off = ((size_t)(tag >> 5) << 8) | s[i++];
        break;
      case 2:
        if (n - i < 2) goto corrupt;
        l = (size_t)(tag >> 2) + 1;
        off = (size_t)s[i] | (size_t)s[i + 1] << 8;
        i += 2;
        break;
      default:
        if (n - i < 4) goto corrupt;
        l = (size_t)(tag >> 2) + 1;
        off = (size_t)s[i] | (size_t)s[i + 1] << 8 | (size_t)s[i + 2] << 16 |
              (size_t)s[i + 3] << 24;
        i += 4;
        break;
    }
    if (off == 0 || off > o || dn - o < l) goto corrupt;
    if (off >= l) memcpy(d + o, d + o - off, l);
    else
      for (size_t k = 0; k < l; k++) d[o + k] = d[o + k - off]; /* overlapping: a repeat */
    o += l;
  }
  if (o == dn) return PB_OK;
corrupt:
  return pb_error_set(err, PB_ECODEC, "snappy: corrupt block (at byte %zu of %zu)", i, n);
}

int pb__codec_decode(pb__codec_ctx *ctx, pb__codec_id id, const void *src, size_t n, void *dst,
                     size_t cap, size_t *out_n, struct pb_error *err) {
  *out_n = 0;
  switch (id) {
    case PB__CODEC_NONE: return dec_none(src, n, dst, cap, out_n);
    case PB__CODEC_ZSTD: return dec_zstd(ctx, src, n, dst, cap, out_n, err);
    case PB__CODEC_LZ4: return dec_lz4(0, src, n, dst, cap, out_n, err);
    case PB__CODEC_LZ4_RAW: return dec_lz4(1, src, n, dst, cap, out_n, err);
    case PB__CODEC_GZIP: return dec_inflate(ctx, "gzip", src, n, dst, cap, out_n, err);
    case PB__CODEC_ZLIB: return dec_inflate(ctx, "zlib", src, n, dst, cap, out_n, err);
    case PB__CODEC_BLOSC: return dec_blosc(src, n, dst, cap, out_n, err);
    case PB__CODEC_SNAPPY: return dec_snappy(src, n, dst, cap, out_n, err);
    default: return pb_error_set(err, PB_EUNSUPPORTED, "codec %d does not decode", (int)id);
  }
}

int pb__codec_decode_exact(pb__codec_ctx *ctx, pb__codec_id id, const void *src, size_t n,
                           void *dst, size_t dst_n, struct pb_error *err) {
  size_t got = 0;
  int rc = pb__codec_decode(ctx, id, src, n, dst, dst_n, &got, err);
  if (rc == PB__CODEC_TOO_SMALL)
    return pb_error_set(err, PB_ECODEC, "%s: decodes to more than the expected %zu bytes",
                        pb__codec_name(id), dst_n);
  if (rc != PB_OK) return rc;
  if (got != dst_n)
    return pb_error_set(err, PB_ECODEC, "%s: decodes to %zu bytes, expected %zu",
                        pb__codec_name(id), got, dst_n);
  return PB_OK;
}

/* ---- encoders ------------------------------------------------------------------------------ */

size_t pb__codec_bound(pb__codec_id id, size_t n) {
  switch (id) {
    case PB__CODEC_NONE: return n;
    case PB__CODEC_ZSTD: return ZSTD_isError(ZSTD_compressBound(n)) ? 0 : ZSTD_compressBound(n);
    case PB__CODEC_LZ4:
      return n > (size_t)LZ4_MAX_INPUT_SIZE ? 0 : (size_t)LZ4_compressBound((int)n) + 4;
    case PB__CODEC_GZIP:
    case PB__CODEC_ZLIB: return n > UINT_MAX ? 0 : (size_t)compressBound((uLong)n) + 64;
    case PB__CODEC_BLOSC: return n > (size_t)BLOSC_MAX_BUFFERSIZE ? 0 : n + BLOSC_MAX_OVERHEAD;
    default: return 0;
  }
}

static int enc_deflate(int gzip, int level, const void *src, size_t n, void *dst, size_t cap,
                       size_t *out_n, struct pb_error *err) {
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  if (deflateInit2(&zs, level > 0 ? level : Z_DEFAULT_COMPRESSION, Z_DEFLATED, gzip ? 31 : 15, 8,
                   Z_DEFAULT_STRATEGY) != Z_OK)
    return pb_error_set(err, PB_ENOMEM, "%s: cannot start deflate", gzip ? "gzip" : "zlib");
  zs.next_in = (Bytef *)(uintptr_t)src;
  zs.avail_in = (uInt)n;
  zs.next_out = dst;
  zs.avail_out = (uInt)(cap > UINT_MAX ? UINT_MAX : cap);
  int r = deflate(&zs, Z_FINISH);
  *out_n = zs.total_out;
  deflateEnd(&zs);
  if (r != Z_STREAM_END)
    return pb_error_set(err, PB_ECODEC, "%s: deflate failed (%d)", gzip ? "gzip" : "zlib", r);
  return PB_OK;
}

int pb__codec_encode(pb__codec_ctx *ctx, pb__codec_id id, const pb__codec_params *params,
                     const void *src, size_t n, void *dst, size_t cap, size_t *out_n,
                     struct pb_error *err) {
  static const pb__codec_params defaults = {0, 0, 1, NULL};
  const pb__codec_params *p = params != NULL ? params : &defaults;
  *out_n = 0;
  size_t bound = pb__codec_bound(id, n);
  if (bound == 0 && !(id == PB__CODEC_NONE && n == 0)) {
    if (id == PB__CODEC_LZ4_RAW || id == PB__CODEC_SNAPPY || (int)id < 0 || id >= PB__CODEC_COUNT)
      return pb_error_set(err, PB_EUNSUPPORTED, "%s: pipebench does not encode it",
                          pb__codec_name(id));
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: %zu bytes, more than it takes at once",
                        pb__codec_name(id), n);
  }
  if (cap < bound)
    return pb_error_set(err, PB_EINVAL, "%s: %zu bytes of room, it may need %zu",
                        pb__codec_name(id), cap, bound);
  int level = p->level;
  switch (id) {
    case PB__CODEC_NONE:
      if (n > 0) memcpy(dst, src, n);
      *out_n = n;
      return PB_OK;
    case PB__CODEC_ZSTD: {
      /* Every frame carries zstd's content checksum (XXH64, 4 bytes), so a flipped bit in a
       * literal section is refused by the decoder instead of read as other pixels. */
      ZSTD_CCtx *cc = ctx != NULL ? ctx->zstd_c : NULL;
      if (cc == NULL && (cc = ZSTD_createCCtx()) == NULL)
        return pb_error_set(err, PB_ENOMEM, "zstd: out of memory for a context");
      if (ctx != NULL) ctx->zstd_c = cc;
      ZSTD_CCtx_reset(cc, ZSTD_reset_session_and_parameters);
      size_t r = ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, level != 0 ? level : 3);
      if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
      if (!ZSTD_isError(r)) r = ZSTD_compress2(cc, dst, cap, src, n);
      if (ctx == NULL) ZSTD_freeCCtx(cc);
      if (ZSTD_isError(r)) return pb_error_set(err, PB_ECODEC, "zstd: %s", ZSTD_getErrorName(r));
      *out_n = r;
      return PB_OK;
    }
    case PB__CODEC_LZ4: {
      unsigned char *d = dst;
      int room = cap - 4 > (size_t)INT_MAX ? INT_MAX : (int)(cap - 4);
      int r = LZ4_compress_default(src, (char *)d + 4, (int)n, room);
      if (r <= 0) return pb_error_set(err, PB_ECODEC, "lz4: compression failed");
      uint32_t sz = (uint32_t)n; /* little-endian prefix, as python-lz4's lz4.block writes */
      for (int k = 0; k < 4; k++) d[k] = (unsigned char)(sz >> (8 * k));
      *out_n = (size_t)r + 4;
      return PB_OK;
    }
    case PB__CODEC_GZIP: return enc_deflate(1, level, src, n, dst, cap, out_n, err);
    case PB__CODEC_ZLIB: return enc_deflate(0, level, src, n, dst, cap, out_n, err);
    case PB__CODEC_BLOSC: {
      const char *cname = p->blosc_cname != NULL ? p->blosc_cname : "lz4";
      int r = blosc_compress_ctx(level > 0 ? level : 5, p->shuffle,
                                 p->typesize > 0 ? p->typesize : 1, n, src, dst, cap, cname, 0, 1);
      if (r <= 0)
        return pb_error_set(err, PB_ECODEC, "blosc (%s): compression failed (%d)", cname, r);
      *out_n = (size_t)r;
      return PB_OK;
    }
    default:
      return pb_error_set(err, PB_EUNSUPPORTED, "%s: pipebench does not encode it",
                          pb__codec_name(id));
  }
}
