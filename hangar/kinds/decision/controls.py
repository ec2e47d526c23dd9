"""Offline controls of a decision suite (seed 001): synthetic answers through the real
pipeline, no credentials, no model.

For every case, synthetic answers go through everything a live run goes through: the
prompt rendered for arm ``skill``, the SDK client and the relay's rules, a model server
on loopback (the scripted one, answering what the control says), the ``choice`` grader,
the trial boundary and its evidence. The expected answer must pass; everything else must
fail: a wrong answer, every single-choice toggle of the expected set (a grader that
accepts a near miss is caught), an invented id, a duplicate, a malformed answer and a
short explanation. A passing run establishes the harness's contract only, never a skill.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from pydantic import BaseModel

from hangar.agents import PromptAgent
from hangar.kinds.decision import case_trial
from hangar.kinds.decision.cases import LoadedCase, load_decision_suite
from hangar.models import ModelSpec
from hangar.results import Verdict
from hangar.testing.scripted import Conversation, Reply, Script, ScriptedServer
from hangar.trials import SKILL_ARM, run_trial

#: A fake key for the scripted server on loopback (it checks none).
OFFLINE_KEY_ENV = "HANGAR_OFFLINE_KEY"
_WHY = "A synthetic explanation, long enough to pass."


class Control(BaseModel):
    """One synthetic answer and what the pipeline must make of it."""

    case: str
    """The case id."""
    name: str
    """What the answer is (``expected``, ``wrong``, ``toggle C``...)."""
    answer: str
    """The raw answer sent."""
    want: Verdict
    """pass for the expected answer, fail for the rest."""
    got: Verdict | None = None
    """What the pipeline gave."""
    reason: str = ""
    """Its reason."""

    @property
    def ok(self) -> bool:
        """Whether the pipeline did what it must."""
        return self.got is self.want


def controls_of(case: LoadedCase) -> list[Control]:
    """The synthetic answers of one case."""
    ids = [c.id for c in case.case.choices]
    expected = list(case.case.expected)

    def answer(selected: list[str], why: str = _WHY) -> str:
        return json.dumps({"selected": selected, "explanation": why})

    wrong = [next(i for i in ids if i not in expected)]
    found = [
        Control(case=case.id, name="expected", answer=answer(expected), want=Verdict.PASS),
        Control(
            case=case.id,
            name="expected, fenced",
            answer=f"Here it is:\n```json\n{answer(expected)}\n```\n",
            want=Verdict.PASS,
        ),
        Control(case=case.id, name="wrong", answer=answer(wrong), want=Verdict.FAIL),
    ]
    for choice_id in ids:
        toggled = [i for i in ids if (i in expected) != (i == choice_id)]
        found.append(
            Control(
                case=case.id, name=f"toggle {choice_id}", answer=answer(toggled), want=Verdict.FAIL
            )
        )
    found += [
        Control(
            case=case.id,
            name="invented id",
            answer=answer([*expected, "ZZ"]),
            want=Verdict.FAIL,
        ),
        Control(
            case=case.id,
            name="duplicate",
            answer=answer([*expected, expected[0]]),
            want=Verdict.FAIL,
        ),
        Control(case=case.id, name="malformed", answer="B, obviously", want=Verdict.FAIL),
        Control(
            case=case.id, name="short explanation", answer=answer(expected, "ok"), want=Verdict.FAIL
        ),
    ]
    return found


def run_controls(suite: Path) -> list[Control]:
    """Run every control of every case of `suite` (see the module docstring)."""
    cases = load_decision_suite(suite)
    controls = [c for case in cases for c in controls_of(case)]
    by_case = {case.id: case for case in cases}
    script = Script(
        conversations=[
            Conversation(
                model=f"control-{n}",
                match=by_case[c.case].case.scenario[:60],
                replies=[Reply(content=c.answer)],
            )
            for n, c in enumerate(controls)
        ]
    )
    os.environ.setdefault(OFFLINE_KEY_ENV, "offline")
    server = ScriptedServer(script).start()
    try:
        with tempfile.TemporaryDirectory(prefix="hangar-controls-") as tmp:
            for n, control in enumerate(controls):
                model = ModelSpec(
                    id=f"control-{n}", base_url=f"{server.url}/v1", api_key_env=OFFLINE_KEY_ENV
                )
                spec = case_trial(
                    by_case[control.case],
                    PromptAgent(),
                    SKILL_ARM,
                    model=model,
                    sweep="offline-controls",
                    evidence_url=Path(tmp).as_uri(),
                ).model_copy(update={"work_root": Path(tmp) / "trials"})
                result = run_trial(spec)
                control.got, control.reason = result.verdict, result.reason
    finally:
        server.shutdown()
    return controls
