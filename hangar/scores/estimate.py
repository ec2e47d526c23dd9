"""What a sweep will cost before it runs, from what earlier trials cost.

For each trial the sweep would still run (a trial whose key is final in the store costs
nothing more), the expected cost and tokens come from the store's earlier counted trials
(the latest attempt of each, pass or fail, any sweep, judge included):

1. of the same task version (its digest) in the same arm with the same model: their
   mean, and their spread when there are two or more;
2. else of that task version with that model in another arm;
3. else of the same model on other tasks of the same kind;
4. else it cannot be estimated, and is named (a first run of a model or a kind).

The total is the sum of the means, with a 95% interval from the sum of the spreads
(the trials' costs taken as independent: a normal approximation; a one-trial basis lends
its group's spread). Nothing here calls a model or counts a prompt's tokens.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, Protocol

from pydantic import BaseModel, Field

from hangar.store import ResultsStore

Z95 = 1.959963984540054


class Basis(BaseModel):
    """The earlier trials one group of trials is estimated from."""

    what: str
    """``same task and model`` or ``same model and kind``."""
    trials: int
    """How many of the sweep's trials are estimated so."""


class Estimate(BaseModel):
    """The sweep's expected cost and tokens (see the module docstring)."""

    trials: int
    """The sweep's trials."""
    to_run: int
    """Those not final in the store yet (the rest cost nothing more)."""
    cost_usd: float
    """The expected cost of the trials estimated."""
    low_usd: float
    """The 95% interval's low end (not below 0)."""
    high_usd: float
    """Its high end."""
    tokens_in: int
    """The expected input tokens of the trials estimated."""
    tokens_out: int
    """The expected output tokens."""
    basis: list[Basis] = Field(default_factory=list)
    """How the trials were estimated."""
    unknown: list[str] = Field(default_factory=list)
    """Trials that could not be estimated, by task and model (with how many)."""


class Trial(Protocol):
    """What the estimate reads of a trial spec (`hangar.trials.spec.TrialSpec`)."""

    trial_key: str
    model: str
    arm: str
    task: Any


class _Group:
    def __init__(self, rows: list[tuple[float, int, int]]) -> None:
        costs = [r[0] for r in rows]
        self.n = len(rows)
        self.cost = statistics.fmean(costs)
        self.var = statistics.variance(costs) if len(costs) > 1 else None
        self.tokens_in = statistics.fmean(r[1] for r in rows)
        self.tokens_out = statistics.fmean(r[2] for r in rows)


def estimate(specs: Iterable[Trial], store: ResultsStore | None, final: set[str]) -> Estimate:
    """The estimate of the sweep whose trials are `specs` (`final`: keys already final;
    no `store`: nothing earlier to estimate from)."""
    by_arm: dict[tuple[str, ...], list[tuple[float, int, int]]] = defaultdict(list)
    by_task: dict[tuple[str, ...], list[tuple[float, int, int]]] = defaultdict(list)
    by_kind: dict[tuple[str, ...], list[tuple[float, int, int]]] = defaultdict(list)
    for row in store.cost_history() if store is not None else []:
        point = (float(row["cost_usd"]), int(row["tokens_in"]), int(row["tokens_out"]))
        by_arm[(row["scenario_digest"], row["model"], row["arm"])].append(point)
        by_task[(row["scenario_digest"], row["model"])].append(point)
        by_kind[(row["kind"], row["model"])].append(point)
    levels = [
        ("same task, arm and model", {k: _Group(v) for k, v in by_arm.items()}),
        ("same task and model", {k: _Group(v) for k, v in by_task.items()}),
        ("same model and kind", {k: _Group(v) for k, v in by_kind.items()}),
    ]
    total = var = tin = tout = 0.0
    counted: dict[str, int] = defaultdict(int)
    unknown: dict[str, int] = defaultdict(int)
    n = to_run = 0
    for spec in specs:
        n += 1
        if spec.trial_key in final:
            continue
        to_run += 1
        if spec.model == "none":
            continue  # no model: no cost
        keys = [
            (spec.task.digest, spec.model, spec.arm),
            (spec.task.digest, spec.model),
            (spec.task.kind, spec.model),
        ]
        found = [(what, groups[key]) for (what, groups), key in zip(levels, keys, strict=True)
                 if key in groups]  # fmt: skip
        wide = levels[2][1].get(keys[2])
        if not found:
            unknown[f"{spec.task.id} ({spec.task.kind}) with model {spec.model}"] += 1
            continue
        what, group = found[0]
        counted[what] += 1
        spread = group.var if group.var is not None else (wide.var if wide else None)
        total += group.cost
        var += spread if spread is not None else group.cost**2  # one trial: as wide as it
        tin += group.tokens_in
        tout += group.tokens_out
    half = Z95 * math.sqrt(var)
    return Estimate(
        trials=n,
        to_run=to_run,
        cost_usd=total,
        low_usd=max(0.0, total - half),
        high_usd=total + half,
        tokens_in=round(tin),
        tokens_out=round(tout),
        basis=[Basis(what=w, trials=c) for w, c in sorted(counted.items())],
        unknown=[f"{what} x{count}" for what, count in sorted(unknown.items())],
    )
