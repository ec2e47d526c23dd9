"""Where an image task's tests run once its agent is done: three places, one interface.

Every place starts a new sandbox for the tests (never the agent's own, in which the agent
may have left a process, a replaced keeper or a planted file): the agent's sandbox is
stopped first, so nothing of it runs on, and its ``/logs`` are copied out on the host
(what cannot be copied safely, such as a link out of the folder, is left out and listed,
never failing the trial). The verifier's sandbox has

- ``/tests``: a fresh read-only copy of exactly the task's tests (nothing the agent put
  at ``/tests`` is seen, and the tests cannot be rewritten while they run);
- ``/logs/verifier``: a folder of hangar's on a small disk of its own, outside the agent's
  disk (a reward the agent wrote never counts, and an agent that filled its disk cannot
  keep the verifier from writing its reward);
- hangar's helper for everything hangar runs in it (`hangar.sandbox.helper`).

The places:

- `Shared` (Harbor's ``shared``, the default): the verifier judges the system the agent
  left (installed packages and changed configuration are the task), in a new container
  made from a snapshot of the agent's (``docker commit``), with the workspace. The
  agent's changes (``docker diff``) are in the evidence; what of them the verifier would
  execute is named (`hangar.kinds.execution.takeover`), and a pass beside it is not
  counted; bytecode caches and pytest configuration the agent put above ``/tests`` are
  removed before the tests. Python runs without the current folder on its path and
  without a user site (`PYTHON_ENV`).
- `Separate` (Harbor's ``separate``): a fresh sandbox of the verifier's image (the task's
  by default) with only the declared artifacts copied over.
- `RepositoryOnly` (SWE-bench instances): a fresh sandbox of the task's image with the
  workspace: only the repository the agent changed crosses, as SWE-bench's harness
  applies only the patch.

A verifier sandbox that does not start in what the agent left (a file where ``/tests``
goes, say) while it starts in a pristine sandbox of the task's image is the agent's
``fail``; ``infra_error`` stays for what fails in a pristine one too.
"""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, ClassVar

from hangar.errors import ImageNotFound, SandboxError
from hangar.kinds.execution.takeover import neutralised, takeover
from hangar.results import Verdict
from hangar.sandbox import Sandbox, create_sandbox
from hangar.sandbox.archive import copy_untrusted_tree
from hangar.sandbox.base import Change
from hangar.sandbox.helper import helper_argv
from hangar.trials.boundary import Outcome

if TYPE_CHECKING:
    from hangar.kinds.execution.image_trial import ImageTaskTrial

#: Where the task's tests and the logs are in a sandbox.
TESTS, LOGS = "/tests", "/logs"
#: Python in the verifier: the image's site, but not the current folder first on the
#: path (a ``pytest`` package in the workspace is not the runner) nor a user site.
PYTHON_ENV = {"PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1"}
#: The agent's changes kept in the evidence (the analysis reads all of them).
CHANGES_KEPT = 20_000
#: Paths removed in one exec of the helper.
_BATCH = 500


class VerifierPlace(ABC):
    """Where the tests of an image task run (see the module docstring)."""

    #: Whether the verifier sees the agent's workspace.
    workspace = True
    #: Environment of the test script (before the task's own).
    env: ClassVar[dict[str, str]] = PYTHON_ENV

    @abstractmethod
    def open(self, trial: ImageTaskTrial, agent: Sandbox) -> Sandbox:
        """The verifier's sandbox, started, once the agent's `agent` is stopped."""

    def start(self, trial: ImageTaskTrial, image: str) -> Sandbox:
        """A verifier sandbox of `image`: its tests, its logs, the workspace if any. A
        start that fails where one of the task's own image succeeds is the agent's."""
        box = create_sandbox(trial.spec.backend, trial.verifier_spec(image, self.workspace))
        trial.sandboxes.append(box)
        try:
            box.start()
        except ImageNotFound as exc:
            raise Outcome(Verdict.BLOCKED_SETUP, f"verifier image: {exc}") from exc
        except SandboxError as exc:
            if image != trial.image_ref and trial.starts_pristine():
                raise Outcome(
                    Verdict.FAIL,
                    "the verifier cannot start in the environment the agent left "
                    f"({str(exc)[:300]}), while it starts in a new sandbox of the task's "
                    "image: the agent broke it",
                ) from exc
            raise
        return box


class Shared(VerifierPlace):
    """A snapshot of the agent's sandbox, its changes read (see the module docstring)."""

    def open(self, trial: ImageTaskTrial, agent: Sandbox) -> Sandbox:
        changes = agent.changes()
        trial.write(
            "agent/changes.json",
            {"count": len(changes), "changes": [[c.kind, c.path] for c in changes[:CHANGES_KEPT]]},
        )
        trial.snapshot = agent.snapshot()
        trial.release(agent, stop=False)
        box = self.start(trial, trial.snapshot)
        removed = neutralised(changes)
        for i in range(0, len(removed), _BATCH):
            res = box.exec(helper_argv("remove", *removed[i : i + _BATCH]), user="0")
            if not res.ok:
                raise SandboxError(f"cannot clear what the agent left: {res.stderr.strip()}")
        trial.takeover = self.findings(trial, box, changes)
        trial.write("verifier/takeover.json", {"removed": removed, "findings": trial.takeover})
        return box

    @staticmethod
    def findings(trial: ImageTaskTrial, box: Sandbox, changes: list[Change]) -> list[str]:
        """What of `changes` the verifier would execute (read in the verifier's sandbox,
        by hangar's helper)."""

        def read(path: str) -> str | None:
            res = box.exec(helper_argv("cat", path), user="0")
            return res.stdout if res.ok and not res.stdout_truncated else None

        script = trial.task.local(trial.task.verifier.tests) / trial.task.verifier.script
        text = script.read_text(encoding="utf-8", errors="replace")
        return takeover(changes, text, read, trial.task.agent_may_change)


class Separate(VerifierPlace):
    """The verifier's own image with the declared artifacts (see the module docstring)."""

    workspace = False

    def open(self, trial: ImageTaskTrial, agent: Sandbox) -> Sandbox:
        handoff = trial.folder / "handoff"
        mounted = {trial.workdir: trial.workspace, LOGS: trial.logs}
        for i, artifact in enumerate(trial.task.verifier.artifacts):
            _copy_artifact(agent, artifact.source, handoff / str(i), mounted, trial.read_limit)
        trial.release(agent, stop=False)
        image = trial.image_ref
        if trial.task.verifier.image is not None:
            image = trial.build(trial.task.verifier.image, "verifier-image")
        trial.write("verifier/image.json", {"reference": image})
        box = self.start(trial, image)
        for i, artifact in enumerate(trial.task.verifier.artifacts):
            _place_artifact(box, handoff / str(i), artifact.target, trial)
        return box


class RepositoryOnly(VerifierPlace):
    """The task's image and the workspace, nothing else (see the module docstring)."""

    env: ClassVar[dict[str, str]] = {}

    def open(self, trial: ImageTaskTrial, agent: Sandbox) -> Sandbox:
        trial.release(agent, stop=False)
        return self.start(trial, trial.image_ref)


def place_of(trial: ImageTaskTrial) -> VerifierPlace:
    """The place of the trial's task (see the module docstring)."""
    if trial.task.verifier.mode == "separate":
        return Separate()
    if trial.task.grading is not None:
        return RepositoryOnly()
    return Shared()


def save_agent_logs(trial: ImageTaskTrial) -> None:
    """The agent's ``/logs`` folders copied into the evidence; what cannot be copied
    safely is left out and listed (``logs/skipped.json``), never failing the trial."""
    skipped: list[str] = []
    for name in ("agent", "artifacts"):
        source = trial.logs / name
        if not source.exists() and not source.is_symlink():
            continue
        try:
            copy_untrusted_tree(
                source, trial.artifacts / "logs" / name, limit=trial.read_limit, skipped=skipped
            )
        except SandboxError as exc:
            skipped.append(f"{name}: {exc}")
    if skipped:
        trial.write("logs/skipped.json", skipped)


def fresh_tests(trial: ImageTaskTrial) -> Path:
    """A new copy of exactly the task's tests, for the verifier's read-only ``/tests`` (a
    step's over the task's own, its shared helpers)."""
    target = trial.folder / "tests"
    shutil.rmtree(target, ignore_errors=True)
    folders = [trial.task.verifier.tests]
    if trial.whole.steps:
        shared = trial.whole.steps[trial.step_index].shared_tests
        folders[:0] = [shared] if shared is not None else []
    for folder in folders:
        shutil.copytree(trial.task.local(folder), target, symlinks=True, dirs_exist_ok=True)
    return target


def _copy_artifact(
    sandbox: Sandbox, source: str, target: Path, mounted: dict[str, Path], limit: int
) -> None:
    """One artifact out of the stopped agent's sandbox (a folder, or a file; missing is
    skipped): under a mount, from its host folder (a stopped container's file system has
    no mounts), else from the container's own."""
    for where, host in mounted.items():
        inside = PurePosixPath(source)
        if inside == PurePosixPath(where) or PurePosixPath(where) in inside.parents:
            path = host.joinpath(*inside.relative_to(where).parts)
            if path.is_dir() and not path.is_symlink():
                copy_untrusted_tree(path, target / "dir", limit=limit, skipped=[])
            elif path.is_file() and not path.is_symlink():
                target.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target / "file")
            return
    try:
        sandbox.copy_out(source, target / "dir")
    except SandboxError:
        try:
            data = sandbox.read_file(source, text=False)
        except SandboxError:
            return
        target.mkdir(parents=True, exist_ok=True)
        (target / "file").write_bytes(data)


def _place_artifact(box: Sandbox, handoff: Path, target: str, trial: ImageTaskTrial) -> None:
    """One artifact into the verifier's sandbox, where the task says."""
    if (handoff / "dir").is_dir():
        trial.mkdirs(box, target)
        box.copy_in(handoff / "dir", target)
    elif (handoff / "file").is_file():
        trial.mkdirs(box, str(Path(target).parent))
        box.write_file(target, (handoff / "file").read_bytes())
