"""`make demo`: a real sweep on the embedded defaults.

Runs `examples/sweep.yaml` (the statkit scenario, agents `gold` and `noop`, two repeats)
through the real driver on an embedded Ray: each trial clones the pinned revision, runs
the agent in a docker sandbox with the network off, runs the hidden tests in a fresh
sandbox, is judged by the pinned host verifier, and stores its evidence bundle; results
go to SQLite under ./runs. Prints every result (gold -> pass, noop -> fail) with its
bundle, and exits non-zero if a verdict is not the expected one. Run it again and the
sweep resumes: nothing runs twice.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hangar.cli import console, print_result
from hangar.scheduler.driver import SweepRunner
from hangar.scheduler.sweep import load_sweep
from hangar.store import ResultsStore

HERE = Path(__file__).resolve().parent
EXPECTED = {"gold": "pass", "noop": "fail"}


def main() -> int:
    """Run the example sweep and check every verdict."""
    sweep = load_sweep(HERE / "sweep.yaml")
    store = ResultsStore(sweep.config.store)
    console.print(f"sweep {sweep.id}: {sweep.size} trials, results in {store.url}\n")
    tally = SweepRunner(sweep, store).run()
    results = list(store.results(sweep.id))
    for result in results:
        print_result(result)
    console.print(f"\n{tally.done} trial(s) ran now, {tally.skipped} were already final (resume)")
    wrong = [r for r in results if r.verdict.value != EXPECTED[r.agent]]
    for name, want in EXPECTED.items():
        got = sorted({r.verdict.value for r in results if r.agent == name})
        mark = "[green]as expected[/]" if got == [want] else f"[red]expected {want}[/]"
        console.print(f"{name} -> {', '.join(got)}  {mark}")
    console.print("check a bundle with: hangar evidence verify URI")
    return 1 if wrong or len(results) != sweep.size else 0


if __name__ == "__main__":
    sys.exit(main())
