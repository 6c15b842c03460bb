/* A batch exported as a DLPack tensor: the tensor holds a reference to the batch. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/format_internal.h"
#include "formats/raw/raw.h"
#include "loader/loader_impl.h"

typedef struct dl_export {
  DLManagedTensor mt;
  int64_t shape[5], strides[5];
  batch_impl *bi;
} dl_export;

static void dl_deleter(DLManagedTensor *self) {
  if (self == NULL) return;
  dl_export *x = self->manager_ctx;
  pb__batch_release(x->bi);
  free(x);
}

int pb_batch_to_dlpack(pb_batch *batch, DLManagedTensor **out, struct pb_error *err) {
  *out = NULL;
  if (batch == NULL) return pb_error_set(err, PB_EINVAL, "pb_batch_to_dlpack: batch is NULL");
  dl_export *x = calloc(1, sizeof *x);
  if (x == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  batch_impl *bi = (batch_impl *)batch;
  atomic_fetch_add(&bi->refs, 1);
  x->bi = bi;
  int64_t stride = 1;
  for (int k = batch->ndim - 1; k >= 0; k--) {
    x->shape[k] = batch->shape[k];
    x->strides[k] = stride;
    stride *= batch->shape[k];
  }
  DLTensor *t = &x->mt.dl_tensor;
  t->data = batch->data;
  t->device.device_type = kDLCPU;
  t->device.device_id = 0;
  t->ndim = batch->ndim;
  if (batch->dtype == PB_OUT_NATIVE) {
    pb_dtype d = batch->native_dtype;
    t->dtype.code = (uint8_t)(d == PB_INT16 ? kDLInt : d == PB_FLOAT32 || d == PB_FLOAT64 ? kDLFloat
                                                                                         : kDLUInt);
  } else {
    t->dtype.code = (uint8_t)(batch->dtype == PB_OUT_BFLOAT16 ? kDLBfloat : kDLFloat);
  }
  t->dtype.bits = (uint8_t)(8 * pb_batch_element_size(batch));
  t->dtype.lanes = 1;
  t->shape = x->shape;
  t->strides = x->strides;
  t->byte_offset = 0;
  x->mt.manager_ctx = x;
  x->mt.deleter = dl_deleter;
  *out = &x->mt;
  return PB_OK;
}
