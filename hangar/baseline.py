"""Baselines (immutable snapshots of a sweep's scores) and regression checks against them.

`hangar compare` flags a regression (DESIGN.md section 6) when, from baseline to candidate,
for a subject present in both:

- a group's (agent · model · arm) pass rate drops by more than ``group_drop`` (0.3 on the
  0..1 scale of a pass rate, i.e. 30 points);
- a scenario (in one group) loses more than ``scenario_drop`` passing trials (1.0), counted
  at the baseline's number of trials for it: (rate_before - rate_after) * trials_before;
- a checklist requirement's pass rate (in one group) drops by more than
  ``requirement_drop`` (0.5).

The thresholds are configurable; the CLI exits non-zero when any regression is found.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from hangar.errors import ConfigError
from hangar.report import COUNTED, build_report
from hangar.results import TrialResult
from hangar.store import ResultsStore, baselines


class Rate(BaseModel):
    """Passes out of counted trials."""

    passes: int
    trials: int

    @property
    def rate(self) -> float:
        """passes / trials (0 with no trial)."""
        return self.passes / self.trials if self.trials else 0.0


class Snapshot(BaseModel):
    """What a baseline keeps of a sweep."""

    name: str
    """Baseline name."""
    sweep: str
    """The sweep it was taken from."""
    created_at: datetime
    """When."""
    groups: dict[str, Rate] = Field(default_factory=dict)
    """Group label -> rate."""
    scenarios: dict[str, dict[str, Rate]] = Field(default_factory=dict)
    """Group label -> scenario -> rate."""
    requirements: dict[str, dict[str, Rate]] = Field(default_factory=dict)
    """Group label -> requirement -> rate."""


class Thresholds(BaseModel):
    """When a drop is a regression (see the module docstring)."""

    group_drop: float = 0.3
    scenario_drop: float = 1.0
    requirement_drop: float = 0.5


class Regression(BaseModel):
    """One regression found."""

    kind: str
    """group, scenario or requirement."""
    group: str
    """The group it is in."""
    subject: str
    """The scenario or requirement (the group itself for kind group)."""
    before: float
    """Baseline pass rate."""
    after: float
    """Candidate pass rate."""
    drop: float
    """The measured drop (rate, or passing trials for a scenario)."""
    threshold: float
    """The threshold it exceeded."""


def snapshot(name: str, sweep: str, results: Iterable[TrialResult]) -> Snapshot:
    """The scores of `results` as a snapshot."""
    rows = list(results)
    report = build_report(sweep, rows)
    snap = Snapshot(name=name, sweep=sweep, created_at=datetime.now(UTC))
    snap.groups = {g.label: Rate(passes=g.passes, trials=g.trials) for g in report.groups}
    for row in report.scenarios:
        for label, (passes, trials) in row.cells.items():
            snap.scenarios.setdefault(label, {})[row.scenario] = Rate(passes=passes, trials=trials)
    for req in report.requirements:
        snap.requirements.setdefault(req.group, {})[req.requirement] = Rate(
            passes=req.passes, trials=req.assessed
        )
    return snap


def create_baseline(store: ResultsStore, name: str, sweep: str) -> Snapshot:
    """Store an immutable snapshot of `sweep` under `name` (refused if the name exists)."""
    results = list(store.results(sweep))
    if not any(r.verdict in COUNTED for r in results):
        raise ConfigError(f"sweep {sweep!r} has no pass or fail trial to take a baseline of")
    snap = snapshot(name, sweep, results)
    try:
        with store.engine.begin() as conn:
            conn.execute(
                baselines.insert().values(
                    name=name,
                    sweep_id=sweep,
                    created_at=snap.created_at,
                    snapshot=snap.model_dump(mode="json"),
                )
            )
    except IntegrityError:
        raise ConfigError(
            f"baseline {name!r} exists and baselines are immutable: choose a new name "
            f"(e.g. {name}-v2)"
        ) from None
    return snap


def load_baseline(store: ResultsStore, name: str) -> Snapshot:
    """A stored baseline."""
    with store.engine.connect() as conn:
        row = conn.execute(select(baselines.c.snapshot).where(baselines.c.name == name)).first()
    if row is None:
        raise ConfigError(f"no baseline named {name!r} in {store._safe_url}")
    return Snapshot.model_validate(row.snapshot)


def compare(before: Snapshot, after: Snapshot, t: Thresholds) -> list[Regression]:
    """Regressions from `before` to `after` (see the module docstring)."""
    found = []
    for label, b in before.groups.items():
        a = after.groups.get(label)
        if a is not None and a.trials and b.trials and b.rate - a.rate > t.group_drop:
            found.append(
                Regression(
                    kind="group",
                    group=label,
                    subject=label,
                    before=b.rate,
                    after=a.rate,
                    drop=b.rate - a.rate,
                    threshold=t.group_drop,
                )
            )
    found += _nested(
        before.scenarios,
        after.scenarios,
        "scenario",
        t.scenario_drop,
        lambda b, a: (b.rate - a.rate) * b.trials,
    )
    found += _nested(
        before.requirements,
        after.requirements,
        "requirement",
        t.requirement_drop,
        lambda b, a: b.rate - a.rate,
    )
    return found


def _nested(
    before: dict[str, dict[str, Rate]],
    after: dict[str, dict[str, Rate]],
    kind: str,
    threshold: float,
    measure: Callable[[Rate, Rate], float],
) -> list[Regression]:
    """Regressions of the subjects (scenarios, requirements) within each group."""
    found = []
    for label, subjects in before.items():
        for subject, b in subjects.items():
            a = after.get(label, {}).get(subject)
            if a is None or not a.trials or not b.trials:
                continue
            drop = measure(b, a)
            if drop > threshold:
                found.append(
                    Regression(
                        kind=kind,
                        group=label,
                        subject=subject,
                        before=b.rate,
                        after=a.rate,
                        drop=drop,
                        threshold=threshold,
                    )
                )
    return found


def baseline_names(store: ResultsStore) -> list[tuple[str, str, datetime]]:
    """(name, sweep, created_at) of every baseline."""
    with store.engine.connect() as conn:
        rows = conn.execute(
            select(baselines.c.name, baselines.c.sweep_id, baselines.c.created_at).order_by(
                baselines.c.created_at
            )
        )
        return [(r.name, r.sweep_id, r.created_at) for r in rows]
