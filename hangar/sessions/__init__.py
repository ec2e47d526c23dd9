"""Agent sessions as evidence: one normalized event stream for every agent.

Each agent writes its session its own way: hangar's trace (`trace.jsonl`: command and
chat agents, the relay's model calls), Codex rollout files (``~/.codex/sessions``),
Claude Code project files (``~/.claude/projects``), Pi's session files
(``~/.pi/agent/sessions``), Gemini CLI's chat files (``~/.gemini/tmp/*/chats``), Qwen
Code's (``~/.qwen/projects/*/chats``), mini-swe-agent's trajectory (``*.traj.json``). A
*format* (one small module each: `codex`, `claude`, `pi`, `gemini`, `qwen`, `mini`,
`trace`) recognizes its files by their first record and turns each record into
`SessionEvent` s: turns, messages, model calls and their usage, tool calls with their
arguments and results (success or failure), shell commands with exit codes, files read
(with the sha256 of what was read) and written, skills loaded, errors and turns that
ended without completing. A record no format knows is kept as a ``raw`` event, never
dropped.

`read_session` reads one file; `sessions_under` finds every session file under a folder
(a trial's evidence, a person's history folder); `write_session` writes the stream as
``session.jsonl``, the file a trial's evidence holds and its host verifier is handed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

#: The most of one text (a message, a tool's output) an event keeps; its sha256 is of all.
TEXT_CAP = 4096

EventType = Literal[
    "session",
    "turn_start",
    "turn_end",
    "user",
    "assistant",
    "model_call",
    "tool_call",
    "tool_result",
    "shell",
    "file_read",
    "file_write",
    "skill",
    "error",
    "raw",
]


class SessionEvent(BaseModel):
    """One normalized event of an agent's session."""

    source: str
    """The format it came from: ``trace``, ``codex``, ``claude``, ``pi``, ``gemini``,
    ``qwen``, ``mini``."""
    session: str = ""
    """The session's id (the file's, else its name)."""
    seq: int = 0
    """Its place in the stream."""
    ts: str = ""
    """When (ISO 8601, as the agent wrote it; '' when it did not)."""
    type: EventType
    """What happened."""
    turn: str = ""
    """The turn it belongs to, where the agent numbers them."""
    tool: str = ""
    """A tool call's or result's tool."""
    call_id: str = ""
    """Pairs a tool call with its result."""
    arguments: Any = None
    """A tool call's arguments, as the agent sent them."""
    ok: bool | None = None
    """A tool result's or shell command's success (None: not said)."""
    exit_code: int | None = None
    """A shell command's exit code."""
    command: str = ""
    """A shell command."""
    path: str = ""
    """A file read or written."""
    sha256: str = ""
    """sha256 of the text the event carries in full (what a read returned)."""
    skill: str = ""
    """A skill loaded (its name)."""
    text: str = ""
    """A message, an output or an error (its first `TEXT_CAP` characters)."""
    usage: dict[str, int] = Field(default_factory=dict)
    """A model call's tokens: input, output, cached_input, reasoning."""
    model: str = ""
    """The model of a model call or an assistant message."""
    partial: bool = False
    """A turn that ended without completing (``turn_end``)."""
    raw: Any = None
    """The original record of an event no format knows (kept, never dropped)."""


Records = list[dict[str, Any]]


class SessionFormat(BaseModel):
    """A way agents write sessions: how to tell its files and read their records."""

    name: str
    recognizes: Callable[[dict[str, Any]], bool]
    events: Callable[[Records, str], Iterator[SessionEvent]]

    model_config = {"arbitrary_types_allowed": True}


class Session(BaseModel):
    """One session file, read."""

    path: str
    """Where it was read."""
    source: str
    """Its format's name."""
    id: str
    """Its id."""
    events: list[SessionEvent]
    """Its events, in order."""
    bad_lines: int = 0
    """Lines that were not JSON objects (counted, skipped)."""


def formats() -> list[SessionFormat]:
    """Every format hangar reads (imported when first asked for)."""
    from hangar.sessions import claude, codex, gemini, mini, pi, qwen, trace

    # qwen before claude: both write `sessionId` and `uuid` on every record
    return [
        trace.FORMAT, codex.FORMAT, qwen.FORMAT, claude.FORMAT, pi.FORMAT, gemini.FORMAT,
        mini.FORMAT,
    ]  # fmt: skip


def read_records(path: Path) -> tuple[Records, int]:
    """The JSON objects of a JSON Lines file, and how many lines were not one (a ``.json``
    file, such as a trajectory written whole, is one record)."""
    if path.suffix == ".json":
        try:
            value = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except (OSError, json.JSONDecodeError):
            return [], 1
        return ([value], 0) if isinstance(value, dict) else ([], 1)
    with path.open(encoding="utf-8", errors="replace") as handle:
        return records_of(handle)


def records_of(lines: Iterable[str]) -> tuple[Records, int]:
    """The JSON objects of JSON Lines, and how many lines were not one."""
    records: Records = []
    bad = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(value, dict):
            records.append(value)
        else:
            bad += 1
    return records, bad


def read_session(path: Path) -> Session | None:
    """The session in `path`, or None when no format knows the file."""
    return session_of(*read_records(path), path)


def session_of(records: Records, bad: int, path: Path) -> Session | None:
    """The session these records of the file `path` hold, or None when no format knows
    them."""
    if not records:
        return None
    for fmt in formats():
        if any(fmt.recognizes(r) for r in records[:3]):  # a summary line may come first
            try:
                events = list(fmt.events(records, path.stem))
            except Exception as exc:  # a file the agent wrote is hostile: never a crash
                said = f"this {fmt.name} session could not be read: {type(exc).__name__}: {exc}"
                events = [SessionEvent(source=fmt.name, session=path.stem, type="error", text=said)]
            for seq, event in enumerate(events):
                event.seq = seq
            sid = events[0].session if events and events[0].session else path.stem
            return Session(path=str(path), source=fmt.name, id=sid, events=events, bad_lines=bad)
    return None


def sessions_under(root: Path) -> list[Session]:
    """Every session file under `root` (a file, or a folder searched for ``*.jsonl`` and
    trajectories, ``*.traj.json``)."""
    found_paths = [*root.rglob("*.jsonl"), *root.rglob("*.traj.json")] if root.is_dir() else []
    paths = [root] if root.is_file() else sorted(found_paths)
    found = []
    for path in paths:
        if path.is_symlink() or not path.is_file() or path.name == "session.jsonl":
            continue
        session = read_session(path)
        if session is not None:
            found.append(session)
    return found


#: Where a trial's evidence holds its normalized session.
SESSION_FILE = "session.jsonl"


def trial_sessions(artifacts: Path) -> list[Session]:
    """The sessions in a trial's evidence: hangar's trace (the harness's own record) and
    every session file collected from the agent's sandbox (the agent's own account: it
    could have written anything there)."""
    found = (
        [s for s in [read_session(artifacts / "trace.jsonl")] if s is not None]
        if (artifacts / "trace.jsonl").is_file()
        else []
    )
    agent = artifacts / "agent"
    return found + (sessions_under(agent) if agent.is_dir() else [])


def write_trial_session(artifacts: Path) -> Path:
    """``session.jsonl`` in a trial's evidence, from its sessions (once). Whatever the
    agent left in its session files, this never fails the trial: what cannot be read is
    an ``error`` event."""
    out = artifacts / SESSION_FILE
    if out.exists():
        return out
    try:
        sessions = trial_sessions(artifacts)
    except Exception as exc:  # an unreadable folder: said, never a crash
        error = SessionEvent(source="trace", type="error", text=f"sessions not read: {exc}")
        sessions = [Session(path=str(artifacts), source="trace", id="", events=[error])]
    return write_session(sessions, out)


def write_session(sessions: Iterable[Session], out: Path) -> Path:
    """The sessions' events, one JSON object a line, as ``session.jsonl``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as handle:
        handle.writelines(session_lines(sessions))
    return out


def session_lines(sessions: Iterable[Session]) -> Iterator[str]:
    """``session.jsonl``'s lines: each session's events, one JSON object a line."""
    for session in sessions:
        for event in session.events:
            yield event.model_dump_json(exclude_defaults=True) + "\n"


def trace_session(trace: bytes | None) -> bytes:
    """``session.jsonl`` of a trial whose only session is hangar's trace, held in memory
    (`write_trial_session`'s, for a trial with no sandbox and no folder)."""
    if trace is None:
        return b""
    lines = trace.decode("utf-8", errors="replace").splitlines()
    session = session_of(*records_of(lines), Path("trace.jsonl"))
    return "".join(session_lines([session] if session else [])).encode()


def read_events(path: Path) -> Iterator[SessionEvent]:
    """The events of a ``session.jsonl`` (unreadable lines skipped)."""
    records, _ = read_records(path)
    for record in records:
        try:
            yield SessionEvent.model_validate(record)
        except ValueError:
            continue
