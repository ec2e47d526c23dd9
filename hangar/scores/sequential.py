"""Stopping a comparison once it is decided, at a 95% level that holds however early.

A comparison with fixed roles (``--baseline X --candidate Y``) decides "X is shown to lose
by at least M points" (the difference candidate - baseline is at least M) or "X is not
shown to lose by M points". Run in rounds over the paired units (the tasks both groups
run, in a seeded random order), it is *settled* at a look when

- the interval's lower bound reaches M: shown to lose by at least M (more units cannot
  undo it), or
- the interval's upper bound is below M: it cannot come to be shown to lose by M (the
  difference is shown to be under M),

and it runs on until one of them holds or the maximum of units is reached (then the
decision is the interval's at that point, as with a fixed design).

A fixed-sample interval (the report's paired bootstrap) looked at after every round and
acted on loses its 95%: each look is another chance to be wrong. The interval here is a
*confidence sequence*: a sequence of intervals that all cover the true mean difference at
once with probability at least 95%, so any stopping rule keeps the level. It is the
betting confidence sequence of Waudby-Smith & Ramdas (2024), "Estimating means of bounded
random variables by betting", JRSS B 86(1):1-27 (the hedged capital process, section 4),
for values x in [0, 1]: for each candidate mean m, two gamblers bet on x_t > m and on
x_t < m with predictable stakes, and m is excluded once their averaged wealth reaches
1/alpha (Ville's inequality: under the true mean, that wealth is a nonnegative martingale
started at 1, so the chance it ever gets there is at most alpha = 0.05):

    K_t(m) = 1/2 prod_{i<=t} (1 + up_i(m) (x_i - m)) + 1/2 prod_{i<=t} (1 - down_i(m) (x_i - m))
    bet_t = sqrt(2 log(2/alpha) / (var_{t-1} t log(1 + t)))   (their predictable plug-in bet)
    up_t(m) = min(bet_t, c/m)     down_t(m) = min(bet_t, c/(1 - m))     c = 3/4
    var_t = (1/4 + sum_{i<=t} (x_i - mean_i)^2) / (t + 1)
    mean_t = (1/2 + sum_{i<=t} x_i) / (t + 1)
    C_t = {m : K_t(m) < 1/alpha}, intersected over time

(their hedged process takes the larger of the two wealths; their average is a test
martingale too and never smaller, so its sequence is never wider). m runs over a grid of
1,000 points; each bound is moved out by one grid step, so the grid never narrows it. A
per-unit difference d in [-span, span] (a unit's repeats averaged) is mapped to
x = (d + span) / 2span.

Why this method: it needs only that the values are bounded (a pass rate, a 1-5 score),
not normal, so it holds at ten units as at a thousand; it adapts to the variance the units
show, so a clear-cut comparison stops early (by simulation it needs about half the units
of the closed-form empirical-Bernstein sequence of the same paper); and unlike a
group-sequential design with alpha spending, it does not need the number of looks or the
maximum fixed in advance, which a sweep that a budget or a Ctrl-C can cut short, or that
is resumed with more units, does not keep. Like the fixed design's bootstrap, it treats
the units as draws from the tasks the suite stands for; the seeded random order makes each
round a random sample of them.

`benchmarks/sequential.py` checks the error rates and the units saved by simulation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

Status = Literal["lose", "not_lose", "open"]


class Sequence95(BaseModel):
    """The confidence sequence of a mean difference after some units."""

    units: int
    """Units seen."""
    difference: float
    """Their mean difference (candidate - baseline)."""
    low: float
    """Lower bound of the 95% confidence sequence (intersected over time)."""
    high: float
    """Upper bound."""


#: Points of the grid of candidate means.
GRID = 1000


class ConfidenceSequence:
    """The confidence sequence of a mean difference, one unit at a time (`add`); see the
    module docstring."""

    def __init__(self, span: float = 1.0, *, alpha: float = 0.05, c: float = 0.75) -> None:
        import numpy as np  # here, not at import: `hangar status` starts without it

        if span <= 0:
            raise ValueError(f"span must be positive, got {span}")
        self.span, self.c = span, c
        self.grid = (np.arange(GRID) + 0.5) / GRID
        self.log_term, self.threshold = math.log(2 / alpha), math.log(1 / alpha)
        self.up, self.down = np.zeros(GRID), np.zeros(GRID)
        self.mean_prev, self.var_prev, self.sum_x, self.sum_sq = 0.5, 0.25, 0.0, 0.0
        self.low, self.high, self.units, self.total = -span, span, 0, 0.0

    def add(self, difference: float) -> None:
        """One more unit's difference (in [-span, span]; clipped to it)."""
        import numpy as np

        span, m = self.span, self.grid
        x = min(1.0, max(0.0, (difference + span) / (2 * span)))
        t = self.units = self.units + 1
        self.total += difference
        bet = math.sqrt(2 * self.log_term / (self.var_prev * t * math.log(1 + t)))
        self.up += np.log1p(np.minimum(bet, self.c / m) * (x - m))
        self.down += np.log1p(-np.minimum(bet, self.c / (1 - m)) * (x - m))
        inside = m[np.logaddexp(self.up, self.down) + math.log(0.5) < self.threshold]
        # (every grid mean excluded can only be a miss, at most alpha of the time: the bounds
        # stay as they were)
        if inside.size:
            step = 2 * span / GRID
            self.low = max(self.low, (float(inside.min()) * 2 - 1) * span - step)
            self.high = min(self.high, (float(inside.max()) * 2 - 1) * span + step)
        self.sum_x += x
        self.mean_prev = (0.5 + self.sum_x) / (t + 1)
        self.sum_sq += (x - self.mean_prev) ** 2
        self.var_prev = (0.25 + self.sum_sq) / (t + 1)

    def now(self) -> Sequence95:
        """The interval after the units added so far."""
        mean = self.total / self.units if self.units else 0.0
        low, high = max(self.low, -self.span), min(self.high, self.span)
        return Sequence95(units=self.units, difference=mean, low=low, high=high)


def confidence_sequence(
    differences: Sequence[float], span: float = 1.0, *, alpha: float = 0.05
) -> Sequence95:
    """The confidence sequence after `differences`, in the order the units were drawn."""
    sequence = ConfidenceSequence(span, alpha=alpha)
    for d in differences:
        sequence.add(d)
    return sequence.now()


def status(interval: Sequence95, margin: float) -> Status:
    """Whether a comparison with margin `margin` (in the metric's units) is settled."""
    if interval.units and interval.low >= margin:
        return "lose"
    if interval.units and interval.high < margin:
        return "not_lose"
    return "open"


class SequentialOutcome(BaseModel):
    """How a comparison run until decided ended (recorded with the sweep)."""

    factor: str
    """The factor compared (arm, model or agent)."""
    within: str
    """What its two groups share."""
    metric: str
    """The metric it is decided on."""
    baseline: str
    candidate: str
    status: Status
    """``lose`` / ``not_lose`` (settled), ``open`` (stopped at the maximum, or before)."""
    units: int
    """Paired units it ran on."""
    of: int
    """Paired units a fixed design would have run."""
    difference: float
    low: float
    high: float
    margin: float
    """In the metric's units."""
    points: float
    """The margin in points of the metric's range."""
    why: str
    """Why it stopped, in words."""

    @property
    def sentence(self) -> str:
        """The decision, in the seeds' words."""
        metric = "pass rate" if self.metric == "pass" else self.metric
        if self.status == "lose":
            return (
                f"{self.baseline} is shown to lose by at least {self.points:g} points on {metric}"
            )
        return f"{self.baseline} is not shown to lose by {self.points:g} points"


def stop_reason(state: Status, units: int, of: int, points: float, most: int | None = None) -> str:
    """Why a comparison stopped after `units` of `of` paired units (`most`: its maximum),
    in words."""
    if state == "lose":
        return (
            f"stopped after {units} of {of} paired units: the 95% confidence sequence's lower "
            f"bound reached {points:g} points"
        )
    if state == "not_lose":
        return (
            f"stopped after {units} of {of} paired units: the 95% confidence sequence's upper "
            f"bound fell below {points:g} points (it cannot come to be shown)"
        )
    if units >= (most or of):
        ran = f"all {of}" if units >= of else f"its maximum of {units} of {of}"
        return f"ran {ran} paired units without settling: decided on the interval at the end"
    return f"stopped after {units} of {of} paired units without settling (the run was cut short)"
