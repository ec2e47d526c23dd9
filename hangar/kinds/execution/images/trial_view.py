"""What the parts of an image task's trial read and set of it: `ImageTrialView`.

The trial (`images.trial.ImageTaskTrial`) hands itself to the places its tests run in
(`images.verifier`), to its services (`images.services`) and to its steps
(`images.steps`). They know it only through this protocol, so none of them imports the
trial back, and what each may touch is written down in one place.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from hangar.kinds.execution.images.rewards import Reward
from hangar.kinds.execution.images.task import ImageSource, ImageTask
from hangar.results import Verdict
from hangar.sandbox import Mount, Sandbox, SandboxSpec
from hangar.sandbox.base import Change
from hangar.sandbox.disk import TrialDisk
from hangar.sandbox.services import ServiceNetwork
from hangar.trials.limits import ScenarioLimits
from hangar.trials.spec import TrialSpec


class ImageTrialView(Protocol):
    """An image task's trial, as its verifier places, services and steps see it."""

    spec: TrialSpec
    whole: ImageTask
    """The task with all its steps."""
    task: ImageTask
    """The task as the current step sees it (the whole task when it has no steps)."""
    step_index: int
    limits: ScenarioLimits
    verdict: Verdict
    reason: str
    reward: Reward | None
    folder: Path
    """The trial's own folder on the host."""
    artifacts: Path
    """The evidence folder."""
    logs: Path
    """The logs folder the sandboxes mount at ``/logs``."""
    workspace: Path
    initial: Path
    """The workspace as it was before the agent."""
    workdir: str
    """The workspace's path inside the sandbox."""
    image_ref: str
    image_env: dict[str, str]
    snapshot: str | None
    """The image the agent's sandbox was committed to, for `shared` verification."""
    sandboxes: list[Sandbox]
    services: ServiceNetwork | None
    egress_ports: list[int]
    verifier_disk: TrialDisk
    read_limit: int
    earlier_changes: list[Change]
    """The agent's changes of earlier steps (a step's sandbox starts from a snapshot)."""
    takeover: list[str]
    """What the judge's machinery used of the agent's changes."""
    stalled: list[str]
    interfered: list[str]

    def phase(self, name: str) -> AbstractContextManager[None]: ...

    def write(self, rel: str, data: object) -> Path: ...

    def release(self, sandbox: Sandbox, *, stop: bool) -> None: ...

    def budget(self) -> float: ...

    def build(self, source: ImageSource, what: str) -> str: ...

    def mkdirs(self, sandbox: Sandbox, *paths: str) -> None: ...

    def sandbox_of(
        self,
        image: str,
        mounts: tuple[Mount, ...],
        *,
        ttl_s: float,
        cpus: float | None = None,
        memory: int | None = None,
        **more: Any,
    ) -> SandboxSpec: ...

    def verifier_spec(
        self, image: str, workspace: bool, more: tuple[Mount, ...] = ()
    ) -> SandboxSpec: ...

    def starts_pristine(self) -> bool: ...

    def workspace_changes(self) -> dict[str, str]: ...
