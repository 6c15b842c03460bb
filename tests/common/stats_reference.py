#!/usr/bin/python3
"""Reference values for pipebench's statistics (lib/common/stats.c), computed independently.

Only the standard library is used (statistics, math, fractions, itertools, random), and the
methods differ from the C code where they can: exact rationals for percentile ranks, binomial
coverage and the early-stopping rule; direct pair counting for U; brute-force enumeration of
every rank arrangement for the exact Mann-Whitney distribution.

Output, one record per line, read by test_stats.c:
  case NAME
  a N v1 .. vN            the first sample (repr, so it round-trips exactly through strtod)
  b N v1 .. vN            the second sample, when the case has one
  pct P VALUE             nearest-rank percentile of a at P (P as decimal text)
  minn P N                pb_percentile_min_n(P)
  sum KEY VALUE           a field of pb_summarize(a)
  ci LEVEL LO HI          pb_median_ci_sorted(sorted a, LEVEL)
  mw U P                  pb_mann_whitney(a, b)
  mw einval               pb_mann_whitney(a, b) must return PB_EINVAL
  ratio R                 median(a) / median(b)
  verdict FACTOR NAME     pb_compare(a, b, FACTOR)
  end
  done NCASES
"""
import itertools
import math
import random
import statistics
import sys
from fractions import Fraction

NAN = float("nan")


def fmt(x):
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    return repr(float(x))


# ---- percentiles -------------------------------------------------------------------------

def percentile(values, p_text):
    """Nearest rank with the exact decimal p: the value of rank ceil(p*n) (1-based)."""
    if not values:
        return NAN
    s = sorted(values)
    rank = math.ceil(Fraction(p_text) * len(s))
    rank = min(max(rank, 1), len(s))
    return s[rank - 1]


def min_n(p_text):
    """Smallest n with P[Binomial(n, 1-p) <= 1] < 1/100, with exact rationals."""
    p = Fraction(p_text)
    if p <= Fraction(1, 2):
        return 0

    def passes(n):
        return p ** n + n * (1 - p) * p ** (n - 1) < Fraction(1, 100)

    hi = 1
    while not passes(hi):
        hi *= 2
    lo = hi // 2  # fails (or 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if passes(mid):
            hi = mid
        else:
            lo = mid
    return hi


# ---- median confidence interval ------------------------------------------------------------

def median_ci(values, level_text):
    if not values:
        return NAN, NAN
    s = sorted(values)
    n = len(s)
    level = Fraction(level_text)
    best = None
    below = 0  # sum of C(n, i) for i < j
    for j in range(1, n // 2 + 1):
        below += math.comb(n, j - 1)
        # coverage of [x_(j), x_(n+1-j)]: P[j <= B <= n-j] = 1 - 2 P[B <= j-1], B ~ Bin(n, 1/2)
        cover = 1 - Fraction(2 * below, 2 ** n)
        if cover >= level:
            best = j
        else:
            break
    if best is None:
        return s[0], s[-1]
    return s[best - 1], s[n - best]


# ---- summary --------------------------------------------------------------------------------

def summary(values):
    n = len(values)
    out = {"n": n}
    if n == 0:
        for k in ("mean", "stddev", "min", "max", "p50", "p95", "p99", "cv", "ci_lo", "ci_hi",
                  "mad"):
            out[k] = NAN
        out.update(n_outliers=0, p95_reliable=0, p99_reliable=0, unstable=0)
        return out
    mean = statistics.mean(values)
    sd = statistics.stdev(values) if n > 1 else 0.0
    med = statistics.median(values)
    mad = statistics.median([abs(x - med) for x in values])
    if mad > 0:
        outliers = sum(1 for x in values if abs(0.6745 * (x - med) / mad) > 3.5)
    else:
        mean_ad = sum(abs(x - med) for x in values) / n
        outliers = 0 if mean_ad == 0 else sum(
            1 for x in values if abs((x - med) / (1.253314 * mean_ad)) > 3.5)
    cv = sd / mean if mean != 0 else NAN
    lo, hi = median_ci(values, "0.95")
    out.update(mean=mean, stddev=sd, min=min(values), max=max(values),
               p50=percentile(values, "0.5"), p95=percentile(values, "0.95"),
               p99=percentile(values, "0.99"), cv=cv, ci_lo=lo, ci_hi=hi, mad=mad,
               n_outliers=outliers, p95_reliable=int(n >= min_n("0.95")),
               p99_reliable=int(n >= min_n("0.99")),
               unstable=int((not math.isnan(cv) and cv > 0.05) or outliers > 0))
    return out


# ---- Mann-Whitney U ---------------------------------------------------------------------------

def u_statistic(a, b):
    """U of a by counting pairs: a > b counts 1, a == b counts 1/2."""
    return sum(Fraction(1) if x > y else Fraction(1, 2) if x == y else 0 for x in a for y in b)


def exact_p(na, nb, u):
    """Two-sided exact p: enumerate every way the ranks 0..N-1 split into a and b."""
    n = na + nb
    dist = {}
    for ranks in itertools.combinations(range(n), na):
        # U of a = number of b ranks below each a rank
        uu = sum(r - i for i, r in enumerate(ranks))
        dist[uu] = dist.get(uu, 0) + 1
    total = sum(dist.values())
    lower = min(u, na * nb - u)
    below = sum(c for k, c in dist.items() if k <= lower)
    return min(1.0, 2 * below / total)


def mann_whitney(a, b):
    u = u_statistic(a, b)
    na, nb = len(a), len(b)
    n = na + nb
    counts = {}
    for x in a + b:
        counts[x] = counts.get(x, 0) + 1
    has_ties = any(c > 1 for c in counts.values())
    if not has_ties and na <= 20 and nb <= 20:
        return float(u), exact_p(na, nb, u)
    tie_sum = sum(c ** 3 - c for c in counts.values())
    var = na * nb / 12 * ((n + 1) - tie_sum / (n * (n - 1)))
    if var <= 0:
        return float(u), 1.0
    dev = max(0.0, abs(float(u) - na * nb / 2) - 0.5)
    return float(u), min(1.0, math.erfc(dev / math.sqrt(var) / math.sqrt(2)))


def verdict(a, b, factor):
    _, p = mann_whitney(a, b)
    ratio = statistics.median(a) / statistics.median(b)
    if factor < 1:
        factor = 1 / factor
    passes = ratio > factor or ratio * factor < 1
    alo, ahi = median_ci(a, "0.99")
    blo, bhi = median_ci(b, "0.99")
    apart = ahi < blo or bhi < alo
    if passes and (p < 0.002 or apart):
        return "slower" if ratio > 1 else "faster"
    return "same"


# ---- the cases ----------------------------------------------------------------------------------

PCTS = ("0", "0.001", "0.01", "0.07", "0.25", "0.5", "0.9", "0.95", "0.99", "1")


def emit_sample(tag, v):
    print(tag, len(v), *(fmt(x) for x in v))


def emit_case(name, a, b=None, factors=()):
    print("case", name)
    emit_sample("a", a)
    if b is not None:
        emit_sample("b", b)
    for p in PCTS:
        print("pct", p, fmt(percentile(a, p)))
    for k, v in summary(a).items():
        print("sum", k, fmt(v) if isinstance(v, float) else v)
    for level in ("0.5", "0.9", "0.95", "0.99"):
        lo, hi = median_ci(a, level)
        print("ci", level, fmt(lo), fmt(hi))
    if b is not None:
        if not a or not b:
            print("mw einval")
        else:
            u, p = mann_whitney(a, b)
            print("mw", fmt(u), fmt(p))
            print("ratio", fmt(statistics.median(a) / statistics.median(b)))
            for f in factors:
                print("verdict", fmt(f), verdict(a, b, f))
    print("end")


def main():
    rng = random.Random(20240611)
    cases = 0

    def case(*args, **kw):
        nonlocal cases
        emit_case(*args, **kw)
        cases += 1

    # Early-stopping sample counts, independent of any sample.
    print("case min_n")
    print("a 0")
    for p in ("0.1", "0.5", "0.6", "0.75", "0.9", "0.95", "0.99", "0.999"):
        print("minn", p, min_n(p))
    print("end")
    cases += 1

    case("empty", [], [1.0])
    case("one", [3.5], [2.0])
    case("two", [2.0, 1.0], [1.0, 2.0], factors=(1.1,))
    case("ties", [1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 4.0, 10.0], [2.0, 3.0, 4.0, 4.0, 5.0])
    hundred = [float(i) for i in range(1, 101)]
    rng.shuffle(hundred)
    case("hundred", hundred)
    case("mad_zero", [5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 9.0])
    case("mad_zero_no_outlier", [1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0])
    case("all_equal", [7.25] * 9, [7.25] * 4, factors=(1.1,))
    case("outlier", [10.0, 11.0, 12.0, 11.0, 10.0, 12.0, 11.0, 50.0])
    case("zero_mean", [-1.0, 1.0, -2.0, 2.0])
    # Textbook Mann-Whitney example, worked by hand in test_stats.c: U = 17, p = 14/126.
    case("textbook", [19.0, 22.0, 16.0, 29.0, 24.0], [20.0, 11.0, 17.0, 12.0])
    # Exact/normal switch: 20 values is still exact, 21 is not.
    small = [rng.uniform(0, 1) for _ in range(3)]
    case("exact_20", [rng.uniform(0.2, 1.2) for _ in range(20)], small)
    case("normal_21", [rng.uniform(0.2, 1.2) for _ in range(21)], small)
    case("exact_9x9", [rng.uniform(0, 1) for _ in range(9)], [rng.uniform(0.3, 1.3) for _ in range(9)])
    case("normal_25x30", [rng.gauss(1.0, 0.1) for _ in range(25)],
         [rng.gauss(1.1, 0.1) for _ in range(30)])
    case("quantised_ties", [float(rng.randint(10, 14)) for _ in range(30)],
         [float(rng.randint(11, 15)) for _ in range(25)], factors=(1.05,))
    # Timing-like samples (log-normal), large enough that p95 and p99 are reliable.
    timings = [0.010 * math.exp(rng.gauss(0, 0.03)) for _ in range(700)]
    case("timings_700", timings)
    base = [0.020 * math.exp(rng.gauss(0, 0.05)) for _ in range(30)]
    slow = [1.5 * 0.020 * math.exp(rng.gauss(0, 0.05)) for _ in range(30)]
    same = [0.020 * math.exp(rng.gauss(0, 0.05)) for _ in range(30)]
    case("slower", slow, base, factors=(1.1, 2.0))
    case("faster", base, slow, factors=(1.1, 0.5))
    case("same", same, base, factors=(1.1,))
    # Clearly different (p tiny) but only 5% apart: the factor keeps it "same".
    b5 = [0.010 * math.exp(rng.gauss(0, 0.005)) for _ in range(200)]
    a5 = [1.05 * 0.010 * math.exp(rng.gauss(0, 0.005)) for _ in range(200)]
    case("small_shift", a5, b5, factors=(1.1, 1.02))
    # Three values each: p can't go below 0.1, but the 99% CIs (whole ranges) don't overlap.
    case("tiny_apart", [2.0, 2.1, 2.2], [1.0, 1.05, 1.1], factors=(1.1,))
    case("tiny_overlap", [2.0, 2.1, 0.9], [1.0, 1.05, 1.1], factors=(1.1,))
    print("done", cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
