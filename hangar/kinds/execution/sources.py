"""Task sources of the execution kind: where its scenarios come from.

A source reads one format of task files and turns each task into an execution task (a
`LoadedScenario` of a git repository, or an `ImageTask` whose fixture is its image), so
admission, evidence, verdicts, scores and reports work the same whatever the format.
The sources: hangar's scenario YAML (`ScenarioFile`), Harbor task directories
(`HarborTaskDir`) and SWE-bench instances (`SwebenchFile`, imported as task folders).
A field a source cannot honour makes its task ``blocked_setup`` with the reason, never
silently dropped.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from hangar.errors import ConfigError
from hangar.kinds.execution.harbor.tasks import TASK_FILE, load_task
from hangar.kinds.execution.scenarios.fixtures import Registry, missing_fixture
from hangar.kinds.execution.scenarios.scenario import load_scenario
from hangar.plugins import load_target, plugin_targets
from hangar.trials.spec import Task


class TaskSource(ABC):
    """One format of execution tasks."""

    #: The format's name, for people.
    name: str

    @abstractmethod
    def recognizes(self, path: Path, data: Any) -> bool:
        """Whether the file at `path` (`data`: its parsed YAML, or None) is of this format."""

    @abstractmethod
    def load(self, path: Path, data: Any, fixtures: Registry | None = None) -> list[Task]:
        """Its tasks, validated and digested (errors name the file and the field);
        `fixtures`: the sweep's fixture registry, if it has one."""


class ScenarioFile(TaskSource):
    """hangar's own scenario YAML (see `hangar.kinds.execution.scenarios.scenario`)."""

    name = "scenario file"

    def recognizes(self, path: Path, data: Any) -> bool:
        """A YAML file that is not another kind's (no ``kind:`` other than ``scenario``)."""
        if path.suffix not in (".yaml", ".yml"):
            return False
        return not isinstance(data, dict) or data.get("kind", "scenario") == "scenario"

    def load(self, path: Path, data: Any, fixtures: Registry | None = None) -> list[Task]:
        """The one scenario of the file, bound to its fixture when `fixtures` has one."""
        if fixtures is not None:
            data = fixtures.bind(data, path)
        if missing := missing_fixture(path, data, fixtures):
            raise ConfigError(missing)
        return [load_scenario(path, data)]


class HarborTaskDir(TaskSource):
    """A Harbor task directory, named by its ``task.toml`` (`harbor.tasks`)."""

    name = "Harbor task"

    def recognizes(self, path: Path, data: Any) -> bool:
        """A file called task.toml."""
        return path.name == TASK_FILE

    def load(self, path: Path, data: Any, fixtures: Registry | None = None) -> list[Task]:
        """The one task of the folder."""
        return [load_task(path)]


class SwebenchFile(TaskSource):
    """A JSONL file of SWE-bench instances (`hangar.kinds.execution.swebench.instances`)."""

    name = "SWE-bench instances"

    def recognizes(self, path: Path, data: Any) -> bool:
        """A ``.jsonl`` file."""
        return path.suffix == ".jsonl"

    def load(self, path: Path, data: Any, fixtures: Registry | None = None) -> list[Task]:
        """One task per instance (imported once per version of the file)."""
        from hangar.kinds.execution.swebench.instances import imported
        from hangar.paths import cache_dir

        return [load_task(folder / TASK_FILE) for folder in imported(path, cache_dir())]


#: hangar's sources, asked in order.
SOURCES: tuple[TaskSource, ...] = (HarborTaskDir(), SwebenchFile(), ScenarioFile())


@functools.cache
def sources() -> tuple[TaskSource, ...]:
    """Every source: installed packages' (entry points of ``hangar.task_sources``, a
    `TaskSource` each, `hangar.plugins`) asked first, then hangar's: a package's format
    is one hangar's sources would misread (a YAML file of its own)."""
    found = []
    builtin = {s.name: s for s in SOURCES}
    for name, target in plugin_targets("hangar.task_sources", builtin).items():
        source = load_target(target)
        if not isinstance(source, TaskSource):
            raise ConfigError(
                f"entry point {name} = {target} of hangar.task_sources is not a TaskSource"
            )
        found.append(source)
    return (*found, *SOURCES)


def source_of(path: Path, data: Any) -> TaskSource | None:
    """The source that reads the file at `path`, or None."""
    return next((s for s in sources() if s.recognizes(path, data)), None)
