"""The trial of an image task (`hangar.kinds.execution.images.task`): the image is the fixture.

`ImageTaskTrial.run` reads as its phases: admission (what the task asks that hangar
cannot honour), the image (built once per node, its log kept), the trial's disk, the
model relay, the workspace (the image's working directory taken out on the host, served
from the disk at the same path, a pristine copy kept outside the agent's reach), the
sandbox (the task's agent user; no capabilities, no new privileges, no network, its
limits), the agent, the hand-over to verification, the diff against the initial
content (on the host: the agent cannot break it), the tests and the reward.

Hand-over (`hangar.kinds.execution.images.verifier`): the agent's sandbox is stopped, so
every process of the agent is gone, its logs are copied out, and the tests run in a new
sandbox with a fresh read-only ``/tests`` and a ``/logs/verifier`` on a disk of their
own: a snapshot of the agent's for ``shared`` (the verifier sees the file system the
agent left, as Harbor's does), the verifier's image with the declared artifacts for
``separate`` (both with the test script under hangar's observer, which records what the
judge's processes used of the agent's changes), the task's image with the workspace for
a SWE-bench instance. The reward is read on the host from what the script wrote. No
reward is the agent's ``fail`` after ``shared`` (it could have broken the environment the
tests ran in), and after ``separate`` where the agent's artifacts ran the tests out of
time or its code changed the verifier's output; otherwise a ``verifier_error`` after
``separate`` (the task's problem). A pass beside a takeover (the judge's machinery used
what the agent changed), or a reward of 1 beside a log that reports failures, is not
counted.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import suppress
from pathlib import Path
from typing import Any

from hangar.agents import AgentRun, ReferenceAgent
from hangar.agents.mcp import Installed
from hangar.errors import (
    ImageBuildError,
    ImageNotFound,
    MissingPython,
    RegistryError,
    SandboxError,
    SandboxIsADirectory,
    SandboxUnavailable,
    WorkspaceError,
)
from hangar.kinds.execution.images.backends import backend_problems
from hangar.kinds.execution.images.build_network import build_networks
from hangar.kinds.execution.images.healthcheck import wait_healthy
from hangar.kinds.execution.images.rewards import Reward, log_texts, read_reward, reported_failures
from hangar.kinds.execution.images.services import (
    build_services,
    save_service_logs,
    start_services,
)
from hangar.kinds.execution.images.skills import install_task_skills
from hangar.kinds.execution.images.steps import (
    archive_step,
    below_minimum,
    combined,
    prepare_step,
    step_record,
    steps_words,
)
from hangar.kinds.execution.images.task import ImageSource, ImageTask, Network, TaskMcpServer
from hangar.kinds.execution.images.verifier import (
    LOGS,
    TESTS,
    ImageVerifierPlace,
    fresh_tests,
    place_of,
    save_agent_logs,
)
from hangar.kinds.execution.swebench.instances import failing_words, grade
from hangar.models.tunnel import RelayTunnel
from hangar.results import COUNTED_VERDICTS, CheckOutcome, Score, TrialOutcome, Verdict
from hangar.sandbox import Mount, Sandbox, SandboxSpec, create_sandbox
from hangar.sandbox.archive import copy_untrusted_tree, extract_untrusted
from hangar.sandbox.base import Change, ExecResult
from hangar.sandbox.disk import RESERVE_UID, TrialDisk
from hangar.sandbox.egress import EgressProxy, proxy_env
from hangar.sandbox.helper import helper_argv
from hangar.sandbox.observe import canonical
from hangar.sandbox.services import ServiceNetwork
from hangar.sandbox.task_images import ensure_task_image, image_settings
from hangar.sandbox.workspace import (
    WORKSPACE_FILES,
    FileState,
    MirrorCache,
    changed_entries,
    diff_against_tree,
    hand_over,
    make_workspace,
    tree_state,
)
from hangar.trials.boundary import Outcome, unless_provider_failed
from hangar.trials.sandboxed import SandboxedTrial, free_port
from hangar.trials.spec import TrialSpec

#: Where the task's solution is in the sandbox.
SOLUTION = "/solution"
#: The disk of the verifier's logs.
VERIFIER_DISK = 256 * 1024**2
#: Bound on the folders read out of a sandbox (artifacts, logs).
READ_LIMIT = 1 << 30
#: The loopback port of the egress proxy inside a container.
EGRESS_PORT = 3128
#: apt cannot drop to its ``_apt`` user in a sandbox without capabilities, nor write the
#: cache folder that user owns: where a phase has a network, apt runs as root with a cache
#: of root's (a task's ``apt-get install`` then works through the proxy).
APT_IN_SANDBOX = 'APT::Sandbox::User "root";\nDir::Cache::Archives "/var/cache/apt/hangar/";\n'


class ImageTaskTrial(SandboxedTrial):
    """One trial of an image task; `run` walks its phases."""

    reserve_uid = RESERVE_UID  # the agent is root by default (Harbor's)

    def __init__(self, spec: TrialSpec) -> None:
        task = _task_of(spec)
        super().__init__(spec, task.limits, task.image.reference or "", task.instruction)
        #: The task; `task` is the step that runs (the task itself when it has no steps).
        self.whole = task
        self.task = task.at_step(0) if task.steps else task
        self.step_index = 0
        self.step_records: list[dict[str, Any]] = []
        #: The image the agent's sandbox starts from (a step's: the last one's snapshot).
        self.agent_image: str | None = None
        #: Earlier steps' snapshots (the next step's sandbox was made from them).
        self.snapshots: list[str] = []
        #: What of the verifier's executables the agent changed, at any step.
        self.takeovers: list[str] = []
        #: The task's services and their network (None: it has none, or not yet).
        self.services: ServiceNetwork | None = None
        self.service_images: dict[str, str] = {}
        self.workdir = "/app"
        self.logs = self.disk.root / "logs"
        self.initial = self.folder / "workspace-initial"
        # The verifier's logs: on a disk of their own, outside the agent's.
        self.verifier_disk = TrialDisk(
            self.folder / "verifier", VERIFIER_DISK, self.cache / "disks"
        )
        self.disks.append(self.verifier_disk)
        self.verifier_logs = self.verifier_disk.root / "logs"
        self.read_limit = READ_LIMIT
        self.reward: Reward | None = None
        self.checks: tuple[CheckOutcome, ...] = ()
        self.graded_report: dict[str, Any] = {}
        self.egress: list[EgressProxy] = []
        self.egress_tunnels: list[RelayTunnel] = []
        #: The snapshot of the agent's sandbox a shared verifier starts from.
        self.snapshot: str | None = None
        #: What of the agent's changes the shared verifier's machinery used.
        self.takeover: list[str] = []
        #: What the verifier's processes were still doing when its time ran out.
        self.stalled: list[str] = []
        #: What the agent's code did to the verifier's own output folder.
        self.interfered: list[str] = []
        #: The image's PATH and PYTHONPATH (`image_settings`).
        self.image_env: dict[str, str] = {}
        #: The egress proxies' ports in the sandbox that has them open.
        self.egress_ports: list[int] = []
        #: The workspace's files as the agent was given them, and what it changed at
        #: earlier steps (a shared verifier is told of each).
        self.workspace_state: dict[bytes, FileState] | None = None
        self.workspace_changed: dict[bytes, str] | None = {}
        #: The agent's changes to its container at every step so far (a shared verifier
        #: is told of them all: an earlier step's are in a later step's image).
        self.earlier_changes: list[Change] = []
        self.tests = self.folder / "tests"
        self.place: ImageVerifierPlace | None = None

    def localise(self, spec: TrialSpec) -> None:
        """Run from `spec`, the same trial with this node's copy of its task."""
        super().localise(spec)
        self.whole = _task_of(spec)
        self.task = self.whole.at_step(self.step_index) if self.whole.steps else self.whole

    def record(self) -> None:
        """The task (its instruction apart) and the trial as they ran."""
        self.write("task.json", self.whole.model_dump(mode="json", exclude={"instruction"}))
        self.write("instruction.md", self.whole.instruction)
        self.write("trial.json", self.spec.model_dump(mode="json", exclude={"task"}))

    def install_mcp(self) -> None:
        """The agent's own MCP servers, and the task's (`task-mcp.json` records them)."""
        super().install_mcp()
        servers = self.whole.mcp_servers
        if servers:
            self.mcp = [*self.mcp, *(_task_server(s) for s in servers)]
            self.write("task-mcp.json", [s.model_dump(mode="json") for s in servers])

    def provision(self) -> None:
        """The task's image, and its working directory."""
        with self.phase("image"):
            self.image_ref = self.build(self.task.image, "image")
            self.workdir = self.image_workdir(self.image_ref)
            self.service_images = build_services(self)

    def disk_ttl(self) -> float:
        """The agent's and the verifier's budgets, and a margin."""
        return self.budget() + 900

    def set_up(self) -> Sandbox:
        """The workspace, then the sandbox with it, the forwarder and the egress proxy."""
        with self.phase("workspace"):
            self.take_workspace()
        if self.whole.services:
            with self.phase("services"):
                start_services(self, self.service_images)
        return self.agent_sandbox()

    def agent_sandbox(self) -> Sandbox:
        """The agent's sandbox started, with the workspace, the forwarder and the proxy."""
        with self.phase("sandbox_up"):
            sandbox = self.start_sandbox()
            self.give_workspace(sandbox)
            if self.relay is not None:
                self.start_forwarder(sandbox)
            if self.task.agent_network.mode == "allowlist":  # the agent's only way out
                self.agent_env = self.open_egress(sandbox, "agent", self.task.agent_network)
        return sandbox

    def before_agent(self, sandbox: Sandbox) -> None:
        """The task's skills are installed and its healthcheck passes first (when it has
        them); the agent's time starts now (building the image and waiting for it to be
        healthy are not the agent's)."""
        if self.task.skills_dir is not None:
            with self.phase("skills"):
                skills = install_task_skills(sandbox, self.task.skills_dir, self.spec.agent)
                self.write("skills.json", skills)
        if self.task.healthcheck is not None:
            with self.phase("healthcheck"):
                wait_healthy(
                    sandbox, self.task.healthcheck, lambda r: self.write("healthcheck.json", r)
                )
        if self.whole.steps:
            with self.phase("step_setup"):
                prepare_step(self, sandbox, self.whole.steps[self.step_index])
        self.deadline = time.monotonic() + self.limits.time_s

    def after_agent(self, sandbox: Sandbox) -> None:
        """The egress proxy closes with the agent's turns."""
        self.close_egress()

    def verify(self, sandbox: Sandbox) -> None:
        """Hand-over, the diff, the test script, the reward."""
        with self.phase("hand_over"):
            box = self.hand_over(sandbox)
        with self.phase("final_diff"):
            self.final_diff()
        with self.phase("tests"):
            result = self.run_tests(box)
        with self.phase("judgement"):
            self.judge(result)
            if self.whole.steps:
                self.takeovers += self.takeover
                self.step_records.append(step_record(self, self.whole.steps[self.step_index]))
                self.write("steps.json", self.step_records)

    def next_step(self) -> Sandbox | None:
        """The next step's sandbox, from the snapshot of the last step's (None when the
        task has no more steps, or the last step's rewards end the trial)."""
        steps = self.whole.steps
        if not steps:
            return None
        done = steps[self.step_index]
        stopped = below_minimum(self.step_records[-1], done)
        last = self.step_index + 1 == len(steps)
        if not stopped and not last and self.snapshot is None:
            stopped = f"the environment after step {done.name!r} could not be kept"
        if stopped or last:
            self.steps_judged(stopped)
            return None
        archive_step(self.artifacts, done.name)
        self.step_index += 1
        self.task = self.whole.at_step(self.step_index)
        self.limits, self.task_text = self.task.limits, self.task.instruction
        assert self.snapshot is not None
        self.snapshots.append(self.snapshot)
        self.agent_image, self.snapshot = self.snapshot, None
        for folder in ("agent", "verifier", "artifacts"):  # copied into the evidence
            shutil.rmtree(self.logs / folder)
            (self.logs / folder).mkdir()
        image_record = (self.artifacts / "image.json").read_bytes()

        def from_snapshot() -> Sandbox:
            sandbox = self.agent_sandbox()
            (self.artifacts / "image.json").write_bytes(image_record)  # the task's, not the
            return sandbox  # snapshot's

        return self.start_turn(from_snapshot)  # its MCP servers told to the agent again

    def start_mcp(self, sandbox: Sandbox) -> None:
        """The agent's MCP servers (`SandboxedTrial.start_mcp`). After the first step they
        started before, so one that no longer starts is what the agent changed: a fail."""
        try:
            super().start_mcp(sandbox)
        except Outcome as exc:
            if self.step_index == 0:
                raise
            raise Outcome(
                Verdict.FAIL,
                f"step {self.whole.steps[self.step_index].name!r}: {exc.reason} "
                "(in the environment the agent left)",
            ) from exc

    def steps_judged(self, stopped: str) -> None:
        """The trial's verdict from its steps' rewards (`hangar.kinds.execution.images.steps`)."""
        records, strategy = self.step_records, self.whole.step_reward
        last = records[-1]
        if last["verdict"] not in (Verdict.PASS.value, Verdict.FAIL.value):
            return  # the last step's own verdict (a verifier error, say) stands
        self.reward = combined(records, strategy)
        assert self.reward.value is not None
        words = steps_words(records, len(self.whole.steps), strategy, stopped)
        threshold = self.whole.threshold
        if self.takeovers:
            self.verdict = Verdict.FAIL
            self.reason = f"not counted ({words}): {USED} {_shown(self.takeovers)}"
        elif any(
            r["verdict"] == Verdict.FAIL.value and (r["reward"] or 0) >= threshold for r in records
        ):
            self.verdict = Verdict.FAIL
            self.reason = f"not counted ({words}): " + next(
                r["reason"]
                for r in records
                if r["verdict"] == Verdict.FAIL.value and (r["reward"] or 0) >= threshold
            )
        elif self.reward.value >= threshold and not stopped:
            self.verdict, self.reason = Verdict.PASS, f"reward {self.reward.value:g}: {words}"
        else:
            self.verdict = Verdict.FAIL
            self.reason = (
                f"reward {self.reward.value:g} is below the threshold {threshold:g}: {words}"
            )
        if not self.agent_run.completed and self.verdict is Verdict.FAIL:
            self.reason += f"; {self.agent_run.reason}"
        self.verdict, self.reason = unless_provider_failed(
            self.verdict, self.reason, self.agent_run.provider_error
        )

    # -- before the agent -----------------------------------------------------------------

    def admit(self) -> None:
        """What the task asks that hangar cannot honour, and agents that cannot run it."""
        problems = list(self.task.blocked)
        problems += backend_problems(self.whole, self.spec.backend)
        agent = self.spec.agent
        if isinstance(agent, ReferenceAgent) and agent.role != "nop" and not self.task.solution:
            problems.append(f"the {agent.role} needs the task's solution/solve.sh, which it lacks")
        if self.task.verifier.network.refused and not self.task.allow_public:
            problems.append(
                "the verifier asks for a public network, which the sweep does not allow "
                "(give it `network: {allow_public: true}`, or list the hosts it needs)"
            )
        if self.spec.plugins:
            problems.append(
                f"image tasks take no plugins (the arm selects {list(self.spec.plugins)})"
            )
        self.write("admission.json", {"problems": problems, "notes": list(self.task.notes)})
        if problems:
            raise Outcome(Verdict.BLOCKED_SETUP, "admission: " + "; ".join(problems))

    def build(self, source: ImageSource, what: str) -> str:
        """The image of `source` on this node (built from its context once); a failed
        build or a missing image is blocked_setup, its log in the evidence."""
        if source.context is None:
            assert source.reference is not None
            return self.task.mapped(source.reference)
        try:
            outcome = ensure_task_image(
                self.task.id,
                self.task.local(source.context),
                dockerfile=source.dockerfile,
                mapped=self.task.mapped,
                timeout_s=source.build_timeout_s,
                log=self.artifacts / what / "build.log",
                registry=self.task.registry,
                network=build_networks(self.task, self.artifacts / what / "network.jsonl"),
            )
        except RegistryError as exc:  # the node's, not the task's: run again
            raise Outcome(Verdict.INFRA_ERROR, f"{what}: {exc}") from exc
        except ImageBuildError as exc:
            raise Outcome(Verdict.BLOCKED_SETUP, f"{what}: {exc}") from exc
        self.write(f"{what}/image.json", outcome.model_dump())
        return str(outcome.tag)

    def image_workdir(self, image: str) -> str:
        """The image's working directory: the workspace (``/`` is refused)."""
        try:
            settings = image_settings(image)
        except ImageNotFound as exc:
            raise Outcome(Verdict.BLOCKED_SETUP, str(exc)) from exc
        self.write("image.json", {"reference": image, **settings})
        self.image_env = settings
        workdir = str(self.task.workdir or settings["workdir"] or "/").rstrip("/")
        if not workdir:
            raise Outcome(
                Verdict.BLOCKED_SETUP,
                f"image {image!r} has no WORKDIR: its working directory is the task's "
                "workspace, so set one (Harbor tasks use WORKDIR /app)",
            )
        return workdir

    def take_workspace(self) -> None:
        """The image's working directory (or the task's repository at its revision) on the
        host: the workspace, and a pristine copy."""
        (self.logs / "agent").mkdir(parents=True)
        (self.logs / "verifier").mkdir()
        (self.logs / "artifacts").mkdir()
        url, revision = self.task.repository_url(), self.task.revision
        if url is not None and revision is not None:
            mirrors = MirrorCache(self.cache / "mirrors")
            try:
                make_workspace(mirrors, url, revision, self.workspace)
            except WorkspaceError as exc:
                verdict = Verdict.INFRA_ERROR
                if not mirrors.has_revision(url, revision):
                    verdict = Verdict.BLOCKED_SETUP
                raise Outcome(verdict, f"workspace: {exc}") from exc
            shutil.copytree(self.workspace, self.initial, symlinks=True)
            return
        archive = self.backend.image_folder(self.image_ref, self.workdir, self.cache)
        for target in (self.workspace, self.initial):
            target.mkdir(parents=True, exist_ok=True)
            if archive is not None:
                with archive.open("rb") as stream:
                    extract_untrusted(stream, target, strip=1, limit=1 << 40)

    def give_workspace(self, sandbox: Sandbox) -> None:
        """The workspace and the logs owned by the agent's user."""
        res = sandbox.exec(helper_argv("ids"))
        if not res.ok:
            raise Outcome(
                Verdict.BLOCKED_SETUP,
                f"the agent's user {self.task.agent_user!r} is not in the image: "
                f"{res.stderr.strip()}",
            )
        uid = int(res.stdout.split()[0])
        self.workspace_changes()  # an earlier step's (the folder is given again)
        hand_over(self.workspace, uid)
        hand_over(self.logs, uid)
        if self.task.verifier.mode == "shared" and self.task.grading is None:
            self.workspace_state = tree_state(self.workspace, WORKSPACE_FILES)

    def workspace_changes(self) -> dict[str, str]:
        """Every file of the workspace the agent added or changed since it was given it
        (at every step so far), by path in the sandbox: each file's state compared, none
        read (`tree_state`). Past `WORKSPACE_FILES` files, every path under the workspace
        is taken as changed."""
        state, changed = self.workspace_state, self.workspace_changed
        if state is not None and changed is not None:
            now = changed_entries(state, self.workspace, WORKSPACE_FILES)
            self.workspace_changed = None if now is None else {**changed, **now}
        self.workspace_state = None
        if self.workspace_changed is None:
            return {self.workdir + "/": "C"}  # every path under it
        return {
            canonical(self.workdir.encode() + b"/" + path): kind
            for path, kind in self.workspace_changed.items()
        }

    def budget(self) -> float:
        """The trial's whole time: build excluded, agent and verifier included."""
        return self.limits.time_s + self.task.verifier.timeout_s + 300

    def sandbox_spec(self) -> SandboxSpec:
        """The agent's sandbox: the image, its working directory from the trial disk, the
        logs folder, the task's agent user; a writable root (tasks write outside it)."""
        user = self.task.agent_user
        return self._spec(
            image=self.agent_image or self.image_ref,
            user=user,
            mounts=(
                Mount(source=self.workspace, target=self.workdir),
                Mount(source=self.logs, target=LOGS),
                *self.agent_mounts(),
            ),
            cpus=self.limits.cpus,
            memory=self.limits.memory,
        )

    def _spec(
        self, *, image: str, user: str, mounts: tuple[Mount, ...], cpus: float, memory: int
    ) -> SandboxSpec:
        network: dict[str, Any] = {}
        if self.services is not None:  # the agent and the verifier reach the services
            network = {"network": self.services.name, "hosts": self.services.addresses()}
        return self.sandbox_of(
            image,
            mounts,
            ttl_s=self.budget() + 900,
            cpus=cpus,
            memory=memory,
            workdir=self.workdir,
            user=user,
            home="/root" if user in ("root", "0") else f"/home/{user}",
            read_only_root=False,
            **network,
        )

    # -- the network ----------------------------------------------------------------------

    def open_egress(self, box: Sandbox, phase: str, network: Network) -> dict[str, str]:
        """The egress proxy of `phase` joined to `box`, when its network is an allowlist
        (or public, where the sweep allows it): the environment that points at it."""
        hosts = network.hosts(self.task.allow_public)
        if hosts is None:
            return {}
        proxy = EgressProxy(
            hosts,
            phase,
            host_services=self.task.host_services,
            log=self.artifacts / "network" / f"{phase}.jsonl",
        ).start()
        self.egress.append(proxy)
        port = EGRESS_PORT if box.isolated else free_port()
        self.egress_ports.append(port)
        try:
            self.egress_tunnels.append(RelayTunnel.open(box, port, proxy.socket_path))
        except MissingPython as exc:
            raise Outcome(
                Verdict.BLOCKED_SETUP,
                f"image {box.spec.image!r} has no python3, which the egress proxy's forwarder "
                "needs for an allowlist network: add python3 to the image",
            ) from exc
        self.configure_apt(box)
        return proxy_env(port)

    def configure_apt(self, box: Sandbox) -> None:
        """apt through the proxy, where the image has apt (`APT_IN_SANDBOX`): a file put by
        the engine and a folder made by hangar's helper, nothing of the image run."""
        try:
            box.read_file("/etc/apt/apt.conf.d", text=False)
        except SandboxIsADirectory:
            box.write_file("/etc/apt/apt.conf.d/99hangar-sandbox", APT_IN_SANDBOX)
            self.mkdirs(box, "/var/cache/apt/hangar/partial")
        except SandboxError:
            return

    def close_egress(self) -> None:
        """Every open proxy stopped (its attempts are in the evidence already, written as
        they came); a tunnel whose sandbox end broke its framing is recorded too."""
        while self.egress_tunnels:
            tunnel = self.egress_tunnels.pop()
            tunnel.close()
            if tunnel.problem:
                self.write("network/tunnel.json", {"problem": tunnel.problem})
        while self.egress:
            self.egress.pop().stop()
        self.egress_ports.clear()

    def tear_down(self, *, wait: bool) -> None:
        """The proxies and the snapshot too."""
        with suppress(Exception):
            self.close_egress()
        services, self.services = self.services, None
        if services is not None:
            with suppress(Exception):
                save_service_logs(self, services)
            services.stop()
        super().tear_down(wait=wait)
        if services is not None:  # the network once nothing is attached to it
            closing = list(self.closing)
            self.closing.append(self.background(lambda: _after(closing, services.close)))
        snapshot, self.snapshot = self.snapshot, None
        # newest first: a step's snapshot is made from the one before it
        for image in [snapshot, *reversed(self.snapshots)]:
            if image is not None:
                with suppress(Exception):
                    self.backend.remove_image(image)
        self.snapshots.clear()

    # -- the agent ------------------------------------------------------------------------

    def run_agent(self, sandbox: Sandbox, budget: float) -> None:
        """The agent's turns; an agent running as root can end its own sandbox (it may
        signal the keeper): that ends its turn, and the verifier judges what it left."""
        try:
            super().run_agent(sandbox, budget)
        except SandboxUnavailable as exc:
            if self.task.agent_user not in ("root", "0"):
                raise
            self.agent_run = AgentRun(reason=f"the sandbox stopped during the agent's turn: {exc}")
            assert self.trace is not None
            self.trace.close(completed=False, reason=self.agent_run.reason)

    def run_reference(self, sandbox: Sandbox, agent: ReferenceAgent, budget: float) -> AgentRun:
        """The oracle runs the task's solve.sh (copied in now); the nop does nothing."""
        solution = self.task.solution
        if agent.role == "nop" or solution is None:
            return super().run_reference(sandbox, agent, budget)
        self.mkdirs(sandbox, SOLUTION)
        sandbox.copy_in(self.task.local(solution.folder), SOLUTION)
        assert self.trace is not None
        self.trace.event("agent_start", agent=agent.name, command=f"bash {solution.script}")
        res = sandbox.exec(
            ["bash", f"{SOLUTION}/{solution.script}"],
            timeout=budget,
            env={**solution.env, **self.agent_env},
            on_output=self.trace.output,
        )
        self.write("agent/solve.json", _record(res))
        if res.ok:
            return AgentRun(exit_code=0, completed=True)
        how = "timed out" if res.timed_out else f"exited {res.returncode}"
        return AgentRun(exit_code=res.returncode, reason=f"the solution {how}")

    def mkdirs(self, sandbox: Sandbox, *paths: str) -> None:
        """Make folders in the sandbox as root (the agent's user may not own ``/``), by
        hangar's helper."""
        res = sandbox.exec(helper_argv("mkdir", *paths), user="0")
        if not res.ok:
            raise SandboxError(f"cannot make {', '.join(paths)}: {res.stderr.strip()}")

    # -- verification ---------------------------------------------------------------------

    def hand_over(self, sandbox: Sandbox) -> Sandbox:
        """The sandbox the tests run in (`hangar.kinds.execution.images.verifier`), once
        nothing of the agent runs any more and its logs are copied out."""
        sandbox.stop()
        save_agent_logs(self)
        if self.verifier_disk.root.exists():  # a step before this one used it
            shutil.rmtree(self.verifier_logs)
        else:
            state = self.verifier_disk.open(ttl_s=self.budget())
            self.write("verifier/disk.json", state.model_dump())
        self.verifier_logs.mkdir()
        self.verifier_logs.chmod(0o777)  # the verifier's user, whoever it is, writes here
        self.tests = fresh_tests(self)
        self.place = place_of(self)
        return self.place.open(self, sandbox)

    def verifier_spec(
        self, image: str, workspace: bool, more: tuple[Mount, ...] = ()
    ) -> SandboxSpec:
        """A verifier's sandbox of `image`: the tests (read-only), its logs, the workspace
        when `workspace`, and `more` of hangar's (its place's)."""
        verifier = self.task.verifier
        mounts = [
            Mount(source=self.tests, target=TESTS, read_only=True),
            Mount(source=self.verifier_logs, target=f"{LOGS}/verifier"),
            *more,
        ]
        if workspace:
            mounts.insert(0, Mount(source=self.workspace, target=self.workdir))
        return self._spec(
            image=image,
            user=verifier.user,
            mounts=tuple(mounts),
            cpus=verifier.cpus or self.limits.cpus,
            memory=verifier.memory or self.limits.memory,
        )

    def starts_pristine(self) -> bool:
        """Whether a verifier's sandbox of the task's own image starts (then a start that
        failed from what the agent left is the agent's doing)."""
        spec = self.verifier_spec(self.image_ref, workspace=False)
        try:
            with create_sandbox(self.spec.backend, spec, self.spec.backend_config):
                return True
        except SandboxError:
            return False

    def final_diff(self) -> None:
        """``diff.patch``: the workspace against its initial content, taken on the host
        by hangar's own repository (nothing in the workspace is run or obeyed)."""
        try:
            changes = diff_against_tree(
                self.initial,
                self.workspace,
                self.folder / "final-diff",
                self.artifacts / "diff.patch",
            )
            self.write("status-final.json", changes.model_dump())
        except WorkspaceError as exc:
            self.write("status-final.json", {"damage": [f"no diff could be taken: {exc}"]})

    def run_tests(self, box: Sandbox) -> ExecResult:
        """The test script, run as its place runs it (`ImageVerifierPlace.run`)."""
        assert self.place is not None
        verifier = self.task.verifier
        network = self.open_egress(box, "verifier", verifier.network)
        res = self.place.run(self, box, {**self.place.env, **verifier.env, **network})
        self.close_egress()
        self.write("verifier/stdout.txt", res.stdout)
        self.write("verifier/stderr.txt", res.stderr)
        box.stop()  # nothing writes the logs while the host reads them
        res = self.place.judged(self, res)
        self.write("verifier/test.json", _record(res))
        return res

    def judge(self, res: ExecResult) -> None:
        """The reward read on the host (or the test log graded), and the verdict it gives."""
        skipped: list[str] = []
        logs = self.artifacts / "logs" / "verifier"
        copy_untrusted_tree(self.verifier_logs, logs, limit=READ_LIMIT, skipped=skipped)
        if skipped:
            self.write("verifier/skipped.json", skipped)
        self.reward = self.read_reward(logs)
        how = "timed out" if res.timed_out else f"exit {res.returncode}"
        if res.timed_out and self.stalled:
            how += " while still at " + ", ".join(self.stalled[:3])
        if self.reward.value is None and self.interfered:
            self.verdict = Verdict.FAIL
            self.reason = (
                f"no reward: the agent's code changed the verifier's output: "
                f"{'; '.join(self.interfered[:3])} ({verifier_tail(res, how)})"
            )
        elif self.reward.value is None and self.task.verifier.mode == "separate" and res.timed_out:
            # The task's tests ran on the agent's artifacts in a sandbox of their own and
            # ran out of time (the reference solution's do not: `hangar dataset validate`).
            self.verdict = Verdict.FAIL
            self.reason = (
                f"the tests ran out of time on the agent's artifacts ({verifier_tail(res, how)})"
            )
        elif self.reward.value is None and self.task.verifier.mode == "separate":
            # The verifier ran in its own sandbox: its failure is the task's, not the agent's.
            self.verdict = Verdict.VERIFIER_ERROR
            self.reason = f"verifier failure: {self.reward.problem} ({verifier_tail(res, how)})"
        elif self.reward.value is None:
            # The tests ran in the environment the agent left, which the agent can break:
            # a missing reward is counted against it (as the SWE-bench harness does).
            self.verdict = Verdict.FAIL
            self.reason = (
                f"verifier failure in the agent's environment: {self.reward.problem} "
                f"({verifier_tail(res, how)})"
            )
            if self.takeover:
                self.reason += f"; {USED} {_shown(self.takeover)}"
        elif self.reward.value >= self.task.threshold:
            self.verdict, self.reason = Verdict.PASS, self.reward_words()
            self.not_earned(res, logs)
        else:
            self.verdict = Verdict.FAIL
            self.reason = self.reward_words()
        if not self.agent_run.completed and self.verdict is Verdict.FAIL:
            self.reason += f"; {self.agent_run.reason}"
        self.verdict, self.reason = unless_provider_failed(
            self.verdict, self.reason, self.agent_run.provider_error
        )

    def not_earned(self, res: ExecResult, logs: Path) -> None:
        """A pass is not counted when the judge's machinery used what the agent changed
        (`hangar.kinds.execution.images.takeover`), or when a reward of 1 stands beside a test log
        that reports failures."""
        if self.takeover:
            self.verdict = Verdict.FAIL
            self.reason = f"not counted ({self.reason}): {USED} {_shown(self.takeover)}"
            return
        assert self.reward is not None and self.reward.value is not None
        if self.task.grading is None and self.reward.value >= 1:
            failures = reported_failures(log_texts(logs, res.stdout, res.stderr))
            if failures:
                self.verdict = Verdict.FAIL
                self.reason = f"not counted ({self.reason}): the test log reports {failures}"

    def read_reward(self, logs: Path) -> Reward:
        """The reward file the script wrote, or its test log graded (SWE-bench)."""
        grading = self.task.grading
        if grading is None:
            reward = read_reward(logs)
        else:
            graded = grade(grading, logs / grading.log)
            reward, self.checks, self.graded_report = graded.reward, graded.checks, graded.report
            self.write("verifier/swebench-report.json", graded.report)
        scores = [s.model_dump() for s in reward.scores]
        self.write("verifier/reward.json", reward._asdict() | {"scores": scores})
        return reward

    def reward_words(self) -> str:
        """The reward in words: resolved or not (the failing tests named), or its value."""
        assert self.reward is not None and self.reward.value is not None
        if self.task.grading is not None:
            if all(c.status == "pass" for c in self.checks):
                return "resolved"
            return "not resolved: " + failing_words(self.checks, self.graded_report)
        if self.reward.value >= self.task.threshold:
            return f"reward {self.reward.value:g}"
        return f"reward {self.reward.value:g} is below the threshold {self.task.threshold:g}"

    def judged(self) -> TrialOutcome:
        """The graded checks, and the reward's scores beside ``pass``."""
        scores: tuple[Score, ...] = ()
        if self.verdict in COUNTED_VERDICTS:
            scores = (Score(metric="pass", value=float(self.verdict is Verdict.PASS)),)
            scores += self.reward.scores if self.reward is not None else ()
        return TrialOutcome(checks=tuple(self.checks), scores=scores)


#: How a pass the judge's machinery did not earn is told.
USED = "the judge's machinery used what the agent changed:"


def _shown(takeover: list[str]) -> str:
    more = f" and {len(takeover) - 5} more" if len(takeover) > 5 else ""
    return "; ".join(takeover[:5]) + more


def verifier_tail(res: ExecResult, how: str) -> str:
    """The script's end state and the last line it printed."""
    last = (res.stderr.strip() or res.stdout.strip()).splitlines()[-1:] or [""]
    return f"test script {how}: {last[0][:200]}".rstrip(": ")


def _task_server(server: TaskMcpServer) -> Installed:
    """A task's MCP server as agents are told of servers."""
    argv = [server.command, *server.args] if server.command else []
    return Installed(name=server.name, argv=argv, transport=server.transport, url=server.url)


def _after(futures: list[Future[Any]], then: Callable[[], None]) -> None:
    for future in futures:
        with suppress(Exception):
            future.result()
    then()


def _record(res: ExecResult) -> dict[str, Any]:
    return res.model_dump(exclude={"stdout", "stderr"})


def _task_of(spec: TrialSpec) -> ImageTask:
    if not isinstance(spec.task, ImageTask):
        raise TypeError(f"an image task trial needs an image task, got a {spec.task.kind} task")
    return spec.task
