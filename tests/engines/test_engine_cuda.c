/* The CUDA engine against the oneDNN engine (label gpu: runs on a machine with a GPU). Every
 * layer kind on small hand-built graphs, then embed, resnet50 and vit_b_16 on the same seeded
 * input: float32 (TF32 off) within 1e-3 relative (L2) error; bfloat16 with the same top-1 class
 * per image and within 3e-2; float16 and tf32 reported with looser bounds. Optional argument:
 * one model name, or "layers". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engines/engine_internal.h"

static const pb__engine_vtable *cuda_vt(void) {
  char why[512];
  const pb__engine_vtable *vt = pb__engine_backend("cuda", why, sizeof why);
  if (vt == NULL) {
    fprintf(stderr, "cuda unavailable: %s\n", why);
    exit(1);
  }
  return vt;
}

/* L2 relative error of a against the reference b; *top1 = images whose argmax differs. */
static double relerr(const float *a, const float *b, int n, int per, int *top1) {
  double num = 0, den = 0;
  *top1 = 0;
  for (int i = 0; i < n; i++) {
    int ia = 0, ib = 0;
    for (int j = 0; j < per; j++) {
      size_t k = (size_t)i * (size_t)per + (size_t)j;
      double d = (double)a[k] - b[k];
      CHECK(isfinite(a[k]));
      num += d * d, den += (double)b[k] * b[k];
      size_t row = (size_t)i * (size_t)per;
      if (a[k] > a[row + (size_t)ia]) ia = j;
      if (b[k] > b[row + (size_t)ib]) ib = j;
    }
    *top1 += ia != ib;
  }
  return sqrt(num / (den > 0 ? den : 1));
}

static float *run(pb__graph *g, const pb__engine_vtable *vt, const char *device, const char *dtype,
                  int batch, const float *x, size_t ni, size_t no, int twice) {
  struct pb_error err = {{0}};
  pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
  p.batch_size = batch, p.dtype = dtype, p.device = device;
  pb_engine *e = NULL;
  CHECK_OK(pb__engine_new_graph(&p, vt, g, &e, &err), &err);
  float *y = malloc((size_t)batch * no * sizeof *y);
  for (size_t i = 0; i < (size_t)batch * no; i++) y[i] = NAN; /* poison: every value is written */
  CHECK_OK(pb_engine_forward_host(e, x, (size_t)batch * ni, y, (size_t)batch * no, &err), &err);
  if (twice) { /* a replay of the CUDA graph gives the same numbers */
    float *y2 = malloc((size_t)batch * no * sizeof *y2);
    CHECK_OK(pb_engine_forward_host(e, x, (size_t)batch * ni, y2, (size_t)batch * no, &err), &err);
    CHECK(memcmp(y, y2, (size_t)batch * no * sizeof *y) == 0);
    free(y2);
  }
  pb_engine_free(e);
  return y;
}

static int failures = 0;

/* make(): a fresh graph each call (an engine takes ownership of one). */
static void compare(const char *what, pb__graph *(*make)(const char *), const char *name,
                    const char *dtype, int batch, double tol, int need_top1) {
  pb__graph *g1 = make(name), *g2 = make(name);
  size_t ni = (size_t)(g1->tensors[0].c * g1->tensors[0].h * g1->tensors[0].w);
  size_t no = (size_t)g1->outputs;
  float *x = malloc((size_t)batch * ni * sizeof *x);
  pb_rng rng;
  pb_rng_init(&rng, 7);
  for (size_t i = 0; i < (size_t)batch * ni; i++) x[i] = (float)pb_rng_uniform(&rng);
  float *ref = run(g1, NULL, "cpu", "float32", batch, x, ni, no, 0);
  float *got = run(g2, cuda_vt(), "cuda", dtype, batch, x, ni, no, 1);
  int top1 = 0;
  double r = relerr(got, ref, batch, (int)no, &top1);
  int ok = r <= tol && (!need_top1 || top1 == 0);
  printf("%-5s %-22s %-9s batch %3d: rel err %.3g (bound %.0e), top-1 differs in %d  %s\n",
         ok ? "ok" : "FAIL", what, dtype, batch, r, tol, top1, ok ? "" : "<--");
  failures += !ok;
  free(x), free(ref), free(got);
}

/* ---- per layer kind ----------------------------------------------------------------------- */

static pb__graph *begin(pb__builder *bd, const char *name, int c, int h, int w) {
  pb__graph *g = calloc(1, sizeof *g);
  CHECK(g != NULL);
  pb__builder_init(bd, g, 11);
  snprintf(g->model, sizeof g->model, "%s", name);
  pb__b_tensor(bd, 0, c, h, w);
  return g;
}
/* Image graphs end in global pooling and a linear layer: oneDNN writes a convolution's or pooling's
 * output in its own blocked layout, which only works for the models' inner tensors. */
static int head(pb__builder *bd, int t) {
  t = pb__b_pool(bd, t, PB__OP_GAP, 0, 1, 0);
  return pb__b_linear(bd, t, "head", 10, PB__ACT_NONE, -1);
}
static pb__graph *end(pb__builder *bd, int out) {
  CHECK(!bd->failed);
  bd->g->output = out;
  pb__graph_finish(bd->g);
  return bd->g;
}

static pb__graph *layer_graph(const char *kind) {
  pb__builder bd;
  int t;
  if (strcmp(kind, "conv") == 0) { /* 3x3 conv, bias, relu; 7x7/2 with bn */
    begin(&bd, kind, 3, 17, 15);
    t = pb__b_conv(&bd, 0, "a", 16, 3, 1, 1, 1, "", PB__ACT_RELU, -1);
    t = pb__b_conv(&bd, t, "b", 24, 7, 2, 3, 0, "bbn", PB__ACT_NONE, -1);
    return end(&bd, head(&bd, t));
  }
  if (strcmp(kind, "conv_residual") == 0) { /* bottleneck: 1x1, 3x3/2, downsample, add, relu */
    begin(&bd, kind, 8, 12, 12);
    int a = pb__b_conv(&bd, 0, "c1", 16, 1, 1, 0, 0, "bn1", PB__ACT_RELU, -1);
    a = pb__b_conv(&bd, a, "c2", 16, 3, 2, 1, 0, "bn2", PB__ACT_RELU, -1);
    int d = pb__b_conv(&bd, 0, "ds", 32, 1, 2, 0, 0, "dbn", PB__ACT_NONE, -1);
    t = pb__b_conv(&bd, a, "c3", 32, 1, 1, 0, 0, "bn3", PB__ACT_RELU, d);
    return end(&bd, head(&bd, t));
  }
  if (strcmp(kind, "maxpool") == 0) {
    begin(&bd, kind, 8, 13, 11);
    t = pb__b_conv(&bd, 0, "a", 8, 1, 1, 0, 1, "", PB__ACT_NONE, -1);
    t = pb__b_pool(&bd, t, PB__OP_MAXPOOL, 3, 2, 1);
    return end(&bd, head(&bd, t));
  }
  if (strcmp(kind, "gap_linear") == 0) {
    begin(&bd, kind, 8, 9, 7);
    t = pb__b_conv(&bd, 0, "a", 32, 3, 1, 1, 1, "", PB__ACT_RELU, -1);
    t = pb__b_pool(&bd, t, PB__OP_GAP, 0, 1, 0);
    t = pb__b_linear(&bd, t, "fc", 10, PB__ACT_NONE, -1);
    return end(&bd, t);
  }
  /* token graphs start from patch tokens: 24 patches + class token; attention_long has 90 + 1,
   * so the fused kernel takes a full step of 64 keys and a partial one of 32 with 5 masked */
  if (strcmp(kind, "attention_long") == 0) begin(&bd, kind, 3, 80, 72);
  else begin(&bd, kind, 3, 32, 48);
  int x = pb__b_patch_tokens(&bd, 0, 8, 128);
  /* token graphs end in a linear layer over every token, for the same reason */
  if (strcmp(kind, "patch_tokens") == 0) return end(&bd, pb__b_linear(&bd, x, "head", 16, 0, -1));
  if (strcmp(kind, "layernorm") == 0) {
    t = pb__b_layernorm(&bd, x, "ln", 1e-6f);
    return end(&bd, pb__b_linear(&bd, t, "head", 16, PB__ACT_NONE, -1));
  }
  if (strcmp(kind, "linear_gelu_residual") == 0) {
    int m = pb__b_linear(&bd, x, "fc1", 256, PB__ACT_GELU, -1);
    t = pb__b_linear(&bd, m, "fc2", 128, PB__ACT_NONE, x);
    return end(&bd, pb__b_linear(&bd, t, "head", 16, PB__ACT_NONE, -1));
  }
  if (strncmp(kind, "attention", 9) == 0) {
    /* 2 heads of 64 take the fused kernel for 16-bit types; 8 heads of 16 the cuBLASLt path */
    int q = pb__b_linear(&bd, x, "qkv", 3 * 128, PB__ACT_NONE, -1);
    t = pb__b_attention(&bd, q, strcmp(kind, "attention_dh16") == 0 ? 8 : 2);
    return end(&bd, pb__b_linear(&bd, t, "head", 16, PB__ACT_NONE, -1));
  }
  /* take_cls */
  t = pb__b_take_cls(&bd, x);
  t = pb__b_layernorm(&bd, t, "ln", 1e-6f);
  return end(&bd, pb__b_linear(&bd, t, "head", 16, PB__ACT_NONE, -1));
}

static pb__graph *model_graph(const char *name) {
  int c, h, w;
  struct pb_error err = {{0}};
  pb__graph *g = NULL;
  CHECK(pb__model_default_input(name, &c, &h, &w) == 0);
  CHECK_OK(pb__graph_build(name, c, h, w, 42, &g, &err), &err);
  return g;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  const char *only = argc > 1 ? argv[1] : NULL;
  if (only == NULL || strcmp(only, "layers") == 0) {
    static const char *const kinds[] = {"conv", "conv_residual", "maxpool", "gap_linear",
                                        "patch_tokens", "layernorm", "linear_gelu_residual",
                                        "attention", "attention_long", "attention_dh16",
                                        "take_cls"};
    for (int i = 0; i < (int)(sizeof kinds / sizeof kinds[0]); i++) {
      compare(kinds[i], layer_graph, kinds[i], "float32", 3, 1e-4, 0);
      compare(kinds[i], layer_graph, kinds[i], "bfloat16", 3, 3e-2, 0);
      compare(kinds[i], layer_graph, kinds[i], "float16", 3, 1e-2, 0);
    }
  }
  static const char *const models[] = {"embed", "resnet50", "vit_b_16"};
  for (int i = 0; i < 3; i++) {
    if (only != NULL && strcmp(only, models[i]) != 0) continue;
    int b = strcmp(models[i], "embed") == 0 ? 8 : 4;
    compare(models[i], model_graph, models[i], "float32", b, 1e-3, 1);
    compare(models[i], model_graph, models[i], "bfloat16", b, 3e-2, 1);
    compare(models[i], model_graph, models[i], "float16", b, 3e-2, 0);
    compare(models[i], model_graph, models[i], "tf32", b, 1e-2, 0);
  }
  printf(failures ? "%d comparisons failed\n" : "all comparisons passed\n", failures);
  return failures != 0;
}
