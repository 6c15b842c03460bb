/* Loader parameters: defaults and the key=value option parser. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/format_internal.h"
#include "formats/raw/raw.h"
#include "loader/loader_impl.h"

/* ---- params --------------------------------------------------------------------------------- */

void pb_loader_params_init(pb_loader_params *params) {
  const pb_loader_params d = PB_LOADER_PARAMS_DEFAULTS;
  *params = d;
}

static int parse_int(const char *key, const char *v, long long lo, long long hi, long long *out,
                     struct pb_error *err) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi)
    return pb_error_set(err, PB_EINVAL, "loader option %s: '%s' is not an integer in [%lld, %lld]",
                        key, v, lo, hi);
  *out = x;
  return PB_OK;
}

/* Bytes: N, or N with a K, M or G suffix (powers of 1024), up to 1 TiB. */
static int parse_size(const char *key, const char *v, int64_t *out, struct pb_error *err) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  int shift = 0;
  if (end != v && (*end == 'K' || *end == 'k')) shift = 10;
  else if (end != v && (*end == 'M' || *end == 'm')) shift = 20;
  else if (end != v && (*end == 'G' || *end == 'g')) shift = 30;
  if (shift != 0) end++;
  if (errno != 0 || end == v || *end != '\0' || x < 0 || x > ((long long)1 << 40) >> shift)
    return pb_error_set(err, PB_EINVAL,
                        "loader option %s: '%s' (want bytes from 0 to 1T, or N with a K, M or G "
                        "suffix; 0: auto)", key, v);
  *out = (int64_t)(x << shift);
  return PB_OK;
}

int pb_loader_params_set(pb_loader_params *p, const char *key, const char *value,
                         struct pb_error *err) {
  if (p == NULL || key == NULL || value == NULL)
    return pb_error_set(err, PB_EINVAL, "pb_loader_params_set: NULL argument");
  long long x = 0;
  struct {
    const char *name;
    int *field;
    long long lo, hi;
  } ints[] = {{"batch_size", &p->batch_size, 1, 1 << 24}, {"workers", &p->workers, 0, 1024},
              {"prefetch", &p->prefetch, 1, 1024},       {"shuffle", &p->shuffle, 0, 1},
              {"drop_last", &p->drop_last, 0, 1},        {"rank", &p->rank, 0, 1 << 24},
              {"world_size", &p->world_size, 1, 1 << 24}, {"skip_errors", &p->skip_errors, 0, 1},
              {"shard_pad", &p->shard_pad, 0, 1},        {"resize", &p->resize, 1, 65536},
              {"flip", &p->flip, 0, 1},                  {"reduced_decode", &p->reduced_decode, 0, 1},
              {"reads_in_flight", &p->reads_in_flight, 0, 4096}};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    if (strcmp(key, ints[i].name) != 0) continue;
    PB_RETURN_NOT_OK(parse_int(key, value, ints[i].lo, ints[i].hi, &x, err));
    *ints[i].field = (int)x;
    return PB_OK;
  }
  if (strcmp(key, "bytes_in_flight") == 0) return parse_size(key, value, &p->bytes_in_flight, err);
  if (strcmp(key, "seed") == 0) {
    char *end;
    errno = 0;
    unsigned long long s = strtoull(value, &end, 0);
    if (errno != 0 || end == value || *end != '\0')
      return pb_error_set(err, PB_EINVAL, "loader option seed: '%s' is not an integer", value);
    p->seed = (uint64_t)s;
    return PB_OK;
  }
  if (strcmp(key, "mean") == 0 || strcmp(key, "std") == 0) {
    char *end;
    float f = strtof(value, &end);
    if (end == value || *end != '\0' || !isfinite(f) || (key[0] == 's' && !(f > 0.0f)))
      return pb_error_set(err, PB_EINVAL, "loader option %s: '%s' is not a valid number", key, value);
    if (key[0] == 'm') p->mean = f;
    else p->std = f;
    return PB_OK;
  }
  if (strcmp(key, "transform") == 0) {
    if (strcmp(value, "none") == 0) p->transform = PB_TRANSFORM_NONE;
    else if (strcmp(value, "normalize") == 0) p->transform = PB_TRANSFORM_NORMALIZE;
    else if (strcmp(value, "augment") == 0) p->transform = PB_TRANSFORM_AUGMENT;
    else if (strcmp(value, "random_crop") == 0) p->transform = PB_TRANSFORM_RANDOM_CROP;
    else if (strcmp(value, "random_resized_crop") == 0) p->transform = PB_TRANSFORM_RANDOM_RESIZED_CROP;
    else if (strcmp(value, "center_crop_resize") == 0) p->transform = PB_TRANSFORM_CENTER_CROP_RESIZE;
    else
      return pb_error_set(err, PB_EINVAL,
                          "loader option transform: '%s' (want none, normalize, augment, "
                          "random_crop, random_resized_crop or center_crop_resize)",
                          value);
    return PB_OK;
  }
  if (strcmp(key, "crop") == 0) {
    long long h = 0, w = 0;
    char *end;
    errno = 0;
    h = strtoll(value, &end, 10);
    if (end != value && *end == 'x') w = strtoll(end + 1, &end, 10);
    else w = h;
    if (errno != 0 || end == value || *end != '\0' || h < 1 || w < 1 || h > 65536 || w > 65536)
      return pb_error_set(err, PB_EINVAL,
                          "loader option crop: '%s' (want N or HxW, each from 1 to 65536)", value);
    p->crop_h = (int)h;
    p->crop_w = (int)w;
    return PB_OK;
  }
  if (strcmp(key, "scale") == 0 || strcmp(key, "ratio") == 0) {
    char *end, *end2 = NULL;
    float lo = strtof(value, &end), hi = *end == ',' ? strtof(end + 1, &end2) : NAN;
    if (end == value || end2 == NULL || end2 == end + 1 || *end2 != '\0' || !isfinite(lo) ||
        !isfinite(hi) || !(lo > 0.0f) || !(hi >= lo))
      return pb_error_set(err, PB_EINVAL, "loader option %s: '%s' (want MIN,MAX with 0 < MIN <= MAX)",
                          key, value);
    if (key[0] == 's') {
      p->scale_min = lo;
      p->scale_max = hi;
    } else {
      p->ratio_min = lo;
      p->ratio_max = hi;
    }
    return PB_OK;
  }
  if (strcmp(key, "dtype") == 0) {
    if (strcmp(value, "float32") == 0) p->out_dtype = PB_OUT_FLOAT32;
    else if (strcmp(value, "float16") == 0) p->out_dtype = PB_OUT_FLOAT16;
    else if (strcmp(value, "bfloat16") == 0) p->out_dtype = PB_OUT_BFLOAT16;
    else if (strcmp(value, "native") == 0) p->out_dtype = PB_OUT_NATIVE;
    else
      return pb_error_set(err, PB_EINVAL,
                          "loader option dtype: '%s' (want float32, float16, bfloat16 or native)",
                          value);
    return PB_OK;
  }
  if (strcmp(key, "cache") == 0) {
    if (strcmp(value, "none") == 0) p->cache = PB_CACHE_NONE;
    else if (strcmp(value, "preload") == 0) p->cache = PB_CACHE_PRELOAD;
    else if (strcmp(value, "shared") == 0) p->cache = PB_CACHE_SHARED;
    else
      return pb_error_set(err, PB_EINVAL,
                          "loader option cache: '%s' (want none, preload or shared)", value);
    return PB_OK;
  }
  return pb_error_set(err, PB_EINVAL, "unknown loader option '%s'", key);
}
