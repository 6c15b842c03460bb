/* Inventories of what pipebench wrote, and the check before anything is replaced (inventory.h). */
#include "tools/inventory.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipebench/sys.h"

/* Deeper than any dataset pipebench writes (OME-Zarr v3 with sharding: about 10 levels). */
#define MAX_DEPTH 64

typedef struct listed {
  const char *name;
  double size;
} listed;

typedef struct walk {
  const char *root;
  char rel[4096];
  /* take: files go here */
  cJSON *files;
  /* check: the inventory's files, sorted by name */
  struct listed *listed;
  size_t n;
  const char *manifest;
  struct pb_error *err;
} walk;

static int full_path(const walk *w, char *buf, size_t size) {
  int n = w->rel[0] ? snprintf(buf, size, "%s/%s", w->root, w->rel) : snprintf(buf, size, "%s", w->root);
  return n < 0 || (size_t)n >= size ? PB_EINVAL : PB_OK;
}

static int cmp_listed(const void *a, const void *b) {
  return strcmp(((const listed *)a)->name, ((const listed *)b)->name);
}

static const listed *find_listed(const walk *w, const char *rel) {
  listed key = {rel, 0};
  return w->n ? bsearch(&key, w->listed, w->n, sizeof *w->listed, cmp_listed) : NULL;
}

/* One regular file met by the walk (take: recorded; check: must be listed with its size). */
static int on_file(walk *w, const struct stat *st) {
  if (w->files != NULL) {
    cJSON_AddItemToObject(w->files, w->rel, cJSON_CreateNumber((double)st->st_size));
    return PB_OK;
  }
  const listed *k = find_listed(w, w->rel);
  if (k == NULL) {
    if (w->manifest == NULL)
      return pb_error_set(w->err, PB_EIO,
                          "%s holds %s, and no manifest says pipebench wrote it; refusing to "
                          "replace it: move it away or choose another output",
                          w->root, w->rel);
    return pb_error_set(w->err, PB_EIO,
                        "%s holds %s, which pipebench did not write (%s does not list it); refusing "
                        "to replace it: move it away or choose another output",
                        w->root, w->rel, w->manifest);
  }
  if (k->size != (double)st->st_size)
    return pb_error_set(w->err, PB_EIO,
                        "%s/%s is %lld bytes, not the %.0f bytes pipebench wrote (%s); it was "
                        "changed since, so it is not replaced",
                        w->root, w->rel, (long long)st->st_size, k->size,
                        w->manifest ? w->manifest : "");
  return PB_OK;
}

static int walk_tree(walk *w, int depth) {
  char full[8192];
  if (full_path(w, full, sizeof full) != PB_OK)
    return pb_error_set(w->err, PB_EINVAL, "%s/%s: path too long", w->root, w->rel);
  struct stat st;
  if (lstat(full, &st) != 0)
    return pb_error_set(w->err, -errno, "%s: %s", full, strerror(errno));
  if (S_ISREG(st.st_mode)) return on_file(w, &st);
  if (!S_ISDIR(st.st_mode)) {
    const char *what = S_ISLNK(st.st_mode) ? "a symbolic link" : pb_file_kind(st.st_mode);
    if (w->files != NULL)
      return pb_error_set(w->err, PB_EIO, "%s is %s; pipebench writes only files and folders", full, what);
    return pb_error_set(w->err, PB_EIO, "%s holds %s, %s, which pipebench did not write; refusing to replace it",
                        w->root, w->rel, what);
  }
  if (depth > MAX_DEPTH)
    return pb_error_set(w->err, PB_EIO, "%s: folders nested more than %d deep", full, MAX_DEPTH);
  char **names = NULL;
  size_t count = 0;
  PB_RETURN_NOT_OK(pb_list_dir(full, &names, &count, w->err));
  size_t len = strlen(w->rel);
  int rc = PB_OK;
  for (size_t i = 0; i < count && rc == PB_OK; i++) {
    int n = snprintf(w->rel + len, sizeof w->rel - len, "%s%s", len ? "/" : "", names[i]);
    if (n < 0 || (size_t)n >= sizeof w->rel - len) {
      rc = pb_error_set(w->err, PB_EINVAL, "%s: a path inside it is too long", w->root);
      break;
    }
    rc = walk_tree(w, depth + 1);
    w->rel[len] = '\0';
  }
  pb_free_names(names, count);
  return rc;
}

cJSON *pb__inventory_take(const char *path, struct pb_error *err) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    pb_error_set(err, -errno, "%s: %s", path, strerror(errno));
    return NULL;
  }
  cJSON *inv = cJSON_CreateObject();
  if (inv == NULL) {
    pb_error_set(err, PB_ENOMEM, "out of memory");
    return NULL;
  }
  if (S_ISREG(st.st_mode)) {
    cJSON_AddStringToObject(inv, "kind", "file");
    cJSON_AddNumberToObject(inv, "size", (double)st.st_size);
    return inv;
  }
  if (!S_ISDIR(st.st_mode)) {
    cJSON_Delete(inv);
    pb_error_set(err, PB_EIO, "%s is %s; pipebench writes only files and folders", path,
                 S_ISLNK(st.st_mode) ? "a symbolic link" : pb_file_kind(st.st_mode));
    return NULL;
  }
  cJSON_AddStringToObject(inv, "kind", "folder");
  walk w = {.root = path, .files = cJSON_AddObjectToObject(inv, "files"), .err = err};
  if (w.files == NULL || walk_tree(&w, 0) != PB_OK) {
    if (w.files == NULL) pb_error_set(err, PB_ENOMEM, "out of memory");
    cJSON_Delete(inv);
    return NULL;
  }
  return inv;
}

int pb__inventory_check(const char *path, const cJSON *inv, const char *manifest,
                        struct pb_error *err) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT) return PB_OK;
    return pb_error_set(err, -errno, "%s: %s", path, strerror(errno));
  }
  const cJSON *kind = cJSON_GetObjectItemCaseSensitive(inv, "kind");
  const char *k = cJSON_IsString(kind) ? kind->valuestring : "";
  if (S_ISREG(st.st_mode)) {
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(inv, "size");
    if (strcmp(k, "file") != 0 || !cJSON_IsNumber(size))
      return pb_error_set(err, PB_EIO,
                          "%s exists and %s%s says pipebench wrote it; refusing to replace it "
                          "(move it away, choose another output, or --force to replace a file)",
                          path, manifest ? "nothing in " : "no manifest", manifest ? manifest : "");
    if (size->valuedouble != (double)st.st_size)
      return pb_error_set(err, PB_EIO,
                          "%s is %lld bytes, not the %.0f bytes pipebench wrote (%s); it was "
                          "changed since, so it is not replaced (--force replaces a file)",
                          path, (long long)st.st_size, size->valuedouble, manifest ? manifest : "");
    return PB_OK;
  }
  if (!S_ISDIR(st.st_mode))
    return pb_error_set(err, PB_EIO, "%s is %s, which pipebench did not write; refusing to replace it",
                        path, S_ISLNK(st.st_mode) ? "a symbolic link" : pb_file_kind(st.st_mode));
  const cJSON *files = strcmp(k, "folder") == 0 ? cJSON_GetObjectItemCaseSensitive(inv, "files") : NULL;
  walk w = {.root = path, .manifest = manifest, .err = err};
  size_t cap = (size_t)(cJSON_IsObject(files) ? cJSON_GetArraySize(files) : 0);
  if (cap > 0) {
    w.listed = malloc(cap * sizeof *w.listed);
    if (w.listed == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, files) {
      if (!cJSON_IsNumber(e) || e->string == NULL) continue;
      w.listed[w.n++] = (listed){e->string, e->valuedouble};
    }
    qsort(w.listed, w.n, sizeof *w.listed, cmp_listed);
  }
  int rc = walk_tree(&w, 0);
  free(w.listed);
  return rc;
}
