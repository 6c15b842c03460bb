/* The ome-zarr backend's writer: one image group per image, always 5-D (t, c, z, y, x), built in
 * a temporary sibling folder and renamed into place by finish. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zstd.h>

#include "formats/zarr/zarr_internal.h"
#include "io/le.h"

typedef struct zwriter {
  char *path;
  char tmp[4096];
  int version;
  char sep;
  int sharded;
  int64_t shard[PB_NDIM]; /* inner chunks per shard, per axis */
  pb__zarr_pipe pipe;
  int64_t chunk_param[PB_NDIM];
  int64_t n;
  int finished;
  ZSTD_CCtx *cctx;
  unsigned char *cbuf, *obuf, *sbuf;
  size_t ccap, ocap, scap;
  char lastdir[4096];
} zwriter;

static int parse_compression(zwriter *w, const pb_write_params *params, int shuffle,
                             struct pb_error *err) {
  const char *c = params->compression != NULL ? params->compression : "blosc-lz4";
  pb__zarr_codec codec;
  memset(&codec, 0, sizeof codec);
  codec.level = params->level;
  codec.shuffle = shuffle;
  if (strcmp(c, "none") == 0) {
    w->pipe.n = 0;
    return PB_OK;
  }
  if (strcmp(c, "zstd") == 0) {
    codec.id = PB__ZC_ZSTD;
  } else if (strcmp(c, "gzip") == 0) {
    codec.id = PB__ZC_GZIP;
  } else if (strcmp(c, "zlib") == 0 && w->version == 2) {
    codec.id = PB__ZC_ZLIB;
  } else if (strcmp(c, "blosc") == 0 || strncmp(c, "blosc-", 6) == 0) {
    const char *cname = c[5] == '-' ? c + 6 : "lz4";
    if (strcmp(cname, "lz4") != 0 && strcmp(cname, "lz4hc") != 0 && strcmp(cname, "zstd") != 0 &&
        strcmp(cname, "blosclz") != 0 && strcmp(cname, "zlib") != 0)
      return pb_error_set(err, PB_EINVAL,
                          "ome-zarr: unknown blosc compressor '%s' (lz4, lz4hc, zstd, blosclz, zlib)",
                          cname);
    codec.id = PB__ZC_BLOSC;
    snprintf(codec.cname, sizeof codec.cname, "%s", cname);
  } else {
    return pb_error_set(err, PB_EINVAL,
                        "ome-zarr: compression '%s' is not supported (none, zstd, gzip, %sblosc-lz4, "
                        "blosc-lz4hc, blosc-zstd, blosc-blosclz, blosc-zlib)",
                        c, w->version == 2 ? "zlib, " : "");
  }
  w->pipe.c[0] = codec;
  w->pipe.n = 1;
  return PB_OK;
}

int pb__zarr_writer_open(const char *path, const pb_write_params *params, void **wstate,
                         struct pb_error *err) {
  *wstate = NULL;
  /* Unknown option keys were refused by pb_writer_new (the vtable lists ours). */
  zwriter *w = calloc(1, sizeof *w);
  if (w == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  char v[64];
  int rc = PB_OK, shuffle = 1;
  w->version = 2;
  w->sep = '/';
  if (pb__opt_get(params->options, "zarr", v, sizeof v)) {
    if (strcmp(v, "2") == 0) w->version = 2;
    else if (strcmp(v, "3") == 0) w->version = 3;
    else rc = pb_error_set(err, PB_EINVAL, "ome-zarr: zarr=%s (use 2 or 3)", v);
  }
  if (rc == PB_OK && pb__opt_get(params->options, "separator", v, sizeof v)) {
    if (strcmp(v, "/") == 0 || strcmp(v, ".") == 0) w->sep = v[0];
    else rc = pb_error_set(err, PB_EINVAL, "ome-zarr: separator=%s (use / or .)", v);
  }
  if (rc == PB_OK && pb__opt_get(params->options, "shuffle", v, sizeof v)) {
    if (strcmp(v, "none") == 0) shuffle = 0;
    else if (strcmp(v, "byte") == 0) shuffle = 1;
    else if (strcmp(v, "bit") == 0) shuffle = 2;
    else rc = pb_error_set(err, PB_EINVAL, "ome-zarr: shuffle=%s (use none, byte or bit)", v);
  }
  if (rc == PB_OK && pb__opt_get(params->options, "shard", v, sizeof v)) {
    if (w->version != 3) {
      rc = pb_error_set(err, PB_EINVAL, "ome-zarr: shard= needs zarr=3 (Zarr v2 has no sharding)");
    } else {
      char *p = v;
      for (int k = 0; k < PB_NDIM && rc == PB_OK; k++) {
        char *end;
        long long s = strtoll(p, &end, 10);
        if (end == p || s < 1 || s > 65536 || (k < PB_NDIM - 1 ? *end != 'x' : *end != '\0'))
          rc = pb_error_set(err, PB_EINVAL,
                            "ome-zarr: shard=%s (give 5 chunk counts TxCxZxYxX, e.g. 1x1x1x2x2)", v);
        w->shard[k] = s;
        p = end + 1;
      }
      w->sharded = 1;
    }
  }
  if (rc == PB_OK) rc = parse_compression(w, params, shuffle, err);
  for (int k = 0; k < PB_NDIM; k++) {
    if (params->chunk[k] < 0 && rc == PB_OK)
      rc = pb_error_set(err, PB_EINVAL, "ome-zarr: negative chunk size");
    w->chunk_param[k] = params->chunk[k];
  }
  struct stat st;
  if (rc == PB_OK && stat(path, &st) == 0) {
    /* Replace only what looks like our own output (or an empty folder), never arbitrary data. */
    int empty = 0;
    if (S_ISDIR(st.st_mode)) {
      char **names;
      size_t count;
      if (pb__list_dir(path, &names, &count, NULL) == PB_OK) {
        empty = count == 0;
        pb__free_names(names, count);
      }
    }
    if (!empty && pb__zarr_probe(path) == 0)
      rc = pb_error_set(err, PB_EINVAL,
                        "%s: exists and is not an OME-Zarr dataset; refusing to replace it", path);
  }
  if (rc == PB_OK) {
    w->path = strdup(path);
    w->cctx = ZSTD_createCCtx();
    if (w->path == NULL || w->cctx == NULL) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  if (rc == PB_OK) {
    pb__temp_sibling(path, w->tmp, sizeof w->tmp);
    rc = pb__mkdirs(w->tmp, err);
    if (rc != PB_OK) w->tmp[0] = '\0';
  }
  if (rc != PB_OK) {
    pb__zarr_writer_free(w);
    return rc;
  }
  *wstate = w;
  return PB_OK;
}

/* ---- metadata ------------------------------------------------------------------------------ */

static int write_json(cJSON *obj, const char *path, struct pb_error *err) {
  char *s = obj != NULL ? cJSON_Print(obj) : NULL;
  cJSON_Delete(obj);
  if (s == NULL) return pb_error_set(err, PB_ENOMEM, "%s: out of memory building JSON", path);
  int rc = pb__write_file(path, s, strlen(s), err);
  free(s);
  return rc;
}

static cJSON *int_array(const int64_t *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
  return a;
}

static const char *ngff_unit(const char *u) {
  if (u[0] == '\0' || strcmp(u, "µm") == 0 || strcmp(u, "um") == 0 || strcmp(u, "micron") == 0)
    return "micrometer";
  if (strcmp(u, "nm") == 0) return "nanometer";
  if (strcmp(u, "mm") == 0) return "millimeter";
  if (strcmp(u, "cm") == 0) return "centimeter";
  if (strcmp(u, "m") == 0) return "meter";
  if (strcmp(u, "Å") == 0) return "angstrom";
  if (strcmp(u, "pm") == 0) return "picometer";
  return u;
}

static cJSON *multiscales(const pb_image_meta *m, const char *name, int version) {
  static const char *const axn[PB_NDIM] = {"t", "c", "z", "y", "x"};
  static const char *const axt[PB_NDIM] = {"time", "channel", "space", "space", "space"};
  cJSON *ms = cJSON_CreateObject();
  if (version == 2) cJSON_AddStringToObject(ms, "version", "0.4");
  cJSON_AddStringToObject(ms, "name", name);
  cJSON *axes = cJSON_AddArrayToObject(ms, "axes");
  double scale[PB_NDIM] = {1, 1, 1, 1, 1};
  for (int k = 0; k < PB_NDIM; k++) {
    cJSON *ax = cJSON_CreateObject();
    cJSON_AddStringToObject(ax, "name", axn[k]);
    cJSON_AddStringToObject(ax, "type", axt[k]);
    if (k >= PB_Z) {
      int slot = PB_X - k;
      if (m->physical_size[slot] > 0) {
        scale[k] = m->physical_size[slot];
        cJSON_AddStringToObject(ax, "unit", ngff_unit(m->physical_unit[slot]));
      }
    }
    cJSON_AddItemToArray(axes, ax);
  }
  cJSON *ds = cJSON_CreateObject();
  cJSON_AddStringToObject(ds, "path", "0");
  cJSON *ct = cJSON_AddArrayToObject(ds, "coordinateTransformations");
  cJSON *sc = cJSON_CreateObject();
  cJSON_AddStringToObject(sc, "type", "scale");
  cJSON_AddItemToObject(sc, "scale", cJSON_CreateDoubleArray(scale, PB_NDIM));
  cJSON_AddItemToArray(ct, sc);
  cJSON *dss = cJSON_AddArrayToObject(ms, "datasets");
  cJSON_AddItemToArray(dss, ds);
  cJSON *list = cJSON_CreateArray();
  cJSON_AddItemToArray(list, ms);
  return list;
}

static cJSON *omero(const pb_image_meta *m) {
  if (m->n_channels <= 0) return NULL;
  double lo = 0, hi = 1;
  switch (m->dtype) {
  case PB_UINT8: hi = 255; break;
  case PB_UINT16: hi = 65535; break;
  case PB_UINT32: hi = 4294967295.0; break;
  case PB_INT16: lo = -32768; hi = 32767; break;
  default: break;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON *chs = cJSON_AddArrayToObject(o, "channels");
  for (int i = 0; i < m->n_channels && i < PB_MAX_CHANNELS; i++) {
    const pb_channel *c = &m->channels[i];
    cJSON *ch = cJSON_CreateObject();
    char label[80], color[16];
    if (c->name[0] != '\0') snprintf(label, sizeof label, "%s", c->name);
    else snprintf(label, sizeof label, "Channel %d", i);
    cJSON_AddStringToObject(ch, "label", label);
    snprintf(color, sizeof color, "%06X", c->color_rgba != 0 ? (unsigned)(c->color_rgba >> 8) : 0xFFFFFFu);
    cJSON_AddStringToObject(ch, "color", color);
    cJSON_AddBoolToObject(ch, "active", 1);
    cJSON *win = cJSON_AddObjectToObject(ch, "window");
    cJSON_AddNumberToObject(win, "min", lo);
    cJSON_AddNumberToObject(win, "max", hi);
    cJSON_AddNumberToObject(win, "start", lo);
    cJSON_AddNumberToObject(win, "end", hi);
    cJSON_AddItemToArray(chs, ch);
  }
  cJSON *rdefs = cJSON_AddObjectToObject(o, "rdefs");
  cJSON_AddStringToObject(rdefs, "model", "color");
  return o;
}

static cJSON *v3_codec_list(const zwriter *w, size_t esize) {
  cJSON *list = cJSON_CreateArray();
  cJSON *bytes = cJSON_CreateObject();
  cJSON_AddStringToObject(bytes, "name", "bytes");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(bytes, "configuration"), "endian", "little");
  cJSON_AddItemToArray(list, bytes);
  if (w->pipe.n == 1) {
    const pb__zarr_codec *c = &w->pipe.c[0];
    cJSON *cj = cJSON_CreateObject();
    cJSON *cfg;
    switch (c->id) {
    case PB__ZC_BLOSC:
      cJSON_AddStringToObject(cj, "name", "blosc");
      cfg = cJSON_AddObjectToObject(cj, "configuration");
      cJSON_AddStringToObject(cfg, "cname", c->cname);
      cJSON_AddNumberToObject(cfg, "clevel", c->level > 0 ? c->level : 5);
      cJSON_AddStringToObject(cfg, "shuffle",
                              c->shuffle == 0 ? "noshuffle" : c->shuffle == 1 ? "shuffle" : "bitshuffle");
      cJSON_AddNumberToObject(cfg, "typesize", (double)esize);
      cJSON_AddNumberToObject(cfg, "blocksize", 0);
      break;
    case PB__ZC_ZSTD:
      cJSON_AddStringToObject(cj, "name", "zstd");
      cfg = cJSON_AddObjectToObject(cj, "configuration");
      cJSON_AddNumberToObject(cfg, "level", c->level != 0 ? c->level : 3);
      cJSON_AddBoolToObject(cfg, "checksum", 0);
      break;
    default:
      cJSON_AddStringToObject(cj, "name", "gzip");
      cfg = cJSON_AddObjectToObject(cj, "configuration");
      cJSON_AddNumberToObject(cfg, "level", c->level > 0 ? c->level : 6);
      break;
    }
    cJSON_AddItemToArray(list, cj);
  }
  return list;
}

static const char *v2_dtype(pb_dtype d) {
  static const char *const names[PB_DTYPE_COUNT] = {"|u1", "<u2", "<u4", "<i2", "<f4", "<f8"};
  return (unsigned)d < PB_DTYPE_COUNT ? names[d] : "?";
}

static int write_metadata(zwriter *w, const char *gdir, const char *name, const pb_image_meta *m,
                          const int64_t unit[PB_NDIM], const int64_t inner[PB_NDIM],
                          struct pb_error *err) {
  char p[4096];
  size_t esize = pb_dtype_size(m->dtype);
  char base[256];
  snprintf(base, sizeof base, "%s", name);
  char *dot = strstr(base, ".zarr");
  if (dot != NULL && dot != base) *dot = '\0';
  if (w->version == 2) {
    snprintf(p, sizeof p, "%s/.zgroup", gdir);
    cJSON *g = cJSON_CreateObject();
    cJSON_AddNumberToObject(g, "zarr_format", 2);
    PB_RETURN_NOT_OK(write_json(g, p, err));
    cJSON *at = cJSON_CreateObject();
    cJSON_AddItemToObject(at, "multiscales", multiscales(m, base, 2));
    cJSON *om = omero(m);
    if (om != NULL) cJSON_AddItemToObject(at, "omero", om);
    snprintf(p, sizeof p, "%s/.zattrs", gdir);
    PB_RETURN_NOT_OK(write_json(at, p, err));
    cJSON *za = cJSON_CreateObject();
    cJSON_AddNumberToObject(za, "zarr_format", 2);
    cJSON_AddItemToObject(za, "shape", int_array(m->shape, PB_NDIM));
    cJSON_AddItemToObject(za, "chunks", int_array(unit, PB_NDIM));
    cJSON_AddStringToObject(za, "dtype", v2_dtype(m->dtype));
    if (w->pipe.n == 0) {
      cJSON_AddNullToObject(za, "compressor");
    } else {
      const pb__zarr_codec *c = &w->pipe.c[0];
      cJSON *cj = cJSON_AddObjectToObject(za, "compressor");
      switch (c->id) {
      case PB__ZC_BLOSC:
        cJSON_AddStringToObject(cj, "id", "blosc");
        cJSON_AddStringToObject(cj, "cname", c->cname);
        cJSON_AddNumberToObject(cj, "clevel", c->level > 0 ? c->level : 5);
        cJSON_AddNumberToObject(cj, "shuffle", c->shuffle);
        cJSON_AddNumberToObject(cj, "blocksize", 0);
        break;
      case PB__ZC_ZSTD:
        cJSON_AddStringToObject(cj, "id", "zstd");
        cJSON_AddNumberToObject(cj, "level", c->level != 0 ? c->level : 3);
        break;
      case PB__ZC_GZIP:
        cJSON_AddStringToObject(cj, "id", "gzip");
        cJSON_AddNumberToObject(cj, "level", c->level > 0 ? c->level : 6);
        break;
      default:
        cJSON_AddStringToObject(cj, "id", "zlib");
        cJSON_AddNumberToObject(cj, "level", c->level > 0 ? c->level : 6);
        break;
      }
    }
    cJSON_AddNumberToObject(za, "fill_value", 0);
    cJSON_AddStringToObject(za, "order", "C");
    cJSON_AddNullToObject(za, "filters");
    cJSON_AddStringToObject(za, "dimension_separator", w->sep == '/' ? "/" : ".");
    snprintf(p, sizeof p, "%s/0/.zarray", gdir);
    return write_json(za, p, err);
  }
  cJSON *g = cJSON_CreateObject();
  cJSON_AddNumberToObject(g, "zarr_format", 3);
  cJSON_AddStringToObject(g, "node_type", "group");
  cJSON *ome = cJSON_AddObjectToObject(cJSON_AddObjectToObject(g, "attributes"), "ome");
  cJSON_AddStringToObject(ome, "version", "0.5");
  cJSON_AddItemToObject(ome, "multiscales", multiscales(m, base, 3));
  cJSON *om = omero(m);
  if (om != NULL) cJSON_AddItemToObject(ome, "omero", om);
  snprintf(p, sizeof p, "%s/zarr.json", gdir);
  PB_RETURN_NOT_OK(write_json(g, p, err));
  cJSON *za = cJSON_CreateObject();
  cJSON_AddNumberToObject(za, "zarr_format", 3);
  cJSON_AddStringToObject(za, "node_type", "array");
  cJSON_AddItemToObject(za, "shape", int_array(m->shape, PB_NDIM));
  cJSON_AddStringToObject(za, "data_type", pb_dtype_name(m->dtype));
  cJSON *grid = cJSON_AddObjectToObject(za, "chunk_grid");
  cJSON_AddStringToObject(grid, "name", "regular");
  cJSON_AddItemToObject(cJSON_AddObjectToObject(grid, "configuration"), "chunk_shape",
                        int_array(unit, PB_NDIM));
  cJSON *ke = cJSON_AddObjectToObject(za, "chunk_key_encoding");
  cJSON_AddStringToObject(ke, "name", "default");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(ke, "configuration"), "separator",
                          w->sep == '/' ? "/" : ".");
  cJSON_AddNumberToObject(za, "fill_value", 0);
  if (w->sharded) {
    cJSON *codecs = cJSON_AddArrayToObject(za, "codecs");
    cJSON *sh = cJSON_CreateObject();
    cJSON_AddStringToObject(sh, "name", "sharding_indexed");
    cJSON *cfg = cJSON_AddObjectToObject(sh, "configuration");
    cJSON_AddItemToObject(cfg, "chunk_shape", int_array(inner, PB_NDIM));
    cJSON_AddItemToObject(cfg, "codecs", v3_codec_list(w, esize));
    cJSON *ic = cJSON_AddArrayToObject(cfg, "index_codecs");
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "name", "bytes");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(b, "configuration"), "endian", "little");
    cJSON_AddItemToArray(ic, b);
    cJSON *crc = cJSON_CreateObject();
    cJSON_AddStringToObject(crc, "name", "crc32c");
    cJSON_AddItemToArray(ic, crc);
    cJSON_AddStringToObject(cfg, "index_location", "end");
    cJSON_AddItemToArray(codecs, sh);
  } else {
    cJSON_AddItemToObject(za, "codecs", v3_codec_list(w, esize));
  }
  cJSON_AddItemToObject(za, "attributes", cJSON_CreateObject());
  const char *dn[PB_NDIM] = {"t", "c", "z", "y", "x"};
  cJSON_AddItemToObject(za, "dimension_names", cJSON_CreateStringArray(dn, PB_NDIM));
  snprintf(p, sizeof p, "%s/0/zarr.json", gdir);
  return write_json(za, p, err);
}

/* ---- chunks -------------------------------------------------------------------------------- */

/* Copies the chunk at origin o (shape n, zero-padded past the image's edge) into w->cbuf and
 * encodes it into w->obuf. */
static int encode_chunk(zwriter *w, const pb_image_meta *m, const void *pixels,
                        const int64_t o[PB_NDIM], const int64_t n[PB_NDIM], size_t *outn,
                        struct pb_error *err) {
  size_t esize = pb_dtype_size(m->dtype), bytes = esize;
  int edge = 0;
  for (int k = 0; k < PB_NDIM; k++) {
    bytes *= (size_t)n[k];
    if (o[k] + n[k] > m->shape[k]) edge = 1;
  }
  if (pb__zarr_reserve(&w->cbuf, &w->ccap, bytes) != PB_OK)
    return pb_error_set(err, PB_ENOMEM, "out of memory for a %zu-byte chunk", bytes);
  if (edge) memset(w->cbuf, 0, bytes);
  static const int64_t zero[PB_NDIM] = {0, 0, 0, 0, 0};
  pb__copy_box(w->cbuf, o, n, pixels, zero, m->shape, esize);
  return pb__zarr_encode(&w->pipe, esize, w->cctx, w->cbuf, bytes, &w->obuf, &w->ocap, outn, err);
}

static int key_path(const zwriter *w, const char *gdir, const int64_t g[PB_NDIM], char *p,
                    size_t size) {
  int len = snprintf(p, size, "%s/0/%s", gdir, w->version == 3 ? "c" : "");
  for (int k = 0; k < PB_NDIM; k++) {
    char sep[2] = {w->sep, 0};
    len += snprintf(p + len, size - (size_t)len, "%s%lld", (k > 0 || w->version == 3) ? sep : "",
                    (long long)g[k]);
    if ((size_t)len >= size) return PB_EINVAL;
  }
  return PB_OK;
}

static int write_unit(zwriter *w, const char *p, const void *data, size_t n, struct pb_error *err) {
  if (w->sep == '/' || w->version == 3) {
    const char *slash = strrchr(p, '/');
    size_t dl = (size_t)(slash - p);
    if (dl < sizeof w->lastdir && (strlen(w->lastdir) != dl || strncmp(w->lastdir, p, dl) != 0)) {
      memcpy(w->lastdir, p, dl);
      w->lastdir[dl] = '\0';
      PB_RETURN_NOT_OK(pb__mkdirs(w->lastdir, err));
    }
  }
  return pb__write_file(p, data, n, err);
}

#define put_u64 pb__st_le64

/* Grows *buf to at least need bytes, keeping the first used bytes. */
static int grow_keep(unsigned char **buf, size_t *cap, size_t used, size_t need) {
  if (*buf != NULL && *cap >= need) return PB_OK;
  size_t ncap = need < 65536 ? 65536 : need * 2;
  unsigned char *nb = pb_alloc(ncap);
  if (nb == NULL) return PB_ENOMEM;
  if (used > 0) memcpy(nb, *buf, used);
  pb_free(*buf, *cap);
  *buf = nb;
  *cap = ncap;
  return PB_OK;
}

static int write_shard(zwriter *w, const pb_image_meta *m, const void *pixels,
                       const int64_t so[PB_NDIM], const int64_t inner[PB_NDIM],
                       const int64_t cnt[PB_NDIM], const char *p, struct pb_error *err) {
  size_t total = 1;
  for (int k = 0; k < PB_NDIM; k++) total *= (size_t)cnt[k];
  size_t idx_bytes = 16 * total + 4, used = 0;
  unsigned char *idx = malloc(idx_bytes);
  if (idx == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int64_t h[PB_NDIM] = {0, 0, 0, 0, 0};
  int rc = PB_OK;
  for (size_t lin = 0; lin < total && rc == PB_OK; lin++) {
    int64_t o[PB_NDIM];
    int outside = 0;
    for (int k = 0; k < PB_NDIM; k++) {
      o[k] = so[k] + h[k] * inner[k];
      if (o[k] >= m->shape[k]) outside = 1;
    }
    if (outside) {
      put_u64(idx + 16 * lin, UINT64_MAX);
      put_u64(idx + 16 * lin + 8, UINT64_MAX);
    } else {
      size_t n;
      rc = encode_chunk(w, m, pixels, o, inner, &n, err);
      if (rc == PB_OK && grow_keep(&w->sbuf, &w->scap, used, used + n + idx_bytes) != PB_OK)
        rc = pb_error_set(err, PB_ENOMEM, "out of memory");
      if (rc == PB_OK) {
        memcpy(w->sbuf + used, w->obuf, n);
        put_u64(idx + 16 * lin, used);
        put_u64(idx + 16 * lin + 8, n);
        used += n;
      }
    }
    for (int k = PB_NDIM - 1; k >= 0; k--) {
      if (++h[k] < cnt[k]) break;
      h[k] = 0;
    }
  }
  if (rc == PB_OK) {
    uint32_t crc = pb__crc32c(0, idx, 16 * total);
    pb__st_le32(idx + 16 * total, crc);
    memcpy(w->sbuf + used, idx, idx_bytes);
    rc = write_unit(w, p, w->sbuf, used + idx_bytes, err);
  }
  free(idx);
  return rc;
}

static int safe_name(const char *s) {
  size_t n = strlen(s);
  return n > 5 && n < 200 && strcmp(s + n - 5, ".zarr") == 0 && s[0] != '.' &&
         strchr(s, '/') == NULL;
}

int pb__zarr_writer_add(void *wstate, const pb_image_meta *m, const void *pixels,
                        struct pb_error *err) {
  zwriter *w = wstate;
  char name[256], gdir[4096], p[4096];
  if (safe_name(m->name)) snprintf(name, sizeof name, "%s", m->name);
  else snprintf(name, sizeof name, "img_%05lld.zarr", (long long)w->n);
  if (snprintf(gdir, sizeof gdir, "%s/%s", w->tmp, name) >= (int)sizeof gdir)
    return pb_error_set(err, PB_EINVAL, "%s: path too long", name);
  if (mkdir(gdir, 0777) != 0)
    return pb_error_set(err, errno == EEXIST ? PB_EINVAL : -errno,
                        "ome-zarr: image %lld: cannot create group '%s': %s", (long long)w->n, name,
                        errno == EEXIST ? "two images have this name" : strerror(errno));
  snprintf(p, sizeof p, "%s/0", gdir);
  PB_RETURN_NOT_OK(pb__mkdirs(p, err));
  int64_t chunk[PB_NDIM], unit[PB_NDIM], cnt[PB_NDIM], grid[PB_NDIM];
  for (int k = 0; k < PB_NDIM; k++) {
    int64_t c = w->chunk_param[k] > 0 ? w->chunk_param[k] : (k < PB_Y ? 1 : m->shape[k]);
    chunk[k] = c < m->shape[k] ? c : m->shape[k];
    int64_t nchunks = (m->shape[k] + chunk[k] - 1) / chunk[k];
    cnt[k] = w->sharded ? (w->shard[k] < nchunks ? w->shard[k] : nchunks) : 1;
    unit[k] = chunk[k] * cnt[k];
    grid[k] = (m->shape[k] + unit[k] - 1) / unit[k];
  }
  PB_RETURN_NOT_OK(write_metadata(w, gdir, name, m, unit, chunk, err));
  w->lastdir[0] = '\0';
  int64_t g[PB_NDIM] = {0, 0, 0, 0, 0};
  for (;;) {
    int64_t o[PB_NDIM];
    for (int k = 0; k < PB_NDIM; k++) o[k] = g[k] * unit[k];
    if (key_path(w, gdir, g, p, sizeof p) != PB_OK)
      return pb_error_set(err, PB_EINVAL, "%s: chunk path too long", gdir);
    int rc;
    if (w->sharded) {
      rc = write_shard(w, m, pixels, o, chunk, cnt, p, err);
    } else {
      size_t n;
      rc = encode_chunk(w, m, pixels, o, chunk, &n, err);
      if (rc == PB_OK) rc = write_unit(w, p, w->obuf, n, err);
    }
    if (rc != PB_OK) {
      pb_error_prefix(err, "ome-zarr: image %lld (%s): ", (long long)w->n, name);
      return rc;
    }
    int k = PB_NDIM - 1;
    while (k >= 0 && ++g[k] >= grid[k]) {
      g[k] = 0;
      k--;
    }
    if (k < 0) break;
  }
  w->n++;
  return PB_OK;
}

int pb__zarr_writer_finish(void *wstate, struct pb_error *err) {
  zwriter *w = wstate;
  char p[4096];
  cJSON *g = cJSON_CreateObject();
  cJSON_AddNumberToObject(g, "zarr_format", w->version);
  if (w->version == 3) {
    cJSON_AddStringToObject(g, "node_type", "group");
    cJSON_AddItemToObject(g, "attributes", cJSON_CreateObject());
  }
  snprintf(p, sizeof p, "%s/%s", w->tmp, w->version == 3 ? "zarr.json" : ".zgroup");
  PB_RETURN_NOT_OK(write_json(g, p, err));
  struct stat st;
  char old[4096] = "";
  if (stat(w->path, &st) == 0) {
    /* writer_open checked that this is an empty folder or an earlier OME-Zarr dataset */
    pb__temp_sibling(w->path, old, sizeof old);
    if (rename(w->path, old) != 0)
      return pb_error_set(err, -errno, "%s: cannot move the old dataset aside: %s", w->path,
                          strerror(errno));
  }
  if (rename(w->tmp, w->path) != 0) {
    int e = errno;
    if (old[0] != '\0') rename(old, w->path);
    return pb_error_set(err, -e, "%s: cannot rename %s into place: %s", w->path, w->tmp,
                        strerror(e));
  }
  if (old[0] != '\0') pb__remove_tree(old);
  w->finished = 1;
  return PB_OK;
}

void pb__zarr_writer_free(void *wstate) {
  zwriter *w = wstate;
  if (w == NULL) return;
  if (!w->finished && w->tmp[0] != '\0') pb__remove_tree(w->tmp);
  if (w->cctx != NULL) ZSTD_freeCCtx(w->cctx);
  pb_free(w->cbuf, w->ccap);
  pb_free(w->obuf, w->ocap);
  pb_free(w->sbuf, w->scap);
  free(w->path);
  free(w);
}
