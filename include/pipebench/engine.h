/* pipebench engines: image models as layer graphs with seeded weights, behind one interface
 * whose backends run them on a device: oneDNN on the CPU; cuDNN + cuBLASLt on NVIDIA GPUs, in a
 * module (libpipebench-cuda.so) loaded at run time, so one build runs with or without a GPU. */
#ifndef PIPEBENCH_ENGINE_H
#define PIPEBENCH_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "pipebench/core.h"
#include "pipebench/dlpack.h"
#include "pipebench/format.h"

#ifdef __cplusplus
extern "C" {
#endif

/** An engine: one model, compiled for one device, dtype and batch size. A handle is used by one
 * thread at a time. */
typedef struct pb_engine pb_engine;

/** A tensor that lives where the engine computes (host memory for the CPU backend, device
 * memory for a GPU backend). Created by pb_engine_tensor_new, freed with pb_tensor_free, and
 * only valid while its engine lives. */
typedef struct pb_tensor pb_tensor;

/** What the engine is asked to build. NULL strings and 0 numbers take the defaults. */
typedef struct pb_engine_params {
  const char *model;   /**< "embed", "resnet50", "vit_b_16" */
  const char *device;  /**< "auto" (NULL), "cpu", "cuda" (GPU 0), "cuda:N" (GPU N, as torch
                            numbers them: one per rank in a data-parallel job) */
  const char *backend; /**< NULL: the device's backend ("onednn" for cpu, "cudnn" for cuda) */
  const char *dtype;   /**< compute type: "float32" (NULL), "bfloat16", "float16"; on cuda also
                            "tf32" (float32 tensors, TF32 tensor-core products: float32 itself
                            never uses TF32) */
  int batch_size;      /**< images per forward (>= 1); primitives are built for exactly this */
  int channels, height, width; /**< input; 0: the model's default (embed 1x100x100, others
                                    3x224x224). vit_b_16 needs 224x224. */
  uint64_t seed;       /**< weights are drawn from this seed */
  int threads;         /**< compute threads; 0: all online CPUs */
  int training;        /**< 1: also build backward passes and SGD (pb_engine_train_step) */
  const char *loss;    /**< training loss: "cross_entropy" (NULL) or "mse" */
  float momentum;      /**< SGD momentum as torch.optim.SGD (0: plain SGD); cuda only */
  float weight_decay;  /**< L2 weight decay added to every gradient (0: none); cuda only */
} pb_engine_params;

#define PB_ENGINE_PARAMS_DEFAULTS                                                              \
  {.model = "embed", .device = NULL, .backend = NULL, .dtype = NULL, .batch_size = 1,          \
   .channels = 0, .height = 0, .width = 0, .seed = 42, .threads = 0, .training = 0,            \
   .loss = NULL, .momentum = 0.0f, .weight_decay = 0.0f}

/** What was built. Plain data. */
typedef struct pb_engine_info {
  char model[32];
  char backend[16];
  char device[16];       /**< "cpu" or "cuda" */
  char device_name[128]; /**< CPU model or GPU name */
  char isa[48];          /**< instruction set the backend dispatches to (e.g. "avx512_core_bf16") */
  char dtype[16];
  int batch_size, channels, height, width;
  int threads;
  int64_t outputs;           /**< values per image in the output (classes or embedding size) */
  int64_t parameters;        /**< learnable parameters (batch norm's scale and shift counted;
                                  its running statistics not, as torch counts them) */
  double flops_per_image;    /**< forward FLOPs, a multiply-add counted as 2 */
  int64_t bytes_weights;     /**< weights as the backend holds them (after folding) */
  int64_t bytes_activations; /**< activations, gradients, and the tensors made with
                                  pb_engine_tensor_new while they live */
  int64_t bytes_scratch;     /**< primitive scratchpads and workspaces */
  int64_t bytes_total;       /**< sum of the three: the engine's peak, since it allocates
                                  everything at creation (and tensors) and nothing while running */
  double compile_ms;         /**< time spent creating primitives and reordering weights (on
                                  cuda also choosing algorithms and capturing the CUDA graph) */
  char versions[192];        /**< the compute libraries loaded, read at run time (e.g. "oneDNN
                                  2.7.3" or "CUDA driver 13.0, runtime 13.0, cuDNN 9.14.0,
                                  cuBLASLt 13.1.0") */
} pb_engine_info;

/** Builds an engine. Unknown model, device, backend, dtype or loss: PB_EINVAL with a message that
 * lists what is available; bfloat16 or float16 where the device cannot compute it natively:
 * PB_EUNSUPPORTED. *out is freed with pb_engine_free. */
PB_API int pb_engine_new(const pb_engine_params *params, pb_engine **out, struct pb_error *err);
/** Releases the engine and everything it allocated. NULL is ignored. */
PB_API void pb_engine_free(pb_engine *e);
/** Fills info. */
PB_API void pb_engine_get_info(const pb_engine *e, pb_engine_info *info);

/** Roles of tensors an engine can make. */
typedef enum {
  PB_TENSOR_INPUT = 0,  /**< float32 NCHW, batch_size x channels x height x width */
  PB_TENSOR_OUTPUT = 1, /**< float32, batch_size x outputs */
  PB_TENSOR_TARGET = 2  /**< cross_entropy: int32 class per image (batch_size); mse: float32
                             batch_size x outputs */
} pb_tensor_role;

/** Makes a tensor of a role on the engine's device. Free it before the engine. */
PB_API int pb_engine_tensor_new(pb_engine *e, pb_tensor_role role, pb_tensor **out,
                                struct pb_error *err);
PB_API void pb_tensor_free(pb_tensor *t);
/** Bytes the tensor holds. */
PB_API size_t pb_tensor_bytes(const pb_tensor *t);
/** Host pointer to the data, or NULL where the tensor lives on a device. */
PB_API void *pb_tensor_host_data(pb_tensor *t);
/** Copies exactly pb_tensor_bytes(t) bytes in or out (synchronous). */
PB_API int pb_tensor_write(pb_tensor *t, const void *src, size_t size, struct pb_error *err);
PB_API int pb_tensor_read(const pb_tensor *t, void *dst, size_t size, struct pb_error *err);

/** Runs the model on input (PB_TENSOR_INPUT) into output (PB_TENSOR_OUTPUT). It may return before
 * the device has finished (GPU); pb_engine_synchronize waits. On the CPU it returns when done. */
PB_API int pb_engine_forward(pb_engine *e, const pb_tensor *input, pb_tensor *output,
                             struct pb_error *err);
/** One SGD step on a batch: forward, loss against target, backward, then torch.optim.SGD's
 * update with params.momentum and params.weight_decay (both 0: w -= lr * dL/dw). The loss is the
 * mean over the batch (cross-entropy of the softmax of the outputs against class labels, or mean
 * squared error over all outputs). loss may be NULL; asking for it synchronises. Needs
 * params.training. On cuda the step is queued (pb_engine_synchronize waits); its device time is
 * pb_engine_forward_time's; batch norm runs in training mode (batch statistics, running
 * averages updated) and dtype bfloat16 computes as torch autocast does (float32 master weights,
 * loss and softmax). */
PB_API int pb_engine_train_step(pb_engine *e, const pb_tensor *input, const pb_tensor *target,
                                float lr, float *loss, struct pb_error *err);
/** Waits until all work queued on the engine has finished. */
PB_API int pb_engine_synchronize(pb_engine *e, struct pb_error *err);
/** Waits for the most recent pb_engine_forward (or forward_native) and gives the device time it
 * took (CUDA events around the input conversion, the model and the output conversion): the
 * latency the GPU saw, without the host's launch and synchronisation costs. PB_EUNSUPPORTED on
 * backends that compute on the host (there the host clock is the device's); PB_ESTATE before
 * the first forward. */
PB_API int pb_engine_forward_time(pb_engine *e, int64_t *ns, struct pb_error *err);

/** Host-memory convenience: forward from a float32 NCHW buffer into a float32 buffer (through
 * tensors the engine keeps). Sizes are checked against the engine's shapes. Synchronous. */
PB_API int pb_engine_forward_host(pb_engine *e, const float *input, size_t input_count,
                                  float *output, size_t output_count, struct pb_error *err);

/** Writes the weights the engine was built with (float32, torch's state_dict names and layouts,
 * batch norm unfolded: weight, bias, running_mean, running_var) as one NAME.npy per tensor into
 * dir, which must exist. They are rebuilt from the seed: training steps are not reflected. */
PB_API int pb_engine_export_weights(pb_engine *e, const char *dir, struct pb_error *err);

/** Models and dtypes known to the library, for help texts and error messages. */
PB_API int pb_engine_model_count(void);
PB_API const char *pb_engine_model_name(int i);
/** "embed, resnet50, vit_b_16" */
PB_API const char *pb_engine_model_list(void);
PB_API const char *pb_engine_dtype_list(void);
PB_API const char *pb_engine_device_list(void);
/** Resolves "auto" (or NULL) to the device that would be used ("cuda" when the CUDA module loads
 * and a usable GPU is present, else "cpu"). NULL for an unknown name. Returns a static string. */
PB_API const char *pb_engine_resolve_device(const char *device);
/** Whether `device` ("cpu", "cuda") can run engines here: 0, or PB_EUNSUPPORTED with one line in
 * why saying what is missing (no CUDA module in this build, no driver, no GPU, a GPU of another
 * compute capability, a cuDNN too old), or PB_EINVAL for an unknown device. why may be NULL. */
PB_API int pb_engine_device_status(const char *device, char *why, size_t why_len);

/** A GPU and the libraries that drive it, read at run time. */
typedef struct pb_gpu_info {
  char name[128];
  int cc_major, cc_minor;   /**< compute capability */
  int multiprocessors;
  int64_t memory_bytes;
  int64_t l2_bytes;
  char versions[192];       /**< driver, runtime, cuDNN and cuBLASLt versions */
} pb_gpu_info;
/** Fills info for GPU 0. PB_EUNSUPPORTED (with the reason) where cuda is unavailable. */
PB_API int pb_engine_gpu_info(pb_gpu_info *info, struct pb_error *err);
/** Copy bandwidth of the GPU in GB/s (1e9 bytes/s), the best repeat over about `seconds`.
 * kind: "h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable", "d2d" (d2d counts bytes read
 * plus bytes written). bytes 0: 256 MiB (1 GiB for d2d). PB_EUNSUPPORTED where cuda is
 * unavailable. */
PB_API int pb_engine_gpu_bandwidth(const char *kind, size_t bytes, double seconds, double *gbps,
                                   struct pb_error *err);

/** Peak matrix-multiply rate of this machine's CPU: oneDNN matmul of large square matrices on
 * `threads` threads (0: all), repeated for about `seconds`; the best repeat's rate in GFLOP/s.
 * dtype: "float32" or "bfloat16". Same as pb_engine_device_peak_gflops("cpu", ...). */
PB_API int pb_engine_peak_gflops(const char *dtype, int threads, double seconds, double *gflops,
                                 struct pb_error *err);
/** Peak matrix-multiply rate of a device through its backend: "cpu" as pb_engine_peak_gflops;
 * "cuda": cuBLASLt on 8192^3 random operands, dtype "bfloat16", "float16", "tf32" or "float32"
 * (threads ignored). PB_EUNSUPPORTED (with the reason) where the device is unavailable. */
PB_API int pb_engine_device_peak_gflops(const char *device, const char *dtype, int threads,
                                        double seconds, double *gflops, struct pb_error *err);

/** Puts one image into a float32 C x H x W slot of a model input: time point 0, the middle z
 * plane, the first c channels (repeated cyclically when the image has fewer, so grey becomes
 * RGB), centre-cropped or centre-padded with zeros to h x w. Integer pixels are scaled to
 * [0, 1] by their type's maximum; floats are copied. No resizing, no normalisation. */
PB_API int pb_image_to_chw(const pb_image_meta *meta, const void *pixels, int c, int h, int w,
                           float *dst, struct pb_error *err);

/** Writes a float32 array as a little-endian .npy file (C order) through a temporary name. */
PB_API int pb_npy_write_f32(const char *path, const float *data, const int64_t *shape, int ndim,
                            struct pb_error *err);
/** Reads a float32 (or float64, converted) .npy; *data from pb_alloc, freed with pb_free(*data,
 * count * sizeof(float)). shape holds up to 8 dims. */
PB_API int pb_npy_read_f32(const char *path, float **data, int64_t *shape, int *ndim,
                           int64_t *count, struct pb_error *err);

/* ---- feeding an engine raw pixels (the GPU data path) -------------------------------------- */

/** Host memory that the engine's device copies from fastest: page-locked (pinned) memory on
 * cuda (cudaHostAlloc), for pb_loader_params.allocator, so batches land where the copy engine
 * reads them directly. NULL on backends that read host memory in place (cpu): use the default.
 * The allocator and its functions stay valid for the life of the process, so batches may
 * outlive the engine. */
PB_API const pb_allocator *pb_engine_host_allocator(pb_engine *e);

/** The same host memory without an engine, for a loader that feeds another framework (torch):
 * device "cuda" gives pinned memory from the CUDA module, loaded on first use. NULL with err set
 * (PB_EUNSUPPORTED, saying why) where there is no usable GPU or for other devices. Valid for the
 * life of the process. */
PB_API const pb_allocator *pb_device_host_allocator(const char *device, struct pb_error *err);

/** A batch of raw images as a loader hands them over (PB_OUT_NATIVE): n images of c x z x h x w
 * pixels of type dtype, C order, in host memory (pinned memory from pb_engine_host_allocator
 * makes the copy asynchronous). */
typedef struct pb_native_batch {
  const void *pixels;
  pb_dtype dtype;
  int64_t n, c, z, h, w;
  float mean, std; /**< normalisation: ((x / max) - mean) / std, x / max as pb_image_to_chw
                        scales (floats unscaled); mean 0 and std 1 leave the values alone */
  /** Per-channel normalisation instead of mean and std: NULL, or c values each (at most
   * PB_NATIVE_MAX_CHANNELS), one per channel of the pixels, e.g. ImageNet's (0.485, 0.456,
   * 0.406) and (0.229, 0.224, 0.225) for RGB. Both or neither. */
  const float *channel_mean, *channel_std;
} pb_native_batch;
#define PB_NATIVE_MAX_CHANNELS 16

/** Forward from raw pixels. Each image becomes the model input exactly as pb_image_to_chw
 * places it (time point 0, middle z plane, channels repeated cyclically, centre crop or zero
 * pad to the engine's input), then normalised inside the image (padding stays 0), then the
 * model runs into output (PB_TENSOR_OUTPUT). n must equal the engine's batch size.
 *
 * On cuda the pixels are copied host-to-device on a copy stream of their own into one of two
 * device staging buffers and converted by a kernel on the device, so the copy of the next batch
 * overlaps the model running on this one; the call returns once the pixels have been copied
 * (pixels may then be reused or freed) and the forward is queued (pb_engine_synchronize waits
 * for it). On cpu the conversion runs on the host and the call returns when done.
 * h2d_ns (may be NULL) gets the host-to-device copy's device time (CUDA events), 0 on cpu. */
PB_API int pb_engine_forward_native(pb_engine *e, const pb_native_batch *in, pb_tensor *output,
                                    int64_t *h2d_ns, struct pb_error *err);

/** One image for the GPU JPEG path: a JPEG file's bytes (decoded is 0), or pixels a CPU already
 * decoded (decoded 1: uint8, planar channels x height x width, channels 1 or 3), e.g. a
 * progressive or CMYK JPEG or a PNG; or decoded 2: the finished crop a CPU made (uint8, planar
 * channels x crop x crop, the engine's input size), which is only normalised. Host memory owned
 * by the caller; name (may be NULL) is used in messages. */
typedef struct pb_jpeg_item {
  const void *data;
  size_t size;
  const char *name;
  int decoded;
  int width, height, channels; /**< decoded items only */
} pb_jpeg_item;

/** 0 when JPEGs can be decoded on the GPU here (the CUDA module, a GPU and libnvjpeg.so.13
 * load and nvJPEG starts), else PB_EUNSUPPORTED with one line in why (may be NULL). */
PB_API int pb_jpeg_gpu_status(char *why, size_t why_len);

/** Track 3's evaluation path with the decode on the GPU: n items (n = the engine's batch size)
 * are decoded by nvJPEG (the hardware decoder where the GPU has one) or copied in (decoded
 * items), each image's shorter side is resized to `resize` (antialiased bilinear, as the
 * loader's crop transforms) and the centre crop of the engine's input size taken, rounded to 8
 * bits and normalised ((x / 255 - mean[c]) / std[c], 3 values each), then the forward runs.
 * The decode runs beside the model: the items' bytes must stay valid until the next
 * pb_engine_forward_jpeg returns (it waits for this decode) or pb_engine_synchronize; the
 * forward is queued as pb_engine_forward_native's, with its span in the device window. *gpu_n (may be NULL): items
 * nvJPEG decoded. A JPEG nvJPEG cannot read: PB_EFORMAT naming it. cuda engines only. */
PB_API int pb_engine_forward_jpeg(pb_engine *e, const pb_jpeg_item *items, int n, int resize,
                                  const float mean[3], const float std[3], pb_tensor *output,
                                  int *gpu_n, struct pb_error *err);

/** The same decode and crop into host memory, for checks against a CPU decoder: crops gets
 * n x 3 x crop x crop uint8; full (may be NULL) holds n pointers (each may be NULL) to buffers
 * of 3 x height x width bytes that get each image decoded, planar RGB. */
PB_API int pb_jpeg_gpu_crops(const pb_jpeg_item *items, int n, int resize, int crop,
                             uint8_t **full, uint8_t *crops, struct pb_error *err);

/** The GPU JPEG decoder's counts and host times since it started in this process (all zero
 * before its first batch). The waits are the host's in pb_engine_forward_jpeg: for the decode
 * of the batch before (the decoder's pace) and for the crop that last used the decoder's slot
 * (the model's pace, as that crop runs on the engine's stream). */
typedef struct pb_jpeg_gpu_stats {
  int64_t batches;        /**< batches decoded */
  int64_t images_gpu;     /**< images nvJPEG decoded */
  int64_t images_copied;  /**< images a CPU decoded or cropped, copied in */
  int64_t wait_decode_ns; /**< host time waiting for the batch before to be decoded */
  int64_t wait_crop_ns;   /**< host time waiting for the slot's last crop */
  int64_t parts_ns;       /**< host time parsing headers and in nvJPEG's calls (wall) */
  int parts;              /**< host threads the last batch was split over */
} pb_jpeg_gpu_stats;

/** Fills out (zeros first); PB_EUNSUPPORTED without the CUDA module. */
PB_API int pb_jpeg_gpu_stats_get(pb_jpeg_gpu_stats *out, struct pb_error *err);

/** A training step from raw pixels: the data path of pb_engine_forward_native (its copy, its
 * conversion, its device span in the window of pb_engine_device_mark) into pb_engine_train_step
 * against target (PB_TENSOR_TARGET) instead of a forward. The step is queued, not waited for.
 * PB_EUNSUPPORTED on backends that do not train on a device. */
PB_API int pb_engine_train_native(pb_engine *e, const pb_native_batch *in,
                                  const pb_tensor *target, float lr, int64_t *h2d_ns,
                                  struct pb_error *err);

/** When one pb_engine_forward_native's work ran on the device, in ns after the engine's mark
 * (pb_engine_device_mark), by CUDA events: from the moment its conversion could start (its copy
 * had arrived and the forward before it was done) to the end of its model. */
typedef struct pb_device_span {
  int64_t start_ns, end_ns;
} pb_device_span;

/** Opens a device window: waits until all work queued on the engine has finished, reads the
 * host clock (pb_now_ns) into *host_ns (may be NULL) on the idle device, then records a mark on
 * the engine's stream, so the mark lies after *host_ns. The forwards of pb_engine_forward_native
 * queued from then on are timed against the mark. PB_EUNSUPPORTED on backends that compute on
 * the host (there the host clock is the device's). */
PB_API int pb_engine_device_mark(pb_engine *e, int64_t *host_ns, struct pb_error *err);

/** Waits until all work queued on the engine has finished and gives, in the order they were
 * queued, the device spans of the pb_engine_forward_native calls since the last mark: the first
 * min(cap, *n) go into spans (NULL with cap 0 only counts), *n gets how many there were. Spans
 * do not overlap (one stream runs them in turn) and all lie between the mark and the return of
 * this call, so a host clock read after it closes a window that holds every one of them; the
 * device's busy time is the sum of end_ns - start_ns. PB_ESTATE before a mark, PB_EUNSUPPORTED
 * on backends that compute on the host. */
PB_API int pb_engine_device_spans(pb_engine *e, pb_device_span *spans, size_t cap, size_t *n,
                                  struct pb_error *err);

/** Copies bytes of host memory to the device through the engine's copy stream (into its staging
 * buffer) and waits; *ns gets the copy's device time (CUDA events). Measures the data path's
 * host-to-device stage. PB_EUNSUPPORTED on backends without a device copy (cpu). */
PB_API int pb_engine_copy_to_device(pb_engine *e, const void *src, size_t bytes, int64_t *ns,
                                    struct pb_error *err);

/** Exports a tensor as DLPack without a copy: float32, shape batch x outputs (output and mse
 * target tensors), batch x C x H x W (input), batch (int32 class targets); device kDLCUDA 0
 * for a GPU engine's tensors (torch.from_dlpack gives a CUDA tensor), kDLCPU otherwise. The
 * export borrows the tensor's memory: keep the tensor and its engine until the consumer has
 * called (*out)->deleter(*out), which frees only the DLPack wrapper; synchronise the engine
 * before the consumer reads. */
PB_API int pb_tensor_to_dlpack(pb_tensor *t, DLManagedTensor **out, struct pb_error *err);

#ifdef __cplusplus
}
#endif
#endif
