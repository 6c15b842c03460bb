/* The raw format: decoded pixels of every image in one memory-mapped file, so that all
 * workers and processes share one copy in the page cache. Layout: docs/format-raw.md. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/raw/raw.h"
#include "io/io.h"
#include "io/le.h"

#define RAW_MAGIC "PBRAWIMG"
#define RAW_VERSION 1u
#define RAW_HEADER_SIZE 64u
#define RAW_RECORD_SIZE 512u
#define RAW_CHANNEL_SIZE 160u
#define RAW_ALIGN 64u

/* ---- little-endian field access (io/le.h) ------------------------------------------------- */

#define get_u64 pb__le64
#define get_u32 pb__le32
#define get_f64 pb__le_f64
#define get_f32 pb__le_f32
#define put_u64 pb__st_le64
#define put_u32 pb__st_le32
#define put_f64 pb__st_le_f64
#define put_f32 pb__st_le_f32

/* Copies a fixed-width field into a C string of the same width, always terminated. */
static void get_str(char *dst, const unsigned char *src, size_t width) {
  memcpy(dst, src, width);
  dst[width - 1] = '\0';
}
static void put_str(unsigned char *dst, const char *src, size_t width) {
  size_t n = strnlen(src, width - 1);
  memcpy(dst, src, n);
  memset(dst + n, 0, width - n);
}

/* ---- reading -------------------------------------------------------------------------------- */

typedef struct raw_state {
  char *path;
  pb__io_file *file;
  const unsigned char *map;  /* the file mapped, or NULL: pixels are read from file */
  unsigned char *meta;       /* without a map: the index and channel entries, read at open */
  size_t size;
  uint64_t count;
  const unsigned char *records;  /* count * RAW_RECORD_SIZE */
  const unsigned char *channels; /* n_channels * RAW_CHANNEL_SIZE */
  uint64_t n_channels;
} raw_state;

static int raw_probe(const char *path) {
  pb__io_file *f;
  if (pb__io_open(path, NULL, &f, NULL) != PB_OK) return 0;
  char buf[8];
  int ok = pb__io_size(f) >= sizeof buf && pb__io_pread(f, buf, sizeof buf, 0, NULL) == PB_OK &&
           memcmp(buf, RAW_MAGIC, 8) == 0;
  pb__io_close(f);
  return ok ? 100 : 0;
}

static void raw_close(void *p) {
  raw_state *s = p;
  if (s == NULL) return;
  pb__io_close(s->file); /* releases the mapping too */
  free(s->meta);
  free(s->path);
  free(s);
}

/* Checks one index record against the file: every offset and size must lie inside it. */
static int check_record(const raw_state *s, uint64_t i, struct pb_error *err) {
  const unsigned char *r = s->records + i * RAW_RECORD_SIZE;
  uint64_t off = get_u64(r), nbytes = get_u64(r + 8);
  uint32_t dtype = get_u32(r + 16), nch = get_u32(r + 20);
  uint64_t ch_first = get_u64(r + 24);
  if (dtype >= PB_DTYPE_COUNT)
    return pb_error_set(err, PB_EFORMAT, "%s: corrupt raw file: image %llu has dtype %u", s->path,
                        (unsigned long long)i, dtype);
  uint64_t expect = pb_dtype_size((pb_dtype)dtype);
  for (int k = 0; k < PB_NDIM; k++) {
    int64_t d = (int64_t)get_u64(r + 32 + 8 * (size_t)k);
    if (d < 1 || (uint64_t)d > UINT64_MAX / expect)
      return pb_error_set(err, PB_EFORMAT, "%s: corrupt raw file: image %llu has axis %d of size %lld",
                          s->path, (unsigned long long)i, k, (long long)d);
    expect *= (uint64_t)d;
  }
  if (expect != nbytes)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: corrupt raw file: image %llu holds %llu bytes, its shape needs %llu",
                        s->path, (unsigned long long)i, (unsigned long long)nbytes,
                        (unsigned long long)expect);
  if (off % RAW_ALIGN != 0 || off < RAW_HEADER_SIZE || off > s->size || nbytes > s->size - off)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: truncated or corrupt raw file: image %llu at offset %llu (+%llu bytes) "
                        "lies outside the file (%zu bytes)",
                        s->path, (unsigned long long)i, (unsigned long long)off,
                        (unsigned long long)nbytes, s->size);
  if (nch > PB_MAX_CHANNELS || ch_first > s->n_channels || nch > s->n_channels - ch_first)
    return pb_error_set(err, PB_EFORMAT, "%s: corrupt raw file: image %llu has bad channel entries",
                        s->path, (unsigned long long)i);
  return PB_OK;
}

static uint64_t align_up(uint64_t v) { return (v + RAW_ALIGN - 1) / RAW_ALIGN * RAW_ALIGN; }

/* The writer lays the file out as header, images in index order (each at the next multiple of
 * RAW_ALIGN after the one before), index, channel entries, end of file, with each image's
 * channel entries following the previous image's. Anything else (an offset moved so that two
 * images overlap, a gap, an index over pixels) is a corrupt file: refused at open, since
 * reading it would give other pixels without any error. check_record has bounded every offset
 * and size by the file size already, so the sums below cannot wrap. */
static int check_layout(const raw_state *s, uint64_t index_off, uint64_t ch_off,
                        struct pb_error *err) {
  uint64_t at = RAW_HEADER_SIZE, ch = 0;
  for (uint64_t i = 0; i < s->count; i++) {
    const unsigned char *r = s->records + i * RAW_RECORD_SIZE;
    uint64_t off = get_u64(r), nbytes = get_u64(r + 8), first = get_u64(r + 24);
    uint32_t nch = get_u32(r + 20);
    if (off != align_up(at))
      return pb_error_set(err, PB_EFORMAT,
                          "%s: corrupt raw index: image %llu starts at byte %llu, but the images "
                          "before it end at byte %llu (images overlap or leave a gap; expected "
                          "offset %llu)",
                          s->path, (unsigned long long)i, (unsigned long long)off,
                          (unsigned long long)at, (unsigned long long)align_up(at));
    if (first != ch)
      return pb_error_set(err, PB_EFORMAT,
                          "%s: corrupt raw index: image %llu's channel entries start at %llu, "
                          "expected %llu",
                          s->path, (unsigned long long)i, (unsigned long long)first,
                          (unsigned long long)ch);
    at = off + nbytes;
    ch += nch;
  }
  if (index_off != align_up(at) || ch_off != index_off + s->count * RAW_RECORD_SIZE ||
      ch != s->n_channels || ch_off + s->n_channels * RAW_CHANNEL_SIZE != s->size)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: corrupt raw index: the images end at byte %llu, the index lies at "
                        "%llu, the channel entries (%llu used of %llu) at %llu, the file ends at "
                        "%zu; they must follow one another",
                        s->path, (unsigned long long)at, (unsigned long long)index_off,
                        (unsigned long long)ch, (unsigned long long)s->n_channels,
                        (unsigned long long)ch_off, s->size);
  return PB_OK;
}

static int raw_open(const char *path, const pb_read_options *opts, void **state,
                    struct pb_error *err) {
  pb_read_options dflt;
  if (opts == NULL) {
    pb__io_options_resolve(NULL, &dflt);
    opts = &dflt;
  }
  *state = NULL;
  raw_state *s = calloc(1, sizeof *s);
  if (s == NULL || (s->path = strdup(path)) == NULL) {
    free(s);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  int rc = pb__io_open(path, opts, &s->file, err);
  if (rc != PB_OK) goto fail;
  if (pb__io_size(s->file) < RAW_HEADER_SIZE) {
    rc = pb_error_set(err, PB_EFORMAT, "%s: truncated raw file (%llu bytes, header needs %u)", path,
                      (unsigned long long)pb__io_size(s->file), RAW_HEADER_SIZE);
    goto fail;
  }
  if (pb__io_size(s->file) > SIZE_MAX) {
    rc = pb_error_set(err, PB_EUNSUPPORTED, "%s: too large for this machine", path);
    goto fail;
  }
  s->size = (size_t)pb__io_size(s->file);
  /* Mapped unless the options turn it off (or the file cannot be): then every worker and
   * process shares the page cache's one copy. Without a map, the header, the index and the
   * channel entries are read once here and pixels at each read. */
  const void *m = NULL;
  if (opts->map != 0 && pb__io_map(s->file, &m, NULL) == PB_OK) s->map = m;
  unsigned char head[RAW_HEADER_SIZE];
  const unsigned char *h = s->map;
  if (h == NULL) {
    rc = pb__io_pread(s->file, head, RAW_HEADER_SIZE, 0, err);
    if (rc != PB_OK) goto fail;
    h = head;
  }
  if (memcmp(h, RAW_MAGIC, 8) != 0) {
    rc = pb_error_set(err, PB_EFORMAT, "%s: not a raw pipebench file (bad magic)", path);
    goto fail;
  }
  uint32_t version = get_u32(h + 8), rec = get_u32(h + 12), chrec = get_u32(h + 48);
  if (version != RAW_VERSION || rec != RAW_RECORD_SIZE || chrec != RAW_CHANNEL_SIZE) {
    rc = pb_error_set(err, PB_EFORMAT,
                      "%s: raw file version %u (record sizes %u/%u) is not supported (want %u)",
                      path, version, rec, chrec, RAW_VERSION);
    goto fail;
  }
  uint64_t file_size = get_u64(h + 56);
  if (file_size != s->size) {
    rc = pb_error_set(err, PB_EFORMAT, "%s: truncated or corrupt raw file: %zu bytes, header says %llu",
                      path, s->size, (unsigned long long)file_size);
    goto fail;
  }
  s->count = get_u64(h + 16);
  uint64_t index_off = get_u64(h + 24), ch_off = get_u64(h + 32);
  s->n_channels = get_u64(h + 40);
  if (s->count > s->size / RAW_RECORD_SIZE || index_off > s->size ||
      s->count * RAW_RECORD_SIZE > s->size - index_off || s->n_channels > s->size / RAW_CHANNEL_SIZE ||
      ch_off > s->size || s->n_channels * RAW_CHANNEL_SIZE > s->size - ch_off) {
    rc = pb_error_set(err, PB_EFORMAT, "%s: truncated or corrupt raw file: index lies outside the file",
                      path);
    goto fail;
  }
  if (s->map == NULL) {
    size_t nrec = (size_t)s->count * RAW_RECORD_SIZE, nch = (size_t)s->n_channels * RAW_CHANNEL_SIZE;
    if ((s->meta = malloc(nrec + nch + 1)) == NULL) {
      rc = pb_error_set(err, PB_ENOMEM, "%s: out of memory for the index", path);
      goto fail;
    }
    pb__io_range parts[2] = {{index_off, nrec, s->meta}, {ch_off, nch, s->meta + nrec}};
    rc = pb__io_preadv(s->file, parts, 2, err);
    if (rc != PB_OK) goto fail;
    s->records = s->meta;
    s->channels = s->meta + nrec;
  } else {
    s->records = s->map + index_off;
    s->channels = s->map + ch_off;
  }
  for (uint64_t i = 0; i < s->count; i++) {
    rc = check_record(s, i, err);
    if (rc != PB_OK) goto fail;
  }
  rc = check_layout(s, index_off, ch_off, err);
  if (rc != PB_OK) goto fail;
  *state = s;
  return PB_OK;
fail:
  raw_close(s);
  return rc;
}

int pb__raw_open_mapped(const char *path, void **state, struct pb_error *err) {
  /* the caller's own file: mapped whatever the environment says */
  pb_read_options o = PB_READ_OPTIONS_DEFAULTS;
  o.map = 1;
  PB_RETURN_NOT_OK(raw_open(path, &o, state, err));
  if (((raw_state *)*state)->map == NULL) {
    raw_close(*state);
    *state = NULL;
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: cannot be mapped", path);
  }
  return PB_OK;
}

static int64_t raw_count(void *p) { return (int64_t)((raw_state *)p)->count; }

static int raw_meta(void *p, int64_t i, pb_image_meta *out, struct pb_error *err) {
  (void)err;
  raw_state *s = p;
  const unsigned char *r = s->records + (size_t)i * RAW_RECORD_SIZE;
  memset(out, 0, sizeof *out);
  out->dtype = (pb_dtype)get_u32(r + 16);
  for (int k = 0; k < PB_NDIM; k++) out->shape[k] = (int64_t)get_u64(r + 32 + 8 * (size_t)k);
  for (int k = 0; k < 3; k++) {
    out->physical_size[k] = get_f64(r + 72 + 8 * (size_t)k);
    get_str(out->physical_unit[k], r + 96 + 16 * (size_t)k, 16);
  }
  get_str(out->id, r + 144, sizeof out->id);
  get_str(out->name, r + 208, sizeof out->name);
  uint32_t nch = get_u32(r + 20);
  uint64_t first = get_u64(r + 24);
  out->n_channels = (int)nch;
  for (uint32_t c = 0; c < nch; c++) {
    const unsigned char *q = s->channels + (first + c) * RAW_CHANNEL_SIZE;
    pb_channel *ch = &out->channels[c];
    get_str(ch->id, q, sizeof ch->id);
    get_str(ch->name, q + 48, sizeof ch->name);
    get_str(ch->illumination, q + 112, sizeof ch->illumination);
    ch->emission_um = get_f32(q + 136);
    ch->excitation_um = get_f32(q + 140);
    ch->color_rgba = get_u32(q + 144);
  }
  return PB_OK;
}

static int raw_shape(void *p, int64_t i, pb_dtype *dtype, int64_t shape[PB_NDIM],
                     struct pb_error *err) {
  (void)err;
  const unsigned char *r = ((raw_state *)p)->records + (size_t)i * RAW_RECORD_SIZE;
  *dtype = (pb_dtype)get_u32(r + 16);
  for (int k = 0; k < PB_NDIM; k++) shape[k] = (int64_t)get_u64(r + 32 + 8 * (size_t)k);
  return PB_OK;
}

const void *pb__raw_pixels(void *state, int64_t i, size_t *nbytes) {
  raw_state *s = state;
  const unsigned char *r = s->records + (size_t)i * RAW_RECORD_SIZE;
  if (nbytes != NULL) *nbytes = (size_t)get_u64(r + 8);
  return s->map != NULL ? s->map + get_u64(r) : NULL;
}

/* Without a map: the region's rows (runs along X) read straight into dst in one scattered
 * read. */
static int read_rows(raw_state *s, int64_t i, const pb_region *region, void *dst,
                     struct pb_error *err) {
  pb_image_meta meta;
  PB_RETURN_NOT_OK(raw_meta(s, i, &meta, err));
  const unsigned char *r = s->records + (size_t)i * RAW_RECORD_SIZE;
  uint64_t base = get_u64(r);
  size_t es = pb_dtype_size(meta.dtype), row = (size_t)region->count[PB_X] * es;
  const int64_t *c = region->count, *o = region->start, *n = meta.shape;
  size_t rows = (size_t)(c[PB_T] * c[PB_C] * c[PB_Z] * c[PB_Y]);
  pb__io_range *v = malloc(rows * sizeof *v);
  if (v == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  size_t k = 0;
  for (int64_t t = 0; t < c[PB_T]; t++)
    for (int64_t ch = 0; ch < c[PB_C]; ch++)
      for (int64_t z = 0; z < c[PB_Z]; z++)
        for (int64_t y = 0; y < c[PB_Y]; y++, k++) {
          int64_t at = (((o[PB_T] + t) * n[PB_C] + o[PB_C] + ch) * n[PB_Z] + o[PB_Z] + z) * n[PB_Y] +
                       o[PB_Y] + y;
          v[k].off = base + ((uint64_t)at * (uint64_t)n[PB_X] + (uint64_t)o[PB_X]) * es;
          v[k].len = row;
          v[k].dst = (unsigned char *)dst + k * row;
        }
  int rc = pb__io_preadv(s->file, v, rows, err);
  free(v);
  if (rc != PB_OK) pb_error_prefix(err, "image %lld: ", (long long)i);
  return rc;
}

size_t pb__raw_file_size(void *state) { return ((raw_state *)state)->size; }

int (*pb__raw_read_hook)(const char *path, int64_t i, struct pb_error *err);

static int raw_read(void *p, int64_t i, const pb_region *region, void *dst, size_t dst_size,
                    pb_stage_times *times, struct pb_error *err) {
  raw_state *s = p;
  (void)dst_size; /* i, region and dst_size: checked by format.c */
  if (pb__raw_read_hook != NULL) PB_RETURN_NOT_OK(pb__raw_read_hook(s->path, i, err));
  size_t nbytes;
  const void *src = pb__raw_pixels(s, i, &nbytes);
  int64_t t0 = pb_now_ns();
  size_t copied;
  if (src == NULL) { /* not mapped */
    pb_image_meta meta;
    pb_region full;
    PB_RETURN_NOT_OK(raw_meta(s, i, &meta, err));
    if (region == NULL) pb__region_full(&full, meta.shape);
    const pb_region *want = region != NULL ? region : &full;
    copied = pb_dtype_size(meta.dtype);
    for (int k = 0; k < PB_NDIM; k++) copied *= (size_t)want->count[k];
    PB_RETURN_NOT_OK(read_rows(s, i, want, dst, err));
  } else if (region == NULL) { /* nbytes is the shape's (check_record, at open) */
    memcpy(dst, src, nbytes);
    copied = nbytes;
  } else {
    pb_image_meta meta;
    PB_RETURN_NOT_OK(raw_meta(s, i, &meta, err));
    static const int64_t zero[PB_NDIM] = {0, 0, 0, 0, 0};
    pb__copy_box(dst, region->start, region->count, src, zero, meta.shape,
                 pb_dtype_size(meta.dtype));
    copied = pb_dtype_size(meta.dtype);
    for (int k = 0; k < PB_NDIM; k++) copied *= (size_t)region->count[k];
  }
  if (times != NULL) {
    times->read_ns += pb_now_ns() - t0;
    times->bytes_read += (int64_t)copied;
    times->bytes_decoded += (int64_t)copied;
  }
  return PB_OK;
}

/* ---- writing -------------------------------------------------------------------------------- */

typedef struct raw_writer {
  char *path;
  char tmp[4096];
  int fd;
  uint64_t pos; /* bytes written so far */
  unsigned char *records;
  uint64_t count, cap;
  unsigned char *channels;
  uint64_t n_channels, ch_cap;
  int finished;
} raw_writer;

static int write_all(raw_writer *w, const void *data, size_t size, struct pb_error *err) {
  const unsigned char *p = data;
  while (size > 0) {
    ssize_t n = write(w->fd, p, size > (1u << 30) ? (1u << 30) : size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return pb_error_set(err, PB_EIO, "%s: write failed: %s", w->tmp, strerror(n < 0 ? errno : EIO));
    p += n;
    size -= (size_t)n;
    w->pos += (uint64_t)n;
  }
  return PB_OK;
}

static int pad_to_align(raw_writer *w, struct pb_error *err) {
  static const unsigned char zeros[RAW_ALIGN];
  size_t pad = (size_t)((RAW_ALIGN - w->pos % RAW_ALIGN) % RAW_ALIGN);
  return pad > 0 ? write_all(w, zeros, pad, err) : PB_OK;
}

static void raw_writer_free(void *p) {
  raw_writer *w = p;
  if (w == NULL) return;
  if (w->fd >= 0) close(w->fd);
  if (!w->finished) unlink(w->tmp);
  free(w->records);
  free(w->channels);
  free(w->path);
  free(w);
}

static int raw_writer_open(const char *path, const pb_write_params *params, void **wstate,
                           struct pb_error *err) {
  *wstate = NULL;
  /* Raw keeps decoded pixels. One gen writes every format with one --compression, so a codec
   * another format takes is let through (and not applied); a name no format knows is a typo. */
  static const char *const codecs[] = {
      "none", "zstd", "gzip", "zlib", "deflate", "lzw", "packbits", "lzma", "lz4", "lz4_raw",
      "snappy", "uncompressed", "blosc", "blosc-lz4", "blosc-lz4hc", "blosc-zstd",
      "blosc-blosclz", "blosc-zlib", NULL};
  const char *c = params->compression;
  int known = c == NULL || c[0] == '\0';
  for (int i = 0; !known && codecs[i] != NULL; i++) known = strcmp(c, codecs[i]) == 0;
  if (!known)
    return pb_error_set(err, PB_EINVAL,
                        "raw: unknown compression '%s' (raw stores decoded pixels and takes "
                        "none; the codec names of the other formats are accepted and ignored)",
                        c);
  raw_writer *w = calloc(1, sizeof *w);
  if (w == NULL || (w->path = strdup(path)) == NULL) {
    free(w);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  /* Missing parent folders are made, as the folder formats' writers make theirs. */
  char parent[4096];
  const char *base;
  pb__path_split(path, parent, sizeof parent, &base);
  int mk = pb__temp_sibling(path, w->tmp, sizeof w->tmp) != PB_OK
               ? pb_error_set(err, PB_EINVAL, "%s: path too long", path)
               : pb__mkdirs(parent, err);
  if (mk != PB_OK) {
    w->finished = 1; /* nothing of ours to remove */
    raw_writer_free(w);
    return mk;
  }
  w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (w->fd < 0) {
    int rc = pb_error_set(err, -errno, "%s: cannot create: %s", w->tmp, strerror(errno));
    w->finished = 1; /* nothing of ours to remove */
    raw_writer_free(w);
    return rc;
  }
  unsigned char header[RAW_HEADER_SIZE] = {0}; /* filled in by finish */
  int rc = write_all(w, header, sizeof header, err);
  if (rc != PB_OK) {
    raw_writer_free(w);
    return rc;
  }
  *wstate = w;
  return PB_OK;
}

static int raw_writer_add(void *p, const pb_image_meta *meta, const void *pixels,
                          struct pb_error *err) {
  raw_writer *w = p;
  if (meta->n_channels < 0 || meta->n_channels > PB_MAX_CHANNELS)
    return pb_error_set(err, PB_EINVAL, "image '%s': %d channels (at most %d)", meta->name,
                        meta->n_channels, PB_MAX_CHANNELS);
  if (w->count == w->cap) {
    uint64_t cap = w->cap ? w->cap * 2 : 256;
    unsigned char *r = realloc(w->records, (size_t)cap * RAW_RECORD_SIZE);
    if (r == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    w->records = r;
    w->cap = cap;
  }
  if (w->n_channels + (uint64_t)meta->n_channels > w->ch_cap) {
    uint64_t cap = w->ch_cap ? w->ch_cap * 2 : 256;
    while (cap < w->n_channels + (uint64_t)meta->n_channels) cap *= 2;
    unsigned char *c = realloc(w->channels, (size_t)cap * RAW_CHANNEL_SIZE);
    if (c == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    w->channels = c;
    w->ch_cap = cap;
  }
  PB_RETURN_NOT_OK(pad_to_align(w, err));
  uint64_t off = w->pos;
  size_t nbytes = pb_image_bytes(meta);
  PB_RETURN_NOT_OK(write_all(w, pixels, nbytes, err));

  unsigned char *r = w->records + w->count * RAW_RECORD_SIZE;
  memset(r, 0, RAW_RECORD_SIZE);
  put_u64(r, off);
  put_u64(r + 8, nbytes);
  put_u32(r + 16, (uint32_t)meta->dtype);
  put_u32(r + 20, (uint32_t)meta->n_channels);
  put_u64(r + 24, w->n_channels);
  for (int k = 0; k < PB_NDIM; k++) put_u64(r + 32 + 8 * (size_t)k, (uint64_t)meta->shape[k]);
  for (int k = 0; k < 3; k++) {
    put_f64(r + 72 + 8 * (size_t)k, meta->physical_size[k]);
    put_str(r + 96 + 16 * (size_t)k, meta->physical_unit[k], 16);
  }
  put_str(r + 144, meta->id, 64);
  put_str(r + 208, meta->name, 256);
  for (int c = 0; c < meta->n_channels; c++) {
    unsigned char *q = w->channels + (w->n_channels + (uint64_t)c) * RAW_CHANNEL_SIZE;
    const pb_channel *ch = &meta->channels[c];
    memset(q, 0, RAW_CHANNEL_SIZE);
    put_str(q, ch->id, 48);
    put_str(q + 48, ch->name, 64);
    put_str(q + 112, ch->illumination, 24);
    put_f32(q + 136, ch->emission_um);
    put_f32(q + 140, ch->excitation_um);
    put_u32(q + 144, ch->color_rgba);
  }
  w->n_channels += (uint64_t)meta->n_channels;
  w->count++;
  return PB_OK;
}

static int raw_writer_finish(void *p, struct pb_error *err) {
  raw_writer *w = p;
  PB_RETURN_NOT_OK(pad_to_align(w, err));
  uint64_t index_off = w->pos;
  PB_RETURN_NOT_OK(write_all(w, w->records, (size_t)(w->count * RAW_RECORD_SIZE), err));
  uint64_t ch_off = w->pos;
  PB_RETURN_NOT_OK(write_all(w, w->channels, (size_t)(w->n_channels * RAW_CHANNEL_SIZE), err));

  unsigned char h[RAW_HEADER_SIZE] = {0};
  memcpy(h, RAW_MAGIC, 8);
  put_u32(h + 8, RAW_VERSION);
  put_u32(h + 12, RAW_RECORD_SIZE);
  put_u64(h + 16, w->count);
  put_u64(h + 24, index_off);
  put_u64(h + 32, ch_off);
  put_u64(h + 40, w->n_channels);
  put_u32(h + 48, RAW_CHANNEL_SIZE);
  put_u64(h + 56, w->pos);
  if (pwrite(w->fd, h, sizeof h, 0) != (ssize_t)sizeof h)
    return pb_error_set(err, PB_EIO, "%s: write failed: %s", w->tmp, strerror(errno));
  int fd = w->fd;
  w->fd = -1;
  if (close(fd) != 0) return pb_error_set(err, PB_EIO, "%s: close failed: %s", w->tmp, strerror(errno));
  if (rename(w->tmp, w->path) != 0)
    return pb_error_set(err, -errno, "%s: cannot rename into place: %s", w->path, strerror(errno));
  w->finished = 1;
  return PB_OK;
}

const pb_format_vtable pb__format_raw = {
    .info = {"raw", "decoded pixels in one memory-mapped file (docs/format-raw.md)", 1, 1},
    .probe = raw_probe,
    .open = raw_open,
    .close = raw_close,
    .count = raw_count,
    .meta = raw_meta,
    .shape = raw_shape,
    .read = raw_read,
    .writer_open = raw_writer_open,
    .writer_add = raw_writer_add,
    .writer_finish = raw_writer_finish,
    .writer_free = raw_writer_free,
};
