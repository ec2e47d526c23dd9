"""A sandbox outlives a dead worker by about a minute, not by its whole budget: its keeper
exits when the lease stops being renewed, and the reaper removes what is left."""

from __future__ import annotations

import os
import socket
import time

import docker
import pytest

from hangar.cluster.reaper import collect_garbage
from hangar.sandbox import SandboxSpec
from hangar.sandbox.docker import DockerSandbox
from hangar.sandbox.lease import CHECK_S, STALE_S, Lease, is_stale, keeper_argv
from tests.conftest import BASE_IMAGE
from tests.services import wait_for

pytestmark = pytest.mark.docker


def test_a_lease_is_renewed_until_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("hangar.sandbox.lease.RENEW_S", 0.05)
    lease = Lease()
    past = time.time() - 10 * STALE_S
    os.utime(lease.path, (past, past))
    assert is_stale(lease.path)
    wait_for(lambda: not is_stale(lease.path), 5, "the lease to be renewed")
    lease.end()
    assert not lease.path.exists() and is_stale(lease.path)


def test_an_orphaned_sandbox_stops_and_is_collected(docker_client: docker.DockerClient) -> None:
    spec = SandboxSpec(image=BASE_IMAGE, trial="orphan", node=socket.gethostname(), ttl_s=86400)
    live = DockerSandbox(SandboxSpec(image=BASE_IMAGE, trial="alive", node=socket.gethostname()))
    orphan = DockerSandbox(spec)
    with live:
        orphan.start()
        try:
            assert orphan.exec(["sh", "-c", "sleep 600 & echo started"]).stdout == "started\n"
            lease = orphan._lease
            assert lease is not None
            # The worker dies: nobody renews the lease any more (its file stays).
            # Its renewer is stopped and joined first: one renewal already under way
            # would otherwise make the lease fresh again after we age it.
            lease._ended.set()
            lease._thread.join(timeout=10)
            assert not lease._thread.is_alive()
            past = time.time() - STALE_S - 1
            os.utime(lease.path, (past, past))
            container = docker_client.containers.get(orphan.container_id)

            def stopped() -> bool:
                try:
                    container.reload()
                except docker.errors.NotFound:
                    return True  # a node's reaper (an earlier test's Ray cluster) took it
                return container.status == "exited"

            wait_for(stopped, 4 * CHECK_S, "the orphan's keeper to exit")
            # Nothing of it runs (the agent's background sleep died with the keeper), and
            # the reaper takes it, though its expiry is a day away; the live one stays.
            # (A background reaper may have been first: the same collection either way.)
            removed = collect_garbage()
            assert [r.trial for r in removed] in (["orphan"], [])
            assert not docker_client.containers.list(
                all=True, ignore_removed=True, filters={"label": "hangar.trial=orphan"}
            )
            assert docker_client.containers.get(live.container_id).status == "running"
        finally:
            orphan.close()
    assert not docker_client.containers.list(
        all=True, ignore_removed=True, filters={"label": "hangar.trial=alive"}
    )


def test_the_keeper_needs_its_lease() -> None:
    """A keeper started without a readable lease ends at once instead of living forever."""
    import subprocess
    from pathlib import Path

    from hangar.sandbox.helper import helper_binary
    from hangar.sandbox.lease import MOUNT

    assert not Path(MOUNT).exists()
    argv = keeper_argv()
    assert argv[0] == "/run/hangar/helper"  # hangar's helper, mounted in each sandbox
    # Ends (subprocess.run raises TimeoutExpired if it sleeps on).
    proc = subprocess.run(
        [str(helper_binary()), *argv[1:]], timeout=3 * CHECK_S, capture_output=True, check=False
    )
    assert proc.returncode == 0


def test_an_expired_service_network_is_collected_and_a_live_one_kept(
    docker_client: docker.DockerClient,
) -> None:
    from hangar.sandbox.services import ServiceNetwork

    expired = SandboxSpec(image=BASE_IMAGE, trial="net-expired", ttl_s=1).labels()
    expired["hangar.expires"] = "2000-01-01T00:00:00Z"
    live = SandboxSpec(image=BASE_IMAGE, trial="net-live", ttl_s=3600).labels()
    old, new = (
        ServiceNetwork("hangar-svc-test-old", expired),
        ServiceNetwork("hangar-svc-test-new", live),
    )
    old.open()
    new.open()
    try:
        removed = collect_garbage()
        assert "net-expired" in [r.trial for r in removed]
        names = {
            n.name for n in docker_client.networks.list(filters={"label": "hangar.managed=true"})
        }
        assert "hangar-svc-test-old" not in names and "hangar-svc-test-new" in names
    finally:
        old.close()
        new.close()
