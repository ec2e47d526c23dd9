"""The warm sandbox pools of a sweep run: one Ray actor per node with sandbox slots.

Each holds a `hangar.sandbox.warm_pool.WarmPool` of that node, named after the run and the
node, so that a trial's task finds its own node's (`NodeClaimer`). The driver opens them
with the run's first sandboxed trial (`WarmPools.open` says how many of each kind of
sandbox each keeps) and drains and ends them when the run ends (`WarmPools.close`); a
pool that dies with its node or with the driver leaves its sandboxes to the reaper, as a
dead worker does.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from hangar.paths import cache_dir
from hangar.sandbox.warm_pool import WarmPool, WarmSlot, WarmTemplate

log = logging.getLogger(__name__)

#: Seconds a trial waits for its node's pool to answer a claim (then starts its own).
CLAIM_S = 10.0


def pool_name(prefix: str, node_id: str) -> str:
    """The actor name of the pool of node `node_id` in the run named `prefix`."""
    return f"{prefix}-{node_id[:16]}"


class NodePool(WarmPool):
    """The Ray actor: the node's `WarmPool`, in the node's trial folders."""

    def __init__(self, keep: int) -> None:
        super().__init__(keep, cache_dir() / "trials", cache_dir() / "disks")


class NodeClaimer:
    """A trial's way to its node's pool (`hangar.sandbox.warm_pool.use_warm`)."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._actor: Any = None

    def claim(self, template: WarmTemplate) -> WarmSlot | None:
        import ray

        if self._actor is None:
            node_id = ray.get_runtime_context().get_node_id()
            self._actor = ray.get_actor(pool_name(self._prefix, node_id), namespace="hangar")
        slot: WarmSlot | None = ray.get(self._actor.claim.remote(template), timeout=CLAIM_S)
        return slot


class WarmPools:
    """The driver's side: the run's pools, opened on the nodes with sandbox slots."""

    def __init__(self, ray: Any, prefix: str) -> None:
        self._ray, self.prefix = ray, prefix
        self._pools: list[Any] = []

    @property
    def opened(self) -> bool:
        """Whether some node has a pool."""
        return bool(self._pools)

    def open(
        self, nodes: list[tuple[str, int, float]], window: int, keep: int | None = None
    ) -> None:
        """A pool on each of `nodes` (Ray node id, sandbox slots, CPUs) that keeps `keep`
        of a kind; by default as many as the node has slots (at most `window`) where it
        has more CPUs than slots, and none where it has not: a pool makes its sandboxes
        on cores the running trials leave, and on a node they fill it only adds work
        (`benchmarks/overhead.py`)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actor = self._ray.remote(NodePool)
        for node_id, slots, cpus in nodes:
            kept = keep if keep is not None else (min(slots, window) if cpus > slots else 0)
            if kept < 1 or slots < 1:
                continue
            here = NodeAffinitySchedulingStrategy(node_id, soft=False)
            self._pools.append(
                actor.options(
                    name=pool_name(self.prefix, node_id),
                    namespace="hangar",
                    num_cpus=0,
                    max_concurrency=window + 4,
                    scheduling_strategy=here,
                ).remote(kept)
            )

    def close(self, wait_s: float = 120.0) -> int:
        """Drain every pool (its unclaimed sandboxes removed) and end it: how many
        sandboxes were removed. A pool that does not answer is ended all the same."""
        drained = [pool.drain.remote() for pool in self._pools]
        removed = 0
        try:
            removed = sum(self._ray.get(drained, timeout=wait_s))
        except Exception as exc:  # a dead node's pool: its reaper removes what it left
            log.warning("a warm pool was not drained: %s", exc)
        for pool in self._pools:
            with contextlib.suppress(Exception):  # gone with its node already
                self._ray.kill(pool)
        self._pools = []
        return removed
