"""What a verifier is, as a task declares it: the host verifier (a pinned script or a
builtin one), the hidden files, the original commands, the checklist, the test harness.

These are the verifiers' own settings models: the execution kind's task sources (a
scenario file today) fill them, and everything under `hangar.verifiers` reads them.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator

from hangar.files import check_pin
from hangar.validation import Strict


def relative_inside(value: str, what: str) -> str:
    """`value` when it is a relative path that stays inside the workspace."""
    p = PurePosixPath(value)
    if p.is_absolute() or ".." in p.parts or not value.strip():
        raise ValueError(f"{what} must be a relative path inside the workspace, got {value!r}")
    return value


class PinnedFile(Strict):
    """A trusted script pinned by its sha256 (prepare, host verifier)."""

    file: str
    """Script path (relative to the scenario file); ends .py/.js/.mjs/.mts or is executable."""
    sha256: str
    """``sha256:`` followed by 64 lowercase hex characters: the script's exact bytes."""

    @field_validator("sha256")
    @classmethod
    def _digest(cls, value: str) -> str:
        return check_pin(value)


class BuiltinVerifier(Strict):
    """One of hangar's ready verifiers instead of a script of your own."""

    builtin: Literal["junit"]
    """``junit``: judges from the verifier commands' exit codes and JUnit XML reports."""
    scope: tuple[str, ...] = ()
    """Paths the agent may change (fnmatch patterns relative to the workspace, ``*``
    matching ``/`` too); empty: any path but the test files the checklist names."""


class VerifierFile(Strict):
    """A file or folder copied into the workspace only after the agent's turns."""

    source: str
    """File or folder, relative to the scenario file."""
    target: str
    """Relative path in the workspace (e.g. ``tests/hidden``)."""

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        return relative_inside(value, "target")


def _host_kind(value: Any) -> str:
    if isinstance(value, BuiltinVerifier) or (isinstance(value, dict) and "builtin" in value):
        return "builtin-verifier"
    return "pinned-file"


HostVerifier = Annotated[
    Annotated[PinnedFile, Tag("pinned-file")] | Annotated[BuiltinVerifier, Tag("builtin-verifier")],
    Discriminator(_host_kind),
]


class HarnessSpec(Strict):
    """The test harness of a scenario beyond what hangar knows (`hangar.verifiers.harness`):
    files that change how its tests are collected, run or reported are put back as they
    were before the agent, and a change of one fails scope."""

    allow: tuple[str, ...] = ()
    """Harness paths the agent may change, kept as it left them (fnmatch patterns relative
    to the workspace, ``*`` matching ``/`` too): e.g. ``tests/conftest.py``. A builtin
    verifier's ``scope`` pattern that names a file (no wildcard in its last part) allows
    that file too."""
    also: tuple[str, ...] = ()
    """More harness files: ones the verifier commands read (a ``Makefile``, a script, an
    environment file they source), put back like the rest."""


class VerifierSpec(Strict):
    """How a trial is judged."""

    host: HostVerifier
    """The host verifier: ``{file, sha256}`` or ``{builtin: junit}``."""
    files: tuple[VerifierFile, ...] = ()
    """Hidden files (e.g. tests) copied in after the agent, before the commands."""
    commands: tuple[str, ...] = ()
    """Shell command lines run by bash in the workspace after the agent; all must exit 0."""
    checklist: tuple[str, ...] = ()
    """Exact requirement strings the verification must cover, each exactly once."""
    timeout_s: float = Field(default=600, gt=0)
    """Time limit of each verifier command."""
    host_timeout_s: float = Field(default=120, gt=0)
    """Time limit of the host verifier."""
    harness: HarnessSpec = Field(default_factory=HarnessSpec)
    """The test harness: what the agent may change of it, and files it also holds."""

    @field_validator("checklist")
    @classmethod
    def _unique(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        seen = {item for item in value if value.count(item) > 1}
        if seen:
            raise ValueError(f"checklist items must be unique; repeated: {sorted(seen)}")
        return value
