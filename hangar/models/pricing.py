"""Prices of models, in USD per million tokens, and the cost of a usage.

Prices come from the ``genai-prices`` library's bundled table (no network needed),
overridable per model in the sweep file. A model neither knows has no price, and its
cost is reported as 0 with a warning, never guessed.
"""

from __future__ import annotations

import logging

from pydantic import BaseModel, ConfigDict, Field

from hangar.results import Usage

log = logging.getLogger(__name__)


class Price(BaseModel):
    """USD per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    """Uncached prompt tokens."""
    output: float = Field(ge=0)
    """Completion tokens (reasoning included)."""
    cached_input: float | None = Field(default=None, ge=0)
    """Prompt tokens read from the cache (default: the input price)."""

    def cost(self, usage: Usage) -> float:
        """The cost of `usage` at these prices."""
        cached = usage.cached_input_tokens
        cached_price = self.input if self.cached_input is None else self.cached_input
        return (
            (usage.input_tokens - cached) * self.input
            + cached * cached_price
            + usage.output_tokens * self.output
        ) / 1_000_000


def library_cost(usage: Usage, model: str, provider: str | None) -> float | None:
    """The cost of one call's `usage` by the ``genai-prices`` table, or None if unknown.

    Per call, so tiered prices (a higher rate past some prompt size) apply as billed.
    """
    from genai_prices import Usage as PriceUsage
    from genai_prices import calc_price

    try:
        found = calc_price(
            PriceUsage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cached_input_tokens,
            ),
            model_ref=model,
            provider_id=provider,
        )
    except Exception:  # an unknown model or provider
        return None
    return float(found.total_price)


def cost_of(usage: Usage, model: str, provider: str | None, price: Price | None) -> Usage:
    """One call's `usage` with its cost: by `price` if given, else by the library's table."""
    cost = price.cost(usage) if price is not None else library_cost(usage, model, provider)
    if cost is None:
        if usage.input_tokens or usage.output_tokens:
            log.warning(
                "no price for model %s: cost recorded as 0 (set `price` in the sweep)", model
            )
        return usage
    return usage.model_copy(update={"cost_usd": cost})


def has_price(model: str, provider: str | None, price: Price | None) -> bool:
    """Whether calls of `model` get a cost: its own `price`, or the table knows it."""
    probe = Usage(input_tokens=1_000, output_tokens=1_000)
    return price is not None or library_cost(probe, model, provider) is not None


def nearest_priced(model: str, provider: str | None) -> str | None:
    """The model id of the price table nearest to `model` (a typo's likely meaning), among
    `provider`'s where the table knows it, else among all; None when none is close."""
    import difflib

    from genai_prices import data

    ids = [m.id for p in data.providers if provider in (None, p.id) for m in p.models]
    ids = ids or [m.id for p in data.providers for m in p.models]
    found = difflib.get_close_matches(model, ids, n=1, cutoff=0.75)
    return found[0] if found else None
