/* The CUDA training step (label gpu: runs on a machine with a GPU).
 *   grads MODEL DTYPE: one step with lr 0 on a small seeded batch; every parameter, its gradient
 *     and the running statistics after the step go to a folder, and train_grads_torch.py
 *     compares them with torch in float64 (same weights, train mode): the largest relative (L2)
 *     error of a parameter, and that of all gradients together, must stay under the dtype's
 *     bound or within twice what torch's own step at that precision gets. A second step (the CUDA
 *     graph's replay) must give the same gradients as the first (run eagerly).
 *   falls MODEL DTYPE: 50 steps of SGD with momentum on one fixed batch: the loss must fall
 *     to under half its first value, and the running statistics must have moved. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "engines/engine_internal.h"

typedef struct setup {
  pb_engine *e;
  pb_tensor *x, *t;
  float *xh;
  int32_t *labels;
  size_t nx;
  int batch;
} setup;

static void make(setup *s, const char *model, const char *dtype, float momentum) {
  struct pb_error err = {{0}};
  pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
  p.model = model, p.device = "cuda", p.dtype = dtype, p.training = 1, p.seed = 7;
  p.momentum = momentum;
  int is_embed = strcmp(model, "embed") == 0;
  p.batch_size = s->batch = is_embed ? 4 : 6;
  p.channels = is_embed ? 1 : 3;
  p.height = p.width = is_embed ? 20 : 64;
  char why[512];
  if (pb_engine_device_status("cuda", why, sizeof why) != 0) {
    printf("SKIP: cuda unavailable: %s\n", why);
    exit(77);
  }
  CHECK_OK(pb_engine_new(&p, &s->e, &err), &err);
  CHECK_OK(pb_engine_tensor_new(s->e, PB_TENSOR_INPUT, &s->x, &err), &err);
  CHECK_OK(pb_engine_tensor_new(s->e, PB_TENSOR_TARGET, &s->t, &err), &err);
  s->nx = pb_tensor_bytes(s->x) / 4;
  s->xh = malloc(s->nx * 4);
  s->labels = malloc((size_t)s->batch * 4);
  pb_rng rng;
  pb_rng_init(&rng, 12345);
  for (size_t i = 0; i < s->nx; i++) s->xh[i] = (float)pb_rng_normal(&rng);
  pb_engine_info in;
  pb_engine_get_info(s->e, &in);
  for (int i = 0; i < s->batch; i++) s->labels[i] = (int32_t)pb_rng_below(&rng, (uint64_t)in.outputs);
  CHECK_OK(pb_tensor_write(s->x, s->xh, s->nx * 4, &err), &err);
  CHECK_OK(pb_tensor_write(s->t, s->labels, (size_t)s->batch * 4, &err), &err);
}

static void drop(setup *s) {
  pb_tensor_free(s->x);
  pb_tensor_free(s->t);
  pb_engine_free(s->e);
  free(s->xh);
  free(s->labels);
}

static int n_params(pb_engine *e) {
  char name[96];
  int64_t n;
  int i = 0;
  while (pb__engine_train_param(e, i, name, sizeof name, &n, NULL, NULL, NULL) == 0) i++;
  return i;
}

static void save(const char *dir, const char *name, const char *suffix, const float *v, int64_t n) {
  struct pb_error err = {{0}};
  char path[4096];
  snprintf(path, sizeof path, "%s/%s%s.npy", dir, name, suffix);
  int64_t shape[1] = {n};
  CHECK_OK(pb_npy_write_f32(path, v, shape, 1, &err), &err);
}

static int grads(const char *model, const char *dtype) {
  struct pb_error err = {{0}};
  setup s;
  make(&s, model, dtype, 0.0f);
  char dir[] = "/tmp/pb_train_grads_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  int np = n_params(s.e);
  CHECK(np > 0);
  float **g1 = calloc((size_t)np, sizeof *g1);
  char name[96];
  int64_t n;
  for (int i = 0; i < np; i++) { /* the weights before the step */
    CHECK_OK(pb__engine_train_param(s.e, i, name, sizeof name, &n, NULL, NULL, &err), &err);
    float *v = malloc((size_t)n * 4);
    CHECK_OK(pb__engine_train_param(s.e, i, name, sizeof name, &n, v, NULL, &err), &err);
    save(dir, name, "", v, n);
    free(v);
  }
  float loss = 0;
  CHECK_OK(pb_engine_train_step(s.e, s.x, s.t, 0.0f, &loss, &err), &err);
  printf("%s %s: loss %.6f\n", model, dtype, loss);
  CHECK(isfinite(loss));
  for (int i = 0; i < np; i++) {
    CHECK_OK(pb__engine_train_param(s.e, i, name, sizeof name, &n, NULL, NULL, &err), &err);
    float *v = malloc((size_t)n * 4);
    g1[i] = malloc((size_t)n * 4);
    CHECK_OK(pb__engine_train_param(s.e, i, name, sizeof name, &n, v, g1[i], &err), &err);
    for (int64_t j = 0; j < n; j++) CHECK(isfinite(g1[i][j]));
    save(dir, name, ".grad", g1[i], n);
    save(dir, name, ".after", v, n);
    free(v);
  }
  float lv[1] = {loss};
  save(dir, "loss", "", lv, 1);
  save(dir, "input", "", s.xh, (int64_t)s.nx);
  float *lf = malloc((size_t)s.batch * 4);
  for (int i = 0; i < s.batch; i++) lf[i] = (float)s.labels[i];
  save(dir, "labels", "", lf, s.batch);
  free(lf);
  /* the second step runs the captured graph: the same gradients (lr 0 left the weights) */
  float loss2 = 0;
  CHECK_OK(pb_engine_train_step(s.e, s.x, s.t, 0.0f, &loss2, &err), &err);
  double worst = 0;
  for (int i = 0; i < np; i++) {
    CHECK_OK(pb__engine_train_param(s.e, i, name, sizeof name, &n, NULL, NULL, &err), &err);
    float *g2 = malloc((size_t)n * 4);
    CHECK_OK(pb__engine_train_param(s.e, i, name, sizeof name, &n, NULL, g2, &err), &err);
    double num = 0, den = 0;
    for (int64_t j = 0; j < n; j++) {
      double d = (double)g2[j] - g1[i][j];
      num += d * d, den += (double)g1[i][j] * g1[i][j];
    }
    double r = den > 0 ? sqrt(num / den) : sqrt(num);
    if (r > worst) worst = r;
    free(g2);
    free(g1[i]);
  }
  free(g1);
  printf("%s %s: replayed step: loss %.6f, gradients within %.3g of the first step's\n", model,
         dtype, loss2, worst);
  CHECK(fabs(loss2 - loss) <= 1e-3 * fabs(loss) + 1e-5);
  CHECK(worst < 1e-2);
  /* the bound, or twice what torch's own step at this precision gets (train_grads_torch.py) */
  double tol = strcmp(dtype, "float32") == 0 ? 1e-3 : 3e-2;
  char cmd[8192];
  const char *py = getenv("PIPEBENCH_PYTHON"), *src = getenv("PIPEBENCH_SOURCE_DIR");
  snprintf(cmd, sizeof cmd, "%s %s/tests/engines/train_grads_torch.py %s %s %g %d %s",
           py && *py ? py : PIPEBENCH_PYTHON, src && *src ? src : PIPEBENCH_SOURCE_DIR, dir, model, tol,
           s.nx == (size_t)s.batch * 400 ? 1 : 3, dtype);
  int rc = system(cmd);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  drop(&s);
  CHECK(rc == 0);
  return 0;
}

static int falls(const char *model, const char *dtype) {
  struct pb_error err = {{0}};
  setup s;
  make(&s, model, dtype, 0.9f);
  char name[96];
  int64_t n;
  int np = n_params(s.e), stat = -1;
  for (int i = 0; i < np && stat < 0; i++) {
    CHECK_OK(pb__engine_train_param(s.e, i, name, sizeof name, &n, NULL, NULL, &err), &err);
    if (strstr(name, "running_mean") != NULL) stat = i;
  }
  float *before = NULL, *after = NULL;
  if (stat >= 0) {
    before = malloc((size_t)n * 4), after = malloc((size_t)n * 4);
    CHECK_OK(pb__engine_train_param(s.e, stat, name, sizeof name, &n, before, NULL, &err), &err);
  }
  float first = 0, last = 0, prev = 0;
  int rises = 0;
  for (int k = 0; k < 50; k++) {
    float l = 0;
    CHECK_OK(pb_engine_train_step(s.e, s.x, s.t, strcmp(model, "embed") == 0 ? 0.005f : 0.02f, &l,
                                  &err), &err);
    CHECK(isfinite(l));
    if (k == 0) first = l;
    else rises += l > prev;
    prev = last = l;
    if (k % 10 == 0 || k == 49) printf("%s %s: step %2d loss %.5f\n", model, dtype, k, l);
  }
  printf("%s %s: loss %.4f -> %.4f over 50 steps, %d rises\n", model, dtype, first, last, rises);
  CHECK(last < 0.5f * first);
  CHECK(rises <= 10);
  if (stat >= 0) {
    CHECK_OK(pb__engine_train_param(s.e, stat, name, sizeof name, &n, after, NULL, &err), &err);
    double moved = 0;
    for (int64_t j = 0; j < n; j++) moved += fabs((double)after[j] - before[j]);
    printf("%s: running mean moved by %.4g in all\n", name, moved);
    CHECK(moved > 0);
    free(before);
    free(after);
  }
  /* a label outside the classes: one clear error */
  pb_engine_info in;
  pb_engine_get_info(s.e, &in);
  s.labels[1] = (int32_t)in.outputs;
  CHECK_OK(pb_tensor_write(s.t, s.labels, (size_t)s.batch * 4, &err), &err);
  float l = 0;
  CHECK(pb_engine_train_step(s.e, s.x, s.t, 0.0f, &l, &err) == PB_EINVAL);
  printf("bad label: %s\n", err.message);
  CHECK(strstr(err.message, "label") != NULL);
  drop(&s);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: test_engine_cuda_train grads|falls MODEL DTYPE\n");
    return 2;
  }
  if (strcmp(argv[1], "grads") == 0) return grads(argv[2], argv[3]);
  return falls(argv[2], argv[3]);
}
