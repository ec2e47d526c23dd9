"""What runs where, live: a small Ray actor the trial tasks report to.

The driver knows which trials it submitted, not which have a slot yet or on which node.
Each trial task asks the sweep's `Board` to start, saying on which node (one actor call);
after the first Ctrl-C the board says no (`stop`), so a trial Ray had queued for a slot
never starts: only those already running finish. The driver reads
the board every few seconds and keeps the entries of the trials still in flight, so a
finished trial, or one killed with its node, leaves the display at once: no second call
per trial. The `Snapshot` is what the progress display shows: per-node slot use and the
longest-running trials. The board also says which node builds which image on a cold
cluster (`hangar.scheduler.builds`).
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel


def this_node() -> str:
    """This Ray node as trial results and the board name it (host / Ray node id)."""
    import socket

    import ray

    return f"{socket.gethostname()}/{ray.get_runtime_context().get_node_id()[:12]}"


def trial_label(spec: Any) -> str:
    """A trial as the live view shows it: scenario · agent · model · arm."""
    return f"{spec.task.id} · {spec.agent.name} · {spec.model} · {spec.arm}"


class Running(BaseModel):
    """One running trial."""

    trial_key: str
    label: str
    """scenario · agent · model · arm, for people."""
    node: str
    started: float
    """Unix time the task started on its node."""


class Snapshot(BaseModel):
    """The board at one moment."""

    running: list[Running] = []
    """Running trials, longest-running first."""
    slots: dict[str, int] = {}
    """Sandbox slots of each alive node (host name / Ray node id)."""

    def busy(self) -> dict[str, int]:
        """Running trials per node (every node with slots listed)."""
        counts = dict.fromkeys(self.slots, 0)
        for r in self.running:
            counts[r.node] = counts.get(r.node, 0) + 1
        return counts


class Board:
    """The Ray actor (one per sweep run); see the module docstring."""

    def __init__(self) -> None:
        from hangar.scheduler.builds import Claims, alive_nodes

        self._running: dict[str, Running] = {}
        self._stopping = False
        self._builds = Claims(alive_nodes)

    def start(self, trial_key: str, label: str, node: str) -> bool:
        """Whether the trial may start now (not after `stop`); noted as running if so."""
        if self._stopping:
            return False
        self._running[trial_key] = Running(
            trial_key=trial_key, label=label, node=node, started=time.time()
        )
        return True

    def started(self, entries: list[Running]) -> None:
        """Trials a pool started (`scheduler.pool`: told in batches, not asked)."""
        self._running.update((r.trial_key, r) for r in entries)

    def forget(self, trial_keys: list[str]) -> None:
        """Drop the entries of trials the driver gave up or sent again (their next start
        says where they run now; a stale entry would name a dead node)."""
        for key in trial_keys:
            self._running.pop(key, None)

    def stop(self) -> None:
        """No trial starts from now on (the first Ctrl-C)."""
        self._stopping = True

    def running(self, in_flight: list[str]) -> list[Running]:
        """The trials of `in_flight` that started, longest-running first; the others'
        entries are dropped (they ended)."""
        keep = set(in_flight)
        self._running = {k: r for k, r in self._running.items() if k in keep}
        return sorted(self._running.values(), key=lambda r: r.started)

    def claim_build(self, tag: str, node: str) -> str:
        """Whether `node` builds image `tag` now (`hangar.scheduler.builds`)."""
        return self._builds.claim(tag, node)

    def build_finished(self, tag: str, node: str, ok: bool) -> None:
        """`node`'s build of `tag` ended (pushed to the sweep's registry when `ok`)."""
        self._builds.finished(tag, node, ok)


def open_board(ray: Any, name: str) -> Any:
    """A new board actor for one sweep run (no CPU), pinned to the driver's node: a worker
    node that dies must not take the board with it."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return (
        ray.remote(Board)
        .options(
            name=name, namespace="hangar", num_cpus=0, get_if_exists=True, scheduling_strategy=here
        )
        .remote()
    )


def node_slots(nodes: list[dict[str, Any]], resource: str) -> dict[str, int]:
    """Sandbox slots per node, keyed like trial results' `node` (host / Ray node id)."""
    return {
        f"{n.get('NodeManagerHostname') or n.get('NodeManagerAddress')}/{n['NodeID'][:12]}": int(
            n["Resources"].get(resource, 0)
        )
        for n in nodes
    }
