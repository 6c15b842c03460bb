/* The models as layer graphs: embed (origin.md's SimpleEmbeddingModel), resnet50 and vit_b_16
 * (torchvision's architectures and state_dict names), with weights drawn from a seed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/vec.h"
#include "engines/graph.h"

static const char *const model_names[] = {"embed", "resnet50", "vit_b_16"};
#define N_MODELS ((int)(sizeof model_names / sizeof model_names[0]))

int pb__model_count(void) { return N_MODELS; }
const char *pb__model_name(int i) { return i >= 0 && i < N_MODELS ? model_names[i] : NULL; }

int pb__model_default_input(const char *name, int *c, int *h, int *w) {
  if (strcmp(name, "embed") == 0) {
    *c = 1, *h = 100, *w = 100; /* origin.md's images: 100x100, one channel */
    return 0;
  }
  if (strcmp(name, "resnet50") == 0 || strcmp(name, "vit_b_16") == 0) {
    *c = 3, *h = 224, *w = 224;
    return 0;
  }
  return PB_EINVAL;
}

void pb__graph_free(pb__graph *g) {
  if (g == NULL) return;
  for (int i = 0; i < g->n_params; i++)
    pb_free(g->params[i].data, (size_t)g->params[i].count * sizeof(float));
  free(g->params);
  free(g->ops);
  free(g->tensors);
  free(g);
}

typedef pb__builder builder;

enum { INIT_ZERO, INIT_ONE, INIT_NORMAL, INIT_UNIFORM, INIT_RANGE };

/* Adds a parameter filled by `init`: NORMAL draws N(0, a^2); UNIFORM draws U(-a, a); RANGE
 * draws U(a, b) (used for variances and scales that must stay positive). */
static int add_param(builder *bd, const char *name, int ndim, const int64_t *shape, int init,
                     double a, double b, int learnable) {
  pb__graph *g = bd->g;
  if (bd->failed) return -1;
  pb__param *np = pb__vec_reserve((void **)&g->params, &g->cap_params, (size_t)g->n_params + 1,
                                   sizeof *g->params) == PB_OK ? g->params : NULL;
  if (np == NULL) {
    bd->failed = 1;
    return -1;
  }
  g->params = np;
  pb__param *p = &g->params[g->n_params];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->ndim = ndim;
  p->count = 1;
  for (int i = 0; i < ndim; i++) {
    p->shape[i] = shape[i];
    p->count *= shape[i];
  }
  p->learnable = learnable;
  p->data = pb_alloc((size_t)p->count * sizeof(float));
  if (p->data == NULL) {
    bd->failed = 1;
    return -1;
  }
  for (int64_t i = 0; i < p->count; i++) {
    double v = 0.0;
    switch (init) {
    case INIT_ONE: v = 1.0; break;
    case INIT_NORMAL: v = a * pb_rng_normal(&bd->rng); break;
    case INIT_UNIFORM: v = a * (2.0 * pb_rng_uniform(&bd->rng) - 1.0); break;
    case INIT_RANGE: v = a + (b - a) * pb_rng_uniform(&bd->rng); break;
    default: break;
    }
    p->data[i] = (float)v;
  }
  if (learnable) g->parameters += p->count;
  return g->n_params++;
}

int pb__b_tensor(builder *bd, int tokens, int64_t c, int64_t h, int64_t w) {
  pb__graph *g = bd->g;
  if (bd->failed) return -1;
  pb__tshape *nt = pb__vec_reserve((void **)&g->tensors, &g->cap_tensors, (size_t)g->n_tensors + 1,
                                   sizeof *g->tensors) == PB_OK ? g->tensors : NULL;
  if (nt == NULL) {
    bd->failed = 1;
    return -1;
  }
  g->tensors = nt;
  g->tensors[g->n_tensors] = (pb__tshape){tokens, c, h, w};
  return g->n_tensors++;
}

pb__op *pb__b_op(builder *bd, pb__op_kind kind, int in) {
  pb__graph *g = bd->g;
  if (bd->failed) return NULL;
  pb__op *no = pb__vec_reserve((void **)&g->ops, &g->cap_ops, (size_t)g->n_ops + 1,
                                   sizeof *g->ops) == PB_OK ? g->ops : NULL;
  if (no == NULL) {
    bd->failed = 1;
    return NULL;
  }
  g->ops = no;
  pb__op *o = &g->ops[g->n_ops++];
  memset(o, 0, sizeof *o);
  o->kind = kind;
  o->in = in;
  o->out = o->res = -1;
  o->w = o->b = o->bn_g = o->bn_b = o->bn_m = o->bn_v = o->cls = o->pos = -1;
  return o;
}

/* conv k x k; bn: prefix of a batch norm to fold ("" none); bias: conv has its own bias. */
int pb__b_conv(builder *bd, int in, const char *name, int64_t cout, int k, int stride, int pad,
                int bias, const char *bn, int act, int res) {
  if (bd->failed) return -1;
  pb__tshape s = bd->g->tensors[in];
  int64_t ho = (s.h + 2 * pad - k) / stride + 1, wo = (s.w + 2 * pad - k) / stride + 1;
  char nm[96];
  snprintf(nm, sizeof nm, "%s.weight", name);
  int64_t ws[4] = {cout, s.c, k, k};
  double fan_in = (double)(s.c * k * k);
  /* Kaiming-normal weights keep activations of a deep net in range. */
  int w = add_param(bd, nm, 4, ws, INIT_NORMAL, sqrt(2.0 / fan_in), 0, 1);
  int b = -1;
  if (bias) {
    snprintf(nm, sizeof nm, "%s.bias", name);
    b = add_param(bd, nm, 1, &cout, INIT_UNIFORM, 1.0 / sqrt(fan_in), 0, 1);
  }
  int g_ = -1, b_ = -1, m_ = -1, v_ = -1;
  if (bn[0] != '\0') {
    /* Non-trivial statistics so that folding is really tested; a residual branch's last scale
     * is kept small so 16 blocks of additions stay in a sane range. */
    int last = strstr(bn, "bn3") != NULL;
    snprintf(nm, sizeof nm, "%s.weight", bn);
    g_ = add_param(bd, nm, 1, &cout, INIT_RANGE, last ? 0.1 : 0.5, last ? 0.3 : 1.0, 1);
    snprintf(nm, sizeof nm, "%s.bias", bn);
    b_ = add_param(bd, nm, 1, &cout, INIT_NORMAL, 0.1, 0, 1);
    snprintf(nm, sizeof nm, "%s.running_mean", bn);
    m_ = add_param(bd, nm, 1, &cout, INIT_NORMAL, 0.1, 0, 0);
    snprintf(nm, sizeof nm, "%s.running_var", bn);
    v_ = add_param(bd, nm, 1, &cout, INIT_RANGE, 0.5, 1.5, 0);
  }
  int out = res >= 0 ? res : pb__b_tensor(bd, 0, cout, ho, wo);
  pb__op *o = pb__b_op(bd, PB__OP_CONV, in);
  if (o == NULL) return -1;
  o->out = out;
  o->res = res;
  o->act = act;
  o->k = k, o->stride = stride, o->pad = pad;
  o->cin = s.c, o->cout = cout;
  o->w = w, o->b = b, o->bn_g = g_, o->bn_b = b_, o->bn_m = m_, o->bn_v = v_;
  o->eps = 1e-5f;
  bd->g->flops += 2.0 * (double)(s.c * k * k) * (double)(cout * ho * wo);
  return out;
}

int pb__b_linear(builder *bd, int in, const char *name, int64_t cout, int act, int res) {
  if (bd->failed) return -1;
  pb__tshape s = bd->g->tensors[in];
  int64_t rows = s.tokens ? s.c : 1, cin = s.tokens ? s.h : s.c * s.h * s.w;
  char nm[96];
  snprintf(nm, sizeof nm, "%s.weight", name);
  int64_t ws[2] = {cout, cin};
  double bound = 1.0 / sqrt((double)cin);
  int w = add_param(bd, nm, 2, ws, INIT_UNIFORM, bound, 0, 1);
  snprintf(nm, sizeof nm, "%s.bias", name);
  int b = add_param(bd, nm, 1, &cout, INIT_UNIFORM, bound, 0, 1);
  int out = res >= 0 ? res : pb__b_tensor(bd, s.tokens, s.tokens ? rows : cout, s.tokens ? cout : 1, 1);
  pb__op *o = pb__b_op(bd, PB__OP_LINEAR, in);
  if (o == NULL) return -1;
  o->out = out, o->res = res, o->act = act, o->cin = cin, o->cout = cout, o->w = w, o->b = b;
  bd->g->flops += 2.0 * (double)rows * (double)cin * (double)cout;
  return out;
}

int pb__b_layernorm(builder *bd, int in, const char *name, float eps) {
  if (bd->failed) return -1;
  pb__tshape s = bd->g->tensors[in];
  char nm[96];
  snprintf(nm, sizeof nm, "%s.weight", name);
  int g_ = add_param(bd, nm, 1, &s.h, INIT_RANGE, 0.8, 1.2, 1);
  snprintf(nm, sizeof nm, "%s.bias", name);
  int b_ = add_param(bd, nm, 1, &s.h, INIT_NORMAL, 0.05, 0, 1);
  int out = pb__b_tensor(bd, 1, s.c, s.h, 1);
  pb__op *o = pb__b_op(bd, PB__OP_LAYERNORM, in);
  if (o == NULL) return -1;
  o->out = out, o->w = g_, o->b = b_, o->eps = eps, o->cin = o->cout = s.h;
  return out;
}

int pb__b_pool(builder *bd, int in, pb__op_kind kind, int k, int stride, int pad) {
  if (bd->failed) return -1;
  pb__tshape s = bd->g->tensors[in];
  int out = kind == PB__OP_GAP ? pb__b_tensor(bd, 0, s.c, 1, 1)
                               : pb__b_tensor(bd, 0, s.c, (s.h + 2 * pad - k) / stride + 1,
                                              (s.w + 2 * pad - k) / stride + 1);
  pb__op *o = pb__b_op(bd, kind, in);
  if (o == NULL) return -1;
  o->out = out, o->k = k, o->stride = stride, o->pad = pad;
  return out;
}

int pb__b_patch_tokens(builder *bd, int in, int patch, int64_t D) {
  if (bd->failed) return -1;
  pb__tshape s = bd->g->tensors[in];
  int64_t T = (s.h / patch) * (s.w / patch) + 1;
  int64_t ws[4] = {D, s.c, patch, patch};
  double fan_in = (double)(s.c * patch * patch);
  int w = add_param(bd, "conv_proj.weight", 4, ws, INIT_NORMAL, sqrt(1.0 / fan_in), 0, 1);
  int b = add_param(bd, "conv_proj.bias", 1, &D, INIT_UNIFORM, 1.0 / sqrt(fan_in), 0, 1);
  int64_t cs[3] = {1, 1, D}, ps[3] = {1, T, D};
  int cls = add_param(bd, "class_token", 3, cs, INIT_NORMAL, 0.02, 0, 1);
  int pos = add_param(bd, "encoder.pos_embedding", 3, ps, INIT_NORMAL, 0.02, 0, 1);
  int x = pb__b_tensor(bd, 1, T, D, 1);
  pb__op *o = pb__b_op(bd, PB__OP_PATCH_TOKENS, in);
  if (o == NULL) return -1;
  o->out = x, o->k = patch, o->stride = patch, o->cin = s.c, o->cout = D, o->w = w, o->b = b;
  o->cls = cls, o->pos = pos;
  bd->g->flops += 2.0 * fan_in * (double)D * (double)(T - 1);
  return x;
}

int pb__b_attention(builder *bd, int qkv, int heads) {
  if (bd->failed) return -1;
  pb__tshape s = bd->g->tensors[qkv];
  int64_t T = s.c, D = s.h / 3;
  int a = pb__b_tensor(bd, 1, T, D, 1);
  pb__op *o = pb__b_op(bd, PB__OP_ATTENTION, qkv);
  if (o == NULL) return -1;
  o->out = a, o->heads = heads, o->cin = 3 * D, o->cout = D;
  bd->g->flops += 2.0 * 2.0 * (double)T * (double)T * (double)D;
  return a;
}

int pb__b_take_cls(builder *bd, int in) {
  if (bd->failed) return -1;
  int c = pb__b_tensor(bd, 1, 1, bd->g->tensors[in].h, 1);
  pb__op *o = pb__b_op(bd, PB__OP_TAKE_CLS, in);
  if (o == NULL) return -1;
  o->out = c;
  return c;
}

static void build_embed(builder *bd) {
  int x = 0;
  x = pb__b_conv(bd, x, "conv1", 32, 3, 1, 1, 1, "", PB__ACT_RELU, -1);
  x = pb__b_conv(bd, x, "conv2", 64, 3, 1, 1, 1, "", PB__ACT_RELU, -1);
  x = pb__b_pool(bd, x, PB__OP_GAP, 0, 1, 0);
  bd->g->output = pb__b_linear(bd, x, "fc", 128, PB__ACT_NONE, -1);
}

static void build_resnet50(builder *bd) {
  static const int blocks[4] = {3, 4, 6, 3};
  int x = pb__b_conv(bd, 0, "conv1", 64, 7, 2, 3, 0, "bn1", PB__ACT_RELU, -1);
  x = pb__b_pool(bd, x, PB__OP_MAXPOOL, 3, 2, 1);
  char a[64], b[64];
  for (int st = 0; st < 4; st++) {
    int64_t planes = 64LL << st;
    for (int bl = 0; bl < blocks[st]; bl++) {
      int stride = (bl == 0 && st > 0) ? 2 : 1;
      char pre[32];
      snprintf(pre, sizeof pre, "layer%d.%d", st + 1, bl);
      snprintf(a, sizeof a, "%s.conv1", pre), snprintf(b, sizeof b, "%s.bn1", pre);
      int t = pb__b_conv(bd, x, a, planes, 1, 1, 0, 0, b, PB__ACT_RELU, -1);
      /* torchvision v1.5: the stride sits on the 3x3 conv */
      snprintf(a, sizeof a, "%s.conv2", pre), snprintf(b, sizeof b, "%s.bn2", pre);
      t = pb__b_conv(bd, t, a, planes, 3, stride, 1, 0, b, PB__ACT_RELU, -1);
      int idn = x;
      if (bl == 0) {
        snprintf(a, sizeof a, "%s.downsample.0", pre), snprintf(b, sizeof b, "%s.downsample.1", pre);
        idn = pb__b_conv(bd, x, a, planes * 4, 1, stride, 0, 0, b, PB__ACT_NONE, -1);
      }
      snprintf(a, sizeof a, "%s.conv3", pre), snprintf(b, sizeof b, "%s.bn3", pre);
      x = pb__b_conv(bd, t, a, planes * 4, 1, 1, 0, 0, b, PB__ACT_RELU, idn);
    }
  }
  int g = pb__b_pool(bd, x, PB__OP_GAP, 0, 1, 0);
  bd->g->output = pb__b_linear(bd, g, "fc", 1000, PB__ACT_NONE, -1);
}

static void build_vit_b_16(builder *bd) {
  const int64_t D = 768;
  char nm[128];
  int x = pb__b_patch_tokens(bd, 0, 16, D);
  /* PIPEBENCH_VIT_LAYERS (tests only: a short model for compute-sanitizer) keeps the first
   * blocks; 12 otherwise */
  const char *nl = getenv("PIPEBENCH_VIT_LAYERS");
  int layers = nl != NULL && atoi(nl) >= 1 && atoi(nl) <= 12 ? atoi(nl) : 12;
  for (int i = 0; i < layers; i++) {
    char pre[64];
    snprintf(pre, sizeof pre, "encoder.layers.encoder_layer_%d", i);
    snprintf(nm, sizeof nm, "%s.ln_1", pre);
    int h = pb__b_layernorm(bd, x, nm, 1e-6f);
    snprintf(nm, sizeof nm, "%s.self_attention.in_proj", pre);
    int q = pb__b_linear(bd, h, nm, 3 * D, PB__ACT_NONE, -1);
    if (bd->failed) return;
    /* torch keeps the q, k, v projections as one "in_proj_weight" (3D x D) */
    pb__param *pw = &bd->g->params[bd->g->n_params - 2], *pb = &bd->g->params[bd->g->n_params - 1];
    snprintf(pw->name, sizeof pw->name, "%s.self_attention.in_proj_weight", pre);
    snprintf(pb->name, sizeof pb->name, "%s.self_attention.in_proj_bias", pre);
    int a = pb__b_attention(bd, q, 12);
    snprintf(nm, sizeof nm, "%s.self_attention.out_proj", pre);
    x = pb__b_linear(bd, a, nm, D, PB__ACT_NONE, x);
    snprintf(nm, sizeof nm, "%s.ln_2", pre);
    h = pb__b_layernorm(bd, x, nm, 1e-6f);
    snprintf(nm, sizeof nm, "%s.mlp.0", pre);
    int m = pb__b_linear(bd, h, nm, 3072, PB__ACT_GELU, -1);
    snprintf(nm, sizeof nm, "%s.mlp.3", pre);
    x = pb__b_linear(bd, m, nm, D, PB__ACT_NONE, x);
  }
  /* LayerNorm acts per token, so normalising only the class token equals torch's order */
  int c = pb__b_take_cls(bd, x);
  c = pb__b_layernorm(bd, c, "encoder.ln", 1e-6f);
  bd->g->output = pb__b_linear(bd, c, "heads.head", 1000, PB__ACT_NONE, -1);
}

int pb__graph_build(const char *name, int c, int h, int w, uint64_t seed, pb__graph **out,
                    struct pb_error *err) {
  *out = NULL;
  int dc, dh, dw;
  if (name == NULL || pb__model_default_input(name, &dc, &dh, &dw) != 0)
    return pb_error_set(err, PB_EINVAL, "unknown model '%s' (available: embed, resnet50, vit_b_16)",
                        name ? name : "(null)");
  if (c <= 0 || h <= 0 || w <= 0)
    return pb_error_set(err, PB_EINVAL, "model %s: input %dx%dx%d must be positive", name, c, h, w);
  if (strcmp(name, "vit_b_16") == 0 && (c != 3 || h != 224 || w != 224))
    return pb_error_set(err, PB_EINVAL, "model vit_b_16 takes 3x224x224 input, not %dx%dx%d", c,
                        h, w);
  if (strcmp(name, "resnet50") == 0 && (h < 32 || w < 32))
    return pb_error_set(err, PB_EINVAL, "model resnet50 needs input of at least 32x32, not %dx%d",
                        h, w);
  pb__graph *g = calloc(1, sizeof *g);
  if (g == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  snprintf(g->model, sizeof g->model, "%s", name);
  builder bd;
  pb__builder_init(&bd, g, seed);
  pb__b_tensor(&bd, 0, c, h, w);
  if (strcmp(name, "embed") == 0) build_embed(&bd);
  else if (strcmp(name, "resnet50") == 0) build_resnet50(&bd);
  else build_vit_b_16(&bd);
  if (bd.failed || g->output < 0) {
    pb__graph_free(g);
    return pb_error_set(err, PB_ENOMEM, "out of memory building model %s", name);
  }
  pb__graph_finish(g);
  *out = g;
  return 0;
}

void pb__builder_init(pb__builder *bd, pb__graph *g, uint64_t seed) {
  bd->g = g;
  bd->failed = 0;
  pb_rng_init(&bd->rng, seed);
}

void pb__graph_finish(pb__graph *g) {
  pb__tshape os = g->tensors[g->output];
  g->outputs = os.c * os.h * os.w;
}
