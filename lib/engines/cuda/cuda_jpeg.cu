/* JPEG on the GPU: libnvjpeg.so.13 opened with dlopen (no nvjpeg.h is needed to build: the few
 * types and entry points used are declared below from NVIDIA's nvJPEG documentation), the
 * hardware decoder for the images nvjpegDecodeBatchedSupported accepts (A100, H100, H200), the
 * default (hybrid) GPU backend for the rest, both batched, into device memory as planar RGB.
 * Pixels a CPU decoded (progressive and CMYK JPEGs, PNGs) are copied in beside them. One kernel
 * then resizes each image's shorter side to `resize` with the loader's antialiased bilinear
 * filter (PIL's, lib/loader/convert.c pb__rs_plan), takes the centre crop, rounds to 8 bits as
 * the CPU path does, and normalises into the engine's float32 input.
 *
 * One decoder per process (a mutex around it) with two slots used in turn. A batch may be split
 * into parts (PIPEBENCH_JPEG_DECODERS, default 1), each with its own nvJPEG handles, stream and
 * pools, decoded from host threads of their own: one thread parses every header and feeds
 * nvJPEG alone, about 22 ms per 256 images on an H100 (docs/gpu.md). The crop of batch k waits
 * on the engine's stream for every part's decode of k, and the decode of batch k+2 waits for
 * that crop, so the decode of the next batch runs beside the model. Images a CPU cropped already
 * (decoded 2) are copied in and pass the crop kernel unchanged (origin 0, scale 1). */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engines/cuda/cuda_jpeg.h"
#include "engines/cuda/cuda_shared.h"
#include "loader/center_span.h"

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

struct group { /* one nvJPEG backend's share of a part */
  nvj_handle h = NULL;
  nvj_state s = NULL;
  int inited = 0; /* the batch size nvjpegDecodeBatchedInitialize was last given */
  const unsigned char **data = NULL;
  size_t *len = NULL;
  nvj_image *img = NULL;
  int *idx = NULL;
  int n = 0, cap = 0;
};

/* One of the decoder's parts: its own nvJPEG handles, states, stream and pools, so parts decode
 * side by side from their own host threads. */
struct part {
  int hw_ok = 0;
  group hw, sw;
  nvj_stream js = NULL;
  struct {
    uint64_t key[2];
    int used, supported; /* supported: nvjpegDecodeBatchedSupported's answer, 0 = yes */
  } seen[4096] = {};
  long parsed = 0; /* images nvJPEG parsed in full: one per kind of header */
  cudaStream_t ds = NULL;
  cudaEvent_t decoded[2] = {NULL, NULL};
  uint8_t *pool[2] = {NULL, NULL};
  size_t pool_cap[2] = {0, 0};
  /* this call's job: items [lo, hi) of the batch into slot k */
  int lo = 0, hi = 0, rc = 0, gpu_n = 0;
  struct pb_error err;
  double parse_ms = 0, decode_ms = 0; /* summed host time (PIPEBENCH_JPEG_PROFILE) */
};

enum { MAX_PARTS = 8 };

struct decoder {
  int device = -1;
  int nparts = 1;
  part parts[MAX_PARTS];
  cudaEvent_t cropped[2] = {NULL, NULL};
  img_desc *desc_h[2] = {NULL, NULL}, *desc_d[2] = {NULL, NULL};
  int desc_cap = 0;
  int next = 0;
  /* the job the helper threads (parts 1..nparts-1) take: a generation count, what is pending */
  pthread_t th[MAX_PARTS];
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t go = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
  long gen = 0;
  int pending = 0;
  const pb_jpeg_item *items = NULL;
  int k = 0, resize = 0, crop = 0;
  /* PIPEBENCH_JPEG_PROFILE: host time per batch, printed every 32 batches */
  int profile = 0;
  long batches = 0;
  double wait_ms = 0, dispatch_ms = 0;
  pb_jpeg_gpu_stats stats; /* since the decoder started */
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

static double ms_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

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

static int part_start(part *pt, struct pb_error *err) {
  /* the hardware decoder where the GPU has one; creating its handle fails elsewhere */
  pt->hw_ok = nvj.create_ex(NVJ_BACKEND_HARDWARE, NULL, NULL, 0, &pt->hw.h) == NVJ_OK &&
              nvj.state_create(pt->hw.h, &pt->hw.s) == NVJ_OK;
  NVJ(nvj.create_ex(NVJ_BACKEND_DEFAULT, NULL, NULL, 0, &pt->sw.h), "start the GPU decoder");
  NVJ(nvj.state_create(pt->sw.h, &pt->sw.s), "decoder state");
  NVJ(nvj.stream_create(pt->hw_ok ? pt->hw.h : pt->sw.h, &pt->js), "bitstream handle");
  CUJ(cudaStreamCreateWithFlags(&pt->ds, cudaStreamNonBlocking), "decode stream");
  for (int k = 0; k < 2; k++)
    CUJ(cudaEventCreateWithFlags(&pt->decoded[k], cudaEventDisableTiming), "event");
  return 0;
}

static int decode_part(decoder *d, part *pt);

/* A helper thread: decodes its part of each job the caller of decode_all posts. */
struct helper_arg {
  decoder *d;
  int i;
};

static void *helper_main(void *arg) {
  decoder *d = ((helper_arg *)arg)->d;
  int i = ((helper_arg *)arg)->i;
  free(arg);
  cudaSetDevice(d->device); /* a new thread starts on device 0 */
  pthread_mutex_lock(&d->mu);
  long seen = 0; /* the thread starts before the first job: that one is not missed */
  for (;;) {
    while (d->gen == seen) pthread_cond_wait(&d->go, &d->mu);
    seen = d->gen;
    pthread_mutex_unlock(&d->mu);
    part *pt = &d->parts[i];
    pt->rc = pt->lo < pt->hi ? decode_part(d, pt) : 0;
    pthread_mutex_lock(&d->mu);
    if (--d->pending == 0) pthread_cond_broadcast(&d->done);
  }
  return NULL;
}

/* PIPEBENCH_JPEG_DECODERS: how many parts (host threads feeding nvJPEG) a batch is split into;
 * 1 to 8, default 1. */
static int parts_wanted(void) {
  const char *v = getenv("PIPEBENCH_JPEG_DECODERS");
  int n = v && *v ? atoi(v) : 1;
  return n < 1 ? 1 : n > MAX_PARTS ? MAX_PARTS : n;
}

static int decoder_start(decoder *d, struct pb_error *err) {
  CUJ(cudaGetDevice(&d->device), "current device");
  const char *prof = getenv("PIPEBENCH_JPEG_PROFILE");
  d->profile = prof != NULL && *prof != '\0' && strcmp(prof, "0") != 0;
  d->nparts = parts_wanted();
  for (int i = 0; i < d->nparts; i++) PB_RETURN_NOT_OK(part_start(&d->parts[i], err));
  for (int k = 0; k < 2; k++)
    CUJ(cudaEventCreateWithFlags(&d->cropped[k], cudaEventDisableTiming), "event");
  for (int i = 1; i < d->nparts; i++) {
    helper_arg *a = (helper_arg *)malloc(sizeof *a);
    if (a != NULL) a->d = d, a->i = i;
    if (a == NULL || pthread_create(&d->th[i], NULL, helper_main, a) != 0) {
      free(a);
      d->nparts = i; /* the parts with a thread are used; the rest is left */
      break;
    }
    pthread_detach(d->th[i]); /* the decoder lives as long as the process */
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

/* What the headers from SOI to the first scan say: the frame's type, precision, size and
 * components with their sampling factors, whether restart markers are used, and Adobe's colour
 * transform (-1 without its segment). */
struct jpeg_hdr {
  unsigned sof; /* the frame marker's code: 0xC0 baseline, 0xC2 progressive, ... */
  int precision, height, width, comps;
  unsigned char sampling[4]; /* H << 4 | V per component */
  int restart, adobe;
};

/* Reads the headers: 1 when every segment up to the first scan is well formed (a marker, 0xFF
 * and a code, with a length inside the file) and a frame header came before it. nvJPEG's own
 * parser skips bytes that are no marker, where libjpeg-turbo (and the CPU path) refuses the
 * file; and this walk reads only the headers, a few hundred bytes, where nvJPEG's parse scans
 * the whole entropy-coded stream (about 30 us for 100 kB: 7 ms of a batch of 256). */
static int headers_read(const unsigned char *p, size_t n, jpeg_hdr *o) {
  memset(o, 0, sizeof *o);
  o->adobe = -1;
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
    const unsigned char *q = p + i + 4; /* the segment's payload, len - 2 bytes */
    if (m == 0xDA) return o->sof != 0; /* the first scan: the headers before it were all read */
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) { /* a frame header */
      if (o->sof != 0 || len < 8) return 0;
      o->sof = m;
      o->precision = q[0];
      o->height = (q[1] << 8) | q[2];
      o->width = (q[3] << 8) | q[4];
      o->comps = q[5];
      if (o->comps < 1 || o->comps > 4 || len < 8 + 3 * (size_t)o->comps) return 0;
      for (int c = 0; c < o->comps; c++) o->sampling[c] = q[6 + 3 * c + 1];
    } else if (m == 0xDD && len >= 4) {
      o->restart = ((q[0] << 8) | q[1]) != 0;
    } else if (m == 0xEE && len >= 14 && memcmp(q, "Adobe", 5) == 0) {
      o->adobe = q[11];
    }
    i += 2 + len;
  }
  return 0;
}

/* Whether the hardware decoder takes an image is a property of its headers, so the answer of
 * nvjpegDecodeBatchedSupported (which needs nvJPEG's full parse) is kept per kind of header:
 * the fields above, the size included. A part's table of the last answers, by hash. */
static void hdr_key(const jpeg_hdr *h, uint64_t key[2]) {
  key[0] = (uint64_t)h->sof | (uint64_t)(h->precision & 0xFF) << 8 | (uint64_t)h->comps << 16 |
           (uint64_t)(h->restart != 0) << 19 | (uint64_t)(h->adobe + 1 & 0x1FF) << 20 |
           (uint64_t)h->sampling[0] << 32 | (uint64_t)h->sampling[1] << 40 |
           (uint64_t)h->sampling[2] << 48 | (uint64_t)h->sampling[3] << 56;
  key[1] = (uint64_t)h->height << 32 | (uint64_t)(uint32_t)h->width;
}

/* A JPEG that ends before its end-of-image marker (trailing zero padding allowed). */
static int truncated(const unsigned char *p, size_t n) {
  while (n > 2 && p[n - 1] == 0) n--;
  return n < 4 || p[n - 2] != 0xFF || p[n - 1] != 0xD9;
}

/* The crop of an h x w image: the loader's centre crop of the image resized to `resize` on its
 * shorter side (lib/loader/center_span.h). */
static void crop_span(int h, int w, int resize, int crop, img_desc *o) {
  double ay, ax, fy, fx;
  pb__center_span(h, w, resize, crop, crop, &ay, &ax, &fy, &fx);
  o->ay = (float)ay, o->ax = (float)ax;
  o->fy = (float)fy, o->fx = (float)fx;
}

/* Sorts the part's items into its two groups and lays out its pool; *bytes: the pool's size.
 * Descriptors go to desc (the batch's, indexed by item). */
static int plan_part(part *pt, const pb_jpeg_item *items, img_desc *desc, int resize, int crop,
                     int64_t *bytes, struct pb_error *err) {
  pt->hw.n = pt->sw.n = 0;
  int64_t off = 0;
  for (int i = pt->lo; i < pt->hi; i++) {
    const pb_jpeg_item *it = &items[i];
    const char *name = it->name ? it->name : "(unnamed)";
    img_desc *o = &desc[i];
    if (it->decoded) {
      if (it->channels != 1 && it->channels != 3)
        return pbc_err(err, PB_EUNSUPPORTED, "%s: %d channels (1 or 3 expected)", name, it->channels);
      if (it->decoded == 2 && (it->height != crop || it->width != crop))
        return pbc_err(err, PB_EINVAL, "%s: a finished crop of %d x %d, not %d x %d", name,
                       it->height, it->width, crop, crop);
      o->h = it->height, o->w = it->width;
      o->plane = it->channels == 3 ? (int64_t)o->h * o->w : 0;
    } else {
      const unsigned char *p = (const unsigned char *)it->data;
      int comps = 0, sub = 0, ws[4] = {0}, hs[4] = {0}, sup = 1;
      jpeg_hdr hd;
      int ok = headers_read(p, it->size, &hd);
      if (ok && pt->hw_ok) {
        /* nvJPEG parses the file only for a kind of header this part has not seen */
        uint64_t key[2];
        hdr_key(&hd, key);
        unsigned slot = (unsigned)((key[0] ^ key[0] >> 29 ^ key[1]) * 0x9E3779B97F4A7C15ull >> 52);
        if (pt->seen[slot].used && pt->seen[slot].key[0] == key[0] && pt->seen[slot].key[1] == key[1]) {
          sup = pt->seen[slot].supported;
          ws[0] = hd.width, hs[0] = hd.height;
        } else {
          unsigned uw = 0, uh = 0;
          ok = nvj.stream_parse(pt->hw.h, p, it->size, 0, 0, pt->js) == NVJ_OK &&
               nvj.frame_dims(pt->js, &uw, &uh) == NVJ_OK;
          if (ok && nvj.batched_supported(pt->hw.h, pt->js, &sup) != NVJ_OK) sup = 1;
          ws[0] = (int)uw, hs[0] = (int)uh;
          pt->parsed++;
          if (ok && ws[0] == hd.width && hs[0] == hd.height) { /* not a height set by DNL */
            pt->seen[slot].used = 1;
            pt->seen[slot].key[0] = key[0], pt->seen[slot].key[1] = key[1];
            pt->seen[slot].supported = sup;
          }
        }
      } else if (ok) {
        ok = nvj.image_info(pt->sw.h, p, it->size, &comps, &sub, ws, hs) == NVJ_OK;
      }
      if (!ok || ws[0] <= 0 || hs[0] <= 0)
        return pbc_err(err, PB_EFORMAT, "%s: not a JPEG nvJPEG can read (corrupt header)", name);
      if (truncated(p, it->size))
        return pbc_err(err, PB_EFORMAT, "%s: truncated JPEG (no end-of-image marker)", name);
      o->h = hs[0], o->w = ws[0];
      o->plane = (int64_t)o->h * o->w;
      group *g = pt->hw_ok && sup == 0 ? &pt->hw : &pt->sw;
      g->data[g->n] = p, g->len[g->n] = it->size, g->idx[g->n] = i;
      g->n++;
    }
    if (it->decoded == 2) { /* already the crop: the kernel's identity (origin 0, scale 1) */
      o->ay = o->ax = 0.0f;
      o->fy = o->fx = 1.0f;
    } else {
      crop_span(o->h, o->w, resize, crop, o);
    }
    o->px = (const uint8_t *)(intptr_t)off; /* an offset until the pool is placed */
    off += ((int64_t)o->h * o->w * (it->decoded ? it->channels : 3) + 255) / 256 * 256;
  }
  *bytes = off;
  return 0;
}

/* The first JPEG of group g that the default backend cannot decode alone, named. */
static int find_bad(part *pt, const group *g, const pb_jpeg_item *items, nvj_status s,
                    struct pb_error *err) {
  for (int j = 0; j < g->n; j++) {
    nvj_image im = g->img[j];
    nvj_status one = nvj.decode(pt->sw.h, pt->sw.s, g->data[j], g->len[j], NVJ_OUTPUT_RGB, &im, pt->ds);
    if (one != NVJ_OK) {
      cudaStreamSynchronize(pt->ds);
      cudaGetLastError();
      const char *name = items[g->idx[j]].name;
      return pbc_err(err, PB_EFORMAT, "%s: nvJPEG cannot decode it: %s", name ? name : "(unnamed)",
                     nvj_status_name(one));
    }
  }
  cudaStreamSynchronize(pt->ds);
  return pbc_err(err, PB_EFORMAT, "nvJPEG batched decode of %d images failed: %s", g->n,
                 nvj_status_name(s));
}

static int decode_group(part *pt, group *g, const pb_jpeg_item *items, const img_desc *desc,
                        struct pb_error *err) {
  if (g->n == 0) return 0;
  for (int j = 0; j < g->n; j++) {
    const img_desc *o = &desc[g->idx[j]];
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
  nvj_status s = nvj.batched(g->h, g->s, g->data, g->len, g->img, pt->ds);
  if (s != NVJ_OK) {
    g->inited = 0; /* set the state up again for the next batch */
    return find_bad(pt, g, items, s, err);
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

/* One part of the job in d: items [lo, hi) decoded into the part's pool slot d->k on its own
 * stream; its decoded[k] event marks the end. */
static int decode_part(decoder *d, part *pt) {
  struct pb_error *err = &pt->err;
  err->message[0] = '\0';
  pt->gpu_n = 0;
  int k = d->k, n = pt->hi - pt->lo;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  PB_RETURN_NOT_OK(group_grow(&pt->hw, n, err));
  PB_RETURN_NOT_OK(group_grow(&pt->sw, n, err));
  int64_t bytes = 0;
  img_desc *desc = d->desc_h[k];
  PB_RETURN_NOT_OK(plan_part(pt, d->items, desc, d->resize, d->crop, &bytes, err));
  if ((size_t)bytes > pt->pool_cap[k]) {
    /* the crop that last read the slot is done (decode_all waited for it) */
    cudaFree(pt->pool[k]);
    pt->pool[k] = NULL;
    pt->pool_cap[k] = 0;
    size_t cap = (size_t)bytes + (size_t)bytes / 4;
    CUJ(cudaMalloc(&pt->pool[k], cap), "decoded images");
    pt->pool_cap[k] = cap;
  }
  for (int i = pt->lo; i < pt->hi; i++) desc[i].px = pt->pool[k] + (intptr_t)desc[i].px;
  double parse = ms_since(&t0);
  for (int i = pt->lo; i < pt->hi; i++) {
    const pb_jpeg_item *it = &d->items[i];
    if (it->decoded)
      CUJ(cudaMemcpyAsync((void *)desc[i].px, it->data,
                          (size_t)it->width * (size_t)it->height * (size_t)it->channels,
                          cudaMemcpyHostToDevice, pt->ds),
          "copy of a CPU-decoded image");
  }
  PB_RETURN_NOT_OK(decode_group(pt, &pt->hw, d->items, desc, err));
  PB_RETURN_NOT_OK(decode_group(pt, &pt->sw, d->items, desc, err));
  CUJ(cudaEventRecord(pt->decoded[k], pt->ds), "event");
  pt->gpu_n = pt->hw.n + pt->sw.n;
  if (d->profile) {
    pt->parse_ms += parse;
    pt->decode_ms += ms_since(&t0) - parse;
  }
  return 0;
}

/* Decodes the batch into slot k: the decode of the batch before is waited for (its items may
 * then be freed), and the crop that last read slot k; the batch is split into the decoder's
 * parts, each decoded from its own thread (part 0 from this one). The descriptors are in
 * desc_h[k] afterwards; the parts' decoded[k] events mark the end on the device. */
static int decode_all(decoder *d, int k, const pb_jpeg_item *items, int n, int resize, int crop,
                      int *gpu_n, struct pb_error *err) {
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < d->nparts; i++)
    CUJ(cudaEventSynchronize(d->parts[i].decoded[k ^ 1]), "JPEG decode");
  double wait_decode = ms_since(&t0);
  CUJ(cudaEventSynchronize(d->cropped[k]), "JPEG crop");
  double wait_crop = ms_since(&t0) - wait_decode;
  if (n > d->desc_cap) {
    CUJ(cudaDeviceSynchronize(), "synchronize"); /* no crop reads the old descriptors */
    for (int s = 0; s < 2; s++) {
      cudaFree(d->desc_d[s]);
      cudaFreeHost(d->desc_h[s]);
      d->desc_d[s] = NULL;
      d->desc_h[s] = NULL;
    }
    d->desc_cap = 0;
    for (int s = 0; s < 2; s++) {
      CUJ(cudaMallocHost(&d->desc_h[s], (size_t)n * sizeof(img_desc)), "descriptors");
      CUJ(cudaMalloc(&d->desc_d[s], (size_t)n * sizeof(img_desc)), "descriptors");
    }
    d->desc_cap = n;
  }
  double waited = ms_since(&t0);
  /* parts of at least 16 images: fewer would cost more in set-up than they save */
  int np = n / 16 < d->nparts ? (n / 16 > 1 ? n / 16 : 1) : d->nparts;
  for (int i = 0; i < d->nparts; i++) {
    part *pt = &d->parts[i];
    pt->lo = i < np ? (int)((int64_t)n * i / np) : n;
    pt->hi = i < np ? (int)((int64_t)n * (i + 1) / np) : n;
    pt->rc = 0;
  }
  d->items = items, d->k = k, d->resize = resize, d->crop = crop;
  if (d->nparts > 1) {
    pthread_mutex_lock(&d->mu);
    d->pending = d->nparts - 1;
    d->gen++;
    pthread_cond_broadcast(&d->go);
    pthread_mutex_unlock(&d->mu);
  }
  part *p0 = &d->parts[0];
  p0->rc = p0->lo < p0->hi ? decode_part(d, p0) : 0;
  if (d->nparts > 1) {
    pthread_mutex_lock(&d->mu);
    while (d->pending > 0) pthread_cond_wait(&d->done, &d->mu);
    pthread_mutex_unlock(&d->mu);
  }
  *gpu_n = 0;
  for (int i = 0; i < d->nparts; i++) {
    part *pt = &d->parts[i];
    if (pt->rc != 0) { /* the first part's error in batch order; the slot is decoded again */
      if (err != NULL) *err = pt->err;
      return pt->rc;
    }
    *gpu_n += pt->gpu_n;
  }
  d->stats.batches++;
  d->stats.images_gpu += *gpu_n;
  d->stats.images_copied += n - *gpu_n;
  d->stats.wait_decode_ns += (int64_t)(wait_decode * 1e6);
  d->stats.wait_crop_ns += (int64_t)(wait_crop * 1e6);
  d->stats.parts_ns += (int64_t)((ms_since(&t0) - waited) * 1e6);
  d->stats.parts = np;
  if (d->profile) {
    d->wait_ms += waited;
    d->dispatch_ms += ms_since(&t0) - waited;
    if (++d->batches % 32 == 0) {
      double parse = 0, dec = 0;
      long parsed = 0;
      for (int i = 0; i < d->nparts; i++)
        parse += d->parts[i].parse_ms, dec += d->parts[i].decode_ms, parsed += d->parts[i].parsed;
      double b = (double)d->batches;
      fprintf(stderr, "jpeg profile: %ld batches of %d, %d parts: host ms per batch: waiting %.2f, "
              "parts %.2f (per part: parse %.2f, nvJPEG calls %.2f); %ld full parses\n", d->batches, n,
              d->nparts, d->wait_ms / b, d->dispatch_ms / b, parse / b / d->nparts, dec / b / d->nparts,
              parsed);
    }
  }
  return 0;
}

/* The crop of slot k on stream st, once every part's decode is done: descriptors copied in,
 * the kernel, and cropped[k] recorded. */
static cudaError_t crop_queue(decoder *d, int k, int n, int crop, const float *mean,
                              const float *std, float *out_f, uint8_t *out_u8, cudaStream_t st) {
  cudaError_t e = cudaSuccess;
  for (int i = 0; i < d->nparts && e == cudaSuccess; i++)
    if (d->parts[i].lo < d->parts[i].hi) e = cudaStreamWaitEvent(st, d->parts[i].decoded[k], 0);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(d->desc_d[k], d->desc_h[k], (size_t)n * sizeof(img_desc),
                        cudaMemcpyHostToDevice, st);
  if (e == cudaSuccess) {
    dim3 grid((unsigned)((crop * crop + 255) / 256), 3, (unsigned)n);
    k_crop<<<grid, 256, 0, st>>>(d->desc_d[k], crop, out_f, out_u8, mean[0], mean[1], mean[2],
                                 1.0f / std[0], 1.0f / std[1], 1.0f / std[2]);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaEventRecord(d->cropped[k], st);
  return e;
}

int pbc_jpeg_to_input(const pb_jpeg_item *items, int n, int resize, int crop, const float *mean,
                      const float *std, float *input, cudaStream_t st, int *gpu_n,
                      struct pb_error *err) {
  *gpu_n = 0;
  pthread_mutex_lock(&dec_lock);
  decoder *d = NULL;
  int rc = decoder_get(&d, err);
  int k = d ? d->next : 0;
  if (rc == 0) rc = decode_all(d, k, items, n, resize, crop, gpu_n, err);
  if (rc == 0) {
    d->next ^= 1;
    cudaError_t e = crop_queue(d, k, n, crop, mean, std, input, NULL, st);
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
  if (rc == 0) rc = decode_all(d, k, items, n, resize, crop, &gpu_n, err);
  if (rc == 0) {
    d->next ^= 1;
    cudaStream_t st = d->parts[0].ds;
    cudaError_t e = crop_queue(d, k, n, crop, zero, one, NULL, dev, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (e == cudaSuccess) e = cudaMemcpy(crops, dev, bytes, cudaMemcpyDeviceToHost);
    for (int i = 0; e == cudaSuccess && full != NULL && i < n; i++) {
      const img_desc *o = &d->desc_h[k][i];
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

int pbc_jpeg_stats(pb_jpeg_gpu_stats *out) {
  pthread_mutex_lock(&dec_lock);
  if (dec_one != NULL) *out = dec_one->stats;
  else memset(out, 0, sizeof *out);
  pthread_mutex_unlock(&dec_lock);
  return 0;
}
