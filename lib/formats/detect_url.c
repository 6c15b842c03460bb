/* Which format a URL holds. A local path is probed by each backend (names and a few bytes);
 * over HTTP or S3 every look is a request, so a URL is judged here from one stat, then either
 * the first bytes of the object (one range) or one listing of the folder, with the options the
 * caller gave (--insecure, timeouts) instead of the defaults the probes use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "formats/format_internal.h"
#include "io/io.h"

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcasecmp(s + a - b, suffix) == 0;
}

static int has_name(char **names, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0) return 1;
  return 0;
}

static int is_image_name(const char *s) {
  return ends_with(s, ".jpg") || ends_with(s, ".jpeg") || ends_with(s, ".png");
}

static const pb_format_vtable *find(const char *name) { return pb__format_vtable_find(name); }

/* A format the build reads only from local paths: refused naming why. */
static int refuse(const char *path, const char *format, const char *why, struct pb_error *err) {
  return pb_error_set(err, PB_EUNSUPPORTED, "%s: format %s, which pipebench reads from local "
                      "paths only: %s (docs/remote.md)", path, format, why);
}

int pb__format_url_check(const char *path, const char *format, struct pb_error *err) {
  if (strcmp(format, "duckdb") == 0)
    return refuse(path, format,
                  "DuckDB opens the database file itself, and its httpfs extension cannot be "
                  "installed offline", err);
  if (strcmp(format, "oa-dataset") == 0)
    return refuse(path, format,
                  "its index is queried through DuckDB, whose httpfs extension cannot be "
                  "installed offline", err);
  /* Lance is read by its engine (lancedb, through the Node helper), whose object stores read
   * s3:// (and gs://, az://, which pipebench does not take) but have no http(s):// store. */
  if (strcmp(format, "lance") == 0 && strncasecmp(path, "s3://", 5) != 0)
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: format lance, which pipebench reads from "
                        "local paths and s3:// only: its engine, lancedb, has no object store "
                        "for http(s):// (docs/remote.md)", path);
  return PB_OK;
}

static int detect_file(const char *path, const pb_read_options *ro, uint64_t size,
                       const pb_format_vtable **vt, struct pb_error *err) {
  unsigned char h[12];
  memset(h, 0, sizeof h);
  size_t want = size < sizeof h ? (size_t)size : sizeof h;
  pb__io_file *f;
  PB_RETURN_NOT_OK(pb__io_open(path, ro, &f, err));
  int rc = pb__io_pread(f, h, want, 0, err);
  pb__io_close(f);
  PB_RETURN_NOT_OK(rc);
  if (want >= 8 && memcmp(h, "PBRAWIMG", 8) == 0) *vt = find("raw");
  else if (want >= 4 && memcmp(h, "PAR1", 4) == 0) *vt = find("ome-parquet");
  else if (want >= 12 && memcmp(h + 8, "DUCK", 4) == 0) *vt = find("duckdb");
  else if (want >= 4 && (memcmp(h, "II*\0", 4) == 0 || memcmp(h, "MM\0*", 4) == 0 ||
                         memcmp(h, "II+\0", 4) == 0 || memcmp(h, "MM\0+", 4) == 0))
    *vt = find("tiff");
  if (*vt == NULL)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: not a dataset in any known format (its first bytes are no raw, "
                        "Parquet or TIFF header; give one with --format)", path);
  return PB_OK;
}

/* An image folder: among the first entries, a folder (a class) holding an image. */
static int looks_like_imagefolder(const char *path, const pb_read_options *ro, char **names,
                                  size_t n) {
  for (size_t i = 0; i < n && i < 8; i++) {
    if (names[i][0] == '.' || strchr(names[i], '.') != NULL) continue;
    char *sub = pb__io_join(path, names[i]);
    if (sub == NULL) return 0;
    char **inner;
    size_t k;
    int found = 0;
    if (pb__io_list(sub, ro, &inner, &k, NULL) == PB_OK) {
      for (size_t j = 0; j < k && j < 64 && !found; j++) found = is_image_name(inner[j]);
      pb__io_free_names(inner, k);
    }
    free(sub);
    if (found) return 1;
  }
  return 0;
}

int pb__format_detect_url(const char *path, const pb_read_options *ro,
                          const pb_format_vtable **vt, struct pb_error *err) {
  *vt = NULL;
  pb__io_kind kind;
  uint64_t size = 0;
  PB_RETURN_NOT_OK(pb__io_stat(path, ro, &kind, &size, err));
  if (kind == PB__IO_MISSING) return pb_error_set(err, PB_ENOTFOUND, "%s: not found", path);
  if (kind == PB__IO_FILE) return detect_file(path, ro, size, vt, err);
  if (kind != PB__IO_DIR) return pb_error_set(err, PB_EFORMAT, "%s: not a dataset", path);
  char **names;
  size_t n;
  PB_RETURN_NOT_OK(pb__io_list(path, ro, &names, &n, err));
  int tiffs = 0, zarrs = 0, gen_formats = 0;
  for (size_t i = 0; i < n; i++) {
    tiffs += ends_with(names[i], ".tif") || ends_with(names[i], ".tiff");
    zarrs += ends_with(names[i], ".zarr") && names[i][0] != '.';
    gen_formats += find(names[i]) != NULL;
  }
  if (has_name(names, n, ".zattrs") || has_name(names, n, "zarr.json") ||
      has_name(names, n, ".zgroup") || zarrs > 0)
    *vt = find("ome-zarr");
  else if (has_name(names, n, "_ome_arrow_dataset.json")) *vt = find("oa-dataset");
  else if (has_name(names, n, "_versions")) *vt = find("lance");
  else if (tiffs > 0) *vt = find("tiff");
  else if (!(has_name(names, n, "manifest.json") && gen_formats > 0) &&
           looks_like_imagefolder(path, ro, names, n))
    *vt = find("imagefolder");
  int rc = PB_OK;
  if (*vt == NULL && has_name(names, n, "manifest.json") && gen_formats > 0) {
    char list[256] = "";
    for (size_t i = 0, used = 0; i < n; i++) {
      if (find(names[i]) == NULL || used + strlen(names[i]) + 3 >= sizeof list) continue;
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "",
                               names[i]);
    }
    rc = pb_error_set(err, PB_EFORMAT,
                      "%s: a folder `pipebench gen` wrote, holding a dataset per format (%s "
                      "among them): name one of them, or give the folder to `pipebench run "
                      "--data`", path, list);
  } else if (*vt == NULL) {
    rc = pb_error_set(err, PB_EFORMAT,
                      "%s: not a dataset in any known format (give one with --format)", path);
  }
  pb__io_free_names(names, n);
  return rc;
}
