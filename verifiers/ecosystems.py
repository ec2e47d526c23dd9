"""What the test harness is, per test ecosystem: the files that change how a workspace's
tests are collected, run or reported (see `hangar.verifiers.harness`, which holds them to
what they were before the agent).

Each `Ecosystem` lists its named files, the sections of shared files it reads, the
top-level names of its runner and plugins, and the folders of installed packages.
`HARNESS_RULES` holds every ecosystem the builtin verifiers support (JUnit reports from
pytest, jest, vitest or mocha); `command_files` adds what a scenario's own verifier
commands name or run through.
"""

from __future__ import annotations

import configparser
import json
import shlex
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

#: Section readers of shared files: the parsed part that configures the test run.
SectionReader = Callable[[bytes], object]


def _ini_section(name: str) -> SectionReader:
    def read(data: bytes) -> object:
        parser = configparser.RawConfigParser(strict=False, interpolation=None)
        parser.read_string(data.decode("utf-8", "replace"))
        return dict(parser.items(name)) if parser.has_section(name) else None

    return read


def _toml_tool(prefix: str) -> SectionReader:
    def read(data: bytes) -> object:
        tool = tomllib.loads(data.decode("utf-8", "replace")).get("tool", {})
        found = {k: v for k, v in tool.items() if k == prefix or k.startswith(prefix + "-")}
        return found or None

    return read


def _json_keys(*keys: str) -> SectionReader:
    def read(data: bytes) -> object:
        doc = json.loads(data.decode("utf-8", "replace"))
        if not isinstance(doc, dict):
            return None
        found = {k: doc[k] for k in keys if k in doc}
        scripts = doc.get("scripts")
        if isinstance(scripts, dict) and "test" in scripts:
            found["scripts.test"] = scripts["test"]
        return found or None

    return read


@dataclass(frozen=True)
class Ecosystem:
    """The harness files of one test ecosystem."""

    name: str
    named: tuple[str, ...]
    """File-name patterns that are harness wherever they are."""
    sections: dict[str, tuple[str, SectionReader]]
    """File-name pattern -> (what the section is, its reader)."""
    tools: frozenset[str]
    """Top-level module or package names of the runner and its plugins."""
    tool_prefixes: tuple[str, ...] = ()
    """Name prefixes of runner plugins (``pytest_``)."""
    installed: tuple[str, ...] = ()
    """Folder names that hold installed packages."""


def _stdlib_names() -> frozenset[str]:
    # `test` (CPython's own regression tests) is left out: a `test/` folder of new tests is
    # ordinary work, and no runner imports the package.
    return frozenset(sys.stdlib_module_names) - {"test", "this", "antigravity"}


PYTHON = Ecosystem(
    name="python",
    named=(
        "conftest.py",
        "pytest.ini",
        ".pytest.ini",
        "pytest.toml",
        ".pytest.toml",
        "sitecustomize.py",
        "usercustomize.py",
        "*.pth",
    ),
    sections={
        "pyproject.toml": ("[tool.pytest*]", _toml_tool("pytest")),
        "setup.cfg": ("[tool:pytest]", _ini_section("tool:pytest")),
        "tox.ini": ("[pytest]", _ini_section("pytest")),
        "entry_points.txt": ("the pytest11 entry points", _ini_section("pytest11")),
    },
    tools=frozenset(
        {
            "pytest",
            "_pytest",
            "py",
            "pluggy",
            "iniconfig",
            "packaging",
            "exceptiongroup",
            "tomli",
            "colorama",
            "pygments",
            "coverage",
            "xdist",
            "execnet",
            "hypothesis",
            "_hypothesis_pytestplugin",
            "nose",
            "nose2",
            "mock",
            "attr",
            "attrs",
            "typing_extensions",
            "pkg_resources",
            "setuptools",
            "_distutils_hack",
            "importlib_metadata",
            "zipp",
        }
    )
    | _stdlib_names(),
    tool_prefixes=("pytest_",),
    installed=("site-packages", "dist-packages"),
)

JAVASCRIPT = Ecosystem(
    name="javascript",
    named=(
        "jest.config.*",
        "vitest.config.*",
        "vitest.workspace.*",
        ".mocharc*",
        "jest.setup.*",
    ),
    sections={
        "package.json": (
            "jest/mocha/vitest settings or the test script",
            _json_keys("jest", "mocha", "vitest", "jest-junit", "c8", "nyc"),
        )
    },
    tools=frozenset(
        {
            "jest",
            "@jest",
            "vitest",
            "@vitest",
            "mocha",
            "jest-junit",
            "mocha-junit-reporter",
            ".bin",
        }
    ),
    tool_prefixes=("jest-", "vitest-", "babel-jest"),
    installed=("node_modules",),
)

#: Every ecosystem the builtin verifiers support (junit reports from pytest, jest, vitest, mocha).
HARNESS_RULES: tuple[Ecosystem, ...] = (PYTHON, JAVASCRIPT)

IMPORTABLE = (".py", ".pyc", ".so", ".pyd")
CACHES = ("__pycache__", ".pytest_cache")


def names_a_tool(ecosystem: Ecosystem, name: str) -> bool:
    """Whether `name` is a top-level name of `ecosystem`'s runner or plugins."""
    return name in ecosystem.tools or name.startswith(ecosystem.tool_prefixes)


def is_installed(parts: tuple[str, ...]) -> bool:
    """Whether a path of these `parts` is inside installed packages."""
    return any(part in e.installed for part in parts for e in HARNESS_RULES)


#: Tools whose configuration file is harness when a verifier command runs them.
_COMMAND_FILES = {
    "make": ("Makefile", "makefile", "GNUmakefile"),
    "tox": ("tox.ini",),
    "nox": ("noxfile.py",),
    "npm": ("package.json",),
    "yarn": ("package.json",),
    "pnpm": ("package.json",),
    "npx": ("package.json",),
}


def command_files(commands: tuple[str, ...], workspace: Path) -> tuple[str, ...]:
    """The workspace's files the verifier `commands` name or run through (a script, a
    ``Makefile`` for ``make``): they are harness too."""
    found: dict[str, None] = {}
    for command in commands:
        try:
            words = shlex.split(command, comments=True)
        except ValueError:
            words = command.split()
        for word in words:
            rel = word.split("=", 1)[-1].removeprefix("./").split("::", 1)[0]
            for name in _COMMAND_FILES.get(PurePosixPath(word).name, ()):
                if (workspace / name).is_file():
                    found[name] = None
            if not rel or rel.startswith(("-", "/", "$")) or ".." in PurePosixPath(rel).parts:
                continue
            path = workspace / rel
            if not path.is_symlink() and path.is_file():
                found[rel] = None
    return tuple(found)
