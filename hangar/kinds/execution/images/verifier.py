"""Where an image task's tests run once its agent is done: three places, one interface
(`ImageVerifierPlace`; a git scenario's verification has places of its own, which answer
other questions: `hangar.kinds.execution.scenarios.verification`).

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
  agent's changes (its container's, read from its layer by `Sandbox.changes`, and the
  workspace's by each file's state) are in the evidence; the test script runs under
  hangar's observer (`hangar.sandbox.observe`, `Observed`),
  started with the image's own shell, and what its processes did with those changes is
  judged (`hangar.kinds.execution.images.takeover`): a pass beside the judge's machinery using
  any of them is not counted, the agent's code is refused the verifier's network, and
  nothing the agent made can stall the tests. Bytecode caches the agent wrote are
  removed first. Python runs without the current folder on its path and without a user
  site (`PYTHON_ENV`), with hangar's start-up mark first on ``PYTHONPATH``.
- `Separate` (Harbor's ``separate``): a fresh sandbox of the verifier's image (the task's
  by default) with only the declared artifacts copied over, the test script observed as
  in `Shared` with what the artifacts brought as the agent's changes.
- `RepositoryOnly` (SWE-bench instances): a fresh sandbox of the task's image with the
  workspace: only the repository the agent changed crosses, as SWE-bench's harness
  applies only the patch.

A verifier sandbox that does not start in what the agent left (a file where ``/tests``
goes, say) while it starts in a pristine sandbox of the task's image is the agent's
``fail``; ``infra_error`` stays for what fails in a pristine one too.
"""

from __future__ import annotations

import os
import shutil
import stat
from abc import ABC, abstractmethod
from pathlib import Path, PurePosixPath
from typing import ClassVar

from hangar.errors import ImageNotFound, SandboxError, TooManyChanges
from hangar.kinds.execution.images.takeover import RUNNER_MARK, AgentChanges, judge, neutralised
from hangar.kinds.execution.images.trial_view import ImageTrialView
from hangar.results import Verdict
from hangar.sandbox import Mount, Sandbox, create_sandbox
from hangar.sandbox.archive import copy_untrusted_tree
from hangar.sandbox.base import Change, ExecResult
from hangar.sandbox.helper import helper_argv
from hangar.sandbox.observe import (
    COMPLETE,
    NO_PROGRAM,
    RECORD_LIMIT,
    RECORD_MOUNT,
    STARTUP,
    STARTUP_MOUNT,
    Record,
    RecordError,
    Settings,
    canonical,
    observe_argv,
    read_record,
)
from hangar.sandbox.workspace import WORKSPACE_FILES, tree_state
from hangar.trials.boundary import Outcome

#: Where the task's tests and the logs are in a sandbox.
TESTS, LOGS = "/tests", "/logs"
#: Python in the verifier: the image's site, but not the current folder first on the
#: path (a ``pytest`` package in the workspace is not the runner) nor a user site.
PYTHON_ENV = {"PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1"}
#: The agent's changes kept in the evidence (the analysis reads all of them).
CHANGES_KEPT = 20_000
#: The verifier's own caches (``XDG_CACHE_HOME``: pip's, uv's): what the test script
#: downloads or builds is never taken from a cache the agent filled.
CACHE = "/run/hangar/cache"
#: Paths removed in one exec of the helper.
_BATCH = 500


class ImageVerifierPlace(ABC):
    """Where the tests of an image task run (see the module docstring)."""

    #: Whether the verifier sees the agent's workspace.
    workspace = True
    #: Environment of the test script (before the task's own).
    env: ClassVar[dict[str, str]] = PYTHON_ENV

    @abstractmethod
    def open(self, trial: ImageTrialView, agent: Sandbox) -> Sandbox:
        """The verifier's sandbox, started, once the agent's `agent` is stopped."""

    def mounts(self, trial: ImageTrialView) -> tuple[Mount, ...]:
        """Folders of hangar's the verifier's sandbox has besides the tests and logs."""
        return ()

    def run(self, trial: ImageTrialView, box: Sandbox, env: dict[str, str]) -> ExecResult:
        """The test script from the read-only ``/tests``, as the verifier's user."""
        verifier = trial.task.verifier
        script = f"{TESTS}/{verifier.script}"
        return box.exec(["bash", script], timeout=verifier.timeout_s, env=env, user=verifier.user)

    def judged(self, trial: ImageTrialView, res: ExecResult) -> ExecResult:
        """The script's result as the verdict reads it, once its sandbox is stopped."""
        return res

    def start(self, trial: ImageTrialView, image: str) -> Sandbox:
        """A verifier sandbox of `image`: its tests, its logs, the workspace if any. A
        start that fails where one of the task's own image succeeds is the agent's."""
        spec = trial.verifier_spec(image, self.workspace, self.mounts(trial))
        box = create_sandbox(trial.spec.backend, spec)
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


class Observed(ImageVerifierPlace):
    """A place whose test script runs under hangar's observer (`hangar.sandbox.observe`),
    started with the image's own shell, and whose pass stands only where the judge's
    machinery used nothing of `changes`, the agent's (set by `open`; see
    `hangar.kinds.execution.images.takeover`)."""

    def __init__(self) -> None:
        self.changes = AgentChanges(kinds={}, workspace="")
        self.removed: list[str] = []
        self.settings: Settings | None = None
        #: What keeps a pass from standing whatever the record shows.
        self.problems: list[str] = []

    def mounts(self, trial: ImageTrialView) -> tuple[Mount, ...]:
        """hangar's start-up mark for Python; on the verifier's own disk, the folder the
        observer's record goes to and the verifier's own caches (`CACHE`)."""
        made = []
        for name in ("observed", "cache"):
            folder = trial.verifier_disk.root / name
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            folder.chmod(0o777)  # the verifier's user, whoever it is, writes here
            made.append(folder)
        return (
            Mount(source=STARTUP, target=STARTUP_MOUNT, read_only=True),
            Mount(source=made[0], target=RECORD_MOUNT),
            Mount(source=made[1], target=CACHE),
        )

    def run(self, trial: ImageTrialView, box: Sandbox, env: dict[str, str]) -> ExecResult:
        """The test script under the observer, which keeps the verifier's time itself (the
        agent's code is refused the egress proxy's port)."""
        verifier = trial.task.verifier
        image = trial.image_env
        python_path = env.get("PYTHONPATH", image.get("pythonpath", ""))
        self.settings = Settings(
            tests=TESTS,
            changed=sorted(self.changes.kinds),
            path=env.get("PATH") or image.get("path") or Settings.path,
            home=box.spec.home,
            guards=tuple(trial.egress_ports),
            marks=(RUNNER_MARK,),
        )
        env = {
            "XDG_CACHE_HOME": CACHE,
            **env,
            "PYTHONPATH": ":".join(p for p in (STARTUP_MOUNT, python_path) if p),
        }
        kill_after = box.spec.kill_after_s
        argv = observe_argv(verifier.timeout_s, kill_after, "bash", f"{TESTS}/{verifier.script}")
        return box.exec(
            argv,
            timeout=verifier.timeout_s + kill_after + 15,  # the observer's own end is first
            env=env,
            user=verifier.user,
            stdin=self.settings.encode(),
        )

    def judged(self, trial: ImageTrialView, res: ExecResult) -> ExecResult:
        """The observer's record judged: each use of the agent's changes by the judge's
        machinery is a takeover (`ImageTrialView.takeover`), as is a record that is not
        whole. The test script's own end stands for the exec's."""
        record, raw, problems = self.record(trial, res)
        problems += self.problems
        found: dict[str, object] = {"removed": self.removed}
        if record is not None:
            judgement = judge(self.changes, TESTS, record)
            if not judgement.complete:
                problems.append("the verifier did more than its observer can record")
            problems[:0] = [str(f) for f in judgement.findings]
            trial.stalled = judgement.in_progress
            trial.interfered = judgement.interfered(f"{LOGS}/verifier")
            found |= {
                "refused_network": judgement.refused_network,
                "ran_agent_code": judgement.tainted,
                "in_progress_at_deadline": judgement.in_progress,
                "script": record.status,
                "summary": record.summary,
            }
            trial.write("verifier/observed.txt", raw.decode("ascii", "replace"))
            status = record.status
            code = int(status) if status.isdigit() else 128 + int(status.rpartition("-")[2] or 9)
            res = res.model_copy(update={"returncode": code, "timed_out": record.deadline})
        trial.takeover = problems
        trial.write("verifier/takeover.json", {"findings": problems, **found})
        return res

    def record(
        self, trial: ImageTrialView, res: ExecResult
    ) -> tuple[Record | None, bytes, list[str]]:
        """The observer's record (from the verifier's disk on the host, never through a
        link, never more than the observer writes), or why there is none."""
        assert self.settings is not None
        if res.returncode == NO_PROGRAM:
            return (
                None,
                b"",
                ["the agent changed every bash on the image's PATH: no shell of the image's own"],
            )
        if res.returncode != COMPLETE:
            return None, b"", [f"the verifier's observer ended early (exit {res.returncode})"]
        path = trial.verifier_disk.root / "observed" / self.settings.record_name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as stream:
                raw = stream.read(RECORD_LIMIT + (1 << 20))
            return read_record(raw), raw, []
        except (OSError, RecordError) as exc:
            return None, b"", [f"the verifier's observation cannot be read: {exc}"]


class Shared(Observed):
    """A snapshot of the agent's sandbox (see the module docstring)."""

    def open(self, trial: ImageTrialView, agent: Sandbox) -> Sandbox:
        try:
            changes = agent.changes()
        except TooManyChanges as exc:  # every path is taken as the agent's: no pass
            self.problems.append(f"{exc}: too many to judge")
            changes = [Change(kind="A", path="/")]
        trial.write(
            "agent/changes.json",
            {"count": len(changes), "changes": [[c.kind, c.path] for c in changes[:CHANGES_KEPT]]},
        )
        workspace = trial.workspace_changes()
        trial.snapshot = agent.snapshot()
        trial.release(agent, stop=False)
        box = self.start(trial, trial.snapshot)
        # an earlier step's changes are in this step's image: still the agent's
        changes = trial.earlier_changes = [*trial.earlier_changes, *changes]
        self.removed = neutralised(changes)
        for i in range(0, len(self.removed), _BATCH):
            res = box.exec(helper_argv("remove", *self.removed[i : i + _BATCH]), user="0")
            if not res.ok:
                raise SandboxError(f"cannot clear what the agent left: {res.stderr.strip()}")
        gone = set(self.removed)
        self.changes = AgentChanges.of(
            (c for c in changes if c.path not in gone),
            trial.workdir,
            workspace,
            trial.task.agent_may_change,
        )
        return box


class Separate(Observed):
    """The verifier's own image with the declared artifacts (see the module docstring):
    what the artifacts bring is the agent's."""

    workspace = False

    def open(self, trial: ImageTrialView, agent: Sandbox) -> Sandbox:
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
        placed: dict[str, str] = {}
        for i, artifact in enumerate(trial.task.verifier.artifacts):
            _place_artifact(box, handoff / str(i), artifact.target, trial)
            placed |= _placed(handoff / str(i), artifact.target)
        self.changes = AgentChanges(kinds=placed, workspace=trial.workdir)
        return box


def _placed(handoff: Path, target: str) -> dict[str, str]:
    """The paths an artifact put in the verifier's sandbox (each the agent's, added)."""
    if (handoff / "file").is_file():
        return {canonical(target): "A"}
    folder = handoff / "dir"
    if not folder.is_dir():
        return {}
    state = tree_state(folder, WORKSPACE_FILES)
    if state is None:
        return {target.rstrip("/") + "/": "A"}  # every path under it
    return {
        canonical(os.fsencode(target.rstrip("/")) + b"/" + path): "A"
        for path, (_, _, _, mode) in state.items()
        if not stat.S_ISDIR(mode)
    }


class RepositoryOnly(ImageVerifierPlace):
    """The task's image and the workspace, nothing else (see the module docstring)."""

    env: ClassVar[dict[str, str]] = {}

    def open(self, trial: ImageTrialView, agent: Sandbox) -> Sandbox:
        trial.release(agent, stop=False)
        return self.start(trial, trial.image_ref)


def place_of(trial: ImageTrialView) -> ImageVerifierPlace:
    """The place of the trial's task (see the module docstring)."""
    if trial.task.verifier.mode == "separate":
        return Separate()
    if trial.task.grading is not None:
        return RepositoryOnly()
    return Shared()


def save_agent_logs(trial: ImageTrialView) -> None:
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


def fresh_tests(trial: ImageTrialView) -> Path:
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
                (target / "mode").write_text(f"{path.lstat().st_mode & 0o755:o}")
            return
    try:
        sandbox.copy_out(source, target / "dir")
    except SandboxError:
        try:
            data, mode = sandbox.file_mode(source)
        except SandboxError:
            return
        target.mkdir(parents=True, exist_ok=True)
        (target / "file").write_bytes(data)
        (target / "mode").write_text(f"{mode & 0o755:o}")


def _place_artifact(box: Sandbox, handoff: Path, target: str, trial: ImageTrialView) -> None:
    """One artifact into the verifier's sandbox, where the task says."""
    if (handoff / "dir").is_dir():
        trial.mkdirs(box, target)
        box.copy_in(handoff / "dir", target)
    elif (handoff / "file").is_file():
        trial.mkdirs(box, str(Path(target).parent))
        kept = handoff / "mode"
        mode = int(kept.read_text(), 8) if kept.is_file() else 0o644  # executable stays so
        box.write_file(target, (handoff / "file").read_bytes(), mode=mode)
