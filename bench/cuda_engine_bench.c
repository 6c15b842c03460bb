/* GPU engine throughput and the GPU's limits, measured in one process: for each model, dtype and
 * batch size, images/s of pb_engine_forward (CUDA graph replays, synchronised per batch; the
 * host clock around forward + synchronize, median and p95 over the timed batches after warm-up),
 * then calibrate's GPU numbers (cuBLASLt peaks, copy bandwidths). Usage:
 *   cuda_engine_bench peaks
 *   cuda_engine_bench MODEL DTYPE BATCH [SECONDS] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipebench/engine.h"

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int peaks(void) {
  struct pb_error err = {{0}};
  pb_gpu_info gi;
  if (pb_engine_gpu_info(&gi, &err) != 0) {
    printf("cuda unavailable: %s\n", err.message);
    return 2;
  }
  printf("gpu: %s, cc %d.%d, %d SMs, %.1f GiB, L2 %.0f MiB; %s\n", gi.name, gi.cc_major,
         gi.cc_minor, gi.multiprocessors, (double)gi.memory_bytes / 1073741824.0,
         (double)gi.l2_bytes / 1048576.0, gi.versions);
  static const char *const dt[] = {"bfloat16", "float16", "tf32", "float32"};
  for (int i = 0; i < 4; i++) {
    double g = 0;
    if (pb_engine_device_peak_gflops("cuda", dt[i], 0, 1.0, &g, &err) == 0)
      printf("peak %-9s %9.1f TFLOP/s (cuBLASLt 8192^3)\n", dt[i], g / 1e3);
    else
      printf("peak %-9s failed: %s\n", dt[i], err.message);
  }
  static const char *const bw[] = {"h2d_pinned", "h2d_pageable", "d2h_pinned", "d2d"};
  for (int i = 0; i < 4; i++) {
    double v = 0;
    if (pb_engine_gpu_bandwidth(bw[i], 0, 1.0, &v, &err) == 0)
      printf("bandwidth %-12s %8.1f GB/s%s\n", bw[i], v, i == 3 ? " (read + write)" : "");
    else
      printf("bandwidth %-12s failed: %s\n", bw[i], err.message);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "peaks") == 0) return peaks();
  if (argc < 4) {
    fprintf(stderr, "usage: cuda_engine_bench peaks | MODEL DTYPE BATCH [SECONDS]\n");
    return 1;
  }
  double seconds = argc > 4 ? atof(argv[4]) : 3.0;
  struct pb_error err = {{0}};
  pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
  p.model = argv[1], p.dtype = argv[2], p.batch_size = atoi(argv[3]), p.device = "cuda";
  pb_engine *e = NULL;
  if (pb_engine_new(&p, &e, &err) != 0) {
    printf("%-9s %-9s %5d  failed: %s\n", p.model, p.dtype, p.batch_size, err.message);
    return 2;
  }
  pb_engine_info info;
  pb_engine_get_info(e, &info);
  pb_tensor *in = NULL, *out = NULL;
  if (pb_engine_tensor_new(e, PB_TENSOR_INPUT, &in, &err) != 0 ||
      pb_engine_tensor_new(e, PB_TENSOR_OUTPUT, &out, &err) != 0) {
    printf("tensors: %s\n", err.message);
    return 2;
  }
  size_t n = pb_tensor_bytes(in) / 4;
  float *x = malloc(n * sizeof *x);
  pb_rng rng;
  pb_rng_init(&rng, 1);
  for (size_t i = 0; i < n; i++) x[i] = (float)pb_rng_uniform(&rng);
  pb_tensor_write(in, x, n * 4, &err);
  free(x);
  for (int i = 0; i < 5; i++) pb_engine_forward(e, in, out, &err);
  pb_engine_synchronize(e, &err);
  int cap = 100000, k = 0;
  double *t = malloc((size_t)cap * sizeof *t);
  int64_t t_start = pb_now_ns(), t_end = t_start + (int64_t)(seconds * 1e9);
  while ((k < 10 || pb_now_ns() < t_end) && k < cap) {
    int64_t t0 = pb_now_ns();
    if (pb_engine_forward(e, in, out, &err) != 0 || pb_engine_synchronize(e, &err) != 0) {
      printf("forward: %s\n", err.message);
      return 2;
    }
    t[k++] = (double)(pb_now_ns() - t0) / 1e6;
  }
  double total = (double)(pb_now_ns() - t_start) / 1e3;
  qsort(t, (size_t)k, sizeof *t, cmp);
  double p50 = t[(size_t)ceil(0.5 * k) - 1], p95 = t[(size_t)ceil(0.95 * k) - 1];
  double ips = (double)p.batch_size * 1e3 / p50;
  printf("%-9s %-9s %5d  %9.0f img/s (median)  %9.0f img/s (all %d batches)  p50 %.3f ms  "
         "p95 %.3f ms  %.1f TFLOP/s  compile %.0f ms  mem %.0f MiB  [%s]\n",
         p.model, p.dtype, p.batch_size, ips, (double)p.batch_size * k / (total / 1e6),
         k, p50, p95, info.flops_per_image * ips / 1e12, info.compile_ms,
         (double)info.bytes_total / 1048576.0, info.isa);
  free(t);
  pb_tensor_free(in);
  pb_tensor_free(out);
  pb_engine_free(e);
  return 0;
}
