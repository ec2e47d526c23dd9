"""The Ray task that runs one trial on a worker.

Kept apart from the driver so that a worker process imports only what a trial needs
(the sandbox, the trial lifecycle), not the driver's results store and its SQLAlchemy.
"""

from __future__ import annotations

import socket
from typing import Any

from hangar.kinds.execution.scenario import LoadedScenario
from hangar.kinds.execution.shipping import Shipment, receive, unpack_scenario
from hangar.paths import cache_dir
from hangar.results import TrialResult
from hangar.scheduler.metrics import metric
from hangar.trials import TrialSpec, run_trial


def run_trial_task(
    spec: TrialSpec,
    package: Shipment | None,
    repository_key: str | None,
    repository: Shipment | None,
    board: Any = None,
) -> TrialResult:
    """The Ray task: one trial attempt on whichever node has a sandbox slot.

    `package` is the scenario as the driver shipped it, `repository` (with its sha256 as
    `repository_key`) its local repository (`scheduler.shipping`: fetched only when this
    node has not unpacked them yet); the trial runs from their copies unpacked on this
    node, never from the driver's paths. `board` (the sweep's `scheduler.board.Board`
    actor) is told where the trial runs.
    """
    import ray

    gauge = metric("sandboxes")
    node = socket.gethostname()
    gauge.set(1, tags={"node": node})
    node_id = ray.get_runtime_context().get_node_id()
    shipped = (repository_key, receive(repository)) if repository_key and repository else None

    def localise(spec: TrialSpec) -> TrialSpec:
        if package is None or not isinstance(spec.scenario, LoadedScenario):
            return spec  # a decision case carries its texts with it
        cache = spec.cache_root or cache_dir()
        scenario = unpack_scenario(spec.scenario, receive(package), cache, shipped)
        return spec.model_copy(update={"scenario": scenario})

    where = f"{node}/{node_id[:12]}"
    on_board(board, spec, where)
    try:
        spec = spec.model_copy(update={"node": where})
        return run_trial(spec, wait_teardown=False, localise=localise)
    finally:
        gauge.set(0, tags={"node": node})


def on_board(board: Any, spec: TrialSpec, where: str) -> None:
    """Tell the sweep's board (if any) that `spec` runs on node `where` from now; its end
    is the driver's to see (one actor call per trial: they are not free)."""
    if board is not None:
        label = f"{spec.scenario.id} · {spec.agent.name} · {spec.model} · {spec.arm}"
        board.started.remote(spec.trial_key, label, where)
