"""A suite's questions made ready to run as repo-search trials (`hangar.kinds.knowledge.trial`).

Each `LoadedQuestion` carries the question's text, the repositories it may read (name ->
URL or path) at their ``as_of`` commits, the ``scope`` patterns and the image: never its
key, its answer or its canary. Repositories are named in the suite's
``repositories.yaml`` (name: URL or path relative to the suite) or given on the command
line; a question's ``as_of`` is ``{name: commit}``, or one commit when there is one
repository. ``scope`` is a pattern or a list (``docs/``, ``src/*.py``, or
``name:pattern`` for one repository; none: everything at ``as_of``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import ConfigDict

from hangar.errors import ConfigError
from hangar.files import read_yaml
from hangar.kinds.knowledge.custody import Suite
from hangar.kinds.knowledge.formats import Question
from hangar.trials.spec import Task

DEFAULT_IMAGE = "hangar/base:bookworm"


class LoadedQuestion(Task):
    """One question, ready to run as a repo-search trial."""

    model_config = ConfigDict(frozen=True)
    key_field: ClassVar[str] = "question"

    kind: Literal["knowledge"] = "knowledge"
    """The kind of trial a question is."""
    path: Path
    """The suite's questions.jsonl."""
    suite: str
    """The suite's name."""
    question: Question
    """The question (its text, kind, as_of and scope)."""
    repositories: dict[str, str]
    """Repository name -> URL or absolute path."""
    commits: dict[str, str]
    """Repository name -> the commit it is read at (``as_of``)."""
    scope: dict[str, list[str]]
    """Repository name -> path patterns it may read (empty: all)."""
    image: str = DEFAULT_IMAGE
    """The sandbox's image."""
    arm: str = "baseline-repo-search"
    """The arm it is asked in (the name its answers are kept under)."""
    digest: str
    """The question's version (its fields, repositories, commits, scope and image)."""

    @property
    def id(self) -> str:
        """The question's id (the ``scenario_id`` of its results)."""
        return self.question.id


def repositories(suite: Suite, given: dict[str, str]) -> dict[str, str]:
    """The suite's ``repositories.yaml``, overridden by `given`; paths made absolute."""
    path = suite.folder / "repositories.yaml"
    named = read_yaml(path) if path.is_file() else {}
    if not isinstance(named, dict):
        raise ConfigError(f"{path}: a mapping of repository name -> URL or path")
    merged = {str(k): str(v) for k, v in named.items()} | given
    return {
        name: url
        if "://" in url or url.startswith("git@")
        else str((suite.folder / url).resolve() if not Path(url).is_absolute() else Path(url))
        for name, url in merged.items()
    }


def _scope(question: Question, names: list[str]) -> dict[str, list[str]]:
    raw = question.scope
    patterns = [raw] if isinstance(raw, str) else list(raw or [])
    if not all(isinstance(p, str) for p in patterns):
        raise ConfigError(f"question {question.id}: scope is a pattern or a list of patterns")
    scope: dict[str, list[str]] = {name: [] for name in names}
    for pattern in patterns:
        repo, sep, rest = pattern.partition(":")
        if sep and repo in scope:
            scope[repo].append(rest)
        else:
            for name in names:
                scope[name].append(pattern)
    return scope


def load_questions(
    suite: Suite, given: dict[str, str] | None = None, image: str = DEFAULT_IMAGE
) -> list[LoadedQuestion]:
    """Every question of `suite` ready to run (see the module docstring)."""
    repos = repositories(suite, given or {})
    loaded = []
    for q in suite.questions:
        if isinstance(q.as_of, dict):
            commits = dict(q.as_of)
        elif len(repos) == 1:
            commits = {next(iter(repos)): q.as_of}
        else:
            raise ConfigError(
                f"question {q.id}: as_of is one commit but the suite names {len(repos)} "
                f"repositories ({sorted(repos)}): write as_of as {{repository: commit}}"
            )
        unknown = sorted(set(commits) - set(repos))
        if unknown:
            raise ConfigError(
                f"question {q.id} reads repositories {unknown}: name them in "
                f"{suite.folder / 'repositories.yaml'} or with --repo NAME=URL"
            )
        scope = _scope(q, sorted(commits))
        used = {name: repos[name] for name in commits}
        version = {
            "question": q.model_dump(mode="json"),
            "repositories": used,
            "commits": commits,
            "scope": scope,
            "image": image,
        }
        loaded.append(
            LoadedQuestion(
                path=suite.folder / "questions.jsonl",
                suite=suite.name,
                question=q,
                repositories=used,
                commits=commits,
                scope=scope,
                image=image,
                digest=hashlib.sha256(json.dumps(version, sort_keys=True).encode()).hexdigest(),
            )
        )
    return loaded
