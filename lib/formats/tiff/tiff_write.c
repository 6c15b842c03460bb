/* Writing a tiff dataset: one OME-TIFF per image, planes as pages in XYZCT order, built in a
 * temporary sibling folder that is renamed into place on finish. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/env.h"
#include "formats/tiff/tiff_backend.h"

/* libtiff's version, for every result row (common/env.h): TIFFGetVersion() is a multi-line
 * banner; its first line's version number is kept. */
static void libtiff_version(char *buf, size_t size) {
  const char *tv = TIFFGetVersion();
  const char *num = tv ? strstr(tv, "Version ") : NULL;
  snprintf(buf, size, "%s", num ? num + 8 : (tv ? tv : ""));
  buf[strcspn(buf, "\n")] = '\0';
  size_t n = strlen(buf);
  while (n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '\r')) buf[--n] = '\0';
}
PB__ENV_VERSION(register_libtiff, "libtiff_version", libtiff_version)

/* Target size of one strip when the caller does not ask for tiles. */
#define STRIP_BYTES (64 * 1024)
/* Classic TIFF offsets are 32-bit; above this estimate a file switches to BigTIFF. */
#define CLASSIC_LIMIT ((uint64_t)3900 * 1024 * 1024)

typedef struct tiff_writer {
  char *path;
  char tmp[4096];
  uint16_t compression;
  int level, predictor, bigtiff;
  uint32_t tile_h, tile_w; /* 0: striped */
  int64_t added;
  char **names;
  size_t n_names;
  int finished;
  unsigned char *buf;
  size_t buf_cap;
} tiff_writer;

static int parse_compression(const char *name, uint16_t *out, struct pb_error *err) {
  if (name == NULL || strcmp(name, "none") == 0 || name[0] == '\0') *out = COMPRESSION_NONE;
  else if (strcmp(name, "deflate") == 0 || strcmp(name, "zlib") == 0 || strcmp(name, "gzip") == 0)
    *out = COMPRESSION_ADOBE_DEFLATE;
  else if (strcmp(name, "lzw") == 0) *out = COMPRESSION_LZW;
  else if (strcmp(name, "zstd") == 0) *out = COMPRESSION_ZSTD;
  else if (strcmp(name, "packbits") == 0) *out = COMPRESSION_PACKBITS;
  else if (strcmp(name, "lzma") == 0) *out = COMPRESSION_LZMA;
  else
    return pb_error_set(err, PB_EINVAL,
                        "tiff: unknown compression '%s' (none, deflate, lzw, zstd, packbits, lzma)",
                        name);
  if (!TIFFIsCODECConfigured(*out))
    return pb_error_set(err, PB_EUNSUPPORTED, "tiff: compression '%s' is not in this libtiff", name);
  return PB_OK;
}

static int parse_tile(const char *v, uint32_t *th, uint32_t *tw, struct pb_error *err) {
  char *end;
  unsigned long a = strtoul(v, &end, 10), b = 0;
  if (*end == 'x' || *end == 'X') b = strtoul(end + 1, &end, 10);
  else if (*end == '\0') b = a;
  if (*end != '\0' || a == 0 || b == 0 || a > 65536 || b > 65536)
    return pb_error_set(err, PB_EINVAL, "tiff: option tile=%s is not YxX (e.g. tile=256x256)", v);
  if (a % 16 != 0 || b % 16 != 0)
    return pb_error_set(err, PB_EINVAL, "tiff: option tile=%s: TIFF tiles must be multiples of 16",
                        v);
  *th = (uint32_t)a;
  *tw = (uint32_t)b;
  return PB_OK;
}

int pb__tiff_writer_open(const char *path, const pb_write_params *params, void **wstate,
                         struct pb_error *err) {
  *wstate = NULL;
  tiff_writer *w = calloc(1, sizeof *w);
  if (w == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int rc = parse_compression(params->compression, &w->compression, err);
  char v[64];
  w->level = params->level;
  /* zstd's own default (libtiff would use 9, whose tables cost more to set up per strip than
   * compressing a 64 KiB strip). */
  if (w->level <= 0 && w->compression == COMPRESSION_ZSTD) w->level = 3;
  w->predictor = 1;
  if (rc == PB_OK && pb__opt_get(params->options, "predictor", v, sizeof v)) {
    if (strcmp(v, "1") == 0 || strcmp(v, "2") == 0 || strcmp(v, "3") == 0) w->predictor = v[0] - '0';
    else rc = pb_error_set(err, PB_EINVAL, "tiff: option predictor=%s must be 1, 2 or 3", v);
  }
  if (rc == PB_OK && pb__opt_get(params->options, "bigtiff", v, sizeof v)) {
    if (strcmp(v, "1") == 0 || strcmp(v, "0") == 0) w->bigtiff = v[0] == '1';
    else rc = pb_error_set(err, PB_EINVAL, "tiff: option bigtiff=%s must be 0 or 1", v);
  }
  if (rc == PB_OK && pb__opt_get(params->options, "tile", v, sizeof v)) {
    rc = parse_tile(v, &w->tile_h, &w->tile_w, err);
  } else if (rc == PB_OK && (params->chunk[PB_Y] > 0 || params->chunk[PB_X] > 0)) {
    char t[64];
    snprintf(t, sizeof t, "%lldx%lld",
             (long long)(params->chunk[PB_Y] > 0 ? params->chunk[PB_Y] : params->chunk[PB_X]),
             (long long)(params->chunk[PB_X] > 0 ? params->chunk[PB_X] : params->chunk[PB_Y]));
    rc = parse_tile(t, &w->tile_h, &w->tile_w, err);
  }
  if (rc == PB_OK && w->compression == COMPRESSION_NONE) w->predictor = 1;
  if (rc == PB_OK) {
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode))
      rc = pb_error_set(err, PB_EINVAL, "%s: exists and is not a folder", path);
  }
  if (rc == PB_OK) {
    w->path = strdup(path);
    if (w->path == NULL) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  if (rc == PB_OK) {
    /* "out/" and "out" are the same folder; the sibling must be next to it, not inside. */
    size_t n = strlen(w->path);
    while (n > 1 && w->path[n - 1] == '/') w->path[--n] = '\0';
    pb__temp_sibling(w->path, w->tmp, sizeof w->tmp);
    rc = pb__mkdirs(w->tmp, err);
    if (rc != PB_OK) w->tmp[0] = '\0';
  }
  if (rc != PB_OK) {
    pb__tiff_writer_free(w);
    return rc;
  }
  *wstate = w;
  return PB_OK;
}

static int has_suffix(const char *s, const char *suf) {
  size_t n = strlen(s), k = strlen(suf);
  return n > k && strcasecmp(s + n - k, suf) == 0;
}

static int scratch(tiff_writer *w, size_t need) {
  if (need <= w->buf_cap) return PB_OK;
  unsigned char *nb = pb_alloc(need);
  if (nb == NULL) return PB_ENOMEM;
  pb_free(w->buf, w->buf_cap);
  w->buf = nb;
  w->buf_cap = need;
  return PB_OK;
}

static void sample_format(pb_dtype d, uint16_t *bps, uint16_t *fmt) {
  *bps = (uint16_t)(pb_dtype_size(d) * 8);
  *fmt = d == PB_FLOAT32 || d == PB_FLOAT64 ? SAMPLEFORMAT_IEEEFP
         : d == PB_INT16                    ? SAMPLEFORMAT_INT
                                            : SAMPLEFORMAT_UINT;
}

/* Writes one plane (y*x pixels at src) as the current page. */
static int write_page(tiff_writer *w, TIFF *tif, const pb_image_meta *m, const unsigned char *src,
                      const char *xml, int64_t page, const char *file, const char *msg,
                      struct pb_error *err) {
  uint32_t width = (uint32_t)m->shape[PB_X], height = (uint32_t)m->shape[PB_Y];
  size_t es = pb_dtype_size(m->dtype);
  uint16_t bps, fmt;
  sample_format(m->dtype, &bps, &fmt);
  int predictor = w->predictor;
  /* Horizontal differencing on float bits is what libtiff does but not what readers expect;
   * floats get the floating-point predictor instead. */
  if (predictor == 2 && fmt == SAMPLEFORMAT_IEEEFP) predictor = 3;
  if (predictor == 3 && fmt != SAMPLEFORMAT_IEEEFP) predictor = 2;
  /* Only these codecs take a predictor in libtiff (PackBits has no such tag). */
  if (w->compression != COMPRESSION_LZW && w->compression != COMPRESSION_ADOBE_DEFLATE &&
      w->compression != COMPRESSION_ZSTD && w->compression != COMPRESSION_LZMA)
    predictor = 1;
  int ok = TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, width) &&
           TIFFSetField(tif, TIFFTAG_IMAGELENGTH, height) &&
           TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, bps) &&
           TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 1) &&
           TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT, fmt) &&
           TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK) &&
           TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG) &&
           TIFFSetField(tif, TIFFTAG_COMPRESSION, w->compression);
  if (ok && predictor > 1) ok = TIFFSetField(tif, TIFFTAG_PREDICTOR, predictor);
  if (ok && w->level > 0) {
    if (w->compression == COMPRESSION_ADOBE_DEFLATE)
      ok = TIFFSetField(tif, TIFFTAG_ZIPQUALITY, w->level > 9 ? 9 : w->level);
    else if (w->compression == COMPRESSION_ZSTD)
      ok = TIFFSetField(tif, TIFFTAG_ZSTD_LEVEL, w->level > 22 ? 22 : w->level);
    else if (w->compression == COMPRESSION_LZMA)
      ok = TIFFSetField(tif, TIFFTAG_LZMAPRESET, w->level > 9 ? 9 : w->level);
  }
  if (ok && page == 0) {
    ok = TIFFSetField(tif, TIFFTAG_IMAGEDESCRIPTION, xml) &&
         TIFFSetField(tif, TIFFTAG_SOFTWARE, "pipebench");
  }
  size_t row = (size_t)width * es;
  if (ok && w->tile_w > 0) {
    ok = TIFFSetField(tif, TIFFTAG_TILEWIDTH, w->tile_w) &&
         TIFFSetField(tif, TIFFTAG_TILELENGTH, w->tile_h);
  } else if (ok) {
    size_t rps = STRIP_BYTES / row;
    if (rps < 1) rps = 1;
    if (rps > height) rps = height;
    ok = TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, (uint32_t)rps);
  }
  if (!ok)
    return pb_error_set(err, PB_EIO, "%s: page %lld: cannot set tags: %s", file, (long long)page,
                        msg[0] ? msg : "no details");
  /* libtiff may change the buffer it encodes (predictor, byte order): give it a copy unless
   * it stores the bytes as they are. */
  int copy = w->compression != COMPRESSION_NONE || predictor > 1;
  if (w->tile_w > 0) {
    uint32_t th = w->tile_h, tw = w->tile_w;
    size_t tsize = (size_t)th * tw * es;
    if (scratch(w, tsize) != PB_OK) return pb_error_set(err, PB_ENOMEM, "out of memory");
    uint32_t k = 0;
    for (uint32_t y = 0; y < height; y += th) {
      for (uint32_t x = 0; x < width; x += tw, k++) {
        uint32_t vh = height - y < th ? height - y : th, vw = width - x < tw ? width - x : tw;
        if (vh < th || vw < tw) memset(w->buf, 0, tsize);
        for (uint32_t r = 0; r < vh; r++)
          memcpy(w->buf + (size_t)r * tw * es, src + ((size_t)(y + r) * width + x) * es,
                 (size_t)vw * es);
        if (TIFFWriteEncodedTile(tif, k, w->buf, (tmsize_t)tsize) < 0)
          return pb_error_set(err, PB_EIO, "%s: page %lld, tile %u: write failed: %s", file,
                              (long long)page, k, msg[0] ? msg : "no details");
      }
    }
  } else {
    uint32_t rps = 0;
    TIFFGetField(tif, TIFFTAG_ROWSPERSTRIP, &rps);
    uint32_t k = 0;
    for (uint32_t y = 0; y < height; y += rps, k++) {
      uint32_t rows = height - y < rps ? height - y : rps;
      size_t size = (size_t)rows * row;
      const unsigned char *p = src + (size_t)y * row;
      if (copy) {
        if (scratch(w, size) != PB_OK) return pb_error_set(err, PB_ENOMEM, "out of memory");
        memcpy(w->buf, p, size);
        p = w->buf;
      }
      if (TIFFWriteEncodedStrip(tif, k, (void *)(uintptr_t)p, (tmsize_t)size) < 0)
        return pb_error_set(err, PB_EIO, "%s: page %lld, strip %u: write failed: %s", file,
                            (long long)page, k, msg[0] ? msg : "no details");
    }
  }
  if (!TIFFWriteDirectory(tif))
    return pb_error_set(err, PB_EIO, "%s: page %lld: cannot write its directory: %s", file,
                        (long long)page, msg[0] ? msg : "no details");
  return PB_OK;
}

int pb__tiff_writer_add(void *wstate, const pb_image_meta *m, const void *pixels,
                        struct pb_error *err) {
  tiff_writer *w = wstate;
  if (m->shape[PB_X] > UINT32_MAX || m->shape[PB_Y] > UINT32_MAX)
    return pb_error_set(err, PB_EINVAL, "image '%s': planes larger than 2^32 pixels a side",
                        m->name);
  char name[256];
  if ((has_suffix(m->name, ".tif") || has_suffix(m->name, ".tiff")) && !strchr(m->name, '/') &&
      m->name[0] != '.')
    snprintf(name, sizeof name, "%s", m->name);
  else
    snprintf(name, sizeof name, "img_%05lld.ome.tif", (long long)w->added);
  for (size_t i = 0; i < w->n_names; i++)
    if (strcmp(w->names[i], name) == 0)
      return pb_error_set(err, PB_EINVAL, "image %lld: a file named '%s' was already written",
                          (long long)w->added, name);
  char **nn = realloc(w->names, (w->n_names + 1) * sizeof *nn);
  if (nn == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  w->names = nn;
  if ((w->names[w->n_names] = strdup(name)) == NULL)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  w->n_names++;

  char file[4400];
  snprintf(file, sizeof file, "%s/%s", w->tmp, name);
  char *xml = pb__ome_write(m, name);
  if (xml == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  size_t plane = (size_t)(m->shape[PB_Y] * m->shape[PB_X]) * pb_dtype_size(m->dtype);
  int64_t n_planes = m->shape[PB_T] * m->shape[PB_C] * m->shape[PB_Z];
  int big = w->bigtiff || (uint64_t)plane * (uint64_t)n_planes > CLASSIC_LIMIT;
  char msg[512];
  TIFF *tif = pb__tiff_open_write(file, big, msg, sizeof msg, err);
  if (tif == NULL) {
    free(xml);
    return PB_EIO;
  }
  int rc = PB_OK;
  /* XYZCT: z fastest, then c, then t, which is also the C order of T,C,Z planes in memory. */
  for (int64_t p = 0; p < n_planes && rc == PB_OK; p++)
    rc = write_page(w, tif, m, (const unsigned char *)pixels + (size_t)p * plane, xml, p, file, msg,
                    err);
  TIFFClose(tif);
  free(xml);
  if (rc == PB_OK && msg[0] != '\0')
    rc = pb_error_set(err, PB_EIO, "%s: libtiff reported: %s", file, msg);
  if (rc != PB_OK) {
    pb_error_prefix(err, "image %lld: ", (long long)w->added);
    return rc;
  }
  w->added++;
  return PB_OK;
}

int pb__tiff_writer_finish(void *wstate, struct pb_error *err) {
  tiff_writer *w = wstate;
  if (rename(w->tmp, w->path) != 0) {
    int e = errno;
    if (e == ENOTEMPTY || e == EEXIST)
      return pb_error_set(err, -e, "%s: already exists and is not empty; remove it first",
                          w->path);
    return pb_error_set(err, -e, "%s: cannot move %s into place: %s", w->path, w->tmp, strerror(e));
  }
  w->finished = 1;
  return PB_OK;
}

void pb__tiff_writer_free(void *wstate) {
  tiff_writer *w = wstate;
  if (w == NULL) return;
  if (!w->finished && w->tmp[0] != '\0') pb__remove_tree(w->tmp);
  pb__free_names(w->names, w->n_names);
  pb_free(w->buf, w->buf_cap);
  free(w->path);
  free(w);
}
