/* Folder listings over plain HTTP without a JSON index: the manifest that gen or convert wrote
 * beside a dataset lists every file it wrote ("written": {"kind": "folder", "files": {path:
 * bytes}}), so the names under any folder of the dataset follow from it. Looked for, from the
 * folder upwards: FOLDER.manifest.json (convert's), then PARENT/manifest.json naming FOLDER
 * among what it wrote (gen's), then FOLDER/manifest.json (a folder gen wrote: its datasets).
 * Manifests fetched are kept for the process (a few, by URL), so listing the folders of one
 * dataset costs their requests once. */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "io/http.h"

#define MAX_MANIFEST (64u << 20)
#define KEPT 8
#define MAX_UP 8 /* folders walked upwards */

typedef struct kept {
  char *url;
  cJSON *json; /* NULL: not there (or not JSON) */
} kept;

static kept cache[KEPT];
static size_t cache_next;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

/* The manifest at url, parsed (the caller's: cJSON_Delete), or NULL when there is none; a
 * failure to reach the server is an error. */
static int fetch(const char *url, const pb_read_options *opts, cJSON **out,
                 struct pb_error *err) {
  *out = NULL;
  pthread_mutex_lock(&cache_lock);
  for (size_t i = 0; i < KEPT; i++)
    if (cache[i].url != NULL && strcmp(cache[i].url, url) == 0) {
      *out = cache[i].json != NULL ? cJSON_Duplicate(cache[i].json, 1) : NULL;
      pthread_mutex_unlock(&cache_lock);
      return PB_OK;
    }
  pthread_mutex_unlock(&cache_lock);
  char *shown = pb__http_mask(url);
  if (shown == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  long status = 0;
  char *body = NULL;
  int rc = pb__http_request(url, shown, opts, NULL, 1, &status, &body, MAX_MANIFEST, NULL, NULL,
                            err);
  free(shown);
  if (rc != PB_OK) return rc;
  cJSON *j = status == 200 && body != NULL ? cJSON_Parse(body) : NULL;
  free(body);
  if (j != NULL && !cJSON_IsObject(j)) {
    cJSON_Delete(j);
    j = NULL;
  }
  char *key = strdup(url);
  if (key == NULL) {
    cJSON_Delete(j);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  pthread_mutex_lock(&cache_lock);
  kept *k = &cache[cache_next++ % KEPT];
  free(k->url);
  cJSON_Delete(k->json);
  k->url = key;
  k->json = j;
  *out = j != NULL ? cJSON_Duplicate(j, 1) : NULL;
  pthread_mutex_unlock(&cache_lock);
  return PB_OK;
}

/* "files" of a "written" entry of kind folder, or NULL. */
static const cJSON *folder_files(const cJSON *written) {
  const cJSON *kind = cJSON_GetObjectItemCaseSensitive(written, "kind");
  const cJSON *files = cJSON_GetObjectItemCaseSensitive(written, "files");
  return cJSON_IsString(kind) && strcmp(kind->valuestring, "folder") == 0 &&
                 cJSON_IsObject(files)
             ? files
             : NULL;
}

static int add_name(char ***v, size_t *n, size_t *cap, const char *s, size_t len) {
  for (size_t i = 0; i < *n; i++)
    if (strlen((*v)[i]) == len && strncmp((*v)[i], s, len) == 0) return PB_OK;
  if (*n == *cap) {
    size_t c = *cap ? *cap * 2 : 16;
    char **w = realloc(*v, c * sizeof *w);
    if (w == NULL) return PB_ENOMEM;
    *v = w;
    *cap = c;
  }
  char *d = malloc(len + 1);
  if (d == NULL) return PB_ENOMEM;
  memcpy(d, s, len);
  d[len] = '\0';
  (*v)[(*n)++] = d;
  return PB_OK;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names directly under rel ("" the top) among files' paths. */
static int names_under(const cJSON *files, const char *rel, char ***names, size_t *n) {
  size_t rl = strlen(rel), cap = 0;
  const cJSON *f;
  int rc = PB_OK;
  cJSON_ArrayForEach(f, files) {
    const char *p = f->string;
    if (p == NULL || rc != PB_OK) continue;
    if (rl > 0) {
      if (strncmp(p, rel, rl) != 0 || p[rl] != '/') continue;
      p += rl + 1;
    }
    size_t len = strcspn(p, "/");
    if (len > 0) rc = add_name(names, n, &cap, p, len);
  }
  if (rc == PB_OK && *n > 1) qsort(*names, *n, sizeof **names, cmp_names);
  return rc;
}

int pb__http_list_manifest(const char *location, const pb_read_options *opts, char ***names,
                           size_t *n, struct pb_error *err) {
  *names = NULL;
  *n = 0;
  size_t ll = strlen(location);
  const char *q = strchr(location, '?');
  if (q != NULL) return PB_ENOTFOUND; /* signed URLs: no manifest beside them to find */
  while (ll > 0 && location[ll - 1] == '/') ll--;
  const char *host = strstr(location, "://");
  if (host == NULL) return PB_ENOTFOUND;
  size_t root = (size_t)(strchr(host + 3, '/') != NULL ? strchr(host + 3, '/') - location
                                                       : (ptrdiff_t)ll);
  char *dir = malloc(ll + 32);
  if (dir == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int rc = PB_ENOTFOUND;
  /* a folder gen wrote: FOLDER/manifest.json lists its datasets */
  snprintf(dir, ll + 32, "%.*s/manifest.json", (int)ll, location);
  cJSON *m = NULL;
  int frc = fetch(dir, opts, &m, err);
  if (frc != PB_OK) rc = frc;
  const cJSON *written = cJSON_GetObjectItemCaseSensitive(m, "written");
  if (frc == PB_OK && cJSON_IsObject(written) && folder_files(written) == NULL) {
    size_t cap = 0;
    rc = add_name(names, n, &cap, "manifest.json", 13);
    const cJSON *e;
    cJSON_ArrayForEach(e, written) {
      if (e->string != NULL && rc == PB_OK && strchr(e->string, '/') == NULL)
        rc = add_name(names, n, &cap, e->string, strlen(e->string));
    }
    if (rc == PB_OK && *n > 1) qsort(*names, *n, sizeof **names, cmp_names);
  }
  cJSON_Delete(m);
  m = NULL;
  /* upwards: A.manifest.json, or PARENT(A)/manifest.json naming A */
  size_t a = ll;
  for (int up = 0; rc == PB_ENOTFOUND && up < MAX_UP && a > root; up++) {
    const cJSON *files = NULL;
    cJSON *m2 = NULL;
    snprintf(dir, ll + 32, "%.*s.manifest.json", (int)a, location);
    if ((frc = fetch(dir, opts, &m, err)) != PB_OK) rc = frc;
    else files = folder_files(cJSON_GetObjectItemCaseSensitive(m, "written"));
    size_t slash = a;
    while (slash > root && location[slash - 1] != '/') slash--;
    if (rc == PB_ENOTFOUND && files == NULL && slash > root) {
      char base[1024];
      snprintf(base, sizeof base, "%.*s", (int)(a - slash), location + slash);
      snprintf(dir, ll + 32, "%.*smanifest.json", (int)slash, location);
      if ((frc = fetch(dir, opts, &m2, err)) != PB_OK) rc = frc;
      else
        files = folder_files(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(m2, "written"), base));
    }
    if (files != NULL) {
      const char *rel = a < ll ? location + a + 1 : "";
      char relbuf[4096];
      snprintf(relbuf, sizeof relbuf, "%.*s", (int)(ll - (a < ll ? a + 1 : ll)), rel);
      rc = names_under(files, relbuf, names, n);
      if (rc == PB_ENOMEM) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
      else if (rc == PB_OK && *n == 0) rc = PB_ENOTFOUND; /* no such folder in the dataset */
    }
    cJSON_Delete(m);
    cJSON_Delete(m2);
    m = NULL;
    if (slash == 0 || slash <= root) break;
    a = slash - 1; /* the parent folder, without its slash */
  }
  free(dir);
  if (rc != PB_OK) {
    pb__io_free_names(*names, *n);
    *names = NULL;
    *n = 0;
  }
  return rc;
}
