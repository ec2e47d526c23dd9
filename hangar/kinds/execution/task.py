"""What the execution kind asks of a task, whichever its fixture: `ExecutionTask`.

A git scenario (`scenarios.scenario.LoadedScenario`) and an image task
(`images.task.ImageTask`: a Harbor task, a SWE-bench instance) each answer it, so the
kind (`hangar.kinds.execution`), its shipping (`shipping`) and the validation of datasets
never ask which of the two they hold. A third kind of fixture is a third subclass that
answers these questions, and a task source that makes it.
"""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Self

from hangar.trials.spec import Task

if TYPE_CHECKING:
    from hangar.kinds.execution.settings import ExecutionSettings
    from hangar.trials.boundary import TrialRun
    from hangar.trials.kind import Matrix
    from hangar.trials.spec import TrialSpec


class ExecutionTask(Task):
    """A task of the execution kind (abstract: a scenario or an image task)."""

    #: Whether a sweep runs it only once `hangar dataset validate` has passed it.
    needs_validation: ClassVar[bool] = False

    def worker_services(self) -> tuple[str, ...]:
        """The worker's own services its allowlist may reach (the sweep's
        `network: host_services`; none by default)."""
        return ()

    def sweep_title(self) -> str | None:
        """What a sweep of such tasks is called, when not the kind's title."""
        return None

    @abstractmethod
    def plugin_source(self, name: str) -> Path | None:
        """The folder of the plugin `name` an arm selects (None: the task has none)."""

    @abstractmethod
    def for_sweep(self, settings: ExecutionSettings, registry: str | None) -> Self:
        """The task with a sweep's execution settings and image registry."""

    @abstractmethod
    def fixed_image(self) -> str | None:
        """The image it names, for the sweep's preflight (None: its trial builds or finds
        its own, and is blocked_setup naming it when it is missing)."""

    @abstractmethod
    def problems(self, matrix: Matrix, *, deep: bool) -> list[str]:
        """Why it cannot run in `matrix` (`deep`: also what needs git or an engine to
        see), each naming the task."""

    @abstractmethod
    def trial(self, spec: TrialSpec) -> TrialRun:
        """The trial that runs it."""

    @abstractmethod
    def package(self) -> bytes:
        """A tar.gz of its files, shipped once per sweep to the workers."""

    @abstractmethod
    def repository_to_ship(self) -> Path | None:
        """A local repository it needs on the workers (None: none, or fetched by URL)."""

    @abstractmethod
    def unpacked(self, folder: Path, repository: Path | None) -> Self:
        """The task as unpacked on a worker: its `package` in `folder`, its shipped
        `repository` (a git bundle) at the given path."""


def execution_task(task: Task) -> ExecutionTask:
    """`task` as the execution kind's (a task of another kind here is hangar's bug)."""
    if not isinstance(task, ExecutionTask):
        raise TypeError(f"the execution kind was given a {task.kind} task")
    return task
