/* pipebench statistics, as ../docs/measuring.md defines them. */
#ifndef PIPEBENCH_STATS_H
#define PIPEBENCH_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "pipebench/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Nearest-rank percentile of n values: the value at index ceil(p*n)-1 of the sorted values
 * (p in [0,1]; p=0 gives the minimum). sorted must be ascending. NaN when n == 0. */
PB_API double pb_percentile_sorted(const double *sorted, size_t n, double p);

/** Smallest n for which the nearest-rank percentile p is not simply the maximum in the sense of
 * measuring.md (p90: 64, p99: 662). 0 for p <= 0.5. */
PB_API size_t pb_percentile_min_n(double p);

/** Summary of one sample (e.g. latencies in seconds). All fields NaN when n == 0. */
typedef struct pb_summary {
  size_t n;
  double mean, stddev; /**< stddev: sample standard deviation (n-1); 0 when n == 1 */
  double min, max;
  double p50, p95, p99; /**< nearest rank */
  double cv;            /**< stddev / mean; NaN when mean == 0 */
  double median_ci_lo, median_ci_hi; /**< 95% CI of the median (order statistics, exact binomial) */
  double mad;           /**< median absolute deviation (unscaled) */
  size_t n_outliers;    /**< values with |0.6745 (x - median) / MAD| > 3.5 */
  int p95_reliable, p99_reliable; /**< n large enough for that percentile */
  int unstable;         /**< cv > 0.05 or any outlier */
} pb_summary;

/** Summarises n values (any order; values is not modified). Returns PB_ENOMEM on failure. */
PB_API int pb_summarize(const double *values, size_t n, pb_summary *out);

/** Confidence interval of the median from order statistics: the interval [x_(lo), x_(hi)] of
 * the sorted values whose exact binomial coverage is at least `level` (e.g. 0.95, 0.99). When
 * n is too small for that coverage, it is the whole range [min, max]. */
PB_API void pb_median_ci_sorted(const double *sorted, size_t n, double level, double *lo,
                                double *hi);

/** Mann-Whitney U test, two-sided. u is U of the first sample (count of pairs a > b, ties
 * counting one half); p uses the normal approximation with tie correction and continuity
 * correction, or the exact distribution when both samples have at most 20 values and no ties.
 * Returns PB_EINVAL when either sample is empty. */
PB_API int pb_mann_whitney(const double *a, size_t na, const double *b, size_t nb, double *u,
                           double *p);

/** Ratio of two samples' medians (a / b) with its uncertainty: a bootstrap (seeded, `rounds`
 * resamples) 99% interval and the standard error of log(ratio) turned into a relative error. */
typedef struct pb_ratio {
  double ratio;        /**< median(a) / median(b) */
  double lo, hi;       /**< 99% bootstrap interval of the ratio */
  double rel_err;      /**< half-width of [lo,hi] relative to ratio */
} pb_ratio;
PB_API int pb_ratio_of(const double *a, size_t na, const double *b, size_t nb, uint64_t seed,
                       int rounds, pb_ratio *out);

/** Verdict of a comparison by measuring.md's rule. */
typedef enum { PB_SAME = 0, PB_FASTER = 1, PB_SLOWER = 2 } pb_verdict;
/** Compares times a (new) against b (baseline): significant only when the ratio of medians
 * passes `factor` (e.g. 1.1) either way AND (Mann-Whitney p < 0.002 OR the medians' 99%
 * confidence intervals do not overlap). PB_SLOWER when a takes longer. */
PB_API pb_verdict pb_compare(const double *a, size_t na, const double *b, size_t nb,
                             double factor, double *p_out);
PB_API const char *pb_verdict_name(pb_verdict v);

#ifdef __cplusplus
}
#endif
#endif
