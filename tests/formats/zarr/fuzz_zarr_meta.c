/* Fuzz target: Zarr array metadata (.zarray, zarr.json) and OME attributes (.zattrs, group
 * zarr.json). Every input is tried as all four; parsing must never crash or leak. */
#include <stdint.h>
#include <stdlib.h>

#include "formats/zarr/zarr_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *json = (const char *)data;
  pb__zarr_ome *ome = malloc(sizeof *ome);
  if (ome == NULL) return 0;
  struct pb_error err;
  for (int version = 2; version <= 3; version++) {
    pb__zarr_array a;
    int ok_arr = pb__zarr_parse_array(json, size, version, "fuzz", &a, &err) == PB_OK;
    int ok_ome = pb__zarr_parse_ome(json, size, version, "fuzz", ome, &err) == PB_OK;
    if (ok_arr) {
      (void)pb__zarr_check_grid(&a, "fuzz", &err);
      (void)pb__zarr_map_axes(&a, NULL, "fuzz", &err);
      if (ok_ome) (void)pb__zarr_map_axes(&a, ome, "fuzz", &err);
    }
  }
  free(ome);
  return 0;
}
