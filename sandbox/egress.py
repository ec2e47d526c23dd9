"""The egress proxy: a sandbox's one audited way out, for an allowlist of hosts.

A sandbox keeps ``--network none``: it has no route, no DNS, no address of its own. When
its task names an allowlist, the proxy listens on a unix socket on the host and the
sandbox's forwarder (`hangar.models.tunnel`) joins a loopback port in the sandbox to it,
through the backend's exec channel, as the model relay is reached (on Kubernetes no
egress is opened: the pod's NetworkPolicy still lets nothing out). Inside, ``HTTP_PROXY``
and ``HTTPS_PROXY`` name that port.

The proxy speaks HTTP CONNECT (any protocol inside, TLS included) and plain HTTP
(absolute-form requests). What it lets through:

- **Names, then addresses.** The host must be one of the `allowed` names (``host``,
  ``*.domain``, ``host:port``, ``host:*``; a public network is ``*:*``), to port 443
  (CONNECT) or 80 (plain HTTP) unless the entry names another. A raw address is refused in
  every spelling the system resolver accepts (``127.1``, ``2130706433``, ``0x7f000001``,
  ``0177.0.0.1``, IPv6, mapped IPv4), with a final dot too (``127.0.0.1.``). The name
  is then resolved on the host, and every
  address that is not public (loopback, private, link-local, unique-local, shared,
  multicast, unspecified, reserved) or is a cloud's metadata service is refused, unless
  the sweep names that exact ``address:port`` (or ``name:port``) in `host_services`; the
  proxy connects to the address it checked, never resolving twice.
- **Well-formed requests only.** A request line and headers in ASCII, a port of ASCII
  digits in 1..65535, no user info, one request per connection; a plain-HTTP request's
  ``Host`` header must name the request line's host and port, and its body is exactly its
  ``Content-Length``. Anything else is refused with its reason, never a crash.
- **Bounded.** A request head must arrive within `HEAD_TIMEOUT_S`; a connection idle for
  `IDLE_TIMEOUT_S` is cut; at most `max_connections` are open at once (`max_total` in
  all) and `max_bytes` cross in all, per proxy (one sandbox's phase). A refused client
  is read for `DRAIN_S` at most; past `max_total` refusals further ones are only counted
  (one record, logged at 1, 2, 4, 8... of them), and every text of a record is cut to
  `MAX_FIELD` characters.
- **What it does not see.** A CONNECT tunnel carries whatever the client sends once it
  is open: the proxy judges the name in the CONNECT line, never the TLS SNI or the HTTP
  ``Host`` inside. A host behind a CDN that serves many sites can therefore reach any
  of them (domain fronting) if the CDN allows it; an allowlist entry for a shared CDN
  name is an allowlist entry for what that CDN fronts.

Every attempt, let through or refused, is written to the trial's folder as it happens
(`log`, one JSON line when decided, one more when an allowed connection ends, with bytes
up and down), so a worker that dies leaves what was attempted; `attempts` merges them.
"""

from __future__ import annotations

import contextlib
import fnmatch
import ipaddress
import itertools
import json
import re
import select
import shutil
import socket
import socketserver
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Longest request head read before a request is refused.
MAX_HEAD = 64 * 1024
#: Seconds a request head may take to arrive.
HEAD_TIMEOUT_S = 10.0
#: Seconds a connection may carry nothing either way before it is cut.
IDLE_TIMEOUT_S = 300.0
#: Seconds a connection to an allowed host may take to open.
CONNECT_TIMEOUT_S = 10
#: Connections open at once through one proxy, and in all.
MAX_CONNECTIONS, MAX_TOTAL = 64, 4096
#: Longest text of a record (a host, a path, a reason) kept and logged.
MAX_FIELD = 512
#: Seconds the proxy reads what a refused client still sends, at most.
DRAIN_S = 1.0
#: Bytes (both ways) through one proxy in all.
MAX_BYTES = 4 * 1024**3
#: Environment that points a sandbox's HTTP clients at the proxy on `port`.
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
#: Cloud metadata services, refused even where they are public addresses (Azure's).
METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",
        "169.254.170.2",
        "fd00:ec2::254",
        "100.100.100.200",
        "168.63.129.16",
        "192.0.0.192",
    )
)
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_PORT = re.compile(r"[0-9]{1,5}")


def proxy_env(port: int) -> dict[str, str]:
    """What a sandbox's processes need to use the proxy on loopback `port`."""
    url = f"http://127.0.0.1:{port}"
    return {**dict.fromkeys(PROXY_VARS, url), "NO_PROXY": "", "no_proxy": ""}


class Refused(Exception):
    """A request the proxy does not let through (its message is the reason)."""


# -- hosts, names and addresses ------------------------------------------------------------


def raw_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """`host` as the address the system resolver would take it for (None: a name).

    IPv6 (bracketed or not, with a zone), and IPv4 in every form ``inet_aton`` accepts:
    ``127.1``, ``2130706433``, ``0x7f000001``, ``0177.0.0.1``."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if text and all(c in "0123456789abcdefxABCDEFX." for c in text) and text[0].isdigit():
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    return None


def host_name(host: str) -> str:
    """`host` as a name to match and resolve (lower case, no final dot). Raises `Refused`
    for a raw address or for what is not a host name (non-ASCII, empty labels...)."""
    if raw_address(host) is not None:
        raise Refused(f"{host[:80]} is a raw IP address: only named hosts are let through")
    name = host.lower().removesuffix(".")
    if raw_address(name) is not None:  # 127.0.0.1. (a final dot) is the same address
        raise Refused(f"{host[:80]} is a raw IP address: only named hosts are let through")
    if not name.isascii() or len(name) > 253:
        raise Refused(f"{host[:80]!r} is not a host name")
    if not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise Refused(f"{host[:80]!r} is not a host name")
    return name


def check(allowed: Iterable[str], host: str, port: int, default_port: int) -> str:
    """The name of `host` when `host`:`port` is on the allowlist (see the module
    docstring); raises `Refused` otherwise."""
    name = host_name(host)
    ports: list[str] = []  # the ports of the entries that name the host
    for entry in allowed:
        pattern, _, listed = entry.lower().partition(":")
        if not fnmatch.fnmatchcase(name, pattern):
            continue
        wanted = int(listed) if listed.isdigit() else default_port
        if listed == "*" or port == wanted:
            return name
        ports.append(str(wanted))
    if ports:
        only = ", ".join(dict.fromkeys(ports))
        raise Refused(f"port {port} of {name} is not on the allowlist (only {only})")
    raise Refused(f"{name} is not on the allowlist")


def forbidden(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """Why a sandbox may not reach `address` ('' when it may: a public address)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address.teredo is not None:
            embedded = address.teredo[1]
        if embedded is None and address in ipaddress.ip_network("64:ff9b::/96"):
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None and (why := forbidden(embedded)):
            return why
    if address in METADATA:
        return "a cloud metadata address"
    for what, flag in (
        ("loopback", address.is_loopback),
        ("unspecified", address.is_unspecified),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
    ):
        if flag:
            return f"a {what} address"
    if not address.is_global:
        return "not a public address"
    return ""


@dataclass(frozen=True)
class HostServices:
    """The host's own services a sweep lets sandboxes reach (``address:port`` or
    ``name:port``), past the rule that refuses non-public addresses."""

    entries: tuple[str, ...] = ()

    def admits(self, name: str, address: str, port: int) -> bool:
        """Whether `name` resolved to `address` may be reached on `port`."""
        wanted = {f"{name}:{port}", f"{address}:{port}", f"[{address}]:{port}"}
        return any(entry.lower() in wanted for entry in self.entries)


Resolver = Callable[[str, int], list[str]]


def system_resolver(name: str, port: int) -> list[str]:
    """The addresses the host's resolver gives `name` (its own order)."""
    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Refused(f"{name} does not resolve: {exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def reachable(
    name: str, port: int, services: HostServices, resolve: Resolver = system_resolver
) -> list[str]:
    """The addresses of `name` a sandbox may reach on `port` (in the resolver's order);
    raises `Refused` naming the first address refused when none may."""
    addresses = resolve(name, port)
    allowed: list[str] = []
    refusals: list[str] = []
    for text in addresses:
        address = ipaddress.ip_address(text.partition("%")[0])
        why = forbidden(address)
        if not why or services.admits(name, str(address), port):
            allowed.append(text)
        else:
            refusals.append(f"{address} ({why})")
    if not allowed:
        shown = ", ".join(refusals[:3]) or "nothing"
        raise Refused(
            f"{name} resolves to {shown}, which sandboxes may not reach (a sweep names a "
            "service of the host it needs in `network: {host_services: [ADDRESS:PORT]}`)"
        )
    return allowed


# -- requests ------------------------------------------------------------------------------


@dataclass
class Request:
    """A request head, parsed defensively (see `parse_request`)."""

    method: str
    host: str
    port: int
    path: str
    version: str
    headers: list[tuple[str, str]]
    early: bytes


def port_number(text: str, target: str) -> int:
    """A port of ASCII digits in 1..65535; raises `Refused` otherwise."""
    if not _PORT.fullmatch(text) or not 0 < int(text) < 65536:
        raise Refused(f"bad port {text!r} in {target!r} (ASCII digits, 1 to 65535)")
    return int(text)


def authority(text: str, default_port: int) -> tuple[str, int]:
    """(host, port) of ``host[:port]`` or ``[v6][:port]``; raises `Refused`."""
    if "@" in text:
        raise Refused(f"user information is not accepted in {text!r}")
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or (end + 1 < len(text) and text[end + 1] != ":"):
            raise Refused(f"bad host in {text!r}")
        host, rest = text[: end + 1], text[end + 1 :]
        return host, port_number(rest[1:], text) if rest else default_port
    host, sep, number = text.rpartition(":")
    if not sep:
        return text, default_port
    return host, port_number(number, text)


def parse_request(data: bytes) -> Request:
    """A request head (and what came after it); raises `Refused` with the reason."""
    head, _, early = data.partition(b"\r\n\r\n")
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise Refused("the request head is not ASCII") from None
    first, *lines = text.split("\r\n")
    parts = first.split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]):
        raise Refused(f"malformed request line {first[:200]!r}")
    method, target, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise Refused(f"unsupported version {version[:20]!r}")
    headers: list[tuple[str, str]] = []
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.fullmatch(name) or "\r" in value or "\n" in value:
            raise Refused(f"malformed header line {line[:200]!r}")
        headers.append((name.lower(), value.strip()))
    if method == "CONNECT":
        if target.startswith("/") or "/" in target:
            raise Refused(f"CONNECT needs host:port, got {target[:200]!r}")
        host, port = authority(target, 0)
        if port == 0:
            raise Refused(f"CONNECT needs host:port, got {target[:200]!r}")
        return Request(method, host, port, "", version, headers, early)
    scheme, sep, rest = target.partition("://")
    if scheme.lower() != "http" or not sep:
        raise Refused(f"plain requests need an absolute http:// URL, got {target[:200]!r}")
    where, slash, path = rest.partition("/")
    where, _, _ = where.partition("?")
    if "#" in path:
        raise Refused(f"a fragment in {target[:200]!r}")
    host, port = authority(where, 80)
    return Request(method, host, port, "/" + path if slash else "/", version, headers, early)


def plain_body_length(request: Request, name: str) -> int:
    """A plain-HTTP request's body length, after checking its Host header names the
    request line's host and port; raises `Refused`."""
    hosts = [v for k, v in request.headers if k == "host"]
    if len(hosts) > 1:
        raise Refused("more than one Host header")
    if hosts:
        given_host, given_port = authority(hosts[0], 80)
        if given_host.lower().removesuffix(".") != name or given_port != request.port:
            raise Refused(
                f"the Host header names {hosts[0][:100]!r}, the request line "
                f"{name}:{request.port}: they must agree"
            )
    elif request.version == "HTTP/1.1":
        raise Refused("an HTTP/1.1 request without a Host header")
    if any(k == "transfer-encoding" for k, _ in request.headers):
        raise Refused("a request body must be sent with Content-Length, not Transfer-Encoding")
    lengths = {v for k, v in request.headers if k == "content-length"}
    if len(lengths) > 1 or any(not v.isascii() or not v.isdigit() for v in lengths):
        raise Refused("a bad Content-Length")
    return int(lengths.pop()) if lengths else 0


def origin_request(request: Request, name: str) -> bytes:
    """The request's head as the origin server expects it, one request per connection."""
    kept = [
        f"{k}: {v}"
        for k, v in request.headers
        if k not in ("connection", "host", "keep-alive") and not k.startswith("proxy-")
    ]
    host = name if request.port == 80 else f"{name}:{request.port}"
    first = f"{request.method} {request.path} {request.version}"
    return ("\r\n".join([first, f"Host: {host}", *kept, "Connection: close"]) + "\r\n\r\n").encode()


# -- the proxy -----------------------------------------------------------------------------


class EgressProxy:
    """The proxy of one sandbox phase (see the module docstring)."""

    def __init__(
        self,
        allowed: tuple[str, ...],
        phase: str,
        *,
        host_services: tuple[str, ...] = (),
        log: Path | None = None,
        resolve: Resolver = system_resolver,
        max_connections: int = MAX_CONNECTIONS,
        max_total: int = MAX_TOTAL,
        max_bytes: int = MAX_BYTES,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        head_timeout_s: float = HEAD_TIMEOUT_S,
    ) -> None:
        # A private folder (0700) with a short path: unix socket paths are short.
        self.folder = Path(tempfile.mkdtemp(prefix="hangar-egress-"))
        self.socket_path = socket_path = self.folder / "proxy.sock"
        self.allowed, self.phase = allowed, phase
        self.services = HostServices(host_services)
        self.resolve = resolve
        self.max_connections, self.max_total, self.max_bytes = max_connections, max_total, max_bytes
        self.idle_timeout_s, self.head_timeout_s = idle_timeout_s, head_timeout_s
        self.log = log
        self._records: dict[int, dict[str, Any]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._open = 0
        self._total = 0
        self._bytes = 0
        self._unrecorded = self._refusals = 0
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
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

    @property
    def attempts(self) -> list[dict[str, Any]]:
        """Every attempt so far, in the order they came (each as last recorded)."""
        with self._lock:
            return [dict(r) for r in self._records.values()]

    def record(self, attempt: dict[str, Any], **update: Any) -> dict[str, Any]:
        """Record a new attempt (no ``id``) or an update of one; each goes to the log at
        once, as one line. Every text is cut to `MAX_FIELD` characters, and past
        `max_total` refusals a new one is only counted (`_overflow`; connections let
        through are `max_total` at most anyway): what a sandbox can make the proxy keep
        and write is bounded."""
        update = {k: v[:MAX_FIELD] if isinstance(v, str) else v for k, v in update.items()}
        with self._lock:
            if "id" not in attempt:
                refused = update.get("allowed") is False
                if refused and self._refusals >= self.max_total:
                    return self._overflow(attempt, update)
                self._refusals += refused
                attempt.update({k: v[:MAX_FIELD] if isinstance(v, str) else v
                                for k, v in attempt.items()})  # fmt: skip
                attempt.update(id=next(self._ids), phase=self.phase, time=round(time.time(), 3))
                self._records[attempt["id"]] = attempt
            attempt.update(update)
            self._write(attempt)
        return attempt

    def _overflow(self, attempt: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
        """Count an attempt past `max_total` in one record (written again at 1, 2, 4, 8...
        of them: a log of a few lines, however many come)."""
        self._unrecorded += 1
        summary = {"id": 0, "phase": self.phase, "time": round(time.time(), 3),
                   "method": "", "host": "", "port": 0, "allowed": False,
                   "decision": "refused", "count": self._unrecorded,
                   "reason": f"refusals past the first {self.max_total}, counted only "
                   f"(the last: {update.get('reason', '')[:200]})"}  # fmt: skip
        self._records[0] = summary
        if self._unrecorded & (self._unrecorded - 1) == 0:
            self._write(summary)
        attempt.update(update)
        return attempt

    def _write(self, record: dict[str, Any]) -> None:
        if self.log is not None:
            with self.log.open("a", encoding="utf-8") as out:
                out.write(json.dumps(record, sort_keys=True) + "\n")

    def serve(self, client: socket.socket) -> None:
        """One client connection: one request, let through or refused; never raises."""
        attempt: dict[str, Any] = {"method": "", "host": "", "port": 0}
        if not self._admit():
            self.refuse(
                client,
                attempt,
                503,
                f"too many connections (at most {self.max_connections} at once, "
                f"{self.max_total} in all)",
            )
            return
        try:
            self._serve(client, attempt)
        except Refused as exc:
            self.refuse(client, attempt, 403, str(exc))
        except Exception as exc:  # never a crash without a record
            self.refuse(client, attempt, 400, f"the proxy failed on this request: {exc!r}"[:300])
        finally:
            with self._lock:
                self._open -= 1

    def _admit(self) -> bool:
        with self._lock:
            if self._open >= self.max_connections or self._total >= self.max_total:
                return False
            self._open += 1
            self._total += 1
            return True

    def refuse(
        self, client: socket.socket, attempt: dict[str, Any], status: int, reason: str
    ) -> None:
        """Record `attempt` refused and answer the client."""
        if attempt.get("allowed"):  # refused after it was let through: its end
            self.record(attempt, reason=reason, end=round(time.time(), 3))
            return
        self.record(attempt, allowed=False, decision="refused", reason=reason)
        _answer(client, status, f"hangar egress proxy: {reason}")

    def _serve(self, client: socket.socket, attempt: dict[str, Any]) -> None:
        data = self._read_head(client)
        request = parse_request(data)
        attempt.update(method=request.method, host=request.host, port=request.port)
        if request.method != "CONNECT":
            attempt["path"] = request.path[:500]
        name = check(
            self.allowed, request.host, request.port, 443 if request.method == "CONNECT" else 80
        )
        body = plain_body_length(request, name) if request.method != "CONNECT" else 0
        addresses = reachable(name, request.port, self.services, self.resolve)
        upstream, address = self._connect(addresses, request.port)
        if upstream is None:
            self.record(
                attempt,
                allowed=True,
                decision="allowed",
                address=address,
                reason="could not connect",
                end=round(time.time(), 3),
            )
            _answer(client, 502, f"hangar egress proxy: cannot reach {name}:{request.port}")
            return
        self.record(
            attempt,
            allowed=True,
            decision="allowed",
            address=address,
            reason="",
            bytes_up=0,
            bytes_down=0,
        )
        with upstream:
            if request.method == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                first, body = request.early, -1
            else:
                first = origin_request(request, name) + request.early[:body]
                body -= len(request.early[:body])
            up, down, why = self._pipe(client, upstream, first, body)
        self.record(attempt, bytes_up=up, bytes_down=down, end=round(time.time(), 3), reason=why)

    def _read_head(self, client: socket.socket) -> bytes:
        deadline = time.monotonic() + self.head_timeout_s
        data = b""
        while b"\r\n\r\n" not in data:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Refused(f"no whole request head within {self.head_timeout_s:g} s")
            client.settimeout(left)
            try:
                chunk = client.recv(4096)
            except TimeoutError:
                continue
            if not chunk:
                raise Refused("the connection closed before a whole request head")
            data += chunk
            if len(data) > MAX_HEAD:
                raise Refused(f"a request head longer than {MAX_HEAD} bytes")
        return data

    def _connect(self, addresses: list[str], port: int) -> tuple[socket.socket | None, str]:
        """A connection to the first checked address that answers (never a new lookup)."""
        for address in addresses:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.settimeout(CONNECT_TIMEOUT_S)
            try:
                sock.connect((address, port))
            except OSError:
                sock.close()
                continue
            return sock, address
        return None, addresses[0]

    def _count(self, size: int) -> bool:
        """Count `size` bytes against the proxy's cap; False once it is passed."""
        with self._lock:
            self._bytes += size
            return self._bytes <= self.max_bytes

    def _pipe(
        self, client: socket.socket, upstream: socket.socket, first: bytes, body: int
    ) -> tuple[int, int, str]:
        """Copy both ways until each side is done (`body` >= 0: only that many more bytes
        go up, then the upstream's write side closes); (bytes up, bytes down, why cut)."""
        up = down = 0
        for sock in (client, upstream):
            sock.settimeout(self.idle_timeout_s)
        try:
            if first:
                upstream.sendall(first)
                up += len(first)
            reading = {client: upstream, upstream: client}
            if body == 0:
                upstream.shutdown(socket.SHUT_WR)
                del reading[client]
            while reading:
                ready, _, _ = select.select(list(reading), [], [], self.idle_timeout_s)
                if not ready:
                    return up, down, f"idle for {self.idle_timeout_s:g} s: cut"
                for sock in ready:
                    other = reading[sock]
                    limit = 65536 if sock is upstream or body < 0 else min(65536, body)
                    chunk = sock.recv(limit)
                    if chunk and not self._count(len(chunk)):
                        return up, down, f"the phase's byte cap ({self.max_bytes}) is reached: cut"
                    if chunk:
                        other.sendall(chunk)
                    if sock is client:
                        up += len(chunk)
                        if body > 0:
                            body -= len(chunk)
                    else:
                        down += len(chunk)
                    if not chunk or (sock is client and body == 0):
                        with contextlib.suppress(OSError):
                            other.shutdown(socket.SHUT_WR)
                        del reading[sock]
        except TimeoutError:
            return up, down, f"idle for {self.idle_timeout_s:g} s: cut"
        except OSError as exc:
            return up, down, f"connection ended: {exc}"
        return up, down, ""


def read_attempts(log: Path) -> list[dict[str, Any]]:
    """The attempts of a proxy's log, each as last recorded."""
    merged: dict[int, dict[str, Any]] = {}
    for line in log.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            merged[int(record["id"])] = record
    return list(merged.values())


def _answer(client: socket.socket, status: int, message: str) -> None:
    """Answer `status` and close gracefully: what the client still sends is read (up to
    `MAX_HEAD`, for `DRAIN_S` in all, however slowly it drips), so the answer is not lost
    to a reset."""
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 503: "Service Unavailable"}[
        status
    ]
    body = (message + "\n").encode("utf-8", "replace")
    with contextlib.suppress(OSError):
        client.settimeout(1)
        client.sendall(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        client.shutdown(socket.SHUT_WR)
        drained, deadline = 0, time.monotonic() + DRAIN_S
        while drained < MAX_HEAD and (left := deadline - time.monotonic()) > 0:
            client.settimeout(left)
            if not (chunk := client.recv(4096)):
                break
            drained += len(chunk)
