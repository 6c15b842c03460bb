/* pipebench calibrate: measure this machine's limits and save them. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "pipebench/calibrate.h"
#include "pipebench/results.h"

static const cli_opt opts[] = {
    {"json", NULL, "print JSON on stdout instead of a table"},
    {"out", "FILE", "where to save the JSON (default results/calibration.json)"},
    {"dir", "DIR", "folder for the scratch file of the read test (default $TMPDIR or /tmp)"},
    {"size-mb", "N", "buffer and file size in MiB (default 256)"},
    {"rounds", "N", "measured rounds per quantity (default 5)"},
    {"threads", "N", "threads for the multi-threaded copy (default: all cores)"},
    {"no-matmul", NULL, "skip the matrix-multiply peak"},
    {"no-gpu", NULL, "skip the GPU (copy bandwidths and cuBLASLt peaks on cuda)"},
    {NULL, NULL, NULL},
};

static void on_progress(void *ctx, const char *what, int step, int steps) {
  (void)ctx;
  if (cli_progress_enabled()) {
    fprintf(stderr, "\r\033[Kcalibrate: %s %d/%d", what, step, steps);
    fflush(stderr);
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
  pb_calibrate_params p = PB_CALIBRATE_PARAMS_DEFAULTS;
  long size_mb, rounds, threads;
  PB_RETURN_NOT_OK(cli_get_long(a, "calibrate", "size-mb", 256, 1, 65536, &size_mb));
  PB_RETURN_NOT_OK(cli_get_long(a, "calibrate", "rounds", 5, 1, 1000, &rounds));
  PB_RETURN_NOT_OK(cli_get_long(a, "calibrate", "threads", 0, 0, 256, &threads));
  p.memory_bytes = p.file_bytes = (size_t)size_mb << 20;
  p.rounds = (int)rounds;
  p.threads = (int)threads;
  p.dir = cli_get(a, "dir");
  p.matmul = !cli_has(a, "no-matmul");
  p.gpu = !cli_has(a, "no-gpu");
  p.progress = on_progress;
  const char *out = cli_get(a, "out") ? cli_get(a, "out") : "results/calibration.json";
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
               "one line saying why CUDA is unavailable.",
    .opts = opts,
    .max_pos = 0,
    .run = run,
};
