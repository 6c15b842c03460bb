/* Tests for lib/common/stats.c against tests/common/stats_reference.py, which computes every
 * expected value independently with Python's standard library (exact rationals, brute-force
 * enumeration). The test runs the script itself (PIPEBENCH_PYTHON, /usr/bin/python3), so the
 * reference cannot drift from the code that produced it.
 *
 * Hand-worked textbook example (also one of the reference cases, "textbook"):
 *   a = {19, 22, 16, 29, 24}, b = {20, 11, 17, 12}.
 *   Pairs with a > b: 19 beats 11,17,12 (3); 22 beats all four (4); 16 beats 11,12 (2);
 *   29 and 24 beat all four (4 + 4). U_a = 3+4+2+4+4 = 17, U_b = 5*4 - 17 = 3.
 *   Exact null distribution for sizes 5 and 4: C(9,4) = 126 equally likely arrangements; the
 *   number with U = 0,1,2,3 is 1,1,2,3 (partitions of u into at most 4 parts, each <= 5), so
 *   P[U <= 3] = 7/126 and the two-sided p = 14/126 = 0.1111.
 *   Ranks of all 9 values: 11:1 12:2 16:3 17:4 19:5 20:6 22:7 24:8 29:9; rank sum of a =
 *   5+7+3+9+8 = 32, and U_a = 32 - 5*6/2 = 17 again.
 * Median CI, n = 100, 95%: P[Binomial(100, 1/2) <= 39] = 0.0176 and <= 40 is 0.0284, so the
 * interval is [x_(40), x_(61)] with coverage 1 - 2*0.0176 = 0.965 (a standard table value). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipebench/stats.h"

#include "check.h"



/* Same value up to 1e-10 relative (the reference uses exact arithmetic where the C code uses
 * doubles), or both NaN. */
static int close_enough(double want, double got) {
  if (isnan(want) || isnan(got)) return isnan(want) && isnan(got);
  if (want == got) return 1;
  return fabs(want - got) <= 1e-10 * fabs(want);
}

static void expect(const char *ctx, const char *what, double want, double got) {
  if (!close_enough(want, got)) {
    EXPECT_FAIL("case %s: %s: want %.17g, got %.17g", ctx, what, want, got);
  }
}

static int cmp_d(const void *pa, const void *pb) {
  double a = *(const double *)pa, b = *(const double *)pb;
  return (a > b) - (a < b);
}

/* ---- the reference cases --------------------------------------------------------------- */

typedef struct {
  char name[64];
  double *a, *b;
  size_t na, nb;
  int has_b;
  double *sorted_a;
  int have_summary;
  pb_summary sum;
} ref_case;

static double *parse_sample(char *rest, size_t *n_out) {
  char *end;
  size_t n = (size_t)strtoull(rest, &end, 10);
  double *v = malloc((n ? n : 1) * sizeof *v);
  if (!v) abort();
  for (size_t i = 0; i < n; i++) v[i] = strtod(end, &end);
  *n_out = n;
  return v;
}

static void case_reset(ref_case *c) {
  free(c->a);
  free(c->b);
  free(c->sorted_a);
  memset(c, 0, sizeof *c);
}

static const double *sorted_a(ref_case *c) {
  if (!c->sorted_a) {
    c->sorted_a = malloc((c->na ? c->na : 1) * sizeof(double));
    if (!c->sorted_a) abort();
    if (c->na) memcpy(c->sorted_a, c->a, c->na * sizeof(double));
    qsort(c->sorted_a, c->na, sizeof(double), cmp_d);
  }
  return c->sorted_a;
}

static double summary_field(const pb_summary *s, const char *key, int *found) {
  *found = 1;
  if (!strcmp(key, "n")) return (double)s->n;
  if (!strcmp(key, "mean")) return s->mean;
  if (!strcmp(key, "stddev")) return s->stddev;
  if (!strcmp(key, "min")) return s->min;
  if (!strcmp(key, "max")) return s->max;
  if (!strcmp(key, "p50")) return s->p50;
  if (!strcmp(key, "p95")) return s->p95;
  if (!strcmp(key, "p99")) return s->p99;
  if (!strcmp(key, "cv")) return s->cv;
  if (!strcmp(key, "ci_lo")) return s->median_ci_lo;
  if (!strcmp(key, "ci_hi")) return s->median_ci_hi;
  if (!strcmp(key, "mad")) return s->mad;
  if (!strcmp(key, "n_outliers")) return (double)s->n_outliers;
  if (!strcmp(key, "p95_reliable")) return s->p95_reliable;
  if (!strcmp(key, "p99_reliable")) return s->p99_reliable;
  if (!strcmp(key, "unstable")) return s->unstable;
  *found = 0;
  return NAN;
}

static size_t checks_done = 0;

static void check_line(ref_case *c, char *line) {
  char what[160];
  char *tok = strtok(line, " \n");
  if (!tok) return;
  checks_done++;
  if (!strcmp(tok, "pct")) {
    char *p = strtok(NULL, " \n");
    double want = strtod(strtok(NULL, " \n"), NULL);
    snprintf(what, sizeof what, "percentile %s", p);
    expect(c->name, what, want, pb_percentile_sorted(sorted_a(c), c->na, strtod(p, NULL)));
  } else if (!strcmp(tok, "minn")) {
    char *p = strtok(NULL, " \n");
    size_t want = (size_t)strtoull(strtok(NULL, " \n"), NULL, 10);
    size_t got = pb_percentile_min_n(strtod(p, NULL));
    if (want != got) {
      EXPECT_FAIL("pb_percentile_min_n(%s): want %zu, got %zu", p, want, got);
    }
  } else if (!strcmp(tok, "sum")) {
    if (!c->have_summary) {
      int rc = pb_summarize(c->a, c->na, &c->sum);
      if (rc != 0) {
        EXPECT_FAIL("case %s: pb_summarize returned %d", c->name, rc);
      }
      c->have_summary = 1;
    }
    char *key = strtok(NULL, " \n");
    double want = strtod(strtok(NULL, " \n"), NULL);
    int found;
    double got = summary_field(&c->sum, key, &found);
    if (!found) {
      EXPECT_FAIL("unknown summary key %s", key);
      return;
    }
    snprintf(what, sizeof what, "summary.%s", key);
    expect(c->name, what, want, got);
  } else if (!strcmp(tok, "ci")) {
    char *level = strtok(NULL, " \n");
    double want_lo = strtod(strtok(NULL, " \n"), NULL);
    double want_hi = strtod(strtok(NULL, " \n"), NULL);
    double lo, hi;
    pb_median_ci_sorted(sorted_a(c), c->na, strtod(level, NULL), &lo, &hi);
    snprintf(what, sizeof what, "median CI %s lo", level);
    expect(c->name, what, want_lo, lo);
    snprintf(what, sizeof what, "median CI %s hi", level);
    expect(c->name, what, want_hi, hi);
  } else if (!strcmp(tok, "mw")) {
    char *first = strtok(NULL, " \n");
    double u, p;
    int rc = pb_mann_whitney(c->a, c->na, c->b, c->nb, &u, &p);
    if (!strcmp(first, "einval")) {
      if (rc != PB_EINVAL) {
        EXPECT_FAIL("case %s: mann_whitney rc want PB_EINVAL, got %d", c->name, rc);
      }
      return;
    }
    if (rc != 0) {
      EXPECT_FAIL("case %s: mann_whitney rc %d", c->name, rc);
    }
    expect(c->name, "U", strtod(first, NULL), u);
    expect(c->name, "Mann-Whitney p", strtod(strtok(NULL, " \n"), NULL), p);
  } else if (!strcmp(tok, "ratio")) {
    double want = strtod(strtok(NULL, " \n"), NULL);
    pb_ratio r;
    int rc = pb_ratio_of(c->a, c->na, c->b, c->nb, 42, 300, &r);
    EXPECT(rc == 0);
    expect(c->name, "ratio of medians", want, r.ratio);
    if (!(r.lo <= r.ratio && r.ratio <= r.hi)) {
      EXPECT_FAIL("case %s: bootstrap interval [%g, %g] misses ratio %g", c->name, r.lo,
                  r.hi, r.ratio);
    }
    expect(c->name, "rel_err", (r.hi - r.lo) / 2.0 / r.ratio, r.rel_err);
  } else if (!strcmp(tok, "verdict")) {
    double factor = strtod(strtok(NULL, " \n"), NULL);
    char *want = strtok(NULL, " \n");
    double p = -1.0, p_mw = -2.0;
    pb_verdict v = pb_compare(c->a, c->na, c->b, c->nb, factor, &p);
    pb_mann_whitney(c->a, c->na, c->b, c->nb, NULL, &p_mw);
    if (strcmp(want, pb_verdict_name(v))) {
      EXPECT_FAIL("case %s: verdict at factor %g: want %s, got %s", c->name, factor,
                  want, pb_verdict_name(v));
    }
    expect(c->name, "compare p_out", p_mw, p);
  } else {
    EXPECT_FAIL("unknown reference record '%s'", tok);
  }
}

static void run_reference(void) {
  const char *py = getenv("PIPEBENCH_PYTHON");
  const char *src = getenv("PIPEBENCH_SOURCE_DIR");
  if (!py || !*py) py = PIPEBENCH_PYTHON;
  if (!src || !*src) src = PIPEBENCH_SOURCE_DIR;
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' '%s/tests/common/stats_reference.py'", py, src);
  FILE *f = popen(cmd, "r");
  if (!f) {
    EXPECT_FAIL("cannot run %s", cmd);
    return;
  }
  ref_case c;
  memset(&c, 0, sizeof c);
  char *line = NULL;
  size_t cap = 0;
  long done = -1, cases = 0;
  while (getline(&line, &cap, f) > 0) {
    if (!strncmp(line, "case ", 5)) {
      case_reset(&c);
      snprintf(c.name, sizeof c.name, "%s", line + 5);
      c.name[strcspn(c.name, "\n")] = 0;
      cases++;
    } else if (!strncmp(line, "a ", 2)) {
      c.a = parse_sample(line + 2, &c.na);
    } else if (!strncmp(line, "b ", 2)) {
      c.b = parse_sample(line + 2, &c.nb);
      c.has_b = 1;
    } else if (!strncmp(line, "end", 3)) {
      case_reset(&c);
    } else if (!strncmp(line, "done ", 5)) {
      done = strtol(line + 5, NULL, 10);
    } else {
      check_line(&c, line);
    }
  }
  free(line);
  case_reset(&c);
  int status = pclose(f);
  /* A crashed or truncated reference must fail the test, not pass it with fewer checks. */
  if (status != 0 || done != cases || cases < 20 || checks_done < 500) {
    EXPECT_FAIL("stats_reference.py: status %d, %ld cases announced, %ld read, %zu checks",
                status, done, cases, checks_done);
  }
}

/* ---- checks that need no reference --------------------------------------------------------- */

/* The comparisons above must be able to fail: values a plausible bug would produce are
 * rejected. */
static void test_checker_catches_wrong_values(void) {
  double v[100];
  for (int i = 0; i < 100; i++) v[i] = i + 1;
  pb_summary s;
  EXPECT(pb_summarize(v, 100, &s) == 0);
  /* Population instead of sample standard deviation (29.011 vs 28.866). */
  double pop = 0.0;
  for (int i = 0; i < 100; i++) pop += (v[i] - 50.5) * (v[i] - 50.5);
  pop = sqrt(pop / 100.0);
  EXPECT(!close_enough(pop, s.stddev));
  /* Off-by-one rank: ceil(p*n) instead of ceil(p*n)-1 gives 96 for p95. */
  EXPECT(s.p95 == 95.0);
  EXPECT(!close_enough(96.0, s.p95));
  EXPECT(!close_enough(1.0, 1.0 + 1e-6));
  EXPECT(!close_enough(NAN, 0.0));
  EXPECT(!close_enough(0.0, NAN));
  EXPECT(close_enough(NAN, NAN));
}

static void test_percentile_edges(void) {
  double v[20];
  for (int i = 0; i < 20; i++) v[i] = i + 1;
  /* Products that are not exact in binary: 0.07*100, 0.95*20, 0.55*20, 0.35*20. */
  double w[100];
  for (int i = 0; i < 100; i++) w[i] = i + 1;
  EXPECT(pb_percentile_sorted(w, 100, 0.07) == 7.0);
  EXPECT(pb_percentile_sorted(w, 100, 0.57) == 57.0);
  EXPECT(pb_percentile_sorted(w, 100, 0.29) == 29.0);
  EXPECT(pb_percentile_sorted(v, 20, 0.95) == 19.0);
  EXPECT(pb_percentile_sorted(v, 20, 0.55) == 11.0);
  EXPECT(pb_percentile_sorted(v, 20, 0.35) == 7.0);
  EXPECT(pb_percentile_sorted(v, 20, 0.951) == 20.0); /* a real fraction still rounds up */
  EXPECT(pb_percentile_sorted(v, 20, 0.0) == 1.0);
  EXPECT(pb_percentile_sorted(v, 20, 1.0) == 20.0);
  EXPECT(pb_percentile_sorted(v, 20, -0.5) == 1.0);
  EXPECT(pb_percentile_sorted(v, 20, 1.5) == 20.0);
  EXPECT(isnan(pb_percentile_sorted(v, 20, NAN)));
  EXPECT(isnan(pb_percentile_sorted(v, 0, 0.5)));
  EXPECT(isnan(pb_percentile_sorted(NULL, 0, 0.5)));
}

static void test_min_n(void) {
  EXPECT_EQ(64, pb_percentile_min_n(0.90));
  EXPECT_EQ(662, pb_percentile_min_n(0.99));
  EXPECT_EQ(6636, pb_percentile_min_n(0.999));
  EXPECT_EQ(0, pb_percentile_min_n(0.5));
  EXPECT_EQ(0, pb_percentile_min_n(0.0));
  EXPECT_EQ(0, pb_percentile_min_n(NAN));
  EXPECT_EQ(SIZE_MAX, pb_percentile_min_n(1.0));
  /* Monotone: a higher percentile never needs fewer samples. */
  size_t prev = 0;
  for (double p = 0.51; p < 0.9999; p += 0.0037) {
    size_t n = pb_percentile_min_n(p);
    EXPECT(n >= prev);
    prev = n;
  }
}

static void test_summary_edges(void) {
  pb_summary s;
  EXPECT(pb_summarize(NULL, 0, &s) == 0);
  EXPECT(s.n == 0 && isnan(s.mean) && isnan(s.p99) && isnan(s.median_ci_lo) && !s.unstable);
  double one = 2.0;
  EXPECT(pb_summarize(&one, 1, NULL) == PB_EINVAL);
  EXPECT(pb_summarize(NULL, 3, &s) == PB_EINVAL);
  /* The input is left alone. */
  double v[5] = {5, 1, 4, 2, 3};
  EXPECT(pb_summarize(v, 5, &s) == 0);
  EXPECT(v[0] == 5 && v[1] == 1 && v[4] == 3);
  /* p99 is flagged reliable exactly from 662 samples on. */
  size_t n = 662;
  double *big = malloc(n * sizeof *big);
  EXPECT(big != NULL);
  if (!big) return;
  for (size_t i = 0; i < n; i++) big[i] = 1.0 + 1e-4 * (double)(i % 7);
  EXPECT(pb_summarize(big, n - 1, &s) == 0);
  EXPECT(s.p95_reliable == 1 && s.p99_reliable == 0);
  EXPECT(pb_summarize(big, n, &s) == 0);
  EXPECT(s.p99_reliable == 1 && s.cv < 0.05 && !s.unstable);
  free(big);
}

static void test_median_ci_large(void) {
  /* Large n must not underflow 2^-n: the 99% interval is about median +- 1.29 sqrt(n). */
  size_t n = 1000000;
  double *v = malloc(n * sizeof *v);
  EXPECT(v != NULL);
  if (!v) return;
  for (size_t i = 0; i < n; i++) v[i] = (double)i;
  double lo, hi;
  pb_median_ci_sorted(v, n, 0.99, &lo, &hi);
  double half = 2.5758 * sqrt((double)n) / 2.0;
  EXPECT(fabs(lo - ((double)n / 2.0 - half)) < 3.0);
  EXPECT(fabs(hi - ((double)n / 2.0 + half)) < 3.0);
  pb_median_ci_sorted(v, n, 0.95, NULL, &hi); /* NULL outputs are allowed */
  EXPECT(hi < (double)n / 2.0 + half);
  free(v);
}

static void test_mann_whitney_edges(void) {
  double a[3] = {1, 2, 3}, u = 0, p = 0;
  EXPECT(pb_mann_whitney(a, 3, a, 0, &u, &p) == PB_EINVAL);
  EXPECT(isnan(u) && isnan(p));
  EXPECT(pb_mann_whitney(NULL, 0, a, 3, NULL, NULL) == PB_EINVAL);
  /* U of a against b plus U of b against a is na*nb, and p is symmetric. */
  double b[4] = {2.5, 0.5, 3.5, 1.5};
  double ua, pa, ub, pb;
  EXPECT(pb_mann_whitney(a, 3, b, 4, &ua, &pa) == 0);
  EXPECT(pb_mann_whitney(b, 4, a, 3, &ub, &pb) == 0);
  EXPECT(ua + ub == 12.0);
  EXPECT(pa == pb);
  /* Largest exact sizes: 20 and 20, completely separated: p = 2 / C(40,20). */
  double x[20], y[20];
  for (int i = 0; i < 20; i++) {
    x[i] = 100 + i;
    y[i] = i;
  }
  EXPECT(pb_mann_whitney(x, 20, y, 20, &u, &p) == 0);
  EXPECT(u == 400.0);
  expect("separated_20x20", "exact p", 2.0 / 137846528820.0, p);
}

static void test_ratio_bootstrap(void) {
  double a[40], b[40];
  for (int i = 0; i < 40; i++) {
    a[i] = 2.0 + 0.01 * ((i * 7) % 13);
    b[i] = 1.0 + 0.005 * ((i * 5) % 11);
  }
  pb_ratio r1, r2, r3;
  EXPECT(pb_ratio_of(a, 40, b, 40, 7, 500, &r1) == 0);
  EXPECT(pb_ratio_of(a, 40, b, 40, 7, 500, &r2) == 0);
  EXPECT(pb_ratio_of(a, 40, b, 40, 8, 500, &r3) == 0);
  /* Seeded: same seed, same interval; the interval brackets the point estimate. */
  EXPECT(r1.lo == r2.lo && r1.hi == r2.hi && r1.ratio == r2.ratio);
  EXPECT(r1.ratio == r3.ratio);
  EXPECT(r1.lo <= r1.ratio && r1.ratio <= r1.hi);
  EXPECT(r1.lo > 1.8 && r1.hi < 2.2);
  EXPECT(r1.rel_err > 0.0 && r1.rel_err < 0.1);
  /* Defaults and errors. */
  EXPECT(pb_ratio_of(a, 40, b, 40, 7, 0, &r3) == 0);
  EXPECT(r3.lo <= r3.ratio && r3.ratio <= r3.hi);
  EXPECT(pb_ratio_of(a, 0, b, 40, 7, 10, &r3) == PB_EINVAL);
  EXPECT(isnan(r3.ratio) && isnan(r3.lo));
  EXPECT(pb_ratio_of(a, 40, b, 40, 7, 10, NULL) == PB_EINVAL);
  /* One value each: no spread, the interval is the point. */
  EXPECT(pb_ratio_of(a, 1, b, 1, 7, 50, &r3) == 0);
  EXPECT(r3.lo == r3.ratio && r3.hi == r3.ratio && r3.rel_err == 0.0);
}

static void test_compare_edges(void) {
  double a[3] = {1, 2, 3}, p = 0;
  EXPECT(pb_compare(a, 0, a, 3, 1.1, &p) == PB_SAME);
  EXPECT(isnan(p));
  EXPECT(pb_compare(a, 3, a, 3, 1.1, NULL) == PB_SAME);
  EXPECT(!strcmp(pb_verdict_name(PB_SAME), "same"));
  EXPECT(!strcmp(pb_verdict_name(PB_FASTER), "faster"));
  EXPECT(!strcmp(pb_verdict_name(PB_SLOWER), "slower"));
}

int main(void) {
  run_reference();
  test_checker_catches_wrong_values();
  test_percentile_edges();
  test_min_n();
  test_summary_edges();
  test_median_ci_large();
  test_mann_whitney_edges();
  test_ratio_bootstrap();
  test_compare_edges();
  if (check_failures()) {
    fprintf(stderr, "%d check(s) failed\n", check_failures());
    return 1;
  }
  printf("stats: all checks passed (%zu reference checks)\n", checks_done);
  return 0;
}
