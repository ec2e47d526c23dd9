"""What a sweep's users read: scores per group, per scenario, per requirement, and the
paired comparisons, with the statistics of `hangar.scores.stats`.

A *group* is one (agent, model, arm). Only `pass` and `fail` count in rates; the other
verdicts are counted apart (never-run trials are listed by scenario). Each scenario and
agent is scored at one version only (`split_versions`): trials of an older scenario
digest or agent settings, left in the sweep by an earlier run, are listed as not
comparable, never mixed. Comparisons pair two groups that differ in exactly one of
agent, model or arm, over the scenarios both ran. `build_report` makes the `Report`
model (which is also the JSON form); `hangar.scores.render` renders text, Markdown and
HTML. Beside the pass rate of each group, every metric its trials were scored on is
summarised (`MetricSummary`) and compared (`hangar.scores.comparisons`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from statistics import median

from pydantic import BaseModel, Field

from hangar.results import COUNTED_VERDICTS, Scale, Score, SweepRecord, TrialResult, Verdict
from hangar.scores import stats
from hangar.scores.comparisons import Comparison, GroupKey, compare_groups, metric_words
from hangar.scores.sequential import SequentialOutcome
from hangar.scores.versions import NotComparable, split_versions

COUNTED = COUNTED_VERDICTS


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
    pass_rate: stats.Interval | None
    """Pass rate with its 95% Wilson interval (None: no counted trial, so no rate)."""
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
    metrics: list[MetricSummary] = Field(default_factory=list)
    """Every metric its trials were scored on."""
    uncounted: list[Uncounted] = Field(default_factory=list)
    """Why its other trials are in no rate (blocked_setup, infra_error, verifier_error,
    void), by verdict and cause."""

    @property
    def label(self) -> str:
        """agent · model · arm."""
        return f"{self.agent} · {self.model} · {self.arm}"


class Uncounted(BaseModel):
    """A group's trials of one uncounted verdict and cause."""

    verdict: str
    """blocked_setup, infra_error, verifier_error or void."""
    reason: str
    """Why (the first such trial's reason)."""
    trials: int
    """How many trials."""


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


class MetricSummary(BaseModel):
    """One group's scores on one metric (a JSON contract: see README)."""

    metric: str
    """The metric (``pass``, ``correct``...)."""
    scale: Scale
    """binary, points or count."""
    n: int
    """Assessed scores (of counted trials)."""
    mean: float | None
    """Their mean (a rate for a binary score); None with none assessed."""
    ci_low: float | None
    """Lower bound of the 95% interval (Wilson for binary, a seeded bootstrap of the
    mean otherwise)."""
    ci_high: float | None
    """Upper bound."""
    unassessed: int = 0
    """Scores of counted trials that were not assessed (shown, never dropped)."""
    low: float | None = None
    """A points scale's lowest value."""
    high: float | None = None
    """A points scale's highest value."""


class Voided(BaseModel):
    """A trial voided by a canary."""

    trial_key: str
    scenario: str
    group: str
    reason: str


class Blocked(BaseModel):
    """Trials that never ran, grouped by scenario and reason."""

    scenario: str
    """Scenario id."""
    reason: str
    """Why (the first such trial's reason)."""
    trials: int
    """How many trials."""


class LeftOut(BaseModel):
    """A task the sweep left out before any trial: broken, or never validated."""

    scenario: str
    """Task id."""
    status: str
    """``broken`` or ``unvalidated``."""
    reason: str
    """Why (the validation's reason)."""


class Section(BaseModel):
    """A kind's own part of the report (`hangar.trials.kind.Kind.report_sections`)."""

    kind: str
    """The kind it is about."""
    title: str
    """Its heading."""
    lines: list[str]
    """Its lines."""


class Report(BaseModel):
    """Everything `hangar report` shows (its JSON form, too)."""

    schema_version: int = 2
    """Version of this shape."""
    sweep: str
    """Sweep id."""
    generated_at: datetime
    """When the report was made (UTC)."""
    margin: float
    """The margin of the decision sentences, in points of a metric's range (0.05 = 5
    points)."""
    roles: tuple[str, str] | None = None
    """(baseline, candidate) when the comparisons' roles were given."""
    groups: list[Group]
    """Per (agent, model, arm)."""
    scenarios: list[ScenarioRow]
    """The pass matrix."""
    requirements: list[RequirementRow]
    """Checklist requirements."""
    comparisons: list[Comparison]
    """Paired comparisons, per metric."""
    voided: list[Voided]
    """Trials voided by a canary."""
    blocked: list[Blocked] = Field(default_factory=list)
    """Trials that never ran (blocked_setup), by scenario."""
    left_out: list[LeftOut] = Field(default_factory=list)
    """Tasks the sweep left out before any trial (broken or unvalidated datasets' tasks):
    no model's failure, and in no rate."""
    not_comparable: list[NotComparable] = Field(default_factory=list)
    """Trials of older scenario or agent versions, set aside."""
    notes: list[str] = Field(default_factory=list)
    """Caveats a reader should see (few scenarios, no counted trials...)."""
    sequential: list[SequentialOutcome] = Field(default_factory=list)
    """How the comparisons of a sweep run until decided ended (their sentences replace the
    fixed design's, whose interval does not hold after stopping early)."""
    sections: list[Section] = Field(default_factory=list)
    """What each kind adds about its own trials (a rubric benchmark's phases)."""


#: Points of a metric's range a decision sentence is about, when the sweep names none.
DEFAULT_MARGIN = 5.0


def sweep_margin(config: SweepRecord | None) -> float:
    """The margin (points) a sweep ran with, as recorded in the store with its config (its
    own `margin`, else its decision suites'), else `DEFAULT_MARGIN`: the same sentence
    whichever way the sweep is named."""
    recorded = config.margin if config is not None else None
    return recorded if recorded is not None else DEFAULT_MARGIN


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return stats._quantile(ordered, q)


def _group_key(r: TrialResult) -> tuple[str, str, str]:
    return (r.agent, r.model, r.arm)


Outcomes = dict[str, list[bool]]
"""Scenario -> the pass/fail of each of its counted trials (of one group)."""
GroupKey3 = tuple[str, str, str]
"""(agent, model, arm)."""


def _group(key: tuple[str, str, str], rows: list[TrialResult], seed: int) -> tuple[Group, Outcomes]:
    """One group's summary, and its per-scenario outcomes (one pass over its rows: a
    group of a 100,000-trial sweep holds thousands)."""
    counted: list[TrialResult] = []
    per_scenario: Outcomes = defaultdict(list)
    verdicts: dict[str, int] = {}
    cost = 0.0
    tokens = dict.fromkeys(("input", "cached_input", "output", "reasoning"), 0)
    for r in rows:
        verdicts[r.verdict.value] = verdicts.get(r.verdict.value, 0) + 1
        usage = r.usage
        cost += usage.cost_usd
        tokens["input"] += usage.input_tokens
        tokens["cached_input"] += usage.cached_input_tokens
        tokens["output"] += usage.output_tokens
        tokens["reasoning"] += usage.reasoning_tokens
        if r.verdict in COUNTED:
            counted.append(r)
            per_scenario[r.scenario_id].append(r.verdict is Verdict.PASS)
    passes = sum(sum(v) for v in per_scenario.values())
    repeats = max((len(v) for v in per_scenario.values()), default=0)
    ks = range(1, repeats + 1) if repeats > 1 else range(0)
    durations = [r.duration_s for r in counted]

    def over_k(estimator: str) -> dict[int, float]:
        found = {k: stats.mean_over_scenarios(per_scenario, estimator, k) for k in ks}
        return {k: v for k, v in found.items() if v is not None}

    group = Group(
        agent=key[0],
        model=key[1],
        arm=key[2],
        trials=len(counted),
        passes=passes,
        pass_rate=stats.wilson(passes, len(counted)) if counted else None,
        clustered_se=stats.clustered_se(per_scenario),
        pass_at_k=over_k("pass@k"),
        pass_hat_k=over_k("pass^k"),
        verdicts=verdicts,
        cost_usd=cost,
        cost_per_trial=cost / len(counted) if counted else None,
        cost_per_pass=cost / passes if passes else None,
        tokens=tokens,
        duration_p50_s=median(durations) if durations else None,
        duration_p95_s=_percentile(durations, 0.95),
        metrics=_summaries(counted, seed),
        uncounted=_uncounted(rows),
    )
    return group, per_scenario


def _uncounted(rows: list[TrialResult]) -> list[Uncounted]:
    """A group's trials in no rate, by verdict and the first words of their reason."""
    causes: dict[tuple[str, str], list[TrialResult]] = defaultdict(list)
    for r in rows:
        if r.verdict not in COUNTED:
            causes[(r.verdict.value, r.reason.split(": ", 1)[0])].append(r)
    return [
        Uncounted(verdict=verdict, reason=trials[0].reason, trials=len(trials))
        for (verdict, _), trials in sorted(causes.items())
    ]


def _matrix(outcomes: dict[GroupKey3, Outcomes], labels: dict[GroupKey3, str]) -> list[ScenarioRow]:
    """The pass matrix: per scenario, each group's passes over its trials."""
    scenario_ids = sorted({s for o in outcomes.values() for s in o})
    return [
        ScenarioRow(
            scenario=s,
            cells={labels[k]: (sum(o[s]), len(o[s])) for k, o in outcomes.items() if o.get(s)},
        )
        for s in scenario_ids
    ]


def _unjudged(
    kept: list[TrialResult], labels: dict[GroupKey3, str]
) -> tuple[list[Voided], list[Blocked]]:
    """The trials voided by a canary, and those that never ran (blocked, by scenario and
    the first words of their reason)."""
    voided = [
        Voided(
            trial_key=r.trial_key,
            scenario=r.scenario_id,
            group=labels[_group_key(r)],
            reason=r.reason,
        )
        for r in kept
        if r.verdict is Verdict.VOID
    ]
    blocked: dict[tuple[str, str], list[TrialResult]] = defaultdict(list)
    for r in kept:
        if r.verdict is Verdict.BLOCKED_SETUP:
            blocked[(r.scenario_id, r.reason.split(": ", 1)[0])].append(r)
    return voided, [
        Blocked(scenario=scenario, reason=trials[0].reason, trials=len(trials))
        for (scenario, _), trials in sorted(blocked.items())
    ]


def sweep_design(
    config: SweepRecord | None,
) -> tuple[tuple[str, str] | None, list[SequentialOutcome]]:
    """The roles a sweep was run until decided with (None: it was not), and how its
    comparisons ended, as the store recorded them with its config."""
    plan = (config.until_decided if config is not None else None) or {}
    roles = (str(plan["baseline"]), str(plan["candidate"])) if plan else None
    ended = config.sequential if config is not None else []
    return roles, [SequentialOutcome.model_validate(o) for o in ended]


def build_report(
    sweep: str,
    results: Iterable[TrialResult],
    *,
    margin: float = 0.05,
    seed: int = 0,
    roles: tuple[str, str] | None = None,
    sequential: Sequence[SequentialOutcome] = (),
) -> Report:
    """The report of a sweep's latest attempts; `roles` (baseline, candidate) fixes the
    comparisons' roles (see `hangar.scores.comparisons`); `sequential`: how the
    comparisons of a sweep run until decided ended (their decisions are those)."""
    kept, aside = split_versions(results)
    by_group: dict[tuple[str, str, str], list[TrialResult]] = defaultdict(list)
    for r in kept:
        by_group[_group_key(r)].append(r)
    built = {key: _group(key, by_group[key], seed) for key in sorted(by_group)}
    groups = [group for group, _ in built.values()]
    labels = {key: group.label for key, (group, _) in built.items()}
    matrix = _matrix({key: outcomes for key, (_, outcomes) in built.items()}, labels)
    comparisons = compare_groups(
        _values(by_group), _spans(kept), points=margin * 100, seed=seed, roles=roles
    )
    voided, blocked = _unjudged(kept, labels)
    notes = [a.sentence for a in aside]
    comparisons, said = _decided(comparisons, sequential)
    notes += said
    if len(matrix) < 5 and comparisons:
        notes.append(
            f"only {len(matrix)} scenario(s): the paired intervals reflect too few "
            "scenarios to say much beyond them"
        )
    if not any(g.trials for g in groups):
        notes.append("no counted trial (pass or fail) yet")
    return Report(
        sweep=sweep,
        generated_at=datetime.now(UTC),
        margin=margin,
        roles=roles,
        groups=groups,
        scenarios=matrix,
        requirements=_requirements(by_group, labels),
        comparisons=comparisons,
        voided=voided,
        blocked=blocked,
        not_comparable=aside,
        notes=notes,
        sequential=list(sequential),
    )


def _decided(
    comparisons: list[Comparison], sequential: Sequence[SequentialOutcome]
) -> tuple[list[Comparison], list[str]]:
    """The comparisons with the decisions of those run until decided, and a note for each
    saying it stopped early, after how many units and why."""
    ended = {(o.factor, o.within, o.metric, o.baseline, o.candidate): o for o in sequential}
    out = []
    for c in comparisons:
        o = ended.get((c.factor, c.within, c.metric, c.baseline, c.candidate))
        out.append(c if o is None else c.model_copy(update={"sentence": o.sentence}))
    notes = [
        f"run until decided ({o.within}, {metric_words(o.metric)}): {o.sentence}; {o.why} "
        f"(anytime-valid 95% interval {o.low / o.margin * o.points:+.1f} to "
        f"{o.high / o.margin * o.points:+.1f} points)"
        for o in sequential
    ]
    return out, notes


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


def comparison_values(
    results: Iterable[TrialResult],
) -> tuple[dict[GroupKey, dict[str, dict[str, list[float]]]], dict[str, float]]:
    """What comparisons are computed from: group -> metric -> scenario -> the assessed
    scores of its counted trials (the latest version of each task only), and each
    metric's range."""
    kept, _ = split_versions(results)
    by_group: dict[tuple[str, str, str], list[TrialResult]] = defaultdict(list)
    for r in kept:
        by_group[_group_key(r)].append(r)
    return _values(by_group), _spans(kept)


def _values(
    by_group: dict[GroupKey, list[TrialResult]],
) -> dict[GroupKey, dict[str, dict[str, list[float]]]]:
    """group -> metric -> scenario -> the assessed scores of its counted trials."""
    values: dict[GroupKey, dict[str, dict[str, list[float]]]] = {}
    for key, rows in by_group.items():
        per = values.setdefault(key, {})
        for r in rows:
            if r.verdict not in COUNTED:
                continue
            for score in r.scores:
                if score.value is not None:
                    per.setdefault(score.metric, {}).setdefault(r.scenario_id, []).append(
                        score.value
                    )
    return values


def _spans(rows: list[TrialResult]) -> dict[str, float]:
    """Each metric's range (1 for binary; high - low for points; 1 for counts)."""
    spans: dict[str, float] = {}
    for r in rows:
        for score in r.scores:
            if score.scale == "points" and score.low is not None and score.high is not None:
                spans[score.metric] = score.high - score.low
            else:
                spans.setdefault(score.metric, 1.0)
    return spans


def _summaries(counted: list[TrialResult], seed: int) -> list[MetricSummary]:
    """Per metric: n, mean and its 95% interval by the metric's scale; unassessed."""
    by_metric: dict[str, list[Score]] = defaultdict(list)
    for r in counted:
        for score in r.scores:
            by_metric[score.metric].append(score)
    out = []
    for metric, found in sorted(by_metric.items()):
        values = [s.value for s in found if s.value is not None]
        first = found[0]
        if not values:
            interval = None
        elif first.scale == "binary":
            interval = stats.wilson(int(sum(values)), len(values))
        else:
            interval = stats.mean_interval(values, seed=seed)
        out.append(
            MetricSummary(
                metric=metric,
                scale=first.scale,
                n=len(values),
                mean=interval.estimate if interval else None,
                ci_low=interval.low if interval else None,
                ci_high=interval.high if interval else None,
                unassessed=len(found) - len(values),
                low=first.low,
                high=first.high,
            )
        )
    return out


class RunColumn(BaseModel):
    """One run of a sweep file in `over_time`."""

    sweep: str
    """The run's sweep id."""
    started: datetime
    """When it was first run."""
    groups: dict[str, tuple[int, int]]
    """Group label -> (passes, counted trials)."""


class OverTime(BaseModel):
    """The runs of one sweep file side by side (`hangar report FILE --runs`)."""

    family: str
    """The id the file gives (placeholders kept)."""
    runs: list[RunColumn]
    """Oldest first."""

    @property
    def labels(self) -> list[str]:
        """Every group of any run, sorted."""
        return sorted({label for run in self.runs for label in run.groups})


def over_time(family: str, runs: Sequence[tuple[str, datetime, Iterable[TrialResult]]]) -> OverTime:
    """Each run's pass counts per group (its latest attempts; `runs`: (id, started,
    results), in any order)."""
    columns = []
    for sweep, started, results in sorted(runs, key=lambda r: (r[1], r[0])):
        report = build_report(sweep, results)
        counts = {g.label: (g.passes, g.trials) for g in report.groups}
        columns.append(RunColumn(sweep=sweep, started=started, groups=counts))
    return OverTime(family=family, runs=columns)
