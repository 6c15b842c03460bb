/* Plots and report: a small results folder written with the table API, the PNGs decoded and
 * checked (size, not blank), the report's first answer, then `pipebench report` on a folder
 * with a corrupt track 2 table and on a missing folder. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "pipebench/report.h"
#include "pipebench/results.h"

#include "check.h"

/* ---- a minimal PNG reader: 8-bit RGB or RGBA, non-interlaced (what cairo writes) ---------- */

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)sz + 1);
  *n = fread(b, 1, (size_t)sz, f);
  fclose(f);
  b[*n] = 0;
  return b;
}

/* Decodes path; returns 0 and the size, the pixel variance (over all channels) and the share
 * of pixels that are not white. */
static int png_stats(const char *path, int *w, int *h, double *var, double *ink) {
  size_t n = 0;
  unsigned char *b = slurp(path, &n);
  if (b == NULL || n < 33 || memcmp(b, "\x89PNG\r\n\x1a\n", 8) != 0) {
    free(b);
    return -1;
  }
  *w = (int)be32(b + 16);
  *h = (int)be32(b + 20);
  int depth = b[24], ctype = b[25];
  int ch = ctype == 2 ? 3 : ctype == 6 ? 4 : 0;
  if (depth != 8 || ch == 0 || b[28] != 0) {
    free(b);
    return -2;
  }
  size_t stride = (size_t)*w * (size_t)ch, raw_n = (stride + 1) * (size_t)*h;
  unsigned char *raw = malloc(raw_n);
  z_stream z;
  memset(&z, 0, sizeof z);
  inflateInit(&z);
  z.next_out = raw;
  z.avail_out = (uInt)raw_n;
  for (size_t p = 8; p + 12 <= n;) {
    uint32_t len = be32(b + p);
    if (memcmp(b + p + 4, "IDAT", 4) == 0) {
      z.next_in = b + p + 8;
      z.avail_in = len;
      inflate(&z, Z_NO_FLUSH);
    }
    p += 12 + len;
  }
  int ok = z.total_out == raw_n;
  inflateEnd(&z);
  free(b);
  if (!ok) {
    free(raw);
    return -3;
  }
  unsigned char *prev = calloc(stride, 1), *cur = malloc(stride);
  double sum = 0, sum2 = 0;
  size_t nonwhite = 0;
  for (int y = 0; y < *h; y++) {
    const unsigned char *row = raw + (size_t)y * (stride + 1);
    int f = row[0];
    for (size_t i = 0; i < stride; i++) {
      int a = i >= (size_t)ch ? cur[i - (size_t)ch] : 0, up = prev[i];
      int c = i >= (size_t)ch ? prev[i - (size_t)ch] : 0, x = row[1 + i], pred = 0;
      if (f == 1) pred = a;
      else if (f == 2) pred = up;
      else if (f == 3) pred = (a + up) / 2;
      else if (f == 4) {
        int pp = a + up - c, pa = abs(pp - a), pb = abs(pp - up), pc = abs(pp - c);
        pred = pa <= pb && pa <= pc ? a : pb <= pc ? up : c;
      }
      cur[i] = (unsigned char)(x + pred);
    }
    for (int i = 0; i < *w; i++) {
      int white = 1;
      for (int k = 0; k < 3; k++) {
        double v = cur[(size_t)i * (size_t)ch + (size_t)k];
        sum += v;
        sum2 += v * v;
        white &= v > 250;
      }
      nonwhite += !white;
    }
    memcpy(prev, cur, stride);
  }
  double cnt = 3.0 * *w * *h;
  *var = sum2 / cnt - (sum / cnt) * (sum / cnt);
  *ink = (double)nonwhite / ((double)*w * *h);
  free(prev);
  free(cur);
  free(raw);
  return 0;
}

/* ---- a revs results file ------------------------------------------------------------------ */

/* Two experiments, a baseline and two branches: one clearly slower, one like the baseline. */
static void write_revs(const char *path) {
  FILE *f = fopen(path, "wb");
  if (f == NULL) {
    EXPECT_FAIL("cannot write %s", path);
    return;
  }
  static const char *const branches[] = {"main", "slow", "same"}, *const exps[] = {"tiny", "embed"};
  fputs("[", f);
  for (int e = 0; e < 2; e++)
    for (int b = 0; b < 3; b++) {
      double k = b == 1 ? 1.6 : 1.0;
      fprintf(f, "%s{\"branch\": \"%s\", \"experiment\": \"%s\", \"success\": true, \"error\": null, "
                 "\"git_info\": {\"branch\": \"%s\"}, \"task\": {\"kind\": \"command\"}, "
                 "\"samples\": {\"elapsed_seconds\": [",
              e || b ? ", " : "", branches[b], exps[e], branches[b]);
      for (int r = 0; r < 6; r++) fprintf(f, "%s%.4f", r ? ", " : "", k * (1.0 + 0.01 * r));
      fputs("], \"throughput_samples_per_second\": [", f);
      for (int r = 0; r < 6; r++) fprintf(f, "%s%.4f", r ? ", " : "", 100.0 / k * (1.0 + 0.01 * r));
      fputs("], \"peak_memory_mb\": [", f);
      for (int r = 0; r < 6; r++) fprintf(f, "%s%.4f", r ? ", " : "", 150.0 + r);
      fputs("]}}", f);
    }
  fputs("]\n", f);
  fclose(f);
}

/* ---- a small results folder ------------------------------------------------------------- */

static const char *const formats[] = {"raw", "tiff", "ome-zarr"};

static void common(pb_table *t, int f, int r) {
  pb_table_append_row(t);
  pb_table_set_str(t, "format", formats[f]);
  pb_table_set_str(t, "cache_state", "warm");
  pb_table_set_i64(t, "repeat", r);
}

static void write_tables(const char *dir) {
  char path[512];
  struct pb_error e = {{0}};
  pb_table *t;
  /* track 1: raw is fastest in random access */
  pb_table_new(&t);
  pb_table_set_meta(t, "pipebench.cache_state", "warm");
  static const char *const pats[] = {"random", "sequential"}, *const trs[] = {"none", "normalize"},
                           *const caches[] = {"none", "preload"};
  for (int f = 0; f < 3; f++)
    for (int c = 0; c < 2; c++)
      for (int a = 0; a < 2; a++)
        for (int k = 0; k < 2; k++)
          for (int r = 0; r < 2; r++) {
            common(t, f, r);
            pb_table_set_str(t, "access_pattern", pats[a]);
            pb_table_set_str(t, "transform", trs[k]);
            pb_table_set_str(t, "cache", caches[c]);
            pb_table_set_i64(t, "num_samples", 100);
            /* ome-zarr's two rounds differ by 10% (CV 6.7%), the others' by 1% */
            double p50 = 20e-6 * (1 + f) * (1 + k) / (1 + c) * (1 + (f == 2 ? 0.1 : 0.01) * r);
            pb_table_set_f64(t, "p50", p50);
            pb_table_set_f64(t, "p95", p50 * 1.5);
            pb_table_set_f64(t, "p99", p50 * 3);
            pb_table_set_bool(t, "unstable", r == 1 && f == 2);
            pb_table_set_f64(t, "samples_per_sec", 1.0 / p50);
            pb_table_set_f64(t, "bytes_read_mean", 20000);
          }
  snprintf(path, sizeof path, "%s/data/pipebench_track1.parquet", dir);
  EXPECT_OK(pb_table_write(t, path, PB_SINK_AUTO, &e), &e);
  pb_table_free(t);
  /* track 2: ome-zarr is fastest in bulk; a torch peer over tiff */
  pb_table_new(&t);
  static const int bss[] = {1, 4, 16}, ws[] = {0, 2};
  for (int f = 0; f < 3; f++)
    for (int l = 0; l < (f == 1 ? 2 : 1); l++)
      for (int b = 0; b < 3; b++)
        for (int w = 0; w < 2; w++)
          for (int r = 0; r < 2; r++) {
            common(t, f, r);
            pb_table_set_str(t, "loader", l ? "torch-dataloader" : "pipebench");
            pb_table_set_str(t, "cache", "none");
            pb_table_set_i64(t, "batch_size", bss[b]);
            pb_table_set_i64(t, "num_workers", ws[w]);
            double sps = (l ? 300.0 : 5000.0 * (f + 1)) * (1 + b) * (1 + w);
            pb_table_set_f64(t, "samples_per_sec", sps);
            pb_table_set_f64(t, "first_batch_time", l ? 0.2 : 0.001 * (1 + w));
            pb_table_set_f64(t, "mb_per_sec", sps * 0.04);
            pb_table_set_f64(t, "memcpy_fraction", sps * 0.04 / 5000);
            pb_table_set_bool(t, "batch_time_unstable", 0);
            if (l) pb_table_set_f64(t, "pipebench_over_peer", 5000.0 * 2 / 300.0);
          }
  snprintf(path, sizeof path, "%s/data/pipebench_track2.parquet", dir);
  EXPECT_OK(pb_table_write(t, path, PB_SINK_AUTO, &e), &e);
  snprintf(path, sizeof path, "%s/data/pipebench_track2.csv", dir);
  EXPECT_OK(pb_table_write(t, path, PB_SINK_AUTO, &e), &e);
  pb_table_free(t);
  /* track 3: tiff without cache is data-bound */
  pb_table_new(&t);
  for (int f = 0; f < 3; f++)
    for (int c = 0; c < 2; c++)
      for (int r = 0; r < 2; r++) {
        common(t, f, r);
        pb_table_set_str(t, "cache", caches[c]);
        pb_table_set_str(t, "model", "embed");
        pb_table_set_str(t, "mode", "inference");
        pb_table_set_i64(t, "batch_size", 16);
        pb_table_set_i64(t, "num_workers", 2);
        double wait = f == 1 && c == 0 ? 0.03 : 0.001;
        pb_table_set_f64(t, "step_time_mean", 0.08 + wait);
        pb_table_set_f64(t, "step_time_p50", 0.08 + wait);
        pb_table_set_f64(t, "data_wait_mean", wait);
        pb_table_set_f64(t, "data_wait_fraction", wait / (0.08 + wait));
        pb_table_set_f64(t, "accelerator_utilisation", 0.08 / (0.08 + wait));
        pb_table_set_f64(t, "images_per_sec", 16 / (0.08 + wait));
        pb_table_set_bool(t, "step_time_unstable", 0);
      }
  snprintf(path, sizeof path, "%s/data/pipebench_track3.parquet", dir);
  EXPECT_OK(pb_table_write(t, path, PB_SINK_AUTO, &e), &e);
  pb_table_free(t);
  /* track 4 */
  pb_table_new(&t);
  for (int f = 0; f < 3; f++)
    for (int r = 0; r < 2; r++) {
      common(t, f, r);
      pb_table_set_f64(t, "read_p50", 20e-6 * (f + 1));
      pb_table_set_f64(t, "decompress_p50", f == 2 ? 8e-6 : 0);
      pb_table_set_f64(t, "decode_p50", 1e-6);
      pb_table_set_f64(t, "convert_p50", 1.2e-6);
      pb_table_set_f64(t, "transform_p50", 2e-6);
      pb_table_set_f64(t, "other_p50", 1e-6);
      pb_table_set_f64(t, "dlpack_p50", 4e-6);
      pb_table_set_f64(t, "dlpack_overhead_pct", 8.0 + f);
      pb_table_set_f64(t, "conversion_overhead_pct", 20.0 - f);
      pb_table_set_f64(t, "pipebench_over_peer", 1.5 + f * 0.2);
    }
  snprintf(path, sizeof path, "%s/data/pipebench_track4.parquet", dir);
  EXPECT_OK(pb_table_write(t, path, PB_SINK_AUTO, &e), &e);
  pb_table_free(t);
  /* an infer CSV */
  pb_table_new(&t);
  for (int fw = 0; fw < 2; fw++)
    for (int b = 1; b <= 8; b *= 2) {
      pb_table_append_row(t);
      pb_table_set_str(t, "framework", fw ? "torch" : "onednn");
      pb_table_set_str(t, "model", "embed");
      pb_table_set_str(t, "device_type", "cpu");
      pb_table_set_i64(t, "batch_size", b);
      pb_table_set_f64(t, "latency_p50_ms", 2.0 * b * (1 + fw));
      pb_table_set_f64(t, "throughput_ips", 500.0 / (1 + fw));
    }
  snprintf(path, sizeof path, "%s/data/benchmark_results_20260101_000000.csv", dir);
  EXPECT_OK(pb_table_write(t, path, PB_SINK_CSV, &e), &e);
  pb_table_free(t);
  const char *summary = "{\"kind\":\"pipebench.run\",\"env\":{\"hostname\":\"test\"},"
                        "\"calibration\":{\"memcpy_mt_gbps\":5.0,\"read_warm_gbps\":8.0,\"read_cold_gbps\":2.0}}";
  snprintf(path, sizeof path, "%s/data/pipebench_summary.json", dir);
  EXPECT_OK(pb_write_file_atomic(path, summary, strlen(summary), &e), &e);
}

static void check_png(const char *dir, const char *name, int want_w) {
  char path[512];
  snprintf(path, sizeof path, "%s/images/%s", dir, name);
  int w = 0, h = 0;
  double var = 0, ink = 0;
  int rc = png_stats(path, &w, &h, &var, &ink);
  if (rc != 0) {
    EXPECT_FAIL("%s: not a readable PNG (%d)", path, rc);
    return;
  }
  EXPECT_EQ(w, want_w);
  EXPECT(h >= 600 && h <= 2400);
  if (!(var > 500 && ink > 0.02 && ink < 0.8)) {
    EXPECT_FAIL("%s: looks blank or flooded: variance %.1f, non-white share %.3f", path, var,
                ink);
  }
}

static int file_has(const char *path, const char *needle) {
  size_t n = 0;
  unsigned char *b = slurp(path, &n);
  int found = b != NULL && strstr((const char *)b, needle) != NULL;
  free(b);
  return found;
}

/* Runs the CLI with stderr into err_path; returns its exit code. */
static int cli(const char *args, const char *err_path) {
  const char *exe = getenv("PIPEBENCH_CLI") ? getenv("PIPEBENCH_CLI") : PIPEBENCH_CLI;
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' %s >/dev/null 2>'%s'", exe, args, err_path);
  int st = system(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void) {
  char dir[] = "/tmp/pb-report-XXXXXX";
  if (mkdtemp(dir) == NULL) return 1;
  char sub[600];
  snprintf(sub, sizeof sub, "%s/data", dir);
  mkdir(sub, 0777);
  write_tables(dir);

  struct pb_error e = {{0}};
  int n = 0;
  EXPECT_OK(pb_report_plots(dir, &n, &e), &e);
  EXPECT_EQ(n, 5);
  check_png(dir, "pipebench_track1.png", 1800);
  check_png(dir, "pipebench_track2.png", 1800);
  check_png(dir, "pipebench_track3.png", 1800);
  check_png(dir, "pipebench_track4.png", 1800);
  check_png(dir, "pipebench_infer.png", 1800);
  EXPECT_OK(pb_report_write(dir, &e), &e);
  char md[600], html[600];
  snprintf(md, sizeof md, "%s/report.md", dir);
  snprintf(html, sizeof html, "%s/report.html", dir);
  EXPECT(file_has(md, "Fastest format for random access: raw"));
  EXPECT(file_has(md, "Fastest format for bulk loading: ome-zarr"));
  EXPECT(file_has(md, "data-bound** (track 3"));
  EXPECT(file_has(md, "tiff/cache none"));
  EXPECT(file_has(md, "Spread within a round, track 1: 8 of 48 rows"));
  EXPECT(file_has(md, "Round to round (track 1, p50 per sample): 8 of 24 configurations vary by more than 5%"));
  EXPECT(file_has(html, "Fastest format for random access: raw"));
  EXPECT(file_has(html, "src=\"data:image/png;base64,iVBORw0KGgo"));

  /* the infer plot on its own */
  char png[600], path_revs_dir[600];
  snprintf(png, sizeof png, "%s/infer.png", dir);
  EXPECT_OK(pb_report_plot_infer(sub, png, &e), &e);
  EXPECT(access(png, F_OK) == 0);

  /* the revs plot: default place next to the JSON, named after it; one row per (experiment,
   * metric, branch), each branch's rows under one heading */
  char revs[600];
  snprintf(revs, sizeof revs, "%s/revs/revs.json", dir);
  snprintf(path_revs_dir, sizeof path_revs_dir, "%s/revs", dir);
  mkdir(path_revs_dir, 0777);
  write_revs(revs);
  EXPECT_OK(pb_report_plot_revs(revs, NULL, &e), &e);
  {
    char rpng[700];
    snprintf(rpng, sizeof rpng, "%s/images/pipebench_revs_revs.png", path_revs_dir);
    int w = 0, h = 0;
    double var = 0, ink = 0;
    int prc = png_stats(rpng, &w, &h, &var, &ink);
    EXPECT_EQ(prc, 0);
    EXPECT_EQ(w, 1800);
    /* 2 experiments x 3 metrics x 2 branches = 12 rows, and a heading slot for each of the 4
     * (experiment, branch) groups: a heading is never squeezed into a row */
    EXPECT_EQ(h, 360 + 44 * (12 + 4));
    if (!(var > 500 && ink > 0.02 && ink < 0.8)) {
      EXPECT_FAIL("%s: looks blank or flooded: variance %.1f, non-white share %.3f", rpng, var,
                  ink);
    }
  }
  /* an explicit path, another baseline and factor */
  snprintf(png, sizeof png, "%s/revs_same.png", dir);
  EXPECT_OK(pb_report_plot_revs_ex(revs, png, "same", 1.2, &e), &e);
  EXPECT(access(png, F_OK) == 0);
  /* not a revs file; an unknown baseline */
  snprintf(png, sizeof png, "%s/revs_bad.png", dir);
  snprintf(path_revs_dir, sizeof path_revs_dir, "%s/data/pipebench_summary.json", dir);
  EXPECT(pb_report_plot_revs(path_revs_dir, png, &e) == PB_EFORMAT);
  EXPECT(pb_report_plot_revs_ex(revs, png, "nope", 0, &e) == PB_ENOTFOUND);
  EXPECT(access(png, F_OK) != 0);

  /* corrupt track 2 (both twins): named on stderr, the others still drawn, exit 0 */
  char path[600], errp[600], args[1400];
  snprintf(path, sizeof path, "%s/data/pipebench_track2.parquet", dir);
  FILE *f = fopen(path, "wb");
  fputs("PAR1 this is not parquet", f);
  fclose(f);
  snprintf(path, sizeof path, "%s/data/pipebench_track2.csv", dir);
  f = fopen(path, "wb");
  fputs("\x01\x02\x03 garbage \"unterminated\n1,2", f);
  fclose(f);
  snprintf(path, sizeof path, "%s/images/pipebench_track1.png", dir);
  unlink(path);
  snprintf(errp, sizeof errp, "%s/stderr.txt", dir);
  snprintf(args, sizeof args, "report '%s'", dir);
  int rc = cli(args, errp);
  EXPECT_EQ(rc, 0);
  EXPECT(file_has(errp, "pipebench_track2"));
  EXPECT(file_has(errp, "wrote"));
  EXPECT(access(path, F_OK) == 0); /* track 1 redrawn */
  EXPECT(file_has(md, "Track 2 could not be read"));
  if (check_failures()) {
    size_t sz;
    unsigned char *t = slurp(errp, &sz);
    fprintf(stderr, "stderr of report:\n%s\n", t ? (char *)t : "");
    free(t);
  }

  /* the library API on the same folder: others drawn, the skip recorded */
  e.message[0] = '\0';
  EXPECT_OK(pb_report_plots(dir, &n, &e), &e);
  EXPECT_EQ(n, 4);
  EXPECT(strstr(e.message, "pipebench_track2") != NULL);

  /* a missing folder: exit 2 with a message */
  snprintf(args, sizeof args, "report '%s/nope'", dir);
  rc = cli(args, errp);
  EXPECT_EQ(rc, 2);
  EXPECT(file_has(errp, "nope"));

  /* a folder without tables: exit 2 */
  snprintf(args, sizeof args, "report '%s/images'", dir);
  rc = cli(args, errp);
  EXPECT_EQ(rc, 2);

  if (check_failures() == 0) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  } else {
    fprintf(stderr, "kept %s for a look\n", dir);
  }
  printf("%s (%d failures)\n", check_failures() ? "FAIL" : "ok", check_failures());
  return check_failures() ? 1 : 0;
}
