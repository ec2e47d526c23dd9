"""The LLM judge of seed 002: one dimension per call, both orderings, nothing made up.

For each dimension the judge gets the seed's prompt (the phase, the dimension's name,
anchors and description, the reference output and the candidate output) and answers
``Score (1-5): N`` and ``Justification: ...``. It is asked twice, in both orderings
(the reference first, as the seed writes the prompt, then the candidate first); the
dimension's score is the mean of the two, and their difference is the position-bias gap.
An answer that does not parse gets one follow-up in the same conversation (its answer,
then "answer again in the format"); if that does not parse either, that dimension is
unassessed (never a made-up score). Every call goes through `complete` (the relay's
rules and metering): prompts, raw answers, tokens and cost are evidence, and the judge's
cost is kept apart from the skill's. A sample's calls (every dimension, both orderings)
are asked at once, each its own conversation: a judge's sample costs one call's wait,
not one per dimension and ordering.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from pydantic import BaseModel

from hangar.kinds.rubric.formats import Dimension
from hangar.models import ModelSpec
from hangar.models.complete import complete
from hangar.models.usage import add
from hangar.results import ProviderError, Usage
from hangar.trace import TraceWriter

SYSTEM = "Answer exactly in the format asked: a score line, then a justification line."
#: The follow-up to an answer that does not parse (the judge sees its own answer).
AGAIN = (
    "Your answer did not give a score in the format asked. Answer again, exactly:\n"
    "Score (1-5): <a whole number from 1 to 5>\n"
    "Justification: <1-2 sentences>"
)
Order = Literal["reference-first", "candidate-first"]
_SCORE = re.compile(r"score\s*(?:\(1\s*-\s*5\))?\s*[:=]\s*\**\s*([0-9]+(?:\.[0-9]+)?)", re.I)
_WHY = re.compile(r"justification\s*(?:\([^)]*\))?\s*:\s*(.+)", re.I | re.S)


def prompt(
    phase: str,
    dimension: Dimension,
    reference: str,
    candidate: str,
    order: Literal["reference-first", "candidate-first"],
) -> str:
    """The seed's judge prompt for one dimension, in one ordering."""
    anchors = "\n".join(f"{k}: {v}" for k, v in sorted(dimension.anchors.items()))
    ref = f"## Reference Output (known good)\n{reference.rstrip()}\n"
    cand = f"## Candidate Output (to score)\n{candidate.rstrip()}\n"
    outputs = f"{ref}\n{cand}" if order == "reference-first" else f"{cand}\n{ref}"
    return (
        f"You are an SDD artifact evaluator. Score the following {phase} output on the "
        f"dimension: {dimension.name}.\n\n"
        f"## Scoring Scale\n{anchors}\n\n"
        f"## Rubric\n{dimension.description}\n\n"
        f"{outputs}\n"
        "Score (1-5): \n"
        "Justification (1-2 sentences):\n"
    )


def parse(answer: str) -> tuple[float, str] | None:
    """(score, justification) from a judge's answer; None unless the score is in 1-5."""
    found = _SCORE.search(answer)
    if found is None:
        return None
    score = float(found.group(1))
    if not 1 <= score <= 5:
        return None
    why = _WHY.search(answer)
    return score, (why.group(1).strip() if why else "")


class Ordering(BaseModel):
    """One ordering's verdict of one dimension."""

    order: Literal["reference-first", "candidate-first"]
    """Which output came first."""
    score: float | None
    """The parsed score (None: unparsable twice)."""
    justification: str = ""
    """The judge's justification."""
    answers: list[str]
    """Every raw answer (a second when the first did not parse)."""
    prompt: str
    """What the judge was asked."""


class DimensionVerdict(BaseModel):
    """The judge's verdict of one dimension."""

    dimension: str
    """The dimension."""
    score: float | None
    """The mean of both orderings (None when either is unassessed)."""
    gap: float | None
    """|reference-first - candidate-first|: the position-bias gap."""
    orderings: list[Ordering]
    """Both orderings."""


class Judged(BaseModel):
    """Everything the judge said of one output."""

    verdicts: list[DimensionVerdict]
    """Per dimension."""
    usage: Usage
    """The judge's tokens and cost (apart from the skill's)."""
    provider_error: ProviderError | None = None
    """The judge's provider failed (the sample is the farm's failure, not scored)."""


#: Judge calls of one sample in flight at once.
JUDGE_CALLS_AT_ONCE = 8


def judge_output(
    judge: ModelSpec,
    phase: str,
    dimensions: list[Dimension],
    reference: str,
    candidate: str,
    trace: TraceWriter | None = None,
) -> Judged:
    """Score `candidate` on each dimension (see the module docstring): every dimension's
    two orderings are asked at once (`JUDGE_CALLS_AT_ONCE`), each its own conversation."""
    orders: tuple[Order, Order] = ("reference-first", "candidate-first")
    asks = [(d, o) for d in dimensions for o in orders]
    with ThreadPoolExecutor(max_workers=max(1, min(JUDGE_CALLS_AT_ONCE, len(asks)))) as pool:
        asked = list(
            pool.map(
                lambda a: _ordering(judge, phase, a[0], reference, candidate, a[1], trace), asks
            )
        )
    usage = Usage()
    for _, used, _ in asked:
        usage = add(usage, used)
    by_dimension = [asked[i : i + len(orders)] for i in range(0, len(asked), len(orders))]
    verdicts = [
        _verdict(dimension, [ordering for ordering, _, _ in pair])
        for dimension, pair in zip(dimensions, by_dimension, strict=True)
        if all(error is None for _, _, error in pair)
    ]
    error = next((e for _, _, e in asked if e is not None), None)
    return Judged(verdicts=verdicts, usage=usage, provider_error=error)


def _ordering(
    judge: ModelSpec,
    phase: str,
    dimension: Dimension,
    reference: str,
    candidate: str,
    order: Order,
    trace: TraceWriter | None,
) -> tuple[Ordering, Usage, ProviderError | None]:
    """One dimension asked in one ordering (a follow-up for an answer that does not
    parse): the ordering, the calls' usage, and the provider's failure if there was one."""
    asked = prompt(phase, dimension, reference, candidate, order)
    answers: list[str] = []
    parsed = None
    usage = Usage()
    for attempt in range(2):  # a second chance for an answer that does not parse
        earlier = [(asked, answers[-1])] if attempt else []
        reply = complete(
            judge,
            SYSTEM,
            AGAIN if attempt else asked,
            trace=trace,
            max_output_tokens=400,
            earlier=earlier,
        )
        usage = add(usage, reply.usage)
        if reply.provider_error is not None:
            failed = Ordering(order=order, score=None, answers=answers, prompt=asked)
            return failed, usage, reply.provider_error
        answers.append(reply.text or reply.error)
        parsed = parse(reply.text) if reply.text else None
        if parsed is not None:
            break
    ordering = Ordering(
        order=order,
        score=parsed[0] if parsed else None,
        justification=parsed[1] if parsed else "",
        answers=answers,
        prompt=asked,
    )
    return ordering, usage, None


def _verdict(dimension: Dimension, orderings: list[Ordering]) -> DimensionVerdict:
    """A dimension's score (the mean of both orderings') and position-bias gap."""
    scores = [o.score for o in orderings]
    both = None not in scores
    return DimensionVerdict(
        dimension=dimension.name,
        score=sum(s for s in scores if s is not None) / 2 if both else None,
        gap=abs(scores[0] - scores[1])
        if both and scores[0] is not None and scores[1] is not None
        else None,
        orderings=orderings,
    )
