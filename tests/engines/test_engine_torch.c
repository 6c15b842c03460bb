/* The models against torch: weights exported as .npy with state_dict names, loaded into
 * torchvision's resnet50 / vit_b_16 (and the embed network), same input, logits compared. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "pipebench/engine.h"

static void check_model(const char *model, int batch, const char *dtype, double tol) {
  struct pb_error err = {{0}};
  pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
  p.model = model;
  p.batch_size = batch;
  p.dtype = dtype;
  p.seed = 7;
  if (strcmp(model, "embed") == 0) p.channels = 2, p.height = 20, p.width = 24;
  pb_engine *e = NULL;
  CHECK_OK(pb_engine_new(&p, &e, &err), &err);
  pb_engine_info in;
  pb_engine_get_info(e, &in);
  char dir[] = "/tmp/pb_engine_torch_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  CHECK_OK(pb_engine_export_weights(e, dir, &err), &err);
  size_t ni = (size_t)batch * (size_t)(in.channels * in.height * in.width);
  size_t no = (size_t)batch * (size_t)in.outputs;
  float *x = malloc(ni * sizeof *x), *y = malloc(no * sizeof *y);
  CHECK(x != NULL && y != NULL);
  pb_rng rng;
  pb_rng_init(&rng, 99);
  for (size_t i = 0; i < ni; i++) x[i] = (float)pb_rng_normal(&rng);
  CHECK_OK(pb_engine_forward_host(e, x, ni, y, no, &err), &err);
  char path[512];
  int64_t xs[4] = {batch, in.channels, in.height, in.width}, ys[2] = {batch, in.outputs};
  snprintf(path, sizeof path, "%s/input.npy", dir);
  CHECK_OK(pb_npy_write_f32(path, x, xs, 4, &err), &err);
  snprintf(path, sizeof path, "%s/output.npy", dir);
  CHECK_OK(pb_npy_write_f32(path, y, ys, 2, &err), &err);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s %s/tests/engines/compare_torch.py %s %s %g", PIPEBENCH_PYTHON,
           PIPEBENCH_SOURCE_DIR, dir, model, tol);
  int rc = system(cmd);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  free(x);
  free(y);
  pb_engine_free(e);
  if (rc != 0) {
    fprintf(stderr, "%s (%s, batch %d): torch comparison failed\n", model, dtype, batch);
    exit(1);
  }
}

int main(int argc, char **argv) {
  /* one model by name (for quick runs), else all three */
  if (argc > 1) {
    /* vit_b_16 at batch 1 keeps the test short; test_engine_layers covers batched attention */
    int batch = strcmp(argv[1], "vit_b_16") == 0 ? 1 : 2;
    check_model(argv[1], batch, argc > 2 ? argv[2] : "float32", argc > 3 ? atof(argv[3]) : 1e-3);
    return 0;
  }
  check_model("embed", 2, "float32", 1e-4);
  check_model("resnet50", 2, "float32", 1e-3);
  check_model("vit_b_16", 1, "float32", 1e-3);
  printf("engines match torch\n");
  return 0;
}
