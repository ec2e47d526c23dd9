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
verifier judges and its output is admitted (`hangar.kinds.execution.scenarios.judging`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager
from pathlib import Path, PurePosixPath
from typing import Protocol, TypeVar

from hangar.kinds.execution.scenarios.scenario import LoadedScenario, Scenario
from hangar.sandbox import Sandbox
from hangar.sandbox.archive import copy_untrusted_tree
from hangar.sandbox.base import SANDBOX_UID
from hangar.sandbox.ending import HeldExec
from hangar.sandbox.workspace import hand_over, remove_escaping_links
from hangar.verifiers.commands import (
    VERIFIER_OUT,
    collect_verifier_out,
    run_verifier_commands,
    stage_placements,
)
from hangar.verifiers.guard import HarnessGuard
from hangar.verifiers.harness import Placement
from hangar.verifiers.protocol import CommandRecord


class Trial(Protocol):
    """What a verification place uses of its execution trial."""

    loaded: LoadedScenario
    scenario: Scenario
    workspace: Path
    scratch: Path
    folder: Path
    artifacts: Path
    guard: HarnessGuard
    held: HeldExec | None

    @property
    def backend(self) -> type[Sandbox]:
        """The sandbox backend's class."""

    @property
    def one_sandbox(self) -> bool:
        """Whether one sandbox serves agent and verification."""

    def phase(self, name: str) -> AbstractContextManager[None]:
        """Time a phase."""

    def write(self, rel: str, data: object) -> Path:
        """Write an evidence file."""

    def release(self, sandbox: Sandbox, *, stop: bool) -> None:
        """Let go of a sandbox."""

    def start_sandbox(self) -> Sandbox:
        """A new sandbox of the trial."""

    def background(self, work: Callable[[], T]) -> Future[T]:
        """Run `work` on the trial's thread pool."""

    def reset_scratch(self) -> None:
        """Make the scratch folders as a new sandbox has them."""

    def hidden_files(self) -> list[Placement]:
        """The hidden verifier files."""


T = TypeVar("T")

#: Where the harness and the hidden verifier files wait in the sandbox's /tmp for the first
#: verifier command.
HIDDEN_STAGING = ".hangar-hidden"


class VerificationPlace(ABC):
    """Where an execution trial's verification runs (see the module docstring)."""

    def __init__(self, trial: Trial) -> None:
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
    #: Whether the final status's exec is held for the first verifier command (the
    #: verification runs in the agent's sandbox: `hangar.sandbox.ending`).
    holds: bool = False

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
                held=trial.held,
            )
            trial.held = None
        with trial.phase("verifier_teardown"):
            self.finish(box)
            trial.guard.after_commands()
            trial.write("workspace-links-removed.json", remove_escaping_links(trial.workspace))
        return commands


class SameSandbox(VerificationPlace):
    """The agent's own sandbox, its scratch folders wiped (docker)."""

    collect_through_sandbox = False
    holds = True

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

    def __init__(self, trial: Trial) -> None:
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


def place_for(trial: Trial) -> VerificationPlace:
    """Where `trial` is verified (see the module docstring)."""
    return SameSandbox(trial) if trial.one_sandbox else FreshSandbox(trial)
