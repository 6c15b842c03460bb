/* A bounded, seeded mutation campaign over every kind of file pipebench reads: TIFF files,
 * Zarr v2 metadata and chunks, Zarr v3 metadata and shards, an OME-Arrow Parquet file, the raw
 * cache with its index, and gen's manifest. Each mutant (one file of a small dataset edited:
 * bytes flipped, set, overwritten with sizes, cut, grown; JSON numbers and strings replaced with
 * values a specification forbids) goes through what inspect, convert and a short read do, in a
 * child process with a time limit: it must end with everything read (0) or a refusal (2) whose
 * message names the file, never a crash, a sanitizer report or a hang. A few mutants of each
 * kind also go through the real `pipebench inspect`/`convert`/`verify`.
 *
 * Usage: mutate [MUTANTS_PER_KIND [SEED]]   (defaults PB_MUTATE_PER_KIND and 20261126; the build
 * sets 120, or 35 under the sanitizers, where each mutant costs several times more)
 * PIPEBENCH_MUTATE_KEEP=DIR keeps each failing mutant's file there, to add to a fuzz corpus. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "common/fs.h"
#include "pipebench/format.h"
#include "pipebench/verify.h"

#define CHILD_LIMIT_S 20
#ifndef PB_MUTATE_PER_KIND
#define PB_MUTATE_PER_KIND 120
#endif
#define MAX_FILES 4096

static char root[512];

typedef struct kind {
  const char *name;
  const char *dataset;  /* under root */
  const char *format;
  const char *only;     /* mutate only this file under the dataset folder's parent, or NULL:
                           every file under the dataset */
  int verify;           /* the mutated file is the manifest: verify the dataset with it */
} kind;

static const kind kinds[] = {
    {"tiff", "a/tiff", "tiff", NULL, 0},
    {"zarr-v2", "z2/ome-zarr", "ome-zarr", NULL, 0},
    {"zarr-v3", "z3/ome-zarr", "ome-zarr", NULL, 0},
    {"ome-parquet", "a/images.parquet", "ome-parquet", "a/images.parquet", 0},
    {"raw", "a/images.pbraw", "raw", "a/images.pbraw", 0},
    {"manifest", "a/images.pbraw", "raw", "a/manifest.json", 1},
};
#define N_KINDS (sizeof kinds / sizeof kinds[0])

/* ---- files ------------------------------------------------------------------------------- */

static void collect(const char *path, char **files, size_t *n) {
  struct stat st;
  if (stat(path, &st) != 0) return;
  if (!S_ISDIR(st.st_mode)) {
    if (*n < MAX_FILES) files[(*n)++] = strdup(path);
    return;
  }
  char **names;
  size_t count;
  struct pb_error err;
  if (pb__list_dir(path, &names, &count, &err) != PB_OK) return;
  for (size_t i = 0; i < count; i++) {
    char sub[2048];
    snprintf(sub, sizeof sub, "%s/%s", path, names[i]);
    collect(sub, files, n);
  }
  pb__free_names(names, count);
}

static int is_json(const char *path) {
  const char *b = strrchr(path, '/');
  b = b ? b + 1 : path;
  size_t n = strlen(b);
  return strcmp(b, ".zarray") == 0 || strcmp(b, ".zattrs") == 0 || strcmp(b, ".zgroup") == 0 ||
         (n >= 5 && strcmp(b + n - 5, ".json") == 0);
}

/* ---- mutations ---------------------------------------------------------------------------- */

typedef struct buf {
  unsigned char *p;
  size_t n, cap;
} buf;

static void reserve(buf *b, size_t need) {
  if (need <= b->cap) return;
  size_t cap = need * 2 + 64;
  unsigned char *p = realloc(b->p, cap);
  CHECK(p != NULL);
  b->p = p;
  b->cap = cap;
}

static void splice(buf *b, size_t at, size_t del, const void *ins, size_t ins_n) {
  if (at > b->n) at = b->n;
  if (del > b->n - at) del = b->n - at;
  reserve(b, b->n - del + ins_n);
  memmove(b->p + at + ins_n, b->p + at + del, b->n - at - del);
  memcpy(b->p + at, ins, ins_n);
  b->n = b->n - del + ins_n;
}

/* Where an edit lands: anywhere, or in the first or last 512 bytes (headers, IFDs, footers and
 * indexes live there). */
static size_t where(pb_rng *rng, size_t n) {
  if (n == 0) return 0;
  size_t span = n < 512 ? n : 512;
  switch (pb_rng_below(rng, 3)) {
    case 0: return (size_t)pb_rng_below(rng, n);
    case 1: return (size_t)pb_rng_below(rng, span);
    default: return n - 1 - (size_t)pb_rng_below(rng, span);
  }
}

static void mutate_bytes(pb_rng *rng, buf *b, char *what, size_t wsize) {
  static const uint64_t sizes[] = {0, 1, 2, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000, 0x7fffffff,
                                   0x80000000u, 0xffffffffu, 0x100000000ull,
                                   0x7fffffffffffffffull, 0x8000000000000000ull, UINT64_MAX};
  size_t at = where(rng, b->n);
  switch (pb_rng_below(rng, 7)) {
    case 0:
      if (b->n) b->p[at] ^= (unsigned char)(1u << pb_rng_below(rng, 8));
      snprintf(what, wsize, "bit flipped at %zu", at);
      break;
    case 1:
      if (b->n) b->p[at] = (unsigned char)pb_rng_next(rng);
      snprintf(what, wsize, "byte set at %zu", at);
      break;
    case 2: { /* a size or offset: 2, 4 or 8 bytes, either byte order */
      uint64_t v = sizes[pb_rng_below(rng, sizeof sizes / sizeof sizes[0])];
      size_t w = (size_t)1 << (1 + pb_rng_below(rng, 3));
      int big = (int)pb_rng_below(rng, 2);
      for (size_t k = 0; k < w && at + k < b->n; k++)
        b->p[at + k] = (unsigned char)(v >> (8 * (big ? w - 1 - k : k)));
      snprintf(what, wsize, "%zu-byte value %llx (%s) at %zu", w, (unsigned long long)v,
               big ? "big-endian" : "little-endian", at);
      break;
    }
    case 3:
      b->n = at;
      snprintf(what, wsize, "cut at %zu", at);
      break;
    case 4: {
      unsigned char ins[16];
      size_t k = 1 + (size_t)pb_rng_below(rng, sizeof ins);
      for (size_t i = 0; i < k; i++) ins[i] = (unsigned char)pb_rng_next(rng);
      splice(b, at, 0, ins, k);
      snprintf(what, wsize, "%zu bytes inserted at %zu", k, at);
      break;
    }
    case 5: {
      size_t k = 1 + (size_t)pb_rng_below(rng, 64);
      if (k > b->n - at) k = b->n - at;
      memset(b->p + at, 0, k);
      snprintf(what, wsize, "%zu bytes zeroed at %zu", k, at);
      break;
    }
    default: { /* a block copied over another */
      if (b->n < 2) break;
      size_t from = (size_t)pb_rng_below(rng, b->n), k = 1 + (size_t)pb_rng_below(rng, 32);
      if (k > b->n - from) k = b->n - from;
      if (k > b->n - at) k = b->n - at;
      memmove(b->p + at, b->p + from, k);
      snprintf(what, wsize, "%zu bytes from %zu copied to %zu", k, from, at);
      break;
    }
  }
}

/* JSON: a number or a string token replaced by a value its specification forbids, or a
 * structural character removed or doubled. */
static void mutate_json(pb_rng *rng, buf *b, char *what, size_t wsize) {
  static const char *const values[] = {
      "0", "-1", "1e11", "2147483648", "4294967296", "9223372036854775807",
      "18446744073709551616", "1.5", "-0", "1e400", "\"7\"", "\"\"", "\"/\"", "\"x\"", "[]",
      "{}", "[\"/\"]", "true", "null", "[1,2,3,4,5,6]", "\"<u8\"", "\">f4\"", "\"|b1\"",
      "\"zstd\"", "\"XYZZT\"", "\"uint64\"", "[0]", "[-1,-1,-1,-1,-1]"};
  size_t starts[4096], ends[4096], n = 0;
  size_t i = 0;
  while (i < b->n && n < 4096) {
    unsigned char c = b->p[i];
    if (c == '"') {
      size_t s = i++;
      while (i < b->n && b->p[i] != '"') i += b->p[i] == '\\' ? 2 : 1;
      if (i < b->n) i++;
      /* a key is followed by ':'; replace values only */
      size_t j = i;
      while (j < b->n && (b->p[j] == ' ' || b->p[j] == '\n')) j++;
      if (j >= b->n || b->p[j] != ':') {
        starts[n] = s;
        ends[n++] = i;
      }
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t s = i;
      while (i < b->n && strchr("-+.eE0123456789", b->p[i]) != NULL) i++;
      starts[n] = s;
      ends[n++] = i;
    } else {
      i++;
    }
  }
  if (n == 0 || pb_rng_below(rng, 6) == 0) { /* structure */
    size_t at = where(rng, b->n);
    while (at < b->n && strchr("[]{},:", b->p[at]) == NULL) at++;
    if (at >= b->n) {
      mutate_bytes(rng, b, what, wsize);
      return;
    }
    char c = (char)b->p[at];
    if (pb_rng_below(rng, 2)) {
      splice(b, at, 1, "", 0);
      snprintf(what, wsize, "'%c' removed at %zu", c, at);
    } else {
      splice(b, at, 0, &c, 1);
      snprintf(what, wsize, "'%c' doubled at %zu", c, at);
    }
    return;
  }
  size_t k = (size_t)pb_rng_below(rng, n);
  const char *v = values[pb_rng_below(rng, sizeof values / sizeof values[0])];
  snprintf(what, wsize, "value at %zu (%.*s) replaced with %s", starts[k],
           (int)(ends[k] - starts[k] < 40 ? ends[k] - starts[k] : 40), b->p + starts[k], v);
  splice(b, starts[k], ends[k] - starts[k], v, strlen(v));
}

/* ---- what inspect, convert and a short read do, in a child -------------------------------- */

/* A refusal must name the dataset (every path under it starts with its path) or the file. */
static int names_file(const char *msg, const char *dataset, const char *file) {
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  return strstr(msg, dataset) != NULL || strstr(msg, base) != NULL;
}

/* 0 all read, 2 refused naming the file, 3 refused without naming it (message on stderr). */
static int settle(int rc, const struct pb_error *err, const char *dataset, const char *file,
                  const char *op) {
  if (rc == PB_OK) return 0;
  if (names_file(err->message, dataset, file)) return 2;
  fprintf(stderr, "  %s refused without naming the file: %s\n", op, err->message);
  return 3;
}

/* Reads every image whole, as inspect does (with its CRC-32). */
static int inspect_like(pb_dataset *ds, const char *dataset, struct pb_error *err) {
  int rc = PB_OK;
  void *px = NULL;
  size_t cap = 0;
  for (int64_t i = 0; i < pb_dataset_count(ds) && rc == PB_OK; i++) {
    pb_image_meta m;
    rc = pb_dataset_meta(ds, i, &m, err);
    if (rc != PB_OK) break;
    size_t nb = pb_image_bytes(&m);
    if (nb > cap) {
      pb_free(px, cap);
      px = pb_alloc(nb);
      cap = px ? nb : 0;
      if (px == NULL) {
        rc = pb_error_set(err, PB_ENOMEM, "%s: out of memory for image %lld", dataset, (long long)i);
        break;
      }
    }
    rc = pb_dataset_read(ds, i, px, cap, NULL, err);
    if (rc == PB_OK) (void)pb_image_crc32(&m, px);
  }
  pb_free(px, cap);
  return rc;
}

/* Reads every image into a raw writer, as convert does; the output is removed. */
static int convert_like(pb_dataset *ds, const char *dataset, const char *out,
                        struct pb_error *err) {
  pb_writer *w = NULL;
  int rc = pb_writer_new(out, "raw", NULL, &w, err);
  void *px = NULL;
  size_t cap = 0;
  for (int64_t i = 0; i < pb_dataset_count(ds) && rc == PB_OK; i++) {
    pb_image_meta m;
    rc = pb_dataset_meta(ds, i, &m, err);
    if (rc != PB_OK) break;
    size_t nb = pb_image_bytes(&m);
    if (nb > cap) {
      pb_free(px, cap);
      px = pb_alloc(nb);
      cap = px ? nb : 0;
      if (px == NULL) {
        rc = pb_error_set(err, PB_ENOMEM, "%s: out of memory for image %lld", dataset, (long long)i);
        break;
      }
    }
    rc = pb_dataset_read(ds, i, px, cap, NULL, err);
    if (rc == PB_OK) rc = pb_writer_add(w, &m, px, err);
  }
  if (rc == PB_OK) rc = pb_writer_finish(w, err);
  pb_writer_free(w);
  pb_free(px, cap);
  pb__remove_tree(out);
  return rc;
}

/* A region (the lower-right quarter of every plane, the last z) of each image. */
static int short_read(pb_dataset *ds, const char *dataset, struct pb_error *err) {
  int rc = PB_OK;
  for (int64_t i = 0; i < pb_dataset_count(ds) && rc == PB_OK; i++) {
    pb_image_meta m;
    rc = pb_dataset_meta(ds, i, &m, err);
    if (rc != PB_OK) break;
    pb_region r;
    for (int k = 0; k < PB_NDIM; k++) {
      r.start[k] = k >= PB_Z ? m.shape[k] / 2 : 0;
      r.count[k] = m.shape[k] - r.start[k];
    }
    r.start[PB_Z] = m.shape[PB_Z] - 1;
    r.count[PB_Z] = 1;
    size_t nb = pb_dtype_size(m.dtype);
    for (int k = 0; k < PB_NDIM; k++) nb *= (size_t)r.count[k];
    void *px = pb_alloc(nb);
    if (px == NULL) {
      rc = pb_error_set(err, PB_ENOMEM, "%s: out of memory", dataset);
      break;
    }
    rc = pb_dataset_read_region(ds, i, &r, px, nb, NULL, err);
    pb_free(px, nb);
  }
  return rc;
}

/* One open (opening an OME-Arrow file runs DuckDB queries: the slow part of a mutant), then
 * the three readers in turn on that handle. */
static int child(const kind *k, const char *dataset, const char *file, const char *out) {
  alarm(CHILD_LIMIT_S);
  struct pb_error err = {{0}};
  if (k->verify) {
    pb_verify_params p = PB_VERIFY_PARAMS_DEFAULTS;
    return settle(pb_verify(dataset, &p, NULL, &err), &err, file, file, "verify");
  }
  pb_dataset *ds = NULL;
  int r = settle(pb_dataset_open(dataset, k->format, &ds, &err), &err, dataset, file, "open");
  if (r != 0) return r;
  int worst = settle(short_read(ds, dataset, &err), &err, dataset, file, "read");
  r = settle(inspect_like(ds, dataset, &err), &err, dataset, file, "inspect");
  worst = r > worst ? r : worst;
  r = settle(convert_like(ds, dataset, out, &err), &err, dataset, file, "convert");
  pb_dataset_free(ds);
  return r > worst ? r : worst;
}

/* ---- the real command line on a few mutants ------------------------------------------------ */

/* Runs `pipebench ARGS` under timeout; 0 when it exits 0, or 2 naming the file. */
static int cli_check(const char *args, const char *dataset, const char *file) {
  char cmd[4096], errfile[600];
  snprintf(errfile, sizeof errfile, "%s/cli.err", root);
  snprintf(cmd, sizeof cmd, "timeout %d '%s' %s >/dev/null 2>'%s'", CHILD_LIMIT_S, PIPEBENCH_CLI, args,
           errfile);
  int st = system(cmd);
  int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  void *text = NULL;
  size_t n = 0;
  struct pb_error err;
  char msg[2048] = "";
  if (pb__read_file(errfile, &text, &n, &err) == PB_OK) {
    snprintf(msg, sizeof msg, "%.*s", (int)(n < sizeof msg - 1 ? n : sizeof msg - 1), (char *)text);
    pb_free(text, n);
  }
  if (code == 0) return 0;
  if (code == 2 && names_file(msg, dataset, file)) return 0;
  fprintf(stderr, "  pipebench %s: exit %d: %s\n", args, code, msg);
  return 1;
}

/* ---- the campaign ---------------------------------------------------------------------------- */

static void keep(const char *kind_name, long k, const char *file, const buf *b) {
  const char *dir = getenv("PIPEBENCH_MUTATE_KEEP");
  if (dir == NULL || dir[0] == '\0') return;
  const char *base = strrchr(file, '/');
  char path[2048];
  snprintf(path, sizeof path, "%s/%s_%ld_%s", dir, kind_name, k, base ? base + 1 : file);
  struct pb_error err;
  (void)pb__mkdirs(dir, &err);
  (void)pb__write_file(path, b->p, b->n, &err);
}

static void write_back(const char *file, const void *p, size_t n) {
  struct pb_error err;
  CHECK_OK(pb__write_file(file, p, n, &err), &err);
}

static void gen(const char *args) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' gen %s >/dev/null 2>&1", PIPEBENCH_CLI, args);
  CHECK_EQ(system(cmd), 0);
}

static int run_kind(const kind *k, long per_kind, uint64_t seed, int cli_samples) {
  char dataset[1024], out[1024];
  snprintf(dataset, sizeof dataset, "%s/%s", root, k->dataset);
  snprintf(out, sizeof out, "%s/out.pbraw", root);
  char *files[MAX_FILES];
  size_t n_files = 0;
  if (k->only != NULL) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, k->only);
    files[n_files++] = strdup(p);
  } else {
    collect(dataset, files, &n_files);
  }
  CHECK(n_files > 0);
  int failures = 0;
  long refused = 0;
  int64_t t0 = pb_now_ns();
  for (long m = 0; m < per_kind; m++) {
    pb_rng rng;
    pb_rng_init(&rng, seed ^ ((uint64_t)(k - kinds) << 32) ^ (uint64_t)m * 0x9E3779B97F4A7C15ull);
    /* metadata and data files equally often, whatever their numbers */
    size_t fi = (size_t)pb_rng_below(&rng, n_files);
    if (k->only == NULL && pb_rng_below(&rng, 2) == 0) {
      size_t start = fi;
      while (!is_json(files[fi]) && (fi = (fi + 1) % n_files) != start) {
      }
    }
    const char *file = files[fi];
    void *orig = NULL;
    size_t orig_n = 0;
    struct pb_error err;
    CHECK_OK(pb__read_file(file, &orig, &orig_n, &err), &err);
    buf b = {NULL, 0, 0};
    reserve(&b, orig_n + 1);
    memcpy(b.p, orig, orig_n);
    b.n = orig_n;
    char what[256] = "";
    int edits = 1 + (int)pb_rng_below(&rng, 2);
    for (int e = 0; e < edits; e++) {
      char one[200];
      if (is_json(file) && pb_rng_below(&rng, 4) != 0) mutate_json(&rng, &b, one, sizeof one);
      else mutate_bytes(&rng, &b, one, sizeof one);
      snprintf(what + strlen(what), sizeof what - strlen(what), "%s%s", e ? "; " : "", one);
    }
    write_back(file, b.p, b.n);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      int rc = child(k, dataset, file, out);
      /* Under LeakSanitizer every exit scans the whole process for leaks (about 0.1 s here,
       * half a mutant's cost): one child in four is checked for leaks, the others leave
       * without the exit handlers. */
      fflush(NULL);
      if (m % 4 != 0) _exit(rc);
      exit(rc);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    int bad = 0;
    if (WIFSIGNALED(st)) {
      fprintf(stderr, "%s mutant %ld (%s: %s): %s\n", k->name, m, file + strlen(root) + 1, what,
              WTERMSIG(st) == SIGALRM ? "hung" : strsignal(WTERMSIG(st)));
      bad = 1;
    } else if (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 2) {
      fprintf(stderr, "%s mutant %ld (%s: %s): exit %d\n", k->name, m, file + strlen(root) + 1,
              what, WEXITSTATUS(st));
      bad = 1;
    } else if (WEXITSTATUS(st) == 2) {
      refused++;
    }
    if (!bad && m < cli_samples) {
      char args[3072];
      if (k->verify) {
        snprintf(args, sizeof args, "verify '%s'", dataset);
        bad |= cli_check(args, file, file);
      } else {
        snprintf(args, sizeof args, "inspect '%s' --format %s", dataset, k->format);
        bad |= cli_check(args, dataset, file);
        snprintf(args, sizeof args, "convert '%s' --format %s --to raw --out '%s'", dataset,
                 k->format, out);
        bad |= cli_check(args, dataset, file);
        pb__remove_tree(out);
        char side[1100];
        snprintf(side, sizeof side, "%s.manifest.json", out);
        unlink(side);
      }
      if (bad) fprintf(stderr, "%s mutant %ld (%s: %s): the command line failed\n", k->name, m,
                       file + strlen(root) + 1, what);
    }
    if (bad) {
      keep(k->name, m, file, &b);
      failures++;
    }
    write_back(file, orig, orig_n);
    pb_free(orig, orig_n);
    free(b.p);
  }
  printf("%-12s %ld mutants over %zu files: %ld refused, %ld read, %d failed (%.1f s)\n", k->name,
         per_kind, n_files, refused, per_kind - refused - failures, failures,
         (double)(pb_now_ns() - t0) / 1e9);
  for (size_t i = 0; i < n_files; i++) free(files[i]);
  return failures;
}

int main(int argc, char **argv) {
  long per_kind = argc > 1 ? strtol(argv[1], NULL, 10) : PB_MUTATE_PER_KIND;
  uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 20261126u;
  int cli_samples = 1;
  const char *tmp = getenv("TMPDIR");
  snprintf(root, sizeof root, "%s/pb_mutate_%d", tmp && tmp[0] ? tmp : "/tmp", (int)getpid());
  /* A claimed image above this is refused before it is allocated (docs/formats.md). */
  setenv("PIPEBENCH_MAX_IMAGE_BYTES", "67108864", 1);
  char args[2048];
  snprintf(args, sizeof args,
           "--out '%s/a' --rows 3 --size 20x16 --channels 2 --z 2 --seed 5 "
           "--formats raw,tiff,ome-parquet",
           root);
  gen(args);
  snprintf(args, sizeof args,
           "--out '%s/z2' --rows 2 --size 20x16 --channels 2 --seed 5 --formats ome-zarr "
           "--chunk 10x8 --options zarr=2",
           root);
  gen(args);
  snprintf(args, sizeof args,
           "--out '%s/z3' --rows 2 --size 20x16 --channels 2 --seed 5 --formats ome-zarr "
           "--chunk 10x8 --compression zstd --options zarr=3,shard=1x1x1x2x2",
           root);
  gen(args);
  int failures = 0;
  for (size_t k = 0; k < N_KINDS; k++) failures += run_kind(&kinds[k], per_kind, seed, cli_samples);
  pb__remove_tree(root);
  if (failures > 0) FAIL("%d mutants crashed, hung or were refused without the file named", failures);
  return 0;
}
