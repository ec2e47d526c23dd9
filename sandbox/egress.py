"""The egress proxy: a sandbox's one audited way out, for an allowlist of hosts.

A sandbox keeps ``--network none``: it has no route, no DNS, no address of its own. When
its task names an allowlist, the proxy listens on a unix socket on the host and the
relay's forwarder (`hangar.models.tunnel`) joins a loopback port in the sandbox to it,
through the backend's exec channel, as the model relay is reached (on Kubernetes no
egress is opened: the pod's NetworkPolicy still lets nothing out). Inside, ``HTTP_PROXY``
and ``HTTPS_PROXY`` name that port.

The proxy speaks HTTP CONNECT (any protocol inside, TLS included) and plain HTTP
(absolute-form requests). It lets a request through only when its host is one of the
`allowed` names (``host``, ``*.domain``, ``host:port``, ``host:*``; a public network
is ``*:*``), by name, never a raw IPv4 or
IPv6 address, and to port 443 (CONNECT) or 80 (plain HTTP) unless the entry names
another; names are resolved on the host. Every attempt, let through or refused, is
recorded with its reason (`attempts`), for the trial's evidence.
"""

from __future__ import annotations

import contextlib
import fnmatch
import ipaddress
import shutil
import socket
import socketserver
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

#: Longest request head read before a request is refused.
MAX_HEAD = 64 * 1024
#: Seconds a connection to an allowed host may take to open.
CONNECT_TIMEOUT_S = 10
#: Environment that points a sandbox's HTTP clients at the proxy on `port`.
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")


def proxy_env(port: int) -> dict[str, str]:
    """What a sandbox's processes need to use the proxy on loopback `port`."""
    url = f"http://127.0.0.1:{port}"
    return {**dict.fromkeys(PROXY_VARS, url), "NO_PROXY": "", "no_proxy": ""}


class Refused(Exception):
    """A request the proxy does not let through (its message is the reason)."""


def check(allowed: tuple[str, ...], host: str, port: int, default_port: int) -> None:
    """Raise `Refused` unless `host`:`port` is on the allowlist (see the module docstring)."""
    name = host.strip("[]").lower().rstrip(".")
    try:
        ipaddress.ip_address(name)
    except ValueError:
        pass
    else:
        raise Refused(f"{host} is a raw IP address: only named hosts are let through")
    for entry in allowed:
        pattern, _, listed = entry.lower().partition(":")
        if fnmatch.fnmatchcase(name, pattern) and listed == "*":
            return
        wanted = int(listed) if listed.isdigit() else default_port
        if fnmatch.fnmatchcase(name, pattern) and port == wanted:
            return
        if fnmatch.fnmatchcase(name, pattern):
            raise Refused(f"port {port} of {name} is not on the allowlist (only {wanted})")
    raise Refused(f"{name} is not on the allowlist")


class EgressProxy:
    """The proxy of one sandbox phase (see the module docstring)."""

    def __init__(self, allowed: tuple[str, ...], phase: str) -> None:
        # A private folder (0700) with a short path: unix socket paths are short.
        self.folder = Path(tempfile.mkdtemp(prefix="hangar-egress-"))
        self.socket_path = socket_path = self.folder / "proxy.sock"
        self.allowed = allowed
        self.phase = phase
        self.attempts: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy.serve(self.request)

        self._server = socketserver.ThreadingUnixStreamServer(str(socket_path), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, daemon=True, name=f"hangar-egress-{phase}"
        )

    def start(self) -> EgressProxy:
        """Serve in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (connections under way are cut)."""
        self._server.shutdown()
        self._server.server_close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def record(self, **attempt: Any) -> dict[str, Any]:
        """One attempt, in the order they came."""
        entry = {"time": round(time.time(), 3), "phase": self.phase, **attempt}
        with self._lock:
            self.attempts.append(entry)
        return entry

    def serve(self, client: socket.socket) -> None:
        """One client connection: one request, let through or refused."""
        data = _read_head(client)
        if data is None:
            self.record(method="", host="", port=0, allowed=False, reason="no request head")
            return
        head, _, early = data.partition(b"\r\n\r\n")  # early: what came after the head
        first, _, headers = head.partition(b"\r\n")
        parts = first.decode("latin-1").split()
        if len(parts) != 3:
            self.record(method="", host="", port=0, allowed=False, reason="malformed request")
            _answer(client, 400, "malformed request")
            return
        method, target, version = parts
        try:
            host, port, origin = _target(method, target)
            check(self.allowed, host, port, 443 if method == "CONNECT" else 80)
        except Refused as exc:
            self.record(method=method, target=target, allowed=False, reason=str(exc))
            _answer(client, 403, f"hangar egress proxy: {exc}")
            return
        attempt = self.record(method=method, host=host, port=port, allowed=True, reason="")
        try:
            upstream = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        except OSError as exc:
            attempt.update(allowed=True, reason=f"could not connect: {exc}")
            _answer(client, 502, f"hangar egress proxy: cannot reach {host}:{port}")
            return
        upstream.settimeout(None)
        with upstream:
            if method == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if early:
                    upstream.sendall(early)
            else:
                upstream.sendall(_origin_request(method, origin, version, headers) + early)
            attempt["bytes"] = _pipe(client, upstream)


def _read_head(client: socket.socket) -> bytes | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(4096)
        if not chunk or len(data) > MAX_HEAD:
            return None
        data += chunk
    return data


def _target(method: str, target: str) -> tuple[str, int, str]:
    """(host, port, origin-form path) of a request's target."""
    if method == "CONNECT":
        host, sep, number = target.rpartition(":")
        if not sep or not number.isdigit():
            raise Refused(f"CONNECT needs host:port, got {target!r}")
        return host, int(number), ""
    parts = urlsplit(target)
    if parts.scheme != "http" or not parts.hostname:
        raise Refused(f"plain requests need an absolute http:// URL, got {target!r}")
    try:
        port = parts.port or 80
    except ValueError:
        raise Refused(f"bad port in {target!r}") from None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    path = parts.path or "/"
    return host, port, path + (f"?{parts.query}" if parts.query else "")


def _origin_request(method: str, path: str, version: str, headers: bytes) -> bytes:
    """The request's head as the origin server expects it, one request per connection."""
    kept = [
        line
        for line in headers.split(b"\r\n")
        if line and not line.lower().startswith((b"connection:", b"proxy-"))
    ]
    first = f"{method} {path} {version}".encode()
    return b"\r\n".join([first, *kept, b"Connection: close"]) + b"\r\n\r\n"


def _pipe(client: socket.socket, upstream: socket.socket) -> int:
    """Copy both ways until each side is done; the bytes that came back."""
    down = 0

    def up() -> None:
        with contextlib.suppress(OSError):
            while chunk := client.recv(65536):
                upstream.sendall(chunk)
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)

    thread = threading.Thread(target=up, daemon=True)
    thread.start()
    with contextlib.suppress(OSError):
        while chunk := upstream.recv(65536):
            client.sendall(chunk)
            down += len(chunk)
    with contextlib.suppress(OSError):
        client.shutdown(socket.SHUT_WR)
    thread.join(timeout=5)
    return down


def _answer(client: socket.socket, status: int, message: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    body = (message + "\n").encode()
    with contextlib.suppress(OSError):
        client.sendall(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
