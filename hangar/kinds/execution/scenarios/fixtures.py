"""Fixture registries: the operator's binding of scenario case ids to local fixtures.

A fixture registry is a JSON list, one entry per case id, in the skill-evals format::

    [{"caseId": "review-diff",
      "repository": "/abs/path/to/repo",
      "revision": "<40 hex>",
      "context": "the task text",
      "prepare": {"file": "/abs/prepare.mjs", "sha256": "sha256:<64 hex>"},
      "verifier": {"file": "/abs/verify.mjs", "sha256": "sha256:<64 hex>"}}]

``prepare`` is optional. The case id selects the scenario of the sweep with that id, and
the entry gives it its repository, revision, task text, host verifier and (when the entry
has one) prepare script, replacing what the scenario file says of them: a scenario file may
then leave them out (an execution *definition*: its checklist, commands, plugins, limits).
Relative paths are read from the registry file's folder.

Admission (`Registry.admit`): a malformed entry, a repeated case id, or a case id no scenario
of the sweep has refuses the whole run. A scenario file without its repository and without
a fixture is ``blocked_setup`` ("no fixture"), with no model call.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hangar.errors import AdmissionError, ConfigError
from hangar.files import read_data
from hangar.kinds.execution.scenarios.scenario import pinned_revision, task_text
from hangar.validation import CaseId, validation_message
from hangar.verifiers.spec import PinnedFile


class Fixture(BaseModel):
    """One entry of a fixture registry."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    case_id: CaseId = Field(alias="caseId")
    """The scenario it binds (its ``id``)."""
    repository: str
    """The repository: an absolute path (or relative to the registry file), or a URL."""
    revision: str
    """The exact commit: 40 lowercase hex characters."""
    context: str
    """The task text the agent gets; it must not hold the expected answers."""
    prepare: PinnedFile | None = None
    """Host script run on the fresh workspace before the agent."""
    verifier: PinnedFile
    """The host verifier."""

    _revision = field_validator("revision", mode="before")(pinned_revision)
    _context = field_validator("context")(task_text)

    def bind(self, raw: dict[str, Any], folder: Path) -> dict[str, Any]:
        """The scenario file's data `raw` with this fixture's fields (paths made absolute
        from the registry's `folder`)."""

        def where(path: str) -> str:
            return str((folder / path).resolve())

        repo = self.repository
        local = "://" not in repo and not repo.startswith("git@")
        bound = dict(raw)
        bound.update(
            repository=where(repo) if local else repo,
            revision=self.revision,
            context=self.context,
        )
        if self.prepare is not None:
            bound["prepare"] = {"file": where(self.prepare.file), "sha256": self.prepare.sha256}
        verifier = dict(bound.get("verifier") or {})
        verifier["host"] = {"file": where(self.verifier.file), "sha256": self.verifier.sha256}
        bound["verifier"] = verifier
        return bound


class Registry(BaseModel):
    """A fixture registry file, read and admitted."""

    path: Path
    """The file."""
    fixtures: dict[str, Fixture]
    """Entries by case id."""

    @property
    def folder(self) -> Path:
        """The folder relative paths of its entries are read from."""
        return self.path.parent

    def bind(self, raw: Any, scenario_file: Path) -> Any:
        """The scenario data `raw` bound to its fixture, or as it is when it has none
        (a scenario with its own repository runs as itself; one without is refused by
        `missing_fixture`)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
            return raw
        fixture = self.fixtures.get(raw["id"])
        return raw if fixture is None else fixture.bind(raw, self.folder)

    def admit(self, ids: Iterable[str]) -> None:
        """Refuse the run when an entry binds a case id that none of `ids` is."""
        known = set(ids)
        unknown = sorted(set(self.fixtures) - known)
        if unknown:
            raise AdmissionError(
                f"{self.path}: unknown case id(s) {', '.join(map(repr, unknown))}: no scenario "
                "of the sweep has that id (fix the caseId, or add the scenario to the sweep's "
                "`scenarios:`); fixture admission failed, nothing ran"
            )


def missing_fixture(path: Path, raw: Any, registry: Registry | None) -> str | None:
    """Why the scenario data `raw` cannot run for want of a fixture (no ``repository`` of
    its own and none bound), or None."""
    if not isinstance(raw, dict) or "repository" in raw:
        return None
    case = raw.get("id", path.stem)
    if registry is None:
        return (
            f"{path}: scenario {case!r} has no repository of its own and no fixture "
            "registry was given: give `repository`, `revision`, `context` and "
            "`verifier.host` here, or bind the case id in a registry (`hangar run "
            "--fixtures FILE`, or the sweep's `fixtures:`); a missing fixture is "
            "blocked_setup with no model call"
        )
    return (
        f"{path}: no fixture for case id {case!r} in {registry.path}: add an entry with "
        '"caseId": ' + f'"{case}"; a missing fixture is blocked_setup with no model call'
    )


def read_registry(path: Path) -> Registry:
    """Read and admit a fixture registry (see the module docstring); errors name the
    file, the entry and the field, and refuse the whole run."""
    path = path.resolve()
    if not path.is_file():
        raise AdmissionError(f"{path}: no such fixture registry (give the path of its JSON file)")
    try:
        data = read_data(path)
    except ConfigError as exc:
        raise AdmissionError(str(exc)) from None
    if not isinstance(data, list):
        raise AdmissionError(
            f"{path}: a fixture registry is a JSON list of entries "
            "({caseId, repository, revision, context, prepare?, verifier}), "
            f"got {type(data).__name__}"
        )
    fixtures: dict[str, Fixture] = {}
    for i, entry in enumerate(data):
        try:
            fixture = Fixture.model_validate(entry)
        except ValidationError as exc:
            raise AdmissionError(
                validation_message(f"{path}: entry {i}", "fixture", exc, model=Fixture)
            ) from None
        if fixture.case_id in fixtures:
            raise AdmissionError(
                f"{path}: entry {i}: duplicate case id {fixture.case_id!r} (each case id is "
                "bound once); fixture admission failed, nothing ran"
            )
        fixtures[fixture.case_id] = fixture
    return Registry(path=path, fixtures=fixtures)
