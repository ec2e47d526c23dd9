"""The execution kind: a pinned repository (or the task's image), a sandbox, an agent,
the verifiers.

Its tasks come from task sources (`sources`: scenario files, Harbor task folders,
SWE-bench instances); each is an `ExecutionTask` (`task`): a git scenario
(`scenarios`) or an image task (`images`), which the kind, its shipping, evidence,
verdicts and reports treat alike. docs/architecture.md walks through its phases.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from hangar.agents import AgentSpec, sandbox_agents
from hangar.files import tree_digest
from hangar.kinds.execution.images.task import ImageTask
from hangar.kinds.execution.scenarios.fixtures import Registry, read_registry
from hangar.kinds.execution.scenarios.scenario import LoadedScenario
from hangar.kinds.execution.settings import ExecutionSettings
from hangar.kinds.execution.sources import source_of
from hangar.kinds.execution.task import ExecutionTask, execution_task
from hangar.models import ModelSpec
from hangar.results import TrialResult
from hangar.sandbox.config import BackendConfig
from hangar.store import ResultsStore
from hangar.trials.boundary import TrialRun
from hangar.trials.kind import (
    About,
    Failure,
    Fetch,
    Kind,
    Matrix,
    Put,
    SweepSettings,
    ViewSettings,
)
from hangar.trials.spec import Arm, Task, TrialSpec, new_spec


def plugin_bytes_digest(loaded: ExecutionTask, arm: Arm) -> str:
    """sha256 over the selected plugins' names and bytes (an image task has none)."""
    parts = []
    for name in sorted(arm.plugins):
        source = loaded.plugin_source(name)
        parts.append([name, "absent" if source is None else tree_digest(source)])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _registry(path: str | Path | None) -> Registry | None:
    """The fixture registry at `path`, read once per version of the file."""
    if not path:
        return None
    st = Path(path).stat() if Path(path).is_file() else None
    return _read_registry(str(path), st.st_mtime_ns if st else 0, st.st_size if st else 0)


@functools.lru_cache(maxsize=8)
def _read_registry(path: str, mtime_ns: int, size: int) -> Registry:
    return read_registry(Path(path))


def single_trial(
    loaded: ExecutionTask,
    agent: AgentSpec,
    arm: Arm,
    *,
    model: ModelSpec | str = "none",
    repeat: int = 0,
    sweep: str | None = None,
    backend: str | BackendConfig = "docker",
    evidence_url: str | None = None,
) -> TrialSpec:
    """The spec of one trial of a scenario in `arm` (in `sweep`, or on its own)."""
    plugins = plugin_bytes_digest(loaded, arm)
    return new_spec(
        loaded,
        agent,
        model,
        arm=arm.name,
        key_arm=[arm.name, plugins],
        repeat=repeat,
        plugins=arm.plugins,
        plugins_digest=plugins,
        sweep=sweep,
        backend=backend,
        evidence_url=evidence_url,
    )


class ExecutionKind(Kind):
    """Execution scenarios (see the module docstring)."""

    name = "execution"
    title = "execution scenarios"
    sandboxed = True
    view_template = "execution/view.html"
    settings_model = ExecutionSettings
    cli = (
        ("scenario", "hangar.kinds.execution.scenarios.cli"),
        ("task", "hangar.kinds.execution.harbor.cli"),
        ("dataset", "hangar.kinds.execution.dataset_cli"),
    )

    def title_of(self, task: Task | None) -> str:
        """Scenarios, Harbor tasks or SWE-bench instances."""
        return (execution_task(task).sweep_title() if task is not None else None) or self.title

    def recognizes(self, path: Path, data: Any) -> bool:
        """A file one of the task sources reads."""
        return source_of(path, data) is not None

    def load(self, path: Path, data: Any, settings: SweepSettings) -> list[Task]:
        """The scenarios of the file, through its task source (bound to the sweep's fixture
        registry when it has one)."""
        source = source_of(path, data)
        assert source is not None
        return list(source.load(path, data, _registry(settings.of(ExecutionSettings).fixtures)))

    schemes = ("registry",)
    exports = (
        ("harbor-job", "hangar.kinds.execution.exports.harbor_job:export"),
        ("swebench-submission", "hangar.kinds.execution.exports.swebench_submission:export"),
    )

    def resolve(self, scheme: str, value: str) -> tuple[Path, dict[str, Any]]:
        """``registry:NAME@VERSION``: the pulled dataset's tasks, each checked against its
        lock, and the lock (`hangar.kinds.execution.harbor.registry`)."""
        from hangar.kinds.execution.harbor.registry import locate

        folder, lock = locate(value)
        return folder, lock.model_dump(mode="json")

    def admit(self, settings: SweepSettings, ids: set[str]) -> None:
        """A fixture registry's case ids are all scenarios of the sweep."""
        registry = _registry(settings.of(ExecutionSettings).fixtures)
        if registry is not None:
            registry.admit(ids)

    def unready(self, tasks: list[Task], store: ResultsStore) -> dict[str, tuple[str, str]]:
        """Image tasks broken or never validated (`hangar dataset validate`)."""
        from hangar.kinds.execution.images.validate import validated_tasks

        return {v.digest: (v.status, v.reason) for v in validated_tasks(tasks, store).left_out}

    def configure(self, task: Task, settings: SweepSettings) -> Task:
        """An image task with the sweep's image map, reward threshold, repositories,
        networks and registry."""
        return execution_task(task).for_sweep(settings.of(ExecutionSettings), settings.registry)

    def agents(self, matrix: Matrix) -> list[AgentSpec]:
        """Command, chat and reference agents."""
        return sandbox_agents(matrix.agents)

    def arms(self, task: Task | None, matrix: Matrix) -> list[Arm]:
        """The sweep's arms."""
        return list(matrix.arms)

    def spec(
        self, task: Task, agent: AgentSpec, arm: Arm, model: ModelSpec, repeat: int, m: Matrix
    ) -> TrialSpec:
        """`single_trial` in the sweep."""
        return single_trial(
            execution_task(task),
            agent,
            arm,
            model=model,
            repeat=repeat,
            sweep=m.id,
            backend=m.backend,
            evidence_url=m.evidence_url,
        )

    def runner(self, spec: TrialSpec) -> TrialRun:
        """The execution trial (of a git scenario, or of an image task)."""
        return execution_task(spec.task).trial(spec)

    def problems(self, task: Task, matrix: Matrix, *, deep: bool) -> list[str]:
        """The task's admission in each arm (a scenario's: `scenarios.fixture_checks`)."""
        return execution_task(task).problems(matrix, deep=deep)

    def image(self, task: Task) -> str | None:
        """The image a scenario names (an image task's is built or looked up by its trial,
        which is blocked_setup naming it when it is missing: None)."""
        return execution_task(task).fixed_image()

    def host_services(self, task: Task) -> tuple[str, ...]:
        """The sweep's `network: host_services`, for an image task (its allowlist's way to
        the worker's own services)."""
        return execution_task(task).worker_services()

    def shipper(self, put: Put) -> Any:
        """Each scenario's files and local repository, once."""
        from hangar.kinds.execution.shipping import Shipper

        return Shipper(put)

    def localise(self, spec: TrialSpec, shipped: Any, fetch: Fetch, cache: Path) -> TrialSpec:
        """The scenario unpacked on this node."""
        from hangar.kinds.execution.shipping import localise

        return localise(spec, shipped, fetch, cache)

    def view(self, result: TrialResult, evidence: Path | None, settings: ViewSettings) -> Any:
        """The diff, the verifier commands, the host verifier's output."""
        from hangar.kinds.execution.view import section

        return section(evidence)

    def about(self, evidence: Path) -> About:
        """The task text, repository, revision and image the trial ran."""
        from hangar.kinds.execution.view import about

        return about(evidence)

    def failures(self, evidence: Path) -> list[Failure]:
        """The failing verifier commands (or test script), each with its output's end."""
        from hangar.kinds.execution.view import failures

        return failures(evidence)


KIND = ExecutionKind()

__all__ = [
    "KIND",
    "ExecutionTask",
    "ImageTask",
    "LoadedScenario",
    "plugin_bytes_digest",
    "single_trial",
]
