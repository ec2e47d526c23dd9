"""Baselines (immutable snapshots of a sweep's scores) and regression checks against them.

`hangar compare` flags a regression (docs/architecture.md, "Scores") when, from baseline
to candidate, for a subject present in both:

- a group's (agent · model · arm) pass rate drops by more than the ``group`` threshold
  (0.3 on the 0..1 scale of a pass rate, i.e. 30 points);
- a scenario (in one group) loses more than ``task`` passing trials (1.0), counted at the
  baseline's number of trials for it: (rate_before - rate_after) * trials_before;
- a checklist requirement's pass rate (in one group) drops by more than ``part`` (0.5).

Only like is compared with like: a scenario whose digest (or an arm's plugin bytes)
changed, or an agent whose settings changed, is listed as not comparable and left out of
every rate, its groups' included (seed 001: "Compare runs only after their sources,
cases, settings, and evidence match"). Every metric besides ``pass`` (a decision case's
``correct``, a rubric's points) gets the same group and scenario checks, its drops
measured as fractions of the metric's range (1 for 0/1 scores, 4 for 1-5). The
thresholds are configurable; the CLI exits 1 when a regression is found, 3 when some
subjects were not comparable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from pydantic import BaseModel, Field

from hangar.errors import ConfigError
from hangar.results import TrialResult
from hangar.scores.kept import StoreBaselines
from hangar.scores.report import COUNTED, build_report
from hangar.scores.thresholds import Thresholds
from hangar.scores.versions import NotComparable, split_versions
from hangar.store import ResultsStore


class Rate(BaseModel):
    """Passes out of counted trials."""

    passes: int
    trials: int

    @property
    def rate(self) -> float:
        """passes / trials (0 with no trial)."""
        return self.passes / self.trials if self.trials else 0.0


class Tally(BaseModel):
    """The assessed scores of one metric in one group and scenario."""

    total: float = 0.0
    """Their sum."""
    n: int = 0
    """How many."""

    @property
    def mean(self) -> float:
        """total / n (0 with none)."""
        return self.total / self.n if self.n else 0.0


class Versions(BaseModel):
    """What a snapshot's scores were measured on: comparable means the same versions."""

    scenarios: dict[str, str] = Field(default_factory=dict)
    """Scenario id -> its digest (the canonical scenario and every file it references)."""
    agents: dict[str, str] = Field(default_factory=dict)
    """Agent name -> the digest of its settings (command or preset and options)."""
    plugins: dict[str, str] = Field(default_factory=dict)
    """``scenario · arm`` -> the digest of the plugin bytes the arm installed."""


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
    requirement_scenarios: dict[str, dict[str, dict[str, Rate]]] = Field(default_factory=dict)
    """Group label -> requirement -> scenario -> rate (to leave out what is not comparable)."""
    versions: Versions | None = None
    """The versions measured (None in a baseline taken before hangar kept them)."""
    metrics: dict[str, dict[str, dict[str, Tally]]] = Field(default_factory=dict)
    """Metric -> group label -> scenario -> its scores (every metric but ``pass``, which
    the fields above keep)."""
    spans: dict[str, float] = Field(default_factory=dict)
    """Metric -> its range (1 for binary, high - low for points): drops are fractions of it."""


class Regression(BaseModel):
    """One regression found."""

    kind: str
    """group, scenario or requirement."""
    group: str
    """The group it is in."""
    subject: str
    """The scenario or requirement (the group itself for kind group)."""
    metric: str = "pass"
    """The metric that dropped."""
    before: float
    """Baseline pass rate."""
    after: float
    """Candidate pass rate."""
    drop: float
    """The measured drop (rate, or passing trials for a scenario)."""
    threshold: float
    """The threshold it exceeded."""


class BaselineComparison(BaseModel):
    """What `compare` found."""

    regressions: list[Regression]
    """Drops past their thresholds, among comparable subjects."""
    not_comparable: list[NotComparable]
    """Subjects whose versions differ: left out, never compared."""


def snapshot(name: str, sweep: str, results: Iterable[TrialResult]) -> Snapshot:
    """The scores of `results` as a snapshot."""
    rows, _ = split_versions(results)
    report = build_report(sweep, rows)
    snap = Snapshot(name=name, sweep=sweep, created_at=datetime.now(UTC), versions=Versions())
    assert snap.versions is not None
    for r in rows:
        snap.versions.scenarios[r.scenario_id] = r.scenario_digest
        snap.versions.agents[r.agent] = r.agent_digest
        snap.versions.plugins[f"{r.scenario_id} · {r.arm}"] = r.plugins_digest
        if r.verdict not in COUNTED:
            continue
        label = f"{r.agent} · {r.model} · {r.arm}"
        for score in r.scores:
            if score.metric == "pass" or score.value is None:
                continue
            tally = (
                snap.metrics.setdefault(score.metric, {})
                .setdefault(label, {})
                .setdefault(r.scenario_id, Tally())
            )
            tally.total += score.value
            tally.n += 1
            span = (score.high or 0) - (score.low or 0) if score.scale == "points" else 1.0
            snap.spans[score.metric] = span or 1.0
        for check in r.checks:
            rate = (
                snap.requirement_scenarios.setdefault(label, {})
                .setdefault(check.requirement, {})
                .setdefault(r.scenario_id, Rate(passes=0, trials=0))
            )
            rate.passes += check.status == "pass"
            rate.trials += 1
    snap.groups = {g.label: Rate(passes=g.passes, trials=g.trials) for g in report.groups}
    for row in report.scenarios:
        for label, (passes, trials) in row.cells.items():
            snap.scenarios.setdefault(label, {})[row.scenario] = Rate(passes=passes, trials=trials)
    for req in report.requirements:
        snap.requirements.setdefault(req.group, {})[req.requirement] = Rate(
            passes=req.passes, trials=req.assessed
        )
    return snap


def create_baseline(store: ResultsStore, name: str | None, sweep: str) -> Snapshot:
    """Keep an immutable snapshot of `sweep` under `name` (refused if the name exists;
    None: the next version, ``baseline-vN``), through `hangar.scores.kept`."""
    results = list(store.results(sweep))
    if not any(r.verdict in COUNTED for r in results):
        raise ConfigError(f"sweep {sweep!r} has no pass or fail trial to take a baseline of")
    kept = StoreBaselines(store)
    name = name or kept.next_name()
    snap = snapshot(name, sweep, results)
    kept.keep(name, snap.model_dump(mode="json"))
    return snap


def load_baseline(store: ResultsStore, name: str) -> Snapshot:
    """A stored baseline."""
    return Snapshot.model_validate(StoreBaselines(store).read(name))


def _differences(before: Versions, after: Versions) -> list[NotComparable]:
    """Subjects present in both whose versions differ."""
    found = []
    changed_plugins: dict[str, list[str]] = {}
    for key, digest in sorted(before.plugins.items()):
        other = after.plugins.get(key)
        if other is not None and other != digest:
            scenario, _, arm = key.partition(" · ")
            changed_plugins.setdefault(scenario, []).append(arm)
            found.append(
                NotComparable(
                    kind="plugins",
                    subject=key,
                    kept=other,
                    other=[digest],
                    sentence=f"the plugins of arm {arm} in scenario {scenario} changed "
                    f"({digest[:12]} -> {other[:12]}): scenario {scenario} not compared",
                )
            )
    for kind, old, new in (
        ("scenario", before.scenarios, after.scenarios),
        ("agent", before.agents, after.agents),
    ):
        for subject, digest in sorted(old.items()):
            other = new.get(subject)
            if (
                other is None
                or other == digest
                or (kind == "scenario" and subject in changed_plugins)
            ):
                continue
            what = "scenario" if kind == "scenario" else "agent settings of"
            found.append(
                NotComparable(
                    kind=kind,  # type: ignore[arg-type]
                    subject=subject,
                    kept=other,
                    other=[digest],
                    sentence=f"the {what} {subject} changed ({digest[:12]} -> {other[:12]}): "
                    "not compared",
                )
            )
    return found


def _restricted(snap: Snapshot, scenarios: set[str], agents: set[str]) -> Snapshot:
    """`snap` without the given scenarios and the groups of the given agents; the group
    and requirement rates recomputed from what is left."""
    out = snap.model_copy(deep=True)
    for per_group in out.metrics.values():
        for label in list(per_group):
            if label.split(" · ", 1)[0] in agents:
                del per_group[label]
                continue
            for scenario in scenarios:
                per_group[label].pop(scenario, None)
    for label in list(out.groups):
        if label.split(" · ", 1)[0] in agents:
            del out.groups[label]
            out.scenarios.pop(label, None)
            out.requirements.pop(label, None)
    if not scenarios:
        return out
    for label, per in out.scenarios.items():
        for scenario in scenarios:
            per.pop(scenario, None)
        if label in out.groups:
            out.groups[label] = Rate(
                passes=sum(r.passes for r in per.values()),
                trials=sum(r.trials for r in per.values()),
            )
    for label in list(out.requirements):
        detail = out.requirement_scenarios.get(label)
        if detail is None:  # an older baseline: its totals cannot be split by scenario
            del out.requirements[label]
            continue
        out.requirements[label] = {
            req: Rate(
                passes=sum(r.passes for s, r in per.items() if s not in scenarios),
                trials=sum(r.trials for s, r in per.items() if s not in scenarios),
            )
            for req, per in detail.items()
        }
    return out


def compare(before: Snapshot, after: Snapshot, t: Thresholds) -> BaselineComparison:
    """Regressions from `before` to `after` among what is comparable (same scenario, plugin
    and agent-settings digests); the rest is listed as not comparable, never mixed."""
    aside = (
        _differences(before.versions, after.versions)
        if before.versions is not None and after.versions is not None
        else []
    )
    scenarios = {a.subject.split(" · ")[0] for a in aside if a.kind != "agent"}
    agents = {a.subject for a in aside if a.kind == "agent"}
    if aside:
        before, after = (
            _restricted(before, scenarios, agents),
            _restricted(after, scenarios, agents),
        )
    return BaselineComparison(regressions=_regressions(before, after, t), not_comparable=aside)


def _regressions(before: Snapshot, after: Snapshot, t: Thresholds) -> list[Regression]:
    found = []
    for label, b in before.groups.items():
        a = after.groups.get(label)
        if a is not None and a.trials and b.trials and b.rate - a.rate > t.group:
            found.append(
                Regression(
                    kind="group",
                    group=label,
                    subject=label,
                    before=b.rate,
                    after=a.rate,
                    drop=b.rate - a.rate,
                    threshold=t.group,
                )
            )
    found += _nested(
        before.scenarios,
        after.scenarios,
        "scenario",
        t.task,
        lambda b, a: (b.rate - a.rate) * b.trials,
    )
    found += _nested(
        before.requirements,
        after.requirements,
        "requirement",
        t.part,
        lambda b, a: b.rate - a.rate,
    )
    for metric, groups in before.metrics.items():
        found += _metric_regressions(
            metric, groups, after.metrics.get(metric, {}), before.spans.get(metric, 1.0), t
        )
    return found


def _metric_regressions(
    metric: str,
    before: dict[str, dict[str, Tally]],
    after: dict[str, dict[str, Tally]],
    span: float,
    t: Thresholds,
) -> list[Regression]:
    """A metric's group and scenario drops, as fractions of its range (see the module)."""
    found = []
    for label, scenarios in before.items():
        later = after.get(label, {})
        shared = [s for s in scenarios if s in later and scenarios[s].n and later[s].n]
        if not shared:
            continue
        b = Tally(
            total=sum(scenarios[s].total for s in shared), n=sum(scenarios[s].n for s in shared)
        )
        a = Tally(total=sum(later[s].total for s in shared), n=sum(later[s].n for s in shared))
        cases = [("group", label, b, a, (b.mean - a.mean) / span, t.group)]
        cases += [
            (
                "scenario",
                s,
                scenarios[s],
                later[s],
                (scenarios[s].mean - later[s].mean) / span * scenarios[s].n,
                t.task,
            )
            for s in shared
        ]
        found += [
            Regression(
                kind=kind,
                group=label,
                subject=subject,
                metric=metric,
                before=old.mean,
                after=new.mean,
                drop=drop,
                threshold=threshold,
            )
            for kind, subject, old, new, drop, threshold in cases
            if drop > threshold
        ]
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
    return StoreBaselines(store).listed()
