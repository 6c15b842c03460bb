/* pb_engine_forward_native: a batch of raw pixels through the engine equals the float32 input
 * built here from the documented rule (time point 0, middle z plane, channels repeated, centre
 * crop / zero pad, then ((x / max) - mean) / std inside the image) run through pb_engine_forward
 * on the same engine. Argument: the device, "cpu" (default) or "cuda" (label gpu). On cuda the
 * pixels come from the engine's pinned allocator, two batches are queued back to back (the
 * double-buffered copy) and the host buffers are overwritten as soon as each call returns: the
 * results must not change, since the call returns only once its copy is done. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pipebench/engine.h"

enum { N = 3, IC = 2, IZ = 3, IH = 50, IW = 70, MC = 3, MH = 64, MW = 48 };

static double max_of(pb_dtype d) {
  return d == PB_UINT8 ? 255.0 : d == PB_UINT16 ? 65535.0 : 1.0;
}

static void fill(void *px, pb_dtype d, size_t n, uint64_t seed) {
  pb_rng rng;
  pb_rng_init(&rng, seed);
  for (size_t i = 0; i < n; i++) {
    uint64_t v = pb_rng_below(&rng, 65536);
    if (d == PB_UINT8) ((uint8_t *)px)[i] = (uint8_t)(v & 0xff);
    else if (d == PB_UINT16) ((uint16_t *)px)[i] = (uint16_t)v;
    else ((float *)px)[i] = (float)pb_rng_uniform(&rng) * 4.0f - 2.0f;
  }
}

static double at(const void *px, pb_dtype d, size_t i) {
  return d == PB_UINT8 ? ((const uint8_t *)px)[i] : d == PB_UINT16 ? ((const uint16_t *)px)[i]
                                                                    : ((const float *)px)[i];
}

/* The model input by the documented rule, written out independently of the library. */
static void reference(const void *px, pb_dtype d, const float *mean, const float *std, float *x) {
  int oy = (IH - MH) / 2, ox = (IW - MW) / 2;
  for (int b = 0; b < N; b++)
    for (int c = 0; c < MC; c++)
      for (int y = 0; y < MH; y++)
        for (int xx = 0; xx < MW; xx++) {
          int sy = y + oy, sx = xx + ox;
          float v = 0.0f;
          if (sy >= 0 && sy < IH && sx >= 0 && sx < IW) {
            size_t i = ((((size_t)b * IC + (size_t)(c % IC)) * IZ + IZ / 2) * IH + (size_t)sy) * IW +
                       (size_t)sx;
            v = (float)(((float)(at(px, d, i) / max_of(d)) - mean[c % IC]) / std[c % IC]);
          }
          x[(((size_t)b * MC + (size_t)c) * MH + (size_t)y) * MW + (size_t)xx] = v;
        }
}

static double relerr(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(a[i])) return INFINITY;
    num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    den += (double)b[i] * b[i];
  }
  return sqrt(num / (den > 0 ? den : 1));
}

static void check_dtype(const char *device, const char *dtype, pb_dtype pd, double tol) {
  struct pb_error err = {{0}};
  pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
  p.model = "embed", p.device = device, p.dtype = dtype, p.batch_size = N;
  p.channels = MC, p.height = MH, p.width = MW, p.threads = 2;
  pb_engine *e = NULL;
  CHECK_OK(pb_engine_new(&p, &e, &err), &err);
  pb_engine_info info;
  pb_engine_get_info(e, &info);
  size_t per = (size_t)IC * IZ * IH * IW, npx = (size_t)N * per, es = pb_dtype_size(pd);
  size_t nin = (size_t)N * MC * MH * MW, nout = (size_t)N * (size_t)info.outputs;
  const pb_allocator *pin = pb_engine_host_allocator(e);
  if (strcmp(device, "cpu") == 0) CHECK(pin == NULL);
  else CHECK(pin != NULL);
  void *px[2];
  for (int k = 0; k < 2; k++) {
    px[k] = pin ? pin->alloc(pin->ctx, npx * es, 64) : malloc(npx * es);
    CHECK(px[k] != NULL);
    fill(px[k], pd, npx, 7u + (uint64_t)k);
  }
  const float mean = 0.25f, std = 0.5f;
  float *x = malloc(nin * sizeof *x), *want[2], *got = malloc(nout * sizeof *got);
  for (int k = 0; k < 2; k++) {
    want[k] = malloc(nout * sizeof *want[k]);
    const float ms[IC] = {mean, mean}, ss[IC] = {std, std};
    reference(px[k], pd, ms, ss, x);
    CHECK_OK(pb_engine_forward_host(e, x, nin, want[k], nout, &err), &err);
  }
  pb_tensor *out[2];
  for (int k = 0; k < 2; k++) CHECK_OK(pb_engine_tensor_new(e, PB_TENSOR_OUTPUT, &out[k], &err), &err);
  size_t nspan = 99;
  CHECK_EQ(pb_engine_device_spans(e, NULL, 0, &nspan, &err),
           strcmp(device, "cpu") == 0 ? PB_EUNSUPPORTED : PB_ESTATE); /* no mark yet */
  for (int round = 0; round < 3; round++) {
    for (int k = 0; k < 2; k++) {
      pb_native_batch nb = {px[k], pd, N, IC, IZ, IH, IW, mean, std, NULL, NULL};
      int64_t h2d = -1;
      CHECK_OK(pb_engine_forward_native(e, &nb, out[k], &h2d, &err), &err);
      if (strcmp(device, "cpu") == 0) CHECK_EQ(h2d, 0);
      else CHECK(h2d > 0);
    }
    /* the copies are done once the calls return: scribbling on the pixels changes nothing */
    if (pin != NULL) {
      memset(px[0], 0xff, npx * es);
      memset(px[1], 0x00, npx * es);
    }
    CHECK_OK(pb_engine_synchronize(e, &err), &err);
    for (int k = 0; k < 2; k++) {
      for (size_t i = 0; i < nout; i++) got[i] = NAN;
      CHECK_OK(pb_tensor_read(out[k], got, nout * sizeof *got, &err), &err);
      double r = relerr(got, want[k], nout);
      printf("%s %s %s batch %d round %d: relative error %.2e (bound %.0e)\n", device, dtype,
             pb_dtype_name(pd), k, round, r, tol);
      CHECK(r <= tol);
    }
    for (int k = 0; k < 2 && pin != NULL; k++) fill(px[k], pd, npx, 7u + (uint64_t)k);
  }

  /* per-channel normalisation (ImageNet-style): each input channel takes its pixels' channel's
   * mean and std, repeated with the channel */
  {
    const float cm[IC] = {0.485f, 0.406f}, cs[IC] = {0.229f, 0.225f};
    float *pw = malloc(nout * sizeof *pw);
    CHECK(pw != NULL);
    reference(px[0], pd, cm, cs, x);
    CHECK_OK(pb_engine_forward_host(e, x, nin, pw, nout, &err), &err);
    pb_native_batch nb = {px[0], pd, N, IC, IZ, IH, IW, mean, std, cm, cs};
    CHECK_OK(pb_engine_forward_native(e, &nb, out[0], NULL, &err), &err);
    CHECK_OK(pb_engine_synchronize(e, &err), &err);
    CHECK_OK(pb_tensor_read(out[0], got, nout * sizeof *got, &err), &err);
    double r = relerr(got, pw, nout);
    printf("%s %s %s per-channel: relative error %.2e (bound %.0e)\n", device, dtype,
           pb_dtype_name(pd), r, tol);
    CHECK(r <= tol);
    const float zero[IC] = {0.5f, 0.0f};
    pb_native_batch half = {px[0], pd, N, IC, IZ, IH, IW, mean, std, cm, NULL};
    CHECK_EQ(pb_engine_forward_native(e, &half, out[0], NULL, &err), PB_EINVAL);
    CHECK_CONTAINS(err.message, "go together");
    pb_native_batch zstd = {px[0], pd, N, IC, IZ, IH, IW, mean, std, cm, zero};
    CHECK_EQ(pb_engine_forward_native(e, &zstd, out[0], NULL, &err), PB_EINVAL);
    CHECK_CONTAINS(err.message, "channel 1");
    free(pw);
  }

  /* the device window: more forwards than the engine's ring of events, each a span after the
   * mark, in order, none overlapping, all inside the host's window around them */
  if (strcmp(device, "cpu") == 0) {
    CHECK_EQ(pb_engine_device_mark(e, NULL, &err), PB_EUNSUPPORTED);
  } else {
    enum { NF = 13 };
    int64_t h0 = 0;
    CHECK_OK(pb_engine_device_mark(e, &h0, &err), &err);
    for (int i = 0; i < NF; i++) {
      pb_native_batch nb = {px[i % 2], pd, N, IC, IZ, IH, IW, mean, std, NULL, NULL};
      CHECK_OK(pb_engine_forward_native(e, &nb, out[i % 2], NULL, &err), &err);
    }
    pb_device_span sp[NF + 1];
    CHECK_OK(pb_engine_device_spans(e, sp, NF + 1, &nspan, &err), &err);
    int64_t h1 = pb_now_ns();
    CHECK_EQ(nspan, NF);
    int64_t prev = 0;
    for (int i = 0; i < NF; i++) {
      CHECK(sp[i].start_ns >= prev && sp[i].end_ns > sp[i].start_ns);
      prev = sp[i].end_ns;
    }
    printf("%s %s %s: %d forwards in %.3f ms on the device, %.3f ms on the host\n", device,
           dtype, pb_dtype_name(pd), NF, (double)prev / 1e6, (double)(h1 - h0) / 1e6);
    CHECK(prev <= h1 - h0 + 1000); /* the clocks may drift by parts per million */
    CHECK_OK(pb_engine_device_spans(e, sp, 2, &nspan, &err), &err); /* count beyond cap */
    CHECK_EQ(nspan, NF);
    CHECK_OK(pb_engine_device_mark(e, NULL, &err), &err); /* a new mark starts over */
    CHECK_OK(pb_engine_device_spans(e, sp, NF, &nspan, &err), &err);
    CHECK_EQ(nspan, 0);
  }

  /* refusals: a batch of another size, a bad std, no pixels */
  pb_native_batch bad = {px[0], pd, N - 1, IC, IZ, IH, IW, mean, std, NULL, NULL};
  CHECK_EQ(pb_engine_forward_native(e, &bad, out[0], NULL, &err), PB_EINVAL);
  CHECK_CONTAINS(err.message, "batch");
  bad.n = N, bad.std = 0.0f;
  CHECK_EQ(pb_engine_forward_native(e, &bad, out[0], NULL, &err), PB_EINVAL);
  bad.std = std, bad.pixels = NULL;
  CHECK_EQ(pb_engine_forward_native(e, &bad, out[0], NULL, &err), PB_EINVAL);
  int64_t ns = -1;
  if (strcmp(device, "cpu") == 0) {
    CHECK_EQ(pb_engine_copy_to_device(e, px[0], 64, &ns, &err), PB_EUNSUPPORTED);
  } else {
    CHECK_OK(pb_engine_copy_to_device(e, px[0], npx * es, &ns, &err), &err);
    CHECK(ns > 0);
  }
  /* the output as DLPack: no copy, on the engine's device */
  DLManagedTensor *mt = NULL;
  CHECK_OK(pb_tensor_to_dlpack(out[1], &mt, &err), &err);
  CHECK_EQ(mt->dl_tensor.device.device_type, strcmp(device, "cpu") == 0 ? kDLCPU : kDLCUDA);
  CHECK_EQ(mt->dl_tensor.ndim, 2);
  CHECK_EQ(mt->dl_tensor.shape[0], N);
  CHECK_EQ(mt->dl_tensor.shape[1], info.outputs);
  CHECK_EQ(mt->dl_tensor.dtype.code, kDLFloat);
  CHECK_EQ(mt->dl_tensor.dtype.bits, 32);
  if (strcmp(device, "cpu") == 0) CHECK(mt->dl_tensor.data == pb_tensor_host_data(out[1]));
  mt->deleter(mt);
  for (int k = 0; k < 2; k++) {
    pb_tensor_free(out[k]);
    free(want[k]);
    if (pin) pin->free(pin->ctx, px[k], npx * es);
    else free(px[k]);
  }
  free(x);
  free(got);
  pb_engine_free(e);
}

int main(int argc, char **argv) {
  const char *device = argc > 1 ? argv[1] : "cpu";
  if (strcmp(device, "cuda") == 0) {
    char why[512];
    if (pb_engine_device_status("cuda", why, sizeof why) != 0) {
      fprintf(stderr, "cuda unavailable: %s\n", why);
      return 1;
    }
    check_dtype("cuda", "float32", PB_UINT16, 1e-3);
    check_dtype("cuda", "float32", PB_UINT8, 1e-3);
    check_dtype("cuda", "float32", PB_FLOAT32, 1e-3);
    check_dtype("cuda", "bfloat16", PB_UINT16, 3e-2);
  } else {
    check_dtype("cpu", "float32", PB_UINT16, 1e-5);
    check_dtype("cpu", "float32", PB_UINT8, 1e-5);
    check_dtype("cpu", "float32", PB_FLOAT32, 1e-5);
  }
  return 0;
}
