"""`hangar decision`: decision suites checked and controlled offline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hangar.console import console, err_console

app = typer.Typer(help="Decision suites: check them, run their offline controls.")


@app.command("check")
def decision_check(suite: Annotated[Path, typer.Argument(help="Decision suite file.")]) -> None:
    """Validate a suite: its cases, skills, references and digests; exit 1 on a problem."""
    from hangar.kinds.decision.cases import load_decision_suite

    cases = load_decision_suite(suite)
    table = Table("case", "skill", "choices", "expected", "references", "digest", title=str(suite))
    for case in cases:
        table.add_row(
            case.id,
            case.case.skill,
            str(len(case.case.choices)),
            ",".join(case.case.expected),
            str(len(case.references)),
            case.digest[:12],
        )
    console.print(table)
    problems = [f"{case.id}: missing {m}" for case in cases for m in case.missing]
    for problem in problems:
        err_console.print(f"[red]x[/] {problem}", highlight=False)
    raise typer.Exit(1 if problems else 0)


@app.command("controls")
def decision_controls(
    suite: Annotated[Path, typer.Argument(help="Decision suite file.")],
) -> None:
    """Send synthetic answers through the real pipeline, no credentials, no model: the
    expected answer must pass, a wrong answer and every single-choice toggle (and an
    invented id, a duplicate, a malformed answer, a short explanation) must fail. Exit 1
    when the grader or the pipeline lets one through."""
    from hangar.kinds.decision.controls import run_controls

    controls = run_controls(suite)
    bad = [c for c in controls if not c.ok]
    table = Table("case", "answer", "must be", "was", title=f"offline controls of {suite}")
    for c in controls:
        got = c.got.value if c.got else "-"
        colour = "green" if c.ok else "red"
        table.add_row(c.case, c.name, c.want.value, f"[{colour}]{got}[/]")
    console.print(table)
    for c in bad:
        err_console.print(f"[red]x[/] {c.case} / {c.name}: {c.reason}", highlight=False)
    cases = len({c.case for c in controls})
    console.print(f"{len(controls) - len(bad)}/{len(controls)} controls held over {cases} cases")
    raise typer.Exit(1 if bad else 0)
