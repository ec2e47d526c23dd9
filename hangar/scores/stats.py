"""The statistics behind hangar's scores (docs/architecture.md, "Scores"), pure Python.

Only `pass` and `fail` trials count; `blocked_setup`, `infra_error` and `void` are shown
apart and never enter these numbers. Each function names its formula and source; the
tests check each against an independent oracle (statsmodels, brute-force enumeration,
a slow reference bootstrap).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import fmean

from pydantic import BaseModel

#: The 97.5th percentile of the standard normal: a 95% two-sided interval.
Z95 = 1.959963984540054


class Interval(BaseModel):
    """A point estimate with a 95% interval."""

    estimate: float
    """The point estimate."""
    low: float
    """Lower bound."""
    high: float
    """Upper bound."""


def wilson(passes: int, n: int, z: float = Z95) -> Interval:
    """Pass rate with its Wilson score interval.

    p̂ = k/n; centre = (p̂ + z²/2n) / (1 + z²/n);
    half-width = z / (1 + z²/n) · sqrt(p̂(1-p̂)/n + z²/4n²).
    Wilson, E. B. (1927), JASA 22:209; recommended over the normal ("Wald") interval by
    Brown, Cai & DasGupta (2001), Statistical Science 16:101. It stays inside [0, 1] and
    is sensible at 0 of n and n of n. With n = 0 the rate is unknown: 0 in [0, 1].
    """
    if n == 0:
        return Interval(estimate=0.0, low=0.0, high=1.0)
    if not 0 <= passes <= n:
        raise ValueError(f"passes must be within 0..{n}, got {passes}")
    p = passes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return Interval(estimate=p, low=max(0.0, centre - half), high=min(1.0, centre + half))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with `c` passes among `n` samples.

    pass@k = 1 - C(n-c, k) / C(n, k), computed as 1 - Π_{i=n-c+1..n} (1 - k/i) for
    numerical stability. Chen et al. (2021), "Evaluating Large Language Models Trained
    on Code", arXiv:2107.03374, eq. 1 and fig. 3. Needs k <= n.
    """
    if not 0 < k <= n or not 0 <= c <= n:
        raise ValueError(f"need 0 < k <= n and 0 <= c <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k: the chance that k samples drawn without replacement all pass.

    pass^k = C(c, k) / C(n, k). Yao et al. (2024), "τ-bench", arXiv:2406.12045, eq. 1:
    a measure of consistency, where pass@k measures any success.
    """
    if not 0 < k <= n or not 0 <= c <= n:
        raise ValueError(f"need 0 < k <= n and 0 <= c <= n, got n={n} c={c} k={k}")
    return math.comb(c, k) / math.comb(n, k)


def mean_over_scenarios(
    outcomes: Mapping[str, Sequence[bool]], metric: str, k: int
) -> float | None:
    """pass@k or pass^k averaged over scenarios with at least k trials (None if none)."""
    fn = pass_at_k if metric == "pass@k" else pass_hat_k
    values = [fn(len(v), sum(v), k) for v in outcomes.values() if len(v) >= k]
    return fmean(values) if values else None


def clustered_se(outcomes: Mapping[str, Sequence[bool]]) -> float:
    """Standard error of the overall pass rate, clustered by scenario.

    With ȳ the mean of all N outcomes and G scenarios (clusters):
    SE = sqrt( G/(G-1) · Σ_g (Σ_{i∈g} (y_i - ȳ))² ) / N, the cluster-robust (CR1)
    sandwich estimator of a mean. Cameron & Miller (2015), "A Practitioner's Guide to
    Cluster-Robust Inference", J. Human Resources 50:317, eq. 11; its use for evals:
    Miller (2024), "Adding Error Bars to Evals", arXiv:2411.00640, section 2.3. Repeats
    of one scenario are not independent, so this is wider than the naive SE when
    scenarios differ in difficulty. Needs at least two scenarios (else 0).
    """
    values = [list(v) for v in outcomes.values() if v]
    n = sum(len(v) for v in values)
    g = len(values)
    if g < 2:
        return 0.0
    mean = sum(sum(v) for v in values) / n
    total = sum(sum(y - mean for y in v) ** 2 for v in values)
    return math.sqrt(g / (g - 1) * total) / n


class PairedDifference(BaseModel):
    """A paired comparison of A and B on the scenarios both ran."""

    a: str
    """Label of A."""
    b: str
    """Label of B."""
    scenarios: int
    """Scenarios in common."""
    difference: float
    """Mean over scenarios of (A's pass rate - B's), repeats averaged first."""
    se: float
    """Paired standard error: sd of the per-scenario differences / sqrt(scenarios)."""
    low: float
    """Lower bound of the seeded paired-bootstrap 95% interval."""
    high: float
    """Upper bound."""
    margin: float
    """The margin N (in rate, 0.05 = 5 points) the decision sentence is about."""
    decision: str
    """The decision sentence."""


def per_scenario_rates(outcomes: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Each scenario's mean score (its repeats averaged): a pass rate for 0/1 scores."""
    return {s: fmean(map(float, v)) for s, v in outcomes.items() if v}


def mean_interval(values: Sequence[float], *, seed: int = 0) -> Interval:
    """The mean of a points or count score with its seeded percentile-bootstrap 95%
    interval (`bootstrap_interval`); n = 0 gives 0 in [0, 0], n = 1 the value itself."""
    if not values:
        return Interval(estimate=0.0, low=0.0, high=0.0)
    low, high = bootstrap_interval(values, seed=seed)
    return Interval(estimate=fmean(values), low=low, high=high)


def paired_difference(
    a: Mapping[str, Sequence[float]],
    b: Mapping[str, Sequence[float]],
    *,
    labels: tuple[str, str] = ("A", "B"),
    margin: float = 0.0,
    resamples: int = 10_000,
    seed: int = 0,
) -> PairedDifference | None:
    """A vs B over the scenarios both ran (None when they share none).

    d_s = rate_A(s) - rate_B(s) per shared scenario; the difference is mean(d); its
    paired SE is sd(d)/√S; the interval is the 2.5th and 97.5th percentiles of mean(d*)
    over `resamples` resamples of the scenarios with replacement, from a seeded
    generator (the same inputs always give the same interval). Efron & Tibshirani
    (1993), "An Introduction to the Bootstrap", ch. 13 (percentile interval), applied to
    paired units as in Miller (2024) section 4.
    """
    ra, rb = per_scenario_rates(a), per_scenario_rates(b)
    shared = sorted(ra.keys() & rb.keys())
    if not shared:
        return None
    d = [ra[s] - rb[s] for s in shared]
    mean = fmean(d)
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1) / len(d)) if len(d) > 1 else 0.0
    low, high = bootstrap_interval(d, resamples=resamples, seed=seed)
    return PairedDifference(
        a=labels[0],
        b=labels[1],
        scenarios=len(shared),
        difference=mean,
        se=se,
        low=low,
        high=high,
        margin=margin,
        decision=decision(labels[0], labels[1], low, margin),
    )


def bootstrap_interval(
    values: Sequence[float], *, resamples: int = 10_000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values`: `resamples` resamples with
    replacement drawn from numpy's generator seeded with `seed` (the same inputs always
    give the same interval), in blocks of at most two million draws (memory flat in the
    sample's size); the percentiles by linear interpolation (numpy's default)."""
    import numpy as np

    data = np.asarray(values, dtype=float)
    n = len(data)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    block = max(1, 2_000_000 // n)
    for start in range(0, resamples, block):
        stop = min(resamples, start + block)
        drawn = rng.integers(0, n, size=(stop - start, n), dtype=np.int32)
        means[start:stop] = data[drawn].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default, "type 7")."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def decision(a: str, b: str, low: float, margin: float) -> str:
    """The decision sentence: a claim only when the interval's lower bound reaches it."""
    points = f"{margin * 100:g}"
    if low >= margin:
        return f"{a} is shown to beat {b} by at least {points} points on pass rate"
    return f"{a} is not shown to beat {b} by {points} points"
