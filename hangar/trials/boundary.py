"""The trial boundary: every kind of trial runs inside it, and it never raises.

`run_trial` picks the runner of the spec's kind (`runner_for`) and turns whatever
happens into a `TrialResult` with a verdict and a reason: a runner ends early by raising
`Outcome` (a verdict it decided), an unexpected exception is an ``infra_error`` whose
reason names its type and message (the traceback goes into ``error.txt``). The evidence
bundle is written in ``finally``, and the runner's `tear_down` runs in every outcome.
See docs/architecture.md for the lifecycle of each kind.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

import pydantic_core

from hangar.errors import SandboxError
from hangar.evidence.archive import archive_bytes, build_archive
from hangar.evidence.stores import EvidenceStore, archive_key, open_store, run_name
from hangar.paths import cache_dir
from hangar.results import STORED_PREFIX, ProviderError, TrialOutcome, TrialResult, Verdict
from hangar.sessions import SESSION_FILE, trace_session, write_trial_session
from hangar.trace import TraceWriter
from hangar.trials.spec import TrialSpec, result_of


class Outcome(Exception):
    """Ends a trial early with a verdict (raised by a phase, caught at the boundary)."""

    def __init__(self, verdict: Verdict, reason: str) -> None:
        super().__init__(reason)
        self.verdict, self.reason = verdict, reason


def provider_failed(error: ProviderError, *, of: str = "") -> Outcome:
    """The end of a trial whose model provider failed (`of`: whose call, e.g. "judge"):
    an infra_error, never a counted fail; the sweep retries it, or stops the model when
    its key is refused."""
    whose = f" ({of})" if of else ""
    return Outcome(Verdict.INFRA_ERROR, f"provider failure{whose}: {error.message}")


def unless_provider_failed(
    verdict: Verdict, reason: str, error: ProviderError | None
) -> tuple[Verdict, str]:
    """(verdict, reason) of a judged trial, made an infra_error when it failed and the
    provider had failed the agent (the provider failed the agent, not the other way round;
    a pass stays a pass)."""
    if error is None or verdict is not Verdict.FAIL:
        return verdict, reason
    return (
        Verdict.INFRA_ERROR,
        f"provider failure: {error.message} (the trial would otherwise be a fail: {reason})",
    )


class TrialRun:
    """What every kind of trial has: its folders, phase timings, evidence files.

    A runner subclasses it: `run` walks its phases (raising `Outcome` to end early) and
    sets `verdict` and `reason`; `outcome` adds what it knows to the result; `tear_down`
    releases what it holds, in every outcome.
    """

    in_memory: ClassVar[bool] = False
    """Whether its evidence files are kept in memory, never in a folder: a trial with no
    sandbox (a prompt, a rubric sample) has nothing outside this process that reads
    them, and a folder cost a prompt trial more file system calls than its model call
    took CPU (`benchmarks/prompt.py`). The bundle is the same archive either way."""

    kept: dict[str, bytes] | None = None
    """Its evidence files (relative path: bytes) when `in_memory`; None when they are
    files under `artifacts` (a class default, so a runner built without `__init__`
    writes files)."""

    for_results_store: bool = False
    """Whether its bundle (of files kept in memory) goes to the results store with its
    result (`TrialResult.evidence_data`) rather than to the evidence store: set for the
    trials a sweep runs in pools, whose results the driver records."""

    def __init__(self, spec: TrialSpec) -> None:
        self.spec = spec
        work_root = spec.work_root or cache_dir() / "trials"
        # Unique to this run of the attempt: one killed before its teardown (a second
        # Ctrl-C, a lost node) may have left its folder and disk behind, and another sweep
        # may run the same trial key on this node at the same time.
        self.folder = work_root / f"{spec.trial_key[:20]}-{spec.attempt}-{uuid.uuid4().hex[:8]}"
        self.artifacts = self.folder / "artifacts"
        self.timings: dict[str, float] = {}
        self.verdict, self.reason = Verdict.INFRA_ERROR, "the trial did not finish"
        self.kept = {} if self.in_memory else None
        self.bundle_data: bytes | None = None
        self._trace: TraceWriter | None = None

    def new_trace(self) -> TraceWriter:
        """The trial's trace, ``trace.jsonl`` of its evidence (in memory when it is)."""
        self._trace = TraceWriter(None if self.in_memory else self.artifacts / "trace.jsonl")
        return self._trace

    def localise(self, spec: TrialSpec) -> None:
        """Run from `spec`, the same trial with this node's copy of its task."""
        self.spec = spec

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase (seconds, in the result's ``timings``; a phase that runs again, as
        in a task's next step, adds to its time)."""
        started = time.monotonic()
        try:
            yield
        finally:
            spent = time.monotonic() - started
            self.timings[name] = round(self.timings.get(name, 0.0) + spent, 3)

    def write(self, rel: str, data: object) -> Path:
        """Write an evidence file under the artifacts folder (text, or data as JSON)."""
        path = self.artifacts / rel
        # pydantic's encoder: json's indents in pure Python (a prompt trial's CPU)
        raw = (
            data.encode()
            if isinstance(data, str)
            else pydantic_core.to_json(data, indent=1, fallback=str)
        )
        if self.kept is not None:
            self.kept[rel] = raw
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(raw)
        return path

    def evidence(self, result: TrialResult) -> tuple[str, str]:
        """Its evidence, `result.json` and the session added, bundled and stored:
        (uri, sha256)."""
        if self.kept is None:
            write_trial_session(self.artifacts)
            self.write("result.json", result.model_dump(mode="json"))
            return store_bundle(self.spec, self.artifacts, self.folder / "bundle.tar.gz")
        trace = self._trace
        if trace is not None and trace.data is not None:
            self.kept["trace.jsonl"] = trace.data
        self.kept[SESSION_FILE] = trace_session(self.kept.get("trace.jsonl"))
        self.write("result.json", result.model_dump(mode="json"))
        data, sha = archive_bytes(self.kept)
        if self.for_results_store:
            self.bundle_data = data
            return STORED_PREFIX + _key(self.spec), sha
        return _store(self.spec).put_bytes(_key(self.spec), data), sha

    def run(self) -> None:
        """Walk the phases; set `verdict` and `reason` (or raise `Outcome`)."""
        raise NotImplementedError

    def outcome(self) -> TrialOutcome:
        """What this run knows beyond its verdict (checks, scores, usage...)."""
        return TrialOutcome()

    def tear_down(self, *, wait: bool) -> None:
        """Release what the run holds (sandboxes, relays, disks); never raises."""

    def remove(self, *, wait: bool) -> None:
        """Remove the trial's folder, its evidence archived: at once, or (without `wait`)
        where the runner's own teardown finishes in the background, after it."""
        if self.kept is None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def ended(self, verdict: Verdict, reason: str) -> None:
        """Called once the verdict is known, before teardown (e.g. to close a trace)."""


def run_trial(
    spec: TrialSpec,
    *,
    wait_teardown: bool = True,
    localise: Callable[[TrialSpec], TrialSpec] | None = None,
    results_store_bundle: bool = False,
) -> TrialResult:
    """Run one trial attempt and return its result (never raises for a trial's outcome).

    With `wait_teardown` (the default) every sandbox is gone when it returns; a Ray
    worker passes False so that removing containers overlaps the next trial's start.
    Either way every process in them has been killed before the result exists.
    `localise` turns the spec into this node's (a Ray worker unpacks the task the
    driver shipped): it runs inside the boundary, so its failure is a result too.
    With `results_store_bundle`, a trial whose evidence is kept in memory returns its
    bundle with its result, for the results store (`TrialRun.for_results_store`).
    """
    started = datetime.now(UTC)
    trial = runner_for(spec)
    trial.for_results_store = results_store_bundle and trial.kept is not None
    if trial.kept is None:
        shutil.rmtree(trial.folder, ignore_errors=True)
        trial.artifacts.mkdir(parents=True)
    try:
        if localise is not None:
            with trial.phase("unpack"):
                trial.localise(localise(spec))
        trial.run()
    except Outcome as outcome:
        trial.verdict, trial.reason = outcome.verdict, outcome.reason
    except Exception as exc:  # the trial boundary: record, never raise
        kind = "sandbox" if isinstance(exc, SandboxError) else "hangar"
        trial.verdict = Verdict.INFRA_ERROR
        trial.reason = f"{kind} failure: {type(exc).__name__}: {exc}"
        trial.write("error.txt", traceback.format_exc())
    finally:
        trial.ended(trial.verdict, trial.reason)
        with trial.phase("teardown_sandbox"):
            trial.tear_down(wait=wait_teardown)
        result = result_of(
            spec,
            trial.verdict,
            trial.reason,
            started,
            datetime.now(UTC),
            trial.outcome(),
            timings=trial.timings,
            node=spec.node or socket.gethostname(),
        )
        result = _bundled(trial, result)
        with trial.phase("teardown"):
            trial.remove(wait=wait_teardown)
    return result.model_copy(update={"timings": dict(trial.timings)})


def _bundled(trial: TrialRun, result: TrialResult) -> TrialResult:
    """`result` with its evidence archive stored (an infra_error when it cannot be)."""
    try:
        with trial.phase("bundle"):
            uri, sha = trial.evidence(result)
    except Exception as exc:
        return result.model_copy(
            update={
                "verdict": Verdict.INFRA_ERROR,
                "reason": f"evidence could not be stored ({type(exc).__name__}: {exc}); "
                f"the trial had ended {trial.verdict.value}: {trial.reason}",
            }
        )
    found = {"evidence_uri": uri, "evidence_sha256": sha, "evidence_data": trial.bundle_data}
    return result.model_copy(update=found)


def runner_for(spec: TrialSpec) -> TrialRun:
    """The runner of the spec's kind of trial (`hangar.trials.kind`: a worker imports only
    the kinds its trials need)."""
    from hangar.trials.kind import kind_of

    return kind_of(spec.task.kind).runner(spec)


def lost_result(
    spec: TrialSpec, reason: str, started_at: datetime | None = None, *, details: str = ""
) -> TrialResult:
    """An infra_error result for a trial whose worker could not report one (it died, or
    its task raised); `details` (a traceback) goes into an evidence archive of its own."""
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
            uri, sha = store_bundle(spec, artifacts, Path(tmp) / "bundle.tar.gz")
        except Exception as exc:  # the reason still says what happened
            return result.model_copy(
                update={"reason": f"{reason}; its evidence could not be stored ({exc})"}
            )
    return result.model_copy(update={"evidence_uri": uri, "evidence_sha256": sha})


def store_bundle(spec: TrialSpec, artifacts: Path, archive: Path) -> tuple[str, str]:
    """Bundle `artifacts` into `archive` and put it in the evidence store: (uri, sha256)."""
    sha = build_archive(artifacts, archive)
    return _store(spec).put(_key(spec), archive), sha


def _key(spec: TrialSpec) -> str:
    """The key of a new execution's bundle of `spec`'s attempt."""
    run = run_name(spec.node or socket.gethostname())
    return archive_key(spec.sweep, spec.trial_key, spec.attempt, run)


def _store(spec: TrialSpec) -> EvidenceStore:
    return open_store(spec.evidence_url)
