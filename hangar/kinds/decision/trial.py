"""The decision kind of trial: one decision case, one fresh conversation, no tools.

`DecisionTrial.run` walks: admission (the case's files were all there when it was
loaded; a model is named), the prompt (`render_prompt`: the case, its choices and how to
answer; in arm ``skill`` the skill's text and the case's references before them; never
the expected answer or the rationale), one model call (`hangar.models.complete`: the
relay's rules, metering, trace), and the ``choice`` grader. No repository, no sandbox,
no network but the model call. The result records the seed's provenance: the skill's
path and digest, the task, case-set and grader digests, every reference supplied and its
digest (``referenceSources``), the provider settings, the raw answer and the tokens.
"""

from __future__ import annotations

from typing import Any

from hangar.agents import PromptAgent
from hangar.kinds.decision import choice
from hangar.kinds.decision.cases import LoadedCase
from hangar.models.complete import Completion, complete
from hangar.results import COUNTED_VERDICTS, Score, TrialOutcome, Usage, Verdict
from hangar.trace import TraceWriter
from hangar.trials.boundary import Outcome, TrialRun, provider_failed
from hangar.trials.spec import SKILL_ARM, TrialSpec


def render_prompt(case: LoadedCase, arm: str) -> str:
    """The user message of a case in `arm` (the skill's texts only in ``skill``)."""
    parts = []
    if arm == SKILL_ARM and case.skill is not None:
        parts += [f"# Supplied skill: {case.case.skill}", "", case.skill.text.rstrip(), ""]
        for ref in case.references:
            parts += [f"## Reference: {ref.path}", "", ref.text.rstrip(), ""]
    parts += ["# Decision", "", case.case.scenario.rstrip(), "", "## Choices", ""]
    parts += [f"- {c.id}: {c.text}" for c in case.case.choices]
    parts += [
        "",
        'Answer with one JSON object: {"selected": [the ids of every choice you select], '
        '"explanation": "why"}.',
    ]
    return "\n".join(parts) + "\n"


#: The completion of a trial that has not called (each `Completion()` copies its defaults).
_NOTHING_YET = Completion()


class DecisionTrial(TrialRun):
    """One prompt trial's state; `run` walks its phases."""

    in_memory = True  # no sandbox: its evidence never needs a folder

    def __init__(self, spec: TrialSpec) -> None:
        super().__init__(spec)
        if not isinstance(spec.task, LoadedCase):
            raise TypeError(f"a prompt trial needs a decision case, not {spec.task.kind}")
        self.case = spec.task
        self.completion = _NOTHING_YET
        self.grade: choice.Grade | None = None
        self.trace: TraceWriter | None = None

    def run(self) -> None:
        """Walk the phases (see the module docstring)."""
        with self.phase("admission"):
            agent = self.admit()
        with self.phase("prompt"):
            prompt = render_prompt(self.case, self.spec.arm)
            self.write("prompt.json", {"system": agent.system_prompt, "user": prompt})
        with self.phase("model"):
            self.call(agent, prompt)
        with self.phase("grade"):
            self.judge()

    def admit(self) -> PromptAgent:
        """A case whose files are missing, or no model to ask: blocked_setup."""
        self.write("case.json", self.case.model_dump(mode="json", exclude={"skill", "references"}))
        problems = [f"missing {m}" for m in self.case.missing]
        agent = self.spec.agent
        if not isinstance(agent, PromptAgent):
            problems.append(f"agent {agent.name!r} is not a prompt agent (kind: prompt)")
        model = self.spec.model_spec
        if model is None or model.provider == "none":
            problems.append("a decision case needs a model to ask")
        self.write("admission.json", {"problems": problems})
        if problems or not isinstance(agent, PromptAgent):
            raise Outcome(Verdict.BLOCKED_SETUP, "admission: " + "; ".join(problems))
        return agent

    def call(self, agent: PromptAgent, prompt: str) -> None:
        """The one model call; a provider's failure is the farm's, never the case's."""
        assert self.spec.model_spec is not None
        self.trace = self.new_trace()
        self.completion = complete(
            self.spec.model_spec,
            agent.system_prompt,
            prompt,
            trace=self.trace,
            max_output_tokens=agent.max_output_tokens,
            reasoning_effort=agent.reasoning_effort,
        )
        self.trace.close(completed=not self.completion.error, reason=self.completion.error)
        self.write("answer.txt", self.completion.text)
        error = self.completion.provider_error
        if error is not None:
            raise provider_failed(error)
        if self.completion.error:
            raise Outcome(Verdict.FAIL, f"no answer: {self.completion.error}")

    def judge(self) -> None:
        """The ``choice`` grader: exact ids, each rule a named check."""
        case = self.case.case
        grade = choice.grade(
            self.completion.text, [c.id for c in case.choices], list(case.expected)
        )
        self.grade = grade
        self.write("grader.json", grade.model_dump())
        if grade.correct:
            self.verdict, self.reason = Verdict.PASS, "the selection is exactly the expected one"
        else:
            self.verdict = Verdict.FAIL
            self.reason = "; ".join(f"{rule}: {why}" for rule, why in grade.reasons.items())

    def ended(self, verdict: Verdict, reason: str) -> None:
        """Close the trace of a trial that ended before its model answered."""
        if self.trace is not None and not self.trace.closed:
            self.trace.close(completed=False, reason=reason)

    def outcome(self) -> TrialOutcome:
        """Its checks, ``correct`` score, usage and the seed's provenance."""
        model = self.spec.model_spec
        supplied = self.spec.arm == SKILL_ARM
        details: dict[str, Any] = {
            "suite": self.case.suite,
            "skill": self.case.case.skill,
            "skillPath": self.case.skill.path if self.case.skill and supplied else None,
            "skillDigest": self.case.skill.sha256 if self.case.skill and supplied else None,
            "taskDigest": f"sha256:{self.case.task_digest}",
            "caseSetDigest": f"sha256:{self.case.case_set_digest}",
            "graderDigest": f"sha256:{self.case.grader_digest}",
            "referenceSources": [
                {"path": r.path, "sha256": r.sha256} for r in self.case.references if supplied
            ],
            "provider": model.model_dump(mode="json", exclude={"price"}) if model else None,
            "output": self.completion.text,
            "selected": self.grade.selected if self.grade else [],
            "expected": list(self.case.case.expected),
        }
        counted = self.verdict in COUNTED_VERDICTS
        correct = float(self.verdict is Verdict.PASS)
        return TrialOutcome(
            completed=bool(self.completion.text),
            checks=tuple(self.grade.checks) if self.grade else (),
            usage=self.completion.usage or Usage(),
            provider_error=self.completion.provider_error,
            scores=(Score(metric="correct", value=correct),) if counted else (),
            details=details,
        )
