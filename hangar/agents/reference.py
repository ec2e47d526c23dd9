"""Reference agents: the task's own solution (``oracle``) and doing nothing (``nop``).

They run no model. A dataset is validated with them (`hangar dataset validate`): a task
whose oracle does not pass, or whose nop does, is broken, and no model should be charged
for it. In a sweep: ``agents: {oracle: {kind: reference, role: oracle}}``.
"""

from __future__ import annotations

from typing import Literal

from hangar.agents.base import AgentConfig
from hangar.validation import Name


class ReferenceAgent(AgentConfig):
    """The ``oracle`` (runs the task's reference solution) or the ``nop`` (does nothing)."""

    kind: Literal["reference"] = "reference"
    """Agent kind tag."""
    name: Name
    """Name in results and reports."""
    role: Literal["oracle", "gold", "nop"]
    """``oracle``: the task's solution script (``gold``: the same, by the name SWE-bench
    gives the reference patch); ``nop``: nothing at all."""

    def settings(self) -> dict[str, object]:
        """Its kind and role."""
        return {"kind": self.kind, "role": self.role}


ORACLE = ReferenceAgent(name="oracle", role="oracle")
NOP = ReferenceAgent(name="nop", role="nop")
