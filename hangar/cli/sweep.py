"""`hangar sweep`: sweep files checked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

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
    as_json: Annotated[bool, typer.Option("--json", help="Print the check as JSON.")] = False,
) -> None:
    """Print the matrix size, how it adds up, and every problem found. Exit 1 when
    there is a problem."""
    from hangar.scheduler.sweep import load_sweep
    from hangar.trials.kind import kind_of

    sweep = load_sweep(sweep_file)
    c, matrix = sweep.config, sweep.matrix()
    terms = sweep.breakdown()
    problems = [f"{bad.path} does not load: {bad.error}" for bad in sweep.unloadable]
    for task in sweep.tasks:
        problems += kind_of(task.kind).problems(task, matrix, deep=deep)
    problems = list(dict.fromkeys(problems))
    if as_json:
        console.print_json(
            json.dumps(
                {
                    "sweep": sweep.id,
                    "trials": sweep.size,
                    "terms": terms,
                    "models": len(c.models),
                    "repeats": c.repeats,
                    "problems": problems,
                }
            )
        )
        raise typer.Exit(1 if problems else 0)
    words = [
        f"{t['tasks']} {'unloadable file(s) of ' if t['unloadable'] else ''}{t['kind']} "
        f"x {t['agents']} agents x {t['arms']} arms"
        for t in terms
    ]
    total = " + ".join(words) or "no task"
    if len(words) > 1:
        total = f"({total})"
    console.print(
        f"{sweep.id}: {total} x {len(c.models)} models x {c.repeats} repeats = {sweep.size} trials",
        highlight=False,
    )
    for problem in problems:
        err_console.print(f"[red]x[/] {escape(problem)}", highlight=False)
    raise typer.Exit(1 if problems else 0)
