"""The `Sandbox` contract that every backend implements.

A sandbox is one isolated place where a trial's commands run: a container on docker,
a pod on Kubernetes, a temp folder for the (unsafe) local backend.

The contract is synchronous, on purpose. hangar gets its parallelism from Ray: every
trial is its own Ray task in its own worker process, and inside a trial the phases run
one after the other (prepare, agent, verifier). The docker SDK and the kubernetes client
are synchronous libraries; an async facade over them would only move the same blocking
calls into a thread pool. Where one trial needs two things at once (streaming an agent's
output while it runs, relaying its model traffic), a callback or a thread does it.

Rules every backend keeps (the conformance battery in `tests/sandbox/` checks them):

- A non-zero exit is a result (`ExecResult.returncode`), never an exception; so is a
  timeout (`timed_out`) and an out-of-memory kill (`oom_killed`).
- Infrastructure failure (no engine, a dead container) raises `SandboxUnavailable`.
- Output is capped per stream (default 10 MiB), keeping the *tail*, with a flag.
- Reads are capped (default 100 MiB); a larger file raises `SandboxFileTooLarge`.
- A relative path is relative to the sandbox's working directory.
- `close()` removes everything the sandbox made, also after errors, and may be called twice.
"""

from __future__ import annotations

import shlex
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import TYPE_CHECKING, ClassVar, Literal, Self, overload

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hangar.errors import SandboxError
from hangar.files import parse_size
from hangar.sandbox.helper import helper_argv

if TYPE_CHECKING:
    from hangar.sandbox.ending import HeldExec

MiB = 1024 * 1024
#: uid of the sandbox user in hangar's base image; workspaces are handed to it.
SANDBOX_UID = 1000

#: Labels every sandbox carries, so `hangar gc` and the per-node reaper can find it.
LABEL_MANAGED = "hangar.managed"
LABEL_SWEEP = "hangar.sweep"
LABEL_TRIAL = "hangar.trial"
LABEL_EXPIRES = "hangar.expires"
LABEL_NODE = "hangar.node"
LABEL_LEASE = "hangar.lease"

Stream = Literal["stdout", "stderr"]
#: Called with each chunk of output as it arrives (used to record an agent's trace live).
OutputCallback = Callable[[Stream, bytes], None]


class Mount(BaseModel):
    """A host folder made visible inside the sandbox (only a trial's own folders are)."""

    model_config = ConfigDict(frozen=True)

    source: Path
    """Host path of the folder; it must exist."""
    target: str
    """Absolute path where the sandbox sees it."""
    read_only: bool = False
    """Mount it read-only inside the sandbox."""
    image: str | None = None
    """An image holding the same folder at ``/bundle`` with a static ``/bin/busybox`` (an
    agent bundle's, `hangar.sandbox.bundle_images`): a backend that cannot bind a worker's
    folder (Kubernetes) has an init container copy it from there instead of copying it in."""

    @field_validator("target")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not PurePosixPath(value).is_absolute():
            raise ValueError(f"mount target must be an absolute path, got {value!r}")
        return value


class SandboxLimits(BaseModel):
    """Resource limits of one sandbox."""

    model_config = ConfigDict(frozen=True)

    cpus: float = Field(default=1.0, gt=0)
    """CPU cores the sandbox may use (fractions allowed)."""
    memory: int = Field(default=2 * 1024 * MiB, gt=0)
    """Memory limit in bytes (accepts ``512m``, ``2g``); swap is not added on top."""
    pids: int = Field(default=512, gt=0)
    """Most processes and threads that may exist at once (stops fork bombs)."""

    @field_validator("memory", mode="before")
    @classmethod
    def _size(cls, value: int | str) -> int:
        return parse_size(value)


class SandboxSpec(BaseModel):
    """Everything a backend needs to make one sandbox."""

    model_config = ConfigDict(frozen=True)

    image: str
    """Image reference (a local tag such as ``hangar/base:bookworm``, or any registry ref)."""
    workdir: str = "/workspace"
    """Working directory of every command; relative paths are resolved against it."""
    user: str = "agent"
    """Non-root user commands run as unless `exec(user=...)` says otherwise."""
    home: str = "/home/agent"
    """HOME inside the sandbox: private to this sandbox (at most the trial's own folder)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment of every command (never a secret: keys reach agents only through the relay)."""
    mounts: tuple[Mount, ...] = ()
    """Host folders the sandbox may see: the trial's own folders and nothing else."""
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    """CPU, memory and pids limits."""
    read_only_root: bool = False
    """Make the image's root file system read-only: only mounts (and /dev/shm) are
    writable. With HOME, /tmp and /var/tmp mounted from the trial's scratch folders, all
    the sandbox user can change is then known to the host (see `Sandbox.scratch_mounts`)."""
    network: str = "none"
    """``none`` (loopback only), or the name of the trial's service network
    (`hangar.sandbox.services`: the task's services and nothing else; docker only)."""
    hosts: dict[str, str] = Field(default_factory=dict)
    """Names the sandbox resolves (``/etc/hosts``): the services' addresses."""
    sweep: str = "adhoc"
    """Sweep id, for the ``hangar.sweep`` label."""
    trial: str = "adhoc"
    """Trial key, for the ``hangar.trial`` label."""
    node: str = ""
    """The node running the trial, for the ``hangar.node`` label."""
    ttl_s: float = Field(default=6 * 3600, gt=0)
    """After this many seconds the reaper may remove the sandbox (``hangar.expires``)."""
    output_limit: int = Field(default=10 * MiB, gt=0)
    """Bytes kept per output stream of one exec (the tail is kept)."""
    read_limit: int = Field(default=100 * MiB, gt=0)
    """Largest file `read_file` returns, and largest tree `copy_out` extracts."""
    kill_after_s: float = Field(default=5.0, ge=0)
    """Grace between TERM and KILL when a command times out (``timeout -k``)."""

    def labels(self, now: datetime | None = None) -> dict[str, str]:
        """The labels a backend puts on the sandbox (docker labels, pod labels)."""
        expires = (now or datetime.now(UTC)) + timedelta(seconds=self.ttl_s)
        return {
            LABEL_MANAGED: "true",
            LABEL_SWEEP: self.sweep,
            LABEL_TRIAL: self.trial,
            LABEL_EXPIRES: expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
            LABEL_NODE: self.node,
        }


class Change(BaseModel):
    """One path a sandbox's processes changed in the image's file system."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["A", "C", "D"]
    """Added, changed (a file's content or a folder's entries), deleted."""
    path: str
    """The absolute path."""


class ExecResult(BaseModel):
    """What one command did. A failure of the command is a value here, not an exception."""

    model_config = ConfigDict(frozen=True)

    returncode: int
    """Exit code (124 or 137 after a timeout, 137 after an out-of-memory kill)."""
    stdout: str
    """Standard output, decoded as UTF-8 with replacement; the tail if truncated."""
    stderr: str
    """Standard error, decoded as UTF-8 with replacement; the tail if truncated."""
    stdout_truncated: bool = False
    """True when stdout was longer than the cap and only its tail is kept."""
    stderr_truncated: bool = False
    """True when stderr was longer than the cap and only its tail is kept."""
    timed_out: bool = False
    """True when the command ran past its timeout and was killed."""
    oom_killed: bool = False
    """True when the kernel killed the command for exceeding the memory limit."""
    duration_s: float = 0.0
    """Wall time of the command as seen from the host."""

    @property
    def ok(self) -> bool:
        """The command exited 0 within its time."""
        return self.returncode == 0 and not self.timed_out


class TailBuffer:
    """Keeps the last `limit` bytes written to it and remembers whether it dropped any.

    The buffer may grow to twice the limit before trimming, so a stream of small writes
    costs amortised O(1) per byte instead of a memmove of the whole cap per write.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.truncated = False
        self._buf = bytearray()

    def write(self, data: bytes) -> None:
        """Append `data`, dropping the oldest bytes past the cap."""
        if len(data) >= self.limit:
            self._buf = bytearray(data[-self.limit :])
            self.truncated = self.truncated or len(data) > self.limit
            return
        self._buf += data
        if len(self._buf) > 2 * self.limit:
            self._trim()

    def _trim(self) -> None:
        if len(self._buf) > self.limit:
            del self._buf[: len(self._buf) - self.limit]
            self.truncated = True

    def getvalue(self) -> bytes:
        """The kept bytes (at most `limit`)."""
        self._trim()
        return bytes(self._buf)

    def text(self) -> str:
        """The kept bytes decoded as UTF-8, invalid sequences replaced."""
        return self.getvalue().decode("utf-8", errors="replace")


#: The exit status of a command killed by SIGKILL (as a shell reports it).
SIGKILL_EXIT = 137
#: How long past a command's own timeout (and its kill-after) the host waits for it.
HOST_MARGIN_S = 15.0


class ExecOutput:
    """What every backend's `Sandbox.exec` does with a running command's output: the
    tails of stdout and stderr within the caps, the live callback, the host-side
    deadline, and the `ExecResult` it ends in."""

    def __init__(
        self,
        spec: SandboxSpec,
        timeout: float | None,
        on_output: OutputCallback | None,
        *,
        stdout_limit: int | None = None,
    ) -> None:
        self.timeout, self.on_output = timeout, on_output
        self.out = TailBuffer(stdout_limit or spec.output_limit)
        self.err = TailBuffer(spec.output_limit)
        self.started = time.monotonic()
        #: When the host stops waiting (the in-sandbox ``timeout -k`` should act first).
        self.deadline = (
            None if timeout is None else self.started + timeout + spec.kill_after_s + HOST_MARGIN_S
        )

    def feed(self, stream: Literal["stdout", "stderr"], data: bytes) -> None:
        """One chunk of output as it arrives."""
        (self.out if stream == "stdout" else self.err).write(data)
        if self.on_output is not None:
            self.on_output(stream, data)

    @property
    def past_deadline(self) -> bool:
        """Whether the host's wait is over."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    def timed_out(self, code: int) -> bool:
        """Whether `code` is the command's timeout: ``timeout``'s 124, or a SIGKILL
        (its kill-after, or the host's) at or past the limit."""
        duration = time.monotonic() - self.started
        return self.timeout is not None and code in (124, SIGKILL_EXIT) and duration >= self.timeout

    def result(self, code: int, *, timed_out: bool | None = None, oom: bool = False) -> ExecResult:
        """The command's `ExecResult`."""
        return ExecResult(
            returncode=code,
            stdout=self.out.text(),
            stderr=self.err.text(),
            stdout_truncated=self.out.truncated,
            stderr_truncated=self.err.truncated,
            timed_out=self.timed_out(code) if timed_out is None else timed_out,
            oom_killed=oom,
            duration_s=time.monotonic() - self.started,
        )


def command_argv(cmd: str | Sequence[str]) -> list[str]:
    """A string runs through ``/bin/sh -c``; a sequence is an argv run as is."""
    if isinstance(cmd, str):
        return ["/bin/sh", "-c", cmd]
    argv = list(cmd)
    if not argv:
        raise ValueError("empty command")
    return argv


def timeout_argv(
    argv: list[str], timeout: float | None, kill_after: float, program: Sequence[str] = ("timeout",)
) -> list[str]:
    """Wrap `argv` in ``timeout -k`` (coreutils', or `program`: hangar's own helper where the
    backend mounts it, `Sandbox.timeout_program`) so a timeout kills the process *inside*.

    ``timeout`` puts the command in its own process group and signals the whole group,
    so children die with it; the host-side wait only needs a safety margin on top.
    """
    if timeout is None:
        return argv
    return [*program, "-k", f"{kill_after:g}s", f"{max(timeout, 0.001):g}s", *argv]


def describe(argv: Sequence[str]) -> str:
    """A shell-quoted form of `argv`, for messages."""
    return shlex.join(argv)


class ExecStream(ABC):
    """A command running in a sandbox with its stdin and stdout open both ways.

    What `Sandbox.open_stream` returns; the model relay's tunnel runs over it. Reads
    and writes may happen on different threads.
    """

    def __init__(self) -> None:
        self.errors = TailBuffer(64 * 1024)

    @abstractmethod
    def recv(self) -> bytes:
        """The next chunk of the command's stdout; b"" once it has ended."""

    @abstractmethod
    def send(self, data: bytes) -> None:
        """Write `data` to the command's stdin."""

    @abstractmethod
    def close(self) -> None:
        """Close the stream: the command's stdin ends. Idempotent."""

    @abstractmethod
    def exit_code(self) -> int | None:
        """The command's exit code once it has ended (None while it runs or if unknown)."""

    def stderr(self) -> str:
        """The tail of what the command wrote to stderr so far."""
        return self.errors.text()


class Sandbox(ABC):
    """One isolated place where a trial's commands run.

    Use it as a context manager (``with DockerSandbox(spec) as sb: ...``) so `close()`
    always runs. All paths are paths *inside* the sandbox; relative ones are resolved
    against `spec.workdir`.
    """

    #: Registry name of the backend ("docker", "local", "kubernetes").
    backend: ClassVar[str]
    #: Whether the backend isolates the sandbox from the host (False only for "local").
    isolated: ClassVar[bool] = True
    #: Whether commands can run as another user than the spec's (``exec(user=...)``).
    other_users: ClassVar[bool] = True
    #: Whether mounts are live (both sides see each other's writes at once); when not,
    #: a mount is copied in at start and back at `stop()`.
    live_mounts: ClassVar[bool] = True
    #: Whether the backend honours `SandboxSpec.read_only_root` with live mounts, so that
    #: one sandbox can serve both the agent and verification: after
    #: `END_USER_PROCESSES` and a wipe of the scratch mounts on the host, nothing the
    #: agent did survives outside the workspace.
    scratch_mounts: ClassVar[bool] = False
    #: Whether hangar's static helper (`hangar.sandbox.helper`) is at its path in every
    #: sandbox: then the keeper, the forwarders and ``timeout`` are its, never the image's.
    helper: ClassVar[bool] = False
    #: Whether a started sandbox can pass from one process of the node to another
    #: (`hand_over`, `adopt`): what a warm pool needs (`hangar.sandbox.warm_pool`).
    warm: ClassVar[bool] = False

    @property
    def timeout_program(self) -> tuple[str, ...]:
        """The ``timeout`` that wraps a command with a time limit (`timeout_argv`)."""
        return tuple(helper_argv("timeout")) if self.helper else ("timeout",)

    #: The backend's settings (`hangar.sandbox.config`), set by each backend.
    config: BaseModel

    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def resolve(self, path: str) -> str:
        """The absolute sandbox path of `path` (relative paths are under the workdir)."""
        p = PurePosixPath(path)
        return str(p if p.is_absolute() else PurePosixPath(self.spec.workdir) / p)

    def command_path(self, path: str) -> str:
        """`path` as commands inside the sandbox see it (for paths put in env variables)."""
        return self.resolve(path)

    @classmethod
    def image_problem(cls, image: str) -> str | None:
        """Why `image` cannot be used by this backend, or None (checked at admission)."""
        return None

    def hand_over(self) -> dict[str, str]:
        """Let go of this started sandbox, still running, for another process of the node
        to `adopt` (only where `warm`); what that process needs to take it."""
        raise NotImplementedError(f"backend {self.backend!r} cannot hand a sandbox over")

    @classmethod
    def adopt(
        cls, spec: SandboxSpec, handle: dict[str, str], config: BaseModel | None = None
    ) -> Self:
        """The started sandbox another process handed over (`hand_over`), made from
        `spec` and from now on this process's to run commands in and close. Raises
        `SandboxUnavailable` when it is gone."""
        raise NotImplementedError(f"backend {cls.backend!r} cannot adopt a sandbox")

    @classmethod
    def has_command(cls, image: str, command: str) -> bool | None:
        """Whether `image` has `command` (None: this backend cannot tell before a trial)."""
        return None

    @classmethod
    def image_record(cls, image: str) -> dict[str, object]:
        """What a trial's evidence records of `image` ({}: this backend cannot tell): its
        id and hangar's labels (the recipe, an agent CLI's packages and wheels)."""
        return {}

    @classmethod
    def engine_problem(cls, config: BaseModel | None = None) -> str | None:
        """Why this node cannot start sandboxes with `config` (the engine does not answer,
        lacks a runtime...), with what to do; None when it can (a sweep's preflight)."""
        return None

    @classmethod
    def image_folder(cls, image: str, path: str, cache: Path) -> Path | None:
        """A tar archive of folder `path` as `image` has it (None: no such folder, or a
        backend that cannot read images); `cache` is a node-local folder to keep it in."""
        return None

    @abstractmethod
    def start(self) -> None:
        """Create and start the sandbox. Raises `SandboxUnavailable` or `ImageNotFound`."""

    @abstractmethod
    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        stdin: str | bytes | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecResult:
        """Run a command and wait for it.

        Args:
            cmd: an argv list, or a string run by ``/bin/sh -c``.
            timeout: seconds before the command (and its children) is killed;
                None for no limit.
            cwd: working directory (default: the spec's workdir).
            env: variables added to the spec's environment for this command.
            user: run as this user instead of the spec's.
            stdin: bytes or text fed to the command's standard input, then closed.
            on_output: called with each chunk of stdout/stderr as it arrives.
        """

    @abstractmethod
    def open_stream(self, argv: list[str], *, user: str | None = None) -> ExecStream:
        """Start `argv` with its stdin and stdout open both ways (no timeout: it runs until
        the stream is closed or the sandbox goes). Raises `SandboxUnavailable`."""

    def exec_held(self, script: str) -> HeldExec:
        """Run shell `script` as the sandbox user, then hold the exec for a second part
        the host sends once its own work is done (`HeldExec.resume`): one exec where the
        backend can, two otherwise (`hangar.sandbox.ending`). `script` must end every
        process of the user (`END_USER_PROCESSES`): the second part runs in its shell."""
        from hangar.sandbox.ending import SeparateExecs

        return SeparateExecs(self, self.exec(["/bin/sh", "-c", script]))

    @overload
    def read_file(self, path: str, *, text: Literal[True] = ...) -> str: ...

    @overload
    def read_file(self, path: str, *, text: Literal[False]) -> bytes: ...

    def read_file(self, path: str, *, text: bool = True) -> str | bytes:
        """Read a file; text is decoded as UTF-8 (strictly: undecodable bytes raise).

        Raises `SandboxFileNotFound`, `SandboxIsADirectory` or `SandboxFileTooLarge`.
        """
        data = self._read_bytes(self.resolve(path))
        return data.decode("utf-8") if text else data

    def file_mode(self, path: str) -> tuple[bytes, int]:
        """A file's bytes and its permission bits (where the backend cannot tell them,
        0o644), as `read_file` reads it."""
        return self.read_file(path, text=False), 0o644

    def write_file(self, path: str, data: str | bytes, *, mode: int = 0o644) -> None:
        """Write a file as the sandbox user, creating parent folders as needed."""
        payload = data.encode("utf-8") if isinstance(data, str) else data
        self._write_bytes(self.resolve(path), payload, mode)

    @abstractmethod
    def _read_bytes(self, path: str) -> bytes:
        """Read an absolute sandbox path, within the read cap."""

    @abstractmethod
    def _write_bytes(self, path: str, data: bytes, mode: int) -> None:
        """Write an absolute sandbox path as the sandbox user."""

    @abstractmethod
    def copy_in(self, source: Path, target: str) -> None:
        """Copy the contents of host folder `source` into sandbox folder `target`."""

    @abstractmethod
    def copy_out(self, source: str, target: Path) -> None:
        """Copy the contents of sandbox folder `source` into host folder `target`.

        What comes out of a sandbox is untrusted: links that point outside `target`,
        absolute paths, device files and set-uid bits are refused or stripped, and the
        total size is capped by `spec.read_limit`.
        """

    @abstractmethod
    def check_alive(self) -> None:
        """Raise `SandboxUnavailable` when the sandbox is gone (killed, its node or engine
        lost): to tell the farm's failure from a command's own non-zero exit."""

    def stop(self) -> None:
        """End every process in the sandbox now; `close()` still removes it.

        The default closes the sandbox outright; backends with a faster kill than their
        removal override it, so a caller can kill at once and remove in the background.
        """
        self.close()

    def changes(self) -> list[Change]:
        """What the sandbox's processes changed in the image's file system (added,
        changed and deleted paths; mounts not included), for a stopped sandbox."""
        raise SandboxError(f"the {self.backend} backend cannot list a sandbox's changes")

    def snapshot(self) -> str:
        """A new image of the stopped sandbox's file system as its processes left it
        (mounts not included): the shared verifier of an image task starts from it. The
        caller removes it (`remove_image`)."""
        raise SandboxError(f"the {self.backend} backend cannot snapshot a sandbox")

    @classmethod
    def remove_image(cls, image: str) -> None:
        """Remove an image `snapshot` made (a missing one is not an error)."""
        return  # a backend without snapshots has nothing to remove

    @abstractmethod
    def close(self) -> None:
        """Remove the sandbox and everything it made. Safe to call more than once."""
