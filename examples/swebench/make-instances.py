#!/usr/bin/env python3
"""Write instances.jsonl: SWE-bench-format instances of statkit (examples/repos), with
FAIL_TO_PASS and PASS_TO_PASS measured by running the tests before and after the fix.

Each instance is a fix (`patch`) and the tests that show it (`test_patch`) on statkit's
first commit. The tests run with pytest -rA in a fresh checkout, and their statuses are
read with the swebench package's own pytest parser: FAIL_TO_PASS are the tests that fail
with the test patch alone and pass with the fix too; PASS_TO_PASS pass both times.
Run: python3 examples/swebench/make-instances.py (needs git and pytest).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from swebench.harness.log_parsers.python import parse_log_pytest

HERE = Path(__file__).resolve().parent
BUNDLE = HERE.parent / "repos" / "statkit.bundle"
BASE = "1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2"


def median_fix(text: str) -> str:
    return text.replace(
        "    mid = len(ordered) // 2\n    return ordered[mid]\n",
        "    mid = len(ordered) // 2\n    if len(ordered) % 2 == 0:\n"
        "        return (ordered[mid - 1] + ordered[mid]) / 2\n    return ordered[mid]\n",
    )


def median_tests(text: str) -> str:
    return text.replace(
        "\n\ndef test_mode_tie_takes_smallest():",
        "\n\ndef test_median_even_length():\n    assert median([4, 1, 3, 2]) == 2.5\n"
        "\n\ndef test_mode_tie_takes_smallest():",
    )


def variance_fix(text: str) -> str:
    return text + (
        "\n\ndef variance(values):\n"
        '    """Population variance of a non-empty sequence."""\n'
        "    centre = mean(values)\n"
        "    return sum((v - centre) ** 2 for v in values) / len(values)\n"
    )


VARIANCE_TESTS = (
    "from statkit.stats import variance\n\n\n"
    "def test_variance():\n    assert variance([1, 2, 3, 4]) == 1.25\n\n\n"
    "def test_variance_of_one_value_is_zero():\n    assert variance([7]) == 0\n"
)

#: (instance id, {file: edit of its text} of the fix, of the tests, the problem statement)
INSTANCES = [
    (
        "statkit__statkit-1",
        {"statkit/stats.py": median_fix},
        {"tests/test_stats.py": median_tests},
        "median() returns the wrong value for lists with an even number of elements: "
        "it must return the mean of the two middle values once the list is sorted.",
    ),
    (
        "statkit__statkit-2",
        {"statkit/stats.py": variance_fix},
        {"tests/test_variance.py": lambda _: VARIANCE_TESTS},
        "statkit has no variance. Add `variance(values)` to statkit/stats.py: the "
        "population variance of a non-empty sequence.",
    ),
]


def git(*args: str, cwd: Path, stdin: str | None = None) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, input=stdin, text=True, check=True, capture_output=True
    ).stdout


def edit(checkout: Path, edits: dict[str, Callable[[str], str]]) -> str:
    """Apply `edits` and return them as a patch (against the checkout's HEAD)."""
    for rel, change in edits.items():
        path = checkout / rel
        before = path.read_text() if path.exists() else ""
        after = change(before)
        assert after != before, f"{rel}: the edit changed nothing"
        path.write_text(after)
    git("add", "-A", cwd=checkout)
    patch = git("diff", "--cached", "--no-color", "--no-ext-diff", cwd=checkout)
    git("reset", "-q", "--hard", cwd=checkout)
    return patch


def statuses(checkout: Path, files: list[str]) -> dict[str, str]:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *files],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
    )
    return dict(parse_log_pytest(run.stdout, None))


def measure(fix: dict, tests: dict) -> tuple[str, str, list[str], list[str]]:
    """The fix and test patches, and FAIL_TO_PASS, PASS_TO_PASS as the tests show them."""
    with tempfile.TemporaryDirectory() as tmp:
        checkout = Path(tmp) / "statkit"
        git("clone", "-q", str(BUNDLE), str(checkout), cwd=Path(tmp))
        git("checkout", "-q", BASE, cwd=checkout)
        patch, test_patch = edit(checkout, fix), edit(checkout, tests)
        files = sorted(tests)
        git("apply", "-", cwd=checkout, stdin=test_patch)
        before = statuses(checkout, files)
        git("apply", "-", cwd=checkout, stdin=patch)
        after = statuses(checkout, files)
    passed = [t for t, s in after.items() if s == "PASSED"]
    fail_to_pass = sorted(t for t in passed if before.get(t) != "PASSED")
    pass_to_pass = sorted(t for t in passed if before.get(t) == "PASSED")
    return patch, test_patch, fail_to_pass, pass_to_pass


def main() -> None:
    lines = []
    for instance_id, fix, tests, problem in INSTANCES:
        patch, test_patch, f2p, p2p = measure(fix, tests)
        assert f2p, f"{instance_id}: no test fails before the fix"
        lines.append(
            json.dumps(
                {
                    "instance_id": instance_id,
                    "repo": "statkit/statkit",
                    "base_commit": BASE,
                    "patch": patch,
                    "test_patch": test_patch,
                    "problem_statement": problem,
                    "hints_text": "",
                    "version": "0.1",
                    "FAIL_TO_PASS": json.dumps(f2p),
                    "PASS_TO_PASS": json.dumps(p2p),
                    "environment_setup_commit": BASE,
                    "created_at": "2026-01-06T10:00:00Z",
                    # statkit is not installed in the image: run pytest as a module, from the
                    # repository's root (a field hangar reads beside the datasets' own)
                    "test_cmd": "python3 -m pytest -rA -p no:cacheprovider",
                }
            )
        )
    (HERE / "instances.jsonl").write_text("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} instances to {HERE / 'instances.jsonl'}")


if __name__ == "__main__":
    main()
