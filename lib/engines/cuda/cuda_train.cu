/* The CUDA training step: a layer graph (engines/graph.h) compiled once, for one batch size,
 * into a forward pass that keeps what the backward pass needs, a float32 loss, the backward
 * pass and an SGD update, all queued on the engine's stream and, from the second step on,
 * replayed as one CUDA graph.
 *
 * Precision as torch autocast does it: convolutions and matrix products take bfloat16 operands
 * with float32 accumulation; batch norm keeps float32 statistics and parameters over bfloat16
 * activations; logits, softmax, loss and their gradient are float32; master weights, momentum
 * and the update are float32, and a bfloat16 copy of each weight is written by the update for
 * the next forward. dtype float32 runs everything in float32 without TF32 (the reference the
 * gradient tests compare with).
 *
 * Layers: convolution (cuDNN's legacy API: forward, backward data, backward filter, NHWC),
 * batch norm in training mode (batch statistics, running averages with momentum 0.1 and the
 * unbiased variance, as torch), ReLU, residual add, max pool, global average pool, linear
 * (cuBLASLt) as the last layer; and the token layers of vit_b_16 (patch embedding, layer norm,
 * linear layers over tokens with GELU and residuals, attention, the class token), in
 * cuda_train_vit.cuh, which this file includes. Forward tensors and gradients live in one arena
 * (cuda_train_arena.cuh) planned at creation: a convolution's saved tensors and a gradient go
 * back to it once the backward step that reads them last is queued, and later gradients take
 * their place. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "engines/cuda/cuda_shared.h"
#include "engines/cuda/cuda_train.h"
#include "engines/cuda/cuda_train_kernels.cuh"
#include "engines/cuda/cuda_train_arena.cuh"

using namespace pbt;

static int dnn_fail(struct pb_error *err, cudnnStatus_t s, const char *what) {
  int code = s == CUDNN_STATUS_NOT_SUPPORTED ? PB_EUNSUPPORTED
             : s == CUDNN_STATUS_ALLOC_FAILED ? PB_ENOMEM
                                               : PB_EIO;
  return pbc_err(err, code, "cuDNN %s failed: %s", what, cudnnGetErrorString(s));
}
static int lt_fail(struct pb_error *err, cublasStatus_t s, const char *what) {
  return pbc_err(err, s == CUBLAS_STATUS_ALLOC_FAILED ? PB_ENOMEM : PB_EIO,
                 "cuBLASLt %s failed: status %d", what, (int)s);
}
#define TCU(call, what)                                                                        \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) return pbc_cuda_err(err, e_, what);                                 \
  } while (0)
#define TDNN(call, what)                                                                       \
  do {                                                                                         \
    cudnnStatus_t s_ = (call);                                                                 \
    if (s_ != CUDNN_STATUS_SUCCESS) return dnn_fail(err, s_, what);                            \
  } while (0)
#define TLT(call, what)                                                                        \
  do {                                                                                         \
    cublasStatus_t s_ = (call);                                                                \
    if (s_ != CUBLAS_STATUS_SUCCESS) return lt_fail(err, s_, what);                            \
  } while (0)

typedef std::function<int(struct pb_error *)> ct_step;

/* A parameter: float32 master weights, momentum, gradient, and the compute-type copy. */
struct ct_param {
  char name[96];
  int64_t n = 0;
  float *w = NULL, *mom = NULL;
  void *grad = NULL; /* float, or T when grad_t */
  int grad_t = 0;
  void *wc = NULL;   /* weights in T for the forward (NULL: w itself is used) */
  int learnable = 1;
  /* a convolution's weights are held KRSC with input channels padded to cp (torch: KCRS) */
  int conv = 0;
  int64_t K = 0, C = 0, k = 0, cp = 0;
};

/* A tensor of the forward pass and, during the backward pass, its gradient. */
struct ct_val {
  void *y = NULL;
  void *dy = NULL;
  int pool = -1;     /* the gradient's pool buffer */
  int written = 0;   /* the backward plan has written its gradient once (later ones add) */
  int64_t per = 0;   /* values per image */
  int c = 0, h = 0, w = 0; /* tokens: c is the row length, h the rows per image, w 1 */
  const void *gelu_of = NULL; /* y lives in shared scratch: the backward recomputes gelu(gelu_of) */
  /* a convolution's output that is not kept (conv_op): 1 read only by residual adds in the
   * forward; 2 read by one convolution, recomputed for its backward from the kept z (rz) with
   * the same batch norm map (rco) or bias (rbias) and ReLU */
  int transient = 0;
  const void *rz = NULL;
  const float *rco = NULL, *rbias = NULL;
  int64_t rtotal = 0;
  int rK = 0;
};

#define CT_LT_CANDIDATES 8
struct ct_lt { /* one cuBLASLt product */
  cublasLtMatmulDesc_t d = NULL;
  cublasLtMatrixLayout_t a = NULL, b = NULL, c = NULL;
  cublasLtMatmulAlgo_t algo;
  cublasLtMatmulAlgo_t cand[CT_LT_CANDIDATES]; /* the heuristic's first few, for lt_tune */
  int n_cand = 0, tuned = 0;
};

struct ct_buf {
  void *p;
  size_t size;
  int busy;
};

struct ct_engine {
  int dev = 0, f32 = 0;
  size_t es = 2;
  int64_t N = 1;
  cudaStream_t st = NULL;
  cudnnHandle_t dnn = NULL;
  cublasLtHandle_t lt = NULL;
  cudnnDataType_t cdt = CUDNN_DATA_BFLOAT16;
  cudaDataType_t bdt = CUDA_R_16BF;
  void *ws = NULL, *ltws = NULL;
  size_t ws_size = 0, ltws_size = 0;
  size_t ws_need = 0; /* the most cuDNN workspace any chosen algorithm takes */
  std::vector<std::pair<void *, size_t>> allocs;
  int64_t bytes_w = 0, bytes_act = 0, bytes_scratch = 0;
  std::vector<ct_param> params;
  std::vector<ct_val> vals;
  std::vector<int> cur; /* graph tensor id -> current value */
  std::vector<ct_buf> pool;
  ct_arena arena; /* forward tensors and gradients, when on (cuda_train_arena.cuh) */
  /* the graph's values (a tensor id at one version: an op writing into its residual makes a new
   * one) per op, their uses in the forward, uses left while the forward is planned, and the
   * val each became */
  std::vector<int> in_gv, res_gv, out_gv, gv_uses, gv_conv_in, gv_pool_in, gv_res, gv_left, gv_val;
  int recompute = 0; /* PIPEBENCH_CUDA_RECOMPUTE=1: transient kind 2 too (conv_op) */
  int mask_from_z = 1; /* conv_backward */
  int ew_apply = 0, ew_bwd = 0; /* grid caps of k_bn_apply and k_bn_backward (grid_ew) */
  /* blocks of a column sum: three a multiprocessor (k_colsum's bound), one wave; fewer partial
   * sums for k_colsum_finish than the eight a multiprocessor of before, whose second wave ran
   * part-empty */
  int colsum_blocks = 1056;
  int stats_blocks = 1056; /* the forward's statistics (mode 0, fewer registers): five a multiprocessor */
  int bwd_unroll = 2;      /* k_bn_backward<T, U>; PIPEBENCH_CUDA_BWD_UNROLL=1 takes U = 1 */
  std::vector<ct_step> fwd, bwd;
  std::vector<std::string> fwd_labels, bwd_labels; /* per step (PIPEBENCH_CUDA_PROFILE) */
  std::vector<std::function<int(struct pb_error *)>> bwd_plan; /* built in forward order */
  std::vector<cudnnTensorDescriptor_t> tds;
  std::vector<cudnnFilterDescriptor_t> fds;
  std::vector<cudnnConvolutionDescriptor_t> cds;
  std::vector<ct_lt *> lts;
  std::map<std::string, int> algo_fwd, algo_bwd_data, algo_bwd_filter;
  float *part0 = NULL, *part1 = NULL; /* column-sum partials */
  size_t part_count = 0;
  float *logits = NULL, *dl32 = NULL, *loss_rows = NULL, *loss = NULL, *lr = NULL;
  void *dlt = NULL;
  int32_t *labels = NULL;
  float *target_f = NULL; /* mse targets */
  int *bad = NULL;        /* a label out of range: its row + 1 */
  float *host = NULL;     /* pinned: loss, bad flag */
  int64_t K = 0;          /* outputs */
  int mse = 0;
  int c0 = 0, cp0 = 0, h0 = 0, w0 = 0;
  void *x0 = NULL;
  float momentum = 0.f, weight_decay = 0.f;
  float bn_momentum = 0.1f; /* 0 while a plain forward runs: running averages stay */
  sgd_param *sgd_dev = NULL;
  int n_sgd = 0;
  int64_t sgd_max = 0;
  int use_graph = 1, steps_done = 0;
  float *next_bgradb = NULL; /* lt_make_b: the next product also writes this bias gradient */
  /* token models: scratch shared by every block (q, k and v as heads and their gradients, one
   * more tensor of heads, the attention scores in float and the probabilities, the MLP's
   * hidden layer after GELU) */
  void *sc_qkv = NULL, *sc_dqkv = NULL, *sc_heads = NULL, *sc_mlp = NULL, *sc_probs = NULL;
  float *sc_scores = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t gexec = NULL;
};

static int grid_of(int64_t n) {
  int64_t b = (n + 255) / 256;
  return (int)(b < 65535 * 8 ? (b < 1 ? 1 : b) : 65535 * 8);
}

/* Blocks for an elementwise kernel over nv vectors: one per 256 vectors, at most cap (the
 * multiprocessors times the blocks of that kernel one holds at once). */
static int grid_ew(int64_t nv, int cap) {
  int64_t b = (nv + 255) / 256;
  if (b > cap) b = cap;
  return (int)(b < 1 ? 1 : b);
}

static int kcheck(struct pb_error *err, const char *what) {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : pbc_cuda_err(err, e, what);
}

static void *talloc(ct_engine *o, size_t n, int64_t *counter, struct pb_error *err, int *rc) {
  void *p = NULL;
  if (n == 0) n = 256;
  cudaError_t e = cudaMalloc(&p, n);
  if (e != cudaSuccess) {
    char what[96];
    snprintf(what, sizeof what, "training: cudaMalloc of %.1f MiB", (double)n / 1048576.0);
    *rc = pbc_cuda_err(err, e, what);
    return NULL;
  }
  cudaMemset(p, 0, n);
  o->allocs.push_back(std::make_pair(p, n));
  *counter += (int64_t)n;
  return p;
}
#define TALLOC(dst, type, bytes, counter)                                                      \
  do {                                                                                         \
    int rc_ = 0;                                                                               \
    (dst) = (type)talloc(o, (bytes), (counter), err, &rc_);                                    \
    if ((dst) == NULL) return rc_;                                                             \
  } while (0)

/* ---- parameters -------------------------------------------------------------------------- */

template <typename T> static void host_to_t(const float *src, std::vector<unsigned char> &dst, int64_t n);
template <> void host_to_t<float>(const float *src, std::vector<unsigned char> &dst, int64_t n) {
  dst.resize((size_t)n * 4);
  memcpy(dst.data(), src, (size_t)n * 4);
}
template <>
void host_to_t<__nv_bfloat16>(const float *src, std::vector<unsigned char> &dst, int64_t n) {
  dst.resize((size_t)n * 2);
  for (int64_t i = 0; i < n; i++) {
    __nv_bfloat16 v = __float2bfloat16_rn(src[i]);
    memcpy(&dst[(size_t)i * 2], &v, 2);
  }
}

/* Adds a parameter from host values (already in the device layout). compute 1: also a T copy
 * for the forward, and the gradient in T (cuDNN's filter gradient); 2: the T copy with a float
 * gradient (cuBLASLt's weight gradients). */
template <typename T>
static int param_add(ct_engine *o, const char *name, const float *v, int64_t n, int learnable,
                     int compute, int *id, struct pb_error *err) {
  ct_param p;
  snprintf(p.name, sizeof p.name, "%s", name);
  p.n = n;
  p.learnable = learnable;
  TALLOC(p.w, float *, (size_t)n * 4, &o->bytes_w);
  TCU(cudaMemcpy(p.w, v, (size_t)n * 4, cudaMemcpyHostToDevice), "weight upload");
  if (learnable) {
    TALLOC(p.mom, float *, (size_t)n * 4, &o->bytes_w);
    p.grad_t = compute == 1 && sizeof(T) != 4;
    TALLOC(p.grad, void *, (size_t)n * (p.grad_t ? sizeof(T) : 4), &o->bytes_act);
    if (compute && sizeof(T) != 4) {
      std::vector<unsigned char> h;
      host_to_t<T>(v, h, n);
      TALLOC(p.wc, void *, h.size(), &o->bytes_w);
      TCU(cudaMemcpy(p.wc, h.data(), h.size(), cudaMemcpyHostToDevice), "weight upload");
    }
  }
  o->params.push_back(p);
  *id = (int)o->params.size() - 1;
  return 0;
}

static void *pw(ct_engine *o, int id) { /* the weights the forward reads */
  ct_param &p = o->params[(size_t)id];
  return p.wc != NULL ? p.wc : (void *)p.w;
}

/* ---- values and the gradient pool ------------------------------------------------------- */

static int val_new(ct_engine *o, int c, int h, int w, size_t es, struct pb_error *err, int *id) {
  ct_val v;
  v.c = c, v.h = h, v.w = w;
  v.per = (int64_t)c * h * w;
  size_t bytes = (size_t)(o->N * v.per) * es;
  if (o->arena.on) {
    int rc = 0;
    v.y = arena_alloc(&o->arena, bytes, err, &rc);
    if (v.y == NULL) return rc;
  } else {
    TALLOC(v.y, void *, bytes, &o->bytes_act);
  }
  o->vals.push_back(v);
  *id = (int)o->vals.size() - 1;
  return 0;
}

static int pool_get(ct_engine *o, size_t size, struct pb_error *err) {
  if (o->arena.on) { /* a buffer of its own; pool_put gives its bytes back to the arena */
    int rc = 0;
    void *p = arena_alloc(&o->arena, size, err, &rc);
    if (p == NULL) return rc;
    o->pool.push_back(ct_buf{p, size, 1});
    return (int)o->pool.size() - 1;
  }
  int best = -1;
  for (int i = 0; i < (int)o->pool.size(); i++)
    if (!o->pool[(size_t)i].busy && o->pool[(size_t)i].size >= size &&
        (best < 0 || o->pool[(size_t)i].size < o->pool[(size_t)best].size))
      best = i;
  if (best >= 0) {
    o->pool[(size_t)best].busy = 1;
    return best;
  }
  int rc = 0;
  void *p = talloc(o, size, &o->bytes_act, err, &rc);
  if (p == NULL) return rc;
  o->pool.push_back(ct_buf{p, size, 1});
  return (int)o->pool.size() - 1;
}

/* The gradient buffer of value v (taken from the pool on first use). */
static int grad_of(ct_engine *o, int v, struct pb_error *err) {
  ct_val &x = o->vals[(size_t)v];
  if (x.dy != NULL) return 0;
  int b = pool_get(o, (size_t)(o->N * x.per) * o->es, err);
  if (b < 0) return b;
  o->vals[(size_t)v].pool = b;
  o->vals[(size_t)v].dy = o->pool[(size_t)b].p;
  return 0;
}

/* Pool buffer b is free for the plan's later steps. */
static void pool_put(ct_engine *o, int b) {
  ct_buf &pb = o->pool[(size_t)b];
  if (!pb.busy) return;
  pb.busy = 0;
  if (o->arena.on) arena_free(&o->arena, pb.p); /* never handed out again from the pool */
}

static void grad_done(ct_engine *o, int v) {
  ct_val &x = o->vals[(size_t)v];
  if (x.pool >= 0) pool_put(o, x.pool);
}

/* Value v's forward tensor is read by no step planned after this one (its layer's backward is
 * queued): its bytes go back to the arena. */
static void val_done(ct_engine *o, int v) {
  ct_val &x = o->vals[(size_t)v];
  if (x.y != NULL && arena_owns(&o->arena, x.y)) arena_free(&o->arena, x.y);
}

/* ---- convolution ------------------------------------------------------------------------- */

static int tdesc(ct_engine *o, cudnnTensorDescriptor_t *d, int64_t n, int c, int h, int w,
                 struct pb_error *err) {
  TDNN(cudnnCreateTensorDescriptor(d), "tensor descriptor");
  o->tds.push_back(*d);
  TDNN(cudnnSetTensor4dDescriptor(*d, CUDNN_TENSOR_NHWC, o->cdt, (int)n, c, h, w),
       "tensor descriptor");
  return 0;
}

/* Column sums over the M x C tensor in chunks: returns the chunk count and rows per chunk. */
static void colsum_shape(int64_t M, int C, int blocks, int *chunks, int64_t *rpc, int *groups) {
  int cv = C / PBT_VEC, tpr = cv < PBT_THREADS ? cv : PBT_THREADS;
  *groups = (cv + tpr - 1) / tpr;
  int64_t want = blocks / *groups; /* one wave of blocks (ct_engine.colsum_blocks) */
  int64_t ch = (M + 31) / 32;
  if (ch > want) ch = want;
  if (ch < 1) ch = 1;
  *rpc = (M + ch - 1) / ch;
  *chunks = (int)((M + *rpc - 1) / *rpc);
}

static int math_ok(const ct_engine *o, cudnnMathType_t m) {
  return !o->f32 || m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
}

/* A convolution descriptor for op (cross-correlation, float32 accumulation) with math type m. */
static int conv_desc(ct_engine *o, const pb__op *op, cudnnMathType_t m,
                     cudnnConvolutionDescriptor_t *cd, struct pb_error *err) {
  TDNN(cudnnCreateConvolutionDescriptor(cd), "convolution descriptor");
  o->cds.push_back(*cd);
  TDNN(cudnnSetConvolution2dDescriptor(*cd, op->pad, op->pad, op->stride, op->stride, 1, 1,
                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
       "convolution descriptor");
  TDNN(cudnnSetConvolutionMathType(*cd, m), "convolution math type");
  return 0;
}

/* The first of a cuDNN search's results (fastest first) that fits the workspace and keeps
 * float32 to FMA math; -1 when none does. */
template <typename Perf>
static int first_usable(const ct_engine *o, const Perf *perf, int n) {
  for (int i = 0; i < n; i++)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= o->ws_size &&
        math_ok(o, perf[i].mathType))
      return i;
  return -1;
}

/* What a convolution's forward and backward steps share: its values, parameters, descriptors
 * and the shape of its column sums. */
struct conv_ctx {
  const pb__op *op;
  int vin, vz, va, vres, pwid, pg, pb, pm, pv, is_first, bn, relu, chunks, groups, K;
  int chunks0; /* the forward statistics' chunks (rows rpc0 each) */
  int64_t M, total, rpc, rpc0;
  float eps;
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t fd;
  cudnnConvolutionDescriptor_t cd;
  void *x, *z, *a, *wt;
  float *mean, *invstd, *co_f, *co_b;
  std::string key;
};

/* The weights in KRSC with input channels padded to Cs, and the batch norm's (or the bias's)
 * parameters. */
template <typename T>
static int conv_params(ct_engine *o, const pb__graph *g, const pb__op *op, int Cs, conv_ctx *c,
                       struct pb_error *err) {
  int K = (int)op->cout, k = op->k;
  const float *src = g->params[op->w].data;
  std::vector<float> wk((size_t)K * k * k * Cs, 0.f);
  for (int oc = 0; oc < K; oc++)
    for (int ch = 0; ch < (int)op->cin; ch++)
      for (int r = 0; r < k; r++)
        for (int q = 0; q < k; q++)
          wk[(size_t)(((oc * k + r) * k + q) * Cs + ch)] =
              src[(((int64_t)oc * op->cin + ch) * k + r) * k + q];
  c->pg = c->pb = c->pm = c->pv = -1;
  PB_RETURN_NOT_OK(param_add<T>(o, g->params[op->w].name, wk.data(), (int64_t)wk.size(), 1, 1, &c->pwid, err));
  ct_param &p = o->params[(size_t)c->pwid];
  p.conv = 1, p.K = K, p.C = op->cin, p.k = k, p.cp = Cs;
  if (c->bn) {
    PB_RETURN_NOT_OK(param_add<T>(o, g->params[op->bn_g].name, g->params[op->bn_g].data, K, 1, 0, &c->pg, err));
    PB_RETURN_NOT_OK(param_add<T>(o, g->params[op->bn_b].name, g->params[op->bn_b].data, K, 1, 0, &c->pb, err));
    PB_RETURN_NOT_OK(param_add<T>(o, g->params[op->bn_m].name, g->params[op->bn_m].data, K, 0, 0, &c->pm, err));
    PB_RETURN_NOT_OK(param_add<T>(o, g->params[op->bn_v].name, g->params[op->bn_v].data, K, 0, 0, &c->pv, err));
  } else if (op->b >= 0) {
    PB_RETURN_NOT_OK(param_add<T>(o, g->params[op->b].name, g->params[op->b].data, K, 1, 0, &c->pb, err));
  }
  return 0;
}

/* The forward algorithm, measured once per shape on the real buffers. */
static int conv_fwd_algo(ct_engine *o, const pb__graph *g, const conv_ctx &c,
                         cudnnConvolutionFwdAlgo_t *fa, cudnnMathType_t *fm,
                         struct pb_error *err) {
  auto hit = o->algo_fwd.find(c.key);
  if (hit != o->algo_fwd.end()) {
    *fa = (cudnnConvolutionFwdAlgo_t)(hit->second & 0xff), *fm = (cudnnMathType_t)(hit->second >> 8);
    return 0;
  }
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int n = 0;
  TDNN(cudnnFindConvolutionForwardAlgorithmEx(o->dnn, c.xd, c.x, c.fd, c.wt, c.cd, c.yd, c.z,
                                              CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf, o->ws,
                                              o->ws_size),
       "convolution algorithm search");
  int pick = first_usable(o, perf, n);
  if (pick < 0)
    return pbc_err(err, PB_EUNSUPPORTED, "cuDNN has no forward algorithm for %s",
                   g->params[c.op->w].name);
  *fa = perf[pick].algo, *fm = perf[pick].mathType;
  if (perf[pick].memory > o->ws_need) o->ws_need = perf[pick].memory;
  o->algo_fwd[c.key] = (int)*fa | ((int)*fm << 8);
  return 0;
}

/* The backward-filter algorithm (into grad, dz the output's gradient). */
static int conv_bwd_filter_algo(ct_engine *o, const conv_ctx &c, void *dz, void *grad,
                                const char *name, cudnnConvolutionBwdFilterAlgo_t *fa,
                                cudnnMathType_t *fm, struct pb_error *err) {
  auto hit = o->algo_bwd_filter.find(c.key);
  if (hit != o->algo_bwd_filter.end()) {
    *fa = (cudnnConvolutionBwdFilterAlgo_t)(hit->second & 0xff), *fm = (cudnnMathType_t)(hit->second >> 8);
    return 0;
  }
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int n = 0;
  TDNN(cudnnFindConvolutionBackwardFilterAlgorithmEx(
           o->dnn, c.xd, c.x, c.yd, dz, c.cd, c.fd, grad, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
           &n, perf, o->ws, o->ws_size),
       "backward-filter algorithm search");
  int pick = first_usable(o, perf, n);
  if (pick < 0) return pbc_err(err, PB_EUNSUPPORTED, "cuDNN has no backward-filter algorithm for %s", name);
  *fa = perf[pick].algo, *fm = perf[pick].mathType;
  if (perf[pick].memory > o->ws_need) o->ws_need = perf[pick].memory;
  o->algo_bwd_filter[c.key] = (int)*fa | ((int)*fm << 8);
  return 0;
}

/* The backward-data algorithm (into dx). */
static int conv_bwd_data_algo(ct_engine *o, const conv_ctx &c, void *dz, void *dx,
                              const char *name, cudnnConvolutionBwdDataAlgo_t *da,
                              cudnnMathType_t *dm, struct pb_error *err) {
  auto hit = o->algo_bwd_data.find(c.key);
  if (hit != o->algo_bwd_data.end()) {
    *da = (cudnnConvolutionBwdDataAlgo_t)(hit->second & 0xff), *dm = (cudnnMathType_t)(hit->second >> 8);
    return 0;
  }
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int n = 0;
  TDNN(cudnnFindConvolutionBackwardDataAlgorithmEx(o->dnn, c.fd, c.wt, c.yd, dz, c.cd, c.xd, dx,
                                                   CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n,
                                                   perf, o->ws, o->ws_size),
       "backward-data algorithm search");
  int pick = first_usable(o, perf, n);
  if (pick < 0) return pbc_err(err, PB_EUNSUPPORTED, "cuDNN has no backward-data algorithm for %s", name);
  *da = perf[pick].algo, *dm = perf[pick].mathType;
  if (perf[pick].memory > o->ws_need) o->ws_need = perf[pick].memory;
  o->algo_bwd_data[c.key] = (int)*da | ((int)*dm << 8);
  return 0;
}

/* A transient input (kind 2, conv_op) is made again for the backward of the convolution that
 * reads it: the same map over the kept z as the forward's, so the same values bit for bit. Its
 * own layer's backward, planned next, reads it too and then gives it back (val_done). */
template <typename T> static int recompute_input(ct_engine *o, int v, struct pb_error *err) {
  ct_val &x = o->vals[(size_t)v];
  if (x.transient != 2 || x.y != NULL) return 0;
  int rc = 0;
  void *y = arena_alloc(&o->arena, (size_t)x.rtotal * sizeof(T), err, &rc);
  if (y == NULL) return rc;
  x.y = y;
  const T *z = (const T *)x.rz;
  const float *co = x.rco, *bias = x.rbias;
  int64_t total = x.rtotal;
  int K = x.rK, cap = o->ew_apply;
  cudaStream_t st = o->st;
  o->bwd.push_back([=](struct pb_error *e2) -> int {
    k_bn_apply<T><<<grid_ew(total / PBT_VEC, cap), 256, 0, st>>>(z, (T *)y, NULL, co, bias, total, K, 1);
    return kcheck(e2, "batch norm and ReLU, recomputed");
  });
  o->bwd_labels.push_back("bn_relu_recompute");
  return 0;
}

/* The convolution's backward, planned in reverse order once the forward is known: batch norm
 * (or bias) and ReLU backward with the residual's gradient, then the filter's and the input's
 * gradients. */
template <typename T>
static int conv_backward(ct_engine *oo, const conv_ctx &c_fwd, struct pb_error *err) {
  conv_ctx c = c_fwd;
  PB_RETURN_NOT_OK(recompute_input<T>(oo, c.vin, err));
  c.x = oo->vals[(size_t)c.vin].y; /* the input as its backward reads it (maybe recomputed) */
  c.a = oo->vals[(size_t)c.va].y; /* NULL where not kept: the kernels take ReLU's mask from z */
  /* ReLU after batch norm without a residual: its mask comes from z and the forward's map, the
   * same bit for bit, so the backward's two passes do not read the output as well
   * (PIPEBENCH_CUDA_MASK_FROM_Z=0 reads it) */
  if (c.bn && c.relu && c.vres < 0 && oo->mask_from_z) c.a = NULL;
  PB_RETURN_NOT_OK(grad_of(oo, c.va, err));
  void *da = oo->vals[(size_t)c.va].dy;
  int bz = pool_get(oo, (size_t)c.total * sizeof(T), err);
  if (bz < 0) return bz;
  void *dz = oo->pool[(size_t)bz].p;
  void *dres = NULL;
  int res_add = 0;
  if (c.vres >= 0) {
    PB_RETURN_NOT_OK(grad_of(oo, c.vres, err));
    dres = oo->vals[(size_t)c.vres].dy;
    res_add = oo->vals[(size_t)c.vres].written;
    oo->vals[(size_t)c.vres].written = 1;
  }
  void *dx = NULL;
  float beta_dx = 0.f;
  if (!c.is_first) {
    PB_RETURN_NOT_OK(grad_of(oo, c.vin, err));
    dx = oo->vals[(size_t)c.vin].dy;
    beta_dx = oo->vals[(size_t)c.vin].written ? 1.f : 0.f;
    oo->vals[(size_t)c.vin].written = 1;
  }
  ct_param P = oo->params[(size_t)c.pwid];
  float *dgam = c.pg >= 0 ? (float *)oo->params[(size_t)c.pg].grad : NULL;
  float *dbet = c.pb >= 0 ? (float *)oo->params[(size_t)c.pb].grad : NULL;
  float *gam = c.pg >= 0 ? oo->params[(size_t)c.pg].w : NULL;
  cudnnConvolutionBwdFilterAlgo_t bfa;
  cudnnConvolutionBwdDataAlgo_t bda = CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  cudnnMathType_t mf, md = CUDNN_DEFAULT_MATH;
  PB_RETURN_NOT_OK(conv_bwd_filter_algo(oo, c, dz, P.grad, P.name, &bfa, &mf, err));
  if (!c.is_first) PB_RETURN_NOT_OK(conv_bwd_data_algo(oo, c, dz, dx, P.name, &bda, &md, err));
  cudnnConvolutionDescriptor_t cf, cdd;
  PB_RETURN_NOT_OK(conv_desc(oo, c.op, mf, &cf, err));
  PB_RETURN_NOT_OK(conv_desc(oo, c.op, md, &cdd, err));
  int mode = c.bn ? 1 : 2;
  int need_sums = c.bn || dbet != NULL;
  cudaStream_t st = oo->st;
  cudnnHandle_t h = oo->dnn;
  float *p0 = oo->part0, *p1 = oo->part1;
  if (need_sums) {
    oo->bwd.push_back([=](struct pb_error *e2) -> int {
      colsum_launch<T>(dim3((unsigned)c.chunks, (unsigned)c.groups), st,
          mode, (const T *)c.z, (const T *)da, (const T *)c.a, c.relu, c.mean, c.invstd, c.M, c.K,
          c.rpc, p0, p1, c.co_f);
      k_colsum_finish<<<(c.K + 31) / 32, dim3(32, 32), 0, st>>>(
          mode, p0, p1, c.chunks, c.K, c.M, c.eps, 0.f, c.mean, c.invstd, NULL, NULL, dbet, dgam,
          gam, NULL, c.co_b);
      return kcheck(e2, "batch norm backward sums");
    });
    oo->bwd_labels.push_back("bn_bwd_sums");
  }
  const int cap = oo->ew_bwd, u2 = oo->bwd_unroll == 2;
  oo->bwd.push_back([=](struct pb_error *e2) -> int {
    if (u2)
      k_bn_backward<T, 2><<<grid_ew(c.total / PBT_VEC, cap), 256, 0, st>>>(
          (const T *)da, (const T *)c.a, (const T *)c.z, (T *)dz, (T *)dres, res_add,
          c.bn ? c.co_b : NULL, c.total, c.K, c.relu, c.co_f);
    else
      k_bn_backward<T, 1><<<grid_ew(c.total / PBT_VEC, cap), 256, 0, st>>>(
          (const T *)da, (const T *)c.a, (const T *)c.z, (T *)dz, (T *)dres, res_add,
          c.bn ? c.co_b : NULL, c.total, c.K, c.relu, c.co_f);
    return kcheck(e2, "batch norm backward");
  });
  oo->bwd_labels.push_back("bn_relu_bwd");
  oo->bwd.push_back([=](struct pb_error *e2) -> int {
    float one = 1.f, zero = 0.f;
    cudnnStatus_t r = cudnnConvolutionBackwardFilter(h, &one, c.xd, c.x, c.yd, dz, cf, bfa, oo->ws,
                                                     oo->ws_size, &zero, c.fd, P.grad);
    return r == CUDNN_STATUS_SUCCESS ? 0 : dnn_fail(e2, r, "convolution backward filter");
  });
  oo->bwd_labels.push_back("conv_bwd_filter");
  if (dx != NULL) {
    oo->bwd.push_back([=](struct pb_error *e2) -> int {
      float one = 1.f, bd = beta_dx;
      cudnnStatus_t r = cudnnConvolutionBackwardData(h, &one, c.fd, c.wt, c.yd, dz, cdd, bda,
                                                     oo->ws, oo->ws_size, &bd, c.xd, dx);
      return r == CUDNN_STATUS_SUCCESS ? 0 : dnn_fail(e2, r, "convolution backward data");
    });
    oo->bwd_labels.push_back("conv_bwd_data");
  }
  pool_put(oo, bz);
  grad_done(oo, c.va);
  val_done(oo, c.vz);
  val_done(oo, c.va);
  return 0;
}

/* The graph's values and their uses in the forward (see ct_engine.in_gv). */
static void value_uses(ct_engine *o, const pb__graph *g) {
  std::vector<int> ver((size_t)g->n_tensors, -1);
  int n = 0;
  ver[0] = n++;
  size_t ops = (size_t)g->n_ops;
  o->in_gv.assign(ops, -1), o->res_gv.assign(ops, -1), o->out_gv.assign(ops, -1);
  for (size_t i = 0; i < ops; i++) {
    const pb__op *op = &g->ops[i];
    if (op->in >= 0) o->in_gv[i] = ver[(size_t)op->in];
    if (op->res >= 0) o->res_gv[i] = ver[(size_t)op->res];
    o->out_gv[i] = ver[(size_t)op->out] = n++;
  }
  o->gv_uses.assign((size_t)n, 0), o->gv_conv_in.assign((size_t)n, 0), o->gv_res.assign((size_t)n, 0);
  o->gv_pool_in.assign((size_t)n, 0);
  o->gv_val.assign((size_t)n, -1);
  for (size_t i = 0; i < ops; i++) {
    int in = o->in_gv[i], res = o->res_gv[i];
    pb__op_kind k = g->ops[i].kind;
    if (in >= 0) o->gv_uses[(size_t)in]++, o->gv_conv_in[(size_t)in] += k == PB__OP_CONV;
    if (in >= 0) o->gv_pool_in[(size_t)in] += k == PB__OP_MAXPOOL || k == PB__OP_GAP;
    if (res >= 0) o->gv_uses[(size_t)res]++, o->gv_res[(size_t)res]++;
  }
  o->gv_left = o->gv_uses;
  o->gv_val[0] = 0;
}

/* Whether convolution gi's output (val va) need not be kept until the backward (with the
 * arena). Kind 1: no ReLU, read only by residual adds (an add's backward needs no values, and
 * batch norm's backward reads the output only for ReLU's mask). Kind 3: ReLU after batch norm,
 * no residual, read only by poolings (whose backward needs no input values): the mask is
 * remade from the kept z with the forward's map (k_bn_backward's mco). Both cost nothing. Kind
 * 2 (PIPEBENCH_CUDA_RECOMPUTE=1): ReLU without residual, read by one convolution only, remade
 * from the kept z for that convolution's backward (recompute_input): one more pass over z per
 * step, against keeping the tensor through the step (ResNet-50: 1.6 GiB less at batch 256, a
 * few percent slower). */
static void mark_transient(ct_engine *o, int gi, int va, int relu, int vres, int bn, const void *z,
                           const float *co, const float *bias, int64_t total, int K) {
  if (!o->arena.on) return;
  int gv = o->out_gv[(size_t)gi];
  ct_val &v = o->vals[(size_t)va];
  int uses = o->gv_uses[(size_t)gv];
  if (uses == 0) return;
  if (!relu && o->gv_res[(size_t)gv] == uses) {
    v.transient = 1;
  } else if (relu && bn && vres < 0 && o->gv_pool_in[(size_t)gv] == uses) {
    v.transient = 3;
  } else if (o->recompute && relu && vres < 0 && uses == 1 && o->gv_conv_in[(size_t)gv] == 1) {
    v.transient = 2;
    v.rz = z, v.rco = co, v.rbias = bias, v.rtotal = total, v.rK = K;
  }
}

/* Op gi is planned: the values it read that no later op of the forward reads, and that are
 * transient, go back to the arena (the pointer is dropped: a later buffer may take the place). */
static void forward_done(ct_engine *o, const pb__graph *g, int gi) {
  o->gv_val[(size_t)o->out_gv[(size_t)gi]] = o->cur[(size_t)g->ops[gi].out];
  int read[2] = {o->in_gv[(size_t)gi], o->res_gv[(size_t)gi]};
  for (int u : read) {
    if (u < 0 || --o->gv_left[(size_t)u] > 0) continue;
    int v = o->gv_val[(size_t)u];
    if (v < 0 || !o->vals[(size_t)v].transient) continue;
    arena_free(&o->arena, o->vals[(size_t)v].y);
    o->vals[(size_t)v].y = NULL;
  }
}

/* Convolution op (graph op `op`) with its batch norm (or bias), residual and ReLU. */
template <typename T>
static int conv_op(ct_engine *o, const pb__graph *g, const pb__op *op, int is_first,
                   struct pb_error *err) {
  conv_ctx c;
  c.op = op;
  c.vin = o->cur[(size_t)op->in];
  const ct_val xi = o->vals[(size_t)c.vin];
  int Cs = xi.c, H = xi.h, W = xi.w, K = (int)op->cout, k = op->k;
  const pb__tshape &so = g->tensors[op->out];
  int Ho = (int)so.h, Wo = (int)so.w;
  c.K = K, c.M = o->N * Ho * Wo, c.total = c.M * K, c.is_first = is_first;
  c.bn = op->bn_g >= 0, c.relu = op->act == PB__ACT_RELU, c.eps = op->eps;
  if (K % PBT_VEC != 0)
    return pbc_err(err, PB_EUNSUPPORTED, "training: %s has %d output channels (a multiple of %d "
                   "is needed)", g->params[op->w].name, K, PBT_VEC);
  PB_RETURN_NOT_OK(conv_params<T>(o, g, op, Cs, &c, err));
  PB_RETURN_NOT_OK(val_new(o, K, Ho, Wo, sizeof(T), err, &c.vz));
  PB_RETURN_NOT_OK(val_new(o, K, Ho, Wo, sizeof(T), err, &c.va));
  c.vres = op->res >= 0 ? o->cur[(size_t)op->res] : -1;
  o->cur[(size_t)op->out] = c.va;
  c.mean = c.invstd = c.co_f = c.co_b = NULL;
  if (c.bn) {
    TALLOC(c.mean, float *, (size_t)K * 4, &o->bytes_act);
    TALLOC(c.invstd, float *, (size_t)K * 4, &o->bytes_act);
    TALLOC(c.co_f, float *, (size_t)K * 2 * 4, &o->bytes_act);
    TALLOC(c.co_b, float *, (size_t)K * 3 * 4, &o->bytes_act);
  }
  mark_transient(o, (int)(op - g->ops), c.va, c.relu, c.vres, c.bn, o->vals[(size_t)c.vz].y,
                 c.bn ? c.co_f : NULL, c.bn ? NULL : (c.pb >= 0 ? o->params[(size_t)c.pb].w : NULL),
                 c.total, K);
  if (c.total >= ((int64_t)1 << 31) || o->N * H * W * Cs >= ((int64_t)1 << 31))
    return pbc_err(err, PB_EUNSUPPORTED, "training: %s's activations hold 2^31 values or more "
                   "(batch %lld is too large for it)", g->params[op->w].name, (long long)o->N);
  colsum_shape(c.M, K, o->colsum_blocks, &c.chunks, &c.rpc, &c.groups);
  colsum_shape(c.M, K, o->stats_blocks, &c.chunks0, &c.rpc0, &c.groups);
  if ((size_t)c.chunks * K > o->part_count || (size_t)c.chunks0 * K > o->part_count)
    return pbc_err(err, PB_EINVAL, "partials too small");
  PB_RETURN_NOT_OK(tdesc(o, &c.xd, o->N, Cs, H, W, err));
  PB_RETURN_NOT_OK(tdesc(o, &c.yd, o->N, K, Ho, Wo, err));
  TDNN(cudnnCreateFilterDescriptor(&c.fd), "filter descriptor");
  o->fds.push_back(c.fd);
  TDNN(cudnnSetFilter4dDescriptor(c.fd, o->cdt, CUDNN_TENSOR_NHWC, K, Cs, k, k), "filter descriptor");
  PB_RETURN_NOT_OK(conv_desc(o, op, o->f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH, &c.cd, err));
  char key[160];
  snprintf(key, sizeof key, "%lld %d %d %d %d %d %d %d", (long long)o->N, Cs, H, W, K, k,
           op->stride, op->pad);
  c.key = key;
  c.x = xi.y, c.z = o->vals[(size_t)c.vz].y, c.a = o->vals[(size_t)c.va].y;
  c.wt = pw(o, c.pwid);
  cudnnConvolutionFwdAlgo_t fa;
  cudnnMathType_t fmath;
  PB_RETURN_NOT_OK(conv_fwd_algo(o, g, c, &fa, &fmath, err));
  cudnnConvolutionDescriptor_t cdf;
  PB_RETURN_NOT_OK(conv_desc(o, op, fmath, &cdf, err));
  ct_engine *oo = o;
  cudnnHandle_t h = o->dnn;
  cudaStream_t st = o->st;
  float *p0 = o->part0, *p1 = o->part1;
  float *gam = c.pg >= 0 ? o->params[(size_t)c.pg].w : NULL;
  float *bet = c.pb >= 0 ? o->params[(size_t)c.pb].w : NULL;
  float *rm = c.pm >= 0 ? o->params[(size_t)c.pm].w : NULL;
  float *rv = c.pv >= 0 ? o->params[(size_t)c.pv].w : NULL;
  void *res = c.vres >= 0 ? o->vals[(size_t)c.vres].y : NULL;
  o->fwd.push_back([=](struct pb_error *e2) -> int {
    float one = 1.f, zero = 0.f;
    cudnnStatus_t r = cudnnConvolutionForward(h, &one, c.xd, c.x, c.fd, c.wt, cdf, fa, oo->ws,
                                              oo->ws_size, &zero, c.yd, c.z);
    return r == CUDNN_STATUS_SUCCESS ? 0 : dnn_fail(e2, r, "convolution");
  });
  o->fwd_labels.push_back("conv_fwd");
  if (c.bn) {
    o->fwd.push_back([=](struct pb_error *e2) -> int {
      colsum_launch<T>(dim3((unsigned)c.chunks0, (unsigned)c.groups), st,
          0, (const T *)c.z, NULL, NULL, 0, NULL, NULL, c.M, c.K, c.rpc0, p0, p1);
      k_colsum_finish<<<(c.K + 31) / 32, dim3(32, 32), 0, st>>>(
          0, p0, p1, c.chunks0, c.K, c.M, c.eps, oo->bn_momentum, c.mean, c.invstd, rm, rv, NULL,
          NULL, gam, bet, c.co_f);
      return kcheck(e2, "batch norm statistics");
    });
    o->fwd_labels.push_back("bn_stats");
  }
  const int cap = o->ew_apply;
  o->fwd.push_back([=](struct pb_error *e2) -> int {
    k_bn_apply<T><<<grid_ew(c.total / PBT_VEC, cap), 256, 0, st>>>(
        (const T *)c.z, (T *)c.a, (const T *)res, c.bn ? c.co_f : NULL, c.bn ? NULL : bet,
        c.total, c.K, c.relu);
    return kcheck(e2, "batch norm forward");
  });
  o->fwd_labels.push_back(c.bn ? "bn_relu_fwd" : "bias_relu_fwd");
  o->bwd_plan.push_back([=](struct pb_error *e3) -> int { return conv_backward<T>(oo, c, e3); });
  return 0;
}

/* ---- pooling -------------------------------------------------------------------------------- */

template <typename T>
static int pool_op(ct_engine *o, const pb__graph *g, const pb__op *op, struct pb_error *err) {
  int vin = o->cur[(size_t)op->in];
  const ct_val xi = o->vals[(size_t)vin];
  int C = xi.c, H = xi.h, W = xi.w;
  const pb__tshape &so = g->tensors[op->out];
  int Ho = (int)so.h, Wo = (int)so.w;
  int gap = op->kind == PB__OP_GAP;
  if (gap) Ho = Wo = 1;
  if (!gap && C % PBT_VEC != 0)
    return pbc_err(err, PB_EUNSUPPORTED, "training: max pooling over %d channels (a multiple of "
                   "%d is needed)", C, PBT_VEC);
  int vo;
  PB_RETURN_NOT_OK(val_new(o, C, Ho, Wo, sizeof(T), err, &vo));
  o->cur[(size_t)op->out] = vo;
  void *x = xi.y, *y = o->vals[(size_t)vo].y;
  int64_t N = o->N;
  int k = op->k, s = op->stride, pad = op->pad;
  uint8_t *arg = NULL;
  if (!gap) TALLOC(arg, uint8_t *, (size_t)(N * Ho * Wo * C), &o->bytes_act);
  cudaStream_t st = o->st;
  o->fwd.push_back([=](struct pb_error *e2) -> int {
    if (gap)
      pbk::k_gap<T><<<grid_of(N * C), 256, 0, st>>>((const T *)x, (T *)y, N, C, H * W);
    else
      k_maxpool_arg<T><<<grid_of(N * Ho * Wo * C / PBT_VEC), 256, 0, st>>>((const T *)x, (T *)y, arg, N, C,
                                                                 H, W, Ho, Wo, k, s, pad);
    return kcheck(e2, "pooling");
  });
  o->fwd_labels.push_back(gap ? "gap" : "maxpool");
  ct_engine *oo = o;
  o->bwd_plan.push_back([=](struct pb_error *e3) -> int {
    struct pb_error *err = e3;
    PB_RETURN_NOT_OK(grad_of(oo, vo, err));
    PB_RETURN_NOT_OK(grad_of(oo, vin, err));
    void *dy = oo->vals[(size_t)vo].dy, *dx = oo->vals[(size_t)vin].dy;
    int add = oo->vals[(size_t)vin].written;
    oo->vals[(size_t)vin].written = 1;
    oo->bwd.push_back([=](struct pb_error *e2) -> int {
      if (gap)
        k_gap_backward<T><<<grid_of(N * H * W * C), 256, 0, st>>>((const T *)dy, (T *)dx, add, N,
                                                                  C, H * W);
      else
        k_maxpool_backward<T><<<grid_of(N * H * W * C), 256, 0, st>>>(
            arg, (const T *)dy, (T *)dx, add, N, C, H, W, Ho, Wo, k, s, pad);
      return kcheck(e2, "pooling backward");
    });
    oo->bwd_labels.push_back(gap ? "gap_bwd" : "maxpool_bwd");
    grad_done(oo, vo);
    val_done(oo, vo);
    return 0;
  });
  return 0;
}

/* ---- linear (the last layer: logits in float32) ------------------------------------------- */

/* Column-major D (m x n) = op(A) op(B), A and B in the compute type, D in dtype; bias (length
 * m; float for a float D, else in D's type) through the epilogue when not NULL. batch > 1: that many products, each operand
 * sa, sb, sd values after the last; align: the smallest alignment of any operand's pointer in
 * bytes (0: cuBLASLt's default). */
static int lt_make_b(ct_engine *o, ct_lt **out, int ta, int tb, int64_t m, int64_t n, int64_t k,
                     int64_t lda, int64_t ldb, int64_t ldd, cudaDataType_t dtype,
                     const void *bias, int batch, int64_t sa, int64_t sb, int64_t sd,
                     uint32_t align, struct pb_error *err) {
  ct_lt *mm = new ct_lt();
  o->lts.push_back(mm);
  *out = mm;
  TLT(cublasLtMatmulDescCreate(&mm->d, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  TLT(cublasLtMatmulDescSetAttribute(mm->d, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), "transa");
  TLT(cublasLtMatmulDescSetAttribute(mm->d, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), "transb");
  float *bgrad = o->next_bgradb;
  o->next_bgradb = NULL;
  if (bgrad != NULL) { /* the sum over k of op(B)'s rows, one value a column of D */
    cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BGRADB;
    TLT(cublasLtMatmulDescSetAttribute(mm->d, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep), "epilogue");
    TLT(cublasLtMatmulDescSetAttribute(mm->d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bgrad, sizeof bgrad), "bias gradient");
  }
  if (bias != NULL) {
    cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
    TLT(cublasLtMatmulDescSetAttribute(mm->d, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep), "epilogue");
    TLT(cublasLtMatmulDescSetAttribute(mm->d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), "bias");
    cudaDataType_t bt = dtype;
    TLT(cublasLtMatmulDescSetAttribute(mm->d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt), "bias type");
  }
  TLT(cublasLtMatrixLayoutCreate(&mm->a, o->bdt, ta ? k : m, ta ? m : k, lda), "layout A");
  TLT(cublasLtMatrixLayoutCreate(&mm->b, o->bdt, tb ? n : k, tb ? k : n, ldb), "layout B");
  TLT(cublasLtMatrixLayoutCreate(&mm->c, dtype, m, n, ldd), "layout D");
  if (batch > 1) {
    cublasLtMatrixLayout_t ls[3] = {mm->a, mm->b, mm->c};
    int64_t ss[3] = {sa, sb, sd};
    for (int i = 0; i < 3; i++) {
      TLT(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                           sizeof batch), "batch count");
      TLT(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                           &ss[i], sizeof ss[i]), "batch stride");
    }
  }
  cublasLtMatmulPreference_t pref;
  TLT(cublasLtMatmulPreferenceCreate(&pref), "preference");
  uint64_t wsz = o->ltws_size;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz);
  if (align != 0) {
    const cublasLtMatmulPreferenceAttributes_t al[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
      cublasLtMatmulPreferenceSetAttribute(pref, al[i], &align, sizeof align);
  }
  cublasLtMatmulHeuristicResult_t r[CT_LT_CANDIDATES];
  int nr = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(o->lt, mm->d, mm->a, mm->b, mm->c, mm->c, pref,
                                                    CT_LT_CANDIDATES, r, &nr);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || nr == 0)
    return pbc_err(err, PB_EUNSUPPORTED, "cuBLASLt has no algorithm for a %lldx%lldx%lld product",
                   (long long)m, (long long)n, (long long)k);
  mm->algo = r[0].algo;
  for (int i = 0; i < nr; i++)
    if (r[i].state == CUBLAS_STATUS_SUCCESS) mm->cand[mm->n_cand++] = r[i].algo;
  return 0;
}

/* Times the heuristic's candidates on the real buffers (at creation, before any step, so writing
 * them is harmless) and keeps the fastest; the first when timing fails. PIPEBENCH_CUDA_LT_TUNE=0
 * keeps the heuristic's first. */
static void lt_tune(ct_engine *o, ct_lt *mm, const void *A, const void *B, const void *C, void *D,
                    float alpha, float beta) {
  const char *env = getenv("PIPEBENCH_CUDA_LT_TUNE");
  if (mm->tuned || mm->n_cand < 2 || (env != NULL && strcmp(env, "0") == 0)) return;
  mm->tuned = 1;
  cudaEvent_t e0, e1;
  if (cudaEventCreate(&e0) != cudaSuccess) return;
  if (cudaEventCreate(&e1) != cudaSuccess) {
    cudaEventDestroy(e0);
    return;
  }
  float best = 1e30f;
  for (int i = 0; i < mm->n_cand; i++) {
    int ok = 1;
    for (int r = 0; r < 4 && ok; r++) { /* one warm-up, three timed */
      if (r == 1) cudaEventRecord(e0, o->st);
      ok = cublasLtMatmul(o->lt, mm->d, &alpha, A, mm->a, B, mm->b, &beta, C, mm->c, D, mm->c,
                          &mm->cand[i], o->ltws, o->ltws_size, o->st) == CUBLAS_STATUS_SUCCESS;
    }
    cudaEventRecord(e1, o->st);
    float ms = 0;
    if (ok && cudaEventSynchronize(e1) == cudaSuccess &&
        cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms < best) {
      best = ms;
      mm->algo = mm->cand[i];
    }
  }
  cudaGetLastError();
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

static int lt_make(ct_engine *o, ct_lt **out, int ta, int tb, int64_t m, int64_t n, int64_t k,
                   int64_t lda, int64_t ldb, int64_t ldd, cudaDataType_t dtype, const void *bias,
                   struct pb_error *err) {
  return lt_make_b(o, out, ta, tb, m, n, k, lda, ldb, ldd, dtype, bias, 1, 0, 0, 0, 0, err);
}

/* D = alpha op(A) op(B) + beta C (C laid out as D). */
static int lt_run_c(ct_engine *o, ct_lt *mm, const void *A, const void *B, const void *C, void *D,
                    float alpha, float beta, struct pb_error *err) {
  TLT(cublasLtMatmul(o->lt, mm->d, &alpha, A, mm->a, B, mm->b, &beta, C, mm->c, D, mm->c,
                     &mm->algo, o->ltws, o->ltws_size, o->st),
      "matmul");
  return 0;
}

static int lt_run(ct_engine *o, ct_lt *mm, const void *A, const void *B, void *D,
                  struct pb_error *err) {
  return lt_run_c(o, mm, A, B, D, D, 1.f, 0.f, err);
}

#include "engines/cuda/cuda_train_vit.cuh"


template <typename T>
static int linear_op(ct_engine *o, const pb__graph *g, const pb__op *op, struct pb_error *err) {
  int vin = o->cur[(size_t)op->in];
  const ct_val xi = o->vals[(size_t)vin];
  if (op->out != g->output || xi.h * xi.w != 1 || op->act != PB__ACT_NONE || op->res >= 0)
    return pbc_err(err, PB_EUNSUPPORTED, "training: a linear layer is supported as the last "
                   "layer, after global pooling (%s)", g->params[op->w].name);
  int64_t Cin = op->cin, K = op->cout, N = o->N;
  int pwid, pbid;
  /* cuBLASLt writes the weight gradient in float */
  PB_RETURN_NOT_OK(param_add<T>(o, g->params[op->w].name, g->params[op->w].data, K * Cin, 1, 2, &pwid, err));
  PB_RETURN_NOT_OK(param_add<T>(o, g->params[op->b].name, g->params[op->b].data, K, 1, 0, &pbid, err));
  void *wt = pw(o, pwid);
  float *bias = o->params[(size_t)pbid].w;
  void *gw = o->params[(size_t)pwid].grad, *gb = o->params[(size_t)pbid].grad;
  ct_lt *f, *bd, *bw;
  /* logits^T (K x N) = W (Cin x K col-major)^T X^T (Cin x N) */
  PB_RETURN_NOT_OK(lt_make(o, &f, 1, 0, K, N, Cin, Cin, Cin, K, CUDA_R_32F, bias, err));
  /* dX^T (Cin x N) = W (Cin x K) dY^T (K x N) */
  PB_RETURN_NOT_OK(lt_make(o, &bd, 0, 0, Cin, N, K, Cin, K, Cin, o->bdt, NULL, err));
  /* dW^T (Cin x K) = X^T (Cin x N) dY (N x K: dY^T transposed) */
  PB_RETURN_NOT_OK(lt_make(o, &bw, 0, 1, Cin, K, N, Cin, K, Cin, CUDA_R_32F, NULL, err));
  void *x = xi.y;
  ct_engine *oo = o;
  float *logits = o->logits;
  o->fwd.push_back([=](struct pb_error *e2) -> int { return lt_run(oo, f, wt, x, logits, e2); });
  o->fwd_labels.push_back("linear_fwd");
  cudaStream_t st = o->st;
  o->bwd_plan.push_back([=](struct pb_error *e3) -> int {
    struct pb_error *err = e3;
    PB_RETURN_NOT_OK(grad_of(oo, vin, err));
    void *dx = oo->vals[(size_t)vin].dy;
    oo->vals[(size_t)vin].written = 1;
    void *dlt = oo->dlt;
    float *dl32 = oo->dl32;
    oo->bwd.push_back([=](struct pb_error *e2) -> int {
      PB_RETURN_NOT_OK(lt_run(oo, bw, x, dlt, gw, e2));
      PB_RETURN_NOT_OK(lt_run(oo, bd, wt, dlt, dx, e2));
      k_rowsum<<<(unsigned)((K + 127) / 128), 128, 0, st>>>(dl32, N, (int)K, (float *)gb);
      return kcheck(e2, "bias gradient");
    });
    oo->bwd_labels.push_back("linear_bwd");
    return 0;
  });
  return 0;
}

/* The algorithm searches ran with the whole workspace (PIPEBENCH_CUDA_WORKSPACE_MB, 512 MiB by
 * default); the steps need only what the chosen algorithms take: keep that much. */
static int workspace_shrink(ct_engine *o, struct pb_error *err) {
  size_t need = (o->ws_need + 255) / 256 * 256;
  if (o->ws == NULL || need >= o->ws_size) return 0;
  TCU(cudaDeviceSynchronize(), "training setup");
  for (size_t i = 0; i < o->allocs.size(); i++)
    if (o->allocs[i].first == o->ws) {
      o->bytes_scratch -= (int64_t)o->allocs[i].second;
      o->allocs.erase(o->allocs.begin() + (long)i);
      break;
    }
  TCU(cudaFree(o->ws), "workspace");
  o->ws = NULL;
  TALLOC(o->ws, void *, need, &o->bytes_scratch);
  o->ws_size = need;
  return 0;
}

/* ---- the step -------------------------------------------------------------------------------- */

template <typename T> static int loss_launch(ct_engine *o, struct pb_error *err) {
  if (o->mse)
    k_mse<T><<<(unsigned)o->N, 256, 0, o->st>>>(o->logits, o->target_f, o->N, (int)o->K,
                                                o->loss_rows, o->dl32, (T *)o->dlt);
  else
    k_cross_entropy<T><<<(unsigned)o->N, 256, 0, o->st>>>(o->logits, o->labels, o->N, (int)o->K,
                                                          o->loss_rows, o->dl32, (T *)o->dlt,
                                                          o->bad);
  k_loss_sum<<<1, 32, 0, o->st>>>(o->loss_rows, o->N, o->mse ? 1.f : 1.f / (float)o->N, o->loss);
  return kcheck(err, "loss");
}

template <typename T> static int sgd_launch(ct_engine *o, struct pb_error *err) {
  int64_t b = (o->sgd_max + 255) / 256;
  if (b > 512) b = 512;
  k_sgd<T><<<dim3((unsigned)b, (unsigned)o->n_sgd), 256, 0, o->st>>>(o->sgd_dev, o->lr, o->momentum,
                                                                     o->weight_decay);
  return kcheck(err, "SGD update");
}

template <typename T> static int step_body(ct_engine *o, struct pb_error *err) {
  for (auto &s : o->fwd) PB_RETURN_NOT_OK(s(err));
  PB_RETURN_NOT_OK(loss_launch<T>(o, err));
  for (auto &s : o->bwd) PB_RETURN_NOT_OK(s(err));
  return sgd_launch<T>(o, err);
}

/* Diagnostics (PIPEBENCH_CUDA_PROFILE=FILE): each step's device time, summed by kind, appended to FILE
 * after the first training step. The steps run one by one, three times each, outside the
 * graph: weights and statistics are not touched (the SGD update is left out). */
template <typename T> static void profile(ct_engine *o, const char *path) {
  std::map<std::string, double> ms;
  cudaEvent_t e0, e1;
  if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) return;
  float keep = o->bn_momentum;
  o->bn_momentum = 0.f;
  double total = 0;
  auto one = [&](ct_step &s, const std::string &l) {
    s(NULL);
    cudaEventRecord(e0, o->st);
    for (int r = 0; r < 3; r++) s(NULL);
    cudaEventRecord(e1, o->st);
    cudaEventSynchronize(e1);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    ms[l] += t / 3.0;
    total += t / 3.0;
  };
  for (size_t i = 0; i < o->fwd.size(); i++) one(o->fwd[i], o->fwd_labels[i]);
  ct_step loss = [o](struct pb_error *e2) { return loss_launch<T>(o, e2); };
  one(loss, "loss");
  for (size_t i = 0; i < o->bwd.size(); i++) one(o->bwd[i], o->bwd_labels[i]);
  o->bn_momentum = keep;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  FILE *f = fopen(path, "a");
  if (f == NULL) return;
  for (auto &kv : ms)
    fprintf(f, "train b%lld %-18s %8.3f ms %5.1f%%\n", (long long)o->N, kv.first.c_str(),
            kv.second, 100.0 * kv.second / total);
  fprintf(f, "train b%lld %-18s %8.3f ms (steps one by one, no update)\n", (long long)o->N,
          "TOTAL", total);
  fclose(f);
}

template <typename T>
static int compile(ct_engine *o, pb_engine *e, const pb__graph *g, struct pb_error *err) {
  const pb__tshape &s0 = g->tensors[0];
  o->c0 = (int)s0.c, o->h0 = (int)s0.h, o->w0 = (int)s0.w;
  o->cp0 = sizeof(T) == 2 ? (o->c0 + 7) / 8 * 8 : o->c0;
  arena_init(&o->arena, o->dev);
  const char *rce = getenv("PIPEBENCH_CUDA_RECOMPUTE");
  o->recompute = rce && *rce ? atoi(rce) != 0 : 0;
  const char *mze = getenv("PIPEBENCH_CUDA_MASK_FROM_Z");
  o->mask_from_z = mze && *mze ? atoi(mze) != 0 : 1;
  int sms = 0, ba = 0, bb = 0;
  TCU(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, o->dev), "device attributes");
  TCU(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ba, k_bn_apply<T>, PBT_THREADS, 0), "occupancy");
  const char *bue = getenv("PIPEBENCH_CUDA_BWD_UNROLL");
  o->bwd_unroll = bue && *bue && atoi(bue) == 1 ? 1 : 2;
  if (o->bwd_unroll == 2)
    TCU(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bb, k_bn_backward<T, 2>, PBT_THREADS, 0), "occupancy");
  else
    TCU(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bb, k_bn_backward<T, 1>, PBT_THREADS, 0), "occupancy");
  o->ew_apply = sms * (ba > 0 ? ba : 1);
  o->ew_bwd = sms * (bb > 0 ? bb : 1);
  o->colsum_blocks = sms * 3;
  const char *sbe = getenv("PIPEBENCH_CUDA_STATS_BLOCKS");
  o->stats_blocks = sms * (sbe && *sbe && atoi(sbe) > 0 ? atoi(sbe) : 5);
  value_uses(o, g);
  int v0;
  PB_RETURN_NOT_OK(val_new(o, o->cp0, o->h0, o->w0, sizeof(T), err, &v0));
  o->x0 = o->vals[0].y;
  o->cur.assign((size_t)g->n_tensors, -1);
  o->cur[0] = v0;
  const char *wsmb = getenv("PIPEBENCH_CUDA_WORKSPACE_MB");
  o->ws_size = (size_t)(wsmb && *wsmb ? atoi(wsmb) : 512) << 20;
  int convs = 0;
  for (int i = 0; i < g->n_ops; i++) convs += g->ops[i].kind == PB__OP_CONV;
  if (convs == 0) o->ws_size = 0; /* cuDNN's workspace serves convolutions only */
  TALLOC(o->ws, void *, o->ws_size, &o->bytes_scratch);
  o->ltws_size = (size_t)32 << 20;
  TALLOC(o->ltws, void *, o->ltws_size, &o->bytes_scratch);
  /* partial sums: the largest chunks x channels of any batch norm */
  size_t most = 0;
  for (int i = 0; i < g->n_ops; i++) {
    const pb__op *op = &g->ops[i];
    if (op->kind != PB__OP_CONV) continue;
    const pb__tshape &so = g->tensors[op->out];
    int ch, gr;
    int64_t rpc;
    colsum_shape(o->N * so.h * so.w, (int)op->cout, o->colsum_blocks, &ch, &rpc, &gr);
    if ((size_t)ch * (size_t)op->cout > most) most = (size_t)ch * (size_t)op->cout;
    colsum_shape(o->N * so.h * so.w, (int)op->cout, o->stats_blocks, &ch, &rpc, &gr);
    if ((size_t)ch * (size_t)op->cout > most) most = (size_t)ch * (size_t)op->cout;
  }
  size_t tok = token_partials(o, g);
  if (tok > most) most = tok;
  o->part_count = most;
  TALLOC(o->part0, float *, most * 4 + 4, &o->bytes_scratch);
  TALLOC(o->part1, float *, most * 4 + 4, &o->bytes_scratch);
  o->K = g->outputs;
  TALLOC(o->logits, float *, (size_t)(o->N * o->K) * 4, &o->bytes_act);
  TALLOC(o->dl32, float *, (size_t)(o->N * o->K) * 4, &o->bytes_act);
  TALLOC(o->dlt, void *, (size_t)(o->N * o->K) * sizeof(T), &o->bytes_act);
  TALLOC(o->loss_rows, float *, (size_t)o->N * 4, &o->bytes_scratch);
  TALLOC(o->loss, float *, 4, &o->bytes_scratch);
  TALLOC(o->lr, float *, 4, &o->bytes_scratch);
  TALLOC(o->bad, int *, 4, &o->bytes_scratch);
  TALLOC(o->labels, int32_t *, (size_t)o->N * 4, &o->bytes_scratch);
  if (o->mse) TALLOC(o->target_f, float *, (size_t)(o->N * o->K) * 4, &o->bytes_scratch);
  TCU(cudaHostAlloc((void **)&o->host, 16, cudaHostAllocDefault), "pinned memory");
  for (int i = 0; i < g->n_ops; i++) {
    const pb__op *op = &g->ops[i];
    int rc;
    switch (op->kind) {
    case PB__OP_CONV:
      rc = conv_op<T>(o, g, op, op->in == 0, err);
      break;
    case PB__OP_MAXPOOL:
    case PB__OP_GAP: rc = pool_op<T>(o, g, op, err); break;
    case PB__OP_LINEAR:
      rc = op->out == g->output ? linear_op<T>(o, g, op, err) : token_linear_op<T>(o, g, op, err);
      break;
    case PB__OP_LAYERNORM: rc = layernorm_op<T>(o, g, op, err); break;
    case PB__OP_PATCH_TOKENS: rc = patch_op<T>(o, g, op, err); break;
    case PB__OP_ATTENTION: rc = attention_op<T>(o, op, err); break;
    case PB__OP_TAKE_CLS: rc = take_cls_op<T>(o, op, err); break;
    default: rc = pbc_err(err, PB_EUNSUPPORTED, "%s: layer kind %d has no training step", g->model, (int)op->kind);
    }
    if (rc != 0) return rc;
    forward_done(o, g, i);
  }
  if (g->ops[g->n_ops - 1].kind != PB__OP_LINEAR)
    return pbc_err(err, PB_EUNSUPPORTED, "training: %s does not end in a linear layer", g->model);
  /* the backward pass, planned in reverse: gradient buffers come from the pool and go back to it
   * once their layer's backward is queued */
  for (size_t i = o->bwd_plan.size(); i-- > 0;) PB_RETURN_NOT_OK(o->bwd_plan[i](err));
  o->bwd_plan.clear();
  o->bytes_act += (int64_t)o->arena.mapped; /* the plan's peak, as mapped */
  PB_RETURN_NOT_OK(workspace_shrink(o, err));
  /* the SGD table */
  std::vector<sgd_param> sp;
  for (auto &p : o->params) {
    if (!p.learnable) continue;
    sp.push_back(sgd_param{p.w, p.grad, p.mom, p.wc, p.n, p.grad_t});
    if (p.n > o->sgd_max) o->sgd_max = p.n;
  }
  o->n_sgd = (int)sp.size();
  TALLOC(o->sgd_dev, sgd_param *, sp.size() * sizeof(sgd_param), &o->bytes_scratch);
  TCU(cudaMemcpy(o->sgd_dev, sp.data(), sp.size() * sizeof(sgd_param), cudaMemcpyHostToDevice),
      "SGD table");
  /* the algorithm searches wrote into gradients and momentum may not start at zero otherwise */
  for (auto &p : o->params)
    if (p.mom) TCU(cudaMemset(p.mom, 0, (size_t)p.n * 4), "momentum");
  TCU(cudaDeviceSynchronize(), "training setup");
  (void)e;
  return 0;
}

/* ---- the engine's entry points ----------------------------------------------------------- */

void pbc_train_free(pbc_train *t) {
  ct_engine *o = (ct_engine *)t;
  if (o == NULL) return;
  if (o->st) cudaStreamSynchronize(o->st);
  if (o->gexec) cudaGraphExecDestroy(o->gexec);
  if (o->graph) cudaGraphDestroy(o->graph);
  for (ct_lt *m : o->lts) {
    if (m->a) cublasLtMatrixLayoutDestroy(m->a);
    if (m->b) cublasLtMatrixLayoutDestroy(m->b);
    if (m->c) cublasLtMatrixLayoutDestroy(m->c);
    if (m->d) cublasLtMatmulDescDestroy(m->d);
    delete m;
  }
  for (auto d : o->tds) cudnnDestroyTensorDescriptor(d);
  for (auto d : o->fds) cudnnDestroyFilterDescriptor(d);
  for (auto d : o->cds) cudnnDestroyConvolutionDescriptor(d);
  for (auto &a : o->allocs) cudaFree(a.first);
  arena_destroy(&o->arena);
  if (o->host) cudaFreeHost(o->host);
  delete o;
}

int pbc_train_new(pb_engine *e, const pb__graph *g, cudaStream_t st, cudnnHandle_t dnn,
                  cublasLtHandle_t lt, pbc_train **out, struct pb_error *err) {
  *out = NULL;
  const char *dt = e->info.dtype;
  ct_engine *o = new ct_engine();
  if (strcmp(dt, "float32") == 0) o->f32 = 1, o->es = 4;
  else if (strcmp(dt, "bfloat16") == 0) o->f32 = 0, o->es = 2;
  else {
    delete o;
    return pbc_err(err, PB_EUNSUPPORTED, "training on cuda takes dtype bfloat16 (as torch autocast) "
                   "or float32, not %s", dt);
  }
  o->cdt = o->f32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16;
  o->bdt = o->f32 ? CUDA_R_32F : CUDA_R_16BF;
  o->dev = e->device_index;
  o->N = e->info.batch_size;
  o->st = st, o->dnn = dnn, o->lt = lt;
  o->mse = e->loss_mse;
  o->momentum = e->momentum, o->weight_decay = e->weight_decay;
  const char *gr = getenv("PIPEBENCH_CUDA_GRAPH");
  o->use_graph = gr && *gr ? atoi(gr) : 1;
  int rc = o->f32 ? compile<float>(o, e, g, err) : compile<__nv_bfloat16>(o, e, g, err);
  if (rc != 0) {
    cudaGetLastError();
    pbc_train_free((pbc_train *)o);
    return rc;
  }
  e->info.bytes_weights = o->bytes_w;
  e->info.bytes_activations = o->bytes_act;
  e->info.bytes_scratch = o->bytes_scratch;
  *out = (pbc_train *)o;
  return 0;
}

template <typename T>
static int step_t(ct_engine *o, const void *input, const void *target, float lr,
                  struct pb_error *err) {
  int64_t nin = o->N * o->cp0 * o->h0 * o->w0;
  pbk::k_nchw_to_nhwc<T><<<grid_of(nin), 256, 0, o->st>>>((const float *)input, (T *)o->x0, o->N,
                                                           o->c0, o->h0, o->w0, o->cp0);
  PB_RETURN_NOT_OK(kcheck(err, "input conversion"));
  if (o->mse)
    TCU(cudaMemcpyAsync(o->target_f, target, (size_t)(o->N * o->K) * 4, cudaMemcpyDeviceToDevice,
                        o->st), "targets");
  else
    TCU(cudaMemcpyAsync(o->labels, target, (size_t)o->N * 4, cudaMemcpyDeviceToDevice, o->st),
        "labels");
  /* the rate goes to the device by value, so a captured graph reads the caller's */
  k_set<<<1, 1, 0, o->st>>>(o->lr, lr);
  PB_RETURN_NOT_OK(kcheck(err, "learning rate"));
  if (o->gexec != NULL) {
    TCU(cudaGraphLaunch(o->gexec, o->st), "training graph launch");
  } else {
    PB_RETURN_NOT_OK(step_body<T>(o, err));
    o->steps_done++;
    const char *prof = getenv("PIPEBENCH_CUDA_PROFILE");
    if (o->steps_done == 1 && prof != NULL && *prof) profile<T>(o, prof);
    if (o->use_graph && o->steps_done == 1) {
      /* the first step ran eagerly (and checked every launch); capture the same work */
      if (!pbc_capture_graph(o->st, [o] { return step_body<T>(o, NULL); }, &o->graph, &o->gexec))
        o->use_graph = 0;
    }
  }
  return 0;
}

int pbc_train_step(pbc_train *t, const void *input, const void *target, float lr, float *loss,
                   struct pb_error *err) {
  ct_engine *o = (ct_engine *)t;
  TCU(cudaSetDevice(o->dev), "select device");
  PB_RETURN_NOT_OK(o->f32 ? step_t<float>(o, input, target, lr, err)
                          : step_t<__nv_bfloat16>(o, input, target, lr, err));
  if (loss != NULL) PB_RETURN_NOT_OK(pbc_train_step_loss(t, loss, err));
  return 0;
}

int pbc_train_step_loss(pbc_train *t, float *loss, struct pb_error *err) {
  ct_engine *o = (ct_engine *)t;
  TCU(cudaMemcpyAsync(o->host, o->loss, 4, cudaMemcpyDeviceToHost, o->st), "loss");
  TCU(cudaStreamSynchronize(o->st), "training step");
  *loss = o->host[0];
  return pbc_train_check(t, err);
}

int pbc_train_check(pbc_train *t, struct pb_error *err) {
  ct_engine *o = (ct_engine *)t;
  int bad = 0;
  TCU(cudaMemcpy(&bad, o->bad, 4, cudaMemcpyDeviceToHost), "label check");
  if (bad != 0) {
    int32_t lab = 0;
    cudaMemcpy(&lab, o->labels + (bad - 1), 4, cudaMemcpyDeviceToHost);
    cudaMemset(o->bad, 0, 4);
    return pbc_err(err, PB_EINVAL, "label %d of image %d is outside [0, %lld)", lab, bad - 1,
                   (long long)o->K);
  }
  return 0;
}

template <typename T> static int forward_t(ct_engine *o, const void *input, struct pb_error *err) {
  int64_t nin = o->N * o->cp0 * o->h0 * o->w0;
  pbk::k_nchw_to_nhwc<T><<<grid_of(nin), 256, 0, o->st>>>((const float *)input, (T *)o->x0, o->N,
                                                           o->c0, o->h0, o->w0, o->cp0);
  PB_RETURN_NOT_OK(kcheck(err, "input conversion"));
  for (auto &s : o->fwd) PB_RETURN_NOT_OK(s(err));
  return 0;
}

int pbc_train_forward(pbc_train *t, const void *input, void *output, struct pb_error *err) {
  ct_engine *o = (ct_engine *)t;
  TCU(cudaSetDevice(o->dev), "select device");
  o->bn_momentum = 0.f; /* batch statistics, running averages left alone */
  int rc = o->f32 ? forward_t<float>(o, input, err) : forward_t<__nv_bfloat16>(o, input, err);
  o->bn_momentum = 0.1f;
  PB_RETURN_NOT_OK(rc);
  TCU(cudaMemcpyAsync(output, o->logits, (size_t)(o->N * o->K) * 4, cudaMemcpyDeviceToDevice,
                      o->st), "output");
  return 0;
}

int pbc_train_param(pbc_train *t, int i, char *name, size_t name_len, int64_t *count,
                    float *value, float *grad, struct pb_error *err) {
  ct_engine *o = (ct_engine *)t;
  if (i < 0 || i >= (int)o->params.size()) return pbc_err(err, PB_EINVAL, "no parameter %d", i);
  const ct_param &p = o->params[(size_t)i];
  snprintf(name, name_len, "%s", p.name);
  int64_t n = p.conv ? p.K * p.C * p.k * p.k : p.n;
  *count = n;
  if (value == NULL && grad == NULL) return 0;
  TCU(cudaStreamSynchronize(o->st), "synchronize");
  std::vector<float> w((size_t)p.n), gr((size_t)p.n, 0.f);
  TCU(cudaMemcpy(w.data(), p.w, (size_t)p.n * 4, cudaMemcpyDeviceToHost), "parameter");
  if (p.grad != NULL) {
    if (p.grad_t && o->es == 2) {
      std::vector<__nv_bfloat16> b((size_t)p.n);
      TCU(cudaMemcpy(b.data(), p.grad, (size_t)p.n * 2, cudaMemcpyDeviceToHost), "gradient");
      for (size_t j = 0; j < b.size(); j++) gr[j] = __bfloat162float(b[j]);
    } else {
      TCU(cudaMemcpy(gr.data(), p.grad, (size_t)p.n * 4, cudaMemcpyDeviceToHost), "gradient");
    }
  }
  for (int64_t j = 0; j < n; j++) {
    int64_t at = j;
    if (p.conv) { /* torch KCRS from KRSC with padded C */
      int64_t q = j % p.k, r = (j / p.k) % p.k, c = (j / (p.k * p.k)) % p.C, kk = j / (p.k * p.k * p.C);
      at = ((kk * p.k + r) * p.k + q) * p.cp + c;
    }
    if (value) value[j] = w[(size_t)at];
    if (grad) grad[j] = gr[(size_t)at];
  }
  return 0;
}
