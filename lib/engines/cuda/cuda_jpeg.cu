/* JPEG on the GPU: libnvjpeg.so.13 opened with dlopen (no nvjpeg.h is needed to build: the few
 * types and entry points used are declared below from NVIDIA's nvJPEG documentation), the
 * hardware decoder for the images nvjpegDecodeBatchedSupported accepts (A100, H100, H200), the
 * default (hybrid) GPU backend for the rest, both batched, into device memory as planar RGB.
 * Pixels a CPU decoded (progressive and CMYK JPEGs, PNGs) are copied in beside them. One kernel
 * then resizes each image's shorter side to `resize` with the loader's antialiased bilinear
 * filter (PIL's, lib/loader/convert.c pb__rs_plan), takes the centre crop, rounds to 8 bits as
 * the CPU path does, and normalises into the engine's float32 input.
 *
 * One decoder per process (a mutex around it): its own stream, two pools of decoded images used
 * in turn; the crop of batch k waits on the engine's stream for its decode, and the decode of
 * batch k+2 waits for that crop, so the decode of the next batch runs beside the model. */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engines/cuda/cuda_jpeg.h"
#include "engines/cuda/cuda_shared.h"

/* ---- nvJPEG, declared from its documentation --------------------------------------------------- */

typedef int nvj_status;
enum { NVJ_OK = 0 };
enum { NVJ_BACKEND_DEFAULT = 0, NVJ_BACKEND_HARDWARE = 3 };
enum { NVJ_OUTPUT_RGB = 3 };
typedef struct {
  unsigned char *channel[4];
  size_t pitch[4];
} nvj_image;
typedef struct nvj_handle_s *nvj_handle;
typedef struct nvj_state_s *nvj_state;
typedef struct nvj_stream_s *nvj_stream;

static const char *nvj_status_name(nvj_status s) {
  static const char *const names[] = {"success", "not initialized", "invalid parameter", "bad JPEG",
                                      "JPEG not supported", "allocator failure", "execution failed",
                                      "architecture mismatch", "internal error",
                                      "implementation not supported", "incomplete bitstream"};
  return s >= 0 && s < (int)(sizeof names / sizeof names[0]) ? names[s] : "unknown status";
}

static struct {
  pthread_once_t once;
  void *lib;
  char why[256];
  nvj_status (*create_ex)(int backend, void *dev_alloc, void *pinned_alloc, unsigned flags,
                          nvj_handle *h);
  nvj_status (*destroy)(nvj_handle h);
  nvj_status (*state_create)(nvj_handle h, nvj_state *s);
  nvj_status (*state_destroy)(nvj_state s);
  nvj_status (*image_info)(nvj_handle h, const unsigned char *data, size_t len, int *comps,
                           int *subsampling, int *widths, int *heights);
  nvj_status (*batched_init)(nvj_handle h, nvj_state s, int batch, int max_cpu_threads,
                             int output_format);
  nvj_status (*batched)(nvj_handle h, nvj_state s, const unsigned char *const *data,
                        const size_t *lengths, nvj_image *dst, cudaStream_t st);
  nvj_status (*decode)(nvj_handle h, nvj_state s, const unsigned char *data, size_t len,
                       int output_format, nvj_image *dst, cudaStream_t st);
  nvj_status (*stream_create)(nvj_handle h, nvj_stream *js);
  nvj_status (*stream_destroy)(nvj_stream js);
  nvj_status (*stream_parse)(nvj_handle h, const unsigned char *data, size_t len, int save_meta,
                             int save_stream, nvj_stream js);
  nvj_status (*batched_supported)(nvj_handle h, nvj_stream js, int *is_supported);
  nvj_status (*frame_dims)(nvj_stream js, unsigned *width, unsigned *height);
} nvj = {PTHREAD_ONCE_INIT, NULL, "", NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
         NULL, NULL, NULL};

static int nvj_sym(void **slot, const char *name) {
  *slot = dlsym(nvj.lib, name);
  if (*slot == NULL) snprintf(nvj.why, sizeof nvj.why, "libnvjpeg.so.13 has no %s", name);
  return *slot != NULL;
}

static void nvj_load(void) {
  nvj.lib = dlopen("libnvjpeg.so.13", RTLD_NOW | RTLD_LOCAL);
  if (nvj.lib == NULL) {
    snprintf(nvj.why, sizeof nvj.why, "nvJPEG unavailable: cannot load libnvjpeg.so.13 (%s)",
             dlerror());
    return;
  }
  int ok = nvj_sym((void **)&nvj.create_ex, "nvjpegCreateEx") &&
           nvj_sym((void **)&nvj.destroy, "nvjpegDestroy") &&
           nvj_sym((void **)&nvj.state_create, "nvjpegJpegStateCreate") &&
           nvj_sym((void **)&nvj.state_destroy, "nvjpegJpegStateDestroy") &&
           nvj_sym((void **)&nvj.image_info, "nvjpegGetImageInfo") &&
           nvj_sym((void **)&nvj.batched_init, "nvjpegDecodeBatchedInitialize") &&
           nvj_sym((void **)&nvj.batched, "nvjpegDecodeBatched") &&
           nvj_sym((void **)&nvj.decode, "nvjpegDecode") &&
           nvj_sym((void **)&nvj.stream_create, "nvjpegJpegStreamCreate") &&
           nvj_sym((void **)&nvj.stream_destroy, "nvjpegJpegStreamDestroy") &&
           nvj_sym((void **)&nvj.stream_parse, "nvjpegJpegStreamParse") &&
           nvj_sym((void **)&nvj.batched_supported, "nvjpegDecodeBatchedSupported") &&
           nvj_sym((void **)&nvj.frame_dims, "nvjpegJpegStreamGetFrameDimensions");
  if (!ok) {
    dlclose(nvj.lib);
    nvj.lib = NULL;
  }
}

/* ---- the decoder --------------------------------------------------------------------------------- */

/* Where one image's decoded pixels are and which span of it the crop samples. */
struct img_desc {
  const uint8_t *px; /* planar: channel k at px + k * plane */
  int64_t plane;     /* 0 for grey decoded on the CPU: one plane read three times */
  int h, w;
  float ay, ax, fy, fx; /* crop origin and source pixels per output pixel */
};

struct group { /* one nvJPEG backend's share of a batch */
  nvj_handle h = NULL;
  nvj_state s = NULL;
  int inited = 0; /* the batch size nvjpegDecodeBatchedInitialize was last given */
  const unsigned char **data = NULL;
  size_t *len = NULL;
  nvj_image *img = NULL;
  int *idx = NULL;
  int n = 0, cap = 0;
};

struct decoder {
  int device = -1;
  int hw_ok = 0;
  group hw, sw;
  nvj_stream js = NULL;
  cudaStream_t ds = NULL;
  cudaEvent_t decoded[2] = {NULL, NULL}, cropped[2] = {NULL, NULL};
  uint8_t *pool[2] = {NULL, NULL};
  size_t pool_cap[2] = {0, 0};
  img_desc *desc_h = NULL, *desc_d[2] = {NULL, NULL};
  int desc_cap = 0;
  int next = 0;
};

static pthread_mutex_t dec_lock = PTHREAD_MUTEX_INITIALIZER;
static decoder *dec_one = NULL;

#define NVJ(call, what)                                                                        \
  do {                                                                                         \
    nvj_status s_ = (call);                                                                    \
    if (s_ != NVJ_OK)                                                                          \
      return pbc_err(err, PB_EIO, "nvJPEG %s: %s (status %d)", what, nvj_status_name(s_), s_); \
  } while (0)
#define CUJ(call, what)                                                                        \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) return pbc_cuda_err(err, e_, what);                                 \
  } while (0)

static int group_grow(group *g, int n, struct pb_error *err) {
  if (n <= g->cap) return 0;
  free(g->data), free(g->len), free(g->img), free(g->idx);
  g->data = (const unsigned char **)calloc((size_t)n, sizeof *g->data);
  g->len = (size_t *)calloc((size_t)n, sizeof *g->len);
  g->img = (nvj_image *)calloc((size_t)n, sizeof *g->img);
  g->idx = (int *)calloc((size_t)n, sizeof *g->idx);
  g->cap = g->data && g->len && g->img && g->idx ? n : 0;
  return g->cap ? 0 : pbc_err(err, PB_ENOMEM, "out of memory for a batch of %d JPEGs", n);
}

static int decoder_start(decoder *d, struct pb_error *err) {
  CUJ(cudaGetDevice(&d->device), "current device");
  /* the hardware decoder where the GPU has one; creating its handle fails elsewhere */
  d->hw_ok = nvj.create_ex(NVJ_BACKEND_HARDWARE, NULL, NULL, 0, &d->hw.h) == NVJ_OK &&
             nvj.state_create(d->hw.h, &d->hw.s) == NVJ_OK;
  NVJ(nvj.create_ex(NVJ_BACKEND_DEFAULT, NULL, NULL, 0, &d->sw.h), "start the GPU decoder");
  NVJ(nvj.state_create(d->sw.h, &d->sw.s), "decoder state");
  NVJ(nvj.stream_create(d->hw_ok ? d->hw.h : d->sw.h, &d->js), "bitstream handle");
  CUJ(cudaStreamCreateWithFlags(&d->ds, cudaStreamNonBlocking), "decode stream");
  for (int k = 0; k < 2; k++) {
    CUJ(cudaEventCreateWithFlags(&d->decoded[k], cudaEventDisableTiming), "event");
    CUJ(cudaEventCreateWithFlags(&d->cropped[k], cudaEventDisableTiming), "event");
  }
  return 0;
}

/* The process's decoder on the current device (started on first use); dec_lock held. */
static int decoder_get(decoder **out, struct pb_error *err) {
  pthread_once(&nvj.once, nvj_load);
  if (nvj.lib == NULL) return pbc_err(err, PB_EUNSUPPORTED, "%s", nvj.why);
  int dev = 0;
  CUJ(cudaGetDevice(&dev), "current device");
  if (dec_one != NULL && dec_one->device != dev)
    return pbc_err(err, PB_EUNSUPPORTED, "GPU JPEG decode: one GPU per process (%d, not %d)",
                   dec_one->device, dev);
  if (dec_one == NULL) {
    decoder *d = new decoder();
    int rc = decoder_start(d, err);
    if (rc != 0) {
      delete d; /* handles of a failed start are left to the process's end */
      return rc;
    }
    dec_one = d;
  }
  *out = dec_one;
  return 0;
}

int pbc_jpeg_status(char *why, size_t why_len) {
  struct pb_error err;
  err.message[0] = '\0';
  pthread_mutex_lock(&dec_lock);
  decoder *d = NULL;
  int rc = decoder_get(&d, &err);
  pthread_mutex_unlock(&dec_lock);
  if (rc != 0 && why != NULL && why_len > 0) snprintf(why, why_len, "%s", err.message);
  return rc != 0 ? PB_EUNSUPPORTED : 0;
}

/* Whether the segments from SOI to the first scan are well formed: each a marker (0xFF, a code)
 * with a length that stays inside the file. nvJPEG's parser skips bytes that are no marker,
 * where libjpeg-turbo (and the CPU path) refuses the file. */
static int headers_ok(const unsigned char *p, size_t n) {
  if (n < 4 || p[0] != 0xFF || p[1] != 0xD8) return 0;
  size_t i = 2;
  while (i + 4 <= n) {
    if (p[i] != 0xFF) return 0;
    unsigned m = p[i + 1];
    if (m == 0xFF) { /* fill byte */
      i++;
      continue;
    }
    size_t len = ((size_t)p[i + 2] << 8) | p[i + 3];
    if (len < 2 || i + 2 + len > n) return 0;
    if (m == 0xDA) return 1; /* the first scan: the headers before it were all read */
    i += 2 + len;
  }
  return 0;
}

/* A JPEG that ends before its end-of-image marker (trailing zero padding allowed). */
static int truncated(const unsigned char *p, size_t n) {
  while (n > 2 && p[n - 1] == 0) n--;
  return n < 4 || p[n - 2] != 0xFF || p[n - 1] != 0xD9;
}

/* The crop of an h x w image: the loader's centre crop of the image resized to `resize` on its
 * shorter side (lib/loader/transforms.c). */
static void crop_span(int h, int w, int resize, int crop, img_desc *o) {
  int64_t rh, rw;
  if (h <= w) {
    rh = resize;
    rw = (int64_t)((double)resize * (double)w / (double)h);
  } else {
    rw = resize;
    rh = (int64_t)((double)resize * (double)h / (double)w);
  }
  double fy = (double)h / (double)rh, fx = (double)w / (double)rw;
  int64_t dy = rh - crop, dx = rw - crop, hy = dy / 2, hx = dx / 2;
  if (dy % 2 != 0 && hy % 2 != 0) hy++; /* round half to even, as torchvision's centre crop */
  if (dx % 2 != 0 && hx % 2 != 0) hx++;
  o->ay = (float)((double)hy * fy), o->ax = (float)((double)hx * fx);
  o->fy = (float)fy, o->fx = (float)fx;
}

/* Sorts the items into the two groups and lays out the pool; *bytes: the pool's size. */
static int plan_batch(decoder *d, const pb_jpeg_item *items, int n, int resize, int crop,
                      int64_t *bytes, struct pb_error *err) {
  d->hw.n = d->sw.n = 0;
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    const pb_jpeg_item *it = &items[i];
    const char *name = it->name ? it->name : "(unnamed)";
    img_desc *o = &d->desc_h[i];
    if (it->decoded) {
      if (it->channels != 1 && it->channels != 3)
        return pbc_err(err, PB_EUNSUPPORTED, "%s: %d channels (1 or 3 expected)", name, it->channels);
      o->h = it->height, o->w = it->width;
      o->plane = it->channels == 3 ? (int64_t)o->h * o->w : 0;
    } else {
      const unsigned char *p = (const unsigned char *)it->data;
      int comps = 0, sub = 0, ws[4] = {0}, hs[4] = {0}, sup = 1;
      unsigned uw = 0, uh = 0;
      /* one parse of the headers: the bitstream handle's where the hardware decoder may take the
       * image (nvjpegDecodeBatchedSupported gives 0 when it does), else nvjpegGetImageInfo */
      int ok = headers_ok(p, it->size);
      if (ok && d->hw_ok) {
        ok = nvj.stream_parse(d->hw.h, p, it->size, 0, 0, d->js) == NVJ_OK &&
             nvj.frame_dims(d->js, &uw, &uh) == NVJ_OK;
        if (ok && nvj.batched_supported(d->hw.h, d->js, &sup) != NVJ_OK) sup = 1;
        ws[0] = (int)uw, hs[0] = (int)uh;
      } else if (ok) {
        ok = nvj.image_info(d->sw.h, p, it->size, &comps, &sub, ws, hs) == NVJ_OK;
      }
      if (!ok || ws[0] <= 0 || hs[0] <= 0)
        return pbc_err(err, PB_EFORMAT, "%s: not a JPEG nvJPEG can read (corrupt header)", name);
      if (truncated(p, it->size))
        return pbc_err(err, PB_EFORMAT, "%s: truncated JPEG (no end-of-image marker)", name);
      o->h = hs[0], o->w = ws[0];
      o->plane = (int64_t)o->h * o->w;
      group *g = d->hw_ok && sup == 0 ? &d->hw : &d->sw;
      g->data[g->n] = p, g->len[g->n] = it->size, g->idx[g->n] = i;
      g->n++;
    }
    crop_span(o->h, o->w, resize, crop, o);
    o->px = (const uint8_t *)(intptr_t)off; /* an offset until the pool is placed */
    off += ((int64_t)o->h * o->w * (it->decoded ? it->channels : 3) + 255) / 256 * 256;
  }
  *bytes = off;
  return 0;
}

/* The first JPEG of group g that the default backend cannot decode alone, named. */
static int find_bad(decoder *d, const group *g, const pb_jpeg_item *items, nvj_status s,
                    struct pb_error *err) {
  for (int j = 0; j < g->n; j++) {
    nvj_image im = g->img[j];
    nvj_status one = nvj.decode(d->sw.h, d->sw.s, g->data[j], g->len[j], NVJ_OUTPUT_RGB, &im, d->ds);
    if (one != NVJ_OK) {
      cudaStreamSynchronize(d->ds);
      cudaGetLastError();
      const char *name = items[g->idx[j]].name;
      return pbc_err(err, PB_EFORMAT, "%s: nvJPEG cannot decode it: %s", name ? name : "(unnamed)",
                     nvj_status_name(one));
    }
  }
  cudaStreamSynchronize(d->ds);
  return pbc_err(err, PB_EFORMAT, "nvJPEG batched decode of %d images failed: %s", g->n,
                 nvj_status_name(s));
}

static int decode_group(decoder *d, group *g, const pb_jpeg_item *items, struct pb_error *err) {
  if (g->n == 0) return 0;
  for (int j = 0; j < g->n; j++) {
    const img_desc *o = &d->desc_h[g->idx[j]];
    memset(&g->img[j], 0, sizeof g->img[j]);
    for (int k = 0; k < 3; k++) {
      g->img[j].channel[k] = (unsigned char *)o->px + k * o->plane;
      g->img[j].pitch[k] = (size_t)o->w;
    }
  }
  if (g->inited != g->n) {
    NVJ(nvj.batched_init(g->h, g->s, g->n, 1, NVJ_OUTPUT_RGB), "batch set-up");
    g->inited = g->n;
  }
  nvj_status s = nvj.batched(g->h, g->s, g->data, g->len, g->img, d->ds);
  if (s != NVJ_OK) {
    g->inited = 0; /* set the state up again for the next batch */
    return find_bad(d, g, items, s, err);
  }
  return 0;
}

__global__ void k_crop(const img_desc *__restrict__ desc, int crop, float *__restrict__ out_f,
                       uint8_t *__restrict__ out_u8, float m0, float m1, float m2, float is0,
                       float is1, float is2) {
  int b = blockIdx.z, c = blockIdx.y;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= crop * crop) return;
  int oy = i / crop, ox = i % crop;
  const img_desc d = desc[b];
  float cy = d.ay + ((float)oy + 0.5f) * d.fy, cx = d.ax + ((float)ox + 0.5f) * d.fx;
  float sy = d.fy > 1.0f ? d.fy : 1.0f, sx = d.fx > 1.0f ? d.fx : 1.0f;
  int y0 = (int)floorf(cy - sy + 0.5f), y1 = (int)floorf(cy + sy + 0.5f);
  int x0 = (int)floorf(cx - sx + 0.5f), x1 = (int)floorf(cx + sx + 0.5f);
  y0 = max(y0, 0), x0 = max(x0, 0), y1 = min(y1, d.h), x1 = min(x1, d.w);
  const uint8_t *p = d.px + (int64_t)c * d.plane;
  float acc = 0.0f, wsum_y = 0.0f, wsum_x = 0.0f;
  for (int x = x0; x < x1; x++) wsum_x += fmaxf(0.0f, 1.0f - fabsf(((float)x + 0.5f - cx) / sx));
  for (int y = y0; y < y1; y++) {
    float wy = fmaxf(0.0f, 1.0f - fabsf(((float)y + 0.5f - cy) / sy));
    if (wy == 0.0f) continue;
    wsum_y += wy;
    float row = 0.0f;
    for (int x = x0; x < x1; x++)
      row += fmaxf(0.0f, 1.0f - fabsf(((float)x + 0.5f - cx) / sx)) * (float)p[(int64_t)y * d.w + x];
    acc += wy * row;
  }
  float v = wsum_y > 0.0f && wsum_x > 0.0f
                ? acc / (wsum_y * wsum_x)
                : (float)p[(int64_t)min(max((int)cy, 0), d.h - 1) * d.w + min(max((int)cx, 0), d.w - 1)];
  v = fminf(fmaxf(rintf(v), 0.0f), 255.0f); /* 8 bits, as the CPU path's crops */
  int64_t at = (((int64_t)b * 3 + c) * crop + oy) * crop + ox;
  if (out_u8 != NULL) out_u8[at] = (uint8_t)v;
  if (out_f != NULL) {
    float m = c == 0 ? m0 : c == 1 ? m1 : m2, is = c == 0 ? is0 : c == 1 ? is1 : is2;
    out_f[at] = (v * (1.0f / 255.0f) - m) * is;
  }
}

/* Decodes the batch into pool slot k on the decoder's stream, waiting for it when `wait`. The
 * descriptors are in desc_d[k] afterwards. */
static int decode_batch(decoder *d, int k, const pb_jpeg_item *items, int n, int resize, int crop,
                        int wait, int *gpu_n, struct pb_error *err) {
  if (n > d->desc_cap) {
    CUJ(cudaStreamSynchronize(d->ds), "synchronize");
    for (int s = 0; s < 2; s++) {
      cudaFree(d->desc_d[s]);
      d->desc_d[s] = NULL;
    }
    cudaFreeHost(d->desc_h);
    d->desc_h = NULL;
    d->desc_cap = 0;
    CUJ(cudaMallocHost(&d->desc_h, (size_t)n * sizeof(img_desc)), "descriptors");
    for (int s = 0; s < 2; s++) CUJ(cudaMalloc(&d->desc_d[s], (size_t)n * sizeof(img_desc)), "descriptors");
    d->desc_cap = n;
  }
  PB_RETURN_NOT_OK(group_grow(&d->hw, n, err));
  PB_RETURN_NOT_OK(group_grow(&d->sw, n, err));
  /* the crop that last read slot k, and the copy of the descriptors (pinned, reused), are done */
  CUJ(cudaStreamWaitEvent(d->ds, d->cropped[k], 0), "wait");
  CUJ(cudaStreamSynchronize(d->ds), "synchronize");
  int64_t bytes = 0;
  PB_RETURN_NOT_OK(plan_batch(d, items, n, resize, crop, &bytes, err));
  if ((size_t)bytes > d->pool_cap[k]) {
    cudaFree(d->pool[k]);
    d->pool[k] = NULL;
    d->pool_cap[k] = 0;
    size_t cap = (size_t)bytes + (size_t)bytes / 4;
    CUJ(cudaMalloc(&d->pool[k], cap), "decoded images");
    d->pool_cap[k] = cap;
  }
  for (int i = 0; i < n; i++) d->desc_h[i].px = d->pool[k] + (intptr_t)d->desc_h[i].px;
  for (int i = 0; i < n; i++)
    if (items[i].decoded)
      CUJ(cudaMemcpyAsync((void *)d->desc_h[i].px, items[i].data,
                          (size_t)items[i].width * (size_t)items[i].height * (size_t)items[i].channels,
                          cudaMemcpyHostToDevice, d->ds),
          "copy of a CPU-decoded image");
  PB_RETURN_NOT_OK(decode_group(d, &d->hw, items, err));
  PB_RETURN_NOT_OK(decode_group(d, &d->sw, items, err));
  CUJ(cudaMemcpyAsync(d->desc_d[k], d->desc_h, (size_t)n * sizeof(img_desc), cudaMemcpyHostToDevice,
                      d->ds), "descriptors");
  CUJ(cudaEventRecord(d->decoded[k], d->ds), "event");
  if (wait) CUJ(cudaEventSynchronize(d->decoded[k]), "JPEG decode");
  *gpu_n = d->hw.n + d->sw.n;
  return 0;
}

static void crop_launch(decoder *d, int k, int n, int crop, const float *mean, const float *std,
                        float *out_f, uint8_t *out_u8, cudaStream_t st) {
  dim3 grid((unsigned)((crop * crop + 255) / 256), 3, (unsigned)n);
  k_crop<<<grid, 256, 0, st>>>(d->desc_d[k], crop, out_f, out_u8, mean[0], mean[1], mean[2],
                               1.0f / std[0], 1.0f / std[1], 1.0f / std[2]);
}

int pbc_jpeg_to_input(const pb_jpeg_item *items, int n, int resize, int crop, const float *mean,
                      const float *std, float *input, cudaStream_t st, int *gpu_n,
                      struct pb_error *err) {
  *gpu_n = 0;
  pthread_mutex_lock(&dec_lock);
  decoder *d = NULL;
  int rc = decoder_get(&d, err);
  int k = d ? d->next : 0;
  /* the batch before has been decoded: its items may be freed once this call returns */
  if (rc == 0 && cudaEventSynchronize(d->decoded[k ^ 1]) != cudaSuccess)
    rc = pbc_cuda_err(err, cudaGetLastError(), "JPEG decode");
  if (rc == 0) rc = decode_batch(d, k, items, n, resize, crop, 0, gpu_n, err);
  if (rc == 0) {
    d->next ^= 1;
    cudaError_t e = cudaStreamWaitEvent(st, d->decoded[k], 0);
    if (e == cudaSuccess) {
      crop_launch(d, k, n, crop, mean, std, input, NULL, st);
      e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaEventRecord(d->cropped[k], st);
    if (e != cudaSuccess) rc = pbc_cuda_err(err, e, "JPEG crop");
  }
  pthread_mutex_unlock(&dec_lock);
  return rc;
}

int pbc_jpeg_crops(const pb_jpeg_item *items, int n, int resize, int crop, uint8_t **full,
                   uint8_t *crops, struct pb_error *err) {
  if (n < 1) return pbc_err(err, PB_EINVAL, "jpeg_crops: no images");
  static const float zero[3] = {0, 0, 0}, one[3] = {1, 1, 1};
  uint8_t *dev = NULL;
  size_t bytes = (size_t)n * 3 * (size_t)crop * (size_t)crop;
  CUJ(cudaMalloc(&dev, bytes), "crops");
  pthread_mutex_lock(&dec_lock);
  decoder *d = NULL;
  int gpu_n = 0, rc = decoder_get(&d, err);
  int k = d ? d->next : 0;
  if (rc == 0) rc = decode_batch(d, k, items, n, resize, crop, 1, &gpu_n, err);
  if (rc == 0) {
    d->next ^= 1;
    crop_launch(d, k, n, crop, zero, one, NULL, dev, d->ds);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaEventRecord(d->cropped[k], d->ds);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->ds);
    if (e == cudaSuccess) e = cudaMemcpy(crops, dev, bytes, cudaMemcpyDeviceToHost);
    for (int i = 0; e == cudaSuccess && full != NULL && i < n; i++) {
      const img_desc *o = &d->desc_h[i];
      if (full[i] != NULL)
        e = cudaMemcpy(full[i], o->px, (size_t)(o->plane ? 3 * o->plane : (int64_t)o->h * o->w),
                       cudaMemcpyDeviceToHost);
    }
    if (e != cudaSuccess) rc = pbc_cuda_err(err, e, "JPEG crops");
  }
  pthread_mutex_unlock(&dec_lock);
  cudaFree(dev);
  return rc;
}
