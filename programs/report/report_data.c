/* Reading a results folder for the plots and the report: tables with a CSV fallback, the
 * infer CSVs, row filters and medians, the fixed format colours. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report_internal.h"

/* ---- loading -------------------------------------------------------------------------------- */

static void note_cb(pb_report_note_fn note, void *ctx, int status, const char *path, const char *msg) {
  if (note != NULL) note(ctx, status, path, msg);
}

static int load_one(const char *dir, size_t k, pb__report_data *d, pb_report_note_fn note, void *ctx) {
  const char *track = d->views[k]->id, *stem = d->views[k]->table;
  char pq[4200], csv[4200];
  snprintf(pq, sizeof pq, "%s/data/%s.parquet", dir, stem);
  snprintf(csv, sizeof csv, "%s/data/%s.csv", dir, stem);
  snprintf(d->path[k], sizeof d->path[k], "%s", pq);
  struct pb_error e1 = {{0}}, e2 = {{0}};
  int rc = pb_table_read(pq, PB_SINK_PARQUET, &d->t[k], &e1);
  if (rc == PB_OK) return PB_OK;
  d->t[k] = NULL;
  int rc2 = pb_table_read(csv, PB_SINK_CSV, &d->t[k], &e2);
  if (rc2 == PB_OK) {
    if (rc != PB_ENOTFOUND) {
      char msg[1200];
      snprintf(msg, sizeof msg, "%s; drew track %s from %s instead", e1.message, track, csv);
      note_cb(note, ctx, rc, pq, msg);
    }
    snprintf(d->path[k], sizeof d->path[k], "%s", csv);
    return PB_OK;
  }
  d->t[k] = NULL;
  if (rc == PB_ENOTFOUND && rc2 == PB_ENOTFOUND) {
    snprintf(d->why[k], sizeof d->why[k], "%s: no such table (track %s was not run)", pq, track);
    return PB_ENOTFOUND;
  }
  /* Name the file that is there but broken. */
  if (rc != PB_ENOTFOUND) {
    snprintf(d->why[k], sizeof d->why[k], "%s", e1.message);
  } else {
    snprintf(d->path[k], sizeof d->path[k], "%s", csv);
    snprintf(d->why[k], sizeof d->why[k], "%s", e2.message);
    rc = rc2;
  }
  note_cb(note, ctx, rc, d->path[k], d->why[k]);
  return rc;
}

static int has_prefix_suffix(const char *name, const char *pre, const char *suf) {
  size_t n = strlen(name), a = strlen(pre), b = strlen(suf);
  return n > a + b && strncmp(name, pre, a) == 0 && strcmp(name + n - b, suf) == 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int same_key(const pb_table *a, size_t ra, const pb_table *b, size_t rb) {
  static const char *const keys[] = {"framework", "model", "device_type", "dtype"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    const char *x = pb__report_str(a, ra, keys[i]), *y = pb__report_str(b, rb, keys[i]);
    if ((x == NULL) != (y == NULL) || (x != NULL && strcmp(x, y) != 0)) return 0;
  }
  return pb__report_f64(a, ra, "batch_size") == pb__report_f64(b, rb, "batch_size");
}

static void copy_row(pb_table *dst, const pb_table *src, size_t r) {
  pb_table_append_row(dst);
  for (size_t c = 0; c < pb_table_cols(src); c++) {
    const char *name = pb_table_col_name(src, c);
    if (pb_table_is_null(src, r, c)) continue;
    switch (pb_table_col_type(src, c)) {
    case PB_COL_STRING: pb_table_set_str(dst, name, pb_table_get_str(src, r, c)); break;
    case PB_COL_INT64: pb_table_set_f64(dst, name, (double)pb_table_get_i64(src, r, c)); break;
    case PB_COL_DOUBLE: pb_table_set_f64(dst, name, pb_table_get_f64(src, r, c)); break;
    case PB_COL_BOOL: pb_table_set_bool(dst, name, pb_table_get_bool(src, r, c)); break;
    }
  }
}

int pb__report_load_infer(const char *dir, pb_table **out, int *n_files, struct pb_error *err) {
  *out = NULL;
  *n_files = 0;
  DIR *dp = opendir(dir);
  if (dp == NULL) return pb_error_set(err, PB_ENOTFOUND, "%s: no such folder", dir);
  char *names[256];
  int n = 0;
  struct dirent *de;
  while ((de = readdir(dp)) != NULL && n < 256)
    if (has_prefix_suffix(de->d_name, "benchmark_results_", ".csv")) names[n++] = strdup(de->d_name);
  closedir(dp);
  if (n == 0) return pb_error_set(err, PB_ENOTFOUND, "%s: no benchmark_results_*.csv", dir);
  qsort(names, (size_t)n, sizeof names[0], cmp_str);
  pb_table *all = NULL;
  int rc = pb_table_new(&all);
  /* Newest first (the names end in a UTC stamp), so a configuration seen again is older. */
  for (int i = n - 1; i >= 0 && rc == PB_OK; i--) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    pb_table *t = NULL;
    struct pb_error e = {{0}};
    if (names[i] == NULL || pb_table_read(path, PB_SINK_CSV, &t, &e) != PB_OK) continue;
    if (pb_table_col_index(t, "latency_p50_ms") >= 0 && pb_table_col_index(t, "batch_size") >= 0) {
      (*n_files)++;
      size_t have = pb_table_rows(all);
      for (size_t r = 0; r < pb_table_rows(t); r++) {
        int dup = 0;
        for (size_t q = 0; q < have && !dup; q++) dup = same_key(all, q, t, r);
        if (!dup) copy_row(all, t, r);
      }
    }
    pb_table_free(t);
  }
  for (int i = 0; i < n; i++) free(names[i]);
  if (rc == PB_OK && pb_table_rows(all) == 0)
    rc = pb_error_set(err, PB_EFORMAT, "%s: no readable benchmark_results_*.csv", dir);
  if (rc != PB_OK) {
    pb_table_free(all);
    return rc;
  }
  *out = all;
  return PB_OK;
}

void pb__report_load(const char *dir, const char *infer_root, const pb__report_view *const *views,
                 size_t n, pb__report_data *d, pb_report_note_fn note, void *ctx) {
  memset(d, 0, sizeof *d);
  snprintf(d->dir, sizeof d->dir, "%s", dir);
  d->views = views;
  d->n = n < PB__RP_TRACKS ? n : PB__RP_TRACKS;
  for (size_t k = 0; k < d->n; k++) d->status[k] = load_one(dir, k, d, note, ctx);
  static const char *const where[] = {"", "/data"};
  if (infer_root == NULL) infer_root = dir;
  for (int i = 0; i < 2 && d->infer == NULL; i++) {
    char sub[4200];
    snprintf(sub, sizeof sub, "%s%s", infer_root, where[i]);
    struct pb_error e;
    if (pb__report_load_infer(sub, &d->infer, &d->infer_files, &e) == PB_OK)
      snprintf(d->infer_dir, sizeof d->infer_dir, "%s", sub);
  }
}

void pb__report_free(pb__report_data *d) {
  for (int k = 0; k < PB__RP_TRACKS; k++) pb_table_free(d->t[k]);
  pb_table_free(d->infer);
  memset(d->t, 0, sizeof d->t);
  d->infer = NULL;
}

/* ---- rows ----------------------------------------------------------------------------------- */

static _Thread_local pb__report_col_watch_fn watch_fn;
static _Thread_local void *watch_ctx;

void pb__report_watch_columns(pb__report_col_watch_fn fn, void *ctx) {
  watch_fn = fn;
  watch_ctx = ctx;
}

/* The index of col in t (-1: none), told to the watcher. */
static long col_index(const pb_table *t, const char *col) {
  if (t == NULL) return -1;
  if (watch_fn != NULL) watch_fn(watch_ctx, t, col);
  return pb_table_col_index(t, col);
}

const char *pb__report_str(const pb_table *t, size_t row, const char *col) {
  long c = col_index(t, col);
  if (c < 0 || pb_table_is_null(t, row, (size_t)c)) return NULL;
  if (pb_table_col_type(t, (size_t)c) != PB_COL_STRING) return NULL;
  return pb_table_get_str(t, row, (size_t)c);
}

double pb__report_f64(const pb_table *t, size_t row, const char *col) {
  long c = col_index(t, col);
  if (c < 0 || pb_table_is_null(t, row, (size_t)c)) return NAN;
  if (pb_table_col_type(t, (size_t)c) == PB_COL_STRING) return NAN;
  return pb_table_get_f64(t, row, (size_t)c);
}

int pb__report_match(const pb_table *t, size_t row, const pb__report_filter *f, int nf) {
  for (int i = 0; i < nf; i++) {
    if (f[i].s != NULL) {
      const char *v = pb__report_str(t, row, f[i].col);
      if (v == NULL || strcmp(v, f[i].s) != 0) return 0;
    } else {
      double v = pb__report_f64(t, row, f[i].col);
      if (!(v == (double)f[i].i)) return 0;
    }
  }
  return 1;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double pb__report_median(const pb_table *t, const char *col, const pb__report_filter *f, int nf, int *n) {
  if (n != NULL) *n = 0;
  if (t == NULL) return NAN;
  size_t rows = pb_table_rows(t), m = 0;
  double *v = malloc((rows + 1) * sizeof *v);
  if (v == NULL) return NAN;
  for (size_t r = 0; r < rows; r++) {
    if (!pb__report_match(t, r, f, nf)) continue;
    double x = pb__report_f64(t, r, col);
    if (isfinite(x)) v[m++] = x;
  }
  double med = NAN;
  if (m > 0) {
    qsort(v, m, sizeof *v, cmp_double);
    med = m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
  }
  free(v);
  if (n != NULL) *n = (int)m;
  return med;
}

int pb__report_distinct_str(const pb_table *t, const char *col, const pb__report_filter *f, int nf,
                        const char **out, int max) {
  int n = 0;
  for (size_t r = 0; t != NULL && r < pb_table_rows(t); r++) {
    if (!pb__report_match(t, r, f, nf)) continue;
    const char *v = pb__report_str(t, r, col);
    if (v == NULL) continue;
    int seen = 0;
    for (int i = 0; i < n && !seen; i++) seen = strcmp(out[i], v) == 0;
    if (!seen && n < max) out[n++] = v;
  }
  return n;
}

int pb__report_distinct_i64(const pb_table *t, const char *col, const pb__report_filter *f, int nf,
                        int64_t *out, int max) {
  int n = 0;
  for (size_t r = 0; t != NULL && r < pb_table_rows(t); r++) {
    if (!pb__report_match(t, r, f, nf)) continue;
    double x = pb__report_f64(t, r, col);
    if (!isfinite(x)) continue;
    int64_t v = (int64_t)x;
    int seen = 0;
    for (int i = 0; i < n && !seen; i++) seen = out[i] == v;
    if (!seen && n < max) out[n++] = v;
  }
  for (int i = 1; i < n; i++) /* insertion sort: a handful of values */
    for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
      int64_t tmp = out[j];
      out[j] = out[j - 1];
      out[j - 1] = tmp;
    }
  return n;
}

int pb__report_count_true(const pb_table *t, const char *col, const pb__report_filter *f, int nf) {
  int n = 0;
  for (size_t r = 0; t != NULL && r < pb_table_rows(t); r++)
    if (pb__report_match(t, r, f, nf) && pb__report_f64(t, r, col) > 0.5) n++;
  return n;
}

/* ---- colours -------------------------------------------------------------------------------- */

/* Okabe-Ito colours (distinguishable with the common colour-vision deficiencies), one per
 * format, fixed so a format looks the same in every plot and every run. */
uint32_t pb__report_format_color(const char *format) {
  static const struct {
    const char *name;
    uint32_t rgb;
  } fixed[] = {
      {"raw", 0x0072B2},      {"tiff", 0x009E73},    {"ome-zarr", 0xD55E00},
      {"ome-parquet", 0xE69F00}, {"oa-dataset", 0x56B4E9}, {"duckdb", 0x8C564B},
      {"lance", 0xCC79A7},    {"vortex", 0x7F7F7F},
  };
  static const uint32_t extra[] = {0x000000, 0x6A3D9A, 0x1B9E77, 0xB15928, 0x999933, 0x882255};
  if (format == NULL) return 0x000000;
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
    if (strcmp(fixed[i].name, format) == 0) return fixed[i].rgb;
  uint32_t h = 2166136261u; /* FNV-1a: an unknown name still gets the same colour every time */
  for (const char *p = format; *p; p++) h = (h ^ (uint8_t)*p) * 16777619u;
  return extra[h % (sizeof extra / sizeof extra[0])];
}
