"""The relay's tunnel on its own: the forwarder's channels over a sandbox's exec stream.

A unix-socket echo server stands in for the relay, so these check the byte tunnel itself:
many connections at once, large payloads both ways, half-closes, an unreachable relay,
and the forwarder ending with its stream. The relay's HTTP is tested in test_relay.py
(through the same tunnel, on docker).
"""

from __future__ import annotations

import hashlib
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.models.tunnel import UNAVAILABLE, RelayTunnel
from hangar.sandbox import Mount, Sandbox, SandboxSpec, create_sandbox
from tests.conftest import BASE_IMAGE


class _Echo(socketserver.BaseRequestHandler):
    """Reads until EOF, then answers with the sha256 of what came and the bytes back."""

    def handle(self) -> None:
        data = b""
        while chunk := self.request.recv(65536):
            data += chunk
        self.request.sendall(hashlib.sha256(data).hexdigest().encode() + b"\n" + data)


class _EchoServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


@pytest.fixture
def relay_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "relay.sock"
    server = _EchoServer(str(path), _Echo)
    path.chmod(0o666)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield path
    server.shutdown()
    server.server_close()


# Run in the sandbox: N connections at once, each sends SIZE bytes, half-closes, and
# checks that the digest and the bytes come back.
CLIENT = """
import hashlib, os, socket, sys, threading
port, n, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ok = []
def one(i):
    data = os.urandom(size)
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    got = b""
    while chunk := s.recv(65536):
        got += chunk
    digest, _, back = got.partition(b"\\n")
    ok.append(digest.decode() == hashlib.sha256(data).hexdigest() and back == data)
threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
for t in threads: t.start()
for t in threads: t.join()
print("ok", sum(ok), "of", n)
"""


def _sandbox(backend: str, tmp_path: Path) -> Sandbox:
    if backend == "docker":
        pytest.importorskip("docker")
        from tests.sandbox.conftest import _backend_ready

        _backend_ready("docker")
        return create_sandbox(backend, SandboxSpec(image=BASE_IMAGE, trial="tunnel-test"))
    work = tmp_path / "ws"
    work.mkdir()
    return create_sandbox(
        backend, SandboxSpec(image="none", mounts=(Mount(source=work, target="/workspace"),))
    )


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_many_connections_and_large_payloads(
    backend: str, relay_socket: Path, tmp_path: Path
) -> None:
    port = 4000 if backend == "docker" else _free_port()
    with _sandbox(backend, tmp_path) as sandbox:
        tunnel = RelayTunnel.open(sandbox, port, relay_socket)
        try:
            res = sandbox.exec(["python3", "-c", CLIENT, str(port), "8", "400000"], timeout=120)
            assert res.stdout.strip() == "ok 8 of 8", res
        finally:
            tunnel.close()


@pytest.mark.docker
def test_unreachable_relay_answers_502_and_the_forwarder_ends_with_its_stream(
    tmp_path: Path,
) -> None:
    fetch = (
        "import socket; s = socket.create_connection(('127.0.0.1', 4000), timeout=30); "
        "s.sendall(b'GET / HTTP/1.1\\r\\n\\r\\n'); print(s.recv(4096).decode())"
    )
    with _sandbox("docker", tmp_path) as sandbox:
        tunnel = RelayTunnel.open(sandbox, 4000, tmp_path / "nobody-listens.sock")
        res = sandbox.exec(["python3", "-c", fetch], timeout=60)
        assert res.stdout.startswith(UNAVAILABLE.decode().split("\r\n")[0]), res
        assert "hangar relay" in res.stdout
        tunnel.close()
        # With its stream closed the forwarder is gone: nothing listens any more.
        res = sandbox.exec(["python3", "-c", fetch], timeout=60)
        assert "ConnectionRefusedError" in res.stderr, res


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _HostileStream:
    """An exec stream whose sandbox end says READY, then claims a 4 GiB frame and keeps
    sending bytes: the host must end the tunnel at the header, not buffer the frame."""

    def __init__(self) -> None:
        from hangar.models.forwarder import DATA, READY, frame

        self.sent = [frame(READY, 0), struct.pack(">BII", DATA, 1, 4 * 1024**3 - 1)]
        self.reads = 0
        self.closed = False

    def recv(self) -> bytes:
        self.reads += 1
        if self.sent:
            return self.sent.pop(0)
        return b"x" * 65536 if self.reads < 100_000 else b""

    def send(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_the_host_ends_a_tunnel_whose_sandbox_end_claims_a_huge_frame(tmp_path: Path) -> None:
    stream = _HostileStream()
    tunnel = RelayTunnel(stream, tmp_path / "relay.sock")  # type: ignore[arg-type]
    tunnel._thread.start()
    tunnel._thread.join(timeout=10)
    assert not tunnel._thread.is_alive()
    assert "a frame of 4294967295 bytes" in tunnel.problem
    assert stream.reads < 5  # it stopped at the header


def test_the_python_forwarder_ends_at_an_oversized_frame_from_the_host() -> None:
    """Where the backend has no helper, the forwarder is Python's: it bounds frames too."""
    import subprocess
    import sys

    from hangar.models.forwarder import MAX_FRAME
    from hangar.models.tunnel import FORWARDER_SOURCE

    proc = subprocess.Popen(
        [sys.executable, "-c", FORWARDER_SOURCE, str(_free_port())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    assert proc.stdout.read(9)[0] == 0  # READY
    proc.stdin.write(struct.pack(">BII", 2, 1, MAX_FRAME + 1))
    proc.stdin.flush()
    assert proc.wait(timeout=10) == 0


def test_channels_past_the_cap_are_refused(tmp_path: Path, relay_socket: Path) -> None:
    from hangar.models.forwarder import EOF, OPEN, READY, frame
    from hangar.models.tunnel import MAX_CHANNELS

    sent: list[bytes] = []
    opens = [frame(READY, 0)] + [frame(OPEN, n) for n in range(1, MAX_CHANNELS + 3)]

    class Stream:
        def recv(self) -> bytes:
            return opens.pop(0) if opens else (time.sleep(0.5) or b"")  # type: ignore[func-returns-value]

        def send(self, data: bytes) -> None:
            sent.append(data)

        def close(self) -> None:
            pass

    tunnel = RelayTunnel(Stream(), relay_socket)  # type: ignore[arg-type]
    tunnel._thread.start()
    tunnel._thread.join(timeout=30)
    assert tunnel.refused == 2
    assert sent.count(frame(EOF, MAX_CHANNELS + 1)) == 1
