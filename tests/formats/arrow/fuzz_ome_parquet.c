/* Fuzz target: whole ome-parquet files (every layout; the corpus holds good files and damaged
 * chunk lists made by arrow_chunks_bad). The input is written to a temporary file, opened, and
 * every image read whole and as a crop, through the direct page reader (its DuckDB fallback
 * included). Opening or reading may fail, never crash, hang or read out of bounds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipebench/format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[128];
  if (path[0] == '\0') snprintf(path, sizeof path, "/tmp/pb-fuzz-omepq-%ld.parquet", (long)getpid());
  FILE *f = fopen(path, "wb");
  if (f == NULL) return 0;
  size_t put = fwrite(data, 1, size, f);
  if (fclose(f) != 0 || put != size) {
    unlink(path);
    return 0;
  }
  struct pb_error err;
  pb_dataset *ds = NULL;
  if (pb_dataset_open(path, "ome-parquet", &ds, &err) == PB_OK) {
    int64_t n = pb_dataset_count(ds);
    for (int64_t i = 0; i < n && i < 8; i++) {
      pb_image_meta m;
      if (pb_dataset_meta(ds, i, &m, &err) != PB_OK) continue;
      size_t nb = pb_image_bytes(&m);
      if (nb == 0 || nb > ((size_t)64 << 20)) continue;
      void *buf = malloc(nb);
      if (buf == NULL) continue;
      (void)pb_dataset_read(ds, i, buf, nb, NULL, &err);
      pb_region crop;
      for (int k = 0; k < PB_NDIM; k++) {
        crop.start[k] = m.shape[k] / 2;
        crop.count[k] = m.shape[k] - m.shape[k] / 2;
      }
      (void)pb_dataset_read_region(ds, i, &crop, buf, nb, NULL, &err);
      free(buf);
    }
    pb_dataset_free(ds);
  }
  unlink(path);
  return 0;
}
