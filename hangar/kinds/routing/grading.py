"""The route an agent took, from its session, graded exactly against a case's golden set.

A catalog skill is *loaded* when a session event says the agent loaded it: its Skill tool
succeeded (Claude Code), or it read that skill's ``SKILL.md`` where the trial installed it
(Codex, the chat agent, a shell ``cat``). A ``SKILL.md`` read anywhere else (one the agent
wrote itself, say) loads nothing of the catalog: it is listed as *outside*, and never counts
for the agent. The grade is exact: every expected skill loaded (else *missing*), no other
catalog skill loaded (else *extra*), forbidden ones named apart.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, Field

from hangar import sessions
from hangar.sessions import SessionEvent


class SkillLoad(BaseModel):
    """One load of a skill, as the session shows it."""

    skill: str
    """The skill's name."""
    path: str = ""
    """The ``SKILL.md`` read ('' when a tool loaded it by name)."""
    sha256: str = ""
    """sha256 of what the read returned ('' when the session does not carry it)."""
    delivered: bool | None = None
    """Whether what was read holds the installed ``SKILL.md`` (its sha256, or its text in
    what the session kept of the read); None: the session does not say what was read."""
    source: str = ""
    """The session format that showed it."""


class Route(BaseModel):
    """The route and its grade."""

    loaded: list[str] = Field(default_factory=list)
    """Catalog skills loaded, in the order first loaded."""
    loads: list[SkillLoad] = Field(default_factory=list)
    """Every load of a catalog skill."""
    outside: list[SkillLoad] = Field(default_factory=list)
    """Skills loaded from outside the installed catalog (they count for nothing)."""
    expected: list[str] = Field(default_factory=list)
    forbidden: list[str] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    """Expected skills not loaded."""
    extra: list[str] = Field(default_factory=list)
    """Catalog skills loaded that were not expected (forbidden ones included)."""
    forbidden_loaded: list[str] = Field(default_factory=list)
    """Forbidden skills loaded."""

    @property
    def exact(self) -> bool:
        """Whether the route is the golden set exactly."""
        return not self.missing and not self.extra

    def sentence(self) -> str:
        """The grade in words."""
        if self.exact:
            said = ", ".join(self.loaded) or "no skill"
            return f"routed exactly: {said}"
        parts = []
        if self.missing:
            parts.append(f"missing {', '.join(self.missing)}")
        plain = [s for s in self.extra if s not in self.forbidden_loaded]
        if plain:
            parts.append(f"extra {', '.join(plain)}")
        if self.forbidden_loaded:
            parts.append(f"forbidden {', '.join(self.forbidden_loaded)}")
        return "wrong route: " + "; ".join(parts)


def _where(path: str, home: str, workdir: str) -> str:
    """A path as the sandbox resolves it (``~`` is HOME, relative is under `workdir`)."""
    if path == "~" or path.startswith("~/"):
        path = home + path[1:]
    elif not path.startswith("/"):
        path = f"{workdir}/{path}"
    return posixpath.normpath(path)


def _holds(event: SessionEvent, text: str) -> bool:
    """Whether a read returned `text` (its digest, or `text` within what was kept)."""
    sha = hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()
    return event.sha256 == sha or (bool(text.strip()) and text.strip() in event.text)


def route_of(
    events: Iterable[SessionEvent],
    *,
    installed: dict[str, str],
    folder: str | None,
    home: str,
    workdir: str,
) -> tuple[list[SkillLoad], list[SkillLoad]]:
    """(loads of catalog skills, loads from outside it) among `events`; `installed` maps
    each catalog skill to its ``SKILL.md``'s text ('' when unknown), `folder` is where they
    were installed (absolute, in the sandbox; None: unknown, a catalog skill counts by its
    name)."""
    root = posixpath.normpath(folder) if folder is not None else None
    loads: list[SkillLoad] = []
    outside: list[SkillLoad] = []
    for e in events:
        if e.type != "skill" or not e.skill:
            continue
        load = SkillLoad(skill=e.skill, path=e.path, sha256=e.sha256, source=e.source)
        if root is None:
            ours = e.skill in installed
        elif e.path:
            where = _where(e.path, home, workdir)
            ours = e.skill in installed and where == f"{root}/{e.skill}/SKILL.md"
            if ours and installed[e.skill] and (e.sha256 or e.text):
                load.delivered = _holds(e, installed[e.skill])
        else:  # loaded by name, by the CLI's own skill tool, from what it has installed
            ours = e.skill in installed
        (loads if ours else outside).append(load)
    return loads, outside


def grade(
    events: Iterable[SessionEvent],
    *,
    expected: Iterable[str],
    forbidden: Iterable[str],
    installed: dict[str, str],
    folder: str | None,
    home: str,
    workdir: str,
) -> Route:
    """The route the events show, graded against the golden set (see the module doc)."""
    loads, outside = route_of(
        events, installed=installed, folder=folder, home=home, workdir=workdir
    )
    loaded = list(dict.fromkeys(load.skill for load in loads))
    want, never = list(expected), list(forbidden)
    return Route(
        loaded=loaded,
        loads=loads,
        outside=outside,
        expected=want,
        forbidden=never,
        missing=[s for s in want if s not in loaded],
        extra=[s for s in loaded if s not in want],
        forbidden_loaded=[s for s in loaded if s in never],
    )


def digest() -> str:
    """sha256 of the code that grades a route: this module and the session formats that
    read what the agent loaded (part of every routing case's version)."""
    h = hashlib.sha256()
    here = Path(sessions.__file__).parent
    for path in [Path(__file__), *sorted(here.glob("*.py"))]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()
