"""The session audit: per session, the skills it read (paths and digests), the tool calls
and commands that failed, the forbidden actions it took, its token use and the turns
that ended without completing.

A forbidden action is a pattern (a regular expression, searched) over what a session
did, optionally for one kind of action: ``shell:`` (a command line), ``read:`` and
``write:`` (a file path), ``tool:`` (a tool's name and arguments as JSON). A pattern
without a prefix is tried on all four. File paths come from the tools that name them
(Read, Write, Edit...) and from what a shell command's words say (``cat X``, ``> Y``):
the audit reads what the agent ran, not what the kernel did.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel, Field

from hangar.errors import ConfigError
from hangar.sessions import Session, SessionEvent

KINDS = ("shell", "read", "write", "tool")


class Forbidden(BaseModel):
    """A pattern of what no session may do."""

    kind: str = ""
    """``shell``, ``read``, ``write``, ``tool``, or '' (any)."""
    pattern: str
    """The regular expression, searched."""

    @property
    def text(self) -> str:
        """As it was given (``shell:curl``)."""
        return f"{self.kind}:{self.pattern}" if self.kind else self.pattern


def parse_forbidden(specs: list[str]) -> list[Forbidden]:
    """Patterns as given on the command line or in a file (``kind:regex`` or ``regex``)."""
    found = []
    for spec in specs:
        kind, sep, rest = spec.partition(":")
        forbidden = (
            Forbidden(kind=kind, pattern=rest) if sep and kind in KINDS else Forbidden(pattern=spec)
        )
        try:
            re.compile(forbidden.pattern)
        except re.error as exc:
            raise ConfigError(
                f"forbidden pattern {spec!r} is not a regular expression: {exc}"
            ) from None
        found.append(forbidden)
    return found


def forbidden_file(path: Path) -> list[str]:
    """The patterns of a file: one a line, blank lines and ``#`` comments skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the forbidden patterns: {exc}") from None
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


class SkillRead(BaseModel):
    skill: str
    path: str = ""
    sha256: str = ""


class Failure(BaseModel):
    what: str
    """The tool or command."""
    detail: str = ""
    """Its exit code or the start of its output."""


class Violation(BaseModel):
    pattern: str
    """The forbidden pattern."""
    action: str
    """What matched (``shell: curl http://...``)."""


class SessionAudit(BaseModel):
    """One session's audit (a JSON contract: see the module docstring)."""

    path: str
    source: str
    session: str
    events: int
    skills: list[SkillRead] = Field(default_factory=list)
    failed: list[Failure] = Field(default_factory=list)
    forbidden: list[Violation] = Field(default_factory=list)
    tokens: dict[str, int] = Field(default_factory=dict)
    model_calls: int = 0
    turns: int = 0
    incomplete_turns: int = 0
    errors: list[str] = Field(default_factory=list)


def _actions(event: SessionEvent) -> list[tuple[str, str]]:
    """(kind, text) of what an event did, for the forbidden patterns."""
    if event.type == "shell" and event.command:
        return [("shell", event.command)]
    if event.type == "file_read" and event.path:
        return [("read", event.path)]
    if event.type == "file_write" and event.path:
        return [("write", event.path)]
    if event.type == "tool_call":
        return [
            ("tool", f"{event.tool} {json.dumps(event.arguments, sort_keys=True, default=str)}")
        ]
    return []


def audit(session: Session, forbidden: list[Forbidden]) -> SessionAudit:
    """The audit of one session."""
    found = SessionAudit(
        path=session.path, source=session.source, session=session.id, events=len(session.events)
    )
    tokens = {"input": 0, "output": 0, "cached_input": 0, "reasoning": 0}
    seen_skills: set[tuple[str, str, str]] = set()
    failed_calls = {e.call_id for e in session.events if e.type == "tool_result" and e.ok is False}
    for e in session.events:
        if e.type == "skill" and (e.skill, e.path, e.sha256) not in seen_skills:
            seen_skills.add((e.skill, e.path, e.sha256))
            found.skills.append(SkillRead(skill=e.skill, path=e.path, sha256=e.sha256))
        elif e.type == "tool_result" and e.ok is False:
            found.failed.append(Failure(what=e.tool or "tool", detail=e.text[:160]))
        elif e.type == "shell" and e.ok is False and e.call_id not in failed_calls:
            how = "failed" if e.exit_code is None else f"exit {e.exit_code}"
            found.failed.append(Failure(what=e.command[:200], detail=how))
        elif e.type == "model_call":
            found.model_calls += 1
            for k in tokens:
                tokens[k] += e.usage.get(k, 0)
        elif e.type == "turn_end":
            found.turns += 1
            found.incomplete_turns += e.partial
        elif e.type == "error" and e.text:
            found.errors.append(e.text[:200])
        for kind, text in _actions(e):
            for f in forbidden:
                if (not f.kind or f.kind == kind) and re.search(f.pattern, text):
                    found.forbidden.append(
                        Violation(pattern=f.text, action=f"{kind}: {text[:200]}")
                    )
    found.tokens = tokens
    return found
