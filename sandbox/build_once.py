"""One build per image on a cold cluster.

Nodes share what they build through the sweep's registry (`hangar.sandbox.task_images`,
`hangar.sandbox.bundles`): a node pulls what another pushed, else builds and pushes. On
a cold cluster every node misses at once, so without more each would build the same
image and push its own (different image ids under one tag). A `Coordinator` (the
sweep's board, `hangar.scheduler.builds`, set on each worker by the trial task) says
which node builds a tag: the first to ask builds it; the others wait, then pull what it
pushed. A builder that fails, or whose node dies, lets the next one build. Without a
coordinator (one machine, no registry) a node just builds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal, Protocol, TypeVar

T = TypeVar("T")

Answer = Literal["build", "wait", "pull"]
#: How often a waiting node asks again.
WAIT_EVERY_S = 2.0


class Coordinator(Protocol):
    """Who builds which tag, cluster-wide."""

    def claim(self, tag: str) -> Answer:
        """``build`` (this node builds `tag` now), ``wait`` (another node is building it)
        or ``pull`` (another node built and pushed it)."""
        ...

    def finished(self, tag: str, ok: bool) -> None:
        """This node's build of `tag` ended (pushed when `ok`)."""
        ...


_coordinator: Coordinator | None = None


def use_coordinator(coordinator: Coordinator | None) -> None:
    """The coordinator this process's builds ask (None: each node builds what it lacks)."""
    global _coordinator
    _coordinator = coordinator


def built_once(
    tag: str,
    pull: Callable[[], T | None],
    build: Callable[[], T],
    *,
    wait_s: float,
    coordinator: Coordinator | None = None,
) -> T:
    """What `pull` gets from the registry; else what `build` makes (and pushes), when the
    coordinator (by default the process's) says this node builds it; else, once the
    builder has pushed it, what `pull` gets then. A node that waited `wait_s` (the build's
    own timeout) builds."""
    found = pull()
    if found is not None:
        return found
    coordinator = coordinator or _coordinator
    if coordinator is None:
        return build()
    deadline = time.monotonic() + wait_s
    while True:
        answer = coordinator.claim(tag)
        if answer == "pull":
            found = pull()
            return found if found is not None else _build(coordinator, tag, build)
        if answer == "build" or time.monotonic() > deadline:
            return _build(coordinator, tag, build)
        time.sleep(WAIT_EVERY_S)


def _build(coordinator: Coordinator, tag: str, build: Callable[[], T]) -> T:
    ok = False
    try:
        built = build()
        ok = True
        return built
    finally:
        coordinator.finished(tag, ok)
