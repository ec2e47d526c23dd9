"""Image tasks: execution tasks whose fixture is an image, not a git repository.

The environment is the image (built from a task's build context, or a reference); the
workspace is the image's working directory, taken out on the host at the start and
served from the trial's size-capped disk at the same path; the judge is a test script
copied in after the agent, which writes a reward (`hangar.kinds.execution.images.rewards`).
Harbor task directories load into this shape (`hangar.kinds.execution.harbor.tasks`); the trial
is `hangar.kinds.execution.images.trial`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

from pydantic import ConfigDict, Field

from hangar.files import tree_digest
from hangar.kinds.execution.task import ExecutionTask
from hangar.sandbox import observe
from hangar.sandbox.service_specs import ServiceRun
from hangar.trials.limits import ScenarioLimits
from hangar.validation import Strict

if TYPE_CHECKING:
    from hangar.kinds.execution.settings import ExecutionSettings
    from hangar.trials.boundary import TrialRun
    from hangar.trials.kind import Matrix
    from hangar.trials.spec import TrialSpec

NetworkMode = Literal["no-network", "allowlist", "public"]


class ImageSource(Strict):
    """Where a task's image comes from: a build context, or a reference."""

    context: str | None = None
    """Build context folder, relative to the task folder (``environment``)."""
    dockerfile: str = "Dockerfile"
    """The Dockerfile, relative to the context."""
    reference: str | None = None
    """An image reference used as it is (``docker_image``), when there is no context."""
    build_timeout_s: float = Field(default=600, gt=0)
    """Time limit of a build."""


class Network(Strict):
    """The network of one phase: off, an allowlist through the egress proxy, or public."""

    mode: NetworkMode = "no-network"
    """``no-network``, ``allowlist`` or ``public``."""
    allowed_hosts: tuple[str, ...] = ()
    """Host names (``host`` or ``host:port``) an allowlist lets through."""
    declared: bool = True
    """Whether the task named this mode; an unset network is Harbor's default (public),
    which a verifier gets only where the sweep allows it and otherwise runs without."""

    def hosts(self, allow_public: bool) -> tuple[str, ...] | None:
        """What the egress proxy lets through in this phase (None: no network at all)."""
        if self.mode == "allowlist":
            return self.allowed_hosts
        if self.mode == "public" and allow_public:
            return ("*:*",)
        return None

    @property
    def refused(self) -> bool:
        """A public network the task asked for in so many words (refused unless allowed)."""
        return self.mode == "public" and self.declared


class Artifact(Strict):
    """A path copied from the agent's sandbox into a separate verifier's, at ``target``."""

    source: str
    """Absolute path in the agent's sandbox."""
    target: str
    """Absolute path in the verifier's sandbox (default: the same)."""


class RewardVerifier(Strict):
    """The judge of an image task: a test script that writes a reward."""

    tests: str = "tests"
    """Folder copied to ``/tests`` after the agent, relative to the task folder."""
    script: str = "test.sh"
    """The script in it that runs the tests (by bash, in the working directory)."""
    timeout_s: float = Field(default=600, gt=0)
    """Time limit of the script."""
    user: str = "root"
    """The user it runs as."""
    env: dict[str, str] = Field(default_factory=dict)
    """Its environment."""
    mode: Literal["shared", "separate"] = "shared"
    """``shared``: the agent's sandbox, every process of it gone; ``separate``: a fresh
    sandbox from `image` with the `artifacts` copied over."""
    image: ImageSource | None = None
    """The separate verifier's image (default: the task's)."""
    artifacts: tuple[Artifact, ...] = ()
    """What a separate verifier gets from the agent's sandbox."""
    cpus: float | None = Field(default=None, gt=0)
    """A separate verifier's CPU cores (default: the task's)."""
    memory: int | None = Field(default=None, gt=0)
    """A separate verifier's memory in bytes (default: the task's)."""
    network: Network = Field(default_factory=Network)
    """The verifier's network."""


class Healthcheck(Strict):
    """A command that must succeed in the agent's sandbox before the agent starts (Harbor's
    ``[environment.healthcheck]``, Docker's HEALTHCHECK options)."""

    command: str
    """Shell command; exit 0 means healthy."""
    interval_s: float = Field(default=5.0, ge=0)
    """Between attempts."""
    timeout_s: float = Field(default=30.0, gt=0)
    """For one attempt."""
    start_period_s: float = Field(default=0.0, ge=0)
    """A grace period after the start in which failures do not count."""
    start_interval_s: float = Field(default=5.0, ge=0)
    """Between attempts in the grace period."""
    retries: int = Field(default=3, ge=1)
    """Consecutive failures after which the environment is unhealthy."""


class Solution(Strict):
    """The reference solution the ``oracle`` agent runs."""

    folder: str = "solution"
    """Folder copied to ``/solution``, relative to the task folder."""
    script: str = "solve.sh"
    """The script in it that solves the task."""
    env: dict[str, str] = Field(default_factory=dict)
    """Its environment."""


Condition = Literal["started", "healthy"]


class TaskMcpServer(Strict):
    """An MCP server the task gives its agent (Harbor's ``[[environment.mcp_servers]]``):
    a command of the image spoken to on stdio, or a service of the task at a URL."""

    name: str
    transport: Literal["stdio", "sse", "streamable-http"] = "sse"
    url: str | None = None
    """Its address (the HTTP transports): a service of the task, or the sandbox's own
    loopback."""
    command: str | None = None
    """Its command in the agent's sandbox (stdio)."""
    args: tuple[str, ...] = ()


class Service(ServiceRun):
    """One service of a task's compose file: how it runs, its image, what it waits for."""

    name: str
    """Its name: its address on the trial's network."""
    image: ImageSource
    """Built from a context under the task folder, or a reference."""
    depends_on: dict[str, Condition] = Field(default_factory=dict)
    """Services started (or healthy) before this one."""
    cpus: float | None = Field(default=None, gt=0)
    memory: int | None = Field(default=None, gt=0)


class Step(Strict):
    """One step of a multi-step task (Harbor's ``[[steps]]``): its own instruction,
    tests, solution and workdir files under ``steps/<name>/``; the container is kept from
    one step to the next."""

    name: str
    """Its folder's name under ``steps/``."""
    instruction: str
    """What the agent is asked in this step."""
    time_s: float | None = Field(default=None, gt=0)
    """The agent's time for this step (None: the task's)."""
    verifier: RewardVerifier
    """Its tests (``steps/<name>/tests``), with the task's ``tests/`` copied beneath."""
    shared_tests: str | None = None
    """The task's own ``tests/`` folder, copied into ``/tests`` before the step's (shared
    helpers), when it has one."""
    solution: Solution | None = None
    """What the oracle runs in this step (``steps/<name>/solution/solve.sh``)."""
    workdir: str | None = None
    """Files copied into the working directory before the agent starts
    (``steps/<name>/workdir``); a ``setup.sh`` among them is run, as the agent's user."""
    healthcheck: Healthcheck | None = None
    """Waited for after the step's files are in place, before its agent."""
    min_reward: dict[str, float] | None = None
    """The rewards this step must reach for the next steps to run."""


class SwebenchGrading(Strict):
    """How a SWE-bench instance is graded: its test log parsed by the ``swebench``
    package's parser, each ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` test a check, resolved
    as SWE-bench defines it (`hangar.kinds.execution.swebench.instances`)."""

    instance_id: str
    """The instance."""
    repo: str
    """``owner/name`` (picks the parser of the repositories the package knows)."""
    version: str = ""
    """The instance's version."""
    fail_to_pass: tuple[str, ...]
    """Tests the fix must make pass."""
    pass_to_pass: tuple[str, ...] = ()
    """Tests that must keep passing."""
    log_parser: str = ""
    """A parser of the package's registry by name (default: the repository's, else
    pytest's)."""
    log: str = "test_output.txt"
    """The log the test script writes under /logs/verifier."""
    eval_type: Literal["", "pass_and_fail", "fail_only"] = ""
    """The instance's own evaluation type (SWE-bench datasets that ship their evaluation
    script); '' when it has none: its log is graded whole, ``pass_and_fail``."""


class ImageTask(ExecutionTask):
    """An execution task whose fixture is its image (see the module docstring)."""

    model_config = ConfigDict(frozen=True)
    key_field: ClassVar[str] = "scenario"

    kind: Literal["execution"] = "execution"
    """The kind of trial it is."""
    name: str
    """The task's id in a sweep (its folder's name)."""
    title: str = ""
    """The task's own name, as its format spells it (``org/name``)."""
    format: str = "harbor"
    """The format it was read from."""
    folder: Path
    """The task's folder; relative paths are resolved against it."""
    instruction: str
    """The task text the agent gets."""
    image: ImageSource
    """Its image."""
    limits: ScenarioLimits = Field(default_factory=ScenarioLimits)
    """The agent's time and resources (``disk``: the trial disk)."""
    agent_user: str = "root"
    """The user the agent runs as."""
    agent_network: Network = Field(default_factory=Network)
    """The agent's network."""
    verifier: RewardVerifier = Field(default_factory=RewardVerifier)
    """Its judge."""
    solution: Solution | None = None
    """Its reference solution (None: the task has none)."""
    threshold: float = 1.0
    """The reward at or above which a trial passes."""
    repository: str | None = None
    """A git repository whose `revision` is the workspace (instead of the image's working
    directory): a path (relative to the task folder), file:// or URL."""
    revision: str | None = None
    """The exact commit of `repository`."""
    workdir: str | None = None
    """Where the workspace is in the sandbox (default: the image's WORKDIR)."""
    agent_may_change: tuple[str, ...] = ()
    """Paths (fnmatch patterns) the agent may change although the verifier's machinery
    uses them (``[metadata.hangar] agent_may_change``): a task that asks for a newer
    version of a tool the tests run, say (`hangar.kinds.execution.images.takeover`)."""
    grading: SwebenchGrading | None = None
    """How the test log is graded on the host (None: the reward file the script writes)."""
    allow_public: bool = False
    """A phase that asks for a public network gets one (every named host through the
    egress proxy); without it the agent's runs with none and the verifier's is blocked."""
    host_services: tuple[str, ...] = ()
    """The host's own services (``address:port`` or ``name:port``) the egress proxy lets
    this task's allowlisted names reach, from the sweep; every other loopback, private,
    link-local or metadata address stays refused."""
    build_hosts: tuple[str, ...] | None = None
    """What the image's build may reach (the sweep's ``network: builds``; None: the
    package registries, `hangar.kinds.execution.images.build_network.DEFAULT_BUILD_HOSTS`).
    Not part of the version: a build that needs more fails, it does not differ."""
    registry: str | None = None
    """Where nodes share built images (``host:port/namespace``), from the sweep: each
    node pulls what another built, and pushes what it builds (not part of the version)."""
    image_map: dict[str, str] = Field(default_factory=dict)
    """Image references rewritten (``FROM`` lines and references; keys may be fnmatch
    patterns such as ``ubuntu:*``), from the sweep."""
    healthcheck: Healthcheck | None = None
    """Waited for in the agent's sandbox before the agent starts."""
    skills_dir: str | None = None
    """A folder of the image holding skills (a folder each, with its ``SKILL.md``),
    installed where the agent finds skills before it starts."""
    services: tuple[Service, ...] = ()
    """Containers beside the agent's (``environment/docker-compose.yaml``), in the order
    they start, on a network of the trial's own."""
    service_waits: dict[str, Condition] = Field(default_factory=dict)
    """The services the agent waits for (started, or healthy) before it starts."""
    mcp_servers: tuple[TaskMcpServer, ...] = ()
    """MCP servers the agent is told of, as it is of its own."""
    steps: tuple[Step, ...] = ()
    """The steps of a multi-step task, in order (none: one instruction, one verifier)."""
    step_reward: Literal["mean", "final"] = "mean"
    """How a multi-step trial's reward comes from its steps': each reward's mean over the
    steps that were verified, or the last verified step's."""
    blocked: tuple[str, ...] = ()
    """What the task asks that hangar cannot honour: each makes its trials blocked_setup."""
    notes: tuple[str, ...] = ()
    """What the loader ignored (fields of the format that change nothing here)."""

    @property
    def id(self) -> str:
        """The task's id."""
        return self.name

    def local(self, relative: str) -> Path:
        """A path of the task resolved on the host."""
        return (self.folder / relative).resolve()

    def at_step(self, index: int) -> ImageTask:
        """The task as its step `index` runs: the step's instruction, tests, solution and
        time (the skills and the task's healthcheck belong to the first step)."""
        step = self.steps[index]
        limits = self.limits
        if step.time_s is not None:
            limits = limits.model_copy(update={"time_s": step.time_s})
        first = index == 0
        return self.model_copy(
            update={
                "instruction": step.instruction,
                "verifier": step.verifier,
                "solution": step.solution,
                "limits": limits,
                "healthcheck": self.healthcheck if first else None,
                "skills_dir": self.skills_dir if first else None,
            }
        )

    def repository_url(self) -> str | None:
        """The repository as git understands it (relative paths made absolute)."""
        repo = self.repository
        if repo is None or "://" in repo or repo.startswith("git@"):
            return repo
        return str(self.local(repo))

    def mapped(self, reference: str) -> str:
        """`reference` as the image map rewrites it (exact keys first, then patterns)."""
        if reference in self.image_map:
            return self.image_map[reference]
        for pattern, target in self.image_map.items():
            if fnmatch.fnmatchcase(reference, pattern):
                return target
        return reference

    def configured(
        self,
        *,
        image_map: dict[str, str],
        threshold: float | None,
        repo_map: dict[str, str] | None = None,
        allow_public: bool = False,
        host_services: tuple[str, ...] = (),
        registry: str | None = None,
        build_hosts: tuple[str, ...] | None = None,
    ) -> Self:
        """The task with a sweep's image map, pass threshold and repository map (keys: a
        repository's URL, or a SWE-bench ``owner/name``), its digest recomputed."""
        update: dict[str, object] = {
            "image_map": dict(image_map),
            "allow_public": allow_public,
            "host_services": tuple(host_services),
            "registry": registry,
            "build_hosts": build_hosts,
        }
        if threshold is not None:
            update["threshold"] = threshold
        repos = repo_map or {}
        named = self.grading.repo if self.grading is not None else None
        for key in (self.repository, named):
            if key is not None and key in repos:
                update["repository"] = repos[key]
                break
        task = self.model_copy(update=update)
        return task.model_copy(update={"digest": image_task_digest(task)})

    # -- what the execution kind asks of its tasks (`hangar.kinds.execution.task`) -----

    #: Its oracle must pass and doing nothing must not (`images.validate`).
    needs_validation: ClassVar[bool] = True

    def worker_services(self) -> tuple[str, ...]:
        """The sweep's `network: host_services`."""
        return self.host_services

    def sweep_title(self) -> str | None:
        """SWE-bench instances, or Harbor tasks."""
        return "SWE-bench instances" if self.grading is not None else "Harbor tasks"

    def plugin_source(self, name: str) -> Path | None:
        """None: an image task has no plugins of its own."""
        return None

    def for_sweep(self, settings: ExecutionSettings, registry: str | None) -> Self:
        """The task with the sweep's image map, reward threshold, repositories, networks
        and registry (`configured`)."""
        return self.configured(
            image_map=settings.image_map,
            threshold=settings.reward_threshold,
            repo_map=settings.repo_map,
            allow_public=settings.network.allow_public,
            host_services=settings.network.host_services,
            registry=registry,
            build_hosts=settings.network.builds,
        )

    def fixed_image(self) -> str | None:
        """None: its trial builds or finds its image, and is blocked_setup naming it."""
        return None

    def problems(self, matrix: Matrix, *, deep: bool) -> list[str]:
        """What it asks that hangar cannot honour (`blocked`)."""
        return [f"{self.id}: {p}" for p in self.blocked]

    def trial(self, spec: TrialSpec) -> TrialRun:
        """`ImageTaskTrial`."""
        from hangar.kinds.execution.images.trial import ImageTaskTrial

        return ImageTaskTrial(spec)

    def package(self) -> bytes:
        """Its folder: the whole task."""
        from hangar.kinds.execution.shipping import pack_folder

        return pack_folder(self.folder)

    def repository_to_ship(self) -> Path | None:
        """None: a repository it names is fetched by URL."""
        return None

    def unpacked(self, folder: Path, repository: Path | None) -> Self:
        """The task read from its folder in `folder`."""
        mine = folder / self.folder.name
        return self.model_copy(update={"folder": mine, "path": mine / self.path.name})


#: The code that judges every image task (in its digest, as for scenarios).
_JUDGING_CODE = (
    "images/rewards.py",
    "images/trial.py",
    "images/verifier.py",
    "images/takeover.py",
    "swebench/instances.py",
    "images/steps.py",
    "images/healthcheck.py",
)
#: The sandbox's code that judges it too: the verifier's observer, hangar's start-up mark
#: for Python, the reading of a container's changes.
_JUDGING_SANDBOX = ("observe.c", "observe.py", "startup/sitecustomize.py", "layers.py")


_LATER_FIELDS = (
    "healthcheck",
    "skills_dir",
    "steps",
    "step_reward",
    "services",
    "service_waits",
    "mcp_servers",
)


def image_task_digest(task: ImageTask) -> str:
    """sha256 of the task's settings, every byte of its folder, and its judging code."""
    here, sandbox = Path(__file__).parents[1], Path(observe.__file__).parent
    # fields added since digests were first taken count only when set, so tasks without
    # them keep their digests (and their validations)
    later = {
        name
        for name in _LATER_FIELDS
        if getattr(task, name)
        == ImageTask.model_fields[name].get_default(call_default_factory=True)
    }
    exclude: dict[str, Any] = dict.fromkeys(
        ("digest", "path", "folder", "suite", "registry", "build_hosts", *later), True
    )
    if task.grading is not None and not task.grading.eval_type:
        exclude["grading"] = {"eval_type"}  # a later field too
    payload = {
        "task": task.model_dump(mode="json", exclude=exclude),
        "folder": tree_digest(task.folder),
        "judging": [[name, tree_digest(here / name)] for name in _JUDGING_CODE]
        + [[name, tree_digest(sandbox / name)] for name in _JUDGING_SANDBOX],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
