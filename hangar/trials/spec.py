"""What a trial is: the task it runs, its arm, its key, the spec a worker runs, and the
result it makes.

A trial is one (task digest, agent, model, arm, repeat). Its key is a sha256 of those
(`trial_key`, the one recipe every kind uses), the arm standing for its name and the
bytes it installs or supplies, so a changed plugin or agent config is a new trial while
a rerun of the same one is not. Resume means: skip trial keys that already have a final
verdict.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, SerializeAsAny

from hangar.agents import AgentSpec
from hangar.models import ModelSpec
from hangar.paths import default_evidence_url
from hangar.results import TrialOutcome, TrialResult, Verdict
from hangar.sandbox.config import BackendConfig
from hangar.validation import ArmName

#: The arm in which a task's skill is supplied, and the one in which it is not.
SKILL_ARM, CONTROL_ARM = "skill", "control"


class Supplied(BaseModel):
    """A file supplied in a skill arm's prompt (a skill, a reference), as it was read."""

    model_config = ConfigDict(frozen=True)

    path: str
    """Its path (the skill file relative to the suite; a reference relative to the skill)."""
    sha256: str
    """``sha256:<hex>`` of its bytes (the seed's public content hash)."""
    text: str
    """Its text."""


class Task(BaseModel):
    """What one trial runs, loaded and digested: one kind's task (an execution scenario,
    a decision case, a benchmark sample, a knowledge question; `hangar.trials.kind`)."""

    kind: str
    """The kind of trial it is (a name in `hangar.trials.kind.REGISTRY`)."""
    path: Path
    """The file it was loaded from."""
    suite: str = ""
    """The suite it belongs to in a sweep (its folder's name)."""
    digest: str
    """sha256 of everything that makes it this version of the task."""

    #: How its trial keys name its digest (each kind's own word, so keys stay stable).
    key_field: ClassVar[str] = "task"

    @property
    def id(self) -> str:
        """The task's id (unique in a sweep)."""
        raise NotImplementedError


class Arm(BaseModel):
    """A named selection of a scenario's plugins (``control`` selects none)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: ArmName
    """Arm name, e.g. ``skill`` or ``control`` (or ``retrieval:handbook``)."""
    plugins: tuple[str, ...] = ()
    """Names of the scenario plugins this arm installs."""

    @classmethod
    def parse(cls, text: str) -> Arm:
        """``NAME`` or ``NAME=plugin1,plugin2`` (a bare name selects no plugin)."""
        name, _, plugins = text.partition("=")
        return cls(name=name, plugins=tuple(p for p in plugins.split(",") if p))


def trial_key(
    key_field: str,
    digest: str,
    agent: AgentSpec,
    model: str,
    *,
    arm: str | list[str] | None = None,
    repeat: int | None = None,
) -> str:
    """The trial key (see the module docstring): sha256 of the task's digest under
    `key_field`, the agent's settings digest, the model, and the `arm` and `repeat` where
    the kind's trials have them."""
    payload: dict[str, Any] = {key_field: digest, "agent": agent.digest(), "model": model}
    if arm is not None:
        payload["arm"] = arm
    if repeat is not None:
        payload["repeat"] = repeat
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def adhoc_sweep_id() -> str:
    """The sweep id of a trial run on its own: ``adhoc-<UTC time>``, new at each call, so
    running the same trial again never overwrites the evidence of an earlier run."""
    return datetime.now(UTC).strftime("adhoc-%Y%m%dT%H%M%S.%fZ")


class TrialSpec(BaseModel):
    """Everything a worker needs to run one trial attempt."""

    model_config = ConfigDict(frozen=True)

    sweep: str = "adhoc"
    """Sweep id."""
    trial_key: str
    """The trial's key (see `trial_key`)."""
    task: SerializeAsAny[Task]
    """What the trial runs: a kind's task, loaded and digested."""
    agent: AgentSpec
    """The agent."""
    model: str = "none"
    """Model id."""
    model_spec: ModelSpec | None = None
    """How to reach the model (None: an agent that calls none)."""
    arm: str = "control"
    """Arm name."""
    plugins: tuple[str, ...] = ()
    """Plugins the arm installs (or the supplied texts stand for)."""
    plugins_digest: str = ""
    """sha256 of those plugins' names and bytes."""
    repeat: int = 0
    """Repeat index."""
    attempt: int = 1
    """Attempt number."""
    backend: str = "docker"
    """Sandbox backend (``none`` for a trial without a sandbox)."""
    backend_config: BackendConfig | None = None
    """The sweep's settings of that backend (None: its defaults)."""
    evidence_url: str
    """Evidence store URL (``file://DIR``)."""
    registry: str | None = None
    """Where the nodes of a cluster share what they build (``host:port/namespace``, the
    sweep's ``registry:``): agent bundles here; image tasks carry their own."""
    work_root: Path | None = None
    """Node-local folder for per-trial folders (default: the worker's cache/trials)."""
    cache_root: Path | None = None
    """Node-local cache of repository mirrors (default: the worker's cache folder)."""
    node: str = ""
    """Where the trial runs (set by the worker: host name and Ray node id)."""


def new_spec(
    task: Task,
    agent: AgentSpec,
    model: ModelSpec | str,
    *,
    arm: str,
    key_arm: str | list[str] | None,
    repeat: int | None,
    plugins: tuple[str, ...] = (),
    plugins_digest: str = "",
    sweep: str | None = None,
    backend: str | BackendConfig = "none",
    evidence_url: str | None = None,
) -> TrialSpec:
    """The spec of one trial of `task`, keyed by `trial_key` (`key_arm` and `repeat` as
    the kind's keys have them; None leaves them out), in `sweep` (None: an ad-hoc one)."""
    spec = ModelSpec.model_validate(model)
    fields: dict[str, Any] = (
        {"backend": backend} if isinstance(backend, str) else {"backend": backend.kind}
    )
    if not isinstance(backend, str):
        fields["backend_config"] = backend
    return TrialSpec(
        sweep=sweep or adhoc_sweep_id(),
        trial_key=trial_key(
            task.key_field, task.digest, agent, spec.id, arm=key_arm, repeat=repeat
        ),
        task=task,
        agent=agent,
        model=spec.id,
        model_spec=spec,
        arm=arm,
        plugins=plugins,
        plugins_digest=plugins_digest,
        repeat=repeat or 0,
        evidence_url=evidence_url or default_evidence_url(),
        **fields,
    )


def result_of(
    spec: TrialSpec,
    verdict: Verdict,
    reason: str,
    started_at: datetime,
    finished_at: datetime,
    outcome: TrialOutcome | None = None,
    *,
    timings: dict[str, float] | None = None,
    node: str = "",
) -> TrialResult:
    """The result of `spec`'s attempt: its identity, the verdict, and what else its run
    knows (`outcome`), with its phases' timings and the node it ran on."""
    return TrialResult(
        sweep=spec.sweep,
        trial_key=spec.trial_key,
        scenario_id=spec.task.id,
        scenario_digest=spec.task.digest,
        suite=spec.task.suite,
        kind=spec.task.kind,
        agent=spec.agent.name,
        model=spec.model,
        arm=spec.arm,
        repeat=spec.repeat,
        attempt=spec.attempt,
        verdict=verdict,
        reason=reason,
        started_at=started_at,
        finished_at=finished_at,
        agent_digest=spec.agent.digest(),
        agent_settings=spec.agent.settings(),
        plugins_digest=spec.plugins_digest,
        timings=timings or {},
        node=node,
        **(outcome or TrialOutcome()).result_fields(),
    )
