"""Whether a shared verifier's own machinery used what the agent changed: decided by what
its processes did, not by a list of paths.

A shared verifier (Harbor's default) judges the system the agent left. Two things meet
in it:

- **the judge's machinery**, which must be the image's: the shell that runs ``test.sh``
  (hangar starts the image's own, `observe.c`), every program it runs that the image
  provides, the dynamic loader and the libraries of each, each Python's start-up (its
  standard library, ``site``, the ``.pth`` files, ``pyvenv.cfg``, ``sitecustomize``), and
  the test runner with its plugins and configuration, up to its first test file;
- **the subject under test**, which is the agent's: the workspace, the packages and tools
  it added that the tests import or run (and everything those run), and the
  configuration the tests or the programs they run read.

The observer (`hangar.sandbox.observe`) records what every process of the verifier
executed, mapped as code or read among the files the agent changed (the container's diff
and the workspace's, `AgentChanges`); `judge` walks that record and names each use of an
agent's file by the machinery (`Finding`). A pass beside any finding is not counted. The
rules, by what a process is:

- **The test script's shell** (and its subshells): every agent's file it reads (a file it
  sources; a redirection read for a program it then runs is that program's).
- **A program the machinery runs**: the agent's file run in place of the image's (a
  changed program, one reached through a link the agent made, or an added one that takes
  the name of a program on the image's PATH: a folder put first on PATH); an added program
  no image program is named like, or one in the workspace, is the subject's: it and all
  it runs, unless it runs the task's test files or the test runner (an interpreter the
  agent put where the script looks for one). The dynamic loader, and every agent's
  library mapped as code, in any process of the machinery.
- **A Python of the machinery**: every agent's file read before its start-up ends
  (hangar's ``sitecustomize`` says when, `hangar.sandbox.observe.STARTUP`); where it runs
  the test runner (it loads pytest's own package), every agent's file read from then to
  its first test file (configuration above ``/tests``, plugins, what they import); at any
  time, an agent's module that hides the image's module of the same name, and a file of
  the image's that the agent changed loaded as code (the standard library, the runner's
  packages). An added package the tests import is the subject's.

What is judged by its effect instead: the loader's cache (``/etc/ld.so.cache``) by the
libraries it leads to, a ``.pth`` of paths only by the modules loaded from them, and a
distribution's ``entry_points.txt`` without a ``[pytest11]`` section by nothing (no runner
loads it); a ``.pth`` with a line that imports is code. A special file the agent made
(FIFO, socket, device, or a link to one) is never opened: the observer refuses it, and a
refusal to the machinery is a finding.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import PurePosixPath

from hangar.sandbox.base import Change
from hangar.sandbox.observe import STARTUP_MOUNT, Event, Record

#: What marks a Python that runs the test runner: it opened pytest's own package.
RUNNER_MARK = "/_pytest/"
#: The loader's configuration: a library an agent added is the subject's only without it.
LOADER_CONFIG = ("/etc/ld.so.cache", "/etc/ld.so.preload", "/etc/ld.so.conf", "/etc/ld.so.conf.d/*")
#: Shells: one that runs a script of the task's tests is the test script's shell.
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"})
#: Files judged by their effect (see the module docstring).
LOADER_CACHE = "/etc/ld.so.cache"
_PYTHON = re.compile(r"python[0-9.]*")
_CODE = re.compile(r".*\.(py|pyc|pyo|pth|so|zip|egg|whl)$|.*\.so\.[0-9.]+$")
_EXTENSION = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_-]+)*\.so$")
_IMPORTS = re.compile(rb"^import[ \t]", re.MULTILINE)
_PYTEST11 = re.compile(rb"^\s*\[\s*pytest11\s*\]", re.MULTILINE)


@dataclass(frozen=True)
class Finding:
    """One of the agent's files that the judge's machinery used, and how."""

    path: str
    how: str

    def __str__(self) -> str:
        return f"{self.path} ({self.how})"


@dataclass(frozen=True)
class AgentChanges:
    """Every file the agent added (``A``) or changed (``C``) before the tests: the
    container's diff and the workspace's."""

    kinds: dict[str, str]
    workspace: str

    @classmethod
    def of(
        cls,
        container: Iterable[Change],
        workspace: str,
        workspace_changes: dict[str, str],
        declared: tuple[str, ...] = (),
    ) -> AgentChanges:
        """The agent's changes, less the paths the task declares as its to change."""
        kinds: dict[str, str] = {}
        for change in container:  # the first kind stays (added at one step, changed later)
            if change.kind != "D":
                kinds.setdefault(change.path, change.kind)
        kinds.update(workspace_changes)
        if declared:
            kinds = {
                p: k
                for p, k in kinds.items()
                if not any(fnmatch.fnmatchcase(p, d) for d in declared)
            }
        return cls(kinds=kinds, workspace=workspace)


class Role(Enum):
    SHELL = "the test script's shell"
    PROGRAM = "a program of the image"
    PYTHON = "a Python of the image"
    SUBJECT = "the agent's program"
    TAKEN = "a program the agent replaced"


@dataclass
class Process:
    """What one process of the verifier is, and where its Python is in its run."""

    role: Role
    name: str = "bash"
    started: bool = False  # a Python's start-up is over
    runner: bool = False  # it loaded the test runner
    tests_seen: bool = False  # it opened its first test file
    fresh: bool = False  # the test script's process before its shell ran
    program: str = ""  # the agent's file it runs, when it runs one
    roots: list[str] = field(default_factory=list)
    pending: list[Finding] = field(default_factory=list)  # a shell's reads, if it runs nothing
    tentative: list[Finding] = field(default_factory=list)  # read before the runner showed

    def forked(self) -> Process:
        """A new process's: its program's state, none of its own reads yet."""
        return replace(self, fresh=False, roots=list(self.roots), pending=[], tentative=[])


@dataclass
class Judgement:
    """What the record shows: the findings, and what else is worth knowing."""

    findings: list[Finding]
    refused_network: list[str]
    in_progress: list[str]
    tainted: list[str]
    complete: bool
    refused: list[str] = field(default_factory=list)
    """Special files the agent made that a process tried to open (refused)."""
    written: list[str] = field(default_factory=list)
    """Files the agent's code wrote while the tests ran."""

    def interfered(self, logs: str) -> list[str]:
        """What the agent's code did to the verifier's reward in its output folder `logs`:
        a special file it made there, refused, or a reward file it wrote (a test runner
        that imported the agent's code writing its own report there is not this)."""
        rewards = {f"{logs}/reward.txt", f"{logs}/reward.json"}
        return [f"{p} (a special file the agent made)" for p in self.refused if _under(p, logs)] + [
            f"{p} (written by the agent's code)" for p in self.written if p in rewards
        ]


class _Judge:
    def __init__(self, changes: AgentChanges, tests: str, record: Record) -> None:
        self.kinds = dict(changes.kinds)
        self.folders = [p for p in self.kinds if p.endswith("/")]
        self.workspace = changes.workspace
        self.tests = tests
        self.record = record
        self.procs: dict[int, Process] = {}
        self.found: dict[str, Finding] = {}
        self.loader_changed = any(
            fnmatch.fnmatchcase(p, pattern) for p in self.kinds for pattern in LOADER_CONFIG
        )
        self.texts: dict[str, list[bytes]] = {}
        for e in record.of("C"):
            self.texts.setdefault(e.fields[0], []).append(bytes.fromhex(e.fields[1] or ""))
        self.notes: dict[str, list[str]] = {"N": [], "B": [], "T": [], "R": [], "W": []}

    # -- what a path is ------------------------------------------------------------------

    def agents(self, path: str) -> bool:
        """Whether `path` is the agent's (a ``DIR/`` entry: everything under DIR)."""
        if not path:
            return False
        if path in self.kinds:
            return True
        return any(path.startswith(folder) for folder in self.folders)

    def added(self, path: str) -> bool:
        return self.kinds.get(path) in ("A", "W") or (
            path not in self.kinds and self.agents(path)  # under an added folder
        )

    def in_workspace(self, path: str) -> bool:
        return _under(path, self.workspace)

    def effect_only(self, path: str, phase: str) -> bool:
        """A file judged by its effect, not by its reading (see the module docstring)."""
        if path == LOADER_CACHE:
            return True
        if self.kinds.get(path) == "W":
            return False  # rewritten while the tests ran: what was read is not known
        texts = self.texts.get(path)
        if not texts:
            return False
        if path.endswith(".pth"):
            return not any(_IMPORTS.search(t) or len(t) > 16384 for t in texts)
        if PurePosixPath(path).name == "entry_points.txt":
            return phase != "startup" and not any(_PYTEST11.search(t) for t in texts)
        return False

    def find(self, path: str, how: str, *, overrides: bool = False) -> None:
        if overrides or path not in self.found:
            self.found[path] = Finding(path, how)

    # -- the events ----------------------------------------------------------------------

    def run(self) -> Judgement:
        handlers = {
            "S": self.on_start,
            "F": self.on_fork,
            "E": self.on_exec,
            "P": self.on_root,
            "O": self.on_open,
            "L": self.on_library,
            "R": self.on_refused,
            "W": self.on_written,
            "J": self.on_rewritten,
        }
        for e in self.record.events:
            handler = handlers.get(e.kind)
            if handler is not None:
                handler(e)
            elif e.kind == "B":
                self.notes["B"].append(e.fields[1] or f"syscall {e.fields[0]}")
            elif e.kind in self.notes:
                self.notes[e.kind].append(" ".join(f for f in e.fields if f))
        for proc in self.procs.values():
            for finding in proc.pending:
                self.find(finding.path, finding.how)
        return Judgement(
            findings=list(self.found.values()),
            refused_network=self.notes["N"],
            in_progress=self.notes["B"],
            tainted=self.notes["T"],
            complete=self.record.complete,
            refused=self.notes["R"],
            written=self.notes["W"],
        )

    def proc(self, pid: int) -> Process:
        return self.procs.setdefault(pid, Process(role=Role.PROGRAM, name="?"))

    def on_start(self, e: Event) -> None:
        self.procs[e.pid] = Process(role=Role.SHELL, fresh=True)

    def on_fork(self, e: Event) -> None:
        creator = self.procs.get(int(e.fields[0] or 0))
        self.procs[e.pid] = creator.forked() if creator else Process(role=Role.PROGRAM, name="?")

    def on_exec(self, e: Event) -> None:
        requested, resolved, exe, loader, via, alts = (*e.fields, *[""] * 6)[:6]
        proc = self.proc(e.pid)
        proc.pending.clear()  # what a shell read just before is the new program's input
        name = PurePosixPath(requested or exe).name
        who, was, fresh = proc.name, proc.role, proc.fresh
        proc.name, proc.fresh = name, False
        proc.started = proc.runner = proc.tests_seen = False
        proc.roots, proc.tentative = [], []
        if was in (Role.SUBJECT, Role.TAKEN):
            return  # and what the agent's program runs is still its program's
        proc.program = ""
        if self.agents(loader):
            self.find(loader, f"the dynamic loader of {name}, run by {who}")
        hides = self.pristine(alts, requested)
        content = next((p for p in (exe, resolved) if self.agents(p)), "")
        named = via or self.agents(requested)  # the name that ran is the agent's
        if content and not self.added(content) and not self.in_workspace(content):
            self.find(
                content, f"the image's program, changed by the agent, run as `{name}` by {who}"
            )
            proc.role = Role.TAKEN
        elif (content or named) and hides:
            self.find(
                content or requested, f"run as `{name}` by {who} in place of the image's {hides[0]}"
            )
            proc.role = Role.TAKEN
        elif content:
            proc.role = Role.SUBJECT  # a program the agent made, named like none of the image's
            proc.program = content
        elif exe.startswith("/memfd:") or exe.endswith(" (deleted)"):
            self.find(exe, f"code with no file of the image's, run as `{name}` by {who}")
            proc.role = Role.TAKEN
        elif was is Role.SHELL and fresh:
            proc.role = Role.SHELL  # the image's shell, started by hangar for the script
        else:
            proc.role = (
                Role.PYTHON
                if _PYTHON.fullmatch(name) or _PYTHON.fullmatch(PurePosixPath(exe).name)
                else Role.PROGRAM
            )

    def pristine(self, alts: str, requested: str) -> list[str]:
        """The image's own files among `alts` (a program's or a module's namesakes)."""
        return [a for a in alts.split(":") if a and a != requested and not self.agents(a)]

    def on_root(self, e: Event) -> None:
        self.proc(e.pid).roots.append(e.fields[0])

    def on_open(self, e: Event) -> None:
        how, path, alts = (*e.fields, "", "", "")[:3]
        proc = self.proc(e.pid)
        if how == "m":
            self.on_mark(proc, path)
        elif proc.role is Role.SHELL:
            if path != LOADER_CACHE:
                proc.pending.append(Finding(path, "read by the test script's shell"))
        elif proc.role is Role.PYTHON:
            self.on_python_read(proc, path, alts)

    def on_mark(self, proc: Process, path: str) -> None:
        runs_tests = RUNNER_MARK in path or (_under(path, self.tests) and path.endswith(".py"))
        if proc.role is Role.SUBJECT and runs_tests and proc.program:
            # named like nothing of the image's, but running the task's tests: the judge's
            self.find(proc.program, f"the agent's program, which ran the task's tests ({path})")
        if path == f"{STARTUP_MOUNT}/started":
            proc.started = True
        elif RUNNER_MARK in path and proc.started and not proc.tests_seen:
            proc.runner = True
            for finding in proc.tentative:  # read between start-up and the runner's start
                self.find(finding.path, finding.how)
            proc.tentative.clear()
        elif _under(path, self.tests) and proc.role is Role.PYTHON and path.endswith(".py"):
            proc.tests_seen = True
            proc.tentative.clear()
        elif _under(path, self.tests) and proc.role is Role.PROGRAM and proc.name in SHELLS:
            proc.role = Role.SHELL  # a shell running another of the task's scripts

    def on_python_read(self, proc: Process, path: str, alts: str) -> None:
        if not proc.started:
            if not self.effect_only(path, "startup"):
                self.find(path, f"read by {proc.name} in its start-up")
            return
        hides = self.pristine(alts, path)
        if hides:
            self.find(path, f"imported by {proc.name} in place of the image's {hides[0]}")
        elif self.kinds.get(path) == "C" and _CODE.match(path) and not self.in_workspace(path):
            self.find(path, f"the image's file, changed by the agent, loaded by {proc.name}")
        if proc.tests_seen or self.effect_only(path, "runner"):
            return
        finding = Finding(path, f"read by the test runner ({proc.name}) before its first test")
        if proc.runner:
            self.find(finding.path, finding.how)
        else:
            proc.tentative.append(finding)

    def on_library(self, e: Event) -> None:
        path = e.fields[0]
        proc = self.proc(e.pid)
        if proc.role in (Role.SUBJECT, Role.TAKEN):
            return
        if (
            proc.role is Role.PYTHON
            and proc.started
            and not self.loader_changed
            and self.added(path)
            and _EXTENSION.fullmatch(PurePosixPath(path).name)
            and any(_under(path, r) for r in proc.roots if r != STARTUP_MOUNT)
        ):
            return  # an extension module of a package the agent added
        self.find(path, f"a library loaded by {proc.name}", overrides=True)

    def on_refused(self, e: Event) -> None:
        self.notes["R"].append(e.fields[0])
        proc = self.proc(e.pid)
        if proc.role not in (Role.SUBJECT, Role.TAKEN):
            self.find(
                e.fields[0], f"a special file the agent made, opened by {proc.name} (refused)"
            )

    def on_written(self, e: Event) -> None:
        self.notes["W"].append(e.fields[0])
        self.kinds.setdefault(e.fields[0], "W")

    def on_rewritten(self, e: Event) -> None:
        self.kinds.pop(e.fields[0], None)


def judge(changes: AgentChanges, tests: str, record: Record) -> Judgement:
    """What the record shows the judge's machinery used of the agent's changes."""
    return _Judge(changes, tests, record).run()


def _under(path: str, folder: str) -> bool:
    return bool(folder) and (path == folder or path.startswith(folder.rstrip("/") + "/"))


def neutralised(changes: list[Change]) -> list[str]:
    """What the agent added or changed that is removed before the verifier runs: bytecode
    caches (Python compiles the sources again, and a cache the agent wrote for a module
    of the image would run in place of its source)."""
    dirs = {str(p) for c in changes for p in PurePosixPath(c.path).parents}
    return [
        c.path for c in changes if c.kind != "D" and c.path not in dirs and c.path.endswith(".pyc")
    ]
