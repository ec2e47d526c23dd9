"""Where a trial's commands run: the `Sandbox` contract and its backends.

Backends are looked up by name and imported lazily, so an optional backend's client
library (the kubernetes client) is only needed when that backend is used.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from types import MappingProxyType

from pydantic import BaseModel

from hangar.errors import ConfigError
from hangar.plugins import load_target, plugin_targets
from hangar.sandbox.base import (
    ExecResult,
    Mount,
    OutputCallback,
    Sandbox,
    SandboxLimits,
    SandboxSpec,
)
from hangar.sandbox.config import PluginConfig

#: Backend name -> "module:Class", imported on first use.
BACKENDS: dict[str, str] = {
    "docker": "hangar.sandbox.docker:DockerSandbox",
    "local": "hangar.sandbox.local:LocalSandbox",
    "kubernetes": "hangar.sandbox.kubernetes:KubernetesSandbox",
}


@functools.cache
def backends() -> Mapping[str, str]:
    """Every backend: hangar's (`BACKENDS`) and installed packages' (entry points of
    ``hangar.sandboxes``, `hangar.plugins`), read once per process as the other
    registries are (scanning every installed package's entry points for each sandbox a
    trial or a warm pool made cost a trial 15-20 ms of its process's CPU)."""
    return MappingProxyType({**BACKENDS, **plugin_targets("hangar.sandboxes", BACKENDS)})


def sandbox_class(backend: str) -> type[Sandbox]:
    """The `Sandbox` class registered under `backend`."""
    known = backends()
    try:
        target = known[backend]
    except KeyError:
        names = ", ".join(sorted(known))
        raise ConfigError(f"unknown sandbox backend {backend!r}; choose one of: {names}") from None
    cls: type[Sandbox] = load_target(target)
    return cls


def create_sandbox(backend: str, spec: SandboxSpec, config: BaseModel | None = None) -> Sandbox:
    """A new, not yet started sandbox of the named backend, with that backend's settings
    (`hangar.sandbox.config`; None: its defaults)."""
    cls = sandbox_class(backend)
    if config is None or isinstance(config, PluginConfig):
        return cls(spec)
    if getattr(config, "kind", None) != backend:
        raise ConfigError(
            f"settings of backend {getattr(config, 'kind', '?')!r} given to {backend!r}"
        )
    return cls(spec, config=config)  # type: ignore[call-arg]


__all__ = [
    "BACKENDS",
    "ExecResult",
    "Mount",
    "OutputCallback",
    "Sandbox",
    "SandboxLimits",
    "SandboxSpec",
    "create_sandbox",
    "sandbox_class",
]
