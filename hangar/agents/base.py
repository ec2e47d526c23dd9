"""What every agent config has: a digest (part of the trial key) and the settings a
result records."""

from __future__ import annotations

import hashlib
from typing import ClassVar

from pydantic import BaseModel, ConfigDict


class AgentConfig(BaseModel):
    """The base of every agent config (`CommandAgent`, `ChatAgent`, `PromptAgent`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: A long text the settings record by its sha256 rather than in full.
    hashed_field: ClassVar[str] = "system_prompt"

    def digest(self) -> str:
        """sha256 of the agent's config (part of the trial key)."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()

    def settings(self) -> dict[str, object]:
        """The settings a result records (the `hashed_field` as its sha256)."""
        fields = self.model_dump(exclude={"name", self.hashed_field})
        text = str(getattr(self, self.hashed_field))
        return {**fields, f"{self.hashed_field}_sha256": hashlib.sha256(text.encode()).hexdigest()}
