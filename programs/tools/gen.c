/* pipebench gen: the same seeded images in every format asked, plus a manifest. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipebench/sys.h"
#include "tools/inventory.h"
#include "pipebench/format.h"
#include "pipebench/gen.h"
#include "pipebench/results.h"
#include "tools/synth.h"

typedef struct path_rule {
  const char *format, *entry;
} path_rule;

/* Single-file formats get a file name with their extension; folder formats a folder. */
static const path_rule rules[] = {
    {"ome-parquet", "images.parquet"},
    {"duckdb", "images.duckdb"},
    {"raw", "images.pbraw"},
    {"lance", "images.lance"},
};

void pb_gen_format_path(const char *dir, const char *format, char *buf, size_t size) {
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
    if (strcmp(rules[i].format, format) == 0) {
      snprintf(buf, size, "%s/%s", dir, rules[i].entry);
      return;
    }
  }
  snprintf(buf, size, "%s/%s", dir, format);
}

#define MAX_FORMATS 16
/* A manifest larger than this is not one pipebench wrote (10^7 images take about 120 MB). */
#define MAX_MANIFEST_BYTES ((size_t)256 << 20)

static int parse_formats(const char *list, const char *names[MAX_FORMATS], int *n,
                         char *storage, size_t storage_size, struct pb_error *err) {
  *n = 0;
  if (list == NULL) {
    /* imagefolder only when named: JPEG is lossy (its pixels are not the manifest's) and it
     * holds 2-D grey or RGB images only. lance only when named: it needs Node and its engine. */
    for (int i = 0; i < pb_format_count() && *n < MAX_FORMATS; i++)
      if (pb_format_at(i)->can_write && strcmp(pb_format_at(i)->name, "imagefolder") != 0 &&
          strcmp(pb_format_at(i)->name, "lance") != 0)
        names[(*n)++] = pb_format_at(i)->name;
    if (*n == 0) return pb_error_set(err, PB_EUNSUPPORTED, "no writable format is registered");
    return PB_OK;
  }
  snprintf(storage, storage_size, "%s", list);
  char *save = NULL;
  for (char *tok = strtok_r(storage, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
    const pb_format_info *f = pb_format_find(tok);
    if (f == NULL || !f->can_write) {
      /* Let the format layer say what is wrong: the known formats, or why it has no writer. */
      pb_writer *w = NULL;
      int rc = pb_writer_new("/nonexistent", tok, NULL, &w, err);
      pb_writer_free(w);
      return rc != PB_OK ? rc : PB_EINVAL;
    }
    for (int k = 0; k < *n; k++)
      if (strcmp(names[k], tok) == 0) return pb_error_set(err, PB_EINVAL, "format '%s' given twice", tok);
    if (*n == MAX_FORMATS) return pb_error_set(err, PB_EINVAL, "too many formats");
    names[(*n)++] = f->name;
  }
  if (*n == 0) return pb_error_set(err, PB_EINVAL, "no format given");
  return PB_OK;
}

static cJSON *write_json(const pb_write_params *w, const char *options) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "compression", w->compression ? w->compression : "default");
  cJSON_AddNumberToObject(o, "level", w->level);
  cJSON *chunk = cJSON_AddArrayToObject(o, "chunk");
  for (int k = 0; k < PB_NDIM; k++) cJSON_AddItemToArray(chunk, cJSON_CreateNumber((double)w->chunk[k]));
  cJSON_AddStringToObject(o, "options", options ? options : "");
  return o;
}

/* The manifest already in dir, when pipebench wrote it (NULL otherwise, and when there is
 * none). A file there that is not pipebench's manifest is refused unless force: gen would
 * replace it. */
static int load_old_manifest(const char *dir, int force, cJSON **out, struct pb_error *err) {
  *out = NULL;
  char path[4096];
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  struct stat st;
  if (lstat(path, &st) != 0) return PB_OK;
  if (!S_ISREG(st.st_mode))
    return pb_error_set(err, PB_EIO, "%s is %s, not a manifest pipebench wrote; refusing to replace it",
                        path, S_ISLNK(st.st_mode) ? "a symbolic link" : pb_file_kind(st.st_mode));
  void *data = NULL;
  size_t size = 0;
  cJSON *old = NULL;
  struct pb_error ignored;
  if ((size_t)st.st_size <= MAX_MANIFEST_BYTES && pb_read_file(path, &data, &size, err) == PB_OK) {
    if (pb_json_parse(data, size, path, &old, &ignored) != PB_OK) old = NULL; /* not ours */
    pb_free(data, size);
  }
  const cJSON *kind = cJSON_GetObjectItemCaseSensitive(old, "kind");
  if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "pipebench.dataset") != 0 ||
      !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(old, "formats"))) {
    cJSON_Delete(old);
    if (force) return PB_OK;
    return pb_error_set(err, PB_EIO,
                        "%s is not a manifest pipebench wrote; refusing to replace it (move it "
                        "away, choose another --out, or --force to replace the file)",
                        path);
  }
  *out = old;
  return PB_OK;
}

/* Whether the old manifest describes the very same images (rows, seed, dtype, shape and every
 * CRC-32 equal): the formats written by an earlier gen then stay listed next to the new ones. */
static int same_images(const cJSON *old, const pb_gen_params *p, const uint32_t *crcs) {
  if (old == NULL) return 0;
  int same = 1;
  cJSON *it = cJSON_GetObjectItem(old, "rows");
  same &= cJSON_IsNumber(it) && it->valuedouble == (double)p->rows;
  it = cJSON_GetObjectItem(old, "seed");
  same &= cJSON_IsNumber(it) && it->valuedouble == (double)p->seed;
  it = cJSON_GetObjectItem(old, "dtype");
  same &= cJSON_IsString(it) && strcmp(it->valuestring, pb_dtype_name(p->dtype)) == 0;
  it = cJSON_GetObjectItem(old, "shape");
  same &= cJSON_IsArray(it) && cJSON_GetArraySize(it) == PB_NDIM;
  for (int k = 0; same && k < PB_NDIM; k++) {
    cJSON *v = cJSON_GetArrayItem(it, k);
    same &= cJSON_IsNumber(v) && v->valuedouble == (double)p->shape[k];
  }
  it = cJSON_GetObjectItem(old, "crc32");
  same &= cJSON_IsArray(it) && cJSON_GetArraySize(it) == p->rows;
  for (int64_t i = 0; same && i < p->rows; i++) {
    cJSON *v = cJSON_GetArrayItem(it, (int)i);
    char hex[12];
    snprintf(hex, sizeof hex, "%08x", crcs[i]);
    same &= cJSON_IsString(v) && strcmp(v->valuestring, hex) == 0;
  }
  return same;
}

/* Each output name that already holds something must be proven gen's own by the old manifest's
 * inventory of it (force: a regular file passes all the same). */
static int check_outputs(const char *dir, const char *const *names, int n, const cJSON *old,
                         int force, struct pb_error *err) {
  char mpath[4096];
  snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
  const cJSON *written = cJSON_GetObjectItemCaseSensitive(old, "written");
  for (int i = 0; i < n; i++) {
    char to[4096];
    pb_gen_format_path(dir, names[i], to, sizeof to);
    PB_RETURN_NOT_OK(pb_output_check(to, err));
    struct stat st;
    if (lstat(to, &st) != 0) continue;
    if (force && S_ISREG(st.st_mode)) continue;
    const char *entry = strrchr(to, '/') + 1;
    const cJSON *inv = cJSON_GetObjectItemCaseSensitive(written, entry);
    if (inv == NULL && S_ISDIR(st.st_mode)) {
      /* Proven or not, an empty folder costs nothing to replace: look for a first file. */
      PB_RETURN_NOT_OK(pb__inventory_check(to, NULL, old ? mpath : NULL, err));
      continue;
    }
    PB_RETURN_NOT_OK(pb__inventory_check(to, inv, old ? mpath : NULL, err));
  }
  return PB_OK;
}

static char *manifest_json(const pb_gen_params *p, const char *const *names, int n,
                           const uint32_t *crcs, char (*opts)[1024], const cJSON *old,
                           int same, cJSON *const *inventories) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "kind", "pipebench.dataset");
  cJSON_AddStringToObject(root, "pipebench_version", pb_version());
  cJSON_AddStringToObject(root, "git_commit", pb_git_commit());
  char ts[32];
  pb_utc_iso8601(ts, sizeof ts);
  cJSON_AddStringToObject(root, "created_utc", ts);
  cJSON_AddNumberToObject(root, "rows", (double)p->rows);
  cJSON_AddNumberToObject(root, "seed", (double)p->seed);
  cJSON_AddStringToObject(root, "dtype", pb_dtype_name(p->dtype));
  cJSON *shape = cJSON_AddArrayToObject(root, "shape");
  for (int k = 0; k < PB_NDIM; k++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)p->shape[k]));
  cJSON_AddStringToObject(root, "axes", "tczyx");
  cJSON_AddItemToObject(root, "write", write_json(&p->write, p->write.options));
  cJSON *f = cJSON_AddObjectToObject(root, "formats");
  cJSON *fw = cJSON_AddObjectToObject(root, "format_write"); /* how each format was written */
  for (int i = 0; i < n; i++) {
    char path[4096];
    pb_gen_format_path(".", names[i], path, sizeof path);
    cJSON_AddStringToObject(f, names[i], path + 2);
    cJSON_AddItemToObject(fw, names[i], write_json(&p->write, opts[i]));
  }
  /* What gen wrote at each name, so that a later gen (or convert) may replace it; names written
   * by an earlier gen and not now stay listed while they are on disk. */
  cJSON *wr = cJSON_AddObjectToObject(root, "written");
  for (int i = 0; i < n; i++) {
    char path[4096];
    pb_gen_format_path(".", names[i], path, sizeof path);
    cJSON_AddItemToObject(wr, path + 2, cJSON_Duplicate(inventories[i], 1));
  }
  const cJSON *owr = cJSON_GetObjectItemCaseSensitive(old, "written"), *e;
  cJSON_ArrayForEach(e, owr) {
    if (e->string != NULL && cJSON_GetObjectItemCaseSensitive(wr, e->string) == NULL)
      cJSON_AddItemToObject(wr, e->string, cJSON_Duplicate(e, 1));
  }
  if (same) { /* formats an earlier gen wrote from the same images, not rewritten now */
    const cJSON *of = cJSON_GetObjectItem(old, "formats"), *ofw = cJSON_GetObjectItem(old, "format_write");
    cJSON_ArrayForEach(e, of) {
      if (!cJSON_IsString(e) || cJSON_GetObjectItem(f, e->string) != NULL) continue;
      cJSON_AddStringToObject(f, e->string, e->valuestring);
      const cJSON *how = ofw ? cJSON_GetObjectItem(ofw, e->string) : NULL;
      if (how == NULL) how = cJSON_GetObjectItem(old, "write");
      if (how != NULL) cJSON_AddItemToObject(fw, e->string, cJSON_Duplicate(how, 1));
    }
  }
  cJSON *c = cJSON_AddArrayToObject(root, "crc32");
  for (int64_t i = 0; i < p->rows; i++) {
    char hex[12];
    snprintf(hex, sizeof hex, "%08x", crcs[i]);
    cJSON_AddItemToArray(c, cJSON_CreateString(hex));
  }
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  return text;
}

/* Options may be scoped to one format ("oa-dataset:chunks_per_row_group=256"); unscoped ones
 * go to every format. Writes the options that apply to `format` into buf. */
static void scoped_options(const char *options, const char *format, char *buf, size_t size) {
  buf[0] = '\0';
  if (options == NULL) return;
  size_t flen = strlen(format), used = 0;
  const char *p = options;
  while (*p != '\0') {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *item = p;
    const char *colon = memchr(p, ':', len), *eq = memchr(p, '=', len);
    int keep = 1;
    if (colon != NULL && (eq == NULL || colon < eq)) {
      keep = (size_t)(colon - p) == flen && strncmp(p, format, flen) == 0;
      len -= (size_t)(colon + 1 - p);
      item = colon + 1;
    }
    if (keep && used + len + 2 < size) {
      if (used > 0) buf[used++] = ',';
      memcpy(buf + used, item, len);
      used += len;
      buf[used] = '\0';
    }
    p = end ? end + 1 : p + strlen(p);
  }
}

/* Every scope must name a format (or gen itself): an option scoped to a misspelt name would
 * otherwise reach no writer and be lost without a word. */
static int check_scopes(const char *options, struct pb_error *err) {
  for (const char *q = options ? options : ""; *q != '\0';) {
    size_t len = strcspn(q, ",");
    const char *colon = memchr(q, ':', len), *eq = memchr(q, '=', len);
    if (colon != NULL && (eq == NULL || colon < eq)) {
      size_t slen = (size_t)(colon - q);
      char scope[64];
      snprintf(scope, sizeof scope, "%.*s", (int)(slen < 63 ? slen : 63), q);
      int known = slen < 63 && (strcmp(scope, "gen") == 0 || pb_format_find(scope) != NULL);
      if (!known) {
        char names[512] = "";
        size_t used = 0;
        for (int i = 0; i < pb_format_count() && used < sizeof names; i++)
          used += (size_t)snprintf(names + used, sizeof names - used, "%s, ", pb_format_at(i)->name);
        return pb_error_set(err, PB_EINVAL, "option '%.*s': unknown format '%s' (known: %sgen)",
                            (int)len, q, scope, names);
      }
    }
    q += len + (q[len] == ',');
  }
  return PB_OK;
}

/* gen's own options, scoped "gen:" (no format has that name, so writers never see them):
 * content=cells|photo, sizes=fixed|vary (docs/format-imagefolder.md, the imagenet preset). */
static int gen_options(const char *options, int *photo, int *vary, struct pb_error *err) {
  static const char *const keys[] = {"content=cells|photo", "sizes=fixed|vary", NULL};
  char own[512] = "", v[32];
  size_t used = 0;
  for (const char *q = options ? options : ""; *q != '\0';) {
    size_t len = strcspn(q, ",");
    if (len > 4 && strncmp(q, "gen:", 4) == 0 && used + len < sizeof own) {
      used += (size_t)snprintf(own + used, sizeof own - used, "%s%.*s", used ? "," : "",
                               (int)(len - 4), q + 4);
    }
    q += len + (q[len] == ',');
  }
  PB_RETURN_NOT_OK(pb_opt_check("gen", own, keys, err));
  *photo = pb_opt_get(own, "content", v, sizeof v) && strcmp(v, "photo") == 0;
  if (pb_opt_get(own, "content", v, sizeof v) && !*photo && strcmp(v, "cells") != 0)
    return pb_error_set(err, PB_EINVAL, "gen: option content=%s: want cells or photo", v);
  *vary = pb_opt_get(own, "sizes", v, sizeof v) && strcmp(v, "vary") == 0;
  if (pb_opt_get(own, "sizes", v, sizeof v) && !*vary && strcmp(v, "fixed") != 0)
    return pb_error_set(err, PB_EINVAL, "gen: option sizes=%s: want fixed or vary", v);
  return PB_OK;
}

/* Image r's metadata: its size (varied for photo-like sizes=vary), name, physical sizes and
 * channels. */
static void row_meta(pb_image_meta *meta, const pb_gen_params *p, int64_t r, int64_t longest,
                     int vary) {
  int64_t shape[PB_NDIM] = {p->shape[0], p->shape[1], p->shape[2], p->shape[3], p->shape[4]};
  if (vary) pb__synth_photo_size(p->seed, r, longest, &shape[PB_Y], &shape[PB_X]);
  pb_image_meta_init(meta, NULL, p->dtype, shape);
  snprintf(meta->name, sizeof meta->name, "img_%05lld", (long long)r);
  snprintf(meta->id, sizeof meta->id, "img_%05lld", (long long)r);
  meta->physical_size[0] = meta->physical_size[1] = 0.65;
  meta->physical_size[2] = p->shape[PB_Z] > 1 ? 2.0 : 0.0;
  for (int k = 0; k < 3; k++) snprintf(meta->physical_unit[k], sizeof meta->physical_unit[k], "µm");
  if (p->shape[PB_Z] <= 1) meta->physical_unit[2][0] = '\0';
  meta->n_channels = p->shape[PB_C] < PB_MAX_CHANNELS ? (int)p->shape[PB_C] : PB_MAX_CHANNELS;
  static const uint32_t colors[] = {0x0000FFFF, 0x00FF00FF, 0xFF0000FF, 0xFFFF00FF, 0xFF00FFFF};
  for (int c = 0; c < meta->n_channels; c++) {
    snprintf(meta->channels[c].id, sizeof meta->channels[c].id, "Channel:0:%d", c);
    snprintf(meta->channels[c].name, sizeof meta->channels[c].name, "ch%d", c);
    meta->channels[c].color_rgba = colors[c % 5];
  }
}

/* Writes the manifest text into the staging folder, then puts every format's output and the
 * manifest into dir in one journaled commit (pb_commit). */
static int commit_outputs(const char *dir, const char *stage, const char *const *names, int n,
                          const char *manifest, struct pb_error *err) {
  char mpath[4096];
  snprintf(mpath, sizeof mpath, "%s/manifest.json", stage);
  PB_RETURN_NOT_OK(pb_write_file(mpath, manifest, strlen(manifest), err));
  const char *from[MAX_FORMATS + 1], *to[MAX_FORMATS + 1];
  char entries[MAX_FORMATS][256];
  for (int i = 0; i < n; i++) {
    char path[4096];
    pb_gen_format_path(".", names[i], path, sizeof path);
    snprintf(entries[i], sizeof entries[i], "%s", path + 2);
    from[i] = to[i] = entries[i];
  }
  from[n] = to[n] = "manifest.json";
  return pb_commit(dir, "gen", stage, from, to, n + 1, err);
}

int pb_gen(const char *dir, const pb_gen_params *params, struct pb_error *err) {
  pb_gen_params p = PB_GEN_PARAMS_DEFAULTS;
  if (params != NULL) p = *params;
  if (p.rows < 1) return pb_error_set(err, PB_EINVAL, "rows must be at least 1, not %lld", (long long)p.rows);
  for (int k = 0; k < PB_NDIM; k++)
    if (p.shape[k] < 1 || p.shape[k] > 1 << 20)
      return pb_error_set(err, PB_EINVAL, "image size on axis %c must be from 1 to 1048576", "TCZYX"[k]);
  if (pb_dtype_size(p.dtype) == 0) return pb_error_set(err, PB_EINVAL, "invalid dtype");
  const char *names[MAX_FORMATS];
  int n = 0;
  char storage[1024];
  PB_RETURN_NOT_OK(parse_formats(p.formats, names, &n, storage, sizeof storage, err));
  PB_RETURN_NOT_OK(check_scopes(p.write.options, err));
  int photo = 0, vary = 0;
  PB_RETURN_NOT_OK(gen_options(p.write.options, &photo, &vary, err));
  int64_t longest = p.shape[PB_Y] > p.shape[PB_X] ? p.shape[PB_Y] : p.shape[PB_X];
  struct stat dst;
  int made_dir = lstat(dir, &dst) != 0; /* removed again when gen fails before its commit */
  PB_RETURN_NOT_OK(pb_mkdirs(dir, err));
  /* A commit an earlier gen did not finish (killed inside it) is finished first: the manifest
   * read below is then the one that goes with what is on disk. */
  PB_RETURN_NOT_OK(pb_commit_recover(dir, "gen", NULL, err));
  cJSON *old = NULL;
  PB_RETURN_NOT_OK(load_old_manifest(dir, p.write.force, &old, err));
  int rc = check_outputs(dir, names, n, old, p.write.force, err);
  if (rc != PB_OK) {
    cJSON_Delete(old);
    return rc;
  }

  /* Everything is written under a staging folder first and put into place by one commit at the
   * end (common/commit.h), so an earlier dataset in dir stays whole until the new one is. */
  char stage[4096], stage_name[4096];
  snprintf(stage_name, sizeof stage_name, "%s/gen-staging", dir);
  pb_temp_sweep(stage_name); /* what a gen killed before its commit left in dir */
  if (pb_temp_sibling(stage_name, stage, sizeof stage) != PB_OK) {
    cJSON_Delete(old);
    return pb_error_set(err, PB_EINVAL, "%s: path too long", dir);
  }
  rc = pb_mkdirs(stage, err);
  if (rc != PB_OK) {
    cJSON_Delete(old);
    if (made_dir) rmdir(dir);
    return rc;
  }
  if (p.cancel != NULL) pb_stop_flag_set(p.cancel); /* children (the Lance writer) stop too */

  pb_writer *writers[MAX_FORMATS] = {0};
  pb_image_meta meta;
  int64_t most[PB_NDIM] = {p.shape[0], p.shape[1], p.shape[2], p.shape[3], p.shape[4]};
  if (vary) most[PB_Y] = most[PB_X] = longest; /* room for any size pb__synth_photo_size gives */
  pb_image_meta_init(&meta, NULL, p.dtype, most);
  size_t bytes = pb_image_bytes(&meta);
  void *pixels = pb_alloc(bytes);
  uint32_t *crcs = calloc((size_t)p.rows, sizeof *crcs);
  cJSON *inventories[MAX_FORMATS] = {0};
  if (pixels == NULL || crcs == NULL) {
    rc = pb_error_set(err, PB_ENOMEM, "out of memory for one %zu-byte image", bytes);
    goto done;
  }
  char opts[MAX_FORMATS][1024];
  for (int i = 0; i < n && rc == PB_OK; i++) {
    char path[4096];
    pb_gen_format_path(stage, names[i], path, sizeof path);
    pb_write_params wp = p.write;
    scoped_options(p.write.options, names[i], opts[i], sizeof opts[i]);
    wp.options = opts[i];
    rc = pb_writer_new(path, names[i], &wp, &writers[i], err);
    if (rc != PB_OK) pb_error_prefix(err, "%s: ", names[i]);
  }
  for (int64_t r = 0; r < p.rows && rc == PB_OK; r++) {
    if (p.cancel != NULL && *p.cancel != 0) {
      int sig = (int)*p.cancel;
      rc = pb_error_set(err, PB_ECANCELED, "interrupted by %s",
                        sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal");
      break;
    }
    row_meta(&meta, &p, r, longest, vary);
    if (!photo) pb_synth_image(&meta, p.seed, r, pixels);
    else if (pb__synth_photo(&meta, p.seed, r, pixels) != 0)
      rc = pb_error_set(err, PB_ENOMEM, "out of memory for image %lld", (long long)r);
    crcs[r] = pb_image_crc32(&meta, pixels);
    for (int i = 0; i < n && rc == PB_OK; i++) {
      rc = pb_writer_add(writers[i], &meta, pixels, err);
      if (rc != PB_OK) pb_error_prefix(err, "%s, image %lld: ", names[i], (long long)r);
    }
    if (p.progress != NULL) p.progress(p.progress_ctx, r + 1, p.rows);
  }
  for (int i = 0; i < n && rc == PB_OK; i++) {
    rc = pb_writer_finish(writers[i], err);
    if (rc != PB_OK) pb_error_prefix(err, "%s: ", names[i]);
  }
  for (int i = 0; i < n; i++) pb_writer_free(writers[i]);
  for (int i = 0; i < n && rc == PB_OK; i++) {
    char path[4096];
    pb_gen_format_path(stage, names[i], path, sizeof path);
    inventories[i] = pb__inventory_take(path, err);
    if (inventories[i] == NULL) rc = PB_EIO;
  }
  if (rc == PB_OK && p.cancel != NULL && *p.cancel != 0)
    rc = pb_error_set(err, PB_ECANCELED, "interrupted by %s", *p.cancel == SIGINT ? "SIGINT" : "SIGTERM");
  if (rc == PB_OK) {
    char *text = manifest_json(&p, names, n, crcs, opts, old, same_images(old, &p, crcs), inventories);
    rc = text ? commit_outputs(dir, stage, names, n, text, err)
              : pb_error_set(err, PB_ENOMEM, "out of memory");
    free(text);
  }
done:
  if (p.cancel != NULL) pb_stop_flag_set(NULL);
  pb_remove_tree(stage); /* gone already after a commit */
  if (rc != PB_OK && made_dir) rmdir(dir); /* only when empty: a first gen that failed */
  for (int i = 0; i < n; i++) cJSON_Delete(inventories[i]);
  cJSON_Delete(old);
  free(crcs);
  pb_free(pixels, bytes);
  return rc;
}
