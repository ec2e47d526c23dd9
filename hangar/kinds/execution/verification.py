"""Where and how an execution trial is verified, once its agent is done.

Two *places* verification can run in, one interface (`VerificationPlace`):

- `SameSandbox` (docker, one sandbox per trial): the agent's sandbox, whose root file
  system is read-only and whose HOME, /tmp and /var/tmp are scratch folders on the host:
  after the agent every process of its user is dead, the scratch folders are emptied
  (HOME refilled from the image), and the hidden files and commands run in what is left.
- `FreshSandbox` (a backend whose mounts are copies, such as Kubernetes, or a scenario
  with ``writable_root``): a new sandbox on the same workspace replaces the agent's.

Either way nothing the agent left outside the workspace reaches verification, and in the
workspace the test harness is put back as it was before the agent
(`hangar.verifiers.guard`) before the hidden files are placed. Then the pinned host
verifier judges (`host_verify`) and its output is admitted (`judge`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from concurrent.futures import Future
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, NamedTuple

from hangar.results import Verdict
from hangar.sandbox import Sandbox
from hangar.sandbox.archive import copy_untrusted_tree
from hangar.sandbox.workspace import hand_over, remove_escaping_links
from hangar.trace import find_canaries
from hangar.verifiers import junit
from hangar.verifiers.admission import Judgement, judge
from hangar.verifiers.commands import (
    VERIFIER_OUT,
    collect_verifier_out,
    run_verifier_commands,
    stage_placements,
)
from hangar.verifiers.harness import Placement
from hangar.verifiers.protocol import CommandRecord, VerificationRequest, run_host_script
from hangar.verifiers.spec import PinnedFile

if TYPE_CHECKING:
    from hangar.kinds.execution.trial import ExecutionTrial

#: Where the harness and the hidden verifier files wait in the sandbox's /tmp for the first
#: verifier command.
HIDDEN_STAGING = ".hangar-hidden"


class VerificationPlace(ABC):
    """Where an execution trial's verification runs (see the module docstring)."""

    def __init__(self, trial: ExecutionTrial) -> None:
        self.trial = trial

    def early(self) -> None:  # noqa: B027 - most places have nothing to start early
        """Called once the agent's sandbox is up: start what can start in advance."""

    @abstractmethod
    def take_over(self, agent_box: Sandbox) -> Sandbox:
        """The sandbox verification runs in, once the agent's processes are dead."""

    @abstractmethod
    def stage(self, box: Sandbox, placements: list[Placement]) -> str:
        """Stage the `placements` (the harness put back, the hidden verifier files); the
        shell that places them (see `stage_placements`), run by the first verifier
        command's exec."""

    @abstractmethod
    def finish(self, box: Sandbox) -> None:
        """Let go of `box` and bring the verifier commands' output folder home."""

    #: Whether `run_verifier_commands` copies the output folder out of the sandbox.
    collect_through_sandbox: bool = True

    def verify(self, box: Sandbox) -> list[CommandRecord]:
        """The harness put back and the hidden files placed, then the original verifier
        commands, then the sandbox let go and the harness checked again; symlinks leaving
        the workspace are removed before the host reads it."""
        trial = self.trial
        with trial.phase("harness"):
            undo = trial.guard.before_commands()
        with trial.phase("verifier_files"):
            before = self.stage(box, undo + trial.hidden_files())
            trial.write(
                "verifier/hidden-files.json", [h.target for h in trial.scenario.verifier.files]
            )
        with trial.phase("verifier_commands"):
            commands = run_verifier_commands(
                box,
                trial.scenario.verifier,
                trial.artifacts,
                collect=self.collect_through_sandbox,
                before=before,
            )
        with trial.phase("verifier_teardown"):
            self.finish(box)
            trial.guard.after_commands()
            trial.write("workspace-links-removed.json", remove_escaping_links(trial.workspace))
        return commands


class SameSandbox(VerificationPlace):
    """The agent's own sandbox, its scratch folders wiped (docker)."""

    collect_through_sandbox = False

    def take_over(self, agent_box: Sandbox) -> Sandbox:
        """The same sandbox, with HOME, /tmp and /var/tmp as a new sandbox has them."""
        with self.trial.phase("scratch_reset"):
            self.trial.reset_scratch()
        return agent_box

    def stage(self, box: Sandbox, placements: list[Placement]) -> str:
        """Into the emptied scratch /tmp, which the sandbox sees."""
        trial = self.trial
        staging = trial.scratch / "tmp" / HIDDEN_STAGING
        inside = box.command_path(f"/tmp/{HIDDEN_STAGING}")
        before = stage_placements(placements, staging, inside)
        if before and trial.backend.isolated:
            from hangar.kinds.execution.trial import SANDBOX_UID

            hand_over(staging, SANDBOX_UID)
        return before

    def finish(self, box: Sandbox) -> None:
        """The last command ended every process of the user in an isolated sandbox, so
        nothing writes the workspace or the scratch while the host reads them; the output
        folder is copied from the scratch /tmp as untrusted files."""
        trial = self.trial
        trial.release(box, stop=not (box.isolated and trial.backend.live_mounts))
        if trial.scenario.verifier.commands:
            out = trial.scratch / "tmp" / PurePosixPath(VERIFIER_OUT).relative_to("/tmp")
            collect_verifier_out(
                lambda target: copy_untrusted_tree(out, target, limit=box.spec.read_limit),
                trial.artifacts,
            )


class FreshSandbox(VerificationPlace):
    """A new sandbox on the same workspace (Kubernetes, or ``writable_root``)."""

    def __init__(self, trial: ExecutionTrial) -> None:
        super().__init__(trial)
        self.starting: Future[Sandbox] | None = None

    def early(self) -> None:
        """With live mounts it starts while the agent works (it runs nothing until the
        agent's sandbox is gone); a backend that copies mounts must wait for the agent's
        workspace to be copied back first."""
        if self.trial.backend.live_mounts:
            self.starting = self.trial.background(self.trial.start_sandbox)

    def take_over(self, agent_box: Sandbox) -> Sandbox:
        """Kill the agent's sandbox (removed in the background), then the fresh one."""
        with self.trial.phase("agent_teardown"):
            self.trial.release(agent_box, stop=True)
        with self.trial.phase("verifier_sandbox_up"):
            return self.starting.result() if self.starting else self.trial.start_sandbox()

    def stage(self, box: Sandbox, placements: list[Placement]) -> str:
        """On the host, then copied in with one archive."""
        trial = self.trial
        staging, inside = trial.folder / "hidden", f"/tmp/{HIDDEN_STAGING}"
        before = stage_placements(placements, staging, box.command_path(inside))
        if before:
            box.copy_in(staging, inside)
        return before

    def finish(self, box: Sandbox) -> None:
        """Stopped (a copied workspace comes back then), removed in the background."""
        trial = self.trial
        trial.release(box, stop=not (box.isolated and trial.backend.live_mounts))


def place_for(trial: ExecutionTrial) -> VerificationPlace:
    """Where `trial` is verified (see the module docstring)."""
    return SameSandbox(trial) if trial.one_sandbox else FreshSandbox(trial)


class HostVerification(NamedTuple):
    """What the host verifier printed, what went wrong running it, and what a builtin
    verifier adds to the reason of a fail."""

    raw: str
    error: str | None = None
    notes: tuple[str, ...] = ()


def host_verify(trial: ExecutionTrial, commands: list[CommandRecord]) -> HostVerification:
    """Run the host verifier (see `HostVerification`)."""
    assert trial.trace is not None and trial.trace.sha256 is not None
    scenario = trial.scenario
    request = VerificationRequest(
        case=scenario.id,
        fixture=str(trial.loaded.path),
        workspace=str(trial.workspace),
        artifacts=str(trial.artifacts),
        trace_sha256=trial.trace.sha256,
        completed=trial.agent_run.completed,
        checklist=list(scenario.verifier.checklist),
        commands=commands,
        hidden_tests=junit.hidden_test_ids(trial.hidden_files()),
        harness=trial.guard.changes,
        tampering=trial.guard.tampering,
    )
    request_path = trial.write("verifier/request.json", request.to_json())
    host = scenario.verifier.host
    if not isinstance(host, PinnedFile):
        judged = junit.verify_with_notes(request, host)
        raw = judged.verification.to_json()
        trial.write("verifier/verification.json", raw)
        return HostVerification(raw, notes=tuple(judged.notes))
    run = run_host_script(
        trial.loaded.local(host.file),
        request_path,
        timeout=scenario.verifier.host_timeout_s,
        cwd=trial.loaded.folder,
    )
    trial.write("verifier/verification.json", run.stdout)
    trial.write("verifier/host-stderr.txt", run.stderr)
    if run.timed_out:
        limit = scenario.verifier.host_timeout_s
        return HostVerification(run.stdout, f"host verifier hung: killed at its {limit:g} s limit")
    if run.exit_code != 0:
        last = (run.stderr.strip().splitlines() or [""])[-1]
        crashed = f"host verifier crashed (exit {run.exit_code}): {last}".rstrip(": ")
        return HostVerification(run.stdout, crashed)
    return HostVerification(run.stdout)


def judgement(
    trial: ExecutionTrial,
    verified: HostVerification,
    commands: list[CommandRecord],
    *,
    disk_full: bool,
) -> Judgement:
    """Admit the verification (`hangar.verifiers.admission`), the harness's findings with
    it; a full disk and a provider's failure are named; the latter makes a fail an
    infra_error (it was not the agent's)."""
    assert trial.trace is not None and trial.trace.sha256 is not None
    scenario = trial.scenario
    judged = judge(
        verified.raw,
        verifier_error=verified.error,
        case=scenario.id,
        trace_sha256=trial.trace.sha256,
        completed=trial.agent_run.completed,
        incomplete_reason=trial.agent_run.reason,
        checklist=scenario.verifier.checklist,
        artifacts=trial.artifacts,
        commands=commands,
        canaries_found=find_canaries(trial.trace.path, scenario.canaries),
        harness=trial.guard.findings(),
    )
    if verified.notes and judged.verdict is Verdict.FAIL:
        judged.reason += "; " + "; ".join(verified.notes)
    if disk_full and judged.verdict is Verdict.FAIL:
        limit = trial.disk.state.limit / 1024**2
        judged.reason += f"; the agent filled its disk (limit {limit:g} MiB)"
    error = trial.agent_run.provider_error
    if error is not None and judged.verdict is Verdict.FAIL:
        # The provider failed the agent, not the other way round: never a counted fail
        # (a pass stays a pass). The sweep retries it, or stops the model when its key
        # is refused.
        judged = judged.model_copy(
            update={
                "verdict": Verdict.INFRA_ERROR,
                "reason": f"provider failure: {error.message} (the trial would otherwise "
                f"be a fail: {judged.reason})",
            }
        )
    return judged
