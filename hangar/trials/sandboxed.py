"""What every trial whose agent works in a sandbox has: its disk, its sandboxes, the
model relay, and the agent's turns.

`SandboxedTrial` is the base of the trial of a git scenario and of an image task (the
execution kind), and of a routing case: each says how its workspace is made, which
sandboxes it starts (`sandbox_spec`) and how it is judged.
"""

from __future__ import annotations

import functools
import json
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from hangar.agents import (
    AgentRun,
    ChatAgent,
    CommandAgent,
    ReferenceAgent,
    run_chat_agent,
    run_command_agent,
)
from hangar.agents.mcp import Installed, McpTools
from hangar.errors import (
    ConfigError,
    ImageBuildError,
    ImageNotFound,
    MissingPython,
    RegistryError,
    SandboxError,
)
from hangar.models.relay import ModelRelay
from hangar.models.tunnel import RelayTunnel
from hangar.models.usage import add as add_usage
from hangar.paths import cache_dir
from hangar.results import TrialOutcome, Usage, Verdict
from hangar.sandbox import (
    Mount,
    Sandbox,
    SandboxLimits,
    SandboxSpec,
    create_sandbox,
    sandbox_class,
)
from hangar.sandbox.bundle_images import helper_mount
from hangar.sandbox.bundles import Bundle, bundle_mount, bundle_problem, ensure_bundle
from hangar.sandbox.disk import DiskState, TrialDisk
from hangar.sandbox.warm_pool import WarmTemplate, adopt, claim
from hangar.trace import TraceWriter
from hangar.trials.boundary import Outcome, TrialRun
from hangar.trials.limits import ScenarioLimits
from hangar.trials.mcp import install_servers, mounts, start_servers
from hangar.trials.phases import BOUNDARY, BY_NAME
from hangar.trials.spec import TrialSpec

T = TypeVar("T")
#: The loopback port the forwarder listens on inside a container.
RELAY_PORT = 4000


class SandboxedTrial(TrialRun):
    """A trial whose agent works in a sandbox (see the module docstring)."""

    def __init__(self, spec: TrialSpec, limits: ScenarioLimits, image: str, text: str) -> None:
        super().__init__(spec)
        self.limits, self.image_ref, self.task_text = limits, image, text
        self.cache = spec.cache_root or cache_dir()
        # Everything the agent can write lives on the trial's size-capped disk.
        self.disk = TrialDisk(
            self.folder, limits.disk, spares=self.cache / "disks", reserve_uid=self.reserve_uid
        )
        #: Every disk of the trial, released after its sandboxes.
        self.disks = [self.disk]
        self.workspace = self.disk.root / "workspace"
        self.scratch = self.disk.root / "scratch"
        self.sandboxes: list[Sandbox] = []
        self.trace: TraceWriter | None = None
        self.agent_run = AgentRun()
        self.relay: ModelRelay | None = None
        self.tunnel: RelayTunnel | None = None
        self.relay_port = RELAY_PORT
        self.usage = Usage()
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hangar-trial")
        self.pending: list[Future[Any]] = []
        self.closing: list[Future[Any]] = []
        self.deadline = time.monotonic() + limits.time_s
        #: More environment for a command agent (an egress proxy's, say).
        self.agent_env: dict[str, str] = {}
        #: The agent's MCP servers on this node (`install_mcp`), and a chat agent's tools.
        self.mcp: list[Installed] = []
        #: The agent CLI's bundle on this node (`prepare_bundle`), if it runs from one.
        self.bundle: Bundle | None = None
        self._helper: Mount | None = None  # hangar's helper for a pod (`helper_mounts`)
        self.mcp_tools: McpTools | None = None
        #: The warm sandbox this trial claimed (`open_disk`), until `start_sandbox`.
        self.warm: Sandbox | None = None

    #: Whether the task text is already in the sandbox's HOME when a command agent starts.
    context_written = False
    #: Whose the reserve of the trial's disk is (`hangar.sandbox.disk`): root where the
    #: agent is never root; a trial whose agent may be root gives it to another user.
    reserve_uid: ClassVar[int] = 0

    # -- the lifecycle ----------------------------------------------------------------------

    def run(self) -> None:
        """The one lifecycle of a sandboxed trial, in the phases of `PHASES`: what runs
        recorded, admission, what the sandbox needs built, the agent's sandbox set up, the
        agent's turns, verification. A kind implements the hooks; ending early is an
        `Outcome` raised from any of them."""
        self.record()
        with self.phase("admission"):
            self.admit()
        with self.phase("mcp"):
            self.install_mcp()
        self.provision()
        with self.phase("agent_bundle"):
            self.prepare_bundle()
        with self.phase("disk"):
            self.write("disk.json", self.open_disk().model_dump())
        step: Sandbox | None = self.start_turn(self.set_up)
        while step is not None:
            self.before_agent(step)
            with self.phase("agent"):
                self.run_agent(step, self.remaining())
                self.after_agent(step)
            self.verify(step)
            step = self.next_step()

    def start_turn(self, set_up: Callable[[], Sandbox]) -> Sandbox:
        """What an agent's turn starts from: the model relay, the sandbox `set_up` makes,
        the agent's MCP servers started in it. A multi-step task's next step is brought
        up the same way (`next_step`)."""
        with self.phase("relay_up"):
            self.open_relay()
        sandbox = set_up()
        if self.mcp:
            with self.phase("mcp_start"):
                self.start_mcp(sandbox)
        return sandbox

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase of `PHASES` (a name not in the table is a bug of hangar's)."""
        if name not in BY_NAME and name not in BOUNDARY:
            raise ValueError(f"phase {name!r} is not in hangar.trials.phases.PHASES")
        with super().phase(name):
            yield

    def record(self) -> None:
        """Write what runs (the task, the trial) first of all the evidence."""

    def admit(self) -> None:
        """Raise `Outcome(blocked_setup)` for every reason the task cannot run."""

    def provision(self) -> None:
        """Build what the sandbox needs before the disk (an image task's image)."""

    def disk_ttl(self) -> float:
        """Seconds the trial's disk may outlive a dead worker before a reaper frees it."""
        return self.sandbox_spec().ttl_s

    def takes_warm(self) -> bool:
        """Whether the trial's first sandbox may be a warm one (`hangar.sandbox.warm_pool`):
        its `sandbox_spec` is known before the disk is open and names the disk's folders
        as the sandbox's, which start empty."""
        return False

    def disk_moved(self) -> None:
        """The trial's disk is a warm sandbox's (its workspace and scratch folders are
        there now): what was made from their old paths is made again."""

    def open_disk(self) -> DiskState:
        """The trial's disk: a warm sandbox's, with the sandbox (`self.warm`), where the
        node's pool has one of this trial's kind ready; else a disk of its own."""
        template = None
        if self.takes_warm():
            template = WarmTemplate.of(
                self.spec.backend, self.spec.backend_config, self.sandbox_spec(), self.disk
            )
        slot = claim(template) if template is not None else None
        if slot is None or template is None:
            return self.disk.open(ttl_s=self.disk_ttl())
        disk = slot.take_disk(self.reserve_uid)
        self.disks[self.disks.index(self.disk)] = self.disk = disk
        self.workspace, self.scratch = disk.root / "workspace", disk.root / "scratch"
        self.disk_moved()
        claimed = {"container": slot.handle.get("container"), "ready_s": time.time() - slot.made}
        try:
            self.warm = adopt(slot, template, self.sandbox_spec())
        except SandboxError as exc:  # it died waiting: the trial starts its own
            claimed["lost"] = str(exc)
        self.write("warm.json", claimed)
        return disk.state

    def set_up(self) -> Sandbox:
        """The workspace and the agent's sandbox, ready but for its MCP servers."""
        raise NotImplementedError

    def before_agent(self, sandbox: Sandbox) -> None:
        """What is recorded as the agent gets its sandbox (MCP servers running)."""

    def after_agent(self, sandbox: Sandbox) -> None:
        """What is read or closed the moment the agent's turns end."""

    def verify(self, sandbox: Sandbox) -> None:
        """Judge the agent's work: set `verdict` and `reason` (or raise `Outcome`)."""
        raise NotImplementedError

    def next_step(self) -> Sandbox | None:
        """The agent's sandbox for the task's next step, set up (None: no more steps; a
        multi-step kind keeps its environment from one step to the next)."""
        return None

    def sandbox_spec(self) -> SandboxSpec:
        """The spec of every sandbox of this trial."""
        raise NotImplementedError

    def sandbox_of(
        self,
        image: str,
        mounts: tuple[Mount, ...],
        *,
        ttl_s: float,
        cpus: float | None = None,
        memory: int | None = None,
        **more: Any,
    ) -> SandboxSpec:
        """A sandbox of this trial: `image` with `mounts`, the trial's limits (`cpus` and
        `memory` where a phase has its own) and labels, removed by a reaper `ttl_s` after
        a dead worker; `more`: its workdir, home, user, read-only root."""
        limits = self.limits
        return SandboxSpec(
            image=image,
            mounts=(*mounts, *self.helper_mounts()),
            limits=SandboxLimits(
                cpus=cpus or limits.cpus, memory=memory or limits.memory, pids=limits.pids
            ),
            sweep=self.spec.sweep,
            trial=self.spec.trial_key,
            node=self.spec.node or socket.gethostname(),
            ttl_s=ttl_s,
            **more,
        )

    def outcome(self) -> TrialOutcome:
        """What every sandboxed trial knows (the agent's run, the metered usage, the
        provider's failure when it made an infra_error) and what its kind judged."""
        run = self.agent_run
        known = {
            "completed": run.completed,
            "agent_exit_code": run.exit_code,
            "usage": self.usage,
            "provider_error": run.provider_error if self.verdict is Verdict.INFRA_ERROR else None,
        }
        return self.judged().model_copy(update=known)

    def judged(self) -> TrialOutcome:
        """The kind's part of the result: checks, scores, route, scope, details."""
        return TrialOutcome()

    def install_mcp(self) -> None:
        """The agent's MCP servers resolved on this node (before the sandbox starts: they
        are mounted into it, `agent_mounts`)."""
        self.mcp = install_servers(self, self.spec.agent, self.cache)

    def helper_mounts(self) -> tuple[Mount, ...]:
        """hangar's helper, for a pod: on Kubernetes it arrives as an image through the
        sweep's registry (`helper_mount`), so a folder is copied out by hangar's own tar,
        never the image's. Elsewhere the backend mounts it itself."""
        if self.spec.backend != "kubernetes" or not self.spec.registry:
            return ()
        if self._helper is None:
            try:
                self._helper = helper_mount(self.spec.registry)
            except RegistryError as exc:  # the node's, not the agent's: run again
                raise Outcome(Verdict.INFRA_ERROR, f"hangar's helper image: {exc}") from exc
        return (self._helper,)

    def agent_mounts(self) -> tuple[Mount, ...]:
        """The agent's MCP servers and its CLI's bundle, read-only, for its sandbox."""
        bundle = (bundle_mount(self.bundle, self.spec.registry),) if self.bundle is not None else ()
        return (*mounts(self.mcp), *bundle)

    def prepare_bundle(self) -> None:
        """The agent's CLI bundle on this node (built on first use), tried in the image of
        the agent's sandbox once per node: a bundle that cannot be built or run there makes
        the trial blocked_setup, before any model is paid."""
        agent = self.spec.agent
        if not isinstance(agent, CommandAgent) or not agent.bundle:
            return
        name, _, wanted = agent.bundle.partition("@")
        try:
            bundle = ensure_bundle(name, registry=self.spec.registry)
        except RegistryError as exc:  # the node's, not the agent's: run again
            raise Outcome(Verdict.INFRA_ERROR, f"agent {name}'s bundle: {exc}") from exc
        except (ImageBuildError, OSError) as exc:
            raise Outcome(Verdict.BLOCKED_SETUP, f"agent {name}'s bundle: {exc}") from exc
        if not bundle.digest.startswith(wanted):
            raise Outcome(
                Verdict.BLOCKED_SETUP,
                f"this node builds agent {name}'s bundle from recipe {bundle.digest[:16]}, the "
                f"sweep names {wanted}: run the same hangar version on every node",
            )
        self.bundle = bundle
        spec = self.sandbox_spec()
        try:
            problem = bundle_problem(bundle, spec, self.spec.backend, self.spec.backend_config)
        except ImageNotFound as exc:
            raise Outcome(Verdict.BLOCKED_SETUP, str(exc)) from exc
        self.write("agent/bundle.json", json.loads((bundle.folder / "manifest.json").read_text()))
        if problem:
            raise Outcome(Verdict.BLOCKED_SETUP, problem)

    def start_mcp(self, sandbox: Sandbox) -> None:
        """Check the servers start in `sandbox` and tell the agent of them."""
        self.mcp_tools, env = start_servers(self, sandbox, self.spec.agent, self.mcp)
        self.agent_env.update(env)

    def run_reference(self, sandbox: Sandbox, agent: ReferenceAgent, budget: float) -> AgentRun:
        """Run a reference agent (the oracle needs a task with a solution)."""
        if agent.role == "nop":
            return AgentRun(exit_code=0, completed=True)
        raise Outcome(
            Verdict.BLOCKED_SETUP,
            f"agent {agent.name!r} is the oracle: it needs a task with a reference solution "
            "(a Harbor task's solution/solve.sh)",
        )

    def run_agent(self, sandbox: Sandbox, budget: float) -> None:
        """Phase 7: the agent's turns, traced; the relay closes after them."""
        self.trace = TraceWriter(self.artifacts / "trace.jsonl")
        env: dict[str, str] = dict(self.agent_env)
        if self.relay is not None:
            self.relay.trace = self.trace
            env.update(self.relay.agent_env(self.relay_port))
        try:
            if budget <= 0:
                self.agent_run = AgentRun(reason="setup used the whole time budget")
            elif isinstance(self.spec.agent, ChatAgent):
                if self.spec.model_spec is None or self.spec.model_spec.provider == "none":
                    raise Outcome(Verdict.BLOCKED_SETUP, "a chat agent needs a model")
                self.agent_run, usage = run_chat_agent(
                    self.spec.agent,
                    sandbox,
                    self.task_text,
                    self.trace,
                    budget,
                    self.spec.model_spec,
                    self.mcp_tools,
                )
                self.usage = add_usage(self.usage, usage)
            elif isinstance(self.spec.agent, ReferenceAgent):
                self.agent_run = self.run_reference(sandbox, self.spec.agent, budget)
            elif isinstance(self.spec.agent, CommandAgent):
                self.agent_run = run_command_agent(
                    self.spec.agent,
                    sandbox,
                    self.task_text,
                    self.trace,
                    budget,
                    model=self.spec.model,
                    env=env,
                    artifacts=self.artifacts,
                    context_written=self.context_written,
                )
            else:
                raise Outcome(
                    Verdict.BLOCKED_SETUP,
                    f"agent {self.spec.agent.name!r} is a prompt agent: it answers decision "
                    "cases, not execution scenarios",
                )
        finally:
            self.close_relay()
        self.trace.close(completed=self.agent_run.completed, reason=self.agent_run.reason)

    def open_relay(self) -> None:
        """Start the model relay when the trial's model calls a provider (phase 7)."""
        model = self.spec.model_spec
        if model is None or model.provider == "none" or isinstance(self.spec.agent, ChatAgent):
            return  # no model, or a chat agent (its loop calls the model from the host)
        try:
            # A private folder with a short path: a unix socket's path is at most 107 bytes,
            # and a trial's folder can be deeper than that.
            sockets = Path(tempfile.mkdtemp(prefix="hangar-relay-"))
            self.relay = ModelRelay(sockets / "relay.sock", model, timeout_s=model.timeout_s)
            self.relay.start()
        except ConfigError as exc:  # the key is missing on this node
            raise Outcome(Verdict.BLOCKED_SETUP, str(exc)) from exc

    def start_forwarder(self, sandbox: Sandbox) -> None:
        """Start the relay's forwarder in the sandbox; refuse an image that cannot run it."""
        assert self.relay is not None
        self.relay_port = RELAY_PORT if sandbox.isolated else free_port()
        try:
            self.tunnel = RelayTunnel.open(sandbox, self.relay_port, self.relay.socket_path)
        except MissingPython as exc:
            raise Outcome(
                Verdict.BLOCKED_SETUP,
                f"image {self.image_ref!r} has no python3, which the model relay's "
                "forwarder needs: add python3 to the image",
            ) from exc

    def close_relay(self) -> None:
        """Stop the relay; its metered usage is the trial's; its errors join the reason."""
        relay, self.relay = self.relay, None
        tunnel, self.tunnel = self.tunnel, None
        if tunnel is not None:
            tunnel.close()
        if relay is None:
            return
        relay.stop()
        shutil.rmtree(relay.socket_path.parent, ignore_errors=True)
        if tunnel is not None and tunnel.problem:
            relay.errors.append(tunnel.problem)
        self.usage = add_usage(self.usage, relay.usage)
        self.agent_run.provider_error = self.agent_run.provider_error or relay.provider_error()
        self.write(
            "relay.json",
            {
                "calls": relay.calls,
                "refused": relay.refused,
                "errors": relay.errors,
                "usage": relay.usage.model_dump(),
            },
        )
        if relay.errors and not self.agent_run.completed:
            self.agent_run.reason += f"; model relay: {relay.errors[-1]}"

    @functools.cached_property
    def backend(self) -> type[Sandbox]:
        """The sandbox backend's class (looked up inside the lifecycle: it may fail)."""
        return sandbox_class(self.spec.backend)

    def start_sandbox(self) -> Sandbox:
        """A new sandbox of this trial (an image the engine lacks is blocked_setup); the
        warm one it claimed, the first time."""
        sandbox, self.warm = self.warm, None
        if sandbox is None:
            spec, config = self.sandbox_spec(), self.spec.backend_config
            sandbox = create_sandbox(self.spec.backend, spec, config)
        self.write("backend.json", sandbox.config.model_dump(mode="json"))
        self.sandboxes.append(sandbox)
        try:
            sandbox.start()
        except ImageNotFound as exc:
            raise Outcome(Verdict.BLOCKED_SETUP, str(exc)) from exc
        if record := self.backend.image_record(sandbox.spec.image):
            self.write("image.json", record)
        return sandbox

    def release(self, sandbox: Sandbox, *, stop: bool) -> None:
        """Let go of `sandbox`: killed now if `stop`, removed in the background."""
        self.sandboxes.remove(sandbox)
        if stop:
            sandbox.stop()
        self.closing.append(self.background(sandbox.close))

    def background(self, work: Callable[[], T]) -> Future[T]:
        """Run `work` on the trial's thread pool."""
        future = self.pool.submit(work)
        self.pending.append(future)
        return future

    def remaining(self) -> float:
        """Seconds left of the setup+run budget."""
        return self.deadline - time.monotonic()

    def ended(self, verdict: Verdict, reason: str) -> None:
        """Close the trace of a trial that ended before its agent did."""
        if self.trace is not None and not self.trace.closed:
            self.trace.close(completed=False, reason=reason)

    def tear_down(self, *, wait: bool) -> None:
        """Stop every sandbox (every process in it is dead when this returns) and remove
        it; with `wait`, return only once all are gone and the trial's disk is released.
        Without it the removals finish on the pool's threads after the trial has returned
        (a Ray worker lives on; the reaper covers one that does not), and the disk goes
        with the folder (`remove`)."""
        with suppress(Exception):
            self.close_relay()  # when the trial ended before its agent did
        if self.warm is not None:  # claimed, never started on
            self.sandboxes.append(self.warm)
            self.warm = None
        starting = [f for f in self.pending if f not in self.closing]
        for future in starting:  # a sandbox still starting joins self.sandboxes when done
            with suppress(Exception):
                future.result()
        for sandbox in self.sandboxes:
            with suppress(Exception):
                sandbox.stop()
            self.closing.append(self.background(sandbox.close))
        self.sandboxes.clear()
        if wait:
            self._released()

    def _released(self) -> None:
        """Wait for the sandboxes' removals, then release the disk."""
        for future in self.closing:
            with suppress(Exception):
                future.result()
        for disk in self.disks:
            disk.close()
            if not disk.image.is_relative_to(self.folder):  # a warm sandbox's
                shutil.rmtree(disk.image.parent, ignore_errors=True)

    def remove(self, *, wait: bool) -> None:
        """The folder removed after the sandboxes and the disk: in the background without
        `wait` (unmounting and deleting a disk is a few hundredths of a second the next
        trial need not wait for)."""

        def release() -> None:
            self._released()
            super(SandboxedTrial, self).remove(wait=True)

        if wait:
            release()
        else:
            self.pool.submit(release)
        self.pool.shutdown(wait=wait)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
