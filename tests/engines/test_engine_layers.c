/* Every layer kind against a naive reference: small graphs built by hand run on oneDNN and
 * through a plain double-precision interpreter of the same graph (batch norm applied, not
 * folded; attention computed head by head). Also bfloat16 against float32 where supported. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engines/engine_internal.h"

/* ---- the reference interpreter ------------------------------------------------------------ */

static double gelu(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }

static double act(int a, double x) {
  if (a == PB__ACT_RELU) return x > 0 ? x : 0;
  if (a == PB__ACT_GELU) return gelu(x);
  return x;
}

static size_t tsize(const pb__graph *g, int t) {
  const pb__tshape *s = &g->tensors[t];
  return (size_t)(s->c * s->h * s->w);
}

/* Runs one image through g; returns the output (malloc'd). */
static double *reference(const pb__graph *g, const float *x) {
  double **v = calloc((size_t)g->n_tensors, sizeof *v);
  CHECK(v != NULL);
  for (int t = 0; t < g->n_tensors; t++) v[t] = calloc(tsize(g, t), sizeof(double));
  for (size_t i = 0; i < tsize(g, 0); i++) v[0][i] = x[i];
  for (int i = 0; i < g->n_ops; i++) {
    const pb__op *op = &g->ops[i];
    const pb__tshape *si = &g->tensors[op->in], *so = &g->tensors[op->out];
    const double *in = v[op->in];
    double *out = v[op->out];
    if (op->kind == PB__OP_CONV) {
      const float *w = g->params[op->w].data;
      double *tmp = calloc((size_t)(so->c * so->h * so->w), sizeof *tmp);
      for (int64_t oc = 0; oc < op->cout; oc++)
        for (int64_t oy = 0; oy < so->h; oy++)
          for (int64_t ox = 0; ox < so->w; ox++) {
            double s = op->b >= 0 ? g->params[op->b].data[oc] : 0.0;
            for (int64_t ic = 0; ic < op->cin; ic++)
              for (int ky = 0; ky < op->k; ky++)
                for (int kx = 0; kx < op->k; kx++) {
                  int64_t iy = oy * op->stride - op->pad + ky, ix = ox * op->stride - op->pad + kx;
                  if (iy < 0 || ix < 0 || iy >= si->h || ix >= si->w) continue;
                  s += w[((oc * op->cin + ic) * op->k + ky) * op->k + kx] *
                       in[(ic * si->h + iy) * si->w + ix];
                }
            if (op->bn_g >= 0)
              s = (s - g->params[op->bn_m].data[oc]) /
                      sqrt(g->params[op->bn_v].data[oc] + (double)op->eps) *
                      g->params[op->bn_g].data[oc] +
                  g->params[op->bn_b].data[oc];
            size_t at = (size_t)((oc * so->h + oy) * so->w + ox);
            if (op->res >= 0) s += out[at]; /* out aliases res */
            tmp[at] = act(op->act, s);
          }
      memcpy(out, tmp, tsize(g, op->out) * sizeof *tmp);
      free(tmp);
    } else if (op->kind == PB__OP_MAXPOOL) {
      for (int64_t c = 0; c < so->c; c++)
        for (int64_t oy = 0; oy < so->h; oy++)
          for (int64_t ox = 0; ox < so->w; ox++) {
            double m = -INFINITY;
            for (int ky = 0; ky < op->k; ky++)
              for (int kx = 0; kx < op->k; kx++) {
                int64_t iy = oy * op->stride - op->pad + ky, ix = ox * op->stride - op->pad + kx;
                if (iy < 0 || ix < 0 || iy >= si->h || ix >= si->w) continue;
                double u = in[(c * si->h + iy) * si->w + ix];
                m = u > m ? u : m;
              }
            out[(c * so->h + oy) * so->w + ox] = m;
          }
    } else if (op->kind == PB__OP_GAP) {
      for (int64_t c = 0; c < si->c; c++) {
        double s = 0;
        for (int64_t p = 0; p < si->h * si->w; p++) s += in[c * si->h * si->w + p];
        out[c] = s / (double)(si->h * si->w);
      }
    } else if (op->kind == PB__OP_LINEAR) {
      int64_t rows = si->tokens ? si->c : 1;
      double *tmp = calloc((size_t)(rows * op->cout), sizeof *tmp);
      for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < op->cout; o++) {
          double s = g->params[op->b].data[o];
          for (int64_t k = 0; k < op->cin; k++)
            s += g->params[op->w].data[o * op->cin + k] * in[r * op->cin + k];
          s = act(op->act, s);
          if (op->res >= 0) s += out[r * op->cout + o];
          tmp[r * op->cout + o] = s;
        }
      memcpy(out, tmp, (size_t)(rows * op->cout) * sizeof *tmp);
      free(tmp);
    } else if (op->kind == PB__OP_LAYERNORM) {
      for (int64_t r = 0; r < si->c; r++) {
        const double *a = in + r * si->h;
        double m = 0, var = 0;
        for (int64_t d = 0; d < si->h; d++) m += a[d];
        m /= (double)si->h;
        for (int64_t d = 0; d < si->h; d++) var += (a[d] - m) * (a[d] - m);
        var /= (double)si->h;
        for (int64_t d = 0; d < si->h; d++)
          out[r * si->h + d] = (a[d] - m) / sqrt(var + (double)op->eps) * g->params[op->w].data[d] +
                               g->params[op->b].data[d];
      }
    } else if (op->kind == PB__OP_ATTENTION) {
      int64_t T = si->c, D = op->cout, H = op->heads, dh = D / H;
      double *p = calloc((size_t)T, sizeof *p);
      for (int64_t h = 0; h < H; h++)
        for (int64_t i2 = 0; i2 < T; i2++) {
          double m = -INFINITY, s = 0;
          for (int64_t j = 0; j < T; j++) {
            double d = 0;
            for (int64_t e = 0; e < dh; e++)
              d += in[i2 * 3 * D + h * dh + e] * in[j * 3 * D + D + h * dh + e];
            p[j] = d / sqrt((double)dh);
            m = p[j] > m ? p[j] : m;
          }
          for (int64_t j = 0; j < T; j++) s += (p[j] = exp(p[j] - m));
          for (int64_t e = 0; e < dh; e++) {
            double o = 0;
            for (int64_t j = 0; j < T; j++) o += p[j] / s * in[j * 3 * D + 2 * D + h * dh + e];
            out[i2 * D + h * dh + e] = o;
          }
        }
      free(p);
    } else if (op->kind == PB__OP_PATCH_TOKENS) {
      int64_t D = op->cout, P = op->k, gw = si->w / P, np = (si->h / P) * gw;
      const float *w = g->params[op->w].data, *pos = g->params[op->pos].data;
      for (int64_t d = 0; d < D; d++) out[d] = g->params[op->cls].data[d] + pos[d];
      for (int64_t q = 0; q < np; q++)
        for (int64_t d = 0; d < D; d++) {
          double s = g->params[op->b].data[d];
          for (int64_t c = 0; c < si->c; c++)
            for (int64_t ky = 0; ky < P; ky++)
              for (int64_t kx = 0; kx < P; kx++)
                s += w[((d * si->c + c) * P + ky) * P + kx] *
                     in[(c * si->h + (q / gw) * P + ky) * si->w + (q % gw) * P + kx];
          out[(q + 1) * D + d] = s + pos[(q + 1) * D + d];
        }
    } else if (op->kind == PB__OP_TAKE_CLS) {
      memcpy(out, in, (size_t)si->h * sizeof *out);
    }
  }
  double *res = malloc(tsize(g, g->output) * sizeof *res);
  memcpy(res, v[g->output], tsize(g, g->output) * sizeof *res);
  for (int t = 0; t < g->n_tensors; t++) free(v[t]);
  free(v);
  return res;
}

/* ---- the graphs ----------------------------------------------------------------------------- */

static pb__graph *cnn_graph(void) {
  pb__graph *g = calloc(1, sizeof *g);
  pb__builder bd;
  pb__builder_init(&bd, g, 5);
  snprintf(g->model, sizeof g->model, "test_cnn");
  pb__b_tensor(&bd, 0, 3, 11, 9);
  int t = pb__b_conv(&bd, 0, "a", 16, 3, 2, 1, 1, "abn", PB__ACT_RELU, -1);
  int r = pb__b_conv(&bd, t, "b", 32, 1, 1, 0, 0, "bbn", PB__ACT_NONE, -1);
  t = pb__b_conv(&bd, t, "c", 32, 3, 1, 1, 0, "cbn", PB__ACT_RELU, r);
  t = pb__b_pool(&bd, t, PB__OP_MAXPOOL, 3, 2, 1);
  t = pb__b_pool(&bd, t, PB__OP_GAP, 0, 1, 0);
  g->output = pb__b_linear(&bd, t, "fc", 10, PB__ACT_GELU, -1);
  CHECK(!bd.failed);
  pb__graph_finish(g);
  return g;
}

static pb__graph *vit_graph(void) {
  pb__graph *g = calloc(1, sizeof *g);
  pb__builder bd;
  pb__builder_init(&bd, g, 6);
  snprintf(g->model, sizeof g->model, "test_vit");
  pb__b_tensor(&bd, 0, 3, 8, 12);
  const int64_t D = 32;
  int x = pb__b_patch_tokens(&bd, 0, 4, D); /* 6 patches + class token */
  for (int i = 0; i < 2; i++) {
    int h = pb__b_layernorm(&bd, x, "ln1", 1e-6f);
    int q = pb__b_linear(&bd, h, "qkv", 3 * D, PB__ACT_NONE, -1);
    int a = pb__b_attention(&bd, q, 4);
    x = pb__b_linear(&bd, a, "proj", D, PB__ACT_NONE, x);
    h = pb__b_layernorm(&bd, x, "ln2", 1e-6f);
    int m = pb__b_linear(&bd, h, "fc1", 64, PB__ACT_GELU, -1);
    x = pb__b_linear(&bd, m, "fc2", D, PB__ACT_NONE, x);
  }
  int c = pb__b_take_cls(&bd, x);
  c = pb__b_layernorm(&bd, c, "ln", 1e-6f);
  g->output = pb__b_linear(&bd, c, "head", 7, PB__ACT_NONE, -1);
  CHECK(!bd.failed);
  pb__graph_finish(g);
  return g;
}

/* Runs graph (built twice: the engine takes one) on oneDNN and the reference; returns the max
 * error relative to the reference's largest magnitude. */
static double compare(pb__graph *(*make)(void), const char *dtype, int batch) {
  struct pb_error err = {{0}};
  pb__graph *g = make(), *ref = make();
  pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
  p.batch_size = batch;
  p.dtype = dtype;
  pb_engine *e = NULL;
  CHECK_OK(pb__engine_new_graph(&p, NULL, g, &e, &err), &err);
  size_t ni = tsize(ref, 0), no = (size_t)ref->outputs;
  float *x = malloc((size_t)batch * ni * sizeof *x), *y = malloc((size_t)batch * no * sizeof *y);
  pb_rng rng;
  pb_rng_init(&rng, 3);
  for (size_t i = 0; i < (size_t)batch * ni; i++) x[i] = (float)pb_rng_normal(&rng);
  CHECK_OK(pb_engine_forward_host(e, x, (size_t)batch * ni, y, (size_t)batch * no, &err), &err);
  double maxdiff = 0, maxref = 0;
  for (int n = 0; n < batch; n++) {
    double *r = reference(ref, x + (size_t)n * ni);
    for (size_t i = 0; i < no; i++) {
      double d = fabs(r[i] - y[(size_t)n * no + i]);
      maxdiff = d > maxdiff ? d : maxdiff;
      maxref = fabs(r[i]) > maxref ? fabs(r[i]) : maxref;
    }
    free(r);
  }
  printf("%s %s batch %d: max|diff|/max|ref| = %.3g\n", ref->model, dtype, batch, maxdiff / maxref);
  pb__graph_free(ref);
  pb_engine_free(e);
  free(x);
  free(y);
  return maxdiff / maxref;
}

int main(void) {
  CHECK(compare(cnn_graph, "float32", 1) < 1e-5);
  CHECK(compare(cnn_graph, "float32", 3) < 1e-5);
  CHECK(compare(vit_graph, "float32", 1) < 1e-5);
  CHECK(compare(vit_graph, "float32", 3) < 1e-5);
  pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
  p.dtype = "bfloat16";
  pb_engine *e = NULL;
  struct pb_error err = {{0}};
  int rc = pb_engine_new(&p, &e, &err);
  pb_engine_free(e);
  if (rc == 0) {
    /* bfloat16 keeps 8 bits of mantissa: a few percent after several layers */
    CHECK(compare(cnn_graph, "bfloat16", 2) < 5e-2);
    CHECK(compare(vit_graph, "bfloat16", 2) < 5e-2);
  } else {
    CHECK_EQ(rc, PB_EUNSUPPORTED);
    printf("bfloat16 not supported here: %s\n", err.message);
  }
  printf("layers match the reference\n");
  return 0;
}
