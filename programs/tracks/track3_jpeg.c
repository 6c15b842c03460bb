/* Track 3's feeder for the GPU JPEG path (track3_jpeg.h). Workers claim images one at a time in
 * batch order; a batch's slot in a ring of `prefetch` slots is filled by whichever workers took
 * its images and handed over whole, in order. Each worker keeps its own dataset handle for the
 * CPU crops (the imagefolder backend's decoder is per handle). A batch's CPU share is fixed when
 * its first image is claimed, and spread evenly over its positions so that each of the GPU
 * decoder's parts gets its part of the JPEGs. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tracks/track3_jpeg.h"
#include "pipebench/format.h"
#include "pipebench/loader.h"

typedef struct slot {
  int cpu_n;       /* images of this batch the workers crop on the CPU by choice */
  pb_jpeg_item *items;
  char (*names)[1024];
  void **own;      /* what to free per item */
  size_t *own_size; /* pb_location_read's size, or 0 for malloc'd pixels */
  int done;
  int rc;
  struct pb_error err;
} slot;

struct pb__t3_jpeg {
  char root[4096];
  char **rel;   /* each image's path under root */
  int64_t count;
  int64_t *order;
  int batch, workers, prefetch, resize, crop;
  int cpu_share;     /* images per batch cropped on the CPU although nvJPEG could decode them */
  int share_fixed;   /* PIPEBENCH_JPEG_CPU_SHARE or pb__t3_jpeg_set_share: no tuning */
  int64_t cpu_chosen; /* images cropped on the CPU by choice (the share) */
  int64_t cpu_ns;     /* workers' time on CPU crops */
  int64_t batches;   /* per pass over the order */
  slot *slots;
  pthread_mutex_t mu;
  pthread_cond_t ready, space;
  int64_t next_pos;  /* next image position to claim (batch * batch size + k) */
  int64_t consumed;  /* batches released (all but the last two handed out) */
  int64_t current;   /* the batch handed out last, or -1 */
  int stop;
  int64_t cpu_decoded;
  pthread_t *th;
  pb_dataset **ds;
  int started;
};

int pb__t3_jpeg_for_gpu(const unsigned char *p, size_t n) {
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
    if (m == 0xC0 || m == 0xC1) /* baseline or extended sequential, Huffman */
      return i + 9 < n && (p[i + 9] == 1 || p[i + 9] == 3);
    if ((m >= 0xC2 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) || m == 0xDA)
      return 0; /* progressive, lossless, arithmetic, or a scan before any frame */
    i += 2 + len;
  }
  return 0;
}

static void slot_clear(slot *s, int batch) {
  for (int k = 0; k < batch; k++) {
    if (s->own[k] != NULL) {
      if (s->own_size[k] > 0) pb_free(s->own[k], s->own_size[k]);
      else free(s->own[k]);
    }
    s->own[k] = NULL;
    s->own_size[k] = 0;
    memset(&s->items[k], 0, sizeof s->items[k]);
  }
  s->done = 0;
  s->rc = PB_OK;
}

/* Image idx's evaluation crop, made on the CPU, into item k of slot s. */
static int cpu_crop(pb__t3_jpeg *j, pb_dataset *ds, slot *s, int k, int64_t idx,
                    struct pb_error *err) {
  pb_jpeg_item *it = &s->items[k];
  size_t bytes = (size_t)3 * (size_t)j->crop * (size_t)j->crop;
  unsigned char *px = malloc(bytes);
  if (px == NULL) return pb_error_set(err, PB_ENOMEM, "%s: out of memory", it->name);
  s->own[k] = px, s->own_size[k] = 0;
  pb_image_meta m;
  PB_RETURN_NOT_OK(pb_dataset_meta(ds, idx, &m, err));
  int channels = (int)m.shape[PB_C];
  if (m.dtype != PB_UINT8 || (channels != 1 && channels != 3)) /* before the crop is made */
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: %s with %d channels (8-bit grey or RGB only "
                        "with --decode gpu)", it->name, pb_dtype_name(m.dtype), channels);
  PB_RETURN_NOT_OK(pb_eval_crop_u8(ds, idx, j->resize, j->crop, px, bytes, NULL, err));
  it->data = px, it->size = (size_t)channels * (size_t)j->crop * (size_t)j->crop, it->decoded = 2;
  it->channels = channels, it->height = it->width = j->crop;
  return PB_OK;
}

/* Whether position k of a batch with cpu_n CPU crops is one: cpu_n positions spread evenly. */
static int cpu_position(int k, int cpu_n, int batch) {
  return cpu_n > 0 && (int)(((int64_t)k * cpu_n) % batch) < cpu_n;
}

/* Image idx into item k of slot s: its bytes, or its crop made on the CPU when the image is no
 * JPEG nvJPEG decodes or its position is one of the batch's CPU share. *cpu, *chosen: 1 when
 * cropped on the CPU, and when by choice. */
static int fill(pb__t3_jpeg *j, pb_dataset *ds, slot *s, int k, int64_t idx, int64_t *cpu,
                int64_t *chosen, struct pb_error *err) {
  char *name = s->names[k];
  snprintf(name, sizeof s->names[k], "%s/%s", j->root, j->rel[idx]);
  pb_jpeg_item *it = &s->items[k];
  it->name = name;
  if (cpu_position(k, s->cpu_n, j->batch)) {
    *chosen = 1;
    return cpu_crop(j, ds, s, k, idx, err);
  }
  void *data = NULL;
  size_t size = 0;
  PB_RETURN_NOT_OK(pb_location_read(name, (size_t)1 << 30, &data, &size, err));
  if (pb__t3_jpeg_for_gpu(data, size)) {
    s->own[k] = data, s->own_size[k] = size ? size : 1;
    it->data = data, it->size = size;
    return PB_OK;
  }
  pb_free(data, size);
  (*cpu)++;
  return cpu_crop(j, ds, s, k, idx, err);
}

typedef struct worker_arg {
  pb__t3_jpeg *j;
  int w;
} worker_arg;

/* The workers run at a lower priority (nice PIPEBENCH_JPEG_WORKER_NICE, default 10; 0 keeps
 * the process's): the thread feeding nvJPEG spends its time in host calls that a busy CPU
 * stretches, and the GPU decoder is the larger part of the batch, so the CPU crops take what
 * time is left over. The value adds to the thread's own; Linux keeps one per thread. */
static void worker_nice(void) {
  const char *v = getenv("PIPEBENCH_JPEG_WORKER_NICE");
  int nice = v != NULL && *v != '\0' ? atoi(v) : 10;
  if (nice <= 0) return;
  id_t tid = (id_t)syscall(SYS_gettid);
  errno = 0;
  int now = getpriority(PRIO_PROCESS, tid); /* -1 is also a nice value: errno tells */
  if (errno != 0) return;
  now += nice;
  setpriority(PRIO_PROCESS, tid, now > 19 ? 19 : now); /* a refusal leaves it as it was */
}

static void *worker_main(void *arg) {
  pb__t3_jpeg *j = ((worker_arg *)arg)->j;
  pb_dataset *ds = j->ds[((worker_arg *)arg)->w];
  free(arg);
  worker_nice();
  pthread_mutex_lock(&j->mu);
  for (;;) {
    while (!j->stop && j->next_pos / j->batch >= j->consumed + j->prefetch)
      pthread_cond_wait(&j->space, &j->mu);
    if (j->stop) break;
    int64_t pos = j->next_pos++, q = pos / j->batch;
    int k = (int)(pos % j->batch);
    slot *s = &j->slots[q % j->prefetch];
    if (k == 0) s->cpu_n = j->cpu_share; /* the batch's share, before any of its images is taken */
    pthread_mutex_unlock(&j->mu);
    struct pb_error e;
    e.message[0] = '\0';
    int64_t cpu = 0, chosen = 0, t0 = pb_now_ns();
    int64_t idx = j->order[(q % j->batches) * j->batch + k];
    int rc = fill(j, ds, s, k, idx, &cpu, &chosen, &e);
    int64_t t1 = pb_now_ns();
    pthread_mutex_lock(&j->mu);
    j->cpu_decoded += cpu;
    j->cpu_chosen += chosen;
    if (cpu + chosen > 0) j->cpu_ns += t1 - t0;
    if (rc != PB_OK && s->rc == PB_OK) {
      s->rc = rc;
      s->err = e;
    }
    s->done++;
    pthread_cond_broadcast(&j->ready);
  }
  pthread_mutex_unlock(&j->mu);
  return NULL;
}

static void stop_workers(pb__t3_jpeg *j) {
  if (!j->started) return;
  pthread_mutex_lock(&j->mu);
  j->stop = 1;
  pthread_cond_broadcast(&j->space);
  pthread_mutex_unlock(&j->mu);
  for (int w = 0; w < j->workers; w++) pthread_join(j->th[w], NULL);
  j->started = 0;
}

int pb__t3_jpeg_reset(pb__t3_jpeg *j, struct pb_error *err) {
  stop_workers(j);
  for (int p = 0; p < j->prefetch; p++) slot_clear(&j->slots[p], j->batch);
  j->next_pos = j->consumed = 0;
  j->current = -1;
  j->stop = 0;
  for (int w = 0; w < j->workers; w++) {
    worker_arg *a = malloc(sizeof *a);
    if (a != NULL) a->j = j, a->w = w; /* before the thread starts: it reads them at once */
    if (a == NULL || pthread_create(&j->th[w], NULL, worker_main, a) != 0) {
      free(a);
      j->workers = w; /* the ones started are joined by stop_workers */
      j->started = w > 0;
      stop_workers(j);
      return pb_error_set(err, PB_ENOMEM, "track 3: cannot start JPEG worker %d", w);
    }
    j->started = 1;
  }
  return PB_OK;
}

int pb__t3_jpeg_next(pb__t3_jpeg *j, const pb_jpeg_item **items, int *n, struct pb_error *err) {
  pthread_mutex_lock(&j->mu);
  if (j->current > j->consumed) { /* the batch before the last one handed out is done with */
    slot_clear(&j->slots[j->consumed % j->prefetch], j->batch);
    j->consumed++;
    pthread_cond_broadcast(&j->space);
  }
  int64_t q = j->current + 1;
  slot *s = &j->slots[q % j->prefetch];
  while (s->done < j->batch) pthread_cond_wait(&j->ready, &j->mu);
  j->current = q;
  int rc = s->rc;
  if (rc != PB_OK && err != NULL) *err = s->err;
  pthread_mutex_unlock(&j->mu);
  *items = s->items;
  *n = j->batch;
  return rc;
}

/* The counts are the workers' (under the mutex) while they run. */
int64_t pb__t3_jpeg_cpu_decoded(pb__t3_jpeg *j) {
  pthread_mutex_lock(&j->mu);
  int64_t n = j->cpu_decoded + j->cpu_chosen;
  pthread_mutex_unlock(&j->mu);
  return n;
}

int64_t pb__t3_jpeg_cpu_chosen(pb__t3_jpeg *j) {
  pthread_mutex_lock(&j->mu);
  int64_t n = j->cpu_chosen;
  pthread_mutex_unlock(&j->mu);
  return n;
}

int pb__t3_jpeg_share(pb__t3_jpeg *j) {
  pthread_mutex_lock(&j->mu);
  int n = j->cpu_share;
  pthread_mutex_unlock(&j->mu);
  return n;
}

void pb__t3_jpeg_set_share(pb__t3_jpeg *j, int cpu_n, int fixed) {
  pthread_mutex_lock(&j->mu);
  j->cpu_share = cpu_n < 0 ? 0 : cpu_n > j->batch ? j->batch : cpu_n;
  j->share_fixed = fixed;
  pthread_mutex_unlock(&j->mu);
}

/* One step's signals into the share (--decode auto). A wait for the feeder means the workers are
 * behind: fewer CPU crops. No wait for the feeder and none for the model's pace (the crop that
 * last used the decoder's slot) means the GPU decoder held the step: more CPU crops. Otherwise
 * the model is the limit and the share stays. Backing off is twice as fast as taking on, so the
 * share settles just under what the workers can keep up with. */
void pb__t3_jpeg_tune(pb__t3_jpeg *j, int64_t feeder_wait_ns, int64_t model_wait_ns) {
  pthread_mutex_lock(&j->mu);
  if (!j->share_fixed) {
    int up = j->batch / 128 > 1 ? j->batch / 128 : 1;
    if (feeder_wait_ns > 1000000) j->cpu_share -= 2 * up;
    else if (model_wait_ns < 1000000) j->cpu_share += up;
    j->cpu_share = j->cpu_share < 0 ? 0 : j->cpu_share > j->batch ? j->batch : j->cpu_share;
  }
  pthread_mutex_unlock(&j->mu);
}

double pb__t3_jpeg_cpu_ms(pb__t3_jpeg *j) {
  pthread_mutex_lock(&j->mu);
  int64_t n = j->cpu_decoded + j->cpu_chosen, ns = j->cpu_ns;
  pthread_mutex_unlock(&j->mu);
  return n > 0 ? (double)ns / 1e6 / (double)n : 0.0;
}

void pb__t3_jpeg_free(pb__t3_jpeg *j) {
  if (j == NULL) return;
  stop_workers(j);
  for (int p = 0; j->slots != NULL && p < j->prefetch; p++) {
    slot *s = &j->slots[p];
    if (s->own != NULL && s->own_size != NULL && s->items != NULL) slot_clear(s, j->batch);
    free(s->items), free(s->names), free(s->own), free(s->own_size);
  }
  for (int w = 0; j->ds != NULL && w < j->workers; w++) pb_dataset_free(j->ds[w]);
  for (int64_t i = 0; j->rel != NULL && i < j->count; i++) free(j->rel[i]);
  free(j->rel), free(j->order), free(j->slots), free(j->th), free(j->ds);
  pthread_mutex_destroy(&j->mu);
  pthread_cond_destroy(&j->ready);
  pthread_cond_destroy(&j->space);
  free(j);
}

/* The images' names and one shuffled order (splitmix64 from the seed). */
static int index_images(pb__t3_jpeg *j, pb_dataset *ds, uint64_t seed, struct pb_error *err) {
  j->count = pb_dataset_count(ds);
  if (j->count < j->batch)
    return pb_error_set(err, PB_EINVAL, "%s: %lld images, fewer than batch %d", j->root,
                        (long long)j->count, j->batch);
  j->rel = calloc((size_t)j->count, sizeof *j->rel);
  j->order = malloc((size_t)j->count * sizeof *j->order);
  if (j->rel == NULL || j->order == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  for (int64_t i = 0; i < j->count; i++) {
    pb_image_meta m;
    PB_RETURN_NOT_OK(pb_dataset_meta(ds, i, &m, err));
    if ((j->rel[i] = strdup(m.name)) == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    j->order[i] = i;
  }
  uint64_t x = seed;
  for (int64_t i = j->count - 1; i > 0; i--) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    int64_t r = (int64_t)(z % (uint64_t)(i + 1)), t = j->order[i];
    j->order[i] = j->order[r], j->order[r] = t;
  }
  j->batches = j->count / j->batch;
  return PB_OK;
}

int pb__t3_jpeg_new(const char *path, int batch, int resize, int crop, int workers, int prefetch,
                    uint64_t seed, pb__t3_jpeg **out, struct pb_error *err) {
  *out = NULL;
  pb__t3_jpeg *j = calloc(1, sizeof *j);
  if (j == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->ready, NULL);
  pthread_cond_init(&j->space, NULL);
  j->batch = batch, j->workers = workers < 1 ? 1 : workers, j->prefetch = prefetch < 3 ? 3 : prefetch;
  j->resize = resize, j->crop = crop;
  j->current = -1;
  pb_dataset *ds = NULL;
  int rc = pb_dataset_open(path, "imagefolder", &ds, err);
  if (rc == PB_OK) {
    snprintf(j->root, sizeof j->root, "%s", pb_dataset_path(ds));
    rc = index_images(j, ds, seed, err);
  }
  pb_dataset_free(ds);
  j->slots = calloc((size_t)j->prefetch, sizeof *j->slots);
  j->th = calloc((size_t)j->workers, sizeof *j->th);
  j->ds = calloc((size_t)j->workers, sizeof *j->ds);
  if (rc == PB_OK && (j->slots == NULL || j->th == NULL || j->ds == NULL))
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  for (int p = 0; rc == PB_OK && p < j->prefetch; p++) {
    slot *s = &j->slots[p];
    s->items = calloc((size_t)batch, sizeof *s->items);
    s->names = calloc((size_t)batch, sizeof *s->names);
    s->own = calloc((size_t)batch, sizeof *s->own);
    s->own_size = calloc((size_t)batch, sizeof *s->own_size);
    if (!s->items || !s->names || !s->own || !s->own_size)
      rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  for (int w = 0; rc == PB_OK && w < j->workers; w++)
    rc = pb_dataset_open(path, "imagefolder", &j->ds[w], err);
  if (rc == PB_OK) rc = pb__t3_jpeg_reset(j, err);
  if (rc != PB_OK) {
    pb__t3_jpeg_free(j);
    return rc;
  }
  *out = j;
  return PB_OK;
}
