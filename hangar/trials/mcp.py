"""A trial's MCP servers (`hangar.agents.mcp`): installed on the node before the sandbox
starts, mounted read-only, checked and made known to the agent once it is up. Any trial
whose agent works in a sandbox calls the three steps: `install_servers` (before the
sandbox: its mounts come from `mounts`), then `start_servers` (after it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hangar.agents import ChatAgent, CommandAgent
from hangar.agents.mcp import Installed, McpError, McpTools, install, native_config
from hangar.results import Verdict
from hangar.sandbox import Mount, Sandbox
from hangar.trials.boundary import Outcome, TrialRun


def servers_of(agent: Any) -> dict[str, Any]:
    """The agent's MCP servers ({} for agents that take none)."""
    return dict(getattr(agent, "mcp", None) or {})


def install_servers(trial: TrialRun, agent: Any, cache: Path) -> list[Installed]:
    """Every server of `agent` resolved on this node (`mcp.json` records what); one that
    cannot be is blocked_setup, before the sandbox."""
    servers = servers_of(agent)
    if not servers:
        return []
    try:
        installed = [install(name, server, cache) for name, server in sorted(servers.items())]
    except McpError as exc:
        raise Outcome(Verdict.BLOCKED_SETUP, f"mcp: {exc}") from exc
    trial.write(
        "mcp.json",
        {
            i.name: {
                "server": servers[i.name].identity(),
                "argv": i.argv,
                "wheels": i.wheels,
                "mounted_at": i.target,
            }
            for i in installed
        },
    )
    return installed


def mounts(installed: list[Installed]) -> tuple[Mount, ...]:
    """Each server's folder, read-only in the sandbox."""
    return tuple(
        Mount(source=i.folder, target=i.target, read_only=True)
        for i in installed
        if i.folder is not None
    )


def start_servers(
    trial: TrialRun, sandbox: Sandbox, agent: Any, installed: list[Installed]
) -> tuple[McpTools | None, dict[str, str]]:
    """Check that each server starts in `sandbox` (its tools listed into
    ``mcp-tools.json``), and tell the agent of them: a command agent through its CLI's own
    config file (the env it needs returned), a chat agent through the returned tools. A
    server that does not start, or a sandbox Python it was not resolved for, is
    blocked_setup."""
    if not installed:
        return None, {}
    servers = servers_of(agent)
    res = sandbox.exec(
        ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], timeout=30
    )
    have = res.stdout.strip()
    for i in installed:
        if i.name not in servers:
            continue  # a task's own server: nothing was resolved for a Python
        want = servers[i.name].python
        if have != want:
            raise Outcome(
                Verdict.BLOCKED_SETUP,
                f"mcp: server {i.name} was resolved for Python {want}; the image's python3 is "
                f"{have or 'missing'}: set `python: {have}` in its config, or use an image "
                f"with Python {want}",
            )
    tools = McpTools(sandbox, installed)
    try:
        listed = tools.discover()
    except McpError as exc:
        raise Outcome(Verdict.BLOCKED_SETUP, f"mcp: {exc}") from exc
    trial.write("mcp-tools.json", [t._asdict() for t in listed])
    if isinstance(agent, ChatAgent):
        return tools, {}
    if isinstance(agent, CommandAgent):
        config = native_config(agent.preset, installed, flagged=bool(servers))
        home = sandbox.spec.home
        sandbox.write_file(home + config.path[1:], config.text)
        env = {k: sandbox.command_path(home + v[1:]) for k, v in config.env.items()}
        return None, env
    return None, {}
