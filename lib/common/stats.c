/* Statistics for pipebench's measurements: percentiles, summaries, median confidence
 * intervals, Mann-Whitney U, ratio of medians and the comparison rule of measuring.md.
 * docs/statistics.md gives the formulas and where they come from. */
#include "pipebench/stats.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Order that sorts NaN after every number, so a stray NaN cannot break qsort's contract. */
static int cmp_double(const void *pa, const void *pb) {
  double a = *(const double *)pa, b = *(const double *)pb;
  if (isnan(a) || isnan(b)) return (isnan(a) != 0) - (isnan(b) != 0);
  return (a > b) - (a < b);
}

static double *sorted_copy(const double *v, size_t n) {
  double *s = malloc((n ? n : 1) * sizeof *s);
  if (!s) return NULL;
  if (n) memcpy(s, v, n * sizeof *s);
  qsort(s, n, sizeof *s, cmp_double);
  return s;
}

/* Conventional median (mean of the two middle values when n is even); n > 0. */
static double median_sorted(const double *s, size_t n) {
  if (n % 2) return s[n / 2];
  return 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* ceil(p*n) with p*n taken as the exact product of the decimal p a caller meant: 0.95*100
 * evaluates to 95 but 0.07*100 to 7.000000000000001, whose ceil would skip a rank. A product
 * within a few ulps of an integer counts as that integer. */
static size_t nearest_rank(double p, size_t n) {
  double r = p * (double)n;
  double k = nearbyint(r);
  if (fabs(r - k) <= 1e-12 * (r > 1.0 ? r : 1.0)) return (size_t)k;
  return (size_t)ceil(r);
}

double pb_percentile_sorted(const double *sorted, size_t n, double p) {
  if (n == 0 || !sorted || isnan(p)) return NAN;
  if (p <= 0.0) return sorted[0];
  if (p >= 1.0) return sorted[n - 1];
  size_t k = nearest_rank(p, n);
  if (k == 0) k = 1;
  if (k > n) k = n;
  return sorted[k - 1];
}

/* P[Binomial(n, 1-p) <= 1] = p^n + n (1-p) p^(n-1): the chance that at most one of n samples
 * lands above the true p-quantile. Below 1% the second-largest sample bounds the quantile from
 * above with 99% confidence, so the largest one could be dropped (MLPerf LoadGen's early
 * stopping with one over-latency query, tolerance 0, confidence 0.99). */
static double at_most_one_above(double p, double n) {
  double lp = log(p);
  return exp(n * lp) + exp(log(n) + log1p(-p) + (n - 1.0) * lp);
}

size_t pb_percentile_min_n(double p) {
  if (isnan(p) || p <= 0.5) return 0;
  if (p >= 1.0) return SIZE_MAX; /* no finite sample pins the maximum of a distribution */
  /* The probability falls monotonically for n >= 1: double until it passes, then bisect. */
  double hi = 2.0;
  while (!(at_most_one_above(p, hi) < 0.01)) {
    hi *= 2.0;
    if (hi > 1e15) return SIZE_MAX;
  }
  double lo = hi / 2.0; /* fails (or is 1, which always fails: the value is 1) */
  while (hi - lo > 1.0) {
    double mid = floor((lo + hi) / 2.0);
    if (at_most_one_above(p, mid) < 0.01)
      hi = mid;
    else
      lo = mid;
  }
  return (size_t)hi;
}

void pb_median_ci_sorted(const double *sorted, size_t n, double level, double *lo, double *hi) {
  double l = NAN, h = NAN;
  if (n > 0 && sorted) {
    /* The interval [x_(j), x_(n-j+1)] (1-based) holds the median with probability
     * 1 - 2 P[B <= j-1], B ~ Binomial(n, 1/2). Take the largest j whose coverage reaches
     * level. The pmf is stepped in logs so large n cannot underflow 2^-n. */
    double alpha_half = (1.0 - level) / 2.0;
    double logpmf = -(double)n * log(2.0); /* log P[B = 0] */
    double carry = 0.0;                    /* Kahan compensation: n/2 steps must not drift */
    double tail = 0.0;                     /* P[B <= j-1] */
    size_t j = 0;                          /* 0: not even the whole range has the coverage */
    for (size_t i = 0; i < n / 2; i++) {
      tail += exp(logpmf);
      if (!(tail <= alpha_half)) break;
      j = i + 1;
      double step = log((double)(n - i)) - log((double)(i + 1)) - carry;
      double next = logpmf + step;
      carry = (next - logpmf) - step;
      logpmf = next;
    }
    if (j == 0) {
      l = sorted[0];
      h = sorted[n - 1];
    } else {
      l = sorted[j - 1];
      h = sorted[n - j];
    }
  }
  if (lo) *lo = l;
  if (hi) *hi = h;
}

/* Modified z-score outliers (Iglewicz and Hoaglin): |0.6745 (x - med) / MAD| > 3.5. When more
 * than half the values equal the median, MAD is 0 and the score undefined; the same authors'
 * fallback scales by the mean absolute deviation instead ((x - med) / (1.253314 MeanAD)). When
 * that is 0 too, every value equals the median and none is an outlier. */
static size_t count_outliers(const double *v, size_t n, double med, double mad) {
  size_t count = 0;
  if (mad > 0.0) {
    for (size_t i = 0; i < n; i++)
      if (fabs(0.6745 * (v[i] - med) / mad) > 3.5) count++;
    return count;
  }
  double mean_ad = 0.0;
  for (size_t i = 0; i < n; i++) mean_ad += fabs(v[i] - med);
  mean_ad /= (double)n;
  if (!(mean_ad > 0.0)) return 0;
  for (size_t i = 0; i < n; i++)
    if (fabs((v[i] - med) / (1.253314 * mean_ad)) > 3.5) count++;
  return count;
}

int pb_summarize(const double *values, size_t n, pb_summary *out) {
  if (!out || (n > 0 && !values)) return PB_EINVAL;
  memset(out, 0, sizeof *out);
  out->n = n;
  if (n == 0) {
    out->mean = out->stddev = out->min = out->max = NAN;
    out->p50 = out->p95 = out->p99 = out->cv = NAN;
    out->median_ci_lo = out->median_ci_hi = out->mad = NAN;
    return 0;
  }
  double *s = sorted_copy(values, n);
  if (!s) return PB_ENOMEM;

  /* Two passes: the mean first, then squared deviations from it, which keeps the variance
   * accurate when the spread is tiny next to the mean (typical for timings). */
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) sum += s[i];
  double mean = sum / (double)n;
  double ss = 0.0;
  for (size_t i = 0; i < n; i++) ss += (s[i] - mean) * (s[i] - mean);
  out->mean = mean;
  out->stddev = n > 1 ? sqrt(ss / (double)(n - 1)) : 0.0;
  out->cv = mean != 0.0 ? out->stddev / mean : NAN;
  out->min = s[0];
  out->max = s[n - 1];
  out->p50 = pb_percentile_sorted(s, n, 0.50);
  out->p95 = pb_percentile_sorted(s, n, 0.95);
  out->p99 = pb_percentile_sorted(s, n, 0.99);
  pb_median_ci_sorted(s, n, 0.95, &out->median_ci_lo, &out->median_ci_hi);

  double med = median_sorted(s, n);
  /* Absolute deviations reuse the buffer: the sorted values are no longer needed. */
  for (size_t i = 0; i < n; i++) s[i] = fabs(s[i] - med);
  qsort(s, n, sizeof *s, cmp_double);
  out->mad = median_sorted(s, n);
  out->n_outliers = count_outliers(values, n, med, out->mad);
  free(s);

  out->p95_reliable = n >= pb_percentile_min_n(0.95);
  out->p99_reliable = n >= pb_percentile_min_n(0.99);
  out->unstable = out->cv > 0.05 || out->n_outliers > 0;
  return 0;
}

/* ---- Mann-Whitney U ------------------------------------------------------------------------ */

typedef struct {
  double v;
  int from_a;
} tagged;

static int cmp_tagged(const void *pa, const void *pb) {
  return cmp_double(&((const tagged *)pa)->v, &((const tagged *)pb)->v);
}

/* P[U <= u] under H0 for samples of m and k distinct values. The number of arrangements with
 * U = u is the coefficient of q^u in the Gaussian binomial [m+k choose m]_q, built one factor
 * at a time: [k+i choose i] = [k+i-1 choose i-1] (1 - q^(k+i)) / (1 - q^i). Every coefficient
 * stays an integer no larger than C(40,20), so int64 is exact for m, k <= 20. */
static double exact_cdf(size_t m, size_t k, size_t u) {
  int64_t c[20 * 20 + 1];
  size_t top = m * k;
  memset(c, 0, sizeof c);
  c[0] = 1;
  for (size_t i = 1; i <= m; i++) {
    size_t d = k + i;
    for (size_t e = top; e >= d; e--) c[e] -= c[e - d]; /* times (1 - q^d) */
    for (size_t e = i; e <= top; e++) c[e] += c[e - i];  /* divided by (1 - q^i) */
  }
  double below = 0.0, total = 0.0;
  for (size_t e = 0; e <= top; e++) {
    total += (double)c[e];
    if (e <= u) below += (double)c[e];
  }
  return below / total;
}

int pb_mann_whitney(const double *a, size_t na, const double *b, size_t nb, double *u,
                    double *p) {
  if (u) *u = NAN;
  if (p) *p = NAN;
  if (na == 0 || nb == 0 || !a || !b) return PB_EINVAL;
  size_t n = na + nb;
  tagged *t = malloc(n * sizeof *t);
  if (!t) return PB_ENOMEM;
  for (size_t i = 0; i < na; i++) t[i] = (tagged){a[i], 1};
  for (size_t i = 0; i < nb; i++) t[na + i] = (tagged){b[i], 0};
  qsort(t, n, sizeof *t, cmp_tagged);

  /* Midranks: a run of tied values shares the mean of the ranks it spans. */
  double rank_sum_a = 0.0, tie_term = 0.0;
  int ties = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && t[j].v == t[i].v) j++;
    double mid = 0.5 * ((double)(i + 1) + (double)j);
    for (size_t k = i; k < j; k++)
      if (t[k].from_a) rank_sum_a += mid;
    double run = (double)(j - i);
    if (j - i > 1) {
      ties = 1;
      tie_term += run * run * run - run;
    }
    i = j;
  }
  free(t);

  double dna = (double)na, dnb = (double)nb, dn = (double)n;
  double ua = rank_sum_a - dna * (dna + 1.0) / 2.0; /* = #(a > b) + #(a == b) / 2 */
  double pv;
  if (!ties && na <= 20 && nb <= 20) {
    /* Rank sums of distinct values are integers, so ua is exact. */
    double lower = fmin(ua, dna * dnb - ua);
    pv = 2.0 * exact_cdf(na, nb, (size_t)lower);
  } else {
    double mu = dna * dnb / 2.0;
    double var = dna * dnb / 12.0 * ((dn + 1.0) - tie_term / (dn * (dn - 1.0)));
    if (!(var > 0.0)) {
      pv = 1.0; /* every value tied: no evidence of a difference */
    } else {
      double dev = fabs(ua - mu) - 0.5; /* continuity correction */
      if (dev < 0.0) dev = 0.0;
      pv = erfc(dev / sqrt(var) / sqrt(2.0));
    }
  }
  if (pv > 1.0) pv = 1.0;
  if (u) *u = ua;
  if (p) *p = pv;
  return 0;
}

/* ---- ratio of medians ---------------------------------------------------------------------- */

/* Median of a bootstrap resample of sorted s: draw n indices, count how often each is drawn,
 * and walk the counts to the middle rank(s). O(n) per resample, no sorting. */
static double resample_median(const double *s, size_t n, uint32_t *counts, pb_rng *rng) {
  memset(counts, 0, n * sizeof *counts);
  for (size_t i = 0; i < n; i++) counts[pb_rng_below(rng, (uint64_t)n)]++;
  size_t want_lo = (n - 1) / 2, want_hi = n / 2; /* 0-based ranks of the middle */
  double lo = NAN, hi = NAN;
  size_t seen = 0;
  for (size_t i = 0; i < n; i++) {
    size_t next = seen + counts[i];
    if (isnan(lo) && want_lo < next) lo = s[i];
    if (want_hi < next) {
      hi = s[i];
      break;
    }
    seen = next;
  }
  return 0.5 * (lo + hi);
}

int pb_ratio_of(const double *a, size_t na, const double *b, size_t nb, uint64_t seed,
                int rounds, pb_ratio *out) {
  if (!out) return PB_EINVAL;
  out->ratio = out->lo = out->hi = out->rel_err = NAN;
  if (na == 0 || nb == 0 || !a || !b) return PB_EINVAL;
  if (rounds <= 0) rounds = 2000;
  int rc = PB_ENOMEM;
  double *sa = sorted_copy(a, na), *sb = sorted_copy(b, nb);
  uint32_t *counts = malloc((na > nb ? na : nb) * sizeof *counts);
  double *r = malloc((size_t)rounds * sizeof *r);
  if (!sa || !sb || !counts || !r) goto done;

  out->ratio = median_sorted(sa, na) / median_sorted(sb, nb);
  pb_rng rng;
  pb_rng_init(&rng, seed);
  for (int i = 0; i < rounds; i++) {
    double ma = resample_median(sa, na, counts, &rng);
    double mb = resample_median(sb, nb, counts, &rng);
    r[i] = ma / mb;
  }
  qsort(r, (size_t)rounds, sizeof *r, cmp_double);
  out->lo = pb_percentile_sorted(r, (size_t)rounds, 0.005);
  out->hi = pb_percentile_sorted(r, (size_t)rounds, 0.995);
  out->rel_err = (out->hi - out->lo) / 2.0 / out->ratio;
  rc = 0;
done:
  free(sa);
  free(sb);
  free(counts);
  free(r);
  return rc;
}

/* ---- the comparison rule ------------------------------------------------------------------- */

pb_verdict pb_compare(const double *a, size_t na, const double *b, size_t nb, double factor,
                      double *p_out) {
  if (p_out) *p_out = NAN;
  if (na == 0 || nb == 0 || !a || !b) return PB_SAME;
  double p = NAN;
  if (pb_mann_whitney(a, na, b, nb, NULL, &p) != 0) return PB_SAME;
  if (p_out) *p_out = p;
  double *sa = sorted_copy(a, na), *sb = sorted_copy(b, nb);
  pb_verdict v = PB_SAME;
  if (sa && sb) {
    double ratio = median_sorted(sa, na) / median_sorted(sb, nb);
    if (factor < 1.0) factor = 1.0 / factor; /* 0.9 and 1/0.9 mean the same band */
    int passes_factor = ratio > factor || ratio * factor < 1.0;
    double alo, ahi, blo, bhi;
    pb_median_ci_sorted(sa, na, 0.99, &alo, &ahi);
    pb_median_ci_sorted(sb, nb, 0.99, &blo, &bhi);
    int apart = ahi < blo || bhi < alo;
    if (passes_factor && (p < 0.002 || apart)) v = ratio > 1.0 ? PB_SLOWER : PB_FASTER;
  }
  free(sa);
  free(sb);
  return v;
}

const char *pb_verdict_name(pb_verdict v) {
  switch (v) {
    case PB_SAME: return "same";
    case PB_FASTER: return "faster";
    case PB_SLOWER: return "slower";
  }
  return "unknown";
}
