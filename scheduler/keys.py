"""Arms and trial keys.

A trial is one (scenario digest, agent, model, arm, repeat). Its key is a sha256 of
those, the arm standing for its name and the bytes of the plugins it selects, so a
changed plugin or agent config is a new trial while a rerun of the same one is not.
Resume means: skip trial keys that already have a final verdict.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, ConfigDict

from hangar.agents import AgentSpec
from hangar.scenario import LoadedScenario, tree_digest
from hangar.validation import Name


class Arm(BaseModel):
    """A named selection of a scenario's plugins (``control`` selects none)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Name
    """Arm name, e.g. ``skill`` or ``control``."""
    plugins: tuple[str, ...] = ()
    """Names of the scenario plugins this arm installs."""

    @classmethod
    def parse(cls, text: str) -> Arm:
        """``NAME`` or ``NAME=plugin1,plugin2`` (a bare name selects no plugin)."""
        name, _, plugins = text.partition("=")
        return cls(name=name, plugins=tuple(p for p in plugins.split(",") if p))


def plugin_bytes_digest(loaded: LoadedScenario, arm: Arm) -> str:
    """sha256 over the selected plugins' names and bytes."""
    parts = []
    for name in sorted(arm.plugins):
        try:
            source = loaded.local(loaded.scenario.plugin(name).source)
            parts.append([name, tree_digest(source)])
        except KeyError:
            parts.append([name, "absent"])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def trial_key(
    loaded: LoadedScenario,
    agent: AgentSpec,
    model: str,
    arm: Arm,
    repeat: int,
    *,
    plugins: str | None = None,
) -> str:
    """The trial key (see the module docstring); `plugins` is the arm's
    `plugin_bytes_digest` when the caller has it already."""
    payload = {
        "scenario": loaded.digest,
        "agent": agent.digest(),
        "model": model,
        "arm": [arm.name, plugins or plugin_bytes_digest(loaded, arm)],
        "repeat": repeat,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
