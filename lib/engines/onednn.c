/* The oneDNN CPU backend: compiles a layer graph into oneDNN primitives once, at creation, for
 * one batch size; forward then only sets two data handles and executes the list. Activations
 * use the blocked layouts oneDNN picks ("any"); weights are reordered into the layouts the
 * primitives want, once. Activation buffers are reused as soon as a tensor is dead. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "common/env.h"
#include "engines/onednn_internal.h"

/* oneDNN's version, for every result row (common/env.h). */
static void onednn_version(char *buf, size_t size) {
  const dnnl_version_t *v = dnnl_version();
  snprintf(buf, size, "%d.%d.%d", v->major, v->minor, v->patch);
}
PB__ENV_VERSION(register_onednn, "onednn_version", onednn_version)

int pb__onednn_err(struct pb_error *err, dnnl_status_t s, const char *what) {
  int code = s == dnnl_out_of_memory ? PB_ENOMEM
             : s == dnnl_unimplemented ? PB_EUNSUPPORTED
                                       : PB_EINVAL;
  return pb_error_set(err, code, "oneDNN %s failed: %s", what, dnnl_status2str(s));
}

/* oneDNN here runs on OpenMP, whose thread count is set per calling thread; libgomp is already
 * loaded by libdnnl, so look the setter up instead of linking it. */
void pb__onednn_set_threads(int n) {
  static void (*set)(int) = NULL;
  static int looked = 0;
  if (!looked) {
    void *f = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    memcpy(&set, &f, sizeof set);
    looked = 1;
  }
  if (set != NULL && n > 0) set(n);
}

/* ---- bookkeeping ------------------------------------------------------------------------- */

void *pb__onednn_alloc(pb__dn *o, size_t n, int64_t *counter) {
  if (o->n_allocs == o->cap_allocs) {
    int cap = o->cap_allocs ? o->cap_allocs * 2 : 64;
    pb__onednn_alloc_rec *a = realloc(o->allocs, (size_t)cap * sizeof *a);
    if (a == NULL) return NULL;
    o->allocs = a, o->cap_allocs = cap;
  }
  void *p = pb_alloc(n);
  if (p == NULL) return NULL;
  o->allocs[o->n_allocs++] = (pb__onednn_alloc_rec){p, n};
  *counter += (int64_t)n;
  return p;
}

dnnl_memory_t pb__onednn_mem(pb__dn *o, const dnnl_memory_desc_t *md, void *ptr) {
  if (o->n_mems == o->cap_mems) {
    int cap = o->cap_mems ? o->cap_mems * 2 : 128;
    dnnl_memory_t *m = realloc(o->mems, (size_t)cap * sizeof *m);
    if (m == NULL) return NULL;
    o->mems = m, o->cap_mems = cap;
  }
  dnnl_memory_t m = NULL;
  if (dnnl_memory_create(&m, md, o->eng, ptr) != dnnl_success) return NULL;
  o->mems[o->n_mems++] = m;
  return m;
}

pb__onednn_step *pb__onednn_add_step(pb__dn *o, pb__onednn_step **list, int *n, int *cap) {
  (void)o;
  if (*n == *cap) {
    int c = *cap ? *cap * 2 : 64;
    pb__onednn_step *s = realloc(*list, (size_t)c * sizeof *s);
    if (s == NULL) return NULL;
    *list = s, *cap = c;
  }
  pb__onednn_step *s = &(*list)[(*n)++];
  memset(s, 0, sizeof *s);
  return s;
}

static pb__onednn_step *new_step(pb__dn *o) {
  return pb__onednn_add_step(o, &o->steps, &o->n_steps, &o->cap_steps);
}

void pb__onednn_arg(pb__onednn_step *s, int arg, dnnl_memory_t m) {
  s->args[s->nargs].arg = arg;
  s->args[s->nargs].memory = m;
  s->nargs++;
}

/* Creates the primitive of an op descriptor; keeps the primitive descriptor in the step (for
 * the scratchpad size and queries). */
int pb__onednn_make(pb__dn *o, pb__onednn_step *s, const void *op_desc, const dnnl_primitive_attr_t attr,
                const_dnnl_primitive_desc_t hint, const char *what, struct pb_error *err) {
  dnnl_status_t st = dnnl_primitive_desc_create(&s->pd, op_desc, attr, o->eng, hint);
  if (st != dnnl_success) return pb__onednn_err(err, st, what);
  st = dnnl_primitive_create(&s->prim, s->pd);
  if (st != dnnl_success) return pb__onednn_err(err, st, what);
  const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(s->pd, dnnl_query_scratchpad_md, 0);
  s->scratch_bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
  if (s->scratch_bytes > o->scratch_need) o->scratch_need = s->scratch_bytes;
  return 0;
}

int pb__onednn_attr(dnnl_primitive_attr_t *attr, int sum, int act, float out_scale) {
  if (dnnl_primitive_attr_create(attr) != dnnl_success) return -1;
  dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
  if (out_scale != 1.0f) dnnl_primitive_attr_set_output_scales(*attr, 1, 0, &out_scale);
  if (sum || act != PB__ACT_NONE) {
    dnnl_post_ops_t po;
    if (dnnl_post_ops_create(&po) != dnnl_success) return -1;
    if (sum) dnnl_post_ops_append_sum(po, 1.0f);
    if (act == PB__ACT_RELU) dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.f, 0.f);
    if (act == PB__ACT_GELU) dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_gelu_erf, 0.f, 0.f);
    dnnl_primitive_attr_set_post_ops(*attr, po);
    dnnl_post_ops_destroy(po);
  }
  return 0;
}

/* Runs a reorder now (weights at creation). */
int pb__onednn_reorder_now(pb__dn *o, const dnnl_memory_desc_t *src_md, void *src,
                       const dnnl_memory_desc_t *dst_md, void *dst, struct pb_error *err) {
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t p = NULL;
  dnnl_memory_t ms = NULL, md = NULL;
  dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, src_md, o->eng, dst_md, o->eng, NULL);
  if (st == dnnl_success) st = dnnl_primitive_create(&p, pd);
  if (st == dnnl_success) st = dnnl_memory_create(&ms, src_md, o->eng, src);
  if (st == dnnl_success) st = dnnl_memory_create(&md, dst_md, o->eng, dst);
  if (st == dnnl_success) {
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, md}};
    st = dnnl_primitive_execute(p, o->strm, 2, a);
  }
  if (st == dnnl_success) st = dnnl_stream_wait(o->strm);
  dnnl_memory_destroy(ms);
  dnnl_memory_destroy(md);
  dnnl_primitive_destroy(p);
  dnnl_primitive_desc_destroy(pd);
  return st == dnnl_success ? 0 : pb__onednn_err(err, st, "weight reorder");
}

/* Puts float32 weights (plain layout user_md) into a fresh buffer of layout want (any dtype). */
static int put_weights(pb__dn *o, const dnnl_memory_desc_t *user_md, float *data,
                       const dnnl_memory_desc_t *want, void **out, struct pb_error *err) {
  void *p = pb__onednn_alloc(o, dnnl_memory_desc_get_size(want), &o->bytes_w);
  if (p == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory for weights");
  *out = p;
  return pb__onednn_reorder_now(o, user_md, data, want, p, err);
}

static float *copy_param(const pb__graph *g, int id) {
  float *c = malloc((size_t)g->params[id].count * sizeof(float));
  if (c != NULL) memcpy(c, g->params[id].data, (size_t)g->params[id].count * sizeof(float));
  return c;
}

/* ---- activation buffers, reused once dead ------------------------------------------------ */

static int buf_acquire(pb__dn *o, size_t size) {
  int best = -1;
  for (int i = 0; i < o->n_bufs; i++)
    if (!o->bufs[i].busy && o->bufs[i].size >= size &&
        (best < 0 || o->bufs[i].size < o->bufs[best].size))
      best = i;
  if (best >= 0) {
    o->bufs[best].busy = 1;
    return best;
  }
  if (o->n_bufs == o->cap_bufs) {
    int cap = o->cap_bufs ? o->cap_bufs * 2 : 32;
    pb__onednn_buf *b = realloc(o->bufs, (size_t)cap * sizeof *b);
    if (b == NULL) return -1;
    o->bufs = b, o->cap_bufs = cap;
  }
  void *p = pb__onednn_alloc(o, size, &o->bytes_act);
  if (p == NULL) return -1;
  o->bufs[o->n_bufs] = (pb__onednn_buf){p, size, 1};
  return o->n_bufs++;
}

/* Gives tensor t a buffer for layout md. */
static int tensor_place(pb__dn *o, int t, const dnnl_memory_desc_t *md, struct pb_error *err) {
  o->tmd[t] = *md;
  if (t == o->output_id) return 0; /* the caller's output tensor, bound at forward */
  int b = buf_acquire(o, dnnl_memory_desc_get_size(md));
  if (b < 0) return pb_error_set(err, PB_ENOMEM, "out of memory for activations");
  o->tbuf[t] = b;
  return 0;
}

static void *tensor_ptr(pb__dn *o, int t) {
  if (o->tbuf[t] < 0) return NULL;
  return o->bufs[o->tbuf[t]].ptr;
}

/* A memory object for tensor t seen through md (a different view of the same bytes). */
static dnnl_memory_t tensor_mem(pb__dn *o, int t, const dnnl_memory_desc_t *md, size_t offset) {
  char *p = tensor_ptr(o, t);
  dnnl_memory_t m = pb__onednn_mem(o, md, p ? p + offset : NULL);
  if (m == NULL) return NULL;
  if (t == 0 && p == NULL && o->n_in_mems < PB__DN_MAX_BIND) o->in_mems[o->n_in_mems++] = m;
  if (t == o->output_id && o->n_out_mems < PB__DN_MAX_BIND) o->out_mems[o->n_out_mems++] = m;
  return m;
}

static void release_dead(pb__dn *o, const pb__graph *g, int op_index) {
  for (int t = 0; t < g->n_tensors; t++)
    if (o->last_use[t] == op_index && o->tbuf[t] >= 0) {
      o->bufs[o->tbuf[t]].busy = 0;
      o->tbuf[t] = -1;
    }
}

static dnnl_memory_desc_t plain(int nd, const dnnl_dims_t dims, dnnl_data_type_t dt) {
  static const dnnl_format_tag_t tags[] = {dnnl_format_tag_undef, dnnl_a, dnnl_ab, dnnl_abc,
                                           dnnl_abcd, dnnl_abcde};
  dnnl_memory_desc_t md;
  dnnl_memory_desc_init_by_tag(&md, nd, dims, dt, tags[nd]);
  return md;
}

static dnnl_memory_desc_t any_md(int nd, const dnnl_dims_t dims, dnnl_data_type_t dt) {
  dnnl_memory_desc_t md;
  dnnl_memory_desc_init_by_tag(&md, nd, dims, dt, dnnl_format_tag_any);
  return md;
}

/* Adds a reorder step from tensor t's layout to want (into a fresh tensor slot `into`). */
static int reorder_step(pb__dn *o, int from, int into, const dnnl_memory_desc_t *want,
                        struct pb_error *err) {
  pb__onednn_step *s = new_step(o);
  if (s == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  dnnl_status_t st =
      dnnl_reorder_primitive_desc_create(&s->pd, &o->tmd[from], o->eng, want, o->eng, NULL);
  if (st != dnnl_success) return pb__onednn_err(err, st, "reorder");
  st = dnnl_primitive_create(&s->prim, s->pd);
  if (st != dnnl_success) return pb__onednn_err(err, st, "reorder");
  PB_RETURN_NOT_OK(tensor_place(o, into, want, err));
  dnnl_memory_t a = tensor_mem(o, from, &o->tmd[from], 0), b = tensor_mem(o, into, want, 0);
  if (a == NULL || b == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  pb__onednn_arg(s, DNNL_ARG_FROM, a);
  pb__onednn_arg(s, DNNL_ARG_TO, b);
  return 0;
}

/* ---- ops ---------------------------------------------------------------------------------- */

/* Folds batch norm (eval mode) into the conv's weights and bias:
 * w' = w * g / sqrt(v + eps), b' = (b - m) * g / sqrt(v + eps) + beta. */
static int folded_conv_weights(const pb__graph *g, const pb__op *op, float **w, float **b) {
  *w = copy_param(g, op->w);
  *b = calloc((size_t)op->cout, sizeof(float));
  if (*w == NULL || *b == NULL) return PB_ENOMEM;
  if (op->b >= 0) memcpy(*b, g->params[op->b].data, (size_t)op->cout * sizeof(float));
  if (op->bn_g < 0) return 0;
  int64_t per = g->params[op->w].count / op->cout;
  for (int64_t oc = 0; oc < op->cout; oc++) {
    double s = g->params[op->bn_g].data[oc] / sqrt((double)g->params[op->bn_v].data[oc] + op->eps);
    for (int64_t i = 0; i < per; i++) (*w)[oc * per + i] = (float)((*w)[oc * per + i] * s);
    (*b)[oc] = (float)(((*b)[oc] - g->params[op->bn_m].data[oc]) * s + g->params[op->bn_b].data[oc]);
  }
  return 0;
}

/* Convolution. dst_fixed: a layout the output must have (NULL: oneDNN picks). */
static int op_conv(pb__dn *o, const pb__graph *g, const pb__op *op, int out, int64_t oh,
                   int64_t ow, const dnnl_memory_desc_t *dst_fixed, struct pb_error *err) {
  const pb__tshape *si = &g->tensors[op->in];
  const pb__tshape so_ = {0, op->cout, oh, ow}, *so = &so_;
  dnnl_dim_t N = o->N;
  dnnl_dims_t wd = {op->cout, op->cin, op->k, op->k}, bd = {op->cout};
  dnnl_dims_t dd = {N, op->cout, so->h, so->w};
  dnnl_dims_t strides = {op->stride, op->stride}, pad = {op->pad, op->pad};
  dnnl_dims_t pad_r;
  /* right padding so that the output size matches floor division */
  pad_r[0] = (so->h - 1) * op->stride + op->k - si->h - op->pad;
  pad_r[1] = (so->w - 1) * op->stride + op->k - si->w - op->pad;
  dnnl_memory_desc_t wmd = any_md(4, wd, o->dt), bmd = plain(1, bd, dnnl_f32);
  dnnl_memory_desc_t dmd = op->res >= 0 ? o->tmd[op->res] : dst_fixed ? *dst_fixed : any_md(4, dd, o->dt);
  dnnl_convolution_desc_t cd;
  dnnl_status_t st = dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                        dnnl_convolution_direct, &o->tmd[op->in],
                                                        &wmd, &bmd, &dmd, strides, pad, pad_r);
  if (st != dnnl_success) return pb__onednn_err(err, st, "convolution descriptor");
  dnnl_primitive_attr_t attr;
  if (pb__onednn_attr(&attr, op->res >= 0, op->act, 1.0f) != 0)
    return pb_error_set(err, PB_ENOMEM, "attr");
  pb__onednn_step *s = new_step(o);
  if (s == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int rc = pb__onednn_make(o, s, &cd, attr, NULL, "convolution", err);
  dnnl_primitive_attr_destroy(attr);
  if (rc != 0) return rc;
  const dnnl_memory_desc_t *src_want = dnnl_primitive_desc_query_md(s->pd, dnnl_query_src_md, 0);
  if (!dnnl_memory_desc_equal(src_want, &o->tmd[op->in]))
    return pb_error_set(err, PB_EUNSUPPORTED, "convolution %s wants another source layout",
                        g->params[op->w].name);
  float *w = NULL, *b = NULL;
  if (folded_conv_weights(g, op, &w, &b) != 0) {
    free(w), free(b);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  dnnl_memory_desc_t wuser = plain(4, wd, dnnl_f32);
  void *wp = NULL;
  rc = put_weights(o, &wuser, w, dnnl_primitive_desc_query_md(s->pd, dnnl_query_weights_md, 0), &wp, err);
  free(w);
  float *bp = rc == 0 ? pb__onednn_alloc(o, (size_t)op->cout * sizeof(float), &o->bytes_w) : NULL;
  if (bp != NULL) memcpy(bp, b, (size_t)op->cout * sizeof(float));
  free(b);
  if (rc != 0) return rc;
  if (bp == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  if (op->res < 0)
    PB_RETURN_NOT_OK(tensor_place(o, out, dnnl_primitive_desc_query_md(s->pd, dnnl_query_dst_md, 0), err));
  dnnl_memory_t ms = tensor_mem(o, op->in, &o->tmd[op->in], 0);
  dnnl_memory_t mw = pb__onednn_mem(o, dnnl_primitive_desc_query_md(s->pd, dnnl_query_weights_md, 0), wp);
  dnnl_memory_t mb = pb__onednn_mem(o, &bmd, bp);
  dnnl_memory_t md = tensor_mem(o, out, &o->tmd[out], 0);
  if (!ms || !mw || !mb || !md) return pb_error_set(err, PB_ENOMEM, "out of memory");
  pb__onednn_arg(s, DNNL_ARG_SRC, ms);
  pb__onednn_arg(s, DNNL_ARG_WEIGHTS, mw);
  pb__onednn_arg(s, DNNL_ARG_BIAS, mb);
  pb__onednn_arg(s, DNNL_ARG_DST, md);
  return 0;
}

static int op_pool(pb__dn *o, const pb__graph *g, const pb__op *op, struct pb_error *err) {
  const pb__tshape *si = &g->tensors[op->in], *so = &g->tensors[op->out];
  int gap = op->kind == PB__OP_GAP;
  dnnl_dims_t dd = {o->N, so->c, so->h, so->w};
  dnnl_dims_t k = {gap ? si->h : op->k, gap ? si->w : op->k};
  dnnl_dims_t str = {gap ? 1 : op->stride, gap ? 1 : op->stride};
  dnnl_dims_t pl = {gap ? 0 : op->pad, gap ? 0 : op->pad}, pr;
  pr[0] = (so->h - 1) * str[0] + k[0] - si->h - pl[0];
  pr[1] = (so->w - 1) * str[1] + k[1] - si->w - pl[1];
  if (pr[0] < 0) pr[0] = 0;
  if (pr[1] < 0) pr[1] = 0;
  dnnl_memory_desc_t dmd = any_md(4, dd, o->dt);
  dnnl_pooling_desc_t pdsc;
  dnnl_status_t st = dnnl_pooling_forward_desc_init(&pdsc, dnnl_forward_inference,
                                                    gap ? dnnl_pooling_avg : dnnl_pooling_max,
                                                    &o->tmd[op->in], &dmd, str, k, pl, pr);
  if (st != dnnl_success) return pb__onednn_err(err, st, "pooling descriptor");
  dnnl_primitive_attr_t attr;
  if (pb__onednn_attr(&attr, 0, PB__ACT_NONE, 1.0f) != 0) return pb_error_set(err, PB_ENOMEM, "attr");
  pb__onednn_step *s = new_step(o);
  if (s == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int rc = pb__onednn_make(o, s, &pdsc, attr, NULL, "pooling", err);
  dnnl_primitive_attr_destroy(attr);
  if (rc != 0) return rc;
  const dnnl_memory_desc_t *got = dnnl_primitive_desc_query_md(s->pd, dnnl_query_dst_md, 0);
  dnnl_memory_desc_t want = plain(4, dd, o->dt);
  /* After global pooling the next op reads a plain (N, C) matrix. */
  int direct = !gap || dnnl_memory_desc_equal(got, &want);
  int tmp = o->scratch_tensor;
  PB_RETURN_NOT_OK(tensor_place(o, direct ? op->out : tmp, got, err));
  dnnl_memory_t ms = tensor_mem(o, op->in, &o->tmd[op->in], 0);
  dnnl_memory_t md = tensor_mem(o, direct ? op->out : tmp, got, 0);
  if (!ms || !md) return pb_error_set(err, PB_ENOMEM, "out of memory");
  pb__onednn_arg(s, DNNL_ARG_SRC, ms);
  pb__onednn_arg(s, DNNL_ARG_DST, md);
  if (direct) return 0;
  PB_RETURN_NOT_OK(reorder_step(o, tmp, op->out, &want, err));
  o->bufs[o->tbuf[tmp]].busy = 0;
  o->tbuf[tmp] = -1;
  return 0;
}

/* rows x cin times W^T (+ bias, + activation, + residual into dst). */
static int op_linear(pb__dn *o, const pb__graph *g, const pb__op *op, struct pb_error *err) {
  const pb__tshape *si = &g->tensors[op->in];
  dnnl_dim_t M = o->N * (si->tokens ? si->c : 1);
  dnnl_dims_t sd = {M, op->cin}, wd = {op->cin, op->cout}, bd = {1, op->cout};
  dnnl_dims_t dd = {M, op->cout};
  int is_out = op->out == o->output_id;
  dnnl_memory_desc_t smd = plain(2, sd, o->dt), wmd = any_md(2, wd, o->dt);
  dnnl_memory_desc_t bmd = plain(2, bd, dnnl_f32), dmd = plain(2, dd, is_out ? dnnl_f32 : o->dt);
  dnnl_matmul_desc_t mdsc;
  dnnl_status_t st = dnnl_matmul_desc_init(&mdsc, &smd, &wmd, &bmd, &dmd);
  if (st != dnnl_success) return pb__onednn_err(err, st, "matmul descriptor");
  dnnl_primitive_attr_t attr;
  if (pb__onednn_attr(&attr, op->res >= 0, op->act, 1.0f) != 0)
    return pb_error_set(err, PB_ENOMEM, "attr");
  pb__onednn_step *s = new_step(o);
  if (s == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int rc = pb__onednn_make(o, s, &mdsc, attr, NULL, "matmul", err);
  dnnl_primitive_attr_destroy(attr);
  if (rc != 0) return rc;
  /* torch stores (out, in) row-major: as (in, out) that is the transposed layout "ba" */
  dnnl_memory_desc_t wuser;
  dnnl_memory_desc_init_by_tag(&wuser, 2, wd, dnnl_f32, dnnl_ba);
  void *wp = NULL;
  PB_RETURN_NOT_OK(put_weights(o, &wuser, g->params[op->w].data,
                               dnnl_primitive_desc_query_md(s->pd, dnnl_query_weights_md, 0), &wp, err));
  float *bp = pb__onednn_alloc(o, (size_t)op->cout * sizeof(float), &o->bytes_w);
  if (bp == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  memcpy(bp, g->params[op->b].data, (size_t)op->cout * sizeof(float));
  if (op->res < 0) PB_RETURN_NOT_OK(tensor_place(o, op->out, &dmd, err));
  dnnl_memory_t ms = tensor_mem(o, op->in, &smd, 0);
  dnnl_memory_t mw = pb__onednn_mem(o, dnnl_primitive_desc_query_md(s->pd, dnnl_query_weights_md, 0), wp);
  dnnl_memory_t mb = pb__onednn_mem(o, &bmd, bp);
  dnnl_memory_t md = tensor_mem(o, op->out, &dmd, 0);
  if (!ms || !mw || !mb || !md) return pb_error_set(err, PB_ENOMEM, "out of memory");
  pb__onednn_arg(s, DNNL_ARG_SRC, ms);
  pb__onednn_arg(s, DNNL_ARG_WEIGHTS, mw);
  pb__onednn_arg(s, DNNL_ARG_BIAS, mb);
  pb__onednn_arg(s, DNNL_ARG_DST, md);
  return 0;
}

static int op_layernorm(pb__dn *o, const pb__graph *g, const pb__op *op, struct pb_error *err) {
  const pb__tshape *si = &g->tensors[op->in];
  dnnl_dims_t dims = {o->N * si->c, si->h}, cd = {si->h};
  dnnl_memory_desc_t md = plain(2, dims, o->dt), cmd = plain(1, cd, dnnl_f32);
  dnnl_layer_normalization_desc_t ld;
  dnnl_status_t st = dnnl_layer_normalization_forward_desc_init(
      &ld, dnnl_forward_inference, &md, NULL, op->eps, dnnl_use_scale | dnnl_use_shift);
  if (st != dnnl_success) return pb__onednn_err(err, st, "layer normalization descriptor");
  dnnl_primitive_attr_t attr;
  if (pb__onednn_attr(&attr, 0, PB__ACT_NONE, 1.0f) != 0) return pb_error_set(err, PB_ENOMEM, "attr");
  pb__onednn_step *s = new_step(o);
  if (s == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int rc = pb__onednn_make(o, s, &ld, attr, NULL, "layer normalization", err);
  dnnl_primitive_attr_destroy(attr);
  if (rc != 0) return rc;
  size_t cb = (size_t)si->h * sizeof(float);
  float *gp = pb__onednn_alloc(o, cb, &o->bytes_w), *bp = pb__onednn_alloc(o, cb, &o->bytes_w);
  if (gp == NULL || bp == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  memcpy(gp, g->params[op->w].data, cb);
  memcpy(bp, g->params[op->b].data, cb);
  PB_RETURN_NOT_OK(tensor_place(o, op->out, &md, err));
  dnnl_memory_t ms = tensor_mem(o, op->in, &md, 0), mg = pb__onednn_mem(o, &cmd, gp);
  dnnl_memory_t mb = pb__onednn_mem(o, &cmd, bp), mdst = tensor_mem(o, op->out, &md, 0);
  if (!ms || !mg || !mb || !mdst) return pb_error_set(err, PB_ENOMEM, "out of memory");
  pb__onednn_arg(s, DNNL_ARG_SRC, ms);
  pb__onednn_arg(s, DNNL_ARG_DST, mdst);
  pb__onednn_arg(s, DNNL_ARG_SCALE, mg);
  pb__onednn_arg(s, DNNL_ARG_SHIFT, mb);
  return 0;
}

/* Multi-head attention on a (T, 3D) qkv tensor. One reorder first copies q, k and v out of the
 * projection into contiguous (image, head, T, dh) blocks: oneDNN 2.6 runs batched matmuls that
 * read q, k or v in place through strides only with its generic gemm (avx512_core_bf16 at best,
 * never AMX), while on contiguous blocks it picks brgemm. Then scores = q k^T / sqrt(dh) (k read
 * as a transposed view), softmax in place, and scores x v written straight into the (T, D)
 * layout with heads side by side that the output projection reads (brgemm takes that dst). */
static int op_attention(pb__dn *o, const pb__graph *g, const pb__op *op, struct pb_error *err) {
  const pb__tshape *si = &g->tensors[op->in];
  dnnl_dim_t N = o->N, T = si->c, D = op->cout, H = op->heads, dh = D / H;
  size_t es = o->dt == dnnl_bf16 ? 2 : 4;
  size_t one = (size_t)(N * H * T * dh) * es; /* bytes of each of q, k, v */
  int tsc = o->scratch_tensor, theads = o->scratch_tensor + 2;
  /* qkv as (which, image, head, t, d) through strides, copied into plain abcde */
  dnnl_dims_t hd = {3, N, H, T, dh}, hs = {D, T * 3 * D, dh, 3 * D, 1};
  dnnl_memory_desc_t split, heads = plain(5, hd, o->dt);
  dnnl_memory_desc_init_by_strides(&split, 5, hd, o->dt, hs);
  dnnl_memory_desc_t saved = o->tmd[op->in];
  o->tmd[op->in] = split;
  int rc = reorder_step(o, op->in, theads, &heads, err);
  o->tmd[op->in] = saved;
  PB_RETURN_NOT_OK(rc);
  dnnl_memory_desc_t q, kt, sc, out;
  dnnl_dims_t qd = {N, H, T, dh}, kd = {N, H, dh, T}, ks = {H * T * dh, T * dh, 1, dh};
  dnnl_dims_t sd = {N, H, T, T}, os = {T * D, dh, D, 1};
  q = plain(4, qd, o->dt);
  dnnl_memory_desc_init_by_strides(&kt, 4, kd, o->dt, ks);
  dnnl_memory_desc_init_by_strides(&out, 4, qd, o->dt, os);
  sc = plain(4, sd, o->dt);
  dnnl_matmul_desc_t m1, m2;
  dnnl_status_t st = dnnl_matmul_desc_init(&m1, &q, &kt, NULL, &sc);
  if (st == dnnl_success) st = dnnl_matmul_desc_init(&m2, &sc, &q, NULL, &out);
  if (st != dnnl_success) return pb__onednn_err(err, st, "attention matmul descriptor");
  dnnl_softmax_desc_t smd;
  st = dnnl_softmax_forward_desc_init(&smd, dnnl_forward_inference, &sc, 3);
  if (st != dnnl_success) return pb__onednn_err(err, st, "softmax descriptor");
  dnnl_primitive_attr_t a1, a0;
  if (pb__onednn_attr(&a1, 0, PB__ACT_NONE, (float)(1.0 / sqrt((double)dh))) != 0 ||
      pb__onednn_attr(&a0, 0, PB__ACT_NONE, 1.0f) != 0)
    return pb_error_set(err, PB_ENOMEM, "attr");
  pb__onednn_step *s1 = new_step(o);
  rc = s1 ? pb__onednn_make(o, s1, &m1, a1, NULL, "attention scores", err) : PB_ENOMEM;
  pb__onednn_step *s2 = rc == 0 ? new_step(o) : NULL;
  if (rc == 0) rc = s2 ? pb__onednn_make(o, s2, &smd, a0, NULL, "softmax", err) : PB_ENOMEM;
  pb__onednn_step *s3 = rc == 0 ? new_step(o) : NULL;
  if (rc == 0) rc = s3 ? pb__onednn_make(o, s3, &m2, a0, NULL, "attention values", err) : PB_ENOMEM;
  dnnl_primitive_attr_destroy(a1);
  dnnl_primitive_attr_destroy(a0);
  if (rc != 0) return rc == PB_ENOMEM ? pb_error_set(err, rc, "out of memory") : rc;
  PB_RETURN_NOT_OK(tensor_place(o, tsc, &sc, err));
  dnnl_dims_t flat = {N * T, D};
  dnnl_memory_desc_t omd = plain(2, flat, o->dt);
  PB_RETURN_NOT_OK(tensor_place(o, op->out, &omd, err));
  /* s1..s3 may have moved when the step list grew: index from the end */
  s1 = &o->steps[o->n_steps - 3], s2 = &o->steps[o->n_steps - 2], s3 = &o->steps[o->n_steps - 1];
  dnnl_memory_t mq = tensor_mem(o, theads, &q, 0);
  dnnl_memory_t mk = tensor_mem(o, theads, &kt, one);
  dnnl_memory_t mv = tensor_mem(o, theads, &q, 2 * one);
  dnnl_memory_t ms = tensor_mem(o, tsc, &sc, 0), mo = tensor_mem(o, op->out, &out, 0);
  if (!mq || !mk || !mv || !ms || !mo) return pb_error_set(err, PB_ENOMEM, "out of memory");
  pb__onednn_arg(s1, DNNL_ARG_SRC, mq);
  pb__onednn_arg(s1, DNNL_ARG_WEIGHTS, mk);
  pb__onednn_arg(s1, DNNL_ARG_DST, ms);
  pb__onednn_arg(s2, DNNL_ARG_SRC, ms);
  pb__onednn_arg(s2, DNNL_ARG_DST, ms);
  pb__onednn_arg(s3, DNNL_ARG_SRC, ms);
  pb__onednn_arg(s3, DNNL_ARG_WEIGHTS, mv);
  pb__onednn_arg(s3, DNNL_ARG_DST, mo);
  o->bufs[o->tbuf[tsc]].busy = 0, o->tbuf[tsc] = -1;
  o->bufs[o->tbuf[theads]].busy = 0, o->tbuf[theads] = -1;
  return 0;
}

/* Patch embedding: a k/k conv whose output a reorder writes straight into the patch rows of the
 * token tensor (channels-last is already (patches, D)), a small loop that puts the class token
 * first in each image, then one in-place binary add of the position embedding. */
static int op_patch_tokens(pb__dn *o, const pb__graph *g, const pb__op *op, struct pb_error *err) {
  const pb__tshape *si = &g->tensors[op->in];
  int64_t gh = si->h / op->k, gw = si->w / op->k, D = op->cout, T = gh * gw + 1;
  size_t es = o->dt == dnnl_bf16 ? 2 : 4;
  /* The conv writes oneDNN's preferred layout (a plain-source conv into channels-last has only
   * the reference implementation); the reorder makes it channels-last. */
  int tmp2 = o->scratch_tensor + 1;
  pb__op conv = *op;
  conv.kind = PB__OP_CONV, conv.pad = 0, conv.res = -1, conv.act = PB__ACT_NONE;
  PB_RETURN_NOT_OK(op_conv(o, g, &conv, tmp2, gh, gw, NULL, err));
  dnnl_dims_t td = {o->N * T, D};
  dnnl_memory_desc_t tmd = plain(2, td, o->dt);
  PB_RETURN_NOT_OK(tensor_place(o, op->out, &tmd, err));
  dnnl_dims_t dd = {o->N, D, gh, gw}, ds = {T * D, 1, gw * D, D};
  dnnl_memory_desc_t rows;
  dnnl_memory_desc_init_by_strides(&rows, 4, dd, o->dt, ds);
  pb__onednn_step *s = new_step(o);
  if (s == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  dnnl_status_t st =
      dnnl_reorder_primitive_desc_create(&s->pd, &o->tmd[tmp2], o->eng, &rows, o->eng, NULL);
  if (st == dnnl_success) st = dnnl_primitive_create(&s->prim, s->pd);
  if (st != dnnl_success) return pb__onednn_err(err, st, "patch reorder");
  dnnl_memory_t a = tensor_mem(o, tmp2, &o->tmd[tmp2], 0);
  dnnl_memory_t b = tensor_mem(o, op->out, &rows, (size_t)D * es);
  if (!a || !b) return pb_error_set(err, PB_ENOMEM, "out of memory");
  pb__onednn_arg(s, DNNL_ARG_FROM, a);
  pb__onednn_arg(s, DNNL_ARG_TO, b);
  o->bufs[o->tbuf[tmp2]].busy = 0;
  o->tbuf[tmp2] = -1;
  size_t pb = (size_t)(T * D) * sizeof(float);
  float *pos = pb__onednn_alloc(o, pb, &o->bytes_w), *cls = pb__onednn_alloc(o, (size_t)D * 4, &o->bytes_w);
  if (pos == NULL || cls == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  memcpy(pos, g->params[op->pos].data, pb);
  memcpy(cls, g->params[op->cls].data, (size_t)D * 4);
  s = new_step(o);
  if (s == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  s->custom = 1;
  s->c_dst = tensor_ptr(o, op->out);
  s->c_cls = cls, s->c_T = T, s->c_D = D, s->c_bf16 = o->dt == dnnl_bf16;
  /* tokens (N, T, D) += pos (1, T, D), broadcast over images */
  dnnl_dims_t xd = {o->N, T, D}, pd = {1, T, D};
  dnnl_memory_desc_t x = plain(3, xd, o->dt), p1 = plain(3, pd, dnnl_f32);
  dnnl_binary_desc_t bd;
  st = dnnl_binary_desc_init(&bd, dnnl_binary_add, &x, &p1, &x);
  if (st != dnnl_success) return pb__onednn_err(err, st, "binary descriptor");
  dnnl_primitive_attr_t attr;
  if (pb__onednn_attr(&attr, 0, PB__ACT_NONE, 1.0f) != 0) return pb_error_set(err, PB_ENOMEM, "attr");
  s = new_step(o);
  int rc = s ? pb__onednn_make(o, s, &bd, attr, NULL, "position embedding", err) : PB_ENOMEM;
  dnnl_primitive_attr_destroy(attr);
  if (rc != 0) return rc == PB_ENOMEM ? pb_error_set(err, rc, "out of memory") : rc;
  dnnl_memory_t mx = tensor_mem(o, op->out, &x, 0), mp = pb__onednn_mem(o, &p1, pos);
  if (!mx || !mp) return pb_error_set(err, PB_ENOMEM, "out of memory");
  pb__onednn_arg(s, DNNL_ARG_SRC_0, mx);
  pb__onednn_arg(s, DNNL_ARG_SRC_1, mp);
  pb__onednn_arg(s, DNNL_ARG_DST, mx);
  return 0;
}

/* Row 0 of each image: the class token. */
static void run_patch_tokens(const pb__dn *o, const pb__onednn_step *s) {
  int64_t T = s->c_T, D = s->c_D;
  for (int64_t n = 0; n < o->N; n++) {
    size_t at = (size_t)(n * T * D);
    if (s->c_bf16) {
      uint16_t *dst = (uint16_t *)s->c_dst + at;
      for (int64_t d = 0; d < D; d++) dst[d] = pb__f32_to_bf16(s->c_cls[d]);
    } else {
      memcpy((float *)s->c_dst + at, s->c_cls, (size_t)D * sizeof(float));
    }
  }
}

static int op_take_cls(pb__dn *o, const pb__graph *g, const pb__op *op, struct pb_error *err) {
  const pb__tshape *si = &g->tensors[op->in];
  dnnl_dims_t d = {o->N, si->h}, s = {si->c * si->h, 1};
  dnnl_memory_desc_t view, dst = plain(2, d, o->dt);
  dnnl_memory_desc_init_by_strides(&view, 2, d, o->dt, s);
  dnnl_memory_desc_t saved = o->tmd[op->in];
  o->tmd[op->in] = view;
  int rc = reorder_step(o, op->in, op->out, &dst, err);
  o->tmd[op->in] = saved;
  return rc;
}

/* ---- create, forward, destroy -------------------------------------------------------------- */

static const char *isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
  case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
  case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core: return "avx512_core";
  case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
  case dnnl_cpu_isa_avx2: return "avx2";
  case dnnl_cpu_isa_avx: return "avx";
  case dnnl_cpu_isa_sse41: return "sse41";
  default: return "unknown";
  }
}

/* bfloat16 needs native dot products (avx512_bf16 or AMX). oneDNN 2.6 can emulate bf16 on plain
 * avx512f, but that runs slower than float32 and would mislead a benchmark, so it is refused. */
int pb__onednn_check_dtype(const char *dtype, dnnl_data_type_t *dt, struct pb_error *err) {
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  if (strcmp(dtype, "float32") == 0) {
    *dt = dnnl_f32;
    return 0;
  }
  if (strcmp(dtype, "bfloat16") == 0) {
    if (((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) !=
        (unsigned)dnnl_cpu_isa_avx512_core_bf16)
      return pb_error_set(err, PB_EUNSUPPORTED,
                          "bfloat16 on the CPU needs avx512_bf16 or AMX; this CPU's oneDNN ISA is "
                          "%s (emulated bf16 is slower than float32, so it is not offered)",
                          isa_name(isa));
    *dt = dnnl_bf16;
    return 0;
  }
  return pb_error_set(err, PB_EUNSUPPORTED,
                      "dtype %s: oneDNN 2.6 has no float16 compute on this CPU (use float32 or "
                      "bfloat16 on the CPU, float16 on cuda)",
                      dtype);
}

static void dn_destroy(pb_engine *e);

static int dn_init(pb__dn *o, pb_engine *e, struct pb_error *err) {
  o->N = e->info.batch_size;
  o->threads = e->info.threads;
  pb__onednn_set_threads(o->threads);
  dnnl_status_t st = dnnl_engine_create(&o->eng, dnnl_cpu, 0);
  if (st == dnnl_success) st = dnnl_stream_create(&o->strm, o->eng, dnnl_stream_default_flags);
  if (st != dnnl_success) return pb__onednn_err(err, st, "engine");
  snprintf(e->info.isa, sizeof e->info.isa, "%s", isa_name(dnnl_get_effective_cpu_isa()));
  pb__cpu_model(e->info.device_name, sizeof e->info.device_name);
  return 0;
}

int pb__onednn_finish_scratch(pb__dn *o, pb__onednn_step *steps, int n, struct pb_error *err) {
  if (o->scratch == NULL && o->scratch_need > 0) {
    o->scratch = pb__onednn_alloc(o, o->scratch_need, &o->bytes_scratch);
    if (o->scratch == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory for scratchpad");
  }
  for (int i = 0; i < n; i++) {
    pb__onednn_step *s = &steps[i];
    if (s->prim == NULL || s->pd == NULL || s->scratch_bytes == 0) continue;
    dnnl_memory_t m =
        pb__onednn_mem(o, dnnl_primitive_desc_query_md(s->pd, dnnl_query_scratchpad_md, 0), o->scratch);
    if (m == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    pb__onednn_arg(s, DNNL_ARG_SCRATCHPAD, m);
  }
  return 0;
}

static int compile_inference(pb__dn *o, const pb__graph *g, struct pb_error *err) {
  /* three spare tensor slots for temporaries (scores, outputs before a reorder, attention's
   * per-head q, k and v) */
  int nt = g->n_tensors + 3;
  o->tmd = calloc((size_t)nt, sizeof *o->tmd);
  o->tbuf = malloc((size_t)nt * sizeof *o->tbuf);
  o->last_use = malloc((size_t)nt * sizeof *o->last_use);
  if (!o->tmd || !o->tbuf || !o->last_use) return pb_error_set(err, PB_ENOMEM, "out of memory");
  o->scratch_tensor = g->n_tensors;
  o->output_id = g->output;
  for (int t = 0; t < nt; t++) o->tbuf[t] = -1, o->last_use[t] = -1;
  for (int i = 0; i < g->n_ops; i++) {
    o->last_use[g->ops[i].in] = i;
    if (g->ops[i].res >= 0) o->last_use[g->ops[i].res] = i;
  }
  const pb__tshape *s0 = &g->tensors[0];
  dnnl_dims_t id = {o->N, s0->c, s0->h, s0->w};
  dnnl_memory_desc_t in_f32 = plain(4, id, dnnl_f32);
  o->tmd[0] = in_f32;
  if (o->dt != dnnl_f32) {
    /* The caller's float32 input is converted first; tensor 0 becomes the converted copy.
     * Each convolution takes the layout its producer wrote, so this one decides them all: from
     * plain NCHW the first convolution writes nChw16c and so do the rest. oneDNN 2.6's AMX
     * convolutions take only channels-last (NHWC) activations, so on nChw16c every bf16
     * convolution fell back to the avx512_core_bf16 kernels, slower than float32 there. With
     * AMX the copy is NHWC; without it nChw16c stays, as its kernels beat the NHWC ones. */
    pb__onednn_step *s = new_step(o);
    if (s == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    unsigned amx = (unsigned)dnnl_cpu_isa_avx512_core_amx;
    dnnl_memory_desc_t want;
    dnnl_memory_desc_init_by_tag(&want, 4, id, o->dt, (isa & amx) == amx ? dnnl_acdb : dnnl_abcd);
    dnnl_status_t st = dnnl_reorder_primitive_desc_create(&s->pd, &in_f32, o->eng, &want, o->eng, NULL);
    if (st == dnnl_success) st = dnnl_primitive_create(&s->prim, s->pd);
    if (st != dnnl_success) return pb__onednn_err(err, st, "input reorder");
    dnnl_memory_t a = tensor_mem(o, 0, &in_f32, 0);
    PB_RETURN_NOT_OK(tensor_place(o, 0, &want, err));
    dnnl_memory_t b = tensor_mem(o, 0, &want, 0);
    if (!a || !b) return pb_error_set(err, PB_ENOMEM, "out of memory");
    pb__onednn_arg(s, DNNL_ARG_FROM, a);
    pb__onednn_arg(s, DNNL_ARG_TO, b);
  }
  for (int i = 0; i < g->n_ops; i++) {
    const pb__op *op = &g->ops[i];
    int rc = 0;
    switch (op->kind) {
    case PB__OP_CONV:
      rc = op_conv(o, g, op, op->out, g->tensors[op->out].h, g->tensors[op->out].w, NULL, err);
      break;
    case PB__OP_MAXPOOL:
    case PB__OP_GAP: rc = op_pool(o, g, op, err); break;
    case PB__OP_LINEAR: rc = op_linear(o, g, op, err); break;
    case PB__OP_LAYERNORM: rc = op_layernorm(o, g, op, err); break;
    case PB__OP_ATTENTION: rc = op_attention(o, g, op, err); break;
    case PB__OP_PATCH_TOKENS: rc = op_patch_tokens(o, g, op, err); break;
    case PB__OP_TAKE_CLS: rc = op_take_cls(o, g, op, err); break;
    }
    if (rc != 0) {
      pb_error_prefix(err, "%s op %d: ", g->model, i);
      return rc;
    }
    release_dead(o, g, i);
  }
  return pb__onednn_finish_scratch(o, o->steps, o->n_steps, err);
}

static int dn_create(pb_engine *e, const pb__graph *g, struct pb_error *err) {
  dnnl_data_type_t dt = dnnl_f32; /* set by the check; the value only quiets -O3's analysis */
  PB_RETURN_NOT_OK(pb__onednn_check_dtype(e->info.dtype, &dt, err));
  if (e->training && (e->momentum != 0.0f || e->weight_decay != 0.0f))
    return pb_error_set(err, PB_EUNSUPPORTED, "training on cpu runs plain SGD (momentum and "
                        "weight decay are cuda only)");
  pb__dn *o = calloc(1, sizeof *o);
  if (o == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  o->dt = dt;
  e->impl = o;
  int64_t t0 = pb_now_ns();
  int rc = dn_init(o, e, err);
  if (rc == 0) rc = e->training ? pb__onednn_compile_train(o, e, g, err) : compile_inference(o, g, err);
  if (rc != 0) {
    dn_destroy(e);
    e->impl = NULL;
    return rc;
  }
  e->info.compile_ms = (double)(pb_now_ns() - t0) / 1e6;
  e->info.bytes_weights = o->bytes_w;
  e->info.bytes_activations = o->bytes_act;
  e->info.bytes_scratch = o->bytes_scratch;
  return 0;
}

int pb__onednn_run(pb__dn *o, const pb__onednn_step *steps, int n, struct pb_error *err) {
  for (int i = 0; i < n; i++) {
    const pb__onednn_step *s = &steps[i];
    if (s->custom) {
      dnnl_stream_wait(o->strm);
      if (s->custom == 1) run_patch_tokens(o, s);
      else if (s->custom_fn != NULL) s->custom_fn(o, s);
      continue;
    }
    dnnl_status_t st = dnnl_primitive_execute(s->prim, o->strm, s->nargs, s->args);
    if (st != dnnl_success) return pb__onednn_err(err, st, "execute");
  }
  dnnl_status_t st = dnnl_stream_wait(o->strm);
  return st == dnnl_success ? 0 : pb__onednn_err(err, st, "stream wait");
}

static int dn_forward(pb_engine *e, const void *input, void *output, struct pb_error *err) {
  pb__dn *o = e->impl;
  if (e->training) return pb__onednn_train_forward(o, e, input, output, err);
  pb__onednn_set_threads(o->threads);
  for (int i = 0; i < o->n_in_mems; i++) dnnl_memory_set_data_handle(o->in_mems[i], (void *)input);
  for (int i = 0; i < o->n_out_mems; i++) dnnl_memory_set_data_handle(o->out_mems[i], output);
  return pb__onednn_run(o, o->steps, o->n_steps, err);
}

static void free_steps(pb__onednn_step *s, int n) {
  for (int i = 0; i < n; i++) {
    if (s[i].prim) dnnl_primitive_destroy(s[i].prim);
    if (s[i].pd) dnnl_primitive_desc_destroy(s[i].pd);
  }
  free(s);
}

static void dn_destroy(pb_engine *e) {
  pb__dn *o = e->impl;
  if (o == NULL) return;
  pb__onednn_train_free(o);
  free_steps(o->steps, o->n_steps);
  for (int i = 0; i < o->n_mems; i++) dnnl_memory_destroy(o->mems[i]);
  free(o->mems);
  for (int i = 0; i < o->n_allocs; i++) pb_free(o->allocs[i].p, o->allocs[i].n);
  free(o->allocs);
  free(o->bufs);
  free(o->tmd);
  free(o->tbuf);
  free(o->last_use);
  if (o->strm) dnnl_stream_destroy(o->strm);
  if (o->eng) dnnl_engine_destroy(o->eng);
  free(o);
  e->impl = NULL;
}

static void *dn_tensor_alloc(pb_engine *e, size_t bytes) {
  (void)e;
  return pb_alloc(bytes);
}
static void dn_tensor_release(pb_engine *e, void *p, size_t bytes) {
  (void)e;
  pb_free(p, bytes);
}
static int dn_copy(pb_engine *e, void *dst, const void *src, size_t bytes, struct pb_error *err) {
  (void)e, (void)err;
  memcpy(dst, src, bytes);
  return 0;
}
static int dn_sync(pb_engine *e, struct pb_error *err) {
  pb__dn *o = e->impl;
  dnnl_status_t st = dnnl_stream_wait(o->strm);
  return st == dnnl_success ? 0 : pb__onednn_err(err, st, "stream wait");
}
static int dn_train_step(pb_engine *e, const void *input, const void *target, float lr,
                         float *loss, struct pb_error *err) {
  return pb__onednn_train_step(e->impl, e, input, target, lr, loss, err);
}

const pb__engine_vtable pb__onednn_backend = {
    .name = "onednn",
    .device = "cpu",
    .create = dn_create,
    .destroy = dn_destroy,
    .tensor_alloc = dn_tensor_alloc,
    .tensor_release = dn_tensor_release,
    .tensor_write = dn_copy,
    .tensor_read = dn_copy,
    .host_visible = 1,
    .forward = dn_forward,
    .train_step = dn_train_step,
    .synchronize = dn_sync,
};

/* ---- peak matmul rate ---------------------------------------------------------------------- */

int pb__onednn_peak_gflops(const char *dtype, int threads, double seconds, double *gflops,
                           struct pb_error *err) {
  dnnl_data_type_t dt;
  *gflops = 0;
  PB_RETURN_NOT_OK(pb__onednn_check_dtype(dtype ? dtype : "float32", &dt, err));
  pb__dn o;
  memset(&o, 0, sizeof o);
  pb_engine fake;
  memset(&fake, 0, sizeof fake);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  fake.info.batch_size = 1;
  fake.info.threads = threads > 0 ? threads : (int)ncpu;
  int rc = dn_init(&o, &fake, err);
  /* Square matrices big enough to amortise packing, small enough for a quick measurement. */
  const dnnl_dim_t S = 2048;
  dnnl_dims_t d = {S, S};
  dnnl_memory_desc_t a = plain(2, d, dt), w = any_md(2, d, dt), c = plain(2, d, dt);
  pb__onednn_step s;
  memset(&s, 0, sizeof s);
  dnnl_matmul_desc_t md;
  if (rc == 0) {
    dnnl_status_t st = dnnl_matmul_desc_init(&md, &a, &w, NULL, &c);
    if (st != dnnl_success) rc = pb__onednn_err(err, st, "matmul descriptor");
  }
  dnnl_primitive_attr_t attr = NULL;
  if (rc == 0 && pb__onednn_attr(&attr, 0, PB__ACT_NONE, 1.0f) != 0) rc = PB_ENOMEM;
  if (rc == 0) rc = pb__onednn_make(&o, &s, &md, attr, NULL, "matmul", err);
  if (attr) dnnl_primitive_attr_destroy(attr);
  size_t es = dt == dnnl_bf16 ? 2 : 4;
  void *pa = NULL, *pw = NULL, *pc = NULL;
  if (rc == 0) {
    const dnnl_memory_desc_t *wm = dnnl_primitive_desc_query_md(s.pd, dnnl_query_weights_md, 0);
    pa = pb__onednn_alloc(&o, (size_t)(S * S) * es, &o.bytes_act);
    pw = pb__onednn_alloc(&o, dnnl_memory_desc_get_size(wm), &o.bytes_w);
    pc = pb__onednn_alloc(&o, (size_t)(S * S) * es, &o.bytes_act);
    if (!pa || !pw || !pc) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    else {
      memset(pa, 0, (size_t)(S * S) * es);
      memset(pw, 0, dnnl_memory_desc_get_size(wm));
      dnnl_memory_t ma = pb__onednn_mem(&o, &a, pa), mw = pb__onednn_mem(&o, wm, pw), mc = pb__onednn_mem(&o, &c, pc);
      if (!ma || !mw || !mc) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
      pb__onednn_arg(&s, DNNL_ARG_SRC, ma);
      pb__onednn_arg(&s, DNNL_ARG_WEIGHTS, mw);
      pb__onednn_arg(&s, DNNL_ARG_DST, mc);
    }
  }
  if (rc == 0) rc = pb__onednn_finish_scratch(&o, &s, 1, err);
  if (rc == 0) {
    double best = 1e300;
    int64_t t_end = pb_now_ns() + (int64_t)(seconds * 1e9);
    for (int it = 0; rc == 0 && (it < 3 || pb_now_ns() < t_end); it++) {
      int64_t t0 = pb_now_ns();
      rc = pb__onednn_run(&o, &s, 1, err);
      double dt_s = (double)(pb_now_ns() - t0) / 1e9;
      if (it > 0 && dt_s < best) best = dt_s; /* the first run warms caches and threads */
    }
    if (rc == 0) *gflops = 2.0 * (double)S * (double)S * (double)S / best / 1e9;
  }
  if (s.prim) dnnl_primitive_destroy(s.prim);
  if (s.pd) dnnl_primitive_desc_destroy(s.pd);
  for (int i = 0; i < o.n_mems; i++) dnnl_memory_destroy(o.mems[i]);
  free(o.mems);
  for (int i = 0; i < o.n_allocs; i++) pb_free(o.allocs[i].p, o.allocs[i].n);
  free(o.allocs);
  if (o.strm) dnnl_stream_destroy(o.strm);
  if (o.eng) dnnl_engine_destroy(o.eng);
  return rc;
}
