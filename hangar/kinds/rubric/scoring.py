"""How a benchmark sample is scored, and how far the judge agrees with people.

Per dimension (1-5): the judge's score (``llm-as-judge`` and ``hybrid`` rubrics), or,
in a ``regex`` rubric, the dimension's check pass rate put on the scale (1 + 4 x rate).
Per sample:

- ``structural``: the pass rate of all its checks (0-1);
- ``judge``: the weighted average of the judged dimensions (the rubric's weights, 1-5);
- ``overall``: the seed's hybrid ``0.3 x structural + 0.7 x judge``, with the structural
  pass rate first put on the judge's 1-5 scale (1 + 4 x rate). The seed writes the two
  terms on different scales (a rate and a 1-5 score); taken literally, a perfect sample
  would score 0.3 + 3.5 = 3.8 and never reach the 4.75 of its own human-scored example or
  the 3.5-4.0 of its baselines, so both terms go on 1-5 and ``overall`` stays comparable
  with human scores, baselines and the 0.3/1.0/0.5-point regression thresholds. An
  ``llm-as-judge`` rubric's overall is its judge score, a ``regex`` rubric's its
  structural score on 1-5.

A sample whose judge left a dimension unassessed has no ``judge`` or ``overall`` (a score
over fewer dimensions would not compare with the others); it is counted as unassessed.

Calibration: where samples carry human ``scores``, the judge's and the people's scores of
each dimension are compared by quadratic-weighted Cohen's kappa (both rounded to whole
points, halves up) and the mean absolute difference; a dimension under kappa 0.6 (seed
003's bar for a judge to replace raters) is flagged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, PlainSerializer

from hangar.kinds.rubric.checks import CheckResult
from hangar.kinds.rubric.formats import Rubric
from hangar.kinds.rubric.judge import Judged
from hangar.results import Score

#: Kappa below which a judge may not stand in for people (seed 003).
KAPPA_BAR = 0.6


def on_scale(rate: float) -> float:
    """A 0-1 pass rate on the 1-5 scale."""
    return 1 + 4 * rate


class SampleScores(BaseModel):
    """What one output is worth."""

    dimensions: dict[str, float | None]
    """Dimension -> score (1-5; None: unassessed)."""
    structural: float | None
    """Pass rate of its checks (None: no check)."""
    judge: float | None
    """Weighted average of the judged dimensions (None: unassessed or no judge)."""
    overall: float | None
    """The sample's score (see the module docstring)."""

    def as_scores(self) -> tuple[Score, ...]:
        """As a result's scores: the dimensions, structural, judge and overall."""
        points = {"scale": "points", "low": 1.0, "high": 5.0}
        scores = [Score(metric=d, value=v, **points) for d, v in self.dimensions.items()]  # type: ignore[arg-type]
        scores.append(
            Score(metric="structural", value=self.structural, scale="points", low=0.0, high=1.0)
        )
        scores.append(Score(metric="judge", value=self.judge, **points))  # type: ignore[arg-type]
        scores.append(Score(metric="overall", value=self.overall, **points))  # type: ignore[arg-type]
        return tuple(scores)


def score_sample(rubric: Rubric, checks: list[CheckResult], judged: Judged | None) -> SampleScores:
    """Score one output by its rubric's scoring model (see the module docstring)."""
    verdicts = {v.dimension: v.score for v in judged.verdicts} if judged else {}
    dimensions: dict[str, float | None] = {}
    for d in rubric.dimensions:
        own = [c.passed for c in checks if c.dimension == d.name]
        if rubric.scoring_model == "regex":
            dimensions[d.name] = on_scale(sum(own) / len(own)) if own else None
        else:
            dimensions[d.name] = verdicts.get(d.name)
    structural = sum(c.passed for c in checks) / len(checks) if checks else None
    judge = None
    if rubric.scoring_model != "regex" and all(v is not None for v in dimensions.values()):
        judge = sum(d.weight * (dimensions[d.name] or 0.0) for d in rubric.dimensions)
    if rubric.scoring_model == "regex":
        overall = on_scale(structural) if structural is not None else None
    elif rubric.scoring_model == "llm-as-judge" or structural is None:
        overall = judge
    else:
        overall = None if judge is None else 0.3 * on_scale(structural) + 0.7 * judge
    return SampleScores(dimensions=dimensions, structural=structural, judge=judge, overall=overall)


def quadratic_kappa(
    a: Sequence[int], b: Sequence[int], categories: Sequence[int] = (1, 2, 3, 4, 5)
) -> float | None:
    """Cohen's kappa with quadratic weights between two raters' whole-point scores.

    kappa = 1 - Σ w_ij O_ij / Σ w_ij E_ij, w_ij = (i - j)² / (k - 1)², O the observed
    joint proportions, E the product of the marginals (Cohen 1968, "Weighted kappa",
    Psychological Bulletin 70:213). None when it is undefined (no pairs, or both raters
    always give the same one score).
    """
    if not a or len(a) != len(b):
        return None
    index = {c: i for i, c in enumerate(categories)}
    k, n = len(categories), len(a)
    observed = [[0.0] * k for _ in range(k)]
    for x, y in zip(a, b, strict=True):
        observed[index[x]][index[y]] += 1 / n
    rows = [sum(r) for r in observed]
    cols = [sum(observed[i][j] for i in range(k)) for j in range(k)]
    weight = [[(i - j) ** 2 / (k - 1) ** 2 for j in range(k)] for i in range(k)]
    seen = sum(weight[i][j] * observed[i][j] for i in range(k) for j in range(k))
    chance = sum(weight[i][j] * rows[i] * cols[j] for i in range(k) for j in range(k))
    return None if chance == 0 else 1 - seen / chance


def whole(score: float) -> int:
    """A score rounded to whole points, halves up (4.5 -> 5), within 1-5."""
    return max(1, min(5, math.floor(score + 0.5)))


def _six(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


class Calibration(BaseModel):
    """How far the judge agrees with people on one dimension."""

    dimension: str
    """The dimension (``overall``: the weighted scores)."""
    pairs: int
    """Samples with both a judge's and a person's score."""
    kappa: Annotated[float | None, PlainSerializer(_six, return_type=float | None)]
    """Quadratic-weighted Cohen's kappa of the whole-point scores."""
    mean_abs_diff: Annotated[float | None, PlainSerializer(_six, return_type=float | None)]
    """Mean |judge - person|."""
    below_bar: bool
    """kappa < 0.6 (or undefined): the judge may not replace people here."""


def calibrate(dimension: str, judge: Sequence[float], people: Sequence[float]) -> Calibration:
    """Agreement of the judge's and people's scores of one dimension."""
    pairs = len(judge)
    kappa = (
        quadratic_kappa([whole(x) for x in judge], [whole(y) for y in people]) if pairs else None
    )
    mad = sum(abs(x - y) for x, y in zip(judge, people, strict=True)) / pairs if pairs else None
    return Calibration(
        dimension=dimension,
        pairs=pairs,
        kappa=kappa,
        mean_abs_diff=mad,
        below_bar=kappa is None or kappa < KAPPA_BAR,
    )
