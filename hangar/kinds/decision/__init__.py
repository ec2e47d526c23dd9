"""The decision kind: choices under supplied instructions, no tools (decision suites).

A case is rendered into one prompt (in arm ``skill`` with the skill's text and the case's
references, in ``control`` without), sent once, and graded by the exact-ID grader
(`trial`). `cases` loads and digests a suite; `controls` sends synthetic answers through
the same pipeline.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from hangar.agents import AgentSpec, prompt_agents
from hangar.kinds.decision.cases import LoadedCase, is_decision_suite, load_decision_suite
from hangar.models import ModelSpec
from hangar.results import TrialResult
from hangar.trials.boundary import TrialRun
from hangar.trials.kind import Kind, Matrix, SweepSettings, ViewSettings
from hangar.trials.spec import CONTROL_ARM, SKILL_ARM, Arm, Task, TrialSpec, new_spec


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
    supplied = [case.skill, *case.references] if arm == SKILL_ARM and case.skill else []
    plugins = hashlib.sha256(json.dumps([[f.path, f.sha256] for f in supplied]).encode())
    return new_spec(
        case,
        agent,
        model,
        arm=arm,
        key_arm=[arm, plugins.hexdigest()],
        repeat=repeat,
        plugins=(case.case.skill,) if arm == SKILL_ARM else (),
        plugins_digest=plugins.hexdigest(),
        sweep=sweep,
        evidence_url=evidence_url,
    )


#: What a decision answer is allowed, for a first run's estimate: the JSON of the choices
#: and a short explanation (a reasoning model's thinking is not counted in it).
ANSWER_TOKENS = 200


class DecisionKind(Kind):
    """Decision cases (see the module docstring)."""

    name = "decision"
    title = "decision cases"
    view_template = "decision/view.html"
    cli = (("decision", "hangar.kinds.decision.cli"),)

    def recognizes(self, path: Path, data: Any) -> bool:
        """A suite file (``kind: decision``)."""
        return is_decision_suite(data)

    def load(self, path: Path, data: Any, settings: SweepSettings) -> list[Task]:
        """The suite's cases."""
        return list(load_decision_suite(path, data))

    def agents(self, matrix: Matrix) -> list[AgentSpec]:
        """Prompt agents (the default one when none is named)."""
        return prompt_agents(matrix.agents)

    def arms(self, task: Task | None, matrix: Matrix) -> list[Arm]:
        """``skill`` and ``control``."""
        return [Arm(name=SKILL_ARM), Arm(name=CONTROL_ARM)]

    def token_guess(self, spec: TrialSpec) -> tuple[int, int] | None:
        """The system and user prompts' tokens (o200k_base), and `ANSWER_TOKENS` out."""
        from hangar.kinds.decision.trial import render_prompt
        from hangar.models.tokens import count_tokens

        assert isinstance(spec.task, LoadedCase)
        system = getattr(spec.agent, "system_prompt", "")
        return count_tokens(system) + count_tokens(render_prompt(spec.task, spec.arm)), (
            ANSWER_TOKENS
        )

    def spec(
        self, task: Task, agent: AgentSpec, arm: Arm, model: ModelSpec, repeat: int, m: Matrix
    ) -> TrialSpec:
        """`case_trial` in the sweep."""
        assert isinstance(task, LoadedCase)
        return case_trial(
            task,
            agent,
            arm.name,
            model=model,
            repeat=repeat,
            sweep=m.id,
            evidence_url=m.evidence_url,
        )

    def problems(self, task: Task, matrix: Matrix, *, deep: bool) -> list[str]:
        """Files the case needs that are missing."""
        assert isinstance(task, LoadedCase)
        return [f"{task.id} (decision case): missing {m}" for m in task.missing]

    def runner(self, spec: TrialSpec) -> TrialRun:
        """The prompt trial."""
        from hangar.kinds.decision.trial import DecisionTrial

        return DecisionTrial(spec)

    def view(self, result: TrialResult, evidence: Path | None, settings: ViewSettings) -> Any:
        """The choices, expected and selected, and the explanation."""
        from hangar.kinds.decision.view import section

        return section(result, evidence)


KIND = DecisionKind()

__all__ = ["KIND", "LoadedCase", "case_trial"]
