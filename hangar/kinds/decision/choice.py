"""The ``choice`` grader of decision cases (seed 001): exact IDs, nothing else.

The model answers ``{"selected": [choice ids], "explanation": "..."}`` (bare, or in a
fenced code block). The grader compares the selected set with the independently
authored expected set, rule by rule, each a named check with its reason:

- the answer is that JSON object (selected: a list of strings; explanation: a string);
- no choice is selected twice;
- no selected id is invented (every one names a choice of the case);
- no expected choice is missing;
- no extra choice is selected;
- the explanation has at least 20 characters (its meaning is not judged: read it).

The case is ``correct`` only when every check passes. A malformed answer fails the first
check and leaves the others unassessed (correct is then 0: the case was not answered).
The grader's own digest (`digest`) enters every case's version, so a changed grader is
a new version, never compared with the old.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from hangar.results import CheckOutcome, CheckStatus

#: The shortest explanation accepted.
MIN_EXPLANATION = 20
RULES = (
    "answer is a JSON object {selected: [choice ids], explanation: text}",
    "no choice is selected twice",
    "no invented choice id",
    "no expected choice is missing",
    "no extra choice is selected",
    f"explanation has at least {MIN_EXPLANATION} characters",
)
_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n(.*?)```", re.S)


class Grade(BaseModel):
    """What the grader found in one answer."""

    selected: list[str] = []
    """The ids the model selected, as given (duplicates and unknown ids kept)."""
    explanation: str = ""
    """Its explanation."""
    checks: list[CheckOutcome]
    """One finding per rule, in order (a failed one says why in `reasons`)."""
    reasons: dict[str, str] = {}
    """Rule -> why it failed."""
    correct: bool
    """Every rule passed."""


def digest() -> str:
    """sha256 of this grader's code (part of every decision case's version)."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def parse_answer(raw: str) -> tuple[dict[str, Any] | None, str]:
    """The answer object, from bare JSON or the first fenced block; or why not."""
    text = raw.strip()
    fenced = _FENCE.search(text)
    candidates = [fenced.group(1).strip()] if fenced else []
    candidates.append(text)
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        if not isinstance(data, dict):
            return None, f"the answer is JSON but not an object ({type(data).__name__})"
        selected, explanation = data.get("selected"), data.get("explanation")
        if not isinstance(selected, list) or not all(isinstance(s, str) for s in selected):
            return None, "`selected` must be a list of choice ids (strings)"
        if not isinstance(explanation, str):
            return None, "`explanation` must be a string"
        return data, ""
    return None, "the answer is not JSON (bare, or in a fenced code block)"


def grade(raw: str, choices: list[str], expected: list[str]) -> Grade:
    """Grade one answer against the case's choice ids and expected ids."""
    data, malformed = parse_answer(raw)
    if data is None:
        checks = [_check(RULES[0], "fail")] + [_check(r, "unassessed") for r in RULES[1:]]
        return Grade(checks=checks, reasons={RULES[0]: malformed}, correct=False)
    selected: list[str] = data["selected"]
    explanation: str = data["explanation"]
    chosen = set(selected)
    twice = sorted({s for s in selected if selected.count(s) > 1})
    invented = sorted(chosen - set(choices))
    missing = sorted(set(expected) - chosen)
    extra = sorted(chosen & set(choices) - set(expected))
    short = len(explanation.strip()) < MIN_EXPLANATION
    failures = {
        RULES[1]: f"selected twice: {twice}" if twice else "",
        RULES[2]: f"not a choice of this case: {invented}" if invented else "",
        RULES[3]: f"expected but not selected: {missing}" if missing else "",
        RULES[4]: f"selected but not expected: {extra}" if extra else "",
        RULES[5]: f"{len(explanation.strip())} characters" if short else "",
    }
    checks = [_check(RULES[0], "pass")] + [
        _check(rule, "fail" if why else "pass") for rule, why in failures.items()
    ]
    reasons = {rule: why for rule, why in failures.items() if why}
    return Grade(
        selected=selected,
        explanation=explanation,
        checks=checks,
        reasons=reasons,
        correct=not reasons,
    )


def _check(rule: str, status: CheckStatus) -> CheckOutcome:
    return CheckOutcome(requirement=rule, status=status, evidence=("grader.json",))
