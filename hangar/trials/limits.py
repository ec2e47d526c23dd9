"""A sandboxed trial's time and resources (an execution scenario's ``limits:``, a routing
suite's)."""

from __future__ import annotations

from pydantic import Field, field_validator

from hangar.files import parse_size
from hangar.validation import Strict


class ScenarioLimits(Strict):
    """Resource limits of a trial."""

    time_s: float = Field(default=600, gt=0)
    """Shared budget of setup (prepare, plugins) and the agent's turns, in seconds."""
    cpus: float = Field(default=1.0, gt=0)
    """CPU cores."""
    memory: int = Field(default=2 * 1024**3, gt=0)
    """Memory (``512m``, ``2g``)."""
    pids: int = Field(default=512, gt=0)
    """Most processes at once."""
    disk: int | None = None
    """Disk for everything the agent can write: workspace, HOME, /tmp (``2g``; default
    4g); enforced where hangar runs as root (see `hangar.sandbox.disk`)."""

    @field_validator("memory", "disk", mode="before")
    @classmethod
    def _size(cls, value: int | str | None) -> int | None:
        return None if value is None else parse_size(value)
