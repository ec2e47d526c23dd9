"""`hangar report`, `hangar export`, `hangar compare`: a sweep's scores."""

from __future__ import annotations

import contextlib
import gc
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from hangar.cli._app import app, resolve_sweep
from hangar.console import (
    EndpointOption,
    JsonFlag,
    StoreOption,
    console,
    err_console,
    output_format,
)
from hangar.errors import ConfigError
from hangar.results import SweepRecord
from hangar.scores.report import sweep_margin

if TYPE_CHECKING:
    from hangar.results import TrialResult
    from hangar.scores.report import LeftOut
    from hangar.store import ResultsStore


@app.command("report")
def report(
    sweep: Annotated[str, typer.Argument(help="Sweep file, or a sweep id in --store.")],
    fmt: Annotated[str, typer.Option("--format", help="text, md, html or json.")] = "text",
    as_json: JsonFlag = False,
    out: Annotated[Path | None, typer.Option(help="Write to this file.")] = None,
    margin: Annotated[
        float | None,
        typer.Option(
            help="Points of a metric's range a decision sentence is about (5 = 5 points); "
            "default: the sweep's (its `margin`, or its decision suites'), else 5."
        ),
    ] = None,
    baseline: Annotated[
        str | None, typer.Option(help="Compare with fixed roles: the baseline arm, model or agent.")
    ] = None,
    candidate: Annotated[
        str | None, typer.Option(help="The candidate arm, model or agent (with --baseline).")
    ] = None,
    runs: Annotated[
        bool,
        typer.Option(
            "--runs",
            help="Compare the runs of the sweep file over time (`hangar run --new`, or an "
            "id with {date} or {week}): each group's passes in each run.",
        ),
    ] = False,
    store: StoreOption = None,
) -> None:
    """Scores per agent, model and arm and per metric, the pass matrix, requirements and
    paired comparisons (with --baseline and --candidate, in those roles); a sweep file's
    latest run (--runs: all its runs side by side)."""
    from hangar.scores.render import render_html, render_markdown, render_text
    from hangar.scores.report import Section, build_report, sweep_design
    from hangar.trials.kind import report_sections

    fmt = output_format(fmt, as_json)
    renderers = {"text": render_text, "md": render_markdown, "html": render_html}
    if fmt not in (*renderers, "json"):
        raise ConfigError(f"unknown format {fmt!r}: use text, md, html or json")
    if (baseline is None) != (candidate is None):
        raise ConfigError("give both --baseline and --candidate (or neither)")
    roles = (baseline, candidate) if baseline is not None and candidate is not None else None
    sweep_id, _, results = resolve_sweep(sweep, store)
    if runs:
        _print_runs(sweep_id, results, fmt, out)
        return
    recorded = _recorded(sweep, results, sweep_id)
    points = margin if margin is not None else sweep_margin(recorded)
    # a sweep run until decided is reported in its roles, with its decisions
    design, ended = sweep_design(recorded)
    roles = roles or design
    rows = list(results.results(sweep_id))
    gc.freeze()  # a one-off process: the cycle collector need not walk 100,000 rows again
    built = build_report(
        sweep_id,
        rows,
        margin=points / 100,
        roles=roles,
        sequential=ended if roles == design and margin is None else (),
    )
    if not built.groups:
        raise ConfigError(f"no results for sweep {sweep_id!r} in {results.safe_url}")
    built.left_out = left_out_of(sweep, results)
    built.sections = [
        Section(kind=kind, title=s.title, lines=s.lines) for kind, s in report_sections(rows)
    ]
    text = built.model_dump_json(indent=1) if fmt == "json" else renderers[fmt](built)
    if out is not None:
        out.write_text(text)
        console.print(f"wrote {out}")
    else:
        console.out(text, highlight=False)


#: The most runs `--runs` shows (the newest).
RUNS_SHOWN = 12


def _print_runs(sweep_id: str, results: ResultsStore, fmt: str, out: Path | None) -> None:
    """`hangar report --runs`: the runs of the sweep's file, oldest first, a column each."""
    from hangar.scores.report import over_time

    family = (results.sweep_config(sweep_id) or SweepRecord()).family or sweep_id
    found = results.runs(family)[:RUNS_SHOWN]
    table = over_time(family, [(i, t, results.results(i)) for i, t in found])
    if fmt == "json":
        text = table.model_dump_json(indent=1)
        if out is not None:
            out.write_text(text)
            console.print(f"wrote {out}")
        else:
            console.out(text, highlight=False)
        return
    if fmt != "text":
        raise ConfigError("--runs writes text or json")
    grid = Table("agent · model · arm", title=escape(f"{len(table.runs)} run(s) of {family}"))
    for run in table.runs:
        grid.add_column(escape(f"{run.sweep}\n{run.started:%Y-%m-%d %H:%M}"), justify="right")
    for label in table.labels:
        cells = []
        for run in table.runs:
            passes, n = run.groups.get(label, (0, 0))
            cells.append(f"{passes / n:.0%} ({passes}/{n})" if n else "-")
        grid.add_row(escape(label), *cells)
    console.print(grid)


def left_out_of(sweep: str, results: ResultsStore) -> list[LeftOut]:
    """The tasks a sweep file leaves out (broken or unvalidated), for the report."""
    from hangar.scheduler.sweep import load_sweep, ready_tasks
    from hangar.scores.report import LeftOut

    if not Path(sweep).is_file():
        return []
    _, found = ready_tasks(load_sweep(Path(sweep)).tasks, results)
    return [LeftOut.model_validate(v.recorded()) for v in found]


def _recorded(sweep: str, results: ResultsStore, sweep_id: str) -> SweepRecord:
    """The sweep's config as the store recorded it; a sweep file's margin stands in for a
    store written before margins were recorded."""
    config: SweepRecord = results.sweep_config(sweep_id) or SweepRecord()
    if config.margin is None and Path(sweep).is_file():
        from hangar.scheduler.sweep import load_sweep

        config = config.model_copy(update={"margin": load_sweep(Path(sweep)).margin})
    return config


@app.command("export")
def export(
    sweep: Annotated[str, typer.Argument(help="Sweep file, or a sweep id in --store.")],
    out: Annotated[
        Path,
        typer.Option(
            help="jsonl: the file, one trial per line ('-': stdout); another format: the "
            "folder to write."
        ),
    ],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="jsonl (every kind's trials), harbor-job (Harbor job folders, as the "
            "Terminal-Bench leaderboard takes them) or swebench-submission (SWE-bench's "
            "experiments layout).",
        ),
    ] = "jsonl",
    all_attempts: Annotated[bool, typer.Option(help="Every attempt, not just the latest.")] = False,
    trajectories: Annotated[
        Path | None,
        typer.Option(
            help="Also write each trial's session as an ATIF trajectory into this folder "
            "(<trial key>.json; <trial key>.<attempt>.json with --all-attempts)."
        ),
    ] = None,
    endpoint: EndpointOption = None,
    store: StoreOption = None,
) -> None:
    """A sweep's trials for other tools. jsonl: every trial as JSON lines (pandas:
    pd.read_json(FILE, lines=True)); a knowledge trial's answer carries its current scores
    from the gold set's labels (correctness, citation_validity: none while pending). With
    --trajectories, each trial's agent session as ATIF v1.7 (Harbor's trajectory.json) too.
    harbor-job and swebench-submission write folders from the trials' evidence and say
    where the run departs from what a leaderboard requires."""
    sweep_id, _, results = resolve_sweep(sweep, store)
    to_stdout = str(out) == "-"
    say = (err_console if to_stdout else console).print
    if fmt != "jsonl":
        _export_folder(fmt, sweep_id, results, out, endpoint)
    else:
        n = _export_jsonl(sweep_id, results, out, all_attempts)
        say(f"wrote {n} trial(s) to {'stdout' if to_stdout else out}", highlight=False)
    if trajectories is not None:
        rows = list(results.results(sweep_id, all_attempts=all_attempts))
        written = _write_trajectories(rows, trajectories, endpoint, all_attempts, results)
        say(f"wrote {written} trajectory file(s) to {trajectories}", highlight=False)


def _export_jsonl(sweep_id: str, results: ResultsStore, out: Path, all_attempts: bool) -> int:
    from hangar.results import Score

    labelled: dict[str, list[Score]] = {}
    for row in results.knowledge_scores(sweep=sweep_id):
        for metric, column in (("correctness", "correct"), ("citation_validity", "citation_valid")):
            if row[column] is not None:
                labelled.setdefault(row["trial_key"], []).append(
                    Score(metric=metric, value=row[column])
                )
    n = 0
    with contextlib.nullcontext(sys.stdout) if str(out) == "-" else out.open("w") as f:
        for r in results.results(sweep_id, all_attempts=all_attempts):
            if r.trial_key in labelled:
                r = r.model_copy(update={"scores": (*r.scores, *labelled[r.trial_key])})
            f.write(r.model_dump_json() + "\n")
            n += 1
    return n


def _export_folder(
    fmt: str, sweep_id: str, results: ResultsStore, out: Path, endpoint: str | None
) -> None:
    """A kind's export format (`Kind.exports`) into the folder `out`."""
    from hangar.trials.kind import export_format
    from hangar.viewer.data import Evidence

    write = export_format(fmt)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} is not empty: give a new folder to --out")
    out.mkdir(parents=True, exist_ok=True)
    evidence = Evidence(endpoint, results=results)

    def bundle(r: TrialResult) -> Path | None:
        found = evidence.archive_of(r) if r.evidence_uri else None
        return Path(found.folder) if found is not None else None

    try:
        rows = list(results.results(sweep_id))
        departures = write(
            sweep_id, rows, results.sweep_config(sweep_id) or SweepRecord(), out, bundle
        )
    finally:
        evidence.close()
    console.print(f"wrote {fmt} of sweep {escape(sweep_id)} to {escape(str(out))}", highlight=False)
    for line in departures:
        console.print(f"  departs from a leaderboard's rules: {escape(line)}", highlight=False)


def _write_trajectories(
    rows: list[TrialResult], folder: Path, endpoint: str | None, each: bool, results: ResultsStore
) -> int:
    """Each trial's ATIF trajectory from its evidence, into `folder`; a trial without a
    bundle (one that never ran) has none. Returns how many were written."""
    from hangar.trajectories import trial_trajectory
    from hangar.viewer.data import Evidence

    folder.mkdir(parents=True, exist_ok=True)
    evidence = Evidence(endpoint, results=results)
    written = 0
    try:
        for r in rows:
            bundle = evidence.archive_of(r) if r.evidence_uri else None
            if bundle is None:
                continue
            name = f"{r.trial_key}.{r.attempt}.json" if each else f"{r.trial_key}.json"
            doc = trial_trajectory(r, Path(bundle.folder))
            (folder / name).write_text(json.dumps(doc, indent=1) + "\n")
            written += 1
    finally:
        evidence.close()
    return written


@app.command("compare")
def compare(
    baseline: Annotated[str, typer.Option(help="Baseline name.")],
    candidate: Annotated[str, typer.Option(help="Candidate sweep file or id.")],
    group_drop: Annotated[float, typer.Option(help="Pass-rate drop of a group.")] = 0.3,
    scenario_drop: Annotated[float, typer.Option(help="Passing trials a scenario loses.")] = 1.0,
    requirement_drop: Annotated[float, typer.Option(help="Pass-rate drop of a requirement.")] = 0.5,
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
    as_json: JsonFlag = False,
    store: StoreOption = None,
) -> None:
    """Flag regressions of a candidate sweep against a baseline.

    Only subjects of the same versions are compared (scenario, plugin and agent-settings
    digests); the others are listed as not comparable. Exit status: 0 no regression and
    everything comparable; 1 a regression; 3 no regression, but something was not
    comparable.
    """
    from hangar.scores.baseline import compare as find
    from hangar.scores.baseline import load_baseline, snapshot
    from hangar.scores.thresholds import Thresholds

    sweep_id, _, results = resolve_sweep(candidate, store)
    before = load_baseline(results, baseline)
    after = snapshot("candidate", sweep_id, results.results(sweep_id))
    outcome = find(
        before,
        after,
        Thresholds(group=group_drop, task=scenario_drop, part=requirement_drop),
    )
    code = 1 if outcome.regressions else 3 if outcome.not_comparable else 0
    if output_format(fmt, as_json) == "json":
        console.out(outcome.model_dump_json(indent=1), highlight=False)
        raise typer.Exit(code)
    for item in outcome.not_comparable:
        err_console.print(f"[yellow]not comparable:[/] {item.sentence}", highlight=False)
    found = outcome.regressions
    if not found:
        console.print(f"no regression of {sweep_id} against baseline {baseline}")
        raise typer.Exit(3 if outcome.not_comparable else 0)
    table = Table(
        "kind",
        "group",
        "subject",
        "metric",
        "before",
        "after",
        "drop",
        "threshold",
        title=f"{len(found)} regression(s) of {sweep_id} against {baseline}",
    )
    for r in found:
        table.add_row(
            r.kind,
            r.group,
            r.subject,
            r.metric,
            f"{r.before:.2f}",
            f"{r.after:.2f}",
            f"{r.drop:.2f}",
            f"{r.threshold:g}",
        )
    console.print(table)
    raise typer.Exit(1)
