/* Fuzz target: Parquet page headers and pages as the direct reader decodes them. Byte 0 picks
 * the physical type (INT32, FLOAT, DOUBLE, BYTE_ARRAY, INT64) and the codec (none, snappy, gzip,
 * zstd, lz4_raw); byte 1 the maximum repetition (0..2) and definition (0..7) levels; byte 2 the
 * row to read (bits 0-2) and whether values may be lent (bit 3); the rest is one column chunk
 * (an optional dictionary page, then data pages). Decoding must fail cleanly, never crash or
 * read out of bounds. */
#include <stdint.h>
#include <string.h>

#include "formats/arrow/oa_pq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  static const int phys[5] = {PB__PQ_INT32, PB__PQ_FLOAT, PB__PQ_DOUBLE, PB__PQ_BYTE_ARRAY,
                              PB__PQ_INT64};
  static const int codecs[5] = {PB__PQ_UNCOMPRESSED, PB__PQ_SNAPPY, PB__PQ_GZIP, PB__PQ_ZSTD,
                                PB__PQ_LZ4_RAW};
  int rep = data[1] % 3, def = (data[1] / 3) % 8;
  if (def < rep) def = rep;
  pb__pq_rows rows;
  memset(&rows, 0, sizeof rows);
  rows.may_borrow = (data[2] >> 3) & 1;
  struct pb_error err;
  int rc = pb__pq_read_mem(data + 3, size - 3, phys[data[0] % 5], codecs[(data[0] / 5) % 5], rep,
                           def, data[2] % 8, &rows, &err);
  if (rc == PB_OK) { /* what came back must be consistent */
    if (rows.n_rows != 1 || rows.row_elem[1] < rows.row_elem[0] ||
        rows.elem_val[rows.n_elems] != rows.n_vals)
      __builtin_trap();
    volatile unsigned sum = 0;
    size_t bytes = rows.width > 0 ? rows.n_vals * rows.width : rows.n_data;
    for (size_t k = 0; k < bytes; k++) sum += pb__pq_rows_data(&rows)[k];
    (void)sum;
  }
  pb__pq_rows_destroy(&rows);
  return 0;
}
