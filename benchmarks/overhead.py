"""hangar's overhead per trial against a plain docker + git loop, measured in one run.

N trivial trials (clone a pinned revision, a one-line agent, one verifier command,
bundle the evidence) through `hangar run` on the docker backend, against a plain script
doing the same docker and git steps at the same concurrency. Prints both wall times
and the ratio (target: hangar / plain <= 1.15 at N=100), hangar's time with Ray's
one-off start-up taken out (measured by an empty `ray.init`), since a long sweep pays
that once, and the machine's CPU time (all processes, dockerd and the kernel included)
per trial of each, which is what bounds both on a small machine.

hangar runs three times: cold (`hangar run --address embedded` starts and stops its own
embedded Ray), then as on a laptop that runs sweep after sweep: the first run starting the
local head that `hangar run` keeps warm, and the next run attached to it; every ratio
against the same plain loop.

    python benchmarks/overhead.py [--trials 100] [--concurrency 2]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import cpu_seconds, kept_warm

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "examples" / "repos" / "statkit.bundle"
REVISION = "1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2"
IMAGE = "hangar/base:bookworm"
AGENT = "echo hello > out.txt"
VERIFY = "test -f statkit/stats.py"
HANGAR = str(Path(sys.executable).parent / "hangar")


def plain_trial(client: docker.DockerClient, work: Path, i: int) -> None:
    """One trial done by hand: clone, container, agent, verifier, bundle, teardown."""
    ws = work / f"t{i}" / "workspace"
    ws.parent.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(BUNDLE), str(ws)], check=True)
    subprocess.run(["git", "-C", str(ws), "checkout", "-q", REVISION], check=True)
    subprocess.run(["git", "-C", str(ws), "remote", "remove", "origin"], check=True)
    subprocess.run(["chown", "-R", "1000:1000", str(ws)], check=True)
    container = client.containers.run(
        IMAGE,
        ["sleep", "infinity"],
        detach=True,
        network_mode="none",
        user="agent",
        working_dir="/workspace",
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        mem_limit="2g",
        pids_limit=512,
        init=True,
        volumes={str(ws): {"bind": "/workspace", "mode": "rw"}},
    )
    try:
        agent = container.exec_run(["bash", "-c", AGENT])
        verify = container.exec_run(["bash", "-c", VERIFY])
        (ws.parent / "out.txt").write_bytes(agent.output + verify.output)
        with tarfile.open(ws.parent / "bundle.tar.gz", "w:gz") as tar:
            tar.add(ws.parent / "out.txt", arcname="out.txt")
    finally:
        container.remove(force=True)
        shutil.rmtree(ws.parent)


def run_plain(trials: int, concurrency: int) -> float:
    client = docker.from_env(version="auto")
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(lambda i: plain_trial(client, Path(tmp), i), range(trials)))
        return time.monotonic() - started


def run_hangar(trials: int, concurrency: int, *, warm: str) -> float:
    """Wall time of `hangar run` on N trivial trials; `warm`: what its stderr must say of
    the warm head (empty: an embedded Ray of its own)."""
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "scenario.yaml"
        shutil.copy(BUNDLE, Path(tmp) / "repo.bundle")
        scenario.write_text(
            f"id: bench\nrepository: repo.bundle\nrevision: {REVISION}\nimage: {IMAGE}\n"
            "context: Write out.txt.\nverifier:\n  host: {builtin: junit}\n"
            f"  commands: [{VERIFY!r}]\n"
        )
        sweep = Path(tmp) / "sweep.yaml"
        sweep.write_text(
            f"id: overhead\nscenarios: [scenario.yaml]\nagents: {{a: {{command: {AGENT!r}}}}}\n"
            f"repeats: {trials}\nbackend: docker\nstore: sqlite:///{tmp}/r.db\n"
            f"evidence: file://{tmp}/evidence\n"
            f"concurrency: {{sandbox_slots: {concurrency}}}\n"
        )
        started = time.monotonic()
        out = subprocess.run(
            [HANGAR, "run", str(sweep), "--json"] + ([] if warm else ["--address", "embedded"]),
            check=True,
            capture_output=True,
            text=True,
        )
        if warm and warm not in out.stderr:
            raise SystemExit(f"the run did not say {warm!r}:\n{out.stderr}")
        return time.monotonic() - started


def ray_startup() -> float:
    code = (
        "import time, ray; t = time.monotonic(); ray.init(address='local', "
        "include_dashboard=False, _node_ip_address='127.0.0.1'); ray.shutdown(); "
        "print(time.monotonic() - t)"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    cpu = cpu_seconds()
    plain = run_plain(args.trials, args.concurrency)
    cpu_plain, cpu = cpu_seconds() - cpu, cpu_seconds()
    hangar = run_hangar(args.trials, args.concurrency, warm="")
    cpu_hangar, cpu = cpu_seconds() - cpu, cpu_seconds()
    with kept_warm():
        first = run_hangar(args.trials, args.concurrency, warm="started now and kept warm")
        cpu_first, cpu = cpu_seconds() - cpu, cpu_seconds()
        warm = run_hangar(args.trials, args.concurrency, warm="kept warm by an earlier")
        cpu_warm, cpu = cpu_seconds() - cpu, cpu_seconds()
    startup = ray_startup()
    cpu_startup = cpu_seconds() - cpu
    print(f"trials={args.trials} concurrency={args.concurrency}")
    print(f"plain docker+git loop : {plain:7.1f} s  ({args.trials / plain:.2f} trials/s)")
    print(f"hangar run, cold      : {hangar:7.1f} s  ({args.trials / hangar:.2f} trials/s)")
    print(f"  of which Ray start-up: {startup:6.1f} s")
    print(f"hangar run, first run keeping a head warm: {first:7.1f} s")
    print(f"hangar run, next run (head kept warm): {warm:7.1f} s  ({args.trials / warm:.2f}/s)")
    print(f"ratio cold/plain      : {hangar / plain:.2f}  (target <= 1.15)")
    print(f"ratio cold without start-up: {(hangar - startup) / plain:.2f}")
    print(f"ratio first (starting the warm head)/plain: {first / plain:.2f}")
    print(f"ratio warm/plain      : {warm / plain:.2f}")
    n = args.trials
    print(
        f"CPU per trial         : plain {cpu_plain / n:.2f} s, hangar cold {cpu_hangar / n:.2f} s "
        f"({(cpu_hangar - cpu_startup) / n:.2f} s without Ray's start-up), "
        f"first keeping warm {cpu_first / n:.2f} s, warm {cpu_warm / n:.2f} s"
    )


if __name__ == "__main__":
    main()
