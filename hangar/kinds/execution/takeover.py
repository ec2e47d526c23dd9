"""What an agent changed that the shared verifier would execute: a pass it cannot earn.

A shared verifier (Harbor's default) judges the system the agent left: packages it
installed and configuration it changed are part of the task. But the same system holds
what the verifier itself runs: the shell and the interpreters of ``test.sh``, the code a
Python runs at start (``.pth`` lines that import, ``sitecustomize``, the standard
library), the test runner and its plugins, the pytest configuration above ``/tests``,
the dynamic loader's preload list. An agent that changes those can make any test pass.

`takeover` reads the agent's container's changes (``docker diff``, `Sandbox.changes`)
and names each such path; the trial's pass is then not counted (it ends ``fail`` naming
them), unless the task declares the path as the agent's to change
(``[metadata.hangar] agent_may_change``). `neutralised` names what is removed from the
verifier's file system before the tests run instead (bytecode caches, which Python makes
again from the sources; pytest configuration the agent put above ``/tests``).
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Callable, Iterable
from pathlib import PurePosixPath

from hangar.sandbox.base import Change

#: pytest configuration files that sit above ``/tests`` (pytest reads them as the rootdir's).
ABOVE_TESTS = ("/conftest.py", "/pytest.ini", "/tox.ini", "/setup.cfg", "/pyproject.toml")
#: Where programs a script runs by name are found.
BIN_DIRS = ("/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin")
#: Programs every verifier is taken to run (shells, interpreters, launchers).
ALWAYS_RUN = frozenset({"sh", "bash", "dash", "env", "pytest", "py.test", "uv", "uvx"})
_PYTHON = re.compile(r"python[0-9.]*(m|-config)?")
#: The test runner's own packages, in site-packages or dist-packages.
RUNNER_PACKAGES = frozenset(
    {"pytest", "_pytest", "pluggy", "iniconfig", "py", "py.py", "pytest.py", "conftest.py"}
)
_PACKAGES = ("site-packages", "dist-packages")
_STDLIB = re.compile(r"^/usr(/local)?/lib/python3\.[0-9]+/")
_LIBRARY = re.compile(r"^/(usr/(local/)?)?lib(32|64|x32)?/.*\.so(\.[0-9.]+)?$")
#: A shell's words that come before a command name.
_PREFIX_WORDS = frozenset(
    {"if", "then", "else", "elif", "do", "while", "until", "!", "time", "exec", "command",
     "{", "(", "nohup", "sudo", "xargs", "timeout", "env", "run", "uv", "uvx", "npx"}
)  # fmt: skip

Reader = Callable[[str], str | None]


def commands_of(script: str) -> set[str]:
    """The names of the programs a shell script runs (a reading, not a shell: the first
    word of each command, past assignments and launchers, and its shebang)."""
    found: set[str] = set()
    first = script.splitlines()[0] if script else ""
    if first.startswith("#!"):
        found.update(PurePosixPath(w).name for w in first[2:].split()[:2])
    text = re.sub(r"#[^\n]*", "", script)
    for part in re.split(r"[;&|\n`()]|\$\(", text):
        try:
            words = shlex.split(part)
        except ValueError:
            words = part.split()
        for word in words:
            if "=" in word and not word.startswith(("=", "-")):
                continue  # an assignment before the command
            name = PurePosixPath(word).name
            if word.startswith("-") or re.fullmatch(r"[0-9.]+[smhd]?", word):
                continue  # a launcher's option or duration (timeout 60 pytest)
            found.add(name)
            if name not in _PREFIX_WORDS:
                break
    return {n for n in found if n and re.fullmatch(r"[\w.+-]+", n)}


def _runs(name: str, commands: set[str]) -> bool:
    return name in ALWAYS_RUN or name in commands or bool(_PYTHON.fullmatch(name))


def _in_packages(path: PurePosixPath) -> tuple[str, ...] | None:
    """The parts of `path` below a site-packages or dist-packages folder (None: not in one)."""
    for i, part in enumerate(path.parts):
        if part in _PACKAGES:
            return path.parts[i + 1 :]
    return None


def _imports(pth: str) -> bool:
    """Whether a ``.pth`` file has a line Python executes (one that starts with import)."""
    return any(re.match(r"import[ \t]", line) for line in pth.splitlines())


def folders(changes: Iterable[Change]) -> set[str]:
    """The changed paths that are folders: parents of other changed paths (``docker
    diff`` lists a folder whose entries changed as changed)."""
    found: set[str] = set()
    for change in changes:
        found.update(str(p) for p in PurePosixPath(change.path).parents)
    return found


def _finding(change: Change, script_commands: set[str], read: Reader) -> str:
    """Why `change` touches what the verifier executes ('' when it does not)."""
    path = PurePosixPath(change.path)
    name = path.name
    if change.path in ABOVE_TESTS:
        return "pytest configuration above /tests"
    if name in ("sitecustomize.py", "usercustomize.py"):
        return "a Python start-up hook"
    if change.path == "/etc/ld.so.preload":
        return "the dynamic loader's preload list"
    if change.kind == "D":
        return ""
    if str(path.parent) in BIN_DIRS and _runs(name, script_commands):
        return "a program the verifier runs"
    inside = _in_packages(path)
    if inside is not None:
        if inside and inside[0] in RUNNER_PACKAGES:
            return "the test runner's own package"
        if name.endswith(".pth"):
            text = read(change.path)
            if text is None or _imports(text):
                return "a .pth file with code Python runs at start"
        if name == "entry_points.txt":
            text = read(change.path)
            if text is None or "[pytest11]" in text:
                return "a pytest plugin (loaded by every pytest)"
        return ""
    if _STDLIB.match(change.path):
        return "the Python standard library"
    if change.kind == "C" and _LIBRARY.match(change.path):
        return "a shared library already in the image"
    return ""


def takeover(
    changes: list[Change],
    script: str,
    read: Reader,
    declared: tuple[str, ...] = (),
) -> list[str]:
    """Each change that touches what the verifier executes, as ``PATH (why)``; `read`
    gives a changed file's text (None: it cannot be read, which counts against it)."""
    dirs = folders(changes)
    commands = commands_of(script)
    found = []
    for change in changes:
        if change.path in dirs or change.path.endswith(".pyc"):
            continue
        if PurePosixPath(change.path).name == "__pycache__":
            continue
        if any(fnmatch.fnmatchcase(change.path, pattern) for pattern in declared):
            continue
        why = _finding(change, commands, read)
        if why:
            found.append(f"{change.path} ({why})")
    return found


def neutralised(changes: list[Change]) -> list[str]:
    """What the agent added or changed that is removed before the verifier runs:
    bytecode caches (Python compiles the sources again) and pytest configuration above
    ``/tests``."""
    dirs = folders(changes)
    return [
        c.path
        for c in changes
        if c.kind != "D"
        and c.path not in dirs
        and (c.path.endswith(".pyc") or c.path in ABOVE_TESTS)
    ]
