"""Removing sandboxes (and trial disks) that outlived their trial.

Every docker sandbox carries ``hangar.expires`` and a lease (`hangar.sandbox.lease`). A
trial removes its own containers in every outcome, but a worker or node that dies
mid-trial cannot: its sandboxes' keepers exit once their lease goes stale, and
`collect_garbage` removes managed containers whose lease on this machine is stale or
whose expiry has passed (or all of a sweep's, on demand), and the snapshots of sandboxes
(a shared verifier's image) and service networks whose expiry has passed. A `Reaper`
actor on every node does it every `REAP_EVERY_S` seconds, releasing the node's expired trial disks
(`hangar.sandbox.disk`) as well.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker.errors
from pydantic import BaseModel

from hangar.paths import cache_dir
from hangar.sandbox.base import (
    LABEL_EXPIRES,
    LABEL_LEASE,
    LABEL_MANAGED,
    LABEL_NODE,
    LABEL_SWEEP,
    LABEL_TRIAL,
)
from hangar.sandbox.disk import release_expired
from hangar.sandbox.docker import SNAPSHOTS, docker_client
from hangar.sandbox.lease import is_stale

log = logging.getLogger(__name__)

REAP_EVERY_S = 20.0


class RemovedSandbox(BaseModel):
    """A container `collect_garbage` removed (or would remove, on a dry run)."""

    id: str
    """Container id (short)."""
    sweep: str
    """Its sweep label."""
    trial: str
    """Its trial label."""
    expires: str
    """Its expiry label."""


def _expired(label: str, now: datetime) -> bool:
    try:
        when = datetime.strptime(label, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return True  # an unreadable expiry is not a reason to keep a container forever
    return when <= now


def _lease_stale(labels: dict[str, str]) -> bool:
    """Whether the sandbox's lease is a file of this machine that nobody renews."""
    lease = labels.get(LABEL_LEASE)
    host = labels.get(LABEL_NODE, "").split("/")[0]
    if not lease or host != socket.gethostname():
        return False  # another machine's sandbox (a shared engine): its expiry decides
    return is_stale(Path(lease))


def collect_garbage(
    *, sweep: str | None = None, everything: bool = False, dry_run: bool = False
) -> list[RemovedSandbox]:
    """Remove hangar's sandboxes whose lease is stale or expiry passed (all of them with
    `everything`).

    `sweep` limits it to one sweep's sandboxes. Containers of other programs are never
    touched: only those labelled ``hangar.managed=true``.
    """
    filters = [f"{LABEL_MANAGED}=true"] + ([f"{LABEL_SWEEP}={sweep}"] if sweep else [])
    now = datetime.now(UTC)
    removed = []
    for container in docker_client().containers.list(
        all=True, ignore_removed=True, filters={"label": filters}
    ):
        labels = container.labels or {}
        if not (everything or _expired(labels.get(LABEL_EXPIRES, ""), now) or _lease_stale(labels)):
            continue
        item = RemovedSandbox(
            id=str(container.short_id),
            sweep=labels.get(LABEL_SWEEP, ""),
            trial=labels.get(LABEL_TRIAL, ""),
            expires=labels.get(LABEL_EXPIRES, ""),
        )
        if not dry_run:
            try:
                container.remove(force=True, v=True)
            except docker.errors.NotFound:
                continue
        removed.append(item)
    removed += _collect_snapshots(filters, now, everything=everything, dry_run=dry_run)
    return removed + _collect_networks(filters, now, everything=everything, dry_run=dry_run)


def _collect_snapshots(
    filters: list[str], now: datetime, *, everything: bool, dry_run: bool
) -> list[RemovedSandbox]:
    """Snapshots of sandboxes (a shared verifier's image) whose expiry passed: a trial
    removes its own, a worker that died cannot. One a container still uses stays."""
    client = docker_client()
    return _collect_expired(
        client.images.list(name=SNAPSHOTS, filters={"label": filters}),
        lambda image: image.labels or {},
        lambda image: client.images.remove(str(image.id), noprune=False),
        now,
        everything=everything,
        dry_run=dry_run,
    )


def _collect_networks(
    filters: list[str], now: datetime, *, everything: bool, dry_run: bool
) -> list[RemovedSandbox]:
    """Service networks of trials (`hangar.sandbox.services`) whose expiry passed; one a
    container still uses stays."""
    return _collect_expired(
        docker_client().networks.list(filters={"label": filters}),
        lambda network: network.attrs.get("Labels") or {},
        lambda network: network.remove(),
        now,
        everything=everything,
        dry_run=dry_run,
    )


def _collect_expired(
    found: list[Any],
    labels_of: Callable[[Any], dict[str, str]],
    remove: Callable[[Any], object],
    now: datetime,
    *,
    everything: bool,
    dry_run: bool,
) -> list[RemovedSandbox]:
    """What of `found` (images or networks) has expired, removed (unless `dry_run`); one
    the engine will not remove (in use, or gone) is left."""
    removed = []
    for item in found:
        labels = labels_of(item)
        if not (everything or _expired(labels.get(LABEL_EXPIRES, ""), now)):
            continue
        if not dry_run:
            try:
                remove(item)
            except docker.errors.APIError:
                continue
        removed.append(
            RemovedSandbox(
                id=str(item.short_id),
                sweep=labels.get(LABEL_SWEEP, ""),
                trial=labels.get(LABEL_TRIAL, ""),
                expires=labels.get(LABEL_EXPIRES, ""),
            )
        )
    return removed


class Reaper:
    """A Ray actor pinned to one node that collects expired sandboxes there."""

    def __init__(self, every_s: float = REAP_EVERY_S) -> None:
        self.every_s = every_s
        self.removed = 0
        self._stop = threading.Event()
        threading.Thread(target=self._loop, daemon=True, name="hangar-reaper").start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.reap()

    def reap(self) -> int:
        """Collect now; returns how many containers were removed (expired trial disks of
        this node are released too)."""
        try:
            release_expired(cache_dir() / "trials")
            n = len(collect_garbage())
        except Exception as exc:
            log.warning("reaper: %s", exc)
            return 0
        self.removed += n
        return n


def ensure_reapers() -> int:
    """Start one reaper per alive sandbox node (idempotent); returns how many nodes."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    actor = ray.remote(Reaper)
    nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("hangar_sandbox")]
    for node in nodes:
        actor.options(
            name=f"hangar-reaper-{node['NodeID'][:16]}",
            namespace="hangar",
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
        ).remote()
    return len(nodes)
