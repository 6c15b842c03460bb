/* Shared state of the oneDNN backend (onednn.c: inference and common helpers; onednn_train.c:
 * training of sequential conv nets). */
#ifndef PB_ENGINES_ONEDNN_INTERNAL_H
#define PB_ENGINES_ONEDNN_INTERNAL_H

#include <oneapi/dnnl/dnnl.h>

#include "common/bf16.h"

#include "engines/engine_internal.h"

#define PB__DN_MAX_ARGS 12
#define PB__DN_MAX_BIND 8

struct pb__dn;

/* One thing forward does: a primitive with its arguments, or a small C loop (custom). */
typedef struct pb__onednn_step {
  dnnl_primitive_desc_t pd;
  dnnl_primitive_t prim;
  int nargs;
  dnnl_exec_arg_t args[PB__DN_MAX_ARGS];
  size_t scratch_bytes;
  int custom; /* 1: patch tokens; 2: custom_fn */
  void (*custom_fn)(const struct pb__dn *o, const struct pb__onednn_step *s);
  const float *c_cls;
  void *c_dst;
  int64_t c_T, c_D;
  int c_bf16;
} pb__onednn_step;

typedef struct pb__onednn_buf {
  void *ptr;
  size_t size;
  int busy;
} pb__onednn_buf;

typedef struct pb__onednn_alloc_rec {
  void *p;
  size_t n;
} pb__onednn_alloc_rec;

struct pb__onednn_train;

typedef struct pb__dn {
  dnnl_engine_t eng;
  dnnl_stream_t strm;
  dnnl_data_type_t dt;
  int64_t N;
  int threads;
  pb__onednn_step *steps;
  int n_steps, cap_steps;
  pb__onednn_buf *bufs;
  int n_bufs, cap_bufs;
  dnnl_memory_desc_t *tmd; /* per tensor: its layout */
  int *tbuf;               /* per tensor: its buffer, -1 none */
  int *last_use;           /* per tensor: last op reading it */
  int scratch_tensor, output_id;
  dnnl_memory_t *mems;
  int n_mems, cap_mems;
  pb__onednn_alloc_rec *allocs;
  int n_allocs, cap_allocs;
  dnnl_memory_t in_mems[PB__DN_MAX_BIND], out_mems[PB__DN_MAX_BIND];
  int n_in_mems, n_out_mems;
  void *scratch;
  size_t scratch_need;
  int64_t bytes_w, bytes_act, bytes_scratch;
  struct pb__onednn_train *tr;
} pb__dn;

int pb__onednn_err(struct pb_error *err, dnnl_status_t s, const char *what);
void pb__onednn_set_threads(int n);
void *pb__onednn_alloc(pb__dn *o, size_t n, int64_t *counter);
dnnl_memory_t pb__onednn_mem(pb__dn *o, const dnnl_memory_desc_t *md, void *ptr);
pb__onednn_step *pb__onednn_add_step(pb__dn *o, pb__onednn_step **list, int *n, int *cap);
void pb__onednn_arg(pb__onednn_step *s, int arg, dnnl_memory_t m);
int pb__onednn_make(pb__dn *o, pb__onednn_step *s, const void *op_desc, const dnnl_primitive_attr_t attr,
                const_dnnl_primitive_desc_t hint, const char *what, struct pb_error *err);
int pb__onednn_attr(dnnl_primitive_attr_t *attr, int sum, int act, float out_scale);
int pb__onednn_reorder_now(pb__dn *o, const dnnl_memory_desc_t *src_md, void *src,
                       const dnnl_memory_desc_t *dst_md, void *dst, struct pb_error *err);
int pb__onednn_finish_scratch(pb__dn *o, pb__onednn_step *steps, int n, struct pb_error *err);
int pb__onednn_run(pb__dn *o, const pb__onednn_step *steps, int n, struct pb_error *err);
int pb__onednn_check_dtype(const char *dtype, dnnl_data_type_t *dt, struct pb_error *err);
void pb__cpu_model(char *buf, size_t size);

/* Training (onednn_train.c). */
int pb__onednn_compile_train(pb__dn *o, pb_engine *e, const pb__graph *g, struct pb_error *err);
int pb__onednn_train_forward(pb__dn *o, pb_engine *e, const void *input, void *output,
                         struct pb_error *err);
int pb__onednn_train_step(pb__dn *o, pb_engine *e, const void *input, const void *target, float lr,
                      float *loss, struct pb_error *err);
void pb__onednn_train_free(pb__dn *o);
/* Training parameter i of a training engine (tests): name, weights, last gradient, count.
 * -1 past the end. */
int pb__onednn_train_param(pb_engine *e, int i, const char **name, float **w, float **grad,
                       int64_t *n);

#endif
