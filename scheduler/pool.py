"""Trials that need no sandbox (a decision case's prompt, a rubric sample), many at once in a
few long-lived processes instead of a Ray task each.

A Ray task per prompt trial cost more than the trial: Ray starts a worker process for each
task running at once (a task of no CPU is bounded only by the window), each importing
hangar and the model SDKs, and every task is leased, scheduled and reported on its own
(`benchmarks/prompt.py`). A `TrialPool` is a threaded Ray actor: one process, started once
per sweep run, that runs every trial sent to it in a thread of its own while the others
wait on their model calls. The driver opens a few per node (`pool_places`: about one per
core, each holding at least `SHARE` trials) and sends each trial to the pool with the
fewest in flight, one actor call per trial; everything else is the trial's own path
(`hangar.trials.run_trial`: the relay's policy, metering, the evidence archive) and the
driver's (the window, caps, retries, the store). A pool's trial returns its bundle with its
result, and the driver keeps it in the results store in the commit of the result (a file
or an object per call cost more than the call).

On a cluster that is only this machine (embedded Ray, a warm head, local nodes: every node
an address of this machine's), the pool is the driver's own process instead (`DriverPool`,
`concurrency.prompt_trials`): the trials run in its threads, each handed over and handed
back without Ray, whose actor call, result object and fetch cost more CPU than the model
call they carried (`benchmarks/prompt.py`). The driver's model checks already call the
models from this process, with this environment's keys. The driver sees those trials run
itself (the board never hears of them), and no node is asked for a preflight when every
trial of the sweep is the driver's.

Each pool admits a trial only until `stop` (the first Ctrl-C): the driver never sends
more than the window, and each pool has a thread for all of them and one more, so `stop`
is never queued behind trials. Which trials run where reaches the sweep's board in
batches (`Board.started`), not a call each. A pool that dies (its node, or the second
Ctrl-C: `ray.kill`) fails its trials' calls, which the driver records as it records a
dead task's.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from concurrent import futures
from typing import Any

from hangar.cluster.nodes import POOL_RESOURCE, of_this_machine
from hangar.models import ModelSpec
from hangar.models.complete import warm_up
from hangar.models.policy import keep_own_transports
from hangar.results import TrialResult
from hangar.sandbox.build_once import use_coordinator
from hangar.scheduler.board import Running, this_node, trial_label
from hangar.scheduler.builds import BoardCoordinator
from hangar.scheduler.sweep import PromptPlace
from hangar.scheduler.task import localiser
from hangar.trials import TrialSpec, run_trial

SHARE = 8
"""In-flight trials each pool is opened for, at least: a smaller window gets fewer pools
(a process for fewer trials is not worth its start-up)."""

#: How often a pool tells the board which trials it started.
NOTE_EVERY_S = 1.0

#: How often the driver looks at its own pool's trials while it waits on Ray's.
MIXED_POLL_S = 0.02


class TrialPool:
    """The Ray actor (see the module docstring)."""

    def __init__(self, board: str | None = None, models: list[ModelSpec] | None = None) -> None:
        """`models`: the sweep's, whose SDKs the pool loads before its first trial."""
        import ray

        warm_up(models or [])
        self._board = ray.get_actor(board, namespace="hangar") if board else None
        self._stopping = False
        self._lock = threading.Lock()
        self._started: list[Running] = []
        self._node = this_node()
        if self._board is not None:
            use_coordinator(BoardCoordinator(self._board, self._node))
            threading.Thread(target=self._note_loop, daemon=True).start()

    def run(self, spec: TrialSpec, shipped: Any = None) -> TrialResult | None:
        """One trial attempt; None when the sweep is stopping (it never started)."""
        if self._stopping:
            return None
        if self._board is not None:
            with self._lock:
                self._started.append(self.running(spec))
        spec = spec.model_copy(update={"node": self._node})
        return run_trial(
            spec, wait_teardown=False, localise=localiser(shipped), results_store_bundle=True
        )

    def stop(self) -> None:
        """No trial starts from now on."""
        self._stopping = True

    def running(self, spec: TrialSpec) -> Running:
        """The board's entry of `spec`, starting now here."""
        return Running(
            trial_key=spec.trial_key, label=trial_label(spec), node=self._node, started=time.time()
        )

    def _note_loop(self) -> None:
        board = self._board
        assert board is not None
        while not self._stopping:
            time.sleep(NOTE_EVERY_S)
            with self._lock:
                started, self._started = self._started, []
            if started:
                board.started.remote(started)


class DriverPool:
    """A `TrialPool` in the driver's own process: `threads` daemon threads that run the
    trials handed to them, each trial's result a `concurrent.futures.Future` where a Ray
    pool's is an object reference (a thread still in a model call when the sweep ends
    does not hold the driver's exit). The driver sees its running trials itself
    (`running`): the board never hears of them."""

    def __init__(self, models: list[ModelSpec], threads: int) -> None:
        self.pool = TrialPool(None, models)
        self._queue: queue.SimpleQueue[tuple[futures.Future[Any], TrialSpec, Any] | None] = (
            queue.SimpleQueue()
        )
        self._running: dict[str, Running] = {}
        self.finished: queue.SimpleQueue[futures.Future[Any]] = queue.SimpleQueue()
        """Each future as its trial ends (`wait` takes them from here)."""
        self._threads = threads
        for i in range(threads):
            threading.Thread(target=self._work, name=f"hangar-pool-{i}", daemon=True).start()

    def submit(self, spec: TrialSpec, shipped: Any) -> futures.Future[Any]:
        """Run `spec` in one of the threads; its result's future."""
        future: futures.Future[Any] = futures.Future()
        self._queue.put((future, spec, shipped))
        return future

    def running(self) -> list[Running]:
        """The trials running in the threads now."""
        return list(self._running.values())

    def close(self) -> None:
        """No trial starts from now on; each thread ends after its trial."""
        self.pool.stop()
        for _ in range(self._threads):
            self._queue.put(None)

    def _work(self) -> None:
        keep_own_transports()  # 32 threads calling at once: not all on one pool's lock
        while (item := self._queue.get()) is not None:
            future, spec, shipped = item
            if not future.set_running_or_notify_cancel():
                continue
            self._running[spec.trial_key] = self.pool.running(spec)
            try:
                future.set_result(self.pool.run(spec, shipped))
            except Exception as exc:  # the driver records it as a lost trial
                future.set_exception(exc)
            finally:
                self._running.pop(spec.trial_key, None)
                self.finished.put(future)


class Pools:
    """The driver's side: the pools of one sweep run, opened on first use."""

    def __init__(
        self,
        ray: Any,
        window: int,
        board: str | None,
        node_retries: int,
        models: list[ModelSpec] | None = None,
        where: PromptPlace = "auto",
    ) -> None:
        """`board`: the name of the sweep's board actor (a handle would be kept in the
        object store for the pools' restarts); `models`: the sweep's (see `TrialPool`);
        `where`: the pools' place (`concurrency.prompt_trials`: ``auto`` is the driver's
        process when every node is this machine, the nodes otherwise)."""
        self._ray, self._window, self._board, self._retries = ray, window, board, node_retries
        self._models = models or []
        self._where = where
        self._driver: DriverPool | None = None
        self._pools: list[Any] = []
        self._load: list[int] = []
        self._of: dict[Any, int] = {}
        self._stops: list[Any] = []

    def submit(self, spec: TrialSpec, shipped: Any) -> Any:
        """Send `spec` to the least busy pool; its result's object reference."""
        if not self._pools:
            self.open()
        i = min(range(len(self._pools)), key=self._load.__getitem__)
        if self._driver is not None:
            ref = self._driver.submit(spec, shipped)
        else:
            ref = self._pools[i].run.remote(spec, shipped)
        self._load[i] += 1
        self._of[ref] = i
        return ref

    def running(self) -> list[Running]:
        """The trials running in the driver's own pool (none when the pools are Ray's:
        those are on the board)."""
        return self._driver.running() if self._driver is not None else []

    def wait(self, refs: list[Any], timeout: float) -> list[Any]:
        """`wait` on `refs`, the driver's own pool's ended trials taken as they end."""
        finished = self._driver.finished if self._driver is not None else None
        return wait(self._ray, refs, timeout, finished)

    def owns(self, ref: Any) -> bool:
        """Whether `ref` is a pool's trial (not a Ray task)."""
        return ref in self._of

    def done(self, ref: Any) -> None:
        """`ref` came back (or was given up)."""
        i = self._of.pop(ref, None)
        if i is not None:
            self._load[i] -= 1

    def stop(self) -> None:
        """Tell every pool to start nothing more (not retried: a pool that is gone starts
        nothing either)."""
        if self._driver is not None:
            self._driver.pool.stop()
            return
        self._stops += [p.stop.options(max_task_retries=0).remote() for p in self._pools]

    def kill(self) -> None:
        """End every pool (its running trials with it), once they heard `stop` (a call
        still in flight to a killed actor is reported by Ray as failed; the driver's own
        pool's threads are left to end with the process)."""
        if self._driver is not None:
            self._driver.close()
        elif self._stops:
            self._ray.wait(self._stops, num_returns=len(self._stops), timeout=2)
        for pool in self._pools if self._driver is None else []:
            self._ray.kill(pool)
        self._driver = None
        self._pools, self._load, self._of, self._stops = [], [], {}, []

    def in_driver(self, nodes: list[dict[str, Any]] | None = None) -> bool:
        """Whether the pool is (or will be) the driver's own process (`nodes`: Ray's
        node records, asked of Ray when not given)."""
        if self._where != "auto":
            return self._where == "driver"
        return all_here(self._ray.nodes() if nodes is None else nodes)

    def open(self) -> None:
        """Start the pools (their actors' processes start in the background)."""
        if self._pools:
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = self._ray.nodes()
        if self.in_driver(nodes):
            self._driver = DriverPool(self._models, self._window + 1)
            self._pools, self._load = [self._driver], [0]
            return
        places = pool_places(nodes, self._window)
        actor = self._ray.remote(TrialPool)
        offered = any(n["Resources"].get(POOL_RESOURCE) for n in nodes if n.get("Alive"))
        needs = {"resources": {POOL_RESOURCE: 1}} if offered else {}
        for node_id in places:
            here = NodeAffinitySchedulingStrategy(node_id, soft=True)
            self._pools.append(
                actor.options(
                    num_cpus=0,
                    max_concurrency=self._window + 1,
                    max_restarts=-1,
                    max_task_retries=self._retries,
                    scheduling_strategy=here,
                    **needs,
                ).remote(self._board, self._models)
            )
            self._load.append(0)


def pool_places(nodes: list[dict[str, Any]], window: int) -> list[str]:
    """The node of each pool to open: about one per core of each alive node, no more than
    the window holds at `SHARE` trials each, spread over the nodes in turn. A node without
    CPUs (a driver that joined only to drive, `hangar.cluster.nodes.join_as_driver`) gets
    none."""
    alive = [n for n in nodes if n.get("Alive", True)]
    offering = [n for n in alive if n["Resources"].get(POOL_RESOURCE)]
    alive = offering or alive  # a cluster not started by hangar offers none
    cores = [(n["NodeID"], int(n["Resources"].get("CPU", 0))) for n in alive]
    cores = [(node, c) for node, c in cores if c >= 1] or [(n["NodeID"], 1) for n in alive]
    wanted = max(1, min(sum(c for _, c in cores), -(-window // SHARE)))
    places: list[str] = []
    while len(places) < wanted:
        for node_id, c in cores:
            if places.count(node_id) < c and len(places) < wanted:
                places.append(node_id)
    return places


def all_here(nodes: list[dict[str, Any]]) -> bool:
    """Whether every alive node of the cluster is this machine (an address of its own)."""
    return all(of_this_machine(n["NodeManagerAddress"]) for n in nodes if n.get("Alive", True))


def wait(
    ray: Any,
    refs: list[Any],
    timeout: float,
    finished: queue.SimpleQueue[futures.Future[Any]] | None = None,
) -> list[Any]:
    """Those of `refs` that are ready, after waiting up to `timeout` for the first: Ray's
    object references and the driver's own pool's futures (`DriverPool`) alike, the
    futures taken from the pool's `finished` queue as they end (one there that is not
    among `refs` was given up: dropped)."""
    remote = [r for r in refs if not isinstance(r, futures.Future)]
    if len(remote) == len(refs):
        ready, _ = ray.wait(remote, num_returns=1, timeout=timeout)
        if ready:
            ready, _ = ray.wait(remote, num_returns=len(remote), timeout=0)
        return list(ready)
    assert finished is not None, "the driver's own trials come back through its pool's queue"
    wanted = set(refs)
    end = time.monotonic() + timeout
    while True:  # with Ray's too: a look at Ray's, then a short wait on the queue
        found = list(ray.wait(remote, num_returns=len(remote), timeout=0)[0]) if remote else []
        wait_s = 0.0 if found else min(MIXED_POLL_S if remote else timeout, end - time.monotonic())
        with contextlib.suppress(queue.Empty):
            found.append(finished.get(timeout=wait_s) if wait_s > 0 else finished.get_nowait())
            while True:
                found.append(finished.get_nowait())
        found = [r for r in found if r in wanted]
        if found or time.monotonic() >= end:
            return found


def results(ray: Any, refs: list[Any]) -> list[Any]:
    """The values of ready `refs` (see `wait`); raises as `ray.get` does or the trial did."""
    remote = [r for r in refs if not isinstance(r, futures.Future)]
    got = iter(ray.get(remote) if remote else [])
    return [r.result() if isinstance(r, futures.Future) else next(got) for r in refs]
