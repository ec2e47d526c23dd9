"""A command run in a sandbox under hangar's observer, and the record of what it did.

hangar's helper (`observe.c`, a command of the static helper in `hangar.sandbox.helper`)
runs a command as its traced child: every process the command makes is stopped, by a
seccomp filter, at each syscall that opens, runs, maps as code, renames or links a file,
or connects a socket. It writes a record of what those processes did with the files the
agent changed (`Record`); hangar's host decides what that means
(`hangar.kinds.execution.images.takeover`). As it happens, the observer also refuses the guarded
ports to processes that ran the agent's code, refuses to open FIFOs, sockets and devices
the agent made, and ends everything at its deadline, noting what was still in progress.

What the observer needs is written to its standard input (`Settings.encode`): the files
the agent changed, the test folder, hangar's start-up mark for Python (`STARTUP`, a
``sitecustomize`` that says where each Python's start-up ends and which import roots it
has), and where the record goes: ``observed-NONCE`` in a folder on hangar's disk, written
once every traced process has ended, under a name no traced process knew.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote_to_bytes

from hangar.sandbox.helper import helper_argv

#: hangar's ``sitecustomize`` (on the host), mounted read-only at `STARTUP_MOUNT`.
STARTUP = Path(__file__).with_name("startup")
STARTUP_MOUNT = "/run/hangar/py"
#: Where the observer writes its record in the sandbox (a folder on hangar's disk).
RECORD_MOUNT = "/run/hangar/observed"
#: The observer's own exit codes: its record is written (0), or the program to run has no
#: copy of the image's own (5: the agent changed every one on PATH).
COMPLETE, NO_PROGRAM = 0, 5
#: The record's bound (the observer's `OBS_RECORD_CAP`): past it, events are dropped.
RECORD_LIMIT = 64 << 20


def canonical(path: str | bytes) -> str:
    """A path as the observer and the engine spell it: each byte that is not part of
    valid UTF-8 is U+FFFD (as the engine's JSON writes a name of invalid UTF-8)."""
    raw = path if isinstance(path, bytes) else path.encode("utf-8", "surrogateescape")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    out: list[str] = []
    i = 0
    while i < len(raw):
        for width in (1, 2, 3, 4):
            try:
                out.append(raw[i : i + width].decode("utf-8"))
            except UnicodeDecodeError:
                continue
            i += width
            break
        else:
            out.append("\ufffd")
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class Settings:
    """What the observer is told on its standard input."""

    tests: str
    """The tests' folder (the first test file a process opens is a mark)."""
    changed: Iterable[str]
    """Every file the agent added or changed (absolute paths in the sandbox)."""
    path: str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    """The image's PATH: where the program is found, and where namesakes are looked for."""
    home: str = ""
    """The home folder of the command's user (reading configuration there counts)."""
    guards: tuple[int, ...] = ()
    """Loopback ports a process that ran the agent's code may not connect to."""
    marks: tuple[str, ...] = ()
    """Parts of paths whose first opening by a process is recorded."""
    nonce: str = field(default_factory=lambda: secrets.token_hex(16))
    """The record's name: known to hangar and the observer only."""

    def encode(self) -> bytes:
        lines = [
            f"nonce {self.nonce}",
            f"out {_q(RECORD_MOUNT)}",
            f"tests {_q(self.tests)}",
            f"markers {_q(STARTUP_MOUNT)}",
            f"path {_q(self.path)}",
            *([f"home {_q(self.home)}"] if self.home else []),
            *(f"guard {port}" for port in self.guards),
            *(f"mark {_q(mark)}" for mark in self.marks),
            *(f"changed {_q(path)}" for path in self.changed),
        ]
        return ("\n".join(lines) + "\n").encode()

    @property
    def record_name(self) -> str:
        return f"observed-{self.nonce}"


def _q(text: str) -> str:
    return quote(text, safe="/:._-+,=@")


def observe_argv(timeout: float, kill_after: float, program: str, *args: str) -> list[str]:
    """The argv of `program` run under the observer (a bare name is found on the image's
    PATH, never in a copy the agent made)."""
    return helper_argv(
        "observe", "-k", f"{kill_after:g}", f"{max(timeout, 0.001):g}", program, *args
    )


@dataclass(frozen=True)
class Event:
    """One line of the record: its letter, the process, its fields."""

    kind: str
    pid: int
    fields: tuple[str, ...]


@dataclass
class Record:
    """The observer's record, read (see `observe.c` for each event's fields)."""

    events: list[Event]
    summary: dict[str, str]
    root: int

    @property
    def complete(self) -> bool:
        """Whether every event was kept (none dropped past the record's bound)."""
        return bool(self.summary) and self.summary.get("dropped") == "0"

    def of(self, kinds: str) -> Iterator[Event]:
        return (e for e in self.events if e.kind in kinds)

    @property
    def status(self) -> str:
        """How the test script ended: its exit code, ``signal-N``, or ``unknown``."""
        for e in self.of("X"):
            return e.fields[0] if e.fields else "unknown"
        return "unknown"

    @property
    def deadline(self) -> bool:
        """Whether the command ran out of time."""
        return any(True for _ in self.of("D"))


class RecordError(ValueError):
    """A record that cannot be read (it is hangar's own: never the agent's to write)."""


def read_record(data: bytes) -> Record:
    """The record's events; a malformed line is an error (the observer writes every line,
    after every process it watched has ended)."""
    events: list[Event] = []
    summary: dict[str, str] = {}
    root = 0
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line:
            continue
        parts = line.split(b" ")
        try:
            kind, pid = parts[0].decode("ascii"), int(parts[1])
        except (IndexError, ValueError, UnicodeDecodeError) as exc:
            raise RecordError(f"line {number} of the observer's record: {line[:80]!r}") from exc
        if kind == "Z":
            root = pid
            summary = {k: v for k, _, v in (p.decode().partition("=") for p in parts[2:])}
            continue
        fields = tuple(canonical(unquote_to_bytes(p.decode("ascii"))) for p in parts[2:])
        events.append(Event(kind, pid, tuple("" if f == "-" else f for f in fields)))
    return Record(events=events, summary=summary, root=root)
