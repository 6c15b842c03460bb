/* The CUDA backend: compiles a layer graph (engines/graph.h) once, at creation, for one batch
 * size, into cuDNN convolutions (NHWC, batch norm folded into the weights, bias/ReLU/residual
 * fused through cudnnConvolutionBiasActivationForward where cuDNN takes it), cuBLASLt matrix
 * products (linear layers and 1x1 stride-1 convolutions; bias or bias + ReLU epilogue; residual
 * through beta = 1 in place), and small kernels of our own
 * (cuda_kernels.cuh). Everything is allocated at creation; the steady-state forward is one CUDA
 * graph launch between the input conversion (float32 NCHW -> T NHWC) and the output conversion
 * (T -> float32). Only cuDNN's legacy convolution API is used, which cuDNN 9.0 onwards has. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <functional>
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "engines/cuda/cuda_module.h"
#include "engines/cuda/cuda_input.h"
#include "engines/cuda/cuda_kernels.cuh"
#include "engines/cuda/cuda_shared.h"
#include "engines/cuda/cuda_train.h"

using namespace pbk;

/* ---- errors ------------------------------------------------------------------------------- */

int pbc_err(struct pb_error *err, int code, const char *fmt, ...) {
  if (err != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
  }
  return code;
}

int pbc_cuda_err(struct pb_error *err, cudaError_t e, const char *what) {
  cudaGetLastError(); /* clear a sticky-free error so the next call starts clean */
  if (e == cudaErrorMemoryAllocation) {
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    return pbc_err(err, PB_ENOMEM, "%s: out of device memory (%.0f MiB free of %.0f MiB)", what,
                   (double)fr / 1048576.0, (double)tot / 1048576.0);
  }
  return pbc_err(err, PB_EIO, "%s: CUDA error %s (%s)", what, cudaGetErrorName(e),
                 cudaGetErrorString(e));
}

static int dnn_err(struct pb_error *err, cudnnStatus_t s, const char *what) {
  int code = s == CUDNN_STATUS_NOT_SUPPORTED ? PB_EUNSUPPORTED
             : s == CUDNN_STATUS_ALLOC_FAILED ? PB_ENOMEM
                                               : PB_EIO;
  return pbc_err(err, code, "cuDNN %s failed: %s", what, cudnnGetErrorString(s));
}

static int lt_err(struct pb_error *err, cublasStatus_t s, const char *what) {
  int code = s == CUBLAS_STATUS_NOT_SUPPORTED ? PB_EUNSUPPORTED
             : s == CUBLAS_STATUS_ALLOC_FAILED ? PB_ENOMEM
                                              : PB_EIO;
  return pbc_err(err, code, "cuBLASLt %s failed: status %d", what, (int)s);
}

#define CU(call, what)                                                                         \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) return pbc_cuda_err(err, e_, what);                                 \
  } while (0)
#define DNN(call, what)                                                                        \
  do {                                                                                         \
    cudnnStatus_t s_ = (call);                                                                 \
    if (s_ != CUDNN_STATUS_SUCCESS) return dnn_err(err, s_, what);                             \
  } while (0)
#define LT(call, what)                                                                         \
  do {                                                                                         \
    cublasStatus_t s_ = (call);                                                                \
    if (s_ != CUBLAS_STATUS_SUCCESS) return lt_err(err, s_, what);                             \
  } while (0)

/* ---- the compiled engine ------------------------------------------------------------------ */

enum { DT_F32 = 0, DT_TF32, DT_BF16, DT_F16 };

struct cu_buf {
  void *p;
  size_t size;
  int busy;
};

#define PBC_LT_CANDIDATES 8
struct cu_mm { /* one cuBLASLt product, its algorithm chosen at creation */
  cublasLtMatmulDesc_t d = NULL;
  cublasLtMatrixLayout_t a = NULL, b = NULL, c = NULL;
  cublasLtMatmulAlgo_t algo;
  cublasLtMatmulAlgo_t cand[PBC_LT_CANDIDATES];
  int n_cand = 0, tuned = 0;
};

typedef std::function<int(struct pb_error *)> cu_step;

struct cu_engine {
  int dev = 0;                             /* the GPU this engine computes on ("cuda:N") */
  cudaEvent_t fwd0 = NULL, fwd1 = NULL;    /* around the most recent forward */
  int fwd_recorded = 0;
  int dt = DT_F32;
  size_t es = 4;
  cudnnDataType_t cdt = CUDNN_DATA_FLOAT;
  cudaDataType_t bdt = CUDA_R_32F;
  int64_t N = 1;
  int fused = 1, use_graph = 1;
  cudaStream_t st = NULL;
  cudnnHandle_t dnn = NULL;
  cublasLtHandle_t lt = NULL;
  void *ws = NULL; /* cuDNN workspace */
  size_t ws_size = 0;
  void *ltws = NULL; /* cuBLASLt workspace */
  size_t ltws_size = 0;
  std::vector<std::pair<void *, size_t>> allocs;
  int64_t bytes_w = 0, bytes_act = 0, bytes_scratch = 0;
  std::vector<cu_buf> bufs;
  std::vector<int> tbuf, last_use;
  std::vector<cu_step> steps;
  std::vector<cudnnTensorDescriptor_t> tds;
  std::vector<cudnnFilterDescriptor_t> fds;
  std::vector<cudnnConvolutionDescriptor_t> cds;
  std::vector<cudnnActivationDescriptor_t> ads;
  std::vector<cu_mm *> mms;
  std::map<std::string, cudnnConvolutionFwdAlgoPerf_t> algo_cache;
  int c0 = 0, cp0 = 0, h0 = 0, w0 = 0; /* input, and its padded channel count */
  void *x0 = NULL;                     /* the converted input (tensor 0) */
  int out_tensor = -1;
  int64_t outputs = 0;
  void *scores = NULL, *probs = NULL, *patches = NULL; /* attention and patch temporaries */
  size_t scores_size = 0, probs_size = 0, patches_size = 0;
  void *heads = NULL; /* attention's q, k, v and outputs per head (batched attention) */
  size_t heads_size = 0;
  int attn_batched = 1;
  int attn_fused = 1; /* k_attention for 16-bit types */
  int patch_gemm = 1; /* patch embedding as patchify + cuBLASLt product */
  int lt_tune = 1;        /* time cuBLASLt's candidate algorithms at creation */
  int next_gelu = 0;      /* the next mm_make uses the GELU epilogue */
  int next_relu = 0;      /* the next mm_make uses the ReLU epilogue */
  int gemm_1x1 = 1;       /* 1x1 stride-1 convolutions as cuBLASLt products */
  int n_gemm = 0;
  int gelu_epilogue = 0; /* cuBLASLt's GELU epilogue (tanh approximation) instead of exact GELU */
  std::vector<std::string> labels; /* per step: the op kind it belongs to (profiling) */
  std::vector<std::string> shapes; /* per step: its op's index and shape (profiling) */
  cudaGraph_t graph = NULL;
  cudaGraphExec_t gexec = NULL;
  int n_fused = 0, n_convs = 0;
  pbc_train *train = NULL; /* a training engine (cuda_train.cu) instead of the steps above */
};

static int grid_for(int64_t n) {
  int64_t b = (n + 255) / 256;
  return (int)(b < 65535 * 8 ? (b < 1 ? 1 : b) : 65535 * 8);
}

static void *dev_alloc(cu_engine *o, size_t n, int64_t *counter, struct pb_error *err, int *rc) {
  void *p = NULL;
  if (n == 0) n = 256;
  cudaError_t e = cudaMalloc(&p, n);
  if (e != cudaSuccess) {
    char what[96];
    snprintf(what, sizeof what, "cudaMalloc of %.1f MiB", (double)n / 1048576.0);
    *rc = pbc_cuda_err(err, e, what);
    return NULL;
  }
  o->allocs.push_back(std::make_pair(p, n));
  *counter += (int64_t)n;
  return p;
}

/* float32 host values -> T on the device (weights, once). */
static void *upload(cu_engine *o, const float *src, int64_t n, int as_f32, struct pb_error *err,
                    int *rc) {
  size_t es = as_f32 ? 4 : o->es;
  void *d = dev_alloc(o, (size_t)n * es, &o->bytes_w, err, rc);
  if (d == NULL) return NULL;
  cudaError_t e;
  if (as_f32 || es == 4) {
    e = cudaMemcpy(d, src, (size_t)n * 4, cudaMemcpyHostToDevice);
  } else {
    std::vector<uint16_t> h((size_t)n);
    for (int64_t i = 0; i < n; i++) {
      if (o->dt == DT_BF16) {
        __nv_bfloat16 v = __float2bfloat16_rn(src[i]);
        memcpy(&h[(size_t)i], &v, 2);
      } else {
        __half v = __float2half_rn(src[i]);
        memcpy(&h[(size_t)i], &v, 2);
      }
    }
    e = cudaMemcpy(d, h.data(), (size_t)n * 2, cudaMemcpyHostToDevice);
  }
  if (e != cudaSuccess) {
    *rc = pbc_cuda_err(err, e, "weight upload");
    return NULL;
  }
  return d;
}

static int buf_acquire(cu_engine *o, size_t size, struct pb_error *err) {
  int best = -1;
  for (int i = 0; i < (int)o->bufs.size(); i++)
    if (!o->bufs[i].busy && o->bufs[i].size >= size &&
        (best < 0 || o->bufs[i].size < o->bufs[best].size))
      best = i;
  if (best >= 0) {
    o->bufs[best].busy = 1;
    return best;
  }
  int rc = 0;
  void *p = dev_alloc(o, size, &o->bytes_act, err, &rc);
  if (p == NULL) return rc;
  o->bufs.push_back(cu_buf{p, size, 1});
  return (int)o->bufs.size() - 1;
}

static size_t tensor_bytes(const cu_engine *o, const pb__graph *g, int t) {
  const pb__tshape &s = g->tensors[t];
  int64_t per = s.tokens ? s.c * s.h : s.c * s.h * s.w;
  return (size_t)(o->N * per) * o->es;
}

/* Gives tensor t a buffer (unless it has one: residual outputs write in place). */
static int place(cu_engine *o, const pb__graph *g, int t, struct pb_error *err) {
  if (o->tbuf[t] >= 0) return 0;
  int b = buf_acquire(o, tensor_bytes(o, g, t), err);
  if (b < 0) return b;
  o->tbuf[t] = b;
  return 0;
}

static void *tptr(cu_engine *o, int t) {
  if (t == 0) return o->x0;
  return o->tbuf[t] >= 0 ? o->bufs[o->tbuf[t]].p : NULL;
}

static void release_dead(cu_engine *o, const pb__graph *g, int op_index) {
  for (int t = 1; t < g->n_tensors; t++)
    if (o->last_use[t] == op_index && o->tbuf[t] >= 0) {
      o->bufs[o->tbuf[t]].busy = 0;
      o->tbuf[t] = -1;
    }
}

/* ---- convolution (cuDNN) ----------------------------------------------------------------- */

static int tdesc(cu_engine *o, cudnnTensorDescriptor_t *d, int64_t n, int c, int h, int w,
                 cudnnDataType_t dt, struct pb_error *err) {
  DNN(cudnnCreateTensorDescriptor(d), "tensor descriptor");
  o->tds.push_back(*d);
  DNN(cudnnSetTensor4dDescriptor(*d, CUDNN_TENSOR_NHWC, dt, (int)n, c, h, w), "tensor descriptor");
  return 0;
}

/* Batch norm (eval) folded into weights and bias, as the oneDNN backend does; weights laid out
 * KRSC (NHWC filters) with input channels padded to cin_p. */
static void fold_conv(const pb__graph *g, const pb__op *op, int cin_p, std::vector<float> &w,
                      std::vector<float> &b) {
  int64_t K = op->cout, C = op->cin, k = op->k;
  const float *src = g->params[op->w].data;
  w.assign((size_t)(K * k * k * cin_p), 0.f);
  b.assign((size_t)K, 0.f);
  for (int64_t oc = 0; oc < K; oc++) {
    double s = 1.0;
    double bias = op->b >= 0 ? g->params[op->b].data[oc] : 0.0;
    if (op->bn_g >= 0) {
      s = g->params[op->bn_g].data[oc] / sqrt((double)g->params[op->bn_v].data[oc] + op->eps);
      bias = (bias - g->params[op->bn_m].data[oc]) * s + g->params[op->bn_b].data[oc];
    }
    b[(size_t)oc] = (float)bias;
    for (int64_t c = 0; c < C; c++)
      for (int64_t r = 0; r < k; r++)
        for (int64_t q = 0; q < k; q++)
          w[(size_t)(((oc * k + r) * k + q) * cin_p + c)] =
              (float)(src[((oc * C + c) * k + r) * k + q] * s);
  }
}

/* The fastest forward algorithm for this convolution, measured once per shape on the real
 * buffers (cudnnFind) within the shared workspace; float32 keeps to FMA math. */
static int pick_conv_algo(cu_engine *o, const pb__graph *g, const pb__op *op,
                          cudnnTensorDescriptor_t xd, void *x, cudnnFilterDescriptor_t fd,
                          void *wd, cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd,
                          void *y, int Cs, int H, int W, int res, cudnnMathType_t math,
                          cudnnConvolutionFwdAlgoPerf_t *out, struct pb_error *err) {
  int K = (int)op->cout, k = op->k;
  char key[160];
  snprintf(key, sizeof key, "%lld %d %d %d %d %d %d %d %d %d", (long long)o->N, Cs, H, W, K, k,
           op->stride, op->pad, res, (int)math);
  auto hit = o->algo_cache.find(key);
  if (hit != o->algo_cache.end()) {
    *out = hit->second;
    return 0;
  }
  /* Measure the candidates on the real buffers (cudnnFind), within the shared workspace. */
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int n = 0;
  DNN(cudnnFindConvolutionForwardAlgorithmEx(o->dnn, xd, x, fd, wd, cd, yd, y,
                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf, o->ws,
                                             o->ws_size),
      "convolution algorithm search");
  int pick = -1;
  for (int i = 0; i < n && pick < 0; i++)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= o->ws_size &&
        (o->dt != DT_F32 || perf[i].mathType == CUDNN_FMA_MATH ||
         perf[i].mathType == CUDNN_DEFAULT_MATH))
      pick = i;
  if (pick < 0)
    return pbc_err(err, PB_EUNSUPPORTED,
                   "cuDNN has no convolution algorithm for %s %dx%dx%d -> %d, k %d, stride %d",
                   g->params[op->w].name, Cs, H, W, K, k, op->stride);
  *out = perf[pick];
  o->algo_cache[key] = *out;
  return 0;
}

/* A convolution from x (N, H, W, Cs) into y (N, Ho, Wo, K). res: y already holds the residual
 * and the result is added to it. with_bias 0: the bias is left to the caller (patch tokens). */
static int conv_step(cu_engine *o, const pb__graph *g, const pb__op *op, void *x, int Cs, int H,
                     int W, void *y, int Ho, int Wo, int res, int with_bias,
                     struct pb_error *err) {
  int K = (int)op->cout, k = op->k;
  int rc = 0;
  std::vector<float> wf, bf;
  fold_conv(g, op, Cs, wf, bf);
  void *wd = upload(o, wf.data(), (int64_t)wf.size(), 0, err, &rc);
  if (wd == NULL) return rc;
  float *bias32 = (float *)upload(o, bf.data(), K, 1, err, &rc);
  if (bias32 == NULL) return rc;
  cudnnTensorDescriptor_t xd, yd, bd;
  PB_RETURN_NOT_OK(tdesc(o, &xd, o->N, Cs, H, W, o->cdt, err));
  PB_RETURN_NOT_OK(tdesc(o, &yd, o->N, K, Ho, Wo, o->cdt, err));
  cudnnFilterDescriptor_t fd;
  DNN(cudnnCreateFilterDescriptor(&fd), "filter descriptor");
  o->fds.push_back(fd);
  DNN(cudnnSetFilter4dDescriptor(fd, o->cdt, CUDNN_TENSOR_NHWC, K, Cs, k, k), "filter descriptor");
  cudnnConvolutionDescriptor_t cd;
  DNN(cudnnCreateConvolutionDescriptor(&cd), "convolution descriptor");
  o->cds.push_back(cd);
  DNN(cudnnSetConvolution2dDescriptor(cd, op->pad, op->pad, op->stride, op->stride, 1, 1,
                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
      "convolution descriptor");
  /* float32: plain FMA math, so no TF32 sneaks in; tf32, bf16, f16: tensor cores */
  cudnnMathType_t math = o->dt == DT_F32 ? CUDNN_FMA_MATH
                         : o->dt == DT_TF32 ? CUDNN_DEFAULT_MATH
                                            : CUDNN_TENSOR_OP_MATH;
  DNN(cudnnSetConvolutionMathType(cd, math), "convolution math type");
  int dn, dc, dh, dw;
  DNN(cudnnGetConvolution2dForwardOutputDim(cd, xd, fd, &dn, &dc, &dh, &dw), "output size");
  if (dh != Ho || dw != Wo || dc != K)
    return pbc_err(err, PB_EINVAL, "cuDNN output %dx%dx%d, graph %dx%dx%d", dc, dh, dw, K, Ho, Wo);
  cudnnConvolutionFwdAlgoPerf_t best;
  PB_RETURN_NOT_OK(pick_conv_algo(o, g, op, xd, x, fd, wd, cd, yd, y, Cs, H, W, res, math, &best,
                                  err));
  DNN(cudnnSetConvolutionMathType(cd, best.mathType), "convolution math type");
  cudnnConvolutionFwdAlgo_t algo = best.algo;
  int act = op->act;
  o->n_convs++;
  if (o->fused && act == PB__ACT_RELU && with_bias) {
    /* y = relu(conv(x) + alpha2 * z + bias), z = y itself for a residual (read before written,
     * element by element). Tried once now; cuDNN refuses some configurations. */
    void *bias_t = upload(o, bf.data(), K, o->es == 4, err, &rc);
    if (bias_t == NULL) return rc;
    PB_RETURN_NOT_OK(tdesc(o, &bd, 1, K, 1, 1, o->cdt, err));
    cudnnActivationDescriptor_t ad;
    DNN(cudnnCreateActivationDescriptor(&ad), "activation descriptor");
    o->ads.push_back(ad);
    DNN(cudnnSetActivationDescriptor(ad, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0),
        "activation descriptor");
    float alpha2 = res ? 1.f : 0.f;
    cudnnHandle_t h = o->dnn;
    void *ws = o->ws;
    size_t wss = o->ws_size;
    cu_step s = [=](struct pb_error *e2) -> int {
      float one = 1.f, a2 = alpha2;
      cudnnStatus_t r = cudnnConvolutionBiasActivationForward(h, &one, xd, x, fd, wd, cd, algo, ws,
                                                              wss, &a2, yd, y, bd, bias_t, ad, yd,
                                                              y);
      return r == CUDNN_STATUS_SUCCESS ? 0 : dnn_err(e2, r, "fused convolution");
    };
    /* buffers hold nothing yet, so a trial run (which adds into y) is harmless */
    if (s(NULL) == 0 && cudaStreamSynchronize(o->st) == cudaSuccess) {
      o->steps.push_back(s);
      o->n_fused++;
      return 0;
    }
    cudaGetLastError();
  }
  cudnnHandle_t h = o->dnn;
  void *ws = o->ws;
  size_t wss = o->ws_size;
  float beta = res ? 1.f : 0.f;
  o->steps.push_back([=](struct pb_error *e2) -> int {
    float one = 1.f, b = beta;
    cudnnStatus_t r =
        cudnnConvolutionForward(h, &one, xd, x, fd, wd, cd, algo, ws, wss, &b, yd, y);
    return r == CUDNN_STATUS_SUCCESS ? 0 : dnn_err(e2, r, "convolution");
  });
  if (with_bias || act != PB__ACT_NONE) {
    int64_t total = o->N * (int64_t)Ho * Wo * K;
    cudaStream_t st = o->st;
    int dt = o->dt;
    const float *bp = with_bias ? bias32 : NULL;
    /* 16 bytes a thread where the channels divide and 32-bit indices reach */
    int vec = (int64_t)K * o->es % 16 == 0 && total < ((int64_t)1 << 31) && (uintptr_t)y % 16 == 0;
    o->steps.push_back([=](struct pb_error *e2) -> int {
      int nt = (int)total;
      if (vec && dt == DT_BF16)
        k_bias_act_vec<<<grid_for(total / 8), 256, 0, st>>>((__nv_bfloat16 *)y, bp, nt, K, act);
      else if (vec && dt == DT_F16)
        k_bias_act_vec<<<grid_for(total / 8), 256, 0, st>>>((__half *)y, bp, nt, K, act);
      else if (vec)
        k_bias_act_vec<<<grid_for(total / 4), 256, 0, st>>>((float *)y, bp, nt, K, act);
      else if (dt == DT_BF16)
        k_bias_act<<<grid_for(total), 256, 0, st>>>((__nv_bfloat16 *)y, bp, total, K, act);
      else if (dt == DT_F16)
        k_bias_act<<<grid_for(total), 256, 0, st>>>((__half *)y, bp, total, K, act);
      else
        k_bias_act<<<grid_for(total), 256, 0, st>>>((float *)y, bp, total, K, act);
      cudaError_t ce = cudaGetLastError();
      return ce == cudaSuccess ? 0 : pbc_cuda_err(e2, ce, "bias kernel");
    });
  }
  return 0;
}

/* ---- matrix products (cuBLASLt) ---------------------------------------------------------- */

/* Column-major D (m x n) = alpha op(A) op(B) + beta C (C = D), batched with strides; A and B in
 * the engine's type, C/D in ctype; bias (length m) through the epilogue when not NULL. */
static int mm_make(cu_engine *o, cu_mm **out, int ta, int tb, int64_t m, int64_t n, int64_t k,
                   int64_t lda, int64_t ldb, int64_t ldc, cudaDataType_t ctype, int batch,
                   int64_t sa, int64_t sb, int64_t sc, const void *bias, uint32_t align,
                   struct pb_error *err) {
  cu_mm *mm = new cu_mm();
  o->mms.push_back(mm);
  *out = mm;
  cublasComputeType_t ct = o->dt == DT_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  LT(cublasLtMatmulDescCreate(&mm->d, ct, CUDA_R_32F), "matmul descriptor");
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(mm->d, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), "transa");
  LT(cublasLtMatmulDescSetAttribute(mm->d, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), "transb");
  if (bias != NULL) {
    cublasLtEpilogue_t ep = o->next_gelu   ? CUBLASLT_EPILOGUE_GELU_BIAS
                            : o->next_relu ? CUBLASLT_EPILOGUE_RELU_BIAS
                                           : CUBLASLT_EPILOGUE_BIAS;
    o->next_gelu = o->next_relu = 0;
    LT(cublasLtMatmulDescSetAttribute(mm->d, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep),
       "epilogue");
    LT(cublasLtMatmulDescSetAttribute(mm->d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
       "bias");
  }
  LT(cublasLtMatrixLayoutCreate(&mm->a, o->bdt, ta ? k : m, ta ? m : k, lda), "layout A");
  LT(cublasLtMatrixLayoutCreate(&mm->b, o->bdt, tb ? n : k, tb ? k : n, ldb), "layout B");
  LT(cublasLtMatrixLayoutCreate(&mm->c, ctype, m, n, ldc), "layout C");
  if (batch > 1) {
    cublasLtMatrixLayout_t ls[3] = {mm->a, mm->b, mm->c};
    int64_t ss[3] = {sa, sb, sc};
    for (int i = 0; i < 3; i++) {
      LT(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                          sizeof batch),
         "batch count");
      LT(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                          &ss[i], sizeof ss[i]),
         "batch stride");
    }
  }
  cublasLtMatmulPreference_t pref;
  LT(cublasLtMatmulPreferenceCreate(&pref), "preference");
  uint64_t wsz = o->ltws_size;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz,
                                       sizeof wsz);
  const cublasLtMatmulPreferenceAttributes_t al[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; i++) cublasLtMatmulPreferenceSetAttribute(pref, al[i], &align, sizeof align);
  cublasLtMatmulHeuristicResult_t r[PBC_LT_CANDIDATES];
  int nr = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(o->lt, mm->d, mm->a, mm->b, mm->c, mm->c, pref,
                                                    o->lt_tune ? PBC_LT_CANDIDATES : 1, r, &nr);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || nr == 0)
    return pbc_err(err, PB_EUNSUPPORTED,
                   "cuBLASLt has no algorithm for a %lldx%lldx%lld product (batch %d, status %d)",
                   (long long)m, (long long)n, (long long)k, batch, (int)s);
  mm->algo = r[0].algo;
  for (int i = 0; i < nr; i++)
    if (r[i].state == CUBLAS_STATUS_SUCCESS) mm->cand[mm->n_cand++] = r[i].algo;
  return 0;
}

/* Times the heuristic's candidates on the real buffers (at creation they hold nothing, so running
 * in place is harmless) and keeps the fastest; the first candidate when timing fails. */
static void mm_tune(cu_engine *o, cu_mm *mm, float alpha, float beta, const void *A, const void *B,
                    void *C) {
  if (mm->tuned || mm->n_cand < 2) return;
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
      ok = cublasLtMatmul(o->lt, mm->d, &alpha, A, mm->a, B, mm->b, &beta, C, mm->c, C, mm->c,
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

static cu_step mm_step(cu_engine *o, cu_mm *mm, float alpha, float beta, const void *A,
                       const void *B, void *C) {
  if (o->lt_tune) mm_tune(o, mm, alpha, beta, A, B, C);
  cublasLtHandle_t lt = o->lt;
  void *ws = o->ltws;
  size_t wss = o->ltws_size;
  cudaStream_t st = o->st;
  return [=](struct pb_error *e2) -> int {
    float a = alpha, b = beta;
    cublasStatus_t s = cublasLtMatmul(lt, mm->d, &a, A, mm->a, B, mm->b, &b, C, mm->c, C, mm->c,
                                      &mm->algo, ws, wss, st);
    return s == CUBLAS_STATUS_SUCCESS ? 0 : lt_err(e2, s, "matmul");
  };
}

static int launch_check(struct pb_error *err, const char *what) {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : pbc_cuda_err(err, e, what);
}

/* Dispatch a kernel on T by the engine's dtype. */
#define BY_DTYPE(dt, T, body)                                                                  \
  do {                                                                                         \
    if ((dt) == DT_BF16) {                                                                     \
      typedef __nv_bfloat16 T;                                                                 \
      body;                                                                                    \
    } else if ((dt) == DT_F16) {                                                               \
      typedef __half T;                                                                        \
      body;                                                                                    \
    } else {                                                                                   \
      typedef float T;                                                                         \
      body;                                                                                    \
    }                                                                                          \
  } while (0)

/* rows x cin times W^T (+ bias, + residual in place). */
static int op_linear(cu_engine *o, const pb__graph *g, const pb__op *op, struct pb_error *err) {
  const pb__tshape &si = g->tensors[op->in];
  int64_t M = o->N * (si.tokens ? si.c : 1), K = op->cin, Nn = op->cout;
  int rc = 0;
  void *w = upload(o, g->params[op->w].data, Nn * K, 0, err, &rc);
  if (w == NULL) return rc;
  void *b = upload(o, g->params[op->b].data, Nn, o->es == 4, err, &rc);
  if (b == NULL) return rc;
  PB_RETURN_NOT_OK(place(o, g, op->out, err));
  cu_mm *mm;
  int epi_gelu = op->act == PB__ACT_GELU && o->gelu_epilogue;
  o->next_gelu = epi_gelu;
  PB_RETURN_NOT_OK(mm_make(o, &mm, 1, 0, Nn, M, K, K, K, Nn, o->bdt, 1, 0, 0, 0, b, 16, err));
  o->steps.push_back(mm_step(o, mm, 1.f, op->res >= 0 ? 1.f : 0.f, w, tptr(o, op->in),
                             tptr(o, op->out)));
  if (op->act != PB__ACT_NONE && !epi_gelu) {
    /* exact (erf) GELU, as torch's ViT and the oneDNN backend compute it; cuBLASLt's GELU
     * epilogue is the tanh approximation */
    void *y = tptr(o, op->out);
    int64_t total = M * Nn;
    int dt = o->dt, act = op->act;
    cudaStream_t st = o->st;
    int vec_ok = (total * (int64_t)o->es) % 16 == 0;
    o->steps.push_back([=](struct pb_error *e2) -> int {
      if (vec_ok)
        BY_DTYPE(dt, T, (k_act_vec<<<grid_for(total / (16 / (int64_t)sizeof(T))), 256, 0, st>>>((T *)y, total, act)));
      else
        BY_DTYPE(dt, T, (k_act<<<grid_for(total), 256, 0, st>>>((T *)y, total, act)));
      return launch_check(e2, "activation kernel");
    });
  }
  return 0;
}

static int op_attention(cu_engine *o, const pb__graph *g, const pb__op *op, struct pb_error *err) {
  const pb__tshape &si = g->tensors[op->in];
  int64_t T = si.c, D = op->cout, H = op->heads, dh = D / H, N = o->N;
  PB_RETURN_NOT_OK(place(o, g, op->out, err));
  int rc = 0;
  if (o->attn_fused && o->es == 2 && dh == ATT_DH && T <= 256) {
    /* one flash-style tensor-core kernel per (image, head); see k_attention */
    int Tp = (int)((T + 15) / 16 * 16), Ti = (int)T, Hi = (int)H, dt = o->dt;
    size_t smem = ATT_SMEM(Tp);
    cudaError_t ce = o->dt == DT_BF16
                         ? cudaFuncSetAttribute(k_attention<__nv_bfloat16>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)
                         : cudaFuncSetAttribute(k_attention<__half>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (ce == cudaSuccess) {
      const void *qkv = tptr(o, op->in);
      void *y = tptr(o, op->out);
      float scale = (float)(1.0 / sqrt((double)dh));
      cudaStream_t st = o->st;
      unsigned blocks = (unsigned)(N * H);
      o->steps.push_back([=](struct pb_error *e2) -> int {
        if (dt == DT_BF16)
          k_attention<<<blocks, ATT_WARPS * 32, smem, st>>>((const __nv_bfloat16 *)qkv,
                                                          (__nv_bfloat16 *)y, Ti, Tp, Hi, scale);
        else
          k_attention<<<blocks, ATT_WARPS * 32, smem, st>>>((const __half *)qkv, (__half *)y, Ti,
                                                          Tp, Hi, scale);
        return launch_check(e2, "attention kernel");
      });
      return 0;
    }
    cudaGetLastError(); /* no room for it: the cuBLASLt path below */
  }
  size_t sneed = (size_t)(N * H * T * T) * 4, pneed = (size_t)(N * H * T * T) * o->es;
  if (o->scores == NULL) {
    o->scores = dev_alloc(o, sneed, &o->bytes_act, err, &rc);
    if (o->scores == NULL) return rc;
    o->probs = dev_alloc(o, pneed, &o->bytes_act, err, &rc);
    if (o->probs == NULL) return rc;
    o->scores_size = sneed, o->probs_size = pneed;
  }
  char *qkv = (char *)tptr(o, op->in), *out = (char *)tptr(o, op->out);
  char *S = (char *)o->scores, *P = (char *)o->probs;
  size_t es = o->es;
  cudaDataType_t sdt = CUDA_R_32F;
  float scale = (float)(1.0 / sqrt((double)dh));
  int64_t rows = N * H * T;
  int L = (int)T, dt = o->dt;
  cudaStream_t st = o->st;
  if (L > 32 * 8) return pbc_err(err, PB_EUNSUPPORTED, "attention over %d tokens (at most 256)", L);
  cu_step softmax = [=](struct pb_error *e2) -> int {
    int blocks = (int)((rows + 7) / 8);
    BY_DTYPE(dt, Tt, (k_softmax<Tt, 8><<<blocks, 256, 0, st>>>((const float *)S, (Tt *)P, rows, L)));
    return launch_check(e2, "softmax kernel");
  };
  cu_mm *m1, *m2;
  if (o->attn_batched && (dh * (int64_t)es) % 16 == 0) {
    /* q, k, v copied out into (N, H, T, dh) blocks; each product is then one batch of N*H */
    if (o->heads == NULL) {
      o->heads_size = 4 * (size_t)(N * H * T * dh) * es; /* q, k, v and the heads' outputs */
      o->heads = dev_alloc(o, o->heads_size, &o->bytes_act, err, &rc);
      if (o->heads == NULL) return rc;
    }
    char *hq = (char *)o->heads, *hk = hq + (size_t)(N * H * T * dh) * es;
    char *hv = hk + (size_t)(N * H * T * dh) * es, *ho = hv + (size_t)(N * H * T * dh) * es;
    int B = (int)(N * H);
    PB_RETURN_NOT_OK(mm_make(o, &m1, 1, 0, T, T, dh, dh, dh, T, sdt, B, T * dh, T * dh, T * T,
                             NULL, 16, err));
    PB_RETURN_NOT_OK(mm_make(o, &m2, 0, 0, dh, T, T, dh, T, dh, o->bdt, B, T * dh, T * T, T * dh,
                             NULL, 16, err));
    int Ti = (int)T, Hi = (int)H, dhi = (int)dh;
    int64_t nv = N * T * 3 * H * dh / (int64_t)(16 / es), nm = N * T * H * dh / (int64_t)(16 / es);
    o->steps.push_back([=](struct pb_error *e2) -> int {
      BY_DTYPE(dt, Tt, (k_split_qkv<<<grid_for(nv), 256, 0, st>>>((const Tt *)qkv, (Tt *)hq, N, Ti, Hi, dhi)));
      return launch_check(e2, "qkv split kernel");
    });
    o->steps.push_back(mm_step(o, m1, scale, 0.f, hk, hq, S));
    o->steps.push_back(softmax);
    o->steps.push_back(mm_step(o, m2, 1.f, 0.f, hv, P, ho));
    o->steps.push_back([=](struct pb_error *e2) -> int {
      BY_DTYPE(dt, Tt, (k_merge_heads<<<grid_for(nm), 256, 0, st>>>((const Tt *)ho, (Tt *)out, N, Ti, Hi, dhi)));
      return launch_check(e2, "head merge kernel");
    });
    return 0;
  }
  /* per head, batched over images: S^T(keys x queries) = K Q^T read in place from qkv */
  PB_RETURN_NOT_OK(mm_make(o, &m1, 1, 0, T, T, dh, 3 * D, 3 * D, T, sdt, (int)N, T * 3 * D,
                           T * 3 * D, H * T * T, NULL, 16, err));
  /* O^T (dh x queries) = V^T P^T, written with heads side by side in (T, D) */
  PB_RETURN_NOT_OK(mm_make(o, &m2, 0, 0, dh, T, T, 3 * D, T, D, o->bdt, (int)N, T * 3 * D,
                           H * T * T, T * D, NULL, 16, err));
  for (int64_t h = 0; h < H; h++)
    o->steps.push_back(mm_step(o, m1, scale, 0.f, qkv + (size_t)(D + h * dh) * es,
                               qkv + (size_t)(h * dh) * es, S + (size_t)(h * T * T) * 4));
  o->steps.push_back(softmax);
  for (int64_t h = 0; h < H; h++)
    o->steps.push_back(mm_step(o, m2, 1.f, 0.f, qkv + (size_t)(2 * D + h * dh) * es,
                               P + (size_t)(h * T * T) * es, out + (size_t)(h * dh) * es));
  return 0;
}

static int op_layernorm(cu_engine *o, const pb__graph *g, const pb__op *op, struct pb_error *err) {
  const pb__tshape &si = g->tensors[op->in];
  int64_t rows = o->N * si.c;
  int D = (int)si.h;
  if (D > 32 * 32) return pbc_err(err, PB_EUNSUPPORTED, "layer norm over %d values (at most 1024)", D);
  int rc = 0;
  float *gm = (float *)upload(o, g->params[op->w].data, D, 1, err, &rc);
  if (gm == NULL) return rc;
  float *bt = (float *)upload(o, g->params[op->b].data, D, 1, err, &rc);
  if (bt == NULL) return rc;
  PB_RETURN_NOT_OK(place(o, g, op->out, err));
  void *x = tptr(o, op->in), *y = tptr(o, op->out);
  float eps = op->eps;
  int dt = o->dt;
  cudaStream_t st = o->st;
  /* 16-byte vectors when a row is whole vectors and D fits 32 lanes x 3 or 6 vectors (ViT's 768) */
  int vec = (D * o->es) % 16 == 0 && (int64_t)D * o->es <= 32 * 16 * (o->es == 2 ? 3 : 6);
  o->steps.push_back([=](struct pb_error *e2) -> int {
    int blocks = (int)((rows + 7) / 8);
    if (vec && (dt == DT_F32 || dt == DT_TF32))
      k_layernorm_vec<float, 6><<<blocks, 256, 0, st>>>((const float *)x, (float *)y, gm, bt, rows, D, eps);
    else if (vec && dt == DT_BF16)
      k_layernorm_vec<__nv_bfloat16, 3><<<blocks, 256, 0, st>>>((const __nv_bfloat16 *)x, (__nv_bfloat16 *)y, gm, bt, rows, D, eps);
    else if (vec && dt == DT_F16)
      k_layernorm_vec<__half, 3><<<blocks, 256, 0, st>>>((const __half *)x, (__half *)y, gm, bt, rows, D, eps);
    else if (D <= 32 * 24)
      BY_DTYPE(dt, T, (k_layernorm<T, 24><<<blocks, 256, 0, st>>>((const T *)x, (T *)y, gm, bt, rows, D, eps)));
    else
      BY_DTYPE(dt, T, (k_layernorm<T, 32><<<blocks, 256, 0, st>>>((const T *)x, (T *)y, gm, bt, rows, D, eps)));
    return launch_check(e2, "layer norm kernel");
  });
  return 0;
}

static int op_pool(cu_engine *o, const pb__graph *g, const pb__op *op, struct pb_error *err) {
  const pb__tshape &si = g->tensors[op->in], &so = g->tensors[op->out];
  PB_RETURN_NOT_OK(place(o, g, op->out, err));
  void *x = tptr(o, op->in), *y = tptr(o, op->out);
  int64_t N = o->N;
  int C = (int)si.c, H = (int)si.h, W = (int)si.w, Ho = (int)so.h, Wo = (int)so.w;
  int k = op->k, s = op->stride, pad = op->pad, dt = o->dt, gap = op->kind == PB__OP_GAP;
  /* 16 bytes of channels a thread where they divide and 32-bit indices reach */
  int vec = (int64_t)C * o->es % 16 == 0 && N * H * W * (int64_t)C < ((int64_t)1 << 31) &&
            (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0;
  cudaStream_t st = o->st;
  o->steps.push_back([=](struct pb_error *e2) -> int {
    if (gap)
      BY_DTYPE(dt, T, (k_gap<<<grid_for(N * C), 256, 0, st>>>((const T *)x, (T *)y, N, C, H * W)));
    else if (vec)
      BY_DTYPE(dt, T, (k_maxpool_vec<<<grid_for(N * Ho * Wo * C * (int64_t)sizeof(T) / 16), 256, 0,
                                        st>>>((const T *)x, (T *)y, (int)N, C, H, W, Ho, Wo, k, s,
                                              pad)));
    else
      BY_DTYPE(dt, T, (k_maxpool<<<grid_for(N * Ho * Wo * C), 256, 0, st>>>(
                          (const T *)x, (T *)y, N, C, H, W, Ho, Wo, k, s, pad)));
    return launch_check(e2, "pooling kernel");
  });
  return 0;
}

static int op_patch_tokens(cu_engine *o, const pb__graph *g, const pb__op *op,
                           struct pb_error *err) {
  const pb__tshape &si = g->tensors[op->in];
  int gh = (int)(si.h / op->k), gw = (int)(si.w / op->k), D = (int)op->cout, P = gh * gw;
  int rc = 0;
  size_t need = (size_t)(o->N * P * D) * o->es;
  o->patches = dev_alloc(o, need, &o->bytes_act, err, &rc);
  if (o->patches == NULL) return rc;
  o->patches_size = need;
  pb__op conv = *op;
  conv.kind = PB__OP_CONV, conv.pad = 0, conv.res = -1, conv.act = PB__ACT_NONE;
  conv.b = -1; /* the bias is added with the position embedding */
  int cs = op->in == 0 ? o->cp0 : (int)si.c;
  if (o->patch_gemm) {
    /* patches as rows, then one product with the weights (cuDNN's stride-16 convolution ran
     * several times slower than the product it amounts to) */
    int C = (int)si.c, k = op->k, Hh = (int)si.h, Ww = (int)si.w, dt = o->dt;
    int64_t K = (int64_t)C * k * k, M = o->N * P, N = o->N;
    void *rows = dev_alloc(o, (size_t)(M * K) * o->es, &o->bytes_act, err, &rc);
    if (rows == NULL) return rc;
    void *w = upload(o, g->params[op->w].data, (int64_t)D * K, 0, err, &rc);
    if (w == NULL) return rc;
    const void *x = tptr(o, op->in);
    cudaStream_t st = o->st;
    o->steps.push_back([=](struct pb_error *e2) -> int {
      BY_DTYPE(dt, T, (k_patchify<<<grid_for(M * K), 256, 0, st>>>((const T *)x, (T *)rows, N, C, cs, Hh, Ww, k)));
      return launch_check(e2, "patch kernel");
    });
    cu_mm *mm;
    PB_RETURN_NOT_OK(mm_make(o, &mm, 1, 0, D, M, K, K, K, D, o->bdt, 1, 0, 0, 0, NULL, 16, err));
    o->steps.push_back(mm_step(o, mm, 1.f, 0.f, w, rows, o->patches));
  } else {
    PB_RETURN_NOT_OK(conv_step(o, g, &conv, tptr(o, op->in), cs, (int)si.h, (int)si.w, o->patches,
                               gh, gw, 0, 0, err));
  }
  float *bias = (float *)upload(o, g->params[op->b].data, D, 1, err, &rc);
  float *cls = bias ? (float *)upload(o, g->params[op->cls].data, D, 1, err, &rc) : NULL;
  float *pos = cls ? (float *)upload(o, g->params[op->pos].data, (int64_t)(P + 1) * D, 1, err, &rc)
                   : NULL;
  if (pos == NULL) return rc;
  PB_RETURN_NOT_OK(place(o, g, op->out, err));
  void *pt = o->patches, *y = tptr(o, op->out);
  int64_t N = o->N, total = N * (P + 1) * D;
  int dt = o->dt;
  cudaStream_t st = o->st;
  o->steps.push_back([=](struct pb_error *e2) -> int {
    BY_DTYPE(dt, T, (k_patch_tokens<<<grid_for(total), 256, 0, st>>>((const T *)pt, (T *)y, bias,
                                                                      cls, pos, N, P, D)));
    return launch_check(e2, "patch token kernel");
  });
  return 0;
}

static int op_take_cls(cu_engine *o, const pb__graph *g, const pb__op *op, struct pb_error *err) {
  const pb__tshape &si = g->tensors[op->in];
  PB_RETURN_NOT_OK(place(o, g, op->out, err));
  void *x = tptr(o, op->in), *y = tptr(o, op->out);
  int64_t N = o->N;
  int Tn = (int)si.c, D = (int)si.h, dt = o->dt;
  cudaStream_t st = o->st;
  o->steps.push_back([=](struct pb_error *e2) -> int {
    BY_DTYPE(dt, T, (k_take_cls<<<grid_for(N * D), 256, 0, st>>>((const T *)x, (T *)y, N, Tn, D)));
    return launch_check(e2, "class token kernel");
  });
  return 0;
}

/* A 1x1 stride-1 convolution over NHWC is a product: (N*H*W, Cs) times the (K, Cs) weights,
 * with the bias, the ReLU and the residual (beta 1 over y, which already holds it) in cuBLASLt's
 * epilogue, its candidates timed at creation. cuDNN's kernels for these shapes were slow at small
 * batches: 0.15 ms for a 1024->256 over 14x14 at batch 1 on an H200, and the product's forward
 * of ResNet-50 at batch 1 took 0.46 ms against 2.45 (docs/engines.md). 1 when taken, 0 to leave
 * the convolution to cuDNN, or an error. */
static int conv_1x1_gemm(cu_engine *o, const pb__graph *g, const pb__op *op, int Cs, int H, int W,
                         void *x, void *y, struct pb_error *err) {
  if (!o->gemm_1x1 || op->k != 1 || op->stride != 1 || op->pad != 0 ||
      (op->act != PB__ACT_RELU && op->act != PB__ACT_NONE) || Cs % 8 != 0 || op->cout % 8 != 0)
    return 0;
  int64_t K = op->cout, M = o->N * H * W;
  std::vector<float> wf, bf;
  fold_conv(g, op, Cs, wf, bf);
  int rc = 0;
  void *wd = upload(o, wf.data(), (int64_t)wf.size(), 0, err, &rc);
  void *bias = wd ? upload(o, bf.data(), K, o->es == 4, err, &rc) : NULL;
  if (bias == NULL) return rc < 0 ? rc : PB_ENOMEM;
  cu_mm *mm = NULL;
  o->next_relu = op->act == PB__ACT_RELU;
  struct pb_error quiet;
  if (mm_make(o, &mm, 1, 0, K, M, Cs, Cs, Cs, K, o->bdt, 1, 0, 0, 0, bias, 16, &quiet) != 0) {
    o->next_relu = 0;
    return 0; /* no product for this shape: cuDNN's convolution instead */
  }
  o->steps.push_back(mm_step(o, mm, 1.f, op->res >= 0 ? 1.f : 0.f, wd, x, y));
  o->n_convs++;
  o->n_gemm++;
  return 1;
}

static int op_conv(cu_engine *o, const pb__graph *g, const pb__op *op, struct pb_error *err) {
  const pb__tshape &si = g->tensors[op->in], &so = g->tensors[op->out];
  PB_RETURN_NOT_OK(place(o, g, op->out, err));
  int cs = op->in == 0 ? o->cp0 : (int)si.c;
  int taken = conv_1x1_gemm(o, g, op, cs, (int)si.h, (int)si.w, tptr(o, op->in), tptr(o, op->out),
                            err);
  if (taken != 0) return taken == 1 ? 0 : taken;
  return conv_step(o, g, op, tptr(o, op->in), cs, (int)si.h, (int)si.w, tptr(o, op->out),
                   (int)so.h, (int)so.w, op->res >= 0, 1, err);
}

/* ---- create, forward, destroy ------------------------------------------------------------- */

static int run_steps(cu_engine *o, struct pb_error *err) {
  for (size_t i = 0; i < o->steps.size(); i++) PB_RETURN_NOT_OK(o->steps[i](err));
  return 0;
}

/* Diagnostics (PIPEBENCH_CUDA_PROFILE=FILE): each step's time, summed by label, appended to FILE. */
static void profile(cu_engine *o, pb_engine *e, const char *path) {
  std::map<std::string, double> ms;
  std::vector<std::pair<double, std::string>> one; /* each step alone */
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  double total = 0;
  for (size_t i = 0; i < o->steps.size(); i++) {
    o->steps[i](NULL);
    cudaEventRecord(e0, o->st);
    for (int r = 0; r < 3; r++) o->steps[i](NULL);
    cudaEventRecord(e1, o->st);
    cudaEventSynchronize(e1);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    std::string l = i < o->labels.size() ? o->labels[i] : "?";
    ms[l] += t / 3.0;
    one.push_back({t / 3.0, l + (i < o->shapes.size() ? " " + o->shapes[i] : std::string())});
    total += t / 3.0;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  FILE *f = fopen(path, "a");
  if (f == NULL) return;
  for (auto &kv : ms)
    fprintf(f, "%s %s b%d %-28s %8.3f ms %5.1f%%\n", e->info.model, e->info.dtype,
            e->info.batch_size, kv.first.c_str(), kv.second, 100.0 * kv.second / total);
  fprintf(f, "%s %s b%d %-28s %8.3f ms\n", e->info.model, e->info.dtype, e->info.batch_size,
          "TOTAL (steps one by one)", total);
  std::sort(one.begin(), one.end(), [](const auto &a, const auto &b) { return a.first > b.first; });
  for (size_t i = 0; i < one.size() && i < 16; i++) /* the slowest steps, each alone */
    fprintf(f, "%s %s b%d   step %-44s %8.4f ms\n", e->info.model, e->info.dtype,
            e->info.batch_size, one[i].second.c_str(), one[i].first);
  fclose(f);
}

static void cu_destroy(pb_engine *e) {
  cu_engine *o = (cu_engine *)e->impl;
  if (o == NULL) return;
  cudaSetDevice(o->dev);
  if (o->st) cudaStreamSynchronize(o->st);
  if (o->gexec) cudaGraphExecDestroy(o->gexec);
  if (o->graph) cudaGraphDestroy(o->graph);
  pbc_train_free(o->train);
  for (cu_mm *m : o->mms) {
    if (m->a) cublasLtMatrixLayoutDestroy(m->a);
    if (m->b) cublasLtMatrixLayoutDestroy(m->b);
    if (m->c) cublasLtMatrixLayoutDestroy(m->c);
    if (m->d) cublasLtMatmulDescDestroy(m->d);
    delete m;
  }
  for (auto d : o->tds) cudnnDestroyTensorDescriptor(d);
  for (auto d : o->fds) cudnnDestroyFilterDescriptor(d);
  for (auto d : o->cds) cudnnDestroyConvolutionDescriptor(d);
  for (auto d : o->ads) cudnnDestroyActivationDescriptor(d);
  for (auto &a : o->allocs) cudaFree(a.first);
  if (o->dnn) cudnnDestroy(o->dnn);
  if (o->lt) cublasLtDestroy(o->lt);
  if (o->fwd0) cudaEventDestroy(o->fwd0);
  if (o->fwd1) cudaEventDestroy(o->fwd1);
  if (o->st) cudaStreamDestroy(o->st);
  delete o;
  e->impl = NULL;
}

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

static int compile(cu_engine *o, pb_engine *e, const pb__graph *g, struct pb_error *err) {
  int rc = 0;
  o->N = e->info.batch_size;
  const pb__tshape &s0 = g->tensors[0];
  o->c0 = (int)s0.c, o->h0 = (int)s0.h, o->w0 = (int)s0.w;
  /* 16-bit tensor-core convolutions want channel counts that are multiples of 8 */
  int cpad = env_int("PIPEBENCH_CUDA_CPAD", 8);
  if (cpad < 1) cpad = 1;
  o->cp0 = o->es == 2 ? (o->c0 + cpad - 1) / cpad * cpad : o->c0;
  o->x0 = dev_alloc(o, (size_t)(o->N * o->cp0 * o->h0 * o->w0) * o->es, &o->bytes_act, err, &rc);
  if (o->x0 == NULL) return rc;
  o->ws_size = (size_t)env_int("PIPEBENCH_CUDA_WORKSPACE_MB", 512) << 20;
  o->ws = dev_alloc(o, o->ws_size, &o->bytes_scratch, err, &rc);
  if (o->ws == NULL) return rc;
  o->ltws_size = (size_t)32 << 20;
  o->ltws = dev_alloc(o, o->ltws_size, &o->bytes_scratch, err, &rc);
  if (o->ltws == NULL) return rc;
  int nt = g->n_tensors;
  o->tbuf.assign((size_t)nt, -1);
  o->last_use.assign((size_t)nt, -1);
  for (int i = 0; i < g->n_ops; i++) {
    o->last_use[(size_t)g->ops[i].in] = i;
    if (g->ops[i].res >= 0) o->last_use[(size_t)g->ops[i].res] = i;
  }
  o->out_tensor = g->output;
  o->last_use[(size_t)g->output] = g->n_ops; /* read by the output conversion */
  o->outputs = g->outputs;
  static const char *const kind_names[] = {"conv", "maxpool", "gap", "linear", "layernorm",
                                           "patch_tokens", "attention", "take_cls"};
  for (int i = 0; i < g->n_ops; i++) {
    const pb__op *op = &g->ops[i];
    size_t first = o->steps.size();
    switch (op->kind) {
    case PB__OP_CONV: rc = op_conv(o, g, op, err); break;
    case PB__OP_MAXPOOL:
    case PB__OP_GAP: rc = op_pool(o, g, op, err); break;
    case PB__OP_LINEAR: rc = op_linear(o, g, op, err); break;
    case PB__OP_LAYERNORM: rc = op_layernorm(o, g, op, err); break;
    case PB__OP_ATTENTION: rc = op_attention(o, g, op, err); break;
    case PB__OP_PATCH_TOKENS: rc = op_patch_tokens(o, g, op, err); break;
    case PB__OP_TAKE_CLS: rc = op_take_cls(o, g, op, err); break;
    default: rc = pbc_err(err, PB_EUNSUPPORTED, "op kind %d", (int)op->kind);
    }
    if (rc != 0) {
      char m[1024];
      snprintf(m, sizeof m, "%s", err ? err->message : "");
      return pbc_err(err, rc, "%s op %d: %s", g->model, i, m);
    }
    for (size_t k = first; k < o->steps.size(); k++) {
      char l[64];
      snprintf(l, sizeof l, "%s%s%s.%d", kind_names[op->kind], op->act == PB__ACT_GELU ? "_gelu" : "",
               op->res >= 0 ? "_res" : "", (int)(k - first));
      o->labels.push_back(l);
      char sh[96];
      snprintf(sh, sizeof sh, "op%d %lldx%lld %lld->%lld k%d s%d", i,
               (long long)g->tensors[op->in].h, (long long)g->tensors[op->in].w,
               (long long)op->cin, (long long)op->cout, op->k, op->stride);
      o->shapes.push_back(sh);
    }
    release_dead(o, g, i);
  }
  /* one eager pass (loads kernels, checks every step), then the CUDA graph of the same steps */
  PB_RETURN_NOT_OK(run_steps(o, err));
  CU(cudaStreamSynchronize(o->st), "first forward");
  const char *prof = getenv("PIPEBENCH_CUDA_PROFILE");
  if (prof != NULL && *prof) profile(o, e, prof);
  if (o->use_graph) {
    if (!pbc_capture_graph(o->st, [o, err] { return run_steps(o, err); }, &o->graph, &o->gexec))
      o->use_graph = 0;
  }
  return 0;
}

static int cu_create(pb_engine *e, const pb__graph *g, struct pb_error *err) {
  const char *dt = e->info.dtype;
  cu_engine *o = new cu_engine();
  if (strcmp(dt, "float32") == 0) o->dt = DT_F32, o->es = 4;
  else if (strcmp(dt, "tf32") == 0) o->dt = DT_TF32, o->es = 4;
  else if (strcmp(dt, "bfloat16") == 0) o->dt = DT_BF16, o->es = 2;
  else if (strcmp(dt, "float16") == 0) o->dt = DT_F16, o->es = 2;
  else {
    delete o;
    return pbc_err(err, PB_EINVAL, "dtype %s: cuda takes float32, tf32, bfloat16, float16", dt);
  }
  o->cdt = o->dt == DT_BF16 ? CUDNN_DATA_BFLOAT16 : o->dt == DT_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
  o->bdt = o->dt == DT_BF16 ? CUDA_R_16BF : o->dt == DT_F16 ? CUDA_R_16F : CUDA_R_32F;
  o->fused = env_int("PIPEBENCH_CUDA_FUSED", 1);
  o->use_graph = env_int("PIPEBENCH_CUDA_GRAPH", 1);
  o->gemm_1x1 = env_int("PIPEBENCH_CUDA_GEMM_1X1", 1);
  o->attn_batched = env_int("PIPEBENCH_CUDA_ATTN_BATCHED", 1);
  o->attn_fused = env_int("PIPEBENCH_CUDA_ATTN_FUSED", 1);
  o->patch_gemm = env_int("PIPEBENCH_CUDA_PATCH_GEMM", 1);
  o->lt_tune = env_int("PIPEBENCH_CUDA_LT_TUNE", 1);
  o->gelu_epilogue = env_int("PIPEBENCH_CUDA_GELU_EPILOGUE", 0);
  e->impl = o;
  int64_t t0 = pbc_now_ns();
  int rc = 0;
  int ndev = 0;
  o->dev = e->device_index;
  cudaError_t ce = cudaGetDeviceCount(&ndev);
  if (ce == cudaSuccess && o->dev >= ndev)
    rc = pbc_err(err, PB_EINVAL, "device cuda:%d does not exist: this machine has %d GPU%s "
                 "(cuda:0 to cuda:%d)", o->dev, ndev, ndev == 1 ? "" : "s", ndev - 1);
  if (rc != 0) {
    cu_destroy(e);
    return rc;
  }
  if (ce == cudaSuccess) ce = cudaSetDevice(o->dev);
  if (ce == cudaSuccess) ce = cudaStreamCreateWithFlags(&o->st, cudaStreamNonBlocking);
  if (ce == cudaSuccess) ce = cudaEventCreate(&o->fwd0);
  if (ce == cudaSuccess) ce = cudaEventCreate(&o->fwd1);
  if (ce != cudaSuccess) rc = pbc_cuda_err(err, ce, "CUDA stream");
  if (rc == 0) {
    cudnnStatus_t s = cudnnCreate(&o->dnn);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetStream(o->dnn, o->st);
    if (s != CUDNN_STATUS_SUCCESS) rc = dnn_err(err, s, "handle");
  }
  if (rc == 0) {
    cublasStatus_t s = cublasLtCreate(&o->lt);
    if (s != CUBLAS_STATUS_SUCCESS) rc = lt_err(err, s, "handle");
  }
  if (rc == 0 && e->training) rc = pbc_train_new(e, g, o->st, o->dnn, o->lt, &o->train, err);
  else if (rc == 0) rc = compile(o, e, g, err);
  if (rc != 0) {
    cu_destroy(e);
    return rc;
  }
  e->info.compile_ms = (double)(pbc_now_ns() - t0) / 1e6;
  if (o->train == NULL) {
    e->info.bytes_weights = o->bytes_w;
    e->info.bytes_activations = o->bytes_act;
    e->info.bytes_scratch = o->bytes_scratch;
  }
  pb__cuda_device d;
  memset(&d, 0, sizeof d);
  if (pbc_device_probe(&d, NULL) == 0) {
    snprintf(e->info.device_name, sizeof e->info.device_name, "%s", d.name);
    pbc_engine_versions(e, &d);
  }
  if (o->train != NULL)
    snprintf(e->info.isa, sizeof e->info.isa, "sm_%d%d, training%s", d.cc_major, d.cc_minor,
             o->dt == DT_F32 ? ", no tf32" : ", bf16 autocast");
  else
    /* 47 characters at most: "sm_90, cuda graph, fused 50/53 (33 mm), no tf32"; mm: the
     * 1x1 convolutions run as cuBLASLt products */
    snprintf(e->info.isa, sizeof e->info.isa, "sm_%d%d%s, fused %d/%d (%d mm)%s", d.cc_major,
             d.cc_minor, o->use_graph ? ", cuda graph" : "", o->n_fused + o->n_gemm, o->n_convs,
             o->n_gemm,
             o->dt == DT_TF32 ? ", tf32" : o->dt == DT_F32 ? ", no tf32" : "");
  return 0;
}

static int cu_forward(pb_engine *e, const void *input, void *output, struct pb_error *err) {
  cu_engine *o = (cu_engine *)e->impl;
  CU(cudaSetDevice(o->dev), "select device"); /* kernels go to the stream's device */
  CU(cudaEventRecord(o->fwd0, o->st), "event");
  if (o->train != NULL) {
    PB_RETURN_NOT_OK(pbc_train_forward(o->train, input, output, err));
    CU(cudaEventRecord(o->fwd1, o->st), "event");
    o->fwd_recorded = 1;
    return 0;
  }
  int64_t nin = o->N * o->cp0 * o->h0 * o->w0;
  void *x0 = o->x0;
  if (o->es == 2 && o->cp0 == 8 && o->c0 <= 8 && nin < ((int64_t)1 << 31) &&
      (uintptr_t)x0 % 16 == 0) {
    int pixels = (int)(o->N * o->h0 * o->w0), hw = (int)(o->h0 * o->w0);
    BY_DTYPE(o->dt, T, (k_nchw_to_nhwc8<<<grid_for(pixels), 256, 0, o->st>>>(
                           (const float *)input, (T *)x0, (int)o->N, o->c0, hw)));
  } else {
    BY_DTYPE(o->dt, T, (k_nchw_to_nhwc<<<grid_for(nin), 256, 0, o->st>>>(
                           (const float *)input, (T *)x0, o->N, o->c0, o->h0, o->w0, o->cp0)));
  }
  PB_RETURN_NOT_OK(launch_check(err, "input conversion"));
  if (o->gexec) CU(cudaGraphLaunch(o->gexec, o->st), "graph launch");
  else PB_RETURN_NOT_OK(run_steps(o, err));
  int64_t nout = o->N * o->outputs;
  void *y = tptr(o, o->out_tensor);
  BY_DTYPE(o->dt, T, (k_to_f32<<<grid_for(nout), 256, 0, o->st>>>((const T *)y, (float *)output, nout)));
  PB_RETURN_NOT_OK(launch_check(err, "output conversion"));
  CU(cudaEventRecord(o->fwd1, o->st), "event");
  o->fwd_recorded = 1;
  return 0;
}

/* The device time of the most recent forward: input conversion, the model, output conversion. */
static int cu_forward_time(pb_engine *e, int64_t *ns, struct pb_error *err) {
  cu_engine *o = (cu_engine *)e->impl;
  *ns = 0;
  if (!o->fwd_recorded) return pbc_err(err, PB_ESTATE, "forward_time: no forward has run yet");
  float ms = 0;
  CU(cudaEventSynchronize(o->fwd1), "event");
  CU(cudaEventElapsedTime(&ms, o->fwd0, o->fwd1), "event time");
  *ns = (int64_t)((double)ms * 1e6);
  return 0;
}

static void *cu_tensor_alloc(pb_engine *e, size_t bytes) {
  if (e->impl != NULL) cudaSetDevice(((cu_engine *)e->impl)->dev);
  void *p = NULL;
  return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
}
static void cu_tensor_release(pb_engine *e, void *p, size_t bytes) {
  (void)bytes;
  cu_engine *o = (cu_engine *)e->impl;
  if (o && o->st) cudaStreamSynchronize(o->st);
  cudaFree(p);
}
static int cu_write(pb_engine *e, void *dst, const void *src, size_t bytes, struct pb_error *err) {
  cu_engine *o = (cu_engine *)e->impl;
  CU(cudaSetDevice(o->dev), "select device");
  CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, o->st), "copy to device");
  CU(cudaStreamSynchronize(o->st), "copy to device");
  return 0;
}
static int cu_read(pb_engine *e, void *dst, const void *src, size_t bytes, struct pb_error *err) {
  cu_engine *o = (cu_engine *)e->impl;
  CU(cudaSetDevice(o->dev), "select device");
  CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, o->st), "copy from device");
  CU(cudaStreamSynchronize(o->st), "copy from device");
  return 0;
}
static int cu_sync(pb_engine *e, struct pb_error *err) {
  cu_engine *o = (cu_engine *)e->impl;
  CU(cudaStreamSynchronize(o->st), "synchronize");
  if (o->train != NULL) return pbc_train_check(o->train, err); /* labels of the queued steps */
  return 0;
}
/* The step's device time (pb_engine_forward_time) lies between the forward events. */
static int cu_train_step(pb_engine *e, const void *input, const void *target, float lr,
                         float *loss, struct pb_error *err) {
  cu_engine *o = (cu_engine *)e->impl;
  if (o->train == NULL) return pbc_err(err, PB_ESTATE, "engine was built without training");
  CU(cudaSetDevice(o->dev), "select device");
  CU(cudaEventRecord(o->fwd0, o->st), "event");
  PB_RETURN_NOT_OK(pbc_train_step(o->train, input, target, lr, NULL, err));
  CU(cudaEventRecord(o->fwd1, o->st), "event");
  o->fwd_recorded = 1;
  if (loss != NULL) { /* read after the end event, so the step's time holds no copy back */
    PB_RETURN_NOT_OK(pbc_train_step_loss(o->train, loss, err));
  }
  return 0;
}
static int cu_train_param(pb_engine *e, int i, char *name, size_t name_len, int64_t *count,
                          float *value, float *grad, struct pb_error *err) {
  cu_engine *o = (cu_engine *)e->impl;
  if (o->train == NULL) return pbc_err(err, PB_ESTATE, "engine was built without training");
  return pbc_train_param(o->train, i, name, name_len, count, value, grad, err);
}

cudaStream_t pbc_engine_stream(pb_engine *e) { return e->impl ? ((cu_engine *)e->impl)->st : NULL; }

extern "C" const pb__engine_vtable pbc_backend = {
    "cudnn",            /* name */
    "cuda",             /* device */
    cu_create,          cu_destroy,  cu_tensor_alloc, cu_tensor_release, cu_write, cu_read,
    0,                  /* host_visible */
    cu_forward,         cu_train_step, cu_sync,
    /* the data path (cuda_input.cu) */
    &pbc_pinned_allocator, pbc_forward_native, pbc_copy_in, pbc_native_release, pbc_device_mark,
    pbc_device_spans, cu_forward_time,
    pbc_train_native, cu_train_param,
};
