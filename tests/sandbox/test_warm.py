"""Warm sandboxes: a trial claims one its node's pool started ahead, never one another
trial had, and a drained pool leaves no container, disk or folder behind."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from hangar.sandbox import Mount, SandboxSpec
from hangar.sandbox.disk import TrialDisk
from hangar.sandbox.docker import DockerSandbox
from hangar.sandbox.warm_pool import Ready, WarmPool, WarmTemplate, adopt, discard, use_warm
from tests.conftest import BASE_IMAGE
from tests.services import wait_for
from tests.trialkit import GOLD, Runner, bundle

pytestmark = pytest.mark.docker


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[WarmPool]:
    made = WarmPool(keep=1, work_root=tmp_path / "warm")
    yield made
    made.drain()


def _container_of(ready: Ready) -> str:
    assert isinstance(ready.sandbox, DockerSandbox)
    return ready.sandbox.container_id


def _template(tmp_path: Path) -> tuple[WarmTemplate, TrialDisk]:
    disk = TrialDisk(tmp_path / "trial", 64 * 1024**2)
    spec = SandboxSpec(
        image=BASE_IMAGE,
        sweep=f"warm-test-{tmp_path.name}",
        mounts=(Mount(source=disk.root / "workspace", target="/workspace"),),
    )
    return WarmTemplate.of("docker", None, spec, disk), disk


def test_a_claim_takes_a_started_sandbox_whose_folders_are_live(
    docker_client: docker.DockerClient, pool: WarmPool, tmp_path: Path
) -> None:
    template, _ = _template(tmp_path)
    assert pool.claim(template) is None  # the first asks for the kind
    wait_for(lambda: pool.ready() == 1, 60, "a warm sandbox to be made")
    slot = pool.claim(template)
    assert slot is not None
    container = docker_client.containers.get(slot.handle["container"])
    assert container.status == "running" and container.labels["hangar.trial"] == "warm"
    disk = slot.take_disk(0)
    sandbox = adopt(slot, template, template.spec_at(disk.root))
    try:
        # Written on the host after the container started: the mount is live.
        (disk.root / "workspace" / "task.txt").write_text("hello\n")
        assert sandbox.exec(["cat", "/workspace/task.txt"]).stdout == "hello\n"
        # Nothing ran in it before the trial but its keeper.
        procs = sandbox.exec(["sh", "-c", "ls -d /proc/[0-9]* | wc -l"]).stdout.strip()
        assert int(procs) <= 5, procs
        wait_for(lambda: pool.ready() == 1, 60, "the claimed sandbox to be replaced")
        again = pool.claim(template)
        assert again is not None and again.handle != slot.handle
        discard(again, template)
    finally:
        sandbox.close()
        disk.close()
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(slot.handle["container"])


def test_drain_removes_every_unclaimed_sandbox_and_its_disk(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    pool = WarmPool(keep=2, work_root=tmp_path / "warm")
    template, _ = _template(tmp_path)
    pool.claim(template)
    wait_for(lambda: pool.ready() == 2, 60, "two warm sandboxes to be made")
    assert pool.drain() == 2
    left = docker_client.containers.list(
        all=True,
        ignore_removed=True,
        filters={"label": [f"hangar.sweep={template.spec.sweep}", "hangar.trial=warm"]},
    )
    assert not left
    assert not list((tmp_path / "warm").iterdir())
    assert pool.claim(template) is None and pool.ready() == 0  # drained: makes no more


def test_a_trial_runs_in_a_warm_sandbox_and_leaves_nothing(
    docker_client: docker.DockerClient, run: Runner, pool: WarmPool, tmp_path: Path
) -> None:
    use_warm(pool)
    try:
        first = run(GOLD)  # asks for its kind: starts its own
        assert first.verdict == "pass", first.reason
        assert (pool.hits, pool.misses) == (0, 1)
        wait_for(lambda: pool.ready() == 1, 60, "a warm sandbox to be made")
        [slot_folder] = list((tmp_path / "warm").iterdir())
        second = run(GOLD)
    finally:
        use_warm(None)
    assert second.verdict == "pass", second.reason
    assert pool.hits == 1
    warm = json.loads(bundle(second, "warm.json"))
    assert warm["ready_s"] > 0
    # The sandbox it took and that sandbox's disk went with the trial (`run` checked its
    # own folder): its replacement is all the pool holds.
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(warm["container"])
    deadline = time.monotonic() + 30
    while slot_folder.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not slot_folder.exists()


def test_a_sandbox_kept_too_long_is_removed_not_claimed(
    docker_client: docker.DockerClient,
    pool: WarmPool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    template, _ = _template(tmp_path)
    pool.claim(template)
    wait_for(lambda: pool.ready() == 1, 60, "a warm sandbox to be made")
    [old] = [s for ready in pool._ready.values() for s in ready]
    old_id = _container_of(old)
    monkeypatch.setattr("hangar.sandbox.warm_pool.MAX_AGE_S", 0.0)
    assert pool.claim(template) is None
    wait_for(
        lambda: not docker_client.containers.list(ignore_removed=True, filters={"id": old_id}),
        30,
        "the old sandbox to be removed",
    )
    assert not old.folder.exists()


def test_a_warm_sandbox_that_died_waiting_costs_the_trial_nothing(
    docker_client: docker.DockerClient, run: Runner, pool: WarmPool
) -> None:
    use_warm(pool)
    try:
        run(GOLD)  # asks for the kind
        wait_for(lambda: pool.ready() == 1, 60, "a warm sandbox to be made")
        [slot] = [s for ready in pool._ready.values() for s in ready]
        killed = _container_of(slot)
        docker_client.containers.get(killed).kill()
        result = run(GOLD)
    finally:
        use_warm(None)
    assert result.verdict == "pass", result.reason
    warm = json.loads(bundle(result, "warm.json"))
    assert warm["container"] == killed and "lost" in warm


def test_a_warm_sandbox_outlives_its_lease_time_while_it_waits(
    docker_client: docker.DockerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pool renews the lease of what waits: a keeper whose lease went stale ends it.
    monkeypatch.setattr("hangar.sandbox.lease.STALE_S", 2)
    monkeypatch.setattr("hangar.sandbox.lease.CHECK_S", 1)
    monkeypatch.setattr("hangar.sandbox.lease.RENEW_S", 0.5)
    pool = WarmPool(keep=1, work_root=tmp_path / "warm")
    template, _ = _template(tmp_path)
    try:
        pool.claim(template)
        wait_for(lambda: pool.ready() == 1, 60, "a warm sandbox to be made")
        time.sleep(5)  # more than twice the lease's time
        slot = pool.claim(template)
        assert slot is not None
        sandbox = adopt(slot, template, template.spec_at(slot.folder / "disk"))
        try:
            assert sandbox.exec(["true"]).ok
        finally:
            sandbox.close()
            discard(slot, template)
    finally:
        pool.drain()
