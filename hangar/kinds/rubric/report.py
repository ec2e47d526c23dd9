"""Seed 002's benchmark report, baselines and regressions, from a run's results.

The report keeps the seed's fields (``run_id, timestamp, model, judge_model,
skill_versions``; per phase ``samples_run, avg_score, min_score, max_score,
by_dimension, by_difficulty, regressions``; ``summary`` with ``total_samples,
overall_avg, phases_above_baseline, phases_below_baseline, regressions_detected,
recommendation``) and adds what hangar knows: each phase's structural pass rate, judge
average, position-bias gap per dimension, judge calibration against the human scores,
unassessed samples, and the model's and the judge's costs apart.

Regressions against a baseline (all thresholds configurable, with a reason): a phase
average that drops by more than 0.3 points, a sample by more than 1.0, a dimension
average by more than 0.5. A baseline is immutable: a new one is a new file. A run scored
by another judge than the baseline's is not comparable; a run with a CI judge never
becomes a baseline.
"""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from statistics import fmean
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, Field, PlainSerializer

from hangar.errors import ConfigError
from hangar.kinds.rubric.formats import (
    RESERVED,
    Baseline,
    BaselineFile,
    Thresholds,
    load,
    phase_name,
    write_yaml,
    yaml_text,
)
from hangar.kinds.rubric.scoring import Calibration, calibrate
from hangar.models.tokens import TOKENIZER
from hangar.results import TrialResult, Verdict
from hangar.scores.kept import FolderBaselines

T = TypeVar("T")
#: A number as reports write it: 6 decimals (no 2.8249999999999997); computed unrounded.
Num = Annotated[float, PlainSerializer(lambda x: round(x, 6), return_type=float)]


class Regression(BaseModel):
    """A drop past its threshold."""

    kind: Literal["phase", "sample", "dimension"]
    """What dropped."""
    sample: str | None = None
    """The sample (kind sample)."""
    baseline_score: Num
    """Its baseline score."""
    current_score: Num
    """Its score now."""
    regression: str
    """The relative change (``-29%``)."""
    affected_dimension: str | None = None
    """The dimension that dropped (most, for a sample)."""


class PhaseResult(BaseModel):
    """One phase of a run."""

    samples_run: int
    """Samples run (scored or not)."""
    avg_score: Num | None
    """Mean of the scored samples' scores (1-5)."""
    min_score: Num | None
    """Lowest."""
    max_score: Num | None
    """Highest."""
    by_dimension: dict[str, Num]
    """Dimension -> mean score."""
    by_difficulty: dict[str, Num]
    """easy, medium, hard -> mean score."""
    regressions: list[Regression] = Field(default_factory=list)
    """Drops against the baseline."""
    unassessed: int = 0
    """Samples without a score (the judge left a dimension unassessed, no output...)."""
    structural_pass_rate: Num | None = None
    """Pass rate of the structural checks."""
    judge_avg: Num | None = None
    """Mean of the samples' judge scores."""
    position_bias: dict[str, Num] = Field(default_factory=dict)
    """Dimension -> mean |reference-first - candidate-first| of the judge's scores."""
    calibration: list[Calibration] = Field(default_factory=list)
    """Judge against people, per dimension (and overall), where samples carry scores."""
    sample_scores: dict[str, Num] = Field(default_factory=dict)
    """Sample id -> its score."""
    sample_dimensions: dict[str, dict[str, Num]] = Field(default_factory=dict)
    """Sample id -> dimension -> score."""


class Summary(BaseModel):
    """The seed's summary."""

    total_samples: int
    overall_avg: Num | None
    phases_above_baseline: list[str] = Field(default_factory=list)
    """Phases (short names, as the seed writes them) at or above their baseline average."""
    phases_below_baseline: list[str] = Field(default_factory=list)
    """Phases below it."""
    regressions_detected: int = 0
    recommendation: str = ""


class BenchmarkReport(BaseModel):
    """A benchmark run's report (YAML, JSON and HTML)."""

    run_id: str
    timestamp: str
    model: str
    judge_model: str
    ci_judge: bool = False
    """Scored by a cheaper CI judge: never a baseline."""
    skill_versions: dict[str, str]
    results: dict[str, PhaseResult]
    summary: Summary
    baseline: str | None = None
    """The baseline compared with."""
    not_comparable: str = ""
    """Why no comparison was made (another judge than the baseline's)."""
    thresholds: Thresholds = Field(default_factory=Thresholds)
    costs: dict[str, float] = Field(default_factory=dict)
    """USD: ``model`` (the skills' calls) and ``judge`` apart."""
    tokenizer: str = TOKENIZER
    """What ``max_tokens`` counts with."""
    trials_not_scored: dict[str, str] = Field(default_factory=dict)
    """Sample id -> why it has no score (infra_error, blocked_setup, no output)."""
    split: str | None = None
    """The one split run (``train``: a tuning run, which never sees holdout samples)."""
    samples_left_out: dict[str, int] = Field(default_factory=dict)
    """Phase -> samples not run (``--max-samples``, ``max_samples_per_phase``, ``--split``)."""


def _mean(values: list[float]) -> float | None:
    return fmean(values) if values else None


def _score(result: TrialResult, metric: str) -> float | None:
    return next((s.value for s in result.scores if s.metric == metric), None)


def phase_result(rows: list[TrialResult], dimensions: list[str]) -> PhaseResult:
    """One phase's numbers from its samples' results (latest attempts)."""
    scored = [r for r in rows if r.verdict is Verdict.PASS and _score(r, "overall") is not None]
    overall = [_score(r, "overall") or 0.0 for r in scored]
    by_difficulty: dict[str, list[float]] = defaultdict(list)
    for r in scored:
        by_difficulty[str(r.details.get("difficulty"))].append(_score(r, "overall") or 0.0)
    gaps: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        for dim, verdict in (r.details.get("judge") or {}).items():
            if verdict.get("gap") is not None:
                gaps[dim].append(verdict["gap"])
    structural = [v for r in scored if (v := _score(r, "structural")) is not None]
    judge = [v for r in scored if (v := _score(r, "judge")) is not None]
    return PhaseResult(
        samples_run=len(rows),
        avg_score=_mean(overall),
        min_score=min(overall) if overall else None,
        max_score=max(overall) if overall else None,
        by_dimension={
            d: fmean(values)
            for d in dimensions
            if (values := [v for r in scored if (v := _score(r, d)) is not None])
        },
        by_difficulty={
            level: fmean(by_difficulty[level])
            for level in ("easy", "medium", "hard")
            if by_difficulty.get(level)
        },
        unassessed=len(rows) - len(scored),
        structural_pass_rate=_mean(structural),
        judge_avg=_mean(judge),
        position_bias={d: fmean(v) for d, v in gaps.items()},
        calibration=_calibration(scored, dimensions),
        sample_scores={r.scenario_id: _score(r, "overall") or 0.0 for r in scored},
        sample_dimensions={
            r.scenario_id: {d: v for d in dimensions if (v := _score(r, d)) is not None}
            for r in scored
        },
    )


def phase_lines(results: list[TrialResult]) -> list[str]:
    """One line per (model, agent, phase) of a sweep's rubric trials: the phase's numbers
    as `phase_result` gives them to the benchmark's report."""
    groups: dict[tuple[str, str, str], list[TrialResult]] = defaultdict(list)
    for r in results:
        groups[(r.model, r.agent, str(r.details.get("phase", r.suite)))].append(r)
    lines = []
    for (model, agent, phase), rows in sorted(groups.items()):
        named = {s.metric for r in rows for s in r.scores}
        p = phase_result(rows, sorted(named - set(RESERVED)))
        dims = ", ".join(f"{d} {v:.2f}" for d, v in p.by_dimension.items()) or "none"
        lines.append(
            f"{phase} ({agent} · {model}): {p.samples_run} samples, average "
            f"{_two(p.avg_score)} (min {_two(p.min_score)}, max {_two(p.max_score)}), "
            f"structural pass rate {_two(p.structural_pass_rate)}, judge average "
            f"{_two(p.judge_avg)}, {p.unassessed} unassessed; by dimension: {dims}"
        )
    return lines


def _two(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _calibration(scored: list[TrialResult], dimensions: list[str]) -> list[Calibration]:
    """Per dimension (and overall, the judge's weighted score against the people's)."""
    found = []
    for dim, mine in [*((d, d) for d in dimensions), ("overall", "judge")]:
        pairs = [
            (judge, float(human[dim]))
            for r in scored
            if (human := r.details.get("humanScores") or {}).get(dim) is not None
            and (judge := _score(r, mine)) is not None
        ]
        if pairs:
            found.append(calibrate(dim, [j for j, _ in pairs], [h for _, h in pairs]))
    return found


def regressions(
    phase: str, now: PhaseResult, baseline: Baseline, t: Thresholds
) -> list[Regression]:
    """The seed's three kinds of regression of one phase against a baseline."""
    found = []
    before = phase_score(baseline.scores, phase)
    if before is not None and now.avg_score is not None and _past(before, now.avg_score, t.group):
        found.append(_drop("phase", before, now.avg_score))
    for sample, score in now.sample_scores.items():
        old = baseline.sample_scores.get(sample)
        if old is not None and _past(old, score, t.task):
            found.append(
                _drop(
                    "sample",
                    old,
                    score,
                    sample=sample,
                    dimension=_worst(sample, now, baseline, phase),
                )
            )
    for dim, score in now.by_dimension.items():
        old = (phase_score(baseline.dimension_scores, phase) or {}).get(dim)
        if old is not None and _past(old, score, t.part):
            found.append(_drop("dimension", old, score, dimension=dim))
    return found


def phase_score(by_phase: dict[str, T], phase: str) -> T | None:
    """A baseline's entry for `phase`, whether it is keyed ``sdd-propose`` or ``propose``
    (the seed writes both)."""
    for key in (phase, phase_name(phase), f"sdd-{phase_name(phase)}"):
        if key in by_phase:
            return by_phase[key]
    return None


def _past(before: float, after: float, threshold: float) -> bool:
    """`after` dropped by more than `threshold` points from `before`. A drop of exactly the
    threshold is not past it: compared at 1e-9 (4.0 - 3.7 is 0.30000000000000027)."""
    return round(before - after, 9) > threshold


def _worst(sample: str, now: PhaseResult, baseline: Baseline, phase: str) -> str | None:
    """The sample's dimension that fell the most (its lowest, with no baseline detail)."""
    mine = now.sample_dimensions.get(sample, {})
    before = baseline.sample_dimension_scores.get(sample, {})
    drops = {d: before[d] - v for d, v in mine.items() if d in before}
    if drops:
        return max(drops, key=lambda d: drops[d])
    return min(mine, key=lambda d: mine[d]) if mine else None


def _drop(
    kind: Literal["phase", "sample", "dimension"],
    before: float,
    after: float,
    *,
    sample: str | None = None,
    dimension: str | None = None,
) -> Regression:
    change = (after - before) / before * 100 if before else 0.0
    return Regression(
        kind=kind,
        sample=sample,
        baseline_score=before,
        current_score=after,
        regression=f"{change:+.0f}%",
        affected_dimension=dimension,
    )


def build_benchmark_report(
    *,
    run_id: str,
    model: str,
    judge_model: str,
    ci_judge: bool,
    phases: dict[str, tuple[str, list[str], list[TrialResult]]],
    baseline: Baseline | None,
    thresholds: Thresholds,
    split: str | None = None,
    left_out: dict[str, int] | None = None,
) -> BenchmarkReport:
    """The report of a run: `phases` maps each phase's label to (its skill version, its
    dimensions, its samples' results)."""
    results: dict[str, PhaseResult] = {}
    versions: dict[str, str] = {}
    not_scored: dict[str, str] = {}
    cost = {"model": 0.0, "judge": 0.0}
    comparable = baseline is not None and baseline.judge_model in (None, judge_model)
    for label, (version, dimensions, rows) in phases.items():
        versions[label] = version
        result = phase_result(rows, dimensions)
        if baseline is not None and comparable:
            result.regressions = regressions(label, result, baseline, thresholds)
        results[label] = result
        for r in rows:
            cost["model"] += r.usage.cost_usd
            cost["judge"] += r.judge_usage.cost_usd
            if r.verdict is not Verdict.PASS:
                not_scored[r.scenario_id] = f"{r.verdict.value}: {r.reason}"
    summary = _summary(results, baseline, comparable, versions)
    return BenchmarkReport(
        run_id=run_id,
        timestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        model=model,
        judge_model=judge_model,
        ci_judge=ci_judge,
        skill_versions=versions,
        results=results,
        summary=summary,
        baseline=baseline.name if baseline else None,
        not_comparable=(
            ""
            if baseline is None or comparable
            else f"baseline {baseline.name} was scored by judge {baseline.judge_model}, this run "
            f"by {judge_model}: scores of different judges are not comparable"
        ),
        thresholds=thresholds,
        costs={k: round(v, 6) for k, v in cost.items()},
        trials_not_scored=not_scored,
        split=split,
        samples_left_out=left_out or {},
    )


def _summary(
    results: dict[str, PhaseResult],
    baseline: Baseline | None,
    comparable: bool,
    versions: dict[str, str],
) -> Summary:
    """The run's summary, against `baseline` where it is `comparable`."""
    above: list[str] = []
    below: list[str] = []
    scores = baseline.scores if baseline is not None and comparable else {}
    for label, phase in results.items():
        before = phase_score(scores, label)
        if before is not None and phase.avg_score is not None:
            (above if phase.avg_score >= before else below).append(phase_name(label))
    return Summary(
        total_samples=sum(r.samples_run for r in results.values()),
        overall_avg=_mean([s for r in results.values() for s in r.sample_scores.values()]),
        phases_above_baseline=above,
        phases_below_baseline=below,
        regressions_detected=sum(len(r.regressions) for r in results.values()),
        recommendation=_recommend(results, baseline, comparable, versions),
    )


def _recommend(
    results: dict[str, PhaseResult],
    baseline: Baseline | None,
    comparable: bool,
    versions: dict[str, str],
) -> str:
    if baseline is None:
        return "No baseline compared: create one from this run when its scores are accepted."
    if not comparable:
        return "Not compared: rerun with the baseline's judge model."
    parts = []
    for label, r in results.items():
        if not r.regressions:
            continue
        samples = sorted({g.sample for g in r.regressions if g.sample})
        dims = sorted({g.affected_dimension for g in r.regressions if g.affected_dimension})
        part = f"{label} regression"
        if samples:
            part += f" on samples {', '.join(samples)}"
        if dims:
            part += f" ({', '.join(dims)})"
        then = phase_score(baseline.skill_versions, label)
        if then is not None and then != versions.get(label):
            part += f"; its skill changed since the baseline ({then} -> {versions.get(label)})"
        parts.append(part)
    if not parts:
        return "No regression: the skills hold their baseline."
    return "Investigate " + "; ".join(parts)


# -- files ------------------------------------------------------------------------------------


def next_run_id(reports: Path, day: str) -> str:
    """``bench-<day>-NNN``, the next number free in `reports`."""
    taken = [
        int(m.group(1))
        for p in reports.glob(f"bench-{day}-*.yaml")
        if (m := re.search(r"-(\d{3})\.yaml$", p.name))
    ]
    return f"bench-{day}-{max(taken, default=0) + 1:03d}"


def write_report(report: BenchmarkReport, reports: Path) -> list[Path]:
    """The report as YAML and JSON (the seed's ``benchmark_report`` document), and the run
    appended to ``history.yaml``."""
    data = {"benchmark_report": report.model_dump(mode="json")}
    yaml_path, json_path = reports / f"{report.run_id}.yaml", reports / f"{report.run_id}.json"
    write_yaml(yaml_path, data)
    json_path.write_text(report.model_dump_json(indent=1))
    history = reports / "history.yaml"
    runs: list[dict[str, Any]] = []
    if history.is_file():
        loaded = load_history(history)
        runs = loaded
    runs.append(
        {
            "run_id": report.run_id,
            "timestamp": report.timestamp,
            "model": report.model,
            "judge_model": report.judge_model,
            "ci_judge": report.ci_judge,
            "overall_avg": report.summary.overall_avg,
            "phases": {label: r.avg_score for label, r in report.results.items()},
        }
    )
    write_yaml(history, {"history": runs})
    return [yaml_path, json_path, history]


def load_history(path: Path) -> list[dict[str, Any]]:
    """``history.yaml``'s runs (oldest first)."""
    import yaml

    data = yaml.safe_load(path.read_text()) or {}
    runs = data.get("history", []) if isinstance(data, dict) else []
    return [r for r in runs if isinstance(r, dict)]


def _baselines(folder: Path) -> FolderBaselines:
    """The benchmark's kept baselines: ``baselines/<name>.yaml`` (`hangar.scores.kept`)."""
    return FolderBaselines(folder / "baselines", ".yaml")


def load_baseline(folder: Path, name: str) -> Baseline:
    """``baselines/<name>.yaml``."""
    kept = _baselines(folder)
    kept.read(name)  # an unknown name is told the kept ones
    return load(kept.path(name), BaselineFile, "baseline").baseline


def write_baseline(
    folder: Path, report: BenchmarkReport, name: str | None, description: str
) -> Path:
    """Write `report` as a new baseline (never over an existing one; never a CI judge's).
    Without `name`, the next version: ``baseline-vN``."""
    if report.ci_judge:
        raise ConfigError(
            f"run {report.run_id} was scored by a CI judge ({report.judge_model}): it never "
            "becomes a baseline (run with the benchmark's judge)"
        )
    kept = _baselines(folder)
    name = name or kept.next_name()

    def six(values: dict[str, float]) -> dict[str, float]:
        return {k: round(v, 6) for k, v in values.items()}

    baseline = Baseline(
        name=name,
        created=report.timestamp,
        description=description or f"from run {report.run_id}",
        scores=six(
            {label: r.avg_score for label, r in report.results.items() if r.avg_score is not None}
        ),
        sample_scores=six(
            {s: v for r in report.results.values() for s, v in r.sample_scores.items()}
        ),
        dimension_scores={label: six(r.by_dimension) for label, r in report.results.items()},
        sample_dimension_scores={
            s: six(d) for r in report.results.values() for s, d in r.sample_dimensions.items()
        },
        judge_model=report.judge_model,
        run_id=report.run_id,
        skill_versions=dict(report.skill_versions),
    )
    kept.keep(name, yaml_text({"baseline": baseline.model_dump(mode="json", exclude_none=True)}))
    return kept.path(name)


def read_report(path: Path) -> BenchmarkReport:
    """A report written by `write_report` (its YAML or JSON)."""
    import json

    import yaml
    from pydantic import ValidationError

    if not path.is_file():
        raise ConfigError(f"no report at {path}")
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        if isinstance(data, dict) and "benchmark_report" in data:
            data = data["benchmark_report"]
        return BenchmarkReport.model_validate(data)
    except (ValueError, yaml.YAMLError, ValidationError) as exc:
        raise ConfigError(f"{path} is not a benchmark report: {exc}") from None


def load_report(reports: Path, run_id: str) -> BenchmarkReport:
    """The report of run `run_id` in `reports`."""
    path = reports / f"{run_id}.yaml"
    if not path.is_file():
        runs = sorted(p.stem for p in reports.glob("bench-*.yaml")) or ["none"]
        raise ConfigError(f"no report of run {run_id!r} in {reports} (there: {', '.join(runs)})")
    return read_report(path)


def not_comparable(before: BenchmarkReport, after: BenchmarkReport) -> str:
    """Why two runs' scores do not compare ("" when they do): different judges."""
    if before.judge_model != after.judge_model:
        return (
            f"{before.run_id} was scored by judge {before.judge_model}, {after.run_id} by "
            f"{after.judge_model}: scores of different judges are not comparable"
        )
    return ""


def compare_reports(before: BenchmarkReport, after: BenchmarkReport) -> list[dict[str, Any]]:
    """Per phase, its average and each dimension's, before and after (refused, as a
    `ConfigError`, when different judges scored them)."""
    reason = not_comparable(before, after)
    if reason:
        raise ConfigError(reason)
    rows = []
    for label in dict.fromkeys([*before.results, *after.results]):
        a, b = before.results.get(label), after.results.get(label)
        pairs: dict[str, tuple[float | None, float | None]] = {
            "(phase)": (a.avg_score if a else None, b.avg_score if b else None)
        }
        for dim in dict.fromkeys([*(a.by_dimension if a else {}), *(b.by_dimension if b else {})]):
            pairs[dim] = (
                a.by_dimension.get(dim) if a else None,
                b.by_dimension.get(dim) if b else None,
            )
        for dim, (x, y) in pairs.items():
            change = None if x is None or y is None else round(y - x, 4)
            rows.append(
                {"phase": label, "dimension": dim, "before": x, "after": y, "change": change}
            )
    return rows
