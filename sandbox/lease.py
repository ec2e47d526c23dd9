"""A sandbox's lease: a host file its worker keeps fresh while the trial lives.

A sandbox outlives its trial when the worker process or its node dies mid-trial: nothing
is left to remove the container. So each docker sandbox gets a lease, a file in the
node's cache that a thread of the worker touches every `RENEW_S` seconds until the
sandbox is closed. The file is mounted read-only into the container, and the keeper
(the container's first process) exits once the file is older than `STALE_S`: the
container stops, and everything in it dies with it. The reaper then removes stopped
sandboxes whose lease is stale (`hangar.cluster.reaper`), so an orphan is gone about a
minute after its worker, not at its ``hangar.expires`` (the trial's whole budget later).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from pathlib import Path

from hangar.paths import cache_dir
from hangar.sandbox.helper import helper_argv

#: How often the worker renews a lease.
RENEW_S = 5.0
#: A lease older than this is dead: its keeper exits, the reaper removes the sandbox.
STALE_S = 45
#: How often the keeper looks at its lease.
CHECK_S = 5
#: Where the lease is mounted in the sandbox.
MOUNT = "/run/hangar/lease"


def keeper_argv() -> list[str]:
    """The keeper: hangar's helper (`hangar.sandbox.helper`), live while the lease is fresh
    (a missing or unreadable lease ends it). The container's clock and the file's time are
    the same kernel's."""
    return helper_argv("keeper", MOUNT, str(STALE_S), str(CHECK_S))


def leases_dir() -> Path:
    """The node's folder of leases."""
    return cache_dir() / "leases"


def is_stale(path: Path, now: float | None = None) -> bool:
    """Whether the lease at `path` is missing or older than `STALE_S`."""
    try:
        age = (now or time.time()) - path.stat().st_mtime
    except OSError:
        return True
    return age > STALE_S


class Lease:
    """One sandbox's lease file, renewed by a daemon thread until `end()`."""

    def __init__(self, taken: Path | None = None) -> None:
        """A new lease; or, with `taken`, the lease another process handed over
        (`hand_over`), renewed from now on by this one."""
        folder = leases_dir()
        folder.mkdir(parents=True, exist_ok=True)
        self.path = taken or folder / f"{socket.gethostname()}-{uuid.uuid4().hex}"
        self.path.touch(mode=0o644)
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._renew, daemon=True, name="hangar-lease")
        self._thread.start()

    def _renew(self) -> None:
        while not self._ended.wait(RENEW_S):
            try:
                os.utime(self.path)
            except OSError:
                return  # removed under us: the sandbox is being collected

    def hand_over(self) -> None:
        """Stop renewing, leaving the file for the process that takes the lease over (it
        must within `STALE_S`, or the sandbox's keeper ends it)."""
        self._ended.set()

    def end(self) -> None:
        """Stop renewing and remove the file (idempotent)."""
        self._ended.set()
        self.path.unlink(missing_ok=True)
