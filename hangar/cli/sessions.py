"""`hangar sessions`: agents' sessions read as one event stream, and the session audit."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from hangar.cli._app import app, resolve_sweep
from hangar.console import EndpointOption, JsonFlag, console, output_format
from hangar.errors import ConfigError

if TYPE_CHECKING:
    from hangar.sessions import Session
    from hangar.sessions.audit import SessionAudit

sessions_app = typer.Typer(help="Agents' sessions: the session audit.")
app.add_typer(sessions_app, name="sessions")


@sessions_app.command("audit")
def sessions_audit(
    sources: Annotated[
        list[str],
        typer.Argument(
            help="Session files or folders (a trial's evidence, ~/.codex/sessions, "
            "~/.claude/projects, ~/.pi/agent/sessions), or a sweep (file or id) whose "
            "trials' evidence to read.",
            metavar="PATH|SWEEP...",
        ),
    ],
    forbid: Annotated[
        list[str] | None,
        typer.Option(
            help="A forbidden action: a regular expression, searched, optionally for one "
            "kind: shell:REGEX, read:REGEX, write:REGEX, tool:REGEX (repeat).",
        ),
    ] = None,
    forbid_file: Annotated[
        Path | None, typer.Option(help="A file of forbidden patterns, one a line.")
    ] = None,
    store: Annotated[str | None, typer.Option(help="Results store of a sweep given by id.")] = None,
    endpoint: EndpointOption = None,
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
    as_json: JsonFlag = False,
) -> None:
    """Per session: the skills read (paths and digests), failed tool calls and commands,
    forbidden actions, token use, and turns that ended without completing. Exit 1 when
    a session took a forbidden action."""
    from hangar.sessions.audit import audit, forbidden_file, parse_forbidden

    specs = list(forbid or []) + (forbidden_file(forbid_file) if forbid_file else [])
    forbidden = parse_forbidden(specs)
    with tempfile.TemporaryDirectory(prefix="hangar-audit-") as tmp:
        sessions = [
            s for source in sources for s in _sessions_of(source, store, Path(tmp), endpoint)
        ]
        audits = [audit(s, forbidden) for s in sessions]
    if output_format(fmt, as_json) == "json":
        console.print_json(json.dumps({"sessions": [a.model_dump() for a in audits]}))
    else:
        _print(audits)
    raise typer.Exit(1 if any(a.forbidden for a in audits) else 0)


def _sessions_of(
    source: str, store: str | None, tmp: Path, endpoint: str | None = None
) -> list[Session]:
    """The sessions a PATH or a SWEEP names."""
    from hangar.sessions import sessions_under, trial_sessions

    path = Path(source).expanduser()
    if path.is_dir() or (path.is_file() and path.suffix == ".jsonl"):
        return list(sessions_under(path))
    if not path.is_file() and ("/" in source or path.suffix):
        raise ConfigError(f"file not found: {source} (give session files, folders or a sweep)")
    from hangar.viewer.data import Evidence

    sweep_id, _, results = resolve_sweep(source, store)
    evidence = Evidence(endpoint, results=results)
    found: list[Session] = []
    try:
        for r in results.results(sweep_id):
            bundle = evidence.archive_of(r) if r.evidence_uri else None
            if bundle is not None:
                where = f"{sweep_id}/{r.trial_key[:12]} ({r.scenario_id}, {r.agent})"
                for s in trial_sessions(bundle.folder):
                    s.path = f"{where}: {Path(s.path).name}"
                    found.append(s)
    finally:
        evidence.close()
    return found


def _print(audits: list[SessionAudit]) -> None:
    """The audits for people (everything from a session escaped: it is hostile)."""
    table = Table()
    table.add_column("session", overflow="fold", ratio=3)
    for name in ("source", "skills read", "failed", "forbidden", "tokens in/out", "turns"):
        table.add_column(name)
    for a in audits:
        incomplete = f" ({a.incomplete_turns} incomplete)" if a.incomplete_turns else ""
        table.add_row(
            escape(a.path),
            a.source,
            escape(", ".join(s.skill for s in a.skills) or "-"),
            str(len(a.failed)),
            str(len(a.forbidden)),
            f"{a.tokens.get('input', 0)}/{a.tokens.get('output', 0)}",
            f"{a.turns}{incomplete}",
        )
    console.print(table)
    for a in audits:
        for s in a.skills:
            console.print(
                f"skill {escape(s.skill)} {escape(s.path)} {s.sha256[:16]}  [{escape(a.session)}]",
                highlight=False,
            )
        for f in a.failed:
            console.print(
                f"[red]failed[/] {escape(f.what)}: {escape(f.detail)}  [{escape(a.session)}]",
                highlight=False,
            )
        for v in a.forbidden:
            said = f"{escape(v.pattern)}: {escape(v.action)}  [{escape(a.session)}]"
            console.print(f"[bold red]forbidden[/] {said}", highlight=False)
    console.print(f"{len(audits)} session(s)", highlight=False)
