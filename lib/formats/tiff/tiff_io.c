/* File access for the tiff backend: a pread-based libtiff client with a small read window,
 * silent per-handle error handlers, and a walker for the main IFD chain. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/tiff/tiff_backend.h"
#include "io/le.h"

/* Reads at most this long go through the window; IFDs and tag arrays are usually smaller. */
#define WIN_SMALL 4096
#define WIN_SIZE (16 * 1024)
/* Files up to this size are read whole by the first window fill: one system call for a small
 * image instead of one per header, directory and strip. */
#define WIN_WHOLE (64 * 1024)
/* libtiff refuses single allocations above this (corrupt tag counts must not eat memory). */
#define TIFF_MAX_ALLOC ((tmsize_t)1 << 30)
/* Upper bound on directories walked in one file (protects against absurd chains). */
#define MAX_IFDS ((uint64_t)1 << 22)

/* ---- silent error handling -------------------------------------------------------------- */

/* Every handle gets its own handlers through TIFFOpenOptions (libtiff 4.5), which also cover
 * what libtiff reports before the handle exists; libtiff's process-wide handlers are left as
 * the program set them, so a program that links libpipebench keeps its own. */

/* Keeps the first message: later ones are usually consequences of it. */
static int handle_error(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
static int handle_error(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap) {
  (void)tif;
  char *msg = user;
  if (msg != NULL && msg[0] == '\0') {
    char body[400];
    vsnprintf(body, sizeof body, fmt, ap);
    snprintf(msg, 512, "%s%s%s", module ? module : "", module ? ": " : "", body);
  }
  return 1; /* handled: libtiff must not call the global (printing) handlers */
}

static int handle_warning(TIFF *tif, void *user, const char *module, const char *fmt,
                          va_list ap) {
  (void)tif;
  (void)user;
  (void)module;
  (void)fmt;
  (void)ap;
  return 1;
}

static TIFFOpenOptions *make_options(char *msg) {
  TIFFOpenOptions *opts = TIFFOpenOptionsAlloc();
  if (opts == NULL) return NULL;
  TIFFOpenOptionsSetErrorHandlerExtR(opts, handle_error, msg);
  TIFFOpenOptionsSetWarningHandlerExtR(opts, handle_warning, msg);
  TIFFOpenOptionsSetMaxSingleMemAlloc(opts, TIFF_MAX_ALLOC);
  return opts;
}

const char *pb__tiff_msg(const pb__tiff_io *io) {
  return io->msg[0] != '\0' ? io->msg : "no details";
}

/* ---- the file --------------------------------------------------------------------------- */

int pb__tiff_io_open(pb__tiff_io *io, const char *path, const pb_read_options *opts,
                     const struct stat *known, const pb__io_known *seen, struct pb_error *err) {
  memset(io, 0, sizeof *io);
  io->path = path;
  if (pb__io_is_url(path)) {
    PB_RETURN_NOT_OK(pb__io_open_known(path, opts, seen, &io->file, err));
  } else { /* O_NONBLOCK: never blocks on a FIFO or a device named like a TIFF file */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
      return pb_error_set(err, errno == ENOENT ? PB_ENOTFOUND : -errno, "%s: cannot open: %s",
                          path, strerror(errno));
    if (known != NULL) {
      io->st = *known;
    } else if (fstat(fd, &io->st) != 0) {
      int e = errno;
      close(fd);
      return pb_error_set(err, -e, "%s: %s", path, strerror(e));
    }
    int rc = pb__io_file_from_fd(fd, path, opts, &io->st, &io->file, err);
    char *what = rc == PB_EFORMAT && err != NULL ? strstr(err->message, ", not a regular file")
                                                 : NULL;
    if (what != NULL) /* say what was expected */
      snprintf(what, sizeof err->message - (size_t)(what - err->message), ", not a TIFF file");
    PB_RETURN_NOT_OK(rc);
  }
  io->size = pb__io_size(io->file);
  return PB_OK;
}

void pb__tiff_io_close(pb__tiff_io *io) {
  pb__io_close(io->file);
  io->file = NULL;
  free(io->win);
  io->win = NULL;
  io->win_len = 0;
}

/* Copies up to n bytes at off (fewer only past the end of the file), preferring the window. */
static int io_read_at(pb__tiff_io *io, void *buf, size_t n, uint64_t off, size_t *got,
                      struct pb_error *err) {
  *got = 0;
  if (off >= io->size) return PB_OK;
  if (n > io->size - off) n = (size_t)(io->size - off);
  if (io->win != NULL && off >= io->win_off && off + n <= io->win_off + io->win_len) {
    memcpy(buf, io->win + (off - io->win_off), n);
    *got = n;
    return PB_OK;
  }
  int whole = io->size <= WIN_WHOLE;
  if (n > WIN_SMALL && !whole) {
    PB_RETURN_NOT_OK(pb__io_pread(io->file, buf, n, off, err));
    io->bytes_io += (int64_t)n;
    *got = n;
    return PB_OK;
  }
  if (io->win == NULL) {
    io->win_cap = whole ? (size_t)io->size : WIN_SIZE;
    io->win = malloc(io->win_cap > 0 ? io->win_cap : 1);
    if (io->win == NULL) return pb_error_set(err, PB_ENOMEM, "%s: out of memory", io->path);
  }
  uint64_t at = whole ? 0 : off;
  size_t len = io->size - at < io->win_cap ? (size_t)(io->size - at) : io->win_cap;
  io->win_len = 0;
  PB_RETURN_NOT_OK(pb__io_pread(io->file, io->win, len, at, err));
  io->bytes_io += (int64_t)len;
  io->win_off = at;
  io->win_len = len;
  if (n > at + len - off) n = (size_t)(at + len - off);
  memcpy(buf, io->win + (off - at), n);
  *got = n;
  return PB_OK;
}

int pb__tiff_io_pread(pb__tiff_io *io, void *buf, size_t n, uint64_t off, const char *what,
                      struct pb_error *err) {
  size_t got;
  PB_RETURN_NOT_OK(io_read_at(io, buf, n, off, &got, err));
  if (what == NULL) what = "data";
  if (got < n)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: truncated: %s needs bytes [%llu, %llu) but the file has %llu",
                        io->path, what, (unsigned long long)off,
                        (unsigned long long)(off + n), (unsigned long long)io->size);
  return PB_OK;
}

/* ---- libtiff client procedures ---------------------------------------------------------- */

/* libtiff reads through the I/O layer too, so a TIFF in remote storage reads the same way. A
 * failed read keeps the layer's message for pb__tiff_msg. */
static tmsize_t client_read(thandle_t h, void *buf, tmsize_t n) {
  pb__tiff_io *io = (pb__tiff_io *)h;
  if (n <= 0) return 0;
  size_t got;
  struct pb_error e;
  if (io_read_at(io, buf, (size_t)n, io->pos, &got, &e) != PB_OK) {
    if (io->msg[0] == '\0') snprintf(io->msg, sizeof io->msg, "%s", e.message);
    return -1;
  }
  io->pos += got;
  return (tmsize_t)got;
}

static tmsize_t client_write(thandle_t h, void *buf, tmsize_t n) {
  (void)h;
  (void)buf;
  (void)n;
  return -1; /* read-only */
}

static toff_t client_seek(thandle_t h, toff_t off, int whence) {
  pb__tiff_io *io = (pb__tiff_io *)h;
  uint64_t base = whence == SEEK_CUR ? io->pos : whence == SEEK_END ? io->size : 0;
  io->pos = base + off;
  return io->pos;
}

static int client_close(thandle_t h) {
  (void)h;
  return 0; /* the file belongs to pb__tiff_io */
}

static toff_t client_size(thandle_t h) { return ((pb__tiff_io *)h)->size; }

static int client_map(thandle_t h, void **base, toff_t *size) {
  (void)h;
  (void)base;
  (void)size;
  return 0;
}

static void client_unmap(thandle_t h, void *base, toff_t size) {
  (void)h;
  (void)base;
  (void)size;
}

TIFF *pb__tiff_client_open(pb__tiff_io *io, int header_only, struct pb_error *err) {
  io->msg[0] = '\0';
  io->pos = 0;
  TIFFOpenOptions *opts = make_options(io->msg);
  if (opts == NULL) {
    pb_error_set(err, PB_ENOMEM, "%s: out of memory", io->path);
    return NULL;
  }
  /* 'm': no memory mapping (reads go through the window); 'h': header only. */
  TIFF *tif = TIFFClientOpenExt(io->path, header_only ? "rmh" : "rm", (thandle_t)io, client_read,
                                client_write, client_seek, client_close, client_size, client_map,
                                client_unmap, opts);
  TIFFOpenOptionsFree(opts);
  if (tif == NULL)
    pb_error_set(err, PB_EFORMAT, "%s: libtiff cannot open it: %s", io->path, pb__tiff_msg(io));
  return tif;
}

TIFF *pb__tiff_open_write(const char *path, int bigtiff, char *msg, size_t msg_size,
                          struct pb_error *err) {
  if (msg_size < 512) {
    pb_error_set(err, PB_EINVAL, "%s: message buffer too small", path);
    return NULL;
  }
  msg[0] = '\0';
  TIFFOpenOptions *opts = make_options(msg);
  if (opts == NULL) {
    pb_error_set(err, PB_ENOMEM, "%s: out of memory", path);
    return NULL;
  }
  TIFF *tif = TIFFOpenExt(path, bigtiff ? "w8" : "w", opts);
  TIFFOpenOptionsFree(opts);
  if (tif == NULL)
    pb_error_set(err, PB_EIO, "%s: cannot create: %s", path,
                 msg[0] ? msg : strerror(errno));
  return tif;
}

/* ---- IFD chain ------------------------------------------------------------------------ */

#define get16 pb__get16
#define get32 pb__get32
#define get64 pb__get64

/* Open-addressing set of visited offsets, to stop at IFD loops. */
typedef struct offset_set {
  uint64_t *slots;
  size_t cap, n;
} offset_set;

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

/* 1 inserted, 0 already present, -1 out of memory. Offsets are never 0 here. */
static int set_insert(offset_set *s, uint64_t v) {
  if ((s->n + 1) * 2 > s->cap) {
    size_t ncap = s->cap ? s->cap * 2 : 64;
    uint64_t *ns = calloc(ncap, sizeof *ns);
    if (ns == NULL) return -1;
    for (size_t i = 0; i < s->cap; i++) {
      if (s->slots[i] == 0) continue;
      size_t j = (size_t)mix64(s->slots[i]) & (ncap - 1);
      while (ns[j] != 0) j = (j + 1) & (ncap - 1);
      ns[j] = s->slots[i];
    }
    free(s->slots);
    s->slots = ns;
    s->cap = ncap;
  }
  size_t j = (size_t)mix64(v) & (s->cap - 1);
  while (s->slots[j] != 0) {
    if (s->slots[j] == v) return 0;
    j = (j + 1) & (s->cap - 1);
  }
  s->slots[j] = v;
  s->n++;
  return 1;
}

/* Bytes per value of a TIFF field type, 0 for types this check does not know. */
static uint64_t type_size(uint16_t t) {
  switch (t) {
  case 1: case 2: case 6: case 7: return 1;
  case 3: case 8: return 2;
  case 4: case 9: case 11: case 13: return 4;
  case 5: case 10: case 12: case 16: case 17: case 18: return 8;
  default: return 0;
  }
}

/* The tags that say where a directory's pixels are, by name for messages. */
enum { T_WIDTH, T_LENGTH, T_SPP, T_RPS, T_PLANAR, T_TW, T_TL, T_SOFF, T_SCNT, T_TOFF, T_TCNT,
       T_COUNT };
static const uint16_t layout_tag_ids[T_COUNT] = {256, 257, 277, 278, 284, 322,
                                                 323, 273, 279, 324, 325};
static const char *const layout_tag_names[T_COUNT] = {
    "ImageWidth", "ImageLength", "SamplesPerPixel", "RowsPerStrip", "PlanarConfiguration",
    "TileWidth", "TileLength", "StripOffsets", "StripByteCounts", "TileOffsets",
    "TileByteCounts"};

/* " (Name)" for a tag named above, "" for others. */
static const char *tag_label(uint16_t tag, char *buf, size_t size) {
  buf[0] = '\0';
  for (int t = 0; t < T_COUNT; t++)
    if (layout_tag_ids[t] == tag) snprintf(buf, size, " (%s)", layout_tag_names[t]);
  return buf;
}

/* Checks that the out-of-line data of every entry of one directory's entry table at `at` lies
 * inside the file. libtiff only warns about such a tag and drops it, so a truncated file would
 * read with its metadata (the OME-XML) silently gone. On failure the reason is left in io->msg
 * and PB_EFORMAT returned. */
static int check_entries(pb__tiff_io *io, uint64_t at, uint64_t entries, size_t esize,
                         int bigtiff, int big) {
  size_t inline_n = bigtiff ? 8 : 4;
  for (uint64_t k = 0; k < entries; k++) {
    unsigned char e[20];
    struct pb_error e2;
    if (pb__tiff_io_pread(io, e, esize, at + k * esize, "a directory entry", &e2) != PB_OK) {
      snprintf(io->msg, sizeof io->msg, "%s", e2.message);
      return PB_EFORMAT;
    }
    uint16_t tag = get16(e, big), type = get16(e + 2, big);
    uint64_t count = bigtiff ? get64(e + 4, big) : get32(e + 4, big);
    uint64_t ts = type_size(type);
    if (ts == 0 || count > UINT64_MAX / ts || count * ts <= inline_n) continue;
    uint64_t off = bigtiff ? get64(e + 12, big) : get32(e + 8, big), n = count * ts;
    if (off > io->size || n > io->size - off) {
      char label[40];
      snprintf(io->msg, sizeof io->msg,
               "tag %u%s of the first directory has %llu bytes at offset %llu, past the end of "
               "the file (size %llu): truncated or damaged",
               tag, tag_label(tag, label, sizeof label), (unsigned long long)n,
               (unsigned long long)off, (unsigned long long)io->size);
      return PB_EFORMAT;
    }
  }
  return PB_OK;
}

/* ---- where a directory's pixels are ------------------------------------------------------ */

typedef struct layout_entry {
  int present;
  uint16_t type;
  uint64_t count;
  unsigned char val[8]; /* the entry's value field: the values, or where they are */
} layout_entry;

typedef struct layout_ctx {
  pb__tiff_io *io;
  int big, bigtiff;
  int64_t page;
  layout_entry e[T_COUNT];
} layout_ctx;

/* Value j of an entry of type SHORT, LONG or LONG8 (others were refused before). */
static int entry_values(layout_ctx *c, int t, uint64_t first, size_t n, uint64_t *out,
                        struct pb_error *err) {
  const layout_entry *e = &c->e[t];
  uint64_t ts = e->type == 3 ? 2 : e->type == 4 ? 4 : 8;
  size_t inline_n = c->bigtiff ? 8 : 4;
  unsigned char buf[4096];
  const unsigned char *p = e->val + first * ts;
  if (e->count * ts > inline_n) {
    uint64_t at = c->bigtiff ? get64(e->val, c->big) : get32(e->val, c->big);
    char what[64];
    snprintf(what, sizeof what, "the %s array", layout_tag_names[t]);
    PB_RETURN_NOT_OK(pb__tiff_io_pread(c->io, buf, n * ts, at + first * ts, what, err));
    p = buf;
  }
  for (size_t j = 0; j < n; j++)
    out[j] = ts == 2 ? get16(p + 2 * j, c->big) : ts == 4 ? get32(p + 4 * j, c->big)
                                                  : get64(p + 8 * j, c->big);
  return PB_OK;
}

static uint64_t scalar(layout_ctx *c, int t, uint64_t dflt) {
  uint64_t v = dflt;
  if (c->e[t].present && c->e[t].count >= 1 && entry_values(c, t, 0, 1, &v, NULL) != PB_OK)
    v = dflt;
  return v;
}

static int layout_fail(layout_ctx *c, struct pb_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int layout_fail(layout_ctx *c, struct pb_error *err, const char *fmt, ...) {
  char body[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  return pb_error_set(err, PB_EFORMAT, "%s: page %lld: %s", c->io->path, (long long)c->page,
                      body);
}

/* The offsets and byte counts of one kind (strips or tiles): both present, of an integer type,
 * with exactly `need` entries, and every block with data inside the file past the header. */
static int check_blocks(layout_ctx *c, int toff, int tcnt, uint64_t need, const char *why,
                        struct pb_error *err) {
  const int pair[2] = {toff, tcnt};
  for (int i = 0; i < 2; i++) {
    int t = pair[i];
    const layout_entry *e = &c->e[t];
    if (!e->present)
      return layout_fail(c, err, "the %s tag is missing; without it the pixels cannot be found",
                         layout_tag_names[t]);
    if (e->type != 3 && e->type != 4 && e->type != 16)
      return layout_fail(c, err, "%s has field type %u (SHORT, LONG or LONG8 expected)",
                         layout_tag_names[t], e->type);
    if (e->count != need)
      return layout_fail(c, err, "%s has %llu entries but %s needs %llu",
                         layout_tag_names[t], (unsigned long long)e->count, why,
                         (unsigned long long)need);
  }
  uint64_t header = c->bigtiff ? 16 : 8, size = c->io->size;
  uint64_t off[256], cnt[256];
  for (uint64_t k = 0; k < need; k += 256) {
    size_t n = need - k < 256 ? (size_t)(need - k) : 256;
    PB_RETURN_NOT_OK(entry_values(c, toff, k, n, off, err));
    PB_RETURN_NOT_OK(entry_values(c, tcnt, k, n, cnt, err));
    for (size_t j = 0; j < n; j++) {
      if (cnt[j] == 0) continue; /* a sparse block: libtiff and tifffile read it as zeros */
      if (off[j] < header || off[j] > size || cnt[j] > size - off[j])
        return layout_fail(c, err,
                           "%s entry %llu and %s entry %llu put data at [%llu, %llu), outside "
                           "the file's data (bytes %llu to %llu)",
                           layout_tag_names[toff], (unsigned long long)(k + j),
                           layout_tag_names[tcnt], (unsigned long long)(k + j),
                           (unsigned long long)off[j], (unsigned long long)(off[j] + cnt[j]),
                           (unsigned long long)header, (unsigned long long)size);
    }
  }
  return PB_OK;
}

int pb__tiff_check_layout(pb__tiff_io *io, uint64_t ifd_off, int64_t page, struct pb_error *err) {
  layout_ctx c;
  memset(&c, 0, sizeof c);
  c.io = io;
  c.page = page;
  unsigned char h[8];
  if (!io->header_known) { /* the IFD walk records it; reading byte 0 again costs a refill */
    PB_RETURN_NOT_OK(pb__tiff_io_pread(io, h, 4, 0, "the header", err));
    io->big_endian = h[0] == 'M';
    io->bigtiff = get16(h + 2, io->big_endian) == 43;
    io->header_known = 1;
  }
  c.big = io->big_endian;
  c.bigtiff = io->bigtiff;
  size_t csize = c.bigtiff ? 8 : 2, esize = c.bigtiff ? 20 : 12;
  PB_RETURN_NOT_OK(pb__tiff_io_pread(io, h, csize, ifd_off, "a directory", err));
  uint64_t entries = c.bigtiff ? get64(h, c.big) : get16(h, c.big);
  for (uint64_t k = 0; k < entries; k++) {
    unsigned char e[20];
    PB_RETURN_NOT_OK(
        pb__tiff_io_pread(io, e, esize, ifd_off + csize + k * esize, "a directory entry", err));
    uint16_t tag = get16(e, c.big);
    for (int t = 0; t < T_COUNT; t++) {
      if (layout_tag_ids[t] != tag) continue;
      layout_entry *le = &c.e[t];
      le->present = 1;
      le->type = get16(e + 2, c.big);
      le->count = c.bigtiff ? get64(e + 4, c.big) : get32(e + 4, c.big);
      memcpy(le->val, e + (c.bigtiff ? 12 : 8), c.bigtiff ? 8 : 4);
      /* a scalar of an unexpected type is libtiff's to judge; arrays are checked below */
      if (le->type != 3 && le->type != 4 && le->type != 16 && t < T_SOFF) le->present = 0;
    }
  }
  uint64_t w = scalar(&c, T_WIDTH, 0), hgt = scalar(&c, T_LENGTH, 0);
  uint64_t spp = scalar(&c, T_SPP, 1), planar = scalar(&c, T_PLANAR, 1);
  if (w == 0 || hgt == 0) return PB_OK; /* libtiff reports a missing size itself */
  uint64_t planes = planar == 2 && spp > 1 ? spp : 1;
  char why[160];
  if (c.e[T_TW].present || c.e[T_TL].present || c.e[T_TOFF].present) {
    uint64_t tw = scalar(&c, T_TW, 0), tl = scalar(&c, T_TL, 0);
    if (tw == 0 || tl == 0)
      return layout_fail(&c, err, "%s is %llu: tiles need a non-zero TileWidth and TileLength",
                         tw == 0 ? "TileWidth" : "TileLength",
                         (unsigned long long)(tw == 0 ? tw : tl));
    uint64_t need = ((w + tw - 1) / tw) * ((hgt + tl - 1) / tl) * planes;
    snprintf(why, sizeof why, "a %llux%llu image in %llux%llu tiles (TileWidth x TileLength)",
             (unsigned long long)w, (unsigned long long)hgt, (unsigned long long)tw,
             (unsigned long long)tl);
    return check_blocks(&c, T_TOFF, T_TCNT, need, why, err);
  }
  uint64_t rps = scalar(&c, T_RPS, UINT32_MAX);
  if (rps == 0)
    return layout_fail(&c, err, "RowsPerStrip is 0: strips need at least one row");
  if (rps > hgt) rps = hgt;
  uint64_t need = ((hgt + rps - 1) / rps) * planes;
  snprintf(why, sizeof why, "ImageLength %llu at RowsPerStrip %llu", (unsigned long long)hgt,
           (unsigned long long)rps);
  return check_blocks(&c, T_SOFF, T_SCNT, need, why, err);
}

int pb__tiff_walk_ifds(pb__tiff_io *io, uint64_t max_ifds, uint64_t **offsets, uint64_t *count,
                       struct pb_error *err) {
  *offsets = NULL;
  *count = 0;
  unsigned char h[16];
  if (io->size < 8)
    return pb_error_set(err, PB_EFORMAT, "%s: not a TIFF file (only %llu bytes)", io->path,
                        (unsigned long long)io->size);
  PB_RETURN_NOT_OK(pb__tiff_io_pread(io, h, io->size >= 16 ? 16 : 8, 0, "the header", err));
  int big;
  if (h[0] == 'I' && h[1] == 'I') big = 0;
  else if (h[0] == 'M' && h[1] == 'M') big = 1;
  else
    return pb_error_set(err, PB_EFORMAT,
                        "%s: not a TIFF file (starts with bytes %02x %02x %02x %02x, expected "
                        "'II' or 'MM')",
                        io->path, h[0], h[1], h[2], h[3]);
  uint16_t version = get16(h + 2, big);
  int bigtiff;
  uint64_t off;
  if (version == 42) {
    bigtiff = 0;
    off = get32(h + 4, big);
  } else if (version == 43) {
    if (io->size < 16 || get16(h + 4, big) != 8)
      return pb_error_set(err, PB_EFORMAT, "%s: broken BigTIFF header", io->path);
    bigtiff = 1;
    off = get64(h + 8, big);
  } else {
    return pb_error_set(err, PB_EFORMAT, "%s: not a TIFF file (version %u, expected 42 or 43)",
                        io->path, version);
  }
  io->big_endian = big;
  io->bigtiff = bigtiff;
  io->header_known = 1;
  if (off == 0) return pb_error_set(err, PB_EFORMAT, "%s: TIFF file has no images", io->path);
  uint64_t limit = max_ifds ? max_ifds : MAX_IFDS;
  size_t cap = 0;
  uint64_t n = 0, *v = NULL;
  offset_set seen = {NULL, 0, 0};
  int rc = PB_OK;
  char what[96];
  while (off != 0 && n < limit) {
    int ins = set_insert(&seen, off);
    if (ins < 0) {
      rc = pb_error_set(err, PB_ENOMEM, "%s: out of memory", io->path);
      break;
    }
    if (ins == 0) {
      rc = pb_error_set(err, PB_EFORMAT,
                        "%s: broken IFD chain: directory %llu points back to offset %llu (a loop)",
                        io->path, (unsigned long long)n, (unsigned long long)off);
      break;
    }
    unsigned char b[8];
    size_t csize = bigtiff ? 8 : 2, esize = bigtiff ? 20 : 12, nsize = bigtiff ? 8 : 4;
    snprintf(what, sizeof what, "directory %llu at offset %llu", (unsigned long long)n,
             (unsigned long long)off);
    if (off >= io->size) {
      rc = pb_error_set(err, PB_EFORMAT,
                        "%s: broken IFD chain: %s lies beyond the end of the file (size %llu)",
                        io->path, what, (unsigned long long)io->size);
      break;
    }
    rc = pb__tiff_io_pread(io, b, csize, off, what, err);
    if (rc != PB_OK) break;
    uint64_t entries = bigtiff ? get64(b, big) : get16(b, big);
    if (entries > (io->size - off) / esize) {
      rc = pb_error_set(err, PB_EFORMAT,
                        "%s: broken IFD: %s claims %llu entries, more than the file holds",
                        io->path, what, (unsigned long long)entries);
      break;
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      uint64_t *nv = realloc(v, cap * sizeof *v);
      if (nv == NULL) {
        rc = pb_error_set(err, PB_ENOMEM, "%s: out of memory", io->path);
        break;
      }
      v = nv;
    }
    if (n == 0) { /* the first directory's tag data must lie in the file (truncation) */
      rc = check_entries(io, off + csize, entries, esize, bigtiff, big);
      if (rc != PB_OK) {
        pb_error_set(err, PB_EFORMAT, "%s: %s", io->path, io->msg);
        io->msg[0] = '\0';
        break;
      }
    }
    v[n++] = off;
    uint64_t next_at = off + csize + entries * esize;
    rc = pb__tiff_io_pread(io, b, nsize, next_at, what, err);
    if (rc != PB_OK) break;
    off = bigtiff ? get64(b, big) : get32(b, big);
  }
  free(seen.slots);
  if (rc != PB_OK) {
    free(v);
    return rc;
  }
  *offsets = v;
  *count = n;
  return PB_OK;
}
