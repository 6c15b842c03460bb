/* The drawing kit of the plots (not public API): a page of panels and what goes on them. Only
 * for use inside a draw function run by pb__plot_png, which holds PLplot's lock. */
#ifndef PB_PLOT_KIT_H
#define PB_PLOT_KIT_H

#include <stdint.h>

#include "report/report_internal.h"

#define PB__PL_SCRATCH_COL 15
#define PB__PL_TXT 0.68   /* text scale of labels and ticks */
#define PB__PL_TITLE 0.82 /* panel titles */
#define PB__PL_BIG 1.0    /* page title */

/* The page being drawn. */
typedef struct pb__plot_page {
  int w, h; /* pixels */
  double page_w_mm, page_h_mm;
  double chr_mm; /* character height at scale 1 */
} pb__plot_page;

/* Draws one page; ctx is what was given to pb__plot_png. */
typedef void (*pb__plot_draw_fn)(const void *ctx, pb__plot_page *pg);

/* Draws one PNG of w x h pixels into path, atomically; PB_EUNSUPPORTED without the pngcairo
 * driver. */
int pb__plot_png(const char *path, int w, int h, pb__plot_draw_fn draw, const void *ctx,
                 struct pb_error *err);

/* The layout of one page: a title strip, a grid of panels, a legend strip at the bottom. */
typedef struct pb__plot_layout {
  pb__plot_page *pg;
  int rows, cols;
  double top, bottom; /* normalized page y of the grid */
  /* the current panel's window and viewport, for markers and text placement */
  double wx0, wx1, wy0, wy1, vx0, vx1, vy0, vy1;
} pb__plot_layout;

/* A legend entry. kind: 0 filled box, 1 hatched box, 2 line with a marker (shape < 0: none;
 * dashed; hollow marker), 3 text only. */
typedef struct pb__plot_legend_item {
  int kind;
  uint32_t rgb;
  int shape, dashed, hollow; /* dashed: 0 solid, k the k-th dash pattern (3000/k on, 2000 off) */
  const char *text;
} pb__plot_legend_item;

/* Sets the drawing colour (0xRRGGBB). */
void pb__plot_color(uint32_t rgb);
/* rgb mixed with white: f = 0 keeps it, 1 is white. */
uint32_t pb__plot_tint(uint32_t rgb, double f);
/* Character height at scale as a fraction of the page's height / width. */
double pb__plot_chr_y(const pb__plot_layout *L, double scale);
double pb__plot_chr_x(const pb__plot_layout *L, double scale);
/* Estimated width in mm of text at scale. */
double pb__plot_text_mm(const pb__plot_layout *L, const char *s, double scale);
/* The largest scale up to want at which text fits into avail_mm (never below 60% of want). */
double pb__plot_fit_scale(const pb__plot_layout *L, const char *s, double want, double avail_mm);
/* The page's title and subtitle (may be NULL). */
void pb__plot_title(const pb__plot_layout *L, const char *title, const char *subtitle);
/* Starts panel i of the grid with the given window; ylog 1: log y axis (world y is log10 of
 * the value), 2: log x and y. xlabels: categorical labels at x = 0..nx-1 (NULL: numeric axis),
 * coloured by xlabel_colors (may be NULL). */
void pb__plot_panel(pb__plot_layout *L, int i, double x0, double x1, double y0, double y1, int ylog,
                  const char *title, const char *xlabel, const char *ylabel,
                  const char *const *xlabels, int nx, const uint32_t *xlabel_colors);
/* Panel i with only a grey note saying why it is empty. */
void pb__plot_no_data(pb__plot_layout *L, int i, const char *title, const char *why);
/* A bar from (x0, y0) to (x1, y1), filled or hatched. */
void pb__plot_rect(double x0, double x1, double y0, double y1, uint32_t rgb, int hatch);
/* A marker of radius r_mm at world (x, y): 0 circle, 1 square, 2 triangle, 3 diamond, 4
 * inverted triangle, 5 pentagon; filled, or an outline with a white inside. */
void pb__plot_marker(const pb__plot_layout *L, double x, double y, int shape, double r_mm,
                   uint32_t rgb, int filled);
/* The legend strip from y_top (normalized page y) down. */
void pb__plot_legend(const pb__plot_layout *L, const pb__plot_legend_item *it, int n, double y_top);
/* One box per format in its fixed colour, then the extra entries. */
void pb__plot_format_legend(const pb__plot_layout *L, const char *const *formats, int nf,
                          const pb__plot_legend_item *extra, int ne, double y_top);
/* A decade-aligned log range for values in [lo, hi] (positive), as log10 values. */
void pb__plot_log_range(double lo, double hi, double *a, double *b);
/* log10(v), NaN for v <= 0. */
double pb__plot_lg(double v);
/* Time unit for seconds up to max_s: scale factor and name. */
double pb__plot_time_unit(double max_s, const char **name);
/* Metadata key of t, or dflt. */
const char *pb__plot_meta_or(const pb_table *t, const char *key, const char *dflt);

#endif
