/* A model as a backend-neutral layer graph with seeded float32 weights. Models (models.c)
 * build it; each backend compiles it into its own primitives. */
#ifndef PB_ENGINES_GRAPH_H
#define PB_ENGINES_GRAPH_H

#include <stdint.h>

#include "pipebench/core.h"

typedef enum {
  PB__OP_CONV = 0,     /* in -> out; optional bias, folded batch norm, residual, activation */
  PB__OP_MAXPOOL,      /* in -> out; k, stride, pad */
  PB__OP_GAP,          /* global average pool: (C,H,W) -> (C,1,1) */
  PB__OP_LINEAR,       /* rows x cin -> rows x cout (rows: tokens, or 1 for an image (C,1,1)) */
  PB__OP_LAYERNORM,    /* over the last dim of tokens */
  PB__OP_PATCH_TOKENS, /* conv k/k to tokens, class token first, plus position embedding */
  PB__OP_ATTENTION,    /* qkv tokens (T, 3D) -> (T, D); softmax(q k^T / sqrt(d)) v per head */
  PB__OP_TAKE_CLS      /* tokens (T, D) -> (1, D): the first token */
} pb__op_kind;

enum { PB__ACT_NONE = 0, PB__ACT_RELU = 1, PB__ACT_GELU = 2 };

typedef struct pb__param {
  char name[96];   /* torch state_dict name */
  int ndim;
  int64_t shape[4];
  int64_t count;
  float *data;     /* pb_alloc'd */
  int learnable;   /* 0 for batch norm running statistics */
} pb__param;

/* Per-image shape of a tensor: an image (c, h, w) or tokens (rows = c, dim = h, w = 1). */
typedef struct pb__tshape {
  int tokens;
  int64_t c, h, w;
} pb__tshape;

typedef struct pb__op {
  pb__op_kind kind;
  int in, out;  /* tensor ids; when res >= 0 the op adds tensor res and writes into it (out == res) */
  int res;
  int act;
  int k, stride, pad;
  int64_t cin, cout;
  int heads;
  float eps;
  int w, b;                 /* param ids, -1 none */
  int bn_g, bn_b, bn_m, bn_v; /* conv: batch norm to fold, -1 none */
  int cls, pos;             /* patch tokens: class token and position embedding */
} pb__op;

typedef struct pb__graph {
  char model[32];
  int n_ops;
  size_t cap_ops;
  pb__op *ops;
  int n_params;
  size_t cap_params;
  pb__param *params;
  int n_tensors;
  size_t cap_tensors;
  pb__tshape *tensors; /* tensor 0 is the input */
  int output;          /* tensor id of the output */
  double flops;        /* forward FLOPs per image */
  int64_t parameters;  /* learnable parameter count */
  int64_t outputs;     /* values per image in the output */
} pb__graph;

/* Builds model `name` for input c x h x w with weights drawn from seed. PB_EINVAL for an unknown
 * model or a shape the model cannot take. Free with pb__graph_free. */
int pb__graph_build(const char *name, int c, int h, int w, uint64_t seed, pb__graph **out,
                    struct pb_error *err);
void pb__graph_free(pb__graph *g);
/* The model's default input. */
int pb__model_default_input(const char *name, int *c, int *h, int *w);
int pb__model_count(void);
const char *pb__model_name(int i);

/* Building graphs by hand (models.c uses these; so do tests). Weights are drawn from bd->rng in
 * the order parameters are added. The first allocation failure sets bd->failed and later calls
 * return -1 / NULL. */
typedef struct pb__builder {
  pb__graph *g;
  pb_rng rng;
  int failed;
} pb__builder;
void pb__builder_init(pb__builder *bd, pb__graph *g, uint64_t seed);
/* Adds a tensor (per-image shape) and returns its id. */
int pb__b_tensor(pb__builder *bd, int tokens, int64_t c, int64_t h, int64_t w);
/* Adds an op reading `in`; the caller fills the rest. */
pb__op *pb__b_op(pb__builder *bd, pb__op_kind kind, int in);
/* conv k x k (bias: its own bias; bn: state_dict prefix of a batch norm to fold, "" none); res >= 0
 * adds tensor res and writes into it. Returns the output tensor id. */
int pb__b_conv(pb__builder *bd, int in, const char *name, int64_t cout, int k, int stride, int pad,
               int bias, const char *bn, int act, int res);
int pb__b_linear(pb__builder *bd, int in, const char *name, int64_t cout, int act, int res);
int pb__b_layernorm(pb__builder *bd, int in, const char *name, float eps);
int pb__b_pool(pb__builder *bd, int in, pb__op_kind kind, int k, int stride, int pad);
/* patch x patch conv to D channels, class token, position embedding (torch's ViT names). */
int pb__b_patch_tokens(pb__builder *bd, int in, int patch, int64_t D);
int pb__b_attention(pb__builder *bd, int qkv, int heads);
int pb__b_take_cls(pb__builder *bd, int in);
/* Sets g->outputs from g->output. */
void pb__graph_finish(pb__graph *g);

#endif
