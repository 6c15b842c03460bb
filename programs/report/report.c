/* The written report: OUT/report.md and a self-contained OUT/report.html, built side by side
 * from the same calls (a heading, a paragraph, a list item, a table, an image). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipebench/sys.h"
#include "report/report_internal.h"
#include "pipebench/results.h"

/* ---- text buffers (common/strbuf.h) ---------------------------------------------------------- */

typedef pb_strbuf sbuf;
#define sb_put pb_strbuf_putn
#define sb_puts pb_strbuf_puts
#define sb_printf pb_strbuf_printf

static void sb_html_text(sbuf *b, const char *s);

/* A Markdown link [text](url) at s, as an HTML anchor; returns the characters taken, 0 when s
 * starts no link. */
static size_t sb_html_link(sbuf *b, const char *s) {
  const char *mid = strstr(s, "](");
  const char *end = mid ? strchr(mid + 2, ')') : NULL;
  if (mid == NULL || end == NULL || memchr(s + 1, ']', (size_t)(mid - s - 1)) != NULL) return 0;
  char text[512], url[1024];
  snprintf(text, sizeof text, "%.*s", (int)(mid - s - 1), s + 1);
  snprintf(url, sizeof url, "%.*s", (int)(end - mid - 2), mid + 2);
  sb_puts(b, "<a href=\"");
  sb_html_text(b, url);
  sb_puts(b, "\">");
  sb_html_text(b, text);
  sb_puts(b, "</a>");
  return (size_t)(end - s) + 1;
}

/* HTML text with **bold** and `code` spans and [text](url) links. */
static void sb_html_text(sbuf *b, const char *s) {
  int bold = 0, code = 0;
  for (const char *p = s; *p; p++) {
    size_t link = *p == '[' && !code ? sb_html_link(b, p) : 0;
    if (link > 0) {
      p += link - 1;
      continue;
    }
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

struct pb__report_doc {
  sbuf md, html;
  int in_list;
};

static void doc_end_list(pb__report_doc *d) {
  if (!d->in_list) return;
  sb_puts(&d->md, "\n");
  sb_puts(&d->html, "</ul>\n");
  d->in_list = 0;
}

static void doc_h(pb__report_doc *d, int level, const char *text) {
  doc_end_list(d);
  for (int i = 0; i < level; i++) sb_puts(&d->md, "#");
  sb_printf(&d->md, " %s\n\n", text);
  sb_printf(&d->html, "<h%d>", level);
  sb_html_text(&d->html, text);
  sb_printf(&d->html, "</h%d>\n", level);
}

void pb__report_p(pb__report_doc *d, const char *fmt, ...) {
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

void pb__report_li(pb__report_doc *d, const char *fmt, ...) {
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
void pb__report_table(pb__report_doc *d, char (*cells)[64], int nrows, int ncols) {
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

static void doc_img(pb__report_doc *d, const char *dir, const char *name, const char *alt) {
  char path[4300];
  snprintf(path, sizeof path, "%s/images/%s", dir, name);
  void *data = NULL;
  size_t n = 0;
  struct pb_error e;
  if (pb_read_file(path, &data, &n, &e) != PB_OK) return;
  doc_end_list(d);
  sb_printf(&d->md, "![%s](images/%s)\n\n", alt, name);
  sb_printf(&d->html, "<p><img alt=\"%s\" src=\"data:image/png;base64,", alt);
  sb_base64(&d->html, (const unsigned char *)data, n);
  sb_puts(&d->html, "\"></p>\n");
  pb_free(data, n);
}

/* ---- numbers in words ------------------------------------------------------------------------ */

const char *pb__report_fmt_time(double s, char *buf, size_t size) {
  if (!isfinite(s)) snprintf(buf, size, "-");
  else if (s < 1e-3) snprintf(buf, size, "%.1f µs", s * 1e6);
  else if (s < 1) snprintf(buf, size, "%.2f ms", s * 1e3);
  else snprintf(buf, size, "%.2f s", s);
  return buf;
}

const char *pb__report_fmt_num(double v, char *buf, size_t size) {
  if (!isfinite(v)) snprintf(buf, size, "-");
  else if (fabs(v) >= 100) snprintf(buf, size, "%.0f", v);
  else if (fabs(v) >= 10) snprintf(buf, size, "%.1f", v);
  else snprintf(buf, size, "%.2f", v);
  return buf;
}

double pb__report_json_num(const cJSON *o, const char *a, const char *b) {
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
  if (pb_read_file(path, &text, &n, &e) != PB_OK) return NULL;
  cJSON *root = NULL;
  pb_json_parse(text, n, path, &root, &e); /* trailing data: no summary, as for a bad one */
  pb_free(text, n);
  return root;
}

/* ---- whose files these are ------------------------------------------------------------------ */

/* What report.md and report.html carry in their first lines (see pb__report_ours). */
#define REPORT_MARK "<!-- pipebench report"

int pb__report_ours(const char *path, struct pb_error *err) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT) return PB_OK;
    return pb_error_set(err, -errno, "%s: %s", path, strerror(errno));
  }
  static const char *const fix = "move it away or choose another folder; pipebench replaces only "
                                 "a report it wrote";
  if (S_ISLNK(st.st_mode))
    return pb_error_set(err, -EEXIST, "%s is a symbolic link, not a report pipebench wrote: %s",
                        path, fix);
  if (!S_ISREG(st.st_mode))
    return pb_error_set(err, -EEXIST, "%s is %s, not a report pipebench wrote: %s", path,
                        pb_file_kind((unsigned)st.st_mode), fix);
  char head[1025];
  ssize_t got = -1;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) {
    do {
      got = read(fd, head, sizeof head - 1);
    } while (got < 0 && errno == EINTR);
    close(fd);
  }
  if (got < 0) return pb_error_set(err, -errno, "cannot read %s: %s", path, strerror(errno));
  head[got] = '\0';
  /* The mark, or the first lines of a report of a pipebench from before the mark. */
  if (strstr(head, REPORT_MARK) != NULL || strncmp(head, "# pipebench report\n", 19) == 0 ||
      (strncmp(head, "<!DOCTYPE html>", 15) == 0 && strstr(head, "<title>pipebench report</title>") != NULL))
    return PB_OK;
  return pb_error_set(err, -EEXIST, "%s is not a report pipebench wrote (its first lines lack "
                      "\"" REPORT_MARK "\"): %s", path, fix);
}

/* The run id a table or the summary carries, for messages ("none": from before run ids). */
static const char *id_or_none(const char *id) { return id != NULL ? id : "none"; }

static int same_id(const char *a, const char *b) {
  return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

int pb__report_check_run(const pb__report_data *d, struct pb_error *err) {
  cJSON *sum = load_summary(d->dir);
  const char *ref = NULL, *ref_file = NULL;
  if (sum != NULL) {
    ref = json_str(sum, "run_id", NULL);
    ref_file = "data/pipebench_summary.json";
  }
  char bad[900] = "";
  for (size_t k = 0; k < d->n; k++) {
    if (d->t[k] == NULL) continue;
    const char *id = pb_table_get_meta(d->t[k], "pipebench.run_id");
    const char *file = d->path[k];
    size_t dl = strlen(d->dir);
    if (strncmp(file, d->dir, dl) == 0 && file[dl] == '/') file += dl + 1;
    if (ref_file == NULL) {
      ref = id;
      ref_file = file;
    } else if (!same_id(ref, id)) {
      size_t u = strlen(bad);
      snprintf(bad + u, sizeof bad - u, "; %s is of run %s", file, id_or_none(id));
    }
  }
  int rc = PB_OK;
  if (bad[0] != '\0')
    rc = pb_error_set(err, PB_EFORMAT, "%s: its files come from different runs, and a report "
                      "would mix them: %s is of run %s%s. Run again into this folder, or redraw "
                      "a folder that holds one run's files", d->dir, ref_file, id_or_none(ref), bad);
  cJSON_Delete(sum);
  return rc;
}

/* ---- the answers ----------------------------------------------------------------------------- */

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

static void answer_rounds(pb__report_doc *d, const pb__report_data *data) {
  for (size_t k = 0; k < data->n; k++) {
    const pb__report_view *v = data->views[k];
    if (data->t[k] == NULL || v->round_keys == NULL) continue;
    int nk = 0, n_cfg;
    while (v->round_keys[nk] != NULL) nk++;
    double worst;
    int bad = rounds_unstable(data->t[k], v->round_keys, nk, v->round_metric, &n_cfg, &worst);
    if (n_cfg == 0) continue;
    pb__report_li(d, "Round to round (track %s, %s): %d of %d configurations vary by more than 5%% "
              "(coefficient of variation over their rounds; worst %.1f%%).%s",
           v->id, v->round_what, bad, n_cfg, 100 * worst,
           bad > 0 ? " Differences between formats smaller than that are noise; more --repeats "
                     "narrow it." : "");
  }
}

static void answer_unstable(pb__report_doc *d, const pb__report_data *data) {
  answer_rounds(d, data);
  int total_bad = 0;
  for (size_t k = 0; k < data->n; k++) {
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
      pb__report_li(d, "Spread within a round, track %s: %d of %zu rows have single-sample or "
                "single-batch times with a coefficient of variation above 5%% or outliers by the "
                "modified z-score (column unstable). Per-item times of a loader naturally spread "
                "this much; the round-to-round line above says whether the results repeat.",
             data->views[k]->id, bad, rows);
    total_bad += bad;
  }
  if (total_bad == 0) pb__report_li(d, "No row is flagged unstable.");
}

/* ---- per-track sections ---------------------------------------------------------------------- */

static void section_infer(pb__report_doc *d, const pb_table *t, char (*cells)[64]) {
  static const char *const head[] = {"framework", "model", "device", "batch", "latency p50", "images/s"};
  int nc = 6, n = 0;
  for (int c = 0; c < nc; c++) snprintf(cells[n++], 64, "%s", head[c]);
  for (size_t r = 0; r < pb_table_rows(t) && n + nc <= PB__RP_MAXCELLS; r++) {
    const char *fw = pb__report_str(t, r, "framework"), *m = pb__report_str(t, r, "model"), *dev = pb__report_str(t, r, "device_type");
    snprintf(cells[n++], 64, "%s", fw ? fw : "-");
    snprintf(cells[n++], 64, "%s", m ? m : "-");
    snprintf(cells[n++], 64, "%s", dev ? dev : "-");
    snprintf(cells[n++], 64, "%.0f", pb__report_f64(t, r, "batch_size"));
    pb__report_fmt_time(pb__report_f64(t, r, "latency_p50_ms") / 1e3, cells[n++], 64);
    pb__report_fmt_num(pb__report_f64(t, r, "throughput_ips"), cells[n++], 64);
  }
  pb__report_table(d, cells, n / nc, nc);
}

/* ---- the whole report ------------------------------------------------------------------------ */

static const char *const css =
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
    "img{max-width:100%;border:1px solid #ddd}table{border-collapse:collapse;margin:1em 0;font-size:0.9em}"
    "th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:right}th{background:#f3f3f3}"
    "td:first-child,th:first-child{text-align:left}code{background:#f3f3f3;padding:0 0.2em}";

/* The opening paragraph: which run this is. */
static void write_intro(pb__report_doc *d, const cJSON *sum) {
  const char *ts = json_str(sum, "env", "timestamp_utc"), *host = json_str(sum, "env", "hostname");
  const char *cpu = json_str(sum, "env", "cpu_model"), *commit = json_str(sum, "env", "git_commit");
  const char *cache = json_str(sum, "configuration", "cache_state");
  if (sum != NULL)
    pb__report_p(d, "Run of %s on `%s` (%s, %s cores), pipebench commit `%s`, page cache %s, %g rounds per configuration. Results: `data/`; plots: `images/`.",
          ts ? ts : "?", host ? host : "?", cpu ? cpu : "?", json_str(sum, "env", "cpu_cores") ? json_str(sum, "env", "cpu_cores") : "?",
          commit ? commit : "?", cache ? cache : "?", pb__report_json_num(sum, "configuration", "repeats"));
  else
    pb__report_p(d, "No `data/pipebench_summary.json` here: calibration limits and run details are missing.");
  const char *err_text = json_str(sum, "error", NULL);
  if (err_text) pb__report_p(d, "**The run stopped early:** %s", err_text);
}

/* "The answer": each track's answer, then the peer comparisons, stability, unreadable tables
 * and the machine's limits. */
static void write_answers(pb__report_doc *d, const pb__report_data *data, const cJSON *sum) {
  doc_h(d, 2, "The answer");
  for (size_t k = 0; k < data->n; k++)
    if (data->views[k]->answer != NULL && (data->t[k] != NULL || data->status[k] == PB_ENOTFOUND))
      data->views[k]->answer(d, data->t[k], sum);
  for (size_t k = 0; k < data->n; k++)
    if (data->views[k]->answer_peer != NULL) data->views[k]->answer_peer(d, data->t[k]);
  answer_unstable(d, data);
  for (size_t k = 0; k < data->n; k++) {
    const char *id = data->views[k]->id;
    if (data->t[k] == NULL && data->status[k] != PB_ENOTFOUND)
      pb__report_li(d, "Track %s could not be read, so its answer is unknown: %s", id, data->why[k]);
    const char *ts = data->t[k] ? pb_table_get_meta(data->t[k], "env.timestamp_utc") : NULL;
    const char *sts = json_str(sum, "env", "timestamp_utc");
    if (ts && sts && strcmp(ts, sts) != 0)
      pb__report_li(d, "Track %s's table comes from another run (%s, the summary is from %s): do not compare it with the others.", id, ts, sts);
  }
  double m = pb__report_json_num(sum, "calibration", "memcpy_mt_gbps"), rw = pb__report_json_num(sum, "calibration", "read_warm_gbps");
  double rcd = pb__report_json_num(sum, "calibration", "read_cold_gbps"), z = pb__report_json_num(sum, "calibration", "zstd_gbps");
  char lim[512] = "";
  size_t u = 0;
  if (isfinite(m)) u += (size_t)snprintf(lim + u, sizeof lim - u, "; memory copy %.2f GB/s (all cores)", m);
  if (isfinite(rw)) u += (size_t)snprintf(lim + u, sizeof lim - u, "; file read %.2f GB/s warm", rw);
  if (isfinite(rcd)) u += (size_t)snprintf(lim + u, sizeof lim - u, "; file read %.2f GB/s cold", rcd);
  if (isfinite(z)) snprintf(lim + u, sizeof lim - u, "; zstd decompression %.2f GB/s", z);
  if (lim[0]) pb__report_p(d, "This machine's limits, measured in the same run%s.", lim);
}

/* path as the report names it: relative to the report's folder when it lies inside dir (the
 * folder the run's set ends up in), so that the report never names a staging folder and still
 * works when the folder is moved. */
static const char *rel_to(const char *path, const char *dir) {
  size_t n = dir ? strlen(dir) : 0;
  while (n > 1 && dir[n - 1] == '/') n--;
  if (n > 0 && strncmp(path, dir, n) == 0 && path[n] == '/') return path + n + 1;
  if (n > 0 && strcmp(path, dir) == 0) return ".";
  return path;
}

/* One section per track with a table (its plot, its own text and table), then inference. */
static void write_sections(pb__report_doc *d, const pb__report_data *data, const char *out_dir,
                           const char *infer_root, char (*cells)[64]) {
  for (size_t k = 0; k < data->n; k++) {
    const pb__report_view *v = data->views[k];
    if (data->t[k] == NULL) continue;
    char name[300];
    snprintf(name, sizeof name, "%s.png", v->table);
    doc_h(d, 2, v->title);
    doc_img(d, out_dir, name, v->title);
    if (v->section != NULL) v->section(d, data->t[k], cells);
    const char *rel = rel_to(data->path[k], out_dir);
    pb__report_p(d, "Table: [`%s`](%s).", rel, rel);
  }
  if (data->infer != NULL) {
    doc_h(d, 2, "Inference");
    doc_img(d, out_dir, "pipebench_infer.png", "inference");
    section_infer(d, data->infer, cells);
    const char *rel = rel_to(data->infer_dir, infer_root ? infer_root : out_dir);
    pb__report_p(d, "From %d `benchmark_results_*.csv` file(s) in [`%s`](%s).", data->infer_files, rel, rel);
  }
}

int pb__report_write(const pb__report_view *const *views, size_t n_views, const char *out_dir,
                 pb_report_note_fn note, void *note_ctx, struct pb_error *err) {
  return pb__report_write_from(views, n_views, out_dir, NULL, note, note_ctx, err);
}

int pb__report_write_from(const pb__report_view *const *views, size_t n_views, const char *out_dir,
                      const char *infer_root, pb_report_note_fn note, void *note_ctx,
                      struct pb_error *err) {
  struct stat st;
  if (out_dir == NULL || stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return pb_error_set(err, PB_ENOTFOUND, "%s: no such results folder", out_dir ? out_dir : "(null)");
  pb__report_data *data = malloc(sizeof *data);
  char (*cells)[64] = malloc(PB__RP_MAXCELLS * sizeof *cells);
  pb__report_doc *d = calloc(1, sizeof *d);
  if (data == NULL || cells == NULL || d == NULL) {
    free(data);
    free(cells);
    free(d);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  /* pb_report_plots already told about bad tables */
  pb__report_load(out_dir, infer_root, views, n_views, data, NULL, NULL);
  cJSON *sum = load_summary(out_dir);
  int have = sum != NULL || data->infer != NULL;
  for (size_t k = 0; k < data->n; k++) have |= data->t[k] != NULL;
  char path[4300];
  int rc = pb__report_check_run(data, err);
  for (int i = 0; i < 2 && rc == PB_OK; i++) {
    snprintf(path, sizeof path, "%s/%s", out_dir, i == 0 ? "report.md" : "report.html");
    rc = pb__report_ours(path, err);
  }
  if (rc != PB_OK) goto done;
  if (!have) {
    rc = pb_error_set(err, PB_ENOTFOUND, "%s/data: no result tables and no pipebench_summary.json", out_dir);
    goto done;
  }
  /* the mark that tells pipebench's own report from a user's file of the same name */
  const char *run_id = json_str(sum, "run_id", NULL);
  if (run_id != NULL && (run_id[strspn(run_id, "0123456789abcdefABCDEFTZ-")] != '\0' ||
                         strstr(run_id, "--") != NULL))
    run_id = NULL; /* not one pipebench made: it stays out of the comment */
  sb_printf(&d->md, REPORT_MARK "%s%s -->\n", run_id ? "; run " : "", run_id ? run_id : "");
  sb_printf(&d->html, "<!DOCTYPE html>\n" REPORT_MARK "%s%s -->\n", run_id ? "; run " : "",
            run_id ? run_id : "");
  sb_printf(&d->html, "<html lang=\"en\"><head><meta charset=\"utf-8\"><title>pipebench report</title><style>%s</style></head><body>\n", css);
  doc_h(d, 1, "pipebench report");
  write_intro(d, sum);
  write_answers(d, data, sum);
  write_sections(d, data, out_dir, infer_root, cells);
  doc_end_list(d);
  sb_puts(&d->html, "</body></html>\n");
  if (d->md.oom || d->html.oom) {
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    goto done;
  }
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
  pb__report_free(data);
  free(data);
  free(cells);
  free(d->md.p);
  free(d->html.p);
  free(d);
  return rc;
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
int pb__report_after_run(const pb__report_view *const *views, size_t n_views, const char *out_dir,
                         const char *infer_root, void (*line)(void *ctx, const char *text),
                         void *ctx) {
  struct pb_error e = {{0}};
  int n = 0;
  char text[1400];
  int rc = pb__report_plots_from(views, n_views, out_dir, infer_root, NULL, NULL, &n, &e);
  if (line != NULL) {
    if (rc == PB_OK) snprintf(text, sizeof text, "wrote %d plots in %s/images%s%s", n, out_dir, e.message[0] ? "; " : "", e.message);
    else snprintf(text, sizeof text, "plots: %s", e.message);
    line(ctx, text);
  }
  e.message[0] = '\0';
  int rc2 = pb__report_write_from(views, n_views, out_dir, infer_root, NULL, NULL, &e);
  if (line != NULL) {
    if (rc2 == PB_OK) snprintf(text, sizeof text, "wrote %s/report.md and report.html", out_dir);
    else snprintf(text, sizeof text, "report: %s", e.message);
    line(ctx, text);
  }
  return write_failed(rc2) ? rc2 : write_failed(rc) ? rc : PB_OK;
}
