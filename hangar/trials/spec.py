"""What a trial is: its arm, its key, the spec a worker runs, and the result it makes.

A trial is one (scenario digest, agent, model, arm, repeat). Its key is a sha256 of
those, the arm standing for its name and the bytes of the plugins it selects, so a
changed plugin or agent config is a new trial while a rerun of the same one is not.
Resume means: skip trial keys that already have a final verdict.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from hangar.agents import AgentSpec
from hangar.files import tree_digest
from hangar.kinds.decision.cases import SKILL_ARM, LoadedCase
from hangar.kinds.execution.scenario import LoadedScenario
from hangar.kinds.knowledge.questions import LoadedQuestion
from hangar.kinds.rubric.benchmark import LoadedSample
from hangar.models import ModelSpec
from hangar.paths import default_evidence_url
from hangar.results import TrialResult, Verdict
from hangar.sandbox.config import BackendConfig
from hangar.validation import Name


class Arm(BaseModel):
    """A named selection of a scenario's plugins (``control`` selects none)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Name
    """Arm name, e.g. ``skill`` or ``control``."""
    plugins: tuple[str, ...] = ()
    """Names of the scenario plugins this arm installs."""

    @classmethod
    def parse(cls, text: str) -> Arm:
        """``NAME`` or ``NAME=plugin1,plugin2`` (a bare name selects no plugin)."""
        name, _, plugins = text.partition("=")
        return cls(name=name, plugins=tuple(p for p in plugins.split(",") if p))


def plugin_bytes_digest(loaded: LoadedScenario, arm: Arm) -> str:
    """sha256 over the selected plugins' names and bytes."""
    parts = []
    for name in sorted(arm.plugins):
        try:
            source = loaded.local(loaded.scenario.plugin(name).source)
            parts.append([name, tree_digest(source)])
        except KeyError:
            parts.append([name, "absent"])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def trial_key(
    loaded: LoadedScenario,
    agent: AgentSpec,
    model: str,
    arm: Arm,
    repeat: int,
    *,
    plugins: str | None = None,
) -> str:
    """The trial key (see the module docstring); `plugins` is the arm's
    `plugin_bytes_digest` when the caller has it already."""
    payload = {
        "scenario": loaded.digest,
        "agent": agent.digest(),
        "model": model,
        "arm": [arm.name, plugins or plugin_bytes_digest(loaded, arm)],
        "repeat": repeat,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class TrialSpec(BaseModel):
    """Everything a worker needs to run one trial attempt."""

    model_config = ConfigDict(frozen=True)

    sweep: str = "adhoc"
    """Sweep id."""
    trial_key: str
    """The trial's key (see `trial_key`)."""
    scenario: Annotated[
        LoadedScenario | LoadedCase | LoadedSample | LoadedQuestion, Field(discriminator="kind")
    ]
    """What the trial runs: an execution scenario, a decision case, a benchmark sample or a
    knowledge question, loaded and digested."""
    agent: AgentSpec
    """The agent."""
    model: str = "none"
    """Model id."""
    model_spec: ModelSpec | None = None
    """How to reach the model (None: an agent that calls none)."""
    arm: str = "control"
    """Arm name."""
    plugins: tuple[str, ...] = ()
    """Plugins the arm installs."""
    plugins_digest: str = ""
    """sha256 of those plugins' names and bytes (see `plugin_bytes_digest`)."""
    repeat: int = 0
    """Repeat index."""
    attempt: int = 1
    """Attempt number."""
    backend: str = "docker"
    """Sandbox backend."""
    backend_config: BackendConfig | None = None
    """The sweep's settings of that backend (None: its defaults)."""
    evidence_url: str
    """Evidence store URL (``file://DIR``)."""
    work_root: Path | None = None
    """Node-local folder for per-trial folders (default: the worker's cache/trials)."""
    cache_root: Path | None = None
    """Node-local cache of repository mirrors (default: the worker's cache folder)."""
    node: str = ""
    """Where the trial runs (set by the worker: host name and Ray node id)."""


def _backend(backend: str | BackendConfig) -> dict[str, Any]:
    """A spec's backend fields from a backend's name or its settings."""
    if isinstance(backend, str):
        return {"backend": backend}
    return {"backend": backend.kind, "backend_config": backend}


def single_trial(
    loaded: LoadedScenario,
    agent: AgentSpec,
    arm: Arm,
    *,
    model: ModelSpec | str = "none",
    repeat: int = 0,
    sweep: str | None = None,
    backend: str | BackendConfig = "docker",
    evidence_url: str | None = None,
) -> TrialSpec:
    """The spec of one trial, with the node's default folders (a sweep's, or on its own).

    Without a sweep id each call gets its own (``adhoc-<UTC time>``), so running the
    same trial again never overwrites the evidence of an earlier run.
    """
    spec = ModelSpec.model_validate(model)
    plugins = plugin_bytes_digest(loaded, arm)
    return TrialSpec(
        sweep=sweep or datetime.now(UTC).strftime("adhoc-%Y%m%dT%H%M%S.%fZ"),
        trial_key=trial_key(loaded, agent, spec.id, arm, repeat, plugins=plugins),
        plugins_digest=plugins,
        scenario=loaded,
        agent=agent,
        model=spec.id,
        model_spec=spec,
        arm=arm.name,
        plugins=arm.plugins,
        repeat=repeat,
        **_backend(backend),
        evidence_url=evidence_url or default_evidence_url(),
    )


def case_trial(
    case: LoadedCase,
    agent: AgentSpec,
    arm: str,
    *,
    model: ModelSpec | str,
    repeat: int = 0,
    sweep: str | None = None,
    evidence_url: str | None = None,
) -> TrialSpec:
    """The spec of one decision case in arm ``skill`` (the skill and its references are
    supplied) or ``control`` (neither); the supplied bytes stand for the arm's plugins."""
    spec = ModelSpec.model_validate(model)
    supplied = [case.skill, *case.references] if arm == SKILL_ARM and case.skill else []
    plugins = hashlib.sha256(json.dumps([[f.path, f.sha256] for f in supplied]).encode())
    payload = {
        "case": case.digest,
        "agent": agent.digest(),
        "model": spec.id,
        "arm": [arm, plugins.hexdigest()],
        "repeat": repeat,
    }
    return TrialSpec(
        sweep=sweep or datetime.now(UTC).strftime("adhoc-%Y%m%dT%H%M%S.%fZ"),
        trial_key=hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest(),
        plugins_digest=plugins.hexdigest(),
        scenario=case,
        agent=agent,
        model=spec.id,
        model_spec=spec,
        arm=arm,
        plugins=(case.case.skill,) if arm == SKILL_ARM else (),
        repeat=repeat,
        backend="none",
        evidence_url=evidence_url or default_evidence_url(),
    )


def sample_trial(
    sample: LoadedSample,
    agent: AgentSpec,
    *,
    model: ModelSpec | str,
    repeat: int = 0,
    sweep: str | None = None,
    evidence_url: str | None = None,
) -> TrialSpec:
    """The spec of one benchmark sample, in arm ``skill`` (its phase's skill writes it)."""
    spec = ModelSpec.model_validate(model)
    payload = {"sample": sample.digest, "agent": agent.digest(), "model": spec.id, "repeat": repeat}
    return TrialSpec(
        sweep=sweep or datetime.now(UTC).strftime("adhoc-%Y%m%dT%H%M%S.%fZ"),
        trial_key=hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest(),
        plugins_digest=(sample.skill.sha256 if sample.skill else "").removeprefix("sha256:"),
        scenario=sample,
        agent=agent,
        model=spec.id,
        model_spec=spec,
        arm=SKILL_ARM,
        plugins=(sample.phase,),
        repeat=repeat,
        backend="none",
        evidence_url=evidence_url or default_evidence_url(),
    )


def question_trial(
    question: LoadedQuestion,
    agent: AgentSpec,
    arm: str,
    *,
    model: ModelSpec | str,
    backend: str | BackendConfig = "docker",
    sweep: str | None = None,
    evidence_url: str | None = None,
) -> TrialSpec:
    """The spec of one knowledge question in the repo-search arm `arm`."""
    spec = ModelSpec.model_validate(model)
    payload = {"question": question.digest, "agent": agent.digest(), "model": spec.id, "arm": arm}
    return TrialSpec(
        sweep=sweep or datetime.now(UTC).strftime("adhoc-%Y%m%dT%H%M%S.%fZ"),
        trial_key=hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest(),
        scenario=question,
        agent=agent,
        model=spec.id,
        model_spec=spec,
        arm=arm,
        **_backend(backend),
        evidence_url=evidence_url or default_evidence_url(),
    )


def result_of(
    spec: TrialSpec,
    verdict: Verdict,
    reason: str,
    started_at: datetime,
    finished_at: datetime,
    **outcome: Any,
) -> TrialResult:
    """The result of `spec`'s attempt: its identity, the verdict, and what else it knows."""
    return TrialResult(
        sweep=spec.sweep,
        trial_key=spec.trial_key,
        scenario_id=spec.scenario.id,
        scenario_digest=spec.scenario.digest,
        suite=spec.scenario.suite,
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
        **outcome,
    )
