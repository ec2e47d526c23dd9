"""A Harbor task's ``environment/docker-compose.yaml``: the services beside the agent.

As in Harbor, the file is read over a base where ``main`` is the agent's container (its
image, command, mounts and limits are hangar's); the file adds services and may give
``main`` a ``depends_on``. Each other service is read into a `Service`: its image (a
``build`` context under the task folder, or an ``image``), entrypoint, command,
environment, user, working directory, healthcheck, ``depends_on`` and ``mem_limit`` /
``cpus``. What would reach past the trial's own network or the host (``ports``,
``volumes``, ``network_mode``, ``privileged``, ``cap_add``, devices...) is refused: the
task is blocked with the key named. What changes nothing here (``expose``, ``restart``,
``container_name``...) is noted and ignored: every port of a service is open to the
other members of the trial's network, and nothing outside it.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field

from hangar.errors import ConfigError
from hangar.files import parse_size
from hangar.kinds.execution.images.task import Condition, ImageSource, Service
from hangar.sandbox.service_specs import ServiceHealth
from hangar.validation import Strict

COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
#: Keys of a service that change nothing here (noted, ignored).
IGNORED = {"expose", "restart", "container_name", "labels", "init", "stop_grace_period"}
#: Keys of ``main`` hangar reads; the rest of it is hangar's (noted, ignored).
MAIN_KEYS = {"depends_on"}
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)")
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class Compose(Strict):
    """What a compose file gives: the services, what the agent waits for, what blocks
    the task and what was ignored."""

    services: tuple[Service, ...] = ()
    """In an order that starts each after what it depends on."""
    main_waits: dict[str, Condition] = Field(default_factory=dict)
    """``main``'s ``depends_on``: the services the agent waits for."""
    blocked: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def compose_file(folder: Path) -> Path | None:
    """The compose file of a task folder's ``environment/``, if any."""
    for name in COMPOSE_FILES:
        if (folder / "environment" / name).is_file():
            return folder / "environment" / name
    return None


def read_compose(folder: Path) -> Compose:
    """The compose file of the task in `folder` (an empty `Compose` when it has none)."""
    path = compose_file(folder)
    if path is None:
        return Compose()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("services") or {}, dict):
        raise ConfigError(f"{path}: expected a mapping with `services:` (a mapping by name)")
    where = f"{path.relative_to(folder)}"
    blocked: list[str] = []
    notes: list[str] = []
    for key in ("volumes", "networks", "secrets", "configs"):
        if data.get(key):
            blocked.append(f"{where}: top-level `{key}` is not supported")
    services, waits = [], {}
    for name, body in (data.get("services") or {}).items():
        body = body or {}
        if not isinstance(body, dict):
            raise ConfigError(f"{path}: services.{name}: expected a mapping")
        if name == "main":
            waits = _depends(path, name, body.get("depends_on"))
            notes += [
                f"{where}: services.main.{key}: the agent's container is hangar's; ignored"
                for key in body
                if key not in MAIN_KEYS
            ]
            continue
        service, problems, ignored = _service(path, folder, str(name), body)
        blocked += [f"{where}: services.{name}: {p}" for p in problems]
        notes += [f"{where}: services.{name}.{k}: ignored" for k in ignored]
        if service is not None:
            services.append(service)
    known = {s.name for s in services}
    for owner, needs in [("main", waits), *((s.name, s.depends_on) for s in services)]:
        for needed in needs:
            if needed not in known:
                raise ConfigError(f"{path}: services.{owner}.depends_on: no service {needed!r}")
    return Compose(
        services=tuple(_ordered(path, services)),
        main_waits=waits,
        blocked=tuple(blocked),
        notes=tuple(notes),
    )


def _service(
    path: Path, folder: Path, name: str, body: dict[str, Any]
) -> tuple[Service | None, list[str], list[str]]:
    """One service: it, what of it blocks the task, and what of it was ignored."""
    if not _NAME.match(name):
        raise ConfigError(f"{path}: services.{name}: a name of a-z, 0-9, '_', '.' and '-'")
    readers = {
        "build",
        "image",
        "entrypoint",
        "command",
        "environment",
        "user",
        "working_dir",
        "healthcheck",
        "depends_on",
        "mem_limit",
        "cpus",
    }
    problems = [f"`{k}` is not supported" for k in body if k not in readers | IGNORED]
    ignored = [k for k in body if k in IGNORED]
    try:
        service = Service(
            name=name,
            image=_image(path, folder, body),
            entrypoint=_argv(body.get("entrypoint")),
            command=_argv(body.get("command")),
            env=_env(body.get("environment")),
            user=None if body.get("user") is None else str(body["user"]),
            workdir=body.get("working_dir"),
            healthcheck=_health(body.get("healthcheck")),
            depends_on=_depends(path, name, body.get("depends_on")),
            cpus=body.get("cpus"),
            memory=None if body.get("mem_limit") is None else _size(body["mem_limit"]),
        )
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: services.{name}: {exc}") from None
    return service, problems, ignored


def _image(path: Path, folder: Path, body: dict[str, Any]) -> ImageSource:
    build = body.get("build")
    if build is None:
        if not body.get("image"):
            raise ValueError("give `build` (a folder beside the compose file) or `image`")
        return ImageSource(reference=str(body["image"]))
    if isinstance(build, str):
        build = {"context": build}
    if not isinstance(build, dict) or set(build) - {"context", "dockerfile"}:
        raise ValueError("`build`: only `context` and `dockerfile` are supported")
    context = (path.parent / str(build.get("context", "."))).resolve()
    if not context.is_relative_to(folder.resolve()) or not context.is_dir():
        raise ValueError(f"`build.context`: {context} is not a folder of the task")
    return ImageSource(
        context=context.relative_to(folder.resolve()).as_posix(),
        dockerfile=str(build.get("dockerfile", "Dockerfile")),
    )


def _argv(value: object) -> tuple[str, ...] | None:
    """Compose's command forms: a list as it is, a string split as a shell would."""
    if value is None:
        return None
    if isinstance(value, str):
        return tuple(shlex.split(value))
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    raise ValueError(f"expected a string or a list, got {value!r}")


def _env(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k): "" if v is None else str(v) for k, v in value.items()}
    if isinstance(value, list):
        return dict(str(v).partition("=")[::2] for v in value)
    raise ValueError(f"`environment`: expected a mapping or a list, got {value!r}")


def _health(value: object) -> ServiceHealth | None:
    if not isinstance(value, dict) or value.get("disable"):
        return None
    test = value.get("test")
    if isinstance(test, str):
        test = ["CMD-SHELL", test]
    if not isinstance(test, list) or not test or test[0] == "NONE":
        return None
    timings = {
        f"{key}_s": _seconds(value[key])
        for key in ("interval", "timeout", "start_period")
        if value.get(key) is not None
    }
    return ServiceHealth(
        test=tuple(str(t) for t in test), retries=int(value.get("retries", 3)), **timings
    )


def _depends(path: Path, name: str, value: object) -> dict[str, Condition]:
    if value is None:
        return {}
    if isinstance(value, list):
        return {str(v): "started" for v in value}
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: services.{name}.depends_on: expected a list or a mapping")
    found: dict[str, Condition] = {}
    for other, how in value.items():
        condition = (how or {}).get("condition", "service_started")
        if condition not in ("service_started", "service_healthy"):
            raise ConfigError(
                f"{path}: services.{name}.depends_on.{other}: condition {condition!r} is not "
                "supported (service_started or service_healthy)"
            )
        found[str(other)] = "healthy" if condition == "service_healthy" else "started"
    return found


def _ordered(path: Path, services: list[Service]) -> list[Service]:
    """`services` with each after what it depends on (a cycle is an error)."""
    by_name = {s.name: s for s in services}
    done: list[Service] = []
    visiting: set[str] = set()

    def visit(service: Service) -> None:
        if service in done:
            return
        if service.name in visiting:
            raise ConfigError(f"{path}: depends_on: a cycle through {service.name!r}")
        visiting.add(service.name)
        for other in service.depends_on:
            visit(by_name[other])
        visiting.discard(service.name)
        done.append(service)

    for service in services:
        visit(service)
    return done


def _seconds(value: object) -> float:
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"expected a duration such as 2s or 1m30s, got {value!r}")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _size(value: object) -> int:
    text = str(value).strip().lower().rstrip("b")
    return parse_size(text)
