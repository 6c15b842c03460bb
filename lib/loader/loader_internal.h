/* The loader's hot kernels: pixel conversion, half-precision packing, the rotation warp.
 * Internal. */
#ifndef PB_LOADER_INTERNAL_H
#define PB_LOADER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/bf16.h"
#include "pipebench/loader.h"

/** dst[i] = (float)src[i] * a + b for n native pixels of type dt. */
void pb__convert_affine_f32(const void *src, pb_dtype dt, float *dst, size_t n, float a, float b);
/** The same, written to out (float32, float16 or bfloat16 bits). */
void pb__convert_affine(const void *src, pb_dtype dt, void *dst, pb_out_dtype out, size_t n,
                        float a, float b);
/** Packs n floats into binary16 / bfloat16 bits, rounding to nearest even. */
void pb__pack_f16(const float *src, uint16_t *dst, size_t n);
void pb__pack_bf16(const float *src, uint16_t *dst, size_t n);
uint16_t pb__f32_to_f16(float f);
/** Exact widening back to float (used by tests and the Python reference). */
float pb__f16_to_f32(uint16_t h);
float pb__bf16_to_f32(uint16_t h);

/** One output pixel of a warp: the top-left source sample in a padded plane (-1: outside,
 * the output is the fill value) and its bilinear fractions. */
typedef struct pb__warp_entry {
  int32_t idx;
  float fx, fy;
} pb__warp_entry;

/** Plans a horizontal flip (when flip) followed by a rotation by angle_deg about the plane's
 * centre, for h x w planes read from a (h + 2) x (w + 2) padded copy whose 1-pixel border
 * holds the fill value. table has h * w entries. */
void pb__warp_plan(pb__warp_entry *table, int64_t h, int64_t w, double angle_deg, int flip);
/** Applies a plan: dst (h x w) from the padded source. */
void pb__warp_apply(const pb__warp_entry *table, int64_t h, int64_t w, const float *padded,
                    float fill, float *dst);

/** One axis of a separable resampling: output i is the weighted sum of count[i] source pixels
 * from first[i] (weights w[i * taps ...]). Arrays grow as needed; pb__rs_free releases them. */
typedef struct pb__rs_axis {
  int n, taps;
  int32_t *first, *count;
  float *w;
  size_t cap_n, cap_w;
} pb__rs_axis;

/** Plans n outputs over the source span [a, a + len) (source pixel k covers [k, k + 1)): output
 * i is centred at a + (i + 0.5) * len / n and weighs source pixels with a triangle of radius
 * max(len / n, 1) (bilinear, widened when reducing: antialiasing as PIL and torchvision's
 * antialias=True), normalised over the pixels inside [lo, hi). flip mirrors the outputs. 0, or -1
 * when out of memory. */
int pb__rs_plan(pb__rs_axis *ax, int n, double a, double len, int lo, int hi, int flip);
void pb__rs_free(pb__rs_axis *ax);
/** Resamples one plane: src holds rows of src_w native pixels of type dt covering every row and
 * column the plans reach; dst (ay->n x ax->n floats) = resampled * a + b. rowf holds src_w
 * floats, tmp pb__rs_tmp_floats(src_w, ax->n). final: dst is the loader's output, not read again
 * by this thread (its stores may then bypass the cache). */
size_t pb__rs_tmp_floats(int64_t src_w, int n);
void pb__rs_apply(const pb__rs_axis *ax, const pb__rs_axis *ay, const void *src, pb_dtype dt,
                  int64_t src_w, float *rowf, float *tmp, float a, float b, float *dst, int final);

/** Samples each rank reads per epoch from n images shared among world ranks: floor(n / world)
 * (the last n mod world positions of the epoch's order are left out), or with pad
 * ceil(n / world) (positions past the end wrap to the start). */
int64_t pb__sampler_per_rank(int64_t n, int world, int pad);
/** Fills order[0..per_rank) with the dataset indices rank reads in epoch: the epoch's order
 * (0..n-1, shuffled from seed and epoch when shuffle) at positions rank, rank + world, ...
 * The epoch's order does not depend on world, so the union over ranks is the same set of
 * samples for any number of ranks. 0, or -1 when out of memory. */
int pb__sampler_plan(int64_t n, int rank, int world, int shuffle, uint64_t seed, int64_t epoch,
                     int64_t per_rank, int64_t *order);

#endif
