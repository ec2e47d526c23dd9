"""Harbor task directories: the task source of Terminal-Bench 2 and Harbor's adapters.

A task is a folder with ``task.toml`` (schema 1.0 to 1.3), ``instruction.md``,
``environment/`` (a Dockerfile and its context, or ``docker_image``), ``tests/test.sh``
(copied to ``/tests`` after the agent; it writes ``/logs/verifier/reward.txt`` or
``reward.json``) and optionally ``solution/solve.sh`` (the ``oracle`` agent). A dataset
is a folder of such folders. Each task loads as an `ImageTask`; what hangar cannot
honour (GPUs, several containers, Windows, steps, MCP servers) is named in its
``blocked`` reasons, so its trials are blocked_setup rather than run half-right.
"""

from __future__ import annotations

import tomllib
from pathlib import Path, PurePosixPath
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hangar.errors import ConfigError
from hangar.files import parse_size, read_config_text
from hangar.kinds.execution.images.compose import read_compose
from hangar.kinds.execution.images.task import (
    Artifact,
    Healthcheck,
    ImageSource,
    ImageTask,
    Network,
    RewardVerifier,
    Solution,
    Step,
    SwebenchGrading,
    TaskMcpServer,
    image_task_digest,
)
from hangar.trials.limits import ScenarioLimits
from hangar.validation import validation_message

TASK_FILE = "task.toml"
SCHEMAS = ("1.0", "1.1", "1.2", "1.3", "1.4")
MiB = 1024 * 1024


class _Table(BaseModel):
    """A task.toml table: known fields typed, unknown ones kept to be named."""

    model_config = ConfigDict(extra="allow")


class _Phase(_Table):
    timeout_sec: float | None = Field(default=None, gt=0)
    user: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    network_mode: str | None = None
    allowed_hosts: list[str] = Field(default_factory=list)


class _Agent(_Phase):
    setup_timeout_sec: float | None = None


class _VerifierEnvironment(_Table):
    docker_image: str | None = None
    cpus: float | None = Field(default=None, gt=0)
    memory_mb: int | None = Field(default=None, gt=0)
    network_mode: str | None = None
    allow_internet: bool | None = None


class _Verifier(_Phase):
    environment_mode: str = "shared"
    environment: _VerifierEnvironment | None = None


class _Healthcheck(_Table):
    command: str
    interval_sec: float = Field(default=5.0, ge=0)
    timeout_sec: float = Field(default=30.0, gt=0)
    start_period_sec: float = Field(default=0.0, ge=0)
    start_interval_sec: float = Field(default=5.0, ge=0)
    retries: int = Field(default=3, ge=1)


class _McpServer(_Table):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
    transport: Literal["stdio", "sse", "streamable-http", "http"] = "sse"
    url: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    headers: dict[str, str] = Field(default_factory=dict)


class _Environment(_Table):
    build_timeout_sec: float = Field(default=600, gt=0)
    docker_image: str | None = None
    os: str = "linux"
    cpus: float | None = Field(default=None, gt=0)
    memory_mb: int | None = Field(default=None, gt=0)
    memory: str | None = None
    storage_mb: int | None = Field(default=None, gt=0)
    storage: str | None = None
    gpus: int = 0
    gpu_types: list[str] | None = None
    tpu: dict[str, Any] | None = None
    allow_internet: bool | None = None
    network_mode: str | None = None
    allowed_hosts: list[str] = Field(default_factory=list)
    mcp_servers: list[_McpServer] = Field(default_factory=list)
    skills_dir: str | None = None
    healthcheck: _Healthcheck | None = None


class _Step(_Table):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    agent: _Agent = Field(default_factory=_Agent)
    verifier: _Phase = Field(default_factory=_Phase)
    min_reward: float | dict[str, float] | None = None
    healthcheck: _Healthcheck | None = None
    artifacts: list[str | dict[str, str]] = Field(default_factory=list)


class _Solution(_Table):
    env: dict[str, str] = Field(default_factory=dict)


class _Info(_Table):
    name: str | None = None
    description: str | None = None
    authors: list[Any] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)


class HarborConfig(_Table):
    """One task.toml (field names are Harbor's)."""

    schema_version: str | None = None
    version: str | None = None
    source: str | None = None
    artifacts: list[str | dict[str, str]] = Field(default_factory=list)
    task: _Info = Field(default_factory=_Info)
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: _Verifier = Field(default_factory=_Verifier)
    agent: _Agent = Field(default_factory=_Agent)
    environment: _Environment = Field(default_factory=_Environment)
    solution: _Solution = Field(default_factory=_Solution)
    steps: list[_Step] | None = None
    multi_step_reward_strategy: Literal["mean", "final"] | None = None

    @field_validator("schema_version", "version", mode="before")
    @classmethod
    def _schema(cls, value: object) -> object:
        if value is not None and str(value) not in SCHEMAS:
            raise ValueError(f"expected one of {', '.join(SCHEMAS)}, got {value!r}")
        return None if value is None else str(value)


def is_task_dir(path: Path) -> bool:
    """Whether `path` is a Harbor task folder (it holds a task.toml)."""
    return (path / TASK_FILE).is_file()


def task_files(folder: Path) -> list[Path]:
    """The task.toml of `folder` itself, or of every task folder under it (a dataset)."""
    if is_task_dir(folder):
        return [folder / TASK_FILE]
    return sorted(p for p in folder.rglob(TASK_FILE) if p.is_file())


def read_config(path: Path) -> HarborConfig:
    """Parse and validate a task.toml; errors name the file, the field and what is expected."""
    try:
        data = tomllib.loads(read_config_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    try:
        return HarborConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            validation_message(str(path), "Harbor task", exc, model=HarborConfig)
        ) from None


def load_task(path: Path) -> ImageTask:
    """The task of the folder whose task.toml is `path` (see the module docstring)."""
    path = path.resolve()
    folder = path.parent
    config = read_config(path)
    verifier = _verifier(path, config)
    steps = tuple(_step(folder, config, verifier, s) for s in config.steps or ())
    instruction = steps[0].instruction if steps else _instruction(folder)
    compose = read_compose(folder)
    env = config.environment
    task = ImageTask(
        path=path,
        name=folder.name,
        title=config.task.name or "",
        folder=folder,
        instruction=instruction,
        image=_image(folder, path, env),
        limits=_limits(path, config),
        agent_user=config.agent.user or "root",
        agent_network=_network(config.agent, env),
        verifier=verifier,
        solution=_solution(folder, config),
        steps=steps,
        step_reward=config.multi_step_reward_strategy or "mean",
        **_hangar_metadata(path, config),
        healthcheck=_healthcheck(config.environment.healthcheck),
        skills_dir=config.environment.skills_dir,
        mcp_servers=tuple(_mcp(path, s) for s in config.environment.mcp_servers),
        services=compose.services,
        service_waits=compose.main_waits,
        blocked=(*_blocked(folder, config), *compose.blocked),
        notes=(*_notes(config), *compose.notes),
        digest="",
    )
    return task.model_copy(update={"digest": image_task_digest(task)})


def _instruction(folder: Path, where: str = "") -> str:
    """The task text of `folder`'s instruction.md (`where`: the step it belongs to)."""
    path = folder / "instruction.md"
    if not path.is_file():
        raise ConfigError(f"{folder}: no instruction.md (the task text the agent gets{where})")
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise ConfigError(f"{path}: the task text is empty")
    return text


def _step(folder: Path, config: HarborConfig, verifier: RewardVerifier, step: _Step) -> Step:
    """One ``[[steps]]`` entry with its folder ``steps/<name>/``."""
    rel = f"steps/{step.name}"
    here = folder / rel
    if not here.is_dir():
        raise ConfigError(f"{folder / TASK_FILE}: [[steps]] {step.name!r}: no folder {here}")
    v = step.verifier
    min_reward = step.min_reward
    if isinstance(min_reward, int | float):
        min_reward = {"reward": float(min_reward)}
    return Step(
        name=step.name,
        instruction=_instruction(here, f" in step {step.name!r}"),
        time_s=step.agent.timeout_sec,
        verifier=verifier.model_copy(
            update={
                "tests": f"{rel}/tests",
                "timeout_s": v.timeout_sec or verifier.timeout_s,
                "user": v.user or verifier.user,
                "env": {**verifier.env, **v.env},
            }
        ),
        shared_tests="tests" if (folder / "tests").is_dir() else None,
        solution=(
            Solution(folder=f"{rel}/solution", env=dict(config.solution.env))
            if (here / "solution" / "solve.sh").is_file()
            else None
        ),
        workdir=f"{rel}/workdir" if (here / "workdir").is_dir() else None,
        healthcheck=_healthcheck(step.healthcheck),
        min_reward=min_reward,
    )


class _HangarMetadata(BaseModel):
    """``[metadata.hangar]``: what hangar adds to a task (Harbor ignores metadata)."""

    model_config = ConfigDict(extra="forbid")
    repository: str | None = None
    revision: str | None = Field(default=None, pattern=r"^[0-9a-f]{40}$")
    workdir: str | None = None
    agent_may_change: tuple[str, ...] = ()


def _hangar_metadata(path: Path, config: HarborConfig) -> dict[str, Any]:
    """The workspace's repository and the SWE-bench grading of ``[metadata]``, if any."""
    try:
        extra = _HangarMetadata.model_validate(config.metadata.get("hangar", {}))
        grading = config.metadata.get("swebench")
        found: dict[str, Any] = extra.model_dump()
        if grading is not None:
            found["grading"] = SwebenchGrading.model_validate(grading)
    except ValidationError as exc:
        raise ConfigError(validation_message(str(path), "metadata", exc)) from None
    if (extra.repository is None) != (extra.revision is None):
        raise ConfigError(f"{path}: [metadata.hangar]: give both repository and revision")
    return found


def _image(folder: Path, path: Path, env: _Environment) -> ImageSource:
    context = folder / "environment"
    if env.docker_image:
        return ImageSource(reference=env.docker_image, build_timeout_s=env.build_timeout_sec)
    if (context / "Dockerfile").is_file():
        return ImageSource(context="environment", build_timeout_s=env.build_timeout_sec)
    if (context / "docker-compose.yaml").is_file() or (context / "docker-compose.yml").is_file():
        return ImageSource(context="environment", build_timeout_s=env.build_timeout_sec)
    raise ConfigError(
        f"{path}: [environment]: no image: give `docker_image`, or put a Dockerfile in {context}"
    )


def _limits(path: Path, config: HarborConfig) -> ScenarioLimits:
    env = config.environment
    try:
        memory = env.memory_mb * MiB if env.memory_mb else _size(env.memory)
        disk = env.storage_mb * MiB if env.storage_mb else _size(env.storage)
    except ValueError as exc:
        raise ConfigError(f"{path}: [environment]: {exc}") from None
    fields: dict[str, Any] = {"time_s": config.agent.timeout_sec or 600}
    if env.cpus:
        fields["cpus"] = env.cpus
    if memory:
        fields["memory"] = memory
    if disk:
        fields["disk"] = disk
    return ScenarioLimits(**fields)


def _size(value: str | None) -> int | None:
    return None if value is None else parse_size(value.rstrip("Bb"))


def _network(phase: _Phase, env: _Environment) -> Network:
    """A phase's network: its own mode, else the environment's baseline (``allow_internet``
    is the old spelling: true is public, false is no network); unset is Harbor's default,
    public, as not declared (`Network.declared`)."""
    mode = phase.network_mode or env.network_mode
    if mode is None and env.allow_internet is not None:
        mode = "public" if env.allow_internet else "no-network"
    hosts = phase.allowed_hosts or env.allowed_hosts
    return Network.model_validate(
        {"mode": mode or "public", "allowed_hosts": hosts, "declared": mode is not None}
    )


def _verifier(path: Path, config: HarborConfig) -> RewardVerifier:
    v = config.verifier
    if v.environment_mode not in ("shared", "separate"):
        raise ConfigError(
            f"{path}: [verifier] environment_mode: expected 'shared' or 'separate', "
            f"got {v.environment_mode!r}"
        )
    image = None
    tests = path.parent / "tests"
    sizes: dict[str, Any] = {}
    if v.environment_mode == "separate" and v.environment is not None:
        sizes = {
            "cpus": v.environment.cpus,
            "memory": v.environment.memory_mb * MiB if v.environment.memory_mb else None,
        }
    if v.environment_mode == "separate":
        if v.environment is not None and v.environment.docker_image:
            image = ImageSource(reference=v.environment.docker_image)
        elif (tests / "Dockerfile").is_file():
            image = ImageSource(context="tests")
    try:
        network = _network(v, config.environment)
        artifacts = tuple(_artifact(a) for a in config.artifacts)
    except (ValueError, ValidationError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return RewardVerifier(
        timeout_s=v.timeout_sec or 600,
        user=v.user or "root",
        env=dict(v.env),
        mode=v.environment_mode,  # type: ignore[arg-type]
        image=image,
        artifacts=artifacts,
        network=network,
        **sizes,
    )


def _artifact(entry: str | dict[str, str]) -> Artifact:
    source = entry if isinstance(entry, str) else entry.get("source", "")
    target = source if isinstance(entry, str) else entry.get("destination", source)
    for value in (source, target):
        if not PurePosixPath(value).is_absolute() or ".." in PurePosixPath(value).parts:
            raise ValueError(f"artifacts: expected absolute paths without '..', got {value!r}")
    return Artifact(source=source, target=target)


def _solution(folder: Path, config: HarborConfig) -> Solution | None:
    if not (folder / "solution" / "solve.sh").is_file():
        return None
    return Solution(env=dict(config.solution.env))


def _healthcheck(check: _Healthcheck | None) -> Healthcheck | None:
    if check is None:
        return None
    return Healthcheck(
        command=check.command,
        interval_s=check.interval_sec,
        timeout_s=check.timeout_sec,
        start_period_s=check.start_period_sec,
        start_interval_s=check.start_interval_sec,
        retries=check.retries,
    )


def _blocked(folder: Path, config: HarborConfig) -> list[str]:
    """What the task asks that hangar cannot honour (each a reason to block it)."""
    env, found = config.environment, []
    if env.os != "linux":
        found.append(f"[environment] os = {env.os!r}: only Linux tasks run here")
    if env.gpus or env.gpu_types or env.tpu:
        found.append("[environment] asks for GPUs or TPUs, which hangar's sandboxes do not give")
    if not env.docker_image and not (folder / "environment" / "Dockerfile").is_file():
        found.append(
            "environment/docker-compose.yaml without environment/Dockerfile: the agent's "
            "container (`main`) needs a Dockerfile or [environment] docker_image"
        )
    found += _steps_blocked(folder, config)
    found += _mcp_blocked(folder, config)
    if not config.steps and not (folder / "tests" / "test.sh").is_file():
        found.append("tests/test.sh is missing: there is nothing to judge the task with")
    for phase in ("agent", "verifier"):
        network = _network(getattr(config, phase), env)
        if network.mode == "allowlist" and not network.allowed_hosts:
            found.append(f"the {phase}'s allowlist network names no allowed_hosts")
    return found


def _mcp(path: Path, server: _McpServer) -> TaskMcpServer:
    transport = "streamable-http" if server.transport == "http" else server.transport
    if transport == "stdio" and not server.command:
        raise ConfigError(f"{path}: mcp_servers {server.name!r}: a stdio server needs `command`")
    if transport != "stdio" and not server.url:
        raise ConfigError(f"{path}: mcp_servers {server.name!r}: {transport} needs `url`")
    return TaskMcpServer(
        name=server.name,
        transport=transport,
        url=server.url,
        command=server.command,
        args=tuple(server.args),
    )


def _mcp_blocked(folder: Path, config: HarborConfig) -> list[str]:
    """MCP servers the agent's sandbox could not reach, or that would carry a secret."""
    found = []
    services = {s.name for s in read_compose(folder).services} | {"localhost", "127.0.0.1"}
    for server in config.environment.mcp_servers:
        where = f"[[environment.mcp_servers]] {server.name!r}"
        if server.headers:
            found.append(f"{where}: headers are not passed (no credential enters a sandbox)")
        host = urlsplit(server.url or "").hostname
        if server.url and host not in services:
            found.append(
                f"{where}: {host} is not a service of the task (environment/docker-compose.yaml)"
                ": the agent's sandbox cannot reach it"
            )
    return found


def _steps_blocked(folder: Path, config: HarborConfig) -> list[str]:
    """What of a multi-step task hangar cannot honour."""
    found = []
    for step in config.steps or ():
        if not (folder / "steps" / step.name / "tests" / "test.sh").is_file():
            found.append(f"steps/{step.name}/tests/test.sh is missing: the step cannot be judged")
        if step.agent.user not in (None, config.agent.user):
            found.append(f"step {step.name!r} runs its agent as another user")
    if config.steps and config.verifier.environment_mode == "separate":
        found.append(
            "[[steps]] with a separate verifier: steps are verified only in the shared mode"
        )
    return found


def _notes(config: HarborConfig) -> list[str]:
    """Fields read and ignored, or unknown (Harbor ignores unknown keys too)."""
    notes = []
    if config.agent.setup_timeout_sec is not None:
        notes.append("[agent] setup_timeout_sec: agents are installed in the image; ignored")
    if _network(config.agent, config.environment).refused:
        notes.append("the agent asks for a public network: here it has none")
    if _network(config.verifier, config.environment).refused:
        notes.append(
            "the verifier asks for a public network: it gets one (every named host, "
            "through the audited egress proxy) only where the sweep allows it"
        )
    tables: list[tuple[str, BaseModel]] = [
        ("", config),
        ("[task] ", config.task),
        ("[agent] ", config.agent),
        ("[verifier] ", config.verifier),
        ("[environment] ", config.environment),
        ("[solution] ", config.solution),
    ]
    for step in config.steps or ():
        where = f"[[steps]] {step.name}: "
        tables += [
            (where, step),
            (where + "[agent] ", step.agent),
            (where + "[verifier] ", step.verifier),
        ]
        if step.artifacts:
            notes.append(
                f"{where}artifacts: the workspace's diff and the logs are the evidence; ignored"
            )
    for where, table in tables:
        notes += [f"{where}{key}: unknown field, ignored" for key in table.model_extra or {}]
    return notes
