/* Parsing Zarr array metadata (.zarray, zarr.json) and OME-NGFF attributes (0.4 and 0.5). */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "common/json.h"
#include "formats/zarr/zarr_internal.h"

/* ---- small JSON helpers -------------------------------------------------------------------- */

/* Exactly representable non-negative integer up to max. */
static int json_uint(const cJSON *it, int64_t max, int64_t *out) {
  if (!cJSON_IsNumber(it)) return 0;
  double d = it->valuedouble;
  if (!(d >= 0) || d != floor(d) || d > (double)max) return 0;
  *out = (int64_t)d;
  return 1;
}

static const char *json_str(const cJSON *obj, const char *key) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  return cJSON_IsString(it) ? it->valuestring : NULL;
}

__attribute__((format(printf, 4, 5))) static int bad(struct pb_error *err, int code,
                                                      const char *label, const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return pb_error_set(err, code, "%s: %s", label, what);
}

/* obj's key when it is absent or null (*out NULL) or a string; anything else is refused,
 * naming the field. */
static int opt_str(const cJSON *obj, const char *key, const char **out, const char *label,
                   struct pb_error *err) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  *out = NULL;
  if (it == NULL || cJSON_IsNull(it)) return PB_OK;
  if (!cJSON_IsString(it)) return bad(err, PB_EFORMAT, label, "'%s' is not a string", key);
  *out = it->valuestring;
  return PB_OK;
}

/* obj's key: absent or null (*out = dflt) or an integer from lo to hi. */
static int opt_int(const cJSON *obj, const char *key, int lo, int hi, int dflt, int *out,
                   const char *label, struct pb_error *err) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  *out = dflt;
  if (it == NULL || cJSON_IsNull(it)) return PB_OK;
  double d = cJSON_IsNumber(it) ? it->valuedouble : NAN;
  if (!(d >= lo && d <= hi) || d != floor(d))
    return bad(err, PB_EFORMAT, label, "'%s' is not an integer from %d to %d", key, lo, hi);
  *out = (int)d;
  return PB_OK;
}

/* obj's key: absent, null or an object (*out NULL unless an object). */
static int opt_obj(const cJSON *obj, const char *key, const cJSON **out, const char *label,
                   struct pb_error *err) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  *out = NULL;
  if (it == NULL || cJSON_IsNull(it)) return PB_OK;
  if (!cJSON_IsObject(it)) return bad(err, PB_EFORMAT, label, "'%s' is not an object", key);
  *out = it;
  return PB_OK;
}

/* A list of ndim positive integers (ndim < 0: any length 1..PB_NDIM, stored in *n). */
static int int_list(const cJSON *list, int ndim, int64_t *out, int *n, const char *label,
                    const char *key, struct pb_error *err) {
  if (!cJSON_IsArray(list)) return bad(err, PB_EFORMAT, label, "'%s' is missing or not a list", key);
  int len = cJSON_GetArraySize(list);
  if (len < 1 || len > PB_NDIM)
    return pb_error_set(err, ndim < 0 && len > PB_NDIM ? PB_EUNSUPPORTED : PB_EFORMAT,
                        "%s: '%s' has %d entries (pipebench reads 1 to 5 dimensions)", label, key,
                        len);
  if (ndim >= 0 && len != ndim)
    return pb_error_set(err, PB_EFORMAT, "%s: '%s' has %d entries, the array has %d dimensions",
                        label, key, len, ndim);
  int i = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, list) {
    if (!json_uint(it, (int64_t)1 << 50, &out[i]) || out[i] < 1)
      return bad(err, PB_EFORMAT, label, "'%s' must hold positive integers", key);
    i++;
  }
  if (n != NULL) *n = len;
  return PB_OK;
}

/* ---- dtypes and fill values ---------------------------------------------------------------- */

static int parse_v2_dtype(const char *s, pb__zarr_array *a) {
  if (s == NULL || strlen(s) != 3) return 0;
  char order = s[0];
  const char *t = s + 1;
  if (order != '<' && order != '>' && order != '|' && order != '=') return 0;
  if (strcmp(t, "u1") == 0) a->dtype = PB_UINT8;
  else if (strcmp(t, "u2") == 0) a->dtype = PB_UINT16;
  else if (strcmp(t, "u4") == 0) a->dtype = PB_UINT32;
  else if (strcmp(t, "i2") == 0) a->dtype = PB_INT16;
  else if (strcmp(t, "f4") == 0) a->dtype = PB_FLOAT32;
  else if (strcmp(t, "f8") == 0) a->dtype = PB_FLOAT64;
  else return 0;
  a->esize = pb_dtype_size(a->dtype);
  if (order == '|' && a->esize != 1) return 0;
  a->pipe.big_endian = order == '>';
  return 1;
}

/* A numpy type string such as "<c16": valid Zarr, so unsupported rather than malformed. */
static int v2_dtype_wellformed(const char *s) {
  if (strchr("<>|=", s[0]) == NULL || s[0] == '\0' || !isalpha((unsigned char)s[1])) return 0;
  if (!isdigit((unsigned char)s[2])) return 0;
  for (const char *p = s + 2; *p; p++)
    if (!isdigit((unsigned char)*p)) return 0;
  return 1;
}

static int v3_dtype_known(const char *s) {
  static const char *const names[] = {"bool",   "int8",    "int32",     "int64",     "uint64",
                                      "float16", "complex64", "complex128", "bfloat16"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(s, names[i]) == 0) return 1;
  return 0;
}

static int set_fill_number(pb__zarr_array *a, double d) {
  unsigned char *f = a->fill;
  int integral = d == floor(d);
  switch (a->dtype) {
  case PB_UINT8: {
    if (!integral || d < 0 || d > 255) return 0;
    uint8_t v = (uint8_t)d;
    memcpy(f, &v, 1);
    break;
  }
  case PB_UINT16: {
    if (!integral || d < 0 || d > 65535) return 0;
    uint16_t v = (uint16_t)d;
    memcpy(f, &v, 2);
    break;
  }
  case PB_UINT32: {
    if (!integral || d < 0 || d > 4294967295.0) return 0;
    uint32_t v = (uint32_t)d;
    memcpy(f, &v, 4);
    break;
  }
  case PB_INT16: {
    if (!integral || d < -32768 || d > 32767) return 0;
    int16_t v = (int16_t)d;
    memcpy(f, &v, 2);
    break;
  }
  case PB_FLOAT32: {
    float v = (float)d;
    memcpy(f, &v, 4);
    break;
  }
  case PB_FLOAT64: memcpy(f, &d, 8); break;
  default: return 0;
  }
  return 1;
}

static int parse_fill(const cJSON *fv, pb__zarr_array *a, const char *label, struct pb_error *err) {
  memset(a->fill, 0, sizeof a->fill);
  int is_float = a->dtype == PB_FLOAT32 || a->dtype == PB_FLOAT64;
  int ok = 1;
  if (fv == NULL || cJSON_IsNull(fv)) {
    ok = 1; /* no fill value: missing chunks read as zeros */
  } else if (cJSON_IsNumber(fv)) {
    ok = set_fill_number(a, fv->valuedouble);
  } else if (cJSON_IsString(fv) && is_float) {
    const char *s = fv->valuestring;
    if (strcmp(s, "NaN") == 0) ok = set_fill_number(a, NAN);
    else if (strcmp(s, "Infinity") == 0) ok = set_fill_number(a, INFINITY);
    else if (strcmp(s, "-Infinity") == 0) ok = set_fill_number(a, -INFINITY);
    else if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && strlen(s) == 2 + 2 * a->esize) {
      /* v3: the raw bits of the float, as hex */
      uint64_t bits = 0;
      for (const char *p = s + 2; *p; p++) {
        int c = tolower((unsigned char)*p), v;
        if (c >= '0' && c <= '9') v = c - '0';
        else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
        else return bad(err, PB_EFORMAT, label, "fill_value '%s' is not valid hex", s);
        bits = bits << 4 | (uint64_t)v;
      }
      if (a->esize == 4) {
        uint32_t b32 = (uint32_t)bits;
        memcpy(a->fill, &b32, 4);
      } else {
        memcpy(a->fill, &bits, 8);
      }
    } else {
      ok = 0;
    }
  } else {
    ok = 0;
  }
  if (!ok)
    return pb_error_set(err, PB_EFORMAT, "%s: fill_value does not fit dtype %s", label,
                        pb_dtype_name(a->dtype));
  a->fill_zero = 1;
  for (size_t i = 0; i < a->esize; i++)
    if (a->fill[i] != 0) a->fill_zero = 0;
  return PB_OK;
}

/* ---- compressors and codecs ---------------------------------------------------------------- */

static int blosc_cname_ok(const char *s) {
  static const char *const names[] = {"lz4", "lz4hc", "zstd", "blosclz", "zlib"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (s != NULL && strcmp(s, names[i]) == 0) return 1;
  return 0;
}

static int add_codec(pb__zarr_pipe *p, const pb__zarr_codec *c, const char *label,
                     struct pb_error *err) {
  if (p->n >= PB__ZARR_MAX_B2B)
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: more than %d bytes-to-bytes codecs", label,
                        PB__ZARR_MAX_B2B);
  p->c[p->n++] = *c;
  return PB_OK;
}

static int parse_v2_compressor(const cJSON *comp, pb__zarr_array *a, const char *label,
                               struct pb_error *err) {
  if (comp == NULL || cJSON_IsNull(comp)) return PB_OK;
  if (!cJSON_IsObject(comp)) return bad(err, PB_EFORMAT, label, "%s", "'compressor' is not an object");
  const char *id = json_str(comp, "id");
  if (id == NULL) return bad(err, PB_EFORMAT, label, "%s", "'compressor' has no string 'id'");
  pb__zarr_codec c;
  memset(&c, 0, sizeof c);
  if (strcmp(id, "blosc") == 0) {
    const char *cname;
    int blocksize;
    PB_RETURN_NOT_OK(opt_str(comp, "cname", &cname, label, err));
    if (cname != NULL && !blosc_cname_ok(cname))
      return bad(err, PB_EUNSUPPORTED, label, "blosc cname '%s' is not supported", cname);
    c.id = PB__ZC_BLOSC;
    snprintf(c.cname, sizeof c.cname, "%s", cname ? cname : "lz4");
    PB_RETURN_NOT_OK(opt_int(comp, "clevel", 0, 9, 0, &c.level, label, err));
    PB_RETURN_NOT_OK(opt_int(comp, "shuffle", -1, 2, 0, &c.shuffle, label, err));
    PB_RETURN_NOT_OK(opt_int(comp, "blocksize", 0, INT32_MAX, 0, &blocksize, label, err));
  } else if (strcmp(id, "zstd") == 0) {
    c.id = PB__ZC_ZSTD;
    PB_RETURN_NOT_OK(opt_int(comp, "level", -131072, 22, 0, &c.level, label, err));
  } else if (strcmp(id, "gzip") == 0) {
    c.id = PB__ZC_GZIP;
    PB_RETURN_NOT_OK(opt_int(comp, "level", 0, 9, 0, &c.level, label, err));
  } else if (strcmp(id, "zlib") == 0) {
    c.id = PB__ZC_ZLIB;
    PB_RETURN_NOT_OK(opt_int(comp, "level", 0, 9, 0, &c.level, label, err));
  } else {
    return bad(err, PB_EUNSUPPORTED, label,
               "compressor '%s' is not supported (pipebench reads blosc, zstd, gzip, zlib)", id);
  }
  return add_codec(&a->pipe, &c, label, err);
}

static int parse_bytes_cfg(const cJSON *cfg, int *big, const char *label, struct pb_error *err) {
  const char *e;
  *big = 0;
  PB_RETURN_NOT_OK(opt_str(cfg, "endian", &e, label, err));
  if (e == NULL || strcmp(e, "little") == 0) return PB_OK;
  if (strcmp(e, "big") == 0) {
    *big = 1;
    return PB_OK;
  }
  return bad(err, PB_EFORMAT, label, "bytes codec endian '%s' is neither little nor big", e);
}

static int parse_sharding(const cJSON *cfg, pb__zarr_array *a, const char *label,
                          struct pb_error *err);

/* v3 codec list: array->array codecs, one array->bytes codec, then bytes->bytes codecs. */
static int parse_v3_codecs(const cJSON *list, pb__zarr_array *a, pb__zarr_pipe *pipe, int top,
                           const char *label, struct pb_error *err) {
  if (!cJSON_IsArray(list)) return bad(err, PB_EFORMAT, label, "%s", "'codecs' is missing or not a list");
  int phase = 0; /* 0: before array->bytes, 1: after */
  const cJSON *it;
  cJSON_ArrayForEach(it, list) {
    const char *name = cJSON_IsString(it) ? it->valuestring : json_str(it, "name");
    if (name == NULL) return bad(err, PB_EFORMAT, label, "%s", "a codec has no string 'name'");
    const cJSON *cfg = NULL;
    if (cJSON_IsObject(it)) PB_RETURN_NOT_OK(opt_obj(it, "configuration", &cfg, label, err));
    else if (!cJSON_IsString(it))
      return bad(err, PB_EFORMAT, label, "%s", "a codec is neither an object nor a name");
    pb__zarr_codec c;
    memset(&c, 0, sizeof c);
    if (strcmp(name, "transpose") == 0) {
      if (phase != 0) return bad(err, PB_EFORMAT, label, "%s", "transpose after the bytes codec");
      const cJSON *order = cJSON_GetObjectItemCaseSensitive(cfg, "order");
      if (cJSON_IsString(order) && strcmp(order->valuestring, "C") == 0) continue;
      if (!cJSON_IsArray(order))
        return bad(err, PB_EFORMAT, label, "%s", "transpose has no 'order' list");
      int64_t k = 0, v;
      const cJSON *o;
      cJSON_ArrayForEach(o, order) {
        if (!json_uint(o, 64, &v) || v != k)
          return bad(err, PB_EUNSUPPORTED, label, "%s",
                     "transpose with a non-identity order is not supported (C order only)");
        k++;
      }
      continue;
    }
    if (strcmp(name, "bytes") == 0 || strcmp(name, "endian") == 0) {
      if (phase != 0) return bad(err, PB_EFORMAT, label, "%s", "two array-to-bytes codecs");
      PB_RETURN_NOT_OK(parse_bytes_cfg(cfg, &pipe->big_endian, label, err));
      phase = 1;
      continue;
    }
    if (strcmp(name, "sharding_indexed") == 0) {
      if (!top)
        return bad(err, PB_EUNSUPPORTED, label, "%s", "nested sharding_indexed is not supported");
      if (phase != 0) return bad(err, PB_EFORMAT, label, "%s", "two array-to-bytes codecs");
      PB_RETURN_NOT_OK(parse_sharding(cfg, a, label, err));
      phase = 1;
      continue;
    }
    if (phase != 1)
      return bad(err, PB_EFORMAT, label, "codec '%s' comes before the array-to-bytes codec", name);
    if (top && a->sharded)
      return bad(err, PB_EUNSUPPORTED, label,
                 "codec '%s' after sharding_indexed is not supported (it defeats partial reads)",
                 name);
    if (strcmp(name, "blosc") == 0) {
      const char *cname, *sh;
      int n;
      PB_RETURN_NOT_OK(opt_str(cfg, "cname", &cname, label, err));
      if (cname != NULL && !blosc_cname_ok(cname))
        return bad(err, PB_EUNSUPPORTED, label, "blosc cname '%s' is not supported", cname);
      c.id = PB__ZC_BLOSC;
      snprintf(c.cname, sizeof c.cname, "%s", cname ? cname : "lz4");
      PB_RETURN_NOT_OK(opt_int(cfg, "clevel", 0, 9, 0, &c.level, label, err));
      PB_RETURN_NOT_OK(opt_int(cfg, "typesize", 1, 255, 1, &n, label, err));
      PB_RETURN_NOT_OK(opt_int(cfg, "blocksize", 0, INT32_MAX, 0, &n, label, err));
      PB_RETURN_NOT_OK(opt_str(cfg, "shuffle", &sh, label, err));
      if (sh == NULL || strcmp(sh, "noshuffle") == 0) c.shuffle = 0;
      else if (strcmp(sh, "shuffle") == 0) c.shuffle = 1;
      else if (strcmp(sh, "bitshuffle") == 0) c.shuffle = 2;
      else
        return bad(err, PB_EFORMAT, label,
                   "blosc 'shuffle' '%s' is not noshuffle, shuffle or bitshuffle", sh);
    } else if (strcmp(name, "zstd") == 0) {
      c.id = PB__ZC_ZSTD;
      PB_RETURN_NOT_OK(opt_int(cfg, "level", -131072, 22, 0, &c.level, label, err));
    } else if (strcmp(name, "gzip") == 0) {
      c.id = PB__ZC_GZIP;
      PB_RETURN_NOT_OK(opt_int(cfg, "level", 0, 9, 0, &c.level, label, err));
    } else if (strcmp(name, "crc32c") == 0) {
      c.id = PB__ZC_CRC32C;
    } else {
      return bad(err, PB_EUNSUPPORTED, label,
                 "codec '%s' is not supported (pipebench reads bytes, transpose (identity), "
                 "blosc, zstd, gzip, crc32c, sharding_indexed)",
                 name);
    }
    PB_RETURN_NOT_OK(add_codec(pipe, &c, label, err));
  }
  if (phase != 1)
    return bad(err, PB_EFORMAT, label, "%s",
               "no array-to-bytes codec ('bytes' or 'sharding_indexed') in 'codecs'");
  return PB_OK;
}

static int parse_sharding(const cJSON *cfg, pb__zarr_array *a, const char *label,
                          struct pb_error *err) {
  if (!cJSON_IsObject(cfg))
    return bad(err, PB_EFORMAT, label, "%s", "sharding_indexed has no 'configuration'");
  PB_RETURN_NOT_OK(int_list(cJSON_GetObjectItemCaseSensitive(cfg, "chunk_shape"), a->ndim,
                            a->finner, NULL, label, "chunk_shape", err));
  int64_t n_inner = 1;
  for (int d = 0; d < a->ndim; d++) {
    if (a->fchunk[d] % a->finner[d] != 0)
      return bad(err, PB_EFORMAT, label, "%s",
                 "sharding chunk_shape does not divide the shard shape");
    int64_t per = a->fchunk[d] / a->finner[d];
    if (per > ((int64_t)1 << 24) / n_inner)
      return bad(err, PB_EUNSUPPORTED, label, "%s", "more than 2^24 chunks in one shard");
    n_inner *= per;
  }
  a->sharded = 1;
  PB_RETURN_NOT_OK(parse_v3_codecs(cJSON_GetObjectItemCaseSensitive(cfg, "codecs"), a, &a->pipe,
                                   0, label, err));
  pb__zarr_pipe ip;
  memset(&ip, 0, sizeof ip);
  const cJSON *ic = cJSON_GetObjectItemCaseSensitive(cfg, "index_codecs");
  if (ic == NULL) {
    ip.n = 0; /* the spec requires index_codecs; without them, assume bytes (little) */
  } else {
    PB_RETURN_NOT_OK(parse_v3_codecs(ic, a, &ip, 0, label, err));
  }
  if (ip.n > 1 || (ip.n == 1 && ip.c[0].id != PB__ZC_CRC32C))
    return bad(err, PB_EUNSUPPORTED, label, "%s",
               "shard index codecs other than bytes and crc32c are not supported");
  a->index_crc = ip.n == 1;
  a->index_big_endian = ip.big_endian;
  const char *loc;
  PB_RETURN_NOT_OK(opt_str(cfg, "index_location", &loc, label, err));
  if (loc == NULL || strcmp(loc, "end") == 0) a->index_at_end = 1;
  else if (strcmp(loc, "start") == 0) a->index_at_end = 0;
  else return bad(err, PB_EFORMAT, label, "index_location '%s' is neither start nor end", loc);
  return PB_OK;
}

/* ---- arrays -------------------------------------------------------------------------------- */

/* Products are checked by division so that hostile sizes cannot overflow. */
static int check_sizes(pb__zarr_array *a, const char *label, struct pb_error *err) {
  int64_t bytes = (int64_t)a->esize, image = (int64_t)a->esize;
  const int64_t *unit = a->sharded ? a->finner : a->fchunk;
  for (int d = 0; d < a->ndim; d++) {
    if (unit[d] > PB__ZARR_MAX_CHUNK_BYTES / bytes)
      return bad(err, PB_EUNSUPPORTED, label, "%s", "a chunk holds more than 4 GiB");
    bytes *= unit[d];
    if (a->fshape[d] > PB__ZARR_MAX_IMAGE_BYTES / image)
      return bad(err, PB_EUNSUPPORTED, label, "%s", "the image holds more than 2^48 bytes");
    image *= a->fshape[d];
    /* a shard larger than 2^48 bytes would overflow offsets; refuse it too */
    if (a->fchunk[d] > PB__ZARR_MAX_IMAGE_BYTES)
      return bad(err, PB_EUNSUPPORTED, label, "%s", "a chunk dimension is too large");
  }
  return PB_OK;
}

static int parse_v2_array(const cJSON *root, pb__zarr_array *a, const char *label,
                          struct pb_error *err) {
  int64_t v;
  if (!json_uint(cJSON_GetObjectItemCaseSensitive(root, "zarr_format"), 10, &v) || v != 2)
    return bad(err, PB_EFORMAT, label, "%s", "'zarr_format' is not 2");
  PB_RETURN_NOT_OK(int_list(cJSON_GetObjectItemCaseSensitive(root, "shape"), -1, a->fshape,
                            &a->ndim, label, "shape", err));
  PB_RETURN_NOT_OK(int_list(cJSON_GetObjectItemCaseSensitive(root, "chunks"), a->ndim, a->fchunk,
                            NULL, label, "chunks", err));
  const char *dt = json_str(root, "dtype");
  if (dt == NULL) return bad(err, PB_EFORMAT, label, "%s", "'dtype' is missing or not a string");
  if (!parse_v2_dtype(dt, a))
    return bad(err, v2_dtype_wellformed(dt) ? PB_EUNSUPPORTED : PB_EFORMAT, label,
               "dtype '%s' is not supported (u1, u2, u4, i2, f4, f8 in either byte order)", dt);
  const char *order;
  PB_RETURN_NOT_OK(opt_str(root, "order", &order, label, err));
  if (order != NULL && strcmp(order, "F") == 0)
    return bad(err, PB_EUNSUPPORTED, label, "order '%s' is not supported (C order only)", order);
  if (order != NULL && strcmp(order, "C") != 0)
    return bad(err, PB_EFORMAT, label, "order '%s' is neither \"C\" nor \"F\"", order);
  const cJSON *filters = cJSON_GetObjectItemCaseSensitive(root, "filters");
  if (filters != NULL && !cJSON_IsNull(filters)) {
    if (!cJSON_IsArray(filters)) return bad(err, PB_EFORMAT, label, "%s", "'filters' is not a list");
    if (cJSON_GetArraySize(filters) > 0) {
      const cJSON *f0 = cJSON_GetArrayItem(filters, 0);
      const char *id = json_str(f0, "id");
      if (!cJSON_IsObject(f0) || id == NULL)
        return bad(err, PB_EFORMAT, label, "%s", "a filter in 'filters' has no string 'id'");
      return bad(err, PB_EUNSUPPORTED, label, "filter '%s' is not supported (no filters are)",
                 id ? id : "?");
    }
  }
  if (!cJSON_HasObjectItem(root, "compressor"))
    return bad(err, PB_EFORMAT, label, "%s", "'compressor' is missing");
  PB_RETURN_NOT_OK(parse_v2_compressor(cJSON_GetObjectItemCaseSensitive(root, "compressor"), a,
                                       label, err));
  PB_RETURN_NOT_OK(parse_fill(cJSON_GetObjectItemCaseSensitive(root, "fill_value"), a, label, err));
  /* optional; when present, "." or "/" (a null is read as absent, as zarr-python does) */
  const cJSON *dsep = cJSON_GetObjectItemCaseSensitive(root, "dimension_separator");
  if (dsep != NULL && !cJSON_IsNull(dsep) && !cJSON_IsString(dsep))
    return bad(err, PB_EFORMAT, label, "%s",
               "'dimension_separator' is not a string (it must be \".\" or \"/\")");
  const char *sep = json_str(root, "dimension_separator");
  a->sep = '.';
  if (sep != NULL) {
    if (strcmp(sep, "/") == 0) a->sep = '/';
    else if (strcmp(sep, ".") != 0)
      return bad(err, PB_EFORMAT, label, "dimension_separator '%s' is neither '.' nor '/'", sep);
  }
  return check_sizes(a, label, err);
}

static int parse_v3_array(const cJSON *root, pb__zarr_array *a, const char *label,
                          struct pb_error *err) {
  int64_t v;
  if (!json_uint(cJSON_GetObjectItemCaseSensitive(root, "zarr_format"), 10, &v) || v != 3)
    return bad(err, PB_EFORMAT, label, "%s", "'zarr_format' is not 3");
  const char *nt = json_str(root, "node_type");
  if (nt == NULL || strcmp(nt, "array") != 0)
    return bad(err, PB_EFORMAT, label, "%s", "'node_type' is not \"array\"");
  PB_RETURN_NOT_OK(int_list(cJSON_GetObjectItemCaseSensitive(root, "shape"), -1, a->fshape,
                            &a->ndim, label, "shape", err));
  const char *dt = json_str(root, "data_type");
  if (dt == NULL) return bad(err, PB_EFORMAT, label, "%s", "'data_type' is missing or not a string");
  if (pb_dtype_parse(dt, &a->dtype) != PB_OK || strcmp(dt, "float") == 0 ||
      strcmp(dt, "double") == 0)
    return bad(err, v3_dtype_known(dt) ? PB_EUNSUPPORTED : PB_EFORMAT, label,
               "data_type '%s' is not supported (uint8, uint16, uint32, int16, float32, float64)",
               dt);
  a->esize = pb_dtype_size(a->dtype);
  const cJSON *grid = cJSON_GetObjectItemCaseSensitive(root, "chunk_grid");
  const char *gname = json_str(grid, "name");
  const cJSON *gcfg = NULL;
  if (gname != NULL) PB_RETURN_NOT_OK(opt_obj(grid, "configuration", &gcfg, label, err));
  if (gname == NULL) return bad(err, PB_EFORMAT, label, "%s", "'chunk_grid' is missing or has no name");
  if (strcmp(gname, "regular") != 0)
    return bad(err, PB_EUNSUPPORTED, label, "%s", "'chunk_grid' is not a regular grid");
  PB_RETURN_NOT_OK(int_list(cJSON_GetObjectItemCaseSensitive(
                                cJSON_GetObjectItemCaseSensitive(grid, "configuration"), "chunk_shape"),
                            a->ndim, a->fchunk, NULL, label, "chunk_shape", err));
  const cJSON *kenc = cJSON_GetObjectItemCaseSensitive(root, "chunk_key_encoding"), *kcfg = NULL;
  if (kenc != NULL && !cJSON_IsObject(kenc))
    return bad(err, PB_EFORMAT, label, "%s", "'chunk_key_encoding' is not an object");
  const char *kname = kenc ? json_str(kenc, "name") : "default", *ksep;
  if (kname == NULL) return bad(err, PB_EFORMAT, label, "%s", "'chunk_key_encoding' has no name");
  PB_RETURN_NOT_OK(opt_obj(kenc, "configuration", &kcfg, label, err));
  PB_RETURN_NOT_OK(opt_str(kcfg, "separator", &ksep, label, err));
  if (strcmp(kname, "default") == 0) {
    a->key_prefix_c = 1;
    a->sep = '/';
  } else if (strcmp(kname, "v2") == 0) {
    a->key_prefix_c = 0;
    a->sep = '.';
  } else {
    return bad(err, PB_EUNSUPPORTED, label, "chunk_key_encoding '%s' is not supported", kname);
  }
  if (ksep != NULL) {
    if (strcmp(ksep, "/") == 0) a->sep = '/';
    else if (strcmp(ksep, ".") == 0) a->sep = '.';
    else return bad(err, PB_EFORMAT, label, "chunk key separator '%s' is neither '.' nor '/'", ksep);
  }
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "storage_transformers");
  if (st != NULL && !cJSON_IsArray(st))
    return bad(err, PB_EFORMAT, label, "%s", "'storage_transformers' is not a list");
  if (cJSON_IsArray(st) && cJSON_GetArraySize(st) > 0)
    return bad(err, PB_EUNSUPPORTED, label, "%s", "storage_transformers are not supported");
  const cJSON *fv = cJSON_GetObjectItemCaseSensitive(root, "fill_value");
  if (fv == NULL) return bad(err, PB_EFORMAT, label, "%s", "'fill_value' is missing");
  PB_RETURN_NOT_OK(parse_fill(fv, a, label, err));
  const cJSON *names = cJSON_GetObjectItemCaseSensitive(root, "dimension_names"), *nm;
  if (names != NULL && !cJSON_IsNull(names)) {
    if (!cJSON_IsArray(names) || cJSON_GetArraySize(names) != a->ndim)
      return bad(err, PB_EFORMAT, label, "'dimension_names' is not a list of %d names", a->ndim);
    cJSON_ArrayForEach(nm, names) {
      if (!cJSON_IsString(nm) && !cJSON_IsNull(nm))
        return bad(err, PB_EFORMAT, label, "%s", "'dimension_names' holds a non-string");
    }
  }
  const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(root, "attributes");
  if (attrs != NULL && !cJSON_IsObject(attrs))
    return bad(err, PB_EFORMAT, label, "%s", "'attributes' is not an object");
  if (cJSON_IsArray(names) && cJSON_GetArraySize(names) == a->ndim) {
    int d = 0;
    a->has_dim_names = 1;
    cJSON_ArrayForEach(nm, names) {
      char c = 0;
      if (cJSON_IsString(nm) && strlen(nm->valuestring) == 1)
        c = (char)tolower((unsigned char)nm->valuestring[0]);
      if (strchr("tczyx", c) == NULL || c == 0) a->has_dim_names = 0;
      a->dim_names[d++] = c;
    }
  }
  PB_RETURN_NOT_OK(parse_v3_codecs(cJSON_GetObjectItemCaseSensitive(root, "codecs"), a, &a->pipe,
                                   1, label, err));
  return check_sizes(a, label, err);
}

/* n + n/16 + 4 KiB, saturating: more than any codec here (blosc, zstd, deflate, crc32c) adds
 * to n bytes in its worst case. */
static int64_t codec_bound(int64_t n) {
  int64_t m = n / 16 + 4096;
  return n > INT64_MAX - m ? INT64_MAX : n + m;
}

/* The grid's file count (INT64_MAX when past 2^63), and the largest stored unit a chunk (or
 * shard) of this array can need: its decoded bytes through each codec's worst case, plus 64 KiB
 * for headers other writers add (a shard: that for each inner chunk, plus its index). */
static void grid_bounds(pb__zarr_array *a) {
  int64_t count = 1, per_shard = 1, inner = (int64_t)a->esize;
  for (int d = 0; d < a->ndim; d++) {
    int64_t g = a->fshape[d] / a->fchunk[d] + (a->fshape[d] % a->fchunk[d] != 0);
    if (count != INT64_MAX && !pb__mul_i64_ok(count, g, &count)) count = INT64_MAX;
    per_shard *= a->fchunk[d] / a->finner[d]; /* at most 2^24, checked with the sharding */
    inner *= a->finner[d];                    /* at most 4 GiB, checked above */
  }
  a->grid_chunks = count;
  int64_t unit = inner;
  for (int k = 0; k < a->pipe.n; k++) unit = codec_bound(unit);
  unit = unit > INT64_MAX - 65536 ? INT64_MAX : unit + 65536;
  int64_t shard = unit;
  if (a->sharded && (!pb__mul_i64_ok(unit, per_shard, &shard) ||
                     !pb__add_i64_ok(shard, 16 * per_shard + 4, &shard)))
    shard = INT64_MAX;
  a->max_stored = shard;
}

int pb__zarr_check_grid(const pb__zarr_array *a, const char *label, struct pb_error *err) {
  if (a->grid_chunks <= PB__ZARR_MAX_GRID_CHUNKS) return PB_OK;
  char shape[160], grid[48];
  size_t len = 0;
  for (int d = 0; d < a->ndim && len < sizeof shape; d++)
    len += (size_t)snprintf(shape + len, sizeof shape - len, "%s%lld/%lld", d ? ", " : "",
                            (long long)a->fshape[d], (long long)a->fchunk[d]);
  if (a->grid_chunks == INT64_MAX) snprintf(grid, sizeof grid, "more than 2^63");
  else snprintf(grid, sizeof grid, "%lld", (long long)a->grid_chunks);
  return bad(err, PB_EUNSUPPORTED, label,
             "%s %s in the grid (shape/chunk [%s]), more than the %lld pipebench reads "
             "(docs/format-ome-zarr.md)",
             grid, a->sharded ? "shards" : "chunks", shape, (long long)PB__ZARR_MAX_GRID_CHUNKS);
}

int pb__zarr_parse_array(const char *json, size_t n, int version, const char *label,
                         pb__zarr_array *out, struct pb_error *err) {
  memset(out, 0, sizeof *out);
  out->version = version;
  cJSON *root = NULL;
  PB_RETURN_NOT_OK(pb__json_parse(json, n, label, &root, err));
  int rc;
  if (!cJSON_IsObject(root)) rc = bad(err, PB_EFORMAT, label, "%s", "not a JSON object");
  else if (version == 2) rc = parse_v2_array(root, out, label, err);
  else rc = parse_v3_array(root, out, label, err);
  cJSON_Delete(root);
  if (rc == PB_OK && !out->sharded)
    for (int d = 0; d < out->ndim; d++) out->finner[d] = out->fchunk[d];
  if (rc == PB_OK) grid_bounds(out);
  return rc;
}

/* ---- OME attributes ------------------------------------------------------------------------ */

static const char *const unit_map[][2] = {
    {"micrometer", "µm"}, {"nanometer", "nm"}, {"millimeter", "mm"}, {"centimeter", "cm"},
    {"meter", "m"},       {"angstrom", "Å"},   {"picometer", "pm"},  {"second", "s"},
    {"millisecond", "ms"}};

static void unit_from_ngff(const char *ngff, char *out, size_t size) {
  for (size_t i = 0; i < sizeof unit_map / sizeof unit_map[0]; i++)
    if (strcmp(ngff, unit_map[i][0]) == 0) {
      snprintf(out, size, "%s", unit_map[i][1]);
      return;
    }
  snprintf(out, size, "%s", ngff);
}

static int axis_letter(const cJSON *ax, char *out) {
  const char *name = cJSON_IsString(ax) ? ax->valuestring : json_str(ax, "name");
  const char *type = cJSON_IsObject(ax) ? json_str(ax, "type") : NULL;
  if (name != NULL && strlen(name) == 1 && strchr("tczyxTCZYX", name[0]) != NULL) {
    *out = (char)tolower((unsigned char)name[0]);
    return 1;
  }
  if (type != NULL && strcmp(type, "time") == 0) *out = 't';
  else if (type != NULL && strcmp(type, "channel") == 0) *out = 'c';
  else return 0;
  return 1;
}

/* A list of n finite numbers (positive ones when positive is set). */
static int number_list(const cJSON *list, int n, int positive) {
  if (!cJSON_IsArray(list) || (n > 0 && cJSON_GetArraySize(list) != n)) return 0;
  const cJSON *v;
  cJSON_ArrayForEach(v, list) {
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || (positive && !(v->valuedouble > 0)))
      return 0;
  }
  return 1;
}

/* Checks a coordinateTransformations list (NGFF 0.4/0.5: "scale" with a list of positive
 * numbers, one per axis (o->naxes; any length when 0), optionally "translation"; "identity"
 * allowed) and multiplies its scales into o->scale. where: for messages. */
static int apply_scale(const cJSON *transforms, pb__zarr_ome *o, const char *where,
                       const char *label, struct pb_error *err) {
  if (transforms == NULL) return PB_OK;
  if (!cJSON_IsArray(transforms))
    return bad(err, PB_EFORMAT, label, "%s 'coordinateTransformations' is not a list", where);
  int naxes = o->naxes;
  const cJSON *t;
  cJSON_ArrayForEach(t, transforms) {
    const char *type = json_str(t, "type");
    if (type == NULL)
      return bad(err, PB_EFORMAT, label, "%s 'coordinateTransformations' entry has no string "
                 "'type'", where);
    if (strcmp(type, "identity") == 0) continue;
    if (strcmp(type, "scale") != 0 && strcmp(type, "translation") != 0)
      return bad(err, PB_EFORMAT, label, "%s coordinate transformation type '%s' is not "
                 "scale, translation or identity", where, type);
    int is_scale = type[0] == 's';
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, type);
    if (v == NULL && cJSON_HasObjectItem(t, "path"))
      return bad(err, PB_EUNSUPPORTED, label, "%s %s stored in a file ('path') is not "
                 "supported", where, type);
    if (!number_list(v, naxes, is_scale))
      return bad(err, PB_EFORMAT, label, "%s '%s' is not a list of %s%s numbers%s", where, type,
                 is_scale ? "positive " : "", "finite", naxes > 0 ? " (one per axis)" : "");
    if (!is_scale || naxes == 0) continue;
    int d = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, v) {
      if (d < PB_NDIM) o->scale[d] *= s->valuedouble;
      d++;
    }
  }
  return PB_OK;
}

static void parse_channels(const cJSON *omero, pb__zarr_ome *o) {
  const cJSON *chs = cJSON_GetObjectItemCaseSensitive(omero, "channels");
  const cJSON *ch;
  cJSON_ArrayForEach(ch, chs) {
    if (o->n_channels >= PB_MAX_CHANNELS) break;
    pb_channel *c = &o->channels[o->n_channels++];
    memset(c, 0, sizeof *c);
    const char *label = json_str(ch, "label");
    if (label != NULL) snprintf(c->name, sizeof c->name, "%s", label);
    const char *color = json_str(ch, "color");
    if (color != NULL && strlen(color) == 6) {
      char *end;
      unsigned long rgb = strtoul(color, &end, 16);
      if (*end == '\0') c->color_rgba = (uint32_t)(rgb << 8 | 0xFFu);
    }
  }
}

int pb__zarr_parse_ome(const char *json, size_t n, int version, const char *label,
                       pb__zarr_ome *out, struct pb_error *err) {
  memset(out, 0, sizeof *out);
  for (int d = 0; d < PB_NDIM; d++) out->scale[d] = 1.0;
  cJSON *root = NULL;
  PB_RETURN_NOT_OK(pb__json_parse(json, n, label, &root, err));
  int rc = PB_OK;
  const cJSON *attrs = root, *ome = NULL;
  if (!cJSON_IsObject(root)) {
    rc = bad(err, PB_EFORMAT, label, "%s", "not a JSON object");
    goto done;
  }
  if (version == 3) {
    attrs = cJSON_GetObjectItemCaseSensitive(root, "attributes");
    ome = cJSON_GetObjectItemCaseSensitive(attrs, "ome");
  }
  const cJSON *holder = cJSON_HasObjectItem(ome, "multiscales") ? ome : attrs;
  const cJSON *msl = cJSON_GetObjectItemCaseSensitive(holder, "multiscales");
  if (msl != NULL && !cJSON_IsArray(msl)) {
    rc = bad(err, PB_EFORMAT, label, "%s", "'multiscales' is not a list");
    goto done;
  }
  const cJSON *ms = cJSON_GetArrayItem(msl, 0), *ver;
  if (!cJSON_IsObject(ms)) {
    rc = bad(err, PB_EFORMAT, label, "%s", "no OME 'multiscales' (not an OME-Zarr image group)");
    goto done;
  }
  ver = cJSON_GetObjectItemCaseSensitive(version == 3 ? ome : ms, "version");
  if (ver != NULL && !cJSON_IsString(ver)) {
    rc = bad(err, PB_EFORMAT, label, "%s", "the NGFF 'version' is not a string");
    goto done;
  }
  const cJSON *axes = cJSON_GetObjectItemCaseSensitive(ms, "axes");
  if (axes != NULL) {
    if (!cJSON_IsArray(axes) || cJSON_GetArraySize(axes) < 1 || cJSON_GetArraySize(axes) > PB_NDIM) {
      rc = bad(err, PB_EUNSUPPORTED, label, "%s", "'axes' must list 1 to 5 axes");
      goto done;
    }
    const cJSON *ax;
    cJSON_ArrayForEach(ax, axes) {
      int d = out->naxes++;
      const cJSON *f;
      if (cJSON_IsObject(ax) && (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(ax, "name")) ||
                                 ((f = cJSON_GetObjectItemCaseSensitive(ax, "type")) != NULL &&
                                  !cJSON_IsString(f)) ||
                                 ((f = cJSON_GetObjectItemCaseSensitive(ax, "unit")) != NULL &&
                                  !cJSON_IsString(f)))) {
        rc = bad(err, PB_EFORMAT, label, "axis %d: 'name' is not a string, or 'type' or 'unit' "
                 "is not one", d);
        goto done;
      }
      if (!cJSON_IsObject(ax) && !cJSON_IsString(ax)) {
        rc = bad(err, PB_EFORMAT, label, "axis %d is neither an object nor a name", d);
        goto done;
      }
      if (!axis_letter(ax, &out->axes[d])) {
        rc = bad(err, PB_EUNSUPPORTED, label, "%s",
                 "an axis is not one of t, c, z, y, x (or of type time/channel)");
        goto done;
      }
      const char *unit = cJSON_IsObject(ax) ? json_str(ax, "unit") : NULL;
      if (unit != NULL) unit_from_ngff(unit, out->unit[d], sizeof out->unit[d]);
    }
  }
  const cJSON *dsl = cJSON_GetObjectItemCaseSensitive(ms, "datasets"), *dk;
  if (!cJSON_IsArray(dsl) || cJSON_GetArraySize(dsl) < 1) {
    rc = bad(err, PB_EFORMAT, label, "%s", "multiscales 'datasets' is missing or not a list");
    goto done;
  }
  cJSON_ArrayForEach(dk, dsl) {
    const cJSON *pk = cJSON_GetObjectItemCaseSensitive(dk, "path");
    if (!cJSON_IsObject(dk) || !cJSON_IsString(pk)) {
      rc = bad(err, PB_EFORMAT, label, "%s", "a multiscales dataset has no string 'path'");
      goto done;
    }
    pb__zarr_ome probe = {.naxes = out->naxes};
    rc = apply_scale(cJSON_GetObjectItemCaseSensitive(dk, "coordinateTransformations"), &probe,
                     "dataset", label, err);
    if (rc != PB_OK) goto done;
  }
  const cJSON *ds = cJSON_GetArrayItem(dsl, 0);
  const char *path = json_str(ds, "path");
  if (path == NULL || path[0] == '\0' || strstr(path, "..") != NULL || path[0] == '/' ||
      strlen(path) >= sizeof out->path) {
    rc = bad(err, PB_EFORMAT, label, "%s", "multiscales 'datasets' has no usable first 'path'");
    goto done;
  }
  snprintf(out->path, sizeof out->path, "%s", path);
  rc = apply_scale(cJSON_GetObjectItemCaseSensitive(ds, "coordinateTransformations"), out,
                   "dataset", label, err);
  if (rc == PB_OK)
    rc = apply_scale(cJSON_GetObjectItemCaseSensitive(ms, "coordinateTransformations"), out,
                     "multiscales", label, err);
  if (rc != PB_OK) goto done;
  const cJSON *omero = cJSON_GetObjectItemCaseSensitive(ome, "omero");
  if (omero == NULL) omero = cJSON_GetObjectItemCaseSensitive(attrs, "omero");
  if (cJSON_IsObject(omero)) parse_channels(omero, out);
done:
  cJSON_Delete(root);
  return rc;
}

int pb__zarr_map_axes(pb__zarr_array *a, const pb__zarr_ome *ome, const char *label,
                      struct pb_error *err) {
  static const char letters[] = "tczyx";
  const char *names = NULL;
  int nnames = 0;
  if (ome != NULL && ome->naxes > 0) {
    names = ome->axes;
    nnames = ome->naxes;
  } else if (a->has_dim_names) {
    names = a->dim_names;
    nnames = a->ndim;
  }
  if (names != NULL) {
    if (nnames != a->ndim)
      return pb_error_set(err, PB_EFORMAT, "%s: multiscales names %d axes, the array has %d",
                          label, nnames, a->ndim);
    int prev = -1;
    for (int d = 0; d < a->ndim; d++) {
      const char *p = strchr(letters, names[d]);
      int ax = p != NULL && names[d] != 0 ? (int)(p - letters) : -1;
      if (ax <= prev)
        return pb_error_set(err, PB_EUNSUPPORTED,
                            "%s: axes are not a subset of t, c, z, y, x in that order", label);
      a->axis[d] = ax;
      prev = ax;
    }
  } else {
    for (int d = 0; d < a->ndim; d++) a->axis[d] = PB_NDIM - a->ndim + d;
  }
  for (int k = 0; k < PB_NDIM; k++) a->shape[k] = a->chunk[k] = a->inner[k] = 1;
  for (int d = 0; d < a->ndim; d++) {
    a->shape[a->axis[d]] = a->fshape[d];
    a->chunk[a->axis[d]] = a->fchunk[d];
    a->inner[a->axis[d]] = a->finner[d];
  }
  return PB_OK;
}
