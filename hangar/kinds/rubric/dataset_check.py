"""`hangar rubric check`: a benchmark folder against seed 002's dataset guidelines.

- size: at least the phase's minimum in the seed's table ("Minimum 10 samples per phase"
  elsewhere);
- difficulty: at least the table's number of easy, medium and hard samples;
- domains: at least the table's number of distinct domains (a sample's domain is its
  ``domain:X`` tag, else its first tag); for design, patterns (distinct ``pattern:X``
  tags, else distinct first tags);
- dependency ordering (tasks): a sample with a tag naming it (``dependency-ordering``);
- tagged: every sample has tags (domain and patterns);
- duplicates: no two samples share a name or an input (whitespace and case aside);
- reference: present (the format refuses an empty one) and not a copy of the input;
- human scores: every dimension scored, within 1-5, and ``overall`` their weighted mean
  (within 0.01; a warning);
- splits: a holdout exists (a warning), no holdout sample repeats a train sample's input,
  and no tuning run (``--split train``) in the reports scored a holdout sample.

A file that does not load is reported as an error, the rest is still checked. Errors make
the exit status 1; warnings do not (``--strict`` makes them count).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel

from hangar.errors import ConfigError
from hangar.kinds.rubric.formats import (
    DatasetFile,
    Rubric,
    RubricFile,
    Sample,
    load,
    load_config,
    phase_name,
)

#: Seed 002's table: phase -> (minimum samples, easy, medium, hard, distinct tags, of what).
MINIMUMS: dict[str, tuple[int, int, int, int, int, str]] = {
    "explore": (10, 4, 4, 2, 3, "domains"),
    "propose": (15, 5, 6, 4, 4, "domains"),
    "spec": (12, 4, 5, 3, 3, "domains"),
    "design": (10, 3, 4, 3, 3, "patterns"),
    "tasks": (10, 3, 4, 3, 0, "domains"),
}
#: The seed's floor for a phase outside its table.
MIN_SAMPLES = 10


class Finding(BaseModel):
    """One thing the check found."""

    phase: str
    """The phase (or ``-`` for the folder)."""
    rule: str
    """Which rule (the table's first column)."""
    severity: Literal["error", "warning"]
    """Errors fail the check."""
    message: str
    """What is wrong and what to do."""


class DatasetReport(BaseModel):
    """What the check found, and each phase's counts."""

    folder: str
    """The benchmark folder."""
    phases: dict[str, dict[str, int]]
    """Phase -> samples, easy, medium, hard, train, eval, holdout."""
    findings: list[Finding]
    """Errors and warnings."""

    def failed(self, strict: bool = False) -> bool:
        """Whether an error (or, `strict`, a warning) was found."""
        return any(f.severity == "error" or strict for f in self.findings)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


def _canon(value: object) -> str:
    return _norm(json.dumps(value, sort_keys=True, default=str))


def domain(sample: Sample) -> str | None:
    """A sample's domain: its ``domain:X`` tag, else its first tag."""
    marked = [t.split(":", 1)[1] for t in sample.tags if t.startswith("domain:")]
    return marked[0] if marked else (sample.tags[0] if sample.tags else None)


def patterns(samples: list[Sample]) -> set[str]:
    """Distinct ``pattern:X`` tags, else distinct first tags."""
    marked = {t.split(":", 1)[1] for s in samples for t in s.tags if t.startswith("pattern:")}
    return marked or {d for s in samples if (d := domain(s))}


class _Phase:
    """The checks of one phase's dataset (each method one rule)."""

    def __init__(self, phase: str, samples: list[Sample], rubric: Rubric | None) -> None:
        self.phase, self.samples, self.rubric = phase, samples, rubric
        self.found: list[Finding] = []

    def add(self, rule: str, message: str, severity: Literal["error", "warning"] = "error") -> None:
        self.found.append(Finding(phase=self.phase, rule=rule, severity=severity, message=message))

    def run(self, tuned: dict[str, set[str]]) -> list[Finding]:
        self.size()
        self.tags()
        self.duplicates()
        self.references()
        self.human_scores()
        self.splits(tuned)
        return self.found

    def size(self) -> None:
        least, easy, medium, hard, _, _ = MINIMUMS.get(self.phase, (MIN_SAMPLES, 0, 0, 0, 0, ""))
        if len(self.samples) < least:
            self.add(
                "size",
                f"{len(self.samples)} samples, the guidelines' minimum is {least}: add "
                f"{least - len(self.samples)}",
            )
        levels = Counter[str](s.difficulty for s in self.samples)
        for level, want in (("easy", easy), ("medium", medium), ("hard", hard)):
            if levels[level] < want:
                self.add(
                    "difficulty",
                    f"{levels[level]} {level} samples, at least {want} wanted "
                    f"({easy} easy, {medium} medium, {hard} hard)",
                )

    def tags(self) -> None:
        untagged = [s.id for s in self.samples if not s.tags]
        if untagged:
            self.add("tagged", f"samples without tags (domain and patterns): {untagged}")
        _, _, _, _, least, what = MINIMUMS.get(self.phase, (0, 0, 0, 0, 0, ""))
        kinds = (
            patterns(self.samples)
            if what == "patterns"
            else {d for s in self.samples if (d := domain(s))}
        )
        if len(kinds) < least:
            self.add(
                what,
                f"{len(kinds)} different {what} ({sorted(kinds)}), at least {least} wanted",
            )
        if self.phase == "tasks" and not any(
            "dependenc" in t.casefold() for s in self.samples for t in s.tags
        ):
            self.add(
                "dependency ordering",
                "no sample covers dependency ordering: tag one `dependency-ordering`",
            )

    def duplicates(self) -> None:
        keys: dict[str, Callable[[Sample], str]] = {
            "name": lambda s: _norm(s.name),
            "input": lambda s: _canon(s.input),
        }
        for what, key in keys.items():
            seen: dict[str, str] = {}
            for s in self.samples:
                k = key(s)
                if k in seen:
                    self.add("duplicates", f"{s.id} repeats the {what} of {seen[k]}")
                else:
                    seen[k] = s.id

    def references(self) -> None:
        for s in self.samples:
            inputs = {_norm(v) for v in s.input.values() if isinstance(v, str)}
            if _norm(s.reference_output) in inputs:
                self.add("reference", f"{s.id}: the reference output is a copy of its input")

    def human_scores(self) -> None:
        if self.rubric is None:
            return
        dims = {d.name: d.weight for d in self.rubric.dimensions}
        unscored = [s.id for s in self.samples if not s.scores]
        if unscored:
            self.add(
                "human scores",
                f"samples without human scores (no judge calibration for them): {unscored}",
            )
        for s in self.samples:
            if not s.scores:
                continue
            missing = sorted(set(dims) - set(s.scores))
            if missing:
                self.add("human scores", f"{s.id}: no human score for {missing}")
            off = {k: v for k, v in s.scores.items() if not 1 <= v <= 5}
            if off:
                self.add("human scores", f"{s.id}: scores outside 1-5: {off}")
            if not missing and "overall" in s.scores:
                mean = sum(w * s.scores[d] for d, w in dims.items())
                if abs(mean - s.scores["overall"]) > 0.01:
                    self.add(
                        "human scores",
                        f"{s.id}: overall {s.scores['overall']:g} is not the weighted mean "
                        f"of its dimensions ({mean:.2f})",
                        "warning",
                    )

    def splits(self, tuned: dict[str, set[str]]) -> None:
        by = Counter(s.split for s in self.samples)
        if not by["holdout"]:
            self.add(
                "splits",
                "no holdout sample: mark some `split: holdout` so tuning never sees them",
                "warning",
            )
        train = {_canon(s.input): s.id for s in self.samples if s.split == "train"}
        for s in self.samples:
            if s.split == "holdout" and _canon(s.input) in train:
                self.add(
                    "splits",
                    f"holdout {s.id} repeats the input of train sample {train[_canon(s.input)]}",
                )
        holdout = {s.id for s in self.samples if s.split == "holdout"}
        for run, ids in tuned.items():
            if leaked := sorted(ids & holdout):
                self.add("splits", f"tuning run {run} scored holdout samples {leaked}")


def tuning_runs(reports: Path) -> dict[str, set[str]]:
    """Run id -> the samples it scored, of the reports of ``--split train`` runs."""
    runs: dict[str, set[str]] = {}
    for path in sorted(reports.glob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError:
            continue
        report = data.get("benchmark_report") if isinstance(data, dict) else None
        if isinstance(report, dict) and report.get("split") == "train":
            runs[str(report.get("run_id"))] = {
                sample
                for phase in (report.get("results") or {}).values()
                for sample in (phase.get("sample_scores") or {})
            }
    return runs


def check_folder(folder: Path) -> DatasetReport:
    """Check every configured phase's dataset (see the module docstring)."""
    config = load_config(folder)
    tuned = tuning_runs(folder / config.output_dir)
    findings: list[Finding] = []
    counts: dict[str, dict[str, int]] = {}
    for configured in config.phases:
        phase = phase_name(configured)
        base = folder / "datasets" / phase
        try:
            samples = list(load(base / "samples.yaml", DatasetFile, "dataset").dataset.samples)
        except ConfigError as exc:
            findings.append(Finding(phase=phase, rule="format", severity="error", message=str(exc)))
            continue
        rubric = None
        try:
            rubric = load(base / "rubric.yaml", RubricFile, "rubric").rubric
        except ConfigError as exc:
            findings.append(Finding(phase=phase, rule="format", severity="error", message=str(exc)))
        findings += _Phase(phase, samples, rubric).run(tuned)
        levels = Counter[str](s.difficulty for s in samples) + Counter(s.split for s in samples)
        counts[phase] = {"samples": len(samples)} | {
            k: levels[k] for k in ("easy", "medium", "hard", "train", "eval", "holdout")
        }
    return DatasetReport(folder=str(folder), phases=counts, findings=findings)
