/* Measures the machine's limits: memory copy, file read (warm and cold), decompression, and
 * the timer itself. Every later throughput is reported as a fraction of these. */
#include <blosc.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "pipebench/calibrate.h"
#include "pipebench/engine.h"
#include "pipebench/gen.h"
#include "pipebench/loader.h"
#include "pipebench/results.h"

#include "pipebench/sys.h"

#define GB 1e9

static void progress(const pb_calibrate_params *p, const char *what, int step, int steps) {
  if (p->progress != NULL) p->progress(p->progress_ctx, what, step, steps);
}

static int finish_value(pb_calib_value *v, const double *rounds, int n) {
  PB_RETURN_NOT_OK(pb_summarize(rounds, (size_t)n, &v->s));
  v->value = v->s.p50;
  return PB_OK;
}

/* Image-like test data: a smooth 16-bit field plus noise, so codecs see realistic ratios
 * (pure noise would not compress, constant data would be unrealistically fast). */
static void fill_image_like(uint16_t *p, size_t n, uint64_t seed) {
  pb_rng rng;
  pb_rng_init(&rng, seed);
  enum { width = 1024 };
  /* sin and cos of the column and row, once each: the same values, bit for bit, as computing
   * them per pixel (which took most of a small calibration's time). */
  double sx[width], cy[width];
  for (size_t k = 0; k < width; k++) {
    sx[k] = sin((double)k * 0.02);
    cy[k] = cos((double)k * 0.015);
  }
  for (size_t i = 0; i < n; i++) {
    size_t x = i % width, y = (i / width) % width;
    double base = 2000.0 + 800.0 * sx[x] * cy[y];
    p[i] = (uint16_t)(base + (double)(pb_rng_next(&rng) % 64));
  }
}

/* ---- memory copy ---------------------------------------------------------------------------- */

typedef struct copy_job {
  unsigned char *dst;
  const unsigned char *src;
  size_t n;
} copy_job;

static void *copy_thread(void *p) {
  copy_job *j = p;
  memcpy(j->dst, j->src, j->n);
  return NULL;
}

static double copy_once(unsigned char *dst, const unsigned char *src, size_t n, int threads) {
  int64_t t0 = pb_now_ns();
  if (threads <= 1) {
    memcpy(dst, src, n);
  } else {
    pthread_t tid[256];
    copy_job jobs[256];
    size_t part = (n / (size_t)threads) & ~(size_t)63;
    for (int k = 0; k < threads; k++) {
      size_t off = part * (size_t)k;
      jobs[k].dst = dst + off;
      jobs[k].src = src + off;
      jobs[k].n = k == threads - 1 ? n - off : part;
      pthread_create(&tid[k], NULL, copy_thread, &jobs[k]);
    }
    for (int k = 0; k < threads; k++) pthread_join(tid[k], NULL);
  }
  int64_t t1 = pb_now_ns();
  return (double)n / ((double)(t1 - t0) / 1e9) / GB;
}

/* ---- file read ------------------------------------------------------------------------------ */

static int read_whole(int fd, unsigned char *buf, size_t bufsize, size_t *total) {
  *total = 0;
  if (lseek(fd, 0, SEEK_SET) != 0) return -errno;
  for (;;) {
    ssize_t r = read(fd, buf, bufsize);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -errno;
    if (r == 0) break;
    *total += (size_t)r;
  }
  return PB_OK;
}

/* Fraction of the file's pages resident in the page cache (mincore), or -1 if unknown. */
static double resident_fraction(int fd, size_t size) {
  void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return -1;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t pages = (size + page - 1) / page;
  unsigned char *vec = malloc(pages);
  double frac = -1;
  if (vec != NULL && mincore(map, size, vec) == 0) {
    size_t in = 0;
    for (size_t i = 0; i < pages; i++) in += vec[i] & 1;
    frac = (double)in / (double)pages;
  }
  free(vec);
  munmap(map, size);
  return frac;
}

static int measure_file(const pb_calibrate_params *p, pb_calibration *out, struct pb_error *err) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", p->dir ? p->dir : pb_tmp_dir());
  char path[4200];
  snprintf(path, sizeof path, "%s/pipebench-calibrate-XXXXXX", dir);
  int fd = mkstemp(path);
  if (fd < 0) return pb_error_set(err, -errno, "%s: cannot create scratch file: %s", path, strerror(errno));
  unlink(path); /* gone when closed, also if we are interrupted */
  size_t block = (size_t)1 << 20;
  unsigned char *buf = pb_alloc(block);
  if (buf == NULL) {
    close(fd);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  fill_image_like((uint16_t *)buf, block / 2, 7);
  int rc = PB_OK;
  for (size_t done = 0; done < p->file_bytes && rc == PB_OK; done += block) {
    /* A short write leaves errno as it was; pb_write_all goes on until the real error
     * (ENOSPC on a full disk) shows. */
    rc = pb_write_all(fd, buf, block, path, err);
  }
  if (rc == PB_OK && fdatasync(fd) != 0)
    rc = pb_error_set(err, -errno, "%s: fdatasync failed: %s", path, strerror(errno));
  if (rc != PB_OK) { /* the message names the write error; the read checks below must not */
    pb_free(buf, block);
    close(fd);
    return rc;
  }
  int n = p->rounds;
  double *warm = calloc((size_t)n, sizeof *warm), *cold = calloc((size_t)n, sizeof *cold);
  if (warm == NULL || cold == NULL) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  size_t total = 0;
  if (rc == PB_OK) rc = read_whole(fd, buf, block, &total); /* warm-up: fill the cache */
  for (int r = 0; r < n && rc == PB_OK; r++) {
    progress(p, "file read (warm)", r + 1, n);
    int64_t t0 = pb_now_ns();
    rc = read_whole(fd, buf, block, &total);
    warm[r] = (double)total / ((double)(pb_now_ns() - t0) / 1e9) / GB;
  }
  out->cold_evicted = 1;
  for (int r = 0; r < n && rc == PB_OK; r++) {
    progress(p, "file read (cold)", r + 1, n);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    double frac = resident_fraction(fd, p->file_bytes);
    if (frac > 0.05) out->cold_evicted = 0;
    int64_t t0 = pb_now_ns();
    rc = read_whole(fd, buf, block, &total);
    cold[r] = (double)total / ((double)(pb_now_ns() - t0) / 1e9) / GB;
  }
  if (rc < 0 && rc > PB_E_FIRST) rc = pb_error_set(err, PB_EIO, "%s: read failed: %s", path, strerror(-rc));
  if (rc == PB_OK) rc = finish_value(&out->read_warm_gbps, warm, n);
  if (rc == PB_OK) rc = finish_value(&out->read_cold_gbps, cold, n);
  free(warm);
  free(cold);
  pb_free(buf, block);
  close(fd);
  return rc;
}

/* ---- codecs --------------------------------------------------------------------------------- */

static int measure_codecs(const pb_calibrate_params *p, const unsigned char *data, size_t n,
                          pb_calibration *out, struct pb_error *err) {
  size_t cap = ZSTD_compressBound(n);
  size_t bcap = n + BLOSC_MAX_OVERHEAD;
  if (bcap > cap) cap = bcap;
  unsigned char *comp = pb_alloc(cap), *dec = pb_alloc(n);
  double *rounds = calloc((size_t)p->rounds, sizeof *rounds);
  int rc = PB_OK;
  if (comp == NULL || dec == NULL || rounds == NULL) {
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    goto done;
  }
  size_t csize = ZSTD_compress(comp, cap, data, n, 3);
  if (ZSTD_isError(csize)) {
    rc = pb_error_set(err, PB_ECODEC, "zstd: %s", ZSTD_getErrorName(csize));
    goto done;
  }
  out->zstd_ratio = (double)n / (double)csize;
  ZSTD_DCtx *dctx = ZSTD_createDCtx();
  for (int r = -1; r < p->rounds; r++) {
    progress(p, "zstd decompression", r + 2, p->rounds + 1);
    int64_t t0 = pb_now_ns();
    size_t got = ZSTD_decompressDCtx(dctx, dec, n, comp, csize);
    int64_t t1 = pb_now_ns();
    if (ZSTD_isError(got) || got != n || memcmp(dec, data, n) != 0) {
      ZSTD_freeDCtx(dctx);
      rc = pb_error_set(err, PB_ECODEC, "zstd round trip failed during calibration");
      goto done;
    }
    if (r >= 0) rounds[r] = (double)n / ((double)(t1 - t0) / 1e9) / GB;
  }
  ZSTD_freeDCtx(dctx);
  if ((rc = finish_value(&out->zstd_gbps, rounds, p->rounds)) != PB_OK) goto done;

  /* blosc works on buffers below 2 GB; the default buffer is far smaller. */
  int bsize = blosc_compress_ctx(5, BLOSC_SHUFFLE, 2, n, data, comp, bcap, "lz4", 0, 1);
  if (bsize <= 0) {
    rc = pb_error_set(err, PB_ECODEC, "blosc compression failed during calibration");
    goto done;
  }
  out->blosc_ratio = (double)n / (double)bsize;
  for (int r = -1; r < p->rounds; r++) {
    progress(p, "blosc decompression", r + 2, p->rounds + 1);
    int64_t t0 = pb_now_ns();
    int got = blosc_decompress_ctx(comp, dec, n, 1);
    int64_t t1 = pb_now_ns();
    if (got != (int)n || memcmp(dec, data, n) != 0) {
      rc = pb_error_set(err, PB_ECODEC, "blosc round trip failed during calibration");
      goto done;
    }
    if (r >= 0) rounds[r] = (double)n / ((double)(t1 - t0) / 1e9) / GB;
  }
  rc = finish_value(&out->blosc_gbps, rounds, p->rounds);
done:
  free(rounds);
  pb_free(comp, cap);
  pb_free(dec, n);
  return rc;
}

/* ---- timer ---------------------------------------------------------------------------------- */

static void measure_timer(pb_calibration *out) {
  const int n = 1000000;
  int64_t min_step = INT64_MAX;
  int64_t t0 = pb_now_ns(), prev = t0;
  for (int i = 0; i < n; i++) {
    int64_t t = pb_now_ns();
    if (t > prev && t - prev < min_step) min_step = t - prev;
    prev = t;
  }
  out->timer_overhead_ns = (double)(prev - t0) / n;
  struct timespec res;
  clock_getres(CLOCK_MONOTONIC, &res);
  double getres = (double)res.tv_sec * 1e9 + (double)res.tv_nsec;
  double seen = min_step == INT64_MAX ? getres : (double)min_step;
  out->timer_resolution_ns = seen > getres ? seen : getres;
}

static void set_nan(pb_calib_value *v) {
  memset(v, 0, sizeof *v);
  v->value = NAN;
}

/* The GPU through the CUDA engine module: copy bandwidths (median of rounds, each the best copy
 * of about 0.2 s) and, with matmul, the cuBLASLt bfloat16 and TF32 peaks. */
static int measure_gpu(const pb_calibrate_params *p, pb_calibration *out, double *rounds,
                       struct pb_error *err) {
  static const struct {
    const char *kind, *label;
    size_t off;
  } copies[] = {
      {"h2d_pinned", "GPU copy host->device (pinned)", offsetof(pb_calibration, gpu_h2d_pinned_gbps)},
      {"h2d_pageable", "GPU copy host->device (pageable)", offsetof(pb_calibration, gpu_h2d_pageable_gbps)},
      {"d2h_pinned", "GPU copy device->host (pinned)", offsetof(pb_calibration, gpu_d2h_pinned_gbps)},
      {"d2d", "GPU copy device->device", offsetof(pb_calibration, gpu_d2d_gbps)},
  };
  pb_gpu_info gi;
  PB_RETURN_NOT_OK(pb_engine_gpu_info(&gi, err));
  snprintf(out->gpu_name, sizeof out->gpu_name, "%s", gi.name);
  snprintf(out->gpu_versions, sizeof out->gpu_versions, "%s", gi.versions);
  out->gpu_cc_major = gi.cc_major, out->gpu_cc_minor = gi.cc_minor;
  out->gpu_multiprocessors = gi.multiprocessors;
  out->gpu_memory_bytes = gi.memory_bytes;
  for (size_t k = 0; k < sizeof copies / sizeof copies[0]; k++) {
    for (int r = 0; r < p->rounds; r++) {
      progress(p, copies[k].label, r + 1, p->rounds);
      PB_RETURN_NOT_OK(pb_engine_gpu_bandwidth(copies[k].kind, 0, 0.2, &rounds[r], err));
    }
    PB_RETURN_NOT_OK(finish_value((pb_calib_value *)(void *)((char *)out + copies[k].off), rounds,
                                  p->rounds));
  }
  if (p->matmul) {
    double g = NAN;
    progress(p, "GPU matmul bfloat16 (cuBLASLt)", 1, 2);
    PB_RETURN_NOT_OK(pb_engine_device_peak_gflops("cuda", "bfloat16", 0, 1.0, &g, err));
    out->gpu_bf16_gflops.value = g;
    out->gpu_bf16_gflops.s.n = 1;
    progress(p, "GPU matmul tf32 (cuBLASLt)", 2, 2);
    PB_RETURN_NOT_OK(pb_engine_device_peak_gflops("cuda", "tf32", 0, 1.0, &g, err));
    out->gpu_tf32_gflops.value = g;
    out->gpu_tf32_gflops.s.n = 1;
  }
  out->gpu_measured = 1;
  return PB_OK;
}

/* ---- JPEG decoding ------------------------------------------------------------------------- */

#define JPEG_ROUND_S 0.5 /* each round decodes the set over and over for at least this long */
#define JPEG_GPU_BATCH 64

/* The CPU's rate: the loader over the set's image folder, the evaluation crop into float16
 * batches (the crops are made from uint8 pixels, as Track 3's), on `threads` workers. The files
 * are in the page cache after the warm-up epoch: this is decoding, not storage. */
static int jpeg_cpu_rate(const pb_calibrate_params *p, const char *folder, int threads,
                         pb_calibration *out, double *rounds, struct pb_error *err) {
  pb_loader_params lp = PB_LOADER_PARAMS_DEFAULTS;
  lp.format = "imagefolder";
  lp.batch_size = 32;
  lp.workers = threads;
  lp.transform = PB_TRANSFORM_CENTER_CROP_RESIZE;
  lp.out_dtype = PB_OUT_FLOAT16;
  pb_loader *ld = NULL;
  PB_RETURN_NOT_OK(pb_loader_new(folder, &lp, &ld, err));
  int rc = PB_OK;
  int64_t epoch = 0;
  for (int r = -1; r < p->rounds && rc == PB_OK; r++) { /* round -1: warm-up */
    progress(p, "JPEG decode and crop (CPU)", r + 2, p->rounds + 1);
    int64_t images = 0, t0 = pb_now_ns(), t1 = t0;
    do {
      if ((rc = pb_loader_reset(ld, epoch++, err)) != PB_OK) break;
      pb_batch *b = NULL;
      while ((rc = pb_loader_next(ld, &b, err)) == PB_OK && b != NULL) {
        images += b->shape[0];
        pb_batch_free(b);
      }
      t1 = pb_now_ns();
    } while (rc == PB_OK && (double)(t1 - t0) / 1e9 < JPEG_ROUND_S);
    if (rc == PB_OK && r >= 0) rounds[r] = (double)images / ((double)(t1 - t0) / 1e9);
  }
  pb_loader_free(ld);
  if (rc == PB_OK) rc = finish_value(&out->jpeg_cpu_ips, rounds, p->rounds);
  return rc;
}

/* The GPU's rate: pb_jpeg_gpu_crops over the set's bytes, JPEG_GPU_BATCH images a call (decode
 * by nvJPEG, the same crop as a kernel, the crops copied back to the host). A failure here is
 * kept as jpeg_gpu_why, not an error of the calibration. */
static void jpeg_gpu_rate(const pb_calibrate_params *p, const pb_jpeg_item *items, int n,
                          pb_calibration *out, double *rounds) {
  if (pb_jpeg_gpu_status(out->jpeg_gpu_why, sizeof out->jpeg_gpu_why) != PB_OK) return;
  int per = n < JPEG_GPU_BATCH ? n : JPEG_GPU_BATCH;
  size_t crop_bytes = (size_t)per * 3 * 224 * 224;
  uint8_t *crops = malloc(crop_bytes);
  if (crops == NULL) {
    snprintf(out->jpeg_gpu_why, sizeof out->jpeg_gpu_why, "out of memory for %d crops", per);
    return;
  }
  struct pb_error e = {{0}};
  int rc = PB_OK, at = 0;
  for (int r = -1; r < p->rounds && rc == PB_OK; r++) {
    progress(p, "JPEG decode and crop (GPU, nvJPEG)", r + 2, p->rounds + 1);
    int64_t images = 0, t0 = pb_now_ns(), t1 = t0;
    do {
      int k = n - at < per ? n - at : per;
      rc = pb_jpeg_gpu_crops(items + at, k, 256, 224, NULL, crops, &e);
      images += k;
      at = (at + k) % n;
      t1 = pb_now_ns();
    } while (rc == PB_OK && (double)(t1 - t0) / 1e9 < JPEG_ROUND_S);
    if (rc == PB_OK && r >= 0) rounds[r] = (double)images / ((double)(t1 - t0) / 1e9);
  }
  free(crops);
  if (rc == PB_OK) rc = finish_value(&out->jpeg_gpu_ips, rounds, p->rounds);
  if (rc != PB_OK) {
    set_nan(&out->jpeg_gpu_ips);
    snprintf(out->jpeg_gpu_why, sizeof out->jpeg_gpu_why, "%s", e.message[0] ? e.message : "failed");
  } else {
    out->jpeg_gpu_why[0] = '\0';
  }
}

/* The standard set is written by gen (gen --preset imagenet's settings, seed 42) into a
 * temporary folder beside the scratch file, named so that one left by a killed calibration is
 * swept by the next, and removed at the end. */
static int measure_jpeg(const pb_calibrate_params *p, int threads, pb_calibration *out,
                        double *rounds, struct pb_error *err) {
  char base[4200], dir[4400], folder[4600];
  snprintf(base, sizeof base, "%s/pipebench-calibrate-jpeg", p->dir ? p->dir : pb_tmp_dir());
  pb_temp_sweep(base);
  if (pb_temp_sibling(base, dir, sizeof dir) != PB_OK)
    return pb_error_set(err, PB_EINVAL, "%s: path too long", base);
  if (mkdir(dir, 0700) != 0)
    return pb_error_set(err, -errno, "%s: cannot make the JPEG set's folder: %s", dir, strerror(errno));
  pb_gen_params gp = PB_GEN_PARAMS_DEFAULTS;
  gp.rows = p->jpeg_images;
  gp.shape[PB_C] = 3, gp.shape[PB_Y] = 375, gp.shape[PB_X] = 500;
  gp.dtype = PB_UINT8;
  gp.seed = 42;
  gp.formats = "imagefolder";
  gp.write.options = "imagefolder:classes=1,imagefolder:quality=95,gen:content=photo,gen:sizes=vary";
  progress(p, "JPEG set (gen)", 1, 1);
  int rc = pb_gen(dir, &gp, err);
  pb_gen_format_path(dir, "imagefolder", folder, sizeof folder);
  pb_jpeg_item *items = calloc((size_t)p->jpeg_images, sizeof *items);
  void **data = calloc((size_t)p->jpeg_images, sizeof *data);
  size_t *sizes = calloc((size_t)p->jpeg_images, sizeof *sizes);
  if (rc == PB_OK && (items == NULL || data == NULL || sizes == NULL))
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  /* the files, in name order, for the GPU */
  char **classes = NULL, **names = NULL;
  size_t nclasses = 0, nnames = 0;
  int n = 0;
  if (rc == PB_OK) rc = pb_list_dir(folder, &classes, &nclasses, err);
  for (size_t c = 0; rc == PB_OK && c < nclasses; c++) {
    char cdir[8192];
    snprintf(cdir, sizeof cdir, "%s/%s", folder, classes[c]);
    if ((rc = pb_list_dir(cdir, &names, &nnames, err)) != PB_OK) break;
    for (size_t i = 0; rc == PB_OK && i < nnames && n < p->jpeg_images; i++) {
      char path[12288];
      snprintf(path, sizeof path, "%s/%s", cdir, names[i]);
      if ((rc = pb_read_file(path, &data[n], &sizes[n], err)) != PB_OK) break;
      items[n].data = data[n], items[n].size = sizes[n], items[n].name = NULL;
      out->jpeg_set_bytes += (double)sizes[n];
      n++;
    }
    pb_free_names(names, nnames);
  }
  if (classes != NULL) pb_free_names(classes, nclasses);
  if (rc == PB_OK && n != p->jpeg_images)
    rc = pb_error_set(err, PB_EIO, "%s: %d JPEGs where gen wrote %d", folder, n, p->jpeg_images);
  if (rc == PB_OK) {
    out->jpeg_images = n;
    out->jpeg_threads = threads;
    rc = jpeg_cpu_rate(p, folder, threads, out, rounds, err);
  }
  if (rc == PB_OK && p->gpu) jpeg_gpu_rate(p, items, n, out, rounds);
  if (rc == PB_OK && !p->gpu)
    snprintf(out->jpeg_gpu_why, sizeof out->jpeg_gpu_why, "the GPU was left out (--no-gpu)");
  for (int i = 0; data != NULL && i < p->jpeg_images; i++)
    if (data[i] != NULL) pb_free(data[i], sizes[i]);
  free(items), free(data), free(sizes);
  pb_remove_tree(dir);
  return rc;
}

int pb_calibrate(const pb_calibrate_params *params, pb_calibration *out, struct pb_error *err) {
  pb_calibrate_params p = PB_CALIBRATE_PARAMS_DEFAULTS;
  if (params != NULL) p = *params;
  if (p.rounds < 1 || p.memory_bytes < ((size_t)1 << 20) || p.file_bytes < ((size_t)1 << 20))
    return pb_error_set(err, PB_EINVAL, "calibration needs rounds >= 1 and buffers >= 1 MiB");
  if (p.jpeg_images < 0 || p.jpeg_images > 100000)
    return pb_error_set(err, PB_EINVAL, "calibration's JPEG set: 0 to 100000 images, not %d",
                        p.jpeg_images);
  memset(out, 0, sizeof *out);
  set_nan(&out->matmul_f32_gflops);
  set_nan(&out->matmul_bf16_gflops);
  set_nan(&out->gpu_bf16_gflops);
  set_nan(&out->gpu_tf32_gflops);
  set_nan(&out->gpu_h2d_pinned_gbps);
  set_nan(&out->gpu_h2d_pageable_gbps);
  set_nan(&out->gpu_d2h_pinned_gbps);
  set_nan(&out->gpu_d2d_gbps);
  set_nan(&out->jpeg_cpu_ips);
  set_nan(&out->jpeg_gpu_ips);
  /* before the environment is read: loading the CUDA module registers its versions there */
  int gpu = p.gpu && pb_engine_device_status("cuda", out->gpu_why, sizeof out->gpu_why) == 0;
  int64_t start = pb_now_ns();
  PB_RETURN_NOT_OK(pb_env_collect(&out->env, err));
  measure_timer(out);

  size_t n = p.memory_bytes & ~(size_t)63;
  unsigned char *src = pb_alloc(n), *dst = pb_alloc(n);
  double *rounds = calloc((size_t)p.rounds, sizeof *rounds);
  int rc = PB_OK;
  if (src == NULL || dst == NULL || rounds == NULL) {
    rc = pb_error_set(err, PB_ENOMEM, "out of memory for %zu-byte calibration buffers", n);
    goto done;
  }
  fill_image_like((uint16_t *)src, n / 2, 42);
  memset(dst, 0, n); /* touch every page before timing */

  int threads = p.threads > 0 ? p.threads : out->env.cpu_cores;
  if (threads < 1) threads = 1;
  if (threads > 256) threads = 256;
  out->memcpy_threads = threads;
  copy_once(dst, src, n, 1);
  for (int r = 0; r < p.rounds; r++) {
    progress(&p, "memory copy (1 thread)", r + 1, p.rounds);
    rounds[r] = copy_once(dst, src, n, 1);
  }
  if ((rc = finish_value(&out->memcpy_gbps, rounds, p.rounds)) != PB_OK) goto done;
  copy_once(dst, src, n, threads);
  for (int r = 0; r < p.rounds; r++) {
    progress(&p, "memory copy (all threads)", r + 1, p.rounds);
    rounds[r] = copy_once(dst, src, n, threads);
  }
  if ((rc = finish_value(&out->memcpy_mt_gbps, rounds, p.rounds)) != PB_OK) goto done;

  size_t codec_bytes = n < ((size_t)64 << 20) ? n : ((size_t)64 << 20);
  if ((rc = measure_codecs(&p, src, codec_bytes, out, err)) != PB_OK) goto done;
  if ((rc = measure_file(&p, out, err)) != PB_OK) goto done;

  if (p.matmul) {
    /* oneDNN matmul on all cores: the compute limit model throughputs are judged against.
     * bfloat16 fails cleanly where the CPU has no native support and stays NaN. */
    double g = NAN;
    progress(&p, "matmul float32", 1, 2);
    if (pb_engine_peak_gflops("float32", threads, 1.0, &g, NULL) == PB_OK) {
      out->matmul_f32_gflops.value = g;
      out->matmul_f32_gflops.s.n = 1;
    }
    progress(&p, "matmul bfloat16", 2, 2);
    if (pb_engine_peak_gflops("bfloat16", threads, 1.0, &g, NULL) == PB_OK) {
      out->matmul_bf16_gflops.value = g;
      out->matmul_bf16_gflops.s.n = 1;
    }
  }
  if (gpu && (rc = measure_gpu(&p, out, rounds, err)) != PB_OK) goto done;
  if (p.jpeg_images > 0 && (rc = measure_jpeg(&p, threads, out, rounds, err)) != PB_OK) goto done;
  if (p.endpoint != NULL) {
    pb_endpoint_params ep = PB_ENDPOINT_PARAMS_DEFAULTS;
    ep.url = p.endpoint;
    ep.read.insecure = p.insecure;
    ep.rounds = p.rounds;
    progress(&p, "endpoint", 1, 1);
    if ((rc = pb_endpoint_calibrate(&ep, &out->endpoint, err)) != PB_OK) goto done;
    out->endpoint_measured = 1;
  }
  out->seconds = (double)(pb_now_ns() - start) / 1e9;
done:
  free(rounds);
  pb_free(src, n);
  pb_free(dst, n);
  return rc;
}

/* ---- JSON ----------------------------------------------------------------------------------- */

static void add_num(cJSON *o, const char *key, double v) {
  if (isfinite(v)) cJSON_AddNumberToObject(o, key, v);
  else cJSON_AddNullToObject(o, key);
}

static void add_value(cJSON *root, const char *key, const char *unit, const pb_calib_value *v) {
  cJSON *o = cJSON_AddObjectToObject(root, key);
  add_num(o, "value", v->value);
  cJSON_AddStringToObject(o, "unit", unit);
  cJSON_AddNumberToObject(o, "n", (double)v->s.n);
  if (v->s.n > 1) {
    add_num(o, "min", v->s.min);
    add_num(o, "max", v->s.max);
    add_num(o, "cv", v->s.cv);
    cJSON_AddBoolToObject(o, "unstable", v->s.unstable != 0);
  }
}

static void add_summary(cJSON *root, const char *key, const char *unit, const pb_summary *v) {
  pb_calib_value cv = {v->p50, *v};
  add_value(root, key, unit, &cv);
}

static void add_endpoint(cJSON *root, const pb_endpoint_calibration *e) {
  cJSON *o = cJSON_AddObjectToObject(root, "endpoint");
  cJSON_AddStringToObject(o, "url", e->location); /* credentials masked */
  cJSON_AddStringToObject(o, "scheme", e->scheme);
  cJSON_AddNumberToObject(o, "object_bytes", (double)e->object_bytes);
  cJSON_AddNumberToObject(o, "round_bytes", (double)e->round_bytes);
  cJSON_AddNumberToObject(o, "streams", e->streams);
  cJSON_AddNumberToObject(o, "requests", (double)e->requests);
  add_summary(o, "rtt_ms", "ms", &e->rtt_ms);
  add_summary(o, "single_stream_mbps", "MB/s", &e->single_mbps);
  add_summary(o, "many_streams_mbps", "MB/s", &e->many_mbps);
  add_num(o, "seconds", e->seconds);
}

char *pb_calibration_to_json(const pb_calibration *cal) {
  cJSON *root = cJSON_CreateObject();
  if (root == NULL) return NULL;
  cJSON_AddStringToObject(root, "kind", "pipebench.calibration");
  add_value(root, "memcpy_gbps", "GB/s", &cal->memcpy_gbps);
  add_value(root, "memcpy_mt_gbps", "GB/s", &cal->memcpy_mt_gbps);
  cJSON_AddNumberToObject(root, "memcpy_threads", cal->memcpy_threads);
  add_value(root, "read_warm_gbps", "GB/s", &cal->read_warm_gbps);
  add_value(root, "read_cold_gbps", "GB/s", &cal->read_cold_gbps);
  cJSON_AddBoolToObject(root, "cold_evicted", cal->cold_evicted != 0);
  add_value(root, "zstd_gbps", "GB/s", &cal->zstd_gbps);
  add_num(root, "zstd_ratio", cal->zstd_ratio);
  add_value(root, "blosc_gbps", "GB/s", &cal->blosc_gbps);
  add_num(root, "blosc_ratio", cal->blosc_ratio);
  add_value(root, "matmul_f32_gflops", "GFLOP/s", &cal->matmul_f32_gflops);
  add_value(root, "matmul_bf16_gflops", "GFLOP/s", &cal->matmul_bf16_gflops);
  add_num(root, "timer_overhead_ns", cal->timer_overhead_ns);
  add_num(root, "timer_resolution_ns", cal->timer_resolution_ns);
  add_num(root, "seconds", cal->seconds);
  if (cal->gpu_measured) {
    cJSON *g = cJSON_AddObjectToObject(root, "cuda");
    cJSON_AddStringToObject(g, "name", cal->gpu_name);
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", cal->gpu_cc_major, cal->gpu_cc_minor);
    cJSON_AddStringToObject(g, "compute_capability", cc);
    cJSON_AddNumberToObject(g, "multiprocessors", cal->gpu_multiprocessors);
    cJSON_AddNumberToObject(g, "memory_bytes", (double)cal->gpu_memory_bytes);
    cJSON_AddStringToObject(g, "versions", cal->gpu_versions);
    add_value(g, "matmul_bf16_gflops", "GFLOP/s", &cal->gpu_bf16_gflops);
    add_value(g, "matmul_tf32_gflops", "GFLOP/s", &cal->gpu_tf32_gflops);
    add_value(g, "h2d_pinned_gbps", "GB/s", &cal->gpu_h2d_pinned_gbps);
    add_value(g, "h2d_pageable_gbps", "GB/s", &cal->gpu_h2d_pageable_gbps);
    add_value(g, "d2h_pinned_gbps", "GB/s", &cal->gpu_d2h_pinned_gbps);
    add_value(g, "d2d_gbps", "GB/s", &cal->gpu_d2d_gbps);
  } else if (cal->gpu_why[0]) {
    cJSON *g = cJSON_AddObjectToObject(root, "cuda");
    cJSON_AddStringToObject(g, "unavailable", cal->gpu_why);
  }
  if (cal->endpoint_measured) add_endpoint(root, &cal->endpoint);
  if (cal->jpeg_images > 0) {
    cJSON *j = cJSON_AddObjectToObject(root, "jpeg");
    cJSON_AddStringToObject(j, "set", "photo-like RGB JPEGs of about 500x375, quality 95 (gen "
                            "--preset imagenet, seed 42), to 224x224 evaluation crops (shorter "
                            "side to 256)");
    cJSON_AddNumberToObject(j, "images", cal->jpeg_images);
    cJSON_AddNumberToObject(j, "bytes", cal->jpeg_set_bytes);
    cJSON_AddNumberToObject(j, "cpu_threads", cal->jpeg_threads);
    add_value(j, "cpu_images_per_s", "images/s", &cal->jpeg_cpu_ips);
    add_value(j, "gpu_images_per_s", "images/s", &cal->jpeg_gpu_ips);
    if (cal->jpeg_gpu_why[0]) cJSON_AddStringToObject(j, "gpu_unavailable", cal->jpeg_gpu_why);
  }
  cJSON *env = cJSON_AddObjectToObject(root, "env");
  char tmp[64];
  for (int i = 0; i < pb_env_field_count(); i++) {
    const char *k, *v;
    pb_env_field(&cal->env, i, &k, &v, tmp, sizeof tmp);
    cJSON_AddStringToObject(env, k, v);
  }
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  return text;
}

static void get_value(const cJSON *root, const char *key, pb_calib_value *v) {
  set_nan(v);
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, key);
  const cJSON *val = cJSON_GetObjectItemCaseSensitive(o, "value");
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "n");
  if (cJSON_IsNumber(val)) v->value = val->valuedouble;
  if (cJSON_IsNumber(n) && n->valuedouble >= 0) v->s.n = (size_t)n->valuedouble;
}

static double get_num(const cJSON *root, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

int pb_calibration_load(const char *path, pb_calibration *out, struct pb_error *err) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "rb");
  if (f == NULL) return pb_error_set(err, errno == ENOENT ? PB_ENOTFOUND : -errno, "%s: %s", path, strerror(errno));
  char *text = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 8192;
      char *nt = realloc(text, cap);
      if (nt == NULL) {
        free(text);
        fclose(f);
        return pb_error_set(err, PB_ENOMEM, "out of memory");
      }
      text = nt;
    }
    size_t r = fread(text + len, 1, 4096, f);
    len += r;
    if (r < 4096) break;
  }
  fclose(f);
  text[len] = '\0';
  cJSON *root = NULL;
  int prc = pb_json_parse(text, len, path, &root, err);
  free(text);
  if (prc != PB_OK) return prc;
  const cJSON *kind = cJSON_GetObjectItemCaseSensitive(root, "kind");
  if ( !cJSON_IsString(kind) || strcmp(kind->valuestring, "pipebench.calibration") != 0) {
    cJSON_Delete(root);
    return pb_error_set(err, PB_EFORMAT, "%s: not a pipebench calibration file", path);
  }
  get_value(root, "memcpy_gbps", &out->memcpy_gbps);
  get_value(root, "memcpy_mt_gbps", &out->memcpy_mt_gbps);
  get_value(root, "read_warm_gbps", &out->read_warm_gbps);
  get_value(root, "read_cold_gbps", &out->read_cold_gbps);
  get_value(root, "zstd_gbps", &out->zstd_gbps);
  get_value(root, "blosc_gbps", &out->blosc_gbps);
  get_value(root, "matmul_f32_gflops", &out->matmul_f32_gflops);
  get_value(root, "matmul_bf16_gflops", &out->matmul_bf16_gflops);
  out->memcpy_threads = (int)get_num(root, "memcpy_threads");
  out->zstd_ratio = get_num(root, "zstd_ratio");
  out->blosc_ratio = get_num(root, "blosc_ratio");
  out->timer_overhead_ns = get_num(root, "timer_overhead_ns");
  out->timer_resolution_ns = get_num(root, "timer_resolution_ns");
  out->seconds = get_num(root, "seconds");
  set_nan(&out->gpu_bf16_gflops);
  set_nan(&out->gpu_tf32_gflops);
  set_nan(&out->gpu_h2d_pinned_gbps);
  set_nan(&out->gpu_h2d_pageable_gbps);
  set_nan(&out->gpu_d2h_pinned_gbps);
  set_nan(&out->gpu_d2d_gbps);
  const cJSON *gpu = cJSON_GetObjectItemCaseSensitive(root, "cuda");
  const cJSON *gname = cJSON_GetObjectItemCaseSensitive(gpu, "name");
  const cJSON *gwhy = cJSON_GetObjectItemCaseSensitive(gpu, "unavailable");
  if (cJSON_IsString(gname)) {
    out->gpu_measured = 1;
    snprintf(out->gpu_name, sizeof out->gpu_name, "%s", gname->valuestring);
    const cJSON *gv = cJSON_GetObjectItemCaseSensitive(gpu, "versions");
    if (cJSON_IsString(gv)) snprintf(out->gpu_versions, sizeof out->gpu_versions, "%s", gv->valuestring);
    get_value(gpu, "matmul_bf16_gflops", &out->gpu_bf16_gflops);
    get_value(gpu, "matmul_tf32_gflops", &out->gpu_tf32_gflops);
    get_value(gpu, "h2d_pinned_gbps", &out->gpu_h2d_pinned_gbps);
    get_value(gpu, "h2d_pageable_gbps", &out->gpu_h2d_pageable_gbps);
    get_value(gpu, "d2h_pinned_gbps", &out->gpu_d2h_pinned_gbps);
    get_value(gpu, "d2d_gbps", &out->gpu_d2d_gbps);
  } else if (cJSON_IsString(gwhy)) {
    snprintf(out->gpu_why, sizeof out->gpu_why, "%s", gwhy->valuestring);
  }
  set_nan(&out->jpeg_cpu_ips);
  set_nan(&out->jpeg_gpu_ips);
  const cJSON *jpeg = cJSON_GetObjectItemCaseSensitive(root, "jpeg");
  if (cJSON_IsObject(jpeg)) {
    double ni = get_num(jpeg, "images"), nt = get_num(jpeg, "cpu_threads");
    out->jpeg_images = isfinite(ni) && ni > 0 && ni <= 100000 ? (int)ni : 0;
    out->jpeg_threads = isfinite(nt) && nt > 0 && nt <= 4096 ? (int)nt : 0;
    out->jpeg_set_bytes = get_num(jpeg, "bytes");
    get_value(jpeg, "cpu_images_per_s", &out->jpeg_cpu_ips);
    get_value(jpeg, "gpu_images_per_s", &out->jpeg_gpu_ips);
    const cJSON *jwhy = cJSON_GetObjectItemCaseSensitive(jpeg, "gpu_unavailable");
    if (cJSON_IsString(jwhy))
      snprintf(out->jpeg_gpu_why, sizeof out->jpeg_gpu_why, "%s", jwhy->valuestring);
  }
  /* the machine it was measured on, as pb_env_field wrote it */
  const cJSON *envj = cJSON_GetObjectItemCaseSensitive(root, "env");
  const cJSON *host = cJSON_GetObjectItemCaseSensitive(envj, "hostname");
  const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(envj, "cpu_model");
  const cJSON *cores = cJSON_GetObjectItemCaseSensitive(envj, "cpu_cores");
  const cJSON *when = cJSON_GetObjectItemCaseSensitive(envj, "timestamp_utc");
  if (cJSON_IsString(host)) snprintf(out->env.hostname, sizeof out->env.hostname, "%s", host->valuestring);
  if (cJSON_IsString(cpu)) snprintf(out->env.cpu_model, sizeof out->env.cpu_model, "%s", cpu->valuestring);
  if (cJSON_IsString(cores)) out->env.cpu_cores = atoi(cores->valuestring);
  if (cJSON_IsString(when)) snprintf(out->env.timestamp_utc, sizeof out->env.timestamp_utc, "%s", when->valuestring);
  const cJSON *ev = cJSON_GetObjectItemCaseSensitive(root, "cold_evicted");
  out->cold_evicted = cJSON_IsTrue(ev);
  cJSON_Delete(root);
  if (!isfinite(out->memcpy_gbps.value))
    return pb_error_set(err, PB_EFORMAT, "%s: calibration file lacks memcpy_gbps", path);
  return PB_OK;
}
