"""The execution kind's fields of a sweep file: how image tasks (Harbor tasks, SWE-bench
instances) are mapped onto this cluster's images, repositories and networks, and the
fixture registry that binds scenarios to their fixtures."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hangar.trials.kind import KindSettings, SweepSettings


class SweepNetwork(BaseModel):
    """The sweep's network policy for image tasks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allow_public: bool = False
    """Give a phase that asks for a public network every named host (through the audited
    egress proxy: raw IPs refused, each attempt recorded); off: the agent's runs with no
    network and a verifier that needs one is blocked_setup."""
    host_services: tuple[str, ...] = ()
    """Services of the worker itself (``127.0.0.1:8799``, ``[::1]:8080``, or
    ``localhost:8799``) an allowlisted name may reach. Without one, the egress proxy refuses
    every loopback, private, link-local and metadata address a name resolves to."""

    builds: tuple[str, ...] | None = None
    """What a task image's build (its Dockerfile's ``RUN`` steps) may reach, as allowlist
    entries (``host``, ``*.domain``, ``host:port``), through the audited egress proxy:
    public addresses only, or the `host_services` named. Default: the package registries
    (Debian, Ubuntu, Alpine, PyPI, npm, crates.io, Go, conda) and GitHub's downloads; ``[]``
    builds with no network at all. A build never reaches the worker itself."""

    @field_validator("host_services")
    @classmethod
    def _host_port(cls, entries: tuple[str, ...]) -> tuple[str, ...]:
        for entry in entries:
            host, sep, port = entry.rpartition(":")
            if not sep or not host or not port.isascii() or not port.isdigit():
                raise ValueError(f"{entry!r}: a host service is ADDRESS:PORT or NAME:PORT")
            if not 0 < int(port) < 65536:
                raise ValueError(f"{entry!r}: the port must be 1 to 65535")
        return entries


class ExecutionSettings(KindSettings):
    """Fields of a sweep file for execution scenarios and image tasks."""

    image_map: dict[str, str] = Field(default_factory=dict)
    """Image references rewritten for image tasks (Harbor tasks): their ``FROM`` lines and
    ``docker_image``; keys are references or fnmatch patterns (``ubuntu:*``), for a mirror
    or a machine's own images."""
    reward_threshold: float | None = Field(default=None, ge=0, le=1)
    """The reward at or above which an image task's trial passes (default 1)."""
    network: SweepNetwork = Field(default_factory=SweepNetwork)
    """What networks image tasks may have beyond their allowlists."""
    repo_map: dict[str, str] = Field(default_factory=dict)
    """Repositories of image tasks rewritten: a URL or a SWE-bench ``owner/name`` -> a
    mirror's URL or a local path (relative to the sweep file)."""
    fixtures: str | None = None
    """A fixture registry (a JSON list of ``{caseId, repository, revision, context,
    prepare?, verifier}``, relative to the sweep file): it binds each case id's scenario
    to a local repository, revision, task text and host scripts (`hangar run --fixtures`
    gives one instead)."""

    def located(self, base: Path) -> Self:
        """Local repositories and the fixture registry read from the sweep's folder."""
        repo_map = {
            k: v if "://" in v or v.startswith("git@") else str((base / v).resolve())
            for k, v in self.repo_map.items()
        }
        fixtures = str(base / self.fixtures) if self.fixtures else None
        return self.model_copy(update={"repo_map": repo_map, "fixtures": fixtures})


def execution_settings(**fields: Any) -> SweepSettings:
    """The settings of a sweep that gives these execution `fields` (``image_map=...``)."""
    return SweepSettings.holding(ExecutionSettings.model_validate(fields))
