/* How close the engines come to this machine's matmul peak: for each model and dtype, the best
 * forward rate (GFLOP/s) at one batch size beside the best peak matmul rate, measured in
 * interleaved rounds (a short peak measurement, then one forward pass) so that both see the
 * same machine; on a shared machine interference only slows a run, so the best of each is the
 * fairest pair. Median forward time is printed too.
 * usage: engines_vs_peak [batch (32)] [rounds (5)] [threads (0)] [models (resnet50,vit_b_16)] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipebench/engine.h"

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int batch = argc > 1 ? atoi(argv[1]) : 32, iters = argc > 2 ? atoi(argv[2]) : 5;
  int threads = argc > 3 ? atoi(argv[3]) : 0;
  char models[256];
  snprintf(models, sizeof models, "%s", argc > 4 ? argv[4] : "resnet50,vit_b_16");
  const char *dtypes[2] = {"float32", "bfloat16"};
  printf("%-9s %-9s %5s %12s %13s %10s %8s %8s\n", "model", "dtype", "batch", "median ms",
         "best GFLOP/s", "best peak", "of peak", "vs fp32");
  for (char *m = strtok(models, ","); m != NULL; m = strtok(NULL, ",")) {
    double fp32_rate = 0;
    for (int d = 0; d < 2; d++) {
      struct pb_error err = {{0}};
      double peak = 0, pk = 0;
      if (pb_engine_peak_gflops(dtypes[d], threads, 0.3, &pk, &err) != 0) {
        printf("%-9s %-9s %s\n", m, dtypes[d], err.message);
        continue;
      }
      pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
      p.model = m, p.dtype = dtypes[d], p.batch_size = batch, p.threads = threads;
      pb_engine *e = NULL;
      pb_tensor *x = NULL, *y = NULL;
      if (pb_engine_new(&p, &e, &err) != 0 || pb_engine_tensor_new(e, PB_TENSOR_INPUT, &x, &err) ||
          pb_engine_tensor_new(e, PB_TENSOR_OUTPUT, &y, &err)) {
        printf("%-9s %-9s %s\n", m, dtypes[d], err.message);
        pb_engine_free(e);
        return 2;
      }
      pb_engine_info in;
      pb_engine_get_info(e, &in);
      double *t = calloc((size_t)iters, sizeof *t);
      for (int i = -1; i < iters; i++) { /* one warm-up pass */
        if (i >= 0 && pb_engine_peak_gflops(dtypes[d], threads, 0.3, &pk, &err) == 0 && pk > peak)
          peak = pk;
        int64_t t0 = pb_now_ns();
        if (pb_engine_forward(e, x, y, &err) != 0 || pb_engine_synchronize(e, &err) != 0) {
          fprintf(stderr, "%s\n", err.message);
          return 2;
        }
        if (i >= 0) t[i] = (double)(pb_now_ns() - t0) / 1e9;
      }
      qsort(t, (size_t)iters, sizeof *t, cmp);
      double med = t[iters / 2], rate = in.flops_per_image * batch / t[0] / 1e9;
      if (d == 0) fp32_rate = rate;
      printf("%-9s %-9s %5d %12.1f %13.1f %10.1f %7.0f%% %7.2fx\n", m, dtypes[d], batch, med * 1e3,
             rate, peak, 100.0 * rate / peak, fp32_rate > 0 ? rate / fp32_rate : 0.0);
      fflush(stdout);
      free(t);
      pb_tensor_free(x);
      pb_tensor_free(y);
      pb_engine_free(e);
    }
  }
  return 0;
}
