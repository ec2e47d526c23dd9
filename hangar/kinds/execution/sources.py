"""Task sources of the execution kind: where its scenarios come from.

A source reads one format of task files and turns each task into a `LoadedScenario`, so
admission, the trial, evidence, verdicts, scores and reports work the same whatever the
format. Today's source is hangar's scenario YAML (`ScenarioFile`); the field's formats
(Harbor task directories, SWE-bench instances) are sources too. A field a source cannot
honour makes its task ``blocked_setup`` with the reason, never silently dropped.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from hangar.kinds.execution.scenario import LoadedScenario, load_scenario


class TaskSource(ABC):
    """One format of execution tasks."""

    #: The format's name, for people.
    name: str

    @abstractmethod
    def recognizes(self, path: Path, data: Any) -> bool:
        """Whether the file at `path` (`data`: its parsed YAML, or None) is of this format."""

    @abstractmethod
    def load(self, path: Path, data: Any) -> list[LoadedScenario]:
        """Its tasks, validated and digested (errors name the file and the field)."""


class ScenarioFile(TaskSource):
    """hangar's own scenario YAML (see `hangar.kinds.execution.scenario`)."""

    name = "scenario file"

    def recognizes(self, path: Path, data: Any) -> bool:
        """A YAML file that is not another kind's (no ``kind:`` other than ``scenario``)."""
        return not isinstance(data, dict) or data.get("kind", "scenario") == "scenario"

    def load(self, path: Path, data: Any) -> list[LoadedScenario]:
        """The one scenario of the file."""
        return [load_scenario(path)]


#: Every source, asked in order.
SOURCES: tuple[TaskSource, ...] = (ScenarioFile(),)


def source_of(path: Path, data: Any) -> TaskSource | None:
    """The source that reads the file at `path`, or None."""
    return next((s for s in SOURCES if s.recognizes(path, data)), None)
