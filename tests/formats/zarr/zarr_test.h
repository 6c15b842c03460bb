/* Small helpers shared by the ome-zarr tests: temporary folders (the checks are tests/check.h). */
#ifndef ZARR_TEST_H
#define ZARR_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/format_internal.h"
#include "pipebench/core.h"
#include "pipebench/format.h"

#include "check.h"

/* A fresh temporary folder (removed with pb__remove_tree by the caller). */
static inline void zt_tmpdir(char *buf, size_t size, const char *tag) {
  snprintf(buf, size, "/tmp/pb-zarr-%s-XXXXXX", tag);
  if (mkdtemp(buf) == NULL) FAIL("mkdtemp failed");
}

#endif
