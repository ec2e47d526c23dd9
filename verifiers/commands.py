"""Phases 8 and 9: final status, then hidden files and verifier commands.

The final status is taken once every process of the agent is dead. Git runs with the
configuration an agent could have planted neutralised where git allows it (no global
or system config, no fsmonitor, no hooks, no external diff, no pager); since git may
still run filters an agent declared, every process of the sandbox user is killed again
after it. Hidden files and commands then run where nothing the agent left outside the
workspace exists (a process, a ``usercustomize.py`` in HOME, a file in /tmp): the
agent's sandbox with its scratch wiped, or a fresh one (see `hangar.trial`).
"""

from __future__ import annotations

import json
from pathlib import Path

from hangar.errors import SandboxError
from hangar.sandbox.base import Sandbox
from hangar.scenario import LoadedScenario
from hangar.verifiers.protocol import CommandRecord

#: Where verifier commands write reports (``$HANGAR_VERIFIER_OUT`` in the sandbox).
VERIFIER_OUT = "/tmp/hangar-verifier"

#: Makes $HANGAR_VERIFIER_OUT, then runs the verifier command ($1) by bash.
_WITH_OUT = 'mkdir -p "$HANGAR_VERIFIER_OUT" || exit 96; exec bash -c "$1"'

_GIT = (
    "GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0 "
    "git --no-pager -c 'safe.directory=*' -c core.fsmonitor=false -c core.hooksPath=/dev/null "
    "-c core.quotePath=false"
)


def git_state(sandbox: Sandbox, *, diff: bool, then: str = "") -> dict[str, str]:
    """HEAD and ``git status --porcelain`` of the workspace, and the diff if asked.

    One exec for all of it (each exec is a round trip to the engine); `then` is shell
    run after git, in the same exec.
    """
    parts = [f"{_GIT} rev-parse HEAD", f"{_GIT} status --porcelain --untracked-files=all"]
    if diff:
        # A throwaway index (in a subshell), so the workspace's own index is not touched.
        parts.append(
            "( export GIT_INDEX_FILE=/tmp/hangar-diff-index.$$; "
            f"{_GIT} read-tree HEAD && {_GIT} add -A && "
            f"{_GIT} diff --cached --binary --no-ext-diff --no-textconv HEAD; "
            "rc=$?; rm -f $GIT_INDEX_FILE; exit $rc )"
        )
    script = (
        "; printf '\\0'; ".join(f"{{ {p} || exit 90; }}" for p in parts)
        + "; rc=$?; "
        + (f"{then}; " if then else "")
        + "exit $rc"
    )
    res = sandbox.exec(script, timeout=300)
    if res.returncode == 90 or (not res.ok and not then):
        raise SandboxError(f"git failed in the sandbox: {res.stderr.strip()}")
    fields = res.stdout.split("\0")
    state = {"head": fields[0].strip(), "status": fields[1] if len(fields) > 1 else ""}
    if diff:
        state["diff"] = fields[2] if len(fields) > 2 else ""
        state["diff_truncated"] = str(res.stdout_truncated).lower()
    return state


def final_state(sandbox: Sandbox) -> dict[str, str]:
    """Status and diff after the agent; then every process of the sandbox user is killed
    (git may have run filters an agent declared).

    The kill runs only in an isolated sandbox: on the local backend it would kill the
    host's processes. The keeper of a docker sandbox runs as root and survives it.
    """
    return git_state(sandbox, diff=True, then="kill -9 -1 2>/dev/null" if sandbox.isolated else "")


def place_hidden_files(sandbox: Sandbox, loaded: LoadedScenario) -> list[str]:
    """Copy `verifier.files` into the workspace, replacing whatever the agent left there."""
    placed = []
    for hidden in loaded.scenario.verifier.files:
        source = loaded.local(hidden.source)
        target = hidden.target
        # The agent may have put a file, folder or symlink at the target: remove it first.
        res = sandbox.exec(["rm", "-rf", "--", target], timeout=60)
        if not res.ok:
            raise SandboxError(f"cannot clear {target} for hidden files: {res.stderr.strip()}")
        if source.is_dir():
            sandbox.copy_in(source, target)
        else:
            sandbox.write_file(target, source.read_bytes(), mode=source.stat().st_mode & 0o755)
        placed.append(target)
    return placed


def run_verifier_commands(
    sandbox: Sandbox, loaded: LoadedScenario, artifacts: Path
) -> list[CommandRecord]:
    """Run the original verifier commands by bash in the workspace; keep every output."""
    spec = loaded.scenario.verifier
    out_dir = artifacts / "verifier" / "commands"
    out_dir.mkdir(parents=True, exist_ok=True)
    records = []
    for i, command in enumerate(spec.commands):
        res = sandbox.exec(
            # The output folder is made first, in the same exec: the command itself runs
            # exactly as `bash -c COMMAND`.
            ["sh", "-c", _WITH_OUT, "hangar-verifier", command],
            timeout=spec.timeout_s,
            env={"HANGAR_VERIFIER_OUT": sandbox.command_path(VERIFIER_OUT)},
        )
        stdout, stderr = out_dir / f"{i}.stdout", out_dir / f"{i}.stderr"
        stdout.write_text(res.stdout)
        stderr.write_text(res.stderr)
        records.append(
            CommandRecord(
                command=command,
                exit_code=res.returncode,
                timed_out=res.timed_out,
                stdout=stdout.relative_to(artifacts).as_posix(),
                stderr=stderr.relative_to(artifacts).as_posix(),
            )
        )
    (artifacts / "verifier" / "commands.json").write_text(
        json.dumps([r.model_dump(by_alias=True) for r in records], indent=1)
    )
    if spec.commands:
        sandbox.copy_out(VERIFIER_OUT, artifacts / "verifier" / "out")
    return records
