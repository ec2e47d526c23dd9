"""Each sandbox backend's settings: the models a sweep's ``backend:`` section fills.

``backend: docker`` is short for ``backend: {kind: docker}``; a mapping names the kind
and that backend's settings, validated like every config (an unknown key or a bad value
is refused, naming it). The settings travel in each trial's spec, and the effective
settings (with the defaults and environment variables applied) are written to the
trial's evidence (``backend.json``). They never change a trial's key: where a trial ran
is not what it is.
"""

from __future__ import annotations

import difflib
import os
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    field_validator,
)

#: Label and annotation prefix hangar's own sandbox labels use (not the user's to set).
RESERVED_PREFIX = "hangar."


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DockerConfig(_Settings):
    """The docker backend: one container per trial on the node's engine."""

    kind: Literal["docker"] = "docker"
    runtime: str | None = Field(
        default_factory=lambda: os.environ.get("HANGAR_DOCKER_RUNTIME") or None
    )
    """OCI runtime of sandbox containers, e.g. ``runsc`` (gVisor) when the engine has it
    (``$HANGAR_DOCKER_RUNTIME``; default: the engine's default runtime)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra container labels (cost centre, team...); ``hangar.*`` is hangar's own."""

    @field_validator("labels")
    @classmethod
    def _not_reserved(cls, labels: dict[str, str]) -> dict[str, str]:
        return _no_reserved_keys(labels)


class LocalConfig(_Settings):
    """The local backend: commands run on the host as the worker's user (tests only)."""

    kind: Literal["local"] = "local"


class Toleration(_Settings):
    """A pod toleration, as Kubernetes writes it."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    tolerationSeconds: int | None = Field(default=None, ge=0)


class KubernetesConfig(_Settings):
    """The kubernetes backend: one pod per trial."""

    kind: Literal["kubernetes"] = "kubernetes"
    namespace: str = Field(
        default_factory=lambda: os.environ.get("HANGAR_K8S_NAMESPACE") or "hangar-sandboxes",
        pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    )
    """Namespace of sandbox pods (``$HANGAR_K8S_NAMESPACE``; the NetworkPolicy goes there)."""
    runtime_class: str | None = Field(
        default_factory=lambda: os.environ.get("HANGAR_K8S_RUNTIME_CLASS") or None
    )
    """runtimeClassName, e.g. ``gvisor`` (``$HANGAR_K8S_RUNTIME_CLASS``)."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    """imagePullPolicy of the sandbox container."""
    schedule_timeout_s: float = Field(default=300, gt=0)
    """How long a pod may take to be scheduled and started before the trial gives up."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """nodeSelector of sandbox pods."""
    tolerations: list[Toleration] = Field(default_factory=list)
    """Tolerations of sandbox pods (e.g. for a tainted pool of sandbox nodes)."""
    service_account: str | None = None
    """serviceAccountName of sandbox pods (its token is never mounted)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra pod labels; ``hangar.*`` is hangar's own."""

    @field_validator("labels")
    @classmethod
    def _not_reserved(cls, labels: dict[str, str]) -> dict[str, str]:
        return _no_reserved_keys(labels)


#: hangar's own backends (their settings are the models above).
_BUILTIN = ("docker", "local", "kubernetes")


class PluginConfig(_Settings):
    """A backend from an installed package (an entry point of ``hangar.sandboxes``,
    `hangar.plugins`): named, run with its own defaults."""

    kind: str
    """The entry point's name."""

    @field_validator("kind")
    @classmethod
    def _installed(cls, value: str) -> str:
        from hangar.plugins import plugin_targets

        found = plugin_targets("hangar.sandboxes", dict.fromkeys(_BUILTIN))
        if value in _BUILTIN or value not in found:
            names = [*_BUILTIN, *sorted(found)]
            near = difflib.get_close_matches(value, names, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ValueError(
                f"unknown sandbox backend {value!r}{hint}; choose one of: {', '.join(names)}"
            )
        return value


def _no_reserved_keys(labels: dict[str, str]) -> dict[str, str]:
    reserved = sorted(k for k in labels if k.startswith(RESERVED_PREFIX))
    if reserved:
        raise ValueError(f"labels {reserved} use the prefix {RESERVED_PREFIX!r}, hangar's own")
    return labels


def _short_form(value: Any) -> Any:
    """``docker`` -> ``{kind: docker}``."""
    return {"kind": value} if isinstance(value, str) else value


def _backend_tag(value: Any) -> str:
    """hangar's own backend by its name; any other name is a package's (`PluginConfig`)."""
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if kind in _BUILTIN else "plugin"


BackendConfig = Annotated[
    Annotated[DockerConfig, Tag("docker")]
    | Annotated[LocalConfig, Tag("local")]
    | Annotated[KubernetesConfig, Tag("kubernetes")]
    | Annotated[PluginConfig, Tag("plugin")],
    Discriminator(_backend_tag),
    BeforeValidator(_short_form),
]
"""A backend's settings: ``backend: NAME`` or ``backend: {kind: NAME, ...}``."""


def backend_settings(
    value: str | dict[str, Any],
) -> DockerConfig | LocalConfig | KubernetesConfig | PluginConfig:
    """A backend's settings from its name or a ``backend:`` mapping (validated)."""
    return TypeAdapter(BackendConfig).validate_python(value)
