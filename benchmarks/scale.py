"""Does the sweep driver keep up with a large cluster? Throughput against the ideal.

The sandbox is taken out of the picture: each trial is a Ray task that sleeps a fixed
second and returns its result (`sleep_trial`), so the cluster's capacity is known
exactly: slots / 1 s. Everything else is hangar's real path: the sweep file expanded
lazily, the window, per-model accounting, scenario packages in Ray's object store, the
preflight on every node, an S3 evidence store (moto on loopback: a multi-node sweep
refuses a local folder), the results written to a SQLite store after every wait.

NODES local Ray nodes (a head and workers started with `ray start`, as
`hangar cluster start/join` do) with SLOTS sandbox slots each run sweeps of each size;
for each it prints trials/s over the whole run and in the steady middle (10%-90% of
trials done) against the ideal, the driver's CPU seconds per trial and its peak RSS.
`--memory N` adds a sweep of N trials for memory only (peak against the largest size).

    python benchmarks/scale.py [--nodes 4] [--slots 50] [--sizes 2000 20000] [--memory 100000]
"""

from __future__ import annotations

import argparse
import inspect
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from dispatch import PeakRss  # noqa: E402
from machine import cpu_seconds, free_port  # noqa: E402

from hangar.cluster.nodes import run_ray, start_argv  # noqa: E402
from hangar.results import TrialResult  # noqa: E402
from hangar.trials import TrialSpec  # noqa: E402

TRIAL_S = 1.0


def sleep_trial(
    spec: TrialSpec, shipped: Any = None, board: Any = None, warm: str | None = None
) -> TrialResult | None:
    """The benchmark's trial: a fixed sleep, then a pass (no sandbox, no evidence); it
    reports to the sweep's board like a real trial task (`scheduler.task.run_trial_task`,
    whose signature it has)."""
    from datetime import UTC, datetime

    import ray

    from hangar.results import Verdict
    from hangar.scheduler.task import admitted
    from hangar.trials import result_of

    where = f"{socket.gethostname()}/{ray.get_runtime_context().get_node_id()[:12]}"
    started = datetime.now(UTC)
    if not admitted(board, spec, where):
        return None
    time.sleep(TRIAL_S)
    return result_of(spec, Verdict.PASS, "slept", started, datetime.now(UTC))


class Cluster:
    """`nodes` Ray nodes on loopback with `slots` sandbox slots each, and a moto S3."""

    def __init__(self, nodes: int, slots: int, folder: Path) -> None:
        self.nodes, self.slots, self.folder = nodes, slots, folder
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.temp = Path(tempfile.mkdtemp(prefix="hsc-"))  # short: Ray's socket paths
        self.s3 = f"http://127.0.0.1:{free_port()}"
        self.moto: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Cluster:
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        moto = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
        port = self.s3.rsplit(":", 1)[1]
        self.moto = subprocess.Popen(
            [moto, "-H", "127.0.0.1", "-p", port],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(100):
            try:
                urllib.request.urlopen(self.s3, timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        import boto3

        boto3.client("s3", endpoint_url=self.s3).create_bucket(Bucket="bench")
        common = {"sandbox_slots": self.slots, "num_cpus": 2, "node_ip": "127.0.0.1"}
        run_ray(
            [
                *start_argv(head=True, port=self.port, metrics_port=free_port(), **common),
                f"--temp-dir={self.temp}",
            ]
        )
        for _ in range(self.nodes - 1):
            run_ray(
                [
                    *start_argv(
                        head=False, address=self.address, metrics_port=free_port(), **common
                    ),
                    f"--node-manager-port={free_port()}",
                ]
            )
        return self

    def __exit__(self, *exc: object) -> None:
        import ray

        if ray.is_initialized():  # else Ray's client aborts the process, its error unsaid
            ray.shutdown()
        for proc in psutil.process_iter(["cmdline"]):
            if str(self.temp) in " ".join(proc.info["cmdline"] or []):
                proc.kill()
        if self.moto is not None:
            self.moto.kill()
        shutil.rmtree(self.temp, ignore_errors=True)


def sweep_file(folder: Path, trials: int, s3: str) -> Path:
    shutil.copy(ROOT / "examples" / "repos" / "statkit.bundle", folder / "repo.bundle")
    (folder / "scenario.yaml").write_text(
        "id: scale\nrepository: repo.bundle\nrevision: 1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2\n"
        "context: Sleep.\nverifier:\n  host: {builtin: junit}\n"
    )
    path = folder / f"scale-{trials}.yaml"
    path.write_text(
        f"id: scale-{trials}\nscenarios: [scenario.yaml]\nagents: {{sleep: {{command: 'true'}}}}\n"
        f"repeats: {trials}\nbackend: local\nstore: sqlite:///{folder}/r-{trials}.db\n"
        f"evidence: s3://bench/scale\nevidence_endpoint: {s3}\n"
    )
    return path


def bare_sleep() -> None:
    """The baseline's task: the same sleep, nothing else."""
    time.sleep(TRIAL_S)


def measure_ray(cluster: Cluster, trials: int) -> dict[str, float]:
    """The baseline: plain Ray tasks of the same sleep on the same slots and window, fed
    by the smallest loop (no hangar): what Ray itself achieves on this machine."""
    from hangar.cluster.attach import SANDBOX_RESOURCE, connect

    connect(cluster.address, 0)  # as the driver does: token auth, loopback; imports Ray
    import ray

    task = ray.remote(bare_sleep).options(num_cpus=0, resources={SANDBOX_RESOURCE: 1})
    window = 2 * cluster.nodes * cluster.slots
    done_at: list[float] = []
    machine, started = cpu_seconds(), time.monotonic()
    pending, sent = set(), 0
    while len(done_at) < trials:
        while sent < trials and len(pending) < window:
            pending.add(task.remote())
            sent += 1
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
        if ready:
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
        for ref in ready:
            pending.discard(ref)
            ray.get(ref)
            done_at.append(time.monotonic())
    elapsed = time.monotonic() - started
    return {
        "rate": trials / elapsed,
        "steady": steady_rate(done_at),
        "cpu": 0.0,
        "machine": (cpu_seconds() - machine) / trials,
        "rss": 0,
    }


def steady_rate(done_at: list[float]) -> float:
    """Completions per second between 10% and 90% of them."""
    lo, hi = len(done_at) // 10, len(done_at) * 9 // 10
    return (hi - lo) / (done_at[hi] - done_at[lo])


def measure(cluster: Cluster, trials: int) -> dict[str, float]:
    """One sweep of `trials` on the cluster: rates, driver CPU per trial, peak RSS."""
    import hangar.scheduler.driver as driver
    from hangar.scheduler.sweep import load_sweep
    from hangar.store import ResultsStore

    theirs = inspect.signature(driver.run_trial_task).parameters
    if list(inspect.signature(sleep_trial).parameters) != list(theirs):
        raise SystemExit(f"sleep_trial's parameters are not run_trial_task's: {list(theirs)}")
    driver.run_trial_task = sleep_trial  # the one substitution: the trial itself
    sweep = load_sweep(sweep_file(cluster.folder, trials, cluster.s3))
    done_at: list[float] = []

    def listen(tally: Any, result: Any) -> None:
        if result is not None:
            done_at.append(time.monotonic())

    me = psutil.Process()
    with PeakRss() as rss:
        machine = cpu_seconds()
        cpu = sum(me.cpu_times()[:2])
        started = time.monotonic()
        tally = driver.SweepRunner(
            sweep, ResultsStore(sweep.config.store), address=cluster.address, listener=listen
        ).run()
        elapsed = time.monotonic() - started
        cpu = sum(me.cpu_times()[:2]) - cpu
        machine = cpu_seconds() - machine
    if tally.done != trials:
        raise SystemExit(f"the sweep of {trials} finished {tally.done} trials: {tally}")
    return {
        "rate": trials / elapsed,
        "steady": steady_rate(done_at),
        "cpu": cpu / trials,
        "machine": machine / trials,
        "rss": rss.peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--slots", type=int, default=50)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--memory", type=int, default=0, help="a sweep for memory only")
    args = parser.parse_args()
    ideal = args.nodes * args.slots / TRIAL_S
    mib = 1024 * 1024
    print(f"{args.nodes} nodes x {args.slots} slots, {TRIAL_S:.0f} s trials: ideal {ideal:.0f}/s")
    with tempfile.TemporaryDirectory() as tmp, Cluster(args.nodes, args.slots, Path(tmp)) as c:
        peaks = {}
        base = measure_ray(c, min(args.sizes))
        print(
            f"plain Ray, {min(args.sizes)} tasks: {base['rate']:6.1f}/s overall, "
            f"{base['steady']:6.1f}/s steady ({base['steady'] / ideal:4.0%} of ideal); "
            f"machine CPU {base['machine'] * 1000:5.1f} ms/task",
            flush=True,
        )
        for n in [*args.sizes, *([args.memory] if args.memory else [])]:
            m = measure(c, n)
            peaks[n] = m["rss"]
            print(
                f"{n:7d} trials: {m['rate']:6.1f}/s overall ({m['rate'] / ideal:4.0%} of ideal), "
                f"{m['steady']:6.1f}/s steady ({m['steady'] / ideal:4.0%}; "
                f"{m['steady'] / base['steady']:.2f} of plain Ray); driver CPU "
                f"{m['cpu'] * 1000:5.2f} ms/trial, machine CPU {m['machine'] * 1000:5.1f} "
                f"ms/trial, peak RSS {m['rss'] / mib:5.0f} MiB",
                flush=True,
            )
        if args.memory:
            largest = max(args.sizes)
            ratio = peaks[args.memory] / peaks[largest]
            print(f"peak RSS {args.memory} / {largest}: {ratio:.2f}  (flat: <= 1.1)")


if __name__ == "__main__":
    main()
