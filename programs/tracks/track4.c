/* Track 4: where one sample's time goes, from stored bytes to a torch tensor.
 * In C: the loader's stage times per sample (read, decompress, decode, convert, transform).
 * In Python (the binding): hand-off of the same batch to torch through DLPack, next to the
 * peer path on the same pixels (numpy array -> torch.from_numpy(a).float()). */
#include <math.h>
#include <plplot.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/peer.h"
#include "report/plot_kit.h"
#include "tracks/device.h"
#include "tracks/tracks.h"
#include "pipebench/sys.h"
#include "pipebench/results.h"
#include "pipebench/format.h"
#include "pipebench/engine.h"
#include "pipebench/loader.h"

/* ---- schema ---------------------------------------------------------------------------------- */

/* The percentiles set_pcts writes after a prefix. */
#define T4_PCTS(prefix) prefix "_p50", prefix "_p95", prefix "_p99", prefix "_mean"
#define T4_DLPACK_PCT "dlpack_overhead_pct"
#define T4_CONVERSION_PCT "conversion_overhead_pct"
#define T4_OVER_PEER "pipebench_over_peer"
#define T4_OTHER_P50 "other_p50"

static const char *const t4_schema[] = {
    PB__COMMON_COLUMNS, "num_samples", "transform", T4_PCTS("read"), T4_PCTS("decompress"),
    T4_PCTS("decode"), T4_PCTS("convert"), T4_PCTS("transform"), T4_PCTS("loader_total"),
    T4_PCTS("py_next"), T4_PCTS("dlpack"), T4_PCTS("numpy"), T4_PCTS("conversion"),
    "peer_version", "torch_p50", "pipebench_torch_p50", T4_CONVERSION_PCT, T4_DLPACK_PCT,
    "numpy_samples_per_sec", "torch_samples_per_sec", "pipebench_samples_per_sec", T4_OVER_PEER,
    T4_OTHER_P50, "device", T4_PCTS("h2d"), "h2d_bytes", NULL};

/* ---- measuring ------------------------------------------------------------------------------- */

typedef struct stage_samples {
  double *read, *decompress, *decode, *convert, *transform, *total;
  double *h2d;      /* host-to-device copy of the sample's raw pixels (with a GPU engine) */
  pb_engine *gpu;   /* NULL: no device stage */
  void *pinned;     /* the copy's source, from the engine's pinned allocator */
  size_t pinned_size, h2d_bytes;
} stage_samples;

/* The host-to-device stage: a small engine on the device only for its copy stream and staging
 * buffer (pb_engine_copy_to_device); the raw sample, as a GPU-fed loader ships it
 * (PB_OUT_NATIVE), is copied from pinned memory and timed with CUDA events. */
static int h2d_open(pb_run_ctx *c, stage_samples *s, struct pb_error *err) {
  const char *d = pb__device_resolve(c->p.device, NULL, 0); /* auto: the GPU where usable */
  if (d == NULL || strcmp(d, "cpu") == 0) return PB_OK;
  pb_engine_params ep = PB_ENGINE_PARAMS_DEFAULTS;
  ep.model = "embed";
  ep.device = d;
  return pb_engine_new(&ep, &s->gpu, err);
}

static void h2d_close(stage_samples *s) {
  const pb_allocator *a = s->gpu ? pb_engine_host_allocator(s->gpu) : NULL;
  if (a != NULL && s->pinned != NULL) a->free(a->ctx, s->pinned, s->pinned_size);
  s->pinned = NULL;
  pb_engine_free(s->gpu);
  s->gpu = NULL;
}

static int h2d_sample(stage_samples *s, const pb_image_meta *m, double *out_s,
                      struct pb_error *err) {
  size_t bytes = (size_t)pb_image_bytes(m);
  const pb_allocator *a = pb_engine_host_allocator(s->gpu);
  if (a == NULL) return pb_error_set(err, PB_EUNSUPPORTED, "the device engine has no pinned memory");
  if (bytes > s->pinned_size) {
    if (s->pinned != NULL) a->free(a->ctx, s->pinned, s->pinned_size);
    s->pinned_size = 0;
    if ((s->pinned = a->alloc(a->ctx, bytes, 64)) == NULL)
      return pb_error_set(err, PB_ENOMEM, "cannot allocate %zu bytes of pinned memory", bytes);
    s->pinned_size = bytes;
    memset(s->pinned, 1, bytes);
  }
  int64_t ns = 0;
  PB_RETURN_NOT_OK(pb_engine_copy_to_device(s->gpu, s->pinned, bytes, &ns, err));
  s->h2d_bytes = bytes;
  *out_s = (double)ns / 1e9;
  return PB_OK;
}

static int c_stages(pb_run_ctx *c, int fi, int r, stage_samples *s, int *count, struct pb_error *err) {
  pb_loader_params lp = PB_LOADER_PARAMS_DEFAULTS;
  lp.format = c->formats[fi];
  lp.batch_size = 1;
  lp.workers = 0;
  lp.shuffle = 1;
  lp.seed = c->p.seed + (uint64_t)r;
  lp.transform = PB_TRANSFORM_NORMALIZE;
  pb__run_loader_crop(c, fi, &lp); /* images of different sizes */
  pb_loader *ld = NULL;
  PB_RETURN_NOT_OK(pb_loader_new(c->paths[fi], &lp, &ld, err));
  int rc = PB_OK, n = 0, empty = 0;
  if (c->p.cold) rc = pb_evict_path(c->paths[fi], err) < 0 ? PB_EIO : PB_OK;
  for (int k = 0; k < c->p.warmup + c->p.samples && rc == PB_OK;) {
    if (pb__run_stopped()) { /* SIGINT/SIGTERM: end within a step */
      rc = pb__run_stop_error(err);
      break;
    }
    pb_batch *b = NULL;
    int64_t t0 = pb_now_ns();
    rc = pb_loader_next(ld, &b, err);
    int64_t t1 = pb_now_ns();
    if (rc != PB_OK) break;
    if (b == NULL) {
      if (++empty > 1) {
        rc = pb_error_set(err, PB_EFORMAT, "the loader gave no sample after a reset");
        break;
      }
      rc = pb_loader_reset(ld, k + 1, err);
      continue;
    }
    empty = 0;
    if (k >= c->p.warmup) {
      s->read[n] = (double)b->times.read_ns / 1e9;
      s->decompress[n] = (double)b->times.decompress_ns / 1e9;
      s->decode[n] = (double)b->times.decode_ns / 1e9;
      s->convert[n] = (double)b->times.convert_ns / 1e9;
      s->transform[n] = (double)b->times.transform_ns / 1e9;
      s->total[n] = (double)(t1 - t0) / 1e9;
      if (s->gpu != NULL) rc = h2d_sample(s, pb_loader_meta(ld), &s->h2d[n], err);
      n++;
    }
    pb_batch_free(b);
    k++;
  }
  pb_loader_free(ld);
  *count = n;
  return rc;
}

static int array_of(const cJSON *o, const char *key, double *v, int cap) {
  const cJSON *a = cJSON_GetObjectItem(o, key), *x;
  int n = 0;
  cJSON_ArrayForEach(x, a) if (n < cap && cJSON_IsNumber(x)) v[n++] = x->valuedouble;
  return n;
}

static void set_pcts(pb_table *t, const char *prefix, const double *v, int n) {
  pb_summary s;
  char k[64];
  if (pb_summarize(v, (size_t)n, &s) != PB_OK) return;
  snprintf(k, sizeof k, "%s_p50", prefix);
  pb_table_set_f64(t, k, s.p50);
  snprintf(k, sizeof k, "%s_p95", prefix);
  pb_table_set_f64(t, k, s.p95);
  snprintf(k, sizeof k, "%s_p99", prefix);
  pb_table_set_f64(t, k, s.p99);
  snprintf(k, sizeof k, "%s_mean", prefix);
  pb_table_set_f64(t, k, s.mean);
}

static double median_of(const double *v, int n) {
  pb_summary s;
  return pb_summarize(v, (size_t)n, &s) == PB_OK ? s.p50 : NAN;
}

static int run_python(pb_run_ctx *c, cJSON **out, struct pb_error *err) {
  char cfg_path[4200], res_path[4200], log_path[4200], script[4200];
  snprintf(cfg_path, sizeof cfg_path, "%s/data/.track4.json", c->p.out);
  snprintf(res_path, sizeof res_path, "%s/data/.track4.result.json", c->p.out);
  snprintf(log_path, sizeof log_path, "%s/data/.track4.log", c->p.out);
  snprintf(script, sizeof script, "%s/pipebench_track4.py", pb__python_dir());
  cJSON *cfg = cJSON_CreateObject();
  cJSON *f = cJSON_AddObjectToObject(cfg, "formats");
  for (int i = 0; i < c->nf; i++) cJSON_AddStringToObject(f, c->formats[i], c->paths[i]);
  cJSON *crops = cJSON_AddObjectToObject(cfg, "crops"); /* formats of images of different sizes */
  for (int i = 0; i < c->nf; i++)
    if (c->crop[i] > 0) cJSON_AddNumberToObject(crops, c->formats[i], c->crop[i]);
  cJSON_AddNumberToObject(cfg, "crop_resize", PB_RUN_CROP_RESIZE);
  cJSON_AddNumberToObject(cfg, "samples", c->p.samples);
  cJSON_AddNumberToObject(cfg, "warmup", c->p.warmup);
  cJSON_AddNumberToObject(cfg, "repeats", c->p.repeats);
  cJSON_AddNumberToObject(cfg, "seed", (double)c->p.seed);
  if (c->p.library != NULL) cJSON_AddStringToObject(cfg, "library", c->p.library);
  /* the child's readers keep the block budget this run's readers keep (pb_run sets it) */
  cJSON_AddNumberToObject(cfg, "oa_cache_mb", (double)(pb_pq_cache_budget(0) >> 20));
  char *text = cJSON_Print(cfg);
  cJSON_Delete(cfg);
  /* atomic: a link planted at the name is replaced, never written through */
  int rc = text ? pb_write_file_atomic(cfg_path, text, strlen(text), err) : PB_ENOMEM;
  free(text);
  if (rc != PB_OK) return rc;
  unlink(res_path);
  char *argv[] = {(char *)c->p.python, script, cfg_path, res_path, NULL};
  rc = pb__run_child(argv, 1800.0, log_path, err);
  if (rc == PB_OK) {
    *out = pb_load_json(res_path, err);
    if (*out == NULL) rc = PB_EFORMAT;
  }
  if (rc == PB_OK) {
    unlink(log_path);
    unlink(cfg_path);
    unlink(res_path);
  }
  return rc;
}

static int t4_run(pb_run_ctx *c, struct pb_error *err) {
  int cap = c->p.samples;
  double *buf = calloc((size_t)cap * 11, sizeof *buf);
  if (buf == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  stage_samples s = {buf, buf + cap, buf + 2 * cap, buf + 3 * cap, buf + 4 * cap, buf + 5 * cap,
                     buf + 10 * cap, NULL, NULL, 0, 0};
  double *next_s = buf + 6 * cap, *dl_s = buf + 7 * cap, *np_s = buf + 8 * cap, *conv_s = buf + 9 * cap;
  pb_table *t = NULL;
  int rc = pb__new_table(c, "4", &t, err);
  cJSON *py = NULL;
  c->step = 0;
  c->total_steps = (long)c->nf * c->p.repeats + 1;
  if (rc == PB_OK && (rc = h2d_open(c, &s, err)) != PB_OK) pb_error_prefix(err, "track 4: ");
  if (rc == PB_OK) {
    pb__run_progress(c, "track 4: torch hand-off and peer path (Python)");
    rc = run_python(c, &py, err);
    if (rc != PB_OK) pb_error_prefix(err, "track 4: ");
  }
  cJSON *summary = pb__run_summary(c, "4");
  const cJSON *pyrows = cJSON_GetObjectItem(py, "rows");
  const cJSON *vers = cJSON_GetObjectItem(py, "versions");
  const cJSON *torch_v = cJSON_GetObjectItem(vers, "torch");
  for (int fi = 0; fi < c->nf && rc == PB_OK; fi++)
    for (int r = 0; r < c->p.repeats && rc == PB_OK; r++) {
      char what[128];
      snprintf(what, sizeof what, "track 4: %s stages, round %d", c->formats[fi], r + 1);
      pb__run_progress(c, what);
      int n = 0;
      rc = c_stages(c, fi, r, &s, &n, err);
      if (rc != PB_OK) {
        pb_error_prefix(err, "track 4, %s: ", c->formats[fi]);
        break;
      }
      const cJSON *row = NULL, *x;
      cJSON_ArrayForEach(x, pyrows) {
        const cJSON *fx = cJSON_GetObjectItem(x, "format"), *rx = cJSON_GetObjectItem(x, "repeat");
        if (cJSON_IsString(fx) && strcmp(fx->valuestring, c->formats[fi]) == 0 &&
            cJSON_IsNumber(rx) && (int)rx->valuedouble == r)
          row = x;
      }
      int nn = array_of(row, "next_s", next_s, cap), nd = array_of(row, "dlpack_s", dl_s, cap);
      int np = array_of(row, "numpy_s", np_s, cap), nc = array_of(row, "from_numpy_s", conv_s, cap);
      pb__row_common(c, t, c->formats[fi], r);
      pb_table_set_i64(t, "num_samples", n);
      pb_table_set_str(t, "transform", pb__run_transform_name(c, fi, "normalize"));
      set_pcts(t, "read", s.read, n);
      set_pcts(t, "decompress", s.decompress, n);
      set_pcts(t, "decode", s.decode, n);
      set_pcts(t, "convert", s.convert, n);
      set_pcts(t, "transform", s.transform, n);
      set_pcts(t, "loader_total", s.total, n);
      set_pcts(t, "py_next", next_s, nn);
      set_pcts(t, "dlpack", dl_s, nd);
      set_pcts(t, "numpy", np_s, np);
      set_pcts(t, "conversion", conv_s, nc);
      pb_table_set_str(t, "peer_version", cJSON_IsString(torch_v) ? torch_v->valuestring : "");
      /* Overheads as shares of the medians of each path. */
      double m_next = median_of(next_s, nn), m_dl = median_of(dl_s, nd);
      double m_np = median_of(np_s, np), m_conv = median_of(conv_s, nc);
      double torch_path = m_np + m_conv, pb_path = m_next + m_dl;
      pb_table_set_f64(t, "torch_p50", torch_path);
      pb_table_set_f64(t, "pipebench_torch_p50", pb_path);
      pb_table_set_f64(t, T4_CONVERSION_PCT, 100.0 * m_conv / torch_path);
      pb_table_set_f64(t, T4_DLPACK_PCT, 100.0 * m_dl / pb_path);
      pb_table_set_f64(t, "numpy_samples_per_sec", 1.0 / m_np);
      pb_table_set_f64(t, "torch_samples_per_sec", 1.0 / torch_path);
      pb_table_set_f64(t, "pipebench_samples_per_sec", 1.0 / pb_path);
      pb_table_set_f64(t, T4_OVER_PEER, torch_path / pb_path);
      double m_read = median_of(s.read, n), m_dec = median_of(s.decompress, n);
      double m_decode = median_of(s.decode, n), m_cv = median_of(s.convert, n);
      double m_tr = median_of(s.transform, n), m_tot = median_of(s.total, n);
      double other = m_tot - (m_read + m_dec + m_decode + m_cv + m_tr);
      pb_table_set_f64(t, T4_OTHER_P50, other > 0 ? other : 0);
      if (s.gpu != NULL) {
        pb_engine_info gi;
        pb_engine_get_info(s.gpu, &gi);
        pb_table_set_str(t, "device", gi.device);
        set_pcts(t, "h2d", s.h2d, n);
        pb_table_set_i64(t, "h2d_bytes", (int64_t)s.h2d_bytes);
      } else {
        pb_table_set_str(t, "device", "cpu");
      }
      if (r == c->p.repeats - 1) {
        cJSON *o = cJSON_AddObjectToObject(summary, c->formats[fi]);
        cJSON_AddNumberToObject(o, "read_s", m_read);
        cJSON_AddNumberToObject(o, "decompress_s", m_dec);
        cJSON_AddNumberToObject(o, "decode_s", m_decode);
        cJSON_AddNumberToObject(o, "convert_s", m_cv);
        cJSON_AddNumberToObject(o, "transform_s", m_tr);
        cJSON_AddNumberToObject(o, "dlpack_s", m_dl);
        cJSON_AddNumberToObject(o, "peer_conversion_overhead_pct", 100.0 * m_conv / torch_path);
        cJSON_AddNumberToObject(o, "pipebench_over_peer", torch_path / pb_path);
      }
    }
  if (rc == PB_OK) rc = pb__write_table(c, t, "pipebench_track4.parquet", err);
  h2d_close(&s);
  cJSON_Delete(py);
  pb_table_free(t);
  free(buf);
  return rc;
}

/* ---- the report: plot, answer, section ------------------------------------------------------ */

static void t4_draw(const void *ctx, pb__plot_page *pg) {
  const pb_table *t = ctx;
  const char *formats[PB__RP_MAX_DISTINCT];
  int nf = pb__report_distinct_str(t, PB__COL_FORMAT, NULL, 0, formats, PB__RP_MAX_DISTINCT);
  static const char *const stage_col[] = {"read_p50", "decompress_p50", "decode_p50", "convert_p50",
                                          "transform_p50", T4_OTHER_P50, "dlpack_p50"};
  static const char *const stage_name[] = {"read", "decompress", "decode", "convert", "transform",
                                           "other loader work", "DLPack hand-off to torch"};
  /* a sequential ramp in pipeline order, apart from the format colours */
  static const uint32_t stage_rgb[] = {0x440154, 0x3B528B, 0x21918C, 0x5EC962, 0xFDE725, 0xBBBBBB, 0xE7298A};
  double tot[PB__RP_MAX_DISTINCT], hi = 0, ohi = 0;
  for (int f = 0; f < nf; f++) {
    pb__report_filter fl = {PB__COL_FORMAT, formats[f], 0};
    tot[f] = 0;
    for (int s = 0; s < 7; s++) {
      double v = pb__report_median(t, stage_col[s], &fl, 1, NULL);
      if (v > 0) tot[f] += v;
    }
    if (tot[f] > hi) hi = tot[f];
    double a = pb__report_median(t, T4_DLPACK_PCT, &fl, 1, NULL), b = pb__report_median(t, T4_CONVERSION_PCT, &fl, 1, NULL);
    if (a > ohi) ohi = a;
    if (b > ohi) ohi = b;
  }
  const char *unit;
  double us = pb__plot_time_unit(hi, &unit);
  pb__plot_layout L = {pg, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  L.top = 1.0 - 4.2 * pb__plot_chr_y(&L, PB__PL_BIG);
  L.bottom = 6.2 * pb__plot_chr_y(&L, PB__PL_TXT);
  pb__plot_title(&L, "Track 4: where one sample's time goes, and the hand-off to torch",
             "medians per stage over samples and rounds; transform normalize; torch peer: numpy array -> torch.from_numpy");
  uint32_t fcol[PB__RP_MAX_DISTINCT] = {0};
  for (int f = 0; f < nf; f++) fcol[f] = pb__report_format_color(formats[f]);
  char ylab[64];
  snprintf(ylab, sizeof ylab, "time per sample, p50 (%s)", unit);
  pb__plot_panel(&L, 0, -0.5, nf - 0.5, 0, hi * us * 1.12, 0, "stage breakdown per format", PB__COL_FORMAT, ylab, formats, nf, fcol);
  for (int f = 0; f < nf; f++) {
    pb__report_filter fl = {PB__COL_FORMAT, formats[f], 0};
    double y = 0;
    for (int s = 0; s < 7; s++) {
      double v = pb__report_median(t, stage_col[s], &fl, 1, NULL) * us;
      if (!(v > 0)) continue;
      pb__plot_rect(f - 0.32, f + 0.32, y, y + v, stage_rgb[s], 0);
      y += v;
    }
  }
  double ymax = ohi * 1.3;
  if (ymax < 10) ymax = 10;
  pb__plot_panel(&L, 1, -0.5, nf - 0.5, 0, ymax, 0, "hand-off overhead; label: speed over peer", PB__COL_FORMAT,
        "share of path to torch (%)", formats, nf, fcol);
  for (int f = 0; f < nf; f++) {
    pb__report_filter fl = {PB__COL_FORMAT, formats[f], 0};
    double a = pb__report_median(t, T4_DLPACK_PCT, &fl, 1, NULL);
    double b = pb__report_median(t, T4_CONVERSION_PCT, &fl, 1, NULL);
    double ratio = pb__report_median(t, T4_OVER_PEER, &fl, 1, NULL);
    if (a >= 0) pb__plot_rect(f - 0.34, f - 0.02, 0, a, fcol[f], 0);
    if (b >= 0) pb__plot_rect(f + 0.02, f + 0.34, 0, b, fcol[f], 1);
    if (isfinite(ratio)) {
      char lab[32];
      snprintf(lab, sizeof lab, "%.2fx", ratio);
      double top = (a > b ? a : b);
      if (!isfinite(top)) top = 0;
      pb__plot_color(0x000000);
      plptex(f, top + ymax * 0.04, 1, 0, 0.5, lab);
    }
  }
  pb__plot_legend_item it[10];
  int n = 0;
  for (int s = 0; s < 7; s++) it[n++] = (pb__plot_legend_item){0, stage_rgb[s], 0, 0, 0, stage_name[s]};
  it[n++] = (pb__plot_legend_item){0, 0x777777, 0, 0, 0, "DLPack share of pipebench->torch"};
  it[n++] = (pb__plot_legend_item){1, 0x777777, 0, 0, 0, "numpy->torch share of peer path"};
  pb__plot_legend(&L, it, n, 5.4 * pb__plot_chr_y(&L, PB__PL_TXT));
}

static int t4_plot(const pb_table *t, const char *png, struct pb_error *err) {
  return pb__plot_png(png, 1800, 860, t4_draw, t, err);
}

static void t4_answer_peer(pb__report_doc *d, const pb_table *t4) {
  char text[1024] = "";
  const char *formats[PB__RP_MAX_DISTINCT];
  int nf;
  nf = t4 ? pb__report_distinct_str(t4, PB__COL_FORMAT, NULL, 0, formats, PB__RP_MAX_DISTINCT) : 0;
  for (int f = 0; f < nf; f++) {
    pb__report_filter fl = {PB__COL_FORMAT, formats[f], 0};
    double r = pb__report_median(t4, T4_OVER_PEER, &fl, 1, NULL);
    if (!isfinite(r)) continue;
    size_t u = strlen(text);
    snprintf(text + u, sizeof text - u, "%s%s %.2fx", u ? ", " : "", formats[f], r);
  }
  if (text[0])
    pb__report_li(d, "One sample to a torch tensor, pipebench (DLPack) against numpy + torch.from_numpy (track 4, speed ratio, above 1 means pipebench is faster): %s.",
           text);
}

static void t4_section(pb__report_doc *d, const pb_table *t, char (*cells)[64]) {
  pb__report_p(d, "Where one sample's time goes (medians per stage), and the hand-off to torch: DLPack share of pipebench's path, numpy-to-torch conversion share of the peer's path.");
  static const char *const head[] = {PB__COL_FORMAT, "read", "decompress", "decode", "convert", "transform", "DLPack", "DLPack share", "peer conversion share", "pipebench / peer"};
  static const char *const cols[] = {"read_p50", "decompress_p50", "decode_p50", "convert_p50", "transform_p50", "dlpack_p50"};
  int nc = 10, n = 0;
  for (int c = 0; c < nc; c++) snprintf(cells[n++], 64, "%s", head[c]);
  const char *formats[PB__RP_MAX_DISTINCT];
  int nf = pb__report_distinct_str(t, PB__COL_FORMAT, NULL, 0, formats, PB__RP_MAX_DISTINCT);
  for (int f = 0; f < nf && n + nc <= PB__RP_MAXCELLS; f++) {
    pb__report_filter fl = {PB__COL_FORMAT, formats[f], 0};
    snprintf(cells[n++], 64, "%s", formats[f]);
    for (int s = 0; s < 6; s++) pb__report_fmt_time(pb__report_median(t, cols[s], &fl, 1, NULL), cells[n++], 64);
    snprintf(cells[n++], 64, "%.1f%%", pb__report_median(t, T4_DLPACK_PCT, &fl, 1, NULL));
    snprintf(cells[n++], 64, "%.1f%%", pb__report_median(t, T4_CONVERSION_PCT, &fl, 1, NULL));
    snprintf(cells[n++], 64, "%.2fx", pb__report_median(t, T4_OVER_PEER, &fl, 1, NULL));
  }
  pb__report_table(d, cells, n / nc, nc);
}

/* ---- the descriptor -------------------------------------------------------------------------- */

static const char *const t4_options[] = {"repeats", "warmup", "samples", "python", "library", "cold", "seed", "device", NULL};

const pb__track pb__track4 = {
    .name = "stage breakdown and torch hand-off",
    .options = t4_options,
    .validate = NULL,
    .measure = t4_run,
    .view = {
        .id = "4",
        .title = "Track 4: stage breakdown and torch hand-off",
        .table = "pipebench_track4",
        .schema = t4_schema,
        .plot_needs = "read_p50",
        .plot = t4_plot,
        .answer = NULL,
        .answer_peer = t4_answer_peer,
        .section = t4_section,
    },
};
