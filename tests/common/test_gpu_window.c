/* pb__gpu_window_stats: the GPU window's arithmetic, held with a made-up clock and made-up
 * event times. The first case is the shape of issue 30's rows: ResNet-50 at batch 256 with
 * 10.69 ms of device time per step, where the host's step times (the time to queue a step, not
 * to run it) added up to less than the device's busy time and gave AU 1.157 and more images/s
 * than the device time allows. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tracks/gpu_window.h"

#include "check.h"

#define MS(x) ((int64_t)llround((x) * 1e6))
enum { N = 8, BATCH = 256 };

/* Steps of `busy` ms each; the first starts `lead` ms after the mark, each next one `gap` ms
 * after the one before it ended. */
static void make_spans(pb_device_span *s, int n, double lead, double busy, double gap) {
  double t = lead;
  for (int i = 0; i < n; i++) {
    s[i].start_ns = MS(t);
    s[i].end_ns = MS(t + busy);
    t += busy + gap;
  }
}

static void queued_faster_than_run(void) {
  pb_device_span sp[N];
  make_spans(sp, N, 0.004, 10.69, 0.003);
  /* The host's step times: the loop queued a step in about 0.1 ms while two staging buffers
   * were free, then waited for the device partly outside its timed steps. */
  double host_ms[N] = {0.1, 0.1, 9.4, 10.6, 10.6, 10.6, 10.6, 11.9};
  double host_sum = 0, busy = 0;
  for (int i = 0; i < N; i++) host_sum += host_ms[i] / 1e3, busy += 10.69e-3;
  double old_au = busy / host_sum, old_ips = N * BATCH / host_sum;
  EXPECT(old_au > 1.1);                  /* what the old formula said */
  EXPECT(old_ips > N * BATCH / busy);    /* more than the device time allows */
  /* The window: opened on the idle device just before the mark, closed once it is idle again. */
  int64_t start = 1000000000, end = start + sp[N - 1].end_ns + MS(0.02);
  pb__gpu_window w;
  double step_s[N];
  struct pb_error err = {{0}};
  CHECK_OK(pb__gpu_window_stats(start, end, sp, N, N * BATCH, &w, step_s, &err), &err);
  EXPECT_NEAR(w.busy_s, busy, 1e-9);
  EXPECT_NEAR(w.device_time_mean, 10.69e-3, 1e-9);
  EXPECT_NEAR(w.window_s, (double)(end - start) / 1e9, 1e-12);
  EXPECT(w.au <= 1.0);
  EXPECT_NEAR(w.au, busy / w.window_s, 1e-12);
  EXPECT(w.au > 0.99); /* the device was busy all along */
  EXPECT_NEAR(w.images_per_sec, N * BATCH / w.window_s, 1e-6);
  EXPECT(w.images_per_sec <= w.bound_ips);
  EXPECT_NEAR(w.bound_ips, N * BATCH / busy, 1e-6);
  EXPECT(w.bound_ips < 23951); /* issue 30: 10.69 ms per 256 images allows at most 23,950 */
  /* steps end on the device: none is shorter than its own work; together they are the span */
  double sum = 0;
  for (int i = 0; i < N; i++) {
    EXPECT(step_s[i] >= 10.69e-3 - 1e-9);
    sum += step_s[i];
  }
  EXPECT_NEAR(sum, w.span_s, 1e-9);
  EXPECT_NEAR(step_s[0], 10.694e-3, 1e-9); /* from the mark */
  EXPECT_NEAR(step_s[1], 10.693e-3, 1e-9); /* from the end of the step before */
}

/* Data-bound: the device idles 5 ms before each step, waiting for the batch. */
static void waits_for_data(void) {
  pb_device_span sp[N];
  make_spans(sp, N, 5.0, 10.0, 5.0);
  int64_t start = 0, end = sp[N - 1].end_ns + MS(0.05);
  pb__gpu_window w;
  double step_s[N];
  CHECK_OK(pb__gpu_window_stats(start, end, sp, N, N * BATCH, &w, step_s, NULL), NULL);
  EXPECT_NEAR(w.au, 80.0 / 120.05, 1e-9);
  for (int i = 0; i < N; i++) EXPECT_NEAR(step_s[i], 15e-3, 1e-9);
  EXPECT_NEAR(w.images_per_sec, N * BATCH / 120.05e-3, 1e-6);
}

/* The host's clock ran a little slow against the device's: the window is the device's span,
 * which every step lies in, and AU stays at most 1. */
static void clocks_drift(void) {
  pb_device_span sp[N];
  make_spans(sp, N, 0.0, 10.0, 0.0);
  int64_t start = 0, end = sp[N - 1].end_ns - 3000; /* 3 us short */
  pb__gpu_window w;
  CHECK_OK(pb__gpu_window_stats(start, end, sp, N, N * BATCH, &w, NULL, NULL), NULL);
  EXPECT_NEAR(w.window_s, w.span_s, 1e-15);
  EXPECT(w.au <= 1.0);
  EXPECT(w.images_per_sec <= w.bound_ips);
}

static void refusals(void) {
  pb_device_span sp[3] = {{0, MS(1)}, {MS(2), MS(3)}, {MS(4), MS(5)}};
  pb__gpu_window w;
  struct pb_error err = {{0}};
  EXPECT_EQ(pb__gpu_window_stats(MS(10), MS(9), sp, 3, 3, &w, NULL, &err), PB_EINVAL);
  EXPECT_CONTAINS(err.message, "before it starts");
  pb_device_span overlap[2] = {{0, MS(2)}, {MS(1), MS(3)}};
  memset(&err, 0, sizeof err);
  EXPECT_EQ(pb__gpu_window_stats(0, MS(9), overlap, 2, 2, &w, NULL, &err), PB_EINVAL);
  EXPECT_CONTAINS(err.message, "step 1 runs from 1000000 to 3000000 ns");
  pb_device_span backwards[1] = {{MS(2), MS(1)}};
  EXPECT_EQ(pb__gpu_window_stats(0, MS(9), backwards, 1, 1, &w, NULL, NULL), PB_EINVAL);
  pb_device_span before_mark[1] = {{-5, MS(1)}};
  EXPECT_EQ(pb__gpu_window_stats(0, MS(9), before_mark, 1, 1, &w, NULL, NULL), PB_EINVAL);
  /* no steps: nothing to rate */
  EXPECT_OK(pb__gpu_window_stats(0, MS(9), NULL, 0, 0, &w, NULL, NULL), NULL);
  EXPECT(isnan(w.au) && isnan(w.images_per_sec));
}

int main(void) {
  queued_faster_than_run();
  waits_for_data();
  clocks_drift();
  refusals();
  if (check_failures() == 0) printf("gpu_window: all checks passed\n");
  return check_failures() != 0;
}
