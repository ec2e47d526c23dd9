"""The trial disk: a size-capped file system for what the agent writes; the node keeps
its space."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.sandbox.disk import DEFAULT_DISK, EXPIRES_FILE, TrialDisk, release_expired
from tests.require import skip_or_fail


def _mounted(point: Path) -> bool:
    return subprocess.run(["mountpoint", "-q", str(point)], check=False).returncode == 0


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[TrialDisk]:
    d = TrialDisk(tmp_path / "trial", 32 * 1024**2)
    (tmp_path / "trial").mkdir()
    state = d.open(ttl_s=60)
    try:
        if not state.enforced:
            skip_or_fail("disk", f"trial disks cannot be mounted here: {state.why}")
        yield d
    finally:
        d.close()


def write_as_agent(folder: Path, name: str, size: int) -> tuple[int, int]:
    """Write `size` bytes to `folder/name` as uid 1000 (the sandbox user); returns the
    bytes written and the errno that stopped it (0 when none did)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)  # no path walk as uid 1000
    written, error = 0, 0
    os.setegid(1000)
    os.seteuid(1000)
    try:
        out = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        chunk = b"\0" * 1024**2
        try:
            while written < size:
                written += os.write(out, chunk)
            os.fsync(out)
        except OSError as exc:
            error = exc.errno or 0
        finally:
            os.close(out)
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.close(fd)
    return written, error


def test_writes_past_the_limit_get_enospc_and_the_node_keeps_its_space(
    disk: TrialDisk, tmp_path: Path
) -> None:
    assert _mounted(disk.root)
    node_free = shutil.disk_usage(tmp_path).free
    target = disk.root / "workspace"
    target.mkdir()
    os.chown(target, 1000, 1000)
    written, error = write_as_agent(target, "big", 100 * 1024**2)
    assert error == errno.ENOSPC
    assert 24 * 1024**2 < written <= 34 * 1024**2, written  # about the limit, never more
    assert disk.full()
    # The node lost no more than the cap (other writers may come and go on the machine).
    assert node_free - shutil.disk_usage(tmp_path).free < 200 * 1024**2
    # hangar itself (root, on the host) still has room for what it writes after the agent.
    (disk.root / "after-the-agent").write_bytes(b"x" * 8 * 1024**2)
    assert write_as_agent(target, "more", 1024**2) == (0, errno.ENOSPC)


def test_close_unmounts_and_deletes(disk: TrialDisk) -> None:
    (disk.root / "file").write_text("x")
    disk.close()
    assert not _mounted(disk.root) and not disk.image.exists()
    disk.close()  # idempotent


def test_expired_disks_are_released(tmp_path: Path) -> None:
    trials = tmp_path / "trials"
    old, fresh = TrialDisk(trials / "old", None), TrialDisk(trials / "fresh", None)
    for d in (old, fresh):
        d.image.parent.mkdir(parents=True)
        if not d.open(ttl_s=3600).enforced:
            skip_or_fail("disk", f"trial disks cannot be mounted here: {d.state.why}")
    try:
        assert old.state.limit == DEFAULT_DISK
        (old.root / EXPIRES_FILE).write_text("0\n")  # its worker died long ago
        assert release_expired(trials) == [old.root]
        assert not _mounted(old.root) and _mounted(fresh.root)
        assert not (trials / "old").exists() and (trials / "fresh").is_dir()  # its folder too
        assert release_expired(trials, everything=True) == [fresh.root]
    finally:
        old.close()
        fresh.close()


def test_without_root_the_limit_is_recorded_as_not_enforced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    d = TrialDisk(tmp_path, 1024**3)
    state = d.open(ttl_s=60)
    assert not state.enforced and "needs root" in state.why
    assert d.root.is_dir() and not d.full()
    d.close()


def test_a_spare_disk_is_formatted_ahead_and_taken_by_the_next_trial(tmp_path: Path) -> None:
    """A trial's disk is made in place when no spare of its size is there, and one is
    formatted in the background; the next trial takes it (a rename, no mkfs on its way),
    gets a disk of its own that nobody mounted before, and another spare follows."""
    import time

    spares = tmp_path / "spares"

    def wait_spares(n: int) -> list[Path]:
        deadline = time.monotonic() + 30
        while len(found := sorted(spares.glob("*/*.img"))) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        return found

    first = TrialDisk(tmp_path / "a", 32 * 1024**2, spares=spares)
    (tmp_path / "a").mkdir()
    if not first.open(ttl_s=60).enforced:
        skip_or_fail("disk", f"trial disks cannot be mounted here: {first.state.why}")
    try:
        [spare] = wait_spares(1)
        inode = spare.stat().st_ino
        second = TrialDisk(tmp_path / "b", 32 * 1024**2, spares=spares)
        (tmp_path / "b").mkdir()
        assert second.open(ttl_s=60).enforced
        assert not spare.exists() and second.image.stat().st_ino == inode  # taken
        assert _mounted(second.root) and sorted(p.name for p in second.root.iterdir()) == [
            EXPIRES_FILE
        ]
        assert len(wait_spares(1)) >= 1  # the next one
        other = TrialDisk(tmp_path / "c", 64 * 1024**2, spares=spares)
        (tmp_path / "c").mkdir()
        assert other.open(ttl_s=60).enforced  # another size: made in place
        other.close()
        assert len({p.parent for p in wait_spares(2)}) == 2  # a folder per size
        second.close()
    finally:
        first.close()


@pytest.mark.docker
def test_a_root_agent_cannot_use_the_reserve_of_a_disk_given_to_another_user(
    tmp_path: Path, docker_client: object
) -> None:
    """An image task's agent may be root in its sandbox: its disk's reserve belongs to
    another user, so the agent (root, but with no capabilities) stops at its share and
    the reserve stays free."""
    from hangar.sandbox import Mount, SandboxSpec
    from hangar.sandbox.disk import RESERVE, RESERVE_UID
    from hangar.sandbox.docker import DockerSandbox
    from tests.conftest import BASE_IMAGE

    d = TrialDisk(tmp_path / "trial", 32 * 1024**2, reserve_uid=RESERVE_UID)
    (tmp_path / "trial").mkdir()
    if not d.open(ttl_s=60).enforced:
        skip_or_fail("disk", f"trial disks cannot be mounted here: {d.state.why}")
    try:
        spec = SandboxSpec(
            image=BASE_IMAGE,
            user="root",
            home="/root",
            mounts=(Mount(source=d.root, target="/fill"),),
        )
        with DockerSandbox(spec) as box:
            res = box.exec(["sh", "-c", "dd if=/dev/zero of=/fill/big bs=1M count=200; sync"])
        assert "No space left on device" in res.stderr, res
        written = (d.root / "big").stat().st_size
        assert 24 * 1024**2 < written <= 34 * 1024**2, written
        stats = os.statvfs(d.root)
        reserve = min(RESERVE, d.state.limit // 2)
        assert (stats.f_bfree - stats.f_bavail) * stats.f_frsize >= reserve * 0.9
        assert stats.f_bfree * stats.f_frsize >= reserve * 0.9  # untouched
    finally:
        d.close()
