"""The clusters guide, whole, on five machines that share only a network; then a worker
killed mid-sweep, and another frozen mid-sweep and thawed after.

The machines (tests/machines.py: containers with their own file systems, addresses and
docker engines) are a services machine (PostgreSQL, S3, a registry, the scripted model),
a head, two workers and a driver that is not a node. hangar is installed on each from a
clone, and the guide's commands run as written (`docs/guides/clusters.md`). The sweep
mixes execution scenarios (a repository bundle, a local git folder), Harbor tasks built by
the nodes and shared through the registry, and a decision suite, three repeats each
(72 trials). Three runs of it, each a
sweep of its own: unfaulted; worker2 killed (`docker kill`) once a sandbox runs there;
worker1 frozen (`docker pause`) once a sandbox runs there, thawed 60 s after the sweep
ends. Printed: each run's wall time, the freeze's delay against the unfaulted run and
the documented bound, and whether every final trial's evidence object matches its
recorded sha256, every trial has one final verdict equal to the unfaulted run's, and no
sandbox is left.

    python benchmarks/cluster.py [--bound 90]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.machines import (  # noqa: E402
    CHECK,
    S3_PORT,
    Machines,
    guide_steps,
    machine_image,
    machines,
    wheelhouse,
    write_sweep,
)

STORE = "postgresql+psycopg://hangar:hangar@services/hangar"
#: Each trial of the sweep this many times (18 sandbox trials: every node gets some).
REPEATS = 3
NAMES = {
    "services": {"services"},
    "head": {"head", "node"},
    "worker1": {"node"},
    "worker2": {"node"},
    "driver": {"driver"},
}


def driver_steps(cluster: Machines) -> list[str]:
    """The guide's commands for the driver, filled in."""
    return [
        cluster.filled(step.command, cluster.driver)
        for step in guide_steps()
        if step.where == "the driver"
    ]


def put_sweep(cluster: Machines, work: Path, sweep_id: str) -> None:
    folder = work / sweep_id
    write_sweep(folder, sweep_id, repeats=REPEATS)
    cluster.driver.sh("rm -rf work")
    cluster.driver.put(folder, "/root/work")


def run_sweep(cluster: Machines, fault: str | None = None, target: str = "") -> dict[str, float]:
    """The driver's steps; with a fault, the run in the background and `target` killed or
    frozen once one of its sandboxes runs. Times in seconds from the run's start."""
    driver = cluster.driver
    steps = driver_steps(cluster)
    for step in steps:
        if " run " not in f" {step} ":
            if "validate" in step:
                driver.sh(f"cd work && {step}", check=False)
            continue
        driver.sh("rm -f /root/run.rc /root/run.log")
        started = time.monotonic()
        driver.background(f"cd work && {step}; echo $? > /root/run.rc", "/root/run.log")
        at: dict[str, float] = {}
        while not driver.ok("test -s /root/run.rc"):
            if (
                fault
                and "fault" not in at
                and cluster[target].ok(
                    'test -n "$(docker ps -q --filter label=hangar.managed=true)"'
                )
            ):
                if fault == "kill":
                    cluster.kill(target)
                else:
                    cluster.freeze(target)
                at["fault"] = time.monotonic() - started
            time.sleep(1)
        at["end"] = time.monotonic() - started
        print(driver.sh("tail -4 /root/run.log"), flush=True)
    for step in steps:
        if "status" in step:
            driver.sh(f"cd work && {step}", check=False)
    return at


def check(cluster: Machines, sweeps: list[str]) -> dict[str, object]:
    out = cluster.driver.sh(
        f"cd work && ~/.hangar/bin/python -c {shlex.quote(CHECK)} {STORE} "
        f"{','.join(sweeps)} http://services:{S3_PORT}"
    )
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bound", type=float, default=90.0, help="documented freeze bound (s)")
    args = parser.parse_args()
    from hangar.paths import cache_dir

    machine_image()
    wheels = wheelhouse(cache_dir() / "machines")
    work = Path(tempfile.mkdtemp(prefix="hm-bench-"))
    with machines(NAMES, work / "machines", wheels) as cluster:
        started = time.monotonic()
        cluster.follow_guide(until="the driver")
        print(f"the guide's set-up on 5 machines: {time.monotonic() - started:.0f} s", flush=True)
        times = {}
        for sweep_id, fault, target in (
            ("clean", None, ""),
            ("killed", "kill", "worker2"),
            ("frozen", "freeze", "worker1"),
        ):
            put_sweep(cluster, work / "sweeps", sweep_id)
            times[sweep_id] = run_sweep(cluster, fault, target)
            print(f"{sweep_id}: {times[sweep_id]}", flush=True)
        time.sleep(60)  # the frozen worker thaws, and finishes what it held
        cluster.thaw("worker1")
        time.sleep(60)
        checked = check(cluster, ["clean", "killed", "frozen"])
        left = cluster.sandboxes()
    report(times, checked, left, args.bound)


def report(
    times: dict[str, dict[str, float]], checked: dict[str, object], left: object, bound: float
) -> None:
    sweeps = checked["sweeps"]
    assert isinstance(sweeps, dict)
    clean = {k: v["verdict"] for k, v in sweeps["clean"]["final"].items()}
    print(f"\nunfaulted: {times['clean']['end']:.0f} s, {len(clean)} trials")
    for name in ("killed", "frozen"):
        mine = sweeps[name]
        verdicts = {k: v["verdict"] for k, v in mine["final"].items()}
        differ = {k: (clean.get(k), v) for k, v in verdicts.items() if clean.get(k) != v}
        print(
            f"{name}: {times[name]['end']:.0f} s (fault at {times[name].get('fault', 0):.0f} s); "
            f"{len(verdicts)} final trials, {mine['attempts']} attempts, "
            f"{len(mine['mismatched'])} evidence objects not matching their sha256, "
            f"{len(differ)} verdicts differing from the unfaulted run {differ or ''}"
        )
    delay = times["frozen"]["end"] - times["clean"]["end"]
    verdict = "within" if delay <= bound else "OVER"
    print(f"the freeze delayed the sweep by {delay:.0f} s ({verdict} the {bound:.0f} s bound)")
    builds = checked["builds"]
    assert isinstance(builds, dict)
    once = all(sum(1 for u in uses if u[1]) <= 1 for uses in builds.values())
    ids = all(len({u[2] for u in uses}) == 1 for uses in builds.values())
    print(f"task images: {len(builds)}; built once each: {once}; one image id each: {ids}")
    print(f"sandboxes left on the live nodes: {left}")


if __name__ == "__main__":
    main()
