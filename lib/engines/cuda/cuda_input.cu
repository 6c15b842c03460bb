/* The GPU data path: a loader's raw batch (uint8/uint16/... pixels, PB_OUT_NATIVE) goes to the
 * device as it is, 2 bytes a uint16 pixel instead of 4 or more after conversion, and a kernel
 * turns it into the model's float32 input there, with pb_image_to_chw's placement (time point 0,
 * middle z plane, channels repeated cyclically, centre crop or zero pad) and the loader's
 * normalisation ((x / max - mean) / std inside the image, padding 0). The engine's forward then
 * converts that input to its compute type.
 *
 * Double buffering: two device staging buffers, a copy stream beside the engine's stream and
 * events between them. Batch k+1 is copied into the buffer batch k-1 used, once the conversion of
 * k-1 has read it (event "consumed"); the conversion of k+1 waits for its copy (event "copied").
 * The copy therefore runs while the model computes batch k. The call returns once the copy is
 * done, so the caller may reuse the host buffer; the forward stays queued.
 *
 * Device time: each forward_native's work on the engine's stream (after its copy has arrived)
 * lies between two events of a small ring. pbc_device_mark records a mark on the idle stream;
 * as ring slots finish, their times after the mark are kept as spans, which pbc_device_spans
 * hands over once the stream is idle again: a window on the host clock that opens before the
 * mark and closes after that wait holds all of them (docs/measuring.md). */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "engines/cuda/cuda_input.h"
#include "engines/cuda/cuda_jpeg.h"
#include "engines/cuda/cuda_shared.h"

/* ---- pinned host memory ---------------------------------------------------------------------- */

static void *pinned_alloc(void *ctx, size_t size, size_t alignment) {
  (void)ctx;
  void *p = NULL;
  /* cudaHostAlloc returns page-aligned memory, which satisfies any alignment asked for here */
  if (alignment > 4096 || cudaHostAlloc(&p, size ? size : 1, cudaHostAllocDefault) != cudaSuccess) {
    cudaGetLastError();
    return NULL;
  }
  return p;
}
static void pinned_free(void *ctx, void *ptr, size_t size) {
  (void)ctx, (void)size;
  if (ptr != NULL) cudaFreeHost(ptr);
}
const pb_allocator pbc_pinned_allocator = {pinned_alloc, pinned_free, NULL};

/* ---- the conversion kernel ------------------------------------------------------------------- */

template <typename S> __device__ __forceinline__ float px(const S *p, size_t i, float scale) {
  return (float)p[i] * scale;
}

/* One thread per element of the n x C x H x W float32 input. Source images are c x z x h x w. */
struct norm_params { /* per channel of the pixels (sc below); by value, so no copy to make */
  float mean[PB_NATIVE_MAX_CHANNELS], inv_std[PB_NATIVE_MAX_CHANNELS];
};

template <typename S>
__global__ void k_native_to_input(const S *__restrict__ src, float *__restrict__ dst, int64_t n,
                                  int C, int H, int W, int64_t c, int64_t z, int64_t h, int64_t w,
                                  float scale, norm_params nm) {
  int64_t total = n * C * H * W;
  int64_t oy = (h - H) / 2, ox = (w - W) / 2, zp = z / 2;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t x = i % W, y = i / W % H, ch = i / ((int64_t)W * H) % C, b = i / ((int64_t)W * H * C);
    int64_t sy = y + oy, sx = x + ox;
    float v = 0.0f;
    if (sy >= 0 && sx >= 0 && sy < h && sx < w) {
      int64_t sc = ch % c;
      size_t at = (size_t)((((b * c + sc) * z + zp) * h + sy) * w + sx);
      int k = sc < PB_NATIVE_MAX_CHANNELS ? (int)sc : 0;
      v = (px(src, at, scale) - nm.mean[k]) * nm.inv_std[k];
    }
    dst[i] = v;
  }
}

/* ---- per-engine staging ---------------------------------------------------------------------- */

#define PBC_BUSY_RING 8

struct native_state {
  cudaStream_t copy = NULL;
  void *staging[2] = {NULL, NULL};
  size_t cap = 0;            /* bytes of each staging buffer */
  float *input = NULL;       /* the converted float32 input */
  size_t input_bytes = 0;
  cudaEvent_t copy_start[2] = {NULL, NULL}, copied[2] = {NULL, NULL}, consumed[2] = {NULL, NULL};
  int next = 0;
  cudaEvent_t busy0[PBC_BUSY_RING] = {}, busy1[PBC_BUSY_RING] = {};
  int64_t issued = 0, summed = 0; /* forwards timed, and those whose events were read */
  cudaEvent_t mark = NULL;         /* the window's origin (pbc_device_mark) */
  int marked = 0;
  int64_t mark_issued = 0;         /* forwards queued before the mark */
  pb_device_span *spans = NULL;    /* the forwards since the mark whose events were read */
  size_t n_spans = 0, spans_cap = 0;
};

#define CUN(call, what)                                                                        \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) return pbc_cuda_err(err, e_, what);                                 \
  } while (0)

void pbc_native_release(pb_engine *e) {
  native_state *s = (native_state *)e->native;
  if (s == NULL) return;
  if (s->copy) cudaStreamSynchronize(s->copy);
  cudaStream_t st = pbc_engine_stream(e);
  if (st) cudaStreamSynchronize(st);
  for (int k = 0; k < 2; k++) {
    cudaFree(s->staging[k]);
    if (s->copy_start[k]) cudaEventDestroy(s->copy_start[k]);
    if (s->copied[k]) cudaEventDestroy(s->copied[k]);
    if (s->consumed[k]) cudaEventDestroy(s->consumed[k]);
  }
  for (int k = 0; k < PBC_BUSY_RING; k++) {
    if (s->busy0[k]) cudaEventDestroy(s->busy0[k]);
    if (s->busy1[k]) cudaEventDestroy(s->busy1[k]);
  }
  if (s->mark) cudaEventDestroy(s->mark);
  free(s->spans);
  cudaFree(s->input);
  if (s->copy) cudaStreamDestroy(s->copy);
  e->info.bytes_scratch -= (int64_t)(2 * s->cap + s->input_bytes);
  e->info.bytes_total -= (int64_t)(2 * s->cap + s->input_bytes);
  delete s;
  e->native = NULL;
}

static int state_get(pb_engine *e, size_t bytes, native_state **out, struct pb_error *err) {
  CUN(cudaSetDevice(e->device_index), "select device"); /* the engine's GPU ("cuda:N") */
  native_state *s = (native_state *)e->native;
  if (s == NULL) {
    s = new native_state();
    e->native = s;
    CUN(cudaStreamCreateWithFlags(&s->copy, cudaStreamNonBlocking), "copy stream");
    for (int k = 0; k < 2; k++) {
      CUN(cudaEventCreate(&s->copy_start[k]), "event");
      CUN(cudaEventCreate(&s->copied[k]), "event");
      CUN(cudaEventCreateWithFlags(&s->consumed[k], cudaEventDisableTiming), "event");
    }
    for (int k = 0; k < PBC_BUSY_RING; k++) {
      CUN(cudaEventCreate(&s->busy0[k]), "event");
      CUN(cudaEventCreate(&s->busy1[k]), "event");
    }
    CUN(cudaEventCreate(&s->mark), "event");
    const pb_engine_info *i = &e->info;
    s->input_bytes =
        (size_t)i->batch_size * (size_t)i->channels * (size_t)i->height * (size_t)i->width * 4;
    CUN(cudaMalloc(&s->input, s->input_bytes), "converted input");
    e->info.bytes_scratch += (int64_t)s->input_bytes;
    e->info.bytes_total += (int64_t)s->input_bytes;
  }
  if (bytes > s->cap) { /* grow both buffers once nothing reads them */
    CUN(cudaStreamSynchronize(s->copy), "synchronize");
    CUN(cudaStreamSynchronize(pbc_engine_stream(e)), "synchronize");
    for (int k = 0; k < 2; k++) {
      cudaFree(s->staging[k]);
      s->staging[k] = NULL;
    }
    e->info.bytes_scratch -= (int64_t)(2 * s->cap);
    e->info.bytes_total -= (int64_t)(2 * s->cap);
    s->cap = 0;
    for (int k = 0; k < 2; k++) CUN(cudaMalloc(&s->staging[k], bytes), "staging buffer");
    s->cap = bytes;
    e->info.bytes_scratch += (int64_t)(2 * s->cap);
    e->info.bytes_total += (int64_t)(2 * s->cap);
  }
  *out = s;
  return 0;
}

/* Copies bytes into staging slot k on the copy stream once the conversion that last read it is
 * done, between the slot's timing events. */
static int copy_into(native_state *s, int k, const void *src, size_t bytes, struct pb_error *err) {
  CUN(cudaStreamWaitEvent(s->copy, s->consumed[k], 0), "wait");
  CUN(cudaEventRecord(s->copy_start[k], s->copy), "event");
  CUN(cudaMemcpyAsync(s->staging[k], src, bytes, cudaMemcpyHostToDevice, s->copy),
      "host-to-device copy");
  CUN(cudaEventRecord(s->copied[k], s->copy), "event");
  return 0;
}

static int copy_wait(native_state *s, int k, int64_t *ns, struct pb_error *err) {
  CUN(cudaEventSynchronize(s->copied[k]), "host-to-device copy");
  if (ns != NULL) {
    float ms = 0;
    CUN(cudaEventElapsedTime(&ms, s->copy_start[k], s->copied[k]), "event time");
    *ns = (int64_t)((double)ms * 1e6);
  }
  return 0;
}

template <typename S>
static void launch(const void *src, float *dst, const pb_engine_info *i, const pb_native_batch *in,
                   float scale, cudaStream_t st) {
  int64_t total = (int64_t)i->batch_size * i->channels * i->height * i->width;
  int64_t blocks = (total + 255) / 256;
  if (blocks > 65535LL * 16) blocks = 65535LL * 16;
  norm_params nm;
  for (int k = 0; k < PB_NATIVE_MAX_CHANNELS; k++) {
    int per = in->channel_mean != NULL && k < in->c;
    nm.mean[k] = per ? in->channel_mean[k] : in->mean;
    nm.inv_std[k] = 1.0f / (per ? in->channel_std[k] : in->std);
  }
  k_native_to_input<S><<<(unsigned)blocks, 256, 0, st>>>(
      (const S *)src, dst, in->n, i->channels, i->height, i->width, in->c, in->z, in->h, in->w,
      scale, nm);
}

/* Reads the events of the forwards before `upto` (waiting for them); those queued after the
 * mark become spans: their start and end after the mark. Times after one mark come from
 * differences of one clock rounded the same way, so spans keep the stream's order. */
static int busy_sum(native_state *s, int64_t upto, struct pb_error *err) {
  for (; s->summed < upto; s->summed++) {
    int k = (int)(s->summed % PBC_BUSY_RING);
    CUN(cudaEventSynchronize(s->busy1[k]), "event");
    if (!s->marked || s->summed < s->mark_issued) continue;
    float a = 0, b = 0;
    CUN(cudaEventElapsedTime(&a, s->mark, s->busy0[k]), "event time");
    CUN(cudaEventElapsedTime(&b, s->mark, s->busy1[k]), "event time");
    if (s->n_spans == s->spans_cap) {
      size_t cap = s->spans_cap ? 2 * s->spans_cap : 256;
      pb_device_span *p = (pb_device_span *)realloc(s->spans, cap * sizeof *p);
      if (p == NULL) return pbc_err(err, PB_ENOMEM, "out of memory (%zu device spans)", cap);
      s->spans = p, s->spans_cap = cap;
    }
    s->spans[s->n_spans++] = {(int64_t)llround((double)a * 1e6), (int64_t)llround((double)b * 1e6)};
  }
  return 0;
}

int pbc_device_mark(pb_engine *e, int64_t *host_ns, struct pb_error *err) {
  native_state *s = NULL;
  PB_RETURN_NOT_OK(state_get(e, 0, &s, err));
  cudaStream_t st = pbc_engine_stream(e);
  CUN(cudaStreamSynchronize(s->copy), "synchronize");
  CUN(cudaStreamSynchronize(st), "synchronize");
  PB_RETURN_NOT_OK(busy_sum(s, s->issued, err));
  s->n_spans = 0;
  s->mark_issued = s->issued;
  /* the clock first: the mark, recorded on the idle stream, then lies after it */
  *host_ns = pbc_now_ns();
  CUN(cudaEventRecord(s->mark, st), "event");
  s->marked = 1;
  return 0;
}

int pbc_device_spans(pb_engine *e, pb_device_span *spans, size_t cap, size_t *n,
                     struct pb_error *err) {
  *n = 0;
  native_state *s = (native_state *)e->native;
  if (s == NULL || !s->marked)
    return pbc_err(err, PB_ESTATE, "device_spans: no mark (pb_engine_device_mark) yet");
  CUN(cudaSetDevice(e->device_index), "select device");
  CUN(cudaStreamSynchronize(s->copy), "synchronize");
  CUN(cudaStreamSynchronize(pbc_engine_stream(e)), "synchronize");
  PB_RETURN_NOT_OK(busy_sum(s, s->issued, err));
  for (size_t i = 0; i < s->n_spans && i < cap; i++) spans[i] = s->spans[i];
  *n = s->n_spans;
  return 0;
}

static size_t dtype_size(pb_dtype d) {
  switch (d) {
  case PB_UINT8: return 1;
  case PB_UINT16: case PB_INT16: return 2;
  case PB_UINT32: case PB_FLOAT32: return 4;
  case PB_FLOAT64: return 8;
  default: return 0;
  }
}

/* forward_native and train_native: the copy and conversion, then a forward into output or a
 * training step against target, between the ring's events. */
static int native_run(pb_engine *e, const pb_native_batch *in, void *output, const void *target,
                      float lr, int64_t *h2d_ns, struct pb_error *err) {
  size_t bytes = (size_t)(in->n * in->c * in->z * in->h * in->w) * dtype_size(in->dtype);
  native_state *s = NULL;
  PB_RETURN_NOT_OK(state_get(e, bytes, &s, err));
  int k = s->next;
  s->next ^= 1;
  PB_RETURN_NOT_OK(copy_into(s, k, in->pixels, bytes, err));
  cudaStream_t st = pbc_engine_stream(e);
  CUN(cudaStreamWaitEvent(st, s->copied[k], 0), "wait");
  /* a ring slot is reused only once the forward that had it has been read (long finished,
   * since the loop runs at most two batches ahead) */
  PB_RETURN_NOT_OK(busy_sum(s, s->issued - PBC_BUSY_RING + 1, err));
  int bk = (int)(s->issued % PBC_BUSY_RING);
  CUN(cudaEventRecord(s->busy0[bk], st), "event");
  const pb_engine_info *i = &e->info;
  switch (in->dtype) {
  case PB_UINT8: launch<uint8_t>(s->staging[k], s->input, i, in, 1.0f / 255.0f, st); break;
  case PB_UINT16: launch<uint16_t>(s->staging[k], s->input, i, in, 1.0f / 65535.0f, st); break;
  case PB_UINT32: launch<uint32_t>(s->staging[k], s->input, i, in, (float)(1.0 / 4294967295.0), st); break;
  case PB_INT16: launch<int16_t>(s->staging[k], s->input, i, in, 1.0f / 32767.0f, st); break;
  case PB_FLOAT32: launch<float>(s->staging[k], s->input, i, in, 1.0f, st); break;
  case PB_FLOAT64: launch<double>(s->staging[k], s->input, i, in, 1.0f, st); break;
  default: return pbc_err(err, PB_EINVAL, "forward_native: unknown pixel type %d", (int)in->dtype);
  }
  CUN(cudaGetLastError(), "input conversion");
  CUN(cudaEventRecord(s->consumed[k], st), "event");
  if (target != NULL) PB_RETURN_NOT_OK(e->vt->train_step(e, s->input, target, lr, NULL, err));
  else PB_RETURN_NOT_OK(e->vt->forward(e, s->input, output, err));
  CUN(cudaEventRecord(s->busy1[bk], st), "event");
  s->issued++;
  return copy_wait(s, k, h2d_ns, err);
}

int pbc_forward_native(pb_engine *e, const pb_native_batch *in, void *output, int64_t *h2d_ns,
                       struct pb_error *err) {
  return native_run(e, in, output, NULL, 0.0f, h2d_ns, err);
}

int pbc_train_native(pb_engine *e, const pb_native_batch *in, const void *target, float lr,
                     int64_t *h2d_ns, struct pb_error *err) {
  return native_run(e, in, NULL, target, lr, h2d_ns, err);
}

int pbc_copy_in(pb_engine *e, const void *src, size_t bytes, int64_t *ns, struct pb_error *err) {
  native_state *s = NULL;
  PB_RETURN_NOT_OK(state_get(e, bytes, &s, err));
  int k = s->next;
  s->next ^= 1;
  PB_RETURN_NOT_OK(copy_into(s, k, src, bytes, err));
  return copy_wait(s, k, ns, err);
}

/* forward_native's ring and window for JPEG items: the decode and crop (cuda_jpeg.cu) write the
 * converted input, then the forward runs between the ring's events, so the device spans hold the
 * model's time and the decode counts as the data's. */
int pbc_forward_jpeg(pb_engine *e, const pb_jpeg_item *items, int n, int resize,
                     const float *mean, const float *std, void *output, int *gpu_n,
                     struct pb_error *err) {
  const pb_engine_info *i = &e->info;
  if (n != i->batch_size || i->channels != 3 || i->height != i->width)
    return pbc_err(err, PB_EINVAL, "forward_jpeg: %d images for an engine of batch %d, %d x %d x %d",
                   n, i->batch_size, i->channels, i->height, i->width);
  native_state *s = NULL;
  PB_RETURN_NOT_OK(state_get(e, 0, &s, err));
  cudaStream_t st = pbc_engine_stream(e);
  PB_RETURN_NOT_OK(pbc_jpeg_to_input(items, n, resize, i->height, mean, std, s->input, st, gpu_n, err));
  PB_RETURN_NOT_OK(busy_sum(s, s->issued - PBC_BUSY_RING + 1, err));
  int bk = (int)(s->issued % PBC_BUSY_RING);
  CUN(cudaEventRecord(s->busy0[bk], st), "event");
  PB_RETURN_NOT_OK(e->vt->forward(e, s->input, output, err));
  CUN(cudaEventRecord(s->busy1[bk], st), "event");
  s->issued++;
  return 0;
}
