"""What a sweep's users read: scores per group, per scenario, per requirement, and the
paired comparisons, with the statistics of `hangar.stats`.

A *group* is one (agent, model, arm). Only `pass` and `fail` count in rates; the other
verdicts are counted apart (never-run trials are listed by scenario). Each scenario and
agent is scored at one version only (`split_versions`): trials of an older scenario
digest or agent settings, left in the sweep by an earlier run, are listed as not
comparable, never mixed. Comparisons pair two groups that differ in exactly one of
agent, model or arm, over the scenarios both ran. `build_report` makes the `Report`
model (which is also the JSON form); `hangar.report_render` renders text, Markdown and
HTML.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime
from statistics import median
from typing import Literal

from pydantic import BaseModel, Field

from hangar import stats
from hangar.results import TrialResult, Verdict

COUNTED = (Verdict.PASS, Verdict.FAIL)


class Group(BaseModel):
    """Scores of one (agent, model, arm)."""

    agent: str
    """Agent."""
    model: str
    """Model id."""
    arm: str
    """Arm."""
    trials: int
    """Counted trials (pass + fail)."""
    passes: int
    """Passing trials."""
    pass_rate: stats.Interval
    """Pass rate with its 95% Wilson interval."""
    clustered_se: float
    """Standard error of the pass rate clustered by scenario (0 with one scenario)."""
    pass_at_k: dict[int, float] = Field(default_factory=dict)
    """Unbiased pass@k averaged over scenarios, for k = 1..repeats (when repeats > 1)."""
    pass_hat_k: dict[int, float] = Field(default_factory=dict)
    """pass^k averaged over scenarios (when repeats > 1)."""
    verdicts: dict[str, int]
    """Trials by verdict, the uncounted ones included."""
    cost_usd: float
    """Cost of every attempt of the group."""
    cost_per_trial: float | None
    """Cost per counted trial."""
    cost_per_pass: float | None
    """Cost per passing trial."""
    tokens: dict[str, int]
    """Tokens by kind (input, cached_input, output, reasoning)."""
    duration_p50_s: float | None
    """Median duration of counted trials."""
    duration_p95_s: float | None
    """95th percentile duration of counted trials."""

    @property
    def label(self) -> str:
        """agent · model · arm."""
        return f"{self.agent} · {self.model} · {self.arm}"


class ScenarioRow(BaseModel):
    """One scenario's results in every group."""

    scenario: str
    """Scenario id."""
    cells: dict[str, tuple[int, int]]
    """Group label -> (passes, counted trials)."""


class RequirementRow(BaseModel):
    """A checklist requirement's pass rate in one group."""

    requirement: str
    """The exact requirement string."""
    group: str
    """Group label."""
    passes: int
    """Findings that passed."""
    assessed: int
    """Findings in counted trials."""


class Comparison(BaseModel):
    """A paired comparison of two groups that differ in one factor."""

    factor: str
    """What differs: agent, model or arm."""
    within: str
    """What they share (e.g. ``gold · none`` for an arm comparison)."""
    result: stats.PairedDifference
    """The paired difference, interval and decision sentence."""
    per_scenario: dict[str, float]
    """Per-scenario differences (A - B)."""


class Voided(BaseModel):
    """A trial voided by a canary."""

    trial_key: str
    scenario: str
    group: str
    reason: str


class NotComparable(BaseModel):
    """Trials (or baseline subjects) of another version than the one compared: listed,
    never mixed into a score (seed 001: "Compare runs only after their sources, cases,
    settings, and evidence match")."""

    kind: Literal["scenario", "agent", "plugins"]
    """What differs: a scenario's digest, an agent's settings, an arm's plugin bytes."""
    subject: str
    """The scenario id, the agent name, or ``scenario · arm``."""
    kept: str
    """The version scored (the digest of the most recent trial; the candidate's, in a
    comparison with a baseline)."""
    other: list[str]
    """The other versions (digests)."""
    trials: int = 0
    """Trials set aside (0 in a comparison with a baseline)."""
    sentence: str
    """What happened, in words."""


def split_versions(
    results: Iterable[TrialResult],
) -> tuple[list[TrialResult], list[NotComparable]]:
    """Keep each scenario's and each agent's most recent version (a sweep whose scenario
    file or agent settings changed between runs holds both); the trials of older
    versions are set aside and listed, never mixed with the rest."""
    rows = list(results)
    aside: list[NotComparable] = []
    kinds: tuple[tuple[Literal["scenario", "agent"], str, str], ...] = (
        ("scenario", "scenario_id", "scenario_digest"),
        ("agent", "agent", "agent_digest"),
    )
    for kind, subject_field, version_field in kinds:
        latest: dict[str, TrialResult] = {}
        for r in rows:
            current = latest.get(getattr(r, subject_field))
            if current is None or r.finished_at > current.finished_at:
                latest[getattr(r, subject_field)] = r
        kept: list[TrialResult] = []
        older: dict[str, Counter[str]] = defaultdict(Counter)
        for r in rows:
            subject, version = getattr(r, subject_field), getattr(r, version_field)
            keep = getattr(latest[subject], version_field)
            if version == keep or not version or not keep:  # "": a row from before digests
                kept.append(r)
            else:
                older[subject][version] += 1
        for subject, versions in sorted(older.items()):
            keep, n = getattr(latest[subject], version_field), sum(versions.values())
            aside.append(
                NotComparable(
                    kind=kind,
                    subject=subject,
                    kept=keep,
                    other=sorted(versions),
                    trials=n,
                    sentence=f"{kind} {subject} changed during the sweep "
                    f"({', '.join(d[:12] for d in sorted(versions))} -> {keep[:12]}): "
                    f"{n} trial(s) of the older version set aside, not mixed",
                )
            )
        rows = kept
    return rows, aside


class Blocked(BaseModel):
    """Trials that never ran, grouped by scenario and reason."""

    scenario: str
    """Scenario id."""
    reason: str
    """Why (the first such trial's reason)."""
    trials: int
    """How many trials."""


class Report(BaseModel):
    """Everything `hangar report` shows (its JSON form, too)."""

    schema_version: int = 1
    """Version of this shape."""
    sweep: str
    """Sweep id."""
    generated_at: datetime
    """When the report was made (UTC)."""
    margin: float
    """The margin of the decision sentences (0.05 = 5 points)."""
    groups: list[Group]
    """Per (agent, model, arm)."""
    scenarios: list[ScenarioRow]
    """The pass matrix."""
    requirements: list[RequirementRow]
    """Checklist requirements."""
    comparisons: list[Comparison]
    """Paired comparisons."""
    voided: list[Voided]
    """Trials voided by a canary."""
    blocked: list[Blocked] = Field(default_factory=list)
    """Trials that never ran (blocked_setup), by scenario."""
    not_comparable: list[NotComparable] = Field(default_factory=list)
    """Trials of older scenario or agent versions, set aside."""
    notes: list[str] = Field(default_factory=list)
    """Caveats a reader should see (few scenarios, no counted trials...)."""


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return stats._quantile(ordered, q)


def _group_key(r: TrialResult) -> tuple[str, str, str]:
    return (r.agent, r.model, r.arm)


def build_report(
    sweep: str, results: Iterable[TrialResult], *, margin: float = 0.05, seed: int = 0
) -> Report:
    """The report of a sweep's latest attempts."""
    kept, aside = split_versions(results)
    by_group: dict[tuple[str, str, str], list[TrialResult]] = defaultdict(list)
    for r in kept:
        by_group[_group_key(r)].append(r)
    groups, outcomes = [], {}
    for key in sorted(by_group):
        rows = by_group[key]
        counted = [r for r in rows if r.verdict in COUNTED]
        per_scenario: dict[str, list[bool]] = defaultdict(list)
        for r in counted:
            per_scenario[r.scenario_id].append(r.verdict is Verdict.PASS)
        outcomes[key] = per_scenario
        passes = sum(r.verdict is Verdict.PASS for r in counted)
        repeats = max((len(v) for v in per_scenario.values()), default=0)
        ks = range(1, repeats + 1) if repeats > 1 else range(0)
        cost = sum(r.usage.cost_usd for r in rows)
        durations = [r.duration_s for r in counted]
        groups.append(
            Group(
                agent=key[0],
                model=key[1],
                arm=key[2],
                trials=len(counted),
                passes=passes,
                pass_rate=stats.wilson(passes, len(counted)),
                clustered_se=stats.clustered_se(per_scenario),
                pass_at_k={
                    k: v
                    for k in ks
                    if (v := stats.mean_over_scenarios(per_scenario, "pass@k", k)) is not None
                },
                pass_hat_k={
                    k: v
                    for k in ks
                    if (v := stats.mean_over_scenarios(per_scenario, "pass^k", k)) is not None
                },
                verdicts=dict(Counter(r.verdict.value for r in rows)),
                cost_usd=cost,
                cost_per_trial=cost / len(counted) if counted else None,
                cost_per_pass=cost / passes if passes else None,
                tokens={
                    "input": sum(r.usage.input_tokens for r in rows),
                    "cached_input": sum(r.usage.cached_input_tokens for r in rows),
                    "output": sum(r.usage.output_tokens for r in rows),
                    "reasoning": sum(r.usage.reasoning_tokens for r in rows),
                },
                duration_p50_s=median(durations) if durations else None,
                duration_p95_s=_percentile(durations, 0.95),
            )
        )
    labels = {(g.agent, g.model, g.arm): g.label for g in groups}
    scenario_ids = sorted({s for o in outcomes.values() for s in o})
    matrix = [
        ScenarioRow(
            scenario=s,
            cells={
                labels[k]: (sum(outcomes[k][s]), len(outcomes[k][s]))
                for k in outcomes
                if outcomes[k].get(s)
            },
        )
        for s in scenario_ids
    ]
    requirements = _requirements(by_group, labels)
    comparisons = _comparisons(outcomes, margin, seed)
    voided = [
        Voided(
            trial_key=r.trial_key,
            scenario=r.scenario_id,
            group=labels[_group_key(r)],
            reason=r.reason,
        )
        for rows in by_group.values()
        for r in rows
        if r.verdict is Verdict.VOID
    ]
    blocked: dict[tuple[str, str], list[TrialResult]] = defaultdict(list)
    for r in kept:
        if r.verdict is Verdict.BLOCKED_SETUP:
            blocked[(r.scenario_id, r.reason.split(": ", 1)[0])].append(r)
    notes = [a.sentence for a in aside]
    if len(scenario_ids) < 5 and comparisons:
        notes.append(
            f"only {len(scenario_ids)} scenario(s): the paired intervals reflect too few "
            "scenarios to say much beyond them"
        )
    if not any(g.trials for g in groups):
        notes.append("no counted trial (pass or fail) yet")
    return Report(
        sweep=sweep,
        generated_at=datetime.now(UTC),
        margin=margin,
        groups=groups,
        scenarios=matrix,
        requirements=requirements,
        comparisons=comparisons,
        voided=voided,
        blocked=[
            Blocked(scenario=scenario, reason=trials[0].reason, trials=len(trials))
            for (scenario, _), trials in sorted(blocked.items())
        ],
        not_comparable=aside,
        notes=notes,
    )


def _requirements(
    by_group: dict[tuple[str, str, str], list[TrialResult]], labels: dict[tuple[str, str, str], str]
) -> list[RequirementRow]:
    rows = []
    for key, results in sorted(by_group.items()):
        tally: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for r in results:
            if r.verdict not in COUNTED:
                continue
            for check in r.checks:
                tally[check.requirement][0] += check.status == "pass"
                tally[check.requirement][1] += 1
        rows += [
            RequirementRow(requirement=req, group=labels[key], passes=p, assessed=n)
            for req, (p, n) in sorted(tally.items())
        ]
    return rows


def _comparisons(
    outcomes: dict[tuple[str, str, str], dict[str, list[bool]]], margin: float, seed: int
) -> list[Comparison]:
    found = []
    keys = sorted(outcomes)
    factors = ("agent", "model", "arm")
    for i, first in enumerate(keys):
        for second in keys[i + 1 :]:
            differ = [f for f, x, y in zip(factors, first, second, strict=True) if x != y]
            if len(differ) != 1:
                continue
            factor = differ[0]
            at = factors.index(factor)
            # The better group goes first, so the sentence reads "A is (not) shown to beat B".
            a, b = first, second
            rate_a = stats.per_scenario_rates(outcomes[a])
            rate_b = stats.per_scenario_rates(outcomes[b])
            shared = rate_a.keys() & rate_b.keys()
            if not shared:
                continue
            if sum(rate_b[s] for s in shared) > sum(rate_a[s] for s in shared):
                a, b, rate_a, rate_b = b, a, rate_b, rate_a
            result = stats.paired_difference(
                outcomes[a], outcomes[b], labels=(a[at], b[at]), margin=margin, seed=seed
            )
            if result is None:
                continue
            within = " · ".join(x for f, x in zip(factors, a, strict=True) if f != factor)
            found.append(
                Comparison(
                    factor=factor,
                    within=within,
                    result=result,
                    per_scenario={s: rate_a[s] - rate_b[s] for s in sorted(shared)},
                )
            )
    return found
