/* The token layers of the CUDA training step (vit_b_16): the patch embedding with its class
 * token and position embedding, layer norm, linear layers over tokens (bias, exact GELU,
 * residual), multi-head self-attention and taking the class token; each queues its forward and
 * plans its backward as cuda_train.cu's convolutions do. Included by cuda_train.cu, whose
 * engine, parameter, value and product helpers these use.
 *
 * Kept for the backward: each layer norm's input and output with its row statistics, the qkv
 * projection, the attention's output, the MLP's hidden layer before GELU (the output after it
 * is recomputed when the second MLP layer's backward needs it) and the residual stream. The
 * heads, the attention scores and probabilities (recomputed by the backward) and the hidden
 * layer after GELU live in scratch that every block shares. A residual's gradient
 * is its output's buffer itself: the layer norm reading the same input adds into it. */

#include "engines/cuda/cuda_train_vit_kernels.cuh"

/* Partial sums the token layers need (values): layer norm's blocks and the bias gradients'. */
static size_t token_partials(const ct_engine *o, const pb__graph *g) {
  size_t most = 0;
  for (int i = 0; i < g->n_ops; i++) {
    const pb__op *op = &g->ops[i];
    const pb__tshape &si = g->tensors[op->in];
    int64_t rows = o->N * (si.tokens ? si.c : 1);
    size_t need = 0;
    if (op->kind == PB__OP_LAYERNORM) {
      int64_t blocks = (rows + 7) / 8 < PBT_LN_BLOCKS ? (rows + 7) / 8 : PBT_LN_BLOCKS;
      need = (size_t)blocks * (size_t)op->cout;
    } else if (op->kind == PB__OP_LINEAR && si.tokens) {
      int ch, gr;
      int64_t rpc;
      colsum_shape(rows, (int)op->cout, o->colsum_blocks, &ch, &rpc, &gr);
      need = (size_t)ch * (size_t)op->cout;
    }
    if (need > most) most = need;
  }
  return most;
}

/* Shared scratch *p of at least `bytes` (allocated on first use; every block asks the same). */
static int scratch(ct_engine *o, void **p, size_t bytes, struct pb_error *err) {
  if (*p != NULL) return 0;
  TALLOC(*p, void *, bytes, &o->bytes_scratch);
  return 0;
}

/* A value whose forward tensor is y (scratch, or kept by the layer itself). */
static int val_at(ct_engine *o, int c, int h, void *y, int *id) {
  ct_val v;
  v.c = c, v.h = h, v.w = 1;
  v.per = (int64_t)c * h;
  v.y = y;
  o->vals.push_back(v);
  *id = (int)o->vals.size() - 1;
  return 0;
}

#define TKCHECK(what) return kcheck(e2, what)

/* Patch embedding: patches as rows (the inference engine's kernel), one product with the
 * weights, then bias, class token and position embedding. The input needs no gradient. */
template <typename T>
static int patch_op(ct_engine *o, const pb__graph *g, const pb__op *op, struct pb_error *err) {
  const ct_val xi = o->vals[(size_t)o->cur[(size_t)op->in]];
  int k = op->k, C = (int)op->cin, Cp = xi.c, H = xi.h, W = xi.w, D = (int)op->cout;
  int P = (H / k) * (W / k), Tn = P + 1, Kc = C * k * k;
  int64_t N = o->N, Mp = N * P;
  if (D % PBT_VEC != 0) return pbc_err(err, PB_EUNSUPPORTED, "training: patch width %d", D);
  int pw_, pb_, pc_, pp_;
  PB_RETURN_NOT_OK(param_add<T>(o, g->params[op->w].name, g->params[op->w].data, (int64_t)D * Kc, 1, 2, &pw_, err));
  PB_RETURN_NOT_OK(param_add<T>(o, g->params[op->b].name, g->params[op->b].data, D, 1, 0, &pb_, err));
  PB_RETURN_NOT_OK(param_add<T>(o, g->params[op->cls].name, g->params[op->cls].data, D, 1, 0, &pc_, err));
  PB_RETURN_NOT_OK(param_add<T>(o, g->params[op->pos].name, g->params[op->pos].data, (int64_t)Tn * D, 1, 0, &pp_, err));
  void *rows, *pt;
  TALLOC(rows, void *, (size_t)(Mp * Kc) * sizeof(T), &o->bytes_act);
  TALLOC(pt, void *, (size_t)(Mp * D) * sizeof(T), &o->bytes_act);
  int vo;
  PB_RETURN_NOT_OK(val_new(o, D, Tn, 1, sizeof(T), err, &vo));
  o->cur[(size_t)op->out] = vo;
  ct_lt *f, *bw;
  /* patches (Mp x D) = rows (Mp x Kc) W^T; dW (D x Kc) = dpatches^T rows */
  PB_RETURN_NOT_OK(lt_make(o, &f, 1, 0, D, Mp, Kc, Kc, Kc, D, o->bdt, NULL, err));
  PB_RETURN_NOT_OK(lt_make(o, &bw, 0, 1, Kc, D, Mp, Kc, D, Kc, CUDA_R_32F, NULL, err));
  const void *x = xi.y, *wt = pw(o, pw_);
  void *y = o->vals[(size_t)vo].y;
  const float *bias = o->params[(size_t)pb_].w, *cls = o->params[(size_t)pc_].w,
              *pos = o->params[(size_t)pp_].w;
  float *gw = (float *)o->params[(size_t)pw_].grad, *gb = (float *)o->params[(size_t)pb_].grad,
        *gc = (float *)o->params[(size_t)pc_].grad, *gp = (float *)o->params[(size_t)pp_].grad;
  lt_tune(o, f, wt, rows, pt, pt, 1.f, 0.f);
  cudaStream_t st = o->st;
  ct_engine *oo = o;
  o->fwd.push_back([=](struct pb_error *e2) -> int {
    pbk::k_patchify<T><<<grid_of(Mp * Kc), 256, 0, st>>>((const T *)x, (T *)rows, N, C, Cp, H, W, k);
    PB_RETURN_NOT_OK(kcheck(e2, "patch rows"));
    PB_RETURN_NOT_OK(lt_run(oo, f, wt, rows, pt, e2));
    pbk::k_patch_tokens<T><<<grid_of(N * Tn * D), 256, 0, st>>>((const T *)pt, (T *)y, bias, cls,
                                                                 pos, N, P, D);
    TKCHECK("patch tokens");
  });
  o->fwd_labels.push_back("patch_fwd");
  o->bwd_plan.push_back([=](struct pb_error *e3) -> int {
    struct pb_error *err = e3;
    PB_RETURN_NOT_OK(grad_of(oo, vo, err));
    const void *dy = oo->vals[(size_t)vo].dy;
    int bp = pool_get(oo, (size_t)(Mp * D) * sizeof(T), err);
    if (bp < 0) return bp;
    void *dp = oo->pool[(size_t)bp].p;
    lt_tune(oo, bw, rows, dp, gw, gw, 1.f, 0.f);
    oo->bwd.push_back([=](struct pb_error *e2) -> int {
      k_pos_grad<T><<<grid_of((int64_t)Tn * D), 256, 0, st>>>((const T *)dy, gp, N, Tn, D);
      k_cls_bias_grad<<<(unsigned)((D + 127) / 128), 128, 0, st>>>(gp, gc, gb, Tn, D);
      k_patch_rows_grad<T><<<grid_of(Mp * D / PBT_VEC), 256, 0, st>>>((const T *)dy, (T *)dp, N, Tn, D);
      PB_RETURN_NOT_OK(kcheck(e2, "patch backward"));
      return lt_run(oo, bw, rows, dp, gw, e2);
    });
    oo->bwd_labels.push_back("patch_bwd");
    pool_put(oo, bp);
    grad_done(oo, vo);
    return 0;
  });
  return 0;
}

/* Layer norm over each token (statistics in float, kept per row). */
template <typename T>
static int layernorm_op(ct_engine *o, const pb__graph *g, const pb__op *op, struct pb_error *err) {
  int vin = o->cur[(size_t)op->in];
  const ct_val xi = o->vals[(size_t)vin];
  int D = xi.c, Tn = xi.h;
  int64_t rows = o->N * Tn;
  if (D % PBT_VEC != 0 || D > PBT_LN_NV * 32 * PBT_VEC)
    return pbc_err(err, PB_EUNSUPPORTED, "training: layer norm over %d values (a multiple of 8, "
                   "at most 1024)", D);
  int pg_, pb_;
  PB_RETURN_NOT_OK(param_add<T>(o, g->params[op->w].name, g->params[op->w].data, D, 1, 0, &pg_, err));
  PB_RETURN_NOT_OK(param_add<T>(o, g->params[op->b].name, g->params[op->b].data, D, 1, 0, &pb_, err));
  float *mean, *rstd;
  TALLOC(mean, float *, (size_t)rows * 4, &o->bytes_act);
  TALLOC(rstd, float *, (size_t)rows * 4, &o->bytes_act);
  int vo;
  PB_RETURN_NOT_OK(val_new(o, D, Tn, 1, sizeof(T), err, &vo));
  o->cur[(size_t)op->out] = vo;
  const void *x = xi.y;
  void *y = o->vals[(size_t)vo].y;
  const float *gm = o->params[(size_t)pg_].w, *bt = o->params[(size_t)pb_].w;
  float *dgm = (float *)o->params[(size_t)pg_].grad, *dbt = (float *)o->params[(size_t)pb_].grad;
  float eps = op->eps;
  cudaStream_t st = o->st;
  ct_engine *oo = o;
  o->fwd.push_back([=](struct pb_error *e2) -> int {
    k_ln_fwd<T><<<(unsigned)((rows + 7) / 8), 256, 0, st>>>((const T *)x, (T *)y, gm, bt, mean,
                                                            rstd, rows, D, eps);
    TKCHECK("layer norm");
  });
  o->fwd_labels.push_back("layernorm_fwd");
  o->bwd_plan.push_back([=](struct pb_error *e3) -> int {
    struct pb_error *err = e3;
    PB_RETURN_NOT_OK(grad_of(oo, vo, err));
    PB_RETURN_NOT_OK(grad_of(oo, vin, err));
    const void *dy = oo->vals[(size_t)vo].dy;
    void *dx = oo->vals[(size_t)vin].dy;
    int add = oo->vals[(size_t)vin].written;
    oo->vals[(size_t)vin].written = 1;
    int blocks = (int)((rows + 7) / 8 < PBT_LN_BLOCKS ? (rows + 7) / 8 : PBT_LN_BLOCKS);
    float *p0 = oo->part0, *p1 = oo->part1;
    oo->bwd.push_back([=](struct pb_error *e2) -> int {
      k_ln_bwd<T><<<(unsigned)blocks, 256, 0, st>>>((const T *)dy, (const T *)x, gm, mean, rstd,
                                                    (T *)dx, add, rows, D, p0, p1);
      k_colsum_finish<<<(unsigned)((D + 31) / 32), dim3(32, 32), 0, st>>>(
          3, p0, p1, blocks, D, rows, 0.f, 0.f, NULL, NULL, NULL, NULL, dbt, dgm, NULL, NULL, NULL);
      TKCHECK("layer norm backward");
    });
    oo->bwd_labels.push_back("layernorm_bwd");
    grad_done(oo, vo);
    return 0;
  });
  return 0;
}

/* What a linear layer's backward needs. */
struct tl_plan {
  int vin, vo, vres, bgradb; /* bgradb: bw writes the bias gradient too */
  ct_lt *bw, *bd;
  const void *wt, *pre;
  float *gw, *gb;
  int64_t rows, cin, cout;
};

/* The backward of a linear layer over tokens: GELU's derivative (when pre is kept), the bias
 * gradient (column sums), the weight gradient in float and the input's gradient (added when
 * another reader wrote it first). A residual input takes the output's gradient buffer as its
 * own. An input that lives in scratch (after GELU) is recomputed first. */
template <typename T> static void token_linear_plan(ct_engine *o, tl_plan q) {
  o->bwd_plan.push_back([=](struct pb_error *e3) -> int {
    struct pb_error *err = e3;
    ct_engine *oo = o;
    PB_RETURN_NOT_OK(grad_of(oo, q.vo, err));
    void *dy = oo->vals[(size_t)q.vo].dy;
    if (q.vres >= 0) {
      ct_val &vr = oo->vals[(size_t)q.vres];
      if (vr.dy != NULL)
        return pbc_err(err, PB_EUNSUPPORTED, "training: a residual input with another reader");
      vr.dy = dy, vr.pool = oo->vals[(size_t)q.vo].pool, vr.written = 1;
      oo->vals[(size_t)q.vo].pool = -1;
    }
    PB_RETURN_NOT_OK(grad_of(oo, q.vin, err));
    void *dx = oo->vals[(size_t)q.vin].dy;
    float bx = oo->vals[(size_t)q.vin].written ? 1.f : 0.f;
    oo->vals[(size_t)q.vin].written = 1;
    void *x = oo->vals[(size_t)q.vin].y;
    const void *xsrc = oo->vals[(size_t)q.vin].gelu_of;
    int bp = -1;
    void *dz = dy;
    if (q.pre != NULL) {
      bp = pool_get(oo, (size_t)(q.rows * q.cout) * sizeof(T), err);
      if (bp < 0) return bp;
      dz = oo->pool[(size_t)bp].p;
    }
    int ch, gr;
    int64_t rpc;
    colsum_shape(q.rows, (int)q.cout, o->colsum_blocks, &ch, &rpc, &gr);
    float *p0 = oo->part0, *p1 = oo->part1;
    cudaStream_t st = oo->st;
    lt_tune(oo, q.bw, x, dz, q.gw, q.gw, 1.f, 0.f);
    lt_tune(oo, q.bd, q.wt, dz, dx, dx, 1.f, bx);
    oo->bwd.push_back([=](struct pb_error *e2) -> int {
      if (xsrc != NULL)
        k_gelu_fwd<T><<<grid_of(q.rows * q.cin / PBT_VEC), 256, 0, st>>>((const T *)xsrc, (T *)x,
                                                                        q.rows * q.cin);
      if (q.pre != NULL)
        k_gelu_bwd<T><<<grid_of(q.rows * q.cout / PBT_VEC), 256, 0, st>>>(
            (const T *)dy, (const T *)q.pre, (T *)dz, q.rows * q.cout);
      if (!q.bgradb) {
        colsum_launch<T>(dim3((unsigned)ch, (unsigned)gr), st,
            2, NULL, (const T *)dz, NULL, 0, NULL, NULL, q.rows, (int)q.cout, rpc, p0, p1);
        k_colsum_finish<<<(unsigned)((q.cout + 31) / 32), dim3(32, 32), 0, st>>>(
            2, p0, p1, ch, (int)q.cout, q.rows, 0.f, 0.f, NULL, NULL, NULL, NULL, q.gb, NULL,
            NULL, NULL, NULL);
      }
      PB_RETURN_NOT_OK(kcheck(e2, "linear backward"));
      PB_RETURN_NOT_OK(lt_run(oo, q.bw, x, dz, q.gw, e2));
      return lt_run_c(oo, q.bd, q.wt, dz, dx, dx, 1.f, bx, e2);
    });
    oo->bwd_labels.push_back(q.pre != NULL ? "linear_gelu_bwd" : "linear_tokens_bwd");
    if (bp >= 0) pool_put(oo, bp);
    grad_done(oo, q.vo);
    return 0;
  });
}

/* A linear layer over tokens: y = x W^T + b (+ the residual, into a new tensor: the old one is
 * layer norm's input), exact GELU after it when op->act says so. */
template <typename T>
static int token_linear_op(ct_engine *o, const pb__graph *g, const pb__op *op,
                           struct pb_error *err) {
  int vin = o->cur[(size_t)op->in];
  const ct_val xi = o->vals[(size_t)vin];
  int64_t cin = op->cin, cout = op->cout, Tn = xi.h, rows = o->N * Tn;
  int gelu = op->act == PB__ACT_GELU;
  if (xi.c != cin || cout % PBT_VEC != 0 || cin % PBT_VEC != 0 ||
      (op->act != PB__ACT_NONE && !gelu))
    return pbc_err(err, PB_EUNSUPPORTED, "training: linear layer %s (%lld to %lld, activation %d)",
                   g->params[op->w].name, (long long)cin, (long long)cout, op->act);
  int vres = op->res >= 0 ? o->cur[(size_t)op->res] : -1;
  int pw_, pb_;
  PB_RETURN_NOT_OK(param_add<T>(o, g->params[op->w].name, g->params[op->w].data, cout * cin, 1, 2, &pw_, err));
  /* the bias in T as autocast casts it (a float gradient) */
  PB_RETURN_NOT_OK(param_add<T>(o, g->params[op->b].name, g->params[op->b].data, cout, 1, 2, &pb_, err));
  size_t bytes = (size_t)(rows * cout) * sizeof(T);
  void *pre = NULL;
  int vo;
  if (gelu) {
    TALLOC(pre, void *, bytes, &o->bytes_act);
    PB_RETURN_NOT_OK(scratch(o, &o->sc_mlp, bytes, err));
    val_at(o, (int)cout, (int)Tn, o->sc_mlp, &vo);
    o->vals[(size_t)vo].gelu_of = pre;
  } else {
    PB_RETURN_NOT_OK(val_new(o, (int)cout, (int)Tn, 1, sizeof(T), err, &vo));
  }
  o->cur[(size_t)op->out] = vo;
  const void *bias = pw(o, pb_);
  ct_lt *f, *bd, *bw;
  /* y (rows x cout) = x W^T; dx (rows x cin) = dy W; dW (cout x cin) = dy^T x */
  PB_RETURN_NOT_OK(lt_make(o, &f, 1, 0, cout, rows, cin, cin, cin, cout, o->bdt, bias, err));
  PB_RETURN_NOT_OK(lt_make(o, &bd, 0, 0, cin, rows, cout, cin, cout, cin, o->bdt, NULL, err));
  /* the bias gradient from the weight gradient's product where cuBLASLt has that epilogue */
  float *gb = (float *)o->params[(size_t)pb_].grad;
  o->next_bgradb = getenv("PIPEBENCH_CUDA_BGRADB") && atoi(getenv("PIPEBENCH_CUDA_BGRADB")) == 0 ? NULL : gb;
  int bgradb = o->next_bgradb != NULL;
  if (lt_make(o, &bw, 0, 1, cin, cout, rows, cin, cout, cin, CUDA_R_32F, NULL, NULL) != 0) {
    bgradb = 0;
    o->next_bgradb = NULL;
    PB_RETURN_NOT_OK(lt_make(o, &bw, 0, 1, cin, cout, rows, cin, cout, cin, CUDA_R_32F, NULL, err));
  }
  const void *x = xi.y, *wt = pw(o, pw_);
  void *y = o->vals[(size_t)vo].y, *z = gelu ? pre : y;
  const void *c = vres >= 0 ? o->vals[(size_t)vres].y : z;
  float beta = vres >= 0 ? 1.f : 0.f;
  lt_tune(o, f, wt, x, c, z, 1.f, beta);
  cudaStream_t st = o->st;
  ct_engine *oo = o;
  o->fwd.push_back([=](struct pb_error *e2) -> int {
    PB_RETURN_NOT_OK(lt_run_c(oo, f, wt, x, c, z, 1.f, beta, e2));
    if (!gelu) return 0;
    k_gelu_fwd<T><<<grid_of(rows * cout / PBT_VEC), 256, 0, st>>>((const T *)z, (T *)y, rows * cout);
    TKCHECK("GELU");
  });
  o->fwd_labels.push_back(gelu ? "linear_gelu_fwd" : "linear_tokens_fwd");
  tl_plan q = {vin, vo, vres, bgradb, bw, bd, wt, pre, (float *)o->params[(size_t)pw_].grad, gb,
               rows, cin, cout};
  token_linear_plan<T>(o, q);
  return 0;
}

/* What attention's backward needs: the products' descriptors, the buffers and the shapes. */
struct at_plan {
  int vin, vo, fused, Tp; /* fused: the flash-style kernels both ways (bfloat16, heads of 64) */
  ct_lt *s, *pv, *tb;
  char *qh, *dqh, *oh, *P;
  float *S;
  int64_t N, hsz, srows;
  int Tn, H, dh, ld;
  float scale;
};

/* Attention's backward: q, k and v split into heads again, the probabilities recomputed (scores
 * in float, softmax in float; nothing of them is kept from the forward), then dP = dO V^T,
 * dV = P^T dO, dS = P (dP - rowsum(P dP)) / sqrt(dh), dQ = dS K, dK = dS^T Q, merged back into
 * the qkv projection's gradient. */
template <typename T> static void attention_plan(ct_engine *o, at_plan q) {
  o->bwd_plan.push_back([=](struct pb_error *e3) -> int {
    struct pb_error *err = e3;
    ct_engine *oo = o;
    PB_RETURN_NOT_OK(grad_of(oo, q.vo, err));
    PB_RETURN_NOT_OK(grad_of(oo, q.vin, err));
    const char *da = (const char *)oo->vals[(size_t)q.vo].dy, *qkv = (const char *)oo->vals[(size_t)q.vin].y;
    char *dqkv = (char *)oo->vals[(size_t)q.vin].dy;
    if (oo->vals[(size_t)q.vin].written)
      return pbc_err(err, PB_EUNSUPPORTED, "training: a qkv projection with another reader");
    oo->vals[(size_t)q.vin].written = 1;
    int64_t es = (int64_t)sizeof(T), vec = 16 / es, hs = q.hsz * es;
    char *hk = q.qh + hs, *hv = hk + hs, *dk = q.dqh + hs, *dv = dk + hs;
    cudaStream_t st = oo->st;
    unsigned sblocks = (unsigned)((q.srows + 7) / 8);
    const void *out = oo->vals[(size_t)q.vo].y;
    oo->bwd.push_back([=](struct pb_error *e2) -> int {
      if constexpr (sizeof(T) == 2)
        if (q.fused) {
          k_attention_bwd<T><<<(unsigned)(q.N * q.H), ATT_WARPS * 32, ATB_SMEM(q.Tp), st>>>(
              (const T *)qkv, (const T *)out, (const T *)da, (T *)dqkv, q.Tn, q.Tp, q.H, q.scale);
          TKCHECK("attention backward");
        }
      pbk::k_split_qkv<T><<<grid_of(3 * q.hsz / vec), 256, 0, st>>>((const T *)qkv, (T *)q.qh, q.N, q.Tn, q.H, q.dh);
      k_heads<T><<<grid_of(q.hsz / vec), 256, 0, st>>>((const T *)da, (T *)q.oh, q.N, q.Tn, 1, q.H, q.dh, 1);
      PB_RETURN_NOT_OK(kcheck(e2, "head split"));
      PB_RETURN_NOT_OK(lt_run_c(oo, q.s, hk, q.qh, q.S, q.S, q.scale, 0.f, e2)); /* scores */
      k_softmax_ld<T><<<sblocks, 256, 0, st>>>(q.S, (T *)q.P, q.srows, q.Tn, q.ld);
      PB_RETURN_NOT_OK(kcheck(e2, "softmax"));
      PB_RETURN_NOT_OK(lt_run(oo, q.s, hv, q.oh, q.S, e2));  /* dP = dO V^T (float) */
      PB_RETURN_NOT_OK(lt_run(oo, q.tb, q.oh, q.P, dv, e2)); /* dV = P^T dO */
      k_softmax_bwd<T><<<sblocks, 256, 0, st>>>((T *)q.P, q.S, q.srows, q.Tn, q.ld, q.scale);
      PB_RETURN_NOT_OK(kcheck(e2, "softmax backward"));
      PB_RETURN_NOT_OK(lt_run(oo, q.pv, hk, q.P, q.dqh, e2)); /* dQ = dS K */
      PB_RETURN_NOT_OK(lt_run(oo, q.tb, q.qh, q.P, dk, e2));  /* dK = dS^T Q */
      k_heads<T><<<grid_of(3 * q.hsz / vec), 256, 0, st>>>((const T *)q.dqh, (T *)dqkv, q.N, q.Tn, 3, q.H, q.dh, 0);
      TKCHECK("head merge backward");
    });
    oo->bwd_labels.push_back("attention_bwd");
    grad_done(oo, q.vo);
    return 0;
  });
}

/* Multi-head self-attention from the qkv projection (kept for the backward). bfloat16 with heads
 * of 64: the inference engine's flash-style kernel (k_attention, tensor cores, nothing but q, k,
 * v and the output in device memory) and its backward (k_attention_bwd). Otherwise (float32,
 * or PIPEBENCH_TRAIN_ATTN_UNFUSED set): q, k and v split into heads, scores (float) =
 * q k^T / sqrt(dh) as one batched product over images and heads, softmax in float,
 * probabilities times v, heads merged; the backward recomputes them (attention_plan). Heads,
 * scores and probabilities are then scratch. */
template <typename T>
static int attention_op(ct_engine *o, const pb__op *op, struct pb_error *err) {
  int vin = o->cur[(size_t)op->in];
  const ct_val xi = o->vals[(size_t)vin];
  int D = (int)op->cout, H = op->heads, dh = D / H, Tn = xi.h, ld = (Tn + 7) / 8 * 8;
  int64_t N = o->N, B = N * H, hsz = N * Tn * D, es = (int64_t)sizeof(T);
  if (D % H != 0 || (dh * es) % 16 != 0 || Tn > 256 || xi.c != 3 * D)
    return pbc_err(err, PB_EUNSUPPORTED, "training: attention over %d tokens of %d in %d heads "
                   "(at most 256 tokens, heads of a multiple of 16 bytes)", Tn, D, H);
  int Tp = (Tn + 15) / 16 * 16;
  size_t smem = ATT_SMEM(Tp);
  int fused = 0;
  if constexpr (sizeof(T) == 2) /* the kernels are 16-bit only */
    fused = dh == ATT_DH && getenv("PIPEBENCH_TRAIN_ATTN_UNFUSED") == NULL &&
            cudaFuncSetAttribute(pbk::k_attention<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem) == cudaSuccess &&
            cudaFuncSetAttribute(k_attention_bwd<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)ATB_SMEM(Tp)) == cudaSuccess;
  cudaGetLastError();
  if (!fused) {
    PB_RETURN_NOT_OK(scratch(o, (void **)&o->sc_scores, (size_t)(B * Tn * ld) * 4, err));
    PB_RETURN_NOT_OK(scratch(o, &o->sc_heads, (size_t)(hsz * es), err));
    PB_RETURN_NOT_OK(scratch(o, &o->sc_qkv, (size_t)(3 * hsz * es), err));
    PB_RETURN_NOT_OK(scratch(o, &o->sc_dqkv, (size_t)(3 * hsz * es), err));
    PB_RETURN_NOT_OK(scratch(o, &o->sc_probs, (size_t)(B * Tn * ld * es), err));
  }
  int vo;
  PB_RETURN_NOT_OK(val_new(o, D, Tn, 1, sizeof(T), err, &vo));
  o->cur[(size_t)op->out] = vo;
  ct_lt *s = NULL, *pv = NULL, *tb = NULL;
  if (!fused) {
    /* per (image, head): S (Tq x Tk, rows ld apart) = Q K^T; O = P V; and P^T dO */
    PB_RETURN_NOT_OK(lt_make_b(o, &s, 1, 0, Tn, Tn, dh, dh, dh, ld, CUDA_R_32F, NULL, (int)B,
                               Tn * dh, Tn * dh, Tn * ld, 16, err));
    PB_RETURN_NOT_OK(lt_make_b(o, &pv, 0, 0, dh, Tn, Tn, dh, ld, dh, o->bdt, NULL, (int)B,
                               Tn * dh, Tn * ld, Tn * dh, 16, err));
    PB_RETURN_NOT_OK(lt_make_b(o, &tb, 0, 1, dh, Tn, Tn, dh, ld, dh, o->bdt, NULL, (int)B,
                               Tn * dh, Tn * ld, Tn * dh, 16, err));
  }
  at_plan q = {vin, vo, fused, Tp, s, pv, tb, (char *)o->sc_qkv, (char *)o->sc_dqkv,
               (char *)o->sc_heads, (char *)o->sc_probs, o->sc_scores, N, hsz, B * Tn, Tn, H, dh,
               ld, (float)(1.0 / sqrt((double)dh))};
  const char *qkv = (const char *)xi.y;
  char *a = (char *)o->vals[(size_t)vo].y;
  if (!fused) {
    lt_tune(o, s, q.qh, q.qh, q.S, q.S, 1.f, 0.f);
    lt_tune(o, pv, q.qh, q.P, q.oh, q.oh, 1.f, 0.f);
    lt_tune(o, tb, q.oh, q.P, q.dqh, q.dqh, 1.f, 0.f);
  }
  cudaStream_t st = o->st;
  ct_engine *oo = o;
  int64_t vec = 16 / es;
  o->fwd.push_back([=](struct pb_error *e2) -> int {
    if constexpr (sizeof(T) == 2)
      if (fused) {
        pbk::k_attention<T><<<(unsigned)(q.N * q.H), ATT_WARPS * 32, smem, st>>>(
            (const T *)qkv, (T *)a, q.Tn, Tp, q.H, q.scale);
        TKCHECK("attention");
      }
    char *hk = q.qh + q.hsz * es, *hv = hk + q.hsz * es;
    pbk::k_split_qkv<T><<<grid_of(3 * q.hsz / vec), 256, 0, st>>>((const T *)qkv, (T *)q.qh, q.N, q.Tn, q.H, q.dh);
    PB_RETURN_NOT_OK(kcheck(e2, "qkv split"));
    PB_RETURN_NOT_OK(lt_run_c(oo, q.s, hk, q.qh, q.S, q.S, q.scale, 0.f, e2));
    k_softmax_ld<T><<<(unsigned)((q.srows + 7) / 8), 256, 0, st>>>(q.S, (T *)q.P, q.srows, q.Tn, q.ld);
    PB_RETURN_NOT_OK(kcheck(e2, "softmax"));
    PB_RETURN_NOT_OK(lt_run(oo, q.pv, hv, q.P, q.oh, e2));
    pbk::k_merge_heads<T><<<grid_of(q.hsz / vec), 256, 0, st>>>((const T *)q.oh, (T *)a, q.N, q.Tn, q.H, q.dh);
    TKCHECK("head merge");
  });
  o->fwd_labels.push_back("attention_fwd");
  attention_plan<T>(o, q);
  return 0;
}

/* The class token of each image: (N, Tn, D) -> (N, D). */
template <typename T>
static int take_cls_op(ct_engine *o, const pb__op *op, struct pb_error *err) {
  int vin = o->cur[(size_t)op->in];
  const ct_val xi = o->vals[(size_t)vin];
  int D = xi.c, Tn = xi.h;
  int64_t N = o->N;
  int vo;
  PB_RETURN_NOT_OK(val_new(o, D, 1, 1, sizeof(T), err, &vo));
  o->cur[(size_t)op->out] = vo;
  const void *x = xi.y;
  void *y = o->vals[(size_t)vo].y;
  cudaStream_t st = o->st;
  ct_engine *oo = o;
  o->fwd.push_back([=](struct pb_error *e2) -> int {
    pbk::k_take_cls<T><<<grid_of(N * D), 256, 0, st>>>((const T *)x, (T *)y, N, Tn, D);
    TKCHECK("class token");
  });
  o->fwd_labels.push_back("take_cls_fwd");
  o->bwd_plan.push_back([=](struct pb_error *e3) -> int {
    struct pb_error *err = e3;
    PB_RETURN_NOT_OK(grad_of(oo, vo, err));
    PB_RETURN_NOT_OK(grad_of(oo, vin, err));
    if (oo->vals[(size_t)vin].written)
      return pbc_err(err, PB_EUNSUPPORTED, "training: a class token's tokens with another reader");
    oo->vals[(size_t)vin].written = 1;
    const void *dy = oo->vals[(size_t)vo].dy;
    void *dx = oo->vals[(size_t)vin].dy;
    oo->bwd.push_back([=](struct pb_error *e2) -> int {
      k_take_cls_bwd<T><<<grid_of(N * Tn * D), 256, 0, st>>>((const T *)dy, (T *)dx, N, Tn, D);
      TKCHECK("class token backward");
    });
    oo->bwd_labels.push_back("take_cls_bwd");
    grad_done(oo, vo);
    return 0;
  });
  return 0;
}
