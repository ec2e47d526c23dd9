"""Historical routing records: the routes people's own agent sessions took, kept apart.

`observe` reads session files (``~/.codex/sessions``, ``~/.claude/projects``, Pi's, a
trial's evidence: whatever the session audit reads) and makes one record per session that
asked one of a suite's prompts or loaded one of its catalog skills: the skills it loaded
and, for a session that asked a case's prompt, that case's grade. A session asked a case's
prompt when one of its user messages holds the prompt (whitespace aside).

These records are evidence of what happened, not a measurement: the session's agent, model,
skill versions and settings are whatever they were, nothing was pinned. They are stored in
their own table (`hangar.store.historical_routes`) and reported on their own
(``hangar routing history``); no live score, report or dashboard ever counts them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from hangar.kinds.routing.grading import Route, grade
from hangar.kinds.routing.suite import LoadedRoutingCase
from hangar.sessions import Session, SessionEvent, sessions_under


class Observed(BaseModel):
    """One session's route, as a `historical_routes` row holds it."""

    suite: str
    session_sha256: str
    case_id: str
    """The case whose prompt it asked ('' when none)."""
    source: str
    session_id: str
    path: str
    observed_at: str
    loaded: list[str]
    route: dict[str, Any] | None
    """The case's grade (None without a case)."""
    exact: bool | None


def _flat(text: str) -> str:
    return " ".join(text.split())


def _case_of(
    events: list[SessionEvent], cases: list[LoadedRoutingCase]
) -> LoadedRoutingCase | None:
    asked = [_flat(e.text) for e in events if e.type == "user" and e.text]
    for case in cases:
        prompt = _flat(case.case.prompt)
        if any(prompt in text for text in asked):
            return case
    return None


def observe(session: Session, cases: list[LoadedRoutingCase], file_sha256: str) -> Observed | None:
    """The record of one session (None when it neither asked a case's prompt nor loaded a
    catalog skill)."""
    names = cases[0].skill_names
    case = _case_of(session.events, cases)
    # Where the person had installed a skill is unknown: a catalog skill counts by name.
    by_name = grade(
        session.events,
        expected=case.case.expected if case else (),
        forbidden=case.case.forbidden if case else (),
        installed={n: "" for n in names},
        folder=None,
        home="~",
        workdir=".",
    )
    if case is None and not by_name.loaded:
        return None
    route: Route | None = by_name if case is not None else None
    return Observed(
        suite=cases[0].suite,
        session_sha256=file_sha256,
        case_id=case.id if case else "",
        source=session.source,
        session_id=session.id,
        path=session.path,
        observed_at=next((e.ts for e in session.events if e.ts), ""),
        loaded=by_name.loaded,
        route=route.model_dump(mode="json", exclude={"loads", "outside"}) if route else None,
        exact=route.exact if route else None,
    )


def observe_all(roots: list[Path], cases: list[LoadedRoutingCase]) -> tuple[list[Observed], int]:
    """The records of every session under `roots`, and how many sessions were read."""
    found: list[Observed] = []
    read = 0
    for root in roots:
        for session in sessions_under(root):
            read += 1
            sha = hashlib.sha256(Path(session.path).read_bytes()).hexdigest()
            record = observe(session, cases, sha)
            if record is not None:
                found.append(record)
    return found, read
