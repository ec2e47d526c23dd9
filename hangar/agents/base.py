"""What every agent config has: a digest (part of the trial key) and the settings a
result records."""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

#: Digests of the agent configs asked lately, by object (`AgentConfig.digest`).
_DIGESTS: dict[int, tuple[AgentConfig, str]] = {}
_DIGESTS_KEPT = 1024


class AgentConfig(BaseModel):
    """The base of every agent config (`CommandAgent`, `ChatAgent`, `PromptAgent`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: A long text the settings record by its sha256 rather than in full.
    hashed_field: ClassVar[str] = "system_prompt"

    def digest(self) -> str:
        """sha256 of the agent's config (part of the trial key). Its MCP servers count by
        their pins (their bytes are pinned by sha256); an agent without any has the digest
        it had before agents took MCP servers, and one that is no preset's CLI the digest it
        had before presets recorded their CLI's packages and bundle (a preset's bundle, by
        its recipe's digest, is part of it). Computed once per config object (it is
        frozen; every trial key of a sweep asks for it)."""
        known = _DIGESTS.get(id(self))
        if known is not None and known[0] is self:
            return known[1]
        if len(_DIGESTS) >= _DIGESTS_KEPT:
            _DIGESTS.clear()
        digest = self._digest()
        _DIGESTS[id(self)] = (self, digest)  # held: its id is not reused meanwhile
        return digest

    def _digest(self) -> str:
        from hangar.agents.mcp import DIGEST_EXCLUDE

        exclude: Any = dict(DIGEST_EXCLUDE) if getattr(self, "mcp", None) else {"mcp": True}
        if not getattr(self, "cli", None):
            exclude["cli"] = True
        if not getattr(self, "bundle", None):
            exclude["bundle"] = True
        return hashlib.sha256(self.model_dump_json(exclude=exclude).encode()).hexdigest()

    def servers(self) -> dict[str, object]:
        """What the settings record of its MCP servers ({} when it has none)."""
        servers = getattr(self, "mcp", None) or {}
        return {"mcp": {n: s.identity() for n, s in servers.items()}} if servers else {}

    def settings(self) -> dict[str, object]:
        """The settings a result records (the `hashed_field` as its sha256)."""
        fields = self.model_dump(exclude={"name", "mcp", self.hashed_field})
        text = str(getattr(self, self.hashed_field))
        sha = hashlib.sha256(text.encode()).hexdigest()
        return {**fields, f"{self.hashed_field}_sha256": sha, **self.servers()}
