/* The GPU window's arithmetic: images per second and accelerator utilisation over a window that
 * opens and closes on an idle device, and each step's time from the device's own spans. Pure (no
 * clock, no device), so a test holds it with made-up times. docs/measuring.md says why. */
#ifndef PB_TRACKS_GPU_WINDOW_H
#define PB_TRACKS_GPU_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#include "pipebench/core.h"
#include "pipebench/engine.h"

typedef struct pb__gpu_window {
  double window_s;         /**< host wall time from the synchronised start to the synchronised
                                end; the device's span where that is longer (the two clocks
                                drift apart by parts per million, and the window holds the span) */
  double span_s;           /**< the device's: from its mark to the last step's end */
  double busy_s;           /**< the steps' device time: the sum of end - start */
  double device_time_mean; /**< busy_s per step */
  double images_per_sec;   /**< images / window_s */
  double bound_ips;        /**< images / busy_s: the most the device time allows */
  double au;               /**< busy_s / window_s: at most 1, as every span lies in the window */
} pb__gpu_window;

/** start_ns and end_ns: the host clock on the idle device before the mark
 * (pb_engine_device_mark's host_ns) and after waiting for the device (pb_engine_device_spans);
 * spans: the n steps' device spans in order (ns after the mark); images: what the n steps took.
 * Fills w and, when step_s is not NULL, each step's time in seconds (n values): from the end of
 * the step before it on the device (the mark for the first) to its own end, so a step holds the
 * wait for its data as well as its work, and the steps add up to the span. PB_EINVAL when
 * end_ns < start_ns or the spans are out of order (one ending before it starts, starting before
 * the mark or before the one before it ended). With n == 0 the rates are NaN. */
int pb__gpu_window_stats(int64_t start_ns, int64_t end_ns, const pb_device_span *spans, size_t n,
                         int64_t images, pb__gpu_window *w, double *step_s, struct pb_error *err);

#endif
