"""Attaching this process to Ray: the cluster it names, this machine's local head, or an
embedded node, and what the attached cluster offers (its sandbox slots, its nodes).

`connect` is what a sweep's driver calls first (`hangar.scheduler.driver`); `detach` what
a command calls when it ends; the local head itself is `hangar.cluster.local_head`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from hangar.cluster.nodes import join_as_driver, node_resources
from hangar.errors import ClusterError, RayUnavailable

log = logging.getLogger(__name__)

#: The Ray resource a node offers per sandbox slot.
SANDBOX_RESOURCE = "hangar_sandbox"

EMBEDDED = "embedded"
"""`address` that always starts an embedded Ray, even beside a warm local head."""


#: What this process attached Ray to (`connect`): the address asked for and the
#: environment variables the trials needed then.
_ATTACHED: dict[str, Any] = {}


def connect(address: str | None, slots: int, needs: tuple[str, ...] = ()) -> int:
    """Attach to `address`, else to this machine's warm head (`hangar cluster start
    --head`, or the one `hangar run` keeps warm, started here if need be: `needs` names
    the environment variables the sweep's trials need as this process has them), else
    start an embedded Ray (also when `address` is ``embedded``); returns the cluster's
    sandbox slots."""
    # Ray's token auth is on, embedded or not (nodes started by `hangar cluster` use it
    # too). Said explicitly, so Ray does not warn about its default at every run; Ray
    # reads the mode when it is imported, so this must come first.
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    import ray

    if ray.is_initialized():
        # Initialised by the caller (a test, a notebook): used as it is. Attached by an
        # earlier sweep of this process: used again unless this sweep names another
        # address or needs a variable that attachment's workers were not started with.
        had = _ATTACHED.get("needs", set())
        if "address" not in _ATTACHED or (_ATTACHED["address"] == address and set(needs) <= had):
            total = int(ray.cluster_resources().get(SANDBOX_RESOURCE, 0))
            if total:
                return total
            raise RayUnavailable("the running Ray has no hangar_sandbox resource")
        missing = sorted(set(needs) - had)
        why = f"it needs {', '.join(missing)}" if missing else f"it names {address}"
        log.warning("attaching Ray again for this sweep (%s, which the last one lacked)", why)
        ray.shutdown()
    _ATTACHED.clear()
    original = address
    node_ip = None
    if address is None and (warm := _warm_head(slots, needs)) is not None:
        address, node_ip = warm
    try:
        if address in (None, EMBEDDED):
            _start_embedded(ray, slots)
        else:
            # A cluster on this machine's loopback (tests, one-box clusters): the driver's
            # node is on loopback too, or Ray looks for it on the public interface.
            local = urlparse(f"//{address}").hostname in ("127.0.0.1", "localhost")
            own = node_ip is None and "://" not in address  # not a Ray Client address
            if own:
                node_ip, leave = join_as_driver(address)
                if leave is not None:  # this machine was no node: now one without slots
                    atexit.register(_leave, ray, leave)
                    log.warning(
                        "this machine joined the cluster at %s as a node without slots "
                        "(a driver runs on a node); it leaves when the run ends",
                        address,
                    )
            ray.init(
                address=address,
                logging_level=logging.WARNING,
                log_to_driver=False,
                _node_ip_address=node_ip or ("127.0.0.1" if local else None),
            )
    except Exception as exc:
        where = address if address not in (None, EMBEDDED) else "an embedded node"
        raise RayUnavailable(f"cannot start or reach Ray at {where}: {exc}") from exc
    _ATTACHED.update(address=original, needs=set(needs))
    total = _sandbox_slots(ray, wait_s=30.0 if node_ip == "127.0.0.1" else 0.0)
    if not total:
        raise RayUnavailable(
            f"no node of the Ray cluster at {address} offers {SANDBOX_RESOURCE}: start nodes "
            "with `hangar cluster start --head` / `hangar cluster join ADDRESS`"
        )
    return total


def detach() -> None:
    """Leave Ray now if this process attached it (`connect`). Left to the interpreter's
    exit, Ray first sleeps half a second for its workers' log lines, which hangar never
    has it print (``log_to_driver`` is off): a command's last half second."""
    ray = sys.modules.get("ray")
    if _ATTACHED and ray is not None and ray.is_initialized():
        ray.shutdown()
    _ATTACHED.clear()


def _leave(ray: Any, leave: Callable[[], None]) -> None:
    """At exit: this driver's node leaves the cluster once the driver is detached."""
    with contextlib.suppress(Exception):
        ray.shutdown()
    leave()


def _warm_head(slots: int, needs: tuple[str, ...]) -> tuple[str, str] | None:
    """(address, node IP) of this machine's warm head, started if need be; None: embedded."""
    from hangar.cluster.local_head import ensure_warm, record

    before = record()
    try:
        warm = ensure_warm(slots, needs)
    except ClusterError as exc:
        log.warning("no warm Ray head (%s): an embedded Ray for this run", exc)
        return None
    if warm is None:
        return None
    head = record() or {}
    if not head.get("auto"):
        how = "started by `hangar cluster start`; `hangar cluster stop` to go back to an "
        how += "embedded Ray per run"
    elif before is not None and before.get("keeper") == head.get("keeper"):
        how = "kept warm by an earlier `hangar run`"
    else:
        how = (
            f"started now and kept warm for later runs, stopped after {head.get('idle_s')} s "
            "idle; HANGAR_WARM_HEAD=0 for an embedded Ray per run"
        )
    log.warning("attached to the local Ray head at %s (%s)", warm[0], how)
    return warm


def _sandbox_slots(ray: Any, wait_s: float) -> int:
    """The cluster's sandbox slots (waiting up to `wait_s` for a head just started)."""
    deadline = time.monotonic() + wait_s
    while True:
        total = int(ray.cluster_resources().get(SANDBOX_RESOURCE, 0))
        if total or time.monotonic() >= deadline:
            return total
        time.sleep(0.2)


def _start_embedded(ray: Any, slots: int) -> None:
    # Ray runs workers at nice 15 by default; a trial worker drives the container engine
    # and should not queue behind it (hangar cluster nodes do the same).
    os.environ.setdefault("RAY_worker_niceness", "0")
    # Listen on loopback only; a laptop's sweep is nobody else's business.
    ray.init(
        address="local",  # a new node, even when this machine runs another Ray
        resources=node_resources(slots),
        include_dashboard=False,
        logging_level=logging.WARNING,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )


def announce_metrics(nodes: list[dict[str, Any]]) -> None:
    """Write the nodes' metrics endpoints where Prometheus finds them (`cluster.metrics`);
    a file that cannot be written costs a warning, never the sweep."""
    from hangar.cluster.metrics import targets, write_discovery

    try:
        write_discovery(targets(nodes))
    except OSError as exc:
        log.warning("cannot write the Prometheus discovery file: %s", exc)


def sandbox_nodes() -> list[dict[str, Any]]:
    """Ray's records of the alive nodes that offer sandbox slots."""
    import ray

    return [n for n in ray.nodes() if n["Alive"] and n["Resources"].get(SANDBOX_RESOURCE)]
