"""The egress proxy against a hostile sandbox: names, then addresses; defensive parsing;
every attempt recorded as it happens; bounds; and on real docker a sandbox whose one way
out is the proxy.

Stand-ins for a worker's own services (its database, Ray, S3) listen on loopback and, where
the machine allows it, in a network namespace the test makes (a private address behind a
veth pair). Names are mapped to their addresses by a resolver given to the proxy, as a
worker's ``/etc/hosts``, search domains or cluster DNS would map them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
import socket
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from hangar.agents import CommandAgent
from hangar.kinds.execution import KIND, single_trial
from hangar.kinds.execution.harbor.tasks import load_task
from hangar.kinds.execution.settings import execution_settings
from hangar.results import Verdict
from hangar.sandbox.egress import (
    MAX_FIELD,
    EgressProxy,
    HostServices,
    Refused,
    check,
    forbidden,
    raw_address,
    reachable,
    read_attempts,
)
from hangar.testing.answers import serve_answers
from hangar.trials import Arm, run_trial

DATASET = Path(__file__).resolve().parents[2] / "examples" / "harbor" / "dataset"


# -- the rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "port", "default", "refusal"),
    [
        ("pypi.org", 443, 443, None),
        ("PyPI.org.", 443, 443, None),
        ("files.pythonhosted.org", 443, 443, None),
        ("api.example.com", 8080, 80, None),
        ("evil.org", 443, 443, "evil.org is not on the allowlist"),
        ("pypi.org", 80, 80, "port 80 of pypi.org is not on the allowlist (only 443)"),
        ("api.example.com", 80, 80, "port 80 of api.example.com"),
        ("151.101.0.223", 443, 443, "is a raw IP address"),
        ("[2a04:4e42::223]", 443, 443, "is a raw IP address"),
        ("example.com.evil.org", 443, 443, "not on the allowlist"),
        ("pypi.org\x00.evil", 443, 443, "is not a host name"),
        ("pypí.org", 443, 443, "is not a host name"),
        ("a..pypi.org", 443, 443, "is not a host name"),
    ],
)
def test_allowlist_rules(host: str, port: int, default: int, refusal: str | None) -> None:
    allowed = ("pypi.org:443", "*.pythonhosted.org", "api.example.com:8080")
    if refusal is None:
        check(allowed, host, port, default)
    else:
        with pytest.raises(Refused, match=refusal.replace("(", r"\(").replace(")", r"\)")):
            check(allowed, host, port, default)


@pytest.mark.parametrize(
    ("spelling", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("[::1]", "::1"),
        ("::ffff:127.0.0.1", "::ffff:7f00:1"),
        ("[fe80::1%eth0]", "fe80::1%eth0"),
    ],
)
def test_numeric_hosts_are_read_as_the_resolver_reads_them(spelling: str, address: str) -> None:
    assert str(raw_address(spelling)) == address
    with pytest.raises(Refused, match="raw IP address"):
        check(("*:*",), spelling, 80, 80)  # a public network too


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.2", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.1", "private"),
        ("172.16.0.1", "private"),
        ("169.254.169.254", "metadata"),
        ("169.254.1.1", "link-local"),
        ("100.100.100.200", "metadata"),
        ("168.63.129.16", "metadata"),
        ("100.64.0.1", "not a public address"),
        ("224.0.0.251", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::1", "loopback"),
        ("fd00:ec2::254", "metadata"),
        ("fd12::1", "private"),
        ("fe80::1", "link-local"),
        ("::ffff:10.0.0.1", "private"),
        ("64:ff9b::a00:1", "private"),
        ("2002:7f00:1::", "loopback"),
        ("8.8.8.8", ""),
        ("2a04:4e42::223", ""),
    ],
)
def test_addresses_a_sandbox_may_not_reach(address: str, why: str) -> None:
    found = forbidden(ipaddress.ip_address(address))
    assert (why in found) if why else not found, found


def _resolver(table: dict[str, list[str]]) -> Any:
    def resolve(name: str, port: int) -> list[str]:
        if name not in table:
            raise Refused(f"{name} does not resolve")
        return table[name]

    return resolve


def test_a_name_is_reachable_only_at_public_addresses_or_named_host_services() -> None:
    resolve = _resolver(
        {
            "db.example.test": ["127.0.0.2"],
            "metadata.google.internal": ["169.254.169.254"],
            "api.svc.cluster.local": ["10.96.0.10"],
            "mixed.example.test": ["10.0.0.5", "93.184.216.34"],
            "localhost": ["127.0.0.1", "::1"],
        }
    )
    none = HostServices()
    for name in ("db.example.test", "metadata.google.internal", "api.svc.cluster.local"):
        with pytest.raises(Refused, match="which sandboxes may not reach"):
            reachable(name, 5432, none, resolve)
    assert reachable("mixed.example.test", 443, none, resolve) == ["93.184.216.34"]
    by_address = HostServices(("127.0.0.2:5432",))
    assert reachable("db.example.test", 5432, by_address, resolve) == ["127.0.0.2"]
    with pytest.raises(Refused):  # another port of the same service
        reachable("db.example.test", 5433, by_address, resolve)
    by_name = HostServices(("localhost:8799",))
    assert reachable("localhost", 8799, by_name, resolve) == ["127.0.0.1", "::1"]
    assert reachable("localhost", 8799, HostServices(("[::1]:8799",)), resolve) == ["::1"]


# -- the proxy on the host -------------------------------------------------------------------


class _Recorder:
    """A TCP server on loopback that keeps every byte it was sent and answers `reply`."""

    def __init__(self, reply: bytes = b"HTTP/1.0 200 OK\r\n\r\nhello\n", *, silent: bool = False):
        self.received: list[bytes] = []
        self.reply, self.silent = reply, silent
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            conn.settimeout(2)
            with contextlib.suppress(OSError):
                while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                    data += chunk
                if self.silent:
                    time.sleep(3)
                    return
                conn.sendall(self.reply)
                conn.shutdown(socket.SHUT_WR)
                while chunk := conn.recv(65536):
                    data += chunk
            self.received.append(data)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    server = _Recorder()
    yield server
    server.close()


def _proxy(tmp_path: Path, allowed: tuple[str, ...], **kwargs: Any) -> EgressProxy:
    return EgressProxy(allowed, "agent", log=tmp_path / "network" / "agent.jsonl", **kwargs).start()


def _ask(proxy: EgressProxy, request: bytes, *, close: bool = True) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(15)
        s.connect(str(proxy.socket_path))
        s.sendall(request)
        if close:
            s.shutdown(socket.SHUT_WR)
        data = b""
        with contextlib.suppress(TimeoutError):
            while chunk := s.recv(65536):
                data += chunk
        return data


def test_an_allowed_request_goes_through_and_is_recorded_with_its_bytes(
    tmp_path: Path, recorder: _Recorder
) -> None:
    port = recorder.port
    proxy = _proxy(tmp_path, (f"localhost:{port}",), host_services=(f"127.0.0.1:{port}",))
    try:
        plain = _ask(
            proxy,
            f"GET http://localhost:{port}/x?q=1 HTTP/1.1\r\n"
            f"Host: localhost:{port}\r\n\r\n".encode(),
        )
        tunnel = _ask(
            proxy, f"CONNECT localhost:{port} HTTP/1.1\r\n\r\nGET /y HTTP/1.0\r\n\r\n".encode()
        )
    finally:
        proxy.stop()
    assert plain.endswith(b"hello\n") and tunnel.startswith(b"HTTP/1.1 200 Connection established")
    sent = recorder.received[0].decode()
    assert sent.startswith("GET /x?q=1 HTTP/1.1\r\n") and f"Host: localhost:{port}" in sent
    attempts = read_attempts(tmp_path / "network" / "agent.jsonl")
    assert [a["decision"] for a in attempts] == ["allowed", "allowed"]
    first, second = attempts
    assert (first["method"], first["host"], first["port"], first["path"]) == (
        "GET",
        "localhost",
        port,
        "/x?q=1",
    )
    assert first["address"] == "127.0.0.1" and first["bytes_down"] == len(recorder.reply)
    assert first["bytes_up"] > 0 and first["end"] >= first["time"]
    assert second["method"] == "CONNECT" and "path" not in second
    assert second["bytes_up"] == len(b"GET /y HTTP/1.0\r\n\r\n")


def test_a_name_that_resolves_to_the_host_does_not_reach_it(
    tmp_path: Path, recorder: _Recorder
) -> None:
    """Finding 1: a name under an allowed wildcard that the worker maps to a loopback
    address is refused (CONNECT and plain HTTP), and recorded with the address."""
    port = recorder.port
    resolve = _resolver({"db.example.test": ["127.0.0.2"]})
    proxy = _proxy(tmp_path, (f"*.example.test:{port}",), resolve=resolve)
    try:
        connect = _ask(proxy, f"CONNECT db.example.test:{port} HTTP/1.1\r\n\r\n".encode())
        plain = _ask(
            proxy,
            f"GET http://db.example.test:{port}/ HTTP/1.1\r\n"
            f"Host: db.example.test:{port}\r\n\r\n".encode(),
        )
    finally:
        proxy.stop()
    for answer in (connect, plain):
        assert answer.startswith(b"HTTP/1.1 403") and b"127.0.0.2 (a loopback address)" in answer
    assert not recorder.received
    attempts = proxy.attempts
    assert all(a["decision"] == "refused" for a in attempts) and len(attempts) == 2


def test_a_public_network_does_not_reach_the_worker(tmp_path: Path, recorder: _Recorder) -> None:
    """Finding 2: in public mode, localhost (through the system resolver) and the numeric
    spellings of 127.0.0.1 are refused."""
    port = recorder.port
    proxy = _proxy(tmp_path, ("*:*",))
    spellings = [
        "localhost",
        "127.0.0.1",
        "2130706433",
        "0x7f000001",
        "0177.0.0.1",
        "127.1",
        "[::1]",
    ]
    try:
        answers = [_ask(proxy, f"CONNECT {h}:{port} HTTP/1.1\r\n\r\n".encode()) for h in spellings]
    finally:
        proxy.stop()
    assert all(a.startswith(b"HTTP/1.1 403") for a in answers), answers
    assert not recorder.received
    reasons = [a["reason"] for a in proxy.attempts]
    assert "which sandboxes may not reach" in reasons[0]
    assert all("raw IP address" in r for r in reasons[1:])


MALFORMED = [
    (b"CONNECT localhost:\xc2\xb9\xc2\xb2 HTTP/1.1\r\n\r\n", "not ASCII"),
    ("CONNECT localhost:¹² HTTP/1.1\r\n\r\n".encode(), "not ASCII"),
    (b"CONNECT localhost:{big} HTTP/1.1\r\n\r\n", "bad port"),
    (b"CONNECT localhost:0 HTTP/1.1\r\n\r\n", "bad port"),
    (b"CONNECT localhost:+80 HTTP/1.1\r\n\r\n", "bad port"),
    (b"CONNECT localhost HTTP/1.1\r\n\r\n", "CONNECT needs host:port"),
    (b"GET http://[::1 HTTP/1.1\r\n\r\n", "bad host"),
    (b"GET http://[zz]:{port}/ HTTP/1.1\r\nHost: x\r\n\r\n", "is not a host name"),
    (b"GET http://user@localhost:{port}/ HTTP/1.1\r\n\r\n", "user information"),
    (b"GET /relative HTTP/1.1\r\n\r\n", "absolute http:// URL"),
    (b"GET https://localhost:{port}/ HTTP/1.1\r\n\r\n", "absolute http:// URL"),
    (b"GET http://localhost:{port}/ HTTP/2.0\r\n\r\n", "unsupported version"),
    (b"GET  http://localhost:{port}/ HTTP/1.1\r\n\r\n", "malformed request line"),
    (b"nonsense\r\n\r\n", "malformed request line"),
    (b"GET http://localhost:{port}/ HTTP/1.1\r\nHost: elsewhere.test\r\n\r\n", "must agree"),
    (b"GET http://localhost:{port}/ HTTP/1.1\r\nHost: localhost:1\r\n\r\n", "must agree"),
    (b"GET http://localhost:{port}/ HTTP/1.1\r\n\r\n", "without a Host header"),
    (
        b"GET http://localhost:{port}/ HTTP/1.1\r\nHost: localhost:{port}\r\nHost: x\r\n\r\n",
        "more than one Host",
    ),
    (
        b"POST http://localhost:{port}/ HTTP/1.1\r\nHost: localhost:{port}\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n",
        "Transfer-Encoding",
    ),
    (
        b"POST http://localhost:{port}/ HTTP/1.1\r\nHost: localhost:{port}\r\n"
        b"Content-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "bad Content-Length",
    ),
    (b"GET http://localhost:{port}/ HTTP/1.1\r\nBad Header: x\r\n\r\n", "malformed header"),
    (b"GET http://localhost:{port}/ HTTP/1.1\r\n folded\r\n\r\n", "malformed header"),
    (b"GET http://localhost:{port}/#f HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n", "a fragment"),
]


def test_malformed_requests_are_refused_and_recorded_never_a_crash(
    tmp_path: Path, recorder: _Recorder
) -> None:
    """Finding 3: each is answered 4xx with its reason and recorded; none reaches the
    service, none crashes the handler, and the proxy serves on afterwards."""
    port = recorder.port
    proxy = _proxy(tmp_path, (f"localhost:{port}",), host_services=(f"127.0.0.1:{port}",))
    try:
        for raw, reason in MALFORMED:
            request = raw.replace(b"{port}", str(port).encode()).replace(
                b"{big}", str(port + 65536).encode()
            )
            answer = _ask(proxy, request)
            assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.1 403")), (request, answer)
            assert reason.encode() in answer, (request, answer)
        assert not recorder.received
        good = _ask(proxy, f"GET http://localhost:{port}/ HTTP/1.0\r\n\r\n".encode())
        assert good.endswith(b"hello\n")
    finally:
        proxy.stop()
    logged = read_attempts(tmp_path / "network" / "agent.jsonl")
    assert len(logged) == len(MALFORMED) + 1
    assert [a["decision"] for a in logged] == ["refused"] * len(MALFORMED) + ["allowed"]
    assert all(a["reason"] for a in logged[:-1])


def test_a_plain_request_carries_its_body_and_nothing_after_it(
    tmp_path: Path, recorder: _Recorder
) -> None:
    """One request per connection: a second request pipelined after the body (with
    another Host inside) never reaches the service."""
    port = recorder.port
    proxy = _proxy(tmp_path, (f"localhost:{port}",), host_services=(f"127.0.0.1:{port}",))
    smuggled = b"GET /admin HTTP/1.1\r\nHost: elsewhere.test\r\n\r\n"
    try:
        _ask(
            proxy,
            f"POST http://localhost:{port}/in HTTP/1.1\r\nHost: localhost:{port}\r\n"
            f"Content-Length: 5\r\nProxy-Authorization: x\r\n\r\nhello".encode()
            + smuggled,
        )
    finally:
        proxy.stop()
    sent = recorder.received[0]
    assert sent.endswith(b"\r\n\r\nhello") and b"/admin" not in sent and b"Proxy-" not in sent


def test_the_log_is_written_as_attempts_happen(tmp_path: Path, recorder: _Recorder) -> None:
    """A worker killed mid-phase leaves what was attempted: each decision is a line in
    the trial's folder at once, before the connection ends or the proxy stops."""
    silent = _Recorder(silent=True)
    log = tmp_path / "network" / "agent.jsonl"
    proxy = _proxy(tmp_path, ("localhost:*",), host_services=(f"127.0.0.1:{silent.port}",))
    try:
        _ask(proxy, b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n")
        assert json.loads(log.read_text().splitlines()[0])["decision"] == "refused"
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(proxy.socket_path))
            s.sendall(f"CONNECT localhost:{silent.port} HTTP/1.1\r\n\r\n".encode())
            assert s.recv(100).startswith(b"HTTP/1.1 200")
            open_line = json.loads(log.read_text().splitlines()[1])
            assert open_line["decision"] == "allowed" and "end" not in open_line
    finally:
        proxy.stop()
        silent.close()


def test_bounds_head_time_idle_tunnels_connections_and_bytes(tmp_path: Path) -> None:
    """Finding 4: a head that never ends, an idle tunnel, one connection too many and a
    phase past its byte cap are each cut and recorded."""
    silent = _Recorder(silent=True)
    big = _Recorder(reply=b"HTTP/1.0 200 OK\r\n\r\n" + b"x" * 200_000)
    services = (f"127.0.0.1:{silent.port}", f"127.0.0.1:{big.port}")
    proxy = _proxy(
        tmp_path, ("localhost:*",), host_services=services, head_timeout_s=0.5,
        idle_timeout_s=0.5, max_connections=2, max_bytes=50_000,
    )  # fmt: skip
    try:
        assert _ask(proxy, b"GET http://localhost/ HTTP/1.1\r\n", close=False).startswith(
            b"HTTP/1.1 403"
        )
        tunnel = _ask(
            proxy, f"CONNECT localhost:{silent.port} HTTP/1.1\r\n\r\n".encode(), close=False
        )
        assert tunnel.startswith(b"HTTP/1.1 200")
        held = [socket.socket(socket.AF_UNIX) for _ in range(2)]
        for s in held:
            s.connect(str(proxy.socket_path))
            s.sendall(b"GET http://local")  # a head still coming
        time.sleep(0.1)
        assert _ask(proxy, b"CONNECT localhost:1 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 503")
        for s in held:
            s.close()
        time.sleep(0.7)
        fetched = _ask(proxy, f"GET http://localhost:{big.port}/ HTTP/1.0\r\n\r\n".encode())
        assert len(fetched) < 60_000
    finally:
        proxy.stop()
        silent.close()
        big.close()
    reasons = [a["reason"] for a in proxy.attempts]
    assert "no whole request head within 0.5 s" in reasons[0]
    assert "idle for 0.5 s: cut" in reasons[1]
    assert any("too many connections (at most 2 at once" in r for r in reasons)
    assert "byte cap (50000) is reached: cut" in reasons[-1]


def test_what_a_sandbox_makes_the_proxy_keep_and_write_is_bounded(tmp_path: Path) -> None:
    """1,500 refused connections past a cap of 20 keep 21 records and a log of a few
    dozen lines; a 60 KB host name makes no 60 KB line; a client that drips a byte every
    half second after its refusal is let go after `DRAIN_S`."""
    proxy = _proxy(tmp_path, ("allowed.example",), max_total=20)
    try:
        huge = b"CONNECT " + b"a" * 60_000 + b".example:443 HTTP/1.1\r\n\r\n"
        assert _ask(proxy, huge).startswith(b"HTTP/1.1 403")
        with socket.socket(socket.AF_UNIX) as dripping:
            dripping.connect(str(proxy.socket_path))
            dripping.sendall(b"CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n")
            dripping.settimeout(0.5)
            answer, stopped = b"", 0.0
            for _ in range(40):  # the proxy must close within DRAIN_S: it never waits 20 s
                with contextlib.suppress(TimeoutError):
                    chunk = dripping.recv(4096)
                    if not chunk:
                        stopped = time.monotonic()
                        break
                    answer += chunk
                with contextlib.suppress(OSError):
                    dripping.sendall(b"x")
            assert answer.startswith(b"HTTP/1.1 403") and stopped, "never let go"
        for i in range(1500):
            assert _ask(proxy, f"CONNECT denied{i}.example:443 HTTP/1.1\r\n\r\n".encode())
    finally:
        proxy.stop()
    attempts = proxy.attempts
    assert len(attempts) == 21
    (summary,) = [a for a in attempts if a["id"] == 0]
    assert summary["count"] == 1500 + 2 - 20 and "counted only" in summary["reason"]
    lines = (tmp_path / "network" / "agent.jsonl").read_text().splitlines()
    assert len(lines) < 40 and max(map(len, lines)) < 2 * MAX_FIELD + 500


@pytest.mark.parametrize("host", ["127.0.0.1.", "10.1.2.3.", "2130706433.", "0x7f.1."])
def test_a_raw_address_with_a_final_dot_is_a_raw_address(host: str) -> None:
    with pytest.raises(Refused, match="is a raw IP address"):
        check(("*:*",), host, 443, 443)


def _netns_server() -> Iterator[tuple[str, int]]:
    """An HTTP service at a private address, in a network namespace behind a veth pair."""
    from tests.services import other_machine

    with other_machine() as (name, _, address):
        server = subprocess.Popen(
            ["ip", "netns", "exec", name, "python3", "-m", "http.server", "--bind",
             address, "8000"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=Path(__file__).parent,
        )  # fmt: skip
        try:
            for _ in range(50):
                with contextlib.suppress(OSError):
                    socket.create_connection((address, 8000), timeout=0.5).close()
                    break
                time.sleep(0.1)
            yield address, 8000
        finally:
            server.kill()


@pytest.fixture
def private_service() -> Iterator[tuple[str, int]]:
    yield from _netns_server()


def test_a_private_service_in_another_namespace_is_refused_unless_named(
    tmp_path: Path, private_service: tuple[str, int]
) -> None:
    address, port = private_service
    resolve = _resolver({"api.svc.cluster.local": [address]})
    name = f"api.svc.cluster.local:{port}"
    request = f"GET http://{name}/ HTTP/1.1\r\nHost: {name}\r\n\r\n".encode()
    closed = _proxy(tmp_path / "closed", ("*.svc.cluster.local:*",), resolve=resolve)
    named = _proxy(tmp_path / "named", ("*.svc.cluster.local:*",), resolve=resolve,
                   host_services=(f"{address}:{port}",))  # fmt: skip
    try:
        refused, allowed = _ask(closed, request), _ask(named, request)
    finally:
        closed.stop()
        named.stop()
    assert refused.startswith(b"HTTP/1.1 403") and b"(a private address)" in refused
    assert allowed.startswith(b"HTTP/1.0 200") and b"test_egress.py" in allowed
    assert named.attempts[0]["address"] == address


# -- on real docker ------------------------------------------------------------------------


PROBE = r"""
import json, os, socket, urllib.request, urllib.error
PORT = int(os.environ["ANSWER_PORT"])
OTHER = int(os.environ["OTHER_PORT"])
def fetch(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode().strip()
    except Exception as exc:
        return "failed: " + type(exc).__name__ + " " + str(getattr(exc, "code", ""))
def connect(host, port):
    try:
        socket.create_connection((host, port), timeout=3).close()
        return "connected"
    except OSError as exc:
        return "failed: " + type(exc).__name__
def resolve(name):
    try:
        return socket.gethostbyname(name)
    except OSError as exc:
        return "failed: " + type(exc).__name__
out = {
    "allowed": fetch(f"http://localhost:{PORT}/secret"),
    "other_host": fetch(f"http://other.invalid:{PORT}/secret"),
    "raw_ip": fetch(f"http://127.0.0.1:{PORT}/secret"),
    "other_port": fetch(f"http://localhost:{OTHER}/secret"),
    "ipv6": fetch(f"http://[::1]:{PORT}/secret"),
    "decimal": fetch(f"http://2130706433:{PORT}/secret"),
    "dns": resolve("example.com"),
    "direct": connect("10.0.0.1", 80),
    "apt": open("/etc/apt/apt.conf.d/99hangar-sandbox").read(),
}
open("/app/probe.json", "w").write(json.dumps(out))
"""


def test_a_sandbox_reaches_only_its_allowlist(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    from hangar.sandbox.task_images import stock_image

    stock_image()
    server = serve_answers({"/secret": "the-answer"})
    other = serve_answers({"/secret": "must-not-be-read"})
    port, other_port = server.server_address[1], other.server_address[1]
    task_dir = tmp_path / "hello-file"
    shutil.copytree(DATASET / "hello-file", task_dir)
    toml = task_dir / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            "[agent]\n",
            f'[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["localhost:{port}"]\n',
        )
    )
    settings = execution_settings(
        image_map={"ubuntu:*": "hangar/base:bookworm-stock"},
        network={"host_services": [f"127.0.0.1:{port}"]},
    )
    task = KIND.configure(load_task(toml), settings)
    agent = CommandAgent(
        name="probe",
        command=f"python3 - <<'EOF'\n{PROBE}\nEOF\necho 'Hello, world!' > /app/hello.txt",
        env={"ANSWER_PORT": str(port), "OTHER_PORT": str(other_port)},
    )
    spec = single_trial(
        task, agent, Arm(name="control"), evidence_url=(tmp_path / "ev").as_uri()
    ).model_copy(update={"work_root": tmp_path / "trials", "cache_root": tmp_path / "cache"})
    try:
        result = run_trial(spec)
    finally:
        server.shutdown()
        other.shutdown()
    assert result.verdict is Verdict.PASS, result.reason
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        files = {m.name: tar.extractfile(m) for m in tar.getmembers() if m.isfile()}
        (tmp_path / "agent.jsonl").write_bytes(files["network/agent.jsonl"].read())  # type: ignore[union-attr]
        diff = files["diff.patch"].read().decode()  # type: ignore[union-attr]
    probe = json.loads(next(ln[1:] for ln in diff.splitlines() if ln.startswith("+{")))
    assert probe["allowed"] == "the-answer"
    for name in ("other_host", "raw_ip", "other_port", "ipv6", "decimal"):
        assert probe[name] == "failed: HTTPError 403", (name, probe[name])
    assert probe["dns"].startswith("failed") and probe["direct"].startswith("failed")
    # apt can work through the proxy: as root, with a cache of root's
    assert (
        'APT::Sandbox::User "root";\nDir::Cache::Archives "/var/cache/apt/hangar/";' in probe["apt"]
    )
    attempts = read_attempts(tmp_path / "agent.jsonl")
    allowed = [a for a in attempts if a["decision"] == "allowed"]
    assert [(a["host"], a["port"], a["address"]) for a in allowed] == [
        ("localhost", port, "127.0.0.1")
    ]
    assert allowed[0]["bytes_down"] > 0
    refused = [a for a in attempts if a["decision"] == "refused"]
    reasons = " | ".join(a["reason"] for a in refused)
    assert len(refused) == 5, attempts
    assert "other.invalid is not on the allowlist" in reasons
    assert reasons.count("is a raw IP address") == 3
    assert f"port {other_port} of localhost is not on the allowlist" in reasons


def test_a_default_network_is_public_only_where_the_sweep_allows_it(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """A task that names no network has Harbor's default, public: its verifier gets every
    named host through the proxy where the sweep allows it (`network.allow_public`), and
    runs offline otherwise; raw addresses stay refused either way, and the host's own
    services only where the sweep names them."""
    from hangar.agents import ORACLE
    from hangar.sandbox.task_images import stock_image

    stock_image()
    server = serve_answers({"/count": "9"})
    port = server.server_address[1]
    task_dir = tmp_path / "count-words"
    shutil.copytree(DATASET / "count-words", task_dir)
    toml = task_dir / "task.toml"
    text = toml.read_text()
    toml.write_text(text[: text.index("# The expected count")])  # no network named
    script = task_dir / "tests" / "test.sh"
    script.write_text(script.read_text().replace("localhost:8799", f"localhost:{port}"))
    image_map = {"debian:*": "hangar/base:bookworm-stock"}

    def trial(allow_public: bool, services: list[str]) -> Any:
        network = {"allow_public": allow_public, "host_services": services}
        task = KIND.configure(
            load_task(toml), execution_settings(image_map=image_map, network=network)
        )
        assert task.verifier.network.mode == "public" and not task.verifier.network.refused
        spec = single_trial(
            task, ORACLE, Arm(name="control"), evidence_url=(tmp_path / "ev").as_uri()
        ).model_copy(update={"work_root": tmp_path / "t", "cache_root": tmp_path / "cache"})
        return run_trial(spec)

    try:
        offline = trial(False, [f"127.0.0.1:{port}"])
        public = trial(True, [])
        allowed = trial(True, [f"127.0.0.1:{port}"])
    finally:
        server.shutdown()
    assert offline.verdict is Verdict.FAIL, offline.reason  # no network: no expected count
    assert public.verdict is Verdict.FAIL, public.reason  # public, but not the host itself
    assert allowed.verdict is Verdict.PASS, allowed.reason
    with tarfile.open(allowed.evidence_uri.removeprefix("file://")) as tar:
        log = tar.extractfile("network/verifier.jsonl").read().decode()  # type: ignore[union-attr]
    assert json.loads(log.splitlines()[0])["host"] == "localhost"


def test_every_entry_naming_a_host_counts_not_only_the_first() -> None:
    allowed = ("deb.debian.org:80", "deb.debian.org", "*.example:8080")
    assert check(allowed, "deb.debian.org", 443, 443) == "deb.debian.org"
    assert check(allowed, "deb.debian.org", 80, 80) == "deb.debian.org"
    with pytest.raises(Refused, match=r"port 22 of deb.debian.org .* \(only 80, 443\)"):
        check(allowed, "deb.debian.org", 22, 443)
