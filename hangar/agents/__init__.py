"""How an agent's turns run.

A `command` agent runs a CLI inside the sandbox (Codex, Claude Code, a script); it
reaches its model through the relay. A `chat` agent is a loop on the host whose tool
calls run in the sandbox. A `prompt` agent asks its model once, with no sandbox and no
tools (decision cases). A `reference` agent is a task's own solution (``oracle``) or
nothing (``nop``). Agent configs are pydantic models tagged by `kind`. An agents
file is a YAML mapping of name -> config (``kind`` defaults to ``command``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, TypeAdapter, ValidationError

from hangar.agents.chat import ChatAgent, run_chat_agent
from hangar.agents.command import AgentRun, CommandAgent, run_command_agent
from hangar.agents.mcp import read_pinned
from hangar.agents.presets import expand_preset
from hangar.agents.prompt import PromptAgent
from hangar.agents.reference import NOP, ORACLE, ReferenceAgent
from hangar.errors import ConfigError
from hangar.files import read_yaml
from hangar.validation import validation_message

#: Every kind of agent config, told apart by `kind`.
AgentSpec = Annotated[
    CommandAgent | ChatAgent | PromptAgent | ReferenceAgent, Field(discriminator="kind")
]
_AGENT: TypeAdapter[CommandAgent | ChatAgent | PromptAgent | ReferenceAgent] = TypeAdapter(
    AgentSpec
)


_RUNNERS = {".py": "python3", ".sh": "bash"}


def sandbox_agents(agents: dict[str, AgentSpec]) -> list[AgentSpec]:
    """The agents that work in a sandbox (command, chat and reference agents)."""
    return [a for a in agents.values() if not isinstance(a, PromptAgent)]


def prompt_agents(agents: dict[str, AgentSpec]) -> list[AgentSpec]:
    """The agents that answer a prompt (the default one when none is named)."""
    named: list[AgentSpec] = [a for a in agents.values() if isinstance(a, PromptAgent)]
    return named or [PromptAgent()]


def _script_command(data: dict[str, object], base: Path | None, where: str) -> dict[str, object]:
    """Turn ``script: FILE`` into a command that runs the file's text (its bytes count
    in the trial key, like any command)."""
    script = data.get("script")
    if script is None:
        return data
    path = (base / str(script)) if base is not None else Path(str(script))
    runner = _RUNNERS.get(path.suffix)
    if runner is None or not path.is_file():
        raise ConfigError(f"{where}: agent script {path} must be an existing .py or .sh file")
    text = path.read_text()
    rest = {k: v for k, v in data.items() if k != "script"}
    return {**rest, "command": f"{runner} - <<'HANGAR_AGENT_SCRIPT'\n{text}\nHANGAR_AGENT_SCRIPT"}


#: Each agent kind's model, so an error names the field of that kind (and its nearest).
_KINDS: dict[str, type[AgentSpec]] = {
    "command": CommandAgent,
    "chat": ChatAgent,
    "prompt": PromptAgent,
    "reference": ReferenceAgent,
}


def parse_agent(
    name: str,
    data: object,
    where: str,
    base: Path | None = None,
    *,
    text: str = "",
    root: tuple[str, ...] = (),
) -> AgentSpec:
    """Validate one agent config; errors name where it came from and the field (with its
    line, given the file's `text` and where the config sits in it, `root`; an unknown
    field with the nearest known one).

    `base` is the folder a ``script:`` path (and an MCP server's ``file:``) is relative to.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: agent {name!r} must be a mapping with a `command`")
    model: type[AgentSpec] | None = None
    try:
        data = read_pinned(_script_command(expand_preset(data, where), base, where), base, where)
        full = {"kind": "command", "name": name, **data}
        model = _KINDS.get(str(full["kind"]))
        return model.model_validate(full) if model else _AGENT.validate_python(full)
    except ValidationError as exc:
        message = validation_message(where, f"agent ({name!r})", exc, text, root, model)
        raise ConfigError(message) from None


def load_agents(path: Path) -> dict[str, AgentSpec]:
    """Load an agents file (a mapping of name -> config)."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: an agents file must map agent names to configs")
    text = path.read_text(encoding="utf-8", errors="replace")
    return {
        str(name): parse_agent(str(name), cfg, str(path), path.parent, text=text, root=(name,))
        for name, cfg in data.items()
    }


__all__ = [
    "NOP",
    "ORACLE",
    "AgentRun",
    "AgentSpec",
    "ChatAgent",
    "CommandAgent",
    "PromptAgent",
    "ReferenceAgent",
    "load_agents",
    "parse_agent",
    "prompt_agents",
    "run_chat_agent",
    "run_command_agent",
    "sandbox_agents",
]
