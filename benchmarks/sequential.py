"""Stopping a comparison once decided, by simulation: error rates and paid trials saved.

A comparison of a baseline and a candidate on N paired units (tasks), each run `repeats`
times per group, with known true differences (candidate - baseline) of 0, the margin M
and 2M. Each unit's baseline pass probability is drawn from U(0.2, 0.5) and the
candidate's is that plus the true difference (no clipping, so the difference is exact);
a unit's value is the difference of the two groups' pass rates over its repeats.

Three designs on the same seeded replications:

- **fixed**: all N units, then a fixed-sample 95% interval of the mean difference (the
  normal one, which the report's paired bootstrap matches at these sizes; the decision
  "shown to lose by at least M" when its lower bound reaches M);
- **peeking**: the same interval looked at after every round, stopping as soon as it
  settles either way (what a user does by hand; its level is not 95%);
- **until decided**: hangar's rule (`hangar.scores.sequential`): the anytime-valid
  confidence sequence looked at after every round, stopping when settled.

An error is a claim the truth contradicts: "shown to lose by at least M" when the true
difference is below M, or "settled: cannot be shown to lose by M" (the upper bound below
M) when it is M or more. Nominal: at most 5%. Printed per true difference: each design's
error rate, how often it decided "lose", and the mean paired units (so paid trials) it
used, with the saving against the fixed design.

    python benchmarks/sequential.py [--replications 2000] [--units 200] [--round 10]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hangar.scores.sequential import ConfidenceSequence, status
from hangar.scores.stats import Z95


def unit_differences(rng: random.Random, units: int, repeats: int, truth: float) -> list[float]:
    """One replication's per-unit differences (candidate rate - baseline rate)."""
    out = []
    for _ in range(units):
        base = rng.uniform(0.2, 0.5)
        cand = base + truth
        b = sum(rng.random() < base for _ in range(repeats)) / repeats
        c = sum(rng.random() < cand for _ in range(repeats)) / repeats
        out.append(c - b)
    return out


def normal_status(d: list[float], margin: float) -> str:
    """The fixed-sample 95% interval's decision (mean ± 1.96 sd/√n: what the report's
    paired bootstrap gives at these sizes, computed in microseconds)."""
    n = len(d)
    mean = fmean(d)
    sd = (sum((x - mean) ** 2 for x in d) / (n - 1)) ** 0.5
    low, high = mean - Z95 * sd / n**0.5, mean + Z95 * sd / n**0.5
    return "lose" if low >= margin else "not_lose" if high < margin else "open"


def run_design(d: list[float], margin: float, round_size: int, how: str) -> tuple[str, int]:
    """(its decision: lose / not_lose / open, the units it used)."""
    if how == "fixed":
        return normal_status(d, margin), len(d)
    sequence = ConfidenceSequence()
    for n in range(1, len(d) + 1):
        sequence.add(d[n - 1])
        if n % round_size and n < len(d):
            continue
        peeked = normal_status(d[:n], margin) if how == "peeking" else None
        state = peeked or status(sequence.now(), margin)
        if state != "open" or n == len(d):
            return state, n
    raise AssertionError("unreachable")


def error(decided: str, truth: float, margin: float) -> bool:
    if decided == "lose":
        return truth < margin
    if decided == "not_lose":
        return truth >= margin
    return False  # "not shown to lose" at the end of a fixed design claims nothing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replications", type=int, default=2000)
    parser.add_argument("--units", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--round", type=int, default=10)
    parser.add_argument(
        "--margin", type=float, default=0.15, help="M, as a rate (0.15 = 15 points)"
    )
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    margin = args.margin
    print(f"{args.replications} replications per truth, {args.units} paired units x "
          f"{args.repeats} repeats per group, rounds of {args.round}, margin "
          f"{margin * 100:g} points, seed {args.seed}")  # fmt: skip
    print(f"{'truth':>8} {'design':>13} {'errors':>8} {'says lose':>10} {'units':>7} {'saved':>7}")
    for truth in (0.0, margin, 2 * margin):
        rng = random.Random(f"{args.seed}-{truth}")
        rows: dict[str, list[tuple[str, int]]] = {"fixed": [], "peeking": [], "until decided": []}
        for _ in range(args.replications):
            d = unit_differences(rng, args.units, args.repeats, truth)
            for how in rows:
                key = "sequential" if how == "until decided" else how
                rows[how].append(run_design(d, margin, args.round, key))
        fixed_units = fmean(n for _, n in rows["fixed"])
        for how, outcomes in rows.items():
            errors = fmean(error(s, truth, margin) for s, _ in outcomes)
            lose = fmean(s == "lose" for s, _ in outcomes)
            units = fmean(n for _, n in outcomes)
            saved = 1 - units / fixed_units
            print(f"{truth * 100:>7g}p {how:>13} {errors:>8.2%} {lose:>10.2%} {units:>7.1f} "
                  f"{saved:>7.0%}")  # fmt: skip


if __name__ == "__main__":
    main()
