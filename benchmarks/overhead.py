"""hangar's overhead per trial against a plain docker + git loop and against mini-swe-agent,
measured in one run.

N trivial trials (clone a pinned revision, a one-line agent, one verifier command,
bundle the evidence) through `hangar run` on the docker backend, against a plain script
doing the same docker and git steps at the same concurrency, and against mini-swe-agent's
own docker environment (`mswea_trials.py`: the docker CLI, an exec per command, with the
same isolation flags; installed from PyPI into a cache folder on first use). Prints the
wall times and ratios (target: hangar / plain <= 1.15 at N=100), hangar's time with Ray's
one-off start-up taken out (measured by an empty `ray.init`), since a long sweep pays that
once, and the machine's CPU time (all processes, dockerd and the kernel included) per
trial of each, which is what bounds them all on a small machine.

Last, the container engine's share alone (`engine_trial`: a container started as hangar
starts one, two execs, the removal; no workspace, no verifier, no evidence) at the same
concurrency: the floor of any harness that gives each trial a new container, where the
trials keep the cores busy.

hangar runs three times: cold (`hangar run --address embedded` starts and stops its own
embedded Ray), then as on a laptop that runs sweep after sweep: the first run starting the
local head that `hangar run` keeps warm, and the next run attached to it. The plain loop
runs first and last, and the ratios are against the mean of its two runs: a machine whose
speed drifts during the benchmark (a shared one does) moves both ends.

Each hangar run reads from its evidence the time from each trial's start to its agent's
command; the warm head runs twice, with a warm sandbox pool of as many as the concurrency
(``warm_sandboxes``; by default a node with no more cores than slots has none) and
without (``warm_sandboxes: 0``).

    python benchmarks/overhead.py [--trials 100] [--concurrency 2] [--no-peer]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import docker

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import bench_cache, cpu_seconds, kept_warm
from trial_steps import clone_workspace

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "examples" / "repos" / "statkit.bundle"
REVISION = "1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2"
IMAGE = "hangar/base:bookworm"
AGENT = "echo hello > out.txt"
VERIFY = "test -f statkit/stats.py"
HANGAR = str(Path(sys.executable).parent / "hangar")


#: The sandbox's flags in both plain loops (hangar's own sandbox has these and more).
ISOLATION: dict[str, Any] = {
    "detach": True,
    "user": "agent",
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges"],
    "mem_limit": "2g",
    "pids_limit": 512,
    "init": True,
}


def plain_trial(client: docker.DockerClient, work: Path, i: int) -> None:
    """One trial done by hand: clone, container, agent, verifier, bundle, teardown."""
    ws = work / f"t{i}" / "workspace"
    ws.parent.mkdir(parents=True)
    clone_workspace(str(BUNDLE), REVISION, ws)
    container = client.containers.run(
        IMAGE,
        ["sleep", "infinity"],
        network_mode="none",
        working_dir="/workspace",
        volumes={str(ws): {"bind": "/workspace", "mode": "rw"}},
        **ISOLATION,
    )
    try:
        agent = container.exec_run(["bash", "-c", AGENT])
        verify = container.exec_run(["bash", "-c", VERIFY])
        (ws.parent / "out.txt").write_bytes(agent.output + verify.output)
        if verify.exit_code != 0:
            raise SystemExit(f"plain trial {i}: the verifier command failed: {verify}")
        with tarfile.open(ws.parent / "bundle.tar.gz", "w:gz") as tar:
            tar.add(ws.parent / "out.txt", arcname="out.txt")
    finally:
        container.remove(force=True)
        shutil.rmtree(ws.parent)


def engine_trial(client: docker.DockerClient, work: Path, i: int) -> None:
    """The container engine's share of a trial alone: a new container as hangar starts
    one (networking disabled, not a network namespace of its own), the agent's and the
    verifier's command as two execs, the removal. No workspace, no evidence."""
    container = client.containers.run(
        IMAGE,
        ["sleep", "infinity"],
        network_disabled=True,
        working_dir="/tmp",
        **ISOLATION,
    )
    try:
        for command in (AGENT.replace("out.txt", "/tmp/out.txt"), "true"):
            if container.exec_run(["bash", "-c", command]).exit_code != 0:
                raise SystemExit(f"engine trial {i}: {command!r} failed")
    finally:
        container.remove(force=True)


def run_plain(trials: int, concurrency: int, trial: Callable[..., None] = plain_trial) -> float:
    client = docker.from_env(version="auto")
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(lambda i: trial(client, Path(tmp), i), range(trials)))
        return time.monotonic() - started


#: Seconds from each hangar trial's start to its agent's command, per measured run.
FIRST_COMMAND: dict[str, list[float]] = {}


def first_command_s(evidence: Path) -> list[float]:
    """Each trial's time from its start (``result.json``) to its agent's command (the
    trace's ``agent_start``), read from its evidence archive."""
    found = []
    for bundle in evidence.rglob("bundle.tar.gz"):
        with tarfile.open(bundle) as tar:
            result = json.load(tar.extractfile("result.json"))  # type: ignore[arg-type]
            trace = tar.extractfile("trace.jsonl").read().decode()  # type: ignore[union-attr]
        started = datetime.fromisoformat(result["started_at"].replace("Z", "+00:00"))
        first = next(json.loads(line) for line in trace.splitlines() if "agent_start" in line)
        found.append(first["ts"] - started.timestamp())
    return sorted(found)


def run_hangar(
    trials: int, concurrency: int, *, warm: str, label: str, pooled: bool = True
) -> float:
    """Wall time of `hangar run` on N trivial trials; `warm`: what its stderr must say of
    the warm head (empty: an embedded Ray of its own); `pooled`: with warm sandboxes, or
    each trial starting its own."""
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
            f"concurrency: {{sandbox_slots: {concurrency}, "
            f"warm_sandboxes: {concurrency if pooled else 0}}}\n"
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
        verdicts = json.loads(out.stdout)["verdicts"]
        if verdicts != {"pass": trials}:
            raise SystemExit(f"hangar's trials did not all pass: {verdicts}")
        wall = time.monotonic() - started
        FIRST_COMMAND[label] = first_command_s(Path(tmp) / "evidence")
        return wall


def ray_startup() -> float:
    code = (
        "import time, ray; t = time.monotonic(); ray.init(address='local', "
        "include_dashboard=False, _node_ip_address='127.0.0.1'); ray.shutdown(); "
        "print(time.monotonic() - t)"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


MSWEA = "mini-swe-agent==2.4.6"


def mswea_python() -> Path:
    """A virtualenv with mini-swe-agent from PyPI, in a cache folder (made once)."""
    venv = bench_cache("mini-swe-agent")
    python = venv / "bin" / "python"
    if not (venv / ".installed").exists():
        print(f"installing {MSWEA} into {venv} (once)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", MSWEA], check=True)
        (venv / ".installed").touch()
    return python


def run_mswea(python: Path, trials: int, concurrency: int) -> float:
    runner = Path(__file__).resolve().parent / "mswea_trials.py"
    argv = [str(python), str(runner), str(BUNDLE), REVISION, IMAGE, AGENT, VERIFY]
    started = time.monotonic()
    subprocess.run([*argv, str(trials), str(concurrency)], check=True)
    return time.monotonic() - started


class Meter:
    """Wall and the machine's CPU of each measured step, in order."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def __call__(self, name: str, run: Callable[[], float]) -> float:
        before = cpu_seconds()
        self.wall[name] = run()
        self.cpu[name] = cpu_seconds() - before
        return self.wall[name]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--no-peer", action="store_true", help="skip mini-swe-agent")
    args = parser.parse_args()
    n, c = args.trials, args.concurrency
    python = None if args.no_peer else mswea_python()
    m = Meter()
    m("plain", lambda: run_plain(n, c))
    if python is not None:
        m("mini-swe-agent", lambda: run_mswea(python, n, c))
    m("cold", lambda: run_hangar(n, c, warm="", label="cold"))
    with kept_warm():
        m("first", lambda: run_hangar(n, c, warm="started now and kept warm", label="first"))
        m("warm", lambda: run_hangar(n, c, warm="kept warm by an earlier", label="warm"))
        m(
            "warm unpooled",
            lambda: run_hangar(
                n, c, warm="kept warm by an earlier", label="warm unpooled", pooled=False
            ),
        )
    m("plain again", lambda: run_plain(n, c))
    m("engine alone", lambda: run_plain(n, c, engine_trial))
    startup = ray_startup()
    plain = (m.wall["plain"] + m.wall["plain again"]) / 2
    plain_cpu = (m.cpu["plain"] + m.cpu["plain again"]) / 2
    print(f"trials={n} concurrency={c}")
    for name, wall in m.wall.items():
        rate, cpu = n / wall, m.cpu[name] / n
        print(f"{name:15s}: {wall:7.1f} s ({rate:.2f} trials/s), {cpu:.2f} s CPU per trial")
    print(f"Ray start-up (an empty ray.init): {startup:.1f} s")
    print(f"plain, the mean of its two runs: {plain:.1f} s, {plain_cpu / n:.2f} s CPU per trial")
    for name in ("mini-swe-agent", "cold", "first", "warm", "warm unpooled", "engine alone"):
        if name in m.wall:
            wall, cpu = m.wall[name] / plain, m.cpu[name] / plain_cpu
            print(f"ratio {name}/plain: {wall:.2f} wall, {cpu:.2f} CPU")
    print(f"ratio cold without Ray's start-up: {(m.wall['cold'] - startup) / plain:.2f}")
    print("target: cold <= 1.15; warm (pooled) <= 0.6")
    print(
        "engine alone: a new container, two execs and the removal, nothing else; where the"
        " cores are full, no harness that gives each trial a new container goes below it"
    )
    for name, times in FIRST_COMMAND.items():
        median, p90 = times[len(times) // 2], times[int(len(times) * 0.9)]
        print(f"start to the agent's command, {name}: median {median:.3f} s, p90 {p90:.3f} s")
    print("target: under 0.3 s on a warm pool")


if __name__ == "__main__":
    main()
