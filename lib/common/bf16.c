/* float32 -> bfloat16 rounding. */
#include "common/bf16.h"

#include <string.h>

uint16_t pb__f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(x >> 16);
}
