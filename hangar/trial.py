"""One trial, end to end: DESIGN.md section 3, phases 1 to 13.

`run_trial` never raises for anything a trial can meet: every outcome is a
`TrialResult` with a verdict and a reason. Exceptions are caught at this boundary only;
an unexpected one is an `infra_error` whose reason names its type (the traceback goes
into the evidence). The evidence bundle is written in ``finally``, and the sandboxes
and trial folders are removed in every outcome.

Nothing the agent leaves outside the workspace may reach verification. On docker one
sandbox serves the whole trial: its root file system is read-only and HOME, /tmp and
/var/tmp are the trial's *scratch folders* on the host, so after the agent's turns every
process of the sandbox user is killed, shared memory is cleared and the scratch folders
are emptied (HOME back to what the image has), and verification (final status, hidden
files, verifier commands) runs in what is left: the image and the workspace. Where that
cannot be done (a backend without live mounts, a scenario with ``writable_root``), a
fresh *verification sandbox* on the same workspace replaces the agent's.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from hangar.agents import AgentRun, AgentSpec, ChatAgent, run_chat_agent, run_command_agent
from hangar.agents.command import CONTEXT_FILE
from hangar.errors import ConfigError, ImageNotFound, SandboxError
from hangar.models import ModelSpec
from hangar.models.relay import ModelRelay
from hangar.models.tunnel import MissingPython, RelayTunnel
from hangar.paths import cache_dir, default_evidence_url
from hangar.results import TrialResult, Usage, Verdict
from hangar.sandbox import Mount, Sandbox, SandboxLimits, SandboxSpec, sandbox_class
from hangar.sandbox.archive import copy_untrusted_tree, extract_untrusted
from hangar.sandbox.disk import TrialDisk
from hangar.sandbox.workspace import (
    MirrorCache,
    WorkspaceError,
    diff_against_pin,
    git_damage,
    hand_over,
    make_workspace,
    remove_escaping_links,
    workspace_state,
)
from hangar.scenario import LoadedScenario, PinnedFile, tree_digest
from hangar.scheduler.keys import Arm, plugin_bytes_digest, trial_key
from hangar.trace import TraceWriter, find_canaries
from hangar.verifiers import junit
from hangar.verifiers.admission import Judgement, fixture_problems, judge
from hangar.verifiers.bundle import build_bundle
from hangar.verifiers.commands import (
    VERIFIER_OUT,
    collect_verifier_out,
    final_state,
    git_state,
    run_verifier_commands,
    stage_hidden_files,
)
from hangar.verifiers.protocol import CommandRecord, VerificationRequest, run_host_script
from hangar.verifiers.store import bundle_key, open_store

T = TypeVar("T")
WORKDIR = "/workspace"
#: HOME of the sandbox user.
HOME = "/home/agent"
#: Scratch folders (trial folder name -> sandbox path) of a one-sandbox trial.
SCRATCH = {"home": HOME, "tmp": "/tmp", "var-tmp": "/var/tmp"}
#: Where hidden verifier files wait in the scratch /tmp for the first verifier command.
HIDDEN_STAGING = ".hangar-hidden"
#: The loopback port the forwarder listens on inside a container.
RELAY_PORT = 4000
#: uid of the sandbox user in hangar's base image; workspaces are handed to it.
SANDBOX_UID = 1000


class TrialSpec(BaseModel):
    """Everything a worker needs to run one trial attempt."""

    model_config = ConfigDict(frozen=True)

    sweep: str = "adhoc"
    """Sweep id."""
    trial_key: str
    """The trial's key (see `hangar.scheduler.keys`)."""
    scenario: LoadedScenario
    """The scenario, loaded and digested."""
    agent: AgentSpec
    """The agent."""
    model: str = "none"
    """Model id."""
    model_spec: ModelSpec | None = None
    """How to reach the model (None: an agent that calls none)."""
    arm: str = "control"
    """Arm name."""
    plugins: tuple[str, ...] = ()
    """Plugins the arm installs."""
    plugins_digest: str = ""
    """sha256 of those plugins' names and bytes (see `hangar.scheduler.keys`)."""
    repeat: int = 0
    """Repeat index."""
    attempt: int = 1
    """Attempt number."""
    backend: str = "docker"
    """Sandbox backend."""
    evidence_url: str
    """Evidence store URL (``file://DIR``)."""
    work_root: Path | None = None
    """Node-local folder for per-trial folders (default: the worker's cache/trials)."""
    cache_root: Path | None = None
    """Node-local cache of repository mirrors (default: the worker's cache folder)."""
    node: str = ""
    """Where the trial runs (set by the worker: host name and Ray node id)."""


def result_of(
    spec: TrialSpec,
    verdict: Verdict,
    reason: str,
    started_at: datetime,
    finished_at: datetime,
    **outcome: Any,
) -> TrialResult:
    """The result of `spec`'s attempt: its identity, the verdict, and what else it knows."""
    return TrialResult(
        sweep=spec.sweep,
        trial_key=spec.trial_key,
        scenario_id=spec.scenario.scenario.id,
        scenario_digest=spec.scenario.digest,
        suite=spec.scenario.suite,
        agent=spec.agent.name,
        model=spec.model,
        arm=spec.arm,
        repeat=spec.repeat,
        attempt=spec.attempt,
        verdict=verdict,
        reason=reason,
        started_at=started_at,
        finished_at=finished_at,
        agent_digest=spec.agent.digest(),
        agent_settings=spec.agent.settings(),
        plugins_digest=spec.plugins_digest,
        **outcome,
    )


def lost_result(
    spec: TrialSpec, reason: str, started_at: datetime | None = None, *, details: str = ""
) -> TrialResult:
    """An infra_error result for a trial whose worker could not report one (it died, or
    its task raised); `details` (a traceback) goes into an evidence bundle of its own."""
    now = datetime.now(UTC)
    result = result_of(spec, Verdict.INFRA_ERROR, reason, started_at or now, now)
    if not details:
        return result
    with tempfile.TemporaryDirectory(prefix="hangar-lost-") as tmp:
        artifacts = Path(tmp) / "artifacts"
        artifacts.mkdir()
        (artifacts / "error.txt").write_text(details)
        (artifacts / "result.json").write_text(result.model_dump_json(indent=1))
        try:
            uri, sha = _store_bundle(spec, artifacts, Path(tmp) / "bundle.tar.gz")
        except Exception as exc:  # the reason still says what happened
            return result.model_copy(
                update={"reason": f"{reason}; its evidence could not be stored ({exc})"}
            )
    return result.model_copy(update={"evidence_uri": uri, "evidence_sha256": sha})


def single_trial(
    loaded: LoadedScenario,
    agent: AgentSpec,
    arm: Arm,
    *,
    model: ModelSpec | str = "none",
    repeat: int = 0,
    sweep: str | None = None,
    backend: str = "docker",
    evidence_url: str | None = None,
) -> TrialSpec:
    """The spec of one trial, with the node's default folders (a sweep's, or on its own).

    Without a sweep id each call gets its own (``adhoc-<UTC time>``), so running the
    same trial again never overwrites the evidence of an earlier run.
    """
    spec = ModelSpec.model_validate(model)
    plugins = plugin_bytes_digest(loaded, arm)
    return TrialSpec(
        sweep=sweep or datetime.now(UTC).strftime("adhoc-%Y%m%dT%H%M%S.%fZ"),
        trial_key=trial_key(loaded, agent, spec.id, arm, repeat, plugins=plugins),
        plugins_digest=plugins,
        scenario=loaded,
        agent=agent,
        model=spec.id,
        model_spec=spec,
        arm=arm.name,
        plugins=arm.plugins,
        repeat=repeat,
        backend=backend,
        evidence_url=evidence_url or default_evidence_url(),
    )


class _Outcome(Exception):
    """Ends the lifecycle early with a verdict (raised by phases, caught by run_trial)."""

    def __init__(self, verdict: Verdict, reason: str) -> None:
        super().__init__(reason)
        self.verdict, self.reason = verdict, reason


class _Trial:
    """The state of one running trial; `run()` walks the phases."""

    def __init__(self, spec: TrialSpec) -> None:
        self.spec = spec
        self.loaded = spec.scenario
        self.scenario = spec.scenario.scenario
        work_root = spec.work_root or cache_dir() / "trials"
        self.folder = work_root / f"{spec.trial_key[:20]}-{spec.attempt}"
        # Everything the agent can write lives on the trial's size-capped disk.
        self.disk = TrialDisk(self.folder, spec.scenario.scenario.limits.disk)
        self.workspace = self.disk.root / "workspace"
        self.scratch = self.disk.root / "scratch"
        self.artifacts = self.folder / "artifacts"
        self.timings: dict[str, float] = {}
        self.sandboxes: list[Sandbox] = []
        self.trace: TraceWriter | None = None
        self.agent_run = AgentRun()
        self.judgement: Judgement | None = None
        self.relay: ModelRelay | None = None
        self.tunnel: RelayTunnel | None = None
        self.relay_port = RELAY_PORT
        self.usage = Usage()
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hangar-trial")
        self.pending: list[Future[Any]] = []
        self.closing: list[Future[Any]] = []
        self.deadline = time.monotonic() + spec.scenario.scenario.limits.time_s
        self.cache = spec.cache_root or cache_dir()
        self.mirrors = MirrorCache(self.cache / "mirrors")
        self.home_seed: Path | None = None

    def localise(self, spec: TrialSpec) -> None:
        """Run from `spec`, the same trial with this node's copy of its scenario."""
        self.spec, self.loaded, self.scenario = spec, spec.scenario, spec.scenario.scenario

    @functools.cached_property
    def backend(self) -> type[Sandbox]:
        """The sandbox backend's class (looked up inside the lifecycle: it may fail)."""
        return sandbox_class(self.spec.backend)

    @property
    def one_sandbox(self) -> bool:
        """Whether one sandbox serves agent and verification (its scratch can be wiped)."""
        return self.backend.scratch_mounts and not self.scenario.writable_root

    def background(self, work: Callable[[], T]) -> Future[T]:
        """Run `work` on the trial's thread pool."""
        future = self.pool.submit(work)
        self.pending.append(future)
        return future

    def tear_down(self, *, wait: bool) -> None:
        """Stop and remove every sandbox; with `wait`, return only once all are gone.

        Without `wait` the removals finish on the pool's threads after the trial has
        returned (a Ray worker lives on; the reaper covers one that does not).
        """
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

    def remaining(self) -> float:
        """Seconds left of the setup+run budget."""
        return self.deadline - time.monotonic()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.timings[name] = round(time.monotonic() - started, 3)

    def write(self, rel: str, data: object) -> Path:
        path = self.artifacts / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        text = data if isinstance(data, str) else json.dumps(data, indent=1, default=str)
        path.write_text(text)
        return path

    def sandbox_spec(self) -> SandboxSpec:
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

    def open_relay(self) -> None:
        """Start the model relay when the trial's model calls a provider (phase 7)."""
        model = self.spec.model_spec
        if model is None or model.provider == "none" or isinstance(self.spec.agent, ChatAgent):
            return  # no model, or a chat agent (its loop calls the model from the host)
        try:
            self.relay = ModelRelay(self.folder / "relay.sock", model, timeout_s=model.timeout_s)
            self.relay.start()
        except ConfigError as exc:  # the key is missing on this node
            raise _Outcome(Verdict.BLOCKED_SETUP, str(exc)) from exc

    def start_forwarder(self, sandbox: Sandbox) -> None:
        """Start the relay's forwarder in the sandbox; refuse an image that cannot run it."""
        assert self.relay is not None
        self.relay_port = RELAY_PORT if sandbox.isolated else _free_port()
        try:
            self.tunnel = RelayTunnel.open(sandbox, self.relay_port, self.relay.socket_path)
        except MissingPython as exc:
            raise _Outcome(
                Verdict.BLOCKED_SETUP,
                f"image {self.scenario.image!r} has no python3, which the model relay's "
                "forwarder needs: add python3 to the image",
            ) from exc

    def start_sandbox(self) -> Sandbox:
        sandbox = self.backend(self.sandbox_spec())
        self.sandboxes.append(sandbox)
        try:
            sandbox.start()
        except ImageNotFound as exc:
            raise _Outcome(Verdict.BLOCKED_SETUP, str(exc)) from exc
        return sandbox

    # -- the phases -----------------------------------------------------------------------

    def run(self) -> None:
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
        with self.phase("admission"):
            self.admit()
        with self.phase("disk"):
            self.write("disk.json", self.disk.open(ttl_s=self.sandbox_spec().ttl_s).model_dump())
        with self.phase("relay_up"):
            self.open_relay()
        starting = None
        if self.backend.live_mounts:
            # The sandbox starts while the workspace is made: its mounts are live, so it
            # sees what lands in the (empty) folders later. It runs nothing until then.
            self.workspace.mkdir(parents=True)
            for name in SCRATCH if self.one_sandbox else ():
                (self.scratch / name).mkdir(parents=True)
            starting = self.background(self.start_sandbox)
        with self.phase("workspace"):
            try:
                make_workspace(
                    self.mirrors,
                    self.loaded.repository_url(),
                    self.scenario.revision,
                    self.workspace,
                )
            except WorkspaceError as exc:
                raise _Outcome(Verdict.INFRA_ERROR, f"workspace: {exc}") from exc
        # Setup (prepare, plugins) and the agent's turns share one time budget.
        self.deadline = time.monotonic() + self.scenario.limits.time_s
        with self.phase("prepare"):
            self.prepare()  # on the host, before the workspace is handed to the sandbox user
        with self.phase("initial_status"):
            if not self.spec.plugins:  # nothing else will touch it before the agent
                state = workspace_state(self.workspace, self.scenario.revision)
                self.write("status-initial.json", state)
        if self.backend.isolated:  # local commands run as we do
            hand_over(self.workspace, SANDBOX_UID)
        with self.phase("sandbox_up"):
            if self.one_sandbox:
                try:
                    self.home_seed = self.backend.image_folder(
                        self.scenario.image, HOME, self.cache
                    )
                except ImageNotFound as exc:
                    raise _Outcome(Verdict.BLOCKED_SETUP, str(exc)) from exc
                self.reset_scratch()
                task = self.scratch / "home" / CONTEXT_FILE
                task.write_text(self.scenario.context)
                if self.backend.isolated:
                    os.chown(task, SANDBOX_UID, SANDBOX_UID)
            sandbox = starting.result() if starting is not None else self.start_sandbox()
            if self.relay is not None:
                self.start_forwarder(sandbox)
        # A fresh verification sandbox starts while the agent works (it runs nothing until
        # the agent sandbox is gone); a backend that copies mounts must wait for the
        # agent's workspace to be copied back first.
        verifier_start = None
        if not self.one_sandbox and self.backend.live_mounts:
            verifier_start = self.background(self.start_sandbox)
        with self.phase("plugins"):
            self.install_plugins(sandbox)
        if self.spec.plugins:  # plugins may have landed in the workspace
            with self.phase("initial_status"):
                self.write("status-initial.json", git_state(sandbox))
        with self.phase("agent"):
            self.run_agent(sandbox, self.remaining())
            disk_full = self.disk.full()
        with self.phase("final_status"):
            agent_view = final_state(sandbox)  # kills every agent process, before and after
        if self.one_sandbox:
            with self.phase("scratch_reset"):
                self.reset_scratch()
            verifier_box = sandbox
        else:
            with self.phase("agent_teardown"):
                # Kill first, remove in the background.
                self.sandboxes.remove(sandbox)
                sandbox.stop()
                self.closing.append(self.background(sandbox.close))
            with self.phase("verifier_sandbox_up"):
                verifier_box = verifier_start.result() if verifier_start else self.start_sandbox()
        with self.phase("final_diff"):  # on the host, from the (copied back) workspace
            self.final_diff(agent_view)
        with self.phase("verifier_files"):
            # Staged in the sandbox's /tmp (the emptied scratch folder, or copied in with
            # one archive), then put in place by the first verifier command's exec.
            inside = f"/tmp/{HIDDEN_STAGING}"
            staging = self.scratch / "tmp" / HIDDEN_STAGING if self.one_sandbox else None
            before = stage_hidden_files(
                self.loaded, staging or self.folder / "hidden", verifier_box.command_path(inside)
            )
            if before and staging is None:
                verifier_box.copy_in(self.folder / "hidden", inside)
            elif before and staging is not None and self.backend.isolated:
                hand_over(staging, SANDBOX_UID)
            self.write(
                "verifier/hidden-files.json", [h.target for h in self.scenario.verifier.files]
            )
        with self.phase("verifier_commands"):
            commands = run_verifier_commands(
                verifier_box,
                self.loaded,
                self.artifacts,
                collect=not self.one_sandbox,
                before=before,
            )
        with self.phase("verifier_teardown"):
            # Nothing may still write the workspace (or the scratch) while the host reads
            # it: the last command ended every process of the sandbox user in an isolated
            # sandbox; elsewhere, or when a copied workspace must come back, stop it.
            self.sandboxes.remove(verifier_box)
            if not (verifier_box.isolated and self.backend.live_mounts):
                verifier_box.stop()
            self.closing.append(self.background(verifier_box.close))
            if self.one_sandbox and self.scenario.verifier.commands:
                out = self.scratch / "tmp" / PurePosixPath(VERIFIER_OUT).relative_to("/tmp")
                collect_verifier_out(
                    lambda target: copy_untrusted_tree(
                        out, target, limit=verifier_box.spec.read_limit
                    ),
                    self.artifacts,
                )
            self.write("workspace-links-removed.json", remove_escaping_links(self.workspace))
        with self.phase("host_verifier"):
            raw, verifier_error = self.host_verify(commands)
        with self.phase("judgement"):
            assert self.trace is not None and self.trace.sha256 is not None
            self.judgement = judge(
                raw,
                verifier_error=verifier_error,
                case=self.scenario.id,
                trace_sha256=self.trace.sha256,
                completed=self.agent_run.completed,
                incomplete_reason=self.agent_run.reason,
                checklist=self.scenario.verifier.checklist,
                artifacts=self.artifacts,
                commands=commands,
                canaries_found=find_canaries(self.trace.path, self.scenario.canaries),
            )
            if disk_full and self.judgement.verdict is Verdict.FAIL:
                limit = self.disk.state.limit / 1024**2
                self.judgement.reason += f"; the agent filled its disk (limit {limit:g} MiB)"
            error = self.agent_run.provider_error
            if error is not None and self.judgement.verdict is Verdict.FAIL:
                # The provider failed the agent, not the other way round: never a counted
                # fail (a pass stays a pass). The sweep retries it, or stops the model
                # when its key is refused.
                self.judgement = self.judgement.model_copy(
                    update={
                        "verdict": Verdict.INFRA_ERROR,
                        "reason": f"provider failure: {error.message} (the trial would "
                        f"otherwise be a fail: {self.judgement.reason})",
                    }
                )

    def final_diff(self, agent_view: dict[str, Any]) -> None:
        """``diff.patch`` and ``status-final.json``: the diff against the pinned commit, taken
        on the host whatever the agent did to its repository (what it did is recorded in
        ``damage``); a diff that cannot be taken is the agent's outcome, never the farm's."""
        url, revision = self.loaded.repository_url(), self.scenario.revision
        if not self.mirrors.has_revision(url, revision):  # the node's cache, not the agent
            raise _Outcome(Verdict.INFRA_ERROR, f"the mirror of {url} lost {revision}")
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

    def admit(self) -> None:
        problems = fixture_problems(
            self.loaded,
            self.spec.plugins,
            mirrors=self.mirrors,
            image_problem=self.backend.image_problem,
        )
        self.write("admission.json", {"problems": problems})
        if problems:
            raise _Outcome(Verdict.BLOCKED_SETUP, "admission: " + "; ".join(problems))

    def prepare(self) -> None:
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
            raise _Outcome(Verdict.BLOCKED_SETUP, f"prepare {how}: {tail[0]}".rstrip(": "))

    def install_plugins(self, sandbox: Sandbox) -> None:
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
                    raise _Outcome(
                        Verdict.BLOCKED_SETUP,
                        f"plugin {name!r} install exited {res.returncode}: {res.stderr[-300:]}",
                    )
        self.write("plugins.json", projected)

    def run_agent(self, sandbox: Sandbox, budget: float) -> None:
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
                    raise _Outcome(Verdict.BLOCKED_SETUP, "a chat agent needs a model")
                self.agent_run, self.usage = run_chat_agent(
                    self.spec.agent,
                    sandbox,
                    self.scenario.context,
                    self.trace,
                    budget,
                    self.spec.model_spec,
                )
            else:
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
        finally:
            self.close_relay()
        self.trace.close(completed=self.agent_run.completed, reason=self.agent_run.reason)

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

    def host_verify(self, commands: list[CommandRecord]) -> tuple[str, str | None]:
        """Run the host verifier: its printed output, and what went wrong running it."""
        assert self.trace is not None and self.trace.sha256 is not None
        request = VerificationRequest(
            case=self.scenario.id,
            fixture=str(self.loaded.path),
            workspace=str(self.workspace),
            artifacts=str(self.artifacts),
            trace_sha256=self.trace.sha256,
            completed=self.agent_run.completed,
            checklist=list(self.scenario.verifier.checklist),
            commands=commands,
        )
        request_path = self.write("verifier/request.json", request.to_json())
        host = self.scenario.verifier.host
        if not isinstance(host, PinnedFile):
            raw = junit.verify(request, host).to_json()
            self.write("verifier/verification.json", raw)
            return raw, None
        run = run_host_script(
            self.loaded.local(host.file),
            request_path,
            timeout=self.scenario.verifier.host_timeout_s,
            cwd=self.loaded.folder,
        )
        self.write("verifier/verification.json", run.stdout)
        self.write("verifier/host-stderr.txt", run.stderr)
        if run.timed_out:
            limit = self.scenario.verifier.host_timeout_s
            return run.stdout, f"host verifier hung: killed at its {limit:g} s limit"
        if run.exit_code != 0:
            last = (run.stderr.strip().splitlines() or [""])[-1]
            return run.stdout, f"host verifier crashed (exit {run.exit_code}): {last}".rstrip(": ")
        return run.stdout, None


def run_trial(
    spec: TrialSpec,
    *,
    wait_teardown: bool = True,
    localise: Callable[[TrialSpec], TrialSpec] | None = None,
) -> TrialResult:
    """Run one trial attempt and return its result (never raises for a trial's outcome).

    With `wait_teardown` (the default) every sandbox is gone when it returns; a Ray
    worker passes False so that removing containers overlaps the next trial's start.
    Either way every process in them has been killed before the result exists.
    `localise` turns the spec into this node's (a Ray worker unpacks the scenario the
    driver shipped): it runs inside the boundary, so its failure is a result too.
    """
    started = datetime.now(UTC)
    trial = _Trial(spec)
    shutil.rmtree(trial.folder, ignore_errors=True)
    trial.artifacts.mkdir(parents=True)
    verdict, reason = Verdict.INFRA_ERROR, "the trial did not finish"
    uri = sha = None
    try:
        if localise is not None:
            with trial.phase("unpack"):
                trial.localise(localise(spec))
        trial.run()
        assert trial.judgement is not None
        verdict, reason = trial.judgement.verdict, trial.judgement.reason
    except _Outcome as outcome:
        verdict, reason = outcome.verdict, outcome.reason
    except Exception as exc:  # the trial boundary: record, never raise
        kind = "sandbox" if isinstance(exc, SandboxError) else "hangar"
        verdict, reason = Verdict.INFRA_ERROR, f"{kind} failure: {type(exc).__name__}: {exc}"
        trial.write("error.txt", traceback.format_exc())
    finally:
        if trial.trace is not None and not trial.trace.closed:
            trial.trace.close(completed=False, reason=reason)
        with trial.phase("teardown_sandbox"):
            with suppress(Exception):
                trial.close_relay()  # when the trial ended before its agent did
            trial.tear_down(wait=wait_teardown)
            trial.disk.close()
        finished = datetime.now(UTC)
        upstream = trial.agent_run.provider_error if verdict is Verdict.INFRA_ERROR else None
        result = result_of(
            spec,
            verdict,
            reason,
            started,
            finished,
            completed=trial.agent_run.completed,
            agent_exit_code=trial.agent_run.exit_code,
            checks=trial.judgement.checks if trial.judgement else (),
            route=trial.judgement.route if trial.judgement else None,
            scope=trial.judgement.scope if trial.judgement else None,
            provider_error=upstream,
            timings=trial.timings,
            usage=trial.usage,
            node=spec.node or socket.gethostname(),
        )
        try:
            with trial.phase("bundle"):
                trial.write("result.json", result.model_dump(mode="json"))
                uri, sha = _store_bundle(
                    trial.spec, trial.artifacts, trial.folder / "bundle.tar.gz"
                )
        except Exception as exc:
            result = result.model_copy(
                update={
                    "verdict": Verdict.INFRA_ERROR,
                    "reason": f"evidence could not be stored ({type(exc).__name__}: {exc}); "
                    f"the trial had ended {verdict.value}: {reason}",
                }
            )
        with trial.phase("teardown"):
            shutil.rmtree(trial.folder, ignore_errors=True)
    return result.model_copy(
        update={
            "evidence_uri": uri,
            "evidence_sha256": sha,
            "timings": dict(trial.timings),
        }
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _store_bundle(spec: TrialSpec, artifacts: Path, archive: Path) -> tuple[str, str]:
    """Bundle `artifacts` into `archive` and put it in the evidence store: (uri, sha256)."""
    sha = build_bundle(artifacts, archive)
    key = bundle_key(spec.sweep, spec.trial_key, spec.attempt)
    return open_store(spec.evidence_url).put(key, archive), sha
