/* Pipebench's Python helpers (the peers it measures itself against), run as child processes. */
#ifndef PB_PEER_H
#define PB_PEER_H

#include "pipebench/sys.h"

/** Folder of pipebench's Python scripts (PIPEBENCH_PYTHON_DIR, else the source tree's python/). */
const char *pb__python_dir(void);
/** Runs argv (argv[0] a path, or a name looked up on PATH) with a time limit through
 * common/proc (its own process group: a stop takes its workers too); its stdout and stderr go
 * to err_path. 0 when it exited 0; otherwise an error quoting the last lines of its output. */
int pb__run_child(char *const argv[], double timeout_s, const char *err_path, struct pb_error *err);

#endif
