"""The host end of the relay's tunnel: the forwarder's channels joined to `ModelRelay`.

The forwarder (`hangar.models.forwarder`) runs in the sandbox through
`Sandbox.open_stream`, so the relay needs nothing from a backend but the exec channel
it already has: on docker an exec as root (the agent cannot kill it), on Kubernetes an
exec over the API server (no egress opened, no port, no mount), locally a pipe. Every
channel the forwarder OPENs becomes a new connection to the relay's unix socket; bytes
are copied both ways until each side sends EOF.
"""

from __future__ import annotations

import contextlib
import inspect
import socket
import threading
from pathlib import Path

from hangar.errors import MissingPython, SandboxError
from hangar.models import forwarder
from hangar.models.forwarder import (
    DATA,
    EOF,
    OPEN,
    READY,
    Channels,
    FrameError,
    deliver,
    frame,
    frames,
    pump,
)
from hangar.sandbox.base import ExecStream, Sandbox
from hangar.sandbox.helper import HELPER_USER, helper_argv

#: The forwarder's source, run in the sandbox with ``python3 -c`` where the backend has no
#: helper (`Sandbox.helper`).
FORWARDER_SOURCE = inspect.getsource(forwarder)
#: The most connections open through one tunnel at once (more are answered with EOF).
MAX_CHANNELS = 256
#: What an agent gets when the relay cannot be reached.
_BODY = b'{"error": {"type": "hangar_relay", "message": "hangar relay: the relay is not running"}}'
UNAVAILABLE = (
    b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Content-Length: " + str(len(_BODY)).encode() + b"\r\n\r\n" + _BODY
)


class RelayTunnel:
    """Runs the forwarder in a sandbox and joins its channels to a relay socket."""

    def __init__(self, stream: ExecStream, socket_path: Path) -> None:
        self.stream = stream
        self.socket_path = socket_path
        self.channels = Channels()
        self._ready = threading.Event()
        self._ended = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name="hangar-tunnel")
        #: Why the tunnel ended early: the sandbox's end broke the framing ('' if not).
        self.problem = ""
        #: Connections refused for being over `MAX_CHANNELS`.
        self.refused = 0

    @classmethod
    def open(
        cls, sandbox: Sandbox, port: int, socket_path: Path, *, timeout: float = 30
    ) -> RelayTunnel:
        """Start the forwarder on `port` in `sandbox` and return once it listens: hangar's
        helper as its own user where the backend mounts it, else ``python3`` (as root where
        the backend can). Raises `MissingPython` or `SandboxError`."""
        user: str | None
        if sandbox.helper:
            argv, user = helper_argv("forward", str(port)), HELPER_USER
        else:
            argv = ["python3", "-c", FORWARDER_SOURCE, str(port)]
            user = "root" if sandbox.other_users else None
        tunnel = cls(sandbox.open_stream(argv, user=user), socket_path)
        tunnel._thread.start()
        if not tunnel.wait_ready(timeout):
            tunnel.close()
            code, err = tunnel.stream.exit_code(), tunnel.stream.stderr().strip()
            if code in (126, 127):
                raise MissingPython(err or "python3: not found")
            raise SandboxError(
                f"the relay forwarder did not start (exit {code}): {err[-500:]}".rstrip(": ")
            )
        return tunnel

    def wait_ready(self, timeout: float) -> bool:
        """Whether the forwarder said READY within `timeout` (False if it ended first)."""
        for _ in range(int(timeout * 10)):
            if self._ready.wait(0.1):
                return True
            if self._ended.is_set():
                return self._ready.is_set()
        return self._ready.is_set()

    def _send(self, data: bytes) -> None:
        with self._lock:
            self.stream.send(data)

    def _run(self) -> None:
        try:
            for kind, channel, payload in frames(self.stream.recv):
                if kind == READY:
                    self._ready.set()
                elif kind == OPEN:
                    self._open(channel)
                elif kind in (DATA, EOF):
                    deliver(kind, channel, payload, self.channels)
        except FrameError as exc:
            self.problem = f"the sandbox's end of the tunnel broke its framing: {exc}"
        except Exception:  # noqa: S110 (a broken stream ends the tunnel, as its end does)
            pass
        finally:
            self._ended.set()
            self.channels.close_all()

    def _open(self, channel: int) -> None:
        if len(self.channels.socks) >= MAX_CHANNELS or self.channels.get(channel) is not None:
            self.refused += 1
            with contextlib.suppress(SandboxError):
                self._send(frame(EOF, channel))
            return
        relay = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            relay.connect(str(self.socket_path))
        except OSError:
            relay.close()
            with contextlib.suppress(SandboxError):
                self._send(frame(DATA, channel, UNAVAILABLE) + frame(EOF, channel))
            return
        self.channels.add(channel, relay)
        threading.Thread(target=self._pump, args=(relay, channel), daemon=True).start()

    def _pump(self, relay: socket.socket, channel: int) -> None:
        with contextlib.suppress(SandboxError):  # the stream broke: the tunnel is ending
            pump(relay, channel, self._send, self.channels)

    def close(self) -> None:
        """End the forwarder (its stdin closes) and every connection through it."""
        self.stream.close()
        self.channels.close_all()
        self._thread.join(timeout=5)
