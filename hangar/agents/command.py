"""Command agents: a command line run inside the sandbox as the sandbox user.

The task text is in the file named by ``HANGAR_CONTEXT_FILE`` and in ``HANGAR_CONTEXT``;
the model id is in ``HANGAR_MODEL``; the working directory is the workspace. stdout and
stderr go into the trace as they arrive. A run is *completed* when the command ends by
itself with exit 0 in its time.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from hangar.agents.base import AgentConfig
from hangar.agents.mcp import McpServer
from hangar.errors import SandboxError, SandboxUnavailable
from hangar.results import ProviderError
from hangar.sandbox.base import Sandbox
from hangar.trace import TraceWriter
from hangar.validation import Name

#: Where a command agent finds its task, relative to the sandbox's HOME.
CONTEXT_FILE = ".hangar/task.md"
#: Where a bundle's commands are in the sandbox (`hangar.sandbox.bundles.MOUNT`).
BUNDLE_BIN = "/opt/hangar/agent/bin"


class CommandAgent(AgentConfig):
    """An agent that is a command run in the sandbox."""

    kind: Literal["command"] = "command"
    """Agent kind tag."""
    name: Name
    """Name in results and reports."""
    command: str
    """Shell command line, run by bash in the workspace as the sandbox user."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment (never a secret: keys reach agents only through the relay)."""
    collect: list[str] = Field(default_factory=list)
    """Sandbox folders (``~`` is the sandbox HOME) copied into the evidence after the run,
    e.g. an agent CLI's session files; what is missing is skipped."""
    preset: str | None = None
    """The preset the command came from (`hangar.agents.presets`), if any."""
    options: dict[str, str] = Field(default_factory=dict)
    """The preset's options as chosen (reasoning effort, approval policy, sandbox mode)."""
    mcp: dict[Name, McpServer] = Field(default_factory=dict)
    """MCP servers it gets, pinned (`hangar.agents.mcp`), configured for its CLI."""
    cli: list[str] = Field(default_factory=list)
    """The packages a preset's CLI is built from, as pinned (`hangar.sandbox.bundles`): a
    different version is a different agent."""
    bundle: str = ""
    """The bundle a preset's CLI runs from (``<preset>@<recipe digest>``), mounted
    read-only into the sandbox with its commands first on the command's PATH."""

    def settings(self) -> dict[str, object]:
        """The settings a result records: kind, preset and options, the command's sha256,
        its MCP servers' pins."""
        return {
            "kind": self.kind,
            "preset": self.preset,
            **self.options,
            "command_sha256": hashlib.sha256(self.command.encode()).hexdigest(),
            **({"cli": self.cli} if self.cli else {}),
            **({"bundle": self.bundle} if self.bundle else {}),
            **self.servers(),
        }


class AgentRun(BaseModel):
    """How an agent's turns ended."""

    exit_code: int | None = None
    """Exit code of the command (None when it never ran to an end)."""
    timed_out: bool = False
    """Killed at the end of the budget."""
    oom_killed: bool = False
    """Killed for exceeding the memory limit."""
    completed: bool = False
    """Ended by itself with exit 0 in its time."""
    reason: str = ""
    """Why the run is not complete, when it is not."""
    provider_error: ProviderError | None = None
    """A model provider's failure the run met and did not recover from (not the agent's)."""
    answer: dict[str, Any] | None = None
    """A read-only chat agent's answer (the answer tool's arguments, or its last text)."""


def collect_outputs(
    agent: CommandAgent, sandbox: Sandbox, artifacts: Path | None, trace: TraceWriter
) -> None:
    """Copy the agent's `collect` folders into ``artifacts/agent/`` (as untrusted files)."""
    if artifacts is None:
        return
    for path in agent.collect:
        inside = sandbox.spec.home + path[1:] if path.startswith("~") else path
        target = artifacts / "agent" / inside.strip("/").replace("/", "_")
        try:
            sandbox.copy_out(inside, target)
        except SandboxUnavailable:
            raise
        except (SandboxError, OSError) as exc:
            trace.event("collect_skipped", path=path, reason=str(exc))


def run_command_agent(
    agent: CommandAgent,
    sandbox: Sandbox,
    context: str,
    trace: TraceWriter,
    timeout: float,
    model: str = "none",
    env: dict[str, str] | None = None,
    artifacts: Path | None = None,
    context_written: bool = False,
) -> AgentRun:
    """Run the agent's command in `sandbox`, recording its output into `trace`.

    The task goes into `CONTEXT_FILE` under the sandbox's HOME, unless the caller has
    put it there already (`context_written`).
    """
    context_file = f"{sandbox.spec.home}/{CONTEXT_FILE}"
    if not context_written:
        sandbox.write_file(context_file, context)
    trace.event("agent_start", agent=agent.name, command=agent.command, timeout_s=timeout)
    command = agent.command
    if agent.bundle:  # the bundle's commands first, the image's after them
        command = f'PATH="{BUNDLE_BIN}:$PATH"; export PATH; {command}'
    try:
        res = sandbox.exec(
            ["bash", "-c", command],
            timeout=timeout,
            env={
                **agent.env,
                **(env or {}),
                "HANGAR_CONTEXT": context,
                "HANGAR_MODEL": model,
                "HANGAR_CONTEXT_FILE": sandbox.command_path(context_file),
            },
            on_output=trace.output,
        )
    except SandboxUnavailable as exc:
        trace.event("agent_end", error=f"sandbox unavailable: {exc}")
        raise
    run = AgentRun(
        exit_code=res.returncode,
        timed_out=res.timed_out,
        oom_killed=res.oom_killed,
        completed=res.ok and not res.oom_killed,
    )
    if res.timed_out:
        run.reason = f"the agent ran out of its time budget ({timeout:.0f} s)"
    elif res.oom_killed:
        run.reason = "the agent was killed for exceeding the memory limit"
    elif res.returncode != 0:
        run.reason = f"the agent exited with code {res.returncode}"
    collect_outputs(agent, sandbox, artifacts, trace)
    trace.event(
        "agent_end",
        exit_code=res.returncode,
        timed_out=res.timed_out,
        oom_killed=res.oom_killed,
        duration_s=round(res.duration_s, 3),
        stdout_truncated=res.stdout_truncated,
        stderr_truncated=res.stderr_truncated,
    )
    return run
