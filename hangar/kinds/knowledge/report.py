"""The knowledge report (seed 003): per arm, correctness and citation validity with 95%
Wilson intervals, the citation counts, the raters' kappa and the arm's meta; with a
baseline and a candidate, the paired difference per metric (a seeded bootstrap over the
questions both scored) and the rule in the seed's words.

The JSON is DESIGN.md section 10's contract: ``arms[].metrics[]`` carry ``metric, n,
mean, ci_low, ci_high``; ``comparisons[]`` carry ``baseline, candidate, metric,
difference, ci_low, ci_high, sentence``.

A kept baseline (``baselines/<arm>.json``) freezes an arm's per-question scores with the
suite's manifest, so later arms (a retrieval tool) are compared against it as it was
scored (`compare`), even after more labels arrive.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from hangar.errors import ConfigError
from hangar.files import MANIFEST
from hangar.kinds.knowledge.custody import Suite, load_arm, void_record
from hangar.kinds.knowledge.scoring import (
    Agreement,
    QuestionScore,
    agreement,
    citation_counts,
    score_arm,
)
from hangar.scores import stats
from hangar.scores.kept import FolderBaselines

Metric = Literal["correctness", "citation_validity"]
METRICS: tuple[Metric, ...] = ("correctness", "citation_validity")
WORDS = {"correctness": "correctness", "citation_validity": "citation validity"}
#: The per-question field behind each metric.
FIELD = {"correctness": "correct", "citation_validity": "citation_valid"}


class MetricEntry(BaseModel):
    """A rate with its Wilson interval."""

    metric: Metric
    n: int
    """Questions scored."""
    k: int
    """Of which correct (or with valid citations)."""
    mean: float
    ci_low: float
    ci_high: float


class ArmReport(BaseModel):
    """One arm."""

    arm: str
    meta: dict[str, Any] | None
    """``answers/<arm>.meta.json`` (None: missing)."""
    meta_note: str
    """The meta in words, or that it is missing (and what it lacks)."""
    questions: int
    scored: int
    pending: int
    """Answered, not labelled yet: never scored."""
    unanswered: int
    """Not answered: scored incorrect, citations invalid."""
    metrics: list[MetricEntry]
    citations: dict[str, int]
    """fabricated, stale, unsupported, valid, total (of the scored answers)."""
    agreement: Agreement
    """Cohen's kappa between the first two raters."""
    per_question: list[QuestionScore]
    source: str = "labels"
    """``labels`` (scored now) or ``kept baseline <file>``."""


class KnowledgeComparison(BaseModel):
    """A paired comparison with fixed roles."""

    baseline: str
    candidate: str
    metric: Metric
    n: int
    """Questions scored in both arms."""
    difference: float
    """Candidate minus baseline (a rate difference; 0.15 = 15 points)."""
    ci_low: float
    ci_high: float
    margin_points: float
    sentence: str


class KnowledgeReport(BaseModel):
    """The whole report."""

    suite: str
    manifest: dict[str, Any]
    void: dict[str, Any] | None = None
    """The canary scan's record when the suite is void."""
    arms: list[ArmReport]
    comparisons: list[KnowledgeComparison] = Field(default_factory=list)
    seed: int = 0
    resamples: int = 10_000


def meta_note(arm: str, meta: dict[str, Any] | None, lacks: list[str]) -> str:
    """The meta in words."""
    if meta is None:
        return (
            f"{arm}: meta missing (answers/{arm}.meta.json): who ran it, when and with which "
            "model is unknown"
        )
    who = f"run by {meta['person']}" if meta.get("person") else f"run by {meta.get('harness')}"
    parts = [who, f"on {meta.get('date') or '?'}", f"model {meta.get('model') or '?'}"]
    if meta.get("knowledge_snapshot"):
        parts.append(f"knowledge snapshot {meta['knowledge_snapshot']}")
    note = f"{arm}: " + ", ".join(parts)
    return note + (f" (meta lacks {', '.join(lacks)})" if lacks else "")


def arm_report(suite: Suite, name: str) -> ArmReport:
    """One arm scored from its files."""
    arm = load_arm(suite, name)
    scores = score_arm(suite, arm)
    meta = arm.meta.model_dump(exclude_none=True) if arm.meta else None
    return summarise(
        name,
        scores,
        meta,
        meta_note(name, meta, arm.meta.missing() if arm.meta else []),
        agreement(arm.labels),
    )


def summarise(
    name: str,
    scores: list[QuestionScore],
    meta: dict[str, Any] | None,
    note: str,
    kappa: Agreement,
    source: str = "labels",
) -> ArmReport:
    """An arm's numbers from its per-question scores."""
    scored = [s for s in scores if s.status != "pending"]
    metrics = []
    for metric in METRICS:
        k = sum(bool(getattr(s, FIELD[metric])) for s in scored)
        w = stats.wilson(k, len(scored))
        metrics.append(
            MetricEntry(
                metric=metric, n=len(scored), k=k, mean=w.estimate, ci_low=w.low, ci_high=w.high
            )
        )
    return ArmReport(
        arm=name,
        meta=meta,
        meta_note=note,
        questions=len(scores),
        scored=len(scored),
        pending=sum(s.status == "pending" for s in scores),
        unanswered=sum(s.status == "unanswered" for s in scores),
        metrics=metrics,
        citations=citation_counts(scores),
        agreement=kappa,
        per_question=scores,
        source=source,
    )


def sentence(metric: Metric, low: float, margin: float, void: bool, loser: str = "baseline") -> str:
    """The seed's rule in its words: "baseline is shown to lose by at least 15 points on
    correctness" when the interval's lower bound reaches +15 points, else "baseline is not
    shown to lose by 15 points". With a margin of 0, the lower bound must be above 0."""
    if void:
        return "the suite is void (a canary was found): no decision"
    points = f"{margin * 100:g}"
    low = round(low, 9)  # 3/20 is 0.15, not 0.15000000000000002 or 0.1499999999
    if low >= margin if margin > 0 else low > 0:
        return f"{loser} is shown to lose by at least {points} points on {WORDS[metric]}"
    return f"{loser} is not shown to lose by {points} points"


def values(arm: ArmReport, metric: Metric) -> dict[str, list[float]]:
    """Question -> [1.0 or 0.0] of the questions the arm has scored."""
    return {
        s.id: [float(bool(getattr(s, FIELD[metric])))]
        for s in arm.per_question
        if s.status != "pending"
    }


def compare(
    base: ArmReport,
    cand: ArmReport,
    *,
    margin: float,
    seed: int = 0,
    resamples: int = 10_000,
    void: bool = False,
    loser: str = "baseline",
) -> list[KnowledgeComparison]:
    """Candidate against baseline per metric, over the questions both scored; the
    sentence is about `loser` (the baseline, in the seed's words)."""
    found = []
    for metric in METRICS:
        pd = stats.paired_difference(
            values(cand, metric),
            values(base, metric),
            labels=(cand.arm, base.arm),
            margin=margin,
            resamples=resamples,
            seed=seed,
        )
        if pd is None:
            continue
        found.append(
            KnowledgeComparison(
                baseline=base.arm,
                candidate=cand.arm,
                metric=metric,
                n=pd.scenarios,
                difference=pd.difference,
                ci_low=pd.low,
                ci_high=pd.high,
                margin_points=margin * 100,
                sentence=sentence(metric, pd.low, margin, void, loser),
            )
        )
    return found


def build_gold_set_report(
    suite: Suite,
    arms: list[str],
    *,
    baseline: str | None = None,
    candidate: str | None = None,
    margin: float = 0.15,
    seed: int = 0,
    resamples: int = 10_000,
) -> KnowledgeReport:
    """Score `arms` (and the baseline and candidate, when not among them)."""
    names = list(dict.fromkeys([*arms, *(n for n in (baseline, candidate) if n)]))
    if (baseline is None) != (candidate is None):
        raise ConfigError("--baseline and --candidate go together")
    reports = {name: arm_report(suite, name) for name in names}
    void = void_record(suite.folder)
    comparisons = []
    if baseline and candidate:
        comparisons = compare(
            reports[baseline],
            reports[candidate],
            margin=margin,
            seed=seed,
            resamples=resamples,
            void=void is not None,
        )
    manifest = json.loads((suite.folder / MANIFEST).read_text())
    return KnowledgeReport(
        suite=suite.name,
        manifest=manifest,
        void=void.model_dump() if void else None,
        arms=list(reports.values()),
        comparisons=comparisons,
        seed=seed,
        resamples=resamples,
    )


# -- kept baselines (the regression gate) -------------------------------------------------


def _baselines(suite: Suite) -> FolderBaselines:
    """The gold set's kept baselines: ``baselines/<arm>.json`` (`hangar.scores.kept`)."""
    return FolderBaselines(
        suite.folder / "baselines",
        ".json",
        what="kept baseline",
        fix="keep the new answers as another arm, or remove the file to keep this one anew",
    )


def keep(suite: Suite, arm: str) -> Path:
    """Freeze an arm's scores as a baseline (``baselines/<arm>.json``; never overwritten)."""
    report = arm_report(suite, arm)
    if report.pending:
        raise ConfigError(
            f"arm {arm} has {report.pending} answers nobody labelled yet: label them before "
            "keeping it as a baseline"
        )
    kept = _baselines(suite)
    data = {
        "kept": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "manifest": json.loads((suite.folder / MANIFEST).read_text())["files"],
        "arm": report.model_dump(mode="json"),
    }
    kept.keep(arm, json.dumps(data, indent=1) + "\n")
    return kept.path(arm)


def kept(suite: Suite, arm: str) -> ArmReport:
    """A kept baseline, refused when the suite changed since it was kept."""
    kept = _baselines(suite)
    path = kept.path(arm)
    data = json.loads(kept.read(arm))
    now = json.loads((suite.folder / MANIFEST).read_text())["files"]
    if data.get("manifest") != now:
        raise ConfigError(f"{path} was kept on another version of the suite: not comparable")
    report = ArmReport.model_validate(data["arm"])
    return report.model_copy(update={"source": f"kept baseline {path.name} ({data['kept']})"})


def gate(
    baseline: ArmReport, candidate: ArmReport, *, margin: float, seed: int = 0, void: bool = False
) -> list[KnowledgeComparison]:
    """The regression gate: is the candidate shown to lose to the kept baseline? (The
    baseline minus the candidate, per metric; the sentence is about the candidate.)"""
    found = compare(candidate, baseline, margin=margin, seed=seed, void=void, loser=candidate.arm)
    return [
        c.model_copy(update={"baseline": baseline.arm, "candidate": candidate.arm}) for c in found
    ]
