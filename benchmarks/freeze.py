"""How long does a frozen worker hold a sweep up? The driver's node watch against Ray's
own retries, measured side by side.

A head and a worker (`ray start`, as `hangar cluster start/join` do, 2 sandbox slots
each) on loopback, a moto S3 for the evidence (a multi-node sweep refuses a local
folder). Each run is a sweep of TRIALS trials that sleep SLEEP seconds (the local
backend: the trial is the worker's own process, so a frozen node freezes its trials),
run with `hangar run --address ... --json`; FREEZE_AFTER seconds in, every process of
the worker gets SIGSTOP (a stalled VM, a partition) and stays frozen until the sweep
ends. Printed: the sweep's wall time unfaulted, then with the freeze under the driver's
node watch (`HANGAR_NODE_WATCH_S`, default 5 s) and under Ray's retries alone (the watch
off), and how long after the freeze each ended. The documented bound is the time from
the freeze to the end under the watch, less the unfaulted remainder.

    python benchmarks/freeze.py [--trials 8] [--sleep 6] [--freeze-after 4]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import free_port  # noqa: E402

from hangar.cluster.nodes import run_ray, start_argv  # noqa: E402

HANGAR = str(Path(sys.executable).parent / "hangar")


class TwoNodes:
    """A head and a worker on loopback, and a moto S3."""

    def __init__(self) -> None:
        self.port, self.worker_port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.temp = Path(tempfile.mkdtemp(prefix="hfz-"))
        self.s3 = f"http://127.0.0.1:{free_port()}"
        self.moto: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> TwoNodes:
        for name, value in (("AWS_ACCESS_KEY_ID", "b"), ("AWS_SECRET_ACCESS_KEY", "b")):
            os.environ.setdefault(name, value)
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        moto = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
        self.moto = subprocess.Popen(
            [moto, "-H", "127.0.0.1", "-p", self.s3.rsplit(":", 1)[1]],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(100):
            with contextlib.suppress(OSError):
                urllib.request.urlopen(self.s3, timeout=1)
                break
            time.sleep(0.2)
        import boto3

        boto3.client("s3", endpoint_url=self.s3).create_bucket(Bucket="bench")
        common = {"sandbox_slots": 2, "num_cpus": 2, "node_ip": "127.0.0.1"}
        head = start_argv(head=True, port=self.port, metrics_port=free_port(), **common)
        run_ray([*head, f"--temp-dir={self.temp}"])
        worker = start_argv(head=False, address=self.address, metrics_port=free_port(), **common)
        run_ray([*worker, f"--node-manager-port={self.worker_port}"])
        return self

    def worker(self) -> list[psutil.Process]:
        found: list[psutil.Process] = []
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if f"--node_manager_port={self.worker_port}" in (proc.info["cmdline"] or []):
                    found += [proc, *proc.children(recursive=True)]
        return found

    def __exit__(self, *exc: object) -> None:
        for proc in self.worker():
            with contextlib.suppress(psutil.Error):
                proc.resume()
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                line = " ".join(proc.info["cmdline"] or [])
                if str(self.temp) in line or f"--node_manager_port={self.worker_port}" in line:
                    proc.kill()
        if self.moto is not None:
            self.moto.kill()
        shutil.rmtree(self.temp, ignore_errors=True)


def sweep_file(folder: Path, name: str, trials: int, sleep: float, s3: str) -> Path:
    shutil.copy(ROOT / "examples" / "repos" / "statkit.bundle", folder / "repo.bundle")
    (folder / "scenario.yaml").write_text(
        "id: freeze\nrepository: repo.bundle\nrevision: 1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2\n"
        "context: Sleep.\nverifier:\n  host: {builtin: junit}\n"
    )
    path = folder / f"{name}.yaml"
    path.write_text(
        f"id: {name}\nscenarios: [scenario.yaml]\nagents: {{sleep: {{command: 'sleep {sleep}'}}}}\n"
        f"repeats: {trials}\nbackend: local\nstore: sqlite:///{folder}/{name}.db\n"
        f"evidence: s3://bench/{name}\nevidence_endpoint: {s3}\n"
    )
    return path


def one_run(nodes: TwoNodes, sweep: Path, freeze_after: float | None, watch: str) -> dict:
    """Wall time of one sweep, and time from the freeze to its end."""
    env = {**os.environ, "HANGAR_NODE_WATCH_S": watch}
    started = time.monotonic()
    driver = subprocess.Popen(
        [HANGAR, "run", str(sweep), "--address", nodes.address, "--json", "--allow-failures"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    frozen_at = None
    if freeze_after is not None:
        time.sleep(freeze_after)
        for proc in nodes.worker():
            with contextlib.suppress(psutil.Error):
                proc.suspend()
        frozen_at = time.monotonic()
    out, err = driver.communicate(timeout=1800)
    ended = time.monotonic()
    try:
        outcome = json.loads(out)
    except ValueError:
        outcome = {"error": f"exit {driver.returncode}: {err[-500:]}"}
    return {
        "wall_s": round(ended - started, 1),
        "after_freeze_s": round(ended - frozen_at, 1) if frozen_at else None,
        "verdicts": outcome.get("verdicts", outcome),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--sleep", type=float, default=6.0)
    parser.add_argument("--freeze-after", type=float, default=4.0)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="hangar-freeze-"))
    rows = {}
    for name, freeze, watch in (
        ("unfaulted", None, "5"),
        ("frozen-watched", args.freeze_after, "5"),
        ("frozen-ray-only", args.freeze_after, "0"),
    ):
        with TwoNodes() as nodes:
            sweep = sweep_file(folder, name, args.trials, args.sleep, nodes.s3)
            rows[name] = one_run(nodes, sweep, freeze, watch)
        print(f"{name:16} {json.dumps(rows[name])}", flush=True)
    watched = rows["frozen-watched"]["after_freeze_s"]
    ray_only = rows["frozen-ray-only"]["after_freeze_s"]
    print(
        f"a frozen worker delays the sweep's end by {watched} s after the freeze with the "
        f"node watch, {ray_only} s on Ray's retries alone "
        f"({ray_only / watched:.1f}x as long)"
        if watched and ray_only
        else "a run failed: see its verdicts above"
    )
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
