"""Real services for the tests, started by the tests themselves on loopback.

- S3: moto's server mode (``moto_server``) on 127.0.0.1.
- PostgreSQL: Debian's server binaries, a throwaway cluster (initdb) run as the
  ``postgres`` user, listening on 127.0.0.1 only.
- A docker registry: Debian's ``docker-registry`` on 127.0.0.1.
- Ray: embedded (`ray.init`) or a real head + worker started with ``ray start``.

Each fixture skips with the reason when its service is missing, and fails instead when
the service is named in HANGAR_REQUIRE.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.require import skip_or_fail


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: object, timeout: float, what: str) -> None:
    """Poll `check()` until it is truthy or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():  # type: ignore[operator]
                return
        except Exception:  # not up yet
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{what} did not come up within {timeout} s")


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto S3 server on loopback, with a bucket ``hangar-test``; yields its URL."""
    exe = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
    if not Path(exe).exists():
        skip_or_fail("s3", "moto_server is not installed (pip install 'moto[server]')")
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [exe, "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: urllib.request.urlopen(url, timeout=1), 30, "moto_server")
        import boto3

        boto3.client("s3", endpoint_url=url).create_bucket(Bucket="hangar-test")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL on 127.0.0.1; yields a SQLAlchemy URL of database ``hangar``."""
    with throwaway_postgres() as url:
        yield url


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[str]:
    """`postgres_url` outside pytest (the benchmarks start theirs with it)."""
    bindir = _pg_bin()
    if bindir is None:
        skip_or_fail(
            "postgres",
            "PostgreSQL server binaries are not installed (Debian: apt-get install postgresql)",
        )
    # Not under pytest's folder: the postgres user cannot enter root's private tmp dirs.
    root = Path(tempfile.mkdtemp(prefix="hangar-test-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    as_postgres: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
        as_postgres = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    subprocess.run(
        [
            *as_postgres,
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *as_postgres,
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(root / "pg.log"),
            "-w",
            "-o",
            f"-c listen_addresses=127.0.0.1 -p {port} -k {sock} -c fsync=off",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        subprocess.run(
            [
                *as_postgres,
                str(bindir / "createdb"),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                "postgres",
                "hangar",
            ],
            check=True,
            capture_output=True,
        )
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/hangar"
    finally:
        subprocess.run(
            [*as_postgres, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """An embedded single-node Ray with 2 sandbox slots, shared by the session."""
    try:
        import ray
    except ImportError:
        skip_or_fail("ray", "ray is not installed")
    if not ray.is_initialized():
        ray.init(
            resources={"hangar_sandbox": 2, "hangar_pools": 1000},
            include_dashboard=False,
            log_to_driver=False,
            num_cpus=2,
            _node_ip_address="127.0.0.1",
        )
    yield
    ray.shutdown()


def kill_processes(match: str) -> int:
    """SIGKILL every process whose command line contains `match` (and its children)."""
    import psutil

    victims: list[psutil.Process] = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if match in " ".join(proc.info["cmdline"] or []):
                victims += [proc, *proc.children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    for proc in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(victims, timeout=10)
    return len(victims)


@contextlib.contextmanager
def other_machine() -> Iterator[tuple[str, str, str]]:
    """Another machine, as far as the network tells: a network namespace behind a veth
    pair. Yields (namespace, this side's address, its address); run a command there with
    ``ip netns exec NAMESPACE ...``."""
    import uuid

    if shutil.which("ip") is None:
        skip_or_fail("netns", "no `ip` (Debian: iproute2) to make a network namespace")
    name = f"hangar-m-{uuid.uuid4().hex[:6]}"
    host, inside = f"{name[:11]}h", f"{name[:11]}n"
    octet = 100 + int(name[-2:], 16) % 100
    here, there = f"10.232.{octet}.1", f"10.232.{octet}.2"
    steps = [
        ["ip", "netns", "add", name],
        ["ip", "link", "add", host, "type", "veth", "peer", "name", inside],
        ["ip", "link", "set", inside, "netns", name],
        ["ip", "addr", "add", f"{here}/30", "dev", host],
        ["ip", "link", "set", host, "up"],
        ["ip", "netns", "exec", name, "ip", "addr", "add", f"{there}/30", "dev", inside],
        ["ip", "netns", "exec", name, "ip", "link", "set", inside, "up"],
        ["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"],
    ]
    try:
        for step in steps:
            proc = subprocess.run(step, capture_output=True, text=True)
            if proc.returncode != 0:
                skip_or_fail("netns", f"cannot make a network namespace: {proc.stderr.strip()}")
        yield name, here, there
    finally:
        subprocess.run(["ip", "link", "del", host], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


class RayCluster:
    """A head and a worker node on this machine, started with ``ray start``."""

    def __init__(self, temp_dir: Path) -> None:
        self.temp_dir = temp_dir
        self.port = free_port()
        self.worker_port = free_port()
        self.address = f"127.0.0.1:{self.port}"

    def start(self) -> None:
        from hangar.cluster.nodes import run_ray, start_argv

        common = {"sandbox_slots": 2, "num_cpus": 1, "node_ip": "127.0.0.1"}
        run_ray(
            [
                *start_argv(head=True, port=self.port, metrics_port=free_port(), **common),
                f"--temp-dir={self.temp_dir}",
            ]
        )
        run_ray(
            [
                *start_argv(head=False, address=self.address, metrics_port=free_port(), **common),
                f"--node-manager-port={self.worker_port}",
            ]
        )

    def worker_node_id(self) -> str:
        """The Ray node id of the worker, read off its raylet's command line."""
        import psutil

        for proc in psutil.process_iter(["cmdline"]):
            args = proc.info["cmdline"] or []
            if f"--node_manager_port={self.worker_port}" in args:
                return next(a.split("=", 1)[1] for a in args if a.startswith("--node_id="))
        raise LookupError("the worker's raylet is not running")

    def kill_worker(self) -> int:
        """Kill the worker node: its raylet and everything under it."""
        return kill_processes(f"--node_manager_port={self.worker_port}")

    def _worker_processes(self) -> list[Any]:
        import psutil

        found: list[psutil.Process] = []
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                if f"--node_manager_port={self.worker_port}" in (proc.info["cmdline"] or []):
                    found += [proc, *proc.children(recursive=True)]
        return found

    def freeze_worker(self) -> int:
        """Stop the worker node where it stands (a stalled VM, a partition): SIGSTOP to its
        raylet and everything under it."""
        procs = self._worker_processes()
        for proc in procs:
            with contextlib.suppress(Exception):
                proc.suspend()
        return len(procs)

    def thaw_worker(self) -> int:
        """Let a frozen worker node go on (SIGCONT)."""
        procs = self._worker_processes()
        for proc in procs:
            with contextlib.suppress(Exception):
                proc.resume()
        return len(procs)

    def stop(self) -> None:
        kill_processes(str(self.temp_dir))


@pytest.fixture
def ray_cluster() -> Iterator[RayCluster]:
    """A real two-node Ray cluster (head + worker, 2 sandbox slots each) on loopback."""
    if shutil.which("ray") is None and not (Path(sys.executable).parent / "ray").exists():
        skip_or_fail("ray", "the ray command is not installed")
    os.environ["PATH"] = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    cluster = RayCluster(Path(tempfile.mkdtemp(prefix="hrc-")))  # short: socket paths
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.temp_dir, ignore_errors=True)


class Prometheus:
    """A real Prometheus (Debian's binary) scraping given targets every second."""

    def __init__(self, folder: Path, targets: list[str] | None = None, text: str = "") -> None:
        """Scraping `targets`, or as the config `text` says."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = folder / "prometheus.yml"
        config.write_text(
            text
            or "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n  - job_name: ray\n    static_configs:\n"
            f"      - targets: {json.dumps(targets or [])}\n"
        )
        self._proc = subprocess.Popen(
            [
                shutil.which("prometheus") or "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(folder / "prometheus.log").open("w"),
        )
        wait_for(lambda: urllib.request.urlopen(f"{self.url}/-/ready", timeout=1), 60, "Prometheus")

    def query(self, expr: str) -> list[dict[str, object]]:
        """Instant query; the result vector."""
        from urllib.parse import urlencode

        with urllib.request.urlopen(
            f"{self.url}/api/v1/query?{urlencode({'query': expr})}", timeout=30
        ) as reply:
            data = json.load(reply)
        assert data["status"] == "success", data
        return list(data["data"]["result"])

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(30)


def prometheus_binary() -> str | None:
    """Debian's prometheus binary, if installed."""
    return shutil.which("prometheus")


def sigint_twice_once(started: threading.Event, timeout: float = 60) -> None:
    """In a thread of its own: once `started` is set, Ctrl-C this process twice, half a
    second apart (the second Ctrl-C cancels the running trials)."""

    def twice() -> None:
        started.wait(timeout)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=twice, daemon=True).start()


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    """A registry on 127.0.0.1 (the docker engine trusts loopback registries over HTTP)."""
    binary = shutil.which("docker-registry")
    if binary is None:
        skip_or_fail("registry", "docker-registry is not installed (Debian: docker-registry)")
    port = free_port()
    config = tmp_path / "registry.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp_path / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen(
        [str(binary), "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"127.0.0.1:{port}/hangar-test"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
