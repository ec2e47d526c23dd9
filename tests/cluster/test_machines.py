"""The clusters guide on machines that share only a network (tests/machines.py): a head
that is also the services machine, a worker, and a driver that is not a node."""

from __future__ import annotations

import json
import shlex
from collections import Counter
from pathlib import Path

import pytest

from tests.machines import (
    CHECK,
    S3_PORT,
    Machines,
    guide_steps,
    write_sweep,
)
from tests.require import skip_or_fail

pytestmark = [pytest.mark.docker, pytest.mark.ray, pytest.mark.slow]

STORE = "postgresql+psycopg://hangar:hangar@services/hangar"


@pytest.fixture(scope="module")
def cluster(docker_client: object, tmp_path_factory: pytest.TempPathFactory) -> Machines:
    from hangar.paths import cache_dir
    from tests.machines import machine_image, wheelhouse

    try:
        machine_image()
        wheels = wheelhouse(cache_dir() / "machines")
    except Exception as exc:  # no Debian mirror or PyPI for the machine image or wheels
        skip_or_fail("machines", f"cannot make the machines (image or wheelhouse): {exc}")
    names = {"head": {"head", "node", "services"}, "worker": {"node"}, "driver": {"driver"}}
    harness = Machines(names, tmp_path_factory.mktemp("machines"))
    try:
        try:
            harness.up(wheels)
        except (RuntimeError, TimeoutError) as exc:  # e.g. no docker engine inside a container
            skip_or_fail("machines", f"cannot start machines with engines of their own: {exc}")
        yield harness
    finally:
        harness.down()


def test_the_guide_runs_verbatim_and_a_driver_off_the_cluster_runs_a_mixed_sweep(
    cluster: Machines, tmp_path: Path
) -> None:
    said = "\n".join(cluster.follow_guide(until="the driver"))
    head = cluster.head.address
    # The head made the token and said what the others need.
    assert "token: /root/.ray/auth_token" in said
    assert f"hangar cluster join {head}:6379" in said
    assert f"joined {head}:6379 with 4 sandbox slots" in said
    sweep = write_sweep(tmp_path / "work", "machines")
    driver = cluster.driver
    driver.put(sweep.parent, "/root/work")
    # The driver's steps, as the guide writes them, in the sweep's folder; then the rest.
    steps = guide_steps()
    first = next(i for i, step in enumerate(steps) if step.where == "the driver")
    for step in steps[first:]:
        if step.where != "the driver":
            cluster.step(step)
            continue
        out = driver.sh(f"cd work && {cluster.filled(step.command, driver)}", check=False)
        assert "Traceback" not in out, out
    checked = json.loads(
        driver.sh(
            f"cd work && ~/.hangar/bin/python -c {shlex.quote(CHECK)} {STORE} "
            f"machines,validate-machines http://services:{S3_PORT}"
        )
        .strip()
        .splitlines()[-1]
    )
    final = checked["sweeps"]["machines"]
    results = final["final"]
    verdicts = Counter(
        (r["scenario"].split(":")[0], r["agent"], r["verdict"]) for r in results.values()
    )
    assert len(results) == 24, verdicts  # every trial, one final result each
    assert not final["mismatched"], final["mismatched"]  # every bundle as recorded
    assert not [r for r in results.values() if r["verdict"] in ("infra_error", "verifier_error")]
    assert verdicts[("statkit-median-even", "gold", "pass")] == 1
    assert verdicts[("statkit-median-local", "gold", "pass")] == 1
    assert (
        verdicts[("fix-median", "oracle", "pass")]
        == verdicts[("count-lines", "oracle", "pass")]
        == 1
    )
    # Nothing ran on the driver; the nodes shared the trials.
    nodes = Counter(r["node"].split("/")[0] for r in results.values())
    assert set(nodes) == {"head", "worker"}, nodes
    assert cluster.sandboxes() == {"head": [], "worker": []}
    # Each Harbor task image was built once (validation and sweep): one image id on every
    # node that ran it, pulled by the others from the registry.
    builds = checked["builds"]
    assert len(builds) == 2, builds  # fix-median and count-lines
    for tag, uses in builds.items():
        assert sum(1 for _, built, _ in uses if built) == 1, (tag, uses)
        assert len({image for _, _, image in uses}) == 1, (tag, uses)
    assert not checked["sweeps"]["validate-machines"]["mismatched"]
