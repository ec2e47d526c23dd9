"""What watching a shared verifier costs: an image task's trials with the observer and
without it, measured in one run.

A Harbor task in the shape of Terminal-Bench's (a bug in ``/app``, a ``test.sh`` that runs
pytest on ``/tests/test_outputs.py`` and writes the reward), shared verification, run N
times with its reference solution through hangar's own trial (`run_trial`, the docker
backend), alternating two ways of verifying it:

- **observed**: hangar's verifier (the test script under the observer, its record judged);
- **unobserved**: the same trial verified as it was before the observer, the baseline:
  the agent's changes listed by the engine (``docker diff``, not read from the container's
  layer), the test script run as ``bash /tests/test.sh`` under ``timeout``, nothing
  recorded or judged.

Prints each way's median trial wall time and its phases (the hand-over to the verifier,
the diff, the tests, the judgement) and the ratio (``--json FILE``: every run). The fixed
cost of an image trial is its wall time; the target is observed / unobserved <= 1.0.

    python benchmarks/verification.py [--trials 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TASK_TOML = """schema_version = "1.2"
[task]
name = "bench/calc"
[agent]
timeout_sec = 120.0
[verifier]
timeout_sec = 120.0
[environment]
memory = "1G"
storage = "256M"
"""
TEST_SH = """#!/bin/bash
cd /app
python3 -m pytest -p no:cacheprovider /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""
TESTS = """import sys
sys.path.insert(0, "/app")
from calc import add


def test_add():
    assert add(2, 3) == 5
"""
PHASES = ("hand_over", "final_diff", "tests", "judgement")


def make_task(root: Path) -> Path:
    """The task folder (its image: the stock base with the bug copied in)."""
    for folder in ("environment", "tests", "solution"):
        (root / folder).mkdir(parents=True)
    (root / "task.toml").write_text(TASK_TOML)
    (root / "instruction.md").write_text("add() in /app/calc.py is wrong. Fix it.\n")
    (root / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm\nWORKDIR /app\nCOPY calc.py /app/calc.py\n"
    )
    (root / "environment" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "tests" / "test.sh").write_text(TEST_SH)
    (root / "tests" / "test_outputs.py").write_text(TESTS)
    (root / "solution" / "solve.sh").write_text("sed -i 's/a - b/a + b/' /app/calc.py\n")
    return root / "task.toml"


@contextmanager
def unobserved() -> Iterator[None]:
    """The shared place as it was before the observer (see the module docstring)."""
    from hangar.kinds.execution.images.verifier import ImageVerifierPlace, Shared
    from hangar.sandbox.docker import DockerSandbox

    saved = Shared.run, Shared.judged, Shared.mounts, DockerSandbox.changes
    Shared.run, Shared.judged, Shared.mounts = (  # type: ignore[method-assign]
        ImageVerifierPlace.run,
        ImageVerifierPlace.judged,
        ImageVerifierPlace.mounts,
    )
    DockerSandbox.changes = DockerSandbox.engine_changes  # type: ignore[method-assign]
    try:
        yield
    finally:
        Shared.run, Shared.judged, Shared.mounts, DockerSandbox.changes = saved  # type: ignore[method-assign]


def one(toml: Path, work: Path) -> dict[str, float]:
    """One trial of the reference solution: its wall time and phase times."""
    from hangar.agents import ORACLE
    from hangar.kinds.execution import KIND, single_trial
    from hangar.kinds.execution.harbor.tasks import load_task
    from hangar.kinds.execution.settings import execution_settings
    from hangar.results import Verdict
    from hangar.trials import Arm, run_trial

    settings = execution_settings(image_map={"debian:*": "hangar/base:bookworm-stock"})
    task = KIND.configure(load_task(toml), settings)
    spec = single_trial(task, ORACLE, Arm(name="control"), evidence_url=(work / "ev").as_uri())
    spec = spec.model_copy(update={"work_root": work / "trials", "cache_root": work / "cache"})
    started = time.perf_counter()
    result = run_trial(spec)
    wall = time.perf_counter() - started
    if result.verdict is not Verdict.PASS:
        raise SystemExit(f"the reference solution did not pass: {result.reason}")
    return {"wall": wall, **{p: result.timings.get(p, 0.0) for p in PHASES}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10, help="trials of each way")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    from hangar.sandbox.helper import helper_binary
    from hangar.sandbox.task_images import stock_image

    stock_image()
    helper_binary()
    runs: dict[str, list[dict[str, float]]] = {"observed": [], "unobserved": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        toml = make_task(work / "task")
        one(toml, work / "warm")  # the image built, the helper and the mirror made
        for i in range(args.trials):  # alternating: a drifting machine moves both
            runs["observed"].append(one(toml, work / f"o{i}"))
            with unobserved():
                runs["unobserved"].append(one(toml, work / f"u{i}"))
    medians = {
        way: {key: statistics.median(r[key] for r in rs) for key in ("wall", *PHASES)}
        for way, rs in runs.items()
    }
    ratio = medians["observed"]["wall"] / medians["unobserved"]["wall"]
    print(f"{'':12}{'wall':>8}" + "".join(f"{p:>12}" for p in PHASES))
    for way, m in medians.items():
        print(f"{way:12}{m['wall']:8.3f}" + "".join(f"{m[p]:12.3f}" for p in PHASES))
    print(f"observed / unobserved: {ratio:.3f} (target <= 1.0)")
    report: dict[str, Any] = {
        "trials": args.trials,
        "medians": medians,
        "ratio": ratio,
        "runs": runs,
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
