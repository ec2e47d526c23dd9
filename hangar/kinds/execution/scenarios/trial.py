"""The execution kind of trial: a pinned repository, a sandbox, an agent, the verifiers.

`ExecutionTrial.run` reads as its phases: admission, the trial's disk, the model
relay, set-up (workspace, prepare, sandbox, plugins), the agent, the final status, the
hand-over to verification (`hangar.kinds.execution.scenarios.verification`: the
agent's own sandbox wiped, or a fresh one), the diff against the pinned commit, the
verifier commands, the host verifier and the judgement. Nothing the agent leaves outside
the workspace reaches verification. docs/architecture.md walks through it.
"""

from __future__ import annotations

import os
import shutil
import time
from concurrent.futures import Future
from contextlib import suppress
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from hangar.agents.command import CONTEXT_FILE
from hangar.errors import ImageNotFound, WorkspaceError
from hangar.files import tree_digest
from hangar.kinds.execution.scenarios.fixture_checks import fixture_problems
from hangar.kinds.execution.scenarios.judging import host_verify, judgement
from hangar.kinds.execution.scenarios.scenario import LoadedScenario
from hangar.kinds.execution.scenarios.verification import VerificationPlace, place_for
from hangar.results import COUNTED_VERDICTS, Score, TrialOutcome, Verdict
from hangar.sandbox import (
    Mount,
    Sandbox,
    SandboxSpec,
)
from hangar.sandbox.archive import extract_untrusted
from hangar.sandbox.base import SANDBOX_UID
from hangar.sandbox.ending import HeldExec
from hangar.sandbox.workspace import (
    MirrorCache,
    diff_against_pin,
    git_damage,
    hand_over,
    make_workspace,
    workspace_state,
)
from hangar.sessions import write_trial_session
from hangar.trials.boundary import Outcome
from hangar.trials.sandboxed import SandboxedTrial
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


class ExecutionTrial(SandboxedTrial):
    """One execution trial's state; `run` walks its phases."""

    def __init__(self, spec: TrialSpec) -> None:
        loaded = _scenario_of(spec)
        scenario = loaded.scenario
        super().__init__(spec, scenario.limits, scenario.image, scenario.context)
        self.loaded, self.scenario = loaded, scenario
        self.mirrors = MirrorCache(self.cache / "mirrors")
        self.home_seed: Any = None
        self.judgement: Judgement | None = None
        self.guard = self.harness_guard()
        #: The final status's exec, held for the first verifier command.
        self.held: HeldExec | None = None
        #: Where verification runs (`set_up` chooses it).
        self.place: VerificationPlace
        #: Whether the agent filled its disk (`after_agent`).
        self.disk_full = False

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
            session=write_trial_session(self.artifacts).name,
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

    def verify(self, sandbox: Sandbox) -> None:
        """Final status, hand-over, the diff, the verifier commands, the host verifier,
        the judgement (see the module docstring)."""
        place = self.place
        with self.phase("final_status"):
            # Kills every agent process, before and after; its exec may wait for the host's
            # work and then run the first verifier command (`place.holds`).
            agent_view, self.held = final_state(sandbox, hold=place.holds)
        box = place.take_over(sandbox)
        with self.phase("final_diff"):  # on the host, from the (copied back) workspace
            self.final_diff(agent_view)
        commands = place.verify(box)
        with self.phase("host_verifier"):
            request = self.verification_request(commands)
            verified = host_verify(request, self.loaded, self.write)
        with self.phase("judgement"):
            assert self.trace is not None and self.trace.path is not None  # on disk
            self.judgement = judgement(
                request,
                verified,
                loaded=self.loaded,
                run=self.agent_run,
                trace=self.trace.path,
                harness=self.guard.findings(),
                disk_limit=self.disk.state.limit if self.disk_full else None,
            )
            self.verdict, self.reason = self.judgement.verdict, self.judgement.reason

    def after_agent(self, sandbox: Sandbox) -> None:
        """Whether the agent filled its disk, read as its turns end."""
        self.disk_full = self.disk.full()

    def record(self) -> None:
        """The scenario and the trial as they ran, first of all the evidence."""
        self.write(
            "scenario.json",
            {
                "id": self.scenario.id,
                "digest": self.loaded.digest,
                "path": str(self.loaded.path),
                "origin": self.loaded.repository_name(),
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

    def set_up(self) -> Sandbox:
        """Workspace, prepare, initial status, sandbox, plugins: the agent's sandbox."""
        self.place = place = place_for(self)
        starting = None
        if self.backend.live_mounts:
            # The sandbox starts while the workspace is made: its mounts are live, so it
            # sees what lands in the (empty) folders later. It runs nothing until then.
            self.workspace.mkdir(parents=True, exist_ok=True)  # a warm sandbox's is there
            for name in SCRATCH if self.one_sandbox else ():
                (self.scratch / name).mkdir(parents=True, exist_ok=True)
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
        return sandbox

    def before_agent(self, sandbox: Sandbox) -> None:
        """The workspace as the agent gets it (plugins and MCP servers in): its status
        and, where the sandbox's mounts are live, its test harness."""
        if self.spec.plugins:  # plugins may have landed in the workspace
            with self.phase("initial_status"):
                self.write("status-initial.json", git_state(sandbox))
        if self.backend.live_mounts:
            with self.phase("harness_baseline"):
                self.guard.record()

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

    def final_diff(self, agent_view: dict[str, Any]) -> None:
        """``diff.patch`` and ``status-final.json``: the diff against the pinned commit, taken
        on the host whatever the agent did to its repository (what it did is recorded in
        ``damage``); a diff that cannot be taken is the agent's outcome, never the farm's."""
        url, revision = self.loaded.repository_url(), self.scenario.revision
        if not self.mirrors.has_revision(url, revision):  # the node's cache, not the agent
            name = self.loaded.repository_name()
            raise Outcome(Verdict.INFRA_ERROR, f"the mirror of {name} lost {revision}")
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

    # -- sandboxes ------------------------------------------------------------------------

    @property
    def context_written(self) -> bool:  # type: ignore[override]
        """A one-sandbox trial writes the task into the scratch HOME itself."""
        return self.one_sandbox

    def disk_moved(self) -> None:
        self.guard = self.harness_guard()

    def takes_warm(self) -> bool:
        """A git scenario's one sandbox (`one_sandbox`), its folders live."""
        return self.one_sandbox and self.backend.live_mounts

    @property
    def one_sandbox(self) -> bool:
        """Whether one sandbox serves agent and verification (its scratch can be wiped)."""
        return self.backend.scratch_mounts and not self.scenario.writable_root

    def sandbox_spec(self) -> SandboxSpec:
        """The spec of every sandbox of this trial."""
        limits = self.scenario.limits
        verifier = self.scenario.verifier
        budget = limits.time_s + verifier.timeout_s * max(1, len(verifier.commands))
        mounts = [Mount(source=self.workspace, target=WORKDIR), *self.agent_mounts()]
        if self.one_sandbox:
            mounts += [Mount(source=self.scratch / n, target=t) for n, t in SCRATCH.items()]
        return self.sandbox_of(
            self.scenario.image,
            tuple(mounts),
            ttl_s=budget + verifier.host_timeout_s + 900,
            workdir=WORKDIR,
            home=HOME,
            read_only_root=self.one_sandbox,
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

    # -- the boundary's hooks -------------------------------------------------------------

    def tear_down(self, *, wait: bool) -> None:
        """Every sandbox, the disk and the harness guard's kept files let go."""
        if self.held is not None:  # a trial that ended between the final status and
            with suppress(Exception):  # its verifier commands
                self.held.release()
        super().tear_down(wait=wait)
        self.guard.close()

    def judged(self) -> TrialOutcome:
        """The verification's findings and the ``pass`` score."""
        judged = self.judgement
        return TrialOutcome(
            checks=tuple(judged.checks) if judged else (),
            route=judged.route if judged else None,
            scope=judged.scope if judged else None,
            scores=_pass_score(self.verdict),
        )


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
