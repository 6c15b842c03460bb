/* The CUDA module without a GPU (runs everywhere, no label): the module loads or is reported
 * missing, cuda is refused with PB_EUNSUPPORTED and one reason, never a crash, and auto picks the
 * CPU. Where a usable GPU is present it checks the opposite: auto picks cuda and an engine builds. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "engines/engine_internal.h"

int main(void) {
  char why[512] = "";
  CHECK(strcmp(pb_engine_device_list(), "auto, cpu, cuda") == 0);
  CHECK_EQ(pb_engine_device_status("tpu", why, sizeof why), PB_EINVAL);
  CHECK_EQ(pb_engine_device_status("cpu", why, sizeof why), 0);
  int st = pb_engine_device_status("cuda", why, sizeof why);
  printf("cuda status %d: %s\n", st, why[0] ? why : "usable");
  struct pb_error err = {{0}};
  pb_engine_params p = PB_ENGINE_PARAMS_DEFAULTS;
  p.device = "cuda";
  pb_engine *e = NULL;
  int rc = pb_engine_new(&p, &e, &err);
  pb_gpu_info gi;
  double v = 0;
  if (st != 0) {
    CHECK_EQ(st, PB_EUNSUPPORTED);
    CHECK(why[0] != '\0');
#ifdef PB_CUDA_MODULE_BUILT
    /* the module was built and found: the refusal must come from the machine, not the build */
    CHECK(strstr(why, "no CUDA module") == NULL);
    CHECK(strstr(why, "driver") != NULL || strstr(why, "GPU") != NULL);
#endif
    CHECK(strcmp(pb_engine_resolve_device("auto"), "cpu") == 0);
    CHECK(strcmp(pb_engine_resolve_device(NULL), "cpu") == 0);
    CHECK_EQ(rc, PB_EUNSUPPORTED);
    CHECK(e == NULL);
    printf("pb_engine_new(cuda): %s\n", err.message);
    CHECK(strstr(err.message, why) != NULL);
    CHECK_EQ(pb_engine_gpu_info(&gi, &err), PB_EUNSUPPORTED);
    CHECK_EQ(pb_engine_gpu_bandwidth("h2d_pinned", 0, 0.1, &v, &err), PB_EUNSUPPORTED);
    CHECK_EQ(pb_engine_device_peak_gflops("cuda", "bfloat16", 0, 0.1, &v, &err), PB_EUNSUPPORTED);
  } else {
    CHECK(strcmp(pb_engine_resolve_device("auto"), "cuda") == 0);
    CHECK_OK(rc, &err);
    pb_engine_info info;
    pb_engine_get_info(e, &info);
    printf("cuda engine on %s (%s): %s\n", info.device_name, info.isa, info.versions);
    CHECK(strcmp(info.device, "cuda") == 0 && strcmp(info.backend, "cudnn") == 0);
    CHECK(strstr(info.versions, "cuDNN") != NULL);
    pb_engine_free(e);
    CHECK_OK(pb_engine_gpu_info(&gi, &err), &err);
    CHECK(gi.cc_major >= 9 && gi.memory_bytes > 0);
    /* a GPU by number: cuda:0 is the default one; one past the last is refused by name */
    p.device = "cuda:0";
    CHECK_OK(pb_engine_new(&p, &e, &err), &err);
    pb_tensor *x = NULL, *y = NULL;
    int64_t ns = -1;
    CHECK_EQ(pb_engine_forward_time(e, &ns, &err), PB_ESTATE); /* nothing ran yet */
    CHECK_OK(pb_engine_tensor_new(e, PB_TENSOR_INPUT, &x, &err), &err);
    CHECK_OK(pb_engine_tensor_new(e, PB_TENSOR_OUTPUT, &y, &err), &err);
    CHECK_OK(pb_engine_forward(e, x, y, &err), &err);
    CHECK_OK(pb_engine_forward_time(e, &ns, &err), &err);
    printf("forward device time: %lld ns\n", (long long)ns);
    CHECK(ns > 0);
    pb_tensor_free(x);
    pb_tensor_free(y);
    pb_engine_free(e);
    p.device = "cuda:1023";
    CHECK_EQ(pb_engine_new(&p, &e, &err), PB_EINVAL);
    printf("cuda:1023: %s\n", err.message);
    CHECK(strstr(err.message, "cuda:1023 does not exist") != NULL);
    p.device = "cuda";
    /* training builds there too: the CUDA training step (docs/engines.md) */
    p.training = 1;
    CHECK_OK(pb_engine_new(&p, &e, &err), &err);
    pb_engine_free(e);
  }
  /* device names with an ordinal: cuda:N resolves to cuda; the CPU has none; junk is unknown */
  CHECK(strcmp(pb_engine_resolve_device("cuda:3"), "cuda") == 0);
  CHECK(pb_engine_resolve_device("cpu:1") == NULL);
  CHECK(pb_engine_resolve_device("cuda:") == NULL);
  CHECK(pb_engine_resolve_device("cuda:x") == NULL);
  CHECK(pb_engine_resolve_device("cuda:-1") == NULL);
  CHECK(pb_engine_resolve_device("cudax") == NULL);
  p = (pb_engine_params)PB_ENGINE_PARAMS_DEFAULTS;
  p.device = "cuda:x";
  CHECK_EQ(pb_engine_new(&p, &e, &err), PB_EINVAL);
  CHECK(strstr(err.message, "cuda:N") != NULL);
  /* the CPU's clock is the host's: no device time */
  p.device = "cpu";
  CHECK_OK(pb_engine_new(&p, &e, &err), &err);
  int64_t cpu_ns = -1;
  CHECK_EQ(pb_engine_forward_time(e, &cpu_ns, &err), PB_EUNSUPPORTED);
  pb_engine_free(e);
  /* tf32 is a cuda dtype: refused on the CPU */
  p = (pb_engine_params)PB_ENGINE_PARAMS_DEFAULTS;
  p.device = "cpu", p.dtype = "tf32";
  CHECK_EQ(pb_engine_new(&p, &e, &err), PB_EUNSUPPORTED);
  /* the CPU row of the table still answers */
  CHECK_OK(pb_engine_device_peak_gflops("cpu", "float32", 1, 0.05, &v, &err), &err);
  CHECK(v > 0);
  printf("cuda module checks passed\n");
  return 0;
}
