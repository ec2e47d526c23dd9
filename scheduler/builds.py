"""Which node builds which image, kept by the sweep's board (`hangar.sandbox.build_once`).

`Claims` is the board's record: the first node to ask for a tag builds it, the others
wait until it has pushed (then pull) or until its build failed or its node died (then the
next to ask builds). `BoardCoordinator` is a worker's side: the sandbox layer's
`Coordinator`, answered by the board over Ray.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from hangar.sandbox.build_once import Answer

#: How long a claim's node is taken to be alive without asking Ray again.
ALIVE_FOR_S = 5.0


class Claims:
    """Builds under way and done, by tag (the board's; see the module docstring)."""

    def __init__(self, alive: Callable[[], set[str]]) -> None:
        """`alive`: the Ray node ids (12 characters) alive now."""
        self._alive, self._alive_at, self._alive_ids = alive, 0.0, set[str]()
        self._building: dict[str, str] = {}
        self._pushed: set[str] = set()

    def claim(self, tag: str, node: str) -> Answer:
        """`node` (host / Ray node id) asks to build `tag`."""
        if tag in self._pushed:
            return "pull"
        holder = self._building.get(tag)
        if holder is not None and holder != node and self._is_alive(holder):
            return "wait"
        self._building[tag] = node
        return "build"

    def finished(self, tag: str, node: str, ok: bool) -> None:
        """`node`'s build of `tag` ended; pushed when `ok`."""
        if self._building.get(tag) == node:
            del self._building[tag]
        if ok:
            self._pushed.add(tag)

    def _is_alive(self, node: str) -> bool:
        now = time.monotonic()
        if now - self._alive_at > ALIVE_FOR_S:
            try:
                self._alive_ids, self._alive_at = self._alive(), now
            except Exception:  # a busy GCS: the holder is taken to be alive
                return True
        return node.rsplit("/", 1)[-1] in self._alive_ids


def alive_nodes() -> set[str]:
    """Ray's alive nodes, by the 12-character id results and the board use."""
    import ray

    return {str(n["NodeID"])[:12] for n in ray.nodes() if n.get("Alive")}


class BoardCoordinator:
    """A worker's `hangar.sandbox.build_once.Coordinator`: the sweep's board, asked."""

    def __init__(self, board: Any, node: str) -> None:
        self._board, self._node = board, node

    def claim(self, tag: str) -> Answer:
        import ray

        try:
            answer: Answer = ray.get(self._board.claim_build.remote(tag, self._node), timeout=60)
        except Exception:  # no board (its driver is gone): build as if alone
            return "build"
        return answer

    def finished(self, tag: str, ok: bool) -> None:
        with contextlib.suppress(Exception):  # no board: nobody waits on it
            self._board.build_finished.remote(tag, self._node, ok)
