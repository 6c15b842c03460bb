/* pipebench verify: each image's CRC-32 against a manifest, and the manifest convert writes. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipebench/sys.h"
#include "tools/inventory.h"
#include "pipebench/format.h"
#include "pipebench/results.h"
#include "pipebench/verify.h"

/* A manifest larger than this is not one pipebench wrote (10^7 images take about 120 MB). */
#define MAX_MANIFEST_BYTES ((size_t)256 << 20)

/* path without trailing slashes, into buf. */
static int trimmed(const char *path, char *buf, size_t size) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--;
  if (n == 0 || n >= size) return PB_EINVAL;
  memcpy(buf, path, n);
  buf[n] = '\0';
  return PB_OK;
}

static int sidecar_path(const char *path, char *buf, size_t size) {
  char t[4096];
  if (trimmed(path, t, sizeof t) != PB_OK) return PB_EINVAL;
  int len = snprintf(buf, size, "%s.manifest.json", t);
  return len < 0 || (size_t)len >= size ? PB_EINVAL : PB_OK;
}

static int is_file(const char *p);

/* 1 a regular file, 0 not; over a URL a server that fails the HEAD (500, no answer) is that
 * error, with err set, so it is not taken for "no manifest". */
static int is_file_e(const char *p, struct pb_error *err) {
  if (pb_location_is_url(p)) {
    int kind = 0;
    int rc = pb_location_stat(p, &kind, NULL, err);
    return rc != PB_OK ? rc : kind == 1;
  }
  return is_file(p);
}

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int read_json(const char *file, cJSON **out, struct pb_error *err) {
  *out = NULL;
  void *data = NULL;
  size_t n = 0;
  int rc;
  if (pb_location_is_url(file)) {
    rc = pb_location_read(file, MAX_MANIFEST_BYTES, &data, &n, err);
    if (rc != PB_OK) return rc;
  } else {
    struct stat st;
    if (stat(file, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size > MAX_MANIFEST_BYTES)
      return pb_error_set(err, PB_EFORMAT,
                          "%s: %lld bytes, too large for a manifest (at most %zu)", file,
                          (long long)st.st_size, MAX_MANIFEST_BYTES);
    rc = pb_read_file(file, &data, &n, err);
    if (rc != PB_OK) return rc == PB_EIO ? PB_EFORMAT : rc;
  }
  cJSON *root = NULL;
  rc = pb_json_parse(data, n, file, &root, err); /* trailing data refused too */
  pb_free(data, n);
  if (rc != PB_OK) return rc;
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return pb_error_set(err, PB_EFORMAT, "%s: not a JSON object", file);
  }
  *out = root;
  return PB_OK;
}

/* gen's manifest in path's folder lists path's name among its formats; the format's name goes
 * into fmt. 1 yes, 0 no. */
static int gen_lists(const char *manifest, const char *base, char *fmt, size_t fmt_size,
                     struct pb_error *e) {
  cJSON *root = NULL;
  if (read_json(manifest, &root, e) != PB_OK) return -1;
  const cJSON *formats = cJSON_GetObjectItem(root, "formats"), *it;
  int found = 0;
  cJSON_ArrayForEach(it, formats) {
    if (cJSON_IsString(it) && strcmp(it->valuestring, base) == 0) {
      snprintf(fmt, fmt_size, "%s", it->string != NULL ? it->string : "");
      found = 1;
      break;
    }
  }
  cJSON_Delete(root);
  return found;
}

int pb_verify_find_manifest(const char *path, char *buf, size_t size, struct pb_error *err) {
  if (path != NULL) PB_RETURN_NOT_OK(pb_commit_settle(path, err));
  char side[4096], t[4096], gen[4096];
  if (path == NULL || trimmed(path, t, sizeof t) != PB_OK || sidecar_path(t, side, sizeof side) != PB_OK)
    return pb_error_set(err, PB_EINVAL, "%s: path too long or empty", path ? path : "(null)");
  int side_is = is_file_e(side, err);
  if (side_is < 0) return side_is;
  if (side_is) {
    if (strlen(side) >= size) return pb_error_set(err, PB_EINVAL, "%s: path too long", side);
    snprintf(buf, size, "%s", side);
    return PB_OK;
  }
  const char *slash = strrchr(t, '/');
  const char *base = slash != NULL ? slash + 1 : t;
  if (slash == NULL) snprintf(gen, sizeof gen, "manifest.json");
  else if (slash == t) snprintf(gen, sizeof gen, "/manifest.json");
  else snprintf(gen, sizeof gen, "%.*s/manifest.json", (int)(slash - t), t);
  char fmt[64] = "";
  int gen_is = is_file_e(gen, err);
  if (gen_is < 0) return gen_is;
  int listed = gen_is ? gen_lists(gen, base, fmt, sizeof fmt, err) : 0;
  if (listed < 0) return PB_EFORMAT; /* there, but unreadable: say so, not "no manifest" */
  if (listed) {
    /* gen's CRC-32s are those of the images it made; imagefolder keeps them only lossily. */
    if (strcmp(fmt, "imagefolder") == 0)
      return pb_error_set(err, PB_EUNSUPPORTED,
                          "%s: its CRC-32s are of the images before imagefolder encoded them "
                          "(JPEG is lossy, and images become 8-bit); give a manifest that "
                          "describes %s with --manifest (convert writes one)",
                          gen, path);
    if (strlen(gen) >= size) return pb_error_set(err, PB_EINVAL, "%s: path too long", gen);
    snprintf(buf, size, "%s", gen);
    return PB_OK;
  }
  /* a folder gen wrote: its manifest lists the datasets inside it */
  char inner[4200];
  snprintf(inner, sizeof inner, "%s/manifest.json", t);
  cJSON *root = NULL;
  struct pb_error e;
  if (is_file(inner) && read_json(inner, &root, &e) == PB_OK) {
    char list[1024] = "";
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(root, "formats")) {
      if (!cJSON_IsString(it) || strlen(list) + strlen(t) + strlen(it->valuestring) + 4 >= sizeof list)
        continue;
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s/%s", list[0] ? ", " : "", t,
               it->valuestring);
    }
    cJSON_Delete(root);
    if (list[0] != '\0')
      return pb_error_set(err, PB_ENOTFOUND,
                          "%s: a folder of datasets (%s lists them); verify each: %s", path,
                          inner, list);
  }
  return pb_error_set(err, PB_ENOTFOUND,
                      "%s: no manifest (neither %s nor a %s that lists '%s'); give one with "
                      "--manifest",
                      path, side, gen, base);
}

static int parse_hex8(const char *s, uint32_t *out) {
  if (s == NULL || strlen(s) != 8) return 0;
  uint32_t v = 0;
  for (int i = 0; i < 8; i++) {
    char c = s[i];
    uint32_t d;
    if (c >= '0' && c <= '9') d = (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') d = (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') d = (uint32_t)(c - 'A' + 10);
    else return 0;
    v = v << 4 | d;
  }
  *out = v;
  return 1;
}

/* The manifest's CRC-32s: its "crc32" list (gen, convert) or "images"[i].crc32 (inspect
 * --json). *crcs is malloc'd. */
static int load_crcs(const char *file, uint32_t **crcs, int64_t *n, struct pb_error *err) {
  *crcs = NULL;
  *n = 0;
  cJSON *root = NULL;
  PB_RETURN_NOT_OK(read_json(file, &root, err));
  const cJSON *list = cJSON_GetObjectItem(root, "crc32");
  int from_images = 0;
  if (list == NULL) {
    list = cJSON_GetObjectItem(root, "images");
    from_images = list != NULL;
  }
  if (!cJSON_IsArray(list)) {
    cJSON_Delete(root);
    return pb_error_set(err, PB_EFORMAT,
                        "%s: no \"crc32\" list (as gen and convert write) and no \"images\" list "
                        "(as inspect --json writes)",
                        file);
  }
  int count = cJSON_GetArraySize(list);
  uint32_t *v = malloc(((size_t)count + 1) * sizeof *v);
  if (v == NULL) {
    cJSON_Delete(root);
    return pb_error_set(err, PB_ENOMEM, "%s: out of memory for %d entries", file, count);
  }
  int i = 0, rc = PB_OK;
  const cJSON *it;
  cJSON_ArrayForEach(it, list) {
    const cJSON *c = from_images ? cJSON_GetObjectItem(it, "crc32") : it;
    if (!cJSON_IsString(c) || !parse_hex8(c->valuestring, &v[i])) {
      rc = pb_error_set(err, PB_EFORMAT, "%s: %s entry %d is not a CRC-32 of 8 hex digits", file,
                        from_images ? "images[].crc32" : "crc32", i);
      break;
    }
    i++;
  }
  cJSON_Delete(root);
  if (rc != PB_OK) {
    free(v);
    return rc;
  }
  *crcs = v;
  *n = count;
  return PB_OK;
}

/* Reads image i into *buf (grown as needed) and gives its CRC-32 and metadata. */
static int image_crc(pb_dataset *ds, int64_t i, pb_image_meta *m, void **buf, size_t *cap,
                     uint32_t *crc, struct pb_error *err) {
  PB_RETURN_NOT_OK(pb_dataset_meta(ds, i, m, err));
  size_t need = pb_image_bytes(m);
  if (need > *cap) {
    pb_free(*buf, *cap);
    *buf = pb_alloc(need);
    *cap = *buf != NULL ? need : 0;
    if (*buf == NULL)
      return pb_error_set(err, PB_ENOMEM, "out of memory for image %lld (%zu bytes)", (long long)i,
                          need);
  }
  PB_RETURN_NOT_OK(pb_dataset_read(ds, i, *buf, *cap, NULL, err));
  *crc = pb_image_crc32(m, *buf);
  return PB_OK;
}

int pb_verify(const char *path, const pb_verify_params *params, pb_verify_result *result,
              struct pb_error *err) {
  pb_verify_params p = PB_VERIFY_PARAMS_DEFAULTS;
  if (params != NULL) p = *params;
  pb_verify_result local;
  pb_verify_result *res = result != NULL ? result : &local;
  memset(res, 0, sizeof *res);
  if (path == NULL) return pb_error_set(err, PB_EINVAL, "no dataset given");
  if (p.manifest != NULL) {
    if (strlen(p.manifest) >= sizeof res->manifest)
      return pb_error_set(err, PB_EINVAL, "%s: path too long", p.manifest);
    snprintf(res->manifest, sizeof res->manifest, "%s", p.manifest);
  } else {
    PB_RETURN_NOT_OK(pb_verify_find_manifest(path, res->manifest, sizeof res->manifest, err));
  }
  uint32_t *want = NULL;
  int64_t n_want = 0;
  PB_RETURN_NOT_OK(load_crcs(res->manifest, &want, &n_want, err));
  pb_dataset *ds = NULL;
  int rc = pb_dataset_open(path, p.format, &ds, err);
  if (rc != PB_OK) {
    free(want);
    return rc;
  }
  int64_t n = pb_dataset_count(ds);
  if (n != n_want) {
    rc = pb_error_set(err, PB_EFORMAT, "%s lists %lld images, %s holds %lld", res->manifest,
                      (long long)n_want, path, (long long)n);
    n = 0;
  }
  void *buf = NULL;
  size_t cap = 0;
  for (int64_t i = 0; i < n; i++) {
    pb_image_meta m;
    struct pb_error e = {{0}};
    uint32_t got = 0;
    memset(&m, 0, sizeof m);
    int r = image_crc(ds, i, &m, &buf, &cap, &got, &e);
    res->images++;
    if (r != PB_OK || got != want[i]) {
      res->mismatched++;
      pb_verify_image img = {i, m.name, want[i], r == PB_OK ? got : 0,
                             r == PB_OK ? NULL : e.message};
      if (p.on_mismatch != NULL) p.on_mismatch(p.ctx, &img);
    }
    if (p.progress != NULL) p.progress(p.ctx, i + 1, n);
  }
  pb_free(buf, cap);
  pb_dataset_free(ds);
  free(want);
  return rc;
}

/* PATH.manifest.json for the dataset at path; `written` (may be NULL) is the inventory of what
 * was written at path, the proof a later convert needs to replace it. */
static int write_manifest(const char *path, const char *format, const char *source,
                          const cJSON *written, struct pb_error *err) {
  char side[4096];
  if (path == NULL || sidecar_path(path, side, sizeof side) != PB_OK)
    return pb_error_set(err, PB_EINVAL, "%s: path too long or empty", path ? path : "(null)");
  pb_dataset *ds = NULL;
  PB_RETURN_NOT_OK(pb_dataset_open(path, format, &ds, err));
  int64_t n = pb_dataset_count(ds);
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "kind", "pipebench.dataset");
  cJSON_AddStringToObject(root, "pipebench_version", pb_version());
  cJSON_AddStringToObject(root, "git_commit", pb_git_commit());
  char ts[32];
  pb_utc_iso8601(ts, sizeof ts);
  cJSON_AddStringToObject(root, "created_utc", ts);
  cJSON_AddStringToObject(root, "format", pb_dataset_format(ds));
  if (source != NULL) cJSON_AddStringToObject(root, "source", source);
  if (written != NULL) cJSON_AddItemToObject(root, "written", cJSON_Duplicate(written, 1));
  cJSON_AddNumberToObject(root, "rows", (double)n);
  cJSON *names = cJSON_AddArrayToObject(root, "names");
  cJSON *crcs = cJSON_AddArrayToObject(root, "crc32");
  void *buf = NULL;
  size_t cap = 0;
  int rc = PB_OK;
  for (int64_t i = 0; i < n && rc == PB_OK; i++) {
    pb_image_meta m;
    uint32_t crc = 0;
    rc = image_crc(ds, i, &m, &buf, &cap, &crc, err);
    if (rc != PB_OK) {
      pb_error_prefix(err, "%s, image %lld: ", path, (long long)i);
      break;
    }
    char hex[12];
    snprintf(hex, sizeof hex, "%08x", crc);
    cJSON_AddItemToArray(names, cJSON_CreateString(m.name));
    cJSON_AddItemToArray(crcs, cJSON_CreateString(hex));
  }
  pb_free(buf, cap);
  pb_dataset_free(ds);
  char *text = rc == PB_OK ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (rc == PB_OK && text == NULL) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  if (rc == PB_OK) rc = pb_write_file_atomic(side, text, strlen(text), err);
  free(text);
  return rc;
}

int pb_verify_write_manifest(const char *path, const char *format, const char *source,
                             struct pb_error *err) {
  return write_manifest(path, format, source, NULL, err);
}

/* ---- a dataset and its manifest, together ---------------------------------------------------- */

/* Messages about the staged copy name the place it is bound for. */
static void unstage_message(struct pb_error *err, const char *staged, const char *path) {
  if (err == NULL) return;
  char *at = strstr(err->message, staged);
  if (at == NULL) return;
  char buf[sizeof err->message];
  snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - err->message), err->message, path,
           at + strlen(staged));
  snprintf(err->message, sizeof err->message, "%s", buf);
}

/* What stands at path and side may be replaced: nothing; or what side, a manifest pipebench
 * wrote, lists file by file (force: a regular file at path all the same). An empty folder
 * costs nothing to replace. Anything else is refused, naming what is in the way. */
static int check_replaceable(const char *path, const char *side, int force, struct pb_error *err) {
  struct stat st, ss;
  cJSON *man = NULL;
  if (lstat(side, &ss) == 0) {
    struct pb_error e;
    if (read_json(side, &man, &e) == PB_OK) {
      const cJSON *kind = cJSON_GetObjectItemCaseSensitive(man, "kind");
      if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "pipebench.dataset") != 0) {
        cJSON_Delete(man);
        man = NULL;
      }
    }
    if (man == NULL && !force)
      return pb_error_set(err, PB_EIO,
                          "%s is not a manifest pipebench wrote; refusing to replace it (move it "
                          "away, choose another --out, or --force to replace files)",
                          side);
  }
  int rc;
  if (lstat(path, &st) != 0 || (force && S_ISREG(st.st_mode))) {
    cJSON_Delete(man);
    return PB_OK;
  }
  rc = pb__inventory_check(path, cJSON_GetObjectItemCaseSensitive(man, "written"), man ? side : NULL, err);
  cJSON_Delete(man);
  return rc;
}

int pb_verify_write_dataset(const char *path, const char *format, const pb_write_params *params,
                            const char *source, pb_verify_fill_fn fill, void *ctx, int *started,
                            struct pb_error *err) {
  if (started != NULL) *started = 0;
  char t[4096], side[4200];
  if (path == NULL || trimmed(path, t, sizeof t) != PB_OK || sidecar_path(t, side, sizeof side) != PB_OK)
    return pb_error_set(err, PB_EINVAL, "%s: path too long or empty", path ? path : "(null)");
  if (format == NULL || fill == NULL) return pb_error_set(err, PB_EINVAL, "no format or no images");
  PB_RETURN_NOT_OK(pb_output_check(t, err));
  struct stat st;
  if (lstat(side, &st) == 0 && !S_ISREG(st.st_mode))
    return pb_error_set(err, PB_EIO, "%s is %s, not a manifest file; refusing to replace it",
                        side, pb_file_kind(st.st_mode));
  char dir[4096];
  const char *base;
  pb_path_split(t, dir, sizeof dir, &base);
  /* A convert into path killed inside its commit is finished first (common/commit.h). */
  PB_RETURN_NOT_OK(pb_commit_recover(dir, base, NULL, err));
  PB_RETURN_NOT_OK(check_replaceable(t, side, params != NULL && params->force, err));
  /* The staging folder has the temporary name of path: a killed writer's is swept by the next
   * writer of path (pb_writer_new, or this call). */
  pb_temp_sweep(t);
  char stage[4200], staged[4400];
  if (pb_temp_sibling(t, stage, sizeof stage) != PB_OK)
    return pb_error_set(err, PB_EINVAL, "%s: path too long", t);
  snprintf(staged, sizeof staged, "%s/%s", stage, base);
  PB_RETURN_NOT_OK(pb_mkdirs(stage, err));
  pb_writer *w = NULL;
  int rc = pb_writer_new(staged, format, params, &w, err);
  if (rc == PB_OK) {
    if (started != NULL) *started = 1;
    rc = fill(ctx, w, err);
    if (rc == PB_OK) rc = pb_writer_finish(w, err);
  }
  pb_writer_free(w);
  cJSON *inv = NULL;
  if (rc == PB_OK && (inv = pb__inventory_take(staged, err)) == NULL) rc = PB_EIO;
  if (rc == PB_OK) rc = write_manifest(staged, format, source, inv, err);
  cJSON_Delete(inv);
  if (rc == PB_OK) {
    char side_name[4200];
    snprintf(side_name, sizeof side_name, "%s.manifest.json", base);
    const char *names[2] = {base, side_name};
    rc = pb_commit(dir, base, stage, names, names, 2, err);
  }
  if (rc != PB_OK) {
    unstage_message(err, staged, t);
    unstage_message(err, stage, dir);
  }
  pb_remove_tree(stage);
  return rc;
}
