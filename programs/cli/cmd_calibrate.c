/* pipebench calibrate: measure this machine's limits and save them. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "pipebench/calibrate.h"
#include "pipebench/results.h"

#define P pb_calibrate_params
static const P calibrate_defaults = PB_CALIBRATE_PARAMS_DEFAULTS;

/* --size-mb N: the copy buffer and the scratch file, both N MiB. */
static int set_size_mb(void *params, void *field, const cli_opt *o, const char *cmd,
                       const char *value) {
  pb_calibrate_params *p = params;
  (void)field, (void)o, (void)cmd;
  p->memory_bytes = p->file_bytes = (size_t)strtol(value, NULL, 10) << 20; /* checked before */
  return CLI_OK;
}

static void show_size_mb(const void *params, const cli_opt *o, char *buf, size_t size) {
  (void)o;
  snprintf(buf, size, "%zu", ((const pb_calibrate_params *)params)->memory_bytes >> 20);
}

/* One line per option (docs/options.md). */
static const cli_opt opts[] = {
    {.name = "json", .type = CLI_FLAG, .help = "print JSON on stdout instead of a table"},
    {.name = "out", .arg = "FILE", .type = CLI_STRING, .dflt = "results/calibration.json", .help = "where to save the JSON (default {})"},
    {.name = "dir", .arg = "DIR", .type = CLI_STRING, CLI_AT(P, dir), .help = "folder for the scratch file of the read test (default $TMPDIR or /tmp)"},
    {.name = "size-mb", .arg = "N", .type = CLI_INT, CLI_AT(P, memory_bytes), .lo = 1, .hi = 65536, .set = set_size_mb, .show = show_size_mb, .help = "buffer and file size in MiB (default {})"},
    {.name = "rounds", .arg = "N", .type = CLI_INT, CLI_AT(P, rounds), .lo = 1, .hi = 1000, .help = "measured rounds per quantity (default {})"},
    {.name = "threads", .arg = "N", .type = CLI_INT, CLI_AT(P, threads), .lo = 0, .hi = 256, .help = "threads for the multi-threaded copy (default: all cores)"},
    {.name = "no-matmul", .type = CLI_FLAG, CLI_AT(P, matmul), .flags = CLI_NEGATE, .help = "skip the matrix-multiply peak"},
    {.name = "no-gpu", .type = CLI_FLAG, CLI_AT(P, gpu), .flags = CLI_NEGATE, .help = "skip the GPU (copy bandwidths and cuBLASLt peaks on cuda)"},
    {.name = "jpeg-images", .arg = "N", .type = CLI_INT, CLI_AT(P, jpeg_images), .lo = 0, .hi = 100000, .help = "JPEG decoding (decode and 224x224 evaluation crop) on a standard set of N photo-like 500x375 JPEGs, on the CPU's threads and on the GPU with nvJPEG; 0 skips it (default {})"},
    {.name = "endpoint", .arg = "URL", .type = CLI_STRING, CLI_AT(P, endpoint), .help = "also measure the endpoint of this remote object (http(s):// or s3://): round trip and bandwidth"},
    {.name = "insecure", .type = CLI_FLAG, CLI_AT(P, insecure), .help = "--endpoint over https: accept a certificate that does not verify"},
    {.name = NULL},
};

static void on_progress(void *ctx, const char *what, int step, int steps) {
  (void)ctx;
  if (cli_progress_enabled()) {
    fprintf(stderr, "\r\033[Kcalibrate: %s %d/%d", what, step, steps);
    fflush(stderr);
  }
}

static void endpoint_rows(const pb_endpoint_calibration *e) {
  printf("endpoint: %s (%.1f MB object, %.1f MB a round, %lld requests, %.1f s)\n", e->location,
         (double)e->object_bytes / 1e6, (double)e->round_bytes / 1e6, (long long)e->requests,
         e->seconds);
  const struct {
    const char *name, *unit;
    const pb_summary *s;
  } r[] = {{"round trip (1-byte read)", "ms", &e->rtt_ms},
           {"bandwidth, 1 stream", "MB/s", &e->single_mbps},
           {"bandwidth, many streams", "MB/s", &e->many_mbps}};
  for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
    printf("  %-28s %12.2f %-8s n=%zu  min %.2f  max %.2f", r[i].name, r[i].s->p50, r[i].unit,
           r[i].s->n, r[i].s->min, r[i].s->max);
    if (i == 2) printf("  (%d in flight)", e->streams);
    printf("\n");
  }
}

static void row(const char *name, const pb_calib_value *v, const char *unit) {
  if (!isfinite(v->value)) {
    printf("  %-28s %12s\n", name, "n/a");
    return;
  }
  printf("  %-28s %12.2f %-8s", name, v->value, unit);
  if (v->s.n > 1)
    printf(" n=%zu  min %.2f  max %.2f  cv %.1f%%%s", v->s.n, v->s.min, v->s.max, 100.0 * v->s.cv,
           v->s.unstable ? "  UNSTABLE" : "");
  printf("\n");
}

/* The folder of the JSON is made and must take a new file (a file made and removed there), so
 * that a folder that takes none fails at once, not after the measuring. */
static int check_out(const char *out) {
  if (cli_mkdir_parent(out) != 0)
    return cli_fail("calibrate", "%s: cannot make its folder: %s", out, strerror(errno));
  char probe[4200];
  const char *slash = strrchr(out, '/');
  snprintf(probe, sizeof probe, "%.*s.pipebench-probe-XXXXXX", slash ? (int)(slash - out + 1) : 0, out);
  int fd = mkstemp(probe);
  if (fd < 0) return cli_fail("calibrate", "%s: cannot write there: %s", out, strerror(errno));
  close(fd);
  unlink(probe);
  return CLI_OK;
}

static int run(const cli_args *a) {
  pb_calibrate_params p = calibrate_defaults;
  PB_RETURN_NOT_OK(cli_fill(a, &p));
  p.progress = on_progress;
  const char *out = cli_value(a, "out");
  if (check_out(out) != CLI_OK) return CLI_FAIL; /* before the minutes of measuring */

  pb_calibration cal;
  struct pb_error err = {{0}};
  int rc = pb_calibrate(&p, &cal, &err);
  if (cli_progress_enabled()) fprintf(stderr, "\r\033[K");
  if (rc != PB_OK) return cli_fail("calibrate", "%s", err.message);
  char *json = pb_calibration_to_json(&cal);
  if (json == NULL) return cli_fail("calibrate", "out of memory");
  cli_mkdir_parent(out);
  rc = pb_write_file_atomic(out, json, strlen(json), &err);
  if (cli_has(a, "json")) {
    printf("%s\n", json);
  } else {
    printf("pipebench calibrate on %s (%s, %d cores), %.1f s\n", cal.env.hostname,
           cal.env.cpu_model, cal.env.cpu_cores, cal.seconds);
    row("memory copy, 1 thread", &cal.memcpy_gbps, "GB/s");
    char label[64];
    snprintf(label, sizeof label, "memory copy, %d threads", cal.memcpy_threads);
    row(label, &cal.memcpy_mt_gbps, "GB/s");
    row("file read, warm cache", &cal.read_warm_gbps, "GB/s");
    row(cal.cold_evicted ? "file read, cold (evicted)" : "file read, cold (NOT evicted)",
        &cal.read_cold_gbps, "GB/s");
    row("zstd decompress, 1 thread", &cal.zstd_gbps, "GB/s");
    row("blosc lz4 decompress, 1 thr", &cal.blosc_gbps, "GB/s");
    row("matmul float32 peak", &cal.matmul_f32_gflops, "GFLOP/s");
    row("matmul bfloat16 peak", &cal.matmul_bf16_gflops, "GFLOP/s");
    printf("  %-28s %12.1f ns\n", "timer overhead", cal.timer_overhead_ns);
    printf("  %-28s %12.1f ns\n", "timer resolution", cal.timer_resolution_ns);
    if (cal.gpu_measured) {
      printf("cuda: %s (compute capability %d.%d, %d SMs, %.1f GiB); %s\n", cal.gpu_name,
             cal.gpu_cc_major, cal.gpu_cc_minor, cal.gpu_multiprocessors,
             (double)cal.gpu_memory_bytes / (double)(1 << 30), cal.gpu_versions);
      row("GPU matmul bfloat16 peak", &cal.gpu_bf16_gflops, "GFLOP/s");
      row("GPU matmul tf32 peak", &cal.gpu_tf32_gflops, "GFLOP/s");
      row("GPU host->device, pinned", &cal.gpu_h2d_pinned_gbps, "GB/s");
      row("GPU host->device, pageable", &cal.gpu_h2d_pageable_gbps, "GB/s");
      row("GPU device->host, pinned", &cal.gpu_d2h_pinned_gbps, "GB/s");
      row("GPU device->device (r+w)", &cal.gpu_d2d_gbps, "GB/s");
    } else if (cal.gpu_why[0]) {
      printf("cuda: unavailable: %s\n", cal.gpu_why);
    }
    if (cal.jpeg_images > 0) {
      printf("jpeg: %d photo-like JPEGs of about 500x375 (%.1f MB), decode and 224x224 "
             "evaluation crop\n", cal.jpeg_images, cal.jpeg_set_bytes / 1e6);
      snprintf(label, sizeof label, "CPU decode, %d threads", cal.jpeg_threads);
      row(label, &cal.jpeg_cpu_ips, "images/s");
      row("GPU decode (nvJPEG)", &cal.jpeg_gpu_ips, "images/s");
      if (cal.jpeg_gpu_why[0]) printf("  GPU decode not measured: %s\n", cal.jpeg_gpu_why);
      double c = cal.jpeg_cpu_ips.value, g = cal.jpeg_gpu_ips.value;
      if (c > 0 && g > 0) /* each measured alone: together they can do at most the sum */
        printf("  both at once: at most %.0f images/s, %.0f%% of each batch on the CPU to "
               "balance them (run --decode auto)\n", c + g, 100.0 * c / (c + g));
    }
    if (cal.endpoint_measured) endpoint_rows(&cal.endpoint);
  }
  free(json);
  if (rc != PB_OK) return cli_fail("calibrate", "%s", err.message);
  if (!cli_has(a, "json")) printf("saved %s\n", out);
  return CLI_OK;
}

const cli_command cli_cmd_calibrate = {
    .name = "calibrate",
    .summary = "measure this machine's limits (memory copy, file read, decompression, timer)",
    .usage = "[--json] [--out FILE] [options]",
    .details = "Later throughputs are reported as a fraction of these limits. The cold file read\n"
               "evicts the scratch file from the page cache with posix_fadvise(DONTNEED) before\n"
               "each pass and checks with mincore that it worked. Where CUDA is usable it also\n"
               "measures the GPU: copy bandwidths (host<->device pinned and pageable,\n"
               "device<->device) and the cuBLASLt bfloat16 and TF32 peaks; elsewhere it prints\n"
               "one line saying why CUDA is unavailable. JPEG decoding is measured on a\n"
               "standard set (--jpeg-images, written by gen into a temporary folder and removed):\n"
               "the images per second of libjpeg-turbo on all threads and, where nvJPEG is\n"
               "usable, of the GPU, each decoding and cutting the 224x224 evaluation crop.",
    .opts = opts,
    .defaults = &calibrate_defaults,
    .params = "pb_calibrate_params",
    .max_pos = 0,
    .run = run,
};
