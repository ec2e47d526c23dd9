"""Every statistic against an independent oracle, and at its edges."""

from __future__ import annotations

import itertools
import math
import random
from statistics import fmean

import pytest
import statsmodels.stats.proportion as sm  # the oracle (a dev dependency)

from hangar.scores import stats


@pytest.mark.parametrize(
    ("k", "n"), [(0, 10), (10, 10), (1, 1), (0, 1), (3, 7), (50, 100), (1, 50)]
)
def test_wilson_matches_statsmodels(k: int, n: int) -> None:
    low, high = sm.proportion_confint(k, n, alpha=0.05, method="wilson")
    got = stats.wilson(k, n)
    assert got.estimate == pytest.approx(k / n)
    assert (got.low, got.high) == (pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12))


def test_wilson_edges() -> None:
    assert stats.wilson(0, 0).model_dump() == {"estimate": 0.0, "low": 0.0, "high": 1.0}
    assert stats.wilson(0, 5).low == 0.0 and stats.wilson(5, 5).high == 1.0
    with pytest.raises(ValueError):
        stats.wilson(6, 5)


def brute_pass_at_k(n: int, c: int, k: int) -> float:
    """Over every k-subset of n samples (c of them passing), the share with a pass."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


def brute_pass_hat_k(n: int, c: int, k: int) -> float:
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(all(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_pass_at_k_and_pass_hat_k_by_enumeration(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert stats.pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k))
            assert stats.pass_hat_k(n, c, k) == pytest.approx(brute_pass_hat_k(n, c, k))


def test_pass_at_k_edges() -> None:
    assert stats.pass_at_k(5, 0, 3) == 0.0 and stats.pass_at_k(5, 5, 1) == 1.0
    assert stats.pass_at_k(1, 1, 1) == 1.0 and stats.pass_hat_k(1, 0, 1) == 0.0
    with pytest.raises(ValueError):
        stats.pass_at_k(3, 1, 4)
    assert stats.mean_over_scenarios({"a": [True], "b": [False, True]}, "pass@k", 2) == 1.0
    assert stats.mean_over_scenarios({"a": [True]}, "pass@k", 2) is None


def test_clustered_se_against_a_direct_sandwich() -> None:
    from statsmodels.regression.linear_model import OLS

    outcomes = {
        "s1": [True, True, False],
        "s2": [False, False, False],
        "s3": [True, True, True],
        "s4": [True, False],
    }
    y = [float(v) for vs in outcomes.values() for v in vs]
    groups = [g for g, vs in enumerate(outcomes.values()) for _ in vs]
    fit = OLS(y, [[1.0]] * len(y)).fit(
        cov_type="cluster", cov_kwds={"groups": groups, "use_correction": False}
    )
    g = len(outcomes)
    # statsmodels without its own correction, times our G/(G-1) (CR1)
    assert stats.clustered_se(outcomes) == pytest.approx(float(fit.bse[0]) * math.sqrt(g / (g - 1)))
    assert stats.clustered_se({"only": [True, False]}) == 0.0


def slow_bootstrap(d: list[float], resamples: int, seed: int) -> tuple[float, float]:
    rng = random.Random(seed)
    means = []
    for _ in range(resamples):
        sample = [d[rng.randrange(len(d))] for _ in range(len(d))]
        means.append(sum(sample) / len(sample))
    means.sort()
    import numpy as np

    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def test_paired_difference_against_a_slow_reference() -> None:
    a = {f"s{i}": [i % 3 != 0, i % 2 == 0] for i in range(12)}
    b = {f"s{i}": [i % 4 == 0, False] for i in range(12)}
    b["only-in-b"] = [True]
    got = stats.paired_difference(a, b, labels=("skill", "control"), resamples=2000, seed=7)
    assert got is not None and got.scenarios == 12
    d = [fmean(map(float, a[s])) - fmean(map(float, b[s])) for s in sorted(a)]
    assert got.difference == pytest.approx(fmean(d))
    sd = math.sqrt(sum((x - fmean(d)) ** 2 for x in d) / (len(d) - 1))
    assert got.se == pytest.approx(sd / math.sqrt(len(d)))
    # the fast bootstrap draws the same resamples from the same seed as the slow one
    import numpy as np

    rng = np.random.default_rng(7)
    ref = [fmean(d[int(i)] for i in rng.integers(0, len(d), size=len(d))) for _ in range(2000)]
    assert (got.low, got.high) == (
        pytest.approx(float(np.quantile(ref, 0.025))),
        pytest.approx(float(np.quantile(ref, 0.975))),
    )
    # and an independent generator gives nearly the same interval
    low, high = slow_bootstrap(d, 20000, 3)
    assert abs(got.low - low) < 0.05 and abs(got.high - high) < 0.05
    assert stats.paired_difference(a, b, resamples=2000, seed=7) == stats.paired_difference(
        a, b, resamples=2000, seed=7
    )


def test_paired_difference_missing_pairs_and_one_scenario() -> None:
    assert stats.paired_difference({"x": [True]}, {"y": [False]}) is None
    one = stats.paired_difference({"x": [True]}, {"x": [False]})
    assert one is not None and one.difference == 1.0 and one.se == 0.0


def test_decision_sentence() -> None:
    assert (
        stats.decision("A", "B", 0.12, 0.10)
        == "A is shown to beat B by at least 10 points on pass rate"
    )
    assert stats.decision("A", "B", 0.05, 0.10) == "A is not shown to beat B by 10 points"
    assert stats.decision("A", "B", 0.0, 0.0).startswith(
        "A is shown to beat B by at least 0 points"
    )
