"""How fast `hangar view` serves a large sweep, against a small one in the same run.

Two sweeps of synthetic results (SMALL and LARGE trials: 500 scenarios, two agents, two
models, two arms, pass or fail with a check and a score) go into a SQLite store; the
viewer runs on loopback (uvicorn, as `hangar view` runs it). For each sweep it times the
first view of the sweep page (the report built on the spot), then the median of ten
views (the report kept, rebuilt only when the sweep changes), a page of its trials, and
the sweeps page. Target: the LARGE sweep's page in well under a second once viewed, and
its ratio to the SMALL one's small.

    python benchmarks/viewer.py [--small 200] [--large 20000]
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import uvicorn

from hangar.results import CheckOutcome, Score, TrialResult, Usage, Verdict
from hangar.store import ResultsStore
from hangar.viewer.app import Viewer, make_app


def fill(store: ResultsStore, sweep: str, n: int) -> None:
    """`n` synthetic results of a sweep."""
    store.ensure_sweep(sweep, {}, n)
    rng = random.Random(n)
    rows = []
    for i in range(n):
        verdict = Verdict.PASS if rng.random() < 0.6 else Verdict.FAIL
        start = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(seconds=i)
        rows.append(
            TrialResult(
                sweep=sweep,
                trial_key=f"{sweep}-{i}".ljust(64, "0")[:64],
                scenario_id=f"scenario-{i % 500}",
                scenario_digest="d" * 64,
                agent=f"agent-{i % 2}",
                model=f"model-{(i // 2) % 2}",
                arm=["control", "skill"][(i // 4) % 2],
                repeat=i // 4000,
                verdict=verdict,
                reason="synthetic",
                completed=True,
                checks=(
                    CheckOutcome(
                        requirement="tests pass",
                        status="pass" if verdict is Verdict.PASS else "fail",
                        evidence=("e",),
                    ),
                ),
                usage=Usage(input_tokens=100, output_tokens=10, cost_usd=0.01),
                started_at=start,
                finished_at=start + timedelta(seconds=3),
                duration_s=3.0,
                scores=(Score(metric="pass", value=float(verdict is Verdict.PASS)),),
            )
        )
    store.record(rows)


def timed(client: httpx.Client, path: str) -> float:
    started = time.perf_counter()
    response = client.get(path)
    response.raise_for_status()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--large", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'results.db'}"
        store = ResultsStore(url)
        for name, n in (("small", args.small), ("large", args.large)):
            fill(store, name, n)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        viewer = Viewer(ResultsStore(url))
        server = uvicorn.Server(
            uvicorn.Config(make_app(viewer), host="127.0.0.1", port=port, log_level="warning")
        )
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.05)
        results = {}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            for name in ("small", "large"):
                first = timed(client, f"/sweeps/{name}")
                warm = statistics.median(timed(client, f"/sweeps/{name}") for _ in range(10))
                trials = statistics.median(
                    timed(client, f"/sweeps/{name}/part/trials?page=3") for _ in range(10)
                )
                results[name] = (first, warm, trials)
            listing = statistics.median(timed(client, "/") for _ in range(10))
        server.should_exit = True
        viewer.evidence.close()
    for name, n in (("small", args.small), ("large", args.large)):
        first, warm, trials = results[name]
        print(
            f"{name:5} {n:6} trials: first view {first * 1000:7.0f} ms, "
            f"then {warm * 1000:5.0f} ms; a trials page {trials * 1000:4.0f} ms"
        )
    print(f"sweeps page: {listing * 1000:.0f} ms")
    ratio = results["large"][1] / results["small"][1]
    print(f"ratio large/small (sweep page, once viewed): {ratio:.2f}")


if __name__ == "__main__":
    main()
