/* Plots of the result tables through PLplot's pngcairo driver.
 *
 * PLplot keeps global state and is not thread-safe, so every plot runs under one process-wide
 * lock. It also prints to stderr (warnings, aborts) and may call exit(); the library must do
 * neither, so while it draws, file descriptors 1 and 2 point to a scratch file (its text goes
 * into the error message when a plot fails) and PLplot's exit handler jumps back here. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <plplot.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipebench/revs.h"
#include "report/plot_kit.h"
#include "revs/revs_internal.h"
#include "report/report_internal.h"
#include "pipebench/results.h"
#include "pipebench/sys.h"

/* ---- the PLplot session ---------------------------------------------------------------------- */

static pthread_mutex_t plot_lock = PTHREAD_MUTEX_INITIALIZER;
static jmp_buf plot_jump;
static char plot_msg[512];
static int plot_broken; /* PLplot jumped out mid-plot: its state can no longer be trusted */

static int on_plexit(PLCHAR_VECTOR msg) {
  snprintf(plot_msg, sizeof plot_msg, "%s", msg ? msg : "PLplot gave up");
  longjmp(plot_jump, 1);
}

static void on_plabort(PLCHAR_VECTOR msg) {
  if (plot_msg[0] == '\0') snprintf(plot_msg, sizeof plot_msg, "%s", msg ? msg : "PLplot error");
}

/* Is PLplot's pngcairo driver installed (its dynamic driver found)? */
static int have_pngcairo(void) {
  const char *menu[256], *names[256];
  const char **pm = menu, **pn = names;
  int n = 256;
  plgDevs(&pm, &pn, &n);
  for (int i = 0; i < n; i++)
    if (pn[i] != NULL && strcmp(pn[i], "pngcairo") == 0) return 1;
  return 0;
}

/* Runs draw between plinit and plend with tmp as the output file; 0 or -1 (plot_msg says). */
static int run_plplot(const char *tmp, int w, int h, pb__plot_draw_fn draw, const void *ctx) {
  static PLINT code;
  static char msg[1024];
  code = 0;
  msg[0] = '\0';
  plot_msg[0] = '\0';
  if (setjmp(plot_jump) != 0) {
    plot_broken = 1;
    return -1;
  }
  plsexit(on_plexit);
  plsabort(on_plabort);
  plsdev("pngcairo");
  plsfnam(tmp);
  plspage(0, 0, w, h, 0, 0);
  plscolbg(255, 255, 255);
  plsError(&code, msg);
  plinit();
  if (code == 0) {
    pb__plot_page pg = {w, h, 0, 0, 0};
    pladv(0);
    PLFLT x0, x1, y0, y1, def, ht;
    plgspa(&x0, &x1, &y0, &y1);
    plgchr(&def, &ht);
    pg.page_w_mm = x1 - x0;
    pg.page_h_mm = y1 - y0;
    pg.chr_mm = def;
    draw(ctx, &pg);
  }
  plend();
  if (code != 0 && plot_msg[0] == '\0') snprintf(plot_msg, sizeof plot_msg, "%s", msg);
  return code != 0 ? -1 : 0;
}

/* A PNG ends with its IEND chunk: length 0, the type, and that type's fixed CRC. */
static int png_complete(const char *file) {
  static const unsigned char iend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82};
  return pb_file_ends_with(file, iend, sizeof iend);
}

/* Draws one PNG of w x h pixels into path, atomically (a temporary sibling, renamed). */
static int plot_png(const char *path, int w, int h, pb__plot_draw_fn draw, const void *ctx,
                    struct pb_error *err) {
  pthread_mutex_lock(&plot_lock);
  int rc = PB_OK;
  if (plot_broken) {
    rc = pb_error_set(err, PB_ESTATE, "%s: PLplot failed earlier in this process (%s); not drawing",
                      path, plot_msg);
    goto out;
  }
  char tmp[4200];
  if ((rc = pb_atomic_begin(path, tmp, sizeof tmp, err)) != PB_OK) goto out;
  /* Point stdout and stderr at a scratch file while PLplot runs. */
  fflush(stdout);
  fflush(stderr);
  FILE *scratch = tmpfile();
  int saved1 = dup(STDOUT_FILENO), saved2 = dup(STDERR_FILENO);
  if (scratch != NULL && saved1 >= 0 && saved2 >= 0) {
    dup2(fileno(scratch), STDOUT_FILENO);
    dup2(fileno(scratch), STDERR_FILENO);
  }
  int have = have_pngcairo();
  int prc = have ? run_plplot(tmp, w, h, draw, ctx) : -1;
  fflush(stdout);
  fflush(stderr);
  if (saved1 >= 0) dup2(saved1, STDOUT_FILENO);
  if (saved2 >= 0) dup2(saved2, STDERR_FILENO);
  if (saved1 >= 0) close(saved1);
  if (saved2 >= 0) close(saved2);
  char said[400] = "";
  if (scratch != NULL) {
    rewind(scratch);
    size_t n = fread(said, 1, sizeof said - 1, scratch);
    said[n] = '\0';
    for (char *p = said; *p; p++)
      if (*p == '\n' || *p == '\r') *p = ' ';
    fclose(scratch);
  }
  if (!have)
    rc = pb_error_set(err, PB_EUNSUPPORTED,
                      "%s: PLplot's pngcairo driver is not installed (Debian: plplot-driver-cairo; "
                      "or set PLPLOT_DRV_DIR to the folder holding cairo.so)",
                      path);
  else if (prc != 0)
    rc = pb_error_set(err, PB_EIO, "%s: PLplot could not draw it: %s %s", path,
                      plot_msg[0] ? plot_msg : "no output", said);
  else if (!png_complete(tmp)) /* cairo does not report a short write (a full disk) */
    rc = pb_error_set(err, PB_EIO, "%s: the PNG was not written whole (is the disk full?) %s",
                      path, said);
  rc = pb_atomic_finish(tmp, path, rc, err);
out:
  pthread_mutex_unlock(&plot_lock);
  return rc;
}

int pb__plot_png(const char *path, int w, int h, pb__plot_draw_fn draw, const void *ctx,
                 struct pb_error *err) {
  return plot_png(path, w, h, draw, ctx, err);
}

/* ---- infer ----------------------------------------------------------------------------------- */

static void draw_infer(const void *ctx, pb__plot_page *pg) {
  const pb_table *t = ctx;
  const char *models[16];
  int nm = pb__report_distinct_str(t, "model", NULL, 0, models, 16);
  /* One line per model x framework x dtype x device: rows of other dtypes or devices are never
   * folded into one median. Colour: the model; marker and dash: the rest within a model. */
  enum { MAXS = 32 };
  static const char *const keys[4] = {"model", "framework", "dtype", "device_type"};
  const char *ser[MAXS][4];
  int ns = 0;
  for (size_t r = 0; r < pb_table_rows(t); r++) {
    const char *v[4];
    for (int k = 0; k < 4; k++) v[k] = pb__report_str(t, r, keys[k]);
    int seen = 0;
    for (int i = 0; i < ns && !seen; i++) {
      seen = 1;
      for (int k = 0; k < 4; k++)
        seen &= (ser[i][k] == NULL && v[k] == NULL) ||
                (ser[i][k] != NULL && v[k] != NULL && strcmp(ser[i][k], v[k]) == 0);
    }
    if (!seen && ns < MAXS) {
      for (int k = 0; k < 4; k++) ser[ns][k] = v[k];
      ns++;
    }
  }
  int ser_model[MAXS], ser_rank[MAXS]; /* the model's colour, the series' rank within its model */
  for (int i = 0; i < ns; i++) {
    ser_model[i] = 0, ser_rank[i] = 0;
    for (int m = 0; m < nm; m++)
      if (ser[i][0] != NULL && strcmp(models[m], ser[i][0]) == 0) ser_model[i] = m;
    for (int j = 0; j < i; j++) ser_rank[i] += ser_model[j] == ser_model[i];
  }
  int64_t bss[64];
  int nb = pb__report_distinct_i64(t, "batch_size", NULL, 0, bss, 64);
  static const uint32_t model_rgb[] = {0x222222, 0x6A3D9A, 0xB15928, 0x1B9E77, 0x999933, 0x882255, 0x0072B2};
  double llo = INFINITY, lhi = 0, tlo = INFINITY, thi = 0;
  for (size_t r = 0; r < pb_table_rows(t); r++) {
    double l = pb__report_f64(t, r, "latency_p50_ms"), v = pb__report_f64(t, r, "throughput_ips");
    if (l > 0 && l < llo) llo = l;
    if (l > lhi) lhi = l;
    if (v > 0 && v < tlo) tlo = v;
    if (v > thi) thi = v;
  }
  double la, lb, ta, tb;
  pb__plot_log_range(llo, lhi, &la, &lb);
  pb__plot_log_range(tlo, thi, &ta, &tb);
  pb__plot_layout L = {pg, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  L.top = 1.0 - 4.2 * pb__plot_chr_y(&L, PB__PL_BIG);
  L.bottom = 6.2 * pb__plot_chr_y(&L, PB__PL_TXT);
  const char *dev = pb__report_str(t, 0, "device");
  char sub[256];
  snprintf(sub, sizeof sub, "pipebench infer; device %s; latency: p50 of timed passes", dev ? dev : "?");
  pb__plot_title(&L, "Inference: latency and throughput by batch size", sub);
  char bl[64][16];
  const char *blp[64];
  for (int b = 0; b < nb; b++) {
    snprintf(bl[b], sizeof bl[b], "%lld", (long long)bss[b]);
    blp[b] = bl[b];
  }
  for (int p = 0; p < 2; p++) {
    const char *col = p ? "throughput_ips" : "latency_p50_ms";
    pb__plot_panel(&L, p, -0.3, nb - 0.7, p ? ta : la, p ? tb : lb, 1, p ? "throughput" : "latency (p50)", "batch size",
          p ? "images/s" : "latency per batch (ms)", blp, nb, NULL);
    for (int i = 0; i < ns; i++) {
        int fw = ser_rank[i];
        PLFLT x[64], y[64];
        int n = 0;
        for (int b = 0; b < nb; b++) {
          pb__report_filter fl[5];
          int nf = 0;
          for (int k = 0; k < 4; k++)
            if (ser[i][k] != NULL) fl[nf++] = (pb__report_filter){keys[k], ser[i][k], 0};
          fl[nf++] = (pb__report_filter){"batch_size", NULL, bss[b]};
          double v = pb__report_median(t, col, fl, nf, NULL); /* repeats of one series only */
          if (v > 0) {
            x[n] = b;
            y[n++] = pb__plot_lg(v);
          }
        }
        if (n == 0) continue;
        uint32_t c = model_rgb[ser_model[i] % 7];
        pb__plot_color(c);
        plwidth(4);
        if (fw > 0) {
          PLINT mark = 3000, space = 2000;
          plstyl(1, &mark, &space);
        }
        plline(n, x, y);
        plstyl(0, NULL, NULL);
        for (int k = 0; k < n; k++) pb__plot_marker(&L, x[k], y[k], fw, 2.2, c, fw == 0);
      }
  }
  pb__plot_legend_item it[MAXS];
  char text[MAXS][96];
  for (int i = 0; i < ns; i++) {
    int fw = ser_rank[i];
    snprintf(text[i], sizeof text[i], "%s, %s, %s, %s", ser[i][0] ? ser[i][0] : "?",
             ser[i][1] ? ser[i][1] : "?", ser[i][2] ? ser[i][2] : "?", ser[i][3] ? ser[i][3] : "?");
    it[i] = (pb__plot_legend_item){2, model_rgb[ser_model[i] % 7], fw, fw > 0, fw > 0, text[i]};
  }
  pb__plot_legend(&L, it, ns, 5.4 * pb__plot_chr_y(&L, PB__PL_TXT));
}

/* ---- revs: each branch against the baseline -------------------------------------------------- */

#define REVS_MAX_ROWS 150 /* more rows would not be readable on one page */

#define REVS_LABEL 64 /* a branch's label in the group headings, with its NUL */

typedef struct revs_ctx {
  const pb_revs_comparison *c;
  const size_t *order; /* rows top to bottom */
  size_t n, n_all;
  double factor;
  const char *source;
  const char **names;  /* the distinct branches */
  size_t nn;
  const size_t *bidx;  /* per comparison: its branch in names */
  char *short_names;   /* REVS_LABEL bytes per branch: its label, shortened */
  char *base_label;    /* REVS_LABEL bytes */
} revs_ctx;

/* The labels of the branches and of the baseline, at most budget characters each, distinct. */
static void revs_labels(const revs_ctx *R, size_t budget) {
  pb__revs_short_labels(R->names, R->nn, budget, R->short_names, REVS_LABEL);
  const char *bn = R->n_all > 0 ? R->c[0].baseline : "";
  pb__revs_short_labels(&bn, 1, budget, R->base_label, REVS_LABEL);
}

static void revs_heading(const revs_ctx *R, const pb_revs_comparison *c, char *text, size_t size) {
  snprintf(text, size, "%s: %s against %s", c->experiment,
           R->short_names + R->bidx[c - R->c] * REVS_LABEL, R->base_label);
}

/* Significantly worse: a longer time, a lower throughput, more memory. */
static int revs_worse(const pb_revs_comparison *c) {
  return c->higher_is_better ? c->verdict == PB_FASTER : c->verdict == PB_SLOWER;
}

static uint32_t revs_rgb(const pb_revs_comparison *c) {
  if (c->verdict == PB_SAME) return 0x666666;
  return revs_worse(c) ? 0xD55E00 : 0x0072B2; /* Okabe-Ito vermillion / blue */
}

/* A row's label is its metric; experiment and branch head the row's group inside the panel. */
static void revs_label(const pb_revs_comparison *c, char *out, size_t size) {
  snprintf(out, size, "%s", c->metric);
}

/* Does row k start a group (a new experiment or branch)? */
static int revs_group_start(const revs_ctx *R, size_t k) {
  if (k == 0) return 1;
  const pb_revs_comparison *a = &R->c[R->order[k - 1]], *b = &R->c[R->order[k]];
  return strcmp(a->experiment, b->experiment) != 0 || strcmp(a->branch, b->branch) != 0;
}

/* Rows plus one heading slot per group. */
static size_t revs_slots(const revs_ctx *R) {
  size_t g = 0;
  for (size_t k = 0; k < R->n; k++) g += (size_t)revs_group_start(R, k);
  return R->n + g;
}

/* World y of row k (the top slot is the highest y); its group's heading is one slot above. */
static double revs_y(const revs_ctx *R, size_t k) {
  size_t g = 0;
  for (size_t j = 0; j <= k; j++) g += (size_t)revs_group_start(R, j);
  return (double)revs_slots(R) - 1.0 - (double)(k + g);
}

/* Shortens text until it is at most mm wide at scale ls: from the left ("...tail", for a
 * metric path whose end says most) or, mid != 0, in the middle ("head...tail"). The width is
 * an estimate, so a tenth is kept spare. */
static void revs_fit(const pb__plot_layout *L, char *text, size_t size, double mm, double ls,
                     int mid) {
  if (pb__plot_text_mm(L, text, ls) <= 0.9 * mm) return;
  char orig[400];
  snprintf(orig, sizeof orig, "%s", text);
  size_t len = strlen(orig);
  /* keep fewer characters of the original until it fits (or 4 are left) */
  for (size_t keep = len > 4 ? len - 1 : 4; keep >= 4; keep--) {
    if (mid) {
      size_t head = keep / 2, tail = keep - head;
      snprintf(text, size, "%.*s...%s", (int)head, orig, orig + len - tail);
    } else {
      snprintf(text, size, "...%s", orig + len - keep);
    }
    if (pb__plot_text_mm(L, text, ls) <= 0.9 * mm) return;
  }
}

/* The value column: ratio, its interval, the verdict. */
static void revs_value(const pb_revs_comparison *c, char *out, size_t size) {
  snprintf(out, size, "%.3g [%.3g, %.3g] %s", c->ratio.ratio, c->ratio.lo, c->ratio.hi,
           c->verdict == PB_SAME ? "no change" : c->verdict_text);
}

/* The change threshold either way (dashed) and no change (solid). */
static void revs_thresholds(const revs_ctx *R, const pb__plot_layout *Lp, int xlog) {
  const pb__plot_layout L = *Lp;
  const double ref[3] = {1.0 / R->factor, R->factor, 1.0};
  for (int j = 0; j < 3; j++) {
    double x = xlog ? log10(ref[j]) : ref[j];
    PLFLT lx[2] = {x, x}, ly[2] = {L.wy0, L.wy1};
    if (j < 2) {
      PLINT mark = 2500, space = 1500;
      plstyl(1, &mark, &space);
      pb__plot_color(0x777777);
      plwidth(2);
    } else {
      pb__plot_color(0x000000);
      plwidth(3);
    }
    plline(2, lx, ly);
    plstyl(0, NULL, NULL);
  }
}

/* Each row: its label left, its value right, the interval as a bar and the ratio as a
 * marker (filled when significant). */
static void revs_rows(const revs_ctx *R, const pb__plot_layout *Lp, int xlog, double ls, double ms) {
  const pb__plot_layout L = *Lp;
  char text[400];
  /* room left of the panel for a label, less a margin from the page edge */
  double label_mm = (L.vx0 - 0.01) * L.pg->page_w_mm - 0.8 * L.pg->chr_mm * PB__PL_TXT;
  double panel_mm = (L.vx1 - L.vx0) * L.pg->page_w_mm;
  for (size_t k = 0; k < R->n; k++) {
    const pb_revs_comparison *c = &R->c[R->order[k]];
    double y = revs_y(R, k), pos = (y - L.wy0) / (L.wy1 - L.wy0);
    uint32_t rgb = revs_rgb(c);
    if (revs_group_start(R, k)) {
      /* the group's heading, inside the panel at its left edge */
      revs_heading(R, c, text, sizeof text);
      revs_fit(&L, text, sizeof text, 0.96 * panel_mm, PB__PL_TXT, 1);
      /* on white, so the reference lines do not run through the words */
      double tw = (pb__plot_text_mm(&L, text, PB__PL_TXT) + 2.0) / panel_mm * (L.wx1 - L.wx0);
      double x0 = L.wx0 + 0.01 * (L.wx1 - L.wx0);
      if (x0 + tw > L.wx1) tw = L.wx1 - x0;
      pb__plot_rect(L.wx0 + 0.002 * (L.wx1 - L.wx0), x0 + tw, y + 0.55, y + 1.45, 0xFFFFFF, 0);
      pb__plot_color(0x000000);
      plschr(0, PB__PL_TXT);
      plptex(x0, y + 1.0, 1.0, 0.0, 0.0, text);
    }
    revs_label(c, text, sizeof text);
    revs_fit(&L, text, sizeof text, label_mm, ls, 0);
    pb__plot_color(0x000000);
    plschr(0, ls);
    plmtex("lv", 0.8 * PB__PL_TXT / ls, pos, 1.0, text);
    plschr(0, PB__PL_TXT);
    revs_value(c, text, sizeof text);
    pb__plot_color(c->verdict == PB_SAME ? 0x000000 : rgb);
    plmtex("rv", 0.8, pos, 0.0, text);
    double a = c->ratio.lo, b = c->ratio.hi, r = c->ratio.ratio;
    if (xlog) {
      a = pb__plot_lg(a);
      b = pb__plot_lg(b);
      r = pb__plot_lg(r);
    }
    pb__plot_color(rgb);
    plwidth(3);
    if (isfinite(a) && isfinite(b)) {
      PLFLT ex[2] = {a, b}, ey[2] = {y, y};
      plline(2, ex, ey);
      for (int j = 0; j < 2; j++) {
        PLFLT tx[2] = {j ? b : a, j ? b : a}, ty[2] = {y - 0.22, y + 0.22};
        plline(2, tx, ty);
      }
    }
    if (isfinite(r)) {
      int shape = c->verdict == PB_SAME ? 0 : revs_worse(c) ? 2 : 4;
      pb__plot_marker(&L, r, y, shape, ms, rgb, c->verdict != PB_SAME);
    }
  }
}

static void draw_revs(const void *ctx, pb__plot_page *pg) {
  const revs_ctx *R = ctx;
  /* PLplot's default character height grows with the page; a tall page of many rows keeps the
   * text size of the other plots (those are 800-1340 pixels high). */
  if (pg->chr_mm > 9.4) {
    pg->chr_mm = 9.4;
    plschr(9.4, 1.0);
  }
  pb__plot_layout L = {pg, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  double lo = 1.0 / R->factor, hi = R->factor, wl = 0, wr = 0;
  char text[400];
  for (size_t k = 0; k < R->n; k++) {
    const pb_revs_comparison *c = &R->c[R->order[k]];
    const double v[3] = {c->ratio.ratio, c->ratio.lo, c->ratio.hi};
    for (int j = 0; j < 3; j++)
      if (isfinite(v[j]) && v[j] > 0) {
        if (v[j] < lo) lo = v[j];
        if (v[j] > hi) hi = v[j];
      }
    revs_label(c, text, sizeof text);
    if (pb__plot_text_mm(&L, text, PB__PL_TXT) > wl) wl = pb__plot_text_mm(&L, text, PB__PL_TXT);
    revs_value(c, text, sizeof text);
    if (pb__plot_text_mm(&L, text, PB__PL_TXT) > wr) wr = pb__plot_text_mm(&L, text, PB__PL_TXT);
  }
  int xlog = hi / lo > 4.0;
  double xa, xb;
  if (xlog) {
    pb__plot_log_range(lo, hi, &xa, &xb);
  } else {
    double pad = 0.06 * (hi - lo);
    xa = lo - pad;
    xb = hi + pad;
    if (xa < 0) xa = 0;
  }
  L.top = 1.0 - 4.6 * pb__plot_chr_y(&L, PB__PL_BIG);
  L.bottom = 6.6 * pb__plot_chr_y(&L, PB__PL_TXT);
  char sub[512];
  snprintf(sub, sizeof sub,
           "ratio = median(branch) / median(baseline); bar: 99%% bootstrap interval; significant: "
           "beyond %.3gx either way and (Mann-Whitney p < 0.002 or disjoint 99%% CIs)%s",
           R->factor, R->n < R->n_all ? "; first rows only" : "");
  char title[400];
  snprintf(title, sizeof title, "pipebench revs: each branch against baseline '%s' (%s)",
           R->n ? R->c[R->order[0]].baseline : "?", R->source);
  pb__plot_title(&L, title, sub);
  /* label column left, value column right, the plot between */
  double lw = wl / pg->page_w_mm + 2.0 * pb__plot_chr_x(&L, PB__PL_TXT);
  double rw = wr / pg->page_w_mm + 3.0 * pb__plot_chr_x(&L, PB__PL_TXT);
  /* the plot keeps at least a third of the width; long labels get smaller type instead */
  double ls = PB__PL_TXT;
  if (lw > 0.42) {
    ls = PB__PL_TXT * (0.42 - 2.0 * pb__plot_chr_x(&L, PB__PL_TXT)) / (lw - 2.0 * pb__plot_chr_x(&L, PB__PL_TXT));
    if (ls < 0.75 * PB__PL_TXT) ls = 0.75 * PB__PL_TXT;
    lw = 0.42;
  }
  if (lw < 0.12) lw = 0.12;
  if (rw > 0.24) rw = 0.24;
  L.vx0 = lw;
  L.vx1 = 1.0 - rw;
  L.vy0 = L.bottom + 4.0 * pb__plot_chr_y(&L, PB__PL_TXT);
  L.vy1 = L.top - 1.0 * pb__plot_chr_y(&L, PB__PL_TXT);
  L.wx0 = xa;
  L.wx1 = xb;
  L.wy0 = -0.6;
  L.wy1 = (double)revs_slots(R) - 0.4;
  plvpor(L.vx0, L.vx1, L.vy0, L.vy1);
  plwind(L.wx0, L.wx1, L.wy0, L.wy1);
  /* significant rows get a light band in their colour, experiments a separating rule */
  for (size_t k = 0; k < R->n; k++) {
    const pb_revs_comparison *c = &R->c[R->order[k]];
    double y = revs_y(R, k);
    if (c->verdict != PB_SAME) {
      PLFLT bx[4] = {xa, xb, xb, xa}, by[4] = {y - 0.5, y - 0.5, y + 0.5, y + 0.5};
      pb__plot_color(pb__plot_tint(revs_rgb(c), 0.86));
      plpsty(0);
      plfill(4, bx, by);
    }
    if (k > 0 && revs_group_start(R, k)) {
      PLFLT sx[2] = {xa, xb}, sy[2] = {y + 1.5, y + 1.5};
      pb__plot_color(0x888888);
      plwidth(1.5);
      plline(2, sx, sy);
    }
  }
  plschr(0, PB__PL_TXT);
  plwidth(1);
  pb__plot_color(0xD0D0D0);
  plbox(xlog ? "gl" : "g", 0, 0, "", 0, 0);
  revs_thresholds(R, &L, xlog);
  pb__plot_color(0x000000);
  plwidth(2.5);
  plbox(xlog ? "bcnstl" : "bcnst", 0, 0, "bc", 0, 0);
  plmtex("b", 3.0, 0.5, 0.5,
         xlog ? "ratio to baseline (log scale; times and memory: below 1 is better, throughput: above 1)"
              : "ratio to baseline (times and memory: below 1 is better, throughput: above 1)");
  /* the branch labels as long as every group heading fits the panel (40 characters at most):
   * shortening them keeps them distinct, a cut in the heading's middle would not */
  double panel_mm = (L.vx1 - L.vx0) * pg->page_w_mm;
  for (size_t budget = 40;; budget -= 2) {
    revs_labels(R, budget);
    int fits = 1;
    for (size_t k = 0; k < R->n && fits; k++)
      if (revs_group_start(R, k)) {
        revs_heading(R, &R->c[R->order[k]], text, sizeof text);
        fits = pb__plot_text_mm(&L, text, PB__PL_TXT) <= 0.9 * 0.96 * panel_mm;
      }
    if (fits || budget <= 12) break;
  }
  double row_mm = (L.vy1 - L.vy0) * pg->page_h_mm / (L.wy1 - L.wy0);
  double ms = row_mm * 0.25 < 3.2 ? row_mm * 0.25 : 3.2; /* marker radius, mm */
  revs_rows(R, &L, xlog, ls, ms);
  pb__plot_legend_item it[4] = {
      {2, 0xD55E00, 2, 0, 0, "significantly worse"},
      {2, 0x0072B2, 4, 0, 0, "significantly better"},
      {2, 0x666666, 0, 0, 1, "no significant change"},
      {3, 0, 0, 0, 0, "dashed: change threshold"},
  };
  pb__plot_legend(&L, it, 4, 5.8 * pb__plot_chr_y(&L, PB__PL_TXT));
}

/* Rank of s among the first appearances of field f in c[0..n). */
static size_t revs_rank(const pb_revs_comparison *c, size_t n, size_t i, int f) {
  const char *s = f == 0 ? c[i].experiment : f == 1 ? c[i].metric : c[i].branch;
  for (size_t j = 0; j < n; j++) {
    const char *t = f == 0 ? c[j].experiment : f == 1 ? c[j].metric : c[j].branch;
    if (strcmp(s, t) == 0) return j;
  }
  return n;
}

static int mkdir_one(const char *dir, struct pb_error *err);

void pb_report_revs_plot_path(const char *revs_json, const char *baseline, char *out,
                              size_t size) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s", revs_json != NULL ? revs_json : "");
  char *slash = strrchr(dir, '/');
  if (slash == NULL) snprintf(dir, sizeof dir, ".");
  else if (slash == dir) dir[1] = '\0';
  else *slash = '\0';
  size_t u = strlen(dir);
  snprintf(dir + u, sizeof dir - u, "%simages", dir[u - 1] == '/' ? "" : "/");
  /* one file per comparison: the results file's name, and the baseline when one is named, so
   * that a second --compare into the same folder does not replace the first's plot */
  const char *b = revs_json != NULL ? strrchr(revs_json, '/') : NULL;
  b = b ? b + 1 : revs_json != NULL ? revs_json : "";
  size_t bl = strlen(b);
  if (bl > 5 && strcmp(b + bl - 5, ".json") == 0) bl -= 5;
  char stem[300];
  snprintf(stem, sizeof stem, "%.*s", (int)(bl < 200 ? bl : 200), b);
  if (baseline != NULL) {
    size_t v = strlen(stem);
    snprintf(stem + v, sizeof stem - v, "_vs_%.80s", baseline);
  }
  for (char *q = stem; *q; q++)
    if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
          *q == '-' || *q == '_' || *q == '.'))
      *q = '-';
  snprintf(out, size, "%s/pipebench_revs_%s.png", dir, stem);
}

int pb_report_plot_revs_ex(const char *revs_json, const char *png_path, const char *baseline,
                           double factor, struct pb_error *err) {
  if (revs_json == NULL) return pb_error_set(err, PB_EINVAL, "pb_report_plot_revs: NULL path");
  if (!(factor > 0)) factor = 1.1;
  if (factor < 1) factor = 1.0 / factor;
  pb_revs_comparison *c = NULL;
  size_t n = 0;
  int rc = pb_revs_compare(revs_json, baseline, factor, &c, &n, err);
  if (rc != PB_OK) return rc;
  if (n == 0) {
    free(c);
    return pb_error_set(err, PB_ENOTFOUND,
                        "%s: nothing to plot: no successful run of another branch shares an "
                        "experiment with the baseline",
                        revs_json);
  }
  char png[4300];
  if (png_path != NULL) {
    snprintf(png, sizeof png, "%s", png_path);
  } else {
    pb_report_revs_plot_path(revs_json, baseline, png, sizeof png);
    char dir[4300];
    snprintf(dir, sizeof dir, "%s", png);
    *strrchr(dir, '/') = '\0';
    if ((rc = mkdir_one(dir, err)) != PB_OK) {
      free(c);
      return rc;
    }
  }
  /* rows grouped by experiment, then branch, then metric, each in order of first appearance */
  size_t *order = malloc(n * sizeof *order), *key = malloc(3 * n * sizeof *key);
  if (order == NULL || key == NULL) {
    free(order);
    free(key);
    free(c);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    order[i] = i;
    for (int f = 0; f < 3; f++) key[3 * i + (size_t)f] = revs_rank(c, n, i, f);
  }
  for (size_t i = 1; i < n; i++) /* stable insertion sort: at most a few hundred rows */
    for (size_t j = i; j > 0; j--) {
      const size_t *ka = &key[3 * order[j - 1]], *kb = &key[3 * order[j]];
      /* experiment, then branch, then metric: each branch's rows stay under one heading */
      int gt = ka[0] != kb[0] ? ka[0] > kb[0] : ka[2] != kb[2] ? ka[2] > kb[2] : ka[1] > kb[1];
      if (!gt) break;
      size_t t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  /* Branch names of one guide often share a long part ("claude/...-014viXtwt7gNsiG4xedaMKNA"):
   * the labels drop what they share first, so that they stay distinct (revs_labels). */
  const char **names = malloc(n * sizeof *names);
  size_t *bidx = malloc(n * sizeof *bidx);
  char *short_names = malloc(n * REVS_LABEL), base_label[REVS_LABEL] = "";
  size_t nn = 0;
  if (names == NULL || bidx == NULL || short_names == NULL) {
    free(names);
    free(bidx);
    free(short_names);
    free(order);
    free(key);
    free(c);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    size_t j = 0;
    while (j < nn && strcmp(names[j], c[i].branch) != 0) j++;
    if (j == nn) names[nn++] = c[i].branch;
    bidx[i] = j;
  }
  const char *base = strrchr(revs_json, '/');
  revs_ctx R = {c, order, n < REVS_MAX_ROWS ? n : REVS_MAX_ROWS, n, factor, base ? base + 1 : revs_json,
                names, nn, bidx, short_names, base_label};
  revs_labels(&R, 40);
  /* a slot per row and per group heading: a heading never squeezes into a row's height */
  int h = 360 + 44 * (int)revs_slots(&R);
  rc = plot_png(png, 1800, h < 640 ? 640 : h, draw_revs, &R, err);
  free(names);
  free(bidx);
  free(short_names);
  free(order);
  free(key);
  free(c);
  return rc;
}

int pb_report_plot_revs(const char *revs_json, const char *png_path, struct pb_error *err) {
  return pb_report_plot_revs_ex(revs_json, png_path, NULL, 0, err);
}

/* ---- entry points ---------------------------------------------------------------------------- */

/* Draws track k's table through its view. */
static int plot_view(const pb__report_data *d, size_t k, const char *png, struct pb_error *err) {
  const pb__report_view *v = d->views[k];
  const pb_table *t = d->t[k];
  if (t == NULL || pb_table_rows(t) == 0)
    return pb_error_set(err, PB_ENOTFOUND, "%s: no rows to draw", png);
  if (pb_table_col_index(t, v->plot_needs) < 0 || pb_table_col_index(t, "format") < 0)
    return pb_error_set(err, PB_EFORMAT, "%s: the table lacks column '%s' (not a track %s table?)",
                        d->path[k], v->plot_needs, v->id);
  return v->plot(t, png, err);
}

/* Draws the merged infer table. */
static int plot_infer(const pb__report_data *d, const char *png, struct pb_error *err) {
  const pb_table *t = d->infer;
  if (t == NULL || pb_table_rows(t) == 0)
    return pb_error_set(err, PB_ENOTFOUND, "%s: no rows to draw", png);
  if (pb_table_col_index(t, "batch_size") < 0 || pb_table_col_index(t, "model") < 0)
    return pb_error_set(err, PB_EFORMAT, "%s: the table lacks column '%s' (not a track %d table?)",
                        d->infer_dir, "batch_size", 0);
  return plot_png(png, 1800, 860, draw_infer, t, err);
}

static int mkdir_one(const char *dir, struct pb_error *err) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return pb_error_set(err, -errno, "%s: cannot create folder: %s", dir, strerror(errno));
  return PB_OK;
}

int pb__report_plots(const pb__report_view *const *views, size_t n_views, const char *out_dir,
                 pb_report_note_fn note, void *note_ctx, int *n_written, struct pb_error *err) {
  return pb__report_plots_from(views, n_views, out_dir, NULL, note, note_ctx, n_written, err);
}

int pb__report_plots_from(const pb__report_view *const *views, size_t n_views, const char *out_dir,
                      const char *infer_root, pb_report_note_fn note, void *note_ctx,
                      int *n_written, struct pb_error *err) {
  if (n_written != NULL) *n_written = 0;
  struct stat st;
  if (out_dir == NULL || stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return pb_error_set(err, PB_ENOTFOUND, "%s: no such results folder", out_dir ? out_dir : "(null)");
  pb__report_data *d = malloc(sizeof *d);
  if (d == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  pb__report_load(out_dir, infer_root, views, n_views, d, note, note_ctx);
  int mixed = pb__report_check_run(d, err); /* no plot of one run beside another run's */
  if (mixed != PB_OK) {
    pb__report_free(d);
    free(d);
    return mixed;
  }
  char skipped[1024] = "";
  int written = 0, first_rc = PB_OK, any = 0;
  char first_msg[1024] = "";
  char images[4200];
  snprintf(images, sizeof images, "%s/images", out_dir);
  int rc = PB_OK;
  /* every track's table, then the infer results (k == n) */
  for (size_t k = 0; k <= d->n && rc == PB_OK; k++) {
    int track = k < d->n;
    if (track && d->t[k] == NULL) {
      if (d->status[k] != PB_ENOTFOUND) {
        any = 1;
        if (first_rc == PB_OK) {
          first_rc = d->status[k];
          snprintf(first_msg, sizeof first_msg, "%s", d->why[k]);
        }
        size_t u = strlen(skipped);
        snprintf(skipped + u, sizeof skipped - u, "%s%s", u ? "; " : "skipped: ", d->why[k]);
      }
      continue;
    }
    if (!track && d->infer == NULL) continue;
    any = 1;
    if ((rc = mkdir_one(images, err)) != PB_OK) break;
    char png[4300];
    snprintf(png, sizeof png, "%s/%s.png", images, track ? d->views[k]->table : "pipebench_infer");
    struct pb_error e = {{0}};
    int prc = track ? plot_view(d, k, png, &e) : plot_infer(d, png, &e);
    if (prc == PB_OK) {
      written++;
      if (note) note(note_ctx, 0, png, NULL);
    } else if (prc != PB_ENOTFOUND && prc != PB_EFORMAT) {
      /* Not a table this plot cannot use: no plot can be drawn at all (no driver, PLplot
       * broken), or a write failed (a full disk); either fails the whole call. */
      rc = pb_error_set(err, prc, "%s", e.message);
    } else {
      if (note) note(note_ctx, prc, png, e.message);
      if (first_rc == PB_OK) {
        first_rc = prc;
        snprintf(first_msg, sizeof first_msg, "%s", e.message);
      }
      size_t u = strlen(skipped);
      snprintf(skipped + u, sizeof skipped - u, "%s%s", u ? "; " : "skipped: ", e.message);
    }
  }
  pb__report_free(d);
  free(d);
  if (n_written != NULL) *n_written = written;
  if (rc != PB_OK) return rc;
  if (written > 0) {
    if (err != NULL) snprintf(err->message, sizeof err->message, "%s", skipped);
    return PB_OK;
  }
  if (!any) return pb_error_set(err, PB_ENOTFOUND, "%s/data: no result tables to draw", out_dir);
  return pb_error_set(err, first_rc, "%s", first_msg);
}

int pb_report_plot_infer(const char *csv_dir, const char *png_path, struct pb_error *err) {
  pb__report_data *d = calloc(1, sizeof *d);
  if (d == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int rc = pb__report_load_infer(csv_dir, &d->infer, &d->infer_files, err);
  if (rc == PB_OK) {
    snprintf(d->infer_dir, sizeof d->infer_dir, "%s", csv_dir);
    char png[4300];
    if (png_path == NULL) snprintf(png, sizeof png, "%s/pipebench_infer.png", csv_dir);
    else snprintf(png, sizeof png, "%s", png_path);
    rc = plot_infer(d, png, err);
  }
  pb__report_free(d);
  free(d);
  return rc;
}
