"""A size-capped file system per trial, for everything its agent can write.

The workspace and the scratch folders (HOME, /tmp, /var/tmp) are host folders mounted
into the sandbox, so without a cap one agent could fill the node's disk and break every
other trial on it. `TrialDisk` puts them on a file system of their own: a sparse file of
``limits.disk`` bytes, formatted ext4 and loop-mounted under the trial's folder. An agent
that writes past it gets ENOSPC inside the sandbox (its own outcome, a ``fail`` at
worst); the node keeps its space. The file is sparse, so a trial costs only what it
writes; it goes (unmounted, deleted) with the trial folder.

Why a loop-mounted image rather than a sized tmpfs: a tmpfs holds the repository in
memory, and its pages are charged to the memory limit of whoever writes them (the
sandbox's, so a disk limit would turn into an out-of-memory kill); docker's own
``--storage-opt size`` needs overlay2 on XFS with project quotas, which few hosts have.
Mounting needs root and loop devices: where either is missing the folders stay plain
(the limit is then recorded as not enforced, in the trial's ``disk.json``, and logged).

Formatting is on a trial's way to its sandbox (the sandbox mounts folders of the disk), so
each node keeps a spare disk of each size formatted ahead (`Spares`): a trial takes one
(a rename) and the next is formatted in the background while the trial goes on. A spare
was never mounted: nothing of another trial is on it.

A worker that dies mid-trial (or before its trial's folder was removed in the background)
cannot unmount its disk: each disk records when it expires (as the sandbox does) and
`release_expired` (run by `hangar gc` and the node's reaper) unmounts what is left and
removes its trial's folder.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from hangar.sandbox.helper import HELPER_UID

log = logging.getLogger(__name__)

#: The disk limit of a scenario that sets none.
DEFAULT_DISK = 4 * 1024**3
#: Inside the mounted disk: when it may be released (epoch seconds, as text).
EXPIRES_FILE = ".hangar-expires"
_warned = False
#: Room the agent cannot use (at most half the limit): ext4 gives its reserve to one
#: user (root by default) and to whoever has CAP_SYS_RESOURCE, which no sandbox has. Where
#: the agent is not root (a scenario's sandbox user), root is the reserve's, so hangar's
#: own writes after the agent (HOME refilled, hidden files staged) still fit when the agent
#: filled its share; where the agent may be root (an image task's), the reserve is
#: `RESERVE_UID`'s, a user no sandbox process runs as.
RESERVE = 128 * 1024**2
#: The user the reserve of a disk whose agent may be root belongs to (hangar's helper's,
#: which writes nothing to a disk).
RESERVE_UID = HELPER_UID
_LAZY = ("-E", "lazy_itable_init=1,nodiscard")


class DiskState(BaseModel):
    """What a trial's disk is, for its evidence (``disk.json``)."""

    limit: int
    """The cap in bytes."""
    enforced: bool
    """Whether the cap holds (False: plain folders on the node's disk)."""
    why: str = ""
    """Why it is not enforced."""


class Spares:
    """Disks formatted ahead on this node, one folder per geometry (size and reserve), at
    most `KEEP` each; made by one background thread per process."""

    KEEP = 2
    #: Bumped when the format's options change: older spares are not taken.
    FORMAT = "v2"

    def __init__(self, root: Path) -> None:
        self.root = root

    def _folder(self, size: int, reserved: str, owner: int) -> Path:
        return self.root / f"{self.FORMAT}-{size}-{reserved}-{owner}"

    def take(self, size: int, reserved: str, owner: int, image: Path) -> bool:
        """Move a spare of this geometry to `image`; False when there is none."""
        folder = self._folder(size, reserved, owner)
        for spare in sorted(folder.glob("*.img")) if folder.is_dir() else []:
            try:
                spare.rename(image)  # atomic: another trial that took it first wins
                return True
            except FileNotFoundError:
                continue
            except OSError:  # another file system: make it in place
                return False
        return False

    def replenish(self, size: int, reserved: str, owner: int) -> None:
        """Format a spare of this geometry in the background (unless enough are there)."""
        _background.put(lambda: self._make(size, reserved, owner))

    def _make(self, size: int, reserved: str, owner: int) -> None:
        folder = self._folder(size, reserved, owner)
        folder.mkdir(parents=True, exist_ok=True)
        if len(list(folder.glob("*.img"))) >= self.KEEP:
            return
        part = folder / f"{uuid.uuid4().hex}.part"
        if _format(part, size, reserved, owner):
            part.unlink(missing_ok=True)
            return
        part.rename(part.with_suffix(".img"))


class _Background:
    """One daemon thread that runs what it is given, in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._work: list[Callable[[], None]] = []
        self._thread: threading.Thread | None = None

    def put(self, work: Callable[[], None]) -> None:
        with self._lock:
            self._work.append(work)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._work:
                    self._thread = None
                    return
                work = self._work.pop(0)
            try:
                work()
            except Exception as exc:  # a spare not made is made in place later
                log.debug("making a spare disk failed: %s", exc)


_background = _Background()


def _format(image: Path, size: int, reserved: str, owner: int) -> str:
    """A new sparse file of `size` bytes at `image`, formatted ext4 with `reserved`
    percent for user `owner`; what failed ('' when done)."""
    with image.open("wb") as sparse:
        sparse.truncate(size)
    # No journal: the disk never outlives its trial.
    argv = ["mkfs.ext4", "-q", "-F", "-m", reserved, "-O", "^has_journal", *_LAZY, str(image)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        image.unlink(missing_ok=True)
        return f"mkfs.ext4 failed: {proc.stderr.strip() or proc.returncode}"
    if owner == 0:
        return ""
    tune = ["tune2fs", "-u", str(owner), "-g", str(owner), str(image)]
    proc = subprocess.run(tune, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        image.unlink(missing_ok=True)
        return f"tune2fs failed: {proc.stderr.strip() or proc.returncode}"
    return ""


class TrialDisk:
    """The file system a trial's workspace and scratch folders live on (see module)."""

    def __init__(
        self,
        folder: Path,
        limit: int | None,
        spares: Path | None = None,
        *,
        reserve_uid: int = 0,
    ) -> None:
        self.reserve_uid = reserve_uid
        self.image = folder / "disk.img"
        self.root = folder / "disk"
        self.state = DiskState(limit=limit or DEFAULT_DISK, enforced=False)
        self.spares = Spares(spares) if spares is not None else None

    def open(self, *, ttl_s: float) -> DiskState:
        """Make `root` (mounted when possible); it may be released after `ttl_s`."""
        self.root.mkdir(parents=True)
        why = self._mount()
        if why:
            self._warn(why)
            self.state = self.state.model_copy(update={"why": why})
        else:
            self.state = self.state.model_copy(update={"enforced": True})
            (self.root / "lost+found").rmdir()
        (self.root / EXPIRES_FILE).write_text(f"{time.time() + ttl_s:.0f}\n")
        return self.state

    def _mount(self) -> str:
        """Mount the image at `root`; what prevented it ('' when mounted)."""
        if os.geteuid() != 0:
            return "mounting a size-capped file system needs root"
        for tool in ("mkfs.ext4", "tune2fs", "mount", "umount"):  # tune2fs: e2fsprogs too
            if shutil.which(tool) is None:
                return f"{tool} is not installed (Debian: e2fsprogs, mount)"
        # The agent gets about `limit` (ext4's own tables take ~2%); root gets its reserve
        # on top (ext4 reserves at most half a file system).
        reserve = min(RESERVE, self.state.limit // 2)
        size = int(self.state.limit * 1.02) + reserve
        reserved = f"{100 * reserve / size:.4f}"
        spares = self.spares
        owner = self.reserve_uid
        if spares is None or not spares.take(size, reserved, owner, self.image):
            why = _format(self.image, size, reserved, owner)
            if why:
                return why
        if spares is not None:
            spares.replenish(size, reserved, owner)
        argv = ["mount", "-o", "loop,nosuid,nodev", str(self.image), str(self.root)]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            self.image.unlink(missing_ok=True)
            return f"mount failed: {proc.stderr.strip() or proc.returncode}"
        return ""

    def full(self) -> bool:
        """Whether the agent has (about) no room left (what root keeps apart not counted)."""
        return self.state.enforced and shutil.disk_usage(self.root).free < 1024**2

    @staticmethod
    def _warn(why: str) -> None:
        global _warned
        if not _warned:
            log.warning("trial disk limits are not enforced on this node: %s", why)
            _warned = True

    def close(self) -> None:
        """Unmount and delete the disk (idempotent). A sandbox still being removed keeps
        its own reference until it is gone (the unmount is lazy)."""
        if self.state.enforced:
            release(self.root)
            self.state = self.state.model_copy(update={"enforced": False})
        self.image.unlink(missing_ok=True)


def release(mount_point: Path) -> None:
    """Unmount `mount_point` lazily (what still uses it keeps it until done)."""
    subprocess.run(["umount", "--lazy", str(mount_point)], capture_output=True, check=False)


def release_expired(trials: Path, *, everything: bool = False) -> list[Path]:
    """Unmount the trial disks under `trials` whose expiry passed (all with
    `everything`) and remove their trials' folders (a worker that died left them);
    returns the mount points released."""
    if not trials.is_dir():
        return []
    mounted: set[Path] = set()
    with open("/proc/self/mounts") as mounts:  # noqa: PTH123 - a proc file, not a path
        for line in mounts:
            where = line.split()[1].encode().decode("unicode_escape")
            if where.startswith(f"{trials}/") and where.endswith("/disk"):
                mounted.add(Path(where))
    released: list[Path] = []
    for point in sorted(mounted):
        try:
            expires = float((point / EXPIRES_FILE).read_text())
        except (OSError, ValueError):
            expires = 0.0  # unreadable: not a reason to keep it forever
        if everything or expires <= time.time():
            release(point)
            shutil.rmtree(point.parent, ignore_errors=True)
            released.append(point)
    return released
