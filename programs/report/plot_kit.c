/* The drawing kit of the plots: colours, a page of panels, bars, markers, legends, axes.
 * The plots of every track and of infer and revs draw with these (inside pb__plot_png, which
 * holds PLplot's lock). */
#include <math.h>
#include <plplot.h>
#include <stdio.h>
#include <string.h>

#include "report/plot_kit.h"

/* ---- drawing helpers ------------------------------------------------------------------------- */


void pb__plot_color(uint32_t rgb) {
  plscol0(PB__PL_SCRATCH_COL, (PLINT)(rgb >> 16 & 255), (PLINT)(rgb >> 8 & 255), (PLINT)(rgb & 255));
  plcol0(PB__PL_SCRATCH_COL);
}

/* rgb mixed with white: f = 0 keeps it, 1 is white. */
uint32_t pb__plot_tint(uint32_t rgb, double f) {
  uint32_t out = 0;
  for (int s = 16; s >= 0; s -= 8) {
    double c = (double)(rgb >> s & 255);
    out |= (uint32_t)(c + (255.0 - c) * f + 0.5) << s;
  }
  return out;
}


double pb__plot_chr_y(const pb__plot_layout *L, double scale) { return L->pg->chr_mm * scale / L->pg->page_h_mm; }
double pb__plot_chr_x(const pb__plot_layout *L, double scale) { return L->pg->chr_mm * scale / L->pg->page_w_mm; }

/* Estimated width in mm of text drawn at scale (PLplot 5.15 has no public string-length call):
 * a generous average glyph width, so that what is fitted never touches its neighbour. */
double pb__plot_text_mm(const pb__plot_layout *L, const char *s, double scale) {
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) n += (*p & 0xC0) != 0x80;
  return 0.68 * L->pg->chr_mm * scale * (double)n;
}

/* The largest scale up to want at which text fits into avail_mm (never below 60% of want). */
double pb__plot_fit_scale(const pb__plot_layout *L, const char *s, double want, double avail_mm) {
  double w = pb__plot_text_mm(L, s, want);
  if (w <= avail_mm || w <= 0) return want;
  double k = avail_mm / w;
  return want * (k < 0.6 ? 0.6 : k);
}

void pb__plot_title(const pb__plot_layout *L, const char *title, const char *subtitle) {
  plvpor(0, 1, 0, 1);
  plwind(0, 1, 0, 1);
  plcol0(1);
  plscol0(1, 0, 0, 0);
  plcol0(1);
  double room = L->pg->page_w_mm - 2 * L->pg->chr_mm * PB__PL_TXT;
  plschr(0, pb__plot_fit_scale(L, title, PB__PL_BIG, room));
  plptex(0.5, 1.0 - 1.3 * pb__plot_chr_y(L, PB__PL_BIG), 1, 0, 0.5, title);
  if (subtitle != NULL && subtitle[0]) {
    plschr(0, pb__plot_fit_scale(L, subtitle, PB__PL_TXT * 0.9, room));
    pb__plot_color(0x444444);
    plptex(0.5, 1.0 - 1.3 * pb__plot_chr_y(L, PB__PL_BIG) - 1.9 * pb__plot_chr_y(L, PB__PL_TXT), 1, 0, 0.5, subtitle);
  }
}

/* Starts panel i of the grid with the given window; yopt "l" for a log axis (world y is then
 * log10 of the value). xlabels: categorical labels at x = 0..nx-1 (NULL for a numeric axis). */
void pb__plot_panel(pb__plot_layout *L, int i, double x0, double x1, double y0, double y1, int ylog,
                  const char *title, const char *xlabel, const char *ylabel,
                  const char *const *xlabels, int nx, const uint32_t *xlabel_colors) {
  int r = i / L->cols, c = i % L->cols;
  double cw = 1.0 / L->cols, ch = (L->top - L->bottom) / L->rows;
  double ml = 7.0 * pb__plot_chr_x(L, PB__PL_TXT), mr = 1.5 * pb__plot_chr_x(L, PB__PL_TXT);
  double mb = (xlabel && xlabel[0] ? 4.6 : 2.8) * pb__plot_chr_y(L, PB__PL_TXT);
  double mt = 3.3 * pb__plot_chr_y(L, PB__PL_TITLE);
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
  plschr(0, PB__PL_TXT);
  /* light grid first, axes on top */
  plwidth(1);
  pb__plot_color(0xD0D0D0);
  plbox(xlabels ? "" : (ylog == 2 ? "gl" : "g"), 0, 0, ylog ? "gl" : "g", 0, 0);
  pb__plot_color(0x000000);
  plwidth(2.5);
  const char *xo = xlabels ? "bc" : (ylog == 2 ? "bcnstl" : "bcnst");
  plbox(xo, 0, 0, ylog ? "bcnstvl" : "bcnstv", 0, 0);
  if (xlabels != NULL) {
    /* one scale for all category labels, small enough that neighbours keep a gap */
    double step_mm = (L->vx1 - L->vx0) * L->pg->page_w_mm / (x1 - x0), ls = PB__PL_TXT;
    for (int k = 0; k < nx; k++) {
      double s = pb__plot_fit_scale(L, xlabels[k], PB__PL_TXT, 0.8 * step_mm);
      if (s < ls) ls = s;
    }
    plschr(0, ls);
    for (int k = 0; k < nx; k++) {
      pb__plot_color(xlabel_colors ? xlabel_colors[k] : 0x000000);
      plmtex("b", 1.3 * PB__PL_TXT / ls, (k - x0) / (x1 - x0), 0.5, xlabels[k]);
    }
    plschr(0, PB__PL_TXT);
  }
  pb__plot_color(0x000000);
  if (xlabel && xlabel[0]) plmtex("b", 3.0, 0.5, 0.5, xlabel);
  if (ylabel && ylabel[0]) plmtex("l", 5.2, 0.5, 0.5, ylabel);
  /* the title is centred on the plot area; it must stay inside its own grid cell */
  double cx = 0.5 * (L->vx0 + L->vx1), room = cx - c * cw;
  if ((c + 1) * cw - cx < room) room = (c + 1) * cw - cx;
  double ts = pb__plot_fit_scale(L, title, PB__PL_TITLE, 2.0 * room * L->pg->page_w_mm - L->pg->chr_mm * PB__PL_TXT);
  plschr(0, ts);
  plmtex("t", 1.7 * PB__PL_TITLE / ts, 0.5, 0.5, title);
  plschr(0, PB__PL_TXT);
}

void pb__plot_no_data(pb__plot_layout *L, int i, const char *title, const char *why) {
  pb__plot_panel(L, i, 0, 1, 0, 1, 0, title, "", "", NULL, 0, NULL);
  pb__plot_color(0x777777);
  plptex(0.5, 0.5, 1, 0, 0.5, why);
}

void pb__plot_rect(double x0, double x1, double y0, double y1, uint32_t rgb, int hatch) {
  PLFLT x[5] = {x0, x1, x1, x0, x0}, y[5] = {y0, y0, y1, y1, y0};
  if (hatch) {
    pb__plot_color(pb__plot_tint(rgb, 0.75));
    plpsty(0);
    plfill(4, x, y);
    PLINT inc[2] = {450, -450}, del[2] = {1800, 1800};
    plpat(1, inc, del);
    plwidth(2);
    pb__plot_color(rgb);
    plfill(4, x, y);
    plpsty(0);
  } else {
    pb__plot_color(rgb);
    plpsty(0);
    plfill(4, x, y);
  }
  plwidth(1.5);
  pb__plot_color(hatch ? rgb : 0x303030);
  plline(5, x, y);
}

/* A marker of radius r_mm at world (x, y): 0 circle, 1 square, 2 triangle, 3 diamond, 4
 * inverted triangle, 5 pentagon; filled, or an outline with a white inside. */
void pb__plot_marker(const pb__plot_layout *L, double x, double y, int shape, double r_mm, uint32_t rgb, int filled) {
  double sx = (L->wx1 - L->wx0) / ((L->vx1 - L->vx0) * L->pg->page_w_mm);
  double sy = (L->wy1 - L->wy0) / ((L->vy1 - L->vy0) * L->pg->page_h_mm);
  const int sides[] = {16, 4, 3, 4, 3, 5};
  const double rot[] = {0, 45, 90, 0, -90, 90};
  int n = sides[shape % 6];
  PLFLT px[17], py[17];
  for (int k = 0; k <= n; k++) {
    double a = (rot[shape % 6] + 360.0 * k / n) * M_PI / 180.0;
    px[k] = x + r_mm * cos(a) * sx;
    py[k] = y + r_mm * sin(a) * sy;
  }
  pb__plot_color(filled ? rgb : 0xFFFFFF);
  plpsty(0);
  plfill(n, px, py);
  plwidth(2.5);
  pb__plot_color(rgb);
  plline(n + 1, px, py);
}

/* The legend strip: entries side by side, wrapped onto more lines when needed. */

void pb__plot_legend(const pb__plot_layout *L, const pb__plot_legend_item *it, int n, double y_top) {
  plvpor(0, 1, 0, 1);
  plwind(0, L->pg->page_w_mm, 0, L->pg->page_h_mm);
  plschr(0, PB__PL_TXT);
  double ch = L->pg->chr_mm * PB__PL_TXT, x = 2 * ch, y = y_top * L->pg->page_h_mm - ch;
  pb__plot_layout M = *L;
  M.vx0 = M.vy0 = 0;
  M.vx1 = M.vy1 = 1;
  M.wx0 = M.wy0 = 0;
  M.wx1 = L->pg->page_w_mm;
  M.wy1 = L->pg->page_h_mm;
  for (int i = 0; i < n; i++) {
    double sw = it[i].kind == 3 ? 0 : (it[i].kind == 2 ? 4.5 * ch : 1.6 * ch);
    double tw = pb__plot_text_mm(L, it[i].text, PB__PL_TXT);
    if (x + sw + tw > L->pg->page_w_mm - ch && x > 2 * ch) {
      x = 2 * ch;
      y -= 2.0 * ch;
    }
    if (it[i].kind == 0 || it[i].kind == 1) {
      pb__plot_rect(x, x + 1.3 * ch, y - 0.55 * ch, y + 0.55 * ch, it[i].rgb, it[i].kind == 1);
    } else if (it[i].kind == 2) {
      PLFLT lx[2] = {x, x + 4 * ch}, ly[2] = {y, y};
      pb__plot_color(it[i].rgb);
      plwidth(4);
      if (it[i].dashed) { /* dashed = k: the k-th dash, as the plots draw their k-th peer */
        PLINT mark = 3000 / it[i].dashed, space = 2000;
        plstyl(1, &mark, &space);
      }
      plline(2, lx, ly);
      plstyl(0, NULL, NULL);
      if (it[i].shape >= 0) pb__plot_marker(&M, x + 2 * ch, y, it[i].shape, 0.45 * ch, it[i].rgb, !it[i].hollow);
    }
    pb__plot_color(0x000000);
    plptex(x + sw + 0.4 * ch, y, 1, 0, 0, it[i].text);
    x += sw + tw + 2.0 * ch;
  }
}

/* A decade-aligned log range for values in [lo, hi] (positive), as log10 values. */
void pb__plot_log_range(double lo, double hi, double *a, double *b) {
  if (!(lo > 0) || !isfinite(lo)) lo = 1e-9;
  if (!(hi > 0) || !isfinite(hi)) hi = lo * 10;
  *a = floor(log10(lo));
  *b = ceil(log10(hi) + 1e-9);
  if (*b - *a < 1) *b = *a + 1;
}

double pb__plot_lg(double v) { return v > 0 ? log10(v) : NAN; }

/* Time unit for seconds up to max_s: scale factor and name. */
double pb__plot_time_unit(double max_s, const char **name) {
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

void pb__plot_format_legend(const pb__plot_layout *L, const char *const *formats, int nf, const pb__plot_legend_item *extra,
                          int ne, double y_top) {
  pb__plot_legend_item it[PB__RP_MAX_DISTINCT + 12];
  int n = 0;
  for (int i = 0; i < nf && n < PB__RP_MAX_DISTINCT; i++)
    it[n++] = (pb__plot_legend_item){0, pb__report_format_color(formats[i]), 0, 0, 0, formats[i]};
  for (int i = 0; i < ne && n < PB__RP_MAX_DISTINCT + 12; i++) it[n++] = extra[i];
  pb__plot_legend(L, it, n, y_top);
}

const char *pb__plot_meta_or(const pb_table *t, const char *key, const char *dflt) {
  const char *v = t ? pb_table_get_meta(t, key) : NULL;
  return v ? v : dflt;
}
