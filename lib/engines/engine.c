/* The engine handle: parameter checks, the table of backends, tensors, weight export (.npy). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <oneapi/dnnl/dnnl.h>

#include "common/paths.h"
#include "common/env.h"
#include "engines/cuda/cuda_module.h"
#include "engines/engine_internal.h"

/* ---- the backends ------------------------------------------------------------------------- */

/* Every backend this build knows, one row each: its device, how to get its table (the CUDA one
 * comes from a module opened at run time, and may be unavailable with a reason), its matrix
 * product peak and the versions of the libraries it runs on. Device lists, "available" texts,
 * auto-resolution and peaks all come from this table. */
typedef struct backend_row {
  const char *device, *name;
  const pb__engine_vtable *(*get)(char *why, size_t why_len);
  int (*peak)(const char *dtype, int threads, double seconds, double *gflops, struct pb_error *err);
  void (*versions)(char *buf, size_t n);
} backend_row;

static const pb__engine_vtable *onednn_get(char *why, size_t why_len) {
  (void)why, (void)why_len;
  return &pb__onednn_backend;
}
static void onednn_versions(char *buf, size_t n) {
  const dnnl_version_t *v = dnnl_version();
  snprintf(buf, n, "oneDNN %d.%d.%d", v->major, v->minor, v->patch);
}

/* The CUDA module, opened once. Search order: $PIPEBENCH_CUDA_MODULE, next to libpipebench (or
 * the program linking it statically), then the install library directory. Never closed: the
 * CUDA runtime inside it must outlive every engine. */
static struct {
  pthread_once_t once;
  const pb__cuda_module *m;
  char why[512];
} cuda = {PTHREAD_ONCE_INIT, NULL, ""};

/* What the module found at load, for every table's environment from then on. */
static pb__cuda_device cuda_dev;
static void cuda_env_versions(char *buf, size_t n) { snprintf(buf, n, "%s", cuda_dev.versions); }
static void cuda_env_cudnn(char *buf, size_t n) {
  int64_t v = cuda_dev.cudnn_version;
  snprintf(buf, n, "%lld.%lld.%lld", (long long)(v / 10000), (long long)(v % 10000 / 100),
           (long long)(v % 100));
}
static void cuda_env_gpu(char *buf, size_t n) { snprintf(buf, n, "%s", cuda_dev.name); }
static void cuda_register_versions(void) {
  if (cuda.m->device(&cuda_dev, NULL) != 0) return;
  pb__env_register_version("cuda_version", cuda_env_versions);
  pb__env_register_version("cudnn_version", cuda_env_cudnn);
  pb__env_register_version("gpu_name", cuda_env_gpu);
}

static void cuda_load(void) {
  char cand[3][4096];
  int n = 0;
  const char *env = getenv("PIPEBENCH_CUDA_MODULE");
  if (env != NULL && *env) snprintf(cand[n++], sizeof cand[0], "%s", env);
  char dir[4000];
  if (pb__library_dir(dir, sizeof dir) == 0)
    snprintf(cand[n++], sizeof cand[0], "%s/%s", dir, PB__CUDA_MODULE_FILE);
#ifdef PB_INSTALL_LIBDIR
  snprintf(cand[n++], sizeof cand[0], "%s/%s", PB_INSTALL_LIBDIR, PB__CUDA_MODULE_FILE);
#endif
  for (int i = 0; i < n; i++) {
    if (access(cand[i], F_OK) != 0) {
      if (i == 0 && env != NULL && *env) {
        snprintf(cuda.why, sizeof cuda.why, "PIPEBENCH_CUDA_MODULE=%s: no such file", env);
        return;
      }
      continue;
    }
    void *h = dlopen(cand[i], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
      /* e.g. "libcudnn.so.9: cannot open shared object file": the libraries are missing here */
      snprintf(cuda.why, sizeof cuda.why, "cannot load the CUDA module %s: %s", cand[i], dlerror());
      return;
    }
    pb__cuda_open_fn open_fn;
    void *sym = dlsym(h, PB__CUDA_ENTRY);
    memcpy(&open_fn, &sym, sizeof open_fn);
    if (sym == NULL) {
      snprintf(cuda.why, sizeof cuda.why, "%s has no %s", cand[i], PB__CUDA_ENTRY);
      return;
    }
    char why[400] = "";
    cuda.m = open_fn(PB__CUDA_ABI, why, sizeof why);
    if (cuda.m == NULL) snprintf(cuda.why, sizeof cuda.why, "%s", why);
    else cuda_register_versions();
    return;
  }
  snprintf(cuda.why, sizeof cuda.why,
           "this build has no CUDA module (%s not found next to libpipebench%s; set "
           "PIPEBENCH_CUDA_MODULE to its path)",
           PB__CUDA_MODULE_FILE,
#ifdef PB_INSTALL_LIBDIR
           " or in " PB_INSTALL_LIBDIR
#else
           ""
#endif
  );
}

static const pb__cuda_module *cuda_module(char *why, size_t why_len) {
  pthread_once(&cuda.once, cuda_load);
  if (cuda.m == NULL && why != NULL && why_len > 0) snprintf(why, why_len, "%s", cuda.why);
  return cuda.m;
}
static const pb__engine_vtable *cuda_get(char *why, size_t why_len) {
  const pb__cuda_module *m = cuda_module(why, why_len);
  return m ? m->backend : NULL;
}
static int cuda_peak(const char *dtype, int threads, double seconds, double *gflops,
                     struct pb_error *err) {
  (void)threads;
  char why[512];
  const pb__cuda_module *m = cuda_module(why, sizeof why);
  if (m == NULL) return pb_error_set(err, PB_EUNSUPPORTED, "cuda unavailable: %s", why);
  return m->peak_gflops(dtype ? dtype : "bfloat16", seconds, gflops, err);
}
static void cuda_versions(char *buf, size_t n) {
  pb__cuda_device d;
  const pb__cuda_module *m = cuda_module(NULL, 0);
  if (m != NULL && m->device(&d, NULL) == 0) snprintf(buf, n, "%s", d.versions);
}

static const backend_row backends[] = {
    {"cpu", "onednn", onednn_get, pb__onednn_peak_gflops, onednn_versions},
    {"cuda", "cudnn", cuda_get, cuda_peak, cuda_versions},
};
#define N_BACKENDS ((int)(sizeof backends / sizeof backends[0]))

int pb_engine_model_count(void) { return pb__model_count(); }
const char *pb_engine_model_name(int i) { return pb__model_name(i); }
const char *pb_engine_model_list(void) { return "embed, resnet50, vit_b_16"; }
const char *pb_engine_dtype_list(void) { return "float32, tf32 (cuda), bfloat16, float16"; }

/* "auto, cpu, cuda": each device once, in table order (whether usable here or not). */
static char device_list[128];
static pthread_once_t device_list_once = PTHREAD_ONCE_INIT;
static void device_list_make(void) {
  size_t n = sizeof device_list;
  size_t off = (size_t)snprintf(device_list, n, "auto");
  for (int i = 0; i < N_BACKENDS && off < n; i++) {
    int seen = 0;
    for (int j = 0; j < i; j++) seen |= strcmp(backends[j].device, backends[i].device) == 0;
    if (!seen) off += (size_t)snprintf(device_list + off, n - off, ", %s", backends[i].device);
  }
}
const char *pb_engine_device_list(void) {
  pthread_once(&device_list_once, device_list_make);
  return device_list;
}

/* "onednn on cpu, cudnn on cuda (unavailable: no CUDA driver ...)" */
static void available_into(char *buf, size_t n) {
  size_t off = 0;
  buf[0] = '\0';
  for (int i = 0; i < N_BACKENDS && off < n; i++) {
    char why[512] = "";
    const pb__engine_vtable *vt = backends[i].get(why, sizeof why);
    off += (size_t)snprintf(buf + off, n - off, "%s%s on %s%s%s%s", i ? ", " : "",
                            backends[i].name, backends[i].device, vt ? "" : " (unavailable: ",
                            vt ? "" : why, vt ? "" : ")");
  }
}

const pb__engine_vtable *pb__engine_backend(const char *device, char *why, size_t why_len) {
  for (int i = 0; i < N_BACKENDS; i++)
    if (strcmp(backends[i].device, device) == 0) return backends[i].get(why, why_len);
  if (why != NULL && why_len > 0) snprintf(why, why_len, "unknown device '%s'", device);
  return NULL;
}

/* Splits "cuda:3" into its device ("cuda", compared over len bytes) and ordinal; a name with no
 * ":N" has ordinal 0. 0 when the ordinal is not a number in [0, 1023]. */
static int split_device(const char *device, size_t *len, int *index) {
  const char *colon = strchr(device, ':');
  *len = colon ? (size_t)(colon - device) : strlen(device);
  *index = 0;
  if (colon == NULL) return 1;
  char *end;
  long v = strtol(colon + 1, &end, 10);
  if (colon[1] < '0' || colon[1] > '9' || *end != '\0' || v < 0 || v > 1023) return 0;
  *index = (int)v;
  return 1;
}

static int device_is(const char *backend_device, const char *device, size_t len) {
  return strlen(backend_device) == len && strncmp(backend_device, device, len) == 0;
}

const char *pb_engine_resolve_device(const char *device) {
  if (device == NULL || strcmp(device, "auto") == 0) {
    /* the first device after the CPU whose backend is usable here */
    for (int i = 0; i < N_BACKENDS; i++)
      if (strcmp(backends[i].device, "cpu") != 0 && backends[i].get(NULL, 0) != NULL)
        return backends[i].device;
    return "cpu";
  }
  size_t len;
  int index;
  if (!split_device(device, &len, &index)) return NULL;
  for (int i = 0; i < N_BACKENDS; i++)
    if (device_is(backends[i].device, device, len)) {
      /* an ordinal only where a device has several (cpu is one device) */
      if (strchr(device, ':') != NULL && strcmp(backends[i].device, "cpu") == 0) return NULL;
      return backends[i].device;
    }
  return NULL;
}

int pb_engine_device_status(const char *device, char *why, size_t why_len) {
  const char *d = pb_engine_resolve_device(device);
  if (d == NULL) {
    if (why != NULL && why_len > 0)
      snprintf(why, why_len, "unknown device '%s' (available: %s)", device,
               pb_engine_device_list());
    return PB_EINVAL;
  }
  if (why != NULL && why_len > 0) why[0] = '\0';
  return pb__engine_backend(d, why, why_len) != NULL ? 0 : PB_EUNSUPPORTED;
}

int pb_engine_gpu_info(pb_gpu_info *info, struct pb_error *err) {
  memset(info, 0, sizeof *info);
  char why[512];
  const pb__cuda_module *m = cuda_module(why, sizeof why);
  if (m == NULL) return pb_error_set(err, PB_EUNSUPPORTED, "cuda unavailable: %s", why);
  pb__cuda_device d;
  PB_RETURN_NOT_OK(m->device(&d, err));
  snprintf(info->name, sizeof info->name, "%s", d.name);
  info->cc_major = d.cc_major, info->cc_minor = d.cc_minor;
  info->multiprocessors = d.sms;
  info->memory_bytes = d.memory_bytes;
  info->l2_bytes = d.l2_bytes;
  snprintf(info->versions, sizeof info->versions, "%s", d.versions);
  return 0;
}

int pb_engine_gpu_bandwidth(const char *kind, size_t bytes, double seconds, double *gbps,
                            struct pb_error *err) {
  *gbps = 0;
  char why[512];
  const pb__cuda_module *m = cuda_module(why, sizeof why);
  if (m == NULL) return pb_error_set(err, PB_EUNSUPPORTED, "cuda unavailable: %s", why);
  return m->bandwidth(kind, bytes, seconds, gbps, err);
}

int pb_engine_device_peak_gflops(const char *device, const char *dtype, int threads,
                                 double seconds, double *gflops, struct pb_error *err) {
  *gflops = 0;
  const char *d = pb_engine_resolve_device(device);
  if (d == NULL)
    return pb_error_set(err, PB_EINVAL, "unknown device '%s' (available: %s)", device,
                        pb_engine_device_list());
  for (int i = 0; i < N_BACKENDS; i++)
    if (strcmp(backends[i].device, d) == 0)
      return backends[i].peak(dtype, threads, seconds, gflops, err);
  return pb_error_set(err, PB_EUNSUPPORTED, "no backend for device %s", d);
}

static int engine_new(const pb_engine_params *params, int device_index,
                      const pb__engine_vtable *vt, pb__graph *g, pb_engine **out,
                      struct pb_error *err);

int pb_engine_new(const pb_engine_params *params, pb_engine **out, struct pb_error *err) {
  if (out == NULL) return pb_error_set(err, PB_EINVAL, "out is NULL");
  *out = NULL;
  pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
  if (params != NULL) p = *params;
  if (p.model == NULL) p.model = "embed";
  const char *device = pb_engine_resolve_device(p.device);
  if (device == NULL)
    return pb_error_set(err, PB_EINVAL, "unknown device '%s' (available: %s; a GPU by number as "
                        "cuda:N)", p.device, pb_engine_device_list());
  size_t dlen;
  int device_index = 0;
  if (p.device != NULL) split_device(p.device, &dlen, &device_index);
  const char *dtype = p.dtype ? p.dtype : "float32";
  if (strcmp(dtype, "float32") != 0 && strcmp(dtype, "bfloat16") != 0 &&
      strcmp(dtype, "float16") != 0 && strcmp(dtype, "tf32") != 0)
    return pb_error_set(err, PB_EINVAL, "unknown dtype '%s' (available: %s)", dtype,
                        pb_engine_dtype_list());
  int known = 0;
  for (int i = 0; i < pb__model_count(); i++) known |= strcmp(pb__model_name(i), p.model) == 0;
  if (!known)
    return pb_error_set(err, PB_EINVAL, "unknown model '%s' (available: %s)", p.model,
                        pb_engine_model_list());
  if (p.batch_size < 1)
    return pb_error_set(err, PB_EINVAL, "batch size must be at least 1, not %d", p.batch_size);
  if (p.threads < 0)
    return pb_error_set(err, PB_EINVAL, "threads must be >= 0, not %d", p.threads);
  if (p.loss != NULL && strcmp(p.loss, "cross_entropy") != 0 && strcmp(p.loss, "mse") != 0)
    return pb_error_set(err, PB_EINVAL, "unknown loss '%s' (available: cross_entropy, mse)", p.loss);
  if (!(p.momentum >= 0.0f && p.momentum < 1.0f) || !(p.weight_decay >= 0.0f))
    return pb_error_set(err, PB_EINVAL, "momentum must lie in [0, 1) and weight decay be >= 0 "
                        "(not %g and %g)", (double)p.momentum, (double)p.weight_decay);
  const pb__engine_vtable *vt = NULL;
  char why[512] = "";
  int named = 0;
  for (int i = 0; i < N_BACKENDS && vt == NULL; i++) {
    if (strcmp(backends[i].device, device) != 0) continue;
    if (p.backend != NULL && strcmp(backends[i].name, p.backend) != 0) continue;
    named = 1;
    vt = backends[i].get(why, sizeof why);
  }
  if (vt == NULL) {
    char avail[1024];
    available_into(avail, sizeof avail);
    if (!named)
      return pb_error_set(err, PB_EINVAL, "no backend '%s' for device %s (available: %s)",
                          p.backend ? p.backend : "(null)", device, avail);
    return pb_error_set(err, PB_EUNSUPPORTED, "device %s is unavailable here: %s", device, why);
  }
  if (strcmp(dtype, "tf32") == 0 && strcmp(device, "cuda") != 0)
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "dtype tf32 exists on cuda only (the %s backend computes float32 in "
                        "float32)", vt->name);
  int c = p.channels, h = p.height, w = p.width, dc, dh, dw;
  pb__model_default_input(p.model, &dc, &dh, &dw);
  if (c == 0) c = dc;
  if (h == 0) h = dh;
  if (w == 0) w = dw;

  pb__graph *g = NULL;
  PB_RETURN_NOT_OK(pb__graph_build(p.model, c, h, w, p.seed, &g, err));
  p.device = device, p.dtype = dtype;
  return engine_new(&p, device_index, vt, g, out, err);
}

static int engine_new(const pb_engine_params *params, int device_index,
                      const pb__engine_vtable *vt, pb__graph *g, pb_engine **out,
                      struct pb_error *err) {
  const pb_engine_params *pp = params;
  pb_engine_params p = *pp;
  if (vt == NULL) vt = &pb__onednn_backend;
  if (p.device == NULL) p.device = vt->device;
  if (p.dtype == NULL) p.dtype = "float32";
  const char *device = p.device, *dtype = p.dtype;
  int loss_mse = p.loss != NULL && strcmp(p.loss, "mse") == 0;
  int c = (int)g->tensors[0].c, h = (int)g->tensors[0].h, w = (int)g->tensors[0].w;
  pb_engine *e = calloc(1, sizeof *e);
  if (e == NULL) {
    pb__graph_free(g);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  e->vt = vt;
  e->seed = p.seed;
  e->training = p.training != 0;
  e->loss_mse = loss_mse;
  e->momentum = p.momentum, e->weight_decay = p.weight_decay;
  e->device_index = device_index;
  pb_engine_info *in = &e->info;
  snprintf(in->model, sizeof in->model, "%s", g->model);
  snprintf(in->backend, sizeof in->backend, "%s", vt->name);
  snprintf(in->device, sizeof in->device, "%s", device);
  snprintf(in->dtype, sizeof in->dtype, "%s", dtype);
  in->batch_size = p.batch_size;
  in->channels = c, in->height = h, in->width = w;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  in->threads = p.threads > 0 ? p.threads : (ncpu > 0 ? (int)ncpu : 1);
  in->outputs = g->outputs;
  in->parameters = g->parameters;
  in->flops_per_image = g->flops;
  int rc = vt->create(e, g, err);
  pb__graph_free(g);
  if (rc != 0) {
    free(e);
    return rc;
  }
  if (in->versions[0] == '\0') /* the backend did not say: ask its row */
    for (int i = 0; i < N_BACKENDS; i++)
      if (strcmp(backends[i].name, vt->name) == 0) backends[i].versions(in->versions, sizeof in->versions);
  in->bytes_total = in->bytes_weights + in->bytes_activations + in->bytes_scratch;
  *out = e;
  return 0;
}

int pb__engine_new_graph(const pb_engine_params *params, const pb__engine_vtable *vt,
                         pb__graph *g, pb_engine **out, struct pb_error *err) {
  return engine_new(params, 0, vt, g, out, err);
}

void pb_engine_free(pb_engine *e) {
  if (e == NULL) return;
  pb_tensor_free(e->host_in);
  pb_tensor_free(e->host_out);
  if (e->native != NULL && e->vt->native_release != NULL) e->vt->native_release(e);
  if (e->native_host != NULL) {
    const pb_engine_info *i = &e->info;
    pb_free(e->native_host,
            (size_t)i->batch_size * (size_t)i->channels * (size_t)i->height * (size_t)i->width * 4);
  }
  e->vt->destroy(e);
  free(e);
}

void pb_engine_get_info(const pb_engine *e, pb_engine_info *info) { *info = e->info; }

static size_t role_bytes(const pb_engine *e, pb_tensor_role role) {
  const pb_engine_info *i = &e->info;
  size_t n = (size_t)i->batch_size;
  switch (role) {
  case PB_TENSOR_INPUT: return n * (size_t)i->channels * (size_t)i->height * (size_t)i->width * 4;
  case PB_TENSOR_OUTPUT: return n * (size_t)i->outputs * 4;
  case PB_TENSOR_TARGET: return e->loss_mse ? n * (size_t)i->outputs * 4 : n * 4;
  }
  return 0;
}

int pb_engine_tensor_new(pb_engine *e, pb_tensor_role role, pb_tensor **out, struct pb_error *err) {
  *out = NULL;
  if (role != PB_TENSOR_INPUT && role != PB_TENSOR_OUTPUT && role != PB_TENSOR_TARGET)
    return pb_error_set(err, PB_EINVAL, "unknown tensor role %d", (int)role);
  pb_tensor *t = calloc(1, sizeof *t);
  if (t == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  t->e = e;
  t->role = role;
  t->bytes = role_bytes(e, role);
  t->ptr = e->vt->tensor_alloc(e, t->bytes);
  if (t->ptr == NULL) {
    free(t);
    return pb_error_set(err, PB_ENOMEM, "cannot allocate a %zu-byte tensor", role_bytes(e, role));
  }
  memset(t->ptr, 0, e->vt->host_visible ? t->bytes : 0);
  /* tensors count as the engine's activations while they live */
  e->info.bytes_activations += (int64_t)t->bytes;
  e->info.bytes_total += (int64_t)t->bytes;
  *out = t;
  return 0;
}

void pb_tensor_free(pb_tensor *t) {
  if (t == NULL) return;
  t->e->info.bytes_activations -= (int64_t)t->bytes;
  t->e->info.bytes_total -= (int64_t)t->bytes;
  t->e->vt->tensor_release(t->e, t->ptr, t->bytes);
  free(t);
}

size_t pb_tensor_bytes(const pb_tensor *t) { return t->bytes; }
void *pb_tensor_host_data(pb_tensor *t) { return t->e->vt->host_visible ? t->ptr : NULL; }

int pb_tensor_write(pb_tensor *t, const void *src, size_t size, struct pb_error *err) {
  if (size != t->bytes)
    return pb_error_set(err, PB_EINVAL, "tensor holds %zu bytes, not %zu", t->bytes, size);
  return t->e->vt->tensor_write(t->e, t->ptr, src, size, err);
}

int pb_tensor_read(const pb_tensor *t, void *dst, size_t size, struct pb_error *err) {
  if (size != t->bytes)
    return pb_error_set(err, PB_EINVAL, "tensor holds %zu bytes, not %zu", t->bytes, size);
  return t->e->vt->tensor_read(t->e, dst, t->ptr, size, err);
}

static int check_tensor(const pb_engine *e, const pb_tensor *t, pb_tensor_role role,
                        const char *what, struct pb_error *err) {
  if (t == NULL || t->e != e || t->role != role)
    return pb_error_set(err, PB_EINVAL, "%s is not a %s tensor of this engine", what, what);
  return 0;
}

int pb_engine_forward(pb_engine *e, const pb_tensor *input, pb_tensor *output,
                      struct pb_error *err) {
  PB_RETURN_NOT_OK(check_tensor(e, input, PB_TENSOR_INPUT, "input", err));
  PB_RETURN_NOT_OK(check_tensor(e, output, PB_TENSOR_OUTPUT, "output", err));
  return e->vt->forward(e, input->ptr, output->ptr, err);
}

int pb_engine_train_step(pb_engine *e, const pb_tensor *input, const pb_tensor *target, float lr,
                         float *loss, struct pb_error *err) {
  if (!e->training)
    return pb_error_set(err, PB_ESTATE, "engine was built without training (params.training)");
  PB_RETURN_NOT_OK(check_tensor(e, input, PB_TENSOR_INPUT, "input", err));
  PB_RETURN_NOT_OK(check_tensor(e, target, PB_TENSOR_TARGET, "target", err));
  return e->vt->train_step(e, input->ptr, target->ptr, lr, loss, err);
}

int pb_engine_synchronize(pb_engine *e, struct pb_error *err) { return e->vt->synchronize(e, err); }

int pb_engine_forward_host(pb_engine *e, const float *input, size_t input_count, float *output,
                           size_t output_count, struct pb_error *err) {
  if (e->host_in == NULL) {
    PB_RETURN_NOT_OK(pb_engine_tensor_new(e, PB_TENSOR_INPUT, &e->host_in, err));
    PB_RETURN_NOT_OK(pb_engine_tensor_new(e, PB_TENSOR_OUTPUT, &e->host_out, err));
  }
  PB_RETURN_NOT_OK(pb_tensor_write(e->host_in, input, input_count * sizeof(float), err));
  PB_RETURN_NOT_OK(pb_engine_forward(e, e->host_in, e->host_out, err));
  PB_RETURN_NOT_OK(pb_engine_synchronize(e, err));
  return pb_tensor_read(e->host_out, output, output_count * sizeof(float), err);
}

/* ---- raw pixels in (the GPU data path; the host fallback) ---------------------------------- */

const pb_allocator *pb_engine_host_allocator(pb_engine *e) {
  return e != NULL ? e->vt->host_allocator : NULL;
}

const pb_allocator *pb_device_host_allocator(const char *device, struct pb_error *err) {
  if (device == NULL || strcmp(device, "cuda") != 0) {
    pb_error_set(err, PB_EUNSUPPORTED, "pinned host memory: device '%s' (cuda only)",
                 device ? device : "(null)");
    return NULL;
  }
  char why[512] = "";
  const pb__engine_vtable *vt = cuda_get(why, sizeof why);
  if (vt == NULL || vt->host_allocator == NULL) {
    pb_error_set(err, PB_EUNSUPPORTED, "cuda unavailable: %s", why[0] ? why : "no pinned memory");
    return NULL;
  }
  return vt->host_allocator;
}

static int check_native(const pb_engine *e, const pb_native_batch *in, struct pb_error *err) {
  if (in == NULL || in->pixels == NULL)
    return pb_error_set(err, PB_EINVAL, "forward_native: no pixels");
  if (pb_dtype_size(in->dtype) == 0)
    return pb_error_set(err, PB_EINVAL, "forward_native: unknown pixel type %d", (int)in->dtype);
  if (in->n != e->info.batch_size)
    return pb_error_set(err, PB_EINVAL,
                        "forward_native: %lld images, but the engine was built for batch %d",
                        (long long)in->n, e->info.batch_size);
  if (in->c < 1 || in->z < 1 || in->h < 1 || in->w < 1)
    return pb_error_set(err, PB_EINVAL, "forward_native: image shape %lldx%lldx%lldx%lld",
                        (long long)in->c, (long long)in->z, (long long)in->h, (long long)in->w);
  if (!(in->std > 0.0f) || !isfinite(in->std) || !isfinite(in->mean))
    return pb_error_set(err, PB_EINVAL, "forward_native: std must be > 0 and mean finite");
  if ((in->channel_mean == NULL) != (in->channel_std == NULL))
    return pb_error_set(err, PB_EINVAL, "forward_native: channel_mean and channel_std go together");
  if (in->channel_mean != NULL) {
    if (in->c > PB_NATIVE_MAX_CHANNELS)
      return pb_error_set(err, PB_EINVAL,
                          "forward_native: per-channel normalisation of %lld channels (at most %d)",
                          (long long)in->c, PB_NATIVE_MAX_CHANNELS);
    for (int64_t c = 0; c < in->c; c++)
      if (!(in->channel_std[c] > 0.0f) || !isfinite(in->channel_std[c]) ||
          !isfinite(in->channel_mean[c]))
        return pb_error_set(err, PB_EINVAL,
                            "forward_native: channel %lld: std must be > 0 and mean finite",
                            (long long)c);
  }
  return 0;
}

/* The host conversion: pb_image_to_chw per image, then ((v - mean) / std) inside the image;
 * the padding stays 0. dst holds n x C x H x W floats of the engine's input. */
static int native_to_input(const pb_engine *e, const pb_native_batch *in, float *dst,
                           struct pb_error *err) {
  const pb_engine_info *i = &e->info;
  int C = i->channels, H = i->height, W = i->width;
  size_t per_out = (size_t)C * (size_t)H * (size_t)W;
  size_t per_in = (size_t)(in->c * in->z * in->h * in->w) * pb_dtype_size(in->dtype);
  pb_image_meta m;
  pb_image_meta_init(&m, "batch", in->dtype, (int64_t[PB_NDIM]){1, in->c, in->z, in->h, in->w});
  /* the image's rows and columns inside the model input (pb_image_to_chw's centring) */
  int64_t oy = (in->h - H) / 2, ox = (in->w - W) / 2;
  int64_t y0 = oy < 0 ? -oy : 0, y1 = in->h - oy < H ? in->h - oy : H;
  int64_t x0 = ox < 0 ? -ox : 0, x1 = in->w - ox < W ? in->w - ox : W;
  for (int64_t b = 0; b < in->n; b++) {
    float *d = dst + (size_t)b * per_out;
    PB_RETURN_NOT_OK(pb_image_to_chw(&m, (const char *)in->pixels + (size_t)b * per_in, C, H, W,
                                     d, err));
    for (int c = 0; c < C; c++) {
      int64_t sc = c % in->c; /* the pixels' channel this input channel repeats */
      float mean = in->channel_mean != NULL ? in->channel_mean[sc] : in->mean;
      float inv = 1.0f / (in->channel_std != NULL ? in->channel_std[sc] : in->std);
      for (int64_t y = y0; y < y1; y++) {
        float *row = d + ((size_t)c * (size_t)H + (size_t)y) * (size_t)W;
        for (int64_t x = x0; x < x1; x++) row[x] = (row[x] - mean) * inv;
      }
    }
  }
  return 0;
}

int pb_engine_forward_native(pb_engine *e, const pb_native_batch *in, pb_tensor *output,
                             int64_t *h2d_ns, struct pb_error *err) {
  if (h2d_ns != NULL) *h2d_ns = 0;
  PB_RETURN_NOT_OK(check_native(e, in, err));
  PB_RETURN_NOT_OK(check_tensor(e, output, PB_TENSOR_OUTPUT, "output", err));
  if (e->vt->forward_native != NULL) return e->vt->forward_native(e, in, output->ptr, h2d_ns, err);
  const pb_engine_info *i = &e->info;
  size_t bytes =
      (size_t)i->batch_size * (size_t)i->channels * (size_t)i->height * (size_t)i->width * 4;
  if (e->vt->host_visible) { /* convert straight into an input tensor the engine keeps */
    if (e->host_in == NULL) {
      PB_RETURN_NOT_OK(pb_engine_tensor_new(e, PB_TENSOR_INPUT, &e->host_in, err));
      PB_RETURN_NOT_OK(pb_engine_tensor_new(e, PB_TENSOR_OUTPUT, &e->host_out, err));
    }
    PB_RETURN_NOT_OK(native_to_input(e, in, e->host_in->ptr, err));
  } else { /* a device without its own conversion: convert here, then copy */
    if (e->native_host == NULL && (e->native_host = pb_alloc(bytes)) == NULL)
      return pb_error_set(err, PB_ENOMEM, "out of memory (%zu bytes)", bytes);
    if (e->host_in == NULL) {
      PB_RETURN_NOT_OK(pb_engine_tensor_new(e, PB_TENSOR_INPUT, &e->host_in, err));
      PB_RETURN_NOT_OK(pb_engine_tensor_new(e, PB_TENSOR_OUTPUT, &e->host_out, err));
    }
    PB_RETURN_NOT_OK(native_to_input(e, in, e->native_host, err));
    PB_RETURN_NOT_OK(pb_tensor_write(e->host_in, e->native_host, bytes, err));
  }
  return e->vt->forward(e, e->host_in->ptr, output->ptr, err);
}

int pb_jpeg_gpu_status(char *why, size_t why_len) {
  char w[512] = "";
  const pb__cuda_module *m = cuda_module(w, sizeof w);
  if (m == NULL) {
    if (why != NULL && why_len > 0) snprintf(why, why_len, "no GPU: %s", w);
    return PB_EUNSUPPORTED;
  }
  return m->jpeg_status(why, why_len);
}

int pb_engine_forward_jpeg(pb_engine *e, const pb_jpeg_item *items, int n, int resize,
                           const float mean[3], const float std[3], pb_tensor *output,
                           int *gpu_n, struct pb_error *err) {
  int got = 0;
  if (gpu_n != NULL) *gpu_n = 0;
  const pb__cuda_module *m = cuda_module(NULL, 0);
  if (m == NULL || e->vt != m->backend)
    return pb_error_set(err, PB_EUNSUPPORTED, "forward_jpeg: a cuda engine is needed, not %s",
                        e->vt->device);
  if (items == NULL || n < 1 || resize < e->info.height)
    return pb_error_set(err, PB_EINVAL, "forward_jpeg: %d images, resize %d for a crop of %d", n,
                        resize, e->info.height);
  PB_RETURN_NOT_OK(check_tensor(e, output, PB_TENSOR_OUTPUT, "output", err));
  int rc = m->jpeg_forward(e, items, n, resize, mean, std, output->ptr, &got, err);
  if (gpu_n != NULL) *gpu_n = got;
  return rc;
}

int pb_jpeg_gpu_crops(const pb_jpeg_item *items, int n, int resize, int crop, uint8_t **full,
                      uint8_t *crops, struct pb_error *err) {
  char why[512] = "";
  const pb__cuda_module *m = cuda_module(why, sizeof why);
  if (m == NULL) return pb_error_set(err, PB_EUNSUPPORTED, "no GPU: %s", why);
  if (items == NULL || n < 1 || crop < 1 || resize < crop || crops == NULL)
    return pb_error_set(err, PB_EINVAL, "jpeg_gpu_crops: %d images, resize %d, crop %d", n,
                        resize, crop);
  return m->jpeg_crops(items, n, resize, crop, full, crops, err);
}

int pb_jpeg_gpu_stats_get(pb_jpeg_gpu_stats *out, struct pb_error *err) {
  if (out == NULL) return pb_error_set(err, PB_EINVAL, "jpeg_gpu_stats: no output");
  memset(out, 0, sizeof *out);
  char why[512] = "";
  const pb__cuda_module *m = cuda_module(why, sizeof why);
  if (m == NULL) return pb_error_set(err, PB_EUNSUPPORTED, "no GPU: %s", why);
  return m->jpeg_stats(out);
}

int pb_engine_train_native(pb_engine *e, const pb_native_batch *in, const pb_tensor *target,
                           float lr, int64_t *h2d_ns, struct pb_error *err) {
  if (h2d_ns != NULL) *h2d_ns = 0;
  if (!e->training)
    return pb_error_set(err, PB_ESTATE, "engine was built without training (params.training)");
  PB_RETURN_NOT_OK(check_native(e, in, err));
  PB_RETURN_NOT_OK(check_tensor(e, target, PB_TENSOR_TARGET, "target", err));
  if (e->vt->train_native == NULL)
    return pb_error_set(err, PB_EUNSUPPORTED, "train_native: the %s backend trains on the host "
                        "(use pb_engine_train_step)", e->vt->name);
  return e->vt->train_native(e, in, target->ptr, lr, h2d_ns, err);
}

int pb__engine_train_param(pb_engine *e, int i, char *name, size_t name_len, int64_t *count,
                           float *value, float *grad, struct pb_error *err) {
  if (e->vt->train_param == NULL || !e->training)
    return pb_error_set(err, PB_EUNSUPPORTED, "the %s backend does not offer its parameters",
                        e->vt->name);
  return e->vt->train_param(e, i, name, name_len, count, value, grad, err);
}

int pb_engine_device_mark(pb_engine *e, int64_t *host_ns, struct pb_error *err) {
  if (e->vt->device_mark == NULL)
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "the %s backend runs on the host: there is no device time", e->vt->name);
  int64_t ignored;
  return e->vt->device_mark(e, host_ns != NULL ? host_ns : &ignored, err);
}

int pb_engine_device_spans(pb_engine *e, pb_device_span *spans, size_t cap, size_t *n,
                           struct pb_error *err) {
  *n = 0;
  if (e->vt->device_spans == NULL)
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "the %s backend runs on the host: there is no device time", e->vt->name);
  if (spans == NULL && cap > 0)
    return pb_error_set(err, PB_EINVAL, "device_spans: no room for %zu spans", cap);
  return e->vt->device_spans(e, spans, cap, n, err);
}

int pb_engine_forward_time(pb_engine *e, int64_t *ns, struct pb_error *err) {
  *ns = 0;
  if (e->vt->forward_time == NULL)
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "the %s backend runs on the host: there is no device time", e->vt->name);
  return e->vt->forward_time(e, ns, err);
}

int pb_engine_copy_to_device(pb_engine *e, const void *src, size_t bytes, int64_t *ns,
                             struct pb_error *err) {
  if (ns != NULL) *ns = 0;
  if (e->vt->copy_in == NULL)
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "the %s backend computes in host memory: there is no copy to a device",
                        e->vt->name);
  if (src == NULL || bytes == 0)
    return pb_error_set(err, PB_EINVAL, "copy_to_device: nothing to copy");
  return e->vt->copy_in(e, src, bytes, ns, err);
}

/* ---- DLPack ----------------------------------------------------------------------------- */

typedef struct tensor_export {
  DLManagedTensor mt;
  int64_t shape[4];
} tensor_export;

static void tensor_export_free(DLManagedTensor *self) { free(self ? self->manager_ctx : NULL); }

int pb_tensor_to_dlpack(pb_tensor *t, DLManagedTensor **out, struct pb_error *err) {
  *out = NULL;
  if (t == NULL) return pb_error_set(err, PB_EINVAL, "pb_tensor_to_dlpack: tensor is NULL");
  tensor_export *x = calloc(1, sizeof *x);
  if (x == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  const pb_engine_info *i = &t->e->info;
  DLTensor *d = &x->mt.dl_tensor;
  d->data = t->ptr;
  d->device.device_type = t->e->vt->host_visible ? kDLCPU : kDLCUDA;
  d->device.device_id = 0;
  d->dtype.code = kDLFloat, d->dtype.bits = 32, d->dtype.lanes = 1;
  x->shape[0] = i->batch_size;
  if (t->role == PB_TENSOR_INPUT) {
    d->ndim = 4;
    x->shape[1] = i->channels, x->shape[2] = i->height, x->shape[3] = i->width;
  } else if (t->role == PB_TENSOR_TARGET && !t->e->loss_mse) {
    d->ndim = 1;
    d->dtype.code = kDLInt;
  } else {
    d->ndim = 2;
    x->shape[1] = i->outputs;
  }
  d->shape = x->shape;
  d->strides = NULL; /* compact row-major */
  d->byte_offset = 0;
  x->mt.manager_ctx = x;
  x->mt.deleter = tensor_export_free;
  *out = &x->mt;
  return 0;
}

int pb_engine_export_weights(pb_engine *e, const char *dir, struct pb_error *err) {
  /* The graph is rebuilt from the seed (weights depend only on it), so the engine need not keep
   * a float32 copy of every weight. */
  pb__graph *g = NULL;
  PB_RETURN_NOT_OK(pb__graph_build(e->info.model, e->info.channels, e->info.height,
                                   e->info.width, e->seed, &g, err));
  int rc = 0;
  for (int i = 0; i < g->n_params && rc == 0; i++) {
    const pb__param *p = &g->params[i];
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.npy", dir, p->name);
    rc = pb_npy_write_f32(path, p->data, p->shape, p->ndim, err);
  }
  pb__graph_free(g);
  return rc;
}

int pb_engine_peak_gflops(const char *dtype, int threads, double seconds, double *gflops,
                          struct pb_error *err) {
  return pb_engine_device_peak_gflops("cpu", dtype, threads, seconds, gflops, err);
}

/* ---- .npy (format version 1.0) ----------------------------------------------------------- */

int pb_npy_write_f32(const char *path, const float *data, const int64_t *shape, int ndim,
                     struct pb_error *err) {
  char shp[256] = "";
  size_t off = 0;
  int64_t count = 1;
  for (int i = 0; i < ndim; i++) {
    off += (size_t)snprintf(shp + off, sizeof shp - off, "%lld%s", (long long)shape[i],
                            ndim == 1 ? "," : (i + 1 < ndim ? ", " : ""));
    count *= shape[i];
  }
  char hdr[512];
  int n = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }",
                   shp);
  /* magic (6) + version (2) + length (2) + header, padded with spaces to 64 and ending in \n */
  size_t total = 10 + (size_t)n + 1;
  size_t pad = (64 - total % 64) % 64;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
  /* O_EXCL | O_NOFOLLOW: the temporary is a new file, never one a link at its name leads to. */
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
  if (f == NULL) {
    int e = errno;
    if (fd >= 0) {
      close(fd);
      unlink(tmp);
    }
    return pb_error_set(err, -e, "cannot create %s: %s", tmp, strerror(e));
  }
  uint16_t hlen = (uint16_t)((size_t)n + pad + 1);
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                           (unsigned char)(hlen >> 8)};
  int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)n, f) == (size_t)n;
  for (size_t i = 0; i < pad && ok; i++) ok = fputc(' ', f) != EOF;
  ok = ok && fputc('\n', f) != EOF;
  ok = ok && fwrite(data, sizeof(float), (size_t)count, f) == (size_t)count;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno;
    remove(tmp);
    return pb_error_set(err, PB_EIO, "cannot write %s: %s", path, strerror(e));
  }
  return 0;
}

int pb_npy_read_f32(const char *path, float **data, int64_t *shape, int *ndim, int64_t *count,
                    struct pb_error *err) {
  *data = NULL;
  FILE *f = fopen(path, "rb");
  if (f == NULL) return pb_error_set(err, -errno, "cannot open %s: %s", path, strerror(errno));
  unsigned char pre[10];
  char hdr[1024];
  int rc = 0;
  if (fread(pre, 1, 10, f) != 10 || pre[0] != 0x93 || memcmp(pre + 1, "NUMPY", 5) != 0 ||
      pre[6] != 1) {
    fclose(f);
    return pb_error_set(err, PB_EFORMAT, "%s: not a version 1 .npy file", path);
  }
  size_t hl = (size_t)pre[8] | ((size_t)pre[9] << 8);
  if (hl >= sizeof hdr || fread(hdr, 1, hl, f) != hl) {
    fclose(f);
    return pb_error_set(err, PB_EFORMAT, "%s: bad header", path);
  }
  hdr[hl] = '\0';
  int f64 = strstr(hdr, "'<f8'") != NULL;
  if ((!f64 && strstr(hdr, "'<f4'") == NULL) || strstr(hdr, "'fortran_order': False") == NULL) {
    fclose(f);
    return pb_error_set(err, PB_EFORMAT, "%s: only little-endian float32/64 in C order", path);
  }
  const char *s = strstr(hdr, "'shape': (");
  *ndim = 0;
  *count = 1;
  if (s != NULL) {
    s += 10;
    while (*s != ')' && *s != '\0' && *ndim < 8) {
      char *end;
      long long v = strtoll(s, &end, 10);
      if (end == s) break;
      shape[(*ndim)++] = v;
      *count *= v;
      s = end;
      while (*s == ',' || *s == ' ') s++;
    }
  }
  size_t n = (size_t)*count, es = f64 ? 8 : 4;
  float *out = pb_alloc(n * sizeof(float));
  void *raw = f64 ? malloc(n * es + 1) : out;
  if (out == NULL || raw == NULL) {
    rc = pb_error_set(err, PB_ENOMEM, "out of memory reading %s", path);
  } else if (fread(raw, es, n, f) != n) {
    rc = pb_error_set(err, PB_EFORMAT, "%s: truncated data", path);
  } else if (f64) {
    for (size_t i = 0; i < n; i++) out[i] = (float)((double *)raw)[i];
  }
  if (f64) free(raw);
  fclose(f);
  if (rc != 0) {
    pb_free(out, n * sizeof(float));
    return rc;
  }
  *data = out;
  return 0;
}
