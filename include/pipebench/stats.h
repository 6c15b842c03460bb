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
 * (p in [0,1]; p=0 gives the minimum). p*n is read as the decimal product the caller meant
 * (0.07*100 is 7, not 7.000000000000001). sorted must be ascending. NaN when n == 0. */
PB_API double pb_percentile_sorted(const double *sorted, size_t n, double p);

/** Smallest n for which the nearest-rank percentile p is not simply the maximum in the sense of
 * measuring.md (p90: 64, p95: 130, p99: 662, p99.9: 6636): the smallest n with
 * P[Binomial(n, 1-p) <= 1] = p^n + n(1-p)p^(n-1) < 0.01, i.e. the second-largest of n samples
 * is a 99% upper confidence bound of the p-quantile (MLPerf LoadGen's early-stopping rule with
 * one over-latency query). 0 for p <= 0.5 (and NaN); SIZE_MAX for p >= 1. */
PB_API size_t pb_percentile_min_n(double p);

/** Summary of one sample (e.g. latencies in seconds). When n == 0 every double field is NaN
 * and the counts and flags are 0. */
typedef struct pb_summary {
  size_t n;
  double mean, stddev; /**< stddev: sample standard deviation (n-1); 0 when n == 1 */
  double min, max;
  double p50, p95, p99; /**< nearest rank */
  double cv;            /**< stddev / mean; NaN when mean == 0 */
  double median_ci_lo, median_ci_hi; /**< 95% CI of the median (order statistics, exact binomial) */
  double mad;           /**< median absolute deviation (unscaled; conventional medians, i.e.
                             the mean of the middle two for even n) */
  size_t n_outliers;    /**< values with |0.6745 (x - median) / MAD| > 3.5; when MAD == 0,
                             values with |x - median| / (1.253314 * mean abs. deviation) > 3.5 */
  int p95_reliable, p99_reliable; /**< n large enough for that percentile */
  int unstable;         /**< cv > 0.05 or any outlier */
} pb_summary;

/** Summarises n values (any order; values is not modified). n == 0 gives n = 0, NaN statistics
 * and 0 (not an error). Returns PB_EINVAL when out is NULL (or values is NULL with n > 0),
 * PB_ENOMEM when a temporary copy cannot be allocated. */
PB_API int pb_summarize(const double *values, size_t n, pb_summary *out);

/** Confidence interval of the median from order statistics: the narrowest symmetric interval
 * [x_(j), x_(n+1-j)] (1-based ranks) of the sorted values whose exact binomial coverage
 * 1 - 2 P[Binomial(n, 1/2) <= j-1] is at least `level` (e.g. 0.95, 0.99). When n is too small
 * for that coverage, it is the whole range [min, max]. NaN (both) when n == 0. lo or hi may be
 * NULL. */
PB_API void pb_median_ci_sorted(const double *sorted, size_t n, double level, double *lo,
                                double *hi);

/** Mann-Whitney U test, two-sided. u is U of the first sample (count of pairs a > b, ties
 * counting one half); p uses the normal approximation with tie correction and continuity
 * correction, or the exact distribution when both samples have at most 20 values and no ties.
 * Returns PB_EINVAL when either sample is empty. */
PB_API int pb_mann_whitney(const double *a, size_t na, const double *b, size_t nb, double *u,
                           double *p);

/** Ratio of two samples' medians (a / b, conventional medians) with its uncertainty: a
 * bootstrap 99% interval (percentile method: nearest-rank 0.5% and 99.5% points of `rounds`
 * resampled ratios; the same seed gives the same interval) and its relative half-width. */
typedef struct pb_ratio {
  double ratio;        /**< median(a) / median(b) */
  double lo, hi;       /**< 99% bootstrap interval of the ratio */
  double rel_err;      /**< half-width of [lo,hi] relative to ratio */
} pb_ratio;
/** rounds <= 0 means 2000. Returns PB_EINVAL (all fields NaN) when either sample is empty or
 * out is NULL, PB_ENOMEM when temporaries cannot be allocated. Values should be positive. */
PB_API int pb_ratio_of(const double *a, size_t na, const double *b, size_t nb, uint64_t seed,
                       int rounds, pb_ratio *out);

/** Verdict of a comparison by measuring.md's rule. */
typedef enum { PB_SAME = 0, PB_FASTER = 1, PB_SLOWER = 2 } pb_verdict;
/** Compares times a (new) against b (baseline): significant only when the ratio of medians
 * passes `factor` (e.g. 1.1) either way (ratio > factor or ratio < 1/factor; a factor below 1
 * is read as its inverse) AND (Mann-Whitney p < 0.002 OR the medians' 99% confidence intervals
 * from pb_median_ci_sorted do not overlap). PB_SLOWER when a takes longer. *p_out (may be
 * NULL) receives the Mann-Whitney p, NaN when a sample is empty (then the verdict is PB_SAME). */
PB_API pb_verdict pb_compare(const double *a, size_t na, const double *b, size_t nb,
                             double factor, double *p_out);
PB_API const char *pb_verdict_name(pb_verdict v);

#ifdef __cplusplus
}
#endif
#endif
