"""A task's Dockerfile is a stranger's: its RUN steps never reach the worker, only the
hosts a sweep allows for builds, through the audited egress proxy, and a build the
allowlist breaks is blocked_setup naming the host it wanted."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import docker
import pytest

from hangar.agents import ORACLE
from hangar.kinds.execution import KIND, single_trial
from hangar.kinds.execution.harbor.tasks import load_task
from hangar.kinds.execution.settings import execution_settings
from hangar.results import TrialResult, Verdict
from hangar.trials import Arm, run_trial
from tests.kinds.test_harbor_trials import evidence

pytestmark = pytest.mark.docker

DATASET = Path(__file__).resolve().parents[2] / "examples" / "harbor" / "dataset"
STOCK = "hangar/base:bookworm-stock"


class _Service(BaseHTTPRequestHandler):
    """A service on the worker's loopback (the Ray dashboard, a database, metadata)."""

    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Service.hits.append(self.path)
        body = b"secret of the worker"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def worker_service() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Service.hits = []
    yield server.server_address[1]
    server.shutdown()


def _task(tmp_path: Path, port: int, name: str, run: str) -> Path:
    """hello-file, its Dockerfile given RUN steps that reach for the worker."""
    root = tmp_path / name
    shutil.copytree(DATASET / "hello-file", root)
    (root / "environment" / "Dockerfile").write_text(
        f"FROM debian:bookworm-slim\nWORKDIR /app\n{run}\n"
    )
    return root / "task.toml"


def _run(tmp_path: Path, toml: Path, **network: object) -> TrialResult:
    settings = execution_settings(image_map={"debian:*": STOCK}, network=network)
    task = KIND.configure(load_task(toml), settings)
    spec = single_trial(
        task, ORACLE, Arm(name="control"), evidence_url=(tmp_path / "evidence").as_uri()
    ).model_copy(update={"work_root": tmp_path / "trials", "cache_root": tmp_path / "cache"})
    return run_trial(spec)


def _reach(url: str) -> str:
    return (
        'RUN python3 -c "import urllib.request as u; '
        f"print('GOT', u.urlopen('{url}', timeout=5).read())\""
    )


def test_a_build_never_reaches_the_worker(
    docker_client: docker.DockerClient, tmp_path: Path, worker_service: int
) -> None:
    """Straight to the loopback, through the proxy by address, or by a name that resolves
    to the worker: each attempt fails, the build's audit names them, nothing arrives."""
    port = worker_service
    steps = "\n".join(
        f"{_reach(url)} || echo refused"
        for url in (
            f"http://127.0.0.1:{port}/direct",
            f"http://localhost:{port}/by-name",
            "http://169.254.169.254/latest/meta-data/",
        )
    )
    direct = (
        'RUN python3 -c "import socket; '
        f"socket.create_connection(('127.0.0.1', {port}), timeout=3)\" "
        "&& echo reached-it || echo unreachable"
    )
    toml = _task(tmp_path, port, "reach-worker", f"{steps}\n{direct}")
    result = _run(tmp_path, toml, builds=["localhost:*"])
    assert result.verdict == Verdict.PASS, result.reason
    assert _Service.hits == []
    files = evidence(result)
    log = files["image/build.log"]
    assert "secret of the worker" not in log and "unreachable" in log
    audit = [json.loads(line) for line in files["image/network.jsonl"].splitlines()]
    assert {a["host"] for a in audit} >= {"127.0.0.1", "localhost", "169.254.169.254"}
    assert not any(a.get("allowed") for a in audit)


def test_a_build_reaches_what_the_sweep_allows_and_names_what_it_refused(
    docker_client: docker.DockerClient, tmp_path: Path, worker_service: int
) -> None:
    port = worker_service
    toml = _task(tmp_path, port, "allowed", _reach(f"http://localhost:{port}/allowed"))
    allowed = _run(
        tmp_path, toml, builds=[f"localhost:{port}"], host_services=[f"localhost:{port}"]
    )
    assert allowed.verdict == Verdict.PASS, allowed.reason
    assert _Service.hits == ["/allowed"]
    audit = evidence(allowed)["image/network.jsonl"]
    assert '"allowed": true' in audit and "/allowed" in audit

    toml = _task(tmp_path, port, "needs-more", _reach(f"http://localhost:{port}/other"))
    refused = _run(tmp_path, toml, builds=["pypi.org"], host_services=[f"localhost:{port}"])
    assert refused.verdict == Verdict.BLOCKED_SETUP
    assert f"refused localhost:{port}" in str(refused.reason)
    assert "network: builds" in str(refused.reason)
    assert _Service.hits == ["/allowed"]


def test_no_build_network_at_all(docker_client: docker.DockerClient, tmp_path: Path) -> None:
    toml = _task(
        tmp_path, 0, "offline",
        "RUN python3 -c \"import os, socket; assert 'HTTP_PROXY' not in os.environ; "
        "assert [n for _, n in socket.if_nameindex()] == ['lo']\"",
    )  # fmt: skip
    result = _run(tmp_path, toml, builds=[])
    assert result.verdict == Verdict.PASS, result.reason
    assert "image/network.jsonl" not in evidence(result)


def test_the_default_allowlist_is_the_package_registries() -> None:
    from hangar.kinds.execution.images.build_network import DEFAULT_BUILD_HOSTS
    from hangar.sandbox.egress import Refused, check

    for wanted in ("deb.debian.org", "pypi.org", "files.pythonhosted.org", "registry.npmjs.org"):
        check(DEFAULT_BUILD_HOSTS, wanted, 443 if "." in wanted else 80, 443)
    for never in ("localhost", "metadata.google.internal", "example.com"):
        with pytest.raises(Refused):
            check(DEFAULT_BUILD_HOSTS, never, 443, 443)
