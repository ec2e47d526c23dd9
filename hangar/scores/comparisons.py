"""Paired comparisons of two groups, per metric, and the sentences that state them.

Two groups (agent · model · arm) that differ in exactly one factor are compared on the
scenarios both ran, metric by metric: per scenario the mean score of each (repeats
averaged first), the mean difference over scenarios, its paired SE and a seeded
paired-bootstrap 95% interval (`hangar.scores.stats.paired_difference`).

Without roles, each pair is compared once, the better group as the candidate, and the
sentence reads "A is (not) shown to beat B by N points on METRIC". With roles
(``--baseline X --candidate Y``, values of one factor) only pairs where that factor is X
on one side and Y on the other are compared, the roles stay fixed, and the sentence is
the seeds' own: "X is shown to lose by at least N points on METRIC" when the interval's
lower bound reaches +N, otherwise "X is not shown to lose by N points".

The margin N is in points of the metric's range: 15 points is 0.15 of a 0/1 score and
0.6 on a 1-5 scale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from hangar.scores import stats

#: The factors a group is made of, in the order of its key.
FACTORS = ("agent", "model", "arm")
GroupKey = tuple[str, str, str]
#: group -> metric -> scenario -> the assessed values of its trials.
Values = Mapping[GroupKey, Mapping[str, Mapping[str, Sequence[float]]]]


class Comparison(BaseModel):
    """A paired comparison of two groups on one metric (a JSON contract: see README)."""

    factor: str
    """What differs: agent, model or arm."""
    within: str
    """What the two groups share (e.g. ``gold · none``)."""
    metric: str
    """The metric compared."""
    baseline: str
    """The baseline's value of the factor."""
    candidate: str
    """The candidate's value of the factor."""
    roles: bool
    """Whether the roles were given (``--baseline``/``--candidate``) or chosen (the
    better group as the candidate)."""
    scenarios: int
    """Scenarios both ran with an assessed score."""
    difference: float
    """Mean over scenarios of (candidate - baseline), repeats averaged first."""
    se: float
    """Paired standard error: sd of the per-scenario differences / sqrt(scenarios)."""
    ci_low: float
    """Lower bound of the seeded paired-bootstrap 95% interval of the difference."""
    ci_high: float
    """Upper bound."""
    margin: float
    """The margin the sentence is about, in the metric's units."""
    span: float = 1.0
    """The metric's range (1 for a 0/1 score, 4 for 1-5): points are hundredths of it."""
    sentence: str
    """The decision in words."""
    per_scenario: dict[str, float]
    """Per-scenario differences (candidate - baseline)."""
    same_as: list[str] = Field(default_factory=list)
    """Other metrics whose every value is this one's in both groups (a SWE-bench
    instance's ``reward`` and ``resolved`` are its ``pass``): this comparison says it for
    them, once."""


def metric_words(metric: str) -> str:
    """How a sentence names a metric (``pass`` reads as "pass rate")."""
    return "pass rate" if metric == "pass" else metric


#: The fewest paired scenarios a comparison's interval is estimated from.
MIN_SCENARIOS = 2


def beats(
    candidate: str, baseline: str, low: float, margin: float, points: float, metric: str
) -> str:
    """The sentence of a comparison without roles."""
    if low >= margin:
        return (
            f"{candidate} is shown to beat {baseline} by at least {points:g} points "
            f"on {metric_words(metric)}"
        )
    return f"{candidate} is not shown to beat {baseline} by {points:g} points"


def loses(baseline: str, low: float, margin: float, points: float, metric: str) -> str:
    """The seeds' sentence of a comparison with fixed roles."""
    if low >= margin:
        return (
            f"{baseline} is shown to lose by at least {points:g} points on {metric_words(metric)}"
        )
    return f"{baseline} is not shown to lose by {points:g} points"


def compare_groups(
    values: Values,
    spans: Mapping[str, float],
    *,
    points: float,
    seed: int = 0,
    roles: tuple[str, str] | None = None,
) -> list[Comparison]:
    """Every comparison of the groups in `values` (see the module docstring); `spans`
    gives each metric's range (1 for a 0/1 score, 4 for 1-5), `points` the margin."""
    found = []
    keys = sorted(values)
    for i, first in enumerate(keys):
        for second in keys[i + 1 :]:
            differ = [f for f, x, y in zip(FACTORS, first, second, strict=True) if x != y]
            if len(differ) != 1:
                continue
            at = FACTORS.index(differ[0])
            pair = _oriented(first, second, at, roles)
            if pair is None:
                continue
            said: dict[Any, Comparison] = {}
            for metric in sorted(set(values[first]) & set(values[second]), key=_first_pass):
                span = spans.get(metric, 1.0)
                same = (span, _rates(values[first][metric]), _rates(values[second][metric]))
                if same in said:
                    said[same].same_as.append(metric)
                    continue
                made = _compare(values, pair, at, metric, span, points, seed, roles)
                found += made
                if made:
                    said[same] = made[0]
    return found


def _first_pass(metric: str) -> tuple[bool, str]:
    """``pass`` first (the metric every kind of trial has), then by name."""
    return metric != "pass", metric


def _rates(by_scenario: Mapping[str, Sequence[float]]) -> tuple[tuple[str, float], ...]:
    """A metric's per-scenario means, comparable across metrics."""
    return tuple(sorted(stats.per_scenario_rates(by_scenario).items()))


def _oriented(
    first: GroupKey, second: GroupKey, at: int, roles: tuple[str, str] | None
) -> tuple[GroupKey, GroupKey] | None:
    """(baseline, candidate) of a pair; None when the roles leave it out."""
    if roles is None:
        return first, second  # reoriented per metric, the better one as the candidate
    for baseline, candidate in ((first, second), (second, first)):
        if (baseline[at], candidate[at]) == roles:
            return baseline, candidate
    return None


def _compare(
    values: Values,
    pair: tuple[GroupKey, GroupKey],
    at: int,
    metric: str,
    span: float,
    points: float,
    seed: int,
    roles: tuple[str, str] | None,
) -> list[Comparison]:
    baseline, candidate = pair
    b, c = values[baseline][metric], values[candidate][metric]
    rates_b, rates_c = stats.per_scenario_rates(b), stats.per_scenario_rates(c)
    shared = sorted(rates_b.keys() & rates_c.keys())
    if not shared:
        return []
    if roles is None and sum(rates_b[s] for s in shared) > sum(rates_c[s] for s in shared):
        baseline, candidate, b, c = candidate, baseline, c, b
        rates_b, rates_c = rates_c, rates_b
    margin = points / 100 * span
    result = stats.paired_difference(
        c, b, labels=(candidate[at], baseline[at]), margin=margin, seed=seed
    )
    if result is None:
        return []
    if result.scenarios < MIN_SCENARIOS:
        # One paired unit has no spread: the bootstrap's interval would be the point
        # itself and claim certainty. The interval is the metric's whole range instead,
        # so nothing is shown from it.
        result = result.model_copy(update={"low": -span, "high": span})
    sentence = (
        loses(baseline[at], result.low, margin, points, metric)
        if roles is not None
        else beats(candidate[at], baseline[at], result.low, margin, points, metric)
    )
    return [
        Comparison(
            factor=FACTORS[at],
            within=" · ".join(
                x for f, x in zip(FACTORS, baseline, strict=True) if f != FACTORS[at]
            ),
            metric=metric,
            baseline=baseline[at],
            candidate=candidate[at],
            roles=roles is not None,
            scenarios=result.scenarios,
            difference=result.difference,
            se=result.se,
            ci_low=result.low,
            ci_high=result.high,
            margin=margin,
            span=span,
            sentence=sentence,
            per_scenario={s: rates_c[s] - rates_b[s] for s in shared},
        )
    ]
