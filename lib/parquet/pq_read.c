/* Direct page reads of one Parquet leaf column (see pq_read.h). Written from the Parquet format
 * specification: PageHeader and its page headers in Thrift's compact protocol, the
 * RLE/bit-packed hybrid for levels and dictionary indices, PLAIN values. Pages are decompressed
 * through the codec table (lib/codecs). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "codecs/codec.h"
#include "common/checked.h"
#include "common/duck_msg.h"
#include "common/strbuf.h"
#include "common/vec.h"
#include "parquet/pq_footer.h"
#include "io/io.h"
#include "io/le.h"
#include "parquet/pq_read.h"

enum { PT_DATA = 0, PT_INDEX = 1, PT_DICT = 2, PT_DATA_V2 = 3 };
enum { EN_PLAIN = 0, EN_PLAIN_DICT = 2, EN_RLE = 3, EN_RLE_DICT = 8 };
#define PQ_MAX_PAGE ((int64_t)1 << 30) /* refuse pages over 1 GiB (corrupt sizes) */
#define PQ_KEEP ((size_t)16 << 20)      /* what a column keeps of its pages' levels, at most */
#define PQ_WIN ((int64_t)16 << 10)      /* column chunks up to this size are read in one go */

/* ---- Thrift compact protocol: just enough for page headers -------------------------------- */

typedef struct tc {
  const uint8_t *p, *end;
  int bad, eof; /* eof: ran out of bytes (the caller may retry with more) */
} tc;

static void tc_fail(tc *t, int eof) {
  t->bad = 1;
  if (eof) t->eof = 1;
}

static uint64_t tc_uvar(tc *t) {
  uint64_t v = 0;
  for (int s = 0; s < 70; s += 7) {
    if (t->p >= t->end) {
      tc_fail(t, 1);
      return 0;
    }
    uint8_t b = *t->p++;
    if (s < 64) v |= (uint64_t)(b & 0x7f) << s;
    if ((b & 0x80) == 0) return v;
  }
  tc_fail(t, 0);
  return 0;
}

static int64_t tc_int(tc *t) {
  uint64_t v = tc_uvar(t);
  return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static int32_t tc_i32(tc *t) {
  int64_t v = tc_int(t);
  if (v < INT32_MIN || v > INT32_MAX) tc_fail(t, 0);
  return (int32_t)v;
}

static void tc_skip(tc *t, int type, int depth);

static void tc_skip_struct(tc *t, int depth) {
  if (depth > 32) {
    tc_fail(t, 0);
    return;
  }
  while (!t->bad) {
    if (t->p >= t->end) {
      tc_fail(t, 1);
      return;
    }
    uint8_t h = *t->p++;
    if (h == 0) return;
    if ((h >> 4) == 0) tc_int(t);
    tc_skip(t, h & 15, depth + 1);
  }
}

static void tc_bytes(tc *t, uint64_t n) {
  if (n > (uint64_t)(t->end - t->p)) tc_fail(t, 1);
  else t->p += n;
}

static void tc_skip(tc *t, int type, int depth) {
  if (depth > 32) {
    tc_fail(t, 0);
    return;
  }
  switch (type) {
  case 1: case 2: return; /* a boolean field carries its value in the type */
  case 3: tc_bytes(t, 1); return;
  case 4: case 5: case 6: tc_uvar(t); return;
  case 7: tc_bytes(t, 8); return;
  case 8: tc_bytes(t, tc_uvar(t)); return;
  case 9: case 10: {
    if (t->p >= t->end) {
      tc_fail(t, 1);
      return;
    }
    uint8_t h = *t->p++;
    uint64_t n = h >> 4;
    int et = h & 15;
    if (n == 15) n = tc_uvar(t);
    if (n > (uint64_t)(t->end - t->p)) { /* every element takes at least one byte */
      tc_fail(t, 1);
      return;
    }
    for (uint64_t k = 0; k < n && !t->bad; k++) {
      if (et == 1 || et == 2) tc_bytes(t, 1);
      else tc_skip(t, et, depth + 1);
    }
    return;
  }
  case 11: {
    uint64_t n = tc_uvar(t);
    if (n == 0 || t->bad) return;
    if (t->p >= t->end || n > (uint64_t)(t->end - t->p)) {
      tc_fail(t, 1);
      return;
    }
    uint8_t kv = *t->p++;
    for (uint64_t k = 0; k < n && !t->bad; k++) {
      int kt = kv >> 4, vt = kv & 15;
      if (kt == 1 || kt == 2) tc_bytes(t, 1);
      else tc_skip(t, kt, depth + 1);
      if (vt == 1 || vt == 2) tc_bytes(t, 1);
      else tc_skip(t, vt, depth + 1);
    }
    return;
  }
  case 12: tc_skip_struct(t, depth + 1); return;
  default: tc_fail(t, 0); return;
  }
}

/* Reads a field header: 0 at the struct's end, else 1 with *id and *type. */
static int tc_field(tc *t, int *last, int *id, int *type) {
  if (t->p >= t->end) {
    tc_fail(t, 1);
    return 0;
  }
  uint8_t h = *t->p++;
  if (h == 0) return 0;
  *type = h & 15;
  if ((h >> 4) == 0) {
    int64_t v = tc_int(t);
    if (v < INT16_MIN || v > INT16_MAX) tc_fail(t, 0);
    *id = (int)v;
  } else {
    *id = *last + (h >> 4);
  }
  *last = *id;
  return !t->bad;
}

typedef struct pq_hdr {
  int type;
  int32_t usize, csize;
  int32_t num_values, enc, def_enc, rep_enc;
  int32_t v2_rows, v2_def_len, v2_rep_len;
  int v2_compressed;
  int has_data, has_dict, has_v2;
  size_t hlen;
} pq_hdr;

static int is_int(int type) { return type >= 3 && type <= 6; }

/* DataPageHeader (1 num_values, 2 encoding, 3 definition_level_encoding,
 * 4 repetition_level_encoding), DictionaryPageHeader (1 num_values, 2 encoding) and
 * DataPageHeaderV2 (1 num_values, 3 num_rows, 4 encoding, 5 definition_levels_byte_length,
 * 6 repetition_levels_byte_length, 7 is_compressed). */
static void parse_sub(tc *t, pq_hdr *h, int which, int depth) {
  int last = 0, id, type;
  while (!t->bad && tc_field(t, &last, &id, &type)) {
    int32_t *dst = NULL;
    if (which == 5) {
      if (id == 1) dst = &h->num_values;
      else if (id == 2) dst = &h->enc;
      else if (id == 3) dst = &h->def_enc;
      else if (id == 4) dst = &h->rep_enc;
    } else if (which == 7) {
      if (id == 1) dst = &h->num_values;
      else if (id == 2) dst = &h->enc;
    } else {
      if (id == 1) dst = &h->num_values;
      else if (id == 3) dst = &h->v2_rows;
      else if (id == 4) dst = &h->enc;
      else if (id == 5) dst = &h->v2_def_len;
      else if (id == 6) dst = &h->v2_rep_len;
      else if (id == 7 && (type == 1 || type == 2)) {
        h->v2_compressed = type == 1;
        continue;
      }
    }
    if (dst != NULL && is_int(type)) *dst = tc_i32(t);
    else tc_skip(t, type, depth + 1);
  }
}

/* Parses a PageHeader at the start of buf. 0: parsed; 1: needs more bytes; -1: malformed. */
static int parse_header(const uint8_t *buf, size_t n, pq_hdr *h) {
  memset(h, 0, sizeof *h);
  h->type = h->usize = h->csize = h->num_values = -1;
  h->enc = h->def_enc = h->rep_enc = -1;
  h->v2_rows = h->v2_def_len = h->v2_rep_len = -1;
  h->v2_compressed = 1;
  tc t = {buf, buf + n, 0, 0};
  int last = 0, id, type;
  while (!t.bad && tc_field(&t, &last, &id, &type)) {
    if (id == 1 && is_int(type)) h->type = tc_i32(&t);
    else if (id == 2 && is_int(type)) h->usize = tc_i32(&t);
    else if (id == 3 && is_int(type)) h->csize = tc_i32(&t);
    else if ((id == 5 || id == 7 || id == 8) && type == 12) {
      parse_sub(&t, h, id, 1);
      if (id == 5) h->has_data = 1;
      else if (id == 7) h->has_dict = 1;
      else h->has_v2 = 1;
    } else {
      tc_skip(&t, type, 1);
    }
  }
  if (t.bad) return t.eof ? 1 : -1;
  h->hlen = (size_t)(t.p - buf);
  if (h->type < 0 || h->usize < 0 || h->csize < 0) return -1;
  if (h->type == PT_DATA && (!h->has_data || h->num_values < 0)) return -1;
  if (h->type == PT_DICT && (!h->has_dict || h->num_values < 0)) return -1;
  if (h->type == PT_DATA_V2 &&
      (!h->has_v2 || h->num_values < 0 || h->v2_rows < 0 || h->v2_def_len < 0 ||
       h->v2_rep_len < 0 || (int64_t)h->v2_def_len + h->v2_rep_len > h->csize ||
       (int64_t)h->v2_def_len + h->v2_rep_len > h->usize))
    return -1;
  return 0;
}

/* ---- codecs ------------------------------------------------------------------------------- */

/* The codec table's id for a Parquet codec number (open refuses the others). */
static pb__codec_id codec_of(int pq_codec) {
  switch (pq_codec) {
    case PB__PQ_SNAPPY: return PB__CODEC_SNAPPY;
    case PB__PQ_GZIP: return PB__CODEC_GZIP;
    case PB__PQ_ZSTD: return PB__CODEC_ZSTD;
    case PB__PQ_LZ4_RAW: return PB__CODEC_LZ4_RAW;
    default: return PB__CODEC_NONE;
  }
}

/* ---- RLE/bit-packed hybrid ---------------------------------------------------------------- */

typedef struct lv_it {
  const uint8_t *p, *end;
  int bw;
  uint64_t left;   /* values left in the current run */
  int packed;
  uint32_t value;  /* RLE run's value */
  const uint8_t *bp, *bp_end;
  uint64_t bp_i;   /* next index in the bit-packed run */
  int bad;
} lv_it;

static void lv_init(lv_it *it, const uint8_t *p, size_t n, int bw) {
  memset(it, 0, sizeof *it);
  it->p = p;
  it->end = p + n;
  it->bw = bw;
}

static int lv_load(lv_it *it) {
  while (it->left == 0) {
    if (it->bad || it->p >= it->end) {
      it->bad = 1;
      return -1;
    }
    uint64_t h = 0;
    int sh = 0;
    for (;;) {
      if (it->p >= it->end || sh > 35) {
        it->bad = 1;
        return -1;
      }
      uint8_t b = *it->p++;
      h |= (uint64_t)(b & 0x7f) << sh;
      sh += 7;
      if ((b & 0x80) == 0) break;
    }
    if (h & 1) {
      uint64_t bytes = (h >> 1) * (uint64_t)it->bw, avail = (uint64_t)(it->end - it->p);
      if (bytes > avail) bytes = avail; /* a short last run: use what is there */
      it->packed = 1;
      it->bp = it->p;
      it->bp_end = it->p + bytes;
      it->bp_i = 0;
      it->left = it->bw > 0 ? bytes * 8 / (uint64_t)it->bw : (h >> 1) * 8;
      it->p += bytes;
    } else {
      size_t nb = ((size_t)it->bw + 7) / 8;
      if ((size_t)(it->end - it->p) < nb) {
        it->bad = 1;
        return -1;
      }
      uint32_t v = 0;
      for (size_t k = 0; k < nb; k++) v |= (uint32_t)it->p[k] << (8 * k);
      it->p += nb;
      it->packed = 0;
      it->value = v;
      it->left = h >> 1;
    }
  }
  return 0;
}

static uint32_t lv_bit_value(const lv_it *it) {
  if (it->bw == 0) return 0;
  if (it->bw <= 8 && (8 % it->bw) == 0) { /* 1, 2, 4, 8 bits: never straddles a byte */
    uint64_t bit = it->bp_i * (uint64_t)it->bw;
    const uint8_t *q = it->bp + bit / 8;
    return q < it->bp_end ? (uint32_t)(*q >> (bit % 8)) & ((1u << it->bw) - 1) : 0;
  }
  uint64_t bit = it->bp_i * (uint64_t)it->bw;
  uint64_t v = 0;
  size_t at = (size_t)(bit / 8), need = (size_t)((bit % 8 + (uint64_t)it->bw + 7) / 8);
  for (size_t k = 0; k < need && it->bp + at + k < it->bp_end; k++)
    v |= (uint64_t)it->bp[at + k] << (8 * k);
  v >>= bit % 8;
  return (uint32_t)(v & ((it->bw >= 32) ? 0xffffffffu : ((1u << it->bw) - 1)));
}

/* The current value and how many equal values follow (a bit-packed run reports one at a time). */
static int lv_peek(lv_it *it, uint32_t *v, uint64_t *n) {
  if (lv_load(it) != 0) return -1;
  if (it->packed) {
    *v = lv_bit_value(it);
    *n = 1;
  } else {
    *v = it->value;
    *n = it->left;
  }
  return 0;
}

static void lv_skip(lv_it *it, uint64_t n) {
  it->left -= n;
  if (it->packed) it->bp_i += n;
}

/* Skips n values, counting those equal to v into *count. */
static int lv_count(lv_it *it, uint64_t n, uint32_t v, uint64_t *count) {
  while (n > 0) {
    if (lv_load(it) != 0) return -1;
    uint64_t m = it->left < n ? it->left : n;
    if (it->packed) {
      for (uint64_t k = 0; k < m; k++, it->bp_i++) *count += lv_bit_value(it) == v;
      it->left -= m;
    } else {
      if (it->value == v) *count += m;
      it->left -= m;
    }
    n -= m;
  }
  return 0;
}

static int bits_for(int max) {
  int b = 0;
  while (max > 0) {
    b++;
    max >>= 1;
  }
  return b;
}

/* ---- the column --------------------------------------------------------------------------- */

typedef struct pq_page {
  int64_t off;         /* page header */
  pq_hdr h;
  int64_t rows_before; /* rows that start in earlier pages of the chunk */
  int64_t starts;      /* rows that start in this page */
  int cont;            /* its first entry continues a row of the previous page */
  /* Pages read with pread, uncompressed and PLAIN: what their first load learnt, kept so that
   * a later read of the page reads only the values it needs, with one system call. lv: the
   * repetition then the definition level sections (NULL until the first load); vals_at: where
   * the values start in the file; voff (byte arrays): where each value's 4-byte length lies,
   * relative to vals_at, n_voff values and one past the last. */
  uint8_t *lv;
  size_t rep_n, def_n, vals_n, n_voff;
  int64_t vals_at;
  uint32_t *voff;
} pq_page;

typedef struct pq_rg {
  int64_t first_row, n_rows, start, size;
  int64_t dict_off;    /* -1: none found */
  pq_hdr dict_h;
  pq_page *pages;
  size_t n_pages;
  int built;
} pq_rg;

/* The bytes a page needs: from the file mapped read-only (read option map 1: pages are decoded
 * straight from the page cache, with no copy and no system call but one fstat per read), from
 * the file through the I/O layer (the default, or where mapping fails), or from memory
 * (fuzzing: file NULL). */
typedef struct pq_src {
  pb__io_file *file;
  const uint8_t *mem; /* the file's mapping (released with the file), or the fuzzer's bytes */
  int64_t size;
} pq_src;

struct pb__pq_col {
  pq_src src;
  int physical, codec, max_rep, max_def, def_rep1;
  size_t width;
  char converted[32];
  pq_rg *rgs;
  size_t n_rgs;
  int64_t n_rows;
  /* the page last loaded */
  int64_t pc_off;
  uint8_t *buf, *in;
  size_t buf_cap, in_cap;
  /* A small column chunk read whole by its first page header's read (pread only): the pages'
   * stored bytes are then taken from it for decompression, one read per chunk instead of two
   * per page (files of many small row groups). Bytes at [win_off, win_off + win_n). */
  uint8_t *win;
  size_t win_cap, win_n;
  int64_t win_off;
  const uint8_t *rep, *def, *vals;
  size_t rep_n, def_n, vals_n;
  int64_t vals_file; /* values not loaded (uncompressed PLAIN fixed width): where they start */
  const uint32_t *voff; /* values not loaded (uncompressed PLAIN byte arrays): their offsets */
  size_t n_voff;
  size_t kept;          /* bytes the pages keep (pq_page.lv, voff), at most PQ_KEEP */
  /* the dictionary last loaded */
  int64_t dict_rg;
  uint8_t *dict;
  size_t dict_cap, dict_count;
  size_t *dict_off;
  size_t dict_off_cap;
  /* one zstd context and zlib stream per column, kept between pages: setting a zstd context up
   * costs about as much as decoding a 20 kB page */
  pb__codec_ctx codec_ctx;
  /* Where the last read stopped inside the loaded page (the next row's levels and how many
   * values come before it), so that reading the following row does not scan the page's
   * levels from the start again (sequential reads of many-row pages). */
  int res_ok;
  size_t res_g;
  int64_t res_row, res_off;
  lv_it res_ri, res_di;
  uint64_t res_e, res_v;
};

static int src_read(const pq_src *s, int64_t off, void *dst, size_t n) {
  if (off < 0 || (uint64_t)off > (uint64_t)s->size || n > (uint64_t)(s->size - off)) return -1;
  if (s->mem != NULL) {
    if (n > 0) memcpy(dst, s->mem + off, n);
    return 0;
  }
  return pb__io_pread(s->file, dst, n, (uint64_t)off, NULL) == PB_OK ? 0 : -1;
}

/* The n bytes at off where the source holds them in memory, else NULL (also when out of
 * bounds: the caller's src_read then reports the short file). */
static const uint8_t *src_view(const pq_src *s, int64_t off, size_t n) {
  if (s->mem == NULL || off < 0 || (uint64_t)off > (uint64_t)s->size ||
      n > (uint64_t)(s->size - off))
    return NULL;
  return s->mem + off;
}

/* Room for n bytes in a byte buffer. */
static int need_buf(uint8_t **p, size_t *cap, size_t n) {
  return pb__vec_reserve((void **)p, cap, n, 1);
}

void pb__pq_rows_clear(pb__pq_rows *r) {
  r->n_rows = r->n_elems = r->n_vals = r->n_data = 0;
  r->borrowed = NULL;
}

/* Copies borrowed values into r's own buffer (before anything else is appended, and before
 * the page they lie in may be replaced). */
static int unborrow(pb__pq_rows *r) {
  if (r->borrowed == NULL) return 0;
  const unsigned char *b = r->borrowed;
  r->borrowed = NULL;
  if (need_buf(&r->data, &r->cap_data, r->n_data + 1) != 0) return -1;
  if (r->n_data > 0) memcpy(r->data, b, r->n_data);
  return 0;
}

void pb__pq_rows_destroy(pb__pq_rows *r) {
  if (r == NULL) return;
  free(r->row_elem);
  free(r->elem_val);
  free(r->elem_nulls);
  free(r->data);
  free(r->val_off);
  memset(r, 0, sizeof *r);
}

static int rows_reserve(pb__pq_rows *r) {
  if (pb__vec_reserve((void **)&r->row_elem, &r->cap_rows, r->n_rows + 2, sizeof *r->row_elem) != 0)
    return -1;
  return 0;
}

void pb__pq_free(pb__pq_col *c) {
  if (c == NULL) return;
  pb__io_close(c->src.file); /* and its mapping */
  for (size_t g = 0; g < c->n_rgs; g++) {
    for (size_t k = 0; k < c->rgs[g].n_pages; k++) {
      free(c->rgs[g].pages[k].lv);
      free(c->rgs[g].pages[k].voff);
    }
    free(c->rgs[g].pages);
  }
  free(c->rgs);
  free(c->buf);
  free(c->in);
  free(c->win);
  free(c->dict);
  free(c->dict_off);
  pb__codec_ctx_destroy(&c->codec_ctx);
  free(c);
}

int pb__pq_physical(const pb__pq_col *c) { return c->physical; }
const char *pb__pq_converted(const pb__pq_col *c) { return c->converted; }
int64_t pb__pq_row_count(const pb__pq_col *c) { return c->n_rows; }

size_t pb__pq_row_groups(const pb__pq_col *c, int64_t *first) {
  if (first != NULL) {
    for (size_t g = 0; g < c->n_rgs; g++) first[g] = c->rgs[g].first_row;
    first[c->n_rgs] = c->n_rows;
  }
  return c->n_rgs;
}

static int perr(struct pb_error *err, size_t g, int64_t off, const char *what) {
  return pb_error_set(err, PB_EFORMAT, "row group %zu, page at byte %lld: %s", g, (long long)off,
                      what);
}

/* The n stored bytes at off (of the page or dictionary page at `page`): where they lie in the
 * mapped file, else read into c->in. */
static int stored_bytes(pb__pq_col *c, size_t g, int64_t page, int64_t off, size_t n,
                        const uint8_t **out, struct pb_error *err) {
  *out = src_view(&c->src, off, n);
  if (*out != NULL) return PB_OK;
  if (c->win_n > 0 && off >= c->win_off && (uint64_t)(off - c->win_off) <= c->win_n &&
      n <= c->win_n - (size_t)(off - c->win_off)) {
    *out = c->win + (off - c->win_off);
    return PB_OK;
  }
  if (need_buf(&c->in, &c->in_cap, n + 1) != 0)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  if (src_read(&c->src, off, c->in, n) != 0)
    return perr(err, g, page, "cannot read the page (file truncated?)");
  *out = c->in;
  return PB_OK;
}

/* Decompresses the page (or its values) at `page` into exactly dn bytes; the error names the
 * codec and what it said. */
static int decompress(pb__pq_col *c, int pq_codec, size_t g, int64_t page, const uint8_t *src,
                      size_t n, uint8_t *dst, size_t dn, const char *what,
                      struct pb_error *err) {
  struct pb_error why;
  if (pb__codec_decode_exact(&c->codec_ctx, codec_of(pq_codec), src, n, dst, dn, &why) == PB_OK)
    return PB_OK;
  char m[sizeof why.message + 64];
  snprintf(m, sizeof m, "cannot decompress the %s (%s)", what, why.message);
  return perr(err, g, page, m);
}

/* Reads and parses the page header at off (within the chunk ending at end). */
static int read_header(pb__pq_col *c, size_t g, int64_t off, int64_t end, pq_hdr *h,
                       struct pb_error *err) {
  uint8_t small[256];
  size_t n = 256;
  for (;;) {
    int64_t avail = end - off;
    if (avail <= 0) return perr(err, g, off, "page header lies outside the column chunk");
    size_t take = (int64_t)n < avail ? n : (size_t)avail;
    const uint8_t *b = src_view(&c->src, off, take);
    if (b == NULL && c->win_n > 0 && off >= c->win_off &&
        (uint64_t)(off - c->win_off) + take <= c->win_n)
      b = c->win + (off - c->win_off);
    if (b == NULL && c->src.mem == NULL && avail <= PQ_WIN) { /* the rest of a small chunk */
      c->win_n = 0;
      if (need_buf(&c->win, &c->win_cap, (size_t)avail) != 0)
        return pb_error_set(err, PB_ENOMEM, "out of memory");
      if (src_read(&c->src, off, c->win, (size_t)avail) != 0)
        return perr(err, g, off, "cannot read the page header (file truncated?)");
      c->win_off = off;
      c->win_n = (size_t)avail;
      b = c->win;
    }
    if (b == NULL) {
      uint8_t *d = small;
      if (take > sizeof small) {
        if (need_buf(&c->in, &c->in_cap, take) != 0)
          return pb_error_set(err, PB_ENOMEM, "out of memory");
        d = c->in;
      }
      if (src_read(&c->src, off, d, take) != 0)
        return perr(err, g, off, "cannot read the page header (file truncated?)");
      b = d;
    }
    int rc = parse_header(b, take, h);
    if (rc == 0) break;
    if (rc < 0 || (int64_t)take == avail || n >= ((size_t)1 << 24))
      return perr(err, g, off, "malformed page header");
    n *= 16;
  }
  if ((int64_t)h->hlen + h->csize > end - off)
    return perr(err, g, off, "page runs past the end of its column chunk");
  if (h->usize > PQ_MAX_PAGE) return perr(err, g, off, "page larger than 1 GiB");
  return PB_OK;
}

static int load_page(pb__pq_col *c, size_t g, pq_page *p, struct pb_error *err);

/* Counts the rows that start in a v1 page of a nested column (entries with repetition 0). */
static int count_starts(pb__pq_col *c, size_t g, pq_page *p, struct pb_error *err) {
  PB_RETURN_NOT_OK(load_page(c, g, p, err));
  lv_it it;
  lv_init(&it, c->rep, c->rep_n, bits_for(c->max_rep));
  uint64_t zeros = 0, n = (uint64_t)p->h.num_values;
  uint32_t v;
  uint64_t len;
  if (n > 0) {
    if (lv_peek(&it, &v, &len) != 0) return perr(err, g, p->off, "bad repetition levels");
    p->cont = v != 0;
  }
  if (lv_count(&it, n, 0, &zeros) != 0) return perr(err, g, p->off, "bad repetition levels");
  p->starts = (int64_t)zeros;
  return PB_OK;
}

/* Walks the page headers of row group g once: dictionary page, data pages and their rows. */
static int build_rg(pb__pq_col *c, size_t g, struct pb_error *err) {
  pq_rg *rg = &c->rgs[g];
  if (rg->built) return PB_OK;
  int64_t off = rg->start, end;
  if (!pb__add_i64_ok(rg->start, rg->size, &end))
    return perr(err, g, rg->start, "column chunk size runs past any file");
  if (end > c->src.size) end = c->src.size;
  for (size_t k = 0; k < rg->n_pages; k++) { /* what an earlier, failed build kept goes */
    pq_page *p = &rg->pages[k];
    if (p->lv == NULL) continue;
    c->kept -= p->rep_n + p->def_n + 1 + (p->voff != NULL ? (p->n_voff + 1) * sizeof *p->voff : 0);
    free(p->lv);
    free(p->voff);
    p->lv = NULL;
    p->voff = NULL;
    c->pc_off = -1; /* the loaded page may have been one of them */
  }
  size_t cap = 0;
  rg->dict_off = -1;
  rg->n_pages = 0;
  while (off < end) {
    pq_hdr h;
    PB_RETURN_NOT_OK(read_header(c, g, off, end, &h, err));
    if (h.type == PT_DICT) {
      if (rg->n_pages > 0 || rg->dict_off >= 0)
        return perr(err, g, off, "dictionary page after data pages");
      rg->dict_off = off;
      rg->dict_h = h;
    } else if (h.type == PT_DATA || h.type == PT_DATA_V2) {
      /* grown from one page, not pb__vec_reserve's 16: a file of thousands of small row
       * groups has one page per column chunk, and 16 pages' room in each of them took more
       * memory than anything else at open */
      if (rg->n_pages == cap) {
        size_t ncap = cap ? cap * 2 : 1;
        void *q = ncap < SIZE_MAX / 2 / sizeof *rg->pages
                      ? realloc(rg->pages, ncap * sizeof *rg->pages)
                      : NULL;
        if (q == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
        rg->pages = q;
        cap = ncap;
      }
      pq_page *p = &rg->pages[rg->n_pages++];
      memset(p, 0, sizeof *p);
      p->off = off;
      p->h = h;
    }
    off += (int64_t)h.hlen + h.csize; /* read_header keeps it inside [off, end] */
  }
  int64_t rows = 0;
  for (size_t k = 0; k < rg->n_pages; k++) {
    pq_page *p = &rg->pages[k];
    p->rows_before = rows;
    if (c->max_rep == 0) p->starts = p->h.num_values;
    else if (p->h.type == PT_DATA_V2) p->starts = p->h.v2_rows;
    else if (rg->n_pages == 1 && rg->n_rows >= 0) p->starts = rg->n_rows;
    else PB_RETURN_NOT_OK(count_starts(c, g, p, err));
    if (p->starts < 0 || !pb__add_i64_ok(rows, p->starts, &rows))
      return perr(err, g, p->off, "row count of the pages overflows");
  }
  if (rg->n_rows >= 0 && rows != rg->n_rows) {
    char m[128];
    snprintf(m, sizeof m, "pages hold %lld rows, the footer says %lld", (long long)rows,
             (long long)rg->n_rows);
    return perr(err, g, rg->start, m);
  }
  rg->n_rows = rows;
  rg->built = 1;
  return PB_OK;
}

#define le32 pb__le32

/* Splits a v1 page body into its level sections; returns the bytes they take, or -1. */
static int64_t v1_levels(pb__pq_col *c, const uint8_t *b, size_t n) {
  size_t at = 0;
  c->rep = c->def = b;
  c->rep_n = c->def_n = 0;
  if (c->max_rep > 0) {
    if (n - at < 4) return -1;
    uint32_t l = le32(b + at);
    at += 4;
    if (l > n - at) return -1;
    c->rep = b + at;
    c->rep_n = l;
    at += l;
  }
  if (c->max_def > 0) {
    if (n - at < 4) return -1;
    uint32_t l = le32(b + at);
    at += 4;
    if (l > n - at) return -1;
    c->def = b + at;
    c->def_n = l;
    at += l;
  }
  return (int64_t)at;
}

/* Whether the page's levels and value offsets are kept after its first load: pages read with
 * pread, uncompressed, PLAIN. */
static int keeps(const pb__pq_col *c, const pq_hdr *h) {
  if (c->src.mem != NULL || h->enc != EN_PLAIN) return 0;
  if (h->type == PT_DATA) return c->codec == PB__PQ_UNCOMPRESSED;
  return !h->v2_compressed || c->codec == PB__PQ_UNCOMPRESSED;
}

/* After the first load of a page that keeps(): copies its level sections and, for byte arrays,
 * notes where each value lies, within the column's budget (PQ_KEEP). The values of such a page
 * lie in the file as they are in c->buf (vals_at: where c->vals starts in the file). A page
 * whose values do not parse is not kept: take_values reports it from the loaded page. */
static void keep_page(pb__pq_col *c, pq_page *p, int64_t vals_at) {
  if (p->lv != NULL || !keeps(c, &p->h)) return;
  size_t lvn = c->rep_n + c->def_n, nv = 0;
  if (c->width == 0) {
    if (c->vals == NULL || c->vals_n > UINT32_MAX) return;
    for (size_t at = 0; at < c->vals_n; nv++) {
      if (c->vals_n - at < 4) return;
      uint32_t l = le32(c->vals + at);
      if (l > c->vals_n - at - 4) return;
      at += 4 + (size_t)l;
    }
  }
  size_t bytes = lvn + 1 + (c->width == 0 ? (nv + 1) * sizeof(uint32_t) : 0);
  if (bytes > PQ_KEEP - c->kept) return;
  uint8_t *lv = malloc(lvn + 1);
  uint32_t *voff = c->width == 0 ? malloc((nv + 1) * sizeof *voff) : NULL;
  if (lv == NULL || (c->width == 0 && voff == NULL)) {
    free(lv);
    free(voff);
    return;
  }
  if (voff != NULL) {
    size_t at = 0;
    for (size_t k = 0; k < nv; k++) {
      voff[k] = (uint32_t)at;
      at += 4 + (size_t)le32(c->vals + at);
    }
    voff[nv] = (uint32_t)at;
  }
  if (c->rep_n > 0) memcpy(lv, c->rep, c->rep_n);
  if (c->def_n > 0) memcpy(lv + c->rep_n, c->def, c->def_n);
  p->lv = lv;
  p->rep_n = c->rep_n;
  p->def_n = c->def_n;
  p->vals_n = c->vals_n;
  p->vals_at = vals_at;
  p->voff = voff;
  p->n_voff = nv;
  c->kept += bytes;
}

/* A page whose levels were kept from its first load: nothing to read now. */
static void use_kept_page(pb__pq_col *c, const pq_page *p) {
  c->rep = p->lv;
  c->rep_n = p->rep_n;
  c->def = p->lv + p->rep_n;
  c->def_n = p->def_n;
  c->vals = NULL;
  c->vals_file = p->vals_at;
  c->vals_n = p->vals_n;
  c->voff = p->voff;
  c->n_voff = p->n_voff;
  c->pc_off = p->off;
}

/* A version 1 data page: levels and values together, compressed as one. Sets c->vals (or
 * c->vals_file) and the level sections. */
static int load_page_v1(pb__pq_col *c, size_t g, const pq_page *p, const uint8_t *view,
                        int64_t data, int fixed_plain, struct pb_error *err) {
  const pq_hdr *h = &p->h;
  size_t cs = (size_t)h->csize, us = (size_t)h->usize;
  if ((c->max_rep > 0 && h->rep_enc != EN_RLE) || (c->max_def > 0 && h->def_enc != EN_RLE))
    return pb_error_set(err, PB_EUNSUPPORTED, "row group %zu, page at byte %lld: level "
                        "encoding %d/%d", g, (long long)p->off, h->rep_enc, h->def_enc);
  if (c->codec == PB__PQ_UNCOMPRESSED && view != NULL) {
    /* levels and values used where they lie */
    if (cs != us) return perr(err, g, p->off, "uncompressed page with two sizes");
    int64_t lv = v1_levels(c, view, cs);
    if (lv < 0) return perr(err, g, p->off, "level sections longer than the page");
    c->vals = view + lv;
    c->vals_n = cs - (size_t)lv;
  } else if (c->codec == PB__PQ_UNCOMPRESSED && fixed_plain) {
    /* Only the levels now; the values are read where they are needed. */
    if (cs != us) return perr(err, g, p->off, "uncompressed page with two sizes");
    size_t take = cs < 4096 ? cs : 4096;
    if (need_buf(&c->buf, &c->buf_cap, take + 1) != 0)
      return pb_error_set(err, PB_ENOMEM, "out of memory");
    if (src_read(&c->src, data, c->buf, take) != 0)
      return perr(err, g, p->off, "cannot read the page (file truncated?)");
    int64_t lv = v1_levels(c, c->buf, take);
    if (lv < 0 && take < cs) {
      /* long level sections: read their lengths, then all of them */
      size_t need = 0;
      if (c->max_rep > 0) need += 4 + (size_t)le32(c->buf);
      if (c->max_def > 0) {
        if (need + 4 > take) need = cs;
        else need += 4 + (size_t)le32(c->buf + need);
      }
      if (need > cs) return perr(err, g, p->off, "level sections longer than the page");
      if (need_buf(&c->buf, &c->buf_cap, need + 1) != 0)
        return pb_error_set(err, PB_ENOMEM, "out of memory");
      if (src_read(&c->src, data, c->buf, need) != 0)
        return perr(err, g, p->off, "cannot read the page (file truncated?)");
      take = need;
      lv = v1_levels(c, c->buf, take);
    }
    if (lv < 0) return perr(err, g, p->off, "level sections longer than the page");
    c->vals = NULL;
    c->vals_file = data + lv;
    c->vals_n = cs - (size_t)lv;
  } else if (c->codec == PB__PQ_UNCOMPRESSED && view == NULL) {
    /* the whole page, read straight into the page buffer */
    if (cs != us) return perr(err, g, p->off, "uncompressed page with two sizes");
    if (need_buf(&c->buf, &c->buf_cap, us + 1) != 0)
      return pb_error_set(err, PB_ENOMEM, "out of memory");
    if (src_read(&c->src, data, c->buf, cs) != 0)
      return perr(err, g, p->off, "cannot read the page (file truncated?)");
    int64_t lv = v1_levels(c, c->buf, us);
    if (lv < 0) return perr(err, g, p->off, "level sections longer than the page");
    c->vals = c->buf + lv;
    c->vals_n = us - (size_t)lv;
  } else {
    if (need_buf(&c->buf, &c->buf_cap, us + 1) != 0)
      return pb_error_set(err, PB_ENOMEM, "out of memory");
    const uint8_t *in;
    PB_RETURN_NOT_OK(stored_bytes(c, g, p->off, data, cs, &in, err));
    PB_RETURN_NOT_OK(decompress(c, c->codec, g, p->off, in, cs, c->buf, us, "page", err));
    int64_t lv = v1_levels(c, c->buf, us);
    if (lv < 0) return perr(err, g, p->off, "level sections longer than the page");
    c->vals = c->buf + lv;
    c->vals_n = us - (size_t)lv;
  }
  return PB_OK;
}

/* A version 2 data page: level sections stored uncompressed ahead of the (maybe compressed)
 * values. */
static int load_page_v2(pb__pq_col *c, size_t g, const pq_page *p, const uint8_t *view,
                        int64_t data, int fixed_plain, struct pb_error *err) {
  const pq_hdr *h = &p->h;
  size_t cs = (size_t)h->csize, us = (size_t)h->usize;
  size_t rl = (size_t)h->v2_rep_len, dl = (size_t)h->v2_def_len;
  int comp = h->v2_compressed && c->codec != PB__PQ_UNCOMPRESSED;
  if ((c->max_rep == 0 && rl != 0) || (c->max_def == 0 && dl != 0))
    return perr(err, g, p->off, "levels where the schema has none");
  if (!comp && cs != us) return perr(err, g, p->off, "uncompressed page with two sizes");
  if (rl + dl > cs || rl + dl > us) return perr(err, g, p->off, "levels longer than the page");
  const uint8_t *lv = NULL; /* where the level sections lie */
  if (!comp && view != NULL) {
    lv = view;
    c->vals = view + rl + dl;
    c->vals_n = cs - rl - dl;
  } else if (!comp && fixed_plain) {
    if (need_buf(&c->buf, &c->buf_cap, rl + dl + 1) != 0)
      return pb_error_set(err, PB_ENOMEM, "out of memory");
    if (src_read(&c->src, data, c->buf, rl + dl) != 0)
      return perr(err, g, p->off, "cannot read the page (file truncated?)");
    lv = c->buf;
    c->vals = NULL;
    c->vals_file = data + (int64_t)(rl + dl);
    c->vals_n = cs - rl - dl;
  } else if (!comp && view == NULL) { /* the whole page, read straight into the buffer */
    if (need_buf(&c->buf, &c->buf_cap, us + 1) != 0)
      return pb_error_set(err, PB_ENOMEM, "out of memory");
    if (src_read(&c->src, data, c->buf, cs) != 0)
      return perr(err, g, p->off, "cannot read the page (file truncated?)");
    lv = c->buf;
    c->vals = c->buf + rl + dl;
    c->vals_n = us - rl - dl;
  } else {
    if (need_buf(&c->buf, &c->buf_cap, us + 1) != 0)
      return pb_error_set(err, PB_ENOMEM, "out of memory");
    const uint8_t *in;
    PB_RETURN_NOT_OK(stored_bytes(c, g, p->off, data, cs, &in, err));
    memcpy(c->buf, in, rl + dl);
    PB_RETURN_NOT_OK(decompress(c, comp ? c->codec : PB__PQ_UNCOMPRESSED, g, p->off,
                                in + rl + dl, cs - rl - dl, c->buf + rl + dl, us - rl - dl,
                                "page", err));
    lv = c->buf;
    c->vals = c->buf + rl + dl;
    c->vals_n = us - rl - dl;
  }
  c->rep = lv;
  c->rep_n = rl;
  c->def = lv + rl;
  c->def_n = dl;
  return PB_OK;
}

/* Makes the page's levels and values available (c->rep/def/vals; or, for values not loaded,
 * c->vals_file and, for byte arrays, c->voff). */
static int load_page(pb__pq_col *c, size_t g, pq_page *p, struct pb_error *err) {
  if (c->pc_off == p->off) return PB_OK;
  c->pc_off = -1;
  c->res_ok = 0;
  c->voff = NULL;
  c->n_voff = 0;
  if (p->lv != NULL) {
    use_kept_page(c, p);
    return PB_OK;
  }
  const pq_hdr *h = &p->h;
  int64_t data = p->off + (int64_t)h->hlen;
  int fixed_plain = c->width > 0 && h->enc == EN_PLAIN;
  /* the page's stored bytes where they are in memory already (a mapped file) */
  const uint8_t *view = src_view(&c->src, data, (size_t)h->csize);
  c->vals_file = -1;
  if (h->type == PT_DATA)
    PB_RETURN_NOT_OK(load_page_v1(c, g, p, view, data, fixed_plain, err));
  else
    PB_RETURN_NOT_OK(load_page_v2(c, g, p, view, data, fixed_plain, err));
  if (h->enc != EN_PLAIN && h->enc != EN_PLAIN_DICT && h->enc != EN_RLE_DICT)
    return pb_error_set(err, PB_EUNSUPPORTED, "row group %zu, page at byte %lld: encoding %d",
                        g, (long long)p->off, h->enc);
  keep_page(c, p, c->vals != NULL ? data + (int64_t)(c->vals - c->buf) : c->vals_file);
  c->pc_off = p->off;
  return PB_OK;
}

/* Loads the dictionary page of row group g. */
static int load_dict(pb__pq_col *c, size_t g, struct pb_error *err) {
  if (c->dict_rg == (int64_t)g) return PB_OK;
  pq_rg *rg = &c->rgs[g];
  if (rg->dict_off < 0) return perr(err, g, rg->start, "dictionary-encoded page, no dictionary");
  const pq_hdr *h = &rg->dict_h;
  if (h->enc != EN_PLAIN && h->enc != EN_PLAIN_DICT)
    return pb_error_set(err, PB_EUNSUPPORTED, "row group %zu: dictionary encoding %d", g, h->enc);
  size_t cs = (size_t)h->csize, us = (size_t)h->usize;
  c->dict_rg = -1;
  if (need_buf(&c->dict, &c->dict_cap, us + 1) != 0)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  const uint8_t *in;
  PB_RETURN_NOT_OK(
      stored_bytes(c, g, rg->dict_off, rg->dict_off + (int64_t)h->hlen, cs, &in, err));
  PB_RETURN_NOT_OK(
      decompress(c, c->codec, g, rg->dict_off, in, cs, c->dict, us, "dictionary page", err));
  size_t n = (size_t)h->num_values;
  if (c->width > 0) {
    if (n > us / c->width) return perr(err, g, rg->dict_off, "dictionary page too short");
  } else {
    /* each value takes at least its 4-byte length: a count the page cannot hold is refused
     * before the offsets are allocated for it */
    if (n > us / 4) return perr(err, g, rg->dict_off, "dictionary page too short");
    if (pb__vec_reserve((void **)&c->dict_off, &c->dict_off_cap, n + 1, sizeof *c->dict_off) != 0)
      return pb_error_set(err, PB_ENOMEM, "out of memory");
    size_t at = 0;
    for (size_t k = 0; k < n; k++) {
      if (us - at < 4) return perr(err, g, rg->dict_off, "dictionary page too short");
      uint32_t l = le32(c->dict + at);
      if (l > us - at - 4) return perr(err, g, rg->dict_off, "dictionary page too short");
      c->dict_off[k] = at;
      at += 4 + (size_t)l;
    }
    c->dict_off[n] = at;
  }
  c->dict_count = n;
  c->dict_rg = (int64_t)g;
  return PB_OK;
}

/* Appends one byte-array value to out. */
static int put_bytes(pb__pq_rows *out, const uint8_t *p, size_t n) {
  if (unborrow(out) != 0) return -1;
  if (out->may_borrow && out->n_data == 0 && out->n_vals == 0) {
    if (pb__vec_reserve((void **)&out->val_off, &out->cap_vals,
                        2, sizeof *out->val_off) != 0) return -1;
    out->borrowed = p;
    out->val_off[0] = 0;
    out->val_off[1] = out->n_data = n;
    out->n_vals = 1;
    return 0;
  }
  if (need_buf(&out->data, &out->cap_data, out->n_data + n + 1) != 0 ||
      pb__vec_reserve((void **)&out->val_off, &out->cap_vals,
                      out->n_vals + 2, sizeof *out->val_off) != 0)
    return -1;
  if (n > 0) memcpy(out->data + out->n_data, p, n);
  out->val_off[out->n_vals] = out->n_data;
  out->n_data += n;
  out->n_vals++;
  out->val_off[out->n_vals] = out->n_data;
  return 0;
}

/* Appends byte-array values [v0, v0 + nv) of a kept page (c->voff) to out, read from the file
 * with one preadv per 512 values: each value's length into c->in (checked against the length
 * the first load saw), its bytes straight into out. A read cut short is the error. */
static int read_byte_values(pb__pq_col *c, size_t g, const pq_page *p, uint64_t v0,
                            uint64_t nv, pb__pq_rows *out, struct pb_error *err) {
  if (c->voff == NULL || v0 > c->n_voff || nv > c->n_voff - v0)
    return perr(err, g, p->off, "fewer values than its levels say");
  size_t span = (size_t)(c->voff[v0 + nv] - c->voff[v0]);
  int64_t at = c->vals_file + (int64_t)c->voff[v0];
  if (span > (uint64_t)c->src.size || at > c->src.size - (int64_t)span)
    return perr(err, g, p->off, "cannot read the values (file truncated?)");
  if (unborrow(out) != 0 || need_buf(&out->data, &out->cap_data, out->n_data + span + 1) != 0 ||
      pb__vec_reserve((void **)&out->val_off, &out->cap_vals, out->n_vals + (size_t)nv + 2,
                      sizeof *out->val_off) != 0 ||
      need_buf(&c->in, &c->in_cap, (size_t)nv * 4 + 1) != 0)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  enum { BATCH = 512 };
  pb__io_range iov[2 * BATCH];
  /* the row's one value straight into the caller's memory */
  int into = nv == 1 && out->may_borrow && out->into != NULL && out->n_vals == 0 &&
             out->n_data == 0 && span - 4 == out->into_n;
  for (uint64_t k0 = 0; k0 < nv; k0 += BATCH) {
    size_t m = nv - k0 < BATCH ? (size_t)(nv - k0) : BATCH, want = 0;
    unsigned char *dst = into ? out->into : out->data + out->n_data;
    int64_t from = c->vals_file + (int64_t)c->voff[v0 + k0];
    for (size_t j = 0; j < m; j++) {
      size_t len = (size_t)(c->voff[v0 + k0 + j + 1] - c->voff[v0 + k0 + j]) - 4;
      uint64_t at_j = (uint64_t)from + want;
      iov[2 * j] = (pb__io_range){at_j, 4, c->in + 4 * (k0 + j)};
      iov[2 * j + 1] = (pb__io_range){at_j + 4, len, dst};
      dst += len;
      want += 4 + len;
    }
    struct pb_error io_err;
    if (pb__io_preadv(c->src.file, iov, 2 * m, &io_err) != PB_OK)
      return perr(err, g, p->off, io_err.message); /* names the file and how it changed */
    for (size_t j = 0; j < m; j++) {
      size_t len = iov[2 * j + 1].len;
      if (le32(c->in + 4 * (k0 + j)) != len)
        return perr(err, g, p->off, "a value's length changed since the page was first read "
                                    "(file rewritten in place?)");
      out->val_off[out->n_vals] = out->n_data;
      out->n_data += len;
      out->n_vals++;
      out->val_off[out->n_vals] = out->n_data;
    }
  }
  if (into) out->borrowed = out->into;
  return PB_OK;
}

/* Appends values [v0, v0 + nv) of the loaded page's value stream to out. */
static int take_values(pb__pq_col *c, size_t g, const pq_page *p, uint64_t v0, uint64_t nv,
                       pb__pq_rows *out, struct pb_error *err) {
  if (nv == 0) return PB_OK;
  size_t w = c->width;
  if (p->h.enc == EN_PLAIN && w > 0) {
    if (v0 > c->vals_n / w || nv > c->vals_n / w - v0)
      return perr(err, g, p->off, "fewer values than its levels say");
    size_t n = (size_t)nv * w;
    if (unborrow(out) != 0) return pb_error_set(err, PB_ENOMEM, "out of memory");
    if (out->may_borrow && out->n_data == 0 && c->vals != NULL) {
      out->borrowed = c->vals + v0 * w;
      out->n_data = n;
      out->n_vals += (size_t)nv;
      return PB_OK;
    }
    if (need_buf(&out->data, &out->cap_data, out->n_data + n + 1) != 0)
      return pb_error_set(err, PB_ENOMEM, "out of memory");
    if (c->vals != NULL) memcpy(out->data + out->n_data, c->vals + v0 * w, n);
    else if (src_read(&c->src, c->vals_file + (int64_t)(v0 * w), out->data + out->n_data, n) != 0)
      return perr(err, g, p->off, "cannot read the values (file truncated?)");
    out->n_data += n;
    out->n_vals += (size_t)nv;
    return PB_OK;
  }
  if (p->h.enc == EN_PLAIN && c->vals == NULL) /* byte arrays not loaded */
    return read_byte_values(c, g, p, v0, nv, out, err);
  if (p->h.enc == EN_PLAIN) { /* byte arrays: each a 4-byte length and its bytes */
    size_t at = 0, n = c->vals_n;
    for (uint64_t k = 0; k < v0 + nv; k++) {
      if (n - at < 4) return perr(err, g, p->off, "fewer values than its levels say");
      uint32_t l = le32(c->vals + at);
      if (l > n - at - 4) return perr(err, g, p->off, "byte array runs past the page");
      if (k >= v0 && put_bytes(out, c->vals + at + 4, l) != 0)
        return pb_error_set(err, PB_ENOMEM, "out of memory");
      at += 4 + (size_t)l;
    }
    return PB_OK;
  }
  PB_RETURN_NOT_OK(load_dict(c, g, err));
  if (c->vals_n < 1) return perr(err, g, p->off, "dictionary indices missing");
  int bw = c->vals[0];
  if (bw > 32) return perr(err, g, p->off, "dictionary index width over 32");
  lv_it it;
  lv_init(&it, c->vals + 1, c->vals_n - 1, bw);
  uint64_t skip = v0, dummy = 0;
  if (lv_count(&it, skip, 0, &dummy) != 0) return perr(err, g, p->off, "bad dictionary indices");
  if (unborrow(out) != 0 ||
      (w > 0 && need_buf(&out->data, &out->cap_data, out->n_data + (size_t)nv * w + 1) != 0))
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  for (uint64_t k = 0; k < nv; k++) {
    uint32_t ix;
    uint64_t len;
    if (lv_peek(&it, &ix, &len) != 0) return perr(err, g, p->off, "bad dictionary indices");
    lv_skip(&it, 1);
    if (ix >= c->dict_count) return perr(err, g, p->off, "dictionary index out of range");
    if (w > 0) {
      memcpy(out->data + out->n_data, c->dict + (size_t)ix * w, w);
      out->n_data += w;
      out->n_vals++;
    } else {
      size_t a = c->dict_off[ix];
      if (put_bytes(out, c->dict + a + 4, (size_t)le32(c->dict + a)) != 0)
        return pb_error_set(err, PB_ENOMEM, "out of memory");
    }
  }
  return PB_OK;
}

static int new_elem(pb__pq_rows *out) {
  if (pb__vec_reserve((void **)&out->elem_val, &out->cap_elems, out->n_elems + 2,
                      sizeof *out->elem_val) != 0)
    return -1;
  size_t cap = out->cap_elems;
  void *q = realloc(out->elem_nulls, cap * sizeof *out->elem_nulls);
  if (q == NULL) return -1;
  out->elem_nulls = q;
  out->elem_val[out->n_elems] = out->n_vals; /* fixed up after values are taken */
  out->elem_nulls[out->n_elems] = 0;
  out->n_elems++;
  return 0;
}

/* Passes the entries of page p before its k0-th row start (row lr of the row group), moving the
 * level iterators, the entry count *e_io and the count of values before them *v_io. */
static int skip_to_row(const pb__pq_col *c, size_t g, const pq_page *p, uint64_t k0, uint64_t n,
                       lv_it *ri_io, lv_it *di_io, uint64_t *e_io, uint64_t *v_io,
                       struct pb_error *err) {
  uint32_t maxd = (uint32_t)c->max_def;
  uint64_t zeros = 0, e = *e_io, v_before = *v_io;
  lv_it ri = *ri_io, di = *di_io;
  for (;;) {
    uint64_t m;
    if (c->max_rep == 0) {
      if (zeros == k0) break;
      m = k0 - zeros;
      zeros = k0;
    } else {
      uint32_t rv;
      uint64_t rl;
      if (e >= n) return perr(err, g, p->off, "row not found in its page");
      if (lv_peek(&ri, &rv, &rl) != 0) return perr(err, g, p->off, "bad repetition levels");
      if (rl > n - e) rl = n - e;
      if (ri.packed) { /* scan the bit-packed run in one go */
        uint64_t lim = ri.left < n - e ? ri.left : n - e, at = ri.bp_i;
        m = 0;
        while (m < lim) {
          uint64_t bit = (at + m) * (uint64_t)ri.bw, per = ri.bw > 0 ? 64 / (uint64_t)ri.bw : 0;
          if (ri.bw > 0 && 8 % ri.bw == 0 && bit % 8 == 0 && lim - m >= per &&
              (uint64_t)(ri.bp_end - ri.bp) >= bit / 8 + 8) {
            /* 8 bytes at once: skip them when no field in them is 0 */
            uint64_t w = 0, x;
            for (int k8 = 0; k8 < 8; k8++)
              w |= (uint64_t)ri.bp[bit / 8 + (uint64_t)k8] << (8 * k8);
            x = w;
            for (int sh = 1; sh < ri.bw; sh++) x |= w >> sh;
            uint64_t low = ri.bw == 1 ? ~(uint64_t)0
                           : ri.bw == 2 ? 0x5555555555555555u
                           : ri.bw == 4 ? 0x1111111111111111u
                                        : 0x0101010101010101u;
            if ((x & low) == low) {
              m += per;
              continue;
            }
          }
          ri.bp_i = at + m;
          if (lv_bit_value(&ri) == 0) {
            if (zeros == k0) break;
            zeros++;
          }
          m++;
        }
        ri.bp_i = at;
        if (m == 0) break; /* the target row starts here */
      } else if (rv == 0) {
        if (zeros == k0) break;
        m = rl < k0 - zeros ? rl : k0 - zeros;
        zeros += m;
      } else {
        m = rl;
      }
      lv_skip(&ri, m);
    }
    if (m > n - e) return perr(err, g, p->off, "row not found in its page");
    if (c->max_def > 0) {
      if (lv_count(&di, m, maxd, &v_before) != 0)
        return perr(err, g, p->off, "bad definition levels");
    } else {
      v_before += m;
    }
    e += m;
  }
  if (e >= n) return perr(err, g, p->off, "row not found in its page");
  *ri_io = ri;
  *di_io = di;
  *e_io = e;
  *v_io = v_before;
  return PB_OK;
}

/* Reads local rows [lr, lr + want) of row group g into out. */
static int read_rows(pb__pq_col *c, size_t g, int64_t lr, int64_t want, pb__pq_rows *out,
                     struct pb_error *err) {
  if (unborrow(out) != 0) return pb_error_set(err, PB_ENOMEM, "out of memory");
  PB_RETURN_NOT_OK(build_rg(c, g, err));
  pq_rg *rg = &c->rgs[g];
  if (lr < 0 || want < 1 || want > rg->n_rows - lr)
    return pb_error_set(err, PB_EINVAL, "row group %zu: %lld rows from row %lld of %lld", g,
                        (long long)want, (long long)lr, (long long)rg->n_rows);
  size_t lo = 0, hi = rg->n_pages; /* the page where row lr starts */
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (rg->pages[mid].rows_before <= lr) lo = mid;
    else hi = mid;
  }
  while (lo < rg->n_pages && rg->pages[lo].rows_before + rg->pages[lo].starts <= lr) lo++;
  if (lo >= rg->n_pages) return perr(err, g, rg->start, "row not found in its pages");
  out->width = c->width;
  if (c->width == 0 && out->n_vals == 0) {
    if (pb__vec_reserve((void **)&out->val_off, &out->cap_vals, 2, sizeof *out->val_off) != 0)
      return pb_error_set(err, PB_ENOMEM, "out of memory");
    out->val_off[0] = out->n_data;
  }
  int64_t started = 0;
  int first = 1, done = 0;
  int rbw = bits_for(c->max_rep), dbw = bits_for(c->max_def);
  uint32_t maxd = (uint32_t)c->max_def, rep1 = (uint32_t)c->def_rep1;
  for (size_t k = lo; k < rg->n_pages && !done; k++) {
    pq_page *p = &rg->pages[k];
    if (!first) { /* go on only for more rows or for a row that continues in this page */
      int cont = c->max_rep > 0 && p->h.type == PT_DATA && p->cont;
      if (started >= want && !cont) break;
    }
    if (out->borrowed != NULL && c->pc_off != p->off && unborrow(out) != 0)
      return pb_error_set(err, PB_ENOMEM, "out of memory"); /* the page is about to change */
    PB_RETURN_NOT_OK(load_page(c, g, p, err));
    lv_it ri, di;
    lv_init(&ri, c->rep, c->rep_n, rbw);
    lv_init(&di, c->def, c->def_n, dbw);
    uint64_t n = (uint64_t)p->h.num_values, e = 0, v_before = 0, nv = 0;
    if (first && c->res_ok && c->res_g == g && c->res_row == lr && c->res_off == p->off) {
      ri = c->res_ri; /* row lr is where the previous read stopped */
      di = c->res_di;
      e = c->res_e;
      v_before = c->res_v;
      first = 0;
    }
    c->res_ok = 0;
    if (first) { /* pass the entries before row lr */
      PB_RETURN_NOT_OK(skip_to_row(c, g, p, (uint64_t)(lr - p->rows_before), n, &ri, &di, &e,
                                   &v_before, err));
      first = 0;
    }
    while (e < n) {
      uint32_t rv = 0, dv = maxd;
      uint64_t rl = n - e, dl = n - e;
      if (c->max_rep > 0 && lv_peek(&ri, &rv, &rl) != 0)
        return perr(err, g, p->off, "bad repetition levels");
      if (c->max_def > 0 && lv_peek(&di, &dv, &dl) != 0)
        return perr(err, g, p->off, "bad definition levels");
      if (rv > (uint32_t)c->max_rep || dv > maxd) return perr(err, g, p->off, "level too high");
      uint64_t m = rl < dl ? rl : dl;
      if (m > n - e) m = n - e;
      if (rv <= 1) { /* a new row and/or a new element: one entry at a time */
        m = 1;
        if (rv == 0) {
          if (started == want) {
            done = 1;
            c->res_ok = 1;
            c->res_g = g;
            c->res_row = lr + want;
            c->res_off = p->off;
            c->res_ri = ri;
            c->res_di = di;
            c->res_e = e;
            c->res_v = v_before + nv;
            break;
          }
          if (rows_reserve(out) != 0) return pb_error_set(err, PB_ENOMEM, "out of memory");
          out->row_elem[out->n_rows++] = out->n_elems;
          started++;
        } else if (started == 0) {
          return perr(err, g, p->off, "row continues before it starts");
        }
        int elem = c->max_rep == 0 || dv >= rep1;
        if (elem) {
          if (new_elem(out) != 0) return pb_error_set(err, PB_ENOMEM, "out of memory");
          out->elem_val[out->n_elems - 1] = out->n_vals + (size_t)nv;
        }
        if (dv == maxd) nv++;
        else if (elem) out->elem_nulls[out->n_elems - 1]++;
      } else {
        if (started == 0 || out->row_elem[out->n_rows - 1] == out->n_elems)
          return perr(err, g, p->off, "values outside any element");
        if (dv == maxd) nv += m;
        else out->elem_nulls[out->n_elems - 1] += m;
      }
      if (c->max_rep > 0) lv_skip(&ri, m);
      if (c->max_def > 0) lv_skip(&di, m);
      e += m;
    }
    PB_RETURN_NOT_OK(take_values(c, g, p, v_before, nv, out, err));
  }
  if (started != want) return perr(err, g, rg->start, "fewer rows than the footer says");
  out->row_elem[out->n_rows] = out->n_elems;
  if (pb__vec_reserve((void **)&out->elem_val, &out->cap_elems, out->n_elems + 1,
             sizeof *out->elem_val) != 0)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  out->elem_val[out->n_elems] = out->n_vals;
  return PB_OK;
}

static size_t find_rg(const pb__pq_col *c, int64_t row) {
  size_t lo = 0, hi = c->n_rgs;
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (c->rgs[mid].first_row <= row) lo = mid;
    else hi = mid;
  }
  return lo;
}

/* A mapped file cut short by another process would fault (SIGBUS) on the first access past
 * its new end, and a library must not install a signal handler for that. So before every read
 * from a mapping the file's length is checked against the mapping's; the window that is left
 * is the read itself (docs/format-ome-arrow.md, "Mapped files"). */
static int src_check(const pq_src *s, struct pb_error *err) {
  if (s->file == NULL || s->mem == NULL) return PB_OK; /* memory, or reads that check */
  return pb__io_check(s->file, err);
}

int pb__pq_read(pb__pq_col *c, int64_t first, int64_t n, pb__pq_rows *out,
                struct pb_error *err) {
  PB_RETURN_NOT_OK(src_check(&c->src, err));
  if (c->n_rgs == 0 || first < 0 || n < 1 || n > c->n_rows - first)
    return pb_error_set(err, PB_EINVAL, "%lld rows from row %lld: outside the column's %lld",
                        (long long)n, (long long)first, (long long)c->n_rows);
  size_t g = find_rg(c, first);
  const pq_rg *rg = &c->rgs[g];
  if (first + n > rg->first_row + rg->n_rows) /* both sums at most c->n_rows (checked above) */
    return pb_error_set(err, PB_EINVAL, "rows %lld..%lld span row groups", (long long)first,
                        (long long)(first + n - 1));
  return read_rows(c, g, first - rg->first_row, n, out, err);
}

int pb__pq_read_all(pb__pq_col *c, pb__pq_rows *out, struct pb_error *err) {
  PB_RETURN_NOT_OK(src_check(&c->src, err));
  for (size_t g = 0; g < c->n_rgs; g++)
    if (c->rgs[g].n_rows > 0) PB_RETURN_NOT_OK(read_rows(c, g, 0, c->rgs[g].n_rows, out, err));
  return PB_OK;
}

/* ---- open: layout from the footer --------------------------------------------------------- */

/* ConvertedType names, as parquet_schema() writes them (the format's numbers). */
static const char *converted_name(int32_t v) {
  static const char *const names[] = {
      "UTF8",   "MAP",   "MAP_KEY_VALUE", "LIST",   "ENUM",    "DECIMAL", "DATE",   "TIME_MILLIS",
      "TIME_MICROS", "TIMESTAMP_MILLIS", "TIMESTAMP_MICROS", "UINT_8", "UINT_16", "UINT_32",
      "UINT_64", "INT_8", "INT_16", "INT_32", "INT_64", "JSON", "BSON", "INTERVAL"};
  return v >= 0 && (size_t)v < sizeof names / sizeof names[0] ? names[v] : "";
}

static size_t physical_width(int32_t t) {
  return t == PB__PQ_INT32 || t == PB__PQ_FLOAT ? 4 : t == PB__PQ_BYTE_ARRAY ? 0 : 8;
}

/* Levels of leaf li into c: the definition level at its first repeated ancestor too. */
static void leaf_levels(const pb__pq_meta *m, size_t li, pb__pq_col *c) {
  size_t node = m->leaf_node[li];
  const pb__pq_node *e = &m->nodes[node];
  c->max_def = e->max_def;
  c->max_rep = e->max_rep;
  c->def_rep1 = -1;
  for (int32_t i = (int32_t)node; i > 0; i = m->nodes[i].parent)
    if (m->nodes[i].repetition == 2 && m->nodes[i].max_rep == 1) c->def_rep1 = m->nodes[i].max_def;
  snprintf(c->converted, sizeof c->converted, "%s", converted_name(e->converted_type));
}

/* The row groups of leaf li into c; 0, or 1 when its layout is one the reader does not handle
 * (a physical type or codec it does not read, one that changes between row groups, or offsets
 * and sizes that do not add up). */
static int leaf_chunks(const pb__pq_meta *m, size_t li, pb__pq_col *c) {
  c->rgs = calloc(m->n_rgs ? m->n_rgs : 1, sizeof *c->rgs);
  if (c->rgs == NULL) return -1;
  for (size_t g = 0; g < m->n_rgs; g++) {
    const pb__pq_chunk *k = &m->chunks[g * m->n_leaves + li];
    int ph = k->type, cd = k->codec;
    if (ph != PB__PQ_INT32 && ph != PB__PQ_INT64 && ph != PB__PQ_FLOAT && ph != PB__PQ_DOUBLE &&
        ph != PB__PQ_BYTE_ARRAY)
      return 1;
    if (cd != PB__PQ_UNCOMPRESSED && cd != PB__PQ_SNAPPY && cd != PB__PQ_GZIP &&
        cd != PB__PQ_ZSTD && cd != PB__PQ_LZ4_RAW)
      return 1;
    if (g > 0 && (ph != c->physical || cd != c->codec)) return 1;
    c->physical = ph;
    c->width = physical_width(ph);
    c->codec = cd;
    pq_rg *rg = &c->rgs[g];
    rg->first_row = m->rgs[g].first_row;
    rg->n_rows = m->rgs[g].num_rows;
    int64_t data = k->data_page_offset, dict = k->dictionary_page_offset, rg_end;
    rg->start = dict > 0 && dict < data ? dict : data;
    rg->size = k->total_compressed_size;
    c->n_rgs = g + 1;
    c->n_rows = rg->first_row + rg->n_rows; /* the footer parser checked the sum */
    if (rg->start < 4 || rg->size < 0 || !pb__add_i64_ok(rg->start, rg->size, &rg_end)) return 1;
  }
  return 0;
}

int pb__pq_open_meta(const pb__pq_meta *meta, const char *path, const char *const *leaves,
                     size_t n, int map, pb__pq_col **out, int *in_file, struct pb_error *err) {
  int rc = PB_OK;
  for (size_t k = 0; k < n; k++) {
    out[k] = NULL;
    int64_t li = pb__pq_find_leaf(meta, leaves[k]);
    in_file[k] = li >= 0;
    if (li < 0 || rc != PB_OK) continue;
    pb__pq_col *c = out[k] = calloc(1, sizeof *out[k]);
    if (c == NULL) {
      rc = pb_error_set(err, PB_ENOMEM, "out of memory");
      continue;
    }
    c->pc_off = -1;
    c->dict_rg = -1;
    leaf_levels(meta, (size_t)li, c);
    int skip = c->max_rep > 2 || c->max_def > 16 || (c->max_rep > 0 && c->def_rep1 < 1) ||
               meta->n_rgs == 0; /* nesting the reader does not handle, or no rows */
    int lay = skip ? 1 : leaf_chunks(meta, (size_t)li, c);
    if (lay < 0) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    if (lay != 0) {
      pb__pq_free(c);
      out[k] = NULL;
    }
  }
  for (size_t k = 0; k < n && rc == PB_OK; k++) {
    if (out[k] == NULL) continue;
    pb_read_options o = PB_READ_OPTIONS_DEFAULTS;
    if (pb__io_is_url(path)) pb__io_options_resolve(NULL, &o); /* --insecure etc. */
    o.map = map ? 1 : 0;
    rc = pb__io_open(path, &o, &out[k]->src.file, err);
    if (rc != PB_OK) break;
    out[k]->src.size = (int64_t)pb__io_size(out[k]->src.file);
    const void *m;
    if (map && pb__io_map(out[k]->src.file, &m, NULL) == PB_OK) out[k]->src.mem = m;
  }
  if (rc != PB_OK)
    for (size_t k = 0; k < n; k++) {
      pb__pq_free(out[k]);
      out[k] = NULL;
    }
  return rc;
}

int pb__pq_open_many(const char *path, const char *const *leaves, size_t n, int map,
                     pb__pq_col **out, int *in_file, struct pb_error *err) {
  pb__pq_meta m;
  for (size_t k = 0; k < n; k++) {
    out[k] = NULL;
    in_file[k] = 0;
  }
  PB_RETURN_NOT_OK(pb__pq_meta_read(path, &m, err));
  int rc = pb__pq_open_meta(&m, path, leaves, n, map, out, in_file, err);
  pb__pq_meta_destroy(&m);
  return rc;
}

int pb__pq_read_mem(const uint8_t *data, size_t size, int physical, int codec, int max_rep,
                    int max_def, int64_t row, pb__pq_rows *out, struct pb_error *err) {
  pb__pq_col c;
  memset(&c, 0, sizeof c);
  pq_rg rg;
  memset(&rg, 0, sizeof rg);
  c.src.mem = data;
  c.src.size = (int64_t)size;
  c.physical = physical;
  c.width = physical == PB__PQ_INT32 || physical == PB__PQ_FLOAT ? 4
            : physical == PB__PQ_BYTE_ARRAY                        ? 0
                                                                   : 8;
  c.codec = codec;
  c.max_rep = max_rep;
  c.max_def = max_def;
  c.def_rep1 = max_rep > 0 ? 1 : 0;
  c.pc_off = -1;
  c.dict_rg = -1;
  rg.start = 0;
  rg.size = (int64_t)size;
  rg.n_rows = -1;
  c.rgs = &rg;
  c.n_rgs = 1;
  int rc = build_rg(&c, 0, err);
  if (rc == PB_OK) {
    c.n_rows = rg.n_rows;
    rc = row < rg.n_rows ? read_rows(&c, 0, row, 1, out, err)
                         : pb_error_set(err, PB_EINVAL, "row %lld of %lld", (long long)row,
                                        (long long)rg.n_rows);
  }
  if (unborrow(out) != 0 && rc == PB_OK) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  free(rg.pages);
  free(c.buf);
  free(c.in);
  free(c.win);
  free(c.dict);
  free(c.dict_off);
  pb__codec_ctx_destroy(&c.codec_ctx);
  return rc;
}
