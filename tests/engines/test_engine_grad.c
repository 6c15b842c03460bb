/* Training of embed on oneDNN: gradients against central finite differences on a tiny input,
 * for both losses, and SGD lowering the loss on a fixed batch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engines/onednn_internal.h"

static float loss_of(pb_engine *e, pb_tensor *x, pb_tensor *t) {
  struct pb_error err = {{0}};
  float l = 0;
  CHECK_OK(pb_engine_train_step(e, x, t, 0.0f, &l, &err), &err);
  return l;
}

static void check_grads(const char *loss) {
  struct pb_error err = {{0}};
  pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
  p.model = "embed";
  p.batch_size = 2;
  p.channels = 1, p.height = 6, p.width = 5;
  p.training = 1;
  p.loss = loss;
  p.threads = 1;
  pb_engine *e = NULL;
  CHECK_OK(pb_engine_new(&p, &e, &err), &err);
  pb_tensor *x, *t;
  CHECK_OK(pb_engine_tensor_new(e, PB_TENSOR_INPUT, &x, &err), &err);
  CHECK_OK(pb_engine_tensor_new(e, PB_TENSOR_TARGET, &t, &err), &err);
  pb_rng rng;
  pb_rng_init(&rng, 11);
  float *xd = pb_tensor_host_data(x);
  for (size_t i = 0; i < pb_tensor_bytes(x) / 4; i++) xd[i] = (float)pb_rng_normal(&rng);
  if (strcmp(loss, "mse") == 0) {
    float *td = pb_tensor_host_data(t);
    for (size_t i = 0; i < pb_tensor_bytes(t) / 4; i++) td[i] = (float)pb_rng_normal(&rng);
  } else {
    int32_t *td = pb_tensor_host_data(t);
    td[0] = 3, td[1] = 100;
  }
  loss_of(e, x, t);
  int checked = 0;
  for (int i = 0;; i++) {
    const char *name;
    float *w, *g;
    int64_t n;
    if (pb__onednn_train_param(e, i, &name, &w, &g, &n) != 0) break;
    float *ana = malloc((size_t)n * sizeof *ana);
    memcpy(ana, g, (size_t)n * sizeof *ana);
    double worst = 0;
    for (int k = 0; k < 6; k++) {
      int64_t j = (int64_t)pb_rng_below(&rng, (uint64_t)n);
      const float h = 1e-2f;
      float keep = w[j];
      w[j] = keep + h;
      double lp = loss_of(e, x, t);
      w[j] = keep - h;
      double lm = loss_of(e, x, t);
      w[j] = keep;
      double num = (lp - lm) / (2.0 * h);
      double bad = fabs(num - ana[j]) / (1e-3 + 0.05 * fabs(ana[j]));
      if (bad > worst) worst = bad;
      if (bad > 1.0)
        fprintf(stderr, "%s %s[%lld]: analytic %.6g numeric %.6g\n", loss, name, (long long)j,
                ana[j], num);
      CHECK(bad <= 1.0);
      checked++;
    }
    printf("%s %-14s %6lld values: gradient ok (worst %.2f of tolerance)\n", loss, name,
           (long long)n, worst);
    free(ana);
  }
  CHECK(checked >= 36);
  /* SGD on one batch must bring the loss down */
  float first = 0, last = 0;
  for (int s = 0; s < 30; s++)
    CHECK_OK(pb_engine_train_step(e, x, t, 0.05f, s == 0 ? &first : &last, &err), &err);
  printf("%s: loss %.4f -> %.4f after 30 steps\n", loss, first, last);
  CHECK(last < first);
  pb_engine_info in;
  pb_engine_get_info(e, &in);
  CHECK(in.bytes_total > 0);
  pb_tensor_free(x);
  pb_tensor_free(t);
  pb_engine_free(e);
}

int main(void) {
  check_grads("cross_entropy");
  check_grads("mse");
  /* a model without a training path is refused clearly */
  struct pb_error err = {{0}};
  pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
  p.model = "vit_b_16";
  p.training = 1;
  pb_engine *e = NULL;
  int rc = pb_engine_new(&p, &e, &err);
  CHECK_EQ(rc, PB_EUNSUPPORTED);
  CHECK(strstr(err.message, "embed") != NULL);
  printf("gradients match finite differences\n");
  return 0;
}
