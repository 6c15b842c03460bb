/* pipebench revs --compare: each branch against the baseline, per experiment and metric. */
#include <math.h>
#include <stdint.h>
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
  cJSON *root = pb_load_json(results_path, err);
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

/* ---- short labels ------------------------------------------------------------------------ */

static int labels_distinct(const char *out, size_t out_size, const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++)
      if (strcmp(names[i], names[j]) != 0 && strcmp(out + i * out_size, out + j * out_size) == 0)
        return 0;
  return 1;
}

void pb__revs_short_labels(const char *const *names, size_t n, size_t max_chars, char *out,
                           size_t out_size) {
  if (n == 0 || out_size == 0) return;
  if (max_chars < 8) max_chars = 8;
  /* what every name shares at its start and at its end (distinct names only: a name given
   * twice shares everything with itself) */
  size_t pre = SIZE_MAX, suf = SIZE_MAX, shortest = SIZE_MAX;
  int distinct = 0;
  for (size_t i = 0; i < n; i++) {
    size_t li = strlen(names[i]);
    if (li < shortest) shortest = li;
    for (size_t j = 0; j < n; j++) {
      if (strcmp(names[i], names[j]) == 0) continue;
      distinct = 1;
      size_t lj = strlen(names[j]), k = 0;
      while (names[i][k] != '\0' && names[i][k] == names[j][k]) k++;
      if (k < pre) pre = k;
      k = 0;
      while (k < li && k < lj && names[i][li - 1 - k] == names[j][lj - 1 - k]) k++;
      if (k < suf) suf = k;
    }
  }
  if (!distinct) pre = suf = 0;
  if (pre + suf > shortest) suf = shortest > pre ? shortest - pre : 0;
  /* whole words: the shared start ends after a separator, the shared end starts with one */
  static const char seps[] = "/-_.:";
  while (pre > 0 && strchr(seps, names[0][pre - 1]) == NULL) pre--;
  size_t l0 = strlen(names[0]);
  while (suf > 0 && strchr(seps, names[0][l0 - suf]) == NULL) suf--;
  /* Step 0: the names whole; 1: without the shared end; 2: without the shared start too;
   * 3 on: what differs, cut one more character at its end each step. A name that fits stays
   * whole. */
  for (size_t step = 0;; step++) {
    size_t keep = SIZE_MAX;
    if (step >= 3) keep = max_chars - 6 > step - 3 ? max_chars - 6 - (step - 3) : 1;
    int fits = 1;
    for (size_t i = 0; i < n; i++) {
      const char *s = names[i];
      size_t len = strlen(s);
      char *o = out + i * out_size;
      size_t p = step >= 2 ? pre : 0, q = step >= 1 ? suf : 0;
      size_t core = len - p - q;
      int cut = core > keep;
      if (cut) core = keep;
      if (step == 0 || len <= max_chars)
        snprintf(o, out_size, "%s", s);
      else
        snprintf(o, out_size, "%s%.*s%s", p ? "..." : "", (int)core, s + p, q || cut ? "..." : "");
      if (strlen(o) > max_chars) fits = 0;
    }
    if ((fits && labels_distinct(out, out_size, names, n)) || keep == 1) return;
  }
}
