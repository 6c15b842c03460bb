/* Fuzz target for the imagefolder decoders: the input bytes are one file of an image folder,
 * read the way the backend reads it (header, then the whole image when it is small enough, and
 * for JPEG a box of it at a reduced scale chosen from the input's length, as the loader's crops
 * read it).
 * With libFuzzer, build alone with -fsanitize=fuzzer; here tests/fuzz_main.c replays
 * tests/formats/imagefolder/corpus and seeded mutations of it. */
#include <stdint.h>
#include <stdlib.h>

#include "formats/imagefolder/if_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Headers claiming more are decoded only when the fuzzer should chase them: it should not. */
#define MAX_DECODE_BYTES ((size_t)16 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct pb_error err;
  pb__imagefolder_info info;
  if (pb__imagefolder_header("fuzz", data, size, &info, &err) != PB_OK) return 0;
  size_t bytes = (size_t)info.width * (size_t)info.height * (size_t)info.channels *
                 pb_dtype_size(info.dtype);
  if (bytes == 0 || bytes > MAX_DECODE_BYTES) return 0;
  void *dst = malloc(bytes);
  if (dst == NULL) return 0;
  (void)pb__imagefolder_decode("fuzz", data, size, &info, dst, bytes, &err);
  if (info.kind == PB__IF_JPEG) {
    int scale = 1 << (size % 4);
    int sw = (info.width + scale - 1) / scale, sh = (info.height + scale - 1) / scale;
    int x0 = (int)(size % (size_t)sw), y0 = (int)((size / 7) % (size_t)sh);
    (void)pb__imagefolder_decode_jpeg_box("fuzz", data, size, &info, scale, y0, x0, sh - y0, sw - x0, dst,
                                 bytes, &err);
  }
  free(dst);
  return 0;
}
