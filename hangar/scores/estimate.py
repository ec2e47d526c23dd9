"""What a sweep will cost before it runs, from what earlier trials cost.

For each trial the sweep would still run (a trial whose key is final in the store costs
nothing more), the expected cost and tokens come from the store's earlier counted trials
(the latest attempt of each, pass or fail, any sweep, judge included):

1. of the same task version (its digest) in the same arm with the same model: their
   mean, and their spread when there are two or more;
2. else of that task version with that model in another arm;
3. else of the same model on other tasks of the same kind;
4. else, for a trial whose kind can tell its tokens from the task alone (a decision
   case: its prompts' tokens, counted offline, and an answer's allowance; `Kind.token_guess`),
   from those tokens and the model's price (its own ``price``, else the genai-prices
   table);
5. else it cannot be estimated, and is named (a first run of an agent's loop, a model
   with no price).

The total is the sum of the means, with a 95% interval from the sum of the spreads
(the trials' costs taken as independent: a normal approximation; a one-trial basis lends
its group's spread); a trial estimated from its prompt widens it by its answer's whole
cost each way (no answer at all, or twice the allowance). Nothing here calls a model.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
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
    model_spec: Any


#: A trial's (input, output) tokens told from its task alone, or None (`Kind.token_guess`).
Guess = Callable[[Any], tuple[int, int] | None]


def _priced(spec: Trial, tokens_in: int, tokens_out: int) -> float | None:
    """The cost of those tokens at the trial's model's price (None: it has none)."""
    from hangar.models.pricing import cost_of, has_price
    from hangar.results import Usage

    model = spec.model_spec
    if model is None:
        return None
    provider = model.price_provider or model.provider
    if not has_price(model.id, provider, model.price):
        return None
    usage = Usage(input_tokens=tokens_in, output_tokens=tokens_out)
    return cost_of(usage, model.id, provider, model.price).cost_usd


class _Group:
    def __init__(self, rows: list[tuple[float, int, int]]) -> None:
        costs = [r[0] for r in rows]
        self.n = len(rows)
        self.cost = statistics.fmean(costs)
        self.var = statistics.variance(costs) if len(costs) > 1 else None
        self.tokens_in = statistics.fmean(r[1] for r in rows)
        self.tokens_out = statistics.fmean(r[2] for r in rows)


def estimate(
    specs: Iterable[Trial], store: ResultsStore | None, final: set[str], guess: Guess | None = None
) -> Estimate:
    """The estimate of the sweep whose trials are `specs` (`final`: keys already final;
    no `store`: nothing earlier to estimate from; `guess`: a trial's tokens from its task,
    for those with no earlier trial)."""
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
    total = var = tin = tout = answers = 0.0
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
            told = _from_prompt(spec, guess)
            if told is None:
                unknown[f"{spec.task.id} ({spec.task.kind}) with model {spec.model}"] += 1
                continue
            counted[PROMPT_BASIS] += 1
            cost, answer, tokens = told
            total += cost
            answers += answer
            tin += tokens[0]
            tout += tokens[1]
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
        low_usd=max(0.0, total - half - answers),
        high_usd=total + half + answers,
        tokens_in=round(tin),
        tokens_out=round(tout),
        basis=[Basis(what=w, trials=c) for w, c in sorted(counted.items())],
        unknown=[f"{what} x{count}" for what, count in sorted(unknown.items())],
    )


#: How a trial estimated from its prompt is said.
PROMPT_BASIS = "its prompt's tokens and the model's price"


def _from_prompt(spec: Trial, guess: Guess | None) -> tuple[float, float, tuple[int, int]] | None:
    """(cost, its answer's part of it, (input, output) tokens) of a trial estimated from
    its prompt; None when its kind cannot tell or its model has no price."""
    told = guess(spec) if guess is not None else None
    if told is None:
        return None
    cost = _priced(spec, *told)
    answer = _priced(spec, 0, told[1])
    if cost is None or answer is None:
        return None
    return cost, answer, told
