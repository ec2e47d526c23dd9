"""What a sweep will cost before it runs, from what earlier trials cost.

For each trial the sweep would still run (a trial whose key is final in the store costs
nothing more), the expected cost and tokens come from the store's earlier counted trials
(the latest attempt of each, pass or fail, any sweep, judge included), the nearest first:

1. of the same task version (its digest) in the same arm with the same agent (its
   settings' digest) and model: their mean, and their spread when there are two or more;
2. else of that task version, arm and model with another agent (a changed system prompt,
   say);
3. else of that task version with that model in another arm;
4. else of the same model on other tasks of the same kind;
5. else, for a trial whose kind can tell its tokens from the task alone (a decision
   case: its prompts' tokens, counted offline, and an answer's allowance; `Kind.token_guess`),
   from those tokens and the model's price (its own ``price``, else the genai-prices
   table);
6. else it cannot be estimated, and is named (a first run of an agent's loop, a model
   with no price).

Where the basis is not the trial's own task, arm and agent (2 to 4) and its kind can tell
its input tokens, those are the trial's own (what it will send is known) and only its
output tokens come from the basis: a longer system prompt costs what it adds.

The total is the sum of the means, with a 95% interval from the sum of the spreads
(the trials' costs taken as independent: a normal approximation; a one-trial basis lends
its group's spread); a trial estimated from its prompt widens it by its answer's whole
cost each way (no answer at all, or twice the allowance). Nothing here calls a model.
`benchmarks/estimate.py` measures it against real sweeps.
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
    agent: Any
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
    provider = model.price_table
    if not has_price(model.id, provider, model.price):
        return None
    usage = Usage(input_tokens=tokens_in, output_tokens=tokens_out)
    return cost_of(usage, model.id, provider, model.price).cost_usd


def _unpriced(spec: Trial) -> bool:
    """Whether the trial's model has no price (so its cost is recorded as 0)."""
    from hangar.models.pricing import has_price

    model = spec.model_spec
    if model is None or model.provider == "none":
        return False
    return not has_price(model.id, model.price_table, model.price)


class _Group:
    def __init__(self, rows: list[tuple[float, int, int]]) -> None:
        costs = [r[0] for r in rows]
        self.n = len(rows)
        self.cost = statistics.fmean(costs)
        self.var = statistics.variance(costs) if len(costs) > 1 else None
        self.tokens_in = statistics.fmean(r[1] for r in rows)
        self.tokens_out = statistics.fmean(r[2] for r in rows)


#: The bases, nearest first: what each is called, and its key of an earlier trial's row
#: and of a trial to run.
_LEVELS: list[
    tuple[str, Callable[[dict[str, Any]], tuple[str, ...]], Callable[[Trial], tuple[str, ...]]]
] = [
    (
        "same task, arm, agent and model",
        lambda r: (r["scenario_digest"], r["model"], r["arm"], r["agent_digest"]),
        lambda t: (t.task.digest, t.model, t.arm, t.agent.digest()),
    ),
    (
        "same task, arm and model, another agent",
        lambda r: (r["scenario_digest"], r["model"], r["arm"]),
        lambda t: (t.task.digest, t.model, t.arm),
    ),
    (
        "same task and model",
        lambda r: (r["scenario_digest"], r["model"]),
        lambda t: (t.task.digest, t.model),
    ),
    ("same model and kind", lambda r: (r["kind"], r["model"]), lambda t: (t.task.kind, t.model)),
]


class _Sum:
    """The running total of the trials estimated so far."""

    def __init__(self) -> None:
        self.cost = self.var = self.tokens_in = self.tokens_out = self.answers = 0.0
        self.counted: dict[str, int] = defaultdict(int)

    def add(self, what: str, cost: float, var: float, tokens: tuple[float, float]) -> None:
        self.counted[what] += 1
        self.cost += cost
        self.var += var
        self.tokens_in += tokens[0]
        self.tokens_out += tokens[1]


def estimate(
    specs: Iterable[Trial], store: ResultsStore | None, final: set[str], guess: Guess | None = None
) -> Estimate:
    """The estimate of the sweep whose trials are `specs` (`final`: keys already final;
    no `store`: nothing earlier to estimate from; `guess`: a trial's tokens from its task,
    for those with no earlier trial)."""
    grouped: list[dict[tuple[str, ...], list[tuple[float, int, int]]]] = [
        defaultdict(list) for _ in _LEVELS
    ]
    for row in store.cost_history() if store is not None else []:
        point = (float(row["cost_usd"]), int(row["tokens_in"]), int(row["tokens_out"]))
        for (_, of_row, _), groups in zip(_LEVELS, grouped, strict=True):
            groups[of_row(row)].append(point)
    levels = [
        (what, of_trial, {k: _Group(v) for k, v in groups.items()})
        for (what, _, of_trial), groups in zip(_LEVELS, grouped, strict=True)
    ]
    total = _Sum()
    unknown: dict[str, int] = defaultdict(int)
    n = to_run = 0
    for spec in specs:
        n += 1
        if spec.trial_key in final:
            continue
        to_run += 1
        if spec.model == "none":
            continue  # no model: no cost
        if _unpriced(spec):  # its cost is recorded as 0: no estimate would be its cost
            unknown[f"{spec.task.id} ({spec.task.kind}) with model {spec.model}: no price"] += 1
            continue
        found = [
            (i, what, groups[key])
            for i, (what, of_trial, groups) in enumerate(levels)
            if (key := of_trial(spec)) in groups
        ]
        if found:
            i, what, group = found[0]
            wide = levels[-1][2].get(levels[-1][1](spec))
            spread = group.var if group.var is not None else (wide.var if wide else None)
            var = spread if spread is not None else group.cost**2  # one trial: as wide as it
            told = guess(spec) if guess is not None and i > 0 else None
            cost = _priced(spec, told[0], round(group.tokens_out)) if told else None
            if told and cost is not None:  # its own input, the basis's output
                total.add(f"{what} ({OWN_INPUT})", cost, var, (told[0], group.tokens_out))
            else:
                total.add(what, group.cost, var, (group.tokens_in, group.tokens_out))
            continue
        from_prompt = _from_prompt(spec, guess)
        if from_prompt is None:
            unknown[f"{spec.task.id} ({spec.task.kind}) with model {spec.model}"] += 1
            continue
        cost, answer, tokens = from_prompt
        total.add(PROMPT_BASIS, cost, 0.0, tokens)
        total.answers += answer
    half = Z95 * math.sqrt(total.var)
    return Estimate(
        trials=n,
        to_run=to_run,
        cost_usd=total.cost,
        low_usd=max(0.0, total.cost - half - total.answers),
        high_usd=total.cost + half + total.answers,
        tokens_in=round(total.tokens_in),
        tokens_out=round(total.tokens_out),
        basis=[Basis(what=w, trials=c) for w, c in sorted(total.counted.items())],
        unknown=[f"{what} x{count}" for what, count in sorted(unknown.items())],
    )


#: How a basis whose output tokens alone are used is said.
OWN_INPUT = "input tokens from its own prompt"
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
