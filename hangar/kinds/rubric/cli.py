"""`hangar rubric`: rubric benchmarks (run, check, baseline, compare)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError
from rich.markup import escape as esc
from rich.table import Table

from hangar.console import JsonFlag, console, err_console, model_arg, output_format
from hangar.errors import ConfigError
from hangar.trials.batch import runner_from

if TYPE_CHECKING:
    from hangar.kinds.rubric.report import BenchmarkReport, PhaseResult

app = typer.Typer(help="Rubric benchmarks: run a folder, check its datasets, keep baselines.")


Folder = Annotated[Path, typer.Argument(help="The benchmark folder (config.yaml, datasets/).")]


Format = Annotated[str, typer.Option("--format", help="text or json.")]


@app.command("run")
def benchmark_run(
    ctx: typer.Context,
    folder: Folder,
    phases: Annotated[
        str | None, typer.Option(help="Comma-separated phases (default: the config's).")
    ] = None,
    max_samples: Annotated[
        int | None, typer.Option(min=1, help="A seeded subset of N samples per phase (CI).")
    ] = None,
    judge_model: Annotated[
        str | None,
        typer.Option(help="A cheaper CI judge: marked as such, never a baseline, never compared."),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Run the skills on this model instead of the config's.")
    ] = None,
    split: Annotated[
        str | None, typer.Option(help="Run one split only: train (tuning), eval or holdout.")
    ] = None,
    baseline: Annotated[
        str | None, typer.Option(help="Compare with baselines/NAME.yaml; exit 1 on a regression.")
    ] = None,
    phase_drop: Annotated[float | None, typer.Option(help="Phase threshold (default 0.3).")] = None,
    sample_drop: Annotated[
        float | None, typer.Option(help="Sample threshold (default 1.0).")
    ] = None,
    dimension_drop: Annotated[
        float | None, typer.Option(help="Dimension threshold (default 0.5).")
    ] = None,
    threshold_reason: Annotated[
        str | None, typer.Option(help="Why the thresholds differ (required when they do).")
    ] = None,
    write_baseline: Annotated[
        bool,
        typer.Option(help="With no regression and no phase below it, write the next baseline."),
    ] = False,
    ci: Annotated[
        bool, typer.Option("--ci", help="Apply config.yaml's ci_benchmark section.")
    ] = False,
    changed_since: Annotated[
        str | None,
        typer.Option(help="Only phases whose skill, samples or rubric changed since this git rev."),
    ] = None,
    address: Annotated[str | None, typer.Option(help="Ray cluster address.")] = None,
    fmt: Format = "text",
    as_json: JsonFlag = False,
) -> None:
    """Run a benchmark folder: each sample a rubric trial on Ray (resumable), then the
    report (YAML, JSON, HTML, history.yaml). Exit 0 fine, 1 a regression, 3 not comparable
    or samples without a score, 130 interrupted."""
    fmt = output_format(fmt, as_json)
    from hangar.kinds.rubric.ci import load_ci
    from hangar.kinds.rubric.run import run_benchmark

    if split not in (None, "train", "eval", "holdout"):
        raise ConfigError(f"--split {split!r}: choose train, eval or holdout")
    chosen_phases = [p.strip() for p in phases.split(",") if p.strip()] if phases else None
    timeout, fail = None, True
    if ci:
        settings = load_ci(folder.resolve())
        if chosen_phases is None and settings.phases != "all":
            chosen_phases = list(settings.phases)
        max_samples = max_samples or settings.max_samples
        if judge_model is None and settings.judge_model is not None:
            judge_model = settings.judge_model.model_dump_json(exclude_none=True)
        if phase_drop is None and settings.regression_threshold != 0.3:
            phase_drop = settings.regression_threshold
            threshold_reason = threshold_reason or settings.reason
        timeout, fail = settings.timeout_per_sample, settings.fail_on_regression
    if changed_since is not None:
        chosen_phases = _changed(folder.resolve(), changed_since, chosen_phases)
        if not chosen_phases:
            console.print(f"no phase's skill, samples or rubric changed since {esc(changed_since)}")
            raise typer.Exit(0)
    given = {"phase": phase_drop, "sample": sample_drop, "dimension": dimension_drop}
    thresholds = _thresholds(folder, given, threshold_reason)
    run = run_benchmark(
        folder,
        phases=chosen_phases,
        max_samples=max_samples,
        judge_model=model_arg(judge_model),
        model=model_arg(model),
        split=split,
        baseline=baseline,
        thresholds=thresholds,
        write_next_baseline=write_baseline,
        timeout_s=timeout,
        fail_on_regression=fail,
        run=runner_from(ctx.obj, address),
    )
    if fmt == "json":
        console.print_json(run.report.model_dump_json())
    else:
        print_report(run.report)
        for path in run.files:
            console.print(f"wrote {esc(str(path))}", highlight=False)
    raise typer.Exit(run.exit_code)


def _thresholds(folder: Path, given: dict[str, float | None], reason: str | None) -> Any:
    """The regression thresholds the options change (None: the config's own)."""
    from hangar.kinds.rubric.formats import Thresholds, load_config

    if all(v is None for v in given.values()) and not reason:
        return None
    base = load_config(folder.resolve()).regression.model_dump()
    chosen = base | {k: v for k, v in given.items() if v is not None}
    try:
        return Thresholds(**chosen | {"reason": reason or base["reason"]})
    except ValidationError as exc:
        why = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise ConfigError(f"--phase-drop/--sample-drop/--dimension-drop: {why}") from None


def _changed(folder: Path, revision: str, wanted: list[str] | None) -> list[str]:
    """The phases (of `wanted`, else all) whose files changed since `revision`."""
    from hangar.kinds.rubric.benchmark import skill_path
    from hangar.kinds.rubric.ci import changed_phases
    from hangar.kinds.rubric.formats import load_config, phase_name

    config = load_config(folder)
    skills = {phase_name(p): skill_path(folder, config, p) for p in config.phases}
    affected = changed_phases(folder, config, revision, skills)
    keep = {phase_name(p) for p in wanted} if wanted else None
    return [p for p in affected if keep is None or phase_name(p) in keep]


def _print_phase(label: str, r: PhaseResult) -> None:
    """One phase's breakdown, the judge's agreement with people, its regressions."""
    dims = ", ".join(f"{esc(d)} {v:.2f}" for d, v in r.by_dimension.items())
    levels = ", ".join(f"{esc(d)} {v:.2f}" for d, v in r.by_difficulty.items())
    bias = ", ".join(f"{esc(d)} {v:.2f}" for d, v in r.position_bias.items())
    console.print(
        f"{esc(label)}: by dimension {dims or '-'}; by difficulty {levels or '-'}",
        highlight=False,
    )
    console.print(f"  position-bias gap: {bias or '-'}", highlight=False)
    for c in r.calibration:
        kappa = "-" if c.kappa is None else f"{c.kappa:.2f}"
        flag = "[red]below 0.6: people still needed[/]" if c.below_bar else "ok"
        console.print(
            f"  judge vs people on {esc(c.dimension)}: kappa {kappa}, mean |diff| "
            f"{c.mean_abs_diff:.2f} over {c.pairs} ({flag})",
            highlight=False,
        )
    for g in r.regressions:
        err_console.print(
            f"  [red]regression[/] {g.kind}{esc(f' {g.sample}' if g.sample else '')}: "
            f"{g.baseline_score:.2f} -> {g.current_score:.2f} ({g.regression})"
            + esc(f" on {g.affected_dimension}" if g.affected_dimension else ""),
            highlight=False,
        )


def print_report(report: BenchmarkReport) -> None:
    """The report for people: per phase, its scores, judge agreement and regressions."""
    console.print(
        f"[bold]{esc(report.run_id)}[/] model {esc(report.model)}, judge {esc(report.judge_model)}"
        + (" (CI judge: never a baseline)" if report.ci_judge else "")
        + f", baseline {esc(report.baseline or 'none')}",
        highlight=False,
    )
    table = Table("phase", "samples", "avg", "min", "max", "structural", "judge", "unscored")
    for label, r in report.results.items():
        table.add_row(
            esc(label),
            str(r.samples_run),
            *(
                "-" if x is None else f"{x:.2f}"
                for x in (
                    r.avg_score,
                    r.min_score,
                    r.max_score,
                    r.structural_pass_rate,
                    r.judge_avg,
                )
            ),
            str(r.unassessed),
        )
    console.print(table)
    for label, r in report.results.items():
        _print_phase(label, r)
    s = report.summary
    avg = "-" if s.overall_avg is None else f"{s.overall_avg:.2f}"
    console.print(
        f"{s.total_samples} samples, overall {avg}, {s.regressions_detected} regression(s); "
        f"model ${report.costs.get('model', 0):.4f}, judge ${report.costs.get('judge', 0):.4f}. "
        f"{esc(s.recommendation)}",
        highlight=False,
    )
    if report.not_comparable:
        err_console.print(f"[yellow]{esc(report.not_comparable)}[/]", highlight=False)
    for sample, why in report.trials_not_scored.items():
        err_console.print(f"  [yellow]not scored[/] {esc(sample)}: {esc(why)}", highlight=False)


@app.command("check")
def benchmark_check(
    folder: Folder,
    strict: Annotated[bool, typer.Option(help="Warnings fail the check too.")] = False,
    fmt: Format = "text",
    as_json: JsonFlag = False,
) -> None:
    """Check a benchmark folder against the dataset guidelines (sizes, difficulty
    mix, domains, duplicates, references, human scores, splits). Exit 1 on an error."""
    fmt = output_format(fmt, as_json)
    from hangar.kinds.rubric.dataset_check import check_folder

    report = check_folder(folder.resolve())
    if fmt == "json":
        console.print_json(report.model_dump_json())
    else:
        table = Table(
            "phase",
            "samples",
            "easy",
            "medium",
            "hard",
            "train",
            "eval",
            "holdout",
            title=str(folder),
        )
        for phase, n in report.phases.items():
            table.add_row(esc(phase), *(str(v) for v in n.values()))
        console.print(table)
        for f in report.findings:
            mark = "[red]x[/]" if f.severity == "error" else "[yellow]![/]"
            err_console.print(f"{mark} {f.phase} {f.rule}: {esc(f.message)}", highlight=False)
        errors = sum(f.severity == "error" for f in report.findings)
        console.print(f"{errors} error(s), {len(report.findings) - errors} warning(s)")
    raise typer.Exit(1 if report.failed(strict) else 0)


@app.command("baseline")
def benchmark_baseline(
    folder: Folder,
    from_run: Annotated[str, typer.Option(help="The run id (reports/RUN.yaml).")],
    name: Annotated[
        str | None, typer.Option(help="Its name (default: the next baseline-vN).")
    ] = None,
    description: Annotated[str, typer.Option(help="What it is.")] = "",
) -> None:
    """Make a run's report a new baseline (never over an existing one; never a CI judge's)."""
    from hangar.kinds.rubric.formats import load_config
    from hangar.kinds.rubric.report import load_report, write_baseline

    folder = folder.resolve()
    report = load_report(folder / load_config(folder).output_dir, from_run)
    path = write_baseline(folder, report, name, description)
    console.print(f"wrote {esc(str(path))}", highlight=False)


@app.command("compare")
def benchmark_compare(
    before: Annotated[Path, typer.Argument(help="A report (reports/RUN.yaml or .json).")],
    after: Annotated[Path, typer.Argument(help="Another report of the same benchmark.")],
    fmt: Format = "text",
    as_json: JsonFlag = False,
) -> None:
    """Two runs side by side per phase and dimension (two models, two skill versions).
    Runs scored by different judges are refused (exit 3): their scores do not compare."""
    fmt = output_format(fmt, as_json)
    from hangar.kinds.rubric.report import compare_reports, not_comparable, read_report

    a, b = read_report(before), read_report(after)
    reason = not_comparable(a, b)
    if reason:
        err_console.print(f"[yellow]not comparable:[/] {esc(reason)}", highlight=False)
        raise typer.Exit(3)
    rows = compare_reports(a, b)
    if fmt == "json":
        console.print_json(json.dumps(rows))
    else:
        table = Table("phase", "dimension", str(before.stem), str(after.stem), "change")
        for row in rows:
            cells = ["-" if row[k] is None else f"{row[k]:.2f}" for k in ("before", "after")]
            change = "-" if row["change"] is None else f"{row['change']:+.2f}"
            table.add_row(esc(row["phase"]), esc(row["dimension"]), *cells, change)
        console.print(table)
