/* pipebench revs: each task in a detached worktree of its revision, built once, run in
 * interleaved rounds; one record per task with git info, per-repeat samples and medians. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tools/peer.h"
#include "revs/revs_internal.h"
#include "pipebench/sys.h"
#include "pipebench/results.h"

#define GIT_TIMEOUT_S 600.0
#define MAX_METRICS 128

/* Flat names (pipebench train --metrics-out, older task scripts) at the top level of a task's
 * metrics JSON, and the path of the guide's nested shape each one takes. "@" stands for the
 * task's total group: total_training, or total_inference for inference tasks. Every other
 * number keeps the path it has in the file. */
static const struct {
  const char *src, *path;
} legacy[] = {
    {"total_time_s", "@.elapsed_seconds"},
    {"training_seconds", "@.elapsed_seconds"},
    {"peak_rss_mb", "@.peak_memory_mb"},
    {"peak_memory_mb", "@.peak_memory_mb"},
    {"gpu_peak_memory_mb", "peak_gpu_memory_mb"},
    {"first_epoch_time_s", "epoch_breakdown.first_epoch.elapsed_seconds"},
    {"first_epoch_seconds", "epoch_breakdown.first_epoch.elapsed_seconds"},
    {"first_batch_data_s", "epoch_breakdown.data_loading_first_batch.elapsed_seconds"},
    {"first_batch_compute_s", "epoch_breakdown.model_forward_first_batch.elapsed_seconds"},
    {"data_time_s", "epoch_breakdown.data_seconds"},
    {"compute_time_s", "epoch_breakdown.compute_seconds"},
    {"data_wait_fraction", "epoch_breakdown.data_wait_fraction"},
    {"images", "dataset_info.num_samples"},
    {"num_samples", "dataset_info.num_samples"},
    {"batch_size", "dataset_info.batch_size"},
    {"epochs", "dataset_info.epochs"},
    {"steps", "dataset_info.steps"},
    {"throughput_ips", "dataset_info.throughput_samples_per_sec"},
    {"samples_per_second", "dataset_info.throughput_samples_per_sec"},
    {"final_loss", "final_metrics.final_loss"},
    {"first_loss", "final_metrics.first_loss"},
    {"lr", "settings.lr"},
    {"threads", "settings.threads"},
    {"seed", "settings.seed"},
    {"gflops_per_image_forward", "settings.gflops_per_image_forward"},
    {"engine_memory_mb", "@.engine_memory_mb"},
};

/* pipebench presets an experiment may name when the revision has no configs/NAME. */
static const struct {
  const char *name, *options;
} presets[] = {
    {"default", ""},
    {"smoke", "num-images=64"},
    {"embed", "model=embed num-images=256"},
    {"embed-mse", "model=embed loss=mse num-images=256"},
};

typedef struct series {
  char name[160]; /* dotted path in the output's metrics object */
  double *v;
  size_t n, cap;
} series;

/* A checked-out revision, shared by the tasks that use the same commit. */
typedef struct worktree {
  char commit[48];
  char path[4096];
  int added, built, build_failed;
  double build_s;
  char build_error[1024];
  /* from the revision's .pipebench/revs.json (NULL: none) */
  char *file_train, *file_infer, *file_build;
} worktree;

typedef struct task_state {
  pb_revs_task *t;
  char commit[48], commit_date[64], timestamp[32];
  int wt;          /* index into the worktree list, -1 before */
  int ready;       /* checked out and built: may run */
  int failed;
  int runs_done;
  int reported;    /* runs whose metrics file the task wrote */
  char error[1024];
  series m[MAX_METRICS];
  int nm;
} task_state;

typedef struct revs_ctx {
  const pb_revs_params *p;
  char tmp[4096];
  char top[4096];
  worktree *wts;
  size_t nwt;
  task_state *ts;
  size_t nts;
  long step, total_steps;
} revs_ctx;

static void report(revs_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(revs_ctx *c, const char *fmt, ...) {
  if (c->p->report == NULL) return;
  char line[1400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  c->p->report(c->p->report_ctx, line);
}

static void progress(revs_ctx *c, const char *what) {
  if (c->p->progress != NULL) c->p->progress(c->p->progress_ctx, what, c->step, c->total_steps);
}

static int canceled(const revs_ctx *c) { return c->p->cancel != NULL && *c->p->cancel != 0; }

static series *find_series(task_state *s, const char *name) {
  for (int k = 0; k < s->nm; k++)
    if (strcmp(s->m[k].name, name) == 0) return &s->m[k];
  return NULL;
}

static size_t series_n(task_state *s, const char *name) {
  series *m = find_series(s, name);
  return m ? m->n : 0;
}

static int add_value(task_state *s, const char *name, double v) {
  if (!isfinite(v)) return PB_OK;
  series *m = find_series(s, name);
  if (m == NULL) {
    if (s->nm == MAX_METRICS) return PB_OK; /* more than anyone will compare; drop the rest */
    m = &s->m[s->nm++];
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
  }
  if (m->n == m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 8;
    double *nv = realloc(m->v, cap * sizeof *nv);
    if (nv == NULL) return PB_ENOMEM;
    m->v = nv;
    m->cap = cap;
  }
  m->v[m->n++] = v;
  return PB_OK;
}

static const char *total_group(const pb_revs_task *t) {
  return t->kind == PB_REVS_INFER ? "total_inference" : "total_training";
}

/* Takes every number of a task's metrics JSON at its dotted path (the guide's nested shape as
 * it is), flat legacy names at the top level moved to their place in that shape. A top-level
 * object named "metrics" is read as the top level itself. */
static void take_metrics(task_state *s, const cJSON *obj, const char *prefix) {
  const cJSON *it;
  cJSON_ArrayForEach(it, obj) {
    if (it->string == NULL || it->string[0] == '\0' || strchr(it->string, '.') != NULL) continue;
    char path[320];
    if (prefix[0] == '\0' && cJSON_IsObject(it) && strcmp(it->string, "metrics") == 0) {
      take_metrics(s, it, "");
      continue;
    }
    if (prefix[0] == '\0' && cJSON_IsNumber(it)) {
      size_t i = 0;
      while (i < sizeof legacy / sizeof legacy[0] && strcmp(legacy[i].src, it->string) != 0) i++;
      if (i < sizeof legacy / sizeof legacy[0]) {
        if (legacy[i].path[0] == '@')
          snprintf(path, sizeof path, "%s%s", total_group(s->t), legacy[i].path + 1);
        else
          snprintf(path, sizeof path, "%s", legacy[i].path);
        add_value(s, path, it->valuedouble);
        continue;
      }
    }
    int len = snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", it->string);
    if (len <= 0 || (size_t)len >= 159) continue;
    if (cJSON_IsNumber(it)) add_value(s, path, it->valuedouble);
    else if (cJSON_IsObject(it)) take_metrics(s, it, path);
  }
}

/* ---- git ------------------------------------------------------------------------------- */

/* Runs git with args in the top folder; its stdout (trimmed) into out. */
static int git(revs_ctx *c, char *out, size_t out_size, struct pb_error *err, ...) {
  char *argv[16];
  int n = 0;
  argv[n++] = "git";
  argv[n++] = "-C";
  argv[n++] = c->top[0] ? c->top : ".";
  va_list ap;
  va_start(ap, err);
  const char *a;
  while (n < 15 && (a = va_arg(ap, const char *)) != NULL) argv[n++] = (char *)a;
  va_end(ap);
  argv[n] = NULL;
  char op[4200], ep[4200];
  snprintf(op, sizeof op, "%s/git.out", c->tmp);
  snprintf(ep, sizeof ep, "%s/git.err", c->tmp);
  /* cleanup runs after a cancel too, so git is never handed the cancel flag */
  int rc = pb__revs_exec(argv, NULL, NULL, GIT_TIMEOUT_S, op, ep, NULL, NULL, err);
  if (out != NULL && out_size > 0) {
    out[0] = '\0';
    FILE *f = fopen(op, "rb");
    if (f != NULL) {
      size_t got = fread(out, 1, out_size - 1, f);
      out[got] = '\0';
      fclose(f);
      while (got > 0 && (out[got - 1] == '\n' || out[got - 1] == '\r' || out[got - 1] == ' '))
        out[--got] = '\0';
    }
  }
  if (rc != PB_OK) pb_error_prefix(err, "git %s: ", argv[3]);
  return rc;
}

static void remove_worktrees(revs_ctx *c) {
  for (size_t i = 0; i < c->nwt; i++) {
    if (!c->wts[i].added) continue;
    git(c, NULL, 0, NULL, "worktree", "remove", "--force", c->wts[i].path, (char *)NULL);
    c->wts[i].added = 0;
  }
  if (c->top[0]) git(c, NULL, 0, NULL, "worktree", "prune", (char *)NULL);
}

static void remove_tmp(revs_ctx *c) {
  if (c->tmp[0] == '\0') return;
  char *argv[] = {"rm", "-rf", c->tmp, NULL};
  pb__revs_exec(argv, NULL, NULL, 600.0, NULL, NULL, NULL, NULL, NULL);
  c->tmp[0] = '\0';
}

/* ---- preparing a task: revision, worktree, build ----------------------------------------- */

typedef struct argv_list {
  char **v;
  size_t n, cap;
} argv_list;
static void argv_free(argv_list *a);
static int push_options(argv_list *a, const char *text, struct pb_error *err);
static int experiment_options(const worktree *w, const char *exp, argv_list *a,
                              struct pb_error *err);

static int is_pipebench_tree(const char *dir) {
  char p[4200];
  snprintf(p, sizeof p, "%s/include/pipebench/core.h", dir);
  return access(p, F_OK) == 0;
}

/* ---- command templates --------------------------------------------------------------- */

/* The revision's .pipebench/revs.json: {"train": "...", "infer": "...", "build": "..."}; a
 * revision without one (an older branch) uses the one in your working tree, if any. */
static int read_repo_file(const char *top, worktree *w, struct pb_error *err) {
  char path[4400];
  snprintf(path, sizeof path, "%s/.pipebench/revs.json", w->path);
  if (access(path, F_OK) != 0) snprintf(path, sizeof path, "%s/.pipebench/revs.json", top);
  if (access(path, F_OK) != 0) return PB_OK;
  cJSON *root = pb_load_json(path, err);
  if (root == NULL) return PB_EFORMAT;
  int rc = PB_OK;
  if (!cJSON_IsObject(root)) {
    rc = pb_error_set(err, PB_EFORMAT, "%s (for revision %.12s): not a JSON object", path,
                      w->commit);
  } else {
    static const char *const keys[] = {"train", "infer", "build"};
    char **slot[] = {&w->file_train, &w->file_infer, &w->file_build};
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
      int k = 0;
      while (k < 3 && strcmp(it->string, keys[k]) != 0) k++;
      if (k == 3 || !cJSON_IsString(it) || it->valuestring[0] == '\0') {
        rc = pb_error_set(err, PB_EFORMAT,
                          "%s (for revision %.12s): '%s' is not one of the keys train, infer, "
                          "build with a non-empty command string",
                          path, w->commit, it->string);
        break;
      }
      free(*slot[k]);
      *slot[k] = strdup(it->valuestring);
      if (*slot[k] == NULL) {
        rc = pb_error_set(err, PB_ENOMEM, "out of memory");
        break;
      }
    }
  }
  cJSON_Delete(root);
  return rc;
}

/* The template of a task: the command line's, else the revision's file; NULL: pipebench's own
 * train/infer. */
static const char *task_template(const revs_ctx *c, const worktree *w, const pb_revs_task *t) {
  if (t->kind == PB_REVS_TRAIN) return c->p->train_cmd ? c->p->train_cmd : w->file_train;
  if (t->kind == PB_REVS_INFER) return c->p->infer_cmd ? c->p->infer_cmd : w->file_infer;
  return NULL;
}

typedef struct sbuf {
  char *s;
  size_t n, cap;
  int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t len) {
  if (b->oom) return;
  if (b->n + len + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (b->n + len + 1 > cap) cap *= 2;
    char *ns = realloc(b->s, cap);
    if (ns == NULL) {
      b->oom = 1;
      return;
    }
    b->s = ns;
    b->cap = cap;
  }
  memcpy(b->s + b->n, s, len);
  b->n += len;
  b->s[b->n] = '\0';
}

/* A value as one shell word: as it is when it holds only safe characters, else in single
 * quotes (a quote inside written '\''). */
static void sb_quoted(sbuf *b, const char *v) {
  int safe = v[0] != '\0';
  for (const char *q = v; safe && *q; q++)
    safe = isalnum((unsigned char)*q) || strchr("_-./=:,+@%[]", *q) != NULL;
  if (safe) {
    sb_add(b, v, strlen(v));
    return;
  }
  sb_add(b, "'", 1);
  for (const char *q = v; *q; q++) {
    if (*q == '\'') sb_add(b, "'\\''", 4);
    else sb_add(b, q, 1);
  }
  sb_add(b, "'", 1);
}

/* Expands a template for one run into *out (free()). {{ and }} are literal braces. */
static int expand_template(const char *tmpl, const pb_revs_task *t, const char *commit,
                           int repeat, const char *metrics, char **out, struct pb_error *err) {
  *out = NULL;
  sbuf b = {NULL, 0, 0, 0};
  sb_add(&b, "", 0);
  char num[32];
  for (const char *p = tmpl; *p;) {
    if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
      sb_add(&b, p, 1);
      p += 2;
      continue;
    }
    if (*p != '{') {
      sb_add(&b, p, 1);
      p++;
      continue;
    }
    const char *e = strchr(p, '}');
    if (e == NULL) {
      free(b.s);
      return pb_error_set(err, PB_EINVAL, "command template: a '{' without '}' (write a literal "
                          "brace as {{)");
    }
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(e - p - 1), p + 1);
    const char *v = NULL;
    int missing = 0;
    if (strcmp(name, "overrides") == 0) {
      char **items;
      size_t n;
      int rc = pb__revs_split_overrides(t->overrides, &items, &n, err);
      if (rc != PB_OK) {
        free(b.s);
        return rc;
      }
      for (size_t i = 0; i < n; i++) {
        if (i) sb_add(&b, " ", 1);
        sb_quoted(&b, items[i]);
      }
      pb__revs_free_strings(items, n);
      p = e + 1;
      continue;
    }
    if (strcmp(name, "branch") == 0) v = t->branch;
    else if (strcmp(name, "experiment") == 0) v = t->experiment;
    else if (strcmp(name, "trainer") == 0) v = t->trainer;
    else if (strcmp(name, "checkpoint_path") == 0) v = t->checkpoint_path, missing = v == NULL;
    else if (strcmp(name, "data_path") == 0) v = t->data_path, missing = v == NULL;
    else if (strcmp(name, "commit") == 0) v = commit;
    else if (strcmp(name, "metrics") == 0) v = metrics;
    else if (strcmp(name, "max_epochs") == 0 || strcmp(name, "batch_size") == 0 ||
             strcmp(name, "repeat") == 0) {
      long x = name[0] == 'm' ? t->max_epochs : name[0] == 'b' ? t->batch_size : repeat + 1;
      missing = x == 0;
      snprintf(num, sizeof num, "%ld", x);
      v = num;
    } else {
      free(b.s);
      return pb_error_set(err, PB_EINVAL,
                          "command template: unknown placeholder {%s} (known: {experiment} "
                          "{trainer} {max_epochs} {batch_size} {checkpoint_path} {data_path} "
                          "{overrides} {branch} {commit} {repeat} {metrics})", name);
    }
    if (missing) {
      free(b.s);
      return pb_error_set(err, PB_EINVAL, "command template: {%s} has no column in this task "
                          "file (line %d)", name, t->line);
    }
    sb_quoted(&b, v ? v : "");
    p = e + 1;
  }
  if (b.oom) {
    free(b.s);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  *out = b.s;
  return PB_OK;
}

static int build(revs_ctx *c, worktree *w, const pb_revs_task *t, struct pb_error *err) {
  const char *cmd = c->p->build_cmd ? c->p->build_cmd : w->file_build;
  if (cmd == NULL) {
    if (t->kind == PB_REVS_COMMAND || c->p->binary != NULL || task_template(c, w, t) != NULL)
      return PB_OK;
    if (!is_pipebench_tree(w->path))
      return pb_error_set(err, PB_EINVAL,
                          "revision %.12s is not pipebench's repository, so there is no default "
                          "build: give --build-cmd and --binary, or use a command task file",
                          w->commit);
    cmd = "cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "
          "-DPB_DUCKDB_DIR=\"$PIPEBENCH_REVS_REPO/third_party/duckdb\" >/dev/null && "
          "cmake --build build -j \"$(nproc)\" --target pipebench_cli";
  }
  char log[4200], env_repo[4200], env_commit[100];
  snprintf(log, sizeof log, "%s/build-%.12s.log", c->tmp, w->commit);
  snprintf(env_repo, sizeof env_repo, "PIPEBENCH_REVS_REPO=%s", c->top);
  snprintf(env_commit, sizeof env_commit, "PIPEBENCH_REVS_COMMIT=%s", w->commit);
  char *env[] = {env_repo, env_commit, NULL};
  char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
  pb__revs_child res;
  int rc = pb__revs_exec(argv, w->path, env, c->p->timeout_s, log, log, c->p->cancel, &res, err);
  w->build_s = res.wall_s;
  if (rc != PB_OK && rc != PB_ECANCELED) pb_error_prefix(err, "build failed (%s): ", cmd);
  return rc;
}

static int prepare(revs_ctx *c, task_state *s, struct pb_error *err) {
  const pb_revs_task *t = s->t;
  if (t->branch[0] == '-')
    return pb_error_set(err, PB_EINVAL, "branch '%s' is not a revision name", t->branch);
  char spec[600];
  snprintf(spec, sizeof spec, "%s^{commit}", t->branch);
  struct pb_error gerr = {{0}};
  if (git(c, s->commit, sizeof s->commit, &gerr, "rev-parse", "--verify", "--quiet", spec,
          (char *)NULL) != PB_OK || s->commit[0] == '\0')
    return pb_error_set(err, PB_ENOTFOUND, "branch or commit '%s' not found in %s", t->branch,
                        c->top);
  char info[200];
  if (git(c, info, sizeof info, err, "log", "-1", "--format=%H %cI", s->commit, (char *)NULL) ==
      PB_OK) {
    const char *sp = strchr(info, ' ');
    if (sp != NULL) snprintf(s->commit_date, sizeof s->commit_date, "%s", sp + 1);
  }
  size_t k = 0;
  while (k < c->nwt && strcmp(c->wts[k].commit, s->commit) != 0) k++;
  worktree *w = &c->wts[k];
  s->wt = (int)k;
  if (k == c->nwt) {
    c->nwt++;
    memset(w, 0, sizeof *w);
    snprintf(w->commit, sizeof w->commit, "%s", s->commit);
    snprintf(w->path, sizeof w->path, "%s/wt-%zu-%.12s", c->tmp, k, s->commit);
    int rc = git(c, NULL, 0, err, "worktree", "add", "--detach", w->path, s->commit,
                 (char *)NULL);
    if (rc != PB_OK) {
      c->nwt--;
      s->wt = -1;
      return rc;
    }
    w->added = 1;
    rc = read_repo_file(c->top, w, err);
    if (rc != PB_OK) {
      w->build_failed = 1;
      snprintf(w->build_error, sizeof w->build_error, "%s", err ? err->message : "bad revs.json");
      return rc;
    }
  }
  if (w->build_failed) return pb_error_set(err, PB_ECHILD, "%s", w->build_error);
  const char *tmpl = task_template(c, w, t);
  if (tmpl != NULL) {
    /* a template's mistakes show before any build or run */
    char *probe = NULL;
    int rc = expand_template(tmpl, t, s->commit, 0, "metrics.json", &probe, err);
    free(probe);
    PB_RETURN_NOT_OK(rc);
  } else if (t->kind != PB_REVS_COMMAND) {
    /* settings errors show before any build or run */
    if (strcmp(t->trainer, "cpu") != 0 && strcmp(t->trainer, "gpu") != 0)
      return pb_error_set(err, PB_EUNSUPPORTED,
                          "trainer '%s': pipebench %s knows cpu and gpu (one process); give "
                          "your own entry point with --%s-cmd or .pipebench/revs.json",
                          t->trainer, t->kind == PB_REVS_TRAIN ? "train" : "infer",
                          t->kind == PB_REVS_TRAIN ? "train" : "infer");
    argv_list probe = {NULL, 0, 0};
    int rc = experiment_options(w, t->experiment, &probe, err);
    argv_free(&probe);
    PB_RETURN_NOT_OK(rc);
  }
  if (!w->built) {
    int rc = build(c, w, t, err);
    if (rc == PB_ECANCELED) return rc;
    if (rc != PB_OK) {
      w->build_failed = 1;
      snprintf(w->build_error, sizeof w->build_error, "%s", err ? err->message : "build failed");
      return rc;
    }
    /* a command task needs no build; a train task on the same commit may still */
    w->built = c->p->build_cmd != NULL || w->file_build != NULL ||
               (t->kind != PB_REVS_COMMAND && task_template(c, w, t) == NULL);
  }
  return PB_OK;
}

/* ---- running a task once ---------------------------------------------------------------- */

static int argv_push(argv_list *a, const char *s) {
  if (a->n + 2 > a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 32;
    char **nv = realloc(a->v, cap * sizeof *nv);
    if (nv == NULL) return PB_ENOMEM;
    a->v = nv;
    a->cap = cap;
  }
  a->v[a->n] = strdup(s);
  if (a->v[a->n] == NULL) return PB_ENOMEM;
  a->n++;
  a->v[a->n] = NULL;
  return PB_OK;
}

static void argv_free(argv_list *a) {
  for (size_t i = 0; i < a->n; i++) free(a->v[i]);
  free(a->v);
  memset(a, 0, sizeof *a);
}

/* key=value items as "--key value" options. */
static int push_options(argv_list *a, const char *text, struct pb_error *err) {
  char **items;
  size_t n;
  PB_RETURN_NOT_OK(pb__revs_split_overrides(text, &items, &n, err));
  int rc = PB_OK;
  for (size_t i = 0; i < n && rc == PB_OK; i++) {
    char *eq = strchr(items[i], '=');
    *eq = '\0';
    char opt[300];
    snprintf(opt, sizeof opt, "--%s", items[i]);
    rc = argv_push(a, opt);
    if (rc == PB_OK) rc = argv_push(a, eq + 1);
  }
  pb__revs_free_strings(items, n);
  return rc == PB_ENOMEM ? pb_error_set(err, rc, "out of memory") : rc;
}

/* The experiment's options: the revision's configs/NAME[.conf|.txt] (key=value lines, '#'
 * comments), else a preset. */
static int experiment_options(const worktree *w, const char *exp, argv_list *a,
                              struct pb_error *err) {
  static const char *const ext[] = {"", ".conf", ".txt"};
  if (strchr(exp, '/') == NULL && strcmp(exp, ".") != 0 && strcmp(exp, "..") != 0) {
    for (int i = 0; i < 3; i++) {
      char path[4400];
      snprintf(path, sizeof path, "%s/configs/%s%s", w->path, exp, ext[i]);
      struct stat st;
      if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
      void *data;
      size_t size;
      PB_RETURN_NOT_OK(pb_read_file(path, &data, &size, err));
      char *text = malloc(size + 1);
      if (text == NULL) {
        pb_free(data, size);
        return pb_error_set(err, PB_ENOMEM, "out of memory");
      }
      /* drop comments line by line */
      size_t k = 0;
      int comment = 0, bol = 1;
      for (size_t j = 0; j < size; j++) {
        char ch = ((char *)data)[j];
        if (bol && ch == '#') comment = 1;
        bol = ch == '\n';
        if (ch == '\n') comment = 0;
        if (!comment) text[k++] = ch;
      }
      text[k] = '\0';
      pb_free(data, size);
      int rc = push_options(a, text, err);
      free(text);
      if (rc != PB_OK) pb_error_prefix(err, "configs/%s%s: ", exp, ext[i]);
      return rc;
    }
  }
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
    if (strcmp(presets[i].name, exp) == 0) return push_options(a, presets[i].options, err);
  return pb_error_set(err, PB_ENOTFOUND,
                      "experiment '%s': no configs/%s (or .conf, .txt) in revision %.12s and no "
                      "pipebench preset of that name (presets: default, smoke, embed, embed-mse)",
                      exp, exp, w->commit);
}

static int resolve_binary(revs_ctx *c, const worktree *w, char *out, size_t size) {
  const char *b = c->p->binary ? c->p->binary : "build/pipebench";
  if (b[0] == '/') snprintf(out, size, "%s", b);
  else snprintf(out, size, "%s/%s", w->path, b);
  return access(out, X_OK) == 0;
}

/* What one run executes: its command line and the metrics file it is to write. */
typedef struct run_plan {
  argv_list argv;
  argv_list over;       /* command tasks: overrides as environment entries */
  char metrics[4400];   /* "" when the run writes none */
  int optional_metrics; /* a template's task may write no metrics file */
} run_plan;

static int oom_message(int rc, struct pb_error *err) {
  return rc == PB_ENOMEM ? pb_error_set(err, rc, "out of memory") : rc;
}

static int push_shell(argv_list *a, const char *cmd) {
  int rc = argv_push(a, "/bin/sh");
  if (rc == PB_OK) rc = argv_push(a, "-c");
  if (rc == PB_OK) rc = argv_push(a, cmd);
  return rc;
}

/* A task with a command template: the expanded template through the shell. */
static int plan_template(const revs_ctx *c, const task_state *s, const char *tmpl, int repeat,
                         run_plan *r, struct pb_error *err) {
  size_t idx = (size_t)(s - c->ts);
  snprintf(r->metrics, sizeof r->metrics, "%s/task-%zu-run-%d.json", c->tmp, idx + 1,
           repeat + 1);
  char *cmd = NULL;
  int rc = expand_template(tmpl, s->t, s->commit, repeat, r->metrics, &cmd, err);
  if (rc != PB_OK) return rc;
  rc = push_shell(&r->argv, cmd);
  free(cmd);
  r->optional_metrics = 1;
  return oom_message(rc, err);
}

/* A command task: its command through the shell, its overrides as environment entries. */
static int plan_command(const worktree *w, const pb_revs_task *t, run_plan *r,
                        struct pb_error *err) {
  if (t->metrics[0] == '/') snprintf(r->metrics, sizeof r->metrics, "%s", t->metrics);
  else snprintf(r->metrics, sizeof r->metrics, "%s/%s", w->path, t->metrics);
  int rc = push_shell(&r->argv, t->command);
  char **items = NULL;
  size_t n = 0;
  if (rc == PB_OK) rc = pb__revs_split_overrides(t->overrides, &items, &n, err);
  for (size_t i = 0; rc == PB_OK && i < n && i < 8; i++) rc = argv_push(&r->over, items[i]);
  pb__revs_free_strings(items, n);
  return oom_message(rc, err);
}

static int push_train_args(argv_list *a, const pb_revs_task *t, const char *metrics) {
  char num[32];
  int rc = argv_push(a, "train");
  snprintf(num, sizeof num, "%ld", t->max_epochs);
  if (rc == PB_OK) rc = argv_push(a, "--epochs");
  if (rc == PB_OK) rc = argv_push(a, num);
  snprintf(num, sizeof num, "%ld", t->batch_size);
  if (rc == PB_OK) rc = argv_push(a, "--batch-size");
  if (rc == PB_OK) rc = argv_push(a, num);
  if (rc == PB_OK) rc = argv_push(a, "--metrics-out");
  if (rc == PB_OK) rc = argv_push(a, metrics);
  return rc;
}

static int push_infer_args(argv_list *a, const pb_revs_task *t, const char *outdir) {
  char num[32];
  int rc = argv_push(a, "infer");
  snprintf(num, sizeof num, "%ld", t->batch_size);
  if (rc == PB_OK) rc = argv_push(a, "--batch-sizes");
  if (rc == PB_OK) rc = argv_push(a, num);
  if (rc == PB_OK) rc = argv_push(a, "--output-dir");
  if (rc == PB_OK) rc = argv_push(a, outdir);
  if (rc == PB_OK && t->data_path[0] != '\0') rc = argv_push(a, "--data-source");
  if (rc == PB_OK && t->data_path[0] != '\0') rc = argv_push(a, t->data_path);
  return rc;
}

/* A train or infer task without a template: the revision's own pipebench binary. */
static int plan_pipebench(revs_ctx *c, const task_state *s, int repeat, run_plan *r,
                          struct pb_error *err) {
  const pb_revs_task *t = s->t;
  const worktree *w = &c->wts[s->wt];
  size_t idx = (size_t)(s - c->ts);
  snprintf(r->metrics, sizeof r->metrics, "%s/task-%zu-run-%d.json", c->tmp, idx + 1,
           repeat + 1);
  char bin[4400];
  if (!resolve_binary(c, w, bin, sizeof bin)) {
    return pb_error_set(err, PB_ENOTFOUND, "no pipebench binary at %s after the build%s", bin,
                        c->p->binary ? "" : " (give --binary when the build puts it elsewhere)");
  }
  const char *device = strcmp(t->trainer, "gpu") == 0 ? "cuda" : "cpu";
  int rc = argv_push(&r->argv, bin);
  if (t->kind == PB_REVS_TRAIN) {
    if (rc == PB_OK) rc = push_train_args(&r->argv, t, r->metrics);
  } else {
    char outdir[4400];
    snprintf(outdir, sizeof outdir, "%s/infer-%zu-%d", c->tmp, idx + 1, repeat + 1);
    r->metrics[0] = '\0'; /* pipebench infer writes a CSV; only the run itself is measured */
    if (rc == PB_OK) rc = push_infer_args(&r->argv, t, outdir);
  }
  if (rc == PB_OK) rc = argv_push(&r->argv, "--device");
  if (rc == PB_OK) rc = argv_push(&r->argv, device);
  if (rc == PB_OK) rc = experiment_options(w, t->experiment, &r->argv, err);
  if (rc == PB_OK) rc = push_options(&r->argv, t->overrides, err);
  return oom_message(rc, err);
}

/* Fills *r (zeroed by the caller) for one run of a task; on failure it holds nothing to free. */
static int plan_run(revs_ctx *c, const task_state *s, int repeat, run_plan *r,
                    struct pb_error *err) {
  const pb_revs_task *t = s->t;
  const worktree *w = &c->wts[s->wt];
  const char *tmpl = task_template(c, w, t);
  int rc;
  if (tmpl != NULL) rc = plan_template(c, s, tmpl, repeat, r, err);
  else if (t->kind == PB_REVS_COMMAND) rc = plan_command(w, t, r, err);
  else rc = plan_pipebench(c, s, repeat, r, err);
  if (rc != PB_OK) {
    argv_free(&r->argv);
    argv_free(&r->over);
  }
  return rc;
}

/* The PB_REVS_* entries a run's environment gets, and the overrides of a command task. */
typedef struct run_env {
  char *v[24];
  char branch[700], exp[700], rep[64], commit[100], metrics[4500], wt[4200], pm[4500];
} run_env;

static void fill_env(run_env *e, const task_state *s, const worktree *w, int repeat,
                     const run_plan *r) {
  const pb_revs_task *t = s->t;
  int ne = 0;
  snprintf(e->branch, sizeof e->branch, "PIPEBENCH_REVS_BRANCH=%s", t->branch);
  snprintf(e->exp, sizeof e->exp, "PIPEBENCH_REVS_EXPERIMENT=%s", t->experiment);
  snprintf(e->rep, sizeof e->rep, "PIPEBENCH_REVS_REPEAT=%d", repeat + 1);
  snprintf(e->commit, sizeof e->commit, "PIPEBENCH_REVS_COMMIT=%s", s->commit);
  snprintf(e->metrics, sizeof e->metrics, "PIPEBENCH_REVS_METRICS=%s", r->metrics);
  snprintf(e->wt, sizeof e->wt, "PIPEBENCH_REVS_WORKTREE=%s", w->path);
  e->v[ne++] = e->branch;
  e->v[ne++] = e->exp;
  e->v[ne++] = e->rep;
  e->v[ne++] = e->commit;
  e->v[ne++] = e->metrics;
  e->v[ne++] = e->wt;
  snprintf(e->pm, sizeof e->pm, "PIPEBENCH_METRICS=%s", r->metrics);
  if (r->metrics[0] != '\0') e->v[ne++] = e->pm;
  for (size_t i = 0; i < r->over.n; i++) e->v[ne++] = r->over.v[i];
  e->v[ne] = NULL;
}

/* Takes the numbers of the metrics file the run wrote; one it should have written and did not
 * is an error. */
static int read_run_metrics(task_state *s, const run_plan *r, struct pb_error *err) {
  const pb_revs_task *t = s->t;
  const char *shown = t->kind == PB_REVS_COMMAND ? t->metrics : r->metrics;
  if (r->metrics[0] == '\0') return PB_OK;
  if (access(r->metrics, F_OK) != 0) {
    if (r->optional_metrics) return PB_OK;
    return pb_error_set(err, PB_ENOTFOUND, "the task exited 0 but wrote no metrics file %s",
                        shown);
  }
  cJSON *root = pb_load_json(r->metrics, err);
  if (root == NULL) return PB_EFORMAT;
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return pb_error_set(err, PB_EFORMAT, "%s: the metrics file must hold a JSON object", shown);
  }
  take_metrics(s, root, "");
  cJSON_Delete(root);
  s->reported++;
  return PB_OK;
}

/* Records a run that exited 0: what pipebench measured from outside, always under "pipebench";
 * the guide's slots get it only where the task reported nothing of its own. */
static int record_run(task_state *s, const run_plan *r, const pb__revs_child *res,
                      const pb__revs_sampler *smp, struct pb_error *err) {
  const pb_revs_task *t = s->t;
  add_value(s, "pipebench.wall_seconds", res->wall_s);
  /* the tree's summed RSS as sampled, or the largest single process (wait4) when that is more:
   * a task shorter than one sample */
  double rss = smp->peak_tree_mb > res->maxrss_mb ? smp->peak_tree_mb : res->maxrss_mb;
  add_value(s, "pipebench.peak_rss_mb", rss);
  if (smp->gpu_answered) add_value(s, "pipebench.peak_gpu_memory_mb", smp->peak_gpu_mb);
  size_t n_gpu = series_n(s, "peak_gpu_memory_mb");
  char p_el[200], p_mem[200];
  snprintf(p_el, sizeof p_el, "%s.elapsed_seconds", total_group(t));
  snprintf(p_mem, sizeof p_mem, "%s.peak_memory_mb", total_group(t));
  size_t n_el = series_n(s, p_el), n_mem = series_n(s, p_mem);
  PB_RETURN_NOT_OK(read_run_metrics(s, r, err));
  if (series_n(s, p_el) == n_el) add_value(s, p_el, res->wall_s);
  if (series_n(s, p_mem) == n_mem) add_value(s, p_mem, rss);
  if (smp->gpu_answered && series_n(s, "peak_gpu_memory_mb") == n_gpu)
    add_value(s, "peak_gpu_memory_mb", smp->peak_gpu_mb);
  return PB_OK;
}

static int run_once(revs_ctx *c, task_state *s, int repeat, struct pb_error *err) {
  const worktree *w = &c->wts[s->wt];
  size_t idx = (size_t)(s - c->ts);
  char log[4200];
  snprintf(log, sizeof log, "%s/task-%zu-run-%d.log", c->tmp, idx + 1, repeat + 1);
  run_plan r;
  memset(&r, 0, sizeof r);
  PB_RETURN_NOT_OK(plan_run(c, s, repeat, &r, err));
  run_env env;
  fill_env(&env, s, w, repeat, &r);
  if (r.metrics[0] != '\0') unlink(r.metrics); /* a stale file must not pass for this run's */
  pb__revs_child res;
  pb__revs_sampler smp;
  pb__revs_sampler_start(&smp);
  int rc = pb__revs_exec(r.argv.v, w->path, env.v, c->p->timeout_s, log, log, c->p->cancel, &res,
                         err);
  pb__revs_sampler_stop(&smp);
  argv_free(&r.argv);
  argv_free(&r.over);
  if (rc != PB_OK) return rc;
  return record_run(s, &r, &res, &smp, err);
}

/* ---- output ------------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median_of(const series *m) {
  if (m->n == 0) return NAN;
  double *tmp = malloc(m->n * sizeof *tmp);
  if (tmp == NULL) return NAN;
  memcpy(tmp, m->v, m->n * sizeof *tmp);
  qsort(tmp, m->n, sizeof *tmp, cmp_double);
  double r = m->n % 2 ? tmp[m->n / 2] : 0.5 * (tmp[m->n / 2 - 1] + tmp[m->n / 2]);
  free(tmp);
  return r;
}

static cJSON *str_or_null(const char *s) {
  return s != NULL && s[0] != '\0' ? cJSON_CreateString(s) : cJSON_CreateNull();
}

/* Sets the number at a dotted path, making the objects on the way; a path through a number
 * (a file with both "a": 1 and "a": {...}) keeps the first. */
static void put_path(cJSON *root, const char *path, double v) {
  char buf[160];
  snprintf(buf, sizeof buf, "%s", path);
  cJSON *o = root;
  char *p = buf;
  for (char *dot; (dot = strchr(p, '.')) != NULL; p = dot + 1) {
    *dot = '\0';
    cJSON *next = cJSON_GetObjectItemCaseSensitive(o, p);
    if (next == NULL) next = cJSON_AddObjectToObject(o, p);
    if (!cJSON_IsObject(next)) return;
    o = next;
  }
  if (cJSON_GetObjectItemCaseSensitive(o, p) == NULL) cJSON_AddNumberToObject(o, p, v);
}

static cJSON *task_json(const revs_ctx *c, const task_state *s, const pb_env *env) {
  const pb_revs_task *t = s->t;
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "branch", t->branch);
  cJSON_AddStringToObject(r, "experiment", t->experiment);
  cJSON_AddItemToObject(r, "timestamp", str_or_null(s->timestamp));
  int success = !s->failed && s->runs_done == c->p->repeats;
  cJSON_AddBoolToObject(r, "success", success);
  cJSON_AddItemToObject(r, "error", success ? cJSON_CreateNull() : str_or_null(s->error[0] ? s->error : "not run (an earlier task failed)"));
  cJSON *g = cJSON_AddObjectToObject(r, "git_info");
  cJSON_AddStringToObject(g, "branch", t->branch);
  cJSON_AddItemToObject(g, "commit_hash", str_or_null(s->commit));
  cJSON_AddItemToObject(g, "commit_date", str_or_null(s->commit_date));
  cJSON *task = cJSON_AddObjectToObject(r, "task");
  static const char *const kinds[] = {"train", "infer", "command"};
  cJSON_AddStringToObject(task, "kind", kinds[t->kind]);
  cJSON_AddNumberToObject(task, "line", t->line);
  if (t->trainer) cJSON_AddStringToObject(task, "trainer", t->trainer);
  if (t->max_epochs) cJSON_AddNumberToObject(task, "max_epochs", (double)t->max_epochs);
  if (t->batch_size) cJSON_AddNumberToObject(task, "batch_size", (double)t->batch_size);
  if (t->checkpoint_path) cJSON_AddStringToObject(task, "checkpoint_path", t->checkpoint_path);
  if (t->data_path) cJSON_AddStringToObject(task, "data_path", t->data_path);
  if (t->command) cJSON_AddStringToObject(task, "command", t->command);
  if (t->metrics) cJSON_AddStringToObject(task, "metrics", t->metrics);
  if (t->overrides) cJSON_AddStringToObject(task, "overrides", t->overrides);
  cJSON_AddNumberToObject(r, "repeats", c->p->repeats);
  cJSON_AddNumberToObject(r, "repeats_done", s->runs_done);
  if (s->wt >= 0 && c->wts[s->wt].build_s > 0)
    cJSON_AddNumberToObject(r, "build_seconds", c->wts[s->wt].build_s);
  else
    cJSON_AddNullToObject(r, "build_seconds");
  cJSON *m = cJSON_AddObjectToObject(r, "metrics");
  for (int k = 0; k < s->nm; k++) put_path(m, s->m[k].name, median_of(&s->m[k]));
  if (find_series((task_state *)s, "peak_gpu_memory_mb") == NULL) {
    cJSON_AddNullToObject(m, "peak_gpu_memory_mb");
    cJSON_AddStringToObject(r, "gpu_memory", "not available (the task reported none and "
                            "nvidia-smi gave none)");
  }
  cJSON_AddNumberToObject(r, "runs_with_task_metrics", s->reported);
  cJSON_AddStringToObject(r, "summary", "metrics: median over the repeats; samples: every "
                          "repeat; statistics: n, median, mean, min, max, 99% interval of the "
                          "median");
  cJSON *smp = cJSON_AddObjectToObject(r, "samples");
  for (int k = 0; k < s->nm; k++)
    cJSON_AddItemToObject(smp, s->m[k].name, cJSON_CreateDoubleArray(s->m[k].v, (int)s->m[k].n));
  cJSON *st = cJSON_AddObjectToObject(r, "statistics");
  for (int k = 0; k < s->nm; k++) {
    const series *x = &s->m[k];
    cJSON *o = cJSON_AddObjectToObject(st, x->name);
    double lo = x->v[0], hi = x->v[0], sum = 0;
    for (size_t i = 0; i < x->n; i++) {
      sum += x->v[i];
      if (x->v[i] < lo) lo = x->v[i];
      if (x->v[i] > hi) hi = x->v[i];
    }
    cJSON_AddNumberToObject(o, "n", (double)x->n);
    cJSON_AddNumberToObject(o, "median", median_of(x));
    cJSON_AddNumberToObject(o, "mean", sum / (double)x->n);
    cJSON_AddNumberToObject(o, "min", lo);
    cJSON_AddNumberToObject(o, "max", hi);
    double *sorted = malloc(x->n * sizeof *sorted);
    if (sorted != NULL && x->n >= 2) {
      memcpy(sorted, x->v, x->n * sizeof *sorted);
      qsort(sorted, x->n, sizeof *sorted, cmp_double);
      double clo, chi;
      pb_median_ci_sorted(sorted, x->n, 0.99, &clo, &chi);
      cJSON *iv = cJSON_AddArrayToObject(o, "median_ci99");
      cJSON_AddItemToArray(iv, cJSON_CreateNumber(clo));
      cJSON_AddItemToArray(iv, cJSON_CreateNumber(chi));
    }
    free(sorted);
  }
  cJSON *h = cJSON_AddObjectToObject(r, "host");
  cJSON_AddStringToObject(h, "hostname", env->hostname);
  cJSON_AddStringToObject(h, "cpu_model", env->cpu_model);
  cJSON_AddNumberToObject(h, "cpu_cores", env->cpu_cores);
  cJSON_AddNumberToObject(h, "memory_bytes", (double)env->memory_bytes);
  cJSON_AddStringToObject(h, "gpu", env->gpu);
  cJSON_AddStringToObject(h, "pipebench_version", env->pipebench_version);
  cJSON_AddStringToObject(h, "pipebench_commit", env->git_commit);
  return r;
}

static int write_output(revs_ctx *c, struct pb_error *err) {
  pb_env env;
  memset(&env, 0, sizeof env);
  pb_env_collect(&env, NULL);
  cJSON *arr = cJSON_CreateArray();
  if (arr == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  for (size_t i = 0; i < c->nts; i++) cJSON_AddItemToArray(arr, task_json(c, &c->ts[i], &env));
  char *text = cJSON_Print(arr);
  cJSON_Delete(arr);
  if (text == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int rc = pb_write_file_atomic(c->p->output, text, strlen(text), err);
  free(text);
  return rc;
}

/* ---- the whole run ----------------------------------------------------------------------- */

static void fail_task(revs_ctx *c, task_state *s, const struct pb_error *e) {
  s->failed = 1;
  s->ready = 0;
  snprintf(s->error, sizeof s->error, "%s", e->message);
  report(c, "task %zu (%s, %s, line %d) failed: %s", (size_t)(s - c->ts) + 1, s->t->branch,
         s->t->experiment, s->t->line, s->error);
}

static int make_tmp(revs_ctx *c, struct pb_error *err) {
  const char *base = c->p->tmp_dir;
  if (base == NULL || base[0] == '\0') base = pb_tmp_dir();
  char tmpl[4096];
  snprintf(tmpl, sizeof tmpl, "%s/pipebench-revs-XXXXXX", base);
  if (mkdtemp(tmpl) == NULL)
    return pb_error_set(err, -errno, "cannot create a folder in %s: %s", base, strerror(errno));
  /* worktree paths are absolute, so the folder is too */
  if (realpath(tmpl, c->tmp) == NULL) snprintf(c->tmp, sizeof c->tmp, "%s", tmpl);
  return PB_OK;
}

/* The context for a run of nt tasks; on failure nothing is left allocated but the tasks. */
static int ctx_init(revs_ctx *c, const pb_revs_params *p, pb_revs_task *tasks, size_t nt,
                    struct pb_error *err) {
  memset(c, 0, sizeof *c);
  c->p = p;
  c->ts = calloc(nt, sizeof *c->ts);
  c->wts = calloc(nt, sizeof *c->wts);
  if (c->ts == NULL || c->wts == NULL) {
    free(c->ts);
    free(c->wts);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  c->nts = nt;
  for (size_t i = 0; i < nt; i++) {
    c->ts[i].t = &tasks[i];
    c->ts[i].wt = -1;
  }
  c->total_steps = (long)nt * (long)(p->repeats + 1);
  return PB_OK;
}

static void ctx_free(revs_ctx *c) {
  for (size_t i = 0; i < c->nts; i++)
    for (int k = 0; k < c->ts[i].nm; k++) free(c->ts[i].m[k].v);
  for (size_t i = 0; i < c->nwt; i++) {
    free(c->wts[i].file_train);
    free(c->wts[i].file_infer);
    free(c->wts[i].file_build);
  }
  free(c->ts);
  free(c->wts);
}

/* The top folder of the git repository the revisions come from. */
static int find_top(revs_ctx *c, struct pb_error *err) {
  char here[4096];
  const char *repo = c->p->repo;
  if (repo == NULL) repo = getcwd(here, sizeof here) ? here : ".";
  snprintf(c->top, sizeof c->top, "%s", repo);
  struct pb_error gerr = {{0}};
  char top[4096];
  if (git(c, top, sizeof top, &gerr, "rev-parse", "--show-toplevel", (char *)NULL) != PB_OK ||
      top[0] == '\0') {
    int rc = pb_error_set(err, PB_ENOTFOUND, "%s is not inside a git repository (%s)", repo,
                          gerr.message);
    c->top[0] = '\0';
    return rc;
  }
  snprintf(c->top, sizeof c->top, "%s", top);
  return PB_OK;
}

/* Marks and reports a failed task; unless failed tasks are skipped, its error becomes the run's
 * and no further task starts. */
static void task_failed(revs_ctx *c, task_state *s, int code, const struct pb_error *e,
                        int *first_error, struct pb_error *err) {
  fail_task(c, s, e);
  if (c->p->skip_failed) return;
  *first_error = code;
  if (err) snprintf(err->message, sizeof err->message, "task %zu (%s, line %d): %s",
                    (size_t)(s - c->ts) + 1, s->t->branch, s->t->line, e->message);
}

/* Checks out and builds every task's revision first, so the timed rounds can interleave.
 * Returns PB_ECANCELED when interrupted, else PB_OK (task failures go to *first_error). */
static int prepare_all(revs_ctx *c, int *first_error, struct pb_error *err) {
  struct pb_error terr;
  for (size_t i = 0; i < c->nts && *first_error == PB_OK; i++) {
    task_state *s = &c->ts[i];
    char what[300];
    snprintf(what, sizeof what, "preparing %s (%s)", s->t->branch, s->t->experiment);
    progress(c, what);
    pb_utc_iso8601(s->timestamp, sizeof s->timestamp);
    memset(&terr, 0, sizeof terr);
    int r = canceled(c) ? PB_ECANCELED : prepare(c, s, &terr);
    c->step++;
    if (r == PB_ECANCELED) return r;
    if (r != PB_OK) {
      task_failed(c, s, r, &terr, first_error, err);
      continue;
    }
    s->ready = 1;
  }
  return PB_OK;
}

/* The timed rounds: each ready task once per round, in the listed order on even rounds and the
 * reverse on odd ones (A B C, C B A, A B C, ...), so that no task always runs right after
 * another: an effect of the place in the round (what the last run left in the caches, its exit
 * still being cleaned up) falls on every task alike instead of on one side of a comparison.
 * Returns as prepare_all does. */
static int run_rounds(revs_ctx *c, int *first_error, struct pb_error *err) {
  const pb_revs_params *p = c->p;
  struct pb_error terr;
  for (int r = 0; *first_error == PB_OK && r < p->repeats; r++) {
    for (size_t k = 0; k < c->nts && *first_error == PB_OK; k++) {
      size_t i = r % 2 == 0 ? k : c->nts - 1 - k;
      task_state *s = &c->ts[i];
      if (!s->ready) continue;
      char what[300];
      snprintf(what, sizeof what, "%s (%s) run %d/%d", s->t->branch, s->t->experiment, r + 1,
               p->repeats);
      progress(c, what);
      memset(&terr, 0, sizeof terr);
      int x = canceled(c) ? PB_ECANCELED : run_once(c, s, r, &terr);
      c->step++;
      if (x == PB_ECANCELED) return x;
      if (x != PB_OK) {
        char msg[1100];
        snprintf(msg, sizeof msg, "run %d of %d: %s", r + 1, p->repeats, terr.message);
        snprintf(terr.message, sizeof terr.message, "%s", msg);
        task_failed(c, s, x, &terr, first_error, err);
        continue;
      }
      s->runs_done++;
      if (r + 1 == p->repeats)
        report(c, "task %zu (%s, %s): %d runs, median %.3f s", i + 1, s->t->branch,
               s->t->experiment, s->runs_done, median_of(find_series(s, "pipebench.wall_seconds")));
    }
  }
  return PB_OK;
}

/* The run's result once the worktrees are gone: the output written unless interrupted or failed
 * before any task ran, and the first task error, or every task having failed, as the error. */
static int finish(revs_ctx *c, int rc, int first_error, int nf, struct pb_error *err) {
  const pb_revs_params *p = c->p;
  if (rc == PB_ECANCELED) {
    pb_error_set(err, PB_ECANCELED, "interrupted; worktrees removed, %s not written", p->output);
  } else if (rc == PB_OK) {
    struct pb_error werr = {{0}};
    int w = write_output(c, &werr);
    if (w != PB_OK) {
      rc = w;
      if (err) snprintf(err->message, sizeof err->message, "%s", werr.message);
    } else {
      rc = first_error;
      if (rc == PB_OK && nf > 0 && (size_t)nf == c->nts) {
        rc = PB_ECHILD;
        pb_error_set(err, PB_ECHILD, "every task failed (%d of %zu); their errors are in %s", nf,
                     c->nts, p->output);
      }
    }
  }
  return rc;
}

int pb_revs_run(const pb_revs_params *p, int *n_failed, struct pb_error *err) {
  if (n_failed) *n_failed = 0;
  if (p == NULL || p->config == NULL || p->output == NULL)
    return pb_error_set(err, PB_EINVAL, "pb_revs_run: config and output are needed");
  if (p->repeats < 1 || !(p->timeout_s > 0))
    return pb_error_set(err, PB_EINVAL, "repeats must be >= 1 and the timeout positive");
  pb_revs_task *tasks = NULL;
  size_t nt = 0;
  PB_RETURN_NOT_OK(pb_revs_tasks_read(p->config, &tasks, &nt, err));
  revs_ctx c;
  int rc = ctx_init(&c, p, tasks, nt, err);
  if (rc != PB_OK) {
    pb_revs_tasks_free(tasks, nt);
    return rc;
  }
  rc = make_tmp(&c, err);
  if (rc == PB_OK) rc = find_top(&c, err);
  int first_error = PB_OK;
  if (rc == PB_OK) rc = prepare_all(&c, &first_error, err);
  if (rc == PB_OK) rc = run_rounds(&c, &first_error, err);
  remove_worktrees(&c);
  remove_tmp(&c);
  int nf = 0;
  for (size_t i = 0; i < nt; i++) nf += c.ts[i].failed;
  if (n_failed) *n_failed = nf;
  rc = finish(&c, rc, first_error, nf, err);
  ctx_free(&c);
  pb_revs_tasks_free(tasks, nt);
  return rc;
}
