"""Phases 8 and 9: final status, then the harness, hidden files and verifier commands.

The final status is taken once every process of the agent is dead: the agent's own
view of its repository in the sandbox (git with the configuration an agent could have
planted neutralised where git allows it: no global or system config, no fsmonitor, no
hooks, no external diff, no pager; since git may still run filters an agent declared,
every process of the sandbox user is killed again after it), recorded whatever the
agent did to ``.git``; the diff itself is taken on the host against the pinned commit
(`hangar.sandbox.workspace.diff_against_pin`). The harness as pinned
(`hangar.verifiers.harness`) and the hidden files are put in place, then the commands run
where nothing the agent left outside the workspace exists (a process, a
``usercustomize.py`` in HOME, a file in /tmp): the agent's sandbox with its scratch
wiped, or a fresh one (see `hangar.kinds.execution.scenarios.verification`), with
tools the workspace cannot shadow (`_WITH_OUT`).
"""

from __future__ import annotations

import json
import shlex
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hangar.errors import SandboxError, SandboxUnavailable
from hangar.sandbox.base import ExecResult, Sandbox
from hangar.sandbox.ending import HeldExec, end_user_script, ended_result, exec_then_end_user
from hangar.verifiers.harness import Placement
from hangar.verifiers.protocol import CommandRecord
from hangar.verifiers.spec import VerifierSpec

#: Where verifier commands write reports (``$HANGAR_VERIFIER_OUT`` in the sandbox).
VERIFIER_OUT = "/tmp/hangar-verifier"

#: Bound on the git commands that read the workspace's state.
GIT_TIMEOUT_S = 300
#: Makes $HANGAR_VERIFIER_OUT, then runs the verifier command ($1) by bash, with tools
#: the workspace cannot shadow: no start-up file of the shell's, and a PATH whose
#: system folders come first, without relative folders or any under the workspace
#: (folders under HOME and the temporary folders, which hold only what the image put
#: there again, go last).
_WITH_OUT = (
    'mkdir -p "$HANGAR_VERIFIER_OUT" || exit 96; '
    "unset BASH_ENV ENV CDPATH PYTHONSTARTUP PYTHONINSPECT; set -f; "
    "first=; last=; home=${HOME:-/nonexistent}; saved=$IFS; IFS=:; "
    "for d in $PATH; do case $d in "
    '""|[!/]*|"$PWD"|"$PWD"/*) ;; '
    '"$home"|"$home"/*|/tmp|/tmp/*|/var/tmp|/var/tmp/*|/dev/shm|/dev/shm/*) last=$last:$d ;; '
    "*) first=$first:$d ;; esac; done; "
    'IFS=$saved; set +f; PATH=$first$last; PATH=${PATH#:}; export PATH; exec bash -c "$1"'
)
#: Git in a verifier command ignores what the agent planted in the repository's own
#: configuration to run code (command-line precedence, as ``git -c``).
VERIFIER_GIT_ENV = {
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "core.fsmonitor",
    "GIT_CONFIG_VALUE_0": "false",
    "GIT_CONFIG_KEY_1": "core.hooksPath",
    "GIT_CONFIG_VALUE_1": "/dev/null",
}

_GIT = (
    "GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0 "
    "git --no-pager -c 'safe.directory=*' -c core.fsmonitor=false -c core.hooksPath=/dev/null "
    "-c core.quotePath=false"
)


def git_state(sandbox: Sandbox) -> dict[str, str]:
    """HEAD and ``git status --porcelain`` of the workspace before the agent (after the
    arm's plugins were installed), in one exec (each exec is a round trip to the engine)."""
    git = (
        f"{{ {_GIT} rev-parse HEAD || exit 90; }}; printf '\\0'; "
        f"{{ {_GIT} status --porcelain --untracked-files=all || exit 90; }}"
    )
    res = sandbox.exec(["sh", "-c", git], timeout=GIT_TIMEOUT_S)
    if not res.ok:
        raise SandboxError(f"git failed in the sandbox: {res.stderr.strip()}")
    head, _, status = res.stdout.partition("\0")
    return {"head": head.strip(), "status": status}


#: The agent's own view of its repository, each command allowed to fail (with its exit
#: code after a NUL): what the agent did to ``.git`` is evidence, not an error.
_AGENT_VIEW = (
    f"{_GIT} rev-parse HEAD 2>&1; printf '\\0%s\\0' $?; "
    f"{_GIT} status --porcelain --untracked-files=all 2>&1; printf '\\0%s\\0' $?"
)


def final_state(sandbox: Sandbox, *, hold: bool = False) -> tuple[dict[str, Any], HeldExec | None]:
    """The agent's own view of the workspace's repository (HEAD and status) after the
    agent, taken once every process of the sandbox user is dead; every process is killed
    again after git (which may run filters an agent declared).

    Nothing the agent did to its repository makes this fail: a git that cannot run is
    recorded (``head_error``, ``status_error``) and the trial goes on to verification; the
    diff that judges the agent is taken on the host against the pinned commit
    (`hangar.sandbox.workspace.diff_against_pin`). Only a sandbox that is gone raises.
    The kills run only in an isolated sandbox: on the local backend they would kill the
    host's processes. The keeper of a docker sandbox runs as root and survives them.

    With `hold` (an isolated sandbox whose verification runs in it), the exec is held
    for the first verifier command (`Sandbox.exec_held`), which `run_verifier_commands`
    resumes: one exec fewer. Returns the state and the held exec (None without `hold`).
    """
    held = None
    if sandbox.isolated:
        script = end_user_script(
            ["sh", "-c", _AGENT_VIEW], GIT_TIMEOUT_S, sandbox.spec.kill_after_s, end_first=True
        )
        if hold:
            held = sandbox.exec_held(script)
            res = ended_result(held.first, GIT_TIMEOUT_S)
        else:
            res = ended_result(sandbox.exec(["/bin/sh", "-c", script]), GIT_TIMEOUT_S)
        if res.returncode in (93, 94):
            if held is not None:
                held.release()
            raise SandboxError(f"the agent's processes could not all be ended: {res.stderr}")
    else:
        res = sandbox.exec(["sh", "-c", _AGENT_VIEW], timeout=GIT_TIMEOUT_S)
    return _agent_view(sandbox, res), held


def _agent_view(sandbox: Sandbox, res: ExecResult) -> dict[str, Any]:
    """The fields of `_AGENT_VIEW`'s output (what git could not say, as an error)."""
    fields = res.stdout.split("\0")
    if not res.ok or len(fields) < 4:
        sandbox.check_alive()  # a dead sandbox is the farm's failure
        return {"head_error": f"exit {res.returncode}: {(res.stdout + res.stderr)[-2000:]}"}
    state: dict[str, Any] = {}
    for name, output, code in (("head", fields[0], fields[1]), ("status", fields[2], fields[3])):
        if code == "0":
            state[name] = output.strip() if name == "head" else output
        else:
            state[f"{name}_error"] = f"git exited {code}: {output.strip()[-2000:]}"
    return state


def hidden_placements(verifier: VerifierSpec, folder: Path) -> list[Placement]:
    """`verifier.files` as placements: (target in the workspace, source on the host, whose
    relative paths are relative to the task's `folder`)."""
    return [(h.target, (folder / h.source).resolve()) for h in verifier.files]


def stage_placements(placements: list[Placement], staging: Path, sandbox_dir: str) -> str:
    """Stage each (target, source) in `staging` on the host, which the sandbox sees (or
    gets copied, in one archive) as `sandbox_dir`; returns the shell that makes each
    target the source's copy, or removes it when the source is None, replacing whatever
    the agent left there (the harness put back, then the hidden verifier files), to run
    first in the first verifier command's exec: no exec and no archive per file.

    It runs as the sandbox user, so a link the agent planted on the way leads nowhere
    outside the sandbox. A placement that fails (the agent made a folder unwritable and
    it cannot be made writable again) fails the command it precedes (exit 97): a failed
    check, never an infrastructure error an agent could cause to get its trial retried.
    """
    staging.mkdir(parents=True, exist_ok=True)
    steps = []
    for i, (target_path, source) in enumerate(placements):
        target = shlex.quote(target_path)
        parent = f'"$(dirname -- {target})"'
        retry = f"{{ chmod -f u+rwx {parent}; rm -rf -- {target}; }}"
        clear = f"{{ rm -rf -- {target} 2>/dev/null || {retry}; }}"
        if source is None:
            steps.append(clear)
            continue
        if source.is_dir():
            shutil.copytree(source, staging / str(i), symlinks=True)
        else:
            shutil.copy2(source, staging / str(i))
        steps.append(f"{clear} && mkdir -p -- {parent} && cp -R -p -- {sandbox_dir}/{i} {target}")
    return "".join(f"{{ {step}; }} || exit 97; " for step in steps)


def run_verifier_commands(
    sandbox: Sandbox,
    spec: VerifierSpec,
    artifacts: Path,
    *,
    collect: bool = True,
    before: str = "",
    held: HeldExec | None = None,
) -> list[CommandRecord]:
    """Run the original verifier commands by bash in the workspace; keep every output.

    With `collect`, ``$HANGAR_VERIFIER_OUT`` is copied into ``artifacts/verifier/out``
    through the sandbox; without, the caller copies it (from a scratch folder). `before`
    is shell run first in the first command's exec (see `stage_placements`). Each
    record keeps when its command started and ended (host clock, seconds since the epoch):
    a report older than the first start was not written by this verification. `held`
    (`final_state`'s) runs the first exec; it is released when nothing needs it.
    """
    out_dir = artifacts / "verifier" / "commands"
    out_dir.mkdir(parents=True, exist_ok=True)
    records = []
    env = {"HANGAR_VERIFIER_OUT": sandbox.command_path(VERIFIER_OUT), **VERIFIER_GIT_ENV}
    for i, command in enumerate(spec.commands):
        # The output folder is made first, in the same exec: the command itself runs
        # exactly as `bash -c COMMAND`.
        argv = ["sh", "-c", (before if i == 0 else "") + _WITH_OUT, "hangar-verifier", command]
        started = time.time()
        # Nothing the last command started may run on while the host reads the workspace
        # and the output folder.
        last = sandbox.isolated and i == len(spec.commands) - 1
        if i == 0 and held is not None:
            res = held.resume(argv, timeout=spec.timeout_s, env=env, end_user=last)
        elif last:
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
                started_at=started,
                ended_at=time.time(),
            )
        )
    (artifacts / "verifier" / "commands.json").write_text(
        json.dumps([r.model_dump(by_alias=True) for r in records], indent=1)
    )
    if before and not spec.commands:  # files for the host verifier alone
        place = ["sh", "-c", before + "true"]
        if held is not None:
            res = held.resume(place, timeout=spec.timeout_s)
        else:
            res = sandbox.exec(place, timeout=spec.timeout_s)
        if not res.ok:
            (artifacts / "verifier" / "hidden-files-failed.txt").write_text(res.stderr)
    if held is not None:
        held.release()  # not needed (no command, nothing to place): its shell ends
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
