"""The rubric kind of trial: one benchmark sample (seed 002), written and then judged.

`RubricTrial.run` walks: admission (the phase's skill is there, a model is named), the
prompt (the skill's text as the instructions; the sample's input, ``project_context``
included, as the message; never the reference output or its scores), one call of the
skill's model, the rubric's structural checks (`hangar.kinds.rubric.checks`), the judge, one
call per dimension in both orderings (`hangar.kinds.rubric.judge`), and the scores
(`hangar.kinds.rubric.scoring`). The verdict says whether the sample got a score (pass) or
not (fail: no output, or the judge left a dimension unassessed); what it is worth is in
its scores. The judge's tokens and cost are kept apart (``judge_usage``).
"""

from __future__ import annotations

from typing import Any

import yaml

from hangar.kinds.rubric.benchmark import LoadedSample
from hangar.kinds.rubric.checks import CheckResult, run_checks
from hangar.kinds.rubric.judge import Judged, judge_output
from hangar.kinds.rubric.scoring import SampleScores, score_sample
from hangar.models.complete import Completion, complete
from hangar.models.tokens import TOKENIZER
from hangar.results import COUNTED_VERDICTS, CheckOutcome, TrialOutcome, Usage, Verdict
from hangar.trace import TraceWriter
from hangar.trials.boundary import Outcome, TrialRun, provider_failed
from hangar.trials.spec import TrialSpec


def render_input(sample: LoadedSample) -> str:
    """The message the skill's model gets: the sample's input, field by field."""
    parts = [f"Produce the {sample.phase} artifact for this input.", ""]
    for name, value in sample.sample.input.items():
        text = value if isinstance(value, str) else yaml.safe_dump(value, sort_keys=False)
        parts += [f"## {name}", "", text.rstrip(), ""]
    return "\n".join(parts)


class RubricTrial(TrialRun):
    """One benchmark sample's trial; `run` walks its phases."""

    in_memory = True  # no sandbox: its evidence never needs a folder

    def __init__(self, spec: TrialSpec) -> None:
        super().__init__(spec)
        if not isinstance(spec.task, LoadedSample):
            raise TypeError(f"a rubric trial needs a benchmark sample, not {spec.task.kind}")
        self.item = spec.task
        self.written = Completion()
        self.checks: list[CheckResult] = []
        self.judged: Judged | None = None
        self.scored: SampleScores | None = None
        self.trace: TraceWriter | None = None

    def run(self) -> None:
        """Walk the phases (see the module docstring)."""
        with self.phase("admission"):
            self.admit()
        with self.phase("model"):
            self.write_output()
        with self.phase("checks"):
            self.checks = run_checks(self.item.rubric.dimensions, self.written.text)
            self.write(
                "checks.json",
                {"tokenizer": TOKENIZER, "checks": [c.model_dump() for c in self.checks]},
            )
        with self.phase("judge"):
            self.judge()
        self.scored = score_sample(self.item.rubric, self.checks, self.judged)
        self.write("scores.json", self.scored.model_dump())
        if self.scored.overall is None:
            unassessed = [d for d, v in self.scored.dimensions.items() if v is None]
            self.verdict, self.reason = Verdict.FAIL, f"unassessed dimensions: {unassessed}"
        else:
            self.verdict, self.reason = Verdict.PASS, f"scored {self.scored.overall:.2f} of 5"

    def admit(self) -> None:
        """A missing skill file, or no model: blocked_setup, before any call."""
        self.write("sample.json", self.item.model_dump(mode="json", exclude={"skill"}))
        problems = []
        if self.item.skill is None:
            problems.append(f"the skill of phase {self.item.phase!r} is missing")
        model = self.spec.model_spec
        if model is None or model.provider == "none":
            problems.append("a benchmark sample needs a model to write it")
        if problems:
            raise Outcome(Verdict.BLOCKED_SETUP, "admission: " + "; ".join(problems))

    def write_output(self) -> None:
        """The skill's model writes the artifact; a provider's failure is the farm's."""
        assert self.spec.model_spec is not None and self.item.skill is not None
        self.trace = self.new_trace()
        message = render_input(self.item)
        self.write("prompt.json", {"system": self.item.skill.text, "user": message})
        self.written = complete(
            self.spec.model_spec,
            self.item.skill.text,
            message,
            trace=self.trace,
            max_output_tokens=4096,
        )
        self.write("output.md", self.written.text)
        if self.written.provider_error is not None:
            raise provider_failed(self.written.provider_error)
        if not self.written.text.strip():
            raise Outcome(
                Verdict.FAIL, f"no output: {self.written.error or 'the model answered nothing'}"
            )

    def judge(self) -> None:
        """One judge call per dimension, in both orderings (none for a regex rubric)."""
        if self.item.rubric.scoring_model == "regex":
            return
        assert self.trace is not None
        self.judged = judge_output(
            self.item.judge,
            self.item.phase,
            list(self.item.rubric.dimensions),
            self.item.sample.reference_output,
            self.written.text,
            trace=self.trace,
        )
        self.write("judge.json", self.judged.model_dump())
        error = self.judged.provider_error
        if error is not None:
            raise provider_failed(error, of="judge")

    def ended(self, verdict: Verdict, reason: str) -> None:
        """Close the trace."""
        if self.trace is not None and not self.trace.closed:
            self.trace.close(completed=verdict in COUNTED_VERDICTS, reason=reason)

    def outcome(self) -> TrialOutcome:
        """Scores, checks, the judge's verdicts and cost, and what the report needs."""
        item, judged = self.item, self.judged
        verdicts = judged.verdicts if judged else []
        details: dict[str, Any] = {
            "phase": item.phase,
            "difficulty": item.sample.difficulty,
            "tags": list(item.sample.tags),
            "split": item.sample.split,
            "skill": item.skill.path if item.skill else None,
            "skillVersion": item.skill_version,
            "skillDigest": item.skill.sha256 if item.skill else None,
            "judgeModel": item.judge.id,
            "ciJudge": item.ci_judge,
            "humanScores": item.sample.scores,
            "judge": {
                v.dimension: {
                    "score": v.score,
                    "gap": v.gap,
                    "justifications": [o.justification for o in v.orderings],
                }
                for v in verdicts
            },
            "tokenizer": TOKENIZER,
        }
        checks = tuple(
            CheckOutcome(
                requirement=f"{c.dimension}: {c.check}",
                status="pass" if c.passed else "fail",
                evidence=("checks.json",),
            )
            for c in self.checks
        )
        counted = self.verdict in COUNTED_VERDICTS and self.scored is not None
        return TrialOutcome(
            completed=bool(self.written.text.strip()),
            checks=checks,
            usage=self.written.usage or Usage(),
            judge_usage=judged.usage if judged else Usage(),
            provider_error=self.written.provider_error
            or (judged.provider_error if judged else None),
            scores=self.scored.as_scores() if counted and self.scored else (),
            details=details,
        )
