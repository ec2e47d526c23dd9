"""`hangar sweep`: sweep files checked."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hangar.cli._app import app
from hangar.console import console, err_console

sweep_app = typer.Typer(help="Check sweep files.")
app.add_typer(sweep_app, name="sweep")


@sweep_app.command("check")
def sweep_check(
    sweep_file: Annotated[Path, typer.Argument(help="Sweep YAML file.")],
    deep: Annotated[
        bool, typer.Option(help="Also check each scenario's revision and image.")
    ] = True,
) -> None:
    """Print the matrix size and the first problems found."""
    from hangar.scheduler.sweep import load_sweep
    from hangar.trials.kind import kind_of

    sweep = load_sweep(sweep_file)
    c, matrix = sweep.config, sweep.matrix()
    parts = []
    for name in dict.fromkeys(t.kind for t in sweep.tasks):
        kind, tasks = kind_of(name), sweep.of_kind(name)
        arms = len(kind.arms(tasks[0], matrix))
        parts.append(f"{len(tasks)} {kind.title} x {len(kind.agents(matrix))} agents x {arms} arms")
    console.print(
        f"{sweep.id}: "
        + " + ".join(parts or ["no task"])
        + f", x {len(c.models)} models x {c.repeats} repeats = {sweep.size} trials",
        highlight=False,
    )
    problems = [f"{bad.path} does not load: {bad.error}" for bad in sweep.unloadable]
    for task in sweep.tasks:
        problems += kind_of(task.kind).problems(task, matrix, deep=deep)
    for problem in dict.fromkeys(problems):
        err_console.print(f"[red]x[/] {problem}", highlight=False)
    raise typer.Exit(1 if problems else 0)
