/* pb__device_resolve: see device.h. */
#include <stdio.h>
#include <string.h>

#include "pipebench/engine.h"
#include "tracks/device.h"

int pb__device_is_auto(const char *asked) { return asked == NULL || strcmp(asked, "auto") == 0; }

const char *pb__device_resolve(const char *asked, char *why, size_t why_len) {
  if (why != NULL && why_len > 0) why[0] = '\0';
  const char *d = pb_engine_resolve_device(asked != NULL ? asked : "auto");
  if (d != NULL && pb__device_is_auto(asked) && strcmp(d, "cpu") == 0 && why != NULL &&
      why_len > 0) {
    char what[512] = "";
    pb_engine_device_status("cuda", what, sizeof what);
    snprintf(why, why_len, "no usable GPU: %s", what[0] ? what : "this build has no GPU backend");
  }
  return d;
}
