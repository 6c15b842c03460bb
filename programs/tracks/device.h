/* Which device run, infer and train compute on: "auto" (their default) takes the GPU where an
 * engine can run there, else the CPU, and the programs say which and why. */
#ifndef PB_TRACKS_DEVICE_H
#define PB_TRACKS_DEVICE_H

#include <stddef.h>

/** Resolves asked (NULL: "auto") as pb_engine_resolve_device does: "cpu" or "cuda", NULL for an
 * unknown name. When auto comes to the CPU, why gets "no usable GPU: <what is missing>" (the
 * CUDA module's own words), else "". why may be NULL. */
const char *pb__device_resolve(const char *asked, char *why, size_t why_len);

/** Whether asked (NULL: "auto") leaves the choice to pipebench. */
int pb__device_is_auto(const char *asked);

#endif
