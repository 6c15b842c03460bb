/* The format-independent side of datasets and writers: detection, dispatch, checks. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/commit.h"
#include "formats/format_internal.h"
#include "io/io.h"

static const char *const dtype_names[PB_DTYPE_COUNT] = {"uint8",   "uint16",  "uint32",
                                                        "int16",   "float32", "float64"};
static const size_t dtype_sizes[PB_DTYPE_COUNT] = {1, 2, 4, 2, 4, 8};

size_t pb_dtype_size(pb_dtype d) {
  return (unsigned)d < PB_DTYPE_COUNT ? dtype_sizes[d] : 0;
}

const char *pb_dtype_name(pb_dtype d) {
  return (unsigned)d < PB_DTYPE_COUNT ? dtype_names[d] : "invalid";
}

int pb_dtype_parse(const char *name, pb_dtype *out) {
  if (name == NULL) return PB_EINVAL;
  for (int i = 0; i < PB_DTYPE_COUNT; i++) {
    if (strcmp(name, dtype_names[i]) == 0) {
      *out = (pb_dtype)i;
      return PB_OK;
    }
  }
  if (strcmp(name, "float") == 0) *out = PB_FLOAT32;
  else if (strcmp(name, "double") == 0) *out = PB_FLOAT64;
  else return PB_EINVAL;
  return PB_OK;
}

void pb_image_meta_init(pb_image_meta *meta, const char *name, pb_dtype dtype,
                        const int64_t shape[PB_NDIM]) {
  memset(meta, 0, sizeof *meta);
  if (name != NULL) snprintf(meta->name, sizeof meta->name, "%s", name);
  meta->dtype = dtype;
  for (int k = 0; k < PB_NDIM; k++) meta->shape[k] = shape[k];
}

int64_t pb_image_pixels(const pb_image_meta *meta) {
  int64_t n = 1;
  for (int k = 0; k < PB_NDIM; k++) n *= meta->shape[k];
  return n;
}

size_t pb_image_bytes(const pb_image_meta *meta) {
  return (size_t)pb_image_pixels(meta) * pb_dtype_size(meta->dtype);
}

uint32_t pb_image_crc32(const pb_image_meta *meta, const void *pixels) {
  /* Pixels are native order; this machine is little-endian (checked at build time below). */
  size_t n = pb_image_bytes(meta);
  uLong crc = crc32(0L, Z_NULL, 0);
  const unsigned char *p = pixels;
  while (n > 0) {
    uInt step = n > (1u << 30) ? (1u << 30) : (uInt)n;
    crc = crc32(crc, p, step);
    p += step;
    n -= step;
  }
  return (uint32_t)crc;
}

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pipebench assumes a little-endian machine"
#endif


/* ---- write options ------------------------------------------------------------------------- */

static int opt_known(const char *const *keys, const char *item, size_t klen) {
  for (int i = 0; keys != NULL && keys[i] != NULL; i++) {
    const char *eq = strchr(keys[i], '=');
    size_t n = eq != NULL ? (size_t)(eq - keys[i]) : strlen(keys[i]);
    if (n == klen && strncmp(keys[i], item, klen) == 0) return 1;
  }
  return 0;
}

int pb__opt_check(const char *format, const char *options, const char *const *keys,
                  struct pb_error *err) {
  if (options == NULL) return PB_OK;
  const char *p = options;
  while (*p != '\0') {
    const char *end = strchr(p, ',');
    if (end == NULL) end = p + strlen(p);
    size_t len = (size_t)(end - p);
    const char *eq = memchr(p, '=', len);
    size_t klen = eq != NULL ? (size_t)(eq - p) : len;
    if (len > 0 && (eq == NULL || klen == 0 || !opt_known(keys, p, klen))) {
      char list[512] = "";
      for (int i = 0; keys != NULL && keys[i] != NULL; i++) {
        if (i > 0) strncat(list, ", ", sizeof list - strlen(list) - 1);
        strncat(list, keys[i], sizeof list - strlen(list) - 1);
      }
      const char *what = eq == NULL ? "option without a value" : "unknown option";
      if (keys == NULL || keys[0] == NULL)
        return pb_error_set(err, PB_EINVAL, "%s '%.*s': %s takes no options", what, (int)len, p,
                            format);
      return pb_error_set(err, PB_EINVAL, "%s '%.*s' for %s (valid: %s)", what, (int)len, p,
                          format, list);
    }
    p = *end == ',' ? end + 1 : end;
  }
  return PB_OK;
}

/* ---- registry lookups --------------------------------------------------------------------- */

int pb_format_count(void) { return pb__format_vtable_count(); }

const pb_format_info *pb_format_at(int i) {
  const pb_format_vtable *vt = pb__format_vtable_at(i);
  return vt != NULL ? &vt->info : NULL;
}

const pb_format_info *pb_format_find(const char *name) {
  const pb_format_vtable *vt = pb__format_vtable_find(name);
  return vt != NULL ? &vt->info : NULL;
}

const pb_format_vtable *pb__format_vtable_find(const char *name) {
  if (name == NULL) return NULL;
  for (int i = 0; i < pb__format_vtable_count(); i++) {
    const pb_format_vtable *vt = pb__format_vtable_at(i);
    if (strcmp(vt->info.name, name) == 0) return vt;
  }
  return NULL;
}

static int unknown_format(const char *name, struct pb_error *err) {
  char list[512] = "";
  for (int i = 0; i < pb__format_vtable_count(); i++) {
    const pb_format_vtable *vt = pb__format_vtable_at(i);
    if (i > 0) strncat(list, ", ", sizeof list - strlen(list) - 1);
    strncat(list, vt->info.name, sizeof list - strlen(list) - 1);
  }
  return pb_error_set(err, PB_EINVAL, "unknown format '%s' (known: %s)", name, list);
}

/* ---- datasets ------------------------------------------------------------------------------ */

struct pb_dataset {
  const pb_format_vtable *vt;
  void *state;
  char *path;
  int64_t count;
};

/* The message for a path no format claims. A folder that `pipebench gen` wrote (a
 * manifest.json beside one sub-folder per format) is named as such, with its datasets. */
static int not_a_dataset(const char *path, const struct stat *st, struct pb_error *err) {
  char m[4200], list[256] = "";
  snprintf(m, sizeof m, "%s/manifest.json", path);
  struct stat ms;
  DIR *d = S_ISDIR(st->st_mode) && stat(m, &ms) == 0 ? opendir(path) : NULL;
  int n = 0;
  for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.' || pb__format_vtable_find(e->d_name) == NULL) continue;
    size_t u = strlen(list);
    if (u + strlen(e->d_name) + 8 >= sizeof list) break;
    snprintf(list + u, sizeof list - u, "%s%s", n++ ? ", " : "", e->d_name);
  }
  if (d != NULL) closedir(d);
  if (n > 0)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: a folder `pipebench gen` wrote, holding a dataset per format "
                        "(%s among them): name one of them, or give the folder to `pipebench "
                        "run --data`",
                        path, list);
  return pb_error_set(err, PB_EFORMAT,
                      "%s: not a dataset in any known format (give one with --format)", path);
}

/* A URL's user:password never reaches a message: the I/O layer masks what it writes, and this
 * masks the formats' own messages, which name the dataset's URL (or one under it) as given. */
static int masked(const char *path, int rc, struct pb_error *err) {
  if (rc != PB_OK) pb_location_mask_error(path, err);
  return rc;
}

int pb_dataset_open(const char *path, const char *format, pb_dataset **out,
                    struct pb_error *err) {
  return pb_dataset_open_opts(path, format, NULL, out, err);
}

static int dataset_open(const char *path, const char *format, const pb_read_options *opts,
                        pb_dataset **out, struct pb_error *err);

int pb_dataset_open_opts(const char *path, const char *format, const pb_read_options *opts,
                         pb_dataset **out, struct pb_error *err) {
  return masked(path, dataset_open(path, format, opts, out, err), err);
}

static int dataset_open(const char *path, const char *format, const pb_read_options *opts,
                        pb_dataset **out, struct pb_error *err) {
  *out = NULL;
  pb_read_options ro;
  pb__io_options_resolve(opts, &ro);
  int url = path != NULL && pb__io_is_url(path);
  /* A gen or convert killed while it put this dataset into place: finished first, so the
   * reader finds the whole new dataset (or the whole old one), never a gap. */
  if (path != NULL && !url) PB_RETURN_NOT_OK(pb__commit_settle(path, err));
  struct stat st;
  memset(&st, 0, sizeof st);
  if (url) {
    /* remote: the backend says whether it is readable; detection looks at names only */
    if (pb__io_backend_for(path, err) == NULL) return PB_EUNSUPPORTED;
    st.st_mode = S_IFDIR;
  } else if (path == NULL || stat(path, &st) != 0) {
    return pb_error_set(err, PB_ENOTFOUND, "%s: no such file or directory", path ? path : "(null)");
  }
  /* A FIFO or a device would block the first open() or read() of a probe or a reader. */
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    return pb_error_set(err, PB_EFORMAT, "%s is %s, not a dataset", path,
                        pb__file_kind(st.st_mode));
  const pb_format_vtable *vt = NULL;
  if (format != NULL) {
    vt = pb__format_vtable_find(format);
    if (vt == NULL) return unknown_format(format, err);
  } else if (url) {
    PB_RETURN_NOT_OK(pb__format_detect_url(path, &ro, &vt, err));
  } else {
    int best = 0;
    for (int i = 0; i < pb__format_vtable_count(); i++) {
      const pb_format_vtable *c = pb__format_vtable_at(i);
      if (c->probe == NULL) continue;
      int score = c->probe(path);
      if (score > best) {
        best = score;
        vt = c;
      }
    }
    if (vt == NULL) return not_a_dataset(path, &st, err);
  }
  if (vt->open == NULL)
    return pb_error_set(err, PB_EUNSUPPORTED, "format '%s' cannot be read: %s", vt->info.name,
                        vt->refuse ? vt->refuse : "no reader");
  if (url) PB_RETURN_NOT_OK(pb__format_url_check(path, vt->info.name, err));
  pb_dataset *ds = calloc(1, sizeof *ds);
  if (ds == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  ds->vt = vt;
  ds->path = strdup(path);
  int rc = vt->open(path, &ro, &ds->state, err);
  if (rc != PB_OK) {
    free(ds->path);
    free(ds);
    return rc;
  }
  ds->count = vt->count(ds->state);
  *out = ds;
  return PB_OK;
}

int pb__dataset_clone(const pb_dataset *ds, const pb_read_options *opts, pb_dataset **out,
                      struct pb_error *err) {
  *out = NULL;
  if (ds->vt->clone == NULL) return pb_dataset_open_opts(ds->path, ds->vt->info.name, opts, out, err);
  pb_dataset *c = calloc(1, sizeof *c);
  if (c == NULL || (c->path = strdup(ds->path)) == NULL) {
    free(c);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  c->vt = ds->vt;
  c->count = ds->count;
  int rc = ds->vt->clone(ds->state, &c->state, err);
  if (rc != PB_OK) {
    free(c->path);
    free(c);
    return masked(ds->path, rc, err);
  }
  *out = c;
  return PB_OK;
}

void pb_dataset_free(pb_dataset *ds) {
  if (ds == NULL) return;
  ds->vt->close(ds->state);
  free(ds->path);
  free(ds);
}

const char *pb_dataset_format(const pb_dataset *ds) { return ds->vt->info.name; }
const char *pb_dataset_path(const pb_dataset *ds) { return ds->path; }
int64_t pb_dataset_count(const pb_dataset *ds) { return ds->count; }

static int check_index(const pb_dataset *ds, int64_t i, struct pb_error *err) {
  if (i < 0 || i >= ds->count)
    return pb_error_set(err, PB_ERANGE, "%s: image index %lld out of range (dataset has %lld)",
                        ds->path, (long long)i, (long long)ds->count);
  return PB_OK;
}

int pb_dataset_meta(pb_dataset *ds, int64_t i, pb_image_meta *out, struct pb_error *err) {
  PB_RETURN_NOT_OK(check_index(ds, i, err));
  return masked(ds->path, ds->vt->meta(ds->state, i, out, err), err);
}

int64_t pb_dataset_label(pb_dataset *ds, int64_t i) {
  if (ds == NULL || ds->vt->label == NULL || i < 0 || i >= pb_dataset_count(ds)) return -1;
  return ds->vt->label(ds->state, i);
}

int64_t pb_dataset_ignored(const pb_dataset *ds) {
  if (ds == NULL || ds->vt->ignored == NULL) return 0;
  return ds->vt->ignored(ds->state);
}

/* Every read enters through check_read, the one place that checks what a caller passes: the
 * index, the image's dtype and shape as the format reports them, the region (each axis inside
 * the image, computed without overflow; NULL: the whole image) and the bytes dst must hold.
 * Readers trust what passes (docs/formats.md); they check only what a file's own contents
 * could get wrong. */
static int check_read(pb_dataset *ds, int64_t i, const pb_region *region, const void *dst,
                      size_t dst_size, struct pb_error *err) {
  static const char axes[] = "TCZYX";
  PB_RETURN_NOT_OK(check_index(ds, i, err));
  pb_dtype dtype;
  int64_t shape[PB_NDIM];
  if (ds->vt->shape != NULL) {
    PB_RETURN_NOT_OK(ds->vt->shape(ds->state, i, &dtype, shape, err));
  } else {
    pb_image_meta meta;
    PB_RETURN_NOT_OK(ds->vt->meta(ds->state, i, &meta, err));
    dtype = meta.dtype;
    memcpy(shape, meta.shape, sizeof shape);
  }
  size_t need = pb_dtype_size(dtype);
  if (need == 0)
    return pb_error_set(err, PB_EFORMAT, "%s: image %lld: unknown pixel type %d", ds->path,
                        (long long)i, (int)dtype);
  for (int k = 0; k < PB_NDIM; k++) {
    int64_t size = shape[k];
    if (size < 1)
      return pb_error_set(err, PB_EFORMAT, "%s: image %lld: axis %c has size %lld", ds->path,
                          (long long)i, axes[k], (long long)size);
    int64_t n = size;
    if (region != NULL) {
      int64_t start = region->start[k], count = region->count[k];
      /* start <= size - count: no sum that could overflow */
      if (start < 0 || count < 1 || count > size || start > size - count)
        return pb_error_set(err, PB_ERANGE,
                            "%s: image %lld: region axis %c [%lld, +%lld) lies outside the "
                            "image (size %lld)",
                            ds->path, (long long)i, axes[k], (long long)start,
                            (long long)count, (long long)size);
      n = count;
    }
    if ((uint64_t)n > SIZE_MAX / need)
      return pb_error_set(err, PB_ERANGE, "%s: image %lld: %s of more than %zu bytes", ds->path,
                          (long long)i, region != NULL ? "region" : "image", SIZE_MAX);
    need *= (size_t)n;
  }
  if (dst == NULL || dst_size < need)
    return pb_error_set(err, PB_EINVAL, "%s: image %lld: destination holds %zu bytes, the %s needs %zu",
                        ds->path, (long long)i, dst == NULL ? (size_t)0 : dst_size,
                        region != NULL ? "region" : "image", need);
  return PB_OK;
}

int pb_dataset_read(pb_dataset *ds, int64_t i, void *dst, size_t dst_size,
                    pb_stage_times *times, struct pb_error *err) {
  PB_RETURN_NOT_OK(masked(ds->path, check_read(ds, i, NULL, dst, dst_size, err), err));
  if (times != NULL) memset(times, 0, sizeof *times);
  return masked(ds->path, ds->vt->read(ds->state, i, NULL, dst, dst_size, times, err), err);
}

static int read_region(pb_dataset *ds, int64_t i, const pb_region *region, void *dst,
                       size_t dst_size, pb_stage_times *times, struct pb_error *err) {
  if (region == NULL)
    return pb_error_set(err, PB_EINVAL, "%s: image %lld: no region given", ds->path,
                        (long long)i);
  PB_RETURN_NOT_OK(check_read(ds, i, region, dst, dst_size, err));
  if (times != NULL) memset(times, 0, sizeof *times);
  return PB_OK;
}

int pb_dataset_read_region(pb_dataset *ds, int64_t i, const pb_region *region, void *dst,
                           size_t dst_size, pb_stage_times *times, struct pb_error *err) {
  PB_RETURN_NOT_OK(masked(ds->path, read_region(ds, i, region, dst, dst_size, times, err), err));
  return masked(ds->path, ds->vt->read(ds->state, i, region, dst, dst_size, times, err), err);
}

void pb__scaled_box(const pb_region *region, const int64_t shape[PB_NDIM], int scale, pb_region *out) {
  *out = *region;
  for (int k = PB_Y; k <= PB_X; k++) {
    int64_t size = (shape[k] + scale - 1) / scale, lo = region->start[k] / scale;
    int64_t hi = (region->start[k] + region->count[k] + scale - 1) / scale;
    out->start[k] = lo;
    out->count[k] = (hi < size ? hi : size) - lo;
  }
}

int pb__read_scaled(pb_dataset *ds, int64_t i, const pb_region *region, int *scale, void *dst,
                    size_t dst_size, pb_region *out, pb_stage_times *times, struct pb_error *err) {
  if (*scale != 1 && *scale != 2 && *scale != 4 && *scale != 8)
    return pb_error_set(err, PB_EINVAL, "scale 1/%d: want 1, 2, 4 or 8", *scale);
  PB_RETURN_NOT_OK(read_region(ds, i, region, dst, dst_size, times, err));
  if (ds->vt->read_scaled == NULL) {
    *scale = 1;
    *out = *region;
    return ds->vt->read(ds->state, i, region, dst, dst_size, times, err);
  }
  return ds->vt->read_scaled(ds->state, i, region, scale, dst, dst_size, out, times, err);
}

/* ---- writers ------------------------------------------------------------------------------- */

struct pb_writer {
  const pb_format_vtable *vt;
  void *state;
  int finished;
};

int pb_writer_new(const char *path, const char *format, const pb_write_params *params,
                  pb_writer **out, struct pb_error *err) {
  *out = NULL;
  const pb_format_vtable *vt = pb__format_vtable_find(format);
  if (vt == NULL) return unknown_format(format ? format : "(null)", err);
  if (vt->writer_open == NULL)
    return pb_error_set(err, PB_EUNSUPPORTED, "format '%s' cannot be written: %s", vt->info.name,
                        vt->refuse ? vt->refuse : "no writer");
  pb_write_params defaults = PB_WRITE_PARAMS_DEFAULTS;
  if (params == NULL) params = &defaults;
  PB_RETURN_NOT_OK(pb__opt_check(vt->info.name, params->options, vt->write_options, err));
  /* A device must never be renamed over; what killed writers of path left is removed. */
  PB_RETURN_NOT_OK(pb__output_check(path, err));
  pb__temp_sweep(path);
  pb_writer *w = calloc(1, sizeof *w);
  if (w == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  w->vt = vt;
  int rc = vt->writer_open(path, params, &w->state, err);
  if (rc != PB_OK) {
    free(w);
    return rc;
  }
  *out = w;
  return PB_OK;
}

int pb_writer_add(pb_writer *w, const pb_image_meta *meta, const void *pixels,
                  struct pb_error *err) {
  if (w->finished) return pb_error_set(err, PB_ESTATE, "writer already finished");
  if (pb_dtype_size(meta->dtype) == 0)
    return pb_error_set(err, PB_EINVAL, "image '%s': invalid dtype %d", meta->name, (int)meta->dtype);
  for (int k = 0; k < PB_NDIM; k++)
    if (meta->shape[k] < 1)
      return pb_error_set(err, PB_EINVAL, "image '%s': shape axis %d is %lld", meta->name, k,
                          (long long)meta->shape[k]);
  return w->vt->writer_add(w->state, meta, pixels, err);
}

int pb_writer_finish(pb_writer *w, struct pb_error *err) {
  if (w->finished) return pb_error_set(err, PB_ESTATE, "writer already finished");
  int rc = w->vt->writer_finish(w->state, err);
  if (rc == PB_OK) w->finished = 1;
  return rc;
}

void pb_writer_free(pb_writer *w) {
  if (w == NULL) return;
  w->vt->writer_free(w->state);
  free(w);
}
