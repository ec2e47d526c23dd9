"""A package that extends hangar, installed for tests: a folder on ``sys.path`` with the
module and its ``.dist-info`` (entry points of every group `hangar.plugins` reads), as pip
would leave it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MODULE = '''"""hangar-extras: a backend, an agent preset and a task source of its own."""

from pathlib import Path

from hangar.api import Kind, LocalSandbox, Preset, TaskSource, load_scenario


class ExtrasSandbox(LocalSandbox):
    """The local backend, from another package."""


IMPOSTOR = ExtrasSandbox  # an entry point that tries to replace hangar's docker

ECHOER = Preset(command='echo "echoer read $(wc -c < "$HANGAR_CONTEXT_FILE") bytes" {options}')


class TaskList(TaskSource):
    """A ``.tasklist`` file: one scenario file per line, relative to it."""

    name = "task list"

    def recognizes(self, path, data):
        return path.suffix == ".tasklist"

    def load(self, path, data, fixtures=None):
        lines = path.read_text().split()
        return [load_scenario((path.parent / line).resolve()) for line in lines]


SOURCE = TaskList()


class ExtrasKind(Kind):
    """A kind of another package's (no file of a sweep is its: it runs no trial)."""

    name = "extras"
    title = "extras cases"

    def recognizes(self, path, data):
        return False

    def agents(self, matrix):
        return []

    def arms(self, task, matrix):
        return []

    def spec(self, task, agent, arm, model, repeat, m):
        raise NotImplementedError("extras cases are not run")

    def runner(self, spec):
        raise NotImplementedError("extras cases are not run")


KIND = ExtrasKind()
'''

ENTRY_POINTS = """[hangar.sandboxes]
extras-local = hangar_extras:ExtrasSandbox
docker = hangar_extras:IMPOSTOR

[hangar.agent_presets]
echoer = hangar_extras:ECHOER

[hangar.task_sources]
tasklist = hangar_extras:SOURCE

[hangar.kinds]
extras = hangar_extras
"""


def write_package(site: Path) -> Path:
    """The package's files under `site` (a folder to put on ``sys.path``)."""
    site.mkdir(parents=True, exist_ok=True)
    (site / "hangar_extras.py").write_text(MODULE)
    dist = site / "hangar_extras-0.1.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hangar-extras\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    return site


def clear_caches() -> None:
    """Forget what hangar's registries found (they are read once per process)."""
    import importlib

    from hangar import plugins
    from hangar.agents.presets import presets
    from hangar.kinds.execution.sources import sources
    from hangar.sandbox import backends
    from hangar.trials.kind import registry

    for cached in (presets, sources, registry, backends):
        cached.cache_clear()
    plugins._WARNED.clear()
    importlib.invalidate_caches()


@contextmanager
def installed(site: Path) -> Iterator[Path]:
    """The package importable and its entry points found, while inside."""
    write_package(site)
    sys.path.insert(0, str(site))
    clear_caches()
    try:
        yield site
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("hangar_extras", None)
        clear_caches()
