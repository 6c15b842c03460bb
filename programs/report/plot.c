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
#include "report/report_internal.h"
#include "table/results_internal.h"

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

typedef struct plot_page {
  int w, h;         /* pixels */
  double page_w_mm, page_h_mm;
  double chr_mm;    /* character height at scale 1 */
} plot_page;

typedef void (*plot_draw_fn)(const void *ctx, plot_page *pg);

/* Runs draw between plinit and plend with tmp as the output file; 0 or -1 (plot_msg says). */
static int run_plplot(const char *tmp, int w, int h, plot_draw_fn draw, const void *ctx) {
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
    plot_page pg = {w, h, 0, 0, 0};
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
  return pb__file_ends_with(file, iend, sizeof iend);
}

/* Draws one PNG of w x h pixels into path, atomically (a temporary sibling, renamed). */
static int plot_png(const char *path, int w, int h, plot_draw_fn draw, const void *ctx,
                    struct pb_error *err) {
  pthread_mutex_lock(&plot_lock);
  int rc = PB_OK;
  if (plot_broken) {
    rc = pb_error_set(err, PB_ESTATE, "%s: PLplot failed earlier in this process (%s); not drawing",
                      path, plot_msg);
    goto out;
  }
  char tmp[4200];
  if ((rc = pb__atomic_begin(path, tmp, sizeof tmp, err)) != PB_OK) goto out;
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
  rc = pb__atomic_finish(tmp, path, rc, err);
out:
  pthread_mutex_unlock(&plot_lock);
  return rc;
}

/* ---- drawing helpers ------------------------------------------------------------------------- */

#define SCRATCH_COL 15
#define TXT 0.68   /* text scale of labels and ticks */
#define TITLE 0.82 /* panel titles */
#define BIG 1.0   /* page title */

static void color(uint32_t rgb) {
  plscol0(SCRATCH_COL, (PLINT)(rgb >> 16 & 255), (PLINT)(rgb >> 8 & 255), (PLINT)(rgb & 255));
  plcol0(SCRATCH_COL);
}

/* rgb mixed with white: f = 0 keeps it, 1 is white. */
static uint32_t tint(uint32_t rgb, double f) {
  uint32_t out = 0;
  for (int s = 16; s >= 0; s -= 8) {
    double c = (double)(rgb >> s & 255);
    out |= (uint32_t)(c + (255.0 - c) * f + 0.5) << s;
  }
  return out;
}

/* The layout of one page: a title strip, a grid of panels, a legend strip at the bottom. */
typedef struct layout {
  plot_page *pg;
  int rows, cols;
  double top, bottom; /* normalized page y of the grid */
  /* the current panel's window and viewport, for markers and text placement */
  double wx0, wx1, wy0, wy1, vx0, vx1, vy0, vy1;
} layout;

static double chr_norm_y(const layout *L, double scale) { return L->pg->chr_mm * scale / L->pg->page_h_mm; }
static double chr_norm_x(const layout *L, double scale) { return L->pg->chr_mm * scale / L->pg->page_w_mm; }

/* Estimated width in mm of text drawn at scale (PLplot 5.15 has no public string-length call):
 * a generous average glyph width, so that what is fitted never touches its neighbour. */
static double text_mm(const layout *L, const char *s, double scale) {
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) n += (*p & 0xC0) != 0x80;
  return 0.68 * L->pg->chr_mm * scale * (double)n;
}

/* The largest scale up to want at which text fits into avail_mm (never below 60% of want). */
static double fit_scale(const layout *L, const char *s, double want, double avail_mm) {
  double w = text_mm(L, s, want);
  if (w <= avail_mm || w <= 0) return want;
  double k = avail_mm / w;
  return want * (k < 0.6 ? 0.6 : k);
}

static void page_title(const layout *L, const char *title, const char *subtitle) {
  plvpor(0, 1, 0, 1);
  plwind(0, 1, 0, 1);
  plcol0(1);
  plscol0(1, 0, 0, 0);
  plcol0(1);
  double room = L->pg->page_w_mm - 2 * L->pg->chr_mm * TXT;
  plschr(0, fit_scale(L, title, BIG, room));
  plptex(0.5, 1.0 - 1.3 * chr_norm_y(L, BIG), 1, 0, 0.5, title);
  if (subtitle != NULL && subtitle[0]) {
    plschr(0, fit_scale(L, subtitle, TXT * 0.9, room));
    color(0x444444);
    plptex(0.5, 1.0 - 1.3 * chr_norm_y(L, BIG) - 1.9 * chr_norm_y(L, TXT), 1, 0, 0.5, subtitle);
  }
}

/* Starts panel i of the grid with the given window; yopt "l" for a log axis (world y is then
 * log10 of the value). xlabels: categorical labels at x = 0..nx-1 (NULL for a numeric axis). */
static void panel(layout *L, int i, double x0, double x1, double y0, double y1, int ylog,
                  const char *title, const char *xlabel, const char *ylabel,
                  const char *const *xlabels, int nx, const uint32_t *xlabel_colors) {
  int r = i / L->cols, c = i % L->cols;
  double cw = 1.0 / L->cols, ch = (L->top - L->bottom) / L->rows;
  double ml = 7.0 * chr_norm_x(L, TXT), mr = 1.5 * chr_norm_x(L, TXT);
  double mb = (xlabel && xlabel[0] ? 4.6 : 2.8) * chr_norm_y(L, TXT);
  double mt = 3.3 * chr_norm_y(L, TITLE);
  L->vx0 = c * cw + ml;
  L->vx1 = (c + 1) * cw - mr;
  L->vy0 = L->top - (r + 1) * ch + mb;
  L->vy1 = L->top - r * ch - mt;
  plvpor(L->vx0, L->vx1, L->vy0, L->vy1);
  plwind(x0, x1, y0, y1);
  L->wx0 = x0;
  L->wx1 = x1;
  L->wy0 = y0;
  L->wy1 = y1;
  plschr(0, TXT);
  /* light grid first, axes on top */
  plwidth(1);
  color(0xD0D0D0);
  plbox(xlabels ? "" : (ylog == 2 ? "gl" : "g"), 0, 0, ylog ? "gl" : "g", 0, 0);
  color(0x000000);
  plwidth(2.5);
  const char *xo = xlabels ? "bc" : (ylog == 2 ? "bcnstl" : "bcnst");
  plbox(xo, 0, 0, ylog ? "bcnstvl" : "bcnstv", 0, 0);
  if (xlabels != NULL) {
    /* one scale for all category labels, small enough that neighbours keep a gap */
    double step_mm = (L->vx1 - L->vx0) * L->pg->page_w_mm / (x1 - x0), ls = TXT;
    for (int k = 0; k < nx; k++) {
      double s = fit_scale(L, xlabels[k], TXT, 0.8 * step_mm);
      if (s < ls) ls = s;
    }
    plschr(0, ls);
    for (int k = 0; k < nx; k++) {
      color(xlabel_colors ? xlabel_colors[k] : 0x000000);
      plmtex("b", 1.3 * TXT / ls, (k - x0) / (x1 - x0), 0.5, xlabels[k]);
    }
    plschr(0, TXT);
  }
  color(0x000000);
  if (xlabel && xlabel[0]) plmtex("b", 3.0, 0.5, 0.5, xlabel);
  if (ylabel && ylabel[0]) plmtex("l", 5.2, 0.5, 0.5, ylabel);
  /* the title is centred on the plot area; it must stay inside its own grid cell */
  double cx = 0.5 * (L->vx0 + L->vx1), room = cx - c * cw;
  if ((c + 1) * cw - cx < room) room = (c + 1) * cw - cx;
  double ts = fit_scale(L, title, TITLE, 2.0 * room * L->pg->page_w_mm - L->pg->chr_mm * TXT);
  plschr(0, ts);
  plmtex("t", 1.7 * TITLE / ts, 0.5, 0.5, title);
  plschr(0, TXT);
}

static void no_data(layout *L, int i, const char *title, const char *why) {
  panel(L, i, 0, 1, 0, 1, 0, title, "", "", NULL, 0, NULL);
  color(0x777777);
  plptex(0.5, 0.5, 1, 0, 0.5, why);
}

static void rect(double x0, double x1, double y0, double y1, uint32_t rgb, int hatch) {
  PLFLT x[5] = {x0, x1, x1, x0, x0}, y[5] = {y0, y0, y1, y1, y0};
  if (hatch) {
    color(tint(rgb, 0.75));
    plpsty(0);
    plfill(4, x, y);
    PLINT inc[2] = {450, -450}, del[2] = {1800, 1800};
    plpat(1, inc, del);
    plwidth(2);
    color(rgb);
    plfill(4, x, y);
    plpsty(0);
  } else {
    color(rgb);
    plpsty(0);
    plfill(4, x, y);
  }
  plwidth(1.5);
  color(hatch ? rgb : 0x303030);
  plline(5, x, y);
}

/* A marker of radius r_mm at world (x, y): 0 circle, 1 square, 2 triangle, 3 diamond, 4
 * inverted triangle, 5 pentagon; filled, or an outline with a white inside. */
static void marker(const layout *L, double x, double y, int shape, double r_mm, uint32_t rgb, int filled) {
  double sx = (L->wx1 - L->wx0) / ((L->vx1 - L->vx0) * L->pg->page_w_mm);
  double sy = (L->wy1 - L->wy0) / ((L->vy1 - L->vy0) * L->pg->page_h_mm);
  static const int sides[] = {16, 4, 3, 4, 3, 5};
  static const double rot[] = {0, 45, 90, 0, -90, 90};
  int n = sides[shape % 6];
  PLFLT px[17], py[17];
  for (int k = 0; k <= n; k++) {
    double a = (rot[shape % 6] + 360.0 * k / n) * M_PI / 180.0;
    px[k] = x + r_mm * cos(a) * sx;
    py[k] = y + r_mm * sin(a) * sy;
  }
  color(filled ? rgb : 0xFFFFFF);
  plpsty(0);
  plfill(n, px, py);
  plwidth(2.5);
  color(rgb);
  plline(n + 1, px, py);
}

/* The legend strip: entries side by side, wrapped onto more lines when needed. kind: 0 filled
 * box, 1 hatched box, 2 line with a marker (style: solid/dashed), 3 text only. */
typedef struct legend_item {
  int kind;
  uint32_t rgb;
  int shape, dashed, hollow;
  const char *text;
} legend_item;

static void legend(const layout *L, const legend_item *it, int n, double y_top) {
  plvpor(0, 1, 0, 1);
  plwind(0, L->pg->page_w_mm, 0, L->pg->page_h_mm);
  plschr(0, TXT);
  double ch = L->pg->chr_mm * TXT, x = 2 * ch, y = y_top * L->pg->page_h_mm - ch;
  layout M = *L;
  M.vx0 = M.vy0 = 0;
  M.vx1 = M.vy1 = 1;
  M.wx0 = M.wy0 = 0;
  M.wx1 = L->pg->page_w_mm;
  M.wy1 = L->pg->page_h_mm;
  for (int i = 0; i < n; i++) {
    double sw = it[i].kind == 3 ? 0 : (it[i].kind == 2 ? 4.5 * ch : 1.6 * ch);
    double tw = text_mm(L, it[i].text, TXT);
    if (x + sw + tw > L->pg->page_w_mm - ch && x > 2 * ch) {
      x = 2 * ch;
      y -= 2.0 * ch;
    }
    if (it[i].kind == 0 || it[i].kind == 1) {
      rect(x, x + 1.3 * ch, y - 0.55 * ch, y + 0.55 * ch, it[i].rgb, it[i].kind == 1);
    } else if (it[i].kind == 2) {
      PLFLT lx[2] = {x, x + 4 * ch}, ly[2] = {y, y};
      color(it[i].rgb);
      plwidth(4);
      if (it[i].dashed) {
        PLINT mark = 3000, space = 2000;
        plstyl(1, &mark, &space);
      }
      plline(2, lx, ly);
      plstyl(0, NULL, NULL);
      if (it[i].shape >= 0) marker(&M, x + 2 * ch, y, it[i].shape, 0.45 * ch, it[i].rgb, !it[i].hollow);
    }
    color(0x000000);
    plptex(x + sw + 0.4 * ch, y, 1, 0, 0, it[i].text);
    x += sw + tw + 2.0 * ch;
  }
}

/* A decade-aligned log range for values in [lo, hi] (positive), as log10 values. */
static void log_range(double lo, double hi, double *a, double *b) {
  if (!(lo > 0) || !isfinite(lo)) lo = 1e-9;
  if (!(hi > 0) || !isfinite(hi)) hi = lo * 10;
  *a = floor(log10(lo));
  *b = ceil(log10(hi) + 1e-9);
  if (*b - *a < 1) *b = *a + 1;
}

static double lg(double v) { return v > 0 ? log10(v) : NAN; }

/* Time unit for seconds up to max_s: scale factor and name. */
static double time_unit(double max_s, const char **name) {
  if (max_s < 1e-3) {
    *name = "µs";
    return 1e6;
  }
  if (max_s < 1.0) {
    *name = "ms";
    return 1e3;
  }
  *name = "s";
  return 1.0;
}

static void format_legend(const layout *L, const char *const *formats, int nf, const legend_item *extra,
                          int ne, double y_top) {
  legend_item it[PB__RP_MAX_DISTINCT + 12];
  int n = 0;
  for (int i = 0; i < nf && n < PB__RP_MAX_DISTINCT; i++)
    it[n++] = (legend_item){0, pb__rp_format_color(formats[i]), 0, 0, 0, formats[i]};
  for (int i = 0; i < ne && n < PB__RP_MAX_DISTINCT + 12; i++) it[n++] = extra[i];
  legend(L, it, n, y_top);
}

static const char *meta_or(const pb_table *t, const char *key, const char *dflt) {
  const char *v = t ? pb_table_get_meta(t, key) : NULL;
  return v ? v : dflt;
}

/* ---- track 1 --------------------------------------------------------------------------------- */

static void draw_track1(const void *ctx, plot_page *pg) {
  const pb_table *t = ctx;
  const char *formats[PB__RP_MAX_DISTINCT], *trs[8], *caches[4];
  int nf = pb__rp_distinct_str(t, "format", NULL, 0, formats, PB__RP_MAX_DISTINCT);
  int ntr = pb__rp_distinct_str(t, "transform", NULL, 0, trs, 8);
  int nc = pb__rp_distinct_str(t, "cache", NULL, 0, caches, 4);
  static const char *const pats[] = {"random", "sequential"};
  double max_s = 0, lo = INFINITY, hi = 0, slo = INFINITY, shi = 0;
  for (size_t r = 0; r < pb_table_rows(t); r++) {
    double p50 = pb__rp_f64(t, r, "p50"), p99 = pb__rp_f64(t, r, "p99"), sps = pb__rp_f64(t, r, "samples_per_sec");
    if (p50 > max_s) max_s = p50;
    if (p50 > 0 && p50 < lo) lo = p50;
    if (p99 > hi) hi = p99;
    if (sps > 0 && sps < slo) slo = sps;
    if (sps > shi) shi = sps;
  }
  const char *unit;
  double us = time_unit(max_s, &unit);
  double ya, yb, sa, sb;
  log_range(lo * us, hi * us, &ya, &yb);
  log_range(slo, shi, &sa, &sb);
  layout L = {pg, nc > 0 ? nc : 1, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  L.top = 1.0 - 4.2 * chr_norm_y(&L, BIG);
  L.bottom = 4.0 * chr_norm_y(&L, TXT);
  char sub[256];
  double ns = pb__rp_median(t, "num_samples", NULL, 0, NULL);
  snprintf(sub, sizeof sub,
           "one sample at a time, no workers; page cache %s; %.0f samples per round; bars: median over rounds",
           meta_or(t, "pipebench.cache_state", "?"), ns);
  page_title(&L, "Track 1: per-sample latency by format, access pattern and cache", sub);
  for (int c = 0; c < nc; c++) {
    for (int a = 0; a < 2; a++) {
      char title[128], ylab[64];
      snprintf(title, sizeof title, "%s, cache %s", pats[a], caches[c]);
      snprintf(ylab, sizeof ylab, "latency per sample (%s)", unit);
      double gw = 0.8, bw = gw / (nf > 0 ? nf : 1);
      panel(&L, c * 3 + a, -0.5, ntr - 0.5, ya, yb, 1, title, "transform", ylab, trs, ntr, NULL);
      for (int k = 0; k < ntr; k++)
        for (int f = 0; f < nf; f++) {
          pb__rp_filter fl[4] = {{"format", formats[f], 0}, {"cache", caches[c], 0},
                                 {"access_pattern", pats[a], 0}, {"transform", trs[k], 0}};
          double p50 = pb__rp_median(t, "p50", fl, 4, NULL) * us;
          double p95 = pb__rp_median(t, "p95", fl, 4, NULL) * us;
          double p99 = pb__rp_median(t, "p99", fl, 4, NULL) * us;
          if (!(p50 > 0)) continue;
          double x0 = k - gw / 2 + f * bw, xm = x0 + bw / 2;
          rect(x0 + 0.08 * bw, x0 + 0.92 * bw, ya, lg(p50), pb__rp_format_color(formats[f]), 0);
          if (p99 > 0) {
            color(0x000000);
            plwidth(2.5);
            PLFLT wx[2] = {xm, xm}, wy[2] = {lg(p50), lg(p99)};
            plline(2, wx, wy);
            PLFLT tx[2] = {xm - 0.3 * bw, xm + 0.3 * bw}, ty[2] = {lg(p99), lg(p99)};
            plline(2, tx, ty);
            if (p95 > 0) {
              PLFLT ux[2] = {xm - 0.18 * bw, xm + 0.18 * bw}, uy[2] = {lg(p95), lg(p95)};
              plline(2, ux, uy);
            }
          }
        }
    }
    /* throughput per format and access pattern, first transform (none when measured) */
    const char *tr0 = ntr > 0 ? trs[0] : "none";
    for (int k = 0; k < ntr; k++)
      if (strcmp(trs[k], "none") == 0) tr0 = trs[k];
    char title[128];
    snprintf(title, sizeof title, "samples/s, cache %s", caches[c]);
    panel(&L, c * 3 + 2, -0.5, 1.5, sa, sb, 1, title, "access pattern", "samples/s", pats, 2, NULL);
    double gw = 0.8, bw = gw / (nf > 0 ? nf : 1);
    for (int a = 0; a < 2; a++)
      for (int f = 0; f < nf; f++) {
        pb__rp_filter fl[4] = {{"format", formats[f], 0}, {"cache", caches[c], 0},
                               {"access_pattern", pats[a], 0}, {"transform", tr0, 0}};
        double v = pb__rp_median(t, "samples_per_sec", fl, 4, NULL);
        if (!(v > 0)) continue;
        double x0 = a - gw / 2 + f * bw;
        rect(x0 + 0.08 * bw, x0 + 0.92 * bw, sa, lg(v), pb__rp_format_color(formats[f]), 0);
      }
  }
  legend_item ex[1] = {{3, 0, 0, 0, 0, "|  bar: p50;  whisker: short tick p95, top p99"}};
  format_legend(&L, formats, nf, ex, 1, 3.2 * chr_norm_y(&L, TXT));
}

/* ---- track 2 --------------------------------------------------------------------------------- */

static const char *const peer_loader = "torch-dataloader";

static void draw_track2(const void *ctx, plot_page *pg) {
  const pb_table *t = ctx;
  const char *formats[PB__RP_MAX_DISTINCT], *caches[4];
  pb__rp_filter own = {"loader", "pipebench", 0};
  int nf = pb__rp_distinct_str(t, "format", &own, 1, formats, PB__RP_MAX_DISTINCT);
  int nc = pb__rp_distinct_str(t, "cache", &own, 1, caches, 4);
  int64_t bss[32], ws[32];
  int nb = pb__rp_distinct_i64(t, "batch_size", NULL, 0, bss, 32);
  int nw = pb__rp_distinct_i64(t, "num_workers", NULL, 0, ws, 32);
  int have_peer = pb__rp_distinct_str(t, "loader", &(pb__rp_filter){"loader", peer_loader, 0}, 1,
                                      (const char *[1]){0}, 1) > 0;
  double lo = INFINITY, hi = 0, flo = INFINITY, fhi = 0;
  for (size_t r = 0; r < pb_table_rows(t); r++) {
    double v = pb__rp_f64(t, r, "samples_per_sec"), fb = pb__rp_f64(t, r, "first_batch_time");
    if (v > 0 && v < lo) lo = v;
    if (v > hi) hi = v;
    if (fb > 0 && fb < flo) flo = fb;
    if (fb > fhi) fhi = fb;
  }
  double ya, yb;
  log_range(lo, hi, &ya, &yb);
  int npanels = nf + 2, cols = npanels < 3 ? npanels : 3;
  layout L = {pg, (npanels + cols - 1) / cols, cols, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  L.top = 1.0 - 4.2 * chr_norm_y(&L, BIG);
  L.bottom = 6.2 * chr_norm_y(&L, TXT);
  char sub[256];
  snprintf(sub, sizeof sub, "steady state from the second batch; transform normalize; page cache %s; first batch: cache none; "
           "medians over rounds",
           meta_or(t, "pipebench.cache_state", "?"));
  page_title(&L, "Track 2: loader throughput by batch size and worker threads", sub);
  char bl[32][16];
  const char *blp[32];
  for (int b = 0; b < nb; b++) {
    snprintf(bl[b], sizeof bl[b], "%lld", (long long)bss[b]);
    blp[b] = bl[b];
  }
  for (int f = 0; f < nf; f++) {
    char title[128];
    snprintf(title, sizeof title, "%s, cache none", formats[f]);
    uint32_t col = pb__rp_format_color(formats[f]);
    panel(&L, f, -0.3, nb - 0.7, ya, yb, 1, title, "batch size", "samples/s", blp, nb, NULL);
    for (int pass = 0; pass < 2; pass++) {
      const char *loader = pass ? peer_loader : "pipebench";
      for (int w = 0; w < nw; w++) {
        PLFLT x[32], y[32];
        int n = 0;
        for (int b = 0; b < nb; b++) {
          pb__rp_filter fl[5] = {{"format", formats[f], 0}, {"loader", loader, 0}, {"cache", "none", 0},
                                 {"batch_size", NULL, bss[b]}, {"num_workers", NULL, ws[w]}};
          double v = pb__rp_median(t, "samples_per_sec", fl, 5, NULL);
          if (v > 0) {
            x[n] = b;
            y[n++] = lg(v);
          }
        }
        if (n == 0) continue;
        uint32_t c = tint(col, 0.45 * w / (nw > 1 ? nw - 1 : 1));
        color(c);
        plwidth(4);
        if (pass) {
          PLINT mark = 3000, space = 2000;
          plstyl(1, &mark, &space);
        }
        plline(n, x, y);
        plstyl(0, NULL, NULL);
        for (int k = 0; k < n; k++) marker(&L, x[k], y[k], w, 2.2, c, !pass);
      }
    }
  }
  /* first batch (start-up) at the reference batch size */
  int ref = 0;
  for (int b = 0; b < nb; b++)
    if (llabs(bss[b] - 16) < llabs(bss[ref] - 16)) ref = b;
  const char *unit;
  double us = time_unit(pb__rp_median(t, "first_batch_time", NULL, 0, NULL), &unit);
  double fa, fb;
  log_range(flo * us, fhi * us, &fa, &fb);
  char wl[32][16];
  const char *wlp[32];
  for (int w = 0; w < nw; w++) {
    snprintf(wl[w], sizeof wl[w], "%lld", (long long)ws[w]);
    wlp[w] = wl[w];
  }
  char title[128], ylab[64];
  snprintf(title, sizeof title, "first batch time, batch %lld", nb ? (long long)bss[ref] : 0LL);
  snprintf(ylab, sizeof ylab, "first batch time (%s)", unit);
  if (nb > 0 && fhi > 0) {
    panel(&L, nf, -0.5, nw - 0.5, fa, fb, 1, title, "worker threads", ylab, wlp, nw, NULL);
    int nbar = nf * (have_peer ? 2 : 1);
    double gw = 0.84, bw = gw / (nbar > 0 ? nbar : 1);
    for (int w = 0; w < nw; w++) {
      int slot = 0;
      for (int f = 0; f < nf; f++)
        for (int pass = 0; pass < (have_peer ? 2 : 1); pass++, slot++) {
          pb__rp_filter fl[5] = {{"format", formats[f], 0}, {"loader", pass ? peer_loader : "pipebench", 0},
                                 {"cache", "none", 0}, {"batch_size", NULL, bss[ref]}, {"num_workers", NULL, ws[w]}};
          double v = pb__rp_median(t, "first_batch_time", fl, 5, NULL) * us;
          if (!(v > 0)) continue;
          double x0 = w - gw / 2 + slot * bw;
          rect(x0 + 0.06 * bw, x0 + 0.94 * bw, fa, lg(v), pb__rp_format_color(formats[f]), pass);
        }
    }
  } else {
    no_data(&L, nf, title, "no first-batch times");
  }
  /* cache modes at the configuration every format has */
  int refw = 0;
  for (int w = 0; w < nw; w++)
    if (llabs(ws[w] - 2) < llabs(ws[refw] - 2)) refw = w;
  snprintf(title, sizeof title, "cache modes, batch %lld, %lld worker%s", nb ? (long long)bss[ref] : 0LL,
           nw ? (long long)ws[refw] : 0LL, nw && ws[refw] == 1 ? "" : "s");
  if (nc > 0 && nb > 0 && nw > 0) {
    panel(&L, nf + 1, -0.5, nc - 0.5, ya, yb, 1, title, "cache mode", "samples/s", caches, nc, NULL);
    double gw = 0.8, bw = gw / (nf > 0 ? nf : 1);
    for (int c = 0; c < nc; c++)
      for (int f = 0; f < nf; f++) {
        pb__rp_filter fl[5] = {{"format", formats[f], 0}, {"loader", "pipebench", 0}, {"cache", caches[c], 0},
                               {"batch_size", NULL, bss[ref]}, {"num_workers", NULL, ws[refw]}};
        double v = pb__rp_median(t, "samples_per_sec", fl, 5, NULL);
        if (!(v > 0)) continue;
        double x0 = c - gw / 2 + f * bw;
        rect(x0 + 0.08 * bw, x0 + 0.92 * bw, ya, lg(v), pb__rp_format_color(formats[f]), 0);
      }
  }
  legend_item ex[20];
  int ne = 0;
  char wtext[16][32];
  for (int w = 0; w < nw && w < 12; w++) {
    snprintf(wtext[w], sizeof wtext[w], "%lld worker%s", (long long)ws[w], ws[w] == 1 ? "" : "s");
    ex[ne++] = (legend_item){2, tint(0x000000, 0.45 * w / (nw > 1 ? nw - 1 : 1)), w, 0, 0, wtext[w]};
  }
  ex[ne++] = (legend_item){2, 0x000000, -1, 0, 0, "pipebench"};
  if (have_peer) {
    ex[ne++] = (legend_item){2, 0x000000, 0, 1, 1, "torch DataLoader (line, hollow marker)"};
    ex[ne++] = (legend_item){1, 0x555555, 0, 0, 0, "torch DataLoader (bar)"};
  }
  format_legend(&L, formats, nf, ex, ne, 5.4 * chr_norm_y(&L, TXT));
}

/* ---- track 3 --------------------------------------------------------------------------------- */

static void draw_track3(const void *ctx, plot_page *pg) {
  const pb_table *t = ctx;
  const char *formats[PB__RP_MAX_DISTINCT], *caches[4];
  int nf = pb__rp_distinct_str(t, "format", NULL, 0, formats, PB__RP_MAX_DISTINCT);
  int nc = pb__rp_distinct_str(t, "cache", NULL, 0, caches, 4);
  double hi = 0, whi = 0;
  for (size_t r = 0; r < pb_table_rows(t); r++) {
    double v = pb__rp_f64(t, r, "step_time_mean"), w = pb__rp_f64(t, r, "data_wait_fraction");
    if (v > hi) hi = v;
    if (w > whi) whi = w;
  }
  const char *unit;
  double us = time_unit(hi, &unit);
  layout L = {pg, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  L.top = 1.0 - 4.2 * chr_norm_y(&L, BIG);
  L.bottom = 4.0 * chr_norm_y(&L, TXT);
  char sub[256];
  const char *model = pb__rp_str(t, 0, "model"), *mode = pb__rp_str(t, 0, "mode");
  snprintf(sub, sizeof sub, "model %s (%s), batch %.0f, %.0f workers, first step excluded; medians over rounds",
           model ? model : "?", mode ? mode : "?", pb__rp_f64(t, 0, "batch_size"), pb__rp_f64(t, 0, "num_workers"));
  page_title(&L, "Track 3: model loop - step time and time spent waiting for data", sub);
  char ylab[64];
  snprintf(ylab, sizeof ylab, "mean step time (%s)", unit);
  double gw = 0.8, bw = gw / (nf > 0 ? nf : 1);
  panel(&L, 0, -0.5, nc - 0.5, 0, hi * us * 1.15, 0, "step time: compute (solid) + data wait (hatched)",
        "cache mode", ylab, caches, nc, NULL);
  for (int c = 0; c < nc; c++)
    for (int f = 0; f < nf; f++) {
      pb__rp_filter fl[2] = {{"format", formats[f], 0}, {"cache", caches[c], 0}};
      double step = pb__rp_median(t, "step_time_mean", fl, 2, NULL) * us;
      double wait = pb__rp_median(t, "data_wait_mean", fl, 2, NULL) * us;
      if (!(step > 0)) continue;
      if (!(wait >= 0)) wait = 0;
      double x0 = c - gw / 2 + f * bw;
      uint32_t col = pb__rp_format_color(formats[f]);
      rect(x0 + 0.08 * bw, x0 + 0.92 * bw, 0, step - wait, col, 0);
      if (wait > 0) rect(x0 + 0.08 * bw, x0 + 0.92 * bw, step - wait, step, col, 1);
    }
  double ymax = whi * 100 * 1.25;
  if (ymax < 15) ymax = 15;
  panel(&L, 1, -0.5, nc - 0.5, 0, ymax, 0, "data-wait fraction (1 - accelerator utilisation)", "cache mode",
        "data wait (% of step time)", caches, nc, NULL);
  color(0xB00000);
  plwidth(3);
  PLINT mark = 2500, space = 1500;
  plstyl(1, &mark, &space);
  PLFLT lx[2] = {-0.5, nc - 0.5}, ly[2] = {10, 10};
  plline(2, lx, ly);
  plstyl(0, NULL, NULL);
  plptex(nc - 0.55, 10 + ymax * 0.03, 1, 0, 1, "data-bound above 10% (AU < 90%)");
  for (int c = 0; c < nc; c++)
    for (int f = 0; f < nf; f++) {
      pb__rp_filter fl[2] = {{"format", formats[f], 0}, {"cache", caches[c], 0}};
      double v = pb__rp_median(t, "data_wait_fraction", fl, 2, NULL) * 100;
      if (!isfinite(v)) continue;
      if (v < 0) v = 0;
      double x0 = c - gw / 2 + f * bw;
      rect(x0 + 0.08 * bw, x0 + 0.92 * bw, 0, v, pb__rp_format_color(formats[f]), 0);
    }
  format_legend(&L, formats, nf, NULL, 0, 3.2 * chr_norm_y(&L, TXT));
}

/* ---- track 4 --------------------------------------------------------------------------------- */

static void draw_track4(const void *ctx, plot_page *pg) {
  const pb_table *t = ctx;
  const char *formats[PB__RP_MAX_DISTINCT];
  int nf = pb__rp_distinct_str(t, "format", NULL, 0, formats, PB__RP_MAX_DISTINCT);
  static const char *const stage_col[] = {"read_p50", "decompress_p50", "decode_p50", "convert_p50",
                                          "transform_p50", "other_p50", "dlpack_p50"};
  static const char *const stage_name[] = {"read", "decompress", "decode", "convert", "transform",
                                           "other loader work", "DLPack hand-off to torch"};
  /* a sequential ramp in pipeline order, apart from the format colours */
  static const uint32_t stage_rgb[] = {0x440154, 0x3B528B, 0x21918C, 0x5EC962, 0xFDE725, 0xBBBBBB, 0xE7298A};
  double tot[PB__RP_MAX_DISTINCT], hi = 0, ohi = 0;
  for (int f = 0; f < nf; f++) {
    pb__rp_filter fl = {"format", formats[f], 0};
    tot[f] = 0;
    for (int s = 0; s < 7; s++) {
      double v = pb__rp_median(t, stage_col[s], &fl, 1, NULL);
      if (v > 0) tot[f] += v;
    }
    if (tot[f] > hi) hi = tot[f];
    double a = pb__rp_median(t, "dlpack_overhead_pct", &fl, 1, NULL), b = pb__rp_median(t, "conversion_overhead_pct", &fl, 1, NULL);
    if (a > ohi) ohi = a;
    if (b > ohi) ohi = b;
  }
  const char *unit;
  double us = time_unit(hi, &unit);
  layout L = {pg, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  L.top = 1.0 - 4.2 * chr_norm_y(&L, BIG);
  L.bottom = 6.2 * chr_norm_y(&L, TXT);
  page_title(&L, "Track 4: where one sample's time goes, and the hand-off to torch",
             "medians per stage over samples and rounds; transform normalize; torch peer: numpy array -> torch.from_numpy");
  uint32_t fcol[PB__RP_MAX_DISTINCT] = {0};
  for (int f = 0; f < nf; f++) fcol[f] = pb__rp_format_color(formats[f]);
  char ylab[64];
  snprintf(ylab, sizeof ylab, "time per sample, p50 (%s)", unit);
  panel(&L, 0, -0.5, nf - 0.5, 0, hi * us * 1.12, 0, "stage breakdown per format", "format", ylab, formats, nf, fcol);
  for (int f = 0; f < nf; f++) {
    pb__rp_filter fl = {"format", formats[f], 0};
    double y = 0;
    for (int s = 0; s < 7; s++) {
      double v = pb__rp_median(t, stage_col[s], &fl, 1, NULL) * us;
      if (!(v > 0)) continue;
      rect(f - 0.32, f + 0.32, y, y + v, stage_rgb[s], 0);
      y += v;
    }
  }
  double ymax = ohi * 1.3;
  if (ymax < 10) ymax = 10;
  panel(&L, 1, -0.5, nf - 0.5, 0, ymax, 0, "hand-off overhead; label: speed over peer", "format",
        "share of path to torch (%)", formats, nf, fcol);
  for (int f = 0; f < nf; f++) {
    pb__rp_filter fl = {"format", formats[f], 0};
    double a = pb__rp_median(t, "dlpack_overhead_pct", &fl, 1, NULL);
    double b = pb__rp_median(t, "conversion_overhead_pct", &fl, 1, NULL);
    double ratio = pb__rp_median(t, "pipebench_over_peer", &fl, 1, NULL);
    if (a >= 0) rect(f - 0.34, f - 0.02, 0, a, fcol[f], 0);
    if (b >= 0) rect(f + 0.02, f + 0.34, 0, b, fcol[f], 1);
    if (isfinite(ratio)) {
      char lab[32];
      snprintf(lab, sizeof lab, "%.2fx", ratio);
      double top = (a > b ? a : b);
      if (!isfinite(top)) top = 0;
      color(0x000000);
      plptex(f, top + ymax * 0.04, 1, 0, 0.5, lab);
    }
  }
  legend_item it[10];
  int n = 0;
  for (int s = 0; s < 7; s++) it[n++] = (legend_item){0, stage_rgb[s], 0, 0, 0, stage_name[s]};
  it[n++] = (legend_item){0, 0x777777, 0, 0, 0, "DLPack share of pipebench->torch"};
  it[n++] = (legend_item){1, 0x777777, 0, 0, 0, "numpy->torch share of peer path"};
  legend(&L, it, n, 5.4 * chr_norm_y(&L, TXT));
}

/* ---- infer ----------------------------------------------------------------------------------- */

static void draw_infer(const void *ctx, plot_page *pg) {
  const pb_table *t = ctx;
  const char *models[16], *fws[8];
  int nm = pb__rp_distinct_str(t, "model", NULL, 0, models, 16);
  int nfw = pb__rp_distinct_str(t, "framework", NULL, 0, fws, 8);
  int64_t bss[64];
  int nb = pb__rp_distinct_i64(t, "batch_size", NULL, 0, bss, 64);
  static const uint32_t model_rgb[] = {0x222222, 0x6A3D9A, 0xB15928, 0x1B9E77, 0x999933, 0x882255, 0x0072B2};
  double llo = INFINITY, lhi = 0, tlo = INFINITY, thi = 0;
  for (size_t r = 0; r < pb_table_rows(t); r++) {
    double l = pb__rp_f64(t, r, "latency_p50_ms"), v = pb__rp_f64(t, r, "throughput_ips");
    if (l > 0 && l < llo) llo = l;
    if (l > lhi) lhi = l;
    if (v > 0 && v < tlo) tlo = v;
    if (v > thi) thi = v;
  }
  double la, lb, ta, tb;
  log_range(llo, lhi, &la, &lb);
  log_range(tlo, thi, &ta, &tb);
  layout L = {pg, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  L.top = 1.0 - 4.2 * chr_norm_y(&L, BIG);
  L.bottom = 6.2 * chr_norm_y(&L, TXT);
  const char *dev = pb__rp_str(t, 0, "device");
  char sub[256];
  snprintf(sub, sizeof sub, "pipebench infer; device %s; latency: p50 of timed passes", dev ? dev : "?");
  page_title(&L, "Inference: latency and throughput by batch size", sub);
  char bl[64][16];
  const char *blp[64];
  for (int b = 0; b < nb; b++) {
    snprintf(bl[b], sizeof bl[b], "%lld", (long long)bss[b]);
    blp[b] = bl[b];
  }
  for (int p = 0; p < 2; p++) {
    const char *col = p ? "throughput_ips" : "latency_p50_ms";
    panel(&L, p, -0.3, nb - 0.7, p ? ta : la, p ? tb : lb, 1, p ? "throughput" : "latency (p50)", "batch size",
          p ? "images/s" : "latency per batch (ms)", blp, nb, NULL);
    for (int m = 0; m < nm; m++)
      for (int fw = 0; fw < nfw; fw++) {
        PLFLT x[64], y[64];
        int n = 0;
        for (int b = 0; b < nb; b++) {
          pb__rp_filter fl[3] = {{"model", models[m], 0}, {"framework", fws[fw], 0}, {"batch_size", NULL, bss[b]}};
          double v = pb__rp_median(t, col, fl, 3, NULL);
          if (v > 0) {
            x[n] = b;
            y[n++] = lg(v);
          }
        }
        if (n == 0) continue;
        uint32_t c = model_rgb[m % 7];
        color(c);
        plwidth(4);
        if (fw > 0) {
          PLINT mark = 3000, space = 2000;
          plstyl(1, &mark, &space);
        }
        plline(n, x, y);
        plstyl(0, NULL, NULL);
        for (int k = 0; k < n; k++) marker(&L, x[k], y[k], fw, 2.2, c, fw == 0);
      }
  }
  legend_item it[32];
  char text[32][64];
  int n = 0;
  for (int m = 0; m < nm && n < 32; m++)
    for (int fw = 0; fw < nfw && n < 32; fw++) {
      snprintf(text[n], sizeof text[n], "%s, %s", models[m], fws[fw]);
      it[n] = (legend_item){2, model_rgb[m % 7], fw, fw > 0, fw > 0, text[n]};
      n++;
    }
  legend(&L, it, n, 5.4 * chr_norm_y(&L, TXT));
}

/* ---- revs: each branch against the baseline -------------------------------------------------- */

#define REVS_MAX_ROWS 150 /* more rows would not be readable on one page */

typedef struct revs_ctx {
  const pb_revs_comparison *c;
  const size_t *order; /* rows top to bottom */
  size_t n, n_all;
  double factor;
  const char *source;
} revs_ctx;

/* Significantly worse: a longer time, a lower throughput, more memory. */
static int revs_worse(const pb_revs_comparison *c) {
  return c->higher_is_better ? c->verdict == PB_FASTER : c->verdict == PB_SLOWER;
}

static uint32_t revs_rgb(const pb_revs_comparison *c) {
  if (c->verdict == PB_SAME) return 0x666666;
  return revs_worse(c) ? 0xD55E00 : 0x0072B2; /* Okabe-Ito vermillion / blue */
}

static void revs_label(const pb_revs_comparison *c, char *out, size_t size) {
  snprintf(out, size, "%s: %s, %s", c->experiment, c->metric, c->branch);
}

/* The value column: ratio, its interval, the verdict. */
static void revs_value(const pb_revs_comparison *c, char *out, size_t size) {
  snprintf(out, size, "%.3g [%.3g, %.3g] %s", c->ratio.ratio, c->ratio.lo, c->ratio.hi,
           c->verdict == PB_SAME ? "no change" : c->verdict_text);
}

static void draw_revs(const void *ctx, plot_page *pg) {
  const revs_ctx *R = ctx;
  /* PLplot's default character height grows with the page; a tall page of many rows keeps the
   * text size of the other plots (those are 800-1340 pixels high). */
  if (pg->chr_mm > 9.4) {
    pg->chr_mm = 9.4;
    plschr(9.4, 1.0);
  }
  layout L = {pg, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
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
    if (text_mm(&L, text, TXT) > wl) wl = text_mm(&L, text, TXT);
    revs_value(c, text, sizeof text);
    if (text_mm(&L, text, TXT) > wr) wr = text_mm(&L, text, TXT);
  }
  int xlog = hi / lo > 4.0;
  double xa, xb;
  if (xlog) {
    log_range(lo, hi, &xa, &xb);
  } else {
    double pad = 0.06 * (hi - lo);
    xa = lo - pad;
    xb = hi + pad;
    if (xa < 0) xa = 0;
  }
  L.top = 1.0 - 4.6 * chr_norm_y(&L, BIG);
  L.bottom = 6.6 * chr_norm_y(&L, TXT);
  char sub[512];
  snprintf(sub, sizeof sub,
           "ratio = median(branch) / median(baseline); bar: 99%% bootstrap interval; significant: "
           "beyond %.3gx either way and (Mann-Whitney p < 0.002 or disjoint 99%% CIs)%s",
           R->factor, R->n < R->n_all ? "; first rows only" : "");
  char title[400];
  snprintf(title, sizeof title, "pipebench revs: each branch against baseline '%s' (%s)",
           R->n ? R->c[R->order[0]].baseline : "?", R->source);
  page_title(&L, title, sub);
  /* label column left, value column right, the plot between */
  double lw = wl / pg->page_w_mm + 2.0 * chr_norm_x(&L, TXT);
  double rw = wr / pg->page_w_mm + 3.0 * chr_norm_x(&L, TXT);
  /* the plot keeps at least a third of the width; long labels get smaller type instead */
  double ls = TXT;
  if (lw > 0.42) {
    ls = TXT * (0.42 - 2.0 * chr_norm_x(&L, TXT)) / (lw - 2.0 * chr_norm_x(&L, TXT));
    if (ls < 0.75 * TXT) ls = 0.75 * TXT;
    lw = 0.42;
  }
  if (lw < 0.12) lw = 0.12;
  if (rw > 0.24) rw = 0.24;
  L.vx0 = lw;
  L.vx1 = 1.0 - rw;
  L.vy0 = L.bottom + 4.0 * chr_norm_y(&L, TXT);
  L.vy1 = L.top - 1.0 * chr_norm_y(&L, TXT);
  L.wx0 = xa;
  L.wx1 = xb;
  L.wy0 = -0.6;
  L.wy1 = (double)R->n - 0.4;
  plvpor(L.vx0, L.vx1, L.vy0, L.vy1);
  plwind(L.wx0, L.wx1, L.wy0, L.wy1);
  /* significant rows get a light band in their colour, experiments a separating rule */
  for (size_t k = 0; k < R->n; k++) {
    const pb_revs_comparison *c = &R->c[R->order[k]];
    double y = (double)(R->n - 1 - k);
    if (c->verdict != PB_SAME) {
      PLFLT bx[4] = {xa, xb, xb, xa}, by[4] = {y - 0.5, y - 0.5, y + 0.5, y + 0.5};
      color(tint(revs_rgb(c), 0.86));
      plpsty(0);
      plfill(4, bx, by);
    }
    if (k > 0 && strcmp(c->experiment, R->c[R->order[k - 1]].experiment) != 0) {
      PLFLT sx[2] = {xa, xb}, sy[2] = {y + 0.5, y + 0.5};
      color(0x888888);
      plwidth(1.5);
      plline(2, sx, sy);
    }
  }
  plschr(0, TXT);
  plwidth(1);
  color(0xD0D0D0);
  plbox(xlog ? "gl" : "g", 0, 0, "", 0, 0);
  /* the change threshold either way (dashed) and no change (solid) */
  const double ref[3] = {1.0 / R->factor, R->factor, 1.0};
  for (int j = 0; j < 3; j++) {
    double x = xlog ? log10(ref[j]) : ref[j];
    PLFLT lx[2] = {x, x}, ly[2] = {L.wy0, L.wy1};
    if (j < 2) {
      PLINT mark = 2500, space = 1500;
      plstyl(1, &mark, &space);
      color(0x777777);
      plwidth(2);
    } else {
      color(0x000000);
      plwidth(3);
    }
    plline(2, lx, ly);
    plstyl(0, NULL, NULL);
  }
  color(0x000000);
  plwidth(2.5);
  plbox(xlog ? "bcnstl" : "bcnst", 0, 0, "bc", 0, 0);
  plmtex("b", 3.0, 0.5, 0.5,
         xlog ? "ratio to baseline (log scale; times and memory: below 1 is better, throughput: above 1)"
              : "ratio to baseline (times and memory: below 1 is better, throughput: above 1)");
  double row_mm = (L.vy1 - L.vy0) * pg->page_h_mm / (L.wy1 - L.wy0);
  double ms = row_mm * 0.25 < 3.2 ? row_mm * 0.25 : 3.2; /* marker radius, mm */
  for (size_t k = 0; k < R->n; k++) {
    const pb_revs_comparison *c = &R->c[R->order[k]];
    double y = (double)(R->n - 1 - k), pos = (y - L.wy0) / (L.wy1 - L.wy0);
    uint32_t rgb = revs_rgb(c);
    revs_label(c, text, sizeof text);
    color(0x000000);
    plschr(0, ls);
    plmtex("lv", 0.8 * TXT / ls, pos, 1.0, text);
    plschr(0, TXT);
    revs_value(c, text, sizeof text);
    color(c->verdict == PB_SAME ? 0x000000 : rgb);
    plmtex("rv", 0.8, pos, 0.0, text);
    double a = c->ratio.lo, b = c->ratio.hi, r = c->ratio.ratio;
    if (xlog) {
      a = lg(a);
      b = lg(b);
      r = lg(r);
    }
    color(rgb);
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
      marker(&L, r, y, shape, ms, rgb, c->verdict != PB_SAME);
    }
  }
  legend_item it[4] = {
      {2, 0xD55E00, 2, 0, 0, "worse (significant): slower, lower throughput, more memory"},
      {2, 0x0072B2, 4, 0, 0, "better (significant)"},
      {2, 0x666666, 0, 0, 1, "no significant change"},
      {3, 0, 0, 0, 0, "|  dashed: the change threshold"},
  };
  legend(&L, it, 4, 5.8 * chr_norm_y(&L, TXT));
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
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", revs_json);
    char *slash = strrchr(dir, '/');
    if (slash == NULL) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    size_t u = strlen(dir);
    snprintf(dir + u, sizeof dir - u, "%simages", dir[u - 1] == '/' ? "" : "/");
    if ((rc = mkdir_one(dir, err)) != PB_OK) {
      free(c);
      return rc;
    }
    snprintf(png, sizeof png, "%s/pipebench_revs.png", dir);
  }
  /* rows grouped by experiment, then metric, then branch, each in order of first appearance */
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
      int gt = ka[0] != kb[0] ? ka[0] > kb[0] : ka[1] != kb[1] ? ka[1] > kb[1] : ka[2] > kb[2];
      if (!gt) break;
      size_t t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  const char *base = strrchr(revs_json, '/');
  revs_ctx R = {c, order, n < REVS_MAX_ROWS ? n : REVS_MAX_ROWS, n, factor, base ? base + 1 : revs_json};
  int h = 360 + 44 * (int)R.n;
  rc = plot_png(png, 1800, h < 640 ? 640 : h, draw_revs, &R, err);
  free(order);
  free(key);
  free(c);
  return rc;
}

int pb_report_plot_revs(const char *revs_json, const char *png_path, struct pb_error *err) {
  return pb_report_plot_revs_ex(revs_json, png_path, NULL, 0, err);
}

/* ---- entry points ---------------------------------------------------------------------------- */

int pb__plot_track(const pb__rp_data *d, int k, const char *png, struct pb_error *err) {
  const pb_table *t = k == 0 ? d->infer : d->t[k - 1];
  if (t == NULL || pb_table_rows(t) == 0)
    return pb_error_set(err, PB_ENOTFOUND, "%s: no rows to draw", png);
  static const char *const need[] = {"batch_size", "p50", "samples_per_sec", "step_time_mean", "read_p50"};
  if (pb_table_col_index(t, need[k]) < 0 || pb_table_col_index(t, k ? "format" : "model") < 0)
    return pb_error_set(err, PB_EFORMAT, "%s: the table lacks column '%s' (not a track %d table?)",
                        k ? d->path[k - 1] : d->infer_dir, need[k], k);
  switch (k) {
  case 1: {
    const char *c[4];
    int nc = pb__rp_distinct_str(t, "cache", NULL, 0, c, 4);
    return plot_png(png, 1800, 520 * (nc > 0 ? nc : 1) + 240, draw_track1, t, err);
  }
  case 2: {
    const char *f[PB__RP_MAX_DISTINCT];
    pb__rp_filter own = {"loader", "pipebench", 0};
    int nf = pb__rp_distinct_str(t, "format", &own, 1, f, PB__RP_MAX_DISTINCT);
    int rows = (nf + 2 + 2) / 3;
    return plot_png(png, 1800, 520 * rows + 300, draw_track2, t, err);
  }
  case 3: return plot_png(png, 1800, 800, draw_track3, t, err);
  case 4: return plot_png(png, 1800, 860, draw_track4, t, err);
  default: return plot_png(png, 1800, 860, draw_infer, t, err);
  }
}

static int mkdir_one(const char *dir, struct pb_error *err) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return pb_error_set(err, -errno, "%s: cannot create folder: %s", dir, strerror(errno));
  return PB_OK;
}

int pb_report_plots_ex(const char *out_dir, pb_report_note_fn note, void *note_ctx, int *n_written,
                       struct pb_error *err) {
  if (n_written != NULL) *n_written = 0;
  struct stat st;
  if (out_dir == NULL || stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return pb_error_set(err, PB_ENOTFOUND, "%s: no such results folder", out_dir ? out_dir : "(null)");
  pb__rp_data *d = malloc(sizeof *d);
  if (d == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  pb__rp_load(out_dir, d, note, note_ctx);
  char skipped[1024] = "";
  int written = 0, first_rc = PB_OK, any = 0;
  char first_msg[1024] = "";
  char images[4200];
  snprintf(images, sizeof images, "%s/images", out_dir);
  int rc = PB_OK;
  for (int k = 1; k <= PB__RP_TRACKS + 1 && rc == PB_OK; k++) {
    int kk = k == PB__RP_TRACKS + 1 ? 0 : k;
    if (kk > 0 && d->t[kk - 1] == NULL) {
      if (d->status[kk - 1] != PB_ENOTFOUND) {
        any = 1;
        if (first_rc == PB_OK) {
          first_rc = d->status[kk - 1];
          snprintf(first_msg, sizeof first_msg, "%s", d->why[kk - 1]);
        }
        size_t u = strlen(skipped);
        snprintf(skipped + u, sizeof skipped - u, "%s%s", u ? "; " : "skipped: ", d->why[kk - 1]);
      }
      continue;
    }
    if (kk == 0 && d->infer == NULL) continue;
    any = 1;
    if ((rc = mkdir_one(images, err)) != PB_OK) break;
    char png[4300];
    if (kk) snprintf(png, sizeof png, "%s/pipebench_track%d.png", images, kk);
    else snprintf(png, sizeof png, "%s/pipebench_infer.png", images);
    struct pb_error e = {{0}};
    int prc = pb__plot_track(d, kk, png, &e);
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
  pb__rp_free(d);
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

int pb_report_plots(const char *out_dir, int *n_written, struct pb_error *err) {
  return pb_report_plots_ex(out_dir, NULL, NULL, n_written, err);
}

int pb_report_plot_infer(const char *csv_dir, const char *png_path, struct pb_error *err) {
  pb__rp_data *d = calloc(1, sizeof *d);
  if (d == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int rc = pb__rp_load_infer(csv_dir, &d->infer, &d->infer_files, err);
  if (rc == PB_OK) {
    snprintf(d->infer_dir, sizeof d->infer_dir, "%s", csv_dir);
    char png[4300];
    if (png_path == NULL) snprintf(png, sizeof png, "%s/pipebench_infer.png", csv_dir);
    else snprintf(png, sizeof png, "%s", png_path);
    rc = pb__plot_track(d, 0, png, err);
  }
  pb__rp_free(d);
  free(d);
  return rc;
}
