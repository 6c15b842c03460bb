/* The DLPack tensor-exchange structs (the 0.x ABI, before versioned tensors), so that batches
 * can be handed to PyTorch, JAX, CuPy and others without a copy. The layout follows the public
 * DLPack specification (https://github.com/dmlc/dlpack); names match it so code that already
 * uses DLPack reads naturally. When the project's own dlpack.h was included first, its
 * definitions are used instead (they are the same ABI). */
#ifndef PIPEBENCH_DLPACK_H
#define PIPEBENCH_DLPACK_H

#include <stdint.h>

#ifndef DLPACK_VERSION
#define DLPACK_VERSION 70 /* the ABI these structs match: DLPack 0.7 */

#ifdef __cplusplus
extern "C" {
#endif

/** Where a tensor's memory lives. Values are fixed by the specification. */
typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3, /**< pinned host memory */
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id; /**< 0 for the CPU */
} DLDevice;

/** Element kinds. Values are fixed by the specification. */
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U
} DLDataTypeCode;

/** An element type: kind, bits per lane and lanes (1 for scalars). float16 is {kDLFloat, 16,
 * 1}, bfloat16 {kDLBfloat, 16, 1}. */
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

/** A strided view of memory. data + byte_offset is the first element. strides are counted in
 * elements, not bytes; NULL strides mean compact row-major. */
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} DLTensor;

/** A tensor plus its owner: the consumer calls deleter(self) exactly once when it no longer
 * needs the memory. Python passes it in a PyCapsule named "dltensor"; a consumer renames the
 * capsule "used_dltensor" when it takes ownership. */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

#ifdef __cplusplus
}
#endif
#endif /* DLPACK_VERSION */
#endif
