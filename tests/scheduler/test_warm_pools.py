"""A sweep on docker through Ray: its trials take the sandboxes their node's warm pool
started ahead, and the run's end leaves no warm sandbox, disk or folder behind."""

from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path

import docker
import pytest

from hangar.paths import cache_dir
from tests.scheduler.test_driver import go, write_sweep

pytestmark = [pytest.mark.ray, pytest.mark.docker, pytest.mark.slow]


def _warm_claims(evidence: Path) -> list[dict[str, object]]:
    claims = []
    for bundle in evidence.rglob("bundle.tar.gz"):
        with tarfile.open(bundle) as tar:
            if "warm.json" in tar.getnames():
                member = tar.extractfile("warm.json")
                assert member is not None
                claims.append(json.loads(member.read()))
    return claims


def _warm_folders() -> list[Path]:
    trials = cache_dir() / "trials"
    return list(trials.glob("warm-*")) if trials.is_dir() else []


@pytest.mark.parametrize("keep", [2, 0, None])
def test_trials_claim_warm_sandboxes_and_the_run_drains_them(
    ray_local: None, docker_client: docker.DockerClient, tmp_path: Path, keep: int | None
) -> None:
    sweep = f"warm{keep}"
    path = write_sweep(
        tmp_path,
        id=sweep,
        agents={"ok": {"command": "echo hello > out.txt"}},
        arms={"control": []},
        repeats=6,
        backend="docker",
        concurrency={"sandbox_slots": 2, "warm_sandboxes": keep},
    )
    before = set(_warm_folders())
    tally, _ = go(path)
    assert tally.verdicts == {"pass": 6}
    claims = _warm_claims(tmp_path / "evidence")
    if not keep:  # none asked for, or a node of 2 CPUs and 2 slots: no pool
        assert not claims
    else:
        # The first trials ask for the kind; later ones take what the pool made.
        assert claims and all("ready_s" in c for c in claims), claims
        ids = [str(c["container"]) for c in claims]
        assert len(set(ids)) == len(ids), "a warm sandbox served two trials"

    def left() -> list[object]:
        labelled = {"label": f"hangar.sweep={sweep}"}
        containers = docker_client.containers.list(all=True, ignore_removed=True, filters=labelled)
        return [*containers, *(set(_warm_folders()) - before)]

    # Trials' sandboxes and folders go after their results, in the background.
    deadline = time.monotonic() + 30
    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left(), "a sandbox or a warm disk outlived the run"
