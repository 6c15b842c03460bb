/* The tiff backend: a folder of OME-TIFF (or plain TIFF) files, one image per file, or one
 * TIFF file. Per-file layout (shape, dtype, where each plane's directory is) is parsed once,
 * lazily, and cached; a read opens the file, jumps straight to the directories of the planes it
 * needs, fetches only the strips or tiles that meet the region and decodes them with libtiff. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/checked.h"
#include "common/safe_open.h"
#include "formats/tiff/tiff_backend.h"
#include "io/io.h"

/* Planes per image above this are treated as corrupt metadata. */
#define MAX_PLANES ((int64_t)1 << 22)

typedef struct tiff_file {
  pb__io_known known;   /* over a URL: the scan's size and validator, so a read opens without a HEAD */
  pb_dtype dtype;
  int64_t shape[PB_NDIM];
  double physical_size[3];
  char physical_unit[3][16];
  char id[64];
  int n_channels;
  pb_channel *channels; /* n_channels entries (malloc'd) */
  uint32_t width, height;
  uint16_t spp, planar, bps, sample_format;
  char order[8];        /* plane order: "XY" + page axes fastest..slowest */
  int64_t pages[3];     /* page counts along T, C (channels / spp), Z */
  int64_t n_planes;
  uint64_t *ifd;        /* directory offset per plane index (n_planes) */
  uint64_t file_size;   /* when scanned */
  struct stat st;       /* the file's fstat when scanned: reads open it without another */
  /* Where every plane's pixels lie when all of them are uncompressed strips stored one after
   * another (what pipebench, tifffile and most writers make by default): libtiff parsed them at
   * scan time, so a read only opens the file and preads rows. NULL: read through libtiff. */
  uint64_t *plane_at;
  int swapped;
} tiff_file;

typedef struct tiff_state {
  char *root;           /* folder, or the file when single */
  int single;
  char **names;
  size_t n;
  tiff_file **files;    /* NULL until scanned */
  unsigned char *tried; /* per file: scanned or read ahead, whether that worked or not */
  int64_t last;         /* the file meta was last asked for */
  int run;              /* how many files in a row were asked for in index order before it */
  unsigned char *raw, *dec; /* scratch: compressed bytes, one decoded strip or tile */
  size_t raw_cap, dec_cap;
  pb_read_options ro;   /* how files are read (its cache string is not kept) */
} tiff_state;

/* ---- names ------------------------------------------------------------------------------- */

static int has_tiff_suffix(const char *name) {
  size_t n = strlen(name);
  if (name[0] == '.') return 0;
  if (n > 4 && strcasecmp(name + n - 4, ".tif") == 0) return 1;
  if (n > 5 && strcasecmp(name + n - 5, ".tiff") == 0) return 1;
  return 0;
}

static int file_path(const tiff_state *st, size_t i, char *buf, size_t size) {
  int k = st->single ? snprintf(buf, size, "%s", st->root)
                     : snprintf(buf, size, "%s/%s", st->root, st->names[i]);
  return k > 0 && (size_t)k < size ? PB_OK : PB_EINVAL;
}

static int tiff_magic(const unsigned char *b) {
  return (b[0] == 'I' && b[1] == 'I' && (b[2] == 42 || b[2] == 43) && b[3] == 0) ||
         (b[0] == 'M' && b[1] == 'M' && b[2] == 0 && (b[3] == 42 || b[3] == 43));
}

/* Only a regular file is read (a FIFO or a device named *.tif would block the read). */
static int file_has_magic(const char *path) {
  unsigned char b[4];
  pb__io_file *f;
  if (pb__io_open(path, NULL, &f, NULL) != PB_OK) return 0;
  int ok = pb__io_size(f) >= 4 && pb__io_pread(f, b, 4, 0, NULL) == PB_OK && tiff_magic(b);
  pb__io_close(f);
  return ok;
}

/* A folder is a tiff dataset when its own top-level entries include regular *.tif / *.tiff
 * files; nothing below it is looked at. */
static int tiff_probe(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  if (S_ISREG(st.st_mode)) return file_has_magic(path) ? (has_tiff_suffix(path) ? 95 : 80) : 0;
  if (!S_ISDIR(st.st_mode)) return 0;
  DIR *d = opendir(path);
  if (d == NULL) return 0;
  int score = 0, looked = 0;
  struct dirent *e;
  while (score < 80 && looked < 256 && (e = readdir(d)) != NULL) {
    looked++;
    if (!has_tiff_suffix(e->d_name)) continue;
    char child[4096];
    if (snprintf(child, sizeof child, "%s/%s", path, e->d_name) >= (int)sizeof child) continue;
    struct stat cs;
    if (stat(child, &cs) != 0 || !S_ISREG(cs.st_mode)) continue;
    /* A damaged file still marks the folder, so that opening it names what is wrong. */
    int s = file_has_magic(child) ? 80 : 30;
    if (s > score) score = s;
  }
  closedir(d);
  return score;
}

/* ---- open / close ------------------------------------------------------------------------- */

static void file_free(tiff_file *f) {
  if (f == NULL) return;
  free(f->channels);
  free(f->ifd);
  free(f->plane_at);
  free(f);
}

static void tiff_close(void *state) {
  tiff_state *st = state;
  if (st == NULL) return;
  for (size_t i = 0; i < st->n; i++) file_free(st->files ? st->files[i] : NULL);
  free(st->files);
  free(st->tried);
  pb__free_names(st->names, st->n);
  pb_free(st->raw, st->raw_cap);
  pb_free(st->dec, st->dec_cap);
  free(st->root);
  free(st);
}

static int tiff_open(const char *path, const pb_read_options *opts, void **state,
                     struct pb_error *err) {
  *state = NULL;
  struct stat sb;
  int url = pb__io_is_url(path);
  if (url) { /* a HEAD (or a one-key listing), not a stat */
    pb__io_kind kind;
    PB_RETURN_NOT_OK(pb__io_stat(path, opts, &kind, NULL, err));
    if (kind == PB__IO_MISSING) return pb_error_set(err, PB_ENOTFOUND, "%s: not found", path);
    memset(&sb, 0, sizeof sb);
    sb.st_mode = kind == PB__IO_FILE ? S_IFREG : kind == PB__IO_DIR ? S_IFDIR : 0;
  } else if (stat(path, &sb) != 0) {
    return pb_error_set(err, PB_ENOTFOUND, "%s: %s", path, strerror(errno));
  }
  tiff_state *st = calloc(1, sizeof *st);
  if (st == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  st->ro = *opts;
  st->root = strdup(path);
  int rc = PB_OK;
  if (st->root == NULL) {
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    goto fail;
  }
  if (S_ISREG(sb.st_mode)) {
    st->single = 1;
    st->names = malloc(sizeof *st->names);
    const char *slash = strrchr(path, '/');
    if (st->names == NULL || (st->names[0] = strdup(slash ? slash + 1 : path)) == NULL) {
      free(st->names);
      st->names = NULL;
      rc = pb_error_set(err, PB_ENOMEM, "out of memory");
      goto fail;
    }
    st->n = 1;
  } else if (S_ISDIR(sb.st_mode)) {
    char **all;
    size_t n_all;
    rc = url ? pb__io_list(path, opts, &all, &n_all, err) : pb__list_dir(path, &all, &n_all, err);
    if (rc != PB_OK) goto fail;
    size_t k = 0;
    char *other = NULL; /* one unrelated name, for the message */
    for (size_t i = 0; i < n_all; i++) {
      if (has_tiff_suffix(all[i])) all[k++] = all[i];
      else if (other == NULL && all[i][0] != '.') other = all[i];
      else free(all[i]);
    }
    if (k == 0) {
      if (other != NULL)
        rc = pb_error_set(err, PB_EFORMAT,
                          "%s: no TIFF files (*.tif, *.tiff) in this folder; it holds other files "
                          "such as '%s'",
                          path, other);
      else
        rc = pb_error_set(err, PB_EFORMAT, "%s: no TIFF files (*.tif, *.tiff) in this folder",
                          path);
      free(other);
      free(all);
      goto fail;
    }
    free(other);
    st->names = all;
    st->n = k;
  } else {
    rc = pb_error_set(err, PB_EFORMAT, "%s: neither a TIFF file nor a folder of them", path);
    goto fail;
  }
  st->files = calloc(st->n, sizeof *st->files);
  st->tried = calloc(st->n, 1);
  st->last = -2;
  if (st->files == NULL || st->tried == NULL) {
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    goto fail;
  }
  *state = st;
  return PB_OK;
fail:
  tiff_close(st);
  return rc;
}

/* A copy of a scanned file's layout (the clone's own arrays). */
static tiff_file *file_copy(const tiff_file *a) {
  tiff_file *b = malloc(sizeof *b);
  if (b == NULL) return NULL;
  *b = *a;
  b->channels = NULL, b->ifd = NULL, b->plane_at = NULL;
  size_t planes = (size_t)a->n_planes * sizeof(uint64_t);
  size_t chans = (size_t)a->n_channels * sizeof *b->channels;
  int ok = (a->n_channels == 0 || (b->channels = malloc(chans)) != NULL) &&
           (a->ifd == NULL || (b->ifd = malloc(planes)) != NULL) &&
           (a->plane_at == NULL || (b->plane_at = malloc(planes)) != NULL);
  if (!ok) {
    file_free(b);
    return NULL;
  }
  if (a->n_channels > 0) memcpy(b->channels, a->channels, chans);
  if (a->ifd != NULL) memcpy(b->ifd, a->ifd, planes);
  if (a->plane_at != NULL) memcpy(b->plane_at, a->plane_at, planes);
  return b;
}

/* A second handle: the file list and every file's layout already scanned copied, so a loader's
 * reader threads neither list the folder again nor scan a file's directories a second time
 * (over a URL, requests for every image the loader looked at when it started); the scratch
 * buffers are the clone's own, and files not scanned yet are scanned by the clone. */
static int tiff_clone(const void *state, void **out, struct pb_error *err) {
  const tiff_state *src = state;
  *out = NULL;
  tiff_state *st = calloc(1, sizeof *st);
  if (st == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  st->ro = src->ro;
  st->single = src->single;
  st->last = -2;
  st->root = strdup(src->root);
  st->names = calloc(src->n, sizeof *st->names);
  st->files = calloc(src->n, sizeof *st->files);
  st->tried = calloc(src->n, 1);
  int ok = st->root != NULL && st->names != NULL && st->files != NULL && st->tried != NULL;
  for (size_t i = 0; ok && i < src->n; i++) {
    st->n = i + 1; /* what tiff_close frees */
    ok = (st->names[i] = strdup(src->names[i])) != NULL;
    if (ok && src->files[i] != NULL) {
      ok = (st->files[i] = file_copy(src->files[i])) != NULL;
      st->tried[i] = 1;
    }
  }
  if (!ok) {
    tiff_close(st);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  *out = st;
  return PB_OK;
}

static int64_t tiff_count(void *state) { return (int64_t)((tiff_state *)state)->n; }

/* ---- scanning one file -------------------------------------------------------------------- */

static int dtype_of(uint16_t bps, uint16_t fmt, pb_dtype *out) {
  if (fmt == SAMPLEFORMAT_UINT) {
    if (bps == 8) *out = PB_UINT8;
    else if (bps == 16) *out = PB_UINT16;
    else if (bps == 32) *out = PB_UINT32;
    else return -1;
  } else if (fmt == SAMPLEFORMAT_INT) {
    if (bps == 16) *out = PB_INT16;
    else return -1;
  } else if (fmt == SAMPLEFORMAT_IEEEFP) {
    if (bps == 32) *out = PB_FLOAT32;
    else if (bps == 64) *out = PB_FLOAT64;
    else return -1;
  } else {
    return -1;
  }
  return 0;
}

static const char *format_name(uint16_t fmt) {
  switch (fmt) {
    case SAMPLEFORMAT_UINT: return "unsigned integer";
    case SAMPLEFORMAT_INT: return "signed integer";
    case SAMPLEFORMAT_IEEEFP: return "floating point";
    case SAMPLEFORMAT_COMPLEXINT: return "complex integer";
    case SAMPLEFORMAT_COMPLEXIEEEFP: return "complex floating point";
    default: return "unknown";
  }
}

static int64_t plane_of(const tiff_file *f, int64_t t, int64_t pc, int64_t z) {
  int64_t idx = 0, stride = 1;
  for (int k = 2; k < 5; k++) {
    char a = f->order[k];
    int ax = a == 'T' ? 0 : a == 'C' ? 1 : 2;
    int64_t coord = ax == 0 ? t : ax == 1 ? pc : z;
    idx += coord * stride;
    stride *= f->pages[ax];
  }
  return idx;
}

/* Inverse of plane_of for the OME TiffData starting points (FirstT/C/Z). */
static int64_t plane_from_first(const tiff_file *f, const int64_t first[3]) {
  int64_t t = first[0], c = first[1], z = first[2];
  if (t >= f->pages[0] || c >= f->pages[1] || z >= f->pages[2]) return -1;
  return plane_of(f, t, c, z);
}

/* Fills f from the OME info; builds the plane -> IFD-number map in *ifd_index. */
static int layout_from_ome(tiff_file *f, const pb__ome_info *o, const char *path,
                           const char *base, int64_t **ifd_index, struct pb_error *err) {
  if (o->size[PB_X] != f->width || o->size[PB_Y] != f->height)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: OME-XML says %lldx%lld pixels (XxY) but the first page is %ux%u",
                        path, (long long)o->size[PB_X], (long long)o->size[PB_Y], f->width,
                        f->height);
  if (!pb__ome_type_is(o->type, f->dtype))
    return pb_error_set(err, PB_EFORMAT, "%s: OME-XML Pixels Type is '%s' but the pages hold %s",
                        path, o->type, pb_dtype_name(f->dtype));
  if (o->size[PB_C] % f->spp != 0)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: OME-XML SizeC=%lld is not a multiple of the %u samples per pixel",
                        path, (long long)o->size[PB_C], f->spp);
  memcpy(f->order, o->order, sizeof f->order);
  f->pages[0] = o->size[PB_T];
  f->pages[1] = o->size[PB_C] / f->spp;
  f->pages[2] = o->size[PB_Z];
  for (int k = 0; k < 3; k++) f->shape[k] = o->size[k];
  if (f->pages[0] * f->pages[1] > MAX_PLANES || f->pages[0] * f->pages[1] * f->pages[2] > MAX_PLANES)
    return pb_error_set(err, PB_EFORMAT, "%s: OME-XML describes too many planes", path);
  f->n_planes = f->pages[0] * f->pages[1] * f->pages[2];
  int64_t *map = malloc((size_t)f->n_planes * sizeof *map);
  if (map == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  for (int64_t p = 0; p < f->n_planes; p++) map[p] = p;
  for (size_t i = 0; i < o->n_tiffdata; i++) {
    const pb__ome_tiffdata *d = &o->tiffdata[i];
    if (d->file[0] != '\0' && strcmp(d->file, base) != 0) {
      free(map);
      return pb_error_set(err, PB_EUNSUPPORTED,
                          "%s: OME-XML puts planes in another file ('%s'); multi-file OME-TIFF "
                          "is not supported",
                          path, d->file);
    }
    int64_t start = plane_from_first(f, d->first);
    if (start < 0) {
      free(map);
      return pb_error_set(err, PB_EFORMAT, "%s: OME-XML TiffData %zu starts outside the image",
                          path, i);
    }
    int any_attr = d->has_ifd || d->first[0] || d->first[1] || d->first[2];
    int64_t count = d->plane_count >= 0 ? d->plane_count : any_attr ? 1 : f->n_planes;
    if (d->ifd > MAX_PLANES * 4) {
      free(map);
      return pb_error_set(err, PB_EFORMAT, "%s: OME-XML TiffData %zu points at IFD %lld", path, i,
                          (long long)d->ifd);
    }
    for (int64_t k = 0; k < count && start + k < f->n_planes; k++) map[start + k] = d->ifd + k;
  }
  f->id[0] = '\0';
  snprintf(f->id, sizeof f->id, "%s", o->image_id);
  for (int k = 0; k < 3; k++) {
    f->physical_size[k] = o->physical_size[k];
    memcpy(f->physical_unit[k], o->physical_unit[k], sizeof f->physical_unit[k]);
  }
  if (o->n_channels > 0) {
    f->channels = malloc((size_t)o->n_channels * sizeof *f->channels);
    if (f->channels == NULL) {
      free(map);
      return pb_error_set(err, PB_ENOMEM, "out of memory");
    }
    memcpy(f->channels, o->channels, (size_t)o->n_channels * sizeof *f->channels);
    f->n_channels = o->n_channels;
  }
  *ifd_index = map;
  return PB_OK;
}

static void swab_array(void *p, size_t n_elems, size_t esize) {
  if (esize == 2) TIFFSwabArrayOfShort(p, (tmsize_t)n_elems);
  else if (esize == 4) TIFFSwabArrayOfLong(p, (tmsize_t)n_elems);
  else if (esize == 8) TIFFSwabArrayOfDouble(p, (tmsize_t)n_elems);
}

/* Up to this many planes per file, the scan also records where each plane's pixels lie. */
#define DIRECT_MAX_PLANES 4096

static long direct_reads; /* reads served by the cached layout, for tests */

long pb__tiff_direct_reads(void) { return __atomic_load_n(&direct_reads, __ATOMIC_RELAXED); }

/* Fills f->plane_at when every plane is one run of uncompressed strips, contiguous in the file,
 * of exactly the plane's bytes, with one sample per pixel or interleaved samples; otherwise
 * leaves it NULL. Anything libtiff cannot answer keeps the general path. */
/* Options' tiff_strips 0 (PIPEBENCH_TIFF_STRIPS=0) reads every page through libtiff (tests
 * compare both ways). */
static void direct_layout(tiff_file *f, TIFF *tif, const pb__tiff_io *io, int enabled) {
  if (!enabled || f->n_planes > DIRECT_MAX_PLANES) return;
  if (f->spp > 1 && f->planar == PLANARCONFIG_SEPARATE) return;
  size_t es = pb_dtype_size(f->dtype);
  uint64_t plane_bytes = (uint64_t)f->width * f->height * f->spp * es;
  uint64_t *at = malloc((size_t)f->n_planes * sizeof *at);
  if (at == NULL) return;
  int ok = 1;
  for (int64_t p = 0; p < f->n_planes && ok; p++) {
    uint32_t w = 0, h = 0;
    uint16_t bps = 1, spp = 1, fmt = SAMPLEFORMAT_UINT, comp = COMPRESSION_NONE;
    ok = TIFFSetSubDirectory(tif, f->ifd[p]) && !TIFFIsTiled(tif) &&
         TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w) && TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
    if (!ok) break;
    TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &bps);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &spp);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &fmt);
    TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &comp);
    ok = comp == COMPRESSION_NONE && w == f->width && h == f->height && bps == f->bps &&
         spp == f->spp && fmt == f->sample_format;
    if (!ok) break;
    uint32_t ns = TIFFNumberOfStrips(tif);
    uint64_t start = TIFFGetStrileOffset(tif, 0), end = start;
    for (uint32_t k = 0; k < ns && ok; k++) {
      ok = TIFFGetStrileOffset(tif, k) == end;
      end += TIFFGetStrileByteCount(tif, k);
    }
    ok = ok && ns > 0 && end - start == plane_bytes && start <= io->size &&
         plane_bytes <= io->size - start;
    at[p] = start;
  }
  if (ok) {
    f->plane_at = at;
    f->swapped = TIFFIsByteSwapped(tif);
  } else {
    free(at);
  }
}

/* The cached layout's read: one open, one scattered read of every plane's rows (or a crop's
 * row pieces), no libtiff. Pieces go straight into dst; interleaved samples go through one
 * buffer, from which the region's channel is picked. */
static int read_direct(const tiff_file *f, const char *path, const pb_read_options *ro,
                       const pb_region *r, unsigned char *dst, pb_stage_times *tm,
                       struct pb_error *err) {
  int64_t t0 = pb_now_ns();
  size_t es = pb_dtype_size(f->dtype);
  int64_t spp = f->spp, row = (int64_t)f->width * spp * (int64_t)es;
  int64_t c0 = r->start[PB_C];
  int whole_rows = r->start[PB_X] == 0 && r->count[PB_X] == f->width && spp == 1;
  size_t out_row = (size_t)r->count[PB_X] * es;
  size_t seg = (size_t)r->count[PB_X] * (size_t)spp * es;
  uint64_t seg_at = (uint64_t)r->start[PB_X] * (uint64_t)spp * es;
  size_t planes = (size_t)(r->count[PB_T] * r->count[PB_C] * r->count[PB_Z]);
  size_t n = whole_rows ? planes : planes * (size_t)r->count[PB_Y];
  pb__io_range few[16]; /* a whole image's planes, usually: no allocation per read */
  pb__io_range *v = n <= 16 ? few : malloc(n * sizeof *v);
  unsigned char *lines = NULL;
  if (v == NULL || (spp > 1 && (lines = malloc(n * seg)) == NULL)) {
    if (v != few) free(v);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  size_t k = 0;
  int64_t bytes = 0;
  for (int64_t t = 0; t < r->count[PB_T]; t++)
    for (int64_t c = 0; c < r->count[PB_C]; c++)
      for (int64_t z = 0; z < r->count[PB_Z]; z++) {
        int64_t plane = plane_of(f, r->start[PB_T] + t, (c0 + c) / spp, r->start[PB_Z] + z);
        uint64_t base = f->plane_at[plane] + (uint64_t)(r->start[PB_Y] * row);
        size_t d_off = (size_t)(((t * r->count[PB_C] + c) * r->count[PB_Z] + z) * r->count[PB_Y]) * out_row;
        if (whole_rows) {
          v[k++] = (pb__io_range){base, (size_t)(r->count[PB_Y] * row), dst + d_off};
          bytes += r->count[PB_Y] * row;
          continue;
        }
        /* A crop, or one channel out of interleaved samples: row by row. */
        for (int64_t y = 0; y < r->count[PB_Y]; y++, k++) {
          unsigned char *out = spp > 1 ? lines + k * seg : dst + d_off + (size_t)y * out_row;
          v[k] = (pb__io_range){base + (uint64_t)(y * row) + seg_at, seg, out};
          bytes += (int64_t)seg;
        }
      }
  /* one open and one scattered read; the size and kind come from the scan */
  pb__tiff_io io;
  int rc = pb__tiff_io_open(&io, path, ro, &f->st, &f->known, err);
  if (rc == PB_OK) rc = pb__io_preadv(io.file, v, n, err);
  pb__tiff_io_close(&io);
  if (rc == PB_OK && spp > 1) { /* the region's channel out of each line of samples */
    k = 0;
    for (int64_t t = 0; t < r->count[PB_T]; t++)
      for (int64_t c = 0; c < r->count[PB_C]; c++)
        for (int64_t z = 0; z < r->count[PB_Z]; z++) {
          int64_t gc = c0 + c;
          size_t d_off = (size_t)(((t * r->count[PB_C] + c) * r->count[PB_Z] + z) * r->count[PB_Y]) * out_row;
          for (int64_t y = 0; y < r->count[PB_Y]; y++, k++) {
            unsigned char *out = dst + d_off + (size_t)y * out_row;
            const unsigned char *line = lines + k * seg;
            for (int64_t x = 0; x < r->count[PB_X]; x++)
              memcpy(out + (size_t)x * es, line + (size_t)(x * spp + gc % spp) * es, es);
          }
        }
  }
  if (v != few) free(v);
  free(lines);
  int64_t t1 = pb_now_ns();
  if (rc == PB_OK && f->swapped) {
    size_t total = es;
    for (int j = 0; j < PB_NDIM; j++) total *= (size_t)r->count[j];
    swab_array(dst, total / es, es);
  }
  if (tm != NULL) {
    tm->read_ns += t1 - t0;
    tm->decode_ns += pb_now_ns() - t1;
    tm->bytes_read += bytes;
  }
  return rc;
}

/* Reads the first page's size and sample tags into f, refusing sample types, colour models and
 * codecs that cannot be read. */
static int first_page_format(TIFF *tif, tiff_file *f, const char *path, struct pb_error *err) {
  uint32_t w = 0, h = 0;
  uint16_t bps = 1, spp = 1, fmt = SAMPLEFORMAT_UINT, planar = PLANARCONFIG_CONTIG, photo = 0,
           comp = COMPRESSION_NONE;
  if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w) || !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h) ||
      w == 0 || h == 0)
    return pb_error_set(err, PB_EFORMAT, "%s: first page has no image size", path);
  TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &bps);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &spp);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &fmt);
  TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &planar);
  TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &comp);
  TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &photo);
  if (dtype_of(bps, fmt, &f->dtype) != 0)
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "%s: %u-bit %s samples are not supported (supported: uint8, uint16, "
                        "uint32, int16, float32, float64)",
                        path, bps, format_name(fmt));
  if (spp < 1 || spp > PB_MAX_CHANNELS)
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: %u samples per pixel are not supported", path,
                        spp);
  if (photo == PHOTOMETRIC_YCBCR)
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "%s: YCbCr pages (JPEG-style colour) are not supported", path);
  if (!TIFFIsCODECConfigured(comp)) {
    const TIFFCodec *c = TIFFFindCODEC(comp);
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "%s: compression %u (%s) is not available in this libtiff", path, comp,
                        c ? c->name : "unknown");
  }
  f->width = w;
  f->height = h;
  f->bps = bps;
  f->spp = spp;
  f->sample_format = fmt;
  f->planar = planar;
  f->shape[PB_Y] = h;
  f->shape[PB_X] = w;
  return PB_OK;
}

/* Layout of a file without OME metadata: its pages, counted into *offs, arranged by tifffile's
 * or ImageJ's description if present, every plane mapped (*map) to the page of its index. */
static int layout_from_pages(tiff_file *f, pb__tiff_io *io, const char *desc, const char *path,
                             uint64_t **offs, uint64_t *n_offs, int64_t **map, char *why,
                             size_t why_size, struct pb_error *err) {
  PB_RETURN_NOT_OK(pb__tiff_walk_ifds(io, 0, offs, n_offs, err));
  uint64_t n = *n_offs;
  int64_t sizes[3] = {1, 1, (int64_t)n};
  char order[8] = "XYZCT";
  int r = pb__tiff_parse_shaped(desc, f->spp, f->planar == PLANARCONFIG_SEPARATE, (int64_t)n,
                                sizes, order, why, why_size);
  if (r < 0) return pb_error_set(err, r, "%s: %s", path, why);
  if (r == 0 && pb__tiff_parse_imagej(desc, sizes, order) == 1 &&
      sizes[0] * sizes[1] * sizes[2] > (int64_t)n)
    return pb_error_set(err, PB_EFORMAT, "%s: ImageJ description needs %lld pages, file has %llu",
                        path, (long long)(sizes[0] * sizes[1] * sizes[2]), (unsigned long long)n);
  memcpy(f->order, order, sizeof f->order);
  for (int k = 0; k < 3; k++) f->pages[k] = sizes[k];
  f->shape[PB_T] = sizes[0];
  f->shape[PB_C] = sizes[1] * f->spp;
  f->shape[PB_Z] = sizes[2];
  f->n_planes = sizes[0] * sizes[1] * sizes[2];
  int64_t *m = malloc((size_t)f->n_planes * sizeof *m);
  *map = m;
  if (m == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  for (int64_t p = 0; p < f->n_planes; p++) m[p] = p;
  return PB_OK;
}

/* The size the tags and description claim, before anything is allocated for it: compressed or
 * sparse blocks may be far smaller than their pixels, so the file length bounds nothing, and
 * the claim is held to PIPEBENCH_MAX_IMAGE_BYTES (docs/formats.md). */
static int check_claim(const tiff_file *f, const char *path, struct pb_error *err) {
  int64_t claim_px, claim = 0;
  if (!pb__prod_i64_ok(f->shape, PB_NDIM, &claim_px) ||
      !pb__mul_i64_ok(claim_px, (int64_t)pb_dtype_size(f->dtype), &claim) ||
      claim > pb__max_image_bytes())
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "%s: shape %lldx%lldx%lldx%lldx%lld (TCZYX) of %s claims %s%lld bytes, "
                        "more than the %lld bytes pipebench believes before reading "
                        "(PIPEBENCH_MAX_IMAGE_BYTES; docs/formats.md)",
                        path, (long long)f->shape[PB_T], (long long)f->shape[PB_C],
                        (long long)f->shape[PB_Z], (long long)f->shape[PB_Y],
                        (long long)f->shape[PB_X], pb_dtype_name(f->dtype),
                        claim > 0 ? "" : "more than ", claim > 0 ? (long long)claim : INT64_MAX,
                        (long long)pb__max_image_bytes());
  return PB_OK;
}

/* Directory offsets of every plane into f->ifd, walking the chain (*offs, kept or extended) only
 * as far as needed. Strip and tile arrays that disagree with the image would read as zeros or
 * from the wrong bytes; libtiff pads or ignores them, so they are checked here, once per file. */
static int plane_directories(tiff_file *f, pb__tiff_io *io, const int64_t *map, uint64_t **offs,
                             uint64_t *n_offs, const char *path, struct pb_error *err) {
  int64_t max_ifd = 0;
  for (int64_t p = 0; p < f->n_planes; p++)
    if (map[p] > max_ifd) max_ifd = map[p];
  if (*offs == NULL || (int64_t)*n_offs <= max_ifd) {
    free(*offs);
    *offs = NULL;
    PB_RETURN_NOT_OK(pb__tiff_walk_ifds(io, (uint64_t)max_ifd + 1, offs, n_offs, err));
  }
  if ((int64_t)*n_offs <= max_ifd)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: the image needs page %lld but the file has only %llu pages", path,
                        (long long)max_ifd, (unsigned long long)*n_offs);
  f->ifd = malloc((size_t)f->n_planes * sizeof *f->ifd);
  if (f->ifd == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  for (int64_t p = 0; p < f->n_planes; p++) f->ifd[p] = (*offs)[map[p]];
  int rc = PB_OK;
  for (int64_t p = 0; p < f->n_planes && rc == PB_OK; p++)
    rc = pb__tiff_check_layout(io, f->ifd[p], map[p], err);
  return rc;
}

static long scans; /* files scanned, for tests */

long pb__tiff_scans(void) { return __atomic_load_n(&scans, __ATOMIC_RELAXED); }

static int scan_file(tiff_state *st, size_t i, tiff_file **out, struct pb_error *err) {
  __atomic_fetch_add(&scans, 1, __ATOMIC_RELAXED);
  char path[4096];
  if (file_path(st, i, path, sizeof path) != PB_OK)
    return pb_error_set(err, PB_EINVAL, "%s: path too long", st->root);
  /* A file of a folder that is a link out of it is not the folder's. */
  if (!st->single && !pb__io_is_url(st->root))
    PB_RETURN_NOT_OK(pb__entry_inside(st->root, st->names[i], "the dataset folder", err));
  pb__tiff_io io;
  PB_RETURN_NOT_OK(pb__tiff_io_open(&io, path, &st->ro, NULL, NULL, err));
  tiff_file *f = calloc(1, sizeof *f);
  uint64_t *offs = NULL, n_offs = 0;
  int64_t *map = NULL;
  TIFF *tif = NULL;
  pb__ome_info ome;
  memset(&ome, 0, sizeof ome);
  int rc = PB_OK;
  if (f == NULL) {
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    goto done;
  }
  /* Our own header check first: clearer messages for files that are not TIFF at all. The
   * first directory's strip or tile tags too, before libtiff reads (or pads) them. */
  rc = pb__tiff_walk_ifds(&io, 1, &offs, &n_offs, err);
  if (rc == PB_OK) rc = pb__tiff_check_layout(&io, offs[0], 0, err);
  if (rc != PB_OK) goto done;
  free(offs);
  offs = NULL;
  tif = pb__tiff_client_open(&io, 0, err);
  if (tif == NULL) {
    rc = PB_EFORMAT;
    goto done;
  }
  rc = first_page_format(tif, f, path, err);
  if (rc != PB_OK) goto done;
  const char *desc = NULL;
  if (!TIFFGetField(tif, TIFFTAG_IMAGEDESCRIPTION, &desc)) desc = NULL;
  char why[256] = "";
  int is_ome = pb__ome_parse(desc, &ome, why, sizeof why);
  if (is_ome < 0) {
    rc = pb_error_set(err, is_ome, "%s: %s", path, why);
    goto done;
  }
  if (is_ome == 1 && !ome.binary_only)
    rc = layout_from_ome(f, &ome, path, st->names[i], &map, err);
  else
    rc = layout_from_pages(f, &io, desc, path, &offs, &n_offs, &map, why, sizeof why, err);
  if (rc != PB_OK) goto done;
  f->shape[PB_C] = f->pages[1] * f->spp;
  rc = check_claim(f, path, err);
  if (rc == PB_OK) rc = plane_directories(f, &io, map, &offs, &n_offs, path, err);
  if (rc != PB_OK) goto done;
  f->file_size = io.size;
  f->st = io.st;
  if (pb__io_is_url(path)) pb__io_known_get(io.file, &f->known);
  direct_layout(f, tif, &io, st->ro.tiff_strips != 0);
done:
  if (tif != NULL) TIFFClose(tif);
  pb__tiff_io_close(&io);
  pb__ome_info_destroy(&ome);
  free(offs);
  free(map);
  if (rc != PB_OK) {
    file_free(f);
    return rc;
  }
  *out = f;
  return PB_OK;
}

/* One file scanned on a read-ahead thread: a failure is left for the foreground's scan of that
 * file, which reports it as before. */
static void ahead_one(void *ctx, int64_t i) {
  tiff_state *st = ctx;
  struct pb_error e;
  (void)scan_file(st, (size_t)i, &st->files[i], &e);
}

/* A scan in index order over a URL (as zarr_dataset.c's: three files in a row): the next
 * files' IFDs read at once (meta_ahead.c). */
static void read_ahead(tiff_state *st, int64_t i) {
  if (i == st->last) return;
  st->run = i > 0 && st->last == i - 1 ? st->run + 1 : 0;
  st->last = i;
  if (st->run < 2 || st->tried[i] || st->single || !pb__io_is_url(st->root)) return;
  int64_t n = 0, most = pb__meta_ahead_images(&st->ro);
  while ((size_t)(i + n) < st->n && n < most && !st->tried[i + n]) st->tried[i + n++] = 1;
  pb__meta_ahead(&st->ro, st, i, n, ahead_one);
}

static int get_file(tiff_state *st, int64_t i, tiff_file **out, struct pb_error *err) {
  if (i < 0 || (size_t)i >= st->n)
    return pb_error_set(err, PB_ERANGE, "%s: image index %lld out of range", st->root,
                        (long long)i);
  read_ahead(st, i);
  if (st->files[i] == NULL) {
    st->tried[i] = 1;
    int rc = scan_file(st, (size_t)i, &st->files[i], err);
    if (rc != PB_OK) {
      pb_error_prefix(err, "image %lld: ", (long long)i);
      return rc;
    }
  }
  *out = st->files[i];
  return PB_OK;
}

static int tiff_shape(void *state, int64_t i, pb_dtype *dtype, int64_t shape[PB_NDIM],
                      struct pb_error *err) {
  tiff_file *f = NULL;
  PB_RETURN_NOT_OK(get_file(state, i, &f, err));
  *dtype = f->dtype;
  memcpy(shape, f->shape, sizeof f->shape);
  return PB_OK;
}

static int tiff_meta(void *state, int64_t i, pb_image_meta *out, struct pb_error *err) {
  tiff_state *st = state;
  tiff_file *f = NULL;
  PB_RETURN_NOT_OK(get_file(st, i, &f, err));
  pb_image_meta_init(out, st->names[i], f->dtype, f->shape);
  memcpy(out->id, f->id, sizeof out->id);
  memcpy(out->physical_size, f->physical_size, sizeof out->physical_size);
  memcpy(out->physical_unit, f->physical_unit, sizeof out->physical_unit);
  out->n_channels = f->n_channels;
  if (f->n_channels > 0)
    memcpy(out->channels, f->channels, (size_t)f->n_channels * sizeof *f->channels);
  return PB_OK;
}

/* ---- reading ------------------------------------------------------------------------------- */

static int grow(unsigned char **buf, size_t *cap, size_t need) {
  if (need <= *cap) return PB_OK;
  size_t ncap = need < 65536 ? 65536 : need + need / 4;
  unsigned char *nb = pb_alloc(ncap);
  if (nb == NULL) return PB_ENOMEM;
  pb_free(*buf, *cap);
  *buf = nb;
  *cap = ncap;
  return PB_OK;
}


/* Where one read is going: region, destination and the running stage times. */
typedef struct read_ctx {
  tiff_state *st;
  const tiff_file *f;
  const char *path;
  const pb_region *r;
  unsigned char *dst;
  size_t esize;
  pb__tiff_io io;
  TIFF *tif;
  int dirs_set;
  pb_stage_times tm;
} read_ctx;

/* Copies samples [s0, s1) of a decoded block into the destination region.
 * The block starts at image (oy, ox), has valid rows vh and columns vw, row stride bw pixels
 * and ns interleaved samples; sample s is channel c_base + s. */
static void place_block(read_ctx *cx, int64_t dt, int64_t dz, const unsigned char *blk, int64_t oy,
                        int64_t ox, int64_t vh, int64_t vw, int64_t bw, int ns, int s0, int s1,
                        int64_t c_base) {
  const pb_region *r = cx->r;
  size_t es = cx->esize;
  int64_t ny = r->count[PB_Y], nx = r->count[PB_X], y0 = r->start[PB_Y], x0 = r->start[PB_X];
  int64_t ya = oy > y0 ? oy : y0, yb = oy + vh < y0 + ny ? oy + vh : y0 + ny;
  int64_t xa = ox > x0 ? ox : x0, xb = ox + vw < x0 + nx ? ox + vw : x0 + nx;
  if (yb <= ya || xb <= xa) return;
  size_t run = (size_t)(xb - xa);
  for (int s = s0; s < s1; s++) {
    int64_t dc = c_base + s - r->start[PB_C];
    int64_t base = ((dt * r->count[PB_C] + dc) * r->count[PB_Z] + dz) * ny * nx;
    for (int64_t y = ya; y < yb; y++) {
      const unsigned char *src = blk + ((size_t)((y - oy) * bw + (xa - ox)) * (size_t)ns + (size_t)s) * es;
      unsigned char *d = cx->dst + (size_t)(base + (y - y0) * nx + (xa - x0)) * es;
      if (ns == 1) {
        memcpy(d, src, run * es);
        continue;
      }
      size_t step = (size_t)ns * es;
      switch (es) {
        case 1: for (size_t x = 0; x < run; x++) d[x] = src[x * step]; break;
        case 2: for (size_t x = 0; x < run; x++) memcpy(d + 2 * x, src + x * step, 2); break;
        case 4: for (size_t x = 0; x < run; x++) memcpy(d + 4 * x, src + x * step, 4); break;
        default: for (size_t x = 0; x < run; x++) memcpy(d + es * x, src + x * step, es); break;
      }
    }
  }
}

/* Fetches strile k of the current directory and decodes it into target (size bytes). */
static int load_strile(read_ctx *cx, uint32_t k, int tiled, uint16_t comp, int swapped,
                       unsigned char *target, size_t size, int64_t plane, struct pb_error *err) {
  const char *kind = tiled ? "tile" : "strip";
  int64_t t0 = pb_now_ns();
  int err_flag = 0;
  uint64_t off = TIFFGetStrileOffsetWithErr(cx->tif, k, &err_flag);
  uint64_t cnt = err_flag ? 0 : TIFFGetStrileByteCountWithErr(cx->tif, k, &err_flag);
  if (err_flag)
    return pb_error_set(err, PB_EFORMAT, "%s: page %lld, %s %u: cannot read its location: %s",
                        cx->path, (long long)plane, kind, k, pb__tiff_msg(&cx->io));
  if (cnt == 0) { /* sparse file: a missing block reads as zeros */
    memset(target, 0, size);
    return PB_OK;
  }
  if (off > cx->io.size || cnt > cx->io.size - off)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: page %lld, %s %u: data at [%llu, %llu) lies beyond the end of the "
                        "file (size %llu)",
                        cx->path, (long long)plane, kind, k, (unsigned long long)off,
                        (unsigned long long)(off + cnt), (unsigned long long)cx->io.size);
  cx->tm.bytes_read += (int64_t)cnt;
  if (comp == COMPRESSION_NONE) {
    if (cnt < size)
      return pb_error_set(err, PB_EFORMAT,
                          "%s: page %lld, %s %u: holds %llu bytes, uncompressed data needs %zu",
                          cx->path, (long long)plane, kind, k, (unsigned long long)cnt, size);
    int rc = pb__tiff_io_pread(&cx->io, target, size, off, NULL, err);
    if (rc != PB_OK) {
      pb_error_prefix(err, "page %lld, %s %u: ", (long long)plane, kind, k);
      return rc;
    }
    int64_t t1 = pb_now_ns();
    cx->tm.read_ns += t1 - t0;
    if (swapped) {
      swab_array(target, size / cx->esize, cx->esize);
      cx->tm.decode_ns += pb_now_ns() - t1;
    }
    return PB_OK;
  }
  if (grow(&cx->st->raw, &cx->st->raw_cap, (size_t)cnt) != PB_OK)
    return pb_error_set(err, PB_ENOMEM, "%s: out of memory for %s %u (%llu bytes)", cx->path,
                        kind, k, (unsigned long long)cnt);
  int rc = pb__tiff_io_pread(&cx->io, cx->st->raw, (size_t)cnt, off, NULL, err);
  if (rc != PB_OK) {
    pb_error_prefix(err, "page %lld, %s %u: ", (long long)plane, kind, k);
    return rc;
  }
  int64_t t1 = pb_now_ns();
  cx->tm.read_ns += t1 - t0;
  cx->io.msg[0] = '\0';
  int ok = TIFFReadFromUserBuffer(cx->tif, k, cx->st->raw, (tmsize_t)cnt, target, (tmsize_t)size);
  cx->tm.decompress_ns += pb_now_ns() - t1;
  if (!ok)
    return pb_error_set(err, PB_ECODEC, "%s: page %lld, %s %u: cannot decode: %s", cx->path,
                        (long long)plane, kind, k, pb__tiff_msg(&cx->io));
  return PB_OK;
}

/* Reads run_size bytes of uncompressed strips starting at strip k (checked to be contiguous
 * in the file and inside it) straight into target. */
static int load_run(read_ctx *cx, uint32_t k, int swapped, unsigned char *target,
                    size_t run_size, int64_t plane, struct pb_error *err) {
  int64_t t0 = pb_now_ns();
  int rc = pb__tiff_io_pread(&cx->io, target, run_size, TIFFGetStrileOffset(cx->tif, k), NULL,
                             err);
  if (rc != PB_OK) {
    pb_error_prefix(err, "page %lld, strips from %u: ", (long long)plane, k);
    return rc;
  }
  cx->tm.bytes_read += (int64_t)run_size;
  int64_t t1 = pb_now_ns();
  cx->tm.read_ns += t1 - t0;
  if (swapped) {
    swab_array(target, run_size / cx->esize, cx->esize);
    cx->tm.decode_ns += pb_now_ns() - t1;
  }
  return PB_OK;
}

static int set_dir(read_ctx *cx, int64_t plane, struct pb_error *err) {
  cx->io.msg[0] = '\0';
  if (TIFFSetSubDirectory(cx->tif, cx->f->ifd[plane])) {
    cx->dirs_set++;
    return PB_OK;
  }
  if (cx->dirs_set > 0) {
    /* libtiff's loop bookkeeping can object to jumps between directories; a fresh handle
     * starts clean. */
    TIFFClose(cx->tif);
    cx->tif = pb__tiff_client_open(&cx->io, 1, err);
    if (cx->tif == NULL) return PB_EFORMAT;
    cx->dirs_set = 0;
    if (TIFFSetSubDirectory(cx->tif, cx->f->ifd[plane])) {
      cx->dirs_set++;
      return PB_OK;
    }
  }
  return pb_error_set(err, PB_EFORMAT, "%s: page %lld: cannot read its directory at offset %llu: %s",
                      cx->path, (long long)plane, (unsigned long long)cx->f->ifd[plane],
                      pb__tiff_msg(&cx->io));
}

/* How one page stores its pixels, read from its directory. */
typedef struct page_geom {
  int64_t plane;
  int64_t w, h;             /* image size */
  int64_t bw, bh;           /* one strip or tile */
  int64_t across, per_plane; /* blocks per row of blocks, per sample plane */
  uint16_t spp, comp;
  int tiled, separate, ns, swapped;
} page_geom;

/* Moves to the plane's directory and fills g, refusing pages that differ from the first one or
 * whose strips or tiles cannot cover the image. */
static int page_geometry(read_ctx *cx, int64_t plane, page_geom *g, struct pb_error *err) {
  const tiff_file *f = cx->f;
  PB_RETURN_NOT_OK(set_dir(cx, plane, err));
  TIFF *tif = cx->tif;
  uint32_t w = 0, h = 0;
  uint16_t bps = 1, spp = 1, fmt = SAMPLEFORMAT_UINT, planar = PLANARCONFIG_CONTIG,
           comp = COMPRESSION_NONE;
  TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
  TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &bps);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &spp);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &fmt);
  TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &planar);
  TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &comp);
  if (w != f->width || h != f->height || bps != f->bps || spp != f->spp ||
      fmt != f->sample_format || planar != f->planar)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: page %lld differs from the first page (%ux%u, %u-bit, %u samples "
                        "vs %ux%u, %u-bit, %u samples)",
                        cx->path, (long long)plane, w, h, bps, spp, f->width, f->height, f->bps,
                        f->spp);
  if (comp != COMPRESSION_NONE && !TIFFIsCODECConfigured(comp))
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: page %lld: compression %u is not available",
                        cx->path, (long long)plane, comp);
  int tiled = TIFFIsTiled(tif);
  uint32_t bw_, bh_;
  if (tiled) {
    bw_ = bh_ = 0;
    TIFFGetField(tif, TIFFTAG_TILEWIDTH, &bw_);
    TIFFGetField(tif, TIFFTAG_TILELENGTH, &bh_);
    if (bw_ == 0 || bh_ == 0)
      return pb_error_set(err, PB_EFORMAT, "%s: page %lld: tiles of size %ux%u", cx->path,
                          (long long)plane, bw_, bh_);
  } else {
    uint32_t rps = h;
    TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rps);
    if (rps == 0 || rps > h) rps = h;
    bw_ = w;
    bh_ = rps;
  }
  int64_t bw = bw_, bh = bh_;
  /* Tiles may overhang the image, but not absurdly: a corrupt tile size must not make us
   * allocate gigabytes for a small image. */
  int64_t block, plane_bytes, room;
  const int64_t blk_dims[4] = {bw, bh, (int64_t)spp, (int64_t)cx->esize};
  const int64_t img_dims[4] = {(int64_t)w, (int64_t)h, (int64_t)spp, (int64_t)cx->esize};
  if (!pb__prod_i64_ok(blk_dims, 4, &block) || !pb__prod_i64_ok(img_dims, 4, &plane_bytes) ||
      !pb__mul_i64_ok(plane_bytes, 16, &room) ||
      !pb__add_i64_ok(room, (int64_t)16 << 20, &room) || block > room)
    return pb_error_set(err, PB_EFORMAT, "%s: page %lld: tile size %ux%u is implausible for a "
                        "%ux%u image", cx->path, (long long)plane, bw_, bh_, w, h);
  int64_t across = (w + bw - 1) / bw, down = (h + bh - 1) / bh;
  int separate = planar == PLANARCONFIG_SEPARATE && spp > 1;
  int64_t per_plane = across * down;
  int64_t need = per_plane * (separate ? spp : 1);
  int64_t have = tiled ? (int64_t)TIFFNumberOfTiles(tif) : (int64_t)TIFFNumberOfStrips(tif);
  if (have < need)
    return pb_error_set(err, PB_EFORMAT, "%s: page %lld has %lld %ss, its size needs %lld",
                        cx->path, (long long)plane, (long long)have, tiled ? "tile" : "strip",
                        (long long)need);
  *g = (page_geom){.plane = plane, .w = w, .h = h, .bw = bw, .bh = bh, .across = across,
                   .per_plane = per_plane, .spp = spp, .comp = comp, .tiled = tiled,
                   .separate = separate, .ns = separate ? 1 : spp,
                   .swapped = TIFFIsByteSwapped(tif)};
  return PB_OK;
}

/* How many uncompressed strips from strip k (block row by, size bytes) follow each other in the
 * file, lie inside it and land on consecutive destination rows before y1; *run_size gets their
 * bytes. */
static int64_t strip_run(const read_ctx *cx, const page_geom *g, uint32_t k, int64_t by,
                         size_t size, int64_t y1, size_t *run_size) {
  TIFF *tif = cx->tif;
  int64_t bh = g->bh, h = g->h;
  int64_t run = 1;
  *run_size = size;
  uint64_t end = TIFFGetStrileOffset(tif, k) + TIFFGetStrileByteCount(tif, k);
  int ok = TIFFGetStrileByteCount(tif, k) == size;
  while (ok && by + run <= (y1 - 1) / bh) {
    int64_t oy2 = (by + run) * bh, vh2 = h - oy2 < bh ? h - oy2 : bh;
    size_t size2 = (size_t)(vh2 * g->w) * cx->esize;
    uint32_t k2 = k + (uint32_t)run;
    if (oy2 + vh2 > y1 || TIFFGetStrileOffset(tif, k2) != end ||
        TIFFGetStrileByteCount(tif, k2) != size2 || end + size2 > cx->io.size)
      break;
    end += size2;
    *run_size += size2;
    run++;
  }
  return run;
}

/* One decoding pass over the blocks that meet the region: samples [s0, s1) of channel base cb0,
 * from the striles numbered from strile_base, at destination (dt, dz). Whole strips that fill
 * destination rows decode in place; everything else goes through the scratch buffer. */
static int read_pass(read_ctx *cx, const page_geom *g, int64_t dt, int64_t dz, int s0, int s1,
                     int64_t cb0, int64_t strile_base, struct pb_error *err) {
  const pb_region *r = cx->r;
  int64_t y0 = r->start[PB_Y], y1 = y0 + r->count[PB_Y];
  int64_t x0 = r->start[PB_X], x1 = x0 + r->count[PB_X];
  int64_t w = g->w, h = g->h, bw = g->bw, bh = g->bh;
  int tiled = g->tiled, ns = g->ns;
  size_t es = cx->esize;
  for (int64_t by = y0 / bh; by <= (y1 - 1) / bh; by++) {
    for (int64_t bx = x0 / bw; bx <= (x1 - 1) / bw; bx++) {
      int64_t oy = by * bh, ox = bx * bw;
      int64_t vh = h - oy < bh ? h - oy : bh, vw = w - ox < bw ? w - ox : bw;
      int64_t rows = tiled ? bh : vh; /* tiles decode whole; the last strip is short */
      size_t size = (size_t)(rows * bw) * (size_t)ns * es;
      uint32_t k = (uint32_t)(strile_base + by * g->across + bx);
      unsigned char *target;
      int direct = !tiled && ns == 1 && x0 == 0 && x1 == w && oy >= y0 && oy + vh <= y1;
      if (direct) {
        int64_t dc = cb0 + s0 - r->start[PB_C];
        int64_t base = ((dt * r->count[PB_C] + dc) * r->count[PB_Z] + dz) * r->count[PB_Y];
        target = cx->dst + (size_t)((base + (oy - y0)) * w) * es;
      } else {
        if (grow(&cx->st->dec, &cx->st->dec_cap, size) != PB_OK)
          return pb_error_set(err, PB_ENOMEM, "%s: out of memory", cx->path);
        target = cx->st->dec;
      }
      if (direct && g->comp == COMPRESSION_NONE) {
        /* Uncompressed strips that follow each other in the file and in the destination
         * are fetched with one pread. */
        size_t run_size;
        int64_t run = strip_run(cx, g, k, by, size, y1, &run_size);
        if (run > 1) {
          PB_RETURN_NOT_OK(load_run(cx, k, g->swapped, target, run_size, g->plane, err));
          by += run - 1;
          continue;
        }
      }
      PB_RETURN_NOT_OK(
          load_strile(cx, k, tiled, g->comp, g->swapped, target, size, g->plane, err));
      if (!direct) {
        int64_t t1 = pb_now_ns();
        place_block(cx, dt, dz, target, oy, ox, vh, vw, bw, ns, s0, s1, cb0);
        cx->tm.decode_ns += pb_now_ns() - t1;
      }
    }
  }
  return PB_OK;
}

/* Reads what the region needs from one page: channels [pc*spp, pc*spp+spp) at (t, z). */
static int read_page(read_ctx *cx, int64_t t, int64_t pc, int64_t z, struct pb_error *err) {
  const pb_region *r = cx->r;
  int64_t plane = plane_of(cx->f, t, pc, z);
  int64_t t0 = pb_now_ns();
  page_geom g = {0}; /* the compiler cannot tell that every error code is non-zero */
  PB_RETURN_NOT_OK(page_geometry(cx, plane, &g, err));
  cx->tm.read_ns += pb_now_ns() - t0;

  int64_t spp = g.spp;
  int64_t c_base = pc * spp;
  int64_t ca = r->start[PB_C] > c_base ? r->start[PB_C] : c_base;
  int64_t cb = r->start[PB_C] + r->count[PB_C] < c_base + spp ? r->start[PB_C] + r->count[PB_C]
                                                               : c_base + spp;
  int64_t dt = t - r->start[PB_T], dz = z - r->start[PB_Z];
  int separate = g.separate;
  /* Contiguous samples: one pass decodes all of them; separate planes: one pass per sample. */
  int64_t pass_lo = separate ? ca - c_base : 0, pass_hi = separate ? cb - c_base : 1;
  for (int64_t pass = pass_lo; pass < pass_hi; pass++) {
    int s0 = separate ? 0 : (int)(ca - c_base), s1 = separate ? 1 : (int)(cb - c_base);
    int64_t cb0 = separate ? c_base + pass : c_base;
    int64_t strile_base = separate ? pass * g.per_plane : 0;
    PB_RETURN_NOT_OK(read_pass(cx, &g, dt, dz, s0, s1, cb0, strile_base, err));
  }
  return PB_OK;
}

static int tiff_read(void *state, int64_t i, const pb_region *region, void *dst, size_t dst_size,
                     pb_stage_times *times, struct pb_error *err) {
  tiff_state *st = state;
  tiff_file *f = NULL;
  (void)dst_size;
  PB_RETURN_NOT_OK(get_file(st, i, &f, err));
  pb_region full;
  if (region == NULL) { /* region and dst_size: checked by format.c against this shape */
    pb__region_full(&full, f->shape);
    region = &full;
  }
  size_t es = pb_dtype_size(f->dtype);
  size_t need = es;
  for (int k = 0; k < PB_NDIM; k++) need *= (size_t)region->count[k];
  char path[4096];
  if (file_path(st, (size_t)i, path, sizeof path) != PB_OK)
    return pb_error_set(err, PB_EINVAL, "%s: path too long", st->root);
  if (f->plane_at != NULL) {
    __atomic_fetch_add(&direct_reads, 1, __ATOMIC_RELAXED);
    int rc = read_direct(f, path, &st->ro, region, dst, times, err);
    if (rc != PB_OK) {
      pb_error_prefix(err, "image %lld: ", (long long)i);
      return rc;
    }
    if (times != NULL) times->bytes_decoded += (int64_t)need;
    return PB_OK;
  }
  read_ctx cx;
  memset(&cx, 0, sizeof cx);
  cx.st = st;
  cx.f = f;
  cx.path = path;
  cx.r = region;
  cx.dst = dst;
  cx.esize = es;
  int64_t t0 = pb_now_ns();
  int rc = pb__tiff_io_open(&cx.io, path, &st->ro, &f->st, &f->known, err);
  if (rc != PB_OK) goto out;
  cx.tif = pb__tiff_client_open(&cx.io, 1, err);
  if (cx.tif == NULL) {
    rc = PB_EFORMAT;
    goto out;
  }
  cx.tm.read_ns += pb_now_ns() - t0;
  int64_t spp = f->spp;
  int64_t c0 = region->start[PB_C], c1 = c0 + region->count[PB_C];
  for (int64_t t = region->start[PB_T]; rc == PB_OK && t < region->start[PB_T] + region->count[PB_T]; t++)
    for (int64_t pc = c0 / spp; rc == PB_OK && pc <= (c1 - 1) / spp; pc++)
      for (int64_t z = region->start[PB_Z]; rc == PB_OK && z < region->start[PB_Z] + region->count[PB_Z]; z++)
        rc = read_page(&cx, t, pc, z, err);
  if (rc != PB_OK) pb_error_prefix(err, "image %lld: ", (long long)i);
out:;
  int64_t t1 = pb_now_ns();
  if (cx.tif != NULL) TIFFClose(cx.tif);
  pb__tiff_io_close(&cx.io);
  cx.tm.read_ns += pb_now_ns() - t1;
  if (times != NULL && rc == PB_OK) {
    times->read_ns += cx.tm.read_ns;
    times->decompress_ns += cx.tm.decompress_ns;
    times->decode_ns += cx.tm.decode_ns;
    times->bytes_read += cx.tm.bytes_read;
    times->bytes_decoded += (int64_t)need;
  }
  return rc;
}

static const char *const tiff_options[] = {"tile=YxX", "predictor=1|2|3", "bigtiff=0|1", NULL};

const pb_format_vtable pb__format_tiff = {
    .info = {"tiff", "folder of OME-TIFF files (one image per file) via libtiff", 1, 1},
    .probe = tiff_probe,
    .open = tiff_open,
    .clone = tiff_clone,
    .close = tiff_close,
    .count = tiff_count,
    .meta = tiff_meta,
    .shape = tiff_shape,
    .read = tiff_read,
    .writer_open = pb__tiff_writer_open,
    .writer_add = pb__tiff_writer_add,
    .writer_finish = pb__tiff_writer_finish,
    .writer_free = pb__tiff_writer_free,
    .write_options = tiff_options,
};
