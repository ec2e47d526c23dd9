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
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

from hangar.errors import SandboxError, SandboxUnavailable
from hangar.sandbox.base import Sandbox, exec_then_end_user
from hangar.scenario import LoadedScenario
from hangar.verifiers.protocol import CommandRecord

#: Where verifier commands write reports (``$HANGAR_VERIFIER_OUT`` in the sandbox).
VERIFIER_OUT = "/tmp/hangar-verifier"

#: Bound on the git commands that read the workspace's state.
GIT_TIMEOUT_S = 300
#: Makes $HANGAR_VERIFIER_OUT, then runs the verifier command ($1) by bash.
_WITH_OUT = 'mkdir -p "$HANGAR_VERIFIER_OUT" || exit 96; exec bash -c "$1"'

_GIT = (
    "GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0 "
    "git --no-pager -c 'safe.directory=*' -c core.fsmonitor=false -c core.hooksPath=/dev/null "
    "-c core.quotePath=false"
)


def git_state(sandbox: Sandbox, *, diff: bool, end_processes: bool = False) -> dict[str, str]:
    """HEAD and ``git status --porcelain`` of the workspace, and the diff if asked.

    One exec for all of it (each exec is a round trip to the engine). With
    `end_processes`, every process of the sandbox user is killed before git (nothing of
    the agent's may change the workspace while it is read) and after it (git may run
    filters the agent declared), in the same exec.
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
    git = "; printf '\\0'; ".join(f"{{ {p} || exit 90; }}" for p in parts)
    if end_processes:
        res = exec_then_end_user(sandbox, ["sh", "-c", git], timeout=GIT_TIMEOUT_S, end_first=True)
        if res.returncode in (93, 94):
            raise SandboxError(f"the agent's processes could not all be ended: {res.stderr}")
    else:
        res = sandbox.exec(git, timeout=GIT_TIMEOUT_S)
    if not res.ok:
        raise SandboxError(f"git failed in the sandbox: {res.stderr.strip()}")
    fields = res.stdout.split("\0")
    state = {"head": fields[0].strip(), "status": fields[1] if len(fields) > 1 else ""}
    if diff:
        state["diff"] = fields[2] if len(fields) > 2 else ""
        state["diff_truncated"] = str(res.stdout_truncated).lower()
    return state


def final_state(sandbox: Sandbox) -> dict[str, str]:
    """Status and diff after the agent, taken once every process of the sandbox user is
    dead; every process is killed again after git (which may run filters an agent
    declared).

    The kills run only in an isolated sandbox: on the local backend they would kill the
    host's processes. The keeper of a docker sandbox runs as root and survives them.
    """
    return git_state(sandbox, diff=True, end_processes=sandbox.isolated)


def stage_hidden_files(loaded: LoadedScenario, staging: Path, sandbox_dir: str) -> str:
    """Copy `verifier.files` into `staging` on the host, which the sandbox sees (or gets
    copied, in one archive) as `sandbox_dir`; returns the shell that puts them in place
    (replacing whatever the agent left at each target), to run first in the first
    verifier command's exec: no exec and no archive per file.

    A placement that fails (the agent made a folder unwritable) fails the command it
    precedes (exit 97): a failed check, never an infrastructure error an agent could
    cause to get its trial retried.
    """
    staging.mkdir(parents=True)
    steps = []
    for i, hidden in enumerate(loaded.scenario.verifier.files):
        source = loaded.local(hidden.source)
        if source.is_dir():
            shutil.copytree(source, staging / str(i), symlinks=True)
        else:
            shutil.copy2(source, staging / str(i))
        target = shlex.quote(hidden.target)
        steps.append(
            f'rm -rf -- {target} && mkdir -p -- "$(dirname -- {target})" && '
            f"cp -R -p -- {sandbox_dir}/{i} {target}"
        )
    return "".join(f"{{ {step}; }} || exit 97; " for step in steps)


def run_verifier_commands(
    sandbox: Sandbox,
    loaded: LoadedScenario,
    artifacts: Path,
    *,
    collect: bool = True,
    before: str = "",
) -> list[CommandRecord]:
    """Run the original verifier commands by bash in the workspace; keep every output.

    With `collect`, ``$HANGAR_VERIFIER_OUT`` is copied into ``artifacts/verifier/out``
    through the sandbox; without, the caller copies it (from a scratch folder). `before`
    is shell run first in the first command's exec (see `stage_hidden_files`).
    """
    spec = loaded.scenario.verifier
    out_dir = artifacts / "verifier" / "commands"
    out_dir.mkdir(parents=True, exist_ok=True)
    records = []
    env = {"HANGAR_VERIFIER_OUT": sandbox.command_path(VERIFIER_OUT)}
    for i, command in enumerate(spec.commands):
        # The output folder is made first, in the same exec: the command itself runs
        # exactly as `bash -c COMMAND`.
        argv = ["sh", "-c", (before if i == 0 else "") + _WITH_OUT, "hangar-verifier", command]
        if sandbox.isolated and i == len(spec.commands) - 1:
            # Nothing the last command started may run on while the host reads the
            # workspace and the output folder.
            res = exec_then_end_user(sandbox, argv, timeout=spec.timeout_s, env=env)
        else:
            res = sandbox.exec(argv, timeout=spec.timeout_s, env=env)
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
    if before and not spec.commands:  # files for the host verifier alone
        res = sandbox.exec(["sh", "-c", before + "true"], timeout=spec.timeout_s)
        if not res.ok:
            (artifacts / "verifier" / "hidden-files-failed.txt").write_text(res.stderr)
    if spec.commands and collect:
        collect_verifier_out(lambda target: sandbox.copy_out(VERIFIER_OUT, target), artifacts)
    return records


def collect_verifier_out(copy: Callable[[Path], None], artifacts: Path) -> None:
    """Copy the verifier commands' output folder into ``artifacts/verifier/out`` by `copy`.

    The folder was writable by code the agent wrote (the tests it changed run here), so
    a refused copy (a link out of it, a link in its place, too large) is not an
    infrastructure error, which would be retried: what was refused is recorded in
    ``verifier/out-refused.txt`` and the host verifier judges without it.
    """
    try:
        copy(artifacts / "verifier" / "out")
    except SandboxUnavailable:
        raise
    except SandboxError as exc:
        (artifacts / "verifier" / "out-refused.txt").write_text(f"{exc}\n")
