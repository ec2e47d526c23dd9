"""The execution kind of trial: a pinned repository, a sandbox, an agent, the verifiers.

`ExecutionTrial.run` reads as its phases: admission, the trial's disk, the model
relay, set-up (workspace, prepare, sandbox, plugins), the agent, the final status, the
hand-over to verification (`hangar.kinds.execution.verification`: the agent's own sandbox wiped,
or a fresh one), the diff against the pinned commit, the verifier commands, the host
verifier and the judgement. Nothing the agent leaves outside the workspace reaches
verification. docs/architecture.md walks through it.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from hangar.agents import AgentRun, ChatAgent, CommandAgent, run_chat_agent, run_command_agent
from hangar.agents.command import CONTEXT_FILE
from hangar.errors import ConfigError, ImageNotFound, MissingPython, WorkspaceError
from hangar.files import tree_digest
from hangar.kinds.execution.admission import fixture_problems
from hangar.kinds.execution.judging import host_verify, judgement
from hangar.kinds.execution.scenario import LoadedScenario
from hangar.kinds.execution.verification import VerificationPlace, place_for
from hangar.models.relay import ModelRelay
from hangar.models.tunnel import RelayTunnel
from hangar.paths import cache_dir
from hangar.results import COUNTED_VERDICTS, Score, Usage, Verdict
from hangar.sandbox import (
    Mount,
    Sandbox,
    SandboxLimits,
    SandboxSpec,
    create_sandbox,
    sandbox_class,
)
from hangar.sandbox.archive import extract_untrusted
from hangar.sandbox.base import SANDBOX_UID
from hangar.sandbox.disk import TrialDisk
from hangar.sandbox.workspace import (
    MirrorCache,
    diff_against_pin,
    git_damage,
    hand_over,
    make_workspace,
    workspace_state,
)
from hangar.trace import TraceWriter
from hangar.trials.boundary import Outcome, TrialRun
from hangar.trials.spec import TrialSpec
from hangar.verifiers import junit
from hangar.verifiers.admission import Judgement
from hangar.verifiers.commands import final_state, git_state, hidden_placements
from hangar.verifiers.guard import HarnessGuard
from hangar.verifiers.harness import Placement
from hangar.verifiers.protocol import CommandRecord, VerificationRequest, run_host_script

T = TypeVar("T")
WORKDIR = "/workspace"
#: HOME of the sandbox user.
HOME = "/home/agent"
#: Scratch folders (trial folder name -> sandbox path) of a one-sandbox trial.
SCRATCH = {"home": HOME, "tmp": "/tmp", "var-tmp": "/var/tmp"}
#: The loopback port the forwarder listens on inside a container.
RELAY_PORT = 4000


class ExecutionTrial(TrialRun):
    """One execution trial's state; `run` walks its phases."""

    def __init__(self, spec: TrialSpec) -> None:
        super().__init__(spec)
        self.loaded = _scenario_of(spec)
        self.scenario = self.loaded.scenario
        # Everything the agent can write lives on the trial's size-capped disk.
        self.disk = TrialDisk(self.folder, self.scenario.limits.disk)
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
        self.deadline = time.monotonic() + self.scenario.limits.time_s
        self.cache = spec.cache_root or cache_dir()
        self.mirrors = MirrorCache(self.cache / "mirrors")
        self.home_seed: Any = None
        self.judgement: Judgement | None = None
        self.guard = self.harness_guard()

    def localise(self, spec: TrialSpec) -> None:
        """Run from `spec`, the same trial with this node's copy of its scenario."""
        super().localise(spec)
        self.loaded = _scenario_of(spec)
        self.scenario = self.loaded.scenario
        self.guard = self.harness_guard()

    def verification_request(self, commands: list[CommandRecord]) -> VerificationRequest:
        """What the host verifier is asked to judge."""
        assert self.trace is not None and self.trace.sha256 is not None
        verifier = self.scenario.verifier
        return VerificationRequest(
            case=self.scenario.id,
            fixture=str(self.loaded.path),
            workspace=str(self.workspace),
            artifacts=str(self.artifacts),
            trace_sha256=self.trace.sha256,
            completed=self.agent_run.completed,
            checklist=list(verifier.checklist),
            commands=commands,
            hidden_tests=junit.hidden_test_ids(self.hidden_files()),
            harness=self.guard.changes,
            tampering=self.guard.tampering,
        )

    def hidden_files(self) -> list[Placement]:
        """The hidden verifier files: (target in the workspace, source on this node)."""
        return hidden_placements(self.scenario.verifier, self.loaded.folder)

    def harness_guard(self) -> HarnessGuard:
        """The guard of this trial's test harness (its kept bytes in the trial folder)."""
        return HarnessGuard(
            self.scenario.verifier, self.workspace, self.folder / "harness", self.artifacts
        )

    # -- the phases -----------------------------------------------------------------------

    def run(self) -> None:
        """Walk the phases (see the module docstring)."""
        self.record_identity()
        with self.phase("admission"):
            self.admit()
        with self.phase("disk"):
            self.write("disk.json", self.disk.open(ttl_s=self.sandbox_spec().ttl_s).model_dump())
        with self.phase("relay_up"):
            self.open_relay()
        place = place_for(self)
        sandbox = self.set_up(place)
        with self.phase("agent"):
            self.run_agent(sandbox, self.remaining())
            disk_full = self.disk.full()
        with self.phase("final_status"):
            agent_view = final_state(sandbox)  # kills every agent process, before and after
        box = place.take_over(sandbox)
        with self.phase("final_diff"):  # on the host, from the (copied back) workspace
            self.final_diff(agent_view)
        commands = place.verify(box)
        with self.phase("host_verifier"):
            request = self.verification_request(commands)
            verified = host_verify(request, self.loaded, self.write)
        with self.phase("judgement"):
            assert self.trace is not None
            self.judgement = judgement(
                request,
                verified,
                loaded=self.loaded,
                run=self.agent_run,
                trace=self.trace.path,
                harness=self.guard.findings(),
                disk_limit=self.disk.state.limit if disk_full else None,
            )
            self.verdict, self.reason = self.judgement.verdict, self.judgement.reason

    def record_identity(self) -> None:
        """The scenario and the trial as they ran, first of all the evidence."""
        self.write(
            "scenario.json",
            {
                "id": self.scenario.id,
                "digest": self.loaded.digest,
                "path": str(self.loaded.path),
                "scenario": self.scenario.model_dump(mode="json"),
            },
        )
        self.write("trial.json", self.spec.model_dump(mode="json", exclude={"scenario"}))

    def admit(self) -> None:
        """Phase 1: every reason the scenario cannot run makes it blocked_setup."""
        problems = fixture_problems(
            self.loaded,
            self.spec.plugins,
            mirrors=self.mirrors,
            image_problem=self.backend.image_problem,
        )
        self.write("admission.json", {"problems": problems})
        if problems:
            raise Outcome(Verdict.BLOCKED_SETUP, "admission: " + "; ".join(problems))

    def set_up(self, place: VerificationPlace) -> Sandbox:
        """Workspace, prepare, initial status, sandbox, plugins: the agent's sandbox."""
        starting = None
        if self.backend.live_mounts:
            # The sandbox starts while the workspace is made: its mounts are live, so it
            # sees what lands in the (empty) folders later. It runs nothing until then.
            self.workspace.mkdir(parents=True)
            for name in SCRATCH if self.one_sandbox else ():
                (self.scratch / name).mkdir(parents=True)
            starting = self.background(self.start_sandbox)
        with self.phase("workspace"):
            self.make_workspace()
        # Setup (prepare, plugins) and the agent's turns share one time budget.
        self.deadline = time.monotonic() + self.scenario.limits.time_s
        with self.phase("prepare"):
            self.prepare()  # on the host, before the workspace is handed to the sandbox user
        with self.phase("initial_status"):
            if not self.spec.plugins:  # nothing else will touch it before the agent
                state = workspace_state(self.workspace, self.scenario.revision)
                self.write("status-initial.json", state)
        if not self.backend.live_mounts:  # the sandbox gets a copy: record it now
            with self.phase("harness_baseline"):
                self.guard.record(extra=self.plugin_files_in_workspace())
        if self.backend.isolated:  # local commands run as we do
            hand_over(self.workspace, SANDBOX_UID)
        with self.phase("sandbox_up"):
            sandbox = self.bring_up(starting)
        place.early()  # a fresh verification sandbox starts while the agent works
        with self.phase("plugins"):
            self.install_plugins(sandbox)
        if self.spec.plugins:  # plugins may have landed in the workspace
            with self.phase("initial_status"):
                self.write("status-initial.json", git_state(sandbox))
        if self.backend.live_mounts:  # the workspace as the agent gets it, plugins in
            with self.phase("harness_baseline"):
                self.guard.record()
        return sandbox

    def plugin_files_in_workspace(self) -> dict[str, Path]:
        """The arm's plugin files that land in the workspace: relative path -> source."""
        files: dict[str, Path] = {}
        for name in self.spec.plugins:
            plugin = self.scenario.plugin(name)
            target = PurePosixPath(plugin.target)
            if target.is_absolute():
                if not target.is_relative_to(WORKDIR):
                    continue
                target = target.relative_to(WORKDIR)
            source = self.loaded.local(plugin.source)
            if source.is_file():
                files[target.as_posix()] = source
            elif source.is_dir():
                for f in source.rglob("*"):
                    if f.is_file():
                        files[(target / f.relative_to(source).as_posix()).as_posix()] = f
        return files

    def make_workspace(self) -> None:
        """Phase 2: the pinned commit, and nothing later, in a private repository."""
        try:
            make_workspace(
                self.mirrors, self.loaded.repository_url(), self.scenario.revision, self.workspace
            )
        except WorkspaceError as exc:
            raise Outcome(Verdict.INFRA_ERROR, f"workspace: {exc}") from exc

    def bring_up(self, starting: Future[Sandbox] | None) -> Sandbox:
        """The agent's sandbox, its scratch folders filled and the relay's forwarder in."""
        if self.one_sandbox:
            try:
                self.home_seed = self.backend.image_folder(self.scenario.image, HOME, self.cache)
            except ImageNotFound as exc:
                raise Outcome(Verdict.BLOCKED_SETUP, str(exc)) from exc
            self.reset_scratch()
            task = self.scratch / "home" / CONTEXT_FILE
            task.write_text(self.scenario.context)
            if self.backend.isolated:
                os.chown(task, SANDBOX_UID, SANDBOX_UID)
        sandbox = starting.result() if starting is not None else self.start_sandbox()
        if self.relay is not None:
            self.start_forwarder(sandbox)
        return sandbox

    def prepare(self) -> None:
        """Phase 4: the pinned prepare script, on the host; non-zero is blocked_setup."""
        pinned = self.scenario.prepare
        if pinned is None:
            return
        request = self.write(
            "prepare/request.json",
            {
                "fixture": str(self.loaded.path),
                "workspace": str(self.workspace),
                "artifacts": str(self.artifacts),
            },
        )
        run = run_host_script(
            self.loaded.local(pinned.file),
            request,
            timeout=max(self.remaining(), 1),
            cwd=self.loaded.folder,
        )
        self.write("prepare/stdout.txt", run.stdout)
        self.write("prepare/stderr.txt", run.stderr)
        if run.exit_code != 0 or run.timed_out:
            how = "timed out" if run.timed_out else f"exited {run.exit_code}"
            tail = run.stderr.strip().splitlines()[-1:] or [""]
            raise Outcome(Verdict.BLOCKED_SETUP, f"prepare {how}: {tail[0]}".rstrip(": "))

    def install_plugins(self, sandbox: Sandbox) -> None:
        """Phase 5: the arm's plugins copied in; their projected bytes recorded."""
        projected: dict[str, dict[str, str]] = {}
        for name in self.spec.plugins:
            plugin = self.scenario.plugin(name)
            source = self.loaded.local(plugin.source)
            target = sandbox.resolve(plugin.target)
            files = [source] if source.is_file() else sorted(source.rglob("*"))
            if source.is_dir():
                sandbox.copy_in(source, target)
            else:
                sandbox.write_file(target, source.read_bytes())
            projected[name] = {
                (
                    target if f == source else f"{target}/{f.relative_to(source).as_posix()}"
                ): tree_digest(f)
                for f in files
                if f.is_file()
            }
            if plugin.install:
                res = sandbox.exec(["bash", "-c", plugin.install], timeout=max(self.remaining(), 1))
                self.write(f"plugins/{name}.install.json", res.model_dump())
                if not res.ok:
                    raise Outcome(
                        Verdict.BLOCKED_SETUP,
                        f"plugin {name!r} install exited {res.returncode}: {res.stderr[-300:]}",
                    )
        self.write("plugins.json", projected)

    def run_agent(self, sandbox: Sandbox, budget: float) -> None:
        """Phase 7: the agent's turns, traced; the relay closes after them."""
        self.trace = TraceWriter(self.artifacts / "trace.jsonl")
        env: dict[str, str] = {}
        if self.relay is not None:
            self.relay.trace = self.trace
            env = self.relay.agent_env(self.relay_port)
        try:
            if budget <= 0:
                self.agent_run = AgentRun(reason="setup used the whole time budget")
            elif isinstance(self.spec.agent, ChatAgent):
                if self.spec.model_spec is None or self.spec.model_spec.provider == "none":
                    raise Outcome(Verdict.BLOCKED_SETUP, "a chat agent needs a model")
                self.agent_run, self.usage = run_chat_agent(
                    self.spec.agent,
                    sandbox,
                    self.scenario.context,
                    self.trace,
                    budget,
                    self.spec.model_spec,
                )
            elif isinstance(self.spec.agent, CommandAgent):
                self.agent_run = run_command_agent(
                    self.spec.agent,
                    sandbox,
                    self.scenario.context,
                    self.trace,
                    budget,
                    model=self.spec.model,
                    env=env,
                    artifacts=self.artifacts,
                    context_written=self.one_sandbox,
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

    def final_diff(self, agent_view: dict[str, Any]) -> None:
        """``diff.patch`` and ``status-final.json``: the diff against the pinned commit, taken
        on the host whatever the agent did to its repository (what it did is recorded in
        ``damage``); a diff that cannot be taken is the agent's outcome, never the farm's."""
        url, revision = self.loaded.repository_url(), self.scenario.revision
        if not self.mirrors.has_revision(url, revision):  # the node's cache, not the agent
            raise Outcome(Verdict.INFRA_ERROR, f"the mirror of {url} lost {revision}")
        damage = git_damage(self.workspace)
        state: dict[str, Any] = {**agent_view, "pinned": revision}
        try:
            changes = diff_against_pin(
                self.mirrors,
                url,
                revision,
                self.workspace,
                self.folder / "final-diff",
                self.artifacts / "diff.patch",
            )
            state.update(changes.model_dump())
        except WorkspaceError as exc:
            (self.artifacts / "diff.patch").unlink(missing_ok=True)
            damage.append(f"no diff against the pinned commit could be taken: {exc}")
        self.write("status-final.json", {**state, "damage": damage})

    # -- the model relay ------------------------------------------------------------------

    def open_relay(self) -> None:
        """Start the model relay when the trial's model calls a provider (phase 7)."""
        model = self.spec.model_spec
        if model is None or model.provider == "none" or isinstance(self.spec.agent, ChatAgent):
            return  # no model, or a chat agent (its loop calls the model from the host)
        try:
            self.relay = ModelRelay(self.folder / "relay.sock", model, timeout_s=model.timeout_s)
            self.relay.start()
        except ConfigError as exc:  # the key is missing on this node
            raise Outcome(Verdict.BLOCKED_SETUP, str(exc)) from exc

    def start_forwarder(self, sandbox: Sandbox) -> None:
        """Start the relay's forwarder in the sandbox; refuse an image that cannot run it."""
        assert self.relay is not None
        self.relay_port = RELAY_PORT if sandbox.isolated else _free_port()
        try:
            self.tunnel = RelayTunnel.open(sandbox, self.relay_port, self.relay.socket_path)
        except MissingPython as exc:
            raise Outcome(
                Verdict.BLOCKED_SETUP,
                f"image {self.scenario.image!r} has no python3, which the model relay's "
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
        self.usage = relay.usage
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

    # -- sandboxes ------------------------------------------------------------------------

    @functools.cached_property
    def backend(self) -> type[Sandbox]:
        """The sandbox backend's class (looked up inside the lifecycle: it may fail)."""
        return sandbox_class(self.spec.backend)

    @property
    def one_sandbox(self) -> bool:
        """Whether one sandbox serves agent and verification (its scratch can be wiped)."""
        return self.backend.scratch_mounts and not self.scenario.writable_root

    def sandbox_spec(self) -> SandboxSpec:
        """The spec of every sandbox of this trial."""
        limits = self.scenario.limits
        verifier = self.scenario.verifier
        budget = limits.time_s + verifier.timeout_s * max(1, len(verifier.commands))
        mounts = [Mount(source=self.workspace, target=WORKDIR)]
        if self.one_sandbox:
            mounts += [Mount(source=self.scratch / n, target=t) for n, t in SCRATCH.items()]
        return SandboxSpec(
            image=self.scenario.image,
            workdir=WORKDIR,
            home=HOME,
            mounts=tuple(mounts),
            read_only_root=self.one_sandbox,
            limits=SandboxLimits(cpus=limits.cpus, memory=limits.memory, pids=limits.pids),
            sweep=self.spec.sweep,
            trial=self.spec.trial_key,
            node=self.spec.node or socket.gethostname(),
            ttl_s=budget + verifier.host_timeout_s + 900,
        )

    def start_sandbox(self) -> Sandbox:
        """A new sandbox of this trial (an image the engine lacks is blocked_setup)."""
        sandbox = create_sandbox(self.spec.backend, self.sandbox_spec(), self.spec.backend_config)
        self.write("backend.json", sandbox.config.model_dump(mode="json"))
        self.sandboxes.append(sandbox)
        try:
            sandbox.start()
        except ImageNotFound as exc:
            raise Outcome(Verdict.BLOCKED_SETUP, str(exc)) from exc
        return sandbox

    def release(self, sandbox: Sandbox, *, stop: bool) -> None:
        """Let go of `sandbox`: killed now if `stop`, removed in the background."""
        self.sandboxes.remove(sandbox)
        if stop:
            sandbox.stop()
        self.closing.append(self.background(sandbox.close))

    def reset_scratch(self) -> None:
        """Make the scratch folders as a new sandbox has them: HOME as in the image, /tmp
        and /var/tmp empty. They are mount sources, so they are emptied in place (a new
        folder would not be the one the sandbox sees); nothing in them is followed."""
        for name in SCRATCH:
            folder = self.scratch / name
            folder.mkdir(parents=True, exist_ok=True)
            for child in list(folder.iterdir()):
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
            if name != "home":
                folder.chmod(0o1777)
        home = self.scratch / "home"
        if self.home_seed is not None:
            with self.home_seed.open("rb") as archive:
                extract_untrusted(archive, home, strip=1, limit=1 << 40)
        (home / ".hangar").mkdir(exist_ok=True)
        home.chmod(0o755)
        if self.backend.isolated:
            hand_over(home, SANDBOX_UID)

    def background(self, work: Callable[[], T]) -> Future[T]:
        """Run `work` on the trial's thread pool."""
        future = self.pool.submit(work)
        self.pending.append(future)
        return future

    def remaining(self) -> float:
        """Seconds left of the setup+run budget."""
        return self.deadline - time.monotonic()

    # -- the boundary's hooks -------------------------------------------------------------

    def ended(self, verdict: Verdict, reason: str) -> None:
        """Close the trace of a trial that ended before its agent did."""
        if self.trace is not None and not self.trace.closed:
            self.trace.close(completed=False, reason=reason)

    def tear_down(self, *, wait: bool) -> None:
        """Stop and remove every sandbox and the trial's disk; with `wait`, return only
        once all are gone. Without it the removals finish on the pool's threads after the
        trial has returned (a Ray worker lives on; the reaper covers one that does not)."""
        with suppress(Exception):
            self.close_relay()  # when the trial ended before its agent did
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
            for future in self.closing:
                with suppress(Exception):
                    future.result()
        self.pool.shutdown(wait=wait)
        self.guard.close()
        self.disk.close()

    def outcome(self) -> dict[str, Any]:
        """The agent's run, the verification's findings, usage and a provider failure."""
        judged = self.judgement
        return {
            "completed": self.agent_run.completed,
            "agent_exit_code": self.agent_run.exit_code,
            "checks": judged.checks if judged else (),
            "route": judged.route if judged else None,
            "scope": judged.scope if judged else None,
            "usage": self.usage,
            "provider_error": (
                self.agent_run.provider_error if self.verdict is Verdict.INFRA_ERROR else None
            ),
            "scores": _pass_score(self.verdict),
        }


def _pass_score(verdict: Verdict) -> tuple[Score, ...]:
    """An execution trial's score: ``pass`` 1 or 0 (none for a trial that says nothing
    of the agent: blocked_setup, infra_error, void)."""
    if verdict not in COUNTED_VERDICTS:
        return ()
    return (Score(metric="pass", value=float(verdict is Verdict.PASS)),)


def _scenario_of(spec: TrialSpec) -> LoadedScenario:
    if not isinstance(spec.task, LoadedScenario):
        raise TypeError(f"an execution trial needs a scenario, got a {spec.task.kind} case")
    return spec.task


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
