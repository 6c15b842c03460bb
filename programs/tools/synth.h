/* Synthetic images beyond pb_synth_image's cells: photograph-like content and ImageNet-like
 * sizes, for gen's imagenet preset. Internal. */
#ifndef PB_TOOLS_SYNTH_H
#define PB_TOOLS_SYNTH_H

#include <stdint.h>

#include "pipebench/format.h"

/** Fills pixels (pb_image_bytes(meta) bytes) with a photograph-like image: a luminance field
 * with a 1/f amplitude spectrum (value noise over octaves from a quarter of the image down to
 * two pixels), coarse colour fields, a few hard-edged objects with textures of their own and a
 * little grain, so that JPEG spends about as many bits on it as on a photograph. The result
 * depends only on (seed, index, shape, dtype); 0, or -1 when out of memory. */
int pb__synth_photo(const pb_image_meta *meta, uint64_t seed, int64_t index, void *pixels);

/** ImageNet-like size of image `index`: mostly landscape, 4:3 or 3:2 or squarer, the longer
 * side nominal_long or a little less, a quarter portrait. */
void pb__synth_photo_size(uint64_t seed, int64_t index, int64_t nominal_long, int64_t *h,
                          int64_t *w);

#endif
