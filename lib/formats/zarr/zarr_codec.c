/* Chunk pipelines (blosc, zstd, gzip/zlib through the codec table; crc32c here), shard
 * indexes, and placing decoded chunks into a destination region. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <blosc.h>
#include <zstd.h>

#include "codecs/codec.h"
#include "formats/zarr/zarr_internal.h"
#include "io/le.h"

/* ---- crc32c (Castagnoli, reflected polynomial 0x82F63B78) ---------------------------------- */

static uint32_t crc32c_table[256];
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;

static void crc32c_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    crc32c_table[i] = c;
  }
}

uint32_t pb__crc32c(uint32_t crc, const void *data, size_t n) {
  pthread_once(&crc32c_once, crc32c_init);
  const unsigned char *p = data;
  crc = ~crc;
  for (size_t i = 0; i < n; i++) crc = crc32c_table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

#define le32 pb__le32
#define u64_at pb__get64

/* ---- scratch buffers ----------------------------------------------------------------------- */

int pb__zarr_reserve(unsigned char **buf, size_t *cap, size_t need) {
  if (*buf != NULL && *cap >= need) return PB_OK;
  size_t ncap = need < 4096 ? 4096 : need + need / 4;
  unsigned char *nb = pb_alloc(ncap);
  if (nb == NULL) return PB_ENOMEM;
  pb_free(*buf, *cap);
  *buf = nb;
  *cap = ncap;
  return PB_OK;
}

void pb__zarr_scratch_destroy(pb__zarr_scratch *s) {
  if (s == NULL) return;
  for (int i = 0; i < 2; i++) pb_free(s->buf[i], s->cap[i]);
  pb_free(s->file, s->file_cap);
  pb_free(s->chunk, s->chunk_cap);
  pb_free(s->index, s->index_cap);
  pb_free(s->shard, s->shard_cap);
  pb_free(s->ranges, s->ranges_cap);
  pb__codec_ctx_destroy(&s->codec);
  memset(s, 0, sizeof *s);
}

/* ---- decoding ------------------------------------------------------------------------------ */

/* The codec table's id for a pipeline codec (crc32c is checked, not decoded). */
static pb__codec_id table_id(int zc) {
  switch (zc) {
    case PB__ZC_BLOSC: return PB__CODEC_BLOSC;
    case PB__ZC_ZSTD: return PB__CODEC_ZSTD;
    case PB__ZC_GZIP: return PB__CODEC_GZIP;
    case PB__ZC_ZLIB: return PB__CODEC_ZLIB;
    default: return PB__CODEC_COUNT;
  }
}

static int dec_one(const pb__zarr_codec *c, pb__zarr_scratch *s, const unsigned char *in, size_t n,
                   unsigned char *out, size_t cap, size_t *outn, struct pb_error *err) {
  pb__codec_id id = table_id(c->id);
  if (id == PB__CODEC_COUNT) return pb_error_set(err, PB_EUNSUPPORTED, "unknown codec %d", c->id);
  return pb__codec_decode(&s->codec, id, in, n, out, cap, outn, err);
}

static void swap_bytes(unsigned char *p, size_t n, size_t esize) {
  for (size_t i = 0; i + esize <= n; i += esize)
    for (size_t a = 0, b = esize - 1; a < b; a++, b--) {
      unsigned char t = p[i + a];
      p[i + a] = p[i + b];
      p[i + b] = t;
    }
}

int pb__zarr_decode(const pb__zarr_pipe *pipe, size_t esize, pb__zarr_scratch *s,
                    const unsigned char *in, size_t n, unsigned char *out, size_t out_size,
                    struct pb_error *err) {
  const unsigned char *cur = in;
  size_t curn = n;
  int which = 0;
  for (int i = pipe->n - 1; i >= 0; i--) {
    const pb__zarr_codec *c = &pipe->c[i];
    if (c->id == PB__ZC_CRC32C) {
      if (curn < 4) return pb_error_set(err, PB_ECODEC, "crc32c: %zu bytes, too short", curn);
      uint32_t want = le32(cur + curn - 4), got = pb__crc32c(0, cur, curn - 4);
      if (want != got)
        return pb_error_set(err, PB_ECODEC, "crc32c: checksum mismatch (stored %08x, computed %08x)",
                            want, got);
      curn -= 4;
      continue;
    }
    size_t got = 0;
    if (i == 0) { /* the last decoder writes straight into out */
      int rc = dec_one(c, s, cur, curn, out, out_size, &got, err);
      if (rc == PB__CODEC_TOO_SMALL)
        return pb_error_set(err, PB_EFORMAT, "chunk decodes to more than the expected %zu bytes",
                            out_size);
      if (rc != PB_OK) return rc;
      if (got != out_size)
        return pb_error_set(err, PB_EFORMAT, "chunk decodes to %zu bytes, expected %zu", got,
                            out_size);
      if (pipe->big_endian && esize > 1) swap_bytes(out, out_size, esize);
      return PB_OK;
    }
    size_t want = out_size + 64;
    for (;;) {
      if (want > (size_t)PB__ZARR_MAX_CHUNK_BYTES + 64)
        return pb_error_set(err, PB_EFORMAT, "chunk decodes to more than 4 GiB");
      if (pb__zarr_reserve(&s->buf[which], &s->cap[which], want) != PB_OK)
        return pb_error_set(err, PB_ENOMEM, "out of memory for %zu bytes", want);
      int rc = dec_one(c, s, cur, curn, s->buf[which], s->cap[which], &got, err);
      if (rc == PB_OK) break;
      if (rc != PB__CODEC_TOO_SMALL) return rc;
      want = got > s->cap[which] ? got : s->cap[which] * 2;
    }
    cur = s->buf[which];
    curn = got;
    which ^= 1;
  }
  if (curn != out_size)
    return pb_error_set(err, PB_EFORMAT, "chunk holds %zu bytes, expected %zu", curn, out_size);
  if (cur != out) memcpy(out, cur, out_size);
  if (pipe->big_endian && esize > 1) swap_bytes(out, out_size, esize);
  return PB_OK;
}

/* ---- encoding (the writer) ----------------------------------------------------------------- */

int pb__zarr_encode(const pb__zarr_pipe *pipe, size_t esize, void *zstd_cctx,
                    const unsigned char *in, size_t n, unsigned char **out, size_t *out_cap,
                    size_t *out_n, struct pb_error *err) {
  if (pipe->n > 1) return pb_error_set(err, PB_EUNSUPPORTED, "the writer uses one codec at most");
  const pb__zarr_codec *c = pipe->n == 1 ? &pipe->c[0] : NULL;
  pb__codec_id id = c != NULL ? table_id(c->id) : PB__CODEC_NONE;
  if (id == PB__CODEC_COUNT)
    return pb_error_set(err, PB_EUNSUPPORTED, "codec %d cannot be written", c->id);
  size_t bound = pb__codec_bound(id, n);
  if (bound == 0 && n > 0)
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: chunk of %zu bytes is too large",
                        pb__codec_name(id), n);
  if (pb__zarr_reserve(out, out_cap, bound) != PB_OK)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  pb__codec_params prm = {0};
  if (c != NULL)
    prm = (pb__codec_params){.level = c->level, .shuffle = c->shuffle, .typesize = esize,
                             .blosc_cname = c->cname};
  /* the writer's zstd context, kept across its chunks */
  pb__codec_ctx ctx = {.zstd_c = zstd_cctx};
  int rc = pb__codec_encode(&ctx, id, &prm, in, n, *out, *out_cap, out_n, err);
  if (zstd_cctx == NULL) pb__codec_ctx_destroy(&ctx);
  return rc;
}

/* ---- placing chunks into a region ---------------------------------------------------------- */

/* Intersection of box (origin o, shape n) with the region; 0 when empty. */
static int intersect(const pb_region *r, const int64_t o[PB_NDIM], const int64_t n[PB_NDIM],
                     const int64_t shape[PB_NDIM], int64_t lo[PB_NDIM], int64_t cnt[PB_NDIM]) {
  for (int k = 0; k < PB_NDIM; k++) {
    int64_t a = o[k] > r->start[k] ? o[k] : r->start[k];
    int64_t b = o[k] + n[k];
    if (b > r->start[k] + r->count[k]) b = r->start[k] + r->count[k];
    if (b > shape[k]) b = shape[k];
    if (b <= a) return 0;
    lo[k] = a;
    cnt[k] = b - a;
  }
  return 1;
}

static void fill_box(const pb__zarr_array *a, const pb_region *r, const int64_t o[PB_NDIM],
                     const int64_t n[PB_NDIM], unsigned char *dst) {
  int64_t lo[PB_NDIM], cnt[PB_NDIM], ds[PB_NDIM];
  if (!intersect(r, o, n, a->shape, lo, cnt)) return;
  ds[PB_NDIM - 1] = 1;
  for (int k = PB_NDIM - 2; k >= 0; k--) ds[k] = ds[k + 1] * r->count[k + 1];
  size_t es = a->esize, row = (size_t)cnt[PB_X];
  for (int64_t t = 0; t < cnt[0]; t++)
    for (int64_t c = 0; c < cnt[1]; c++)
      for (int64_t z = 0; z < cnt[2]; z++)
        for (int64_t y = 0; y < cnt[3]; y++) {
          int64_t off = (lo[0] + t - r->start[0]) * ds[0] + (lo[1] + c - r->start[1]) * ds[1] +
                        (lo[2] + z - r->start[2]) * ds[2] + (lo[3] + y - r->start[3]) * ds[3] +
                        (lo[4] - r->start[4]);
          unsigned char *p = dst + (size_t)off * es;
          if (a->fill_zero) {
            memset(p, 0, row * es);
          } else {
            for (size_t x = 0; x < row; x++) memcpy(p + x * es, a->fill, es);
          }
        }
}

/* A region at least this large is written with streaming (non-temporal) stores: it cannot stay
 * in cache anyway, and ordinary stores would first read every destination line from memory
 * (three bytes of memory traffic per byte placed instead of two). Smaller regions (crops, small
 * images) are written through the cache, where their reader finds them. */
#define STREAM_MIN_BYTES ((size_t)8 << 20)

static size_t region_bytes(const pb__zarr_array *a, const pb_region *r) {
  size_t n = a->esize;
  for (int k = 0; k < PB_NDIM; k++) n *= (size_t)r->count[k];
  return n;
}

/* memcpy, or with stream set a copy whose stores bypass the cache (the caller fences). */
static void copy_row(unsigned char *d, const unsigned char *s, size_t n, int stream) {
#if defined(__SSE2__)
  if (stream && n >= 64) {
    size_t head = (size_t)(-(uintptr_t)d & 15);
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
      __m128i x0 = _mm_loadu_si128((const __m128i *)(const void *)s);
      __m128i x1 = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
      __m128i x2 = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
      __m128i x3 = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
      _mm_stream_si128((__m128i *)(void *)d, x0);
      _mm_stream_si128((__m128i *)(void *)(d + 16), x1);
      _mm_stream_si128((__m128i *)(void *)(d + 32), x2);
      _mm_stream_si128((__m128i *)(void *)(d + 48), x3);
    }
    for (; n >= 16; n -= 16, d += 16, s += 16)
      _mm_stream_si128((__m128i *)(void *)d, _mm_loadu_si128((const __m128i *)(const void *)s));
    if (n > 0) memcpy(d, s, n);
    return;
  }
#endif
  memcpy(d, s, n);
}

/* Orders streaming stores before whatever the thread does next (a no-op without them). */
static void stream_fence(int stream) {
#if defined(__SSE2__)
  if (stream) _mm_sfence();
#else
  (void)stream;
#endif
}

/* Copies the part of a chunk (origin o, shape n, elements in src) that lies in the region into
 * dst (the region's box), row by row. */
static void put_box(const pb__zarr_array *a, const pb_region *r, unsigned char *dst,
                    const unsigned char *src, const int64_t o[PB_NDIM], const int64_t n[PB_NDIM],
                    int stream) {
  int64_t lo[PB_NDIM], cnt[PB_NDIM], ss[PB_NDIM], ds[PB_NDIM];
  if (!intersect(r, o, n, a->shape, lo, cnt)) return;
  ss[PB_NDIM - 1] = ds[PB_NDIM - 1] = 1;
  for (int k = PB_NDIM - 2; k >= 0; k--) {
    ss[k] = ss[k + 1] * n[k + 1];
    ds[k] = ds[k + 1] * r->count[k + 1];
  }
  size_t es = a->esize, row = (size_t)cnt[PB_X] * es;
  int64_t rows = cnt[0] * cnt[1] * cnt[2] * cnt[3], idx[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < rows; i++) {
    int64_t so = lo[PB_X] - o[PB_X], dof = lo[PB_X] - r->start[PB_X];
    for (int k = 0; k < 4; k++) {
      so += (lo[k] + idx[k] - o[k]) * ss[k];
      dof += (lo[k] + idx[k] - r->start[k]) * ds[k];
    }
    copy_row(dst + (size_t)dof * es, src + (size_t)so * es, row, stream);
    for (int k = 3; k >= 0 && ++idx[k] == cnt[k]; k--) idx[k] = 0;
  }
  stream_fence(stream);
}

/* When a chunk sits wholly inside the region and its pixels are contiguous there, it can be
 * decoded straight into dst: returns the byte offset, or -1. */
static int64_t direct_offset(const pb_region *r, const int64_t o[PB_NDIM], const int64_t n[PB_NDIM],
                             size_t esize) {
  int j = 0;
  while (j < PB_NDIM - 1 && n[j] == 1) j++;
  for (int k = 0; k < PB_NDIM; k++) {
    if (o[k] < r->start[k] || o[k] + n[k] > r->start[k] + r->count[k]) return -1;
    if (k > j && n[k] != r->count[k]) return -1;
  }
  int64_t off = 0, stride = 1;
  for (int k = PB_NDIM - 1; k >= 0; k--) {
    off += (o[k] - r->start[k]) * stride;
    stride *= r->count[k];
  }
  return off * (int64_t)esize;
}

/* Is the box (origin o, shape n) wholly inside the region? */
static int inside(const pb_region *r, const int64_t o[PB_NDIM], const int64_t n[PB_NDIM]) {
  for (int k = 0; k < PB_NDIM; k++)
    if (o[k] < r->start[k] || o[k] + n[k] > r->start[k] + r->count[k]) return 0;
  return 1;
}

/* The pieces of dst an uncompressed chunk's rows go to, as ranges of one scattered read; the
 * handle's vector grows as needed. */
static pb__io_range *ranges(pb__zarr_scratch *s, size_t n, struct pb_error *err) {
  size_t bytes = n * sizeof(pb__io_range);
  if (pb__zarr_reserve(&s->ranges, &s->ranges_cap, bytes) != PB_OK) {
    pb_error_set(err, PB_ENOMEM, "out of memory");
    return NULL;
  }
  return (pb__io_range *)(void *)s->ranges;
}

/* Byte order and timing after an uncompressed chunk's rows are in dst: a big-endian chunk's
 * pieces (rows of cnt[X] values from element lo in dst's box) are swapped in place. */
static void rows_done(const pb__zarr_array *a, const int64_t lo[PB_NDIM], const int64_t cnt[PB_NDIM],
                      const pb_region *r, unsigned char *dst, size_t total, int64_t t0,
                      pb_stage_times *times) {
  int64_t t1 = pb_now_ns();
  if (times != NULL) {
    times->read_ns += t1 - t0;
    times->bytes_read += (int64_t)total;
  }
  size_t es = a->esize;
  if (!a->pipe.big_endian || es == 1) return;
  int64_t ds[PB_NDIM];
  ds[PB_NDIM - 1] = 1;
  for (int k = PB_NDIM - 2; k >= 0; k--) ds[k] = ds[k + 1] * r->count[k + 1];
  int64_t rows = cnt[0] * cnt[1] * cnt[2] * cnt[3], j[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < rows; i++) {
    int64_t off = lo[PB_X] - r->start[PB_X];
    for (int k = 0; k < 4; k++) off += (lo[k] + j[k] - r->start[k]) * ds[k];
    swap_bytes(dst + (size_t)off * es, (size_t)cnt[PB_X] * es, es);
    for (int k = 3; k >= 0 && ++j[k] == cnt[k]; k--) j[k] = 0;
  }
  if (times != NULL) times->decode_ns += pb_now_ns() - t1;
}

/* An uncompressed chunk (origin o, shape a->inner, its size already checked) stored at byte at
 * of file, of which the region needs all or a part: one scattered read puts each needed row
 * piece straight where it belongs in dst (rows that follow each other in both merge; the I/O
 * layer reads small holes between pieces in the same request), so the pixels are copied once,
 * by the kernel. */
static int read_rows(const pb__zarr_array *a, pb__zarr_scratch *s, pb__io_file *file,
                     uint64_t at, const int64_t o[PB_NDIM], const pb_region *r, unsigned char *dst,
                     pb_stage_times *times, struct pb_error *err) {
  int64_t lo[PB_NDIM], cnt[PB_NDIM], cs[PB_NDIM], ds[PB_NDIM];
  if (!intersect(r, o, a->inner, a->shape, lo, cnt)) return PB_OK;
  cs[PB_NDIM - 1] = ds[PB_NDIM - 1] = 1;
  for (int k = PB_NDIM - 2; k >= 0; k--) {
    cs[k] = cs[k + 1] * a->inner[k + 1];
    ds[k] = ds[k + 1] * r->count[k + 1];
  }
  size_t es = a->esize, piece = (size_t)cnt[PB_X] * es;
  int64_t rows = cnt[0] * cnt[1] * cnt[2] * cnt[3], idx[4] = {0, 0, 0, 0};
  pb__io_range *v = ranges(s, (size_t)rows, err);
  if (v == NULL) return PB_ENOMEM;
  size_t nv = 0;
  for (int64_t i = 0; i < rows; i++) {
    int64_t fo = lo[PB_X] - o[PB_X], dof = lo[PB_X] - r->start[PB_X];
    for (int k = 0; k < 4; k++) {
      fo += (lo[k] + idx[k] - o[k]) * cs[k];
      dof += (lo[k] + idx[k] - r->start[k]) * ds[k];
    }
    uint64_t f = at + (uint64_t)fo * es;
    unsigned char *p = dst + (size_t)dof * es;
    if (nv > 0 && v[nv - 1].off + v[nv - 1].len == f &&
        (unsigned char *)v[nv - 1].dst + v[nv - 1].len == p)
      v[nv - 1].len += piece;
    else
      v[nv++] = (pb__io_range){f, piece, p};
    for (int k = 3; k >= 0 && ++idx[k] == cnt[k]; k--) idx[k] = 0;
  }
  int64_t t0 = pb_now_ns(), b0 = file->stats.bytes;
  PB_RETURN_NOT_OK(pb__io_preadv(file, v, nv, err));
  /* what was fetched: the pieces and the holes read between them */
  rows_done(a, lo, cnt, r, dst, (size_t)(file->stats.bytes - b0), t0, times);
  return PB_OK;
}

/* A region that needs only part of a blosc chunk: blosc stores a chunk as independent blocks,
 * so only the blocks holding the span from the region's first to its last element in the chunk
 * are decoded, into their places in out (the chunk's full size). 1: done; 0: not worth it or not
 * possible here (the caller decodes the whole chunk, which also reports any corruption). */
static int blosc_part(const pb__zarr_array *a, const unsigned char *in, size_t n,
                      const int64_t o[PB_NDIM], const pb_region *r, unsigned char *out,
                      size_t bytes, struct pb_error *err, int *rc) {
  int64_t lo[PB_NDIM], cnt[PB_NDIM];
  if (a->pipe.n != 1 || a->pipe.c[0].id != PB__ZC_BLOSC || bytes > INT_MAX ||
      !intersect(r, o, a->inner, a->shape, lo, cnt))
    return 0;
  int64_t first = 0, last = 0;
  for (int k = 0; k < PB_NDIM; k++) {
    first = first * a->inner[k] + (lo[k] - o[k]);
    last = last * a->inner[k] + (lo[k] + cnt[k] - 1 - o[k]);
  }
  size_t b0 = (size_t)first * a->esize, b1 = (size_t)(last + 1) * a->esize;
  size_t nbytes = 0, cbytes = 0, bsize = 0, ts = 0;
  int flags = 0;
  if (b1 - b0 > bytes / 4 * 3 || n < BLOSC_MIN_HEADER_LENGTH ||
      blosc_cbuffer_validate(in, n, &nbytes) != 0 || nbytes != bytes)
    return 0;
  blosc_cbuffer_sizes(in, &nbytes, &cbytes, &bsize);
  blosc_cbuffer_metainfo(in, &ts, &flags);
  if (ts == 0 || bsize == 0 || cbytes > n || bytes % ts != 0) return 0;
  if (!(flags & BLOSC_MEMCPYED)) {
    /* every block must start inside the buffer, after the table of block starts */
    size_t nblocks = (nbytes + bsize - 1) / bsize, table = BLOSC_MIN_HEADER_LENGTH + 4 * nblocks;
    if (table > cbytes) return 0;
    for (size_t j = 0; j < nblocks; j++) {
      const unsigned char *q = in + BLOSC_MIN_HEADER_LENGTH + 4 * j;
      uint32_t at = le32(q);
      if (at < table || at >= cbytes) return 0;
    }
  }
  size_t i0 = b0 / ts, i1 = (b1 + ts - 1) / ts;
  int got = blosc_getitem(in, (int)i0, (int)(i1 - i0), out + i0 * ts);
  if (got != (int)((i1 - i0) * ts)) {
    *rc = pb_error_set(err, PB_ECODEC, "blosc: cannot decode items %zu..%zu (code %d)", i0, i1,
                       got);
    return 1;
  }
  if (a->pipe.big_endian && a->esize > 1) swap_bytes(out + b0, b1 - b0, a->esize);
  *rc = PB_OK;
  return 1;
}

/* The same for a zstd chunk: a frame cannot be entered midway, but decoding can stop once the
 * region's last element is out, which a crop's top and bottom chunks allow. Any trouble (a
 * window larger than the chunk, a frame that ends early) leaves it to the whole decode, which
 * reports it. 1: done; 0: not done. */
static int zstd_part(const pb__zarr_array *a, pb__zarr_scratch *s, const unsigned char *in,
                     size_t n, const int64_t o[PB_NDIM], const pb_region *r, unsigned char *out,
                     size_t bytes) {
  int64_t lo[PB_NDIM], cnt[PB_NDIM];
  if (a->pipe.n != 1 || a->pipe.c[0].id != PB__ZC_ZSTD ||
      !intersect(r, o, a->inner, a->shape, lo, cnt))
    return 0;
  int64_t first = 0, last = 0;
  for (int k = 0; k < PB_NDIM; k++) {
    first = first * a->inner[k] + (lo[k] - o[k]);
    last = last * a->inner[k] + (lo[k] + cnt[k] - 1 - o[k]);
  }
  size_t b0 = (size_t)first * a->esize, b1 = (size_t)(last + 1) * a->esize;
  if (b1 > bytes / 4 * 3) return 0;
  if (s->codec.zstd_d == NULL && (s->codec.zstd_d = ZSTD_createDCtx()) == NULL) return 0;
  ZSTD_DCtx *d = s->codec.zstd_d;
  int wlog = 10; /* a chunk's frame needs no window beyond the chunk: bounds the stream buffers */
  while (wlog < 30 && ((size_t)1 << wlog) < bytes) wlog++;
  ZSTD_DCtx_reset(d, ZSTD_reset_session_and_parameters);
  int ok = !ZSTD_isError(ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, wlog));
  ZSTD_inBuffer ib = {in, n, 0};
  ZSTD_outBuffer ob = {out, b1, 0};
  while (ok && ob.pos < ob.size) {
    size_t in0 = ib.pos, out0 = ob.pos;
    size_t k = ZSTD_decompressStream(d, &ob, &ib);
    ok = !ZSTD_isError(k) && (ib.pos != in0 || ob.pos != out0) && (k != 0 || ob.pos == ob.size);
  }
  ZSTD_DCtx_reset(d, ZSTD_reset_session_and_parameters); /* the whole decodes start clean */
  if (ok && a->pipe.big_endian && a->esize > 1) swap_bytes(out + b0, b1 - b0, a->esize);
  return ok;
}

static int place_chunk(const pb__zarr_array *a, pb__zarr_scratch *s, const unsigned char *in,
                       size_t n, const int64_t o[PB_NDIM], const pb_region *r, unsigned char *dst,
                       pb_stage_times *times, struct pb_error *err) {
  int64_t t0 = pb_now_ns();
  if (in == NULL) {
    fill_box(a, r, o, a->inner, dst);
    if (times != NULL) times->decode_ns += pb_now_ns() - t0;
    return PB_OK;
  }
  size_t bytes = a->esize;
  for (int k = 0; k < PB_NDIM; k++) bytes *= (size_t)a->inner[k];
  int stream = region_bytes(a, r) >= STREAM_MIN_BYTES;
  if (a->pipe.n == 0 && !(a->pipe.big_endian && a->esize > 1)) {
    /* uncompressed, native order: the stored bytes are the chunk, placed from where they are */
    if (n != bytes)
      return pb_error_set(err, PB_EFORMAT, "chunk holds %zu bytes, expected %zu", n, bytes);
    put_box(a, r, dst, in, o, a->inner, stream);
    if (times != NULL) times->decode_ns += pb_now_ns() - t0;
    return PB_OK;
  }
  int64_t off = direct_offset(r, o, a->inner, a->esize);
  unsigned char *target;
  if (off >= 0) {
    target = dst + off;
  } else {
    if (pb__zarr_reserve(&s->chunk, &s->chunk_cap, bytes) != PB_OK)
      return pb_error_set(err, PB_ENOMEM, "out of memory for a %zu-byte chunk", bytes);
    target = s->chunk;
  }
  int rc = PB_OK;
  if (off >= 0 || (!blosc_part(a, in, n, o, r, target, bytes, err, &rc) &&
                   !zstd_part(a, s, in, n, o, r, target, bytes)))
    rc = pb__zarr_decode(&a->pipe, a->esize, s, in, n, target, bytes, err);
  PB_RETURN_NOT_OK(rc);
  int64_t t1 = pb_now_ns();
  if (off < 0) put_box(a, r, dst, target, o, a->inner, stream);
  if (times != NULL) {
    times->decompress_ns += t1 - t0;
    times->decode_ns += pb_now_ns() - t1;
  }
  return PB_OK;
}

/* Bytes [off, off+len) of src: a pointer into memory, or read into *buf. */
static int src_get(const pb__zarr_src *src, size_t off, size_t len, unsigned char **buf,
                   size_t *cap, const unsigned char **out, pb_stage_times *times,
                   struct pb_error *err) {
  if (off > src->size || len > src->size - off)
    return pb_error_set(err, PB_EFORMAT, "bytes %zu..%zu lie beyond the end (%zu bytes)", off,
                        off + len, src->size);
  if (src->mem != NULL) {
    *out = src->mem + off;
    return PB_OK;
  }
  int64_t t0 = pb_now_ns();
  if (pb__zarr_reserve(buf, cap, len) != PB_OK)
    return pb_error_set(err, PB_ENOMEM, "out of memory for %zu bytes", len);
  PB_RETURN_NOT_OK(pb__io_pread(src->file, *buf, len, off, err));
  if (times != NULL) {
    times->read_ns += pb_now_ns() - t0;
    times->bytes_read += (int64_t)len;
  }
  *out = *buf;
  return PB_OK;
}

/* A shard the region needs whole is read in one piece up to this size (the buffer stays with the
 * handle); larger ones are read chunk by chunk. */
#define SHARD_READ_MAX ((size_t)64 << 20)

static int place_shard(const pb__zarr_array *a, pb__zarr_scratch *s, const pb__zarr_src *src,
                       const int64_t so[PB_NDIM], const pb_region *r, unsigned char *dst,
                       pb_stage_times *times, struct pb_error *err) {
  int64_t m[PB_NDIM], ms[PB_NDIM], lo[PB_NDIM], cnt[PB_NDIM];
  size_t total = 1;
  for (int k = 0; k < PB_NDIM; k++) {
    m[k] = a->chunk[k] / a->inner[k];
    total *= (size_t)m[k];
  }
  ms[PB_NDIM - 1] = 1;
  for (int k = PB_NDIM - 2; k >= 0; k--) ms[k] = ms[k + 1] * m[k + 1];
  size_t idx_bytes = 16 * total + (a->index_crc ? 4 : 0), chunk_bytes = a->esize;
  for (int k = 0; k < PB_NDIM; k++) chunk_bytes *= (size_t)a->inner[k];
  if (src->size < idx_bytes)
    return pb_error_set(err, PB_EFORMAT, "shard holds %zu bytes, less than its %zu-byte index",
                        src->size, idx_bytes);
  if (!intersect(r, so, a->chunk, a->shape, lo, cnt)) return PB_OK;
  int whole = 1; /* does the region need every inner chunk of the shard? */
  for (int k = 0; k < PB_NDIM; k++) {
    int64_t end = so[k] + a->chunk[k] < a->shape[k] ? so[k] + a->chunk[k] : a->shape[k];
    whole = whole && lo[k] == so[k] && lo[k] + cnt[k] == end;
  }
  pb__zarr_src all;
  if (whole && src->mem == NULL && src->size <= SHARD_READ_MAX) {
    /* then the whole file, index and chunks, in one pread */
    const unsigned char *p;
    PB_RETURN_NOT_OK(src_get(src, 0, src->size, &s->shard, &s->shard_cap, &p, times, err));
    all = (pb__zarr_src){NULL, p, src->size};
    src = &all;
  }
  int stream = region_bytes(a, r) >= STREAM_MIN_BYTES;
  const unsigned char *idx;
  PB_RETURN_NOT_OK(src_get(src, a->index_at_end ? src->size - idx_bytes : 0, idx_bytes, &s->index,
                           &s->index_cap, &idx, times, err));
  if (a->index_crc) {
    uint32_t want = le32(idx + 16 * total), got = pb__crc32c(0, idx, 16 * total);
    if (want != got)
      return pb_error_set(err, PB_EFORMAT,
                          "shard index checksum mismatch (stored %08x, computed %08x)", want, got);
  }
  int64_t h0[PB_NDIM], h1[PB_NDIM], h[PB_NDIM];
  for (int k = 0; k < PB_NDIM; k++) {
    h0[k] = (lo[k] - so[k]) / a->inner[k];
    h1[k] = (lo[k] + cnt[k] - 1 - so[k]) / a->inner[k];
    h[k] = h0[k];
  }
  for (;;) {
    int64_t lin = 0, o[PB_NDIM];
    for (int k = 0; k < PB_NDIM; k++) {
      lin += h[k] * ms[k];
      o[k] = so[k] + h[k] * a->inner[k];
    }
    uint64_t off = u64_at(idx + 16 * lin, a->index_big_endian);
    uint64_t nb = u64_at(idx + 16 * lin + 8, a->index_big_endian);
    int rc;
    if (off == UINT64_MAX && nb == UINT64_MAX) {
      rc = place_chunk(a, s, NULL, 0, o, r, dst, times, err);
    } else if (off > src->size || nb > src->size - off) {
      rc = pb_error_set(err, PB_EFORMAT,
                        "inner chunk %lld: bytes %llu+%llu lie outside the %zu-byte shard",
                        (long long)lin, (unsigned long long)off, (unsigned long long)nb, src->size);
    } else if (a->pipe.n == 0 && src->mem == NULL && nb == chunk_bytes &&
               (!stream || !inside(r, o, a->inner))) {
      /* uncompressed: its rows (or the part a crop needs) straight into dst */
      rc = read_rows(a, s, src->file, off, o, r, dst, times, err);
      if (rc != PB_OK) pb_error_prefix(err, "inner chunk %lld: ", (long long)lin);
    } else {
      const unsigned char *p;
      rc = src_get(src, (size_t)off, (size_t)nb, &s->file, &s->file_cap, &p, times, err);
      if (rc == PB_OK) rc = place_chunk(a, s, p, (size_t)nb, o, r, dst, times, err);
      if (rc != PB_OK) pb_error_prefix(err, "inner chunk %lld: ", (long long)lin);
    }
    if (rc != PB_OK) return rc;
    int k = PB_NDIM - 1;
    while (k >= 0 && ++h[k] > h1[k]) {
      h[k] = h0[k];
      k--;
    }
    if (k < 0) break;
  }
  return PB_OK;
}

int pb__zarr_place_unit(const pb__zarr_array *a, pb__zarr_scratch *s, const pb__zarr_src *src,
                        const int64_t g[PB_NDIM], const pb_region *region, unsigned char *dst,
                        pb_stage_times *times, struct pb_error *err) {
  int64_t o[PB_NDIM];
  for (int k = 0; k < PB_NDIM; k++) o[k] = g[k] * a->chunk[k];
  if (src == NULL) {
    int64_t t0 = pb_now_ns();
    fill_box(a, region, o, a->chunk, dst);
    if (times != NULL) times->decode_ns += pb_now_ns() - t0;
    return PB_OK;
  }
  if (a->sharded) return place_shard(a, s, src, o, region, dst, times, err);
  size_t bytes = a->esize;
  for (int k = 0; k < PB_NDIM; k++) bytes *= (size_t)a->inner[k];
  if (a->pipe.n == 0 && src->mem == NULL && src->size == bytes) {
    /* uncompressed: its rows straight into dst, or the part a crop needs */
    if (!inside(region, o, a->inner) || region_bytes(a, region) < STREAM_MIN_BYTES)
      return read_rows(a, s, src->file, 0, o, region, dst, times, err);
  }
  const unsigned char *p;
  PB_RETURN_NOT_OK(src_get(src, 0, src->size, &s->file, &s->file_cap, &p, times, err));
  return place_chunk(a, s, p, src->size, o, region, dst, times, err);
}

void pb__zarr_fill_units(const pb__zarr_array *a, const int64_t g[PB_NDIM], int64_t nx,
                         const pb_region *region, unsigned char *dst) {
  int64_t o[PB_NDIM], n[PB_NDIM];
  for (int k = 0; k < PB_NDIM; k++) {
    o[k] = g[k] * a->chunk[k];
    n[k] = a->chunk[k];
  }
  n[PB_X] *= nx;
  fill_box(a, region, o, n, dst);
}
