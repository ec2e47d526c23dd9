"""hangar's outputs on a sweep of 100,000 recorded trials, on SQLite and on PostgreSQL.

A sweep of synthetic results goes into each store through the store's own API
(`ResultsStore.record`, in batches as the driver records them): 500 scenarios, four
agents, three models, two arms, every trial with a check and a score, one in twenty
tried twice. Then, each a fresh process as users run them:

- `hangar status` and `hangar status --json` (wall time, the interpreter's start
  included);
- `hangar report` in every format (text, md, html, json) and `hangar export` (jsonl);
- the Grafana dashboards' SQL panels (PostgreSQL only: they are written for it), each
  query with Grafana's macros expanded;
- every page of `hangar view` in headless Chromium (Debian's, through Playwright): the
  time to the first byte of each page (the navigation's ``responseStart``) and to its
  load: the sweeps page, the sweep page (first view, then again), its parts, a page of
  its trials far in and filtered, a trial, the comparison page.

Targets: each viewer page's first byte within 1 s, `hangar report` (text and HTML)
within 10 s, `hangar status` within 1 s.

    python benchmarks/outputs.py [--trials 100000] [--stores sqlite,postgres]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hangar.results import CheckOutcome, Score, TrialResult, Usage, Verdict  # noqa: E402
from hangar.store import ResultsStore  # noqa: E402

SWEEP = "big-sweep"
HANGAR = str(Path(sys.executable).parent / "hangar")
BATCH = 5_000


def synthetic(n: int) -> Iterator[TrialResult]:
    """`n` trials' results (and a second attempt of one in twenty, the first lost)."""
    rng = random.Random(n)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    for i in range(n):
        verdict = Verdict.PASS if rng.random() < 0.55 else Verdict.FAIL
        retried = i % 20 == 7
        for attempt in (1, 2) if retried else (1,):
            final = attempt == 2 or not retried
            shown = verdict if final else Verdict.INFRA_ERROR  # not final: tried again
            at = start + timedelta(seconds=i * 2 + attempt)
            yield TrialResult(
                sweep=SWEEP,
                trial_key=f"{i:064x}"[-64:],
                attempt=attempt,
                scenario_id=f"scenario-{i % 500:03d}",
                scenario_digest=f"{i % 500:064x}",
                agent=f"agent-{i % 4}",
                model=f"model-{(i // 4) % 3}",
                arm=("control", "skill")[(i // 12) % 2],
                repeat=i // 12_000,
                verdict=shown,
                reason="synthetic" if final else "lost with its node",
                completed=final,
                checks=(
                    CheckOutcome(
                        requirement="the tests pass",
                        status="pass" if shown is Verdict.PASS else "fail",
                        evidence=("pytest -q",),
                    ),
                ),
                scores=(Score(metric="pass", value=float(shown is Verdict.PASS)),),
                usage=Usage(input_tokens=1200, output_tokens=80, cost_usd=0.0042),
                started_at=at,
                finished_at=at + timedelta(seconds=30),
                duration_s=30.0,
                node="node-a",
            )


def fill(url: str, n: int) -> float:
    """Record the sweep in the store at `url`; the seconds it took."""
    store = ResultsStore(url)
    store.ensure_sweep(SWEEP, {"id": SWEEP}, n)
    started = time.perf_counter()
    batch: list[TrialResult] = []
    for result in synthetic(n):
        batch.append(result)
        if len(batch) == BATCH:
            store.record(batch)
            batch = []
    store.record(batch)
    took = time.perf_counter() - started
    store.engine.dispose()
    return took


def cli(*args: str) -> float:
    """The wall time of one `hangar` command (it must succeed)."""
    started = time.perf_counter()
    run = subprocess.run([HANGAR, *args], capture_output=True, text=True, timeout=1800)
    took = time.perf_counter() - started
    if run.returncode != 0:
        raise SystemExit(f"hangar {' '.join(args)} failed: {run.stderr[-2000:]}")
    return took


def outputs(url: str, out: Path) -> dict[str, float]:
    """Each CLI output's wall time."""
    found = {
        "status": cli("status", SWEEP, "--store", url),
        "status --json": cli("status", SWEEP, "--store", url, "--json"),
    }
    for form in ("text", "md", "html", "json"):
        found[f"report {form}"] = cli(
            "report", SWEEP, "--store", url, "--format", form, "--out", str(out / f"r.{form}")
        )
    found["export jsonl"] = cli("export", SWEEP, "--store", url, "--out", str(out / "t.jsonl"))
    return found


def panels(url: str) -> dict[str, float]:
    """Each SQL panel's query time (Grafana's macros expanded as Grafana does)."""
    from sqlalchemy import text

    from hangar.dashboards.scores import ALL_QUERIES, scores_dashboard
    from tests.dashboards.test_live import expand

    store = ResultsStore(url, create=False)
    found = {}
    with store.engine.connect() as conn:
        variables = {
            v.name: [str(r[0]) for r in conn.execute(text(v.query))]
            for v in scores_dashboard().variables
        }
        variables["sweep"] = [SWEEP]
        for name, query in ALL_QUERIES.items():
            started = time.perf_counter()
            conn.execute(text(expand(query.sql, variables))).fetchall()
            found[f"panel {name}"] = time.perf_counter() - started
    store.engine.dispose()
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def viewer(url: str) -> Iterator[str]:
    """`hangar view` on loopback, as users start it; its base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [HANGAR, "view", "--store", url, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        import httpx

        for _ in range(600):
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(base + "/favicon.ico", timeout=1)
                break
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(30)


def pages(base: str) -> dict[str, tuple[float, float]]:
    """Each viewer page in headless Chromium: (first byte, loaded), seconds."""
    from playwright.sync_api import sync_playwright

    key = f"{7:064x}"[-64:]  # a retried trial
    paths = {
        "sweeps": "/",
        "sweep (first view)": f"/sweeps/{SWEEP}",
        "sweep (again)": f"/sweeps/{SWEEP}",
        "sweep summary part": f"/sweeps/{SWEEP}/part/summary",
        "trials, page 1": f"/sweeps/{SWEEP}/part/trials",
        "trials, page 900": f"/sweeps/{SWEEP}/part/trials?page=900",
        "trials, filtered": f"/sweeps/{SWEEP}/part/trials?verdict=fail&model=model-1&page=20",
        "sweep state (API)": f"/api/sweeps/{SWEEP}/state",
        "a trial": f"/trials/{SWEEP}/{key}",
        "compare (choices)": "/compare",
        "compare two runs": f"/compare?a={SWEEP}&b={SWEEP}",
    }
    built = {  # once the large sweep's report and snapshot are built, in the background
        "sweep (report built)": f"/sweeps/{SWEEP}",
        "compare (snapshots built)": f"/compare?a={SWEEP}&b={SWEEP}",
    }
    chromium = shutil.which("chromium")
    found = {}
    with sync_playwright() as manager:
        browser = manager.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page()

        def visit(name: str, path: str) -> None:
            page.goto(base + path, timeout=600_000, wait_until="load")
            timing = page.evaluate(
                "(() => { const n = performance.getEntriesByType('navigation')[0];"
                " return [n.responseStart - n.startTime, n.loadEventEnd - n.startTime]; })()"
            )
            found[name] = (timing[0] / 1000, timing[1] / 1000)

        for name, path in paths.items():
            visit(name, path)
        found["(report built after)"] = (built_after(base), 0.0)
        for name, path in built.items():
            visit(name, path)
        browser.close()
    return found


def built_after(base: str) -> float:
    """Seconds until the sweep page shows its report (no longer "being built")."""
    import httpx

    started = time.perf_counter()
    while "is being built" in httpx.get(f"{base}/sweeps/{SWEEP}/part/summary", timeout=60).text:
        time.sleep(0.25)
    return time.perf_counter() - started


@contextlib.contextmanager
def store_url(kind: str, folder: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{folder / 'results.db'}"
        return
    from tests.services import throwaway_postgres

    with throwaway_postgres() as url:
        yield url


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=100_000)
    parser.add_argument("--stores", default="sqlite,postgres")
    args = parser.parse_args()
    for kind in args.stores.split(","):
        with tempfile.TemporaryDirectory() as tmp, store_url(kind, Path(tmp)) as url:
            recorded = fill(url, args.trials)
            print(f"\n{kind}: {args.trials} trials recorded in {recorded:.1f} s", flush=True)
            for name, took in outputs(url, Path(tmp)).items():
                print(f"  {name:28} {took:7.2f} s", flush=True)
            if kind == "postgres":
                for name, took in panels(url).items():
                    print(f"  {name:28} {took:7.2f} s", flush=True)
            with viewer(url) as base:
                for name, (first, loaded) in pages(base).items():
                    if name.startswith("("):
                        print(f"  view: {name:22} {first:6.2f} s after the last page", flush=True)
                        continue
                    print(
                        f"  view: {name:22} first byte {first:6.2f} s, loaded {loaded:6.2f} s",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
