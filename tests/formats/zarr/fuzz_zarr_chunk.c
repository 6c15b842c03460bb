/* Fuzz target: chunk and shard decoding. Byte 0 picks the codec setup (0 blosc, 1 zstd, 2 gzip,
 * 3 zlib, 4 crc32c, 5 shard with raw inner chunks, 6 shard with zstd inner chunks); byte 1 holds
 * flags (1 big-endian elements, 2 shard index has crc32c, 4 index at the end); the rest is the
 * stored chunk or shard of a 16x16 uint16 image. Decoding must fail cleanly, never crash. */
#include <stdint.h>
#include <string.h>

#include "formats/zarr/zarr_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  static const int ids[] = {PB__ZC_BLOSC, PB__ZC_ZSTD,   PB__ZC_GZIP, PB__ZC_ZLIB,
                            PB__ZC_CRC32C, PB__ZC_NONE, PB__ZC_ZSTD};
  int sel = data[0] % 7, flags = data[1];
  pb__zarr_array a;
  memset(&a, 0, sizeof a);
  a.version = 3;
  a.ndim = 2;
  a.dtype = PB_UINT16;
  a.esize = 2;
  a.fill_zero = 1;
  for (int k = 0; k < PB_NDIM; k++) a.shape[k] = a.chunk[k] = a.inner[k] = 1;
  a.shape[PB_Y] = a.shape[PB_X] = a.chunk[PB_Y] = a.chunk[PB_X] = 16;
  a.inner[PB_Y] = a.inner[PB_X] = sel >= 5 ? 8 : 16;
  a.sharded = sel >= 5;
  a.index_crc = (flags & 2) != 0;
  a.index_at_end = (flags & 4) != 0;
  a.pipe.big_endian = flags & 1;
  if (ids[sel] != PB__ZC_NONE) {
    a.pipe.n = 1;
    a.pipe.c[0].id = ids[sel];
  }
  pb__zarr_scratch s;
  memset(&s, 0, sizeof s);
  pb__zarr_src src = {NULL, data + 2, size - 2};
  uint16_t dst[256];
  static const int64_t g[PB_NDIM] = {0, 0, 0, 0, 0};
  pb_region full = {{0, 0, 0, 0, 0}, {1, 1, 1, 16, 16}};
  pb_region part = {{0, 0, 0, 3, 5}, {1, 1, 1, 9, 7}};
  struct pb_error err;
  pb_stage_times t;
  memset(&t, 0, sizeof t);
  (void)pb__zarr_place_unit(&a, &s, &src, g, &full, (unsigned char *)dst, &t, &err);
  (void)pb__zarr_place_unit(&a, &s, &src, g, &part, (unsigned char *)dst, &t, &err);
  pb__zarr_scratch_destroy(&s);
  return 0;
}
