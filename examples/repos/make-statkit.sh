#!/usr/bin/env bash
# Rebuilds repos/statkit.bundle, the example repository, byte for byte the same commits:
# fixed identities and dates make the commit ids reproducible.
#   1. "statkit: mean, median, mode"   <- the scenario's pinned revision (median has a bug)
#   2. "fix median of even-length lists" (later history; a workspace never contains it)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GIT_AUTHOR_NAME=statkit GIT_AUTHOR_EMAIL=statkit@example.invalid
export GIT_COMMITTER_NAME=statkit GIT_COMMITTER_EMAIL=statkit@example.invalid
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
cd "$work"
git init -q -b main statkit && cd statkit
mkdir -p statkit tests
cat > statkit/__init__.py <<'PY'
"""statkit: small descriptive statistics."""

from statkit.stats import mean, median, mode

__all__ = ["mean", "median", "mode"]
PY
cat > statkit/stats.py <<'PY'
"""Descriptive statistics of sequences of numbers."""

from collections import Counter


def mean(values):
    """Arithmetic mean of a non-empty sequence."""
    if not values:
        raise ValueError("mean of an empty sequence")
    return sum(values) / len(values)


def median(values):
    """Median of a non-empty sequence: the middle value once sorted."""
    if not values:
        raise ValueError("median of an empty sequence")
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid]


def mode(values):
    """Most common value; the smallest one on a tie."""
    if not values:
        raise ValueError("mode of an empty sequence")
    counts = Counter(values)
    best = max(counts.values())
    return min(v for v, c in counts.items() if c == best)
PY
cat > tests/test_stats.py <<'PY'
import pytest

from statkit import mean, median, mode


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_median_odd_length():
    assert median([3, 1, 2]) == 2


def test_mode_tie_takes_smallest():
    assert mode([2, 2, 1, 1, 3]) == 1


def test_empty_raises():
    with pytest.raises(ValueError):
        median([])
PY
printf 'statkit\n=======\n\nSmall descriptive statistics: mean, median, mode.\nRun the tests with `python3 -m pytest`.\n' > README.md
git add -A
GIT_AUTHOR_DATE="2026-01-05T10:00:00Z" GIT_COMMITTER_DATE="2026-01-05T10:00:00Z" \
    git commit -q -m "statkit: mean, median, mode"
python3 - <<'PY'
from pathlib import Path
p = Path("statkit/stats.py")
p.write_text(p.read_text().replace(
    "    return ordered[mid]\n",
    "    if len(ordered) % 2 == 0:\n        return (ordered[mid - 1] + ordered[mid]) / 2\n"
    "    return ordered[mid]\n",
))
PY
GIT_AUTHOR_DATE="2026-01-06T10:00:00Z" GIT_COMMITTER_DATE="2026-01-06T10:00:00Z" \
    git commit -q -am "fix median of even-length lists"
git tag v1.0.1
git bundle create -q "$here/statkit.bundle" --all
git log --format='%H %s'
