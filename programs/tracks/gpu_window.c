/* pb__gpu_window_stats: see gpu_window.h. */
#include <math.h>

#include "tracks/gpu_window.h"

int pb__gpu_window_stats(int64_t start_ns, int64_t end_ns, const pb_device_span *spans, size_t n,
                         int64_t images, pb__gpu_window *w, double *step_s, struct pb_error *err) {
  *w = (pb__gpu_window){NAN, NAN, NAN, NAN, NAN, NAN, NAN};
  if (end_ns < start_ns)
    return pb_error_set(err, PB_EINVAL, "gpu window: ends (%lld ns) before it starts (%lld ns)",
                        (long long)end_ns, (long long)start_ns);
  int64_t prev_end = 0, busy = 0;
  for (size_t i = 0; i < n; i++) {
    if (spans[i].start_ns < prev_end || spans[i].end_ns < spans[i].start_ns)
      return pb_error_set(err, PB_EINVAL,
                          "gpu window: step %zu runs from %lld to %lld ns after the mark, and "
                          "the step before it ended at %lld ns",
                          i, (long long)spans[i].start_ns, (long long)spans[i].end_ns,
                          (long long)prev_end);
    if (step_s != NULL) step_s[i] = (double)(spans[i].end_ns - prev_end) / 1e9;
    busy += spans[i].end_ns - spans[i].start_ns;
    prev_end = spans[i].end_ns;
  }
  w->span_s = (double)prev_end / 1e9;
  w->window_s = (double)(end_ns - start_ns) / 1e9;
  if (w->span_s > w->window_s) w->window_s = w->span_s;
  if (n == 0) return PB_OK;
  w->busy_s = (double)busy / 1e9;
  w->device_time_mean = w->busy_s / (double)n;
  w->images_per_sec = w->window_s > 0 ? (double)images / w->window_s : NAN;
  w->bound_ips = w->busy_s > 0 ? (double)images / w->busy_s : NAN;
  w->au = w->window_s > 0 ? w->busy_s / w->window_s : NAN;
  return PB_OK;
}
