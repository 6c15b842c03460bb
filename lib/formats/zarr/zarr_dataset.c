/* The ome-zarr backend's reader: a folder of OME-Zarr image groups (or one group), Zarr v2 +
 * NGFF 0.4 or Zarr v3 + NGFF 0.5. Metadata is parsed once per image, on first use. */
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
#include "formats/zarr/zarr_internal.h"

typedef struct zimg {
  char *name;  /* folder name, e.g. img_00000.zarr */
  char *dir;   /* the group's path */
  int loaded;
  int tried;   /* its metadata was asked for or read ahead, whether that worked or not */
  char *adir;  /* the full-resolution array's folder */
  pb__zarr_array arr;
  double phys[3];
  char unit[3][16];
  int n_channels;
  pb_channel *channels;
} zimg;

typedef struct zstate {
  char *root;
  zimg *imgs;
  int64_t n;
  pb__zarr_scratch s;
  unsigned char *bits; /* list_chunks: which chunk files of a region exist */
  size_t bits_cap;
  char path[4096];
  int adir_fd;     /* the array folder of image adir_img, open, or -1: chunks open beneath it */
  int64_t adir_img;
  pb_read_options ro; /* how chunk files are read */
  int64_t last;       /* the image metadata was last asked for */
  int run;            /* how many images in a row were asked for in index order before it */
} zstate;

static int exists(const char *dir, const char *name) {
  char p[4096];
  if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) return 0;
  return access(p, F_OK) == 0;
}

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A group whose attributes hold multiscales: one image rather than a folder of them. 1 yes, 0
 * no, or an error naming attributes that cannot be read (not a regular file, too large). */
static int is_image_group(const char *dir, const pb_read_options *ro, struct pb_error *err) {
  const char *files[] = {".zattrs", "zarr.json"};
  for (int i = 0; i < 2; i++) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s/%s", dir, files[i]) >= (int)sizeof p) return 0;
    void *data;
    size_t n;
    int rc = pb__io_read_file(p, ro, PB__META_MAX_BYTES, &data, &n, err);
    if (rc == PB_ENOTFOUND) continue;
    if (rc != PB_OK) return rc;
    int found = memmem(data, n, "\"multiscales\"", 13) != NULL;
    pb_free(data, n);
    if (found) return 1;
  }
  return 0;
}

/* Is dir/name a regular file? */
static int has_file(const char *dir, const char *name) {
  char p[4096];
  struct stat st;
  if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) return 0;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* A Zarr group is recognised from its own metadata files; a folder of images from image groups
 * among its top-level entries (folders holding .zattrs or zarr.json). Nothing deeper is looked
 * at, so a folder that merely contains datasets somewhere below it is not one. */
int pb__zarr_probe(const char *path) {
  if (!is_dir(path)) return 0;
  if (has_file(path, ".zattrs") || has_file(path, "zarr.json") || has_file(path, ".zgroup"))
    return 90;
  DIR *d = opendir(path);
  if (d == NULL) return 0;
  int score = 0, looked = 0;
  struct dirent *e;
  while (score == 0 && looked < 4096 && (e = readdir(d)) != NULL) {
    looked++;
    size_t n = strlen(e->d_name);
    if (e->d_name[0] == '.' || n <= 5 || strcmp(e->d_name + n - 5, ".zarr") != 0) continue;
    char child[4096];
    if (snprintf(child, sizeof child, "%s/%s", path, e->d_name) >= (int)sizeof child) continue;
    if (is_dir(child) && (has_file(child, ".zattrs") || has_file(child, "zarr.json"))) score = 80;
  }
  closedir(d);
  return score;
}

static void zarr_close(void *state) {
  zstate *st = state;
  if (st == NULL) return;
  for (int64_t i = 0; i < st->n; i++) {
    free(st->imgs[i].name);
    free(st->imgs[i].dir);
    free(st->imgs[i].adir);
    free(st->imgs[i].channels);
  }
  free(st->imgs);
  free(st->root);
  if (st->adir_fd >= 0) close(st->adir_fd);
  pb_free(st->bits, st->bits_cap);
  pb__zarr_scratch_destroy(&st->s);
  free(st);
}

static int add_image(zstate *st, size_t *cap, const char *name, const char *dir) {
  if ((size_t)st->n == *cap) {
    size_t ncap = *cap ? *cap * 2 : 16;
    zimg *v = realloc(st->imgs, ncap * sizeof *v);
    if (v == NULL) return PB_ENOMEM;
    st->imgs = v;
    *cap = ncap;
  }
  zimg *im = &st->imgs[st->n];
  memset(im, 0, sizeof *im);
  im->name = strdup(name);
  im->dir = strdup(dir);
  st->n++;
  if (im->name == NULL || im->dir == NULL) return PB_ENOMEM;
  return PB_OK;
}

static int zarr_open(const char *path, const pb_read_options *opts, void **state,
                     struct pb_error *err) {
  *state = NULL;
  int url = pb__io_is_url(path);
  if (!url && !is_dir(path))
    return pb_error_set(err, PB_EFORMAT, "%s: not a folder (an OME-Zarr dataset is a folder)", path);
  zstate *st = calloc(1, sizeof *st);
  if (st == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  st->root = strdup(path);
  st->adir_fd = -1;
  st->ro = *opts;
  st->last = -2;
  size_t cap = 0;
  int rc = is_image_group(path, &st->ro, err);
  if (rc < 0) {
    zarr_close(st);
    return rc;
  }
  if (rc == 1) {
    rc = PB_OK;
    const char *slash = strrchr(path, '/');
    const char *base = slash != NULL && slash[1] != '\0' ? slash + 1 : path;
    rc = add_image(st, &cap, base, path);
  } else {
    char **names;
    size_t count;
    rc = url ? pb__io_list(path, &st->ro, &names, &count, err)
             : pb__list_dir(path, &names, &count, err);
    if (rc != PB_OK) {
      zarr_close(st);
      return rc;
    }
    for (size_t i = 0; i < count && rc == PB_OK; i++) {
      if (names[i][0] == '.') continue;
      char child[4096];
      if (snprintf(child, sizeof child, "%s/%s", path, names[i]) >= (int)sizeof child) continue;
      if (url) { /* a listing costs a request per look: the names say which are images */
        size_t nl = strlen(names[i]);
        if (nl > 5 && strcmp(names[i] + nl - 5, ".zarr") == 0) rc = add_image(st, &cap, names[i], child);
        continue;
      }
      if (!is_dir(child)) continue;
      if (!exists(child, ".zattrs") && !exists(child, "zarr.json")) continue;
      rc = pb__entry_inside(path, names[i], "the dataset folder", err);
      if (rc == PB_OK) rc = add_image(st, &cap, names[i], child);
    }
    pb__free_names(names, count);
  }
  if (rc == PB_ENOMEM) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  if (rc == PB_OK && st->n == 0)
    rc = pb_error_set(err, PB_EFORMAT,
                      "%s: no OME-Zarr images found (expected image groups: folders holding "
                      ".zattrs + .zgroup (Zarr v2) or zarr.json (Zarr v3) with multiscales)",
                      path);
  if (rc != PB_OK) {
    zarr_close(st);
    return rc;
  }
  *state = st;
  return PB_OK;
}

/* A second handle: the image list and every image's parsed metadata copied, so a loader's
 * reader threads start without fetching .zattrs and .zarray again (two requests per image over
 * a URL); scratch buffers and the open array folder are the clone's own. */
static int zarr_clone(const void *state, void **out, struct pb_error *err) {
  const zstate *src = state;
  *out = NULL;
  zstate *st = calloc(1, sizeof *st);
  if (st == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  st->adir_fd = -1;
  st->ro = src->ro;
  st->last = -2;
  st->root = strdup(src->root);
  st->imgs = src->n > 0 ? calloc((size_t)src->n, sizeof *st->imgs) : NULL;
  int ok = st->root != NULL && (src->n == 0 || st->imgs != NULL);
  for (int64_t i = 0; ok && i < src->n; i++) {
    const zimg *a = &src->imgs[i];
    zimg *b = &st->imgs[i];
    *b = *a;
    b->name = b->dir = b->adir = NULL;
    b->channels = NULL;
    st->n = i + 1; /* what zarr_close frees */
    b->name = strdup(a->name);
    b->dir = strdup(a->dir);
    b->adir = a->adir != NULL ? strdup(a->adir) : NULL;
    if (a->n_channels > 0) {
      b->channels = malloc((size_t)a->n_channels * sizeof *b->channels);
      if (b->channels != NULL)
        memcpy(b->channels, a->channels, (size_t)a->n_channels * sizeof *b->channels);
    }
    ok = b->name != NULL && b->dir != NULL && (a->adir == NULL || b->adir != NULL) &&
         (a->n_channels == 0 || b->channels != NULL);
  }
  if (!ok) {
    zarr_close(st);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  *out = st;
  return PB_OK;
}

static int64_t zarr_count(void *state) { return ((zstate *)state)->n; }

static int read_json(const char *path, const pb_read_options *ro, char **data, size_t *n,
                     struct pb_error *err) {
  void *p = NULL;
  *data = NULL;
  int rc = pb__io_read_file(path, ro, PB__META_MAX_BYTES, &p, n, err);
  if (rc == PB_ENOTFOUND) return pb_error_set(err, PB_EFORMAT, "%s: missing", path);
  *data = p;
  return rc;
}

/* The image size the array metadata claims, before anything is allocated for it. A missing
 * chunk reads as the fill value, so the chunks on disk bound nothing: the claim is held to
 * pb__max_image_bytes() (64 GiB unless PIPEBENCH_MAX_IMAGE_BYTES says otherwise). */
static int check_claimed_size(const pb__zarr_array *a, const char *label, struct pb_error *err) {
  int64_t px, bytes, limit = pb__max_image_bytes();
  int fits = pb__prod_i64_ok(a->fshape, (size_t)a->ndim, &px) &&
             pb__mul_i64_ok(px, (int64_t)a->esize, &bytes);
  if (fits && bytes <= limit) return PB_OK;
  char shape[160], claim[48];
  if (fits) snprintf(claim, sizeof claim, "%lld bytes", (long long)bytes);
  else snprintf(claim, sizeof claim, "more than 2^63 bytes");
  size_t len = 0;
  for (int d = 0; d < a->ndim && len < sizeof shape; d++)
    len += (size_t)snprintf(shape + len, sizeof shape - len, "%s%lld", d ? ", " : "",
                            (long long)a->fshape[d]);
  return pb_error_set(err, PB_EUNSUPPORTED,
                      "%s: shape [%s] of %s claims %s, more than the %lld bytes pipebench "
                      "believes before reading (PIPEBENCH_MAX_IMAGE_BYTES; docs/formats.md)",
                      label, shape, pb_dtype_name(a->dtype), claim, (long long)limit);
}

/* rel stays beneath the folder it is joined to: not absolute, no ".." component, no query. */
static int url_inside(const char *rel) {
  if (rel[0] == '/' || strpbrk(rel, "?#\\") != NULL) return 0;
  for (const char *q = rel; *q != '\0';) {
    size_t len = strcspn(q, "/");
    if (len == 2 && q[0] == '.' && q[1] == '.') return 0;
    q += len + (q[len] == '/');
  }
  return 1;
}

static int load_meta(zimg *im, const pb_read_options *ro, struct pb_error *err) {
  char p[4096];
  char *json = NULL;
  size_t n = 0;
  int version;
  if (pb__io_is_url(im->dir)) { /* one request: .zattrs, else zarr.json */
    void *d = NULL;
    version = 2;
    snprintf(p, sizeof p, "%s/.zattrs", im->dir);
    int rc = pb__io_read_file(p, ro, PB__META_MAX_BYTES, &d, &n, err);
    if (rc == PB_ENOTFOUND) {
      version = 3;
      snprintf(p, sizeof p, "%s/zarr.json", im->dir);
      rc = pb__io_read_file(p, ro, PB__META_MAX_BYTES, &d, &n, err);
      if (rc == PB_ENOTFOUND)
        rc = pb_error_set(err, PB_EFORMAT, "%s: missing (nor is there a .zattrs beside it)", p);
    }
    PB_RETURN_NOT_OK(rc);
    json = d;
  } else {
    version = exists(im->dir, ".zattrs") ? 2 : 3;
    snprintf(p, sizeof p, "%s/%s", im->dir, version == 2 ? ".zattrs" : "zarr.json");
    PB_RETURN_NOT_OK(read_json(p, ro, &json, &n, err));
  }
  pb__zarr_ome *ome = malloc(sizeof *ome);
  if (ome == NULL) {
    pb_free(json, n);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  int rc = pb__zarr_parse_ome(json, n, version, p, ome, err);
  pb_free(json, n);
  if (rc == PB_OK && !pb__io_is_url(im->dir))
    rc = pb__entry_inside(im->dir, ome->path, "the image group", err);
  else if (rc == PB_OK && !url_inside(ome->path)) /* a URL has no links: its path says it */
    rc = pb_error_set(err, PB_EFORMAT,
                      "%s: the array path '%s' leads outside the image group %s; pipebench reads "
                      "only what lies inside the dataset", p, ome->path, im->dir);
  if (rc == PB_OK) {
    char adir[4096];
    snprintf(adir, sizeof adir, "%s/%s", im->dir, ome->path);
    snprintf(p, sizeof p, "%s/%s", adir, version == 2 ? ".zarray" : "zarr.json");
    rc = read_json(p, ro, &json, &n, err);
    if (rc == PB_OK) {
      rc = pb__zarr_parse_array(json, n, version, p, &im->arr, err);
      pb_free(json, n);
    }
    if (rc == PB_OK) rc = pb__zarr_map_axes(&im->arr, ome, p, err);
    if (rc == PB_OK) rc = check_claimed_size(&im->arr, p, err);
    if (rc == PB_OK) rc = pb__zarr_check_grid(&im->arr, p, err);
    if (rc == PB_OK) {
      free(im->adir);
      im->adir = strdup(adir);
      if (im->adir == NULL) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    }
  }
  if (rc == PB_OK) {
    memset(im->phys, 0, sizeof im->phys);
    memset(im->unit, 0, sizeof im->unit);
    for (int d = 0; d < im->arr.ndim && d < ome->naxes; d++) {
      int ax = im->arr.axis[d];
      if (ax < PB_Z) continue;
      int slot = PB_X - ax; /* x, y, z */
      if (ome->unit[d][0] != '\0' || ome->scale[d] != 1.0) {
        im->phys[slot] = ome->scale[d];
        snprintf(im->unit[slot], sizeof im->unit[slot], "%s", ome->unit[d]);
      }
    }
    free(im->channels);
    im->channels = NULL;
    im->n_channels = 0;
    if (ome->n_channels > 0) {
      im->channels = malloc((size_t)ome->n_channels * sizeof *im->channels);
      if (im->channels == NULL) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
      else {
        memcpy(im->channels, ome->channels, (size_t)ome->n_channels * sizeof *im->channels);
        im->n_channels = ome->n_channels;
      }
    }
  }
  free(ome);
  return rc;
}

/* One image's metadata on a read-ahead thread: a failure is left for the foreground's load of
 * that image, which reports it as a load one image at a time would. */
static void ahead_one(void *ctx, int64_t i) {
  zstate *st = ctx;
  struct pb_error e;
  if (load_meta(&st->imgs[i], &st->ro, &e) == PB_OK) st->imgs[i].loaded = 1;
}

/* A scan in index order (image i right after images i - 2 and i - 1; the same image asked for
 * again, as a read after its meta, breaks no run) over a URL: the metadata of the next images
 * not yet tried are fetched at once, meta_in_flight of them (default 32) in flight, instead of
 * one image after another. Random reads fetch only their own images' metadata (two neighbours
 * in a row by chance is rare; one is not). */
static void read_ahead(zstate *st, int64_t i) {
  if (i == st->last) return;
  st->run = i > 0 && st->last == i - 1 ? st->run + 1 : 0;
  st->last = i;
  if (st->run < 2 || st->imgs[i].tried || !pb__io_is_url(st->root)) return;
  int64_t n = 0, most = pb__meta_ahead_images(&st->ro);
  while (i + n < st->n && n < most && !st->imgs[i + n].tried) st->imgs[i + n++].tried = 1;
  pb__meta_ahead(&st->ro, st, i, n, ahead_one);
}

static int load_image(zstate *st, int64_t i, zimg **out, struct pb_error *err) {
  zimg *im = &st->imgs[i];
  read_ahead(st, i);
  if (!im->loaded) {
    im->tried = 1;
    int rc = load_meta(im, &st->ro, err);
    if (rc != PB_OK) {
      pb_error_prefix(err, "image %lld: ", (long long)i);
      return rc;
    }
    im->loaded = 1;
  }
  *out = im;
  return PB_OK;
}

static int zarr_shape(void *state, int64_t i, pb_dtype *dtype, int64_t shape[PB_NDIM],
                      struct pb_error *err) {
  zimg *im;
  PB_RETURN_NOT_OK(load_image(state, i, &im, err));
  *dtype = im->arr.dtype;
  memcpy(shape, im->arr.shape, sizeof im->arr.shape);
  return PB_OK;
}

static int zarr_meta(void *state, int64_t i, pb_image_meta *out, struct pb_error *err) {
  zstate *st = state;
  zimg *im;
  PB_RETURN_NOT_OK(load_image(st, i, &im, err));
  pb_image_meta_init(out, im->name, im->arr.dtype, im->arr.shape);
  for (int k = 0; k < 3; k++) {
    out->physical_size[k] = im->phys[k];
    snprintf(out->physical_unit[k], sizeof out->physical_unit[k], "%s", im->unit[k]);
  }
  out->n_channels = im->n_channels;
  if (im->n_channels > 0) memcpy(out->channels, im->channels, (size_t)im->n_channels * sizeof *im->channels);
  return PB_OK;
}

/* The chunk key of grid position g (TCZYX) appended to the array folder, into st->path. */
static int chunk_path(zstate *st, const zimg *im, const int64_t g[PB_NDIM], const char **key) {
  const pb__zarr_array *a = &im->arr;
  size_t len = (size_t)snprintf(st->path, sizeof st->path, "%s/", im->adir);
  if (len >= sizeof st->path) return PB_EINVAL;
  *key = st->path + len;
  if (a->key_prefix_c) {
    st->path[len++] = 'c';
  }
  for (int d = 0; d < a->ndim; d++) {
    if (len + 24 >= sizeof st->path) return PB_EINVAL;
    if (d > 0 || a->key_prefix_c) st->path[len++] = a->sep;
    len += (size_t)snprintf(st->path + len, sizeof st->path - len, "%lld",
                            (long long)g[a->axis[d]]);
  }
  st->path[len] = '\0';
  return PB_OK;
}

/* ---- which chunk files exist ---------------------------------------------------------------- */

/* After this many missing chunk files in one read, the array folder is listed once and the rest
 * of the region's missing chunks cost no system call (a sparse grid of millions of missing
 * chunks once cost one failed open() each). */
#define LIST_AFTER_MISSES 32

/* The chunk files a region may read: one bit per grid cell of its box, set where a file (or
 * anything the open of its key would not call missing) is there. */
typedef struct zlist {
  const pb__zarr_array *a;
  int64_t lo[PB_NDIM], hi[PB_NDIM], stride[PB_NDIM]; /* per file dim */
  unsigned char *bits;
  char path[4096];
} zlist;

static void set_bit(unsigned char *bits, int64_t i) {
  bits[i >> 3] = (unsigned char)(bits[i >> 3] | (1u << (i & 7)));
}

/* Marks every cell whose file dims before d are those of idx: something there that is not what
 * a listing can judge (a file where a folder belongs, a folder it may not list), left to the
 * chunk's own open to report as before. */
static void mark_all(zlist *L, int d, int64_t idx) {
  if (d == L->a->ndim) {
    set_bit(L->bits, idx);
    return;
  }
  for (int64_t v = L->lo[d]; v <= L->hi[d]; v++) mark_all(L, d + 1, idx + (v - L->lo[d]) * L->stride[d]);
}

/* A key's index as chunk_path writes it (canonical decimal), inside the box on file dim d. */
static int key_index(const zlist *L, int d, const char *s, size_t n, int64_t *v) {
  if (n == 0 || n > 18 || (s[0] == '0' && n > 1)) return 0;
  int64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return 0;
    x = x * 10 + (s[i] - '0');
  }
  if (x < L->lo[d] || x > L->hi[d]) return 0;
  *v = x;
  return 1;
}

/* Keys with '/' separators: folder L->path (len bytes) holds token t on (t counts the "c" of
 * v3 keys); idx has the bits of the dims before it. Only names inside the box are followed, so
 * the walk visits at most the box's cells plus what the folders hold. */
static void walk_nested(zlist *L, size_t len, int t, int64_t idx) {
  const pb__zarr_array *a = L->a;
  int pre = a->key_prefix_c, last = a->ndim + pre - 1, d = t - pre;
  DIR *dir = opendir(L->path);
  if (dir == NULL) {
    if (errno != ENOENT) mark_all(L, d < 0 ? 0 : d, idx);
    return;
  }
  struct dirent *e;
  while ((e = readdir(dir)) != NULL) {
    size_t n = strlen(e->d_name);
    int64_t v = 0, next = idx;
    if (d < 0) {
      if (strcmp(e->d_name, "c") != 0) continue;
    } else {
      if (!key_index(L, d, e->d_name, n, &v)) continue;
      next += (v - L->lo[d]) * L->stride[d];
    }
    if (t == last) {
      set_bit(L->bits, next);
      continue;
    }
    if (len + 1 + n >= sizeof L->path) {
      mark_all(L, d + 1, next);
      continue;
    }
    L->path[len] = '/';
    memcpy(L->path + len + 1, e->d_name, n + 1);
    int folder = e->d_type == DT_DIR;
    if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
      struct stat st;
      if (stat(L->path, &st) == 0) folder = S_ISDIR(st.st_mode);
      else if (errno == ENOENT) folder = -1; /* a dangling link: its chunks are missing */
    }
    if (folder == 1) walk_nested(L, len + 1 + n, t + 1, next);
    else if (folder == 0) mark_all(L, d + 1, next);
    L->path[len] = '\0';
  }
  closedir(dir);
}

/* Keys with '.' separators: one folder of names "[c.]i.j.k". */
static void walk_flat(zlist *L) {
  const pb__zarr_array *a = L->a;
  DIR *dir = opendir(L->path);
  if (dir == NULL) {
    if (errno != ENOENT) mark_all(L, 0, 0);
    return;
  }
  struct dirent *e;
  while ((e = readdir(dir)) != NULL) {
    const char *p = e->d_name;
    if (a->key_prefix_c) {
      if (p[0] != 'c' || p[1] != a->sep) continue;
      p += 2;
    }
    int64_t idx = 0;
    int d = 0;
    for (; d < a->ndim; d++) {
      const char *q = strchr(p, a->sep);
      size_t n = q != NULL ? (size_t)(q - p) : strlen(p);
      int64_t v;
      if ((q != NULL) != (d < a->ndim - 1) || !key_index(L, d, p, n, &v)) break;
      idx += (v - L->lo[d]) * L->stride[d];
      p += n + (q != NULL);
    }
    if (d == a->ndim) set_bit(L->bits, idx);
  }
  closedir(dir);
}

/* Lists the chunk files of the box g0..g1 (TCZYX) into st->bits, with the TCZYX strides. */
static int list_chunks(zstate *st, const zimg *im, const int64_t g0[PB_NDIM],
                       const int64_t g1[PB_NDIM], const int64_t stride[PB_NDIM], int64_t cells,
                       struct pb_error *err) {
  size_t bytes = (size_t)(cells + 7) / 8;
  if (pb__zarr_reserve(&st->bits, &st->bits_cap, bytes) != PB_OK)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  memset(st->bits, 0, bytes);
  zlist *L = malloc(sizeof *L);
  if (L == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  L->a = &im->arr;
  L->bits = st->bits;
  for (int d = 0; d < im->arr.ndim; d++) {
    int k = im->arr.axis[d];
    L->lo[d] = g0[k];
    L->hi[d] = g1[k];
    L->stride[d] = stride[k];
  }
  snprintf(L->path, sizeof L->path, "%s", im->adir);
  if (im->arr.sep == '/') walk_nested(L, strlen(L->path), 0, 0);
  else walk_flat(L);
  free(L);
  return PB_OK;
}

/* A chunk (or shard) over a URL, into st->path's place: not found is a missing chunk (the fill
 * value, PB_ENOTFOUND returned once placed). */
static int read_url_chunk(zstate *st, const pb__zarr_array *a, const int64_t g[PB_NDIM],
                          const pb_region *region, void *dst, pb_stage_times *times, int64_t t0,
                          struct pb_error *err) {
  struct pb_error e2;
  int covers = 1; /* does the region need all of this unit (every inner chunk of a shard)? */
  for (int k = 0; k < PB_NDIM && a->sharded; k++) {
    int64_t so = g[k] * a->chunk[k], end = so + a->chunk[k] < a->shape[k] ? so + a->chunk[k]
                                                                          : a->shape[k];
    covers = covers && region->start[k] <= so && region->start[k] + region->count[k] >= end;
  }
  /* a chunk, or a shard the region needs all of: the whole object in one request (a shard read
   * in part: its size, its index, then the chunks' ranges) */
  if (covers) {
    void *data = NULL;
    size_t size = 0;
    int rc = pb__io_read_file(st->path, &st->ro, (size_t)a->max_stored, &data, &size, &e2);
    if (rc == PB_ENOTFOUND) {
      rc = pb__zarr_place_unit(a, &st->s, NULL, g, region, dst, times, err);
      return rc == PB_OK ? PB_ENOTFOUND : rc;
    }
    if (rc != PB_OK) {
      if (err != NULL) *err = e2;
      return rc;
    }
    if (times != NULL) times->read_ns += pb_now_ns() - t0;
    pb__zarr_src src = {NULL, data, size};
    rc = pb__zarr_place_unit(a, &st->s, &src, g, region, dst, times, err);
    pb_free(data, size);
    return rc;
  }
  pb__io_file *f = NULL;
  int rc = pb__io_open(st->path, &st->ro, &f, &e2);
  if (rc == PB_ENOTFOUND) {
    rc = pb__zarr_place_unit(a, &st->s, NULL, g, region, dst, times, err);
    return rc == PB_OK ? PB_ENOTFOUND : rc;
  }
  if (rc != PB_OK) {
    if (err != NULL) *err = e2;
    return rc;
  }
  if ((int64_t)pb__io_size(f) > a->max_stored) {
    rc = pb_error_set(err, PB_EFORMAT,
                      "%s: %s of %llu bytes, more than the %lld its decoded size can take "
                      "encoded", st->path, a->sharded ? "shard" : "chunk",
                      (unsigned long long)pb__io_size(f), (long long)a->max_stored);
  } else {
    if (times != NULL) times->read_ns += pb_now_ns() - t0;
    pb__zarr_src src = {NULL, NULL, (size_t)pb__io_size(f)};
    src.file = f;
    rc = pb__zarr_place_unit(a, &st->s, &src, g, region, dst, times, err);
  }
  pb__io_close(f);
  return rc;
}

/* A chunk is a regular file of at most what its decoded size can need once encoded: a link to
 * /dev/zero or a FIFO is refused, not read without end. Closes fd when it refuses. */
static int check_chunk_file(const zstate *st, const pb__zarr_array *a, int64_t i, const char *key,
                            int fd, struct stat *sb, struct pb_error *err) {
  const char *unit = a->sharded ? "shard" : "chunk";
  int rc = PB_OK;
  if (fstat(fd, sb) != 0)
    rc = pb_error_set(err, PB_EIO, "%s (image %lld): cannot stat: %s", st->path, (long long)i,
                      strerror(errno));
  else if (!S_ISREG(sb->st_mode))
    rc = pb_error_set(err, PB_EIO, "%s (image %lld, chunk %s) is %s, not a %s file", st->path,
                      (long long)i, key, pb__file_kind(sb->st_mode), unit);
  else if ((int64_t)sb->st_size > a->max_stored)
    rc = pb_error_set(err, PB_EFORMAT,
                      "%s (image %lld, chunk %s): %s file of %lld bytes, more than the %lld its "
                      "decoded size can take encoded",
                      st->path, (long long)i, key, unit, (long long)sb->st_size,
                      (long long)a->max_stored);
  if (rc != PB_OK) close(fd);
  return rc;
}

static int zarr_read(void *state, int64_t i, const pb_region *region, void *dst, size_t dst_size,
                     pb_stage_times *times, struct pb_error *err) {
  zstate *st = state;
  zimg *im;
  PB_RETURN_NOT_OK(load_image(st, i, &im, err));
  const pb__zarr_array *a = &im->arr;
  pb_region full;
  if (region == NULL) { /* region and dst_size: checked by format.c against this shape */
    pb__region_full(&full, a->shape);
    region = &full;
  }
  (void)dst_size;
  size_t need = a->esize;
  for (int k = 0; k < PB_NDIM; k++) need *= (size_t)region->count[k];
  int64_t g0[PB_NDIM], g1[PB_NDIM], g[PB_NDIM], stride[PB_NDIM];
  for (int k = 0; k < PB_NDIM; k++) {
    g0[k] = region->start[k] / a->chunk[k];
    g1[k] = (region->start[k] + region->count[k] - 1) / a->chunk[k];
    g[k] = g0[k];
  }
  stride[PB_X] = 1;
  for (int k = PB_X - 1; k >= 0; k--) stride[k] = stride[k + 1] * (g1[k + 1] - g0[k + 1] + 1);
  int64_t cells = stride[0] * (g1[0] - g0[0] + 1), misses = 0;
  int listed = 0;
  for (;;) {
    if (listed) { /* a run of missing chunks along x: one fill, no system call */
      int64_t bit = 0, run = 0;
      for (int k = 0; k < PB_NDIM; k++) bit += (g[k] - g0[k]) * stride[k];
      while (g[PB_X] + run <= g1[PB_X] && !(st->bits[(bit + run) >> 3] & (1u << ((bit + run) & 7))))
        run++;
      if (run > 0) {
        int64_t t0 = pb_now_ns();
        pb__zarr_fill_units(a, g, run, region, dst);
        if (times != NULL) times->decode_ns += pb_now_ns() - t0;
        g[PB_X] += run - 1;
        goto next;
      }
    }
    const char *key;
    if (chunk_path(st, im, g, &key) != PB_OK)
      return pb_error_set(err, PB_EINVAL, "image %lld: chunk path too long", (long long)i);
    int64_t t0 = pb_now_ns();
    if (pb__io_is_url(im->adir)) {
      int rc = read_url_chunk(st, a, g, region, dst, times, t0, err);
      if (rc == PB_ENOTFOUND) rc = PB_OK;
      if (rc != PB_OK) {
        pb_error_prefix(err, "image %lld, chunk %s: ", (long long)i, key);
        return rc;
      }
      goto next;
    }
    if (st->adir_fd < 0 || st->adir_img != i) {
      if (st->adir_fd >= 0) close(st->adir_fd);
      st->adir_img = i;
      st->adir_fd = open(im->adir, O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (st->adir_fd < 0)
        return pb_error_set(err, PB_EIO, "%s (image %lld): cannot open: %s", im->adir,
                            (long long)i, strerror(errno));
    }
    /* Beneath the array's folder: a chunk that is a link out of it is not the dataset's. */
    int fd = pb__open_beneath(st->adir_fd, key, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    int rc = PB_OK;
    if (fd < 0 && (errno == EXDEV || errno == ELOOP))
      return pb_error_set(err, PB_EFORMAT,
                          "%s (image %lld): leads outside the array folder %s (a symbolic link "
                          "points elsewhere); pipebench reads only what lies inside the dataset",
                          st->path, (long long)i, im->adir);
    if (fd < 0) {
      if (errno != ENOENT)
        return pb_error_set(err, PB_EIO, "%s (image %lld): cannot open: %s", st->path,
                            (long long)i, strerror(errno));
      rc = pb__zarr_place_unit(a, &st->s, NULL, g, region, dst, times, err);
      if (!listed && ++misses >= LIST_AFTER_MISSES) {
        PB_RETURN_NOT_OK(list_chunks(st, im, g0, g1, stride, cells, err));
        listed = 1;
      }
    } else {
      struct stat sb;
      PB_RETURN_NOT_OK(check_chunk_file(st, a, i, key, fd, &sb, err));
      if (times != NULL) times->read_ns += pb_now_ns() - t0;
      pb__zarr_src src = {NULL, NULL, (size_t)sb.st_size};
      rc = pb__io_file_from_fd(fd, st->path, &st->ro, &sb, &src.file, err);
      if (rc == PB_OK) rc = pb__zarr_place_unit(a, &st->s, &src, g, region, dst, times, err);
      pb__io_close(src.file);
    }
    if (rc != PB_OK) {
      pb_error_prefix(err, "%s (image %lld, chunk %s): ", st->path, (long long)i, key);
      return rc;
    }
  next:;
    int k = PB_NDIM - 1;
    while (k >= 0 && ++g[k] > g1[k]) {
      g[k] = g0[k];
      k--;
    }
    if (k < 0) break;
  }
  if (times != NULL) times->bytes_decoded += (int64_t)need;
  return PB_OK;
}

static const char *const zarr_options[] = {"zarr=2|3", "separator=/|.", "shard=TxCxZxYxX",
                                           "shuffle=none|byte|bit", NULL};

const pb_format_vtable pb__format_ome_zarr = {
    .info = {"ome-zarr", "OME-Zarr images: Zarr v2 + NGFF 0.4 or Zarr v3 + NGFF 0.5 (own codec)", 1,
             1},
    .probe = pb__zarr_probe,
    .open = zarr_open,
    .close = zarr_close,
    .count = zarr_count,
    .meta = zarr_meta,
    .shape = zarr_shape,
    .read = zarr_read,
    .clone = zarr_clone,
    .writer_open = pb__zarr_writer_open,
    .writer_add = pb__zarr_writer_add,
    .writer_finish = pb__zarr_writer_finish,
    .writer_free = pb__zarr_writer_free,
    .write_options = zarr_options,
};
