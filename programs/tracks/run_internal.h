/* Internals of pipebench run shared with the tools that add rows to a track's table (the torch
 * peers): the run's state and the harness's row helpers. */
#ifndef PB_RUN_INTERNAL_H
#define PB_RUN_INTERNAL_H

#include "tracks/harness.h"

#endif
