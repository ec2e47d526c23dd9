"""The routing kind: which skills an agent loads by itself, against a golden set (routing
suites).

A case is a prompt and the skills it must and must not load. `suite` loads and digests a
suite and checks its golden consistency offline; `trial` installs the suite's catalog where
the agent finds skills natively, runs the agent on the prompt in a sandbox with the network
off and grades the route its session shows (`grading`); `history` keeps the routes people's
real sessions took, apart from every live score.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hangar.agents import AgentSpec, sandbox_agents
from hangar.kinds.routing.suite import (
    CATALOG_ARM,
    LoadedRoutingCase,
    is_routing_suite,
    load_routing_suite,
)
from hangar.models import ModelSpec
from hangar.results import TrialResult
from hangar.sandbox.config import BackendConfig
from hangar.trials.boundary import TrialRun
from hangar.trials.kind import About, Kind, Matrix, SweepSettings, ViewSettings
from hangar.trials.spec import Arm, Task, TrialSpec, new_spec


def routing_trial(
    case: LoadedRoutingCase,
    agent: AgentSpec,
    *,
    model: ModelSpec | str,
    repeat: int = 0,
    sweep: str | None = None,
    backend: str | BackendConfig = "docker",
    evidence_url: str | None = None,
) -> TrialSpec:
    """The spec of one routing case (the whole catalog installed: the arm ``catalog``,
    whose plugins are the catalog's skills and bytes)."""
    return new_spec(
        case,
        agent,
        model,
        arm=CATALOG_ARM,
        key_arm=[CATALOG_ARM, case.catalog_digest],
        repeat=repeat,
        plugins=tuple(sorted(case.skill_names)),
        plugins_digest=case.catalog_digest,
        sweep=sweep,
        backend=backend,
        evidence_url=evidence_url,
    )


class RoutingKind(Kind):
    """Routing cases (see the module docstring)."""

    name = "routing"
    title = "routing cases"
    sandboxed = True
    view_template = "routing/view.html"
    cli = (("routing", "hangar.kinds.routing.cli"),)

    def recognizes(self, path: Path, data: Any) -> bool:
        """A suite file (``kind: routing``)."""
        return is_routing_suite(data)

    def load(self, path: Path, data: Any, settings: SweepSettings) -> list[Task]:
        """The suite's cases."""
        return list(load_routing_suite(path, data))

    def agents(self, matrix: Matrix) -> list[AgentSpec]:
        """Command, chat and reference agents."""
        return sandbox_agents(matrix.agents)

    def arms(self, task: Task | None, matrix: Matrix) -> list[Arm]:
        """``catalog``: every case runs with the whole catalog installed."""
        return [Arm(name=CATALOG_ARM)]

    def spec(
        self, task: Task, agent: AgentSpec, arm: Arm, model: ModelSpec, repeat: int, m: Matrix
    ) -> TrialSpec:
        """`routing_trial` in the sweep."""
        assert isinstance(task, LoadedRoutingCase)
        return routing_trial(
            task,
            agent,
            model=model,
            repeat=repeat,
            sweep=m.id,
            backend=m.backend,
            evidence_url=m.evidence_url,
        )

    def problems(self, task: Task, matrix: Matrix, *, deep: bool) -> list[str]:
        """What makes the case blocked (a catalog skill unreadable, an unknown skill)."""
        assert isinstance(task, LoadedRoutingCase)
        return [f"{task.id} (routing case): {p}" for p in task.problems]

    def image(self, task: Task) -> str | None:
        """The suite's sandbox image."""
        assert isinstance(task, LoadedRoutingCase)
        return task.image

    def runner(self, spec: TrialSpec) -> TrialRun:
        """The routing trial."""
        from hangar.kinds.routing.trial import RoutingTrial

        return RoutingTrial(spec)

    def view(self, result: TrialResult, evidence: Path | None, settings: ViewSettings) -> Any:
        """The golden set, the route and each load."""
        from hangar.kinds.routing.view import section

        return section(result, evidence)

    def about(self, evidence: Path) -> About:
        """The prompt and the catalog the trial ran with."""
        from hangar.kinds.routing.view import about

        return about(evidence)


KIND = RoutingKind()

__all__ = ["KIND", "LoadedRoutingCase", "routing_trial"]
