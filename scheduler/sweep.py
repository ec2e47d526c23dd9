"""Sweep files and their lazy expansion into trials.

A sweep is scenarios x agents x models x arms x repeats. Scenarios are loaded (and
digested) once; trials are generated one at a time, in an order that cycles through
models fastest so that per-model caps rarely stall the driver.

```yaml
id: statkit-demo                  # default: the file's stem
scenarios: [median/scenario.yaml, "suites/core/*.yaml", suites/extra/]   # globs or suites
agents_file: agents.yaml          # and/or inline `agents: {name: {command: ...}}`
models: [none]
arms: {control: [], skill: [tdd]}
repeats: 1
backend: docker
store: sqlite:///runs/hangar.db   # or postgresql+psycopg://...
evidence: file://runs/evidence    # or s3://bucket/prefix
concurrency: {sandbox_slots: 2, max_in_flight: null, per_model: {}}
retry: {infra_retries: 2, backoff_s: 2, backoff_max_s: 60}
```
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import itertools
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hangar.agents import AgentSpec, PromptAgent, load_agents, parse_agent
from hangar.errors import ConfigError, HangarError
from hangar.files import read_yaml
from hangar.kinds.decision.cases import (
    CONTROL_ARM,
    SKILL_ARM,
    LoadedCase,
    is_decision_suite,
    load_decision_suite,
)
from hangar.kinds.execution.scenario import LoadedScenario, load_scenario
from hangar.kinds.execution.sealing import sealed_suite_of
from hangar.kinds.execution.sealing import verify as verify_suite
from hangar.kinds.knowledge.questions import LoadedQuestion
from hangar.kinds.rubric.benchmark import LoadedSample
from hangar.models import ModelSpec
from hangar.results import TrialResult, Verdict
from hangar.sandbox.config import BackendConfig, DockerConfig
from hangar.trials import (
    Arm,
    TrialSpec,
    case_trial,
    question_trial,
    sample_trial,
    single_trial,
)
from hangar.validation import Name, validation_message


class Concurrency(BaseModel):
    """How many trials run at once."""

    model_config = ConfigDict(extra="forbid")

    sandbox_slots: int = Field(default=2, gt=0)
    """Sandboxes per node (the ``hangar_sandbox`` resource of an embedded Ray node)."""
    max_in_flight: int | None = Field(default=None, gt=0)
    """Trials submitted at once (default: twice the cluster's sandbox slots)."""
    per_model: dict[str, int] = Field(default_factory=dict)
    """In-flight cap per model id."""


class RetryPolicy(BaseModel):
    """Retries of infra_error trials (agent and verifier outcomes are never retried)."""

    model_config = ConfigDict(extra="forbid")

    infra_retries: int = Field(default=2, ge=0)
    """Extra attempts after an infra_error."""
    backoff_s: float = Field(default=2.0, ge=0)
    """Wait before the first retry; doubles each time."""
    backoff_max_s: float = Field(default=60.0, ge=0)
    """Longest wait between attempts."""
    node_retries: int = Field(default=3, ge=0)
    """Ray re-runs of a task whose worker or node died."""

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before `attempt` (2 is the first retry)."""
        return float(min(self.backoff_max_s, self.backoff_s * 2.0 ** max(0, attempt - 2)))


class SweepFile(BaseModel):
    """A sweep file as written (paths relative to it)."""

    model_config = ConfigDict(extra="forbid")

    id: Name | None = None
    """Sweep id; resume and the store key on it (default: the file's stem)."""
    scenarios: list[str]
    """Scenario files, globs or suite folders."""
    agents: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Inline agents: name -> config."""
    agents_file: str | None = None
    """A YAML file of agents (name -> config)."""
    models: list[ModelSpec] = Field(default_factory=lambda: [ModelSpec(id="none")])
    """Models: ids, or full specs (see `hangar.models`); ``none`` for no model."""
    budget_usd: float | None = Field(default=None, gt=0)
    """Stop scheduling new trials once this much has been spent (this run and earlier)."""
    arms: dict[str, list[str]] = Field(default_factory=lambda: {"control": list[str]()})
    """Arm name -> the scenario plugins it installs."""
    repeats: int = Field(default=1, gt=0)
    """Trials per (scenario, agent, model, arm)."""
    backend: BackendConfig = Field(default_factory=DockerConfig)
    """Sandbox backend and its settings: ``docker``, or ``{kind: kubernetes, namespace:
    ..., runtime_class: gvisor}`` (see `hangar.sandbox.config`)."""
    store: str | None = None
    """Results store URL (default: sqlite under the runs folder)."""
    evidence: str | None = None
    """Evidence store URL (default: file:// under the runs folder)."""
    evidence_endpoint: str | None = None
    """S3 endpoint URL (MinIO, Ceph, a local server); default from the AWS settings."""
    concurrency: Concurrency = Field(default_factory=Concurrency)
    """Slots, window and caps."""
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    """Retries of infrastructure failures."""


class UnloadableScenario(BaseModel):
    """A scenario file of the sweep that does not load: its trials are ``blocked_setup``
    rows (keyed on its path and bytes), counted and listed, never silently left out."""

    path: Path
    """The file."""
    scenario_id: str
    """Its ``id`` when the YAML has one, else its path relative to the sweep file."""
    digest: str
    """sha256 of its path and bytes: a fixed file is a new scenario."""
    suite: str = ""
    """Its suite."""
    error: str
    """Why it does not load."""
    kind: Literal["execution", "prompt"] = "execution"
    """``prompt`` for a decision suite (``kind: decision``) that does not load."""


class Sweep(BaseModel):
    """A loaded sweep: scenarios digested, agents and arms validated."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    """Sweep id."""
    path: Path | None
    """The sweep file."""
    config: SweepFile
    """The file's content."""
    scenarios: list[LoadedScenario]
    """The execution scenarios, in file order."""
    agents: dict[str, AgentSpec]
    """Agents by name."""
    arms: list[Arm]
    """Arms (of execution scenarios; decision cases run in ``skill`` and ``control``)."""
    cases: list[LoadedCase] = Field(default_factory=list)
    """The cases of the decision suites, in file order."""
    samples: list[LoadedSample] = Field(default_factory=list)
    """Benchmark samples (`hangar benchmark run` builds its sweep of them)."""
    questions: list[LoadedQuestion] = Field(default_factory=list)
    """Knowledge questions (`hangar knowledge run` builds its sweep of them)."""
    knowledge_arm: str = "baseline-repo-search"
    """The arm the questions run in."""
    unloadable: list[UnloadableScenario] = Field(default_factory=list)
    """Scenario files that could not be loaded (their trials are blocked_setup rows)."""

    @property
    def execution_agents(self) -> list[AgentSpec]:
        """The agents that run execution scenarios (command and chat)."""
        return [a for a in self.agents.values() if not isinstance(a, PromptAgent)]

    @property
    def prompt_agents(self) -> list[AgentSpec]:
        """The agents that answer decision cases (the default one when none is named)."""
        named: list[AgentSpec] = [a for a in self.agents.values() if isinstance(a, PromptAgent)]
        return named or [PromptAgent()]

    def _shape(self, kind: str) -> tuple[list[AgentSpec], list[Arm]]:
        """The agents and arms of a kind of task."""
        if kind == "prompt":
            return self.prompt_agents, [Arm(name=SKILL_ARM), Arm(name=CONTROL_ARM)]
        if kind == "rubric":
            return self.prompt_agents, [Arm(name=SKILL_ARM)]
        if kind == "knowledge":
            return self.execution_agents, [Arm(name=self.knowledge_arm)]
        return self.execution_agents, self.arms

    @property
    def size(self) -> int:
        """Number of trials in the matrix (those of unloadable files included)."""
        c = self.config
        tasks = [*(s.kind for s in self.scenarios), *(k.kind for k in self.cases)]
        tasks += [sample.kind for sample in self.samples]
        tasks += [question.kind for question in self.questions]
        tasks += [bad.kind for bad in self.unloadable]
        per_kind = {
            kind: len(self._shape(kind)[0]) * len(self._shape(kind)[1]) for kind in set(tasks)
        }
        return sum(per_kind[kind] for kind in tasks) * len(c.models) * c.repeats

    def margins(self) -> list[float | None]:
        """The margins (points) the sweep's decision suites declare."""
        return [case.margin for case in self.cases]

    def narrowed(self, pattern: str | None = None, repeats: int | None = None) -> Sweep:
        """Only the scenarios and cases whose id matches `pattern` (a regular expression,
        searched), and `repeats` repeats (`hangar run --filter --repeat`)."""
        update: dict[str, Any] = {}
        if pattern is not None:
            try:
                found = re.compile(pattern).search
            except re.error as exc:
                raise ConfigError(
                    f"--filter {pattern!r} is not a regular expression: {exc}"
                ) from None
            update["scenarios"] = [s for s in self.scenarios if found(s.id)]
            update["cases"] = [c for c in self.cases if found(c.id)]
            update["unloadable"] = [u for u in self.unloadable if found(u.scenario_id)]
        if repeats is not None:
            update["config"] = self.config.model_copy(update={"repeats": repeats})
        return self.model_copy(update=update)

    def blocked_results(self) -> Iterator[TrialResult]:
        """The blocked_setup result of every trial of an unloadable scenario file."""
        c = self.config
        now = datetime.now(UTC)
        for bad in self.unloadable:
            agents, arms = self._shape(bad.kind)
            for repeat, arm, agent, model in itertools.product(
                range(c.repeats), arms, agents, c.models
            ):
                payload = [
                    bad.digest,
                    agent.digest(),
                    model.id,
                    arm.name,
                    list(arm.plugins),
                    repeat,
                ]
                yield TrialResult(
                    sweep=self.id,
                    trial_key=hashlib.sha256(json.dumps(payload).encode()).hexdigest(),
                    scenario_id=bad.scenario_id,
                    scenario_digest=bad.digest,
                    suite=bad.suite,
                    agent=agent.name,
                    model=model.id,
                    arm=arm.name,
                    repeat=repeat,
                    verdict=Verdict.BLOCKED_SETUP,
                    reason=f"the scenario file {bad.path} does not load: {bad.error}",
                    agent_digest=agent.digest(),
                    agent_settings=agent.settings(),
                    started_at=now,
                    finished_at=now,
                )

    def trials(self, evidence_url: str) -> Iterator[TrialSpec]:
        """The sweep's trials, lazily; models vary fastest, repeats slowest."""
        c = self.config
        for repeat in range(c.repeats):
            for question in self.questions:
                for agent in self.execution_agents:
                    for model in c.models:
                        yield question_trial(
                            question,
                            agent,
                            self.knowledge_arm,
                            model=model,
                            backend=c.backend,
                            sweep=self.id,
                            evidence_url=evidence_url,
                        )
            for sample in self.samples:
                for agent in self.prompt_agents:
                    for model in c.models:
                        yield sample_trial(
                            sample,
                            agent,
                            model=model,
                            repeat=repeat,
                            sweep=self.id,
                            evidence_url=evidence_url,
                        )
            for case in self.cases:
                for arm_name in (SKILL_ARM, CONTROL_ARM):
                    for agent in self.prompt_agents:
                        for model in c.models:
                            yield case_trial(
                                case,
                                agent,
                                arm_name,
                                model=model,
                                repeat=repeat,
                                sweep=self.id,
                                evidence_url=evidence_url,
                            )
            for loaded in self.scenarios:
                for arm in self.arms:
                    for agent in self.execution_agents:
                        for model in c.models:
                            yield single_trial(
                                loaded,
                                agent,
                                arm,
                                model=model,
                                repeat=repeat,
                                sweep=self.id,
                                backend=c.backend,
                                evidence_url=evidence_url,
                            )


def _scenario_files(base: Path, patterns: list[str]) -> dict[Path, str]:
    """Scenario files -> the suite folder's name they were found in ('' for files)."""
    files: dict[Path, str] = {}
    for pattern in patterns:
        target = base / pattern
        suite = ""
        if target.is_dir():  # a suite: its scenario.yaml and *.scenario.yaml files
            suite = target.resolve().name
            found = sorted({*target.rglob("scenario.yaml"), *target.rglob("*.scenario.yaml")})
        else:
            # glob.glob, not Path.glob: a pattern may be absolute
            found = sorted(Path(p) for p in glob.glob(str(target), recursive=True))  # noqa: PTH207
        if not found:
            raise ConfigError(f"scenarios: {pattern!r} matches no file (relative to {base})")
        for p in found:
            files.setdefault(p.resolve(), suite)
    return files


def load_sweep(path: Path) -> Sweep:
    """Load and validate a sweep file; errors name the file and the field."""
    path = path.resolve()
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a sweep file must be a YAML mapping")
    try:
        config = SweepFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            validation_message(str(path), "sweep", exc, path.read_text(errors="replace"))
        ) from None
    base = path.parent
    agents: dict[str, AgentSpec] = {}
    if config.agents_file:
        agents.update(load_agents(base / config.agents_file))
    for name, cfg in config.agents.items():
        agents[name] = parse_agent(name, cfg, str(path), base)
    if not config.models:
        raise ConfigError(f"{path}: `models` is empty")
    try:
        arms = [Arm(name=name, plugins=tuple(plugins)) for name, plugins in config.arms.items()]
    except ValidationError as exc:
        raise ConfigError(f"{path}: arms: {exc.errors()[0]['msg']}") from None
    if not arms:
        raise ConfigError(f"{path}: `arms` is empty (use `control: []` for no plugins)")
    scenarios: list[LoadedScenario] = []
    cases: list[LoadedCase] = []
    unloadable: list[UnloadableScenario] = []
    seen: dict[str, Path] = {}
    files = _scenario_files(base, config.scenarios)
    checked: set[Path] = set()
    for file in list(files):  # a sealed suite that no longer matches is refused outright
        sealed = sealed_suite_of(file, base)
        if sealed is None:
            continue
        files[file] = sealed.name
        if sealed not in checked:
            checked.add(sealed)
            if broken := verify_suite(sealed):
                raise ConfigError(
                    f"sealed suite {sealed} does not match its manifest:\n  " + "\n  ".join(broken)
                )
    for file, suite in files.items():
        try:
            found = _load_tasks(file)
        except HangarError as exc:
            unloadable.append(_unloadable(file, base, suite, str(exc)))
            continue
        for task in found:
            if task.id in seen:
                # Seed 001: "Unknown and duplicate case IDs fail fixture admission."
                raise ConfigError(
                    f"{path}: two scenarios have the id {task.id!r}: {seen[task.id]} and {file} "
                    "(ids must be unique in a sweep; give one of them another id)"
                )
            seen[task.id] = file
            if isinstance(task, LoadedScenario):
                scenarios.append(task.model_copy(update={"suite": suite}))
            else:
                cases.append(task)
    sweep = Sweep(
        id=config.id or path.stem,
        path=path,
        config=config,
        scenarios=scenarios,
        agents=agents,
        arms=arms,
        cases=cases,
        unloadable=unloadable,
    )
    if scenarios and not sweep.execution_agents:
        raise ConfigError(
            f"{path}: no agents for its scenarios: give `agents` or `agents_file` "
            "(command or chat agents; prompt agents answer decision suites only)"
        )
    return sweep


def _load_tasks(file: Path) -> list[LoadedScenario] | list[LoadedCase]:
    """A scenario file's scenario, or a decision suite's cases."""
    data = read_yaml(file)
    if is_decision_suite(data):
        return load_decision_suite(file, data)
    return [load_scenario(file)]


def _unloadable(file: Path, base: Path, suite: str, error: str) -> UnloadableScenario:
    """What is known of a scenario file that does not load."""
    data = file.read_bytes() if file.is_file() else b""
    try:
        rel = file.relative_to(base).as_posix()
    except ValueError:
        rel = str(file)
    sid = rel
    kind: Literal["execution", "prompt"] = "execution"
    with contextlib.suppress(Exception):
        parsed = yaml.safe_load(data)
        if isinstance(parsed, dict) and isinstance(parsed.get("id"), str) and parsed["id"]:
            sid = parsed["id"]
        if is_decision_suite(parsed):
            kind = "prompt"
    digest = hashlib.sha256(rel.encode() + b"\0" + data).hexdigest()
    return UnloadableScenario(
        path=file, scenario_id=sid, digest=digest, suite=suite, error=error, kind=kind
    )
