/* Lance datasets, read and written by the Lance engine itself (lancedb for Node, pinned by
 * lib/formats/lance/helper/package-lock.json and installed by scripts/setup.sh). No C library for
 * Lance exists here, so a Node helper (pb_lance.js) does the engine's part: the backend starts
 * it through common/proc in a thread of its own and speaks to it over a Unix socket, one
 * request at a time (protocol in docs/format-lance.md). */
#include "formats/lance/lance.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/checked.h"
#include "common/proc.h"
#include "formats/format_internal.h"
#include "io/io.h"
#include "pipebench/sys.h"

/* In a build, the helper is in the source tree and its packages where scripts/setup.sh put
 * them; both found from the source tree's python/ folder that the build names. */
#define PB_SOURCE_LANCE_DIR PB_SOURCE_PYTHON_DIR "/../lib/formats/lance/helper"
#define PB_SOURCE_LANCE_MODULES PB_SOURCE_PYTHON_DIR "/../third_party/lance/node_modules"

enum { LANCE_PATH = 4200 };
#define LANCE_OPEN_S 120.0   /* the helper starts, opens the dataset and reads its metadata */
#define LANCE_READ_S 300.0   /* one image */
#define LANCE_TAKE_S 3600.0  /* a timed pass over a sample order */
#define LANCE_WRITE_S 7200.0 /* a whole dataset */

/* ---- where the helper is --------------------------------------------------------------------- */

typedef struct lance_where {
  char node[LANCE_PATH];    /* the node program */
  char script[LANCE_PATH];  /* pb_lance.js */
  char modules[LANCE_PATH]; /* the node_modules folder holding @lancedb/lancedb */
} lance_where;

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* PIPEBENCH_LANCE_DIR (a folder with pb_lance.js and node_modules/), else the installed tree,
 * else the source tree (helper in lib/formats/lance/helper, packages in third_party/lance). The
 * node program: PIPEBENCH_NODE, else node on PATH. */
static int lance_find(lance_where *w, struct pb_error *err) {
  char dir[LANCE_PATH];
  const char *env = getenv("PIPEBENCH_LANCE_DIR");
  if (env != NULL && env[0] != '\0') snprintf(dir, sizeof dir, "%s", env);
  else pb_install_path("lance", "pb_lance.js", dir, sizeof dir); /* PREFIX/share/pipebench/lance */
  if (dir[0] != '\0') {
    snprintf(w->script, sizeof w->script, "%s/pb_lance.js", dir);
    snprintf(w->modules, sizeof w->modules, "%s/node_modules", dir);
  } else {
    snprintf(w->script, sizeof w->script, "%s/pb_lance.js", PB_SOURCE_LANCE_DIR);
    snprintf(w->modules, sizeof w->modules, "%s", PB_SOURCE_LANCE_MODULES);
  }
  const char *node = getenv("PIPEBENCH_NODE");
  w->node[0] = '\0';
  if (node != NULL && node[0] != '\0') {
    if (access(node, X_OK) == 0) snprintf(w->node, sizeof w->node, "%s", node);
  } else {
    const char *path = getenv("PATH");
    char part[LANCE_PATH];
    for (const char *p = path ? path : "/usr/bin:/bin"; *p != '\0';) {
      size_t n = strcspn(p, ":");
      snprintf(part, sizeof part, "%.*s/node", (int)n, p);
      if (n > 0 && access(part, X_OK) == 0) {
        snprintf(w->node, sizeof w->node, "%s", part);
        break;
      }
      p += n + (p[n] == ':');
    }
  }
  if (w->node[0] == '\0')
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "the lance format needs Node.js (node on PATH, or PIPEBENCH_NODE), which "
                        "is not here");
  if (!is_file(w->script))
    return pb_error_set(err, PB_EUNSUPPORTED, "the lance format's helper %s is missing", w->script);
  char pkg[LANCE_PATH + 64];
  snprintf(pkg, sizeof pkg, "%s/@lancedb/lancedb/package.json", w->modules);
  if (!is_file(pkg))
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "the lance format needs @lancedb/lancedb in %s: run scripts/setup.sh "
                        "(it installs the pinned engine when Node and the npm registry are there)",
                        w->modules[0] ? w->modules : "third_party/lance/node_modules");
  return PB_OK;
}

int pb__lance_engine(char *engine, size_t size, struct pb_error *err) {
  lance_where w;
  PB_RETURN_NOT_OK(lance_find(&w, err));
  char pkg[LANCE_PATH + 64];
  snprintf(pkg, sizeof pkg, "%s/@lancedb/lancedb/package.json", w.modules);
  void *text = NULL;
  size_t n = 0;
  cJSON *j = NULL;
  if (pb__read_file(pkg, &text, &n, NULL) == PB_OK) {
    j = cJSON_ParseWithLength(text, n);
    pb_free(text, n);
  }
  const cJSON *v = cJSON_GetObjectItem(j, "version");
  if (engine != NULL)
    snprintf(engine, size, "lancedb-node %s", cJSON_IsString(v) ? v->valuestring : "unknown");
  cJSON_Delete(j);
  return PB_OK;
}

/* ---- the helper serving one dataset ---------------------------------------------------------- */

struct pb__lance {
  char path[4096];
  char dir[128], sock[160], log[160]; /* private folder: the socket, the helper's output */
  lance_where where;
  char env_node_path[LANCE_PATH + 16], env_tmp[160];
  const char *argv[6], *env[12];
  char **s3_env; /* s3:// datasets: the S3 settings, handed over in the environment */
  double timeout_s; /* --timeout and --retries for the engine's requests (0 and -1: its own) */
  int retries;
  pb__proc proc;
  pb__proc_result res;
  struct pb_error perr;
  pthread_t thread;
  int thread_started;
  atomic_int done;
  volatile sig_atomic_t cancel;
  int fd;
  int64_t n;
  pb_image_meta *metas;
};

static void *lance_thread(void *arg) {
  pb__lance *l = arg;
  pb__proc_run(&l->proc, &l->res, &l->perr);
  atomic_store(&l->done, 1);
  return NULL;
}

/* A private folder for the socket and the log: short, since a socket's path is at most 107
 * bytes; TMPDIR when it is short enough, else /tmp. */
static int lance_private_dir(char *buf, size_t size, struct pb_error *err) {
  const char *t = pb_tmp_dir();
  if (strlen(t) > 64) t = "/tmp";
  snprintf(buf, size, "%s/pb-lance-XXXXXX", t);
  if (mkdtemp(buf) == NULL)
    return pb_error_set(err, -errno, "cannot make a folder for the Lance helper in %s: %s", t,
                        strerror(errno));
  return PB_OK;
}

/* Why the helper is gone: waits for its runner and says how it ended, with its last words. */
static int lance_gone(pb__lance *l, const char *when, struct pb_error *err) {
  for (int k = 0; k < 300 && !atomic_load(&l->done); k++) nanosleep(&(struct timespec){0, 10000000}, NULL);
  if (!atomic_load(&l->done)) l->cancel = 1;
  if (l->thread_started) {
    pthread_join(l->thread, NULL);
    l->thread_started = 0;
  }
  char how[64], tail[400];
  if (l->res.term_signal != 0) snprintf(how, sizeof how, "killed by signal %d", l->res.term_signal);
  else if (!l->res.started) snprintf(how, sizeof how, "could not start");
  else snprintf(how, sizeof how, "exit status %d", l->res.exit_code);
  pb__proc_tail(l->log, 3, tail, sizeof tail);
  return pb_error_set(err, PB_ECHILD, "%s: the Lance helper ended %s (%s)%s%s", l->path, when, how,
                      tail[0] ? ": " : "", tail);
}

/* Waits until fd is readable (or the time is up, or the helper is gone). */
static int lance_wait(pb__lance *l, double limit_s, const char *when, struct pb_error *err) {
  int64_t t0 = pb_now_ns();
  for (;;) {
    struct pollfd pfd = {.fd = l->fd, .events = POLLIN};
    int r = poll(&pfd, 1, 200);
    if (r > 0) return PB_OK;
    if (r < 0 && errno != EINTR) return pb_error_set(err, -errno, "%s: poll: %s", l->path, strerror(errno));
    if (atomic_load(&l->done)) return lance_gone(l, when, err);
    if ((double)(pb_now_ns() - t0) / 1e9 > limit_s) {
      l->cancel = 1;
      return pb_error_set(err, PB_ECHILD, "%s: the Lance helper gave no answer in %.0f s, stopped",
                          l->path, limit_s);
    }
  }
}

static int lance_recv(pb__lance *l, void *buf, size_t n, double limit_s, const char *when,
                      struct pb_error *err) {
  char *p = buf;
  while (n > 0) {
    PB_RETURN_NOT_OK(lance_wait(l, limit_s, when, err));
    ssize_t r = recv(l->fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return lance_gone(l, when, err);
    p += r;
    n -= (size_t)r;
  }
  return PB_OK;
}

/* Sends one request line and reads the answer's header: *len payload bytes follow. An error
 * answer is read whole and returned as PB_EFORMAT naming the dataset. */
static int lance_ask(pb__lance *l, const char *line, double limit_s, const char *when,
                     uint64_t *len, struct pb_error *err) {
  size_t n = strlen(line), off = 0;
  while (off < n) {
    ssize_t r = send(l->fd, line + off, n - off, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return lance_gone(l, when, err);
    off += (size_t)r;
  }
  unsigned char h[16];
  PB_RETURN_NOT_OK(lance_recv(l, h, sizeof h, limit_s, when, err));
  uint64_t v = 0;
  for (int k = 7; k >= 0; k--) v = (v << 8) | h[8 + k];
  int ok = h[0] == 'O' && h[1] == 'K';
  if (!ok && !(h[0] == 'E' && h[1] == 'R'))
    return pb_error_set(err, PB_ECHILD, "%s: the Lance helper answered garbage", l->path);
  if (!ok) {
    char msg[700];
    size_t take = v < sizeof msg - 1 ? (size_t)v : sizeof msg - 1;
    PB_RETURN_NOT_OK(lance_recv(l, msg, take, limit_s, when, err));
    msg[take] = '\0';
    for (uint64_t rest = v - take; rest > 0;) { /* drop the rest of a long message */
      char skip[256];
      size_t k = rest < sizeof skip ? (size_t)rest : sizeof skip;
      PB_RETURN_NOT_OK(lance_recv(l, skip, k, limit_s, when, err));
      rest -= k;
    }
    return pb_error_set(err, PB_EFORMAT, "%s: %s", l->path, msg);
  }
  *len = v;
  return PB_OK;
}

static int lance_ask_text(pb__lance *l, const char *line, double limit_s, const char *when,
                          char **text, struct pb_error *err) {
  uint64_t len;
  PB_RETURN_NOT_OK(lance_ask(l, line, limit_s, when, &len, err));
  if (len > ((uint64_t)1 << 31))
    return pb_error_set(err, PB_EFORMAT, "%s: the Lance helper's answer of %llu bytes is too long",
                        l->path, (unsigned long long)len);
  *text = malloc((size_t)len + 1);
  if (*text == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int rc = lance_recv(l, *text, (size_t)len, limit_s, when, err);
  if (rc != PB_OK) {
    free(*text);
    *text = NULL;
    return rc;
  }
  (*text)[len] = '\0';
  return PB_OK;
}

/* One more NAME=VALUE in the S3 settings handed to the helper. */
static int s3_env_add(pb__lance *l, const char *name, const char *value, struct pb_error *err) {
  size_t n = 0;
  while (l->s3_env[n] != NULL) n++;
  char **e = realloc(l->s3_env, (n + 2) * sizeof *e);
  if (e == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  l->s3_env = e;
  size_t len = strlen(name) + strlen(value) + 2;
  if ((e[n] = malloc(len)) == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  snprintf(e[n], len, "%s=%s", name, value);
  e[n + 1] = NULL;
  return PB_OK;
}

static int lance_start(pb__lance *l, struct pb_error *err) {
  /* s3://: the endpoint, region and credentials pipebench's own reads would use, handed over
   * in the helper's environment (which only its owner may read), never on its command line;
   * with them --timeout and --retries, which the helper gives lancedb's object store */
  if (strncasecmp(l->path, "s3://", 5) == 0) {
    PB_RETURN_NOT_OK(pb__io_s3_env(&l->s3_env, err));
    char v[32];
    if (l->timeout_s > 0) {
      snprintf(v, sizeof v, "%.3f", l->timeout_s);
      PB_RETURN_NOT_OK(s3_env_add(l, "PB_S3_TIMEOUT_S", v, err));
    }
    if (l->retries >= 0) {
      snprintf(v, sizeof v, "%d", l->retries);
      PB_RETURN_NOT_OK(s3_env_add(l, "PB_S3_RETRIES", v, err));
    }
  }
  PB_RETURN_NOT_OK(lance_private_dir(l->dir, sizeof l->dir, err));
  snprintf(l->sock, sizeof l->sock, "%s/s", l->dir);
  snprintf(l->log, sizeof l->log, "%s/log", l->dir);
  int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0) return pb_error_set(err, -errno, "socket: %s", strerror(errno));
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", l->sock);
  if (bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 1) != 0) {
    int e = errno;
    close(lfd);
    return pb_error_set(err, -e, "%s: cannot listen for the Lance helper: %s", l->sock, strerror(e));
  }
  snprintf(l->env_node_path, sizeof l->env_node_path, "NODE_PATH=%s", l->where.modules);
  snprintf(l->env_tmp, sizeof l->env_tmp, "TMPDIR=%s", l->dir);
  l->env[0] = l->env_node_path;
  l->env[1] = l->env_tmp;
  l->env[2] = NULL;
  for (size_t k = 0; l->s3_env != NULL && l->s3_env[k] != NULL && k < 9; k++) {
    l->env[2 + k] = l->s3_env[k];
    l->env[3 + k] = NULL;
  }
  l->argv[0] = l->where.node;
  l->argv[1] = l->where.script;
  l->argv[2] = "serve";
  l->argv[3] = l->path;
  l->argv[4] = l->sock;
  l->argv[5] = NULL;
  l->proc = (pb__proc){.argv = l->argv, .env = l->env, .stdout_path = l->log,
                       .stderr_path = l->log, .cancel = &l->cancel};
  if (pthread_create(&l->thread, NULL, lance_thread, l) != 0) {
    close(lfd);
    return pb_error_set(err, PB_ENOMEM, "cannot start a thread for the Lance helper");
  }
  l->thread_started = 1;
  int64_t t0 = pb_now_ns();
  while (l->fd < 0) {
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    if (poll(&pfd, 1, 100) > 0) {
      l->fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
      if (l->fd >= 0) break;
    }
    if (atomic_load(&l->done)) {
      close(lfd);
      return lance_gone(l, "before it opened the dataset", err);
    }
    if ((double)(pb_now_ns() - t0) / 1e9 > LANCE_OPEN_S) {
      close(lfd);
      l->cancel = 1;
      return pb_error_set(err, PB_ECHILD, "%s: the Lance helper did not start in %.0f s", l->path,
                          LANCE_OPEN_S);
    }
  }
  close(lfd);
  return PB_OK;
}

void pb__lance_free(pb__lance *l) {
  if (l == NULL) return;
  if (l->fd >= 0) close(l->fd); /* the helper ends when its socket closes */
  if (l->thread_started) {
    for (int k = 0; k < 300 && !atomic_load(&l->done); k++)
      nanosleep(&(struct timespec){0, 10000000}, NULL);
    if (!atomic_load(&l->done)) l->cancel = 1;
    pthread_join(l->thread, NULL);
  }
  if (l->dir[0] != '\0') pb__remove_tree(l->dir);
  pb__io_s3_env_free(l->s3_env);
  free(l->metas);
  free(l);
}

int64_t pb__lance_count(const pb__lance *l) { return l->n; }

static void copy_str(char *dst, size_t size, const cJSON *v) {
  snprintf(dst, size, "%s", cJSON_IsString(v) ? v->valuestring : "");
}

/* Image i's meta out of the helper's description. */
static int lance_meta_of(const pb__lance *l, int64_t i, const cJSON *im, pb_image_meta *m,
                         struct pb_error *err) {
  const cJSON *shape = cJSON_GetObjectItem(im, "shape");
  const cJSON *dt = cJSON_GetObjectItem(im, "dtype");
  int64_t s[PB_NDIM];
  if (cJSON_GetArraySize(shape) != PB_NDIM || !cJSON_IsString(dt))
    return pb_error_set(err, PB_EFORMAT, "%s: image %lld: no shape or dtype", l->path, (long long)i);
  for (int k = 0; k < PB_NDIM; k++) {
    double v = cJSON_GetNumberValue(cJSON_GetArrayItem(shape, k));
    if (!(v >= 1 && v < 9.0e15))
      return pb_error_set(err, PB_EFORMAT, "%s: image %lld: bad shape", l->path, (long long)i);
    s[k] = (int64_t)v;
  }
  pb_dtype d;
  if (pb_dtype_parse(dt->valuestring, &d) != PB_OK)
    return pb_error_set(err, PB_EFORMAT, "%s: image %lld: unknown dtype '%s'", l->path,
                        (long long)i, dt->valuestring);
  int64_t px, bytes;
  if (!pb__prod_i64_ok(s, PB_NDIM, &px) || !pb__mul_i64_ok(px, (int64_t)pb_dtype_size(d), &bytes) ||
      (uint64_t)bytes > (uint64_t)SIZE_MAX / 2)
    return pb_error_set(err, PB_EFORMAT, "%s: image %lld: shape too large", l->path, (long long)i);
  const cJSON *name = cJSON_GetObjectItem(im, "name");
  pb_image_meta_init(m, cJSON_IsString(name) ? name->valuestring : "", d, s);
  copy_str(m->id, sizeof m->id, cJSON_GetObjectItem(im, "id"));
  const cJSON *ps = cJSON_GetObjectItem(im, "physical_size"), *un = cJSON_GetObjectItem(im, "units");
  for (int k = 0; k < 3; k++) {
    double v = cJSON_GetNumberValue(cJSON_GetArrayItem(ps, k));
    m->physical_size[k] = v == v ? v : 0; /* NaN when absent */
    copy_str(m->physical_unit[k], sizeof m->physical_unit[k], cJSON_GetArrayItem(un, k));
  }
  const cJSON *ch;
  cJSON_ArrayForEach(ch, cJSON_GetObjectItem(im, "channels")) {
    if (m->n_channels == PB_MAX_CHANNELS) break;
    pb_channel *c = &m->channels[m->n_channels++];
    copy_str(c->id, sizeof c->id, cJSON_GetObjectItem(ch, "id"));
    copy_str(c->name, sizeof c->name, cJSON_GetObjectItem(ch, "name"));
    copy_str(c->illumination, sizeof c->illumination, cJSON_GetObjectItem(ch, "illumination"));
    double em = cJSON_GetNumberValue(cJSON_GetObjectItem(ch, "emission_um"));
    double ex = cJSON_GetNumberValue(cJSON_GetObjectItem(ch, "excitation_um"));
    double co = cJSON_GetNumberValue(cJSON_GetObjectItem(ch, "color_rgba"));
    c->emission_um = em == em ? (float)em : 0;
    c->excitation_um = ex == ex ? (float)ex : 0;
    c->color_rgba = co >= 0 && co <= 4294967295.0 ? (uint32_t)co : 0;
  }
  return PB_OK;
}

int pb__lance_open(const char *path, const pb_read_options *opts, pb__lance **out,
                   struct pb_error *err) {
  *out = NULL;
  /* A URL: the engine reads it through its own object store (s3:// only, see
   * pb__format_url_check); its listing and stat are the engine's too. */
  if (pb__io_is_url(path)) PB_RETURN_NOT_OK(pb__format_url_check(path, "lance", err));
  else PB_RETURN_NOT_OK(pb__check_file_kind(path, 1, "a Lance dataset", err));
  pb__lance *l = calloc(1, sizeof *l);
  if (l == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  l->fd = -1;
  atomic_init(&l->done, 0);
  snprintf(l->path, sizeof l->path, "%s", path);
  l->timeout_s = opts != NULL ? opts->timeout_s : 0;
  l->retries = opts != NULL ? opts->retries : -1;
  char *text = NULL;
  int rc = lance_find(&l->where, err);
  if (rc == PB_OK) rc = lance_start(l, err);
  if (rc == PB_OK) rc = lance_ask_text(l, "META\n", LANCE_OPEN_S, "while opening the dataset", &text, err);
  cJSON *j = NULL;
  if (rc == PB_OK && (j = cJSON_Parse(text)) == NULL)
    rc = pb_error_set(err, PB_EFORMAT, "%s: the Lance helper's description is not JSON", path);
  const cJSON *ims = cJSON_GetObjectItem(j, "images");
  if (rc == PB_OK) {
    l->n = cJSON_GetArraySize(ims);
    l->metas = calloc(l->n > 0 ? (size_t)l->n : 1, sizeof *l->metas);
    if (l->metas == NULL) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  int64_t i = 0;
  const cJSON *im;
  cJSON_ArrayForEach(im, ims) {
    if (rc != PB_OK) break;
    rc = lance_meta_of(l, i, im, &l->metas[i], err);
    i++;
  }
  cJSON_Delete(j);
  free(text);
  if (rc != PB_OK) {
    pb__lance_free(l);
    return rc;
  }
  *out = l;
  return PB_OK;
}

int pb__lance_take_times(pb__lance *l, const int64_t *order, size_t n, int batch, int64_t **times,
                         size_t *ncalls, int64_t *bytes, struct pb_error *err) {
  *times = NULL;
  *ncalls = 0;
  *bytes = 0;
  char order_path[200], times_path[200], line[600];
  snprintf(order_path, sizeof order_path, "%s/order", l->dir);
  snprintf(times_path, sizeof times_path, "%s/times", l->dir);
  PB_RETURN_NOT_OK(pb__write_file(order_path, order, n * sizeof *order, err));
  snprintf(line, sizeof line, "TAKE %s %d %s %s\n", batch < 1 ? "sample" : "batch",
           batch < 1 ? 1 : batch, order_path, times_path);
  char *text = NULL;
  PB_RETURN_NOT_OK(lance_ask_text(l, line, LANCE_TAKE_S, "while timing reads", &text, err));
  cJSON *j = cJSON_Parse(text);
  free(text);
  double calls = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "calls"));
  double b = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "bytes"));
  cJSON_Delete(j);
  void *data = NULL;
  size_t size = 0;
  PB_RETURN_NOT_OK(pb__read_file(times_path, &data, &size, err));
  if (!(calls >= 0) || size != (size_t)calls * sizeof(int64_t)) {
    pb_free(data, size);
    return pb_error_set(err, PB_ECHILD, "%s: the Lance helper's times do not match its answer",
                        l->path);
  }
  *times = malloc(size > 0 ? size : 1);
  if (*times == NULL) {
    pb_free(data, size);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  memcpy(*times, data, size);
  pb_free(data, size);
  *ncalls = size / sizeof(int64_t);
  *bytes = b == b ? (int64_t)b : 0;
  unlink(order_path);
  unlink(times_path);
  return PB_OK;
}

/* ---- the reader's vtable --------------------------------------------------------------------- */

/* A Lance dataset is a folder holding _versions/ (its manifests) and, once it has rows, data/
 * (its *.lance files). Names only: nothing is opened. */
static int lance_probe(const char *path) {
  struct stat st;
  char p[4200];
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
  snprintf(p, sizeof p, "%s/_versions", path);
  if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
  snprintf(p, sizeof p, "%s/data", path);
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode) ? 90 : 60;
}

/* Lance reads its files inside its own engine (the Node helper): read options do not reach it. */
static int lance_open(const char *path, const pb_read_options *opts, void **state,
                      struct pb_error *err) {
  return pb__lance_open(path, opts, (pb__lance **)state, err);
}

static void lance_close(void *state) { pb__lance_free(state); }

static int64_t lance_count(void *state) { return ((pb__lance *)state)->n; }

static int lance_meta(void *state, int64_t i, pb_image_meta *out, struct pb_error *err) {
  pb__lance *l = state;
  if (i < 0 || i >= l->n)
    return pb_error_set(err, PB_ERANGE, "%s: no image %lld (it has %lld)", l->path, (long long)i,
                        (long long)l->n);
  *out = l->metas[i];
  return PB_OK;
}

static int lance_read(void *state, int64_t i, const pb_region *region, void *dst, size_t dst_size,
                      pb_stage_times *times, struct pb_error *err) {
  pb__lance *l = state;
  (void)dst_size; /* i, region and dst_size: checked by format.c */
  const pb_image_meta *m = &l->metas[i];
  size_t want = pb_image_bytes(m);
  int whole = region == NULL;
  if (!whole) {
    whole = 1;
    for (int k = 0; k < PB_NDIM; k++) whole &= region->start[k] == 0 && region->count[k] == m->shape[k];
  }
  int64_t t0 = pb_now_ns();
  char line[64];
  snprintf(line, sizeof line, "READ %lld\n", (long long)i);
  uint64_t len;
  PB_RETURN_NOT_OK(lance_ask(l, line, LANCE_READ_S, "mid-read", &len, err));
  if (len != want) {
    l->cancel = 1; /* the stream is out of step: this helper is done */
    return pb_error_set(err, PB_EFORMAT, "%s: image %lld: the engine gave %llu bytes, not %zu",
                        l->path, (long long)i, (unsigned long long)len, want);
  }
  void *buf = whole ? dst : malloc(want > 0 ? want : 1);
  if (buf == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int rc = lance_recv(l, buf, want, LANCE_READ_S, "mid-read", err);
  if (rc == PB_OK && !whole) {
    int64_t zero[PB_NDIM] = {0, 0, 0, 0, 0};
    pb__copy_box(dst, region->start, region->count, buf, zero, m->shape, pb_dtype_size(m->dtype));
  }
  if (!whole) free(buf);
  if (rc == PB_OK && times != NULL) {
    times->read_ns += pb_now_ns() - t0;
    times->bytes_read += (int64_t)want;
    times->bytes_decoded += (int64_t)want;
  }
  return rc;
}

/* ---- the writer ------------------------------------------------------------------------------ */

static const char *const lance_layouts[] = {"chunks", "planes", "bytes"};

typedef struct lance_writer {
  char path[4096], tmp[4200];
  lance_where where;
  const char *layout;
  int64_t chunk[3]; /* z, y, x of the chunks layout */
  FILE *meta;
  int px_fd;
  int64_t off, n;
  pb_dtype dtype;
  int finished;
} lance_writer;

static void lance_writer_free(void *ws) {
  lance_writer *w = ws;
  if (w == NULL) return;
  if (w->meta != NULL) fclose(w->meta);
  if (w->px_fd >= 0) close(w->px_fd);
  if (!w->finished && w->tmp[0] != '\0') pb__remove_tree(w->tmp);
  free(w);
}

static int lance_writer_open(const char *path, const pb_write_params *params, void **wstate,
                             struct pb_error *err) {
  *wstate = NULL;
  lance_writer *w = calloc(1, sizeof *w);
  if (w == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  w->px_fd = -1;
  snprintf(w->path, sizeof w->path, "%s", path);
  w->layout = lance_layouts[0];
  char v[64];
  int rc = PB_OK;
  if (pb__opt_get(params->options, "layout", v, sizeof v)) {
    w->layout = NULL;
    for (size_t k = 0; k < sizeof lance_layouts / sizeof lance_layouts[0]; k++)
      if (strcmp(v, lance_layouts[k]) == 0) w->layout = lance_layouts[k];
    if (w->layout == NULL)
      rc = pb_error_set(err, PB_EINVAL, "lance: option layout=%s: use chunks, planes or bytes", v);
  }
  static const int64_t grid[3] = {1, 512, 512};
  for (int k = 0; k < 3; k++) w->chunk[k] = params->chunk[PB_Z + k] > 0 ? params->chunk[PB_Z + k] : grid[k];
  /* An earlier Lance dataset or an empty folder may be replaced; anything else is kept. */
  struct stat st;
  if (rc == PB_OK && stat(path, &st) == 0) {
    char **names = NULL;
    size_t count = 0;
    int empty = S_ISDIR(st.st_mode) && pb__list_dir(path, &names, &count, NULL) == PB_OK && count == 0;
    pb__free_names(names, count);
    if (!empty && lance_probe(path) == 0)
      rc = pb_error_set(err, PB_EIO, "%s exists and is not a Lance dataset; not replacing it", path);
  }
  if (rc == PB_OK) rc = pb__output_check(path, err);
  if (rc == PB_OK) rc = lance_find(&w->where, err);
  if (rc == PB_OK && pb__temp_sibling(path, w->tmp, sizeof w->tmp) != PB_OK)
    rc = pb_error_set(err, PB_EINVAL, "%s: no room for a temporary name", path);
  if (rc == PB_OK) rc = pb__mkdirs(w->tmp, err);
  char p[4300];
  if (rc == PB_OK) {
    snprintf(p, sizeof p, "%s/meta.jsonl", w->tmp);
    if ((w->meta = fopen(p, "w")) == NULL) rc = pb_error_set(err, -errno, "%s: %s", p, strerror(errno));
  }
  if (rc == PB_OK) {
    snprintf(p, sizeof p, "%s/pixels.bin", w->tmp);
    if ((w->px_fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
      rc = pb_error_set(err, -errno, "%s: %s", p, strerror(errno));
  }
  if (rc != PB_OK) {
    lance_writer_free(w);
    return rc;
  }
  *wstate = w;
  return PB_OK;
}

static int lance_writer_add(void *ws, const pb_image_meta *m, const void *pixels,
                            struct pb_error *err) {
  lance_writer *w = ws;
  if (w->n == 0) w->dtype = m->dtype;
  else if (m->dtype != w->dtype && strcmp(w->layout, "bytes") != 0)
    return pb_error_set(err, PB_EINVAL,
                        "%s: image %lld ('%s') is %s but the %s layout's pixel lists are %s (one "
                        "type per column); use layout=bytes for mixed types",
                        w->path, (long long)w->n, m->name, pb_dtype_name(m->dtype), w->layout,
                        pb_dtype_name(w->dtype));
  if (m->shape[PB_C] > 32767 || m->shape[PB_T] > INT32_MAX || m->shape[PB_Z] > INT32_MAX ||
      m->shape[PB_Y] > INT32_MAX || m->shape[PB_X] > INT32_MAX)
    return pb_error_set(err, PB_EINVAL, "%s: image '%s' is too large for OME-Arrow's int fields",
                        w->path, m->name);
  size_t bytes = pb_image_bytes(m);
  if (bytes > ((size_t)1 << 31) - 1)
    return pb_error_set(err, PB_EINVAL, "%s: image '%s' holds over 2 GiB, more than one Arrow "
                        "binary value of the Lance helper can", w->path, m->name);
  PB_RETURN_NOT_OK(pb__write_all(w->px_fd, pixels, bytes, "pixels.bin", err));
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", m->name);
  cJSON_AddStringToObject(o, "id", m->id[0] ? m->id : m->name);
  cJSON_AddStringToObject(o, "dtype", pb_dtype_name(m->dtype));
  cJSON *s = cJSON_AddArrayToObject(o, "shape");
  for (int k = 0; k < PB_NDIM; k++) cJSON_AddItemToArray(s, cJSON_CreateNumber((double)m->shape[k]));
  cJSON *ps = cJSON_AddArrayToObject(o, "physical_size"), *un = cJSON_AddArrayToObject(o, "units");
  for (int k = 0; k < 3; k++) {
    cJSON_AddItemToArray(ps, cJSON_CreateNumber(m->physical_size[k]));
    cJSON_AddItemToArray(un, cJSON_CreateString(m->physical_unit[k]));
  }
  cJSON *chs = cJSON_AddArrayToObject(o, "channels");
  for (int k = 0; k < m->n_channels; k++) {
    const pb_channel *c = &m->channels[k];
    cJSON *co = cJSON_CreateObject();
    cJSON_AddStringToObject(co, "id", c->id);
    cJSON_AddStringToObject(co, "name", c->name);
    cJSON_AddNumberToObject(co, "emission_um", c->emission_um);
    cJSON_AddNumberToObject(co, "excitation_um", c->excitation_um);
    cJSON_AddStringToObject(co, "illumination", c->illumination);
    cJSON_AddNumberToObject(co, "color_rgba", c->color_rgba);
    cJSON_AddItemToArray(chs, co);
  }
  cJSON_AddNumberToObject(o, "offset", (double)w->off);
  cJSON_AddNumberToObject(o, "length", (double)bytes);
  char *line = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (line == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int ok = fputs(line, w->meta) >= 0 && fputc('\n', w->meta) != EOF;
  free(line);
  if (!ok) return pb_error_set(err, PB_EIO, "%s/meta.jsonl: %s", w->tmp, strerror(errno));
  w->off += (int64_t)bytes;
  w->n++;
  return PB_OK;
}

static int lance_writer_finish(void *ws, struct pb_error *err) {
  lance_writer *w = ws;
  int bad = fclose(w->meta) != 0;
  w->meta = NULL;
  if (bad) return pb_error_set(err, PB_EIO, "%s/meta.jsonl: %s", w->tmp, strerror(errno));
  close(w->px_fd);
  w->px_fd = -1;
  char p[4300], head[160], log[4300], node_path[LANCE_PATH + 16];
  snprintf(head, sizeof head, "{\"dtype\":\"%s\",\"chunk\":[%lld,%lld,%lld]}\n",
           pb_dtype_name(w->n > 0 ? w->dtype : PB_UINT16), (long long)w->chunk[0],
           (long long)w->chunk[1], (long long)w->chunk[2]);
  snprintf(p, sizeof p, "%s/head.json", w->tmp);
  PB_RETURN_NOT_OK(pb__write_file(p, head, strlen(head), err));
  snprintf(log, sizeof log, "%s/log", w->tmp);
  snprintf(node_path, sizeof node_path, "NODE_PATH=%s", w->where.modules);
  const char *argv[] = {w->where.node, w->where.script, "write", w->tmp, w->layout, NULL};
  const char *env[] = {node_path, NULL};
  pb__proc pr = {.argv = argv, .env = env, .stdout_path = log, .stderr_path = log,
                 .timeout_s = LANCE_WRITE_S};
  pb__proc_result res;
  struct pb_error why = {{0}};
  if (pb__proc_run(&pr, &res, &why) != PB_OK) {
    char tail[600];
    pb__proc_tail(log, 3, tail, sizeof tail);
    return pb_error_set(err, PB_ECHILD, "%s: the Lance engine could not write the dataset: %s",
                        w->path, tail[0] ? tail : why.message);
  }
  snprintf(p, sizeof p, "%s/db/images.lance", w->tmp);
  struct stat st;
  char old[4300] = "";
  if (stat(w->path, &st) == 0) {
    pb__temp_sibling(w->path, old, sizeof old);
    if (rename(w->path, old) != 0)
      return pb_error_set(err, -errno, "%s: cannot move the old dataset aside: %s", w->path,
                          strerror(errno));
  }
  if (rename(p, w->path) != 0) {
    int e = errno;
    if (old[0] != '\0') rename(old, w->path);
    return pb_error_set(err, -e, "%s: cannot rename %s into place: %s", w->path, p, strerror(e));
  }
  if (old[0] != '\0') pb__remove_tree(old);
  pb__remove_tree(w->tmp);
  w->finished = 1;
  return PB_OK;
}

static const char *const lance_write_options[] = {"layout=chunks|planes|bytes", NULL};

const pb_format_vtable pb__format_lance = {
    .info = {"lance", "Lance dataset, read and written by the Lance engine (lancedb for Node)", 1, 1},
    .probe = lance_probe,
    .open = lance_open,
    .close = lance_close,
    .count = lance_count,
    .meta = lance_meta,
    .read = lance_read,
    .writer_open = lance_writer_open,
    .writer_add = lance_writer_add,
    .writer_finish = lance_writer_finish,
    .writer_free = lance_writer_free,
    .write_options = lance_write_options,
};
