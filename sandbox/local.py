"""`LocalSandbox`: host subprocesses in a temp folder. UNSAFE: it isolates nothing.

For fast tests of the layers above the sandbox and for scenarios you trust completely.
Commands run as the host user, see the host's network and file system, and are limited
by nothing but their timeout. What it does keep:

- the environment is scrubbed (PATH, LANG, HOME and the spec's env only), so host
  secrets in the caller's environment do not leak into commands;
- sandbox paths map into a private folder: the workdir (or the mount that covers it),
  mounts at their host sources, everything else under a private root, so file
  operations through the API stay inside the trial's folders;
- a timeout kills the command's whole process group.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import IO, ClassVar

from hangar.errors import (
    SandboxError,
    SandboxFileNotFound,
    SandboxFileTooLarge,
    SandboxIsADirectory,
)
from hangar.sandbox.archive import extract_untrusted, tar_directory
from hangar.sandbox.base import (
    ExecOutput,
    ExecResult,
    ExecStream,
    OutputCallback,
    Sandbox,
    SandboxSpec,
    command_argv,
)
from hangar.sandbox.config import LocalConfig

log = logging.getLogger(__name__)

UNSAFE_WARNING = (
    "LocalSandbox runs commands directly on the host with NO isolation (no container, "
    "network on, host files visible). Use it only for tests and scenarios you trust."
)


class LocalSandbox(Sandbox):
    """Runs commands as host subprocesses in a private temp folder (no isolation)."""

    backend: ClassVar[str] = "local"
    config: LocalConfig
    isolated: ClassVar[bool] = False
    other_users: ClassVar[bool] = False

    def __init__(self, spec: SandboxSpec, *, config: LocalConfig | None = None) -> None:
        super().__init__(spec)
        self.config = config or LocalConfig()
        self._root: Path | None = None

    @property
    def root(self) -> Path:
        """The private host folder that stands in for the sandbox's file system."""
        if self._root is None:
            raise SandboxError("the sandbox is not started (call start() or use `with`)")
        return self._root

    def start(self) -> None:
        """Make the private folders; warns that nothing is isolated."""
        if self._root is not None:
            return
        if self.spec.network != "none":
            raise SandboxError("the local backend cannot join a service network (use docker)")
        log.warning(UNSAFE_WARNING)
        self._root = Path(tempfile.mkdtemp(prefix="hangar-local-"))
        for folder in (self.spec.workdir, self.spec.home):
            self.host_path(folder).mkdir(parents=True, exist_ok=True)

    def host_path(self, path: str) -> Path:
        """The host path that backs sandbox path `path`."""
        p = PurePosixPath(self.resolve(path))
        best: tuple[int, Path] | None = None
        for m in self.spec.mounts:
            t = PurePosixPath(m.target)
            if p == t or t in p.parents:
                depth = len(t.parts)
                if best is None or depth > best[0]:
                    best = (depth, m.source / p.relative_to(t))
        if best is not None:
            return best[1]
        return self.root.joinpath(*p.parts[1:])

    def command_path(self, path: str) -> str:
        """Commands run on the host, so they see the host path that backs `path`."""
        return str(self.host_path(path))

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
        """Run a command as a host subprocess (see `Sandbox.exec`)."""
        if user is not None and user != self.spec.user:
            raise SandboxError("LocalSandbox cannot run commands as another user")
        argv = command_argv(cmd)
        workdir = self.host_path(cwd or self.spec.workdir)
        environ = self._environ(env)
        output = ExecOutput(self.spec, timeout, on_output)
        try:
            proc = subprocess.Popen(
                argv,
                cwd=workdir,
                env=environ,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # own process group, so a timeout kills children too
            )
        except OSError as exc:
            # Same outcome as a shell that cannot find the program: a result, not an error.
            return ExecResult(returncode=127, stdout="", stderr=f"{argv[0]}: {exc}\n")
        if stdin is not None and proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(stdin.encode() if isinstance(stdin, str) else stdin)
            proc.stdin.close()
        timed_out = self._pump(proc, output)
        code = proc.wait()
        if code < 0:  # killed by a signal: report it as a shell (and `timeout`) would
            code = 124 if timed_out and code == -signal.SIGTERM else 128 - code
        return output.result(code, timed_out=timed_out)

    def _environ(self, env: dict[str, str] | None) -> dict[str, str]:
        """A command's whole environment: nothing of hangar's own but PATH."""
        return {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "HOME": str(self.host_path(self.spec.home)),
            **self.spec.env,
            **(env or {}),
        }

    def open_stream(self, argv: list[str], *, user: str | None = None) -> ExecStream:
        """Start `argv` as a host subprocess with pipes (see `Sandbox.open_stream`)."""
        if user is not None and user != self.spec.user:
            raise SandboxError("LocalSandbox cannot run commands as another user")
        try:
            proc = subprocess.Popen(
                argv,
                cwd=self.host_path(self.spec.workdir),
                env=self._environ(None),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise SandboxError(f"cannot start {argv[0]}: {exc}") from exc
        return _PipeStream(proc)

    def _pump(self, proc: subprocess.Popen[bytes], output: ExecOutput) -> bool:
        """Copy the process's output until it ends or times out; whether it timed out
        (the local stand-in for the ``timeout -k`` the other backends run inside)."""
        sel = selectors.DefaultSelector()
        assert proc.stdout is not None and proc.stderr is not None
        sel.register(proc.stdout, selectors.EVENT_READ, "stdout")
        sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
        timeout, timed_out = output.timeout, False
        term_at: float | None = None
        while sel.get_map():
            now = time.monotonic()
            if timeout is not None and not timed_out and now - output.started >= timeout:
                timed_out, term_at = True, now
                _signal_group(proc, signal.SIGTERM)
            if term_at is not None and now - term_at >= self.spec.kill_after_s:
                _signal_group(proc, signal.SIGKILL)
                term_at = None
            for key, _ in sel.select(0.1 if timeout is not None else None):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                output.feed(key.data, chunk)
        sel.close()
        if timed_out:
            _signal_group(proc, signal.SIGKILL)  # stragglers that closed their pipes
        return timed_out

    def _read_bytes(self, path: str) -> bytes:
        host = self.host_path(path)
        if host.is_dir():
            raise SandboxIsADirectory(f"{path} is a folder; use copy_out for folders")
        if not host.exists():
            raise SandboxFileNotFound(f"no such file in the sandbox: {path}")
        if host.stat().st_size > self.spec.read_limit:
            raise SandboxFileTooLarge(
                f"{path} is {host.stat().st_size} bytes, over the read cap of "
                f"{self.spec.read_limit} bytes (spec.read_limit)"
            )
        return host.read_bytes()

    def _write_bytes(self, path: str, data: bytes, mode: int) -> None:
        host = self.host_path(path)
        host.parent.mkdir(parents=True, exist_ok=True)
        host.write_bytes(data)
        host.chmod(mode)

    def copy_in(self, source: Path, target: str) -> None:
        """Copy the contents of host folder `source` into `target`."""
        if not source.is_dir():
            raise SandboxError(f"copy_in needs a host folder; {source} is not one")
        shutil.copytree(source, self.host_path(target), symlinks=True, dirs_exist_ok=True)

    def copy_out(self, source: str, target: Path) -> None:
        """Copy the contents of `source` into host folder `target`.

        It goes through the same untrusted-archive extraction as the isolated backends,
        so a link that leaves the folder is refused here too.
        """
        host = self.host_path(source)
        if not host.is_dir():
            raise SandboxError(f"copy_out needs a folder; {source} is not one (use read_file)")
        with tempfile.TemporaryFile() as spool:
            tar_directory(host, spool, uid=os.getuid(), gid=os.getgid())
            spool.seek(0)
            extract_untrusted(spool, target, strip=0, limit=self.spec.read_limit)

    def check_alive(self) -> None:
        """Host processes have no sandbox to lose: nothing to check."""

    def close(self) -> None:
        """Remove the private folder; idempotent."""
        root, self._root = self._root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


class _PipeStream(ExecStream):
    """A host subprocess's pipes as an `ExecStream`."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        super().__init__()
        self._proc = proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self._stdin, self._stdout, err = proc.stdin, proc.stdout, proc.stderr
        threading.Thread(target=self._drain, args=(err,), daemon=True).start()

    def _drain(self, err: IO[bytes]) -> None:
        for chunk in iter(lambda: os.read(err.fileno(), 65536), b""):
            self.errors.write(chunk)

    def recv(self) -> bytes:
        try:
            return os.read(self._stdout.fileno(), 65536)
        except (OSError, ValueError):
            return b""

    def send(self, data: bytes) -> None:
        try:
            self._stdin.write(data)
            self._stdin.flush()
        except (OSError, ValueError) as exc:
            raise SandboxError(f"the command's stdin is closed: {exc}") from exc

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stdin.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        with contextlib.suppress(OSError, ValueError):
            self._stdout.close()

    def exit_code(self) -> int | None:
        return self._proc.poll()
