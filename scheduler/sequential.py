"""A sweep run until decided: which trials each round schedules, and when to stop.

With ``until_decided`` (``hangar run --until-decided --baseline X --candidate Y``) the
sweep's tasks are its paired units, drawn in a seeded random order. Each comparison (the
two groups that differ only in the factor X and Y are values of, for each combination of
the other factors) runs on the first `round` units, then `round` more, and so on; after
each round its confidence sequence (`hangar.scores.sequential`) is looked at, and a
comparison whose decision is reached, or that has run `max_units`, is closed: its groups'
trials on later units are never scheduled. Groups in no comparison (a third arm) run on
the units the open comparisons run on. The driver (`scheduler/driver.py`) runs the rounds;
this module holds no Ray and no store.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator

from hangar.errors import ConfigError
from hangar.results import TrialResult
from hangar.scheduler.sweep import Sweep, UntilDecided
from hangar.scores.comparisons import FACTORS, GroupKey
from hangar.scores.report import comparison_values
from hangar.scores.sequential import (
    Sequence95,
    SequentialOutcome,
    Status,
    confidence_sequence,
    status,
    stop_reason,
)
from hangar.scores.stats import per_scenario_rates
from hangar.trials import TrialSpec

#: The metrics a comparison is decided on by default, in this order.
PREFERRED = ("pass", "correct", "resolved", "reward")


def _group(spec: TrialSpec) -> GroupKey:
    return (spec.agent.name, spec.model, spec.arm)


class Rounds:
    """The rounds of a sweep run until decided; see the module docstring."""

    def __init__(self, sweep: Sweep, plan: UntilDecided, points: float) -> None:
        self.sweep, self.plan, self.points = sweep, plan, points
        units = sorted({t.id for t in sweep.tasks})
        random.Random(f"{sweep.id}:{plan.seed}").shuffle(units)  # noqa: S311 - an order, not a secret
        self.units = units
        self.order = {u: i for i, u in enumerate(units)}
        self.most = min(plan.max_units or len(units), len(units))
        self.n = min(plan.round, self.most)
        groups = {_group(s) for s in sweep.trials("")}
        self.at = self._factor(groups)
        self.pairs = self._pairs(groups)
        if not self.pairs:
            raise ConfigError(
                f"until_decided: no two groups of the sweep differ only in "
                f"{FACTORS[self.at]} {plan.baseline!r} against {plan.candidate!r}"
            )
        self.closed: dict[str, SequentialOutcome] = {}
        self.metric: str | None = None
        """The metric decided on (`_metric`)."""
        self.before = 0
        """The units the rounds before this one reached."""

    def _factor(self, groups: set[GroupKey]) -> int:
        """The factor whose values the roles are (exactly one must have both)."""
        plan = self.plan
        found = [
            at
            for at in range(len(FACTORS))
            if {plan.baseline, plan.candidate} <= {g[at] for g in groups}
        ]
        if len(found) != 1:
            values = {f: sorted({g[i] for g in groups}) for i, f in enumerate(FACTORS)}
            said = "; ".join(f"{f}s: {', '.join(v)}" for f, v in values.items())
            which = "no" if not found else "more than one"
            raise ConfigError(
                f"until_decided: {which} factor has both {plan.baseline!r} and "
                f"{plan.candidate!r} ({said})"
            )
        return found[0]

    def _pairs(self, groups: set[GroupKey]) -> dict[str, tuple[GroupKey, GroupKey]]:
        """within -> (baseline group, candidate group)."""
        pairs = {}
        for g in sorted(groups):
            if g[self.at] != self.plan.baseline:
                continue
            partner = tuple(self.plan.candidate if i == self.at else x for i, x in enumerate(g))
            if partner in groups:
                within = " · ".join(x for i, x in enumerate(g) if i != self.at)
                pairs[within] = (g, partner)
        return pairs

    def _within(self, group: GroupKey) -> str | None:
        for within, pair in self.pairs.items():
            if group in pair:
                return within
        return None

    @property
    def open(self) -> list[str]:
        """The comparisons not closed yet."""
        return [w for w in self.pairs if w not in self.closed]

    def _reach(self, spec: TrialSpec) -> int:
        """How many units `spec`'s group runs on as things stand."""
        within = self._within(_group(spec))
        return self.closed[within].units if within in self.closed else self.n

    def _place(self, spec: TrialSpec) -> int:
        return self.order.get(spec.task.id, len(self.units))

    def trials(self, evidence_url: str) -> Iterator[TrialSpec]:
        """The trials this round adds: on the units after those of the rounds before, up
        to this round's, of the groups still running."""
        for spec in self.sweep.trials(evidence_url):
            if self.before <= self._place(spec) < self._reach(spec):
                yield spec

    def unscheduled(self) -> int:
        """Trials of the sweep the rounds, as they stand, never schedule."""
        return sum(self._place(s) >= self._reach(s) for s in self.sweep.trials(""))

    def _intervals(self, results: Iterable[TrialResult]) -> list[tuple[str, Sequence95, float]]:
        """(within, its confidence sequence, its margin in the metric's units) of every open
        comparison, from the sweep's results so far (units in the order drawn)."""
        values, spans = comparison_values(results)
        found = []
        for within in self.open:
            baseline, candidate = self.pairs[within]
            metric = self._metric(values.get(baseline, {}).keys() & values.get(candidate, {}))
            b = per_scenario_rates(values.get(baseline, {}).get(metric, {}))
            c = per_scenario_rates(values.get(candidate, {}).get(metric, {}))
            shared = sorted(b.keys() & c.keys(), key=lambda u: self.order.get(u, 0))
            span = spans.get(metric, 1.0)
            interval = confidence_sequence([c[u] - b[u] for u in shared], span)
            found.append((within, interval, self.points / 100 * span))
        return found

    def look(self, results: Iterable[TrialResult]) -> None:
        """After a round: close every open comparison that is decided or at its maximum."""
        for within, interval, margin in self._intervals(results):
            state = status(interval, margin)
            if state != "open" or self.n >= self.most:
                self.closed[within] = self._outcome(within, state, interval, margin)

    def cut_short(self, results: Iterable[TrialResult]) -> None:
        """The run stopped before the comparisons were decided (budget, Ctrl-C): each open
        one is recorded as it stands, open."""
        for within, interval, margin in self._intervals(results):
            self.closed[within] = self._outcome(within, "open", interval, margin)

    def _metric(self, shared: set[str]) -> str:
        """The metric decided on: the plan's, else the first `PREFERRED` both groups have,
        else the first by name (fixed at the first look that sees one)."""
        if self.metric is None and (self.plan.metric or shared):
            preferred = [m for m in PREFERRED if m in shared]
            self.metric = self.plan.metric or (preferred or sorted(shared))[0]
        return self.metric or ""

    def _outcome(
        self, within: str, state: Status, interval: Sequence95, margin: float
    ) -> SequentialOutcome:
        return SequentialOutcome(
            factor=FACTORS[self.at], within=within, metric=self.metric or "",
            baseline=self.plan.baseline, candidate=self.plan.candidate, status=state,
            units=self.n, of=len(self.units), difference=interval.difference,
            low=interval.low, high=interval.high, margin=margin, points=self.points,
            why=stop_reason(state, self.n, len(self.units), self.points, self.most),
        )  # fmt: skip

    def advance(self) -> bool:
        """The next round's units; False when every comparison is closed."""
        if not self.open:
            return False
        self.before, self.n = self.n, min(self.n + self.plan.round, self.most)
        return True

    def outcomes(self) -> list[SequentialOutcome]:
        """How each closed comparison ended."""
        return [self.closed[w] for w in self.pairs if w in self.closed]
