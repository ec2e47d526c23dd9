"""What a task says of its service containers (how each runs, its healthcheck, its image
and limits): plain data, read without a docker engine (`hangar.sandbox.services` runs
them)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ServiceHealth", "ServiceRun", "ServiceSpec"]


class ServiceHealth(BaseModel):
    """A service's healthcheck, as compose and docker give it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    test: tuple[str, ...]
    """``CMD``/``CMD-SHELL`` and its arguments (docker's form)."""
    interval_s: float = Field(default=30.0, gt=0)
    timeout_s: float = Field(default=30.0, gt=0)
    retries: int = Field(default=3, ge=1)
    start_period_s: float = Field(default=0.0, ge=0)

    def docker(self) -> dict[str, Any]:
        """Docker's ``Healthcheck`` (nanoseconds)."""
        ns = 1_000_000_000
        return {
            "test": list(self.test),
            "interval": int(self.interval_s * ns),
            "timeout": int(self.timeout_s * ns),
            "retries": self.retries,
            "start_period": int(self.start_period_s * ns),
        }

    def patience_s(self) -> float:
        """How long it may take to become healthy."""
        return self.start_period_s + self.retries * (self.interval_s + self.timeout_s) + 5


class ServiceRun(BaseModel):
    """How a service's container runs (what the task says of it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    entrypoint: tuple[str, ...] | None = None
    """None: the image's."""
    command: tuple[str, ...] | None = None
    """None: the image's."""
    env: dict[str, str] = Field(default_factory=dict)
    user: str | None = None
    workdir: str | None = None
    healthcheck: ServiceHealth | None = None


class ServiceSpec(ServiceRun):
    """One service container: how it runs, its image and its limits."""

    name: str
    """Its name: its address on the trial's network."""
    image: str
    cpus: float = 1.0
    memory: int = 1 << 30
    pids: int = 1024
