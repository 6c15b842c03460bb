/* The written report: OUT/report.md and a self-contained OUT/report.html, built side by side
 * from the same calls (a heading, a paragraph, a list item, a table, an image). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "report/report_internal.h"
#include "table/results_internal.h"

/* ---- a growing text buffer ------------------------------------------------------------------- */

typedef struct sbuf {
  char *p;
  size_t n, cap;
  int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t len) {
  if (b->oom) return;
  if (b->n + len + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + len + 1) cap *= 2;
    char *q = realloc(b->p, cap);
    if (q == NULL) {
      b->oom = 1;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, len);
  b->n += len;
  b->p[b->n] = '\0';
}

static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...) {
  char tmp[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* HTML text with **bold** and `code` spans. */
static void sb_html_text(sbuf *b, const char *s) {
  int bold = 0, code = 0;
  for (const char *p = s; *p; p++) {
    if (p[0] == '*' && p[1] == '*') {
      sb_puts(b, bold ? "</strong>" : "<strong>");
      bold = !bold;
      p++;
    } else if (*p == '`') {
      sb_puts(b, code ? "</code>" : "<code>");
      code = !code;
    } else if (*p == '<') sb_puts(b, "&lt;");
    else if (*p == '>') sb_puts(b, "&gt;");
    else if (*p == '&') sb_puts(b, "&amp;");
    else if (*p == '"') sb_puts(b, "&quot;");
    else sb_put(b, p, 1);
  }
  if (bold) sb_puts(b, "</strong>");
  if (code) sb_puts(b, "</code>");
}

static void sb_base64(sbuf *b, const unsigned char *d, size_t n) {
  static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char q[4];
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) | (i + 2 < n ? d[i + 2] : 0);
    q[0] = al[v >> 18 & 63];
    q[1] = al[v >> 12 & 63];
    q[2] = i + 1 < n ? al[v >> 6 & 63] : '=';
    q[3] = i + 2 < n ? al[v & 63] : '=';
    sb_put(b, q, 4);
  }
}

/* ---- the two documents ----------------------------------------------------------------------- */

typedef struct doc {
  sbuf md, html;
  int in_list;
} doc;

static void doc_end_list(doc *d) {
  if (!d->in_list) return;
  sb_puts(&d->md, "\n");
  sb_puts(&d->html, "</ul>\n");
  d->in_list = 0;
}

static void doc_h(doc *d, int level, const char *text) {
  doc_end_list(d);
  for (int i = 0; i < level; i++) sb_puts(&d->md, "#");
  sb_printf(&d->md, " %s\n\n", text);
  sb_printf(&d->html, "<h%d>", level);
  sb_html_text(&d->html, text);
  sb_printf(&d->html, "</h%d>\n", level);
}

__attribute__((format(printf, 2, 3))) static void doc_p(doc *d, const char *fmt, ...) {
  char text[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  doc_end_list(d);
  sb_printf(&d->md, "%s\n\n", text);
  sb_puts(&d->html, "<p>");
  sb_html_text(&d->html, text);
  sb_puts(&d->html, "</p>\n");
}

__attribute__((format(printf, 2, 3))) static void doc_li(doc *d, const char *fmt, ...) {
  char text[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (!d->in_list) sb_puts(&d->html, "<ul>\n");
  d->in_list = 1;
  sb_printf(&d->md, "- %s\n", text);
  sb_puts(&d->html, "<li>");
  sb_html_text(&d->html, text);
  sb_puts(&d->html, "</li>\n");
}

/* A table of nrows x ncols cells (row-major; row 0 is the header). */
static void doc_table(doc *d, char (*cells)[64], int nrows, int ncols) {
  doc_end_list(d);
  if (nrows < 2) return;
  sb_puts(&d->html, "<table>\n");
  for (int r = 0; r < nrows; r++) {
    sb_puts(&d->md, "|");
    sb_puts(&d->html, "<tr>");
    for (int c = 0; c < ncols; c++) {
      sb_printf(&d->md, " %s |", cells[r * ncols + c]);
      sb_puts(&d->html, r == 0 ? "<th>" : "<td>");
      sb_html_text(&d->html, cells[r * ncols + c]);
      sb_puts(&d->html, r == 0 ? "</th>" : "</td>");
    }
    sb_puts(&d->md, "\n");
    sb_puts(&d->html, "</tr>\n");
    if (r == 0) {
      sb_puts(&d->md, "|");
      for (int c = 0; c < ncols; c++) sb_puts(&d->md, "---|");
      sb_puts(&d->md, "\n");
    }
  }
  sb_puts(&d->md, "\n");
  sb_puts(&d->html, "</table>\n");
}

static void doc_img(doc *d, const char *dir, const char *name, const char *alt) {
  char path[4300];
  snprintf(path, sizeof path, "%s/images/%s", dir, name);
  void *data = NULL;
  size_t n = 0;
  struct pb_error e;
  if (pb__read_file(path, &data, &n, &e) != PB_OK) return;
  doc_end_list(d);
  sb_printf(&d->md, "![%s](images/%s)\n\n", alt, name);
  sb_printf(&d->html, "<p><img alt=\"%s\" src=\"data:image/png;base64,", alt);
  sb_base64(&d->html, (const unsigned char *)data, n);
  sb_puts(&d->html, "\"></p>\n");
  pb_free(data, n);
}

/* ---- numbers in words ------------------------------------------------------------------------ */

static const char *fmt_time(double s, char *buf, size_t size) {
  if (!isfinite(s)) snprintf(buf, size, "-");
  else if (s < 1e-3) snprintf(buf, size, "%.1f µs", s * 1e6);
  else if (s < 1) snprintf(buf, size, "%.2f ms", s * 1e3);
  else snprintf(buf, size, "%.2f s", s);
  return buf;
}

static const char *fmt_num(double v, char *buf, size_t size) {
  if (!isfinite(v)) snprintf(buf, size, "-");
  else if (fabs(v) >= 100) snprintf(buf, size, "%.0f", v);
  else if (fabs(v) >= 10) snprintf(buf, size, "%.1f", v);
  else snprintf(buf, size, "%.2f", v);
  return buf;
}

static double json_num(const cJSON *o, const char *a, const char *b) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
  if (b != NULL) x = cJSON_GetObjectItemCaseSensitive(x, b);
  return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

static const char *json_str(const cJSON *o, const char *a, const char *b) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
  if (b != NULL) x = cJSON_GetObjectItemCaseSensitive(x, b);
  return cJSON_IsString(x) ? x->valuestring : NULL;
}

static cJSON *load_summary(const char *dir) {
  char path[4300];
  snprintf(path, sizeof path, "%s/data/pipebench_summary.json", dir);
  void *text = NULL;
  size_t n = 0;
  struct pb_error e;
  if (pb__read_file(path, &text, &n, &e) != PB_OK) return NULL;
  cJSON *root = cJSON_ParseWithLength(text, n);
  pb_free(text, n);
  return root;
}

/* ---- the answers ----------------------------------------------------------------------------- */

typedef struct best {
  char format[64];
  double value;
  int64_t bs, workers;
  int found;
} best;

static const pb__rp_filter f_own = {"loader", "pipebench", 0};

/* Track 2 rows of pipebench itself (tables without a loader column count as pipebench). */
static int own_filter(const pb_table *t, pb__rp_filter *f) {
  if (pb_table_col_index(t, "loader") < 0) return 0;
  *f = f_own;
  return 1;
}

static void answer_random(doc *d, const pb_table *t, const cJSON *sum) {
  if (t == NULL) {
    doc_li(d, "Random access: not measured here (no track 1 table).");
    return;
  }
  const char *formats[PB__RP_MAX_DISTINCT];
  int nf = pb__rp_distinct_str(t, "format", NULL, 0, formats, PB__RP_MAX_DISTINCT);
  double p50[PB__RP_MAX_DISTINCT];
  int bi = -1;
  for (int f = 0; f < nf; f++) {
    pb__rp_filter fl[4] = {{"format", formats[f], 0}, {"access_pattern", "random", 0},
                           {"transform", "none", 0}, {"cache", "none", 0}};
    p50[f] = pb__rp_median(t, "p50", fl, 4, NULL);
    if (isfinite(p50[f]) && (bi < 0 || p50[f] < p50[bi])) bi = f;
  }
  if (bi < 0) {
    doc_li(d, "Random access: track 1 has no row with random order, no transform and no cache.");
    return;
  }
  char a[32], others[512] = "";
  for (int f = 0; f < nf; f++) {
    if (f == bi || !isfinite(p50[f])) continue;
    size_t u = strlen(others);
    snprintf(others + u, sizeof others - u, "%s%s %.2fx slower", u ? ", " : "; then ", formats[f], p50[f] / p50[bi]);
  }
  /* the read rate against the file-read limit */
  pb__rp_filter fl[4] = {{"format", formats[bi], 0}, {"access_pattern", "random", 0},
                         {"transform", "none", 0}, {"cache", "none", 0}};
  double bytes = pb__rp_median(t, "bytes_read_mean", fl, 4, NULL);
  double sps = pb__rp_median(t, "samples_per_sec", fl, 4, NULL);
  const char *state = pb_table_get_meta(t, "pipebench.cache_state");
  int cold = state != NULL && strcmp(state, "cold") == 0;
  double lim = json_num(sum, "calibration", cold ? "read_cold_gbps" : "read_warm_gbps");
  char lim_text[256] = "";
  if (isfinite(bytes) && isfinite(sps) && lim > 0)
    snprintf(lim_text, sizeof lim_text, " It reads %.3f GB/s from its files, %.1f%% of this machine's %s file-read limit (%.2f GB/s).",
             bytes * sps / 1e9, 100.0 * bytes * sps / 1e9 / lim, cold ? "cold" : "warm", lim);
  doc_li(d, "**Fastest format for random access: %s** (track 1: random order, no transform, no cache; median p50 %s per sample%s).%s",
         formats[bi], fmt_time(p50[bi], a, sizeof a), others, lim_text);
}

static void answer_bulk(doc *d, const pb_table *t, const cJSON *sum) {
  if (t == NULL) {
    doc_li(d, "Bulk loading: not measured here (no track 2 table).");
    return;
  }
  pb__rp_filter own;
  int no = own_filter(t, &own);
  const char *formats[PB__RP_MAX_DISTINCT];
  int nf = pb__rp_distinct_str(t, "format", &own, no, formats, PB__RP_MAX_DISTINCT);
  int64_t bss[32], ws[32];
  int nb = pb__rp_distinct_i64(t, "batch_size", NULL, 0, bss, 32);
  int nw = pb__rp_distinct_i64(t, "num_workers", NULL, 0, ws, 32);
  best per[PB__RP_MAX_DISTINCT];
  int bi = -1;
  for (int f = 0; f < nf; f++) {
    per[f].found = 0;
    for (int b = 0; b < nb; b++)
      for (int w = 0; w < nw; w++) {
        pb__rp_filter fl[5] = {{"format", formats[f], 0}, {"cache", "none", 0}, {"batch_size", NULL, bss[b]},
                               {"num_workers", NULL, ws[w]}, own};
        double v = pb__rp_median(t, "samples_per_sec", fl, 4 + no, NULL);
        if (isfinite(v) && (!per[f].found || v > per[f].value)) {
          per[f] = (best){"", v, bss[b], ws[w], 1};
          snprintf(per[f].format, sizeof per[f].format, "%s", formats[f]);
        }
      }
    if (per[f].found && (bi < 0 || per[f].value > per[bi].value)) bi = f;
  }
  if (bi < 0) {
    doc_li(d, "Bulk loading: track 2 has no row with cache none.");
    return;
  }
  char others[512] = "";
  for (int f = 0; f < nf; f++) {
    if (f == bi || !per[f].found) continue;
    size_t u = strlen(others);
    snprintf(others + u, sizeof others - u, "%s%s %.0f samples/s", u ? ", " : "; best of the others: ", formats[f], per[f].value);
  }
  pb__rp_filter fl[5] = {{"format", formats[bi], 0}, {"cache", "none", 0}, {"batch_size", NULL, per[bi].bs},
                         {"num_workers", NULL, per[bi].workers}, own};
  double mbps = pb__rp_median(t, "mb_per_sec", fl, 4 + no, NULL);
  double frac = pb__rp_median(t, "memcpy_fraction", fl, 4 + no, NULL);
  double lim = json_num(sum, "calibration", "memcpy_mt_gbps");
  char lim_text[512] = "";
  if (isfinite(frac) && isfinite(mbps))
    snprintf(lim_text, sizeof lim_text, " It delivers %.2f GB/s of float tensors, %.0f%% of the memory-copy limit measured in the same run (%.2f GB/s, all cores)%s",
             mbps / 1e3, 100 * frac, lim,
             frac > 1.0 ? ": more than main memory can copy, so the working set (the data and "
                          "the recycled batch buffers) is served from the CPU caches; a dataset "
                          "larger than the caches (--preset microscopy) shows the memory-bound rate."
                        : ".");
  doc_li(d, "**Fastest format for bulk loading: %s** (track 2, cache none): %.0f samples/s at batch size %lld with %lld workers%s.%s",
         formats[bi], per[bi].value, (long long)per[bi].bs, (long long)per[bi].workers, others, lim_text);
}

static void answer_bound(doc *d, const pb_table *t) {
  if (t == NULL) {
    doc_li(d, "Data-bound: not measured here (no track 3 table).");
    return;
  }
  const char *formats[PB__RP_MAX_DISTINCT], *caches[4];
  int nf = pb__rp_distinct_str(t, "format", NULL, 0, formats, PB__RP_MAX_DISTINCT);
  int nc = pb__rp_distinct_str(t, "cache", NULL, 0, caches, 4);
  char bound[768] = "";
  double lo = INFINITY;
  char lo_at[96] = "";
  for (int f = 0; f < nf; f++)
    for (int c = 0; c < nc; c++) {
      pb__rp_filter fl[2] = {{"format", formats[f], 0}, {"cache", caches[c], 0}};
      double au = pb__rp_median(t, "accelerator_utilisation", fl, 2, NULL);
      if (!isfinite(au)) continue;
      if (au < lo) {
        lo = au;
        snprintf(lo_at, sizeof lo_at, "%s, cache %s", formats[f], caches[c]);
      }
      if (au < 0.9) {
        size_t u = strlen(bound);
        snprintf(bound + u, sizeof bound - u, "%s%s/cache %s (AU %.0f%%)", u ? ", " : "", formats[f], caches[c], 100 * au);
      }
    }
  const char *model = pb__rp_str(t, 0, "model");
  if (!isfinite(lo)) {
    doc_li(d, "Data-bound: track 3 has no accelerator utilisation.");
  } else if (bound[0]) {
    doc_li(d, "**The model loop is data-bound** (track 3, %s: accelerator utilisation AU < 90%%) with %s; the model waits for data there.",
           model ? model : "model", bound);
  } else {
    doc_li(d, "**The model loop is not data-bound** (track 3, %s): AU >= 90%% with every format and cache mode (lowest %.1f%%, %s).",
           model ? model : "model", 100 * lo, lo_at);
  }
}

static void answer_peer(doc *d, const pb_table *t2, const pb_table *t4) {
  char text[1024] = "";
  const char *formats[PB__RP_MAX_DISTINCT];
  pb__rp_filter peer = {"loader", "torch-dataloader", 0};
  int nf = t2 ? pb__rp_distinct_str(t2, "format", &peer, 1, formats, PB__RP_MAX_DISTINCT) : 0;
  for (int f = 0; f < nf; f++) {
    pb__rp_filter fl[3] = {{"format", formats[f], 0}, peer, {"cache", "none", 0}};
    int n = 0;
    double r = pb__rp_median(t2, "pipebench_over_peer", fl, 3, &n);
    if (!isfinite(r)) continue;
    size_t u = strlen(text);
    snprintf(text + u, sizeof text - u, "%s%s %.1fx", u ? ", " : "", formats[f], r);
  }
  if (text[0])
    doc_li(d, "pipebench against the torch DataLoader peer over the same files (track 2, cache none, median ratio of samples/s over matched batch sizes and workers): %s.",
           text);
  text[0] = '\0';
  nf = t4 ? pb__rp_distinct_str(t4, "format", NULL, 0, formats, PB__RP_MAX_DISTINCT) : 0;
  for (int f = 0; f < nf; f++) {
    pb__rp_filter fl = {"format", formats[f], 0};
    double r = pb__rp_median(t4, "pipebench_over_peer", &fl, 1, NULL);
    if (!isfinite(r)) continue;
    size_t u = strlen(text);
    snprintf(text + u, sizeof text - u, "%s%s %.2fx", u ? ", " : "", formats[f], r);
  }
  if (text[0])
    doc_li(d, "One sample to a torch tensor, pipebench (DLPack) against numpy + torch.from_numpy (track 4, speed ratio, above 1 means pipebench is faster): %s.",
           text);
}

/* Round-to-round stability of one track: rows grouped by configuration (the key columns that
 * exist), and the coefficient of variation of metric over each group's rounds. Returns the
 * number of configurations with 2+ rounds in *n_cfg and those above 5% as the result. */
static int rounds_unstable(const pb_table *t, const char *const *keys, int nk, const char *metric,
                           int *n_cfg, double *worst) {
  *n_cfg = 0;
  *worst = 0;
  long mc = pb_table_col_index(t, metric);
  if (mc < 0) return 0;
  long kc[8];
  int nkc = 0;
  for (int k = 0; k < nk && nkc < 8; k++) {
    long c = pb_table_col_index(t, keys[k]);
    if (c >= 0) kc[nkc++] = c;
  }
  size_t rows = pb_table_rows(t);
  unsigned char *done = calloc(rows ? rows : 1, 1);
  if (done == NULL) return 0;
  int bad = 0;
  for (size_t a = 0; a < rows; a++) {
    if (done[a]) continue;
    double sum = 0, sq = 0;
    int n = 0;
    for (size_t b = a; b < rows; b++) {
      int same = 1;
      for (int k = 0; k < nkc && same; k++) {
        size_t c = (size_t)kc[k];
        if (pb_table_col_type(t, c) == PB_COL_STRING) {
          const char *x = pb_table_get_str(t, a, c), *y = pb_table_get_str(t, b, c);
          same = (x == NULL && y == NULL) || (x != NULL && y != NULL && strcmp(x, y) == 0);
        } else {
          same = pb_table_get_i64(t, a, c) == pb_table_get_i64(t, b, c);
        }
      }
      if (!same) continue;
      done[b] = 1;
      double v = pb_table_get_f64(t, b, (size_t)mc);
      if (!isfinite(v)) continue;
      sum += v;
      sq += v * v;
      n++;
    }
    if (n < 2) continue;
    (*n_cfg)++;
    double mean = sum / n, var = (sq - n * mean * mean) / (n - 1);
    double cv = mean != 0 && var > 0 ? sqrt(var) / fabs(mean) : 0;
    if (cv > *worst) *worst = cv;
    bad += cv > 0.05;
  }
  free(done);
  return bad;
}

static void answer_rounds(doc *d, const pb__rp_data *data) {
  static const char *const k1[] = {"format", "access_pattern", "transform", "cache", "cache_state"};
  static const char *const k2[] = {"loader", "format", "cache", "batch_size", "num_workers", "cache_state"};
  static const char *const k3[] = {"format", "cache", "model", "mode", "batch_size", "num_workers", "cache_state"};
  struct { const pb_table *t; const char *const *keys; int nk; const char *metric, *what; } v[] = {
      {data->t[0], k1, 5, "p50", "p50 per sample"},
      {data->t[1], k2, 6, "samples_per_sec", "samples/s"},
      {data->t[2], k3, 7, "step_time_p50", "step time p50"},
  };
  for (int k = 0; k < 3; k++) {
    if (v[k].t == NULL) continue;
    int n_cfg;
    double worst;
    int bad = rounds_unstable(v[k].t, v[k].keys, v[k].nk, v[k].metric, &n_cfg, &worst);
    if (n_cfg == 0) continue;
    doc_li(d, "Round to round (track %d, %s): %d of %d configurations vary by more than 5%% "
              "(coefficient of variation over their rounds; worst %.1f%%).%s",
           k + 1, v[k].what, bad, n_cfg, 100 * worst,
           bad > 0 ? " Differences between formats smaller than that are noise; more --repeats "
                     "narrow it." : "");
  }
}

static void answer_unstable(doc *d, const pb__rp_data *data) {
  answer_rounds(d, data);
  int total_bad = 0;
  for (int k = 0; k < PB__RP_TRACKS; k++) {
    const pb_table *t = data->t[k];
    if (t == NULL) continue;
    int bad = 0;
    size_t rows = pb_table_rows(t);
    for (size_t r = 0; r < rows; r++) {
      int u = 0;
      for (size_t c = 0; c < pb_table_cols(t) && !u; c++) {
        const char *name = pb_table_col_name(t, c);
        size_t n = strlen(name);
        if (n >= 8 && strcmp(name + n - 8, "unstable") == 0 && !pb_table_is_null(t, r, c))
          u = pb_table_get_bool(t, r, c);
      }
      bad += u;
    }
    if (bad > 0)
      doc_li(d, "Spread within a round, track %d: %d of %zu rows have single-sample or "
                "single-batch times with a coefficient of variation above 5%% or outliers by the "
                "modified z-score (column unstable). Per-item times of a loader naturally spread "
                "this much; the round-to-round line above says whether the results repeat.",
             k + 1, bad, rows);
    total_bad += bad;
  }
  if (total_bad == 0) doc_li(d, "No row is flagged unstable.");
}

/* ---- per-track sections ---------------------------------------------------------------------- */

#define MAXCELLS 4096

static void section1(doc *d, const pb_table *t, char (*cells)[64]) {
  doc_p(d, "Each sample alone through the loader (batch 1, no workers), timed from the request to a model-ready float tensor. Rows without a transform; medians over rounds.");
  static const char *const head[] = {"format", "access", "cache", "p50", "p95", "p99", "samples/s", "unstable rounds"};
  int nc = 8, n = 0;
  for (int c = 0; c < nc; c++) snprintf(cells[n++], 64, "%s", head[c]);
  const char *formats[PB__RP_MAX_DISTINCT], *caches[4];
  int nf = pb__rp_distinct_str(t, "format", NULL, 0, formats, PB__RP_MAX_DISTINCT);
  int ncache = pb__rp_distinct_str(t, "cache", NULL, 0, caches, 4);
  static const char *const pats[] = {"random", "sequential"};
  for (int f = 0; f < nf; f++)
    for (int c = 0; c < ncache; c++)
      for (int a = 0; a < 2 && n + nc <= MAXCELLS; a++) {
        pb__rp_filter fl[4] = {{"format", formats[f], 0}, {"cache", caches[c], 0}, {"access_pattern", pats[a], 0},
                               {"transform", "none", 0}};
        int rounds = 0;
        double p50 = pb__rp_median(t, "p50", fl, 4, &rounds);
        if (rounds == 0) continue;
        snprintf(cells[n++], 64, "%s", formats[f]);
        snprintf(cells[n++], 64, "%s", pats[a]);
        snprintf(cells[n++], 64, "%s", caches[c]);
        fmt_time(p50, cells[n++], 64);
        fmt_time(pb__rp_median(t, "p95", fl, 4, NULL), cells[n++], 64);
        fmt_time(pb__rp_median(t, "p99", fl, 4, NULL), cells[n++], 64);
        fmt_num(pb__rp_median(t, "samples_per_sec", fl, 4, NULL), cells[n++], 64);
        snprintf(cells[n++], 64, "%d/%d", pb__rp_count_true(t, "unstable", fl, 4), rounds);
      }
  doc_table(d, cells, n / nc, nc);
}

static void section2(doc *d, const pb_table *t, char (*cells)[64]) {
  doc_p(d, "Batches from the loader over batch sizes, worker threads and cache modes; steady state from the second batch. Per format, loader and cache mode the best configuration; medians over rounds.");
  static const char *const head[] = {"format", "loader", "cache", "best samples/s", "batch", "workers", "first batch", "memcpy limit", "unstable rounds"};
  int nc = 9, n = 0;
  for (int c = 0; c < nc; c++) snprintf(cells[n++], 64, "%s", head[c]);
  const char *formats[PB__RP_MAX_DISTINCT], *caches[4], *loaders[4];
  int nf = pb__rp_distinct_str(t, "format", NULL, 0, formats, PB__RP_MAX_DISTINCT);
  int ncache = pb__rp_distinct_str(t, "cache", NULL, 0, caches, 4);
  int nl = pb__rp_distinct_str(t, "loader", NULL, 0, loaders, 4);
  if (nl == 0) loaders[nl++] = NULL;
  int64_t bss[32], ws[32];
  int nb = pb__rp_distinct_i64(t, "batch_size", NULL, 0, bss, 32);
  int nw = pb__rp_distinct_i64(t, "num_workers", NULL, 0, ws, 32);
  for (int f = 0; f < nf; f++)
    for (int l = 0; l < nl; l++)
      for (int c = 0; c < ncache && n + nc <= MAXCELLS; c++) {
        double bv = NAN;
        int bb = 0, bw = 0;
        for (int b = 0; b < nb; b++)
          for (int w = 0; w < nw; w++) {
            pb__rp_filter fl[5] = {{"format", formats[f], 0}, {"cache", caches[c], 0}, {"batch_size", NULL, bss[b]},
                                   {"num_workers", NULL, ws[w]}, {"loader", loaders[l], 0}};
            double v = pb__rp_median(t, "samples_per_sec", fl, loaders[l] ? 5 : 4, NULL);
            if (isfinite(v) && !(v <= bv)) {
              bv = v;
              bb = b;
              bw = w;
            }
          }
        if (!isfinite(bv)) continue;
        pb__rp_filter fl[5] = {{"format", formats[f], 0}, {"cache", caches[c], 0}, {"batch_size", NULL, bss[bb]},
                               {"num_workers", NULL, ws[bw]}, {"loader", loaders[l], 0}};
        int nfl = loaders[l] ? 5 : 4, rounds = 0;
        pb__rp_median(t, "samples_per_sec", fl, nfl, &rounds);
        snprintf(cells[n++], 64, "%s", formats[f]);
        snprintf(cells[n++], 64, "%s", loaders[l] ? loaders[l] : "pipebench");
        snprintf(cells[n++], 64, "%s", caches[c]);
        fmt_num(bv, cells[n++], 64);
        snprintf(cells[n++], 64, "%lld", (long long)bss[bb]);
        snprintf(cells[n++], 64, "%lld", (long long)ws[bw]);
        fmt_time(pb__rp_median(t, "first_batch_time", fl, nfl, NULL), cells[n++], 64);
        double fr = pb__rp_median(t, "memcpy_fraction", fl, nfl, NULL);
        if (isfinite(fr)) snprintf(cells[n++], 64, "%.1f%%", 100 * fr);
        else snprintf(cells[n++], 64, "-");
        snprintf(cells[n++], 64, "%d/%d", pb__rp_count_true(t, "batch_time_unstable", fl, nfl), rounds);
      }
  doc_table(d, cells, n / nc, nc);
}

static void section3(doc *d, const pb_table *t, char (*cells)[64]) {
  doc_p(d, "The loader feeding a model: step time (wait for the batch + compute), data-wait fraction = 1 - AU, first step excluded. AU below 90%% means data-bound.");
  static const char *const head[] = {"format", "cache", "step p50", "data wait", "AU", "data-bound", "images/s"};
  int nc = 7, n = 0;
  for (int c = 0; c < nc; c++) snprintf(cells[n++], 64, "%s", head[c]);
  const char *formats[PB__RP_MAX_DISTINCT], *caches[4];
  int nf = pb__rp_distinct_str(t, "format", NULL, 0, formats, PB__RP_MAX_DISTINCT);
  int ncache = pb__rp_distinct_str(t, "cache", NULL, 0, caches, 4);
  for (int f = 0; f < nf; f++)
    for (int c = 0; c < ncache && n + nc <= MAXCELLS; c++) {
      pb__rp_filter fl[2] = {{"format", formats[f], 0}, {"cache", caches[c], 0}};
      int rounds = 0;
      double au = pb__rp_median(t, "accelerator_utilisation", fl, 2, &rounds);
      if (rounds == 0) continue;
      snprintf(cells[n++], 64, "%s", formats[f]);
      snprintf(cells[n++], 64, "%s", caches[c]);
      fmt_time(pb__rp_median(t, "step_time_p50", fl, 2, NULL), cells[n++], 64);
      snprintf(cells[n++], 64, "%.1f%%", 100 * pb__rp_median(t, "data_wait_fraction", fl, 2, NULL));
      snprintf(cells[n++], 64, "%.1f%%", 100 * au);
      snprintf(cells[n++], 64, "%s", au < 0.9 ? "**yes**" : "no");
      fmt_num(pb__rp_median(t, "images_per_sec", fl, 2, NULL), cells[n++], 64);
    }
  doc_table(d, cells, n / nc, nc);
}

static void section4(doc *d, const pb_table *t, char (*cells)[64]) {
  doc_p(d, "Where one sample's time goes (medians per stage), and the hand-off to torch: DLPack share of pipebench's path, numpy-to-torch conversion share of the peer's path.");
  static const char *const head[] = {"format", "read", "decompress", "decode", "convert", "transform", "DLPack", "DLPack share", "peer conversion share", "pipebench / peer"};
  static const char *const cols[] = {"read_p50", "decompress_p50", "decode_p50", "convert_p50", "transform_p50", "dlpack_p50"};
  int nc = 10, n = 0;
  for (int c = 0; c < nc; c++) snprintf(cells[n++], 64, "%s", head[c]);
  const char *formats[PB__RP_MAX_DISTINCT];
  int nf = pb__rp_distinct_str(t, "format", NULL, 0, formats, PB__RP_MAX_DISTINCT);
  for (int f = 0; f < nf && n + nc <= MAXCELLS; f++) {
    pb__rp_filter fl = {"format", formats[f], 0};
    snprintf(cells[n++], 64, "%s", formats[f]);
    for (int s = 0; s < 6; s++) fmt_time(pb__rp_median(t, cols[s], &fl, 1, NULL), cells[n++], 64);
    snprintf(cells[n++], 64, "%.1f%%", pb__rp_median(t, "dlpack_overhead_pct", &fl, 1, NULL));
    snprintf(cells[n++], 64, "%.1f%%", pb__rp_median(t, "conversion_overhead_pct", &fl, 1, NULL));
    snprintf(cells[n++], 64, "%.2fx", pb__rp_median(t, "pipebench_over_peer", &fl, 1, NULL));
  }
  doc_table(d, cells, n / nc, nc);
}

static void section_infer(doc *d, const pb_table *t, char (*cells)[64]) {
  static const char *const head[] = {"framework", "model", "device", "batch", "latency p50", "images/s"};
  int nc = 6, n = 0;
  for (int c = 0; c < nc; c++) snprintf(cells[n++], 64, "%s", head[c]);
  for (size_t r = 0; r < pb_table_rows(t) && n + nc <= MAXCELLS; r++) {
    const char *fw = pb__rp_str(t, r, "framework"), *m = pb__rp_str(t, r, "model"), *dev = pb__rp_str(t, r, "device_type");
    snprintf(cells[n++], 64, "%s", fw ? fw : "-");
    snprintf(cells[n++], 64, "%s", m ? m : "-");
    snprintf(cells[n++], 64, "%s", dev ? dev : "-");
    snprintf(cells[n++], 64, "%.0f", pb__rp_f64(t, r, "batch_size"));
    fmt_time(pb__rp_f64(t, r, "latency_p50_ms") / 1e3, cells[n++], 64);
    fmt_num(pb__rp_f64(t, r, "throughput_ips"), cells[n++], 64);
  }
  doc_table(d, cells, n / nc, nc);
}

/* ---- the whole report ------------------------------------------------------------------------ */

static const char *const css =
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
    "img{max-width:100%;border:1px solid #ddd}table{border-collapse:collapse;margin:1em 0;font-size:0.9em}"
    "th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:right}th{background:#f3f3f3}"
    "td:first-child,th:first-child{text-align:left}code{background:#f3f3f3;padding:0 0.2em}";

int pb_report_write_ex(const char *out_dir, pb_report_note_fn note, void *note_ctx, struct pb_error *err) {
  struct stat st;
  if (out_dir == NULL || stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return pb_error_set(err, PB_ENOTFOUND, "%s: no such results folder", out_dir ? out_dir : "(null)");
  pb__rp_data *data = malloc(sizeof *data);
  char (*cells)[64] = malloc(MAXCELLS * sizeof *cells);
  doc *d = calloc(1, sizeof *d);
  if (data == NULL || cells == NULL || d == NULL) {
    free(data);
    free(cells);
    free(d);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  pb__rp_load(out_dir, data, NULL, NULL); /* pb_report_plots already told about bad tables */
  cJSON *sum = load_summary(out_dir);
  int have = sum != NULL || data->infer != NULL;
  for (int k = 0; k < PB__RP_TRACKS; k++) have |= data->t[k] != NULL;
  int rc = PB_OK;
  if (!have) {
    rc = pb_error_set(err, PB_ENOTFOUND, "%s/data: no result tables and no pipebench_summary.json", out_dir);
    goto done;
  }
  sb_printf(&d->html, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>pipebench report</title><style>%s</style></head><body>\n", css);
  doc_h(d, 1, "pipebench report");
  {
    const char *ts = json_str(sum, "env", "timestamp_utc"), *host = json_str(sum, "env", "hostname");
    const char *cpu = json_str(sum, "env", "cpu_model"), *commit = json_str(sum, "env", "git_commit");
    const char *cache = json_str(sum, "configuration", "cache_state");
    if (sum != NULL)
      doc_p(d, "Run of %s on `%s` (%s, %s cores), pipebench commit `%s`, page cache %s, %g rounds per configuration. Results: `data/`; plots: `images/`.",
            ts ? ts : "?", host ? host : "?", cpu ? cpu : "?", json_str(sum, "env", "cpu_cores") ? json_str(sum, "env", "cpu_cores") : "?",
            commit ? commit : "?", cache ? cache : "?", json_num(sum, "configuration", "repeats"));
    else
      doc_p(d, "No `data/pipebench_summary.json` here: calibration limits and run details are missing.");
    const char *err_text = json_str(sum, "error", NULL);
    if (err_text) doc_p(d, "**The run stopped early:** %s", err_text);
  }
  doc_h(d, 2, "The answer");
  if (data->t[0] != NULL || data->status[0] == PB_ENOTFOUND) answer_random(d, data->t[0], sum);
  if (data->t[1] != NULL || data->status[1] == PB_ENOTFOUND) answer_bulk(d, data->t[1], sum);
  if (data->t[2] != NULL || data->status[2] == PB_ENOTFOUND) answer_bound(d, data->t[2]);
  answer_peer(d, data->t[1], data->t[3]);
  answer_unstable(d, data);
  for (int k = 0; k < PB__RP_TRACKS; k++) {
    if (data->t[k] == NULL && data->status[k] != PB_ENOTFOUND)
      doc_li(d, "Track %d could not be read, so its answer is unknown: %s", k + 1, data->why[k]);
    const char *ts = data->t[k] ? pb_table_get_meta(data->t[k], "env.timestamp_utc") : NULL;
    const char *sts = json_str(sum, "env", "timestamp_utc");
    if (ts && sts && strcmp(ts, sts) != 0)
      doc_li(d, "Track %d's table comes from another run (%s, the summary is from %s): do not compare it with the others.", k + 1, ts, sts);
  }
  {
    double m = json_num(sum, "calibration", "memcpy_mt_gbps"), rw = json_num(sum, "calibration", "read_warm_gbps");
    double rcd = json_num(sum, "calibration", "read_cold_gbps"), z = json_num(sum, "calibration", "zstd_gbps");
    char lim[512] = "";
    size_t u = 0;
    if (isfinite(m)) u += (size_t)snprintf(lim + u, sizeof lim - u, "; memory copy %.2f GB/s (all cores)", m);
    if (isfinite(rw)) u += (size_t)snprintf(lim + u, sizeof lim - u, "; file read %.2f GB/s warm", rw);
    if (isfinite(rcd)) u += (size_t)snprintf(lim + u, sizeof lim - u, "; file read %.2f GB/s cold", rcd);
    if (isfinite(z)) snprintf(lim + u, sizeof lim - u, "; zstd decompression %.2f GB/s", z);
    if (lim[0]) doc_p(d, "This machine's limits, measured in the same run%s.", lim);
  }
  static const char *const titles[] = {"Track 1: per-sample access", "Track 2: loader throughput",
                                       "Track 3: model loop", "Track 4: stage breakdown and torch hand-off"};
  for (int k = 0; k < PB__RP_TRACKS; k++) {
    if (data->t[k] == NULL) continue;
    char name[64];
    snprintf(name, sizeof name, "pipebench_track%d.png", k + 1);
    doc_h(d, 2, titles[k]);
    doc_img(d, out_dir, name, titles[k]);
    if (k == 0) section1(d, data->t[k], cells);
    if (k == 1) section2(d, data->t[k], cells);
    if (k == 2) section3(d, data->t[k], cells);
    if (k == 3) section4(d, data->t[k], cells);
    doc_p(d, "Table: `%s`.", data->path[k]);
  }
  if (data->infer != NULL) {
    doc_h(d, 2, "Inference");
    doc_img(d, out_dir, "pipebench_infer.png", "inference");
    section_infer(d, data->infer, cells);
    doc_p(d, "From %d `benchmark_results_*.csv` file(s) in `%s`.", data->infer_files, data->infer_dir);
  }
  doc_end_list(d);
  sb_puts(&d->html, "</body></html>\n");
  if (d->md.oom || d->html.oom) {
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    goto done;
  }
  char path[4300];
  snprintf(path, sizeof path, "%s/report.md", out_dir);
  rc = pb_write_file_atomic(path, d->md.p, d->md.n, err);
  if (rc == PB_OK && note) note(note_ctx, 0, path, NULL);
  if (rc == PB_OK) {
    snprintf(path, sizeof path, "%s/report.html", out_dir);
    rc = pb_write_file_atomic(path, d->html.p, d->html.n, err);
    if (rc == PB_OK && note) note(note_ctx, 0, path, NULL);
  }
done:
  cJSON_Delete(sum);
  pb__rp_free(data);
  free(data);
  free(cells);
  free(d->md.p);
  free(d->html.p);
  free(d);
  return rc;
}

int pb_report_write(const char *out_dir, struct pb_error *err) {
  return pb_report_write_ex(out_dir, NULL, NULL, err);
}

/* A failure to put a file on disk (a full disk, no permission), as opposed to a table a plot
 * cannot use or a PLplot without its PNG driver. */
static int write_failed(int rc) {
  return rc != PB_OK && rc != PB_ENOTFOUND && rc != PB_EFORMAT && rc != PB_EUNSUPPORTED &&
         rc != PB_ESTATE;
}

/* Called once at the end of pb_run: plots and report of the folder just written. Bad or
 * missing plots do not fail a run whose tables are safely written; they are reported. A plot
 * or report that could not be written (a full disk) is returned, and fails the run. */
int pb__report_after_run(const char *out_dir, void (*line)(void *ctx, const char *text), void *ctx) {
  struct pb_error e = {{0}};
  int n = 0;
  char text[1400];
  int rc = pb_report_plots(out_dir, &n, &e);
  if (line != NULL) {
    if (rc == PB_OK) snprintf(text, sizeof text, "wrote %d plots in %s/images%s%s", n, out_dir, e.message[0] ? "; " : "", e.message);
    else snprintf(text, sizeof text, "plots: %s", e.message);
    line(ctx, text);
  }
  e.message[0] = '\0';
  int rc2 = pb_report_write(out_dir, &e);
  if (line != NULL) {
    if (rc2 == PB_OK) snprintf(text, sizeof text, "wrote %s/report.md and report.html", out_dir);
    else snprintf(text, sizeof text, "report: %s", e.message);
    line(ctx, text);
  }
  return write_failed(rc2) ? rc2 : write_failed(rc) ? rc : PB_OK;
}
