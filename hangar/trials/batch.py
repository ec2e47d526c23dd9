"""A batch: the tasks a kind runs as one sweep of its own (a benchmark's samples, a gold
set's questions), and how to run it.

A kind builds a `TaskBatch` and hands it to a `BatchRunner` it is given: the scheduler's
(`hangar.scheduler.run_batch`, on Ray, resumable, with the store, retries and budget of a
sweep), which the command line passes in. So a kind runs whole sweeps without importing
the scheduler, which sits above the kinds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny

from hangar.agents import AgentSpec
from hangar.errors import HangarError
from hangar.models import ModelSpec
from hangar.sandbox.config import BackendConfig, DockerConfig
from hangar.trials.spec import Arm, Task

if TYPE_CHECKING:
    from hangar.store import ResultsStore
    from hangar.trials.kind import SweepSettings


class TaskBatch(BaseModel):
    """Tasks to run as one sweep (see the module docstring)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    """The sweep id (a stopped run resumes under it)."""
    tasks: list[SerializeAsAny[Task]]
    """The tasks."""
    models: list[ModelSpec]
    """The models they run on."""
    agents: dict[str, AgentSpec] = Field(default_factory=dict)
    """The agents (a kind takes those that run its tasks; prompt kinds have a default)."""
    store: str | None = None
    """Results store URL (default: sqlite under the runs folder)."""
    evidence: str | None = None
    """Evidence store URL (default: file:// under the runs folder)."""
    budget_usd: float | None = None
    """Stop scheduling new trials once the sweep has spent this much."""
    max_in_flight: int | None = None
    """Trials at once (None: twice the cluster's sandbox slots)."""
    backend: BackendConfig = Field(default_factory=DockerConfig)
    """The sandbox backend of the kinds that need one."""
    arms: list[Arm] = Field(default_factory=list)
    """The arms of kinds whose arms a sweep chooses (execution tasks: at least one)."""
    repeats: int = Field(default=1, gt=0)
    """Repeats per (task, agent, model, arm)."""


class BatchOutcome(BaseModel):
    """How a batch's run ended."""

    not_run: int
    """Trials with no final verdict (budget, stopped models, Ctrl-C, infra_error)."""
    interrupted: bool = False
    """Ctrl-C stopped it."""


#: Runs a batch to its end (or to Ctrl-C), every result in the store.
BatchRunner = Callable[[TaskBatch], BatchOutcome]


class Scheduler(Protocol):
    """Runs a batch on a cluster (`hangar.scheduler.batch.run_batch`)."""

    def __call__(self, batch: TaskBatch, *, address: str | None = None) -> BatchOutcome:
        """Run `batch` (attached to the cluster at `address`, else as `hangar run` does)."""
        ...


class SweepTasks(NamedTuple):
    """A sweep file's tasks as `hangar run` loads them (or a folder's), for a kind's own
    commands (`Services.sweep_tasks`)."""

    name: str
    """The sweep's id (a folder's name)."""
    tasks: list[Task]
    """Every task that loads."""
    unloadable: list[tuple[str, str]]
    """(task id or path, why) of each file that does not."""
    store: str | None
    """The sweep's results store (None: a folder's default)."""
    evidence: str | None
    """The sweep's evidence store (None: a folder's default)."""


@dataclass(frozen=True)
class Services:
    """What the command line gives the kinds' own commands (as Typer's context object):
    the scheduler's parts, which the kinds cannot import."""

    scheduler: Scheduler
    """Runs a batch on Ray."""
    sweep_tasks: Callable[[Path, SweepSettings], SweepTasks]
    """The tasks of a sweep file, or of a folder of task folders in a sweep that says
    these settings (an image map)."""
    resolve_sweep: Callable[[str, str | None], tuple[str, ResultsStore]]
    """A sweep file or id (and a store URL): the sweep's id and its store."""


def services_of(obj: object) -> Services:
    """A command's services (its context object)."""
    if not isinstance(obj, Services):
        raise HangarError("this command needs hangar's scheduler: run it as `hangar ...`")
    return obj


def runner_from(services: object, address: str | None) -> BatchRunner:
    """The batch runner of a command's `services` (its context object), on `address`."""
    return partial(services_of(services).scheduler, address=address)
