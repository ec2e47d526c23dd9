"""A knowledge gold set on disk: its questions and keys, its seal, its canaries and its
arms' answers and labels.

Custody (seed 003): ``seal`` gives every key an unguessable canary, writes
``manifest.json`` (the sha256 of ``questions.jsonl`` and ``keys.jsonl``) and, with a
holdouts folder, adds the canaries to that folder's ``manifest.json``; it refuses a suite
that is already sealed. Scoring refuses a suite whose files no longer match (naming
them): a changed question is a new suite version, never an edit. A canary found by a
scan voids the whole suite (``void.json``), shown by every later report.
"""

from __future__ import annotations

import json
import secrets
import shutil
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ValidationError

from hangar.errors import ConfigError
from hangar.files import MANIFEST, file_sha256, pin_problems
from hangar.kinds.knowledge.formats import (
    Answer,
    Key,
    Label,
    Meta,
    Question,
    read_jsonl,
    unique,
    write_jsonl,
)

SEALED = ("questions.jsonl", "keys.jsonl")
VOID = "void.json"


class Suite(BaseModel):
    """A loaded suite: its questions and keys, in file order."""

    folder: Path
    """The suite's folder."""
    questions: list[Question]
    """``questions.jsonl``."""
    keys: dict[str, Key]
    """``keys.jsonl`` by question id."""

    @property
    def name(self) -> str:
        """The folder's name (``knowledge-gold-v1``)."""
        return self.folder.resolve().name

    @property
    def ids(self) -> list[str]:
        """The question ids, in file order."""
        return [q.id for q in self.questions]


def load_suite(folder: Path) -> Suite:
    """Read and cross-check ``questions.jsonl`` and ``keys.jsonl`` (one key per question)."""
    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such suite folder")
    questions = read_jsonl(folder / "questions.jsonl", Question)
    keys = read_jsonl(folder / "keys.jsonl", Key)
    unique(folder / "questions.jsonl", questions)
    unique(folder / "keys.jsonl", keys)
    if not questions:
        raise ConfigError(f"{folder / 'questions.jsonl'}: no question")
    asked, keyed = [q.id for q in questions], {k.id for k in keys}
    missing = [i for i in asked if i not in keyed]
    extra = sorted(keyed - set(asked))
    if missing or extra:
        raise ConfigError(
            f"{folder}: every question needs one key: questions without a key {missing}, "
            f"keys without a question {extra}"
        )
    return Suite(folder=folder, questions=questions, keys={k.id: k for k in keys})


def canary() -> str:
    """An unguessable canary (128 random bits)."""
    return f"HANGAR-CANARY-{secrets.token_hex(16)}"


def seal(folder: Path, holdouts: Path | None = None) -> Path:
    """Give every key a canary, write the manifest and, with `holdouts`, add the canaries
    to that folder's manifest. Refuses a sealed suite."""
    manifest = folder / MANIFEST
    if manifest.exists():
        raise ConfigError(
            f"{folder} is already sealed ({manifest}): a sealed suite is never edited; a "
            "changed question is a new version (copy it to knowledge-gold-v2 and seal that)"
        )
    suite = load_suite(folder)
    keys = [k.model_copy(update={"canary": canary()}) for k in suite.keys.values()]
    write_jsonl(folder / "keys.jsonl", list(keys))
    data = {
        "suite": suite.name,
        "sealed": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "questions": len(keys),
        "files": {name: file_sha256(folder / name) for name in SEALED},
    }
    manifest.write_text(json.dumps(data, indent=1) + "\n")
    if holdouts is not None:
        add_holdouts(holdouts, folder, {k.id: k.canary or "" for k in keys})
    return manifest


def add_holdouts(holdouts: Path, suite: Path, canaries: dict[str, str]) -> None:
    """Add a suite's canaries to the holdouts folder's ``manifest.json``."""
    holdouts.mkdir(parents=True, exist_ok=True)
    path = holdouts / MANIFEST
    data = json.loads(path.read_text()) if path.is_file() else {"canaries": []}
    data.setdefault("canaries", [])
    data["canaries"] += [
        {"suite": str(suite.resolve()), "id": qid, "canary": value}
        for qid, value in canaries.items()
    ]
    path.write_text(json.dumps(data, indent=1) + "\n")


def verify(folder: Path) -> list[str]:
    """What differs from the manifest (empty: the suite is as sealed)."""
    path = folder / MANIFEST
    if not path.is_file():
        return [f"{folder}: not sealed (run `hangar knowledge seal {folder}`)"]
    try:
        data = json.loads(path.read_text())
        pinned = data.get("files", data) if isinstance(data, dict) else {}
        pinned = {k: v for k, v in pinned.items() if isinstance(v, str) and k in SEALED}
    except (ValueError, TypeError) as exc:
        return [f"{path}: unreadable manifest ({exc})"]
    unpinned = [f"{path}: pins no sha256 of {name}" for name in SEALED if name not in pinned]
    current = {name: file_sha256(folder / name) for name in SEALED if (folder / name).is_file()}
    return unpinned + pin_problems(folder, pinned, current, others_ok=True)


def sealed_suite(folder: Path) -> Suite:
    """The suite, refused unless it matches its manifest (``{"files": {name: sha256}}``
    as `seal` writes it, or a flat ``{name: sha256}``)."""
    problems = verify(folder)
    if problems:
        raise ConfigError(
            "the suite does not match its seal, so it cannot be scored (a changed question is "
            "a new suite version):\n  " + "\n  ".join(problems)
        )
    return load_suite(folder)


class Arm(BaseModel):
    """One arm's files."""

    name: str
    """The arm (``baseline-repo-search``)."""
    answers: dict[str, Answer]
    """``answers/<arm>.jsonl`` by question id."""
    meta: Meta | None
    """``answers/<arm>.meta.json`` (None: missing)."""
    labels: list[Label]
    """``labels/<arm>.jsonl`` in file order (empty: none yet)."""


def load_arm(suite: Suite, name: str) -> Arm:
    """An arm's answers, meta and labels, checked against the suite's questions."""
    path = suite.folder / "answers" / f"{name}.jsonl"
    if not path.is_file():
        known = sorted(
            p.name.removesuffix(".jsonl") for p in (suite.folder / "answers").glob("*.jsonl")
        )
        raise ConfigError(f"no answers of arm {name!r} ({path}); arms with answers: {known}")
    answers = read_jsonl(path, Answer)
    unique(path, answers)
    _known(suite, path, [a.id for a in answers])
    meta_path = suite.folder / "answers" / f"{name}.meta.json"
    meta = None
    if meta_path.is_file():
        try:
            meta = Meta.model_validate(json.loads(meta_path.read_text()))
        except (ValueError, ValidationError) as exc:
            raise ConfigError(f"{meta_path}: not a valid meta file ({exc})") from None
    labels_path = suite.folder / "labels" / f"{name}.jsonl"
    labels = read_jsonl(labels_path, Label) if labels_path.is_file() else []
    unique(labels_path, labels, key=lambda label: (label.id, label.rater))
    _known(suite, labels_path, [label.id for label in labels])
    return Arm(name=name, answers={a.id: a for a in answers}, meta=meta, labels=labels)


def add_label(suite: Suite, arm: str, label: Label) -> Path:
    """Append one rater's label of one answer to ``labels/<arm>.jsonl`` (one line at a time:
    nothing labelled is lost); a rater who labelled that answer already is refused."""
    current = load_arm(suite, arm)
    if label.id not in current.answers:
        raise ConfigError(f"arm {arm} has no answer to {label.id!r}")
    if any(x.id == label.id and x.rater == label.rater for x in current.labels):
        raise ConfigError(f"{label.rater} labelled {label.id} of {arm} already")
    path = suite.folder / "labels" / f"{arm}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(json.dumps(label.model_dump(mode="json")) + "\n")
    return path


def import_arm(suite: Suite, name: str, answers: Path, meta: Path | None) -> Arm:
    """Copy an external arm's answers (and its meta) into the suite, checked; refused when
    the arm has answers already (an arm is scored once)."""
    target = suite.folder / "answers" / f"{name}.jsonl"
    meta_target = suite.folder / "answers" / f"{name}.meta.json"
    if target.exists():
        raise ConfigError(f"{target} exists: an arm is scored once (import under a new name)")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(answers, target)
    if meta is not None:
        shutil.copyfile(meta, meta_target)
    try:
        return load_arm(suite, name)
    except ConfigError:
        target.unlink()
        meta_target.unlink(missing_ok=True)
        raise


def _known(suite: Suite, path: Path, ids: list[str]) -> None:
    strangers = sorted(set(ids) - set(suite.ids))
    if strangers:
        raise ConfigError(f"{path}: ids that are not questions of {suite.name}: {strangers}")


class VoidRecord(BaseModel):
    """Why a suite is void."""

    voided: str
    """When."""
    found: list[dict[str, str]]
    """Each canary found: question id, canary and where."""


def void_record(folder: Path) -> VoidRecord | None:
    """The suite's void record, if a scan found a canary."""
    path = folder / VOID
    if not path.is_file():
        return None
    return VoidRecord.model_validate(json.loads(path.read_text()))
