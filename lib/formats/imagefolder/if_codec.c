/* JPEG through TurboJPEG and PNG through libpng, from and to memory (docs/format-imagefolder.md).
 * Decoders treat every warning as an error, so a truncated or damaged file is refused rather
 * than read as a partly grey image. */
#include "formats/imagefolder/if_codec.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
/* jpeglib.h needs FILE and size_t first. */
#include <jpeglib.h>

#include "common/checked.h"
#include "common/env.h"

#ifndef PB_TURBOJPEG_VERSION
#define PB_TURBOJPEG_VERSION ""
#endif

/* Versions for every result row (common/env.h). TurboJPEG 2.x cannot report its own version, so
 * the one this build compiled against is given; libpng reports the one loaded. */
static void turbojpeg_version(char *buf, size_t size) { snprintf(buf, size, "%s", PB_TURBOJPEG_VERSION); }
static void libpng_version(char *buf, size_t size) { snprintf(buf, size, "%s", png_get_libpng_ver(NULL)); }
PB__ENV_VERSION(register_turbojpeg, "libjpeg_turbo_version", turbojpeg_version)
PB__ENV_VERSION(register_libpng, "libpng_version", libpng_version)

static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

pb__imagefolder_kind pb__imagefolder_sniff(const unsigned char *data, size_t size) {
  if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) return PB__IF_JPEG;
  if (size >= 8 && memcmp(data, png_sig, 8) == 0) return PB__IF_PNG;
  return PB__IF_UNKNOWN;
}

/* Refuses a claimed size before anything is allocated for it. */
static int check_size(const char *name, const pb__imagefolder_info *info, struct pb_error *err) {
  if (info->width < 1 || info->height < 1)
    return pb_error_set(err, PB_EFORMAT, "%s: image header claims %d x %d pixels", name,
                        info->width, info->height);
  int64_t pixels = (int64_t)info->width * info->height; /* two ints: cannot overflow */
  /* The pixel limit first, so that the byte count below stays far from overflowing. */
  int64_t bytes = pixels > PB__IF_MAX_PIXELS
                      ? INT64_MAX
                      : pixels * info->channels * (int64_t)pb_dtype_size(info->dtype);
  if (pixels > PB__IF_MAX_PIXELS || bytes > pb__max_image_bytes())
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "%s: image header claims %d x %d pixels, more than the %lld pixels "
                        "(or PIPEBENCH_MAX_IMAGE_BYTES) pipebench believes before decoding",
                        name, info->width, info->height, (long long)PB__IF_MAX_PIXELS);
  return PB_OK;
}

/* ---- JPEG ----------------------------------------------------------------------------------- */

/* Counts the scans (SOS markers) of a whole JPEG file by walking its marker segments and
 * skipping entropy-coded data (where 0xFF is followed by 0x00 stuffing or a restart marker).
 * Stops at EOI or at anything malformed, which the decoder then names. Linear in the size. */
static int64_t jpeg_count_scans(const unsigned char *d, size_t n) {
  int64_t scans = 0;
  size_t p = 2; /* after SOI */
  while (p + 1 < n) {
    if (d[p] != 0xff) return scans;
    unsigned m = d[p + 1];
    if (m == 0xff) { /* fill byte */
      p++;
      continue;
    }
    p += 2;
    if (m == 0xd9) return scans;                              /* EOI */
    if (m == 0x01 || (m >= 0xd0 && m <= 0xd7)) continue;      /* no length */
    if (p + 1 >= n) return scans;
    size_t len = ((size_t)d[p] << 8) | d[p + 1];
    if (len < 2 || len > n - p) return scans;
    p += len;
    if (m != 0xda) continue;
    scans++;
    /* Entropy-coded data up to the next marker that is neither stuffing nor a restart. */
    while (p + 1 < n && !(d[p] == 0xff && d[p + 1] != 0x00 && !(d[p + 1] >= 0xd0 && d[p + 1] <= 0xd7)))
      p++;
  }
  return scans;
}

/* Refuses a JPEG whose decoding would cost far more than its size suggests (if_codec.h): too
 * many scans, or scans x pixels beyond PB__IF_WORK_PER_BYTE per byte of the file. data is the
 * whole file. */
static int check_scans(const char *name, const pb__imagefolder_info *info, const unsigned char *data,
                       size_t size, struct pb_error *err) {
  int64_t scans = jpeg_count_scans(data, size);
  if (scans > PB__IF_MAX_SCANS)
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "%s: progressive JPEG of %lld scans, more than the %d pipebench decodes "
                        "(each scan is a pass over the whole image; docs/format-imagefolder.md)",
                        name, (long long)scans, PB__IF_MAX_SCANS);
  int64_t work = scans * (int64_t)info->width * info->height; /* < 2^8 * 2^28 */
  int64_t bound = (int64_t)size * PB__IF_WORK_PER_BYTE; /* size < 2^32 */
  if (work > PB__IF_WORK_FLOOR && work > bound)
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "%s: JPEG of %d x %d pixels in %lld scans from a file of %zu bytes: "
                        "decoding it would take %lld pixel-scans a byte, more than the %lld "
                        "pipebench decodes (docs/format-imagefolder.md)",
                        name, info->width, info->height, (long long)scans, size,
                        (long long)(work / (int64_t)(size ? size : 1)),
                        (long long)PB__IF_WORK_PER_BYTE);
  return PB_OK;
}

static int jpeg_fail(const char *name, tjhandle tj, const char *what, struct pb_error *err) {
  int rc = pb_error_set(err, PB_EFORMAT, "%s: %s JPEG: %s", name, what, tjGetErrorStr2(tj));
  tjDestroy(tj);
  return rc;
}

static int jpeg_header(const char *name, const unsigned char *data, size_t size, pb__imagefolder_info *info,
                       struct pb_error *err) {
  if (size > (size_t)0xffffffffu)
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: JPEG file of %zu bytes is too large", name, size);
  tjhandle tj = tjInitDecompress();
  if (tj == NULL) return pb_error_set(err, PB_ENOMEM, "%s: cannot start the JPEG decoder", name);
  int w, h, sub, cs;
  if (tjDecompressHeader3(tj, data, (unsigned long)size, &w, &h, &sub, &cs) != 0)
    return jpeg_fail(name, tj, "truncated or corrupt", err);
  tjDestroy(tj);
  if (cs == TJCS_CMYK || cs == TJCS_YCCK)
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "%s: CMYK JPEG is not supported (convert it to RGB, e.g. with PIL's "
                        "Image.convert('RGB'))",
                        name);
  info->kind = PB__IF_JPEG;
  info->width = w;
  info->height = h;
  info->channels = cs == TJCS_GRAY ? 1 : 3;
  info->dtype = PB_UINT8;
  return check_size(name, info, err);
}

/* Interleaved Y,X,C to planar C,Y,X. */
static void deinterleave(void *dst, const void *src, size_t pixels, int channels, size_t esize) {
  unsigned char *d = dst;
  const unsigned char *s = src;
  size_t plane = pixels * esize;
  for (size_t p = 0; p < pixels; p++)
    for (int c = 0; c < channels; c++)
      memcpy(d + (size_t)c * plane + p * esize, s + (p * (size_t)channels + (size_t)c) * esize, esize);
}

static void interleave(void *dst, const void *src, size_t pixels, int channels) {
  unsigned char *d = dst;
  const unsigned char *s = src;
  for (size_t p = 0; p < pixels; p++)
    for (int c = 0; c < channels; c++) d[p * (size_t)channels + (size_t)c] = s[(size_t)c * pixels + p];
}

static int jpeg_decode(const char *name, const unsigned char *data, size_t size,
                       const pb__imagefolder_info *info, void *dst, struct pb_error *err) {
  PB_RETURN_NOT_OK(check_scans(name, info, data, size, err));
  size_t pixels = (size_t)info->width * (size_t)info->height;
  unsigned char *tmp = dst;
  if (info->channels == 3 && (tmp = malloc(pixels * 3)) == NULL)
    return pb_error_set(err, PB_ENOMEM, "%s: out of memory for %zu pixels", name, pixels);
  tjhandle tj = tjInitDecompress();
  if (tj == NULL) {
    if (tmp != dst) free(tmp);
    return pb_error_set(err, PB_ENOMEM, "%s: cannot start the JPEG decoder", name);
  }
  int pf = info->channels == 1 ? TJPF_GRAY : TJPF_RGB;
  /* Accurate DCT: what PIL uses, so pixels match it exactly. */
  int flags = TJFLAG_ACCURATEDCT | TJFLAG_STOPONWARNING;
  int rc = tjDecompress2(tj, data, (unsigned long)size, tmp, info->width, 0, info->height, pf, flags);
  if (rc != 0) {
    if (tmp != dst) free(tmp);
    return jpeg_fail(name, tj, "truncated or corrupt", err);
  }
  tjDestroy(tj);
  if (tmp != dst) {
    deinterleave(dst, tmp, pixels, 3, 1);
    free(tmp);
  }
  return PB_OK;
}

/* Partial and scaled decoding needs libjpeg's own API: TurboJPEG 2.x scales but cannot crop. */
typedef struct jpeg_fail_mgr {
  struct jpeg_error_mgr pub;
  jmp_buf jmp;
  char message[JMSG_LENGTH_MAX];
} jpeg_fail_mgr;

static void jpeg_on_error(j_common_ptr cinfo) {
  jpeg_fail_mgr *f = (jpeg_fail_mgr *)(void *)cinfo->err;
  f->pub.format_message(cinfo, f->message);
  longjmp(f->jmp, 1);
}

/* Warnings (level -1: corrupt data the decoder would paper over) are errors, as
 * TJFLAG_STOPONWARNING makes them for whole-image decoding; trace messages are dropped. */
static void jpeg_on_message(j_common_ptr cinfo, int level) {
  if (level < 0) jpeg_on_error(cinfo);
}

/* One interleaved RGB row to three planes: a large share of a partial decode's time at -O2, so
 * GCC builds it at -O3 with an AVX2 clone (stride-3 loads become shuffles; not under the
 * sanitizers, whose run-time is not up yet when the clone's resolver runs). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
__attribute__((optimize("O3"), target_clones("avx2", "default")))
#endif
static void split_rgb(const unsigned char *restrict src, unsigned char *restrict r,
                      unsigned char *restrict g, unsigned char *restrict b, int w) {
  for (int x = 0; x < w; x++) {
    r[x] = src[3 * x];
    g[x] = src[3 * x + 1];
    b[x] = src[3 * x + 2];
  }
}

struct pb__imagefolder_jpeg {
  struct jpeg_decompress_struct cinfo;
  jpeg_fail_mgr fail;
  struct jpeg_progress_mgr progress;
  int started; /* a header has been read and the image not yet ended */
  unsigned char *row;
  size_t row_cap;
};

/* libjpeg's progress hook, called as input is consumed: a guard beside check_scans, in case a
 * file's scans are found by libjpeg where the marker walk stopped. */
static void jpeg_on_progress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  j_decompress_ptr d = (j_decompress_ptr)(void *)cinfo;
  if (d->input_scan_number > PB__IF_MAX_SCANS) {
    jpeg_fail_mgr *f = (jpeg_fail_mgr *)(void *)cinfo->err;
    snprintf(f->message, sizeof f->message, "more than %d scans", PB__IF_MAX_SCANS);
    longjmp(f->jmp, 1);
  }
}

pb__imagefolder_jpeg *pb__imagefolder_jpeg_new(void) {
  pb__imagefolder_jpeg *volatile dec = calloc(1, sizeof *dec); /* volatile: read after a longjmp */
  if (dec == NULL) return NULL;
  dec->cinfo.err = jpeg_std_error(&dec->fail.pub);
  dec->fail.pub.error_exit = jpeg_on_error;
  dec->fail.pub.emit_message = jpeg_on_message;
  if (setjmp(dec->fail.jmp)) { /* libjpeg could not allocate its object */
    free(dec);
    return NULL;
  }
  jpeg_create_decompress(&dec->cinfo);
  dec->progress.progress_monitor = jpeg_on_progress;
  dec->cinfo.progress = &dec->progress;
  return dec;
}

void pb__imagefolder_jpeg_free(pb__imagefolder_jpeg *dec) {
  if (dec == NULL) return;
  jpeg_destroy_decompress(&dec->cinfo);
  free(dec->row);
  free(dec);
}

/* Ends the current image, keeping the object (and its source manager) for the next one. */
static void jpeg_end(pb__imagefolder_jpeg *dec) {
  jpeg_abort_decompress(&dec->cinfo);
  dec->started = 0;
}

void pb__imagefolder_jpeg_end(pb__imagefolder_jpeg *dec) {
  if (dec != NULL && dec->started) jpeg_end(dec);
}

int pb__imagefolder_jpeg_header(pb__imagefolder_jpeg *dec, const char *name, const unsigned char *data, size_t size,
                       pb__imagefolder_info *info, struct pb_error *err) {
  memset(info, 0, sizeof *info);
  if (dec->started) jpeg_end(dec);
  if (size > (size_t)0xffffffffu)
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: JPEG file of %zu bytes is too large", name, size);
  if (size == 0 || pb__imagefolder_sniff(data, size) != PB__IF_JPEG)
    return pb_error_set(err, PB_EFORMAT, "%s: not a JPEG file", name);
  struct jpeg_decompress_struct *cinfo = &dec->cinfo;
  dec->fail.message[0] = '\0';
  if (setjmp(dec->fail.jmp)) {
    jpeg_end(dec);
    return pb_error_set(err, PB_EFORMAT, "%s: truncated or corrupt JPEG: %s", name, dec->fail.message);
  }
  jpeg_mem_src(cinfo, data, (unsigned long)size);
  dec->started = 1;
  jpeg_read_header(cinfo, TRUE);
  if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK) {
    jpeg_end(dec);
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "%s: CMYK JPEG is not supported (convert it to RGB, e.g. with PIL's "
                        "Image.convert('RGB'))",
                        name);
  }
  info->kind = PB__IF_JPEG;
  info->width = (int)cinfo->image_width;
  info->height = (int)cinfo->image_height;
  info->channels = cinfo->jpeg_color_space == JCS_GRAYSCALE ? 1 : 3;
  info->dtype = PB_UINT8;
  int rc = check_size(name, info, err);
  if (rc == PB_OK) rc = check_scans(name, info, data, size, err);
  if (rc != PB_OK) jpeg_end(dec);
  return rc;
}

int pb__imagefolder_jpeg_box(pb__imagefolder_jpeg *dec, const char *name, const pb__imagefolder_info *info, int scale, int y0,
                    int x0, int h, int w, void *dst, size_t dst_size, struct pb_error *err) {
  struct jpeg_decompress_struct *cinfo = &dec->cinfo;
  int rc = PB_OK;
  int sw = 0, sh = 0, ch = info->channels;
  if (!dec->started || info->kind != PB__IF_JPEG)
    rc = pb_error_set(err, PB_EINVAL, "%s: no JPEG header was read", name);
  else if (scale != 1 && scale != 2 && scale != 4 && scale != 8)
    rc = pb_error_set(err, PB_EINVAL, "%s: JPEG scale 1/%d (want 1, 2, 4 or 8)", name, scale);
  if (rc == PB_OK) {
    sw = (info->width + scale - 1) / scale;
    sh = (info->height + scale - 1) / scale;
    if (x0 < 0 || y0 < 0 || w < 1 || h < 1 || x0 > sw - w || y0 > sh - h)
      rc = pb_error_set(err, PB_ERANGE, "%s: box %dx%d at (%d, %d) outside the %dx%d image at 1/%d",
                        name, w, h, x0, y0, sw, sh, scale);
    else if (dst_size < (size_t)w * (size_t)h * (size_t)ch)
      rc = pb_error_set(err, PB_EINVAL, "%s: box needs %zu bytes, destination holds %zu", name,
                        (size_t)w * (size_t)h * (size_t)ch, dst_size);
  }
  if (rc != PB_OK) {
    if (dec->started) jpeg_end(dec);
    return rc;
  }
  dec->fail.message[0] = '\0';
  if (setjmp(dec->fail.jmp)) {
    jpeg_end(dec);
    return pb_error_set(err, PB_EFORMAT, "%s: truncated or corrupt JPEG: %s", name, dec->fail.message);
  }
  cinfo->out_color_space = ch == 1 ? JCS_GRAYSCALE : JCS_RGB;
  cinfo->scale_num = 1;
  cinfo->scale_denom = (unsigned)scale;
  cinfo->dct_method = JDCT_ISLOW; /* as whole-image decoding (and PIL) */
  jpeg_start_decompress(cinfo);
  if ((int)cinfo->output_width != sw || (int)cinfo->output_height != sh ||
      cinfo->output_components != ch) {
    rc = pb_error_set(err, PB_EFORMAT, "%s: JPEG decodes to %ux%u x %d at 1/%d, not %dx%d x %d",
                      name, cinfo->output_width, cinfo->output_height, cinfo->output_components,
                      scale, sw, sh, ch);
    jpeg_end(dec);
    return rc;
  }
  /* Cropping moves the left edge down to an iMCU boundary and may widen the span. The span
   * also reaches 16 pixels past the box on both sides: chroma upsampling at a cropped edge
   * repeats the edge's samples instead of reading its neighbours, so the edge's own pixels would
   * differ from a whole decode. */
  int cx0 = x0 > 16 ? x0 - 16 : 0, cx1 = x0 + w + 16 < sw ? x0 + w + 16 : sw;
  JDIMENSION xoff = (JDIMENSION)cx0, cw = (JDIMENSION)(cx1 - cx0);
  if (cw < cinfo->output_width) jpeg_crop_scanline(cinfo, &xoff, &cw);
  if (y0 > 0) jpeg_skip_scanlines(cinfo, (JDIMENSION)y0);
  /* Up to 16 rows a call (an iMCU row of 4:2:0 at full scale): libjpeg then upsamples and
   * converts them in one go instead of keeping a spare row for the next call. */
  enum { ROWS = 16 };
  size_t stride = (size_t)cinfo->output_width * (size_t)ch, need = stride * ROWS;
  if (need > dec->row_cap) {
    unsigned char *r = realloc(dec->row, need);
    if (r == NULL) {
      jpeg_end(dec);
      return pb_error_set(err, PB_ENOMEM, "%s: out of memory", name);
    }
    dec->row = r;
    dec->row_cap = need;
  }
  unsigned char *out = dst;
  size_t plane = (size_t)w * (size_t)h, skip = (size_t)(x0 - (int)xoff);
  JSAMPROW rows[ROWS];
  for (int k = 0; k < ROWS; k++) rows[k] = dec->row + (size_t)k * stride;
  for (int y = 0; y < h;) {
    JDIMENSION want = (JDIMENSION)(h - y < ROWS ? h - y : ROWS);
    JDIMENSION got = jpeg_read_scanlines(cinfo, rows, want);
    if (got == 0) {
      snprintf(dec->fail.message, sizeof dec->fail.message, "row %d of the box could not be read", y);
      longjmp(dec->fail.jmp, 1);
    }
    for (JDIMENSION k = 0; k < got; k++, y++) {
      const unsigned char *src = rows[k] + skip * (size_t)ch;
      if (ch == 1) {
        memcpy(out + (size_t)y * (size_t)w, src, (size_t)w);
      } else {
        unsigned char *r = out + (size_t)y * (size_t)w;
        split_rgb(src, r, r + plane, r + 2 * plane, w);
      }
    }
  }
  jpeg_end(dec); /* the rows below the box are never decoded */
  return PB_OK;
}

int pb__imagefolder_decode_jpeg_box(const char *name, const unsigned char *data, size_t size,
                           const pb__imagefolder_info *info, int scale, int y0, int x0, int h, int w,
                           void *dst, size_t dst_size, struct pb_error *err) {
  if (info->kind != PB__IF_JPEG)
    return pb_error_set(err, PB_EINVAL, "%s: not a JPEG file", name);
  pb__imagefolder_jpeg *dec = pb__imagefolder_jpeg_new();
  if (dec == NULL) return pb_error_set(err, PB_ENOMEM, "%s: cannot start the JPEG decoder", name);
  pb__imagefolder_info got;
  int rc = pb__imagefolder_jpeg_header(dec, name, data, size, &got, err);
  if (rc == PB_OK && (got.width != info->width || got.height != info->height ||
                      got.channels != info->channels)) {
    rc = pb_error_set(err, PB_EFORMAT, "%s: JPEG is %dx%d x %d, not %dx%d x %d", name, got.width,
                      got.height, got.channels, info->width, info->height, info->channels);
  }
  if (rc == PB_OK) rc = pb__imagefolder_jpeg_box(dec, name, info, scale, y0, x0, h, w, dst, dst_size, err);
  pb__imagefolder_jpeg_free(dec);
  return rc;
}

/* ---- PNG ------------------------------------------------------------------------------------ */

typedef struct png_io {
  const unsigned char *data;
  size_t size, pos;
  char message[256];
  jmp_buf jmp;
} png_io;

static void png_on_error(png_structp png, png_const_charp msg) {
  png_io *io = png_get_error_ptr(png);
  snprintf(io->message, sizeof io->message, "%s", msg);
  longjmp(io->jmp, 1);
}
/* libpng warns about harmless ancillary matters (an sRGB profile it knows to be wrong); pixels
 * are not affected, so warnings are dropped. */
static void png_on_warning(png_structp png, png_const_charp msg) {
  (void)png;
  (void)msg;
}

static void png_read_mem(png_structp png, png_bytep out, png_size_t n) {
  png_io *io = png_get_io_ptr(png);
  if (n > io->size - io->pos) png_error(png, "file ends early (truncated)");
  memcpy(out, io->data + io->pos, n);
  io->pos += n;
}

/* Header only when dst is NULL; otherwise decodes into dst (planar). */
static int png_run(const char *name, const unsigned char *data, size_t size, pb__imagefolder_info *info,
                   void *dst, struct pb_error *err) {
  png_io io = {.data = data, .size = size};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &io, png_on_error, png_on_warning);
  if (png == NULL) return pb_error_set(err, PB_ENOMEM, "%s: cannot start the PNG decoder", name);
  png_infop pi = png_create_info_struct(png);
  /* volatile: these change between setjmp and a longjmp back to it. */
  unsigned char *volatile owned = NULL;
  png_bytep *volatile rows = NULL;
  if (pi == NULL || setjmp(io.jmp)) {
    int no_info = pi == NULL;
    free(owned);
    free(rows);
    png_destroy_read_struct(&png, no_info ? NULL : &pi, NULL);
    if (no_info) return pb_error_set(err, PB_ENOMEM, "%s: cannot start the PNG decoder", name);
    return pb_error_set(err, PB_EFORMAT, "%s: truncated or corrupt PNG: %s", name, io.message);
  }
  png_set_read_fn(png, &io, png_read_mem);
  /* Decoding a huge claimed size is refused by check_size below; libpng's own limit is wider. */
  png_set_user_limits(png, 0x7fffffffu, 0x7fffffffu);
  png_read_info(png, pi);
  png_uint_32 w = png_get_image_width(png, pi), h = png_get_image_height(png, pi);
  int ct = png_get_color_type(png, pi), depth = png_get_bit_depth(png, pi);
  if (w > 0x7fffffffu || h > 0x7fffffffu) png_error(png, "image size out of range");
  pb__imagefolder_info in = {PB__IF_PNG, (int)w, (int)h, (ct & PNG_COLOR_MASK_COLOR) ? 3 : 1,
                    depth == 16 ? PB_UINT16 : PB_UINT8};
  int rc = check_size(name, &in, err);
  if (rc != PB_OK || dst == NULL) {
    png_destroy_read_struct(&png, &pi, NULL);
    if (rc == PB_OK) *info = in;
    return rc;
  }
  if (in.width != info->width || in.height != info->height || in.channels != info->channels ||
      in.dtype != info->dtype) {
    png_destroy_read_struct(&png, &pi, NULL);
    return pb_error_set(err, PB_EFORMAT, "%s: PNG changed while it was read", name);
  }
  if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (ct == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (ct & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  if (depth == 16) png_set_swap(png); /* PNG is big-endian; pixels are native (little) */
  png_set_interlace_handling(png);
  png_read_update_info(png, pi);
  size_t esize = pb_dtype_size(in.dtype), pixels = (size_t)w * h;
  size_t row = (size_t)w * (size_t)in.channels * esize;
  if (png_get_rowbytes(png, pi) != row) png_error(png, "unexpected row layout after transforms");
  if (in.channels != 1) owned = malloc(row * h);
  unsigned char *tmp = in.channels == 1 ? dst : owned;
  rows = malloc(sizeof(png_bytep) * h);
  if (tmp == NULL || rows == NULL) png_error(png, "out of memory");
  for (png_uint_32 y = 0; y < h; y++) rows[y] = tmp + (size_t)y * row;
  png_read_image(png, rows);
  png_read_end(png, NULL);
  if (owned != NULL) {
    deinterleave(dst, owned, pixels, in.channels, esize);
    free(owned);
  }
  free(rows);
  png_destroy_read_struct(&png, &pi, NULL);
  return PB_OK;
}

/* ---- both ----------------------------------------------------------------------------------- */

int pb__imagefolder_header(const char *name, const unsigned char *data, size_t size, pb__imagefolder_info *info,
                  struct pb_error *err) {
  memset(info, 0, sizeof *info);
  if (size == 0) return pb_error_set(err, PB_EFORMAT, "%s: empty file (0 bytes), not a JPEG or PNG", name);
  switch (pb__imagefolder_sniff(data, size)) {
  case PB__IF_JPEG: return jpeg_header(name, data, size, info, err);
  case PB__IF_PNG: return png_run(name, data, size, info, NULL, err);
  default: break;
  }
  unsigned char b[4] = {0};
  memcpy(b, data, size < 4 ? size : 4);
  return pb_error_set(err, PB_EFORMAT,
                      "%s: not a JPEG or PNG file (starts with bytes %02x %02x %02x %02x)", name,
                      b[0], b[1], b[2], b[3]);
}

int pb__imagefolder_decode(const char *name, const unsigned char *data, size_t size,
                  const pb__imagefolder_info *info, void *dst, size_t dst_size, struct pb_error *err) {
  size_t need = (size_t)info->width * (size_t)info->height * (size_t)info->channels *
                pb_dtype_size(info->dtype);
  if (dst_size < need)
    return pb_error_set(err, PB_EINVAL, "%s: image needs %zu bytes, destination holds %zu", name,
                        need, dst_size);
  if (info->kind == PB__IF_JPEG) return jpeg_decode(name, data, size, info, dst, err);
  if (info->kind == PB__IF_PNG) return png_run(name, data, size, (pb__imagefolder_info *)info, dst, err);
  return pb_error_set(err, PB_EFORMAT, "%s: not a JPEG or PNG file", name);
}

/* ---- encoding ------------------------------------------------------------------------------- */

typedef struct png_out {
  unsigned char *buf;
  size_t size, cap;
  int failed;
  char message[256];
  jmp_buf jmp;
} png_out;

static void png_write_mem(png_structp png, png_bytep data, png_size_t n) {
  png_out *o = png_get_io_ptr(png);
  if (n > o->cap - o->size) {
    size_t cap = o->cap ? o->cap : 65536;
    while (cap - o->size < n) cap *= 2;
    unsigned char *b = realloc(o->buf, cap);
    if (b == NULL) png_error(png, "out of memory");
    o->buf = b;
    o->cap = cap;
  }
  memcpy(o->buf + o->size, data, n);
  o->size += n;
}
static void png_flush_mem(png_structp png) { (void)png; }

static void png_on_write_error(png_structp png, png_const_charp msg) {
  png_out *o = png_get_error_ptr(png);
  snprintf(o->message, sizeof o->message, "%s", msg);
  longjmp(o->jmp, 1);
}

static int png_encode(const char *name, const uint8_t *il, int width, int height, int channels,
                      unsigned char **out, size_t *out_size, struct pb_error *err) {
  png_out o = {0};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &o, png_on_write_error, png_on_warning);
  if (png == NULL) return pb_error_set(err, PB_ENOMEM, "%s: cannot start the PNG encoder", name);
  png_infop pi = png_create_info_struct(png);
  if (pi == NULL || setjmp(o.jmp)) {
    int no_info = pi == NULL;
    png_destroy_write_struct(&png, no_info ? NULL : &pi);
    free(o.buf);
    return pb_error_set(err, PB_EIO, "%s: PNG encoding failed: %s", name,
                        no_info ? "out of memory" : o.message);
  }
  png_set_write_fn(png, &o, png_write_mem, png_flush_mem);
  png_set_IHDR(png, pi, (png_uint_32)width, (png_uint_32)height, 8,
               channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, pi);
  for (int y = 0; y < height; y++)
    png_write_row(png, il + (size_t)y * (size_t)width * (size_t)channels);
  png_write_end(png, pi);
  png_destroy_write_struct(&png, &pi);
  *out = o.buf;
  *out_size = o.size;
  return PB_OK;
}

int pb__imagefolder_encode(const char *name, const uint8_t *pixels, int width, int height, int channels,
                  int png, int quality, pb__imagefolder_subsampling sub, unsigned char **out,
                  size_t *out_size, struct pb_error *err) {
  *out = NULL;
  *out_size = 0;
  if (channels != 1 && channels != 3)
    return pb_error_set(err, PB_EINVAL, "%s: %d channels; JPEG and PNG take 1 (grey) or 3 (RGB)",
                        name, channels);
  size_t pixels_n = (size_t)width * (size_t)height;
  const uint8_t *il = pixels;
  uint8_t *tmp = NULL;
  if (channels == 3) {
    if ((tmp = malloc(pixels_n * 3)) == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    interleave(tmp, pixels, pixels_n, 3);
    il = tmp;
  }
  int rc;
  if (png) {
    rc = png_encode(name, il, width, height, channels, out, out_size, err);
  } else {
    tjhandle tj = tjInitCompress();
    unsigned char *jbuf = NULL;
    unsigned long jsize = 0;
    static const int tjsub[] = {TJSAMP_444, TJSAMP_422, TJSAMP_420};
    if (tj == NULL) {
      rc = pb_error_set(err, PB_ENOMEM, "%s: cannot start the JPEG encoder", name);
    } else if (tjCompress2(tj, il, width, 0, height, channels == 1 ? TJPF_GRAY : TJPF_RGB, &jbuf,
                           &jsize, channels == 1 ? TJSAMP_GRAY : tjsub[sub], quality,
                           TJFLAG_ACCURATEDCT) != 0) {
      rc = pb_error_set(err, PB_EIO, "%s: JPEG encoding failed: %s", name, tjGetErrorStr2(tj));
    } else if ((*out = malloc(jsize)) == NULL) {
      rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    } else {
      memcpy(*out, jbuf, jsize);
      *out_size = jsize;
      rc = PB_OK;
    }
    tjFree(jbuf);
    if (tj != NULL) tjDestroy(tj);
  }
  free(tmp);
  return rc;
}
