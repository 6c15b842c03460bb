/* The imagefolder format: torchvision's ImageFolder layout, one folder per class holding JPEG
 * and PNG files, class index = position of the folder's name in sorted order. Layout, labels
 * and limits: docs/format-imagefolder.md. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/format_internal.h"
#include "formats/imagefolder/if_codec.h"
#include "io/io.h"

#define IF_MAX_DEPTH 16      /* folders below a class folder that are followed */
#define IF_PROBE_ENTRIES 64  /* entries the probe looks at, per folder */

static int has_image_ext(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot != NULL && (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0 ||
                         strcasecmp(dot, ".png") == 0);
}

/* ---- probing ---------------------------------------------------------------------------------- */

/* Does folder dir hold, among its first IF_PROBE_ENTRIES entries, a regular image file? Uses
 * stat only: nothing is opened but the folder itself. */
static int folder_has_image(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return 0;
  int found = 0, seen = 0;
  struct dirent *e;
  while (!found && seen < IF_PROBE_ENTRIES && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' && (e->d_name[1] == '\0' || strcmp(e->d_name, "..") == 0)) continue;
    seen++;
    if (!has_image_ext(e->d_name)) continue;
    struct stat st;
    found = fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISREG(st.st_mode);
  }
  closedir(d);
  return found;
}

static int if_probe(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
  DIR *d = opendir(path);
  if (d == NULL) return 0;
  int classes = 0, seen = 0, top_images = 0;
  struct dirent *e;
  char sub[4096];
  while (seen < IF_PROBE_ENTRIES && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    seen++;
    if (fstatat(dirfd(d), e->d_name, &st, 0) != 0) continue;
    if (S_ISREG(st.st_mode) && has_image_ext(e->d_name)) top_images++;
    if (!S_ISDIR(st.st_mode)) continue;
    snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
    classes += folder_has_image(sub);
  }
  closedir(d);
  /* Images at the top level belong to no class: that is not this layout. */
  return classes > 0 && top_images == 0 ? 60 : 0;
}

/* ---- the listing ------------------------------------------------------------------------------ */

typedef struct if_file {
  char *dir;  /* relative to the root: "class" or "class/sub" */
  char *name; /* file name */
  int64_t label;
} if_file;

/* The real folders already walked, by (device, inode): each is listed once however many links
 * lead to it, so a loop of links ends and a folder linked twice is not counted twice. */
typedef struct if_seen {
  struct if_seen_key {
    dev_t dev;
    ino_t ino;
  } *keys; /* open addressing; ino 0 marks a free slot (no folder has inode 0) */
  size_t cap, n;
} if_seen;

typedef struct if_state {
  char *root;
  char *real_root;    /* the root with every link resolved: nothing outside it is read */
  if_seen seen;
  char **classes;
  size_t n_classes;
  if_file *files;
  int64_t n, cap;
  int64_t ignored;     /* non-image files below class folders and files at the top */
  pb__imagefolder_info *info;   /* per image, kind 0 until its header has been read */
  /* Kept from read to read (a handle serves one thread): the file's bytes and the JPEG
   * decoder, so a sample costs no allocation of its file's size (over glibc's mmap threshold
   * for many photographs: an mmap, page faults and an munmap per image). */
  unsigned char *buf;
  size_t buf_cap;
  pb__imagefolder_jpeg *jpeg;
  pb_read_options ro; /* how image files are read */
  /* Over a URL meta fetches a whole file to learn its size: 1 + the image whose file buf then
   * holds, until the read that follows takes it (one GET per image, not two); 0: none. Any
   * other call in between (meta of another image, a label) drops it, so a read never takes
   * bytes fetched long before (e.g. at a loader's set-up). */
  int64_t held;
  int64_t held_ns; /* the time that fetch took, reported as the read's */
  size_t held_size;
} if_state;

static void if_close(void *p) {
  if_state *s = p;
  if (s == NULL) return;
  for (int64_t i = 0; i < s->n; i++) {
    free(s->files[i].dir);
    free(s->files[i].name);
  }
  free(s->files);
  pb__free_names(s->classes, s->n_classes);
  free(s->info);
  free(s->root);
  free(s->real_root);
  free(s->seen.keys);
  free(s->buf);
  pb__imagefolder_jpeg_free(s->jpeg);
  free(s);
}

static int add_file(if_state *s, const char *dir, const char *name, int64_t label,
                    struct pb_error *err) {
  if (s->n == s->cap) {
    int64_t cap = s->cap ? s->cap * 2 : 1024;
    if_file *f = realloc(s->files, (size_t)cap * sizeof *f);
    if (f == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    s->files = f;
    s->cap = cap;
  }
  if_file *f = &s->files[s->n];
  f->dir = strdup(dir);
  f->name = strdup(name);
  f->label = label;
  if (f->dir == NULL || f->name == NULL) {
    free(f->dir);
    free(f->name);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  s->n++;
  return PB_OK;
}

static size_t seen_slot(const if_seen *v, dev_t dev, ino_t ino) {
  uint64_t h = ((uint64_t)ino * 0x9e3779b97f4a7c15u) ^ ((uint64_t)dev * 0xc2b2ae3d27d4eb4fu);
  size_t i = (size_t)(h ^ (h >> 29)) & (v->cap - 1);
  while (v->keys[i].ino != 0 && (v->keys[i].ino != ino || v->keys[i].dev != dev))
    i = (i + 1) & (v->cap - 1);
  return i;
}

/* Marks folder st as walked: 1 when it is new, 0 when it was walked before, PB_ENOMEM. */
static int seen_add(if_seen *v, const struct stat *st) {
  if (st->st_ino == 0) return 1; /* not trackable (no file system here gives 0): walk it */
  if (v->n * 2 >= v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 64;
    struct if_seen_key *keys = calloc(cap, sizeof *keys);
    if (keys == NULL) return PB_ENOMEM;
    if_seen grown = {keys, cap, 0};
    for (size_t i = 0; i < v->cap; i++)
      if (v->keys[i].ino != 0) {
        grown.keys[seen_slot(&grown, v->keys[i].dev, v->keys[i].ino)] = v->keys[i];
        grown.n++;
      }
    free(v->keys);
    *v = grown;
  }
  size_t i = seen_slot(v, st->st_dev, st->st_ino);
  if (v->keys[i].ino != 0) return 0;
  v->keys[i].dev = st->st_dev;
  v->keys[i].ino = st->st_ino;
  v->n++;
  return 1;
}

/* path, a link, resolved: PB_OK when it stays inside the dataset's folder (the link may then be
 * followed), else an error naming the link and where it leads (a dataset reads nothing outside
 * its folder). *gone: the link leads nowhere (then PB_OK: it is passed over, never read). */
static int check_link(const if_state *s, const char *path, int *gone, struct pb_error *err) {
  *gone = 0;
  char *real = realpath(path, NULL);
  if (real == NULL) {
    if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) {
      *gone = 1;
      return PB_OK;
    }
    return pb_error_set(err, -errno, "%s: cannot resolve the link: %s", path, strerror(errno));
  }
  size_t n = strlen(s->real_root);
  int inside = strncmp(real, s->real_root, n) == 0 &&
               (real[n] == '/' || real[n] == '\0' || (n == 1 && s->real_root[0] == '/'));
  int rc = PB_OK;
  if (!inside)
    rc = pb_error_set(err, PB_EFORMAT,
                      "%s: a link to %s, outside the dataset's folder %s; an image folder reads "
                      "only what lies inside it (copy the files in, or give the folder that "
                      "holds both)",
                      path, real, s->real_root);
  free(real);
  return rc;
}

/* What child (an entry of a class folder, or of the top) is, following a link only when it
 * stays inside the dataset: *st as stat gives it; *skip when it is a link to nothing. files:
 * whether image files are read here (not at the top, where only folders count). */
static int entry_stat(const if_state *s, const char *child, const char *name, int files,
                      struct stat *st, int *skip, struct pb_error *err) {
  *skip = 0;
  if (lstat(child, st) != 0) {
    *skip = 1;
    return PB_OK;
  }
  if (!S_ISLNK(st->st_mode)) return PB_OK;
  if (stat(child, st) != 0) { /* a dangling link (or a loop of links): neither folder nor image */
    *skip = 1;
    return PB_OK;
  }
  /* A link that would not be followed (a non-image file) is passed over unresolved. */
  if (!S_ISDIR(st->st_mode) && !(files && has_image_ext(name))) return PB_OK;
  return check_link(s, child, skip, err);
}

/* Adds the image files of root/rel and of the folders below it (links inside the dataset's
 * folder followed, as torchvision does, to IF_MAX_DEPTH levels). A folder below it is entered
 * only when it has not been walked yet (s->seen, which holds the root and every class folder
 * before any class is walked): each real folder is read once. */
static int walk(if_state *s, const char *rel, int64_t label, int depth, struct pb_error *err) {
  char abs[4096];
  if (snprintf(abs, sizeof abs, "%s/%s", s->root, rel) >= (int)sizeof abs)
    return pb_error_set(err, PB_EINVAL, "%s/%s: path too long", s->root, rel);
  char **names;
  size_t n;
  PB_RETURN_NOT_OK(pb__list_dir(abs, &names, &n, err));
  int rc = PB_OK;
  for (size_t k = 0; k < n && rc == PB_OK; k++) {
    char child[4096];
    snprintf(child, sizeof child, "%s/%s", abs, names[k]);
    struct stat st;
    int skip;
    rc = entry_stat(s, child, names[k], 1, &st, &skip, err);
    if (rc != PB_OK) break;
    if (skip) {
      s->ignored++;
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      if (depth >= IF_MAX_DEPTH) {
        s->ignored++;
        continue;
      }
      char sub[4096];
      if (snprintf(sub, sizeof sub, "%s/%s", rel, names[k]) >= (int)sizeof sub) {
        rc = pb_error_set(err, PB_EINVAL, "%s: path too long", child);
        break;
      }
      int fresh = seen_add(&s->seen, &st);
      if (fresh < 0) {
        rc = pb_error_set(err, PB_ENOMEM, "out of memory");
        break;
      }
      if (fresh) rc = walk(s, sub, label, depth + 1, err);
      else s->ignored++; /* a link to a folder read already (a loop, or a second way in) */
    } else if (has_image_ext(names[k])) {
      /* Not regular (a FIFO named x.jpg): kept, and refused by name when it is read. */
      rc = add_file(s, rel, names[k], label, err);
    } else {
      s->ignored++;
    }
  }
  pb__free_names(names, n);
  return rc;
}

/* torchvision orders a class's files by (folder path, file name) over os.walk's folders. */
static int cmp_files(const void *a, const void *b) {
  const if_file *x = a, *y = b;
  int c = strcmp(x->dir, y->dir);
  return c != 0 ? c : strcmp(x->name, y->name);
}

/* A folder pipebench wrote results into (run, report, infer's plot) has PNG plots in images/
 * beside its tables, which look like classes: the file that shows it, or NULL. */
static const char *results_file(const char *path) {
  static const char *const marks[] = {
      "data/pipebench_summary.json", "data/pipebench_summary_failed.json",
      "data/pipebench_track1.parquet", "data/pipebench_track2.parquet",
      "data/pipebench_track3.parquet", "data/pipebench_track4.parquet",
      "images/pipebench_track1.png", "images/pipebench_track2.png", "images/pipebench_track3.png",
      "images/pipebench_track4.png", "images/pipebench_infer.png"};
  char p[4200];
  struct stat st;
  for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", path, marks[i]);
    if (lstat(p, &st) == 0 && S_ISREG(st.st_mode)) return marks[i];
  }
  return NULL;
}

/* Over a URL: the folder under s->root/rel listed; a name that lists is a folder. 1 when it
 * is a folder (*names, *n set), 0 when it is none (not found), or an error. */
static int url_folder(if_state *s, const char *rel, char ***names, size_t *n,
                      struct pb_error *err) {
  char *abs = rel[0] != '\0' ? pb__io_join(s->root, rel) : strdup(s->root);
  if (abs == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  struct pb_error e2;
  int rc = pb__io_list(abs, &s->ro, names, n, &e2);
  free(abs);
  if (rc == PB_ENOTFOUND || rc == PB_EFORMAT) return 0;
  if (rc != PB_OK) {
    if (err != NULL) *err = e2;
    return rc;
  }
  return 1;
}

/* walk over a URL: image names are files, other names are tried as folders (one listing
 * each); no links to follow. */
static int walk_url(if_state *s, const char *rel, char **names, size_t n, int64_t label,
                    int depth, struct pb_error *err) {
  int rc = PB_OK;
  for (size_t k = 0; k < n && rc == PB_OK; k++) {
    if (has_image_ext(names[k])) {
      rc = add_file(s, rel, names[k], label, err);
      continue;
    }
    char sub[4096];
    char **inner = NULL;
    size_t m = 0;
    int f = 0;
    if (depth < IF_MAX_DEPTH && names[k][0] != '.' &&
        snprintf(sub, sizeof sub, "%s/%s", rel, names[k]) < (int)sizeof sub)
      f = url_folder(s, sub, &inner, &m, err);
    if (f < 0) return f;
    if (f == 1) rc = walk_url(s, sub, inner, m, label, depth + 1, err);
    else s->ignored++;
    pb__io_free_names(inner, m);
  }
  return rc;
}

static int if_open_url(if_state *s, struct pb_error *err) {
  char **names = NULL;
  size_t n = 0;
  int rc = url_folder(s, "", &names, &n, err);
  if (rc == 0) return pb_error_set(err, PB_ENOTFOUND, "%s: not found (or not a folder)", s->root);
  if (rc < 0) return rc;
  rc = PB_OK;
  s->classes = calloc(n ? n : 1, sizeof *s->classes);
  if (s->classes == NULL) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  for (size_t k = 0; k < n && rc == PB_OK; k++) {
    char **inner = NULL;
    size_t m = 0;
    int f = has_image_ext(names[k]) ? 0 : url_folder(s, names[k], &inner, &m, err);
    if (f < 0) {
      rc = f;
      break;
    }
    if (f == 0) {
      s->ignored++;
      continue;
    }
    int64_t first = s->n, label = (int64_t)s->n_classes;
    s->classes[s->n_classes++] = names[k];
    names[k] = NULL;
    rc = walk_url(s, s->classes[label], inner, m, label, 0, err);
    pb__io_free_names(inner, m);
    if (rc == PB_OK && s->n == first)
      rc = pb_error_set(err, PB_EFORMAT,
                        "%s/%s: class folder holds no .jpg, .jpeg or .png file (torchvision's "
                        "ImageFolder refuses an empty class too)", s->root, s->classes[label]);
    if (rc == PB_OK)
      qsort(s->files + first, (size_t)(s->n - first), sizeof *s->files, cmp_files);
  }
  pb__io_free_names(names, n);
  if (rc == PB_OK && s->n_classes == 0)
    rc = pb_error_set(err, PB_EFORMAT, "%s: not an image folder: it holds no class folders",
                      s->root);
  if (rc == PB_OK && (s->info = calloc((size_t)s->n, sizeof *s->info)) == NULL)
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  return rc;
}

static int if_open(const char *path, const pb_read_options *opts, void **state,
                   struct pb_error *err) {
  *state = NULL;
  if (pb__io_is_url(path)) {
    if_state *s = calloc(1, sizeof *s);
    if (s == NULL || (s->root = strdup(path)) == NULL) {
      free(s);
      return pb_error_set(err, PB_ENOMEM, "out of memory");
    }
    s->ro = *opts;
    int rc = if_open_url(s, err);
    if (rc != PB_OK) {
      if_close(s);
      return rc;
    }
    *state = s;
    return PB_OK;
  }
  PB_RETURN_NOT_OK(pb__check_file_kind(path, 1, "an image folder", err));
  const char *res = results_file(path);
  if (res != NULL)
    return pb_error_set(err, PB_EFORMAT, "%s: a pipebench results folder (it holds %s), not a "
                        "dataset: give the folder of the images", path, res);
  if_state *s = calloc(1, sizeof *s);
  if (s == NULL || (s->root = strdup(path)) == NULL) {
    free(s);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  s->ro = *opts;
  char **names = NULL;
  size_t n = 0;
  int rc = PB_OK;
  if ((s->real_root = realpath(path, NULL)) == NULL) {
    rc = pb_error_set(err, -errno, "%s: cannot resolve the folder: %s", path, strerror(errno));
    goto fail;
  }
  struct stat top;
  if (stat(path, &top) != 0) {
    rc = pb_error_set(err, -errno, "%s: %s", path, strerror(errno));
    goto fail;
  }
  /* The root and every class folder count as read before any class is walked, so a link back
   * up into them from inside a class is passed over rather than read into that class. */
  if (seen_add(&s->seen, &top) < 0) {
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    goto fail;
  }
  rc = pb__list_dir(path, &names, &n, err);
  if (rc != PB_OK) goto fail;
  s->classes = calloc(n ? n : 1, sizeof *s->classes);
  if (s->classes == NULL) {
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    goto fail;
  }
  for (size_t k = 0; k < n; k++) { /* sorted by byte value, as Python sorts names */
    char child[4096];
    snprintf(child, sizeof child, "%s/%s", path, names[k]);
    struct stat st;
    int skip;
    rc = entry_stat(s, child, names[k], 0, &st, &skip, err);
    if (rc != PB_OK) goto fail;
    if (!skip && S_ISDIR(st.st_mode)) {
      int fresh = seen_add(&s->seen, &st);
      if (fresh < 0) {
        rc = pb_error_set(err, PB_ENOMEM, "out of memory");
        goto fail;
      }
      if (!fresh) {
        rc = pb_error_set(err, PB_EFORMAT,
                          "%s: class folder is the same folder as another class's (a link to "
                          "it); each folder is read once",
                          child);
        goto fail;
      }
      s->classes[s->n_classes++] = names[k];
      names[k] = NULL;
    } else {
      s->ignored++;
    }
  }
  if (s->n_classes == 0) {
    rc = pb_error_set(err, PB_EFORMAT, "%s: not an image folder: it holds no class folders", path);
    goto fail;
  }
  for (size_t c = 0; c < s->n_classes; c++) {
    int64_t first = s->n;
    rc = walk(s, s->classes[c], (int64_t)c, 0, err);
    if (rc != PB_OK) goto fail;
    if (s->n == first) {
      rc = pb_error_set(err, PB_EFORMAT,
                        "%s/%s: class folder holds no .jpg, .jpeg or .png file (torchvision's "
                        "ImageFolder refuses an empty class too)",
                        path, s->classes[c]);
      goto fail;
    }
    qsort(s->files + first, (size_t)(s->n - first), sizeof *s->files, cmp_files);
  }
  s->info = calloc((size_t)s->n, sizeof *s->info);
  if (s->info == NULL) {
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    goto fail;
  }
  pb__free_names(names, n);
  *state = s;
  return PB_OK;
fail:
  pb__free_names(names, n);
  if_close(s);
  return rc;
}

/* A second handle: the file list, classes and every header already read copied, so a loader's
 * reader threads neither list the folders again nor fetch a file twice to learn its size; the
 * file buffer and the JPEG decoder are the clone's own. */
static int if_clone(const void *state, void **out, struct pb_error *err) {
  const if_state *src = state;
  *out = NULL;
  if_state *s = calloc(1, sizeof *s);
  if (s == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  s->ro = src->ro;
  s->ignored = src->ignored;
  s->root = strdup(src->root);
  s->real_root = src->real_root != NULL ? strdup(src->real_root) : NULL;
  s->classes = src->n_classes > 0 ? calloc(src->n_classes, sizeof *s->classes) : NULL;
  s->files = src->n > 0 ? calloc((size_t)src->n, sizeof *s->files) : NULL;
  s->info = src->n > 0 ? malloc((size_t)src->n * sizeof *s->info) : NULL;
  int ok = s->root != NULL && (src->real_root == NULL || s->real_root != NULL) &&
           (src->n_classes == 0 || s->classes != NULL) &&
           (src->n == 0 || (s->files != NULL && s->info != NULL));
  if (ok && src->n > 0) memcpy(s->info, src->info, (size_t)src->n * sizeof *s->info);
  for (size_t k = 0; ok && k < src->n_classes; k++) {
    s->n_classes = k + 1; /* what if_close frees */
    ok = (s->classes[k] = strdup(src->classes[k])) != NULL;
  }
  for (int64_t i = 0; ok && i < src->n; i++) {
    s->cap = s->n = i + 1;
    s->files[i].label = src->files[i].label;
    s->files[i].dir = strdup(src->files[i].dir);
    s->files[i].name = strdup(src->files[i].name);
    ok = s->files[i].dir != NULL && s->files[i].name != NULL;
  }
  if (!ok) {
    if_close(s);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  *out = s;
  return PB_OK;
}

static int64_t if_count(void *p) { return ((if_state *)p)->n; }

static int64_t if_label(void *p, int64_t i) {
  if_state *s = p;
  s->held = 0; /* no read follows a label (a loader's set-up asks them after every size) */
  return s->files[i].label;
}

static int64_t if_ignored(void *p) { return ((if_state *)p)->ignored; }

/* Reads image i's file (its first `limit` bytes when limit > 0) into the handle's buffer
 * (*data, valid until the next load), without blocking on a FIFO or device. *whole: whether that
 * is all of the file. */
static int load_file(if_state *s, int64_t i, size_t limit, char *path, size_t path_size,
                     unsigned char **data, size_t *size, int *whole, struct pb_error *err) {
  *data = NULL;
  *size = 0;
  snprintf(path, path_size, "%s/%s/%s", s->root, s->files[i].dir, s->files[i].name);
  s->held = 0; /* buf is about to be overwritten */
  if (limit == 0 && pb__io_is_url(path)) { /* one request, not open's HEAD and then a range */
    void *d = NULL;
    size_t n = 0;
    PB_RETURN_NOT_OK(pb__io_read_file(path, &s->ro, (size_t)1 << 31, &d, &n, err));
    if (n > s->buf_cap || s->buf == NULL) {
      size_t cap = n + n / 4 + 4096;
      unsigned char *b = realloc(s->buf, cap);
      if (b == NULL) {
        pb_free(d, n);
        return pb_error_set(err, PB_ENOMEM, "%s: out of memory for %zu bytes", path, n);
      }
      s->buf = b;
      s->buf_cap = cap;
    }
    if (n > 0) memcpy(s->buf, d, n);
    pb_free(d, n);
    *data = s->buf;
    *size = n;
    *whole = 1;
    return PB_OK;
  }
  pb__io_file *f;
  PB_RETURN_NOT_OK(pb__io_open(path, &s->ro, &f, err));
  size_t want = (size_t)pb__io_size(f);
  *whole = limit == 0 || want <= limit;
  if (!*whole) want = limit;
  if (want > s->buf_cap || s->buf == NULL) {
    /* Grown with room to spare, so a tree of mixed sizes settles after a few files. */
    size_t cap = want + want / 4 + 4096;
    unsigned char *b = realloc(s->buf, cap);
    if (b == NULL) {
      pb__io_close(f);
      return pb_error_set(err, PB_ENOMEM, "%s: out of memory for %zu bytes", path, want);
    }
    s->buf = b;
    s->buf_cap = cap;
  }
  unsigned char *buf = s->buf;
  int rc = pb__io_pread(f, buf, want, 0, err);
  pb__io_close(f);
  PB_RETURN_NOT_OK(rc);
  size_t got = want;
  *data = buf;
  *size = got;
  return PB_OK;
}

static void fill_meta(const if_state *s, int64_t i, pb_image_meta *out) {
  const pb__imagefolder_info *in = &s->info[i];
  const int64_t shape[PB_NDIM] = {1, in->channels, 1, in->height, in->width};
  char name[256];
  snprintf(name, sizeof name, "%s/%s", s->files[i].dir, s->files[i].name);
  pb_image_meta_init(out, name, in->dtype, shape);
}

static int if_meta(void *p, int64_t i, pb_image_meta *out, struct pb_error *err) {
  if_state *s = p;
  if (s->held != i + 1) s->held = 0;
  if (s->info[i].kind == PB__IF_UNKNOWN) {
    /* Headers sit at the start: the first 4 KiB hold them in almost every file (a loader
     * over 10,000 photographs reads 40 MB to learn their sizes, not 640 MB); a large EXIF or
     * ICC block before a JPEG's frame header needs 64 KiB, or at worst the whole file. */
    static const size_t limits[] = {(size_t)4 << 10, (size_t)64 << 10, 0};
    int url = pb__io_is_url(s->root); /* over a URL a request costs more than the bytes */
    char path[8192];
    unsigned char *data;
    size_t size;
    int whole = 0, rc = PB_OK;
    int64_t t0 = pb_now_ns();
    for (int k = 0; k < 3 && (k == 0 || (rc != PB_OK && !whole)); k++) {
      PB_RETURN_NOT_OK(load_file(s, i, url ? 0 : limits[k], path, sizeof path, &data, &size,
                                 &whole, err));
      rc = pb__imagefolder_header(path, data, size, &s->info[i], err);
    }
    if (url && rc == PB_OK) {
      s->held = i + 1;
      s->held_size = size;
      s->held_ns = pb_now_ns() - t0;
    }
    if (rc != PB_OK) {
      s->info[i].kind = PB__IF_UNKNOWN;
      return rc;
    }
  }
  fill_meta(s, i, out);
  return PB_OK;
}

/* Reads image i's file and its header into *data (the handle's buffer) and *in, refusing an
 * image whose size changed since meta read it. *read_ns: the time to read the file. A JPEG's
 * header is read by the handle's decoder (started on first use), which then holds the image
 * for pb__imagefolder_jpeg_box. */
static int load_checked(if_state *s, int64_t i, char *path, size_t path_size,
                        unsigned char **data, size_t *size, pb__imagefolder_info *in, int64_t *read_ns,
                        struct pb_error *err) {
  if (s->jpeg == NULL && (s->jpeg = pb__imagefolder_jpeg_new()) == NULL)
    return pb_error_set(err, PB_ENOMEM, "%s: cannot start the JPEG decoder", s->root);
  pb__imagefolder_jpeg *jpeg = s->jpeg;
  int whole;
  int64_t t0 = pb_now_ns();
  if (s->held == i + 1) { /* fetched whole by meta just before (check_read's shape check) */
    snprintf(path, path_size, "%s/%s/%s", s->root, s->files[i].dir, s->files[i].name);
    *data = s->buf;
    *size = s->held_size;
    *read_ns = s->held_ns;
    s->held = 0;
  } else {
    PB_RETURN_NOT_OK(load_file(s, i, 0, path, path_size, data, size, &whole, err));
    *read_ns = pb_now_ns() - t0;
  }
  int rc = pb__imagefolder_sniff(*data, *size) == PB__IF_JPEG
               ? pb__imagefolder_jpeg_header(jpeg, path, *data, *size, in, err)
               : pb__imagefolder_header(path, *data, *size, in, err);
  if (rc == PB_OK && s->info[i].kind != PB__IF_UNKNOWN &&
      (in->width != s->info[i].width || in->height != s->info[i].height ||
       in->channels != s->info[i].channels || in->dtype != s->info[i].dtype))
    rc = pb_error_set(err, PB_EFORMAT, "%s: the image changed since its size was read", path);
  if (rc != PB_OK) {
    if (in->kind == PB__IF_JPEG) pb__imagefolder_jpeg_end(jpeg);
    *data = NULL;
    return rc;
  }
  s->info[i] = *in;
  return PB_OK;
}

/* Adds one read to the caller's stage times (if any): the file's read time, the decoding since
 * t1, the file's bytes and the decoded bytes. */
static void add_times(pb_stage_times *times, int64_t read_ns, int64_t t1, size_t file_bytes,
                      int64_t decoded_bytes) {
  if (times == NULL) return;
  times->read_ns += read_ns;
  times->decode_ns += pb_now_ns() - t1;
  times->bytes_read += (int64_t)file_bytes;
  times->bytes_decoded += decoded_bytes;
}

/* Decodes a loaded file (whole, or a region of it at full resolution). */
static int decode_loaded(const char *path, unsigned char *data, size_t size, const pb__imagefolder_info *in,
                         const pb_region *region, void *dst, size_t dst_size, int64_t read_ns,
                         pb_stage_times *times, struct pb_error *err) {
  int64_t t1 = pb_now_ns();
  size_t esize = pb_dtype_size(in->dtype);
  size_t need = (size_t)in->width * (size_t)in->height * (size_t)in->channels * esize;
  const int64_t shape[PB_NDIM] = {1, in->channels, 1, in->height, in->width};
  size_t out_bytes = need;
  int rc;
  if (region == NULL) {
    rc = pb__imagefolder_decode(path, data, size, in, dst, dst_size, err);
  } else {
    /* the region and dst were checked against this shape (format.c; load_checked refuses a
     * file whose size changed since) */
    void *tmp = malloc(need);
    rc = tmp == NULL ? pb_error_set(err, PB_ENOMEM, "%s: out of memory", path) : PB_OK;
    if (rc == PB_OK) rc = pb__imagefolder_decode(path, data, size, in, tmp, need, err);
    if (rc == PB_OK) {
      static const int64_t zero[PB_NDIM] = {0, 0, 0, 0, 0};
      out_bytes = esize;
      for (int k = 0; k < PB_NDIM; k++) out_bytes *= (size_t)region->count[k];
      pb__copy_box(dst, region->start, region->count, tmp, zero, shape, esize);
    }
    free(tmp);
  }
  if (rc == PB_OK) add_times(times, read_ns, t1, size, (int64_t)out_bytes);
  return rc;
}

static int if_read(void *p, int64_t i, const pb_region *region, void *dst, size_t dst_size,
                   pb_stage_times *times, struct pb_error *err) {
  char path[8192];
  unsigned char *data;
  size_t size;
  pb__imagefolder_info in;
  int64_t read_ns;
  if_state *s = p;
  PB_RETURN_NOT_OK(load_checked(s, i, path, sizeof path, &data, &size, &in, &read_ns, err));
  if (in.kind != PB__IF_JPEG)
    return decode_loaded(path, data, size, &in, region, dst, dst_size, read_ns, times, err);
  /* JPEG, whole or a region of every channel: the handle's decoder writes the rows straight
   * into dst (planar), with no whole-image buffer in between and rows below a region never
   * decoded; the pixels are those of a whole decode (test_imagefolder_scaled). */
  int64_t t1 = pb_now_ns();
  const int64_t shape[PB_NDIM] = {1, in.channels, 1, in.height, in.width};
  pb_region all;
  for (int k = 0; k < PB_NDIM; k++) {
    all.start[k] = 0;
    all.count[k] = shape[k];
  }
  const pb_region *r = region != NULL ? region : &all;
  int rc = PB_OK;
  if (r->count[PB_C] != in.channels || r->start[PB_C] != 0) {
    /* A subset of channels: decoded whole by TurboJPEG and cut. */
    pb__imagefolder_jpeg_end(s->jpeg);
    return decode_loaded(path, data, size, &in, region, dst, dst_size, read_ns, times, err);
  }
  if (rc == PB_OK)
    rc = pb__imagefolder_jpeg_box(s->jpeg, path, &in, 1, (int)r->start[PB_Y], (int)r->start[PB_X],
                         (int)r->count[PB_Y], (int)r->count[PB_X], dst, dst_size, err);
  else
    pb__imagefolder_jpeg_end(s->jpeg);
  if (rc == PB_OK)
    add_times(times, read_ns, t1, size, r->count[PB_Y] * r->count[PB_X] * in.channels);
  return rc;
}

/* JPEG: only the box is decoded, at 1/scale, by libjpeg-turbo's scaled and partial decoding.
 * PNG has no reduced decoding: the region is read at scale 1 (from the file already read). */
static int if_read_scaled(void *p, int64_t i, const pb_region *region, int *scale, void *dst,
                          size_t dst_size, pb_region *out, pb_stage_times *times,
                          struct pb_error *err) {
  char path[8192];
  unsigned char *data;
  size_t size;
  pb__imagefolder_info in;
  int64_t read_ns;
  if_state *s = p;
  PB_RETURN_NOT_OK(load_checked(s, i, path, sizeof path, &data, &size, &in, &read_ns, err));
  if (in.kind != PB__IF_JPEG) {
    *scale = 1;
    *out = *region;
    return decode_loaded(path, data, size, &in, region, dst, dst_size, read_ns, times, err);
  }
  int64_t t1 = pb_now_ns();
  const int64_t shape[PB_NDIM] = {1, in.channels, 1, in.height, in.width};
  int rc = PB_OK;
  if (region->count[PB_C] != in.channels || region->start[PB_C] != 0)
    rc = pb_error_set(err, PB_EUNSUPPORTED, "%s: a scaled read takes every channel", path);
  if (rc == PB_OK) {
    pb__scaled_box(region, shape, *scale, out);
    rc = pb__imagefolder_jpeg_box(s->jpeg, path, &in, *scale, (int)out->start[PB_Y],
                         (int)out->start[PB_X], (int)out->count[PB_Y], (int)out->count[PB_X], dst,
                         dst_size, err);
  } else {
    pb__imagefolder_jpeg_end(s->jpeg); /* the header read; nothing decoded */
  }
  if (rc == PB_OK)
    add_times(times, read_ns, t1, size, out->count[PB_Y] * out->count[PB_X] * in.channels);
  return rc;
}

/* ---- writing ------------------------------------------------------------------------------- */

static const char *const if_write_keys[] = {"quality=1..100", "subsampling=444|422|420",
                                            "png=0|1", "classes=N", NULL};

typedef struct if_writer {
  char *path;
  char tmp[4096];
  int quality, png, classes;
  pb__imagefolder_subsampling sub;
  int64_t count;
  int finished;
} if_writer;

static void if_writer_free(void *p) {
  if_writer *w = p;
  if (w == NULL) return;
  if (!w->finished && w->tmp[0] != '\0') pb__remove_tree(w->tmp);
  free(w->path);
  free(w);
}

static int opt_int(const char *options, const char *key, int lo, int hi, int def, int *out,
                   struct pb_error *err) {
  char buf[64];
  *out = def;
  if (!pb__opt_get(options, key, buf, sizeof buf)) return PB_OK;
  char *end;
  long v = strtol(buf, &end, 10);
  if (buf[0] == '\0' || *end != '\0' || v < lo || v > hi)
    return pb_error_set(err, PB_EINVAL, "imagefolder: option %s=%s: expected a whole number from %d to %d",
                        key, buf, lo, hi);
  *out = (int)v;
  return PB_OK;
}

static int if_writer_open(const char *path, const pb_write_params *params, void **wstate,
                          struct pb_error *err) {
  *wstate = NULL;
  const char *opts = params->options;
  int quality, png, classes;
  PB_RETURN_NOT_OK(opt_int(opts, "quality", 1, 100, 90, &quality, err));
  PB_RETURN_NOT_OK(opt_int(opts, "png", 0, 1, 0, &png, err));
  PB_RETURN_NOT_OK(opt_int(opts, "classes", 1, 1000000, 10, &classes, err));
  pb__imagefolder_subsampling sub = PB__IF_420;
  char buf[64];
  if (pb__opt_get(opts, "subsampling", buf, sizeof buf)) {
    if (strcmp(buf, "444") == 0) sub = PB__IF_444;
    else if (strcmp(buf, "422") == 0) sub = PB__IF_422;
    else if (strcmp(buf, "420") == 0) sub = PB__IF_420;
    else
      return pb_error_set(err, PB_EINVAL,
                          "imagefolder: option subsampling=%s: expected 444, 422 or 420", buf);
  }
  const char *c = params->compression;
  if (c != NULL && c[0] != '\0' && strcmp(c, "jpeg") == 0) png = 0;
  else if (c != NULL && strcmp(c, "png") == 0) png = 1;
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode))
    return pb_error_set(err, PB_EINVAL, "%s: exists and is not a folder", path);
  if_writer *w = calloc(1, sizeof *w);
  if (w == NULL || (w->path = strdup(path)) == NULL) {
    free(w);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  w->quality = quality;
  w->png = png;
  w->classes = classes;
  w->sub = sub;
  int rc = pb__temp_sibling(path, w->tmp, sizeof w->tmp);
  if (rc == PB_OK && mkdir(w->tmp, 0777) != 0)
    rc = pb_error_set(err, -errno, "%s: cannot create: %s", w->tmp, strerror(errno));
  if (rc != PB_OK) {
    w->tmp[0] = '\0';
    if_writer_free(w);
    return rc;
  }
  *wstate = w;
  return PB_OK;
}

/* Scales one pixel of any type to 0..255 (docs/format-imagefolder.md): integers over their
 * type's full range, floats from 0..1, clamped. */
static uint8_t to_u8(pb_dtype dt, const void *px, size_t k) {
  double v;
  switch (dt) {
  case PB_UINT8: return ((const uint8_t *)px)[k];
  case PB_UINT16: v = ((const uint16_t *)px)[k] / 65535.0; break;
  case PB_UINT32: v = ((const uint32_t *)px)[k] / 4294967295.0; break;
  case PB_INT16: v = (((const int16_t *)px)[k] + 32768.0) / 65535.0; break;
  case PB_FLOAT32: v = ((const float *)px)[k]; break;
  default: v = ((const double *)px)[k]; break;
  }
  if (!(v > 0.0)) return 0; /* NaN too */
  if (v >= 1.0) return 255;
  return (uint8_t)(v * 255.0 + 0.5);
}

static int if_writer_add(void *p, const pb_image_meta *meta, const void *pixels,
                         struct pb_error *err) {
  if_writer *w = p;
  const int64_t *sh = meta->shape;
  if (sh[PB_T] != 1 || sh[PB_Z] != 1 || (sh[PB_C] != 1 && sh[PB_C] != 3))
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "image '%s': shape [%lld,%lld,%lld,%lld,%lld]; an image folder holds 2-D "
                        "grey (C=1) or RGB (C=3) images with T=1 and Z=1",
                        meta->name, (long long)sh[0], (long long)sh[1], (long long)sh[2],
                        (long long)sh[3], (long long)sh[4]);
  if (sh[PB_Y] > 65500 || sh[PB_X] > 65500)
    return pb_error_set(err, PB_EUNSUPPORTED, "image '%s': %lld x %lld pixels; JPEG and PNG here "
                        "take at most 65500 on a side", meta->name, (long long)sh[PB_X], (long long)sh[PB_Y]);
  /* Class and file name: "class/file.ext" names keep their class; others go round the
   * `classes` folders in order. */
  char cls[256], stem[256];
  const char *slash = strchr(meta->name, '/');
  if (slash != NULL && slash != meta->name && strchr(slash + 1, '/') == NULL && slash[1] != '\0') {
    snprintf(cls, sizeof cls, "%.*s", (int)(slash - meta->name), meta->name);
    snprintf(stem, sizeof stem, "%s", slash + 1);
  } else {
    snprintf(cls, sizeof cls, "class_%03lld", (long long)(w->count % w->classes));
    snprintf(stem, sizeof stem, "%s", meta->name[0] ? meta->name : "img");
    for (char *q = stem; *q; q++)
      if (*q == '/') *q = '_';
  }
  char *dot = strchr(stem, '.');
  if (dot != NULL && dot != stem) *dot = '\0';
  if (strcmp(cls, ".") == 0 || strcmp(cls, "..") == 0 || stem[0] == '.' || stem[0] == '\0')
    return pb_error_set(err, PB_EINVAL, "image '%s': not usable as class/file name", meta->name);
  size_t n = (size_t)(sh[PB_C] * sh[PB_Y] * sh[PB_X]);
  uint8_t *u8 = malloc(n ? n : 1);
  if (u8 == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  for (size_t k = 0; k < n; k++) u8[k] = to_u8(meta->dtype, pixels, k);
  char dir[4096], file[8192];
  snprintf(dir, sizeof dir, "%s/%s", w->tmp, cls);
  snprintf(file, sizeof file, "%s/%s.%s", dir, stem, w->png ? "png" : "jpg");
  unsigned char *enc = NULL;
  size_t enc_size = 0;
  int rc = pb__mkdirs(dir, err);
  if (rc == PB_OK)
    rc = pb__imagefolder_encode(file, u8, (int)sh[PB_X], (int)sh[PB_Y], (int)sh[PB_C], w->png, w->quality,
                       w->sub, &enc, &enc_size, err);
  free(u8);
  if (rc == PB_OK) {
    int fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
      rc = pb_error_set(err, errno == EEXIST ? PB_EINVAL : -errno, "%s: cannot create: %s%s", file,
                        strerror(errno), errno == EEXIST ? " (two images have this name)" : "");
    } else {
      rc = pb__write_all(fd, enc, enc_size, file, err);
      if (close(fd) != 0 && rc == PB_OK)
        rc = pb_error_set(err, PB_EIO, "%s: close failed: %s", file, strerror(errno));
    }
  }
  free(enc);
  if (rc == PB_OK) w->count++;
  return rc;
}

static int if_writer_finish(void *p, struct pb_error *err) {
  if_writer *w = p;
  struct stat st;
  char old[4096] = "";
  if (stat(w->path, &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      return pb_error_set(err, PB_EIO, "%s: exists and is not a folder", w->path);
    char **names;
    size_t n;
    PB_RETURN_NOT_OK(pb__list_dir(w->path, &names, &n, err));
    pb__free_names(names, n);
    if (n > 0 && if_probe(w->path) == 0)
      return pb_error_set(err, PB_EIO, "%s: exists and is neither empty nor an image folder; not replaced",
                          w->path);
    pb__temp_sibling(w->path, old, sizeof old);
    if (rename(w->path, old) != 0)
      return pb_error_set(err, -errno, "%s: cannot move the old folder aside: %s", w->path,
                          strerror(errno));
  }
  if (rename(w->tmp, w->path) != 0) {
    int e = errno;
    if (old[0] != '\0') rename(old, w->path);
    return pb_error_set(err, -e, "%s: cannot rename %s into place: %s", w->path, w->tmp, strerror(e));
  }
  if (old[0] != '\0') pb__remove_tree(old);
  w->finished = 1;
  return PB_OK;
}

const pb_format_vtable pb__format_imagefolder = {
    .info = {"imagefolder",
             "torchvision ImageFolder tree: class folders of JPEG/PNG files "
             "(docs/format-imagefolder.md)",
             1, 1},
    .probe = if_probe,
    .open = if_open,
    .close = if_close,
    .count = if_count,
    .meta = if_meta,
    .read = if_read,
    .clone = if_clone,
    .writer_open = if_writer_open,
    .writer_add = if_writer_add,
    .writer_finish = if_writer_finish,
    .writer_free = if_writer_free,
    .write_options = if_write_keys,
    .label = if_label,
    .read_scaled = if_read_scaled,
    .ignored = if_ignored,
};
