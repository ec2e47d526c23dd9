"""Ending every process of the sandbox user, and the exec that waits for the host meanwhile.

After the agent's turn nothing it started may run on: `END_USER_PROCESSES` kills every
process of the sandbox user and clears what they left in shared memory, and
`exec_then_end_user` runs a command with that kill after it (and, on request, before it).

Between the agent's end and its verification the host has work of its own (the scratch
folders wiped, the diff taken, the test harness put back), so the kill, the agent's view
of its repository and the first verifier command used to take two execs. An exec is the
dearest thing a trial does on a container engine (about 70 ms of the machine's CPU here:
the engine, its shim and two starts of the runtime), so `Sandbox.exec_held` runs both in
one where the backend can (docker): the first script runs, the exec waits, the host does
its work, then sends the second script (`HeldExec.resume`), which the waiting shell
``exec``s. It is sound only where the first script left nothing of the user alive that
could reach the waiting shell: it must end with the kill, as the final status does. A
backend that cannot hold an exec runs the two as two execs (`SeparateExecs`), the same
scripts.
"""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hangar.sandbox.base import ExecResult, Sandbox

#: POSIX shell that kills every process of the user running it and clears what it left
#: in shared memory (/dev/shm, System V IPC, POSIX message queues); exits 93 (processes)
#: or 94 (/dev/shm) when something remains, and goes on otherwise, so more can follow it
#: in the same script.
#:
#: One ``kill -9 -1`` is enough (Linux signals all of the user's processes under one
#: lock, so a process forking at that moment cannot leave a live child); the loop only
#: waits until they are gone. ``kill`` is the shell's builtin, which spares the shell;
#: so the script must not run under a ``timeout`` of the same user, which it would kill.
#: Processes of other users (the root keeper, the relay's forwarder) survive. Each wipe
#: runs only where the shell's own builtins see something to wipe (an agent mostly leaves
#: nothing there, and a process started in a sandbox costs a few milliseconds); where it
#: cannot tell (no /proc/sysvipc), it wipes.
END_USER_PROCESSES = """
kill -9 -1 2>/dev/null
i=0
while [ $i -lt 200 ]; do
  left=""
  for d in /proc/[0-9]*; do
    [ "${d#/proc/}" = "$$" ] && continue
    [ -O "$d" ] && left="$left ${d#/proc/}"
  done
  [ -z "$left" ] && break
  kill -9 -1 2>/dev/null
  sleep 0.05 2>/dev/null || sleep 1
  i=$((i + 1))
done
[ -z "$left" ] || { echo "processes outlived the kill:$left" >&2; exit 93; }
hangar_any() { for f in "$@"; do { [ -e "$f" ] || [ -L "$f" ]; } && return 0; done; return 1; }
shm=""
if hangar_any /dev/shm/* /dev/shm/.[!.]* /dev/shm/..?*; then
  shm=1
  chmod -R u+rwx /dev/shm/ 2>/dev/null
  find /dev/shm -mindepth 1 -delete 2>/dev/null
fi
ipc=""
for f in /proc/sysvipc/shm /proc/sysvipc/sem /proc/sysvipc/msg; do
  [ -r "$f" ] || { ipc=1; continue; }
  n=0
  while IFS= read -r line; do n=$((n + 1)); done < "$f"
  [ $n -gt 1 ] && ipc=1
done
[ -n "$ipc" ] && command -v ipcrm >/dev/null && ipcrm --all 2>/dev/null
if hangar_any /dev/mqueue/* /dev/mqueue/.[!.]* /dev/mqueue/..?*; then
  find /dev/mqueue -mindepth 1 -maxdepth 1 -user "$(id -u)" -delete 2>/dev/null
fi
if [ -n "$shm" ]; then  # nothing was there, and none of the user's processes is left
  left=$(find /dev/shm -mindepth 1 -user "$(id -u)" 2>/dev/null | head -n 3)
  [ -z "$left" ] || { echo "files outlived the wipe of /dev/shm: $left" >&2; exit 94; }
fi
"""


def end_user_script(
    argv: list[str],
    timeout: float,
    kill_after: float,
    *,
    end_first: bool = False,
    program: Sequence[str] = ("timeout",),
) -> str:
    """Shell that runs `argv` under an in-sandbox timeout, then kills every process of the
    sandbox user, and exits with `argv`'s status (with `end_first`, `END_USER_PROCESSES`
    runs before it too).

    The shell itself runs without a ``timeout`` wrapper: one would be the user's and die
    of the kill. Exit codes 93 and 94 are `END_USER_PROCESSES` failing."""
    from hangar.sandbox.base import timeout_argv

    inner = shlex.join(timeout_argv(argv, timeout, kill_after, program))
    script = f"{inner}; rc=$?; kill -9 -1 2>/dev/null; exit $rc"
    return f"{END_USER_PROCESSES}\n{script}" if end_first else script


def exec_then_end_user(
    sandbox: Sandbox,
    argv: list[str],
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    end_first: bool = False,
) -> ExecResult:
    """Run `argv` under an in-sandbox timeout, then kill every process of the sandbox user:
    one exec (`end_user_script`). Only for isolated sandboxes."""
    script = end_user_script(
        argv,
        timeout,
        sandbox.spec.kill_after_s,
        end_first=end_first,
        program=sandbox.timeout_program,
    )
    return ended_result(sandbox.exec(["/bin/sh", "-c", script], env=env), timeout)


def ended_result(res: ExecResult, timeout: float) -> ExecResult:
    """`res` of an `end_user_script` with its timeout told (the shell had no wrapper of
    its own: ``timeout``'s 124, or a SIGKILL, at or past the limit)."""
    timed_out = res.returncode in (124, 137) and res.duration_s >= timeout
    return res.model_copy(update={"timed_out": timed_out})


class HeldExec(ABC):
    """An exec whose first script has run and that waits for the host's second
    (`Sandbox.exec_held`; see the module docstring)."""

    first: ExecResult
    """What the first script did (its exit status, output and time)."""

    @abstractmethod
    def resume(
        self,
        argv: list[str],
        *,
        timeout: float,
        env: dict[str, str] | None = None,
        end_user: bool = False,
    ) -> ExecResult:
        """Run `argv` as the second part, as ``Sandbox.exec(argv, timeout=...)`` would (or
        as `exec_then_end_user` would, with `end_user`), and wait for it. Once only."""

    @abstractmethod
    def release(self) -> None:
        """End the exec without a second part (nothing runs). Idempotent; a no-op once
        resumed."""


class SeparateExecs(HeldExec):
    """A backend that cannot hold an exec: the second part is an exec of its own."""

    def __init__(self, sandbox: Sandbox, first: ExecResult) -> None:
        self.sandbox, self.first = sandbox, first

    def resume(
        self,
        argv: list[str],
        *,
        timeout: float,
        env: dict[str, str] | None = None,
        end_user: bool = False,
    ) -> ExecResult:
        return exec_second_part(self.sandbox, argv, timeout=timeout, env=env, end_user=end_user)

    def release(self) -> None:
        pass


def exec_second_part(
    sandbox: Sandbox,
    argv: list[str],
    *,
    timeout: float,
    env: dict[str, str] | None,
    end_user: bool,
) -> ExecResult:
    """A held exec's second part as an exec of its own (`HeldExec.resume`)."""
    if end_user:
        return exec_then_end_user(sandbox, argv, timeout=timeout, env=env)
    return sandbox.exec(argv, timeout=timeout, env=env)


#: The shell of a held exec (docker): the first script ($1) is eval'd in this shell, so
#: its kills spare it; on its end (or its exit) the EXIT trap tells the host (the token the
#: host sent first on stdin, then the status, on both streams), reads the second part
#: from stdin to its end, and execs it. An empty second part ends the exec.
HELD_SHELL = (
    "IFS= read -r t || exit 98; "
    'trap \'rc=$?; trap - EXIT; printf "%s\\n" "$t" >&2; printf "%s %s\\n" "$t" "$rc"; '
    'cont=$(cat); exec /bin/sh -c "$cont"\' EXIT; '
    'eval "$1"'
)


def second_part(
    argv: list[str],
    *,
    timeout: float,
    kill_after: float,
    env: dict[str, str] | None,
    end_user: bool,
    program: Sequence[str] = ("timeout",),
) -> str:
    """The shell a held exec runs as its second part: `env` exported, then `argv` as
    `HeldExec.resume` says (its stdin is at its end already, as an exec's without one)."""
    from hangar.sandbox.base import timeout_argv

    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in (env or {}).items())
    if end_user:
        return exports + end_user_script(argv, timeout, kill_after, program=program)
    return exports + "exec " + shlex.join(timeout_argv(argv, timeout, kill_after, program))
