"""The test harness as pinned: the files of a workspace that change how its tests are
collected, run or reported, held to what they were before the agent.

An agent that fixes nothing can still make a test run report success: a ``conftest.py``
that rewrites failed reports, a ``pytest.ini`` that deselects the judged tests, a
``pytest/`` package that shadows the runner, a ``.pth`` or ``sitecustomize.py`` that runs
at start-up. None of that is the agent's work, so none of it may reach the verifier
commands. `hangar.verifiers.ecosystems` lists those files, per test ecosystem, in one place:

- **named files** anywhere in the workspace (``conftest.py``, ``pytest.ini``, start-up
  hooks, ``*.pth``, jest/vitest/mocha configuration files);
- **sections** of shared files, compared as parsed data, so an edit elsewhere in the file
  is not a harness change (``pyproject.toml``'s ``[tool.pytest*]``, ``setup.cfg``'s
  ``[tool:pytest]``, ``tox.ini``'s ``[pytest]``, a package's ``pytest11`` entry points,
  ``package.json``'s ``jest``/``mocha`` keys and its test script);
- **shadowing names**: a module or package named like a test tool or a standard-library
  module, at a place it can be imported from as a top-level name (a folder that is not a
  regular package). One that was there before the agent is the code under test (the
  repository *is* pytest, say) and its edits are the agent's work, unless it is an
  installed copy (under ``site-packages``, ``dist-packages`` or ``node_modules``). A
  second copy of the repository's own package (``tests/statkit/``, which pytest's import
  path puts before ``statkit/``) would shadow the code under test: it is harness too;
- **caches** (``__pycache__``, ``.pytest_cache``): a byte-compiled file planted with the
  right source size and time would run instead of the restored source; removed quietly;
- the **judged test files** (those holding a checklist's named tests), the files the
  verifier commands name or run through (a script, ``Makefile`` for ``make``, ``tox.ini``
  for ``tox``), and the files a scenario declares
  (``verifier.harness.also``).

`HarnessBaseline.take` records them (their bytes kept outside the workspace) once the
workspace is ready for the agent; `HarnessBaseline.compare` lists every change after the
agent (or while the verifier commands ran) with what is done about it: restored to the
recorded bytes, removed when the agent added it, or kept when the scenario allows that
path (`HarnessAllowance`). Restoring in place, rather than applying the agent's diff minus
these paths to a fresh checkout, keeps everything else the agent left (ignored build
output, file modes, untracked files a host verifier inspects) exactly as it was, and
touches only the few paths listed here. The placement runs in the sandbox as its user
(`hangar.verifiers.commands`), so a link planted on the way cannot turn it into a write
on the host. Every change not allowed is a finding that fails scope
(`hangar.verifiers.admission`).
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from hangar.verifiers.ecosystems import (
    CACHES,
    HARNESS_RULES,
    IMPORTABLE,
    JAVASCRIPT,
    PYTHON,
    Ecosystem,
    SectionReader,
    is_installed,
    names_a_tool,
)
from hangar.verifiers.tampering import markers_in

#: Files no larger than this are kept to be restored (a harness file is small).
KEEP_LIMIT = 4 * 1024 * 1024
#: The most bytes a baseline keeps in all; past it a change is found but not restored.
KEEP_TOTAL = 64 * 1024 * 1024
#: Where a path's digest says it is not relevant (a shared file without the section).
NOT_RELEVANT = "-"

#: A path of the workspace to make a copy of a host file, or to remove (None).
Placement = tuple[str, Path | None]

Change = Literal["added", "changed", "removed"]
Action = Literal["restored", "removed", "kept", "not restored"]


class HarnessAllowance(BaseModel):
    """Which harness paths the agent may change (they are then kept as it left them)."""

    model_config = ConfigDict(frozen=True)

    patterns: tuple[str, ...] = ()
    """fnmatch patterns (``*`` crosses folders): ``verifier.harness.allow``."""
    named: tuple[str, ...] = ()
    """Scope patterns that name a file (no wildcard in their last part): a scope that says
    ``tests/conftest.py`` allows that harness file; ``tests/*`` does not."""

    @classmethod
    def of(cls, allow: tuple[str, ...], scope: tuple[str, ...] = ()) -> HarnessAllowance:
        """From a scenario's ``harness.allow`` and its builtin verifier's ``scope``."""
        named = tuple(p for p in scope if not any(c in PurePosixPath(p).name for c in "*?["))
        return cls(patterns=allow, named=named)

    def allows(self, path: str) -> bool:
        """Whether the agent may change `path`."""
        return any(fnmatchcase(path, p) for p in (*self.patterns, *self.named))


# -- one harness path -------------------------------------------------------------------------


class HarnessEntry(BaseModel):
    """One harness path as recorded."""

    digest: str
    """sha256 of what matters (the bytes, the section as JSON, or a link's target)."""
    what: str
    """Why it is harness, in words."""
    kept: str | None = None
    """Name of its kept bytes in the baseline's store (None: not kept)."""
    cache: bool = False
    """A cache: removed quietly when it changed."""


class HarnessChange(BaseModel):
    """One change to the harness, and what was done about it."""

    path: str
    """Relative to the workspace."""
    change: Change
    """What the agent did."""
    what: str
    """Why the path is harness."""
    action: Action
    """What hangar did: put the recorded bytes back, removed what was added, kept an
    allowed change, or could not restore (the bytes were not kept)."""
    allowed: bool = False
    """The scenario allows the agent to change this path."""
    during: bool = False
    """Changed while the verifier commands ran (by code they ran), not by the agent's turn."""

    def words(self) -> str:
        """How a reason names it."""
        when = ", while the verifier commands ran" if self.during else ""
        return f"`{self.path}` ({self.change}{when}: {self.what})"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read(path: Path) -> bytes | None:
    """The bytes of a regular file, never following a link; None for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


class TopName(NamedTuple):
    """A name a file makes importable at the top level, and from where."""

    folder: str
    name: str
    installed: bool
    """Inside installed packages (``site-packages``, ``node_modules``)."""
    regular: bool
    """A module or a regular package (not a namespace folder)."""
    ecosystem: Ecosystem


#: Scripts at a repository's root that are not its code under test.
_ROOT_SCRIPTS = frozenset({"setup", "noxfile", "manage", "fabfile", "tasks", "conftest"})


@dataclass
class _Walker:
    """Classifies the paths of one workspace state (see the module docstring)."""

    root: Path
    exempt: frozenset[tuple[str, str]] = frozenset()
    """(folder, name) of shadowing names that were there before the agent."""
    judged: frozenset[str] = frozenset()
    also: tuple[str, ...] = ()
    skip: frozenset[str] = frozenset()
    """Paths hangar places itself (the hidden verifier files)."""
    own: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The repository's own top-level names and where they are (`own_names`)."""

    def __post_init__(self) -> None:
        self._packages: dict[str, bool] = {}
        self.unreadable: list[str] = []

    def files(self) -> Iterator[tuple[str, os.stat_result]]:
        """Every non-folder entry (links included, never followed), but the root ``.git``."""

        def refused(error: OSError) -> None:
            where = Path(error.filename) if error.filename else self.root
            self.unreadable.append(where.relative_to(self.root).as_posix())

        for folder, dirs, names in os.walk(self.root, onerror=refused):
            rel_dir = Path(folder).relative_to(self.root).as_posix()
            if rel_dir == ".":
                dirs[:] = [d for d in dirs if d != ".git"]
            links = [d for d in dirs if (Path(folder) / d).is_symlink()]
            for name in (*names, *links):
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                try:
                    yield rel, (Path(folder) / name).lstat()
                except OSError:
                    continue

    def _is_package(self, folder: str) -> bool:
        """Whether `folder` is a regular package (its modules are not top-level names); the
        workspace itself never is: it is the working directory of the test run."""
        if folder not in self._packages:
            self._packages[folder] = folder != "" and (self.root / folder / "__init__.py").is_file()
        return self._packages[folder]

    def top_names(self, rel: str) -> Iterator[TopName]:
        """Each top-level name the file `rel` makes importable: every folder on its way
        that is not a regular package could be on the import path (pytest puts test
        folders there), so the name just below it is importable; and a package folder
        directly in ``node_modules``."""
        parts = PurePosixPath(rel).parts
        importable = parts[-1].endswith(IMPORTABLE)
        for i, part in enumerate(parts):
            folder, parent = "/".join(parts[:i]), parts[i - 1] if i else ""
            if parent == "node_modules":
                yield TopName(folder, part, True, True, JAVASCRIPT)
            elif importable and "node_modules" not in parts[:i] and not self._is_package(folder):
                last = i == len(parts) - 1
                name = part.split(".", 1)[0] if last else part
                regular = last or self._is_package("/".join(parts[: i + 1]))
                yield TopName(folder, name, is_installed(parts[:i]), regular, PYTHON)

    def shadow_roots(self, rel: str) -> list[tuple[str, str, bool]]:
        """(folder, name, installed) of each top-level name of a test tool or of the
        standard library that the file `rel` makes importable."""
        return [
            (t.folder, t.name, t.installed)
            for t in self.top_names(rel)
            if names_a_tool(t.ecosystem, t.name)
        ]

    def classify(self, rel: str) -> tuple[str, SectionReader | None, bool] | None:
        """(why `rel` is harness, its section reader, whether a cache), or None."""
        if is_under(rel, self.skip):
            return None
        parts = PurePosixPath(rel).parts
        name = parts[-1]
        if any(c in parts[:-1] for c in CACHES):
            return CACHE, None, True
        for ecosystem in HARNESS_RULES:
            if any(fnmatchcase(name, p) for p in ecosystem.named):
                return f"{ecosystem.name} test harness file", None, False
            for pattern, (section, reader) in ecosystem.sections.items():
                if fnmatchcase(name, pattern):
                    return f"{section} of {name}", reader, False
        if rel in self.judged:
            return "a judged test file", None, False
        if any(fnmatchcase(rel, p) for p in self.also):
            return "a file the verifier commands use", None, False
        for top in self.top_names(rel):
            what = self._shadowing(top)
            if what is not None:
                return what, None, False
        return None

    def _shadowing(self, top: TopName) -> str | None:
        """Why the importable name `top` is harness, or None."""
        if names_a_tool(top.ecosystem, top.name):
            if top.installed:
                return f"an installed copy of `{top.name}`, which the test run may import"
            if (top.folder, top.name) not in self.exempt:
                return f"a new module named like `{top.name}`, which the test run may import"
        elif top.regular and top.folder not in self.own.get(top.name, (top.folder,)):
            return f"a second copy of `{top.name}`, which would shadow the code under test"
        return None

    def own_names(self, files: list[tuple[str, os.stat_result]]) -> dict[str, tuple[str, ...]]:
        """The repository's own top-level packages and modules (at the workspace's root or
        in ``src``): name -> the folders they are in."""
        own: dict[str, set[str]] = {}
        for rel, _ in files:
            for top in self.top_names(rel):
                if (
                    top.ecosystem is PYTHON
                    and top.regular
                    and top.folder in ("", "src")
                    and not names_a_tool(PYTHON, top.name)
                    and top.name not in _ROOT_SCRIPTS
                ):
                    own.setdefault(top.name, set()).add(top.folder)
        return {name: tuple(sorted(folders)) for name, folders in own.items()}

    def entry(self, rel: str, st: os.stat_result) -> tuple[HarnessEntry, bytes | None] | None:
        """`rel`'s entry and bytes, or None when it is not harness."""
        kind = self.classify(rel)
        if kind is None:
            return None
        what, reader, cache = kind
        path = self.root / rel
        if stat.S_ISLNK(st.st_mode):
            return HarnessEntry(digest=f"link:{path.readlink()}", what=what, cache=cache), None
        data = _read(path) if stat.S_ISREG(st.st_mode) else None
        if data is None:
            return HarnessEntry(digest=f"special:{st.st_mode:o}", what=what, cache=cache), None
        return _entry(what, reader, cache, data), data

    def scan(self) -> Iterator[tuple[str, HarnessEntry, bytes | None]]:
        """Every harness path of the current state."""
        for rel, st in self.files():
            found = self.entry(rel, st)
            if found is not None:
                yield rel, *found


CACHE = "a cache of the test run"


def is_under(rel: str, folders: frozenset[str]) -> bool:
    """Whether `rel` is one of `folders` or inside one."""
    return rel in folders or any(rel.startswith(f + "/") for f in folders)


def _entry(what: str, reader: SectionReader | None, cache: bool, data: bytes) -> HarnessEntry:
    """The entry of a regular file's bytes: their digest, or its section's."""
    if reader is None:
        return HarnessEntry(digest=_sha(data), what=what, cache=cache)
    try:
        section = reader(data)
    except (ValueError, configparser.Error, UnicodeError):  # TOMLDecodeError is a ValueError
        section = {"unreadable": _sha(data)}
    if section is None:
        return HarnessEntry(digest=NOT_RELEVANT, what=what)
    return HarnessEntry(digest=_sha(json.dumps(section, sort_keys=True).encode()), what=what)


# -- the baseline and its comparison ---------------------------------------------------------


class HarnessBaseline(BaseModel):
    """The harness of a workspace as the agent was given it."""

    entries: dict[str, HarnessEntry]
    """Path -> its entry."""
    exempt: list[tuple[str, str]]
    """Shadowing names that were there already: the code under test."""
    judged: list[str]
    """The judged test files."""
    also: list[str]
    """The scenario's own harness patterns."""
    store: str
    """Folder of the kept bytes (outside the workspace)."""
    sources: dict[str, str] = {}
    """sha256 of every Python source outside installed packages and caches (to tell which
    the agent changed, for `hangar.verifiers.tampering`)."""
    markers: list[str] = []
    """The tampering markers those sources already mention (not signs in this repository)."""
    own: dict[str, tuple[str, ...]] = {}
    """The repository's own top-level packages and modules, and where they are: a second
    copy elsewhere would shadow the code under test."""

    @classmethod
    def take(
        cls,
        workspace: Path,
        store: Path,
        *,
        judged: frozenset[str] = frozenset(),
        also: tuple[str, ...] = (),
        extra: dict[str, Path] | None = None,
    ) -> HarnessBaseline:
        """Record the harness of `workspace`, keeping its bytes in `store`. `extra` adds
        files that will be in the workspace when the agent starts (relative path -> source
        on the host: plugins installed into a sandbox whose workspace is a copy)."""
        store.mkdir(parents=True, exist_ok=True)
        walker = _Walker(workspace, judged=judged, also=also)
        files = list(walker.files())
        exempt = {
            (folder, name)
            for rel, _ in files
            for folder, name, installed in walker.shadow_roots(rel)
            if not installed
        }
        walker.exempt = frozenset(exempt)
        walker.own = walker.own_names(files)
        sources, markers = _sources(workspace, files)
        baseline = cls(
            entries={},
            exempt=sorted(exempt),
            judged=sorted(judged),
            also=list(also),
            store=str(store),
            sources=sources,
            markers=sorted(markers),
            own=walker.own,
        )
        found = [(rel, *e) for rel, st in files if (e := walker.entry(rel, st)) is not None]
        for rel, source in (extra or {}).items():
            kind, data = walker.classify(rel), _read(source)
            if kind is not None and data is not None:
                found.append((rel, _entry(*kind, data), data))
        total = 0
        for rel, entry, data in found:
            size = KEEP_LIMIT + 1 if data is None else len(data)
            if not entry.cache and size <= KEEP_LIMIT and total + size <= KEEP_TOTAL:
                entry.kept = str(len(baseline.entries))
                (store / entry.kept).write_bytes(data or b"")
                total += size
            baseline.entries[rel] = entry
        return baseline

    def kept_path(self, rel: str) -> Path | None:
        """Where the recorded bytes of `rel` are, when they were kept."""
        entry = self.entries.get(rel)
        return None if entry is None or entry.kept is None else Path(self.store) / entry.kept

    def compare(
        self,
        workspace: Path,
        allowance: HarnessAllowance,
        *,
        skip: frozenset[str] = frozenset(),
        during: bool = False,
    ) -> HarnessComparison:
        """Every change of the harness in `workspace` since the baseline, with what is to
        be done about it (see `HarnessComparison`). `skip`: paths hangar places itself;
        `during`: the state after the verifier commands (nothing is undone then, and
        caches are theirs)."""
        exempt = frozenset((folder, name) for folder, name in self.exempt)
        walker = _Walker(
            workspace,
            exempt=exempt,
            judged=frozenset(self.judged),
            also=tuple(self.also),
            skip=skip,
            own=self.own,
        )
        files = list(walker.files())
        now = {rel: e[0] for rel, st in files if (e := walker.entry(rel, st)) is not None}
        sources, _ = _sources(workspace, files, markers=False)
        changed = sorted(r for r, d in sources.items() if self.sources.get(r) != d)
        changes = [
            HarnessChange(
                path=rel, change="changed", what=UNREADABLE, action="not restored", during=during
            )
            for rel in walker.unreadable
        ]
        for rel in sorted(set(now) | set(self.entries)):
            if not is_under(rel, skip):
                found = _change(rel, self.entries.get(rel), now.get(rel), allowance, during)
                changes += [found] if found is not None else []
        state = dict(self.entries)
        for found in changes:
            if found.action in ("kept", "not restored") and found.path in now:
                state[found.path] = now[found.path]
            elif found.action in ("kept", "not restored", "removed"):
                state.pop(found.path, None)
        return HarnessComparison(
            changes=changes,
            sources_changed=changed,
            after=self.model_copy(update={"entries": state, "sources": sources}),
        )


def _change(
    rel: str,
    before: HarnessEntry | None,
    after: HarnessEntry | None,
    allowance: HarnessAllowance,
    during: bool,
) -> HarnessChange | None:
    """What changed at `rel` and what is done about it (None: nothing that matters)."""
    if _digest(before) == _digest(after):
        return None
    entry = after if after is not None else before
    assert entry is not None
    if entry.cache:  # caches the agent left go; those of the commands are theirs
        if after is None or during:
            return None
        return HarnessChange(path=rel, change="added", what=CACHE, action="removed")
    change: Change = "added" if before is None else "removed" if after is None else "changed"
    allowed = allowance.allows(rel)
    return HarnessChange(
        path=rel,
        change=change,
        what=entry.what,
        action=_action(before, allowed=allowed, during=during),
        allowed=allowed,
        during=during,
    )


class HarnessComparison(BaseModel):
    """What `HarnessBaseline.compare` found."""

    changes: list[HarnessChange]
    """Every change of the harness, with what is done about it."""
    sources_changed: list[str]
    """Python sources added or changed since the baseline (outside the harness too)."""
    after: HarnessBaseline
    """The harness as it is once the changes are undone: the baseline of a later comparison."""


def _sources(
    workspace: Path, files: list[tuple[str, os.stat_result]], *, markers: bool = True
) -> tuple[dict[str, str], set[str]]:
    """sha256 of each Python source outside installed packages and caches, and (with
    `markers`) the tampering markers they mention."""
    digests: dict[str, str] = {}
    seen: set[str] = set()
    for rel, st in files:
        parts = PurePosixPath(rel).parts
        if not rel.endswith(".py") or not stat.S_ISREG(st.st_mode) or is_installed(parts):
            continue
        if any(c in parts for c in CACHES):
            continue
        data = _read(workspace / rel)
        if data is None:
            continue
        digests[rel] = _sha(data)
        if markers:
            seen |= markers_in(data.decode("utf-8", "replace"))
    return digests, seen


UNREADABLE = "a folder hangar cannot read, so its harness cannot be checked"


def _digest(entry: HarnessEntry | None) -> str:
    return NOT_RELEVANT if entry is None else entry.digest


def _action(before: HarnessEntry | None, *, allowed: bool, during: bool) -> Action:
    if allowed:
        return "kept"
    if during:
        return "not restored"  # the commands have run: there is nothing left to protect
    if before is None:
        return "removed"
    return "restored" if before.kept is not None else "not restored"


def findings(changes: list[HarnessChange]) -> list[HarnessChange]:
    """The changes that fail scope: neither allowed nor a cache."""
    return [c for c in changes if not c.allowed and c.what != CACHE]


def placements(baseline: HarnessBaseline, changes: list[HarnessChange]) -> list[Placement]:
    """(target, recorded bytes or None to remove) of each change to undo, in order."""
    out: list[Placement] = []
    for change in changes:
        if change.action == "restored":
            out.append((change.path, baseline.kept_path(change.path)))
        elif change.action == "removed":
            out.append((change.path, None))
    return out


def discard(store: Path) -> None:
    """Remove a baseline's kept bytes."""
    shutil.rmtree(store, ignore_errors=True)
