"""The rubric kind: documents a phase's skill writes, scored per dimension by structural
checks and an LLM judge (rubric benchmarks).

`benchmark` loads a benchmark folder into samples; `trial` runs one (the model call, the
checks, the judge in both orderings, the scores); `report` builds the benchmark's report
against its human-scored references and baselines; `run` runs a whole benchmark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hangar.agents import AgentSpec, prompt_agents
from hangar.kinds.rubric.benchmark import LoadedSample
from hangar.models import ModelSpec
from hangar.results import TrialResult
from hangar.trials.boundary import TrialRun
from hangar.trials.kind import Kind, Matrix, ReportSection, ViewSettings
from hangar.trials.spec import SKILL_ARM, Arm, Task, TrialSpec, new_spec


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
    return new_spec(
        sample,
        agent,
        model,
        arm=SKILL_ARM,
        key_arm=None,
        repeat=repeat,
        plugins=(sample.phase,),
        plugins_digest=(sample.skill.sha256 if sample.skill else "").removeprefix("sha256:"),
        sweep=sweep,
        evidence_url=evidence_url,
    )


class RubricKind(Kind):
    """Benchmark samples (see the module docstring)."""

    name = "rubric"
    judged = True
    title = "benchmark samples"
    view_template = "rubric/view.html"
    cli = (("rubric", "hangar.kinds.rubric.cli"),)
    cli_aliases = (("benchmark", "hangar.kinds.rubric.cli"),)

    def agents(self, matrix: Matrix) -> list[AgentSpec]:
        """Prompt agents (the default one when none is named)."""
        return prompt_agents(matrix.agents)

    def arms(self, task: Task | None, matrix: Matrix) -> list[Arm]:
        """``skill``: the phase's skill writes the document."""
        return [Arm(name=SKILL_ARM)]

    def spec(
        self, task: Task, agent: AgentSpec, arm: Arm, model: ModelSpec, repeat: int, m: Matrix
    ) -> TrialSpec:
        """`sample_trial` in the sweep."""
        assert isinstance(task, LoadedSample)
        return sample_trial(
            task, agent, model=model, repeat=repeat, sweep=m.id, evidence_url=m.evidence_url
        )

    def report_sections(self, results: list[TrialResult]) -> list[ReportSection]:
        """Each phase's numbers, per model, as the benchmark's own report gives them."""
        from hangar.kinds.rubric.report import phase_lines

        return [ReportSection("Rubric phases", phase_lines(results))]

    def runner(self, spec: TrialSpec) -> TrialRun:
        """The rubric trial."""
        from hangar.kinds.rubric.trial import RubricTrial

        return RubricTrial(spec)

    def view(self, result: TrialResult, evidence: Path | None, settings: ViewSettings) -> Any:
        """Per-dimension scores, checks and the judge's calls."""
        from hangar.kinds.rubric.view import section

        return section(result, evidence)


KIND = RubricKind()

__all__ = ["KIND", "LoadedSample", "sample_trial"]
