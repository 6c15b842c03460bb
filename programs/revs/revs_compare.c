/* pipebench revs --compare: each branch against the baseline, per experiment and metric. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tools/peer.h"
#include "revs/revs_internal.h"

/* Which way a metric is better, from its dotted path: 0 a time (lower is better), 1 a
 * throughput (higher), 2 memory (lower), -1 not compared (losses, counts, settings). */
static int metric_kind(const char *path) {
  const char *leaf = strrchr(path, '.');
  leaf = leaf ? leaf + 1 : path;
  size_t n = strlen(leaf);
  if (strstr(leaf, "memory_mb") != NULL || strstr(leaf, "rss_mb") != NULL) return 2;
  if (strstr(leaf, "throughput") != NULL || strstr(leaf, "per_sec") != NULL) return 1;
  if (strstr(leaf, "seconds") != NULL || strstr(leaf, "time_per") != NULL ||
      (n > 2 && strcmp(leaf + n - 2, "_s") == 0))
    return 0;
  return -1;
}

static size_t numbers(const cJSON *arr, double **out) {
  int n = cJSON_GetArraySize(arr);
  *out = NULL;
  if (!cJSON_IsArray(arr) || n <= 0) return 0;
  double *v = malloc((size_t)n * sizeof *v);
  if (v == NULL) return 0;
  size_t k = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, arr) if (cJSON_IsNumber(it) && isfinite(it->valuedouble)) v[k++] = it->valuedouble;
  *out = v;
  return k;
}

static double median(const double *v, size_t n) {
  double *t = malloc(n * sizeof *t);
  if (t == NULL || n == 0) {
    free(t);
    return NAN;
  }
  memcpy(t, v, n * sizeof *t);
  for (size_t i = 1; i < n; i++) /* insertion sort: a handful of repeats */
    for (size_t j = i; j > 0 && t[j - 1] > t[j]; j--) {
      double x = t[j];
      t[j] = t[j - 1];
      t[j - 1] = x;
    }
  double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  free(t);
  return m;
}

static const char *str(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int succeeded(const cJSON *run) {
  return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(run, "success"));
}

/* Same task settings apart from the branch? */
static int same_setup(const cJSON *a, const cJSON *b) {
  static const char *const keys[] = {"trainer", "max_epochs", "batch_size", "overrides",
                                     "data_path"};
  const cJSON *ta = cJSON_GetObjectItemCaseSensitive(a, "task");
  const cJSON *tb = cJSON_GetObjectItemCaseSensitive(b, "task");
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(ta, keys[i]);
    const cJSON *y = cJSON_GetObjectItemCaseSensitive(tb, keys[i]);
    if ((x == NULL) != (y == NULL)) return 0;
    if (x != NULL && !cJSON_Compare(x, y, 1)) return 0;
  }
  return 1;
}

/* The baseline branch: the one given, else the first run's; it must have at least one run. */
static int resolve_baseline(const cJSON *root, const char *results_path, const char **baseline,
                            struct pb_error *err) {
  if (*baseline == NULL) {
    const cJSON *first = cJSON_GetArrayItem(root, 0);
    *baseline = first ? str(first, "branch") : NULL;
    if (*baseline == NULL) return pb_error_set(err, PB_EFORMAT, "%s: holds no runs", results_path);
  }
  int found = 0;
  const cJSON *run;
  cJSON_ArrayForEach(run, root) {
    const char *b = str(run, "branch");
    found |= b != NULL && strcmp(b, *baseline) == 0;
  }
  if (!found)
    return pb_error_set(err, PB_ENOTFOUND, "%s: no run of the baseline branch '%s'",
                        results_path, *baseline);
  return PB_OK;
}

/* The baseline's successful run of the same experiment, preferably with the same settings;
 * NULL when there is none. */
static const cJSON *find_base(const cJSON *root, const char *baseline, const char *exp,
                              const cJSON *run) {
  const cJSON *base = NULL, *b;
  cJSON_ArrayForEach(b, root) {
    const char *bb = str(b, "branch"), *be = str(b, "experiment");
    if (bb == NULL || be == NULL || strcmp(bb, baseline) != 0 || strcmp(be, exp) != 0 ||
        !succeeded(b))
      continue;
    if (base == NULL) base = b;
    if (same_setup(run, b)) return b;
  }
  return base;
}

/* Regression flag and words for the verdict, by which way the metric is better. */
static void set_verdict_text(pb_revs_comparison *c, int kind) {
  switch (kind) {
    case 0:
      c->regression = c->verdict == PB_SLOWER;
      c->verdict_text = c->verdict == PB_SLOWER ? "slower"
                        : c->verdict == PB_FASTER ? "faster" : "no significant change";
      break;
    case 1:
      c->regression = c->verdict == PB_FASTER; /* fewer samples per second */
      c->verdict_text = c->verdict == PB_FASTER ? "slower"
                        : c->verdict == PB_SLOWER ? "faster" : "no significant change";
      break;
    default:
      c->verdict_text = c->verdict == PB_SLOWER ? "more memory"
                        : c->verdict == PB_FASTER ? "less memory" : "no significant change";
      break;
  }
}

typedef struct comparison_list {
  pb_revs_comparison *v;
  size_t n, cap;
  uint64_t seed; /* for the ratio's resampling, one more per comparison */
} comparison_list;

/* Appends one comparison per compared metric that both runs sampled. */
static int compare_runs(const cJSON *run, const cJSON *base, const char *branch, const char *exp,
                        const char *baseline, double factor, comparison_list *l,
                        struct pb_error *err) {
  const cJSON *sa = cJSON_GetObjectItemCaseSensitive(run, "samples");
  const cJSON *sb = cJSON_GetObjectItemCaseSensitive(base, "samples");
  const cJSON *ms;
  cJSON_ArrayForEach(ms, sa) {
    int kind = ms->string ? metric_kind(ms->string) : -1;
    if (kind < 0) continue;
    double *va, *vb;
    size_t na = numbers(ms, &va);
    size_t nb = numbers(cJSON_GetObjectItemCaseSensitive(sb, ms->string), &vb);
    if (na == 0 || nb == 0) {
      free(va);
      free(vb);
      continue;
    }
    if (l->n == l->cap) {
      size_t cap = l->cap ? l->cap * 2 : 16;
      pb_revs_comparison *nl = realloc(l->v, cap * sizeof *nl);
      if (nl == NULL) {
        free(va);
        free(vb);
        return pb_error_set(err, PB_ENOMEM, "out of memory");
      }
      l->v = nl;
      l->cap = cap;
    }
    pb_revs_comparison *c = &l->v[l->n++];
    memset(c, 0, sizeof *c);
    snprintf(c->experiment, sizeof c->experiment, "%s", exp);
    snprintf(c->metric, sizeof c->metric, "%s", ms->string);
    snprintf(c->branch, sizeof c->branch, "%s", branch);
    snprintf(c->baseline, sizeof c->baseline, "%s", baseline);
    c->n = na;
    c->n_baseline = nb;
    c->median = median(va, na);
    c->median_baseline = median(vb, nb);
    pb_ratio_of(va, na, vb, nb, l->seed++, 0, &c->ratio);
    c->verdict = pb_compare(va, na, vb, nb, factor, &c->p);
    c->higher_is_better = kind == 1;
    set_verdict_text(c, kind);
    free(va);
    free(vb);
  }
  return PB_OK;
}

int pb_revs_compare(const char *results_path, const char *baseline, double factor,
                    pb_revs_comparison **out, size_t *n, struct pb_error *err) {
  if (out == NULL || n == NULL || results_path == NULL)
    return pb_error_set(err, PB_EINVAL, "pb_revs_compare: NULL argument");
  *out = NULL;
  *n = 0;
  if (!(factor > 0)) factor = 1.1;
  cJSON *root = pb__load_json(results_path, err);
  if (root == NULL) return PB_EFORMAT;
  if (!cJSON_IsArray(root)) {
    cJSON_Delete(root);
    return pb_error_set(err, PB_EFORMAT, "%s: not a list of runs (pipebench revs output)",
                        results_path);
  }
  int rc = resolve_baseline(root, results_path, &baseline, err);
  if (rc != PB_OK) {
    cJSON_Delete(root);
    return rc;
  }
  comparison_list l = {NULL, 0, 0, 42};
  const cJSON *run;
  cJSON_ArrayForEach(run, root) {
    const char *branch = str(run, "branch"), *exp = str(run, "experiment");
    if (branch == NULL || exp == NULL || strcmp(branch, baseline) == 0 || !succeeded(run)) continue;
    const cJSON *base = find_base(root, baseline, exp, run);
    if (base == NULL) continue;
    rc = compare_runs(run, base, branch, exp, baseline, factor, &l, err);
    if (rc != PB_OK) break;
  }
  cJSON_Delete(root);
  if (rc != PB_OK) {
    free(l.v);
    return rc;
  }
  *out = l.v;
  *n = l.n;
  return PB_OK;
}
