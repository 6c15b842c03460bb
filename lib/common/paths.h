/* Where things are: the folder holding libpipebench itself (an installed tree, or the build
 * tree). The public side is pb_install_path and pb_tmp_dir (pipebench/sys.h). Internal. */
#ifndef PB_COMMON_PATHS_H
#define PB_COMMON_PATHS_H

#include <stddef.h>

/** The folder holding the shared library this code is part of (links resolved) into buf:
 * PB_OK, or -1 with buf "" when the loader cannot say. The CUDA module is looked for there, and
 * an installed tree's share/pipebench beside it. */
int pb__library_dir(char *buf, size_t size);

#endif
