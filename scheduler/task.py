"""The Ray task that runs one trial on a worker, and how task files reach the workers.

Kept apart from the driver so that a worker process imports only what a trial needs
(the sandbox, the trial lifecycle), not the driver's results store and its SQLAlchemy.

What a kind ships beside a spec (`hangar.trials.kind.Kind.shipper`: an execution
scenario's files and repository) goes through Ray's object store: `put` puts bytes once
and wraps the reference in a list (`Shipment`), so Ray passes it to each task as it is
instead of resolving it for each (that cost a plain task's worth of CPU per trial:
`benchmarks/scale.py`); the worker fetches the bytes (`fetch`) only when its node's cache
lacks them.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Callable
from typing import Any, cast

from hangar.paths import cache_dir
from hangar.results import TrialResult
from hangar.sandbox.build_once import use_coordinator
from hangar.sandbox.warm_pool import use_warm
from hangar.scheduler.board import this_node, trial_label
from hangar.scheduler.builds import BoardCoordinator
from hangar.scheduler.metrics import metric
from hangar.scheduler.pool_actors import NodeClaimer
from hangar.trials import TrialSpec, run_trial
from hangar.trials.kind import kind_of

Shipment = list[Any]
"""``[object ref]``: a reference Ray passes as it is (a reference that is an argument
itself is fetched before the task runs, whether the node needs the object or not)."""


def put(ray: Any, data: bytes) -> Shipment:
    """`data` put into the object store once, as a `Shipment` for task arguments."""
    return [ray.put(data)]


def fetch(shipment: Shipment) -> Callable[[], bytes]:
    """The fetcher of a `Shipment` (on the worker)."""

    def get() -> bytes:
        import ray

        ref: Any = shipment[0]
        return cast(bytes, ray.get(ref))

    return get


def run_trial_task(
    spec: TrialSpec, shipped: Any = None, board: Any = None, warm: str | None = None
) -> TrialResult | None:
    """The Ray task: one trial attempt on whichever node has a slot for it.

    `shipped` is what the task's kind sent beside the spec (its `shipper`); the trial
    runs from the kind's copy of the task on this node (`localise`), never from the
    driver's paths. `board` (the sweep's `scheduler.board.Board` actor) is told where the
    trial runs, and says which node builds an image the trial needs; None when the board
    refuses it (the sweep is stopping: it never started). `warm` names the run's warm
    sandbox pools (`scheduler.warm`), where the trial may claim a started sandbox.
    """

    gauge = metric("sandboxes")
    node = socket.gethostname()
    gauge.set(1, tags={"node": node})
    where = this_node()
    if not admitted(board, spec, where):
        gauge.set(0, tags={"node": node})
        return None
    use_coordinator(BoardCoordinator(board, where) if board is not None else None)
    use_warm(_claimer(warm))
    try:
        spec = spec.model_copy(update={"node": where})
        return run_trial(spec, wait_teardown=False, localise=localiser(shipped))
    finally:
        gauge.set(0, tags={"node": node})


@functools.cache
def _claimer(prefix: str | None) -> NodeClaimer | None:
    """The claimer of the run's warm pools, one per run in this worker process."""
    return NodeClaimer(prefix) if prefix else None


def localiser(shipped: Any) -> Callable[[TrialSpec], TrialSpec]:
    """What turns a spec into this node's: its kind's copy of the task from `shipped`."""

    def localise(spec: TrialSpec) -> TrialSpec:
        cache = spec.cache_root or cache_dir()
        return kind_of(spec.task.kind).localise(spec, shipped, fetch, cache)

    return localise


def admitted(board: Any, spec: TrialSpec, where: str) -> bool:
    """Ask the sweep's board (if any) to start `spec` on node `where`: False once the
    sweep is stopping. Its end is the driver's to see (one actor call per trial: they are
    not free)."""
    if board is None:
        return True
    import ray

    try:
        started = board.start.remote(spec.trial_key, trial_label(spec), where)
        return bool(ray.get(started, timeout=60))
    except Exception:  # no board (it died with the driver's node): run the trial
        return True
