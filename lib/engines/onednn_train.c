/* Training on oneDNN for sequential conv nets (conv [+ReLU], global average pool, linear): the
 * embed model. Layouts are oneDNN's choice (blocked), as for inference; each weight and its
 * gradient share one layout, so the SGD update is one element-wise loop over the buffer
 * (padding stays zero). All activations of the forward pass are kept for the backward pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engines/onednn_internal.h"

#define MAX_LAYERS 16

typedef struct tparam {
  char name[96];
  float *w, *g;
  int64_t n;
} tparam;

struct pb__onednn_train {
  pb__onednn_step *fwd, *bwd;
  int n_fwd, cap_fwd, n_bwd, cap_bwd;
  dnnl_memory_t x_mem;  /* the caller's input, bound per call */
  float *logits, *dlogits;
  int64_t outputs;
  int n_params;
  tparam params[2 * MAX_LAYERS];
};

/* An activation: its plain layout, buffer and gradient. */
typedef struct act {
  dnnl_memory_desc_t md;
  dnnl_memory_t mem, dmem;
  void *p, *dp;
} act;

static int new_act(pb__dn *o, act *a, const dnnl_memory_desc_t *md, int grad, struct pb_error *err) {
  a->md = *md;
  size_t n = dnnl_memory_desc_get_size(&a->md);
  a->p = pb__onednn_alloc(o, n, &o->bytes_act);
  a->dp = grad ? pb__onednn_alloc(o, n, &o->bytes_act) : NULL;
  if (a->p == NULL || (grad && a->dp == NULL)) return pb_error_set(err, PB_ENOMEM, "out of memory");
  memset(a->p, 0, n);
  if (grad) memset(a->dp, 0, n);
  a->mem = pb__onednn_mem(o, &a->md, a->p);
  a->dmem = grad ? pb__onednn_mem(o, &a->md, a->dp) : NULL;
  if (a->mem == NULL || (grad && a->dmem == NULL)) return pb_error_set(err, PB_ENOMEM, "out of memory");
  return 0;
}

static const dnnl_memory_desc_t *query(const pb__onednn_step *s, dnnl_query_t what) {
  return dnnl_primitive_desc_query_md(s->pd, what, 0);
}

/* A weight in layout md (its torch values reordered from the plain user_md) and its gradient
 * in the same layout. */
static int add_param(pb__dn *o, struct pb__onednn_train *tr, const pb__param *p,
                     const dnnl_memory_desc_t *user_md, const dnnl_memory_desc_t *md,
                     dnnl_memory_t *wm, dnnl_memory_t *gm, struct pb_error *err) {
  tparam *t = &tr->params[tr->n_params++];
  snprintf(t->name, sizeof t->name, "%s", p->name);
  size_t bytes = dnnl_memory_desc_get_size(md);
  t->n = (int64_t)(bytes / sizeof(float));
  t->w = pb__onednn_alloc(o, bytes, &o->bytes_w);
  t->g = pb__onednn_alloc(o, bytes, &o->bytes_act);
  if (t->w == NULL || t->g == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  memset(t->w, 0, bytes);
  memset(t->g, 0, bytes);
  PB_RETURN_NOT_OK(pb__onednn_reorder_now(o, user_md, p->data, md, t->w, err));
  *wm = pb__onednn_mem(o, md, t->w);
  *gm = pb__onednn_mem(o, md, t->g);
  if (*wm == NULL || *gm == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  return 0;
}

static pb__onednn_step *fstep(pb__dn *o) {
  return pb__onednn_add_step(o, &o->tr->fwd, &o->tr->n_fwd, &o->tr->cap_fwd);
}
static pb__onednn_step *bstep(pb__dn *o) {
  return pb__onednn_add_step(o, &o->tr->bwd, &o->tr->n_bwd, &o->tr->cap_bwd);
}

static dnnl_primitive_attr_t plain_attr(void) {
  dnnl_primitive_attr_t a = NULL;
  if (dnnl_primitive_attr_create(&a) == dnnl_success)
    dnnl_primitive_attr_set_scratchpad_mode(a, dnnl_scratchpad_mode_user);
  return a;
}

/* Backward steps are recorded in forward order and run reversed; each layer adds its own. */
typedef struct pending {
  pb__onednn_step s[3];
  int n;
} pending;

#define MAKE(o, step, desc, hint, what)                                                        \
  do {                                                                                         \
    dnnl_primitive_attr_t a_ = plain_attr();                                                   \
    int rc_ = pb__onednn_make((o), (step), (desc), a_, (hint), (what), err);                       \
    dnnl_primitive_attr_destroy(a_);                                                           \
    if (rc_ != 0) return rc_;                                                                  \
  } while (0)

static int train_conv(pb__dn *o, const pb__graph *g, const pb__op *op, act *in, act *out,
                      int need_dsrc, pending *bw, struct pb_error *err) {
  const pb__tshape *si = &g->tensors[op->in], *so = &g->tensors[op->out];
  dnnl_dims_t od = {o->N, op->cout, so->h, so->w}, wd = {op->cout, op->cin, op->k, op->k},
              bd = {op->cout};
  dnnl_dims_t str = {op->stride, op->stride}, pl = {op->pad, op->pad}, pr;
  pr[0] = (so->h - 1) * op->stride + op->k - si->h - op->pad;
  pr[1] = (so->w - 1) * op->stride + op->k - si->w - op->pad;
  dnnl_memory_desc_t wany, dany, bmd, wuser;
  dnnl_memory_desc_init_by_tag(&wany, 4, wd, dnnl_f32, dnnl_format_tag_any);
  dnnl_memory_desc_init_by_tag(&dany, 4, od, dnnl_f32, dnnl_format_tag_any);
  dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_a);
  dnnl_memory_desc_init_by_tag(&wuser, 4, wd, dnnl_f32, dnnl_abcd);
  dnnl_convolution_desc_t fd, dd, wdsc;
  dnnl_status_t st = dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training,
                                                        dnnl_convolution_direct, &in->md, &wany,
                                                        &bmd, &dany, str, pl, pr);
  if (st != dnnl_success) return pb__onednn_err(err, st, "convolution descriptor");
  pb__onednn_step *s = fstep(o);
  if (s == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  MAKE(o, s, &fd, NULL, "convolution forward");
  dnnl_memory_desc_t wmd = *query(s, dnnl_query_weights_md);
  PB_RETURN_NOT_OK(new_act(o, out, query(s, dnnl_query_dst_md), 1, err));
  dnnl_memory_t wm, gwm, bm, gbm;
  PB_RETURN_NOT_OK(add_param(o, o->tr, &g->params[op->w], &wuser, &wmd, &wm, &gwm, err));
  PB_RETURN_NOT_OK(add_param(o, o->tr, &g->params[op->b], &bmd, &bmd, &bm, &gbm, err));
  pb__onednn_arg(s, DNNL_ARG_SRC, in->mem);
  pb__onednn_arg(s, DNNL_ARG_WEIGHTS, wm);
  pb__onednn_arg(s, DNNL_ARG_BIAS, bm);
  pb__onednn_arg(s, DNNL_ARG_DST, out->mem);
  /* gradients in the weights' own layout, so the update needs no reorder */
  st = dnnl_convolution_backward_weights_desc_init(&wdsc, dnnl_convolution_direct, &in->md, &wmd,
                                                   &bmd, &out->md, str, pl, pr);
  if (st != dnnl_success) return pb__onednn_err(err, st, "convolution backward-weights descriptor");
  pb__onednn_step *b = &bw->s[bw->n++];
  memset(b, 0, sizeof *b);
  MAKE(o, b, &wdsc, s->pd, "convolution backward weights");
  pb__onednn_arg(b, DNNL_ARG_SRC, in->mem);
  pb__onednn_arg(b, DNNL_ARG_DIFF_DST, out->dmem);
  pb__onednn_arg(b, DNNL_ARG_DIFF_WEIGHTS, gwm);
  pb__onednn_arg(b, DNNL_ARG_DIFF_BIAS, gbm);
  if (!need_dsrc) return 0;
  /* backward data wants its own weights layout (transposed blocks): a reorder per step */
  st = dnnl_convolution_backward_data_desc_init(&dd, dnnl_convolution_direct, &in->md, &wany,
                                                &out->md, str, pl, pr);
  if (st != dnnl_success) return pb__onednn_err(err, st, "convolution backward-data descriptor");
  pb__onednn_step data;
  memset(&data, 0, sizeof data);
  MAKE(o, &data, &dd, s->pd, "convolution backward data");
  const dnnl_memory_desc_t *want = query(&data, dnnl_query_weights_md);
  dnnl_memory_t wb = wm;
  if (!dnnl_memory_desc_equal(want, &wmd)) {
    void *p = pb__onednn_alloc(o, dnnl_memory_desc_get_size(want), &o->bytes_act);
    wb = p ? pb__onednn_mem(o, want, p) : NULL;
    if (wb == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    b = &bw->s[bw->n++];
    memset(b, 0, sizeof *b);
    st = dnnl_reorder_primitive_desc_create(&b->pd, &wmd, o->eng, want, o->eng, NULL);
    if (st == dnnl_success) st = dnnl_primitive_create(&b->prim, b->pd);
    if (st != dnnl_success) return pb__onednn_err(err, st, "weights reorder");
    pb__onednn_arg(b, DNNL_ARG_FROM, wm);
    pb__onednn_arg(b, DNNL_ARG_TO, wb);
  }
  b = &bw->s[bw->n++];
  *b = data;
  pb__onednn_arg(b, DNNL_ARG_DIFF_DST, out->dmem);
  pb__onednn_arg(b, DNNL_ARG_WEIGHTS, wb);
  pb__onednn_arg(b, DNNL_ARG_DIFF_SRC, in->dmem);
  return 0;
}

static int train_relu(pb__dn *o, act *in, act *out, pending *bw, struct pb_error *err) {
  PB_RETURN_NOT_OK(new_act(o, out, &in->md, 1, err));
  dnnl_eltwise_desc_t fd, bd;
  dnnl_status_t st = dnnl_eltwise_forward_desc_init(&fd, dnnl_forward_training, dnnl_eltwise_relu,
                                                    &in->md, 0.f, 0.f);
  if (st != dnnl_success) return pb__onednn_err(err, st, "relu descriptor");
  pb__onednn_step *s = fstep(o);
  if (s == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  MAKE(o, s, &fd, NULL, "relu forward");
  pb__onednn_arg(s, DNNL_ARG_SRC, in->mem);
  pb__onednn_arg(s, DNNL_ARG_DST, out->mem);
  st = dnnl_eltwise_backward_desc_init(&bd, dnnl_eltwise_relu, &in->md, &in->md, 0.f, 0.f);
  if (st != dnnl_success) return pb__onednn_err(err, st, "relu backward descriptor");
  pb__onednn_step *b = &bw->s[bw->n++];
  memset(b, 0, sizeof *b);
  MAKE(o, b, &bd, s->pd, "relu backward");
  pb__onednn_arg(b, DNNL_ARG_SRC, in->mem);
  pb__onednn_arg(b, DNNL_ARG_DIFF_DST, out->dmem);
  pb__onednn_arg(b, DNNL_ARG_DIFF_SRC, in->dmem);
  return 0;
}

static int train_gap(pb__dn *o, const pb__graph *g, const pb__op *op, act *in, act *out,
                     pending *bw, struct pb_error *err) {
  const pb__tshape *si = &g->tensors[op->in];
  dnnl_dims_t od = {o->N, si->c, 1, 1}, k = {si->h, si->w}, one = {1, 1}, zero = {0, 0};
  dnnl_memory_desc_t dany;
  dnnl_memory_desc_init_by_tag(&dany, 4, od, dnnl_f32, dnnl_format_tag_any);
  dnnl_pooling_desc_t fd, bd;
  dnnl_status_t st = dnnl_pooling_forward_desc_init(&fd, dnnl_forward_training, dnnl_pooling_avg,
                                                    &in->md, &dany, one, k, zero, zero);
  if (st != dnnl_success) return pb__onednn_err(err, st, "pooling descriptor");
  pb__onednn_step *s = fstep(o);
  if (s == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  MAKE(o, s, &fd, NULL, "pooling forward");
  PB_RETURN_NOT_OK(new_act(o, out, query(s, dnnl_query_dst_md), 1, err));
  pb__onednn_arg(s, DNNL_ARG_SRC, in->mem);
  pb__onednn_arg(s, DNNL_ARG_DST, out->mem);
  st = dnnl_pooling_backward_desc_init(&bd, dnnl_pooling_avg, &in->md, &out->md, one, k, zero, zero);
  if (st != dnnl_success) return pb__onednn_err(err, st, "pooling backward descriptor");
  pb__onednn_step *b = &bw->s[bw->n++];
  memset(b, 0, sizeof *b);
  MAKE(o, b, &bd, s->pd, "pooling backward");
  pb__onednn_arg(b, DNNL_ARG_DIFF_DST, out->dmem);
  pb__onednn_arg(b, DNNL_ARG_DIFF_SRC, in->dmem);
  return 0;
}

/* Inner product straight on the pooled (N, C, 1, 1) tensor in its layout; logits plain. */
static int train_linear(pb__dn *o, const pb__graph *g, const pb__op *op, act *in, act *out,
                        pending *bw, struct pb_error *err) {
  dnnl_dims_t od = {o->N, op->cout}, wd = {op->cout, op->cin, 1, 1}, bd = {op->cout};
  dnnl_memory_desc_t omd, wany, wuser, bmd;
  dnnl_memory_desc_init_by_tag(&omd, 2, od, dnnl_f32, dnnl_ab);
  dnnl_memory_desc_init_by_tag(&wany, 4, wd, dnnl_f32, dnnl_format_tag_any);
  dnnl_memory_desc_init_by_tag(&wuser, 4, wd, dnnl_f32, dnnl_abcd); /* torch (out, in) */
  dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_a);
  PB_RETURN_NOT_OK(new_act(o, out, &omd, 1, err));
  dnnl_inner_product_desc_t fd, dd, wdsc;
  dnnl_status_t st = dnnl_inner_product_forward_desc_init(&fd, dnnl_forward_training, &in->md,
                                                          &wany, &bmd, &out->md);
  if (st != dnnl_success) return pb__onednn_err(err, st, "inner product descriptor");
  pb__onednn_step *s = fstep(o);
  if (s == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  MAKE(o, s, &fd, NULL, "inner product forward");
  dnnl_memory_desc_t wmd = *query(s, dnnl_query_weights_md);
  dnnl_memory_t wm, gwm, bm, gbm;
  PB_RETURN_NOT_OK(add_param(o, o->tr, &g->params[op->w], &wuser, &wmd, &wm, &gwm, err));
  PB_RETURN_NOT_OK(add_param(o, o->tr, &g->params[op->b], &bmd, &bmd, &bm, &gbm, err));
  pb__onednn_arg(s, DNNL_ARG_SRC, in->mem);
  pb__onednn_arg(s, DNNL_ARG_WEIGHTS, wm);
  pb__onednn_arg(s, DNNL_ARG_BIAS, bm);
  pb__onednn_arg(s, DNNL_ARG_DST, out->mem);
  st = dnnl_inner_product_backward_weights_desc_init(&wdsc, &in->md, &wmd, &bmd, &out->md);
  if (st != dnnl_success) return pb__onednn_err(err, st, "inner product backward-weights descriptor");
  pb__onednn_step *b = &bw->s[bw->n++];
  memset(b, 0, sizeof *b);
  MAKE(o, b, &wdsc, s->pd, "inner product backward weights");
  pb__onednn_arg(b, DNNL_ARG_SRC, in->mem);
  pb__onednn_arg(b, DNNL_ARG_DIFF_DST, out->dmem);
  pb__onednn_arg(b, DNNL_ARG_DIFF_WEIGHTS, gwm);
  pb__onednn_arg(b, DNNL_ARG_DIFF_BIAS, gbm);
  st = dnnl_inner_product_backward_data_desc_init(&dd, &in->md, &wmd, &out->md);
  if (st != dnnl_success) return pb__onednn_err(err, st, "inner product backward-data descriptor");
  b = &bw->s[bw->n++];
  memset(b, 0, sizeof *b);
  MAKE(o, b, &dd, s->pd, "inner product backward data");
  pb__onednn_arg(b, DNNL_ARG_DIFF_DST, out->dmem);
  pb__onednn_arg(b, DNNL_ARG_WEIGHTS, wm);
  pb__onednn_arg(b, DNNL_ARG_DIFF_SRC, in->dmem);
  return 0;
}

int pb__onednn_compile_train(pb__dn *o, pb_engine *e, const pb__graph *g, struct pb_error *err) {
  if (o->dt != dnnl_f32)
    return pb_error_set(err, PB_EUNSUPPORTED, "training runs in float32 only, not %s",
                        e->info.dtype);
  if (g->n_ops > MAX_LAYERS) goto unsupported;
  for (int i = 0; i < g->n_ops; i++) {
    const pb__op *op = &g->ops[i];
    int ok = (op->kind == PB__OP_CONV && op->res < 0 && op->bn_g < 0 && op->b >= 0 &&
              op->act != PB__ACT_GELU) ||
             op->kind == PB__OP_GAP ||
             (op->kind == PB__OP_LINEAR && !g->tensors[op->in].tokens && op->act == PB__ACT_NONE &&
              op->res < 0 && op->out == g->output);
    if (!ok || op->in != (i == 0 ? 0 : g->ops[i - 1].out)) goto unsupported;
  }
  o->tr = calloc(1, sizeof *o->tr);
  if (o->tr == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  struct pb__onednn_train *tr = o->tr;
  tr->outputs = g->outputs;
  /* activations: input, then up to two per op (conv output and its ReLU) */
  act acts[2 * MAX_LAYERS + 1];
  pending bws[2 * MAX_LAYERS];
  memset(acts, 0, sizeof acts);
  memset(bws, 0, sizeof bws);
  int na = 0, nb = 0;
  const pb__tshape *s0 = &g->tensors[0];
  dnnl_dims_t id = {o->N, s0->c, s0->h, s0->w};
  dnnl_memory_desc_init_by_tag(&acts[0].md, 4, id, dnnl_f32, dnnl_abcd);
  tr->x_mem = pb__onednn_mem(o, &acts[0].md, NULL);
  if (tr->x_mem == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  acts[0].mem = tr->x_mem;
  int rc = 0;
  for (int i = 0; i < g->n_ops && rc == 0; i++) {
    const pb__op *op = &g->ops[i];
    act *in = &acts[na];
    if (op->kind == PB__OP_CONV) {
      rc = train_conv(o, g, op, in, &acts[na + 1], na > 0, &bws[nb++], err);
      na++;
      if (rc == 0 && op->act == PB__ACT_RELU) {
        rc = train_relu(o, &acts[na], &acts[na + 1], &bws[nb++], err);
        na++;
      }
    } else if (op->kind == PB__OP_GAP) {
      rc = train_gap(o, g, op, in, &acts[na + 1], &bws[nb++], err);
      na++;
    } else {
      rc = train_linear(o, g, op, in, &acts[na + 1], &bws[nb++], err);
      na++;
    }
  }
  if (rc != 0) return rc;
  tr->logits = acts[na].p;
  tr->dlogits = acts[na].dp;
  /* backward: layers in reverse; within a layer, weights before data (both read diff_dst) */
  for (int i = nb - 1; i >= 0; i--)
    for (int j = 0; j < bws[i].n; j++) {
      pb__onednn_step *s = bstep(o);
      if (s == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
      *s = bws[i].s[j];
    }
  PB_RETURN_NOT_OK(pb__onednn_finish_scratch(o, tr->fwd, tr->n_fwd, err));
  return pb__onednn_finish_scratch(o, tr->bwd, tr->n_bwd, err);
unsupported:
  return pb_error_set(err, PB_EUNSUPPORTED,
                      "training of %s is not implemented on oneDNN (available: embed)", g->model);
}

int pb__onednn_train_forward(pb__dn *o, pb_engine *e, const void *input, void *output,
                         struct pb_error *err) {
  pb__onednn_set_threads(o->threads);
  dnnl_memory_set_data_handle(o->tr->x_mem, (void *)input);
  PB_RETURN_NOT_OK(pb__onednn_run(o, o->tr->fwd, o->tr->n_fwd, err));
  memcpy(output, o->tr->logits, (size_t)(o->N * e->info.outputs) * sizeof(float));
  return 0;
}

int pb__onednn_train_step(pb__dn *o, pb_engine *e, const void *input, const void *target, float lr,
                      float *loss, struct pb_error *err) {
  struct pb__onednn_train *tr = o->tr;
  pb__onednn_set_threads(o->threads);
  dnnl_memory_set_data_handle(tr->x_mem, (void *)input);
  PB_RETURN_NOT_OK(pb__onednn_run(o, tr->fwd, tr->n_fwd, err));
  int64_t K = tr->outputs, N = o->N;
  double total = 0.0;
  if (e->loss_mse) {
    const float *t = target;
    double scale = 2.0 / (double)(N * K);
    for (int64_t i = 0; i < N * K; i++) {
      double d = (double)tr->logits[i] - t[i];
      total += d * d;
      tr->dlogits[i] = (float)(scale * d);
    }
    total /= (double)(N * K);
  } else {
    const int32_t *lab = target;
    for (int64_t n = 0; n < N; n++) {
      const float *y = tr->logits + n * K;
      float *dy = tr->dlogits + n * K;
      int32_t c = lab[n];
      if (c < 0 || c >= K)
        return pb_error_set(err, PB_EINVAL, "label %d of image %lld is outside [0, %lld)", c,
                            (long long)n, (long long)K);
      double m = y[0], s = 0.0;
      for (int64_t k = 1; k < K; k++) m = y[k] > m ? y[k] : m;
      for (int64_t k = 0; k < K; k++) s += exp((double)y[k] - m);
      total += log(s) + m - y[c];
      for (int64_t k = 0; k < K; k++)
        dy[k] = (float)((exp((double)y[k] - m) / s - (k == c ? 1.0 : 0.0)) / (double)N);
    }
    total /= (double)N;
  }
  PB_RETURN_NOT_OK(pb__onednn_run(o, tr->bwd, tr->n_bwd, err));
  for (int i = 0; i < tr->n_params; i++) {
    tparam *p = &tr->params[i];
    for (int64_t j = 0; j < p->n; j++) p->w[j] -= lr * p->g[j];
  }
  if (loss != NULL) *loss = (float)total;
  return 0;
}

void pb__onednn_train_free(pb__dn *o) {
  if (o->tr == NULL) return;
  struct pb__onednn_train *tr = o->tr;
  pb__onednn_step *lists[2] = {tr->fwd, tr->bwd};
  int ns[2] = {tr->n_fwd, tr->n_bwd};
  for (int l = 0; l < 2; l++) {
    for (int i = 0; i < ns[l]; i++) {
      if (lists[l][i].prim) dnnl_primitive_destroy(lists[l][i].prim);
      if (lists[l][i].pd) dnnl_primitive_desc_destroy(lists[l][i].pd);
    }
    free(lists[l]);
  }
  free(tr);
  o->tr = NULL;
}

int pb__onednn_train_param(pb_engine *e, int i, const char **name, float **w, float **grad,
                       int64_t *n) {
  pb__dn *o = e->impl;
  if (o == NULL || o->tr == NULL || i < 0 || i >= o->tr->n_params) return -1;
  *name = o->tr->params[i].name;
  *w = o->tr->params[i].w;
  *grad = o->tr->params[i].g;
  *n = o->tr->params[i].n;
  return 0;
}
