"""The knowledge kind: sealed questions answered with citations, judged by people's
labels (knowledge gold sets).

`custody` seals a suite (canaries, the manifest) and keeps its arms' answers and labels;
`questions` turns a sealed suite into tasks of the repo-search arm, which `trial` runs
read-only in a sandbox; `scoring` and `report` decide from the labels (majority,
citation kinds, kappa, the paired rule and the kept baseline); `run` runs the arm.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hangar.agents import AgentSpec, sandbox_agents
from hangar.kinds.knowledge.questions import LoadedQuestion
from hangar.models import ModelSpec
from hangar.results import TrialResult
from hangar.sandbox.config import BackendConfig
from hangar.trials.boundary import TrialRun
from hangar.trials.kind import Kind, KindPage, Matrix, ViewSettings
from hangar.trials.spec import Arm, Task, TrialSpec, new_spec


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
    return new_spec(
        question,
        agent,
        model,
        arm=arm,
        key_arm=arm,
        repeat=None,
        sweep=sweep,
        backend=backend,
        evidence_url=evidence_url,
    )


class KnowledgeKind(Kind):
    """Knowledge questions in the repo-search arm (see the module docstring)."""

    name = "knowledge"
    title = "knowledge questions"
    sandboxed = True
    view_template = "knowledge/view.html"
    cli = (("knowledge", "hangar.kinds.knowledge.cli"),)
    unscored_note = "a knowledge answer is scored from people's labels"
    pages = (
        KindPage(
            "/knowledge/{name}",
            "knowledge/suite.html",
            lambda params, query, settings: _suite_page(params, query, settings),
        ),
        KindPage(
            "/knowledge/{name}/label",
            "knowledge/label.html",
            lambda params, query, settings: _label_page(params, query, settings),
            lambda params, form, settings: _save_label(params, form, settings),
        ),
    )

    def agents(self, matrix: Matrix) -> list[AgentSpec]:
        """Chat agents (with read tools)."""
        return sandbox_agents(matrix.agents)

    def arms(self, task: Task | None, matrix: Matrix) -> list[Arm]:
        """The arm the question is asked in."""
        return [Arm(name=task.arm)] if isinstance(task, LoadedQuestion) else []

    def spec(
        self, task: Task, agent: AgentSpec, arm: Arm, model: ModelSpec, repeat: int, m: Matrix
    ) -> TrialSpec:
        """`question_trial` in the sweep (a question has no repeats: one answer per arm)."""
        assert isinstance(task, LoadedQuestion)
        return question_trial(
            task,
            agent,
            arm.name,
            model=model,
            backend=m.backend,
            sweep=m.id,
            evidence_url=m.evidence_url,
        )

    def runner(self, spec: TrialSpec) -> TrialRun:
        """The knowledge trial."""
        from hangar.kinds.knowledge.trial import KnowledgeTrial

        return KnowledgeTrial(spec)

    def image(self, task: Task) -> str | None:
        """The question's sandbox image."""
        assert isinstance(task, LoadedQuestion)
        return task.image

    def view(self, result: TrialResult, evidence: Path | None, settings: ViewSettings) -> Any:
        """The answer, its citations and, with the suite known, their validity and labels."""
        from hangar.kinds.knowledge.view import section

        return section(result, settings.suites.get(self.name, []))


def _suite_page(
    params: dict[str, str], query: dict[str, str], settings: ViewSettings
) -> dict[str, Any]:
    from hangar.kinds.knowledge.view import suite_page

    return suite_page(params, query, settings.suites.get("knowledge", []))


def _label_page(
    params: dict[str, str], query: dict[str, str], settings: ViewSettings
) -> dict[str, Any]:
    from hangar.kinds.knowledge.labelling import label_page

    return label_page(params, query, settings.suites.get("knowledge", []))


def _save_label(params: dict[str, str], form: dict[str, list[str]], settings: ViewSettings) -> str:
    from hangar.kinds.knowledge.labelling import save_label

    return save_label(params, form, settings.suites.get("knowledge", []))


KIND = KnowledgeKind()

__all__ = ["KIND", "LoadedQuestion", "question_trial"]
