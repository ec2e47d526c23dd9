"""Decision suites (seed 001): choices under supplied instructions, skill against control.

A decision suite is one YAML or JSON file; a sweep names it under ``scenarios:`` like a
scenario file:

```yaml
kind: decision
id: core-decisions
margin: 15                       # points the suite's comparisons are about (seed 001/003: 15)
skills:                          # name -> the skill's text (a file, relative to the suite)
  tdd: skills/tdd/SKILL.md
cases:
  - id: tdd-red-first            # stable: a case that changes meaning gets a new id
    skill: tdd
    scenario: "A failing bug report arrives. What do you do first?"
    choices:
      - {id: A, text: Write a test that reproduces the bug}
      - {id: B, text: Patch the code, then add a test}
    expected: [A]                # never shown to the model
    rationale: Red first.        # never shown to the model
    references: [references/red-green.md]   # skill-relative, supplied with the skill
```

Each case runs twice per model and repeat: arm ``skill`` (the prompt supplies the
skill's text and the case's references) and arm ``control`` (neither), each a fresh
conversation with no tools (`hangar.kinds.decision.trial`). The ``choice`` grader
(`hangar.kinds.decision.choice`) scores it. A missing skill file or reference makes both
arms ``blocked_setup`` before any model call.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hangar.errors import ConfigError
from hangar.files import read_yaml
from hangar.kinds.decision import choice
from hangar.results import FORMER_KINDS
from hangar.trials.spec import Supplied, Task
from hangar.validation import CaseId, Name, validation_message

#: The arms every decision case runs in.


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Choice(_Strict):
    """One choice a case offers."""

    id: Name
    """Its id, what the model selects."""
    text: str
    """What it says."""


class DecisionCase(_Strict):
    """One decision: a scenario, its choices, the expected selection."""

    id: CaseId
    """Stable id of a concrete failure pattern (a changed meaning gets a new id)."""
    skill: str
    """The skill (a key of the suite's ``skills``) the case is about."""
    scenario: str
    """The situation, as the model reads it."""
    choices: tuple[Choice, ...] = Field(min_length=2)
    """The choices, in the order shown."""
    expected: tuple[str, ...] = Field(min_length=1)
    """The ids of the correct selection, independently authored (never shown)."""
    rationale: str = ""
    """Why (never shown)."""
    references: tuple[str, ...] = ()
    """Skill-relative paths supplied with the skill (a missing one blocks the case)."""

    @field_validator("references")
    @classmethod
    def _relative(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for ref in value:
            p = PurePosixPath(ref)
            if p.is_absolute() or ".." in p.parts:
                raise ValueError(f"a reference must stay inside the skill's folder: {ref!r}")
        return value

    @model_validator(mode="after")
    def _choices(self) -> DecisionCase:
        ids = [c.id for c in self.choices]
        if len(set(ids)) != len(ids):
            raise ValueError(f"choice ids must be unique, got {ids}")
        unknown = [e for e in self.expected if e not in ids]
        if unknown:
            raise ValueError(f"expected {unknown} names no choice (choices: {ids})")
        if len(set(self.expected)) != len(self.expected):
            raise ValueError(f"expected lists a choice twice: {list(self.expected)}")
        return self


class DecisionSuite(_Strict):
    """A decision suite file (see the module docstring)."""

    kind: Literal["decision"]
    """Says what the file is."""
    id: Name
    """The suite's id (the ``suite`` of its results)."""
    skills: dict[str, str] = Field(min_length=1)
    """Skill name -> its text file, relative to the suite file."""
    cases: tuple[DecisionCase, ...] = Field(min_length=1)
    """The cases."""
    margin: float | None = Field(default=None, gt=0, le=100)
    """Points the suite's comparisons are about (the report's default ``--margin``)."""

    @model_validator(mode="after")
    def _cases(self) -> DecisionSuite:
        ids = [c.id for c in self.cases]
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        if repeated:
            raise ValueError(f"case ids must be unique in a suite; repeated: {repeated}")
        unknown = sorted({c.skill for c in self.cases} - set(self.skills))
        if unknown:
            raise ValueError(f"cases name skills the suite lacks: {unknown}")
        return self


class LoadedCase(Task):
    """One case of a loaded suite, with everything its prompt needs read in (workers need
    none of the suite's files) and its digests."""

    model_config = ConfigDict(frozen=True)
    key_field: ClassVar[str] = "case"

    kind: Literal["decision"] = "decision"
    """The kind of trial a case is (``prompt``, its former name, is read as it)."""

    @field_validator("kind", mode="before")
    @classmethod
    def _current_kind(cls, value: Any) -> Any:
        return FORMER_KINDS.get(value, value) if isinstance(value, str) else value

    path: Path
    """The suite file."""
    suite: str
    """The suite's id."""
    case: DecisionCase
    """The case."""
    skill: Supplied | None
    """The skill's text (None when its file is missing)."""
    references: tuple[Supplied, ...] = ()
    """The references read."""
    missing: tuple[str, ...] = ()
    """Files the case needs that are missing (its trials are blocked_setup)."""
    task_digest: str
    """sha256 of what the model is asked (scenario and choices; not the answer)."""
    case_set_digest: str
    """sha256 of the whole suite file (seed 001's case-set digest)."""
    grader_digest: str
    """sha256 of the grader's code."""
    digest: str
    """The case's version: its task, expected answer, skill, references and grader."""
    margin: float | None = None
    """The suite's margin, in points."""

    @property
    def id(self) -> str:
        """The case's id (the ``scenario_id`` of its results)."""
        return self.case.id


def load_decision_suite(path: Path, data: Any | None = None) -> list[LoadedCase]:
    """Load, validate and digest a decision suite; errors name the file and field."""
    path = path.resolve()
    data = read_yaml(path) if data is None else data
    try:
        suite = DecisionSuite.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            validation_message(
                str(path),
                "decision suite",
                exc,
                path.read_text(errors="replace"),
                model=DecisionSuite,
            )
        ) from None
    case_set = hashlib.sha256(path.read_bytes()).hexdigest()
    grader = choice.digest()
    loaded = []
    for case in suite.cases:
        skill_file = path.parent / suite.skills[case.skill]
        skill = _read(skill_file, suite.skills[case.skill])
        missing = [] if skill is not None else [f"skill {case.skill}: {skill_file}"]
        references = []
        for ref in case.references:
            supplied = _read(skill_file.parent / ref, ref)
            if supplied is None:
                missing.append(f"reference {ref}: {skill_file.parent / ref}")
            else:
                references.append(supplied)
        task = _sha({"scenario": case.scenario, "choices": case.model_dump()["choices"]})
        version = {
            "case": case.model_dump(mode="json"),
            "skill": skill.sha256 if skill else "missing",
            "references": [[r.path, r.sha256] for r in references],
            "missing": missing,
            "grader": grader,
        }
        loaded.append(
            LoadedCase(
                path=path,
                suite=suite.id,
                case=case,
                skill=skill,
                references=tuple(references),
                missing=tuple(missing),
                task_digest=task,
                case_set_digest=case_set,
                grader_digest=grader,
                digest=_sha(version),
                margin=suite.margin,
            )
        )
    return loaded


def is_decision_suite(data: Any) -> bool:
    """Whether parsed YAML is a decision suite (``kind: decision``)."""
    return isinstance(data, dict) and data.get("kind") == "decision"


def _read(file: Path, shown: str) -> Supplied | None:
    if not file.is_file():
        return None
    raw = file.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    return Supplied(path=shown, sha256=f"sha256:{hashlib.sha256(raw).hexdigest()}", text=text)


def _sha(payload: object) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
