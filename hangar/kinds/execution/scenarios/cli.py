"""`hangar scenario`: execution scenarios validated, digested and re-pinned."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hangar.console import console, err_console
from hangar.errors import HangarError

app = typer.Typer(help="Validate scenarios, print their digests, re-pin scripts.")


@app.command("check")
def scenario_check(
    files: Annotated[list[Path], typer.Argument(help="Scenario YAML files.")],
    backend: Annotated[str, typer.Option(help="Backend whose images to check.")] = "docker",
) -> None:
    """Validate scenarios (schema, pins, files, revision, image) and print each digest."""
    from hangar.kinds.execution.scenarios.fixture_checks import fixture_problems
    from hangar.kinds.execution.scenarios.scenario import load_scenario
    from hangar.paths import cache_dir
    from hangar.sandbox import sandbox_class
    from hangar.sandbox.workspace import MirrorCache

    seen: dict[str, Path] = {}
    bad = 0
    for path in files:
        try:
            loaded = load_scenario(path)
        except HangarError as exc:
            err_console.print(f"[red]x[/] {exc}", highlight=False)
            bad += 1
            continue
        sid = loaded.scenario.id
        problems = fixture_problems(
            loaded,
            tuple(p.name for p in loaded.scenario.plugins),
            mirrors=MirrorCache(cache_dir() / "mirrors"),
            image_problem=sandbox_class(backend).image_problem,
        )
        if sid in seen:
            problems.append(f"duplicate scenario id {sid!r} (also in {seen[sid]})")
        seen[sid] = path
        if problems:
            bad += 1
            err_console.print(f"[red]x[/] {path}: {sid}", highlight=False)
            for problem in problems:
                err_console.print(f"    {problem}", highlight=False)
        else:
            console.print(f"[green]ok[/] {sid} sha256:{loaded.digest}  {path}", highlight=False)
    raise typer.Exit(1 if bad else 0)


@app.command("pin")
def scenario_pin(files: Annotated[list[Path], typer.Argument(help="Scenario YAML files.")]) -> None:
    """Re-pin prepare and verifier scripts to their current sha256 (after a reviewed edit)."""
    from hangar.kinds.execution.scenarios.scenario import repin

    for path in files:
        changed = repin(path)
        for script, old, new in changed:
            console.print(f"{path}: {script} {old[:19]}... -> {new[:19]}...", highlight=False)
        if not changed:
            console.print(f"{path}: pins are current", highlight=False)
