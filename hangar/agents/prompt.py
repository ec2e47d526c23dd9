"""Prompt agents: no sandbox, no tools, one fresh conversation per trial.

What a decision case (seed 001) runs with: the trial's rendered prompt goes to the
model once, through the same rules, metering and trace as every model call
(`hangar.models.complete`). A sweep that names no prompt agent runs its decision suites
with the default one (``prompt``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hangar.agents.base import AgentConfig
from hangar.validation import Name

DEFAULT_SYSTEM = (
    "You answer one decision question. Use only the evidence supplied in the message: "
    "there are no tools. Answer with one JSON object and nothing else: "
    '{"selected": [the ids of the choices you select], "explanation": "why, in a few '
    'sentences"}.'
)


class PromptAgent(AgentConfig):
    """How a prompt-only trial asks its model."""

    kind: Literal["prompt"] = "prompt"
    """Agent kind tag."""
    name: Name = "prompt"
    """Name in results and reports."""
    system_prompt: str = DEFAULT_SYSTEM
    """The instructions (how to answer); the case comes as the user message."""
    max_output_tokens: int = Field(default=2048, gt=0)
    """Tokens of the answer at most."""
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    """Reasoning effort for models that take one (decision suites use low)."""
