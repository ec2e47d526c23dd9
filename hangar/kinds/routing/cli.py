"""`hangar routing`: routing suites checked offline, and their historical records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from hangar.console import JsonFlag, console, err_console
from hangar.errors import ConfigError

app = typer.Typer(help="Routing suites: check them offline, keep historical routes apart.")

SuiteArg = Annotated[Path, typer.Argument(help="Routing suite file.", metavar="SUITE")]


@app.command("check")
def routing_check(
    suite: SuiteArg,
    require_all_fixtures: Annotated[
        bool,
        typer.Option(
            "--require-all-fixtures",
            help="Fail when a catalog skill is expected by no case (else a warning).",
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """The golden-consistency check, offline (no agent, no model): the file validates
    (unique case ids, no skill both expected and forbidden), every case names skills of
    the catalog, every skill's SKILL.md has a description and its folder's name, and with
    --require-all-fixtures every skill has a case. Exit 1 on a problem."""
    from hangar.kinds.routing.suite import consistency

    try:
        found = consistency(suite, require_all=require_all_fixtures)
    except ConfigError as exc:
        if as_json:
            console.print_json(
                json.dumps({"suite": str(suite), "ok": False, "problems": [str(exc)]})
            )
        else:
            err_console.print(f"[red]x[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(1) from None
    if as_json:
        console.print_json(json.dumps({**found.model_dump(), "ok": found.ok}))
        raise typer.Exit(0 if found.ok else 1)
    table = Table("skill", "cases expecting it", title=f"routing suite {found.suite}")
    for name, n in found.skills.items():
        table.add_row(escape(name), str(n) if n else "[yellow]0[/]")
    console.print(table)
    for w in found.warnings:
        err_console.print(f"[yellow]![/] {escape(w)}", highlight=False)
    for p in found.problems:
        err_console.print(f"[red]x[/] {escape(p)}", highlight=False)
    verdict = "consistent" if found.ok else f"{len(found.problems)} problem(s)"
    console.print(f"{found.cases} case(s) over {len(found.skills)} skill(s): {verdict}")
    raise typer.Exit(0 if found.ok else 1)


@app.command("history")
def routing_history(
    suite: SuiteArg,
    sessions: Annotated[
        list[Path] | None,
        typer.Option(
            "--import",
            help="Session files or history folders to import first (~/.codex/sessions, "
            "~/.claude/projects, ~/.pi/agent/sessions, a trial's evidence); repeat.",
            metavar="PATH",
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(help="Results store URL (default: runs/hangar.db beside the suite)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Historical routing records: the routes real sessions took for the suite's prompts
    (and any session that loaded a catalog skill), imported with --import and kept apart:
    evidence of what happened, never part of a live score."""
    from hangar.kinds.routing.history import observe_all
    from hangar.kinds.routing.suite import load_routing_suite
    from hangar.paths import runs_dir
    from hangar.store import ResultsStore

    cases = load_routing_suite(suite)
    url = store or f"sqlite:///{runs_dir(suite.resolve().parent) / 'hangar.db'}"
    missing = [p for p in sessions or [] if not p.expanduser().exists()]
    if missing:
        raise ConfigError(f"file not found: {', '.join(map(str, missing))}")
    results = ResultsStore(url, create=bool(sessions))
    if sessions:
        found, read = observe_all([p.expanduser() for p in sessions], cases)
        results.record_historical_routes(r.model_dump() for r in found)
        err_console.print(
            f"read {read} session(s); recorded {len(found)} route(s) for suite {cases[0].suite}",
            highlight=False,
        )
    rows = results.historical_routes(cases[0].suite)
    if as_json:
        for row in rows:
            row["imported_at"] = row["imported_at"].isoformat()
        console.print_json(json.dumps({"suite": cases[0].suite, "historical": rows}))
        return
    _print_history(cases[0].suite, [c.id for c in cases], rows)


def _print_history(suite: str, case_ids: list[str], rows: list[dict[str, object]]) -> None:
    table = Table("case", "sessions", "exact", "routes seen", title=f"historical routes of {suite}")
    for case_id in [*case_ids, ""]:
        mine = [r for r in rows if r["case_id"] == case_id]
        if not mine:
            continue
        routes: dict[str, int] = {}
        for r in mine:
            loaded = r["loaded"]
            said = ", ".join(loaded) if isinstance(loaded, list) and loaded else "no skill"
            routes[said] = routes.get(said, 0) + 1
        exact = sum(1 for r in mine if r["exact"])
        table.add_row(
            escape(case_id or "(no case's prompt)"),
            str(len(mine)),
            str(exact) if case_id else "-",
            escape("; ".join(f"{k} x{v}" for k, v in sorted(routes.items()))),
        )
    console.print(table)
    console.print(
        "historical evidence: sessions as they happened (agents, models and skill versions "
        "unpinned); never part of a live score",
        highlight=False,
    )
