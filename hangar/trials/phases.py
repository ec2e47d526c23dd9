"""The phases of a sandboxed trial: the one table their names come from.

`SandboxedTrial.run` walks the lifecycle in this order; each kind's hooks time their
work under these names (a trial's ``timings``, the viewer's timeline), and
`docs/reference/phases.md` is generated from this table. A kind skips the phases it has
no work in: an image task builds an image, a scenario runs a prepare script, a routing
case installs skills. The trial boundary adds ``unpack`` (a task shipped to a worker)
before them and ``bundle``, ``teardown_sandbox`` and ``teardown`` after.
"""

from __future__ import annotations

from typing import NamedTuple


class Phase(NamedTuple):
    """One phase of the lifecycle."""

    name: str
    """As timings and the viewer name it."""
    step: str
    """The lifecycle step it belongs to (a hook of `SandboxedTrial`)."""
    words: str
    """What happens in it."""


#: Every phase of a sandboxed trial, in the order they run.
PHASES: tuple[Phase, ...] = (
    Phase("admission", "admit", "every reason the task cannot run makes it blocked_setup, "
          "before a container starts or a model is called"),
    Phase("mcp", "admit", "the agent's MCP servers resolved on this node"),
    Phase("image", "build", "the task's image built or found (image tasks), once per node"),
    Phase("agent_bundle", "build", "the agent CLI's bundle, built once per node and tried "
          "in the sandbox's image"),
    Phase("disk", "build", "the trial's size-capped disk for everything the agent can write"),
    Phase("relay_up", "build", "the model relay, when a command agent calls a model"),
    Phase("workspace", "set_up", "the task's files: the pinned commit in a private "
          "repository, the image's working directory, or an empty folder"),
    Phase("prepare", "set_up", "the pinned prepare script, on the host"),
    Phase("initial_status", "set_up", "the workspace's status before the agent"),
    Phase("harness_baseline", "set_up", "the test harness as the agent gets it, recorded"),
    Phase(
        "services",
        "set_up",
        "the task's services started on the trial's network, waited for (image tasks with "
        "a compose file)",
    ),
    Phase("sandbox_up", "set_up", "the agent's sandbox started, the relay's forwarder and "
          "the egress proxy in it"),
    Phase("plugins", "set_up", "the arm's plugins installed (execution scenarios)"),
    Phase(
        "skills",
        "set_up",
        "the catalog's skills (routing cases) or the task's skills_dir (image tasks) "
        "installed where the agent finds skills",
    ),
    Phase("mcp_start", "set_up", "the agent's MCP servers started in the sandbox"),
    Phase("healthcheck", "set_up", "the task's healthcheck waited for in the agent's sandbox "
          "(image tasks that have one)"),
    Phase(
        "step_setup",
        "set_up",
        "a step's workdir files, its setup.sh and its healthcheck (multi-step tasks)",
    ),
    Phase("agent", "agent", "the agent's turns: a command, a chat loop, a reference agent"),
    Phase("final_status", "verify", "every agent process killed, the agent's own view of "
          "its repository recorded"),
    Phase("hand_over", "verify", "the agent's sandbox given up for verification"),
    Phase("agent_teardown", "verify", "the agent's sandbox stopped (a fresh verifier sandbox)"),
    Phase("verifier_sandbox_up", "verify", "a fresh sandbox for verification"),
    Phase("scratch_reset", "verify", "the scratch folders emptied, HOME refilled"),
    Phase("final_diff", "verify", "the diff against the initial state, on the host"),
    Phase("harness", "verify", "the test harness put back as it was before the agent"),
    Phase("verifier_files", "verify", "the hidden verifier files staged"),
    Phase("verifier_commands", "verify", "the verifier commands (or the test script) run"),
    Phase("tests", "verify", "the task's test script run (image tasks)"),
    Phase("verifier_teardown", "verify", "every process of the verifier's user ended"),
    Phase("host_verifier", "verify", "the pinned host verifier, its output admitted"),
    Phase("judgement", "verify", "the verdict from the evidence"),
    Phase("route", "verify", "the route the agent took, against the case's golden set"),
    Phase("answer", "verify", "the answer and its citations, each with its file's hash at "
          "the commit asked about (knowledge questions)"),
)  # fmt: skip

#: Phase name -> its row.
BY_NAME: dict[str, Phase] = {p.name: p for p in PHASES}
#: What the trial boundary times around every kind's phases (`hangar.trials.boundary`).
BOUNDARY = ("unpack", "bundle", "teardown_sandbox", "teardown")


def markdown() -> str:
    """The table as a documentation page (`scripts/gen-docs.py`)."""
    lines = [
        "# Phases of a sandboxed trial",
        "",
        "Generated from `hangar/trials/phases.py`: the names a trial's `timings` and the",
        "viewer's timeline use, in the order `SandboxedTrial.run` walks them. A kind skips",
        "the phases it has no work in.",
        "",
        "| Phase | Step | What happens |",
        "| --- | --- | --- |",
    ]
    lines += [f"| `{p.name}` | {p.step} | {p.words} |" for p in PHASES]
    return "\n".join(lines) + "\n"
