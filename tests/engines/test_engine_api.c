/* The engine interface: refusals with helpful messages, model facts, tensors, .npy, peak rate. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "pipebench/engine.h"

static int try_new(const char *model, const char *dtype, const char *device, int batch,
                   struct pb_error *err) {
  pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
  p.model = model, p.dtype = dtype, p.device = device, p.batch_size = batch;
  pb_engine *e = NULL;
  int rc = pb_engine_new(&p, &e, err);
  pb_engine_free(e);
  return rc;
}

int main(void) {
  struct pb_error err = {{0}};
  CHECK_EQ(try_new("resnet18", NULL, NULL, 1, &err), PB_EINVAL);
  CHECK(strstr(err.message, "resnet50") && strstr(err.message, "vit_b_16") && strstr(err.message, "embed"));
  CHECK_EQ(try_new("embed", "int8", NULL, 1, &err), PB_EINVAL);
  CHECK(strstr(err.message, "bfloat16") != NULL);
  CHECK_EQ(try_new("embed", NULL, "tpu", 1, &err), PB_EINVAL);
  CHECK(strstr(err.message, "cuda") != NULL);
  CHECK_EQ(try_new("embed", NULL, NULL, 0, &err), PB_EINVAL);
  CHECK_EQ(try_new("embed", "float16", "cpu", 1, &err), PB_EUNSUPPORTED);
  printf("float16: %s\n", err.message);
  CHECK_EQ(try_new("embed", NULL, "cuda", 1, &err), PB_EUNSUPPORTED);
  int rc = try_new("embed", "bfloat16", NULL, 1, &err);
  CHECK(rc == 0 || rc == PB_EUNSUPPORTED);
  printf("bfloat16: %s\n", rc == 0 ? "supported" : err.message);
  CHECK(strcmp(pb_engine_resolve_device("auto"), "cpu") == 0);
  CHECK_EQ(pb_engine_model_count(), 3);
  { /* SGD's momentum and weight decay: range-checked; cuda only (the cpu runs plain SGD) */
    pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
    p.training = 1, p.device = "cpu", p.momentum = 1.5f;
    pb_engine *e = NULL;
    CHECK_EQ(pb_engine_new(&p, &e, &err), PB_EINVAL);
    CHECK(strstr(err.message, "momentum") != NULL);
    p.momentum = 0.9f;
    CHECK_EQ(pb_engine_new(&p, &e, &err), PB_EUNSUPPORTED);
    printf("momentum on cpu: %s\n", err.message);
    p.momentum = 0.0f, p.weight_decay = 1e-4f;
    CHECK_EQ(pb_engine_new(&p, &e, &err), PB_EUNSUPPORTED);
    CHECK(e == NULL);
  }

  /* model facts: torchvision's parameter counts; FLOPs as 2 x multiply-adds */
  struct {
    const char *model;
    long long params;
    double gflops;
  } facts[] = {{"resnet50", 25557032, 8.18}, {"vit_b_16", 86567656, 35.13}, {"embed", 27136, 0.374}};
  for (int i = 0; i < 3; i++) {
    pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
    p.model = facts[i].model;
    pb_engine *e = NULL;
    CHECK_OK(pb_engine_new(&p, &e, &err), &err);
    pb_engine_info in;
    pb_engine_get_info(e, &in);
    printf("%-9s params %lld, %.3f GFLOP/image, %.1f MB, compiled in %.0f ms (%s)\n", in.model,
           (long long)in.parameters, in.flops_per_image / 1e9, (double)in.bytes_total / 1e6,
           in.compile_ms, in.isa);
    CHECK_EQ(in.parameters, facts[i].params);
    CHECK_NEAR(in.flops_per_image / 1e9, facts[i].gflops, 0.01 * facts[i].gflops);
    CHECK(in.bytes_weights >= 4 * in.parameters - 4 * 100000); /* BN folded away */
    CHECK(in.bytes_total == in.bytes_weights + in.bytes_activations + in.bytes_scratch);
    if (i == 2) {
      pb_tensor *x, *y;
      CHECK_OK(pb_engine_tensor_new(e, PB_TENSOR_INPUT, &x, &err), &err);
      CHECK_OK(pb_engine_tensor_new(e, PB_TENSOR_OUTPUT, &y, &err), &err);
      CHECK_EQ(pb_tensor_bytes(x), 100 * 100 * 4);
      CHECK_EQ(pb_tensor_bytes(y), 128 * 4);
      CHECK_EQ(pb_tensor_write(x, pb_tensor_host_data(y), 16, &err), PB_EINVAL);
      CHECK_EQ(pb_engine_forward(e, y, x, &err), PB_EINVAL); /* roles swapped */
      CHECK_EQ(pb_engine_train_step(e, x, y, 0.1f, NULL, &err), PB_ESTATE);
      CHECK_OK(pb_engine_forward(e, x, y, &err), &err);
      CHECK_OK(pb_engine_synchronize(e, &err), &err);
      pb_tensor_free(x);
      pb_tensor_free(y);
    }
    pb_engine_free(e);
  }
  pb_engine_free(NULL);
  pb_tensor_free(NULL);

  /* .npy round trip */
  char path[] = "/tmp/pb_npy_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  float v[6] = {1, -2, 3.5f, 4, 5, 6e-8f};
  int64_t shape[2] = {2, 3}, got_shape[8];
  CHECK_OK(pb_npy_write_f32(path, v, shape, 2, &err), &err);
  float *back = NULL;
  int nd = 0;
  int64_t count = 0;
  CHECK_OK(pb_npy_read_f32(path, &back, got_shape, &nd, &count, &err), &err);
  CHECK_EQ(nd, 2);
  CHECK_EQ(got_shape[0], 2);
  CHECK_EQ(got_shape[1], 3);
  CHECK(memcmp(back, v, sizeof v) == 0);
  pb_free(back, (size_t)count * sizeof(float));
  remove(path);

  double gf = 0;
  CHECK_OK(pb_engine_peak_gflops("float32", 0, 0.2, &gf, &err), &err);
  printf("peak float32 matmul: %.1f GFLOP/s\n", gf);
  CHECK(gf > 1.0);
  printf("engine api ok\n");
  return 0;
}
