"""`hangar rubric run`: a benchmark folder as Ray trials, then its report.

Each sample is a rubric trial of a sweep of its own (one per benchmark, model and judge,
so reruns resume: a sample already scored at the same version is not run again), with the
usual retries, budget (model and judge spend) and results store. The report is built from
the store's results of the samples run, compared with a baseline when one is named, and
written under the config's ``output_dir`` with the run appended to ``history.yaml``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from hangar.errors import ConfigError
from hangar.kinds.rubric.benchmark import Benchmark, load_benchmark
from hangar.kinds.rubric.formats import Baseline, Thresholds
from hangar.kinds.rubric.render import render_html
from hangar.kinds.rubric.report import (
    BenchmarkReport,
    build_benchmark_report,
    load_baseline,
    next_run_id,
    write_baseline,
    write_report,
)
from hangar.models import check_keys
from hangar.results import TrialResult
from hangar.store import ResultsStore
from hangar.trials.batch import BatchRunner, TaskBatch


class BenchmarkRun(BaseModel):
    """What a run did and wrote."""

    report: BenchmarkReport
    """The report."""
    files: list[Path]
    """What was written (reports, history, a new baseline)."""
    incomplete: int = 0
    """Samples left without a final verdict (budget, a refused key, Ctrl-C, infra_error)."""
    interrupted: bool = False
    """Ctrl-C stopped it."""
    fail_on_regression: bool = True
    """A regression makes the exit status 1 (the CI gate)."""

    @property
    def exit_code(self) -> int:
        """0 fine; 1 a regression; 3 not comparable, unscored samples or incomplete; 130 Ctrl-C."""
        if self.interrupted:
            return 130
        if self.report.summary.regressions_detected and self.fail_on_regression:
            return 1
        unscored = self.report.trials_not_scored or self.incomplete
        return 3 if self.report.not_comparable or unscored else 0


def run_benchmark(
    folder: Path,
    *,
    phases: list[str] | None = None,
    max_samples: int | None = None,
    judge_model: str | dict[str, Any] | None = None,
    split: str | None = None,
    baseline: str | None = None,
    thresholds: Thresholds | None = None,
    write_next_baseline: bool = False,
    model: str | dict[str, Any] | None = None,
    timeout_s: float | None = None,
    fail_on_regression: bool = True,
    run: BatchRunner,
) -> BenchmarkRun:
    """Run a benchmark folder (see the module docstring), its trials through `run` (the
    scheduler's, from the command line). `model` replaces the config's model (to compare
    models on one benchmark); a baseline scored by another judge than this run's is
    refused before anything runs."""
    bench = load_benchmark(
        folder,
        phases=phases,
        max_samples=max_samples,
        judge_model=judge_model,
        split=split,
        model=model,
        timeout_s=timeout_s,
    )
    config = bench.config
    if write_next_baseline and bench.ci_judge:
        raise ConfigError(
            f"--write-baseline with a CI judge ({bench.judge.id}): its scores never become a "
            "baseline (run with the benchmark's judge)"
        )
    before = load_baseline(bench.folder, baseline) if baseline else None
    if before is not None:
        refuse_other_judge(before, bench)
    check_keys([config.model, bench.judge])
    store = ResultsStore(config.store)
    tally = run(_batch(bench, store))
    results = list(store.results(bench.id))
    report = build_benchmark_report(
        run_id=next_run_id(_reports(bench), datetime.now(UTC).strftime("%Y-%m-%d")),
        model=config.model.id,
        judge_model=bench.judge.id,
        ci_judge=bench.ci_judge,
        phases=_phases(bench, results),
        baseline=before,
        thresholds=thresholds or config.regression,
        split=split,
        left_out=bench.skipped,
    )
    report.trials_not_scored.update(_not_run(bench, results))
    return BenchmarkRun(
        report=report,
        files=_write(bench, report, next_baseline=write_next_baseline),
        incomplete=tally.not_run,
        interrupted=tally.interrupted,
        fail_on_regression=fail_on_regression,
    )


def _batch(bench: Benchmark, store: ResultsStore) -> TaskBatch:
    """The benchmark's samples as one sweep; its budget is per run (what earlier runs of
    this benchmark spent does not count)."""
    config = bench.config
    budget = None if config.budget_usd is None else config.budget_usd + store.cost(bench.id)
    return TaskBatch(
        id=bench.id,
        tasks=[s for samples in bench.samples.values() for s in samples],
        models=[config.model],
        store=config.store,
        evidence=config.evidence,
        budget_usd=budget,
        max_in_flight=None if config.parallel else 1,
    )


def _write(bench: Benchmark, report: BenchmarkReport, *, next_baseline: bool) -> list[Path]:
    """The report's files (YAML, JSON, HTML) and, with `next_baseline` when nothing got
    worse and every sample was scored, the next baseline."""
    reports = _reports(bench)
    files = write_report(report, reports)
    html = reports / f"{report.run_id}.html"
    html.write_text(render_html(report, reports / "history.yaml"))
    files.append(html)
    improved = not report.summary.regressions_detected and not report.summary.phases_below_baseline
    if next_baseline and improved and not report.trials_not_scored:
        files.append(write_baseline(bench.folder, report, None, ""))
    return files


def refuse_other_judge(baseline: Baseline, bench: Benchmark) -> None:
    """A baseline scored by another judge (one without a judge was scored by the
    benchmark's own) does not compare with this run: refuse it before any call."""
    theirs = baseline.judge_model or bench.config.judge_model.id
    if theirs != bench.judge.id:
        raise ConfigError(
            f"baseline {baseline.name} was scored by judge {theirs}, this run would be scored by "
            f"{bench.judge.id}{' (a CI judge)' if bench.ci_judge else ''}: scores of different "
            "judges are not comparable (run without --judge-model, or compare with a baseline "
            "of this judge)"
        )


def _reports(bench: Benchmark) -> Path:
    return bench.folder / bench.config.output_dir


def _not_run(bench: Benchmark, results: list[TrialResult]) -> dict[str, str]:
    """The samples of this run with no result of their version."""
    done = {(r.scenario_id, r.scenario_digest) for r in results}
    return {
        s.id: "not run (stopped by the budget, Ctrl-C or a failure of the farm)"
        for samples in bench.samples.values()
        for s in samples
        if (s.id, s.digest) not in done
    }


def _phases(
    bench: Benchmark, results: list[TrialResult]
) -> dict[str, tuple[str, list[str], list[TrialResult]]]:
    """Each phase's label, skill version, dimensions and the results of its samples as
    they ran now (a result of another version of a sample is not this run's)."""
    by_key = {(r.scenario_id, r.scenario_digest): r for r in results}
    phases = {}
    for samples in bench.samples.values():
        if not samples:
            continue
        first = samples[0]
        rows = [r for s in samples if (r := by_key.get((s.id, s.digest))) is not None]
        dims = [d.name for d in first.rubric.dimensions]
        phases[first.rubric.phase] = (first.skill_version, dims, rows)
    return phases
