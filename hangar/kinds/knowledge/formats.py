"""Seed 003's files, read as the seed writes them.

```
knowledge-gold-v1/
  questions.jsonl          {id, question, kind, as_of, scope}: what an arm may read
  keys.jsonl               {id, answer_key, required_facts[], valid_sources[{uri, sha256}], canary}
  manifest.json            sha256 of both files (written by `hangar knowledge seal`)
  answers/<arm>.jsonl      {id, answer, citations[{uri, sha256}]}
  answers/<arm>.meta.json  how the arm was run: person or harness, date, model, knowledge_snapshot
  labels/<arm>.jsonl       {id, rater, correct, unsupported[uris]}
  repositories.yaml        hangar's addition: repository name -> URL or path (the repo-search arm)
  void.json                written by a canary scan that found a canary: the suite is void
```

A malformed line is refused naming the file, the line and the field. ``as_of`` pins the
repository commits an arm may read (``{repository: commit}``, or one commit when the
suite has one repository); ``scope`` says what it may read (path patterns, ``repo:path``
for one repository; absent or empty: everything at ``as_of``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hangar.errors import ConfigError
from hangar.validation import validation_message

M = TypeVar("M", bound=BaseModel)
KINDS = ("decision-why", "blocker", "what-changed", "how-to", "who-owns")


class _Line(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class Question(_Line):
    """A question an arm answers (what it may read is pinned)."""

    id: str = Field(min_length=1)
    """Stable id."""
    question: str = Field(min_length=1)
    """The question, written by a person."""
    kind: Literal["decision-why", "blocker", "what-changed", "how-to", "who-owns"]
    """One of the five kinds of question."""
    as_of: str | dict[str, str]
    """The repository commits an arm may read."""
    scope: Any = None
    """What it may read (path patterns)."""


class Source(_Line):
    """A source: its uri and its content's sha256."""

    uri: str = Field(min_length=1)
    """Where it is (``repo://NAME@COMMIT/PATH`` for a repository file)."""
    sha256: str | None = None
    """Its content's sha256 (``sha256:`` prefix optional)."""

    @property
    def digest(self) -> str:
        """The sha256 normalised: lower-case hex, no prefix ('' when none)."""
        return (self.sha256 or "").strip().lower().removeprefix("sha256:")


class Key(_Line):
    """A question's answer key (sealed until scored)."""

    id: str = Field(min_length=1)
    """The question's id."""
    answer_key: str
    """The answer, written by a person."""
    required_facts: list[str] = Field(default_factory=list)
    """Facts a correct answer states."""
    valid_sources: list[Source] = Field(default_factory=list)
    """The sources that support the answer, with their sha256 at ``as_of``."""
    canary: str | None = None
    """The key's canary (written by ``seal``)."""


class Citation(Source):
    """A source an answer cites."""


class Answer(_Line):
    """An arm's answer to one question."""

    id: str = Field(min_length=1)
    """The question's id."""
    answer: str
    """The answer."""
    citations: list[Citation] = Field(default_factory=list)
    """What it cites."""


class Meta(_Line):
    """``answers/<arm>.meta.json``: how the arm was run."""

    person: str | None = None
    """Who ran it (a person's arm)."""
    harness: str | None = None
    """What ran it (a harness's arm)."""
    date: str | None = None
    """When."""
    model: str | None = None
    """With which model."""
    knowledge_snapshot: str | None = None
    """What it could know (a snapshot, a manifest digest)."""

    def missing(self) -> list[str]:
        """The seed's fields it lacks."""
        gaps = [] if (self.person or self.harness) else ["person or harness"]
        return gaps + [f for f in ("date", "model") if not getattr(self, f)]


class Label(_Line):
    """One rater's label of one answer."""

    id: str = Field(min_length=1)
    """The question's id."""
    rater: str = Field(min_length=1)
    """Who rated."""
    correct: bool
    """Every required fact present."""
    unsupported: list[str] = Field(default_factory=list)
    """Cited uris whose span does not support the claim."""

    @field_validator("correct", mode="before")
    @classmethod
    def _strict_bool(cls, value: object) -> object:
        if not isinstance(value, bool):
            raise ValueError(f"correct is true or false, got {value!r}")
        return value


def read_jsonl(path: Path, model: type[M]) -> list[M]:
    """Every line of a JSONL file as `model`; a bad line is refused naming file, line, field."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
    items = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}, line {number}: not JSON ({exc.msg})") from None
        try:
            items.append(model.model_validate(data))
        except ValidationError as exc:
            message = validation_message(
                f"{path}, line {number}", model.__name__.lower(), exc, model=model
            )
            raise ConfigError(message) from None
    return items


def unique(path: Path, items: list[Any], key: Any = lambda x: x.id) -> None:
    """Refuse repeated ids (or `key`s) in a file."""
    seen: set[Any] = set()
    for item in items:
        k = key(item)
        if k in seen:
            raise ConfigError(f"{path}: {k!r} appears more than once")
        seen.add(k)


def write_jsonl(path: Path, items: list[BaseModel]) -> None:
    """Write `items` one JSON object a line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(json.dumps(i.model_dump(mode="json", exclude_none=True)) + "\n" for i in items)
    )
