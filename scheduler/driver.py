"""The sweep driver: fans trials out to Ray and is the single writer of the results store.

- Embedded single-node Ray by default (``ray.init`` with the ``hangar_sandbox``
  resource); ``address`` attaches to a cluster whose nodes offer that resource.
- Each trial that needs a sandbox is a Ray task needing one ``hangar_sandbox`` unit; one
  that does not (a prompt, a rubric sample) goes to a pool of threads
  (`hangar.scheduler.pool`). Ray re-runs a task whose worker or node died
  (``node_retries``); an ``infra_error`` verdict is sent again with a
  growing backoff up to ``infra_retries`` times, every attempt recorded; every other
  verdict is final.
- A bounded window of in-flight trials (memory stays flat whatever the sweep's size),
  per-model in-flight caps, and trials already final in the store are skipped (resume).
- Results are written at least every quarter second, in one transaction for all that
  came back meanwhile, so a fast sweep is not slowed by commits; a crash loses at most
  that quarter second's results (their trials run again on the next run).
- Ctrl-C once: stop submitting and let running trials finish; twice: cancel them.
- A sweep budget (``budget_usd``): once this run's and earlier runs' cost reach it, no
  new trial is scheduled; running ones finish. A model's missing API key is an error
  before any trial starts; a key its provider refuses (401/403) stops that model's
  trials (`SweepTally.stopped_models`): each would fail the same way, and none is
  charged to the agent.
- Scenario files that do not load are blocked_setup rows, recorded before any trial.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import logging
import os
import re
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from hangar.cluster.attach import (
    SANDBOX_RESOURCE,
    announce_metrics,
    connect,
    sandbox_nodes,
)
from hangar.cluster.reaper import ensure_reapers
from hangar.errors import ConfigError
from hangar.logs import event
from hangar.models import check_keys
from hangar.models.exists import ModelCheck, start_checks
from hangar.paths import default_evidence_url
from hangar.results import COUNTED_VERDICTS, ProviderError, TrialResult, Verdict
from hangar.sandbox import sandbox_class
from hangar.scheduler import metrics
from hangar.scheduler.board import Snapshot, node_slots, open_board
from hangar.scheduler.dispatch import Dispatch
from hangar.scheduler.pool import Pools, results
from hangar.scheduler.pool_actors import WarmPools
from hangar.scheduler.preflight import NodeReport, missing_images, start_preflight
from hangar.scheduler.sequential import Rounds
from hangar.scheduler.sweep import Sweep
from hangar.scheduler.task import put, run_trial_task
from hangar.scores.report import DEFAULT_MARGIN
from hangar.scores.sequential import SequentialOutcome
from hangar.store import ResultsStore
from hangar.trials import Task, TrialSpec, lost_result, result_of
from hangar.trials.kind import kind_of

log = logging.getLogger(__name__)

#: How often the driver reads the board of running trials.
BOARD_EVERY_S = 2.0
#: How often the driver asks Ray which nodes are dead (`SweepRunner._watch_nodes`;
#: ``HANGAR_NODE_WATCH_S``, 0 leaves it to Ray's own retries, as a benchmark's baseline).
WATCH_EVERY_S = float(os.environ.get("HANGAR_NODE_WATCH_S", "5"))
#: Results collected are written at least this often (and at the end of every round).
RECORD_EVERY_S = 0.25
#: ... or once this many wait.
RECORD_AT = 500
#: Terminal colours in Ray's error reports (evidence is plain text).
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def evidence_url(url: str | None, endpoint: str | None) -> str:
    """The evidence URL workers get (an S3 endpoint travels inside it)."""
    url = url or default_evidence_url()
    if endpoint and url.startswith("s3://") and "endpoint=" not in url:
        url += ("&" if "?" in url else "?") + f"endpoint={endpoint}"
    return url


def check_evidence_reachable(evidence_url: str, nodes: int) -> None:
    """Refuse a node-local evidence store for a sweep that spans several nodes."""
    if nodes > 1 and urlparse(evidence_url).scheme in ("", "file"):
        raise ConfigError(
            f"the evidence store {evidence_url} is a local folder, but the sweep runs on "
            f"{nodes} nodes whose workers cannot all write it: use an s3:// evidence store "
            "(`evidence: s3://bucket/prefix` in the sweep file)"
        )


@dataclass
class SweepTally:
    """What a run of a sweep did, for the progress view and the caller."""

    total: int
    """Trials in the sweep."""
    skipped: int = 0
    """Trials already final in the store before this run."""
    done: int = 0
    """Trials that reached a final verdict in this run."""
    verdicts: Counter[str] = field(default_factory=Counter)
    """Final verdicts seen in this run (and, for pass/fail, before it)."""
    cost_usd: float = 0.0
    """Cost of this run's attempts."""
    retries: int = 0
    """infra_error and verifier_error attempts sent again."""
    lost: int = 0
    """Trials left with infra_error or verifier_error after their last attempt."""
    interrupted: bool = False
    """Ctrl-C stopped the run before the end."""
    cancelled: int = 0
    """Trials a second Ctrl-C cancelled (recorded infra_error: the next run runs them)."""
    peak_in_flight: int = 0
    """Most trials submitted to Ray at once (never above the window)."""
    spent_before: float = 0.0
    """Cost of the sweep's attempts in earlier runs."""
    budget_exhausted: bool = False
    """The sweep's budget was spent and no new trial was scheduled after that."""
    stopped_models: dict[str, ProviderError] = field(default_factory=dict)
    """Models whose provider refused the key or has no such model: no more of their trials
    were scheduled."""
    model_checks: list[ModelCheck] = field(default_factory=list)
    """What each provider answered before the first trial (`hangar.models.exists`)."""
    board: Snapshot = field(default_factory=Snapshot)
    """Running trials per node, as last read from the sweep's board (a few seconds old)."""
    saved: int = 0
    """Trials a sweep run until decided never needed (its comparisons were decided)."""
    decided: list[SequentialOutcome] = field(default_factory=list)
    """How its comparisons ended (a sweep run until decided)."""

    @property
    def finished(self) -> int:
        """Trials final in the store now (before and in this run): not those left
        infra_error or verifier_error (a second Ctrl-C's cancelled trials among them),
        which the next run runs again."""
        return self.skipped + self.done - self.lost

    @property
    def not_run(self) -> int:
        """Trials that reached no outcome in this run and none before it (budget, stopped
        models, Ctrl-C)."""
        return self.total - self.skipped - self.done - self.saved

    def exit_code(self, *, failures_ok: bool = False) -> int:
        """`hangar run`'s exit status (documented in the README): 0 when every trial
        passed; 1 when some failed and all reached a verdict; 3 when some are
        blocked_setup, infra_error, verifier_error or void, or were not run; 130 after Ctrl-C. With
        `failures_ok` (failures are results, as in a model comparison) a fail is 0."""
        if self.interrupted:
            return 130
        unjudged = sum(n for v, n in self.verdicts.items() if v not in COUNTED_VERDICTS)
        if unjudged or self.not_run > 0:
            return 3
        if self.verdicts["fail"] and not failures_ok:
            return 1
        return 0

    @property
    def pass_rate(self) -> float | None:
        """Passes over passes and fails so far (None before the first)."""
        judged = self.verdicts["pass"] + self.verdicts["fail"]
        return self.verdicts["pass"] / judged if judged else None


Listener = Callable[[SweepTally, TrialResult | None], None]


class SweepRunner:
    """Runs one sweep to the end (or to Ctrl-C); see the module docstring."""

    def __init__(
        self,
        sweep: Sweep,
        store: ResultsStore,
        *,
        address: str | None = None,
        listener: Listener | None = None,
        poll_s: float = 0.5,
        retry_blocked: bool = True,
    ) -> None:
        self.sweep = sweep
        self.reopen = (Verdict.BLOCKED_SETUP.value,) if retry_blocked else ()
        """Verdicts of earlier runs whose trials run again: blocked_setup by default (what
        blocked them, a missing commit or image, may have been mended; admission is cheap)."""
        self.store = store
        self.address = address
        self.listener = listener or (lambda tally, result: None)
        self.poll_s = poll_s
        config = sweep.config
        self.evidence_url = evidence_url(config.evidence, config.evidence_endpoint)
        self.policy = config.retry
        self.caps = config.concurrency.per_model
        self.tally = SweepTally(total=sweep.size)
        self._stop = 0
        self._stopping = False
        self._unloadable = 0
        self._board: Any = None
        self._unrecorded: list[TrialResult] = []
        self._recorded_at = 0.0
        self._writer: ThreadPoolExecutor | None = None
        self._metrics = metrics.Batch()  # sent by the writer's thread (`_write`)
        self._writes: collections.deque[Future[None]] = collections.deque()
        self._pools: Pools | None = None
        self._warm: WarmPools | None = None
        self._board_read: Any = None
        self._board_at = 0.0
        self._watched_at = 0.0
        self._dead_seen: set[str] | None = None  # nodes dead before the sweep: None
        self._window = 1
        self._pooled = self._driver_only = False
        self._submit: Callable[[TrialSpec], Any] | None = None
        self._recorded: dict[str, Any] = {}
        plan = sweep.config.until_decided
        self.rounds = (
            Rounds(sweep, plan, sweep.margin or DEFAULT_MARGIN) if plan is not None else None
        )
        """The rounds of a sweep run until decided (None: all its trials at once)."""

    # -- Ctrl-C ---------------------------------------------------------------------------

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self._stop += 1
        if self._stop == 1:
            log.warning("stopping: no new trials; Ctrl-C again to cancel the running ones")

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> SweepTally:
        """Run the sweep; returns the tally. While it runs, it holds this machine's warm
        Ray head (`hangar.cluster.local_head`), so the head is not stopped as idle meanwhile."""
        from hangar.cluster.local_head import attached

        self._writer = ThreadPoolExecutor(1, thread_name_prefix="hangar-store")
        try:
            with attached() if self.address is None else contextlib.nullcontext():
                return self._run()
        finally:
            self._writer.shutdown()  # every commit asked for made (or failed)

    def _run(self) -> SweepTally:
        config = self.sweep.config
        check_keys([m for m in config.models if m.provider != "none"])
        final, last_attempt = self._resume()
        # Nothing to do (every trial of this matrix is final: results of an earlier version
        # of a scenario or sample have other keys and do not count, or a comparison run
        # until decided was decided by them): do not start Ray.
        decided = self.rounds is not None and self._replay(final)
        if decided or all(spec.trial_key in final for spec in self.sweep.trials(self.evidence_url)):
            self.tally.skipped = self.sweep.size - self.tally.done - self.tally.saved
            for verdict, *_, n in self.store.counts(self.sweep.id):
                self.tally.verdicts[verdict] += n
            return self.tally
        checks = self._start_model_checks(final)  # asked while Ray starts
        needs = tuple(sorted({m.key_env for m in config.models if m.key_env}))
        slots = connect(self.address, config.concurrency.sandbox_slots, needs)
        import ray  # after connect(), which sets Ray's environment first

        self._window = config.concurrency.max_in_flight or 2 * slots
        board = f"hangar-board-{self.sweep.id}-{uuid.uuid4().hex[:8]}"
        self._pools = Pools(
            ray,
            self._window,
            board,
            self.policy.node_retries,
            config.models,
            config.concurrency.prompt_trials,
        )
        # Every trial the driver's own (prompts, on a cluster that is this machine): no
        # node runs one, so there is no board to keep and no node to ask for a preflight.
        sandboxed = {kind_of(task.kind).sandboxed for task in self.sweep.tasks}
        self._pooled = False in sandboxed  # some trials need no sandbox
        self._driver_only = True not in sandboxed and self._pools.in_driver()
        self._board = None if self._driver_only else open_board(ray, board)
        self._warm = WarmPools(ray, board.replace("hangar-board-", "hangar-warm-", 1))
        try:
            final |= self._prepare(ray, final, last_attempt, slots, checks)
            gc.freeze()  # what start-up made lives as long as the run: no collection walks it
            previous = signal.signal(signal.SIGINT, self._on_sigint)
            try:
                if self.rounds is None:
                    self._round(ray, self.sweep.trials(self.evidence_url), final, last_attempt)
                else:
                    self._run_rounds(ray, final, last_attempt)
            finally:
                signal.signal(signal.SIGINT, previous)
        finally:
            self._warm.close()
            self._pools.kill()
            if self._board is not None:
                ray.kill(self._board)
        self.tally.interrupted = self._stop > 0
        self._log_end()
        return self.tally

    def _prepare(
        self,
        ray: Any,
        final: set[str],
        last_attempt: dict[str, int],
        slots: int,
        checks: Callable[[], list[ModelCheck]] | None,
    ) -> set[str]:
        """The preflight on every node, the models' checks, the tally of earlier runs, the
        trials blocked by a missing image (returned: final now); announces the sweep."""
        nodes = sandbox_nodes()
        announce_metrics(ray.nodes())
        check_evidence_reachable(self.evidence_url, len(nodes))
        assert self._pools is not None
        # No node runs a trial when every trial is the driver's: what the preflight would
        # check there, nothing uses.
        reports: Callable[[], list[NodeReport]] = list
        if not self._driver_only:
            reports = start_preflight(self.sweep, self.evidence_url, nodes)
        if self._pooled:
            self._pools.open()  # their processes start while the preflight runs
        if checks is not None:
            self._take_model_checks(checks())
        self.preflight = reports()
        for report in self.preflight:
            for warning in report.warnings:
                log.warning("node %s: %s", report.node, warning)
        for verdict, *_, n in self.store.counts(self.sweep.id):
            if Verdict(verdict).final and verdict not in self.reopen:
                self.tally.verdicts[verdict] += n
        if self.reopen and self._unloadable:  # unloadable files' rows stay blocked
            self.tally.verdicts[Verdict.BLOCKED_SETUP.value] += self._unloadable
        blocked = self._block_missing_images(final, last_attempt)
        ensure_reapers()
        self.tally.board = Snapshot(slots=node_slots(nodes, SANDBOX_RESOURCE))
        event(
            log,
            f"sweep {self.sweep.id}: {self.sweep.size} trials on {len(nodes)} node(s)",
            event="sweep_started",
            sweep=self.sweep.id,
            trials=self.sweep.size,
            final_before=len(final | blocked),
            nodes=len(nodes),
            slots=slots,
            window=self._window,
        )
        return blocked

    def _start_model_checks(self, final: set[str]) -> Callable[[], list[ModelCheck]] | None:
        """Ask each provider whether each model with trials still to run exists (in threads:
        taken by `_prepare` before any trial). A spent budget buys no check (no trial will
        run): None."""
        if self._over_budget():
            return None
        waiting: set[str] = set()
        for spec in self.sweep.trials(self.evidence_url):
            if spec.trial_key not in final:
                waiting.add(spec.model)
                if len(waiting) == len(self.sweep.config.models):
                    break  # every model has a trial to run (a new sweep's first few)
        return start_checks([m for m in self.sweep.config.models if m.id in waiting])

    def _take_model_checks(self, checks: list[ModelCheck]) -> None:
        """A model the provider does not know (or whose key it refuses) is stopped before
        any trial; each check is logged."""
        self.tally.model_checks = checks
        for check in self.tally.model_checks:
            if check.error is not None and check.error.stops_model:
                self.tally.stopped_models[check.model] = check.error
            said = "known" if check.ok else check.error.message if check.error else ""
            event(
                log,
                f"model {check.model}: {said}",
                event="model_checked",
                model=check.model,
                ok=check.ok,
                error=check.error.message if check.error else check.note,
                cost_usd=check.usage.cost_usd,
            )

    # -- rounds ---------------------------------------------------------------------------

    def _round(
        self, ray: Any, trials: Iterable[TrialSpec], final: set[str], last_attempt: dict[str, int]
    ) -> None:
        """Send `trials` (those not final) and collect them, to the end of the round."""
        stopped = self.tally.stopped_models
        self.dispatch = Dispatch(
            trials,
            window=self._window,
            policy=self.policy,
            caps=self.caps,
            final=final,
            last_attempt=last_attempt,
        )
        self.dispatch.stopped.update(stopped)  # a refused key stays refused across rounds
        self.tally.stopped_models = self.dispatch.stopped
        if self._submit is None:
            self._submit = self._submitter(ray)
        self._loop(ray, self._submit)

    def _replay(self, final: set[str]) -> bool:
        """Go through the rounds an earlier run finished (all their trials final), looking
        after each as it did; True when every comparison was decided there."""
        rounds = self.rounds
        assert rounds is not None
        while True:
            trials = list(rounds.trials(self.evidence_url))
            if not all(spec.trial_key in final for spec in trials):
                return False
            self.tally.skipped += len(trials)
            rounds.look(self.store.results(self.sweep.id))
            if not rounds.advance():
                self._record_rounds()
                self.tally.saved = rounds.unscheduled()
                return True

    def _run_rounds(self, ray: Any, final: set[str], last_attempt: dict[str, int]) -> None:
        """A sweep run until decided: round after round, looking after each, until every
        comparison is closed, the units run out, or Ctrl-C or the budget stop it."""
        rounds = self.rounds
        assert rounds is not None
        while True:
            self._round(ray, rounds.trials(self.evidence_url), final, last_attempt)
            results = list(self.store.results(self.sweep.id))
            if self._stop or self.tally.budget_exhausted:
                rounds.cut_short(results)
                break
            rounds.look(results)
            self._record_rounds()
            if not rounds.advance():
                break
            now_final, last_attempt = self.store.resume_state(self.sweep.id)
            final = final | now_final
        self._record_rounds()
        self.tally.saved = rounds.unscheduled()

    def _record_rounds(self) -> None:
        """The comparisons' outcomes so far, recorded with the sweep (reports read them)."""
        assert self.rounds is not None
        outcomes = [o.model_dump(mode="json") for o in self.rounds.outcomes()]
        self.tally.decided = self.rounds.outcomes()
        self.store.ensure_sweep(
            self.sweep.id, {**self._recorded, "sequential": outcomes}, self.sweep.size
        )

    def _resume(self) -> tuple[set[str], dict[str, int]]:
        """Register the sweep, read what earlier runs finished, and record the
        blocked_setup rows of unloadable scenario files (no container, no model call;
        those recorded by an earlier run count as skipped). (final keys, last attempts)."""
        config = self.sweep.config
        recorded = {
            **config.model_dump(mode="json"),
            "family": self.sweep.family or self.sweep.id,
            "left_out": self.sweep.left_out,
            "sources": self.sweep.sources,
            "margin": self.sweep.margin,
        }
        self._recorded = recorded
        self.store.ensure_sweep(self.sweep.id, recorded, self.sweep.size)
        self.tally.spent_before = self.store.cost(self.sweep.id)
        final, last_attempt = self.store.resume_state(self.sweep.id, reopen=self.reopen)
        # Unloadable files' rows are keyed on their bytes: mended, they are new trials.
        blocked = list(self.sweep.blocked_results())
        new = [r for r in blocked if r.trial_key not in last_attempt]
        self.store.record(new)
        final |= {r.trial_key for r in blocked}
        self._unloadable = len(blocked)
        self.tally.done += len(new)
        self.tally.skipped += len(blocked) - len(new)
        return final, last_attempt

    def _block_missing_images(self, final: set[str], last_attempt: dict[str, int]) -> set[str]:
        """Record as blocked_setup, without running them, the trials whose image some node
        lacks (the preflight found it), naming the image and the scenarios; the others run.
        Returns their keys."""
        from datetime import UTC, datetime

        missing = missing_images(self.preflight)
        if not missing:
            return set()
        blocked: list[TrialResult] = []
        users: dict[str, set[str]] = {}
        now = datetime.now(UTC)
        for spec in self.sweep.trials(self.evidence_url):
            image = kind_of(spec.task.kind).image(spec.task)
            if image not in missing or spec.trial_key in final:
                continue
            users.setdefault(image, set()).add(spec.task.id)
            attempt = last_attempt.get(spec.trial_key, 0) + 1
            reason = f"image {image} is missing: {missing[image]}"
            blocked.append(
                result_of(
                    spec.model_copy(update={"attempt": attempt}),
                    Verdict.BLOCKED_SETUP,
                    reason,
                    now,
                    now,
                )
            )
        for image, scenarios in users.items():
            log.warning(
                "image %s is missing, so the trials of %s are blocked_setup (the others run): %s",
                image,
                ", ".join(sorted(scenarios)),
                missing[image],
            )
        if blocked:
            self.store.record(blocked)
            self.tally.done += len(blocked)
            self.tally.verdicts[Verdict.BLOCKED_SETUP.value] += len(blocked)
        return {r.trial_key for r in blocked}

    def _submitter(self, ray: Any) -> Callable[[TrialSpec], Any]:
        """The function that sends one trial to Ray (returns its object reference)."""
        task = ray.remote(run_trial_task).options(
            resources={SANDBOX_RESOURCE: 1},
            num_cpus=0,
            max_retries=self.policy.node_retries,
            retry_exceptions=False,
        )
        # A trial that needs no sandbox (a prompt) goes to a pool (`scheduler.pool`).
        pools, warm = self._pools, self._warm
        assert pools is not None and warm is not None
        shippers: dict[str, Callable[[Task], Any]] = {}
        keep = self.sweep.config.concurrency.warm_sandboxes
        warming = keep != 0 and sandbox_class(self.sweep.config.backend.kind).warm

        def submit(spec: TrialSpec) -> Any:
            nonlocal warming
            kind = kind_of(spec.task.kind)
            if kind.name not in shippers:
                shippers[kind.name] = kind.shipper(lambda data: put(ray, data))
            shipped = shippers[kind.name](spec.task)
            if not kind.sandboxed:
                return pools.submit(spec, shipped)
            if warming:  # the nodes' warm pools, with the first sandboxed trial
                nodes = [
                    (
                        n["NodeID"],
                        int(n["Resources"][SANDBOX_RESOURCE]),
                        n["Resources"].get("CPU", 0),
                    )
                    for n in sandbox_nodes()
                ]
                warm.open(nodes, self._window, keep)
                warming = False
            return task.remote(spec, shipped, self._board, warm.prefix if warm.opened else None)

        return submit

    def _loop(self, ray: Any, submit: Callable[[TrialSpec], Any]) -> None:
        """Send what `self.dispatch` allows, collect what comes back, until the sweep ends,
        Ctrl-C or the budget stops it; every result collected is in the store after it."""
        try:
            self._send_and_collect(ray, submit)
        finally:
            self._record([], now=True)

    def _send_and_collect(self, ray: Any, submit: Callable[[TrialSpec], Any]) -> None:
        dispatch = self.dispatch
        skipped_before = self.tally.skipped
        in_flight: dict[Any, tuple[TrialSpec, float]] = {}
        self.listener(self.tally, None)
        while True:
            if self._over_budget():
                self.tally.budget_exhausted = True
            if (self._stop or self.tally.budget_exhausted) and not self._stopping:
                # Trials Ray queued for a slot must not start now (Ctrl-C, or the budget is
                # spent: each would cost more): the board refuses them.
                if self._board is not None:
                    self._board.stop.remote()
                assert self._pools is not None
                self._pools.stop()
                self._stopping = True
            while self._stop == 0 and not self.tally.budget_exhausted:
                spec = dispatch.next(time.monotonic())
                if spec is None:
                    break
                in_flight[submit(spec)] = (spec, time.time())
                dispatch.started(spec)
                self.tally.peak_in_flight = max(self.tally.peak_in_flight, len(in_flight))
                self._gauge(spec.model)
            self.tally.skipped = skipped_before + dispatch.skipped
            if not in_flight and (dispatch.idle or self._stop or self.tally.budget_exhausted):
                return
            if self._stop >= 2:
                self._cancel(ray, in_flight)
                return
            if not in_flight:
                ready_at = dispatch.next_ready_at() or time.monotonic()
                time.sleep(min(self.poll_s, max(0.0, ready_at - time.monotonic())))
                continue
            assert self._pools is not None
            ready = self._pools.wait(list(in_flight), self.poll_s)
            self._finish(dispatch, [(ref, *in_flight.pop(ref)) for ref in ready])
            self._read_board(ray, [spec.trial_key for spec, _ in in_flight.values()])
            self._watch_nodes(ray, dispatch, in_flight)

    def _watch_nodes(
        self, ray: Any, dispatch: Dispatch, in_flight: dict[Any, tuple[TrialSpec, float]]
    ) -> None:
        """The trials running on a node Ray has marked dead, given up at once (cancelled,
        recorded as lost, run again as their next attempt) instead of when Ray's own
        retry comes, minutes later for a node that froze rather than died. Whatever the
        frozen node does when it thaws is discarded (its bundle keeps a key of its own)."""
        from datetime import UTC, datetime

        now = time.monotonic()
        if not WATCH_EVERY_S or now - self._watched_at < WATCH_EVERY_S or not in_flight:
            return
        self._watched_at = now
        try:
            dead = {str(n["NodeID"])[:12] for n in ray.nodes() if not n.get("Alive")}
        except Exception:  # a busy GCS: the next look
            return
        where = {r.trial_key: r.node for r in self.tally.board.running}
        assert self._pools is not None
        if self._dead_seen is None:  # dead before this sweep: nothing of it queued there
            self._dead_seen = dead
        lost = [
            ref
            for ref, (spec, _) in in_flight.items()
            if where.get(spec.trial_key, "").rsplit("/", 1)[-1] in dead
            and not self._pools.owns(ref)  # a pool's trials fail with their actor
        ]
        resend = bool(dead - self._dead_seen)  # trials queued there, not started: sent again
        queued = self._queued(in_flight, set(where)) if resend else []
        # The board forgets them: their old entries (a dead node) must not make the watch
        # give up the attempts that replace them (the lost ones once recorded, naming it).
        self._forget([in_flight[ref][0].trial_key for ref in queued])
        if resend:
            self._dead_seen |= dead
            self._resend(ray, in_flight, queued)
        given = {}
        for ref in lost:
            spec, submitted = in_flight[ref]
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
            given[ref] = lost_result(
                spec,
                f"node {where[spec.trial_key]} stopped answering (Ray marked it dead): "
                "run again elsewhere",
                datetime.fromtimestamp(submitted, UTC),
            )
            log.warning("trial %s: %s", spec.trial_key[:16], given[ref].reason)
        if lost:
            keys = [in_flight[ref][0].trial_key for ref in lost]
            self._finish(dispatch, [(ref, *in_flight.pop(ref)) for ref in lost], given)
            self._forget(keys)

    def _cancel(self, ray: Any, in_flight: dict[Any, tuple[TrialSpec, float]]) -> None:
        """The second Ctrl-C: cancel the running trials, each recorded as interrupted (an
        infra_error, so the next run of the sweep runs it again)."""
        from datetime import UTC, datetime

        assert self._pools is not None
        for ref in in_flight:
            # A pool's trials end with their pool (an actor's calls cannot be forced).
            if not self._pools.owns(ref):
                ray.cancel(ref, force=True)
        self._pools.kill()
        lost = [
            lost_result(
                spec, "interrupted: cancelled by a second Ctrl-C", datetime.fromtimestamp(t, UTC)
            )
            for spec, t in in_flight.values()
        ]
        self._record(lost, now=True)
        for result in lost:
            self._count(result, retrying=False)
        self.tally.cancelled += len(lost)

    def _log_end(self) -> None:
        t = self.tally
        event(
            log,
            f"sweep {self.sweep.id}: {t.finished}/{t.total} final",
            event="sweep_ended",
            sweep=self.sweep.id,
            total=t.total,
            skipped=t.skipped,
            done=t.done,
            verdicts=dict(t.verdicts),
            cost_usd=round(t.cost_usd, 6),
            retries=t.retries,
            infra_errors_left=t.lost,
            interrupted=t.interrupted,
            budget_exhausted=t.budget_exhausted,
        )

    def _read_board(self, ray: Any, in_flight: list[str]) -> None:
        """Refresh the tally's view of running trials from the board, without waiting:
        one read in flight at a time, at most every `BOARD_EVERY_S`."""
        now = time.monotonic()
        assert self._pools is not None
        if self._board is None:  # every trial is the driver's own
            if now - self._board_at >= BOARD_EVERY_S:
                self._board_at = now
                running = sorted(self._pools.running(), key=lambda r: r.started)
                self.tally.board = self.tally.board.model_copy(update={"running": running})
                self.listener(self.tally, None)
            return
        if self._board_read is None:
            if now - self._board_at >= BOARD_EVERY_S:
                self._board_read, self._board_at = self._board.running.remote(in_flight), now
            return
        ready, _ = ray.wait([self._board_read], timeout=0)
        if ready:
            read, self._board_read = self._board_read, None
            with contextlib.suppress(Exception):  # a stale display, never a failed sweep
                keep = set(in_flight)  # some ended while the board answered
                running = [r for r in ray.get(read) if r.trial_key in keep]
                running += self._pools.running()  # the driver's own: never on the board
                running.sort(key=lambda r: r.started)
                self.tally.board = self.tally.board.model_copy(update={"running": running})
                self.listener(self.tally, None)

    def _gauge(self, model: str) -> None:
        self._metrics.set("in_flight", self.dispatch.per_model[model], tags={"model": model})

    def _queued(
        self, in_flight: dict[Any, tuple[TrialSpec, float]], started: set[str]
    ) -> list[Any]:
        """The trials in flight the board has not seen start (pools' aside)."""
        assert self._pools is not None
        return [
            ref
            for ref, (spec, _) in in_flight.items()
            if spec.trial_key not in started and not self._pools.owns(ref)
        ]

    def _forget(self, trial_keys: list[str]) -> None:
        """The board's entries of these trials dropped, here and in the board (a read of
        the board already asked for is ignored: it may hold them)."""
        if not trial_keys:
            return
        if self._board is not None:
            self._board.forget.remote(trial_keys)
        self._board_read = None
        gone = set(trial_keys)
        running = [r for r in self.tally.board.running if r.trial_key not in gone]
        self.tally.board = self.tally.board.model_copy(update={"running": running})

    def _resend(
        self, ray: Any, in_flight: dict[Any, tuple[TrialSpec, float]], queued: list[Any]
    ) -> None:
        """When a node dies, the trials that have not started anywhere yet may be queued
        on it, where they would wait for Ray's own retry: each is cancelled and sent
        again (the same attempt: it never ran; one queued on a live node only loses its
        place in the queue)."""
        assert self._submit is not None
        for ref in queued:
            spec, submitted = in_flight.pop(ref)
            with contextlib.suppress(Exception):
                ray.cancel(ref)
            in_flight[self._submit(spec)] = (spec, submitted)
        if queued:
            log.warning("a node died: %d trial(s) not started yet sent again", len(queued))

    def _finish(
        self,
        dispatch: Dispatch,
        done: list[tuple[Any, TrialSpec, float]],
        given: dict[Any, TrialResult] | None = None,
    ) -> None:
        """Collect the trials that came back (or take the results `given` for them),
        queue retries, record them in one commit."""
        ended = {spec.trial_key for _, spec, _ in done}
        board = self.tally.board
        where = {r.trial_key: r.node for r in board.running}  # a lost trial's node
        if ended & {r.trial_key for r in board.running}:
            running = [r for r in board.running if r.trial_key not in ended]
            self.tally.board = board.model_copy(update={"running": running})
        results = []
        assert self._pools is not None
        fetched = given or self._fetch([ref for ref, _, _ in done])
        for ref, spec, submitted in done:
            result = fetched[ref] if ref in fetched else self._collect(ref, spec, submitted)
            self._pools.done(ref)
            if result is None:  # never started (Ctrl-C): not run, the next run's to do
                dispatch.dropped(spec)
                continue
            if not result.node and spec.trial_key in where:
                result = result.model_copy(update={"node": where[spec.trial_key]})
            results.append(result)
            was_stopped = spec.model in dispatch.stopped
            if dispatch.finished(spec, result, time.monotonic()):
                self.tally.retries += 1
                self._metrics.inc("retries", tags={"model": spec.model})
            if not was_stopped and spec.model in dispatch.stopped:
                log.error(
                    "stopped scheduling model %s: %s",
                    spec.model,
                    dispatch.stopped[spec.model].message,
                )
            per_model = dispatch.per_model[spec.model]
            self._metrics.set("in_flight", per_model, tags={"model": spec.model})
        self._record(results)
        for result in results:
            self._count(result, retrying=dispatch.will_retry(result))

    def _record(self, results: list[TrialResult], *, now: bool = False) -> None:
        """Write `results` to the store with those collected before, in one commit, once
        `RECORD_EVERY_S` passed since the last (or `now`): a fast sweep of prompt trials
        collects a few results per wait, and a commit each was most of the driver's work.
        The commits are made in order by a thread of their own, so that the loop sends
        the next trials meanwhile (half its time went to them); with `now`, every commit
        asked for is made before this returns. A commit that failed raises here, at the
        next call, as it raised in the loop before."""
        self._unrecorded += results
        due = time.monotonic() - self._recorded_at >= RECORD_EVERY_S
        if now or due or len(self._unrecorded) >= RECORD_AT:
            batch, self._unrecorded = self._unrecorded, []
            assert self._writer is not None
            self._writes.append(self._writer.submit(self._write, batch))
            self._recorded_at = time.monotonic()
        while self._writes and (now or self._writes[0].done()):
            self._writes.popleft().result()

    def _write(self, results: list[TrialResult]) -> None:
        """Commit `results` (if any), then send the metrics gathered meanwhile."""
        if results:
            self.store.record(results)
        for result in results:
            result.evidence_data = None  # in the store now: not held in memory
        self._metrics.flush()

    def _over_budget(self) -> bool:
        budget = self.sweep.config.budget_usd
        return budget is not None and self.tally.spent_before + self.tally.cost_usd >= budget

    def _fetch(self, refs: list[Any]) -> dict[Any, TrialResult | None]:
        """The results of `refs` in one call to Ray; {} when one of them failed (each is
        then collected on its own, `_collect`, to say which and why)."""
        import ray

        try:
            return dict(zip(refs, results(ray, refs), strict=True))
        except Exception:  # Ray's error, or a trial of the driver's own pool raised
            return {}

    def _collect(self, ref: Any, spec: TrialSpec, submitted: float) -> TrialResult | None:
        """The trial's result (None: the board refused it a start, the sweep stopping)."""
        from datetime import UTC, datetime

        import ray
        from ray.exceptions import RayError

        try:
            result: TrialResult | None = results(ray, [ref])[0]
        except Exception as exc:
            # The task died for good (node or worker lost past its retries, cancelled), or
            # raised (here too, in the driver's own pool): the reason names the root error
            # (a task's own exception, not Ray's wrapper), and the whole report goes into
            # the evidence.
            root = getattr(exc, "cause", None) or exc
            message = str(root).strip()
            first = message.splitlines()[0] if message else ""
            where = "ray" if isinstance(exc, RayError) else "driver"
            result = lost_result(
                spec,
                f"{where}: {type(root).__name__}: {first}".rstrip(": "),
                datetime.fromtimestamp(submitted, UTC),
                details=_ANSI.sub("", getattr(exc, "traceback_str", None) or str(exc)),
            )
        return result

    def _count(self, result: TrialResult, *, retrying: bool) -> None:
        tags = {"verdict": result.verdict.value, "model": result.model, "arm": result.arm}
        self._metrics.inc("trials", tags=tags)
        self._metrics.observe(
            "duration",
            result.duration_s,
            tags={"model": result.model, "verdict": result.verdict.value},
        )
        usage = result.usage
        for kind, n in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cached_input", usage.cached_input_tokens),
            ("reasoning", usage.reasoning_tokens),
        ):
            if n:
                self._metrics.inc("tokens", n, tags={"model": result.model, "kind": kind})
        if usage.cost_usd:
            self._metrics.inc("cost", usage.cost_usd, tags={"model": result.model})
        self.tally.cost_usd += usage.cost_usd + result.judge_usage.cost_usd
        event(
            log,
            f"trial {result.trial_key[:16]} {result.verdict.value}: {result.reason}",
            event="trial_finished",
            sweep=result.sweep,
            trial_key=result.trial_key,
            scenario=result.scenario_id,
            agent=result.agent,
            model=result.model,
            arm=result.arm,
            repeat=result.repeat,
            attempt=result.attempt,
            verdict=result.verdict.value,
            reason=result.reason,
            retrying=retrying,
            duration_s=round(result.duration_s, 3),
            cost_usd=round(usage.cost_usd + result.judge_usage.cost_usd, 6),
            node=result.node,
            evidence=result.evidence_uri,
        )
        if not retrying:
            self.tally.done += 1
            self.tally.verdicts[result.verdict.value] += 1
            if not result.verdict.final:
                self.tally.lost += 1
        self.listener(self.tally, result)
