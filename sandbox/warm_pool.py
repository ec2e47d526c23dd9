"""Warm sandboxes: started ahead of need on a node, each claimed by one trial.

A trial's sandbox used to be created and started on its way to the agent (in the
background while its workspace was made, but still a few tenths of a second of the
container engine's work between the trial's start and its agent's first command). A
node's `WarmPool` keeps a few started ahead for each kind of sandbox the run's trials
have asked for, so that a trial takes one that is ready instead.

What makes a sandbox of one kind is its `WarmTemplate`: the trial's own `SandboxSpec`
(image, limits, user, read-only root, the agent's read-only mounts) with the trial's
folders (workspace, HOME, /tmp, /var/tmp: every mount source on the trial's disk) named
relative to the disk. A warm sandbox is made with a size-capped disk of its own
(`TrialDisk`, as a trial's), those folders on it, empty, and the container started with
them mounted; the mounts are live, so what the trial later puts in the folders is what
the sandbox sees. The trial that claims it takes the disk as its own disk and the
container as its own sandbox (`Sandbox.hand_over` and `Sandbox.adopt`: the container's
lease passes from the pool's process to the trial's); nothing in it ran before.

A claimed sandbox is never given to another trial: the trial closes it as it closes any
of its sandboxes. The pool of a run is drained (every unclaimed sandbox removed and its
disk released) when the run ends; a pool whose process dies stops renewing the leases,
and the node's reaper removes the containers and the disks as it removes a dead
worker's. A kind that cannot use one (its sandbox spec is made after the disk) asks for
none; a backend that cannot hand a started sandbox to another process (`Sandbox.warm`)
has none.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from hangar.sandbox import Sandbox, SandboxSpec, create_sandbox, sandbox_class
from hangar.sandbox.disk import DiskState, TrialDisk

log = logging.getLogger(__name__)

#: Where a template's folders on the disk are said to be (never a real path).
DISK = Path("/hangar-warm-disk")
#: A kind of sandbox nobody claimed for this long has its warm sandboxes removed.
IDLE_S = 60.0
#: A warm sandbox older than this is never claimed (its expiry, counted from its start,
#: has a trial's slack of 900 s: `hangar.kinds.execution.scenarios.trial`), but removed.
MAX_AGE_S = 300.0


@dataclass(frozen=True)
class WarmTemplate:
    """What a warm sandbox of one kind is made of (see the module docstring)."""

    backend: str
    config: BaseModel | None
    spec: SandboxSpec
    """The trial's spec with its disk's folders under `DISK` and trial ``warm``."""
    disk_limit: int | None
    reserve_uid: int

    @classmethod
    def of(
        cls, backend: str, config: BaseModel | None, spec: SandboxSpec, disk: TrialDisk
    ) -> WarmTemplate:
        """The template of `spec`, a sandbox of the trial whose disk is `disk`."""
        return cls(
            backend,
            config,
            _moved(spec, disk.root, DISK).model_copy(update={"trial": "warm"}),
            disk.state.limit,
            disk.reserve_uid,
        )

    @property
    def key(self) -> str:
        """Two templates of one key make interchangeable sandboxes (a sweep's name is
        only a label: a run's pool serves one sweep)."""
        data = {
            "backend": self.backend,
            "config": self.config.model_dump(mode="json") if self.config else None,
            "spec": self.spec.model_dump(mode="json", exclude={"sweep"}),
            "disk": [self.disk_limit, self.reserve_uid],
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:24]

    def spec_at(self, root: Path) -> SandboxSpec:
        """The spec of a sandbox whose disk is mounted at `root`."""
        return _moved(self.spec, DISK, root)


def _moved(spec: SandboxSpec, old: Path, new: Path) -> SandboxSpec:
    mounts = tuple(
        m.model_copy(update={"source": new / m.source.relative_to(old)})
        if m.source.is_relative_to(old)
        else m
        for m in spec.mounts
    )
    return spec.model_copy(update={"mounts": mounts})


@dataclass(frozen=True)
class WarmSlot:
    """A started sandbox and its disk, made by a pool, waiting for a trial."""

    key: str
    folder: Path
    """The folder of its disk (``disk.img`` and the mount point ``disk``)."""
    disk: DiskState
    handle: dict[str, str]
    """What `Sandbox.adopt` takes."""
    made: float

    def take_disk(self, reserve_uid: int) -> TrialDisk:
        """The slot's disk, open and mounted, as the claiming trial's disk."""
        disk = TrialDisk(self.folder, self.disk.limit, reserve_uid=reserve_uid)
        disk.state = self.disk
        return disk


@dataclass
class Ready:
    """A warm sandbox in its pool, unclaimed: the pool's process renews its lease (a
    keeper whose lease went stale would end it) until a claim hands it over."""

    key: str
    folder: Path
    disk: DiskState
    sandbox: Sandbox
    made: float

    def claimed(self) -> WarmSlot:
        """The sandbox handed over, for the claiming trial to adopt."""
        return WarmSlot(self.key, self.folder, self.disk, self.sandbox.hand_over(), self.made)

    def discard(self) -> None:
        """Remove the sandbox and release its disk."""
        try:
            self.sandbox.close()
        except Exception as exc:  # the reaper removes it
            log.debug("a warm sandbox was not removed: %s", exc)
        finally:
            _release(self.folder, self.disk)


def make_ready(template: WarmTemplate, work_root: Path, spares: Path | None) -> Ready:
    """A new warm sandbox of `template`: its disk open, its folders made, started."""
    folder = work_root / f"warm-{uuid.uuid4().hex[:12]}"
    disk = TrialDisk(folder, template.disk_limit, spares, reserve_uid=template.reserve_uid)
    try:
        state = disk.open(ttl_s=template.spec.ttl_s)
        spec = template.spec_at(disk.root)
        for mount in spec.mounts:
            if mount.source.is_relative_to(disk.root):
                mount.source.mkdir(parents=True, exist_ok=True)
        sandbox = create_sandbox(template.backend, spec, template.config)
        try:
            sandbox.start()
        except BaseException:
            sandbox.close()
            raise
    except BaseException:
        _release(folder, disk.state)
        raise
    return Ready(template.key, folder, state, sandbox, time.time())


def _release(folder: Path, state: DiskState) -> None:
    """Unmount and delete a warm sandbox's disk, and remove its folder."""
    disk = TrialDisk(folder, state.limit)
    disk.state = state
    disk.close()
    shutil.rmtree(folder, ignore_errors=True)


def discard(slot: WarmSlot, template: WarmTemplate) -> None:
    """Remove a claimed warm sandbox that no trial adopted, and release its disk."""
    try:
        cls = sandbox_class(template.backend)
        cls.adopt(template.spec_at(slot.folder / "disk"), slot.handle, template.config).close()
    except Exception as exc:  # gone already: its lease goes with it
        log.debug("a warm sandbox was gone before it was removed: %s", exc)
        Path(slot.handle.get("lease", "/nonexistent")).unlink(missing_ok=True)
    finally:
        _release(slot.folder, slot.disk)


class Claimer(Protocol):
    """Where this process's trials claim warm sandboxes (the node's pool)."""

    def claim(self, template: WarmTemplate) -> WarmSlot | None:
        """A warm sandbox of `template`, or None; either way the pool keeps some of its
        kind warm from now on."""
        ...


_claimer: Claimer | None = None


def use_warm(claimer: Claimer | None) -> None:
    """The pool this process's trials claim from (None: every trial starts its own)."""
    global _claimer
    _claimer = claimer


def claim(template: WarmTemplate) -> WarmSlot | None:
    """A warm sandbox of `template` from this process's pool, if it has one ready."""
    if _claimer is None or not sandbox_class(template.backend).warm:
        return None
    try:
        return _claimer.claim(template)
    except Exception as exc:  # a pool that is gone: the trial starts its own
        log.debug("no warm sandbox: %s", exc)
        return None


def adopt(slot: WarmSlot, template: WarmTemplate, spec: SandboxSpec) -> Sandbox:
    """The claimed slot's sandbox as a sandbox of `spec` (the claiming trial's)."""
    return sandbox_class(template.backend).adopt(spec, slot.handle, template.config)


class WarmPool:
    """A node's warm sandboxes: `keep` of each kind claimed lately, made by one thread.

    A kind is asked for by its first claim (which finds none); the pool then keeps
    `keep` of it ready (a claim starts the making of its replacement), at most
    `2 * keep` over all kinds (the least lately claimed kind's go first), until `drain`.
    """

    def __init__(self, keep: int, work_root: Path, spares: Path | None = None) -> None:
        self.keep, self.work_root, self.spares = max(1, keep), work_root, spares
        self._lock = threading.Condition()
        self._templates: dict[str, WarmTemplate] = {}
        self._ready: dict[str, deque[Ready]] = {}
        self._making: dict[str, int] = {}
        self._claimed: dict[str, float] = {}
        self._failed: set[str] = set()
        self._queue: deque[str] = deque()
        self._draining = False
        self.hits = self.misses = 0
        threading.Thread(target=self._fill_loop, daemon=True, name="hangar-warm").start()

    def claim(self, template: WarmTemplate) -> WarmSlot | None:
        """A ready sandbox of `template`'s kind (None: none is), and more made."""
        key = template.key
        with self._lock:
            if self._draining:
                return None
            self._templates[key] = template
            self._claimed[key] = time.monotonic()
            ready = self._ready.setdefault(key, deque())
            stale = []
            while ready and time.time() - ready[0].made > MAX_AGE_S:
                stale.append(ready.popleft())
            if stale:
                threading.Thread(target=_discard_all, args=(stale,), daemon=True).start()
            taken = ready.popleft() if ready else None
            if taken is None:
                self.misses += 1
            else:
                self.hits += 1
            self._top_up(key)
        return taken.claimed() if taken is not None else None

    def ready(self) -> int:
        """Sandboxes ready now, of every kind."""
        with self._lock:
            return sum(len(r) for r in self._ready.values())

    def drain(self, wait_s: float = 120.0) -> int:
        """Make no more; remove every unclaimed sandbox (once those being made are done):
        how many were removed."""
        with self._lock:
            self._draining = True
            for key in self._queue:  # queued, never begun
                self._making[key] -= 1
            self._queue.clear()
            deadline = time.monotonic() + wait_s
            while any(self._making.values()) and time.monotonic() < deadline:
                self._lock.wait(0.5)
            left = [r for ready in self._ready.values() for r in ready]
            self._ready.clear()
        _discard_all(left)
        return len(left)

    def _top_up(self, key: str) -> None:
        """Queue the making of `key`'s sandboxes up to `keep` (lock held)."""
        if key in self._failed:
            return
        wanted = self.keep - len(self._ready[key]) - self._making.get(key, 0)
        for _ in range(max(0, wanted)):
            self._making[key] = self._making.get(key, 0) + 1
            self._queue.append(key)
        self._lock.notify_all()

    def _fill_loop(self) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    self._lock.wait(IDLE_S / 4)
                    self._retire_idle()
                key = self._queue.popleft()
                template = self._templates[key]
                evicted = self._make_room(key)
            _discard_all(evicted)
            self._make(key, template)

    def _make(self, key: str, template: WarmTemplate) -> None:
        try:
            made: Ready | None = make_ready(template, self.work_root, self.spares)
        except Exception as exc:  # this kind is made by its trials from now on
            log.warning("a warm sandbox could not be made (%s): trials start their own", exc)
            made = None
        with self._lock:
            self._making[key] -= 1
            if made is None:
                self._failed.add(key)
            elif not self._draining:
                self._ready.setdefault(key, deque()).append(made)
                made = None
            self._lock.notify_all()
        if made is not None:  # made while the pool drained
            made.discard()

    def _make_room(self, key: str) -> list[Ready]:
        """Sandboxes of the least lately claimed other kinds, taken out so that the pool
        holds at most `2 * keep` (lock held)."""
        evicted: list[Ready] = []
        others = sorted((k for k in self._ready if k != key), key=self._claimed.__getitem__)
        total = sum(len(r) for r in self._ready.values()) + sum(self._making.values())
        for other in others:
            while total > 2 * self.keep and self._ready[other]:
                evicted.append(self._ready[other].popleft())
                total -= 1
        return evicted

    def _retire_idle(self) -> None:
        """Take out the sandboxes of kinds nobody claimed for `IDLE_S` (lock held); they
        are removed on another thread."""
        now = time.monotonic()
        idle: list[Ready] = []
        for key, ready in self._ready.items():
            if now - self._claimed.get(key, now) > IDLE_S:
                idle += ready
                ready.clear()
        if idle:
            threading.Thread(target=_discard_all, args=(idle,), daemon=True).start()


def _discard_all(sandboxes: list[Ready]) -> None:
    for ready in sandboxes:
        ready.discard()
