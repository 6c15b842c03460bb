/* Fuzz target: a Parquet footer (FileMetaData in Thrift's compact protocol) as
 * lib/parquet/pq_footer.c parses it. Parsing must fail cleanly (PB_EFORMAT with a message) or
 * give metadata whose indexes all lie inside it; never crash, read out of bounds or allocate
 * more than the input can describe. */
#include <stdint.h>
#include <string.h>

#include "parquet/pq_footer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pb__pq_meta m;
  struct pb_error err;
  err.message[0] = '\0';
  int rc = pb__pq_meta_parse(data, size, "fuzz.parquet", &m, &err);
  if (rc != PB_OK) {
    if ((rc != PB_EFORMAT && rc != PB_ENOMEM) || strstr(err.message, "fuzz.parquet") == NULL)
      __builtin_trap();
    return 0;
  }
  if (m.n_nodes == 0 || m.n_leaves > m.n_nodes) __builtin_trap();
  char path[512];
  volatile size_t sum = 0;
  for (size_t k = 0; k < m.n_leaves; k++) {
    if (m.leaf_node[k] >= m.n_nodes || m.nodes[m.leaf_node[k]].leaf != (int32_t)k)
      __builtin_trap();
    sum += pb__pq_leaf_path(&m, k, path, sizeof path);
  }
  for (size_t g = 0; g < m.n_rgs; g++) {
    if (m.rgs[g].num_rows < 0) __builtin_trap();
    for (size_t k = 0; k < m.n_leaves; k++) sum += (size_t)m.chunks[g * m.n_leaves + k].codec;
  }
  for (size_t i = 0; i < m.n_kv; i++) sum += strlen(m.kv[i].key);
  (void)sum;
  pb__pq_meta_destroy(&m);
  return 0;
}
