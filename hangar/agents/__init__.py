"""How an agent's turns run.

A `command` agent runs a CLI inside the sandbox (Codex, Claude Code, a script). Agent
configs are pydantic models tagged by `kind`; more kinds (``chat``) join the union.
An agents file is a YAML mapping of name -> config (``kind`` defaults to ``command``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from hangar.agents.command import AgentRun, CommandAgent, run_command_agent
from hangar.errors import ConfigError
from hangar.scenario import read_yaml

#: Every kind of agent config (a tagged union as more kinds arrive).
AgentSpec = CommandAgent


def parse_agent(name: str, data: object, where: str) -> AgentSpec:
    """Validate one agent config; errors name where it came from and the field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: agent {name!r} must be a mapping with a `command`")
    try:
        return CommandAgent.model_validate({"name": name, **data})
    except ValidationError as exc:
        lines = [f"{where}: agent {name!r} is not valid"]
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"])
            lines.append(f"  field `{field}`: {err['msg'].removeprefix('Value error, ')}")
        raise ConfigError("\n".join(lines)) from None


def load_agents(path: Path) -> dict[str, AgentSpec]:
    """Load an agents file (a mapping of name -> config)."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: an agents file must map agent names to configs")
    return {str(name): parse_agent(str(name), cfg, str(path)) for name, cfg in data.items()}


__all__ = [
    "AgentRun",
    "AgentSpec",
    "CommandAgent",
    "load_agents",
    "parse_agent",
    "run_command_agent",
]
