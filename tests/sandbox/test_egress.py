"""The egress proxy: an allowlist's rules, and on real docker a sandbox whose one way out
is the proxy (an allowed host answers; another host, a raw IP, another port, DNS of
another name, IPv6 and a direct connection all fail; every attempt is in the evidence)."""

from __future__ import annotations

import json
import shutil
import socket
import tarfile
from pathlib import Path
from typing import Any

import docker
import pytest

from hangar.agents import CommandAgent
from hangar.kinds.execution import KIND, single_trial
from hangar.kinds.execution.harbor import load_task
from hangar.results import Verdict
from hangar.sandbox.egress import EgressProxy, Refused, check
from hangar.testing.answers import serve_answers
from hangar.trials import Arm, run_trial

DATASET = Path(__file__).resolve().parents[2] / "examples" / "harbor" / "dataset"


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
    ],
)
def test_allowlist_rules(host: str, port: int, default: int, refusal: str | None) -> None:
    allowed = ("pypi.org:443", "*.pythonhosted.org", "api.example.com:8080")
    if refusal is None:
        check(allowed, host, port, default)
    else:
        with pytest.raises(Refused, match=refusal.replace("(", r"\(").replace(")", r"\)")):
            check(allowed, host, port, default)


def test_a_public_network_is_every_named_host_on_any_port() -> None:
    check(("*:*",), "anything.example", 8443, 443)
    with pytest.raises(Refused, match="raw IP"):
        check(("*:*",), "10.0.0.1", 80, 80)


def _ask(proxy: Path, request: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(proxy))
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        return data


def test_the_proxy_on_the_host(tmp_path: Path) -> None:
    server = serve_answers({"/x": "hello"})
    port = server.server_address[1]
    proxy = EgressProxy((f"localhost:{port}",), "agent").start()
    try:
        plain = _ask(
            proxy.socket_path, f"GET http://localhost:{port}/x HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        assert plain.startswith(b"HTTP/1.0 200") and plain.endswith(b"hello\n")
        tunnel = _ask(
            proxy.socket_path,
            f"CONNECT localhost:{port} HTTP/1.1\r\n\r\nGET /x HTTP/1.0\r\n\r\n".encode(),
        )
        assert tunnel.startswith(b"HTTP/1.1 200 Connection established") and b"hello" in tunnel
        refused = _ask(
            proxy.socket_path, f"GET http://127.0.0.1:{port}/x HTTP/1.1\r\n\r\n".encode()
        )
        assert refused.startswith(b"HTTP/1.1 403") and b"raw IP" in refused
        assert _ask(proxy.socket_path, b"nonsense\r\n\r\n").startswith(b"HTTP/1.1 400")
    finally:
        proxy.stop()
        server.shutdown()
    assert [a["allowed"] for a in proxy.attempts] == [True, True, False, False]


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
    task = KIND.configure(
        load_task(toml), {"image_map": {"ubuntu:*": "hangar/base:bookworm-stock"}}
    )
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
        attempts = [json.loads(line) for line in files["network/agent.jsonl"].read().splitlines()]  # type: ignore[union-attr]
        diff = files["diff.patch"].read().decode()  # type: ignore[union-attr]
    probe = json.loads(next(ln[1:] for ln in diff.splitlines() if ln.startswith("+{")))
    assert probe["allowed"] == "the-answer"
    for name in ("other_host", "raw_ip", "other_port", "ipv6"):
        assert probe[name] == "failed: HTTPError 403", (name, probe[name])
    assert probe["dns"].startswith("failed") and probe["direct"].startswith("failed")
    # apt can work through the proxy: as root, with a cache of root's
    assert (
        'APT::Sandbox::User "root";\nDir::Cache::Archives "/var/cache/apt/hangar/";' in probe["apt"]
    )
    by_target = {a.get("target", f"{a.get('host')}:{a.get('port')}"): a for a in attempts}
    assert by_target[f"localhost:{port}"]["allowed"] is True
    refused = [a for a in attempts if not a["allowed"]]
    reasons = " | ".join(a["reason"] for a in refused)
    assert len(refused) == 4, attempts
    assert "other.invalid is not on the allowlist" in reasons
    assert reasons.count("is a raw IP address") == 2
    assert f"port {other_port} of localhost is not on the allowlist" in reasons


def test_a_default_network_is_public_only_where_the_sweep_allows_it(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """A task that names no network has Harbor's default, public: its verifier gets every
    named host through the proxy where the sweep allows it (`network.allow_public`), and
    runs offline otherwise; raw addresses stay refused either way."""
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

    def trial(allow_public: bool) -> Any:
        task = KIND.configure(
            load_task(toml),
            {"image_map": image_map, "network": {"allow_public": allow_public}},
        )
        assert task.verifier.network.mode == "public" and not task.verifier.network.refused
        spec = single_trial(
            task, ORACLE, Arm(name="control"), evidence_url=(tmp_path / "ev").as_uri()
        ).model_copy(update={"work_root": tmp_path / "t", "cache_root": tmp_path / "cache"})
        return run_trial(spec)

    try:
        offline, allowed = trial(False), trial(True)
    finally:
        server.shutdown()
    assert offline.verdict is Verdict.FAIL, offline.reason  # no network: no expected count
    assert allowed.verdict is Verdict.PASS, allowed.reason
    with tarfile.open(allowed.evidence_uri.removeprefix("file://")) as tar:
        log = tar.extractfile("network/verifier.jsonl").read().decode()  # type: ignore[union-attr]
    assert json.loads(log.splitlines()[0])["host"] == "localhost"
