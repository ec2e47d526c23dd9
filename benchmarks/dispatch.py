"""The scheduler's throughput and the driver's memory, at two sweep sizes in one run.

A sweep of trivial trials on LocalSandbox (a no-op agent, no verifier command) runs
through the real driver and embedded Ray, once at SMALL and once at LARGE trials. The
driver's peak RSS is sampled every 50 ms. The window of in-flight trials is bounded and
expansion is lazy, so the peak should not grow with the sweep: target peak(LARGE) /
peak(SMALL) <= 1.2.

    python benchmarks/dispatch.py [--small 2000] [--large 20000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

import psutil

from hangar.scheduler.driver import SweepRunner
from hangar.scheduler.sweep import load_sweep
from hangar.store import ResultsStore

ROOT = Path(__file__).resolve().parent.parent
REVISION = "1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2"


class PeakRss:
    """Samples this process's RSS in a thread; `peak` is the highest seen."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, me.memory_info().rss)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def sweep_file(folder: Path, trials: int) -> Path:
    shutil.copy(ROOT / "examples" / "repos" / "statkit.bundle", folder / "repo.bundle")
    (folder / "scenario.yaml").write_text(
        f"id: dispatch\nrepository: repo.bundle\nrevision: {REVISION}\n"
        "context: Do nothing.\nverifier:\n  host: {builtin: junit}\n"
    )
    path = folder / "sweep.yaml"
    path.write_text(
        f"id: dispatch-{trials}\nscenarios: [scenario.yaml]\n"
        "agents: {noop: {command: 'true'}}\n"
        f"repeats: {trials}\nbackend: local\nstore: sqlite:///{folder}/r.db\n"
        f"evidence: file://{folder}/evidence\nconcurrency: {{sandbox_slots: 2}}\n"
    )
    return path


def measure(trials: int) -> tuple[float, int]:
    """(trials per second, peak driver RSS in bytes) of one sweep of `trials`."""
    # Containers and folders of the last trials may still be going away in the background.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        sweep = load_sweep(sweep_file(Path(tmp), trials))
        with PeakRss() as rss:
            started = time.monotonic()
            tally = SweepRunner(sweep, ResultsStore(sweep.config.store)).run()
            elapsed = time.monotonic() - started
        assert tally.done == trials, tally
        return trials / elapsed, rss.peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=2000)
    parser.add_argument("--large", type=int, default=20000)
    args = parser.parse_args()
    mib = 1024 * 1024
    peaks = []
    for n in (args.small, args.large):
        rate, peak = measure(n)
        peaks.append(peak)
        print(f"{n:6d} trials: {rate:6.1f} trials/s, driver peak {peak / mib:6.0f} MiB", flush=True)
    small_peak, large_peak = peaks
    print(f"peak ratio large/small: {large_peak / small_peak:.2f}  (target <= 1.20)")


if __name__ == "__main__":
    main()
