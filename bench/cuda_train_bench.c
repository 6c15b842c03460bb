/* Images/s of the cuda engine's training step (bench/cuda_train.sh runs it): one model, dtype
 * and batch, device-resident seeded input and labels, SGD with momentum 0.9. Steps are queued
 * back to back between two synchronised host clock reads (the window opens and closes on an idle
 * device); the per-step device time (CUDA events) is the median of separate, waited steps.
 * usage: cuda_train_bench MODEL DTYPE BATCH [SECONDS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipebench/engine.h"

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: cuda_train_bench MODEL DTYPE BATCH [SECONDS]\n");
    return 1;
  }
  double secs = argc > 4 ? atof(argv[4]) : 5.0;
  struct pb_error err = {{0}};
  pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
  p.model = argv[1], p.dtype = argv[2], p.batch_size = atoi(argv[3]), p.device = "cuda";
  p.training = 1, p.momentum = 0.9f, p.weight_decay = 5e-5f;
  pb_engine *e = NULL;
  pb_tensor *x = NULL, *t = NULL;
  if (pb_engine_new(&p, &e, &err) != 0 || pb_engine_tensor_new(e, PB_TENSOR_INPUT, &x, &err) != 0 ||
      pb_engine_tensor_new(e, PB_TENSOR_TARGET, &t, &err) != 0) {
    fprintf(stderr, "cuda_train_bench: %s\n", err.message);
    return 2;
  }
  pb_engine_info in;
  pb_engine_get_info(e, &in);
  size_t nx = pb_tensor_bytes(x) / 4;
  float *xh = malloc(nx * 4);
  int32_t *lab = malloc((size_t)p.batch_size * 4);
  pb_rng rng;
  pb_rng_init(&rng, 1);
  for (size_t i = 0; i < nx; i++) xh[i] = (float)pb_rng_normal(&rng);
  for (int i = 0; i < p.batch_size; i++) lab[i] = (int32_t)pb_rng_below(&rng, (uint64_t)in.outputs);
  int rc = pb_tensor_write(x, xh, nx * 4, &err);
  if (rc == 0) rc = pb_tensor_write(t, lab, (size_t)p.batch_size * 4, &err);
  float l0 = 0, l1 = 0;
  for (int k = 0; k < 5 && rc == 0; k++) rc = pb_engine_train_step(e, x, t, 0.01f, k ? NULL : &l0, &err);
  if (rc == 0) rc = pb_engine_synchronize(e, &err);
  int64_t dev[30];
  for (int k = 0; k < 30 && rc == 0; k++) {
    rc = pb_engine_train_step(e, x, t, 0.01f, NULL, &err);
    if (rc == 0) rc = pb_engine_forward_time(e, &dev[k], &err);
  }
  int64_t steps = 0, t0 = pb_now_ns(), t1 = t0;
  while (rc == 0 && (t1 - t0 < (int64_t)(secs * 1e9) || steps < 20)) {
    for (int k = 0; k < 10 && rc == 0; k++, steps++) rc = pb_engine_train_step(e, x, t, 0.01f, NULL, &err);
    if (rc == 0 && steps % 50 == 0) rc = pb_engine_synchronize(e, &err);
    t1 = pb_now_ns();
  }
  if (rc == 0) rc = pb_engine_train_step(e, x, t, 0.01f, &l1, &err); /* waits: closes the window */
  t1 = pb_now_ns();
  steps++;
  if (rc != 0) {
    fprintf(stderr, "cuda_train_bench: %s\n", err.message);
    return 2;
  }
  qsort(dev, 30, sizeof dev[0], cmp_i64);
  double ips = (double)steps * p.batch_size / ((double)(t1 - t0) / 1e9);
  printf("pipebench train %-9s %-9s b%-4d %8.0f img/s  step p50 %.3f ms (device, n=30)  "
         "%lld steps  memory %.2f GiB (engine's allocations)  loss %.4f -> %.4f  [%s; %s]\n",
         in.model, in.dtype, p.batch_size, ips, (double)dev[15] / 1e6, (long long)steps,
         (double)in.bytes_total / (1024.0 * 1024 * 1024), l0, l1, in.device_name, in.versions);
  pb_tensor_free(x);
  pb_tensor_free(t);
  pb_engine_free(e);
  free(xh);
  free(lab);
  return 0;
}
