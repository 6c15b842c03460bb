/* float32 -> bfloat16 rounding, shared by the loader (batch output) and the engines (weights,
 * activations). Internal. */
#ifndef PB_CORE_BF16_H
#define PB_CORE_BF16_H

#include <stdint.h>

/** bfloat16 bits of f, rounded to nearest even; NaN stays a (quiet) NaN. */
uint16_t pb__f32_to_bf16(float f);

#endif
