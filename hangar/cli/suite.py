"""`hangar suite`: sealed suites of scenarios."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hangar.cli._app import app
from hangar.console import console, err_console

suite_app = typer.Typer(help="Seal and check suites of scenarios.")
app.add_typer(suite_app, name="suite")


@suite_app.command("seal")
def suite_seal(folder: Annotated[Path, typer.Argument(help="Suite folder.")]) -> None:
    """Write manifest.json with the sha256 of every file (an existing seal is refused)."""
    from hangar.sealing import seal

    console.print(f"sealed {folder}: {seal(folder)} file(s) pinned")


@suite_app.command("verify")
def suite_verify(folder: Annotated[Path, typer.Argument(help="Suite folder.")]) -> None:
    """Check a sealed suite against its manifest; exit 1 naming what differs."""
    from hangar.sealing import verify

    problems = verify(folder)
    for problem in problems:
        err_console.print(f"[red]x[/] {problem}", highlight=False)
    if not problems:
        console.print(f"{folder} matches its manifest")
    raise typer.Exit(1 if problems else 0)
