"""Thin helpers over ``ray start`` / ``ray stop`` with hangar's resources.

A sandbox node offers ``hangar_sandbox`` slots (how many trials it runs at once) and
exports metrics on a fixed port so Prometheus can scrape it. Every node runs with
Ray's token authentication (``RAY_AUTH_MODE=token``): `ensure_token` makes one on the
head (``ray get-auth-token --generate``: ``~/.ray/auth_token``), since ``ray start
--head`` does not; copy that file to each worker machine (or set ``RAY_AUTH_TOKEN``)
before joining, and to the machine the driver runs on.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from hangar.errors import ClusterError
from hangar.paths import cache_dir


def _ray() -> str:
    """The `ray` command of hangar's own interpreter (its virtualenv need not be on PATH),
    else the one on PATH."""
    own = Path(sys.executable).parent / "ray"
    if own.is_file() and os.access(own, os.X_OK):
        return str(own)
    exe = shutil.which("ray")
    if exe is None:
        raise ClusterError(
            f"the `ray` command is not installed beside {sys.executable} nor on PATH: "
            "pip install hangar-farm (it depends on ray) into that interpreter"
        )
    return exe


#: The resource a node offers trial pools (`hangar.scheduler.pool`): as much as any node
#: needs. A driver that joins only to drive (`join_as_driver`) has none, so Ray never
#: places a pool there, even when its scheduling falls back from the pool's node.
POOL_RESOURCE = "hangar_pools"
POOL_CAPACITY = 1000


def node_resources(sandbox_slots: int) -> dict[str, int]:
    """The custom resources of a node hangar starts: its sandbox slots and room for pools."""
    return {"hangar_sandbox": sandbox_slots, POOL_RESOURCE: POOL_CAPACITY}


def start_argv(
    *,
    head: bool,
    address: str | None = None,
    sandbox_slots: int = 2,
    port: int = 6379,
    metrics_port: int = 8080,
    num_cpus: int | None = None,
    node_ip: str | None = None,
) -> list[str]:
    """The ``ray start`` command line for a head or worker node."""
    argv = [
        _ray(),
        "start",
        "--disable-usage-stats",
        f"--resources={json.dumps(node_resources(sandbox_slots))}",
        f"--metrics-export-port={metrics_port}",
    ]
    if head:
        argv += ["--head", f"--port={port}", "--include-dashboard=false"]
    elif address:
        argv += [f"--address={address}"]
    else:
        raise ClusterError("a worker node needs the head's ADDRESS (host:port)")
    if num_cpus is not None:
        argv.append(f"--num-cpus={num_cpus}")
    if node_ip is not None:
        argv.append(f"--node-ip-address={node_ip}")
    return argv


def ray_env() -> dict[str, str]:
    """The environment of ``ray`` commands: token authentication, normal worker priority."""
    return {
        **os.environ,
        "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "token"),
        # Trial workers drive the container engine; Ray's default nice 15 starves them.
        "RAY_worker_niceness": os.environ.get("RAY_worker_niceness", "0"),  # noqa: SIM112
    }


def token_path() -> Path:
    """Where Ray reads its token (``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``)."""
    return Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")


def ensure_token() -> Path | None:
    """The token file of this machine, made when there is none (None: authentication is
    off, or the token is in ``RAY_AUTH_TOKEN``)."""
    if ray_env()["RAY_AUTH_MODE"] != "token" or os.environ.get("RAY_AUTH_TOKEN"):
        return None
    path = token_path()
    if not path.is_file():
        run_ray([_ray(), "get-auth-token", "--generate"])
    if not path.is_file():
        raise ClusterError(f"`ray get-auth-token --generate` made no token at {path}")
    path.chmod(0o600)
    return path


def need_token() -> None:
    """Refuse to join without the head's token, saying where it goes."""
    if ray_env()["RAY_AUTH_MODE"] != "token" or os.environ.get("RAY_AUTH_TOKEN"):
        return
    if not token_path().is_file():
        raise ClusterError(
            f"no Ray token here ({token_path()}): copy the head's ~/.ray/auth_token to this "
            "machine's (mode 600), or set RAY_AUTH_TOKEN to its content"
        )


def run_ray(argv: list[str]) -> str:
    """Run a ``ray`` command; its output, or a ClusterError with it."""
    proc = subprocess.run(
        argv, capture_output=True, text=True, check=False, timeout=300, env=ray_env()
    )
    if proc.returncode != 0:
        raise ClusterError(f"{' '.join(argv[1:3])} failed:\n{proc.stderr.strip()[-2000:]}")
    return proc.stdout + proc.stderr


def stop() -> str:
    """Stop the Ray processes of this machine (and forget its warm head)."""
    out = run_ray([_ray(), "stop", "--force"])
    _marker().unlink(missing_ok=True)
    return out


# -- the warm local head: `hangar cluster start --head` on this machine ------------------


def _marker() -> Path:
    return cache_dir() / "local-ray.json"


def start_head(argv: list[str], port: int, slots: int | None = None) -> str:
    """Run `ray start --head` (its token made first) and remember the head, so `hangar
    run` on this machine attaches to it instead of starting an embedded Ray; the head's
    address."""
    ensure_token()
    out = run_ray(argv)
    given = [a.split("=", 1)[1] for a in argv if a.startswith("--node-ip-address=")]
    found = re.search(r"Local node IP:\s*(\S+)", _ANSI.sub("", out))
    node_ip = given[0] if given else found.group(1) if found else "127.0.0.1"
    address = f"{node_ip}:{port}"
    _marker().parent.mkdir(parents=True, exist_ok=True)
    _marker().write_text(json.dumps({"address": address, "node_ip": node_ip, "slots": slots}))
    return address


def local_head() -> tuple[str, str] | None:
    """(address, node IP) of the head `hangar cluster start --head` started on this machine,
    when it still answers; None otherwise (a stale record is removed)."""
    try:
        head = json.loads(_marker().read_text())
        address, node_ip = str(head["address"]), str(head["node_ip"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return address, node_ip
    except (OSError, ValueError):
        _marker().unlink(missing_ok=True)
        return None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


# -- a driver on a machine that is not a node ----------------------------------------------


def join_as_driver(address: str) -> tuple[str, Callable[[], None] | None]:
    """Ray runs a driver only on a node of its cluster: when this machine is not one of the
    cluster at `address` (a laptop with the sweep's files, say), join it as a node with no
    CPUs and no sandbox slots, so that nothing is scheduled here. Returns the address of
    this machine's node and how to leave (called at exit; None when this machine was a
    node already)."""
    host, _, port = address.rpartition(":")
    gcs = f"{socket.gethostbyname(host)}:{port}"
    mine = sorted(ip for ip in local_raylets(gcs) if of_this_machine(ip))
    if mine:
        return mine[0], None
    ip = source_ip(gcs.split(":")[0])
    need_token()
    run_ray(
        [
            _ray(),
            "start",
            "--disable-usage-stats",
            f"--address={gcs}",
            "--num-cpus=0",
            "--resources={}",
            f"--node-ip-address={ip}",
            f"--metrics-export-port={_free_port()}",
        ]
    )
    return ip, lambda: _end_processes(_of_node(gcs, ip))


def source_ip(host: str) -> str:
    """This machine's address on the way to `host` (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))
        return str(probe.getsockname()[0])


def of_this_machine(ip: str) -> bool:
    """Whether `ip` is an address of this machine (of its network namespace: a raylet of
    another namespace shows among this machine's processes too)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((ip, 0))
        except OSError:
            return False
    return True


def local_raylets(gcs: str) -> set[str]:
    """The node addresses of this machine's raylets of the cluster whose GCS is `gcs`
    (a GCS on this machine named by any of its addresses: Ray may advertise the machine's
    own address for a head started on loopback)."""
    host, _, port = gcs.rpartition(":")
    found = set()
    for args in _command_lines().values():
        if not args or not args[0].endswith("/raylet"):
            continue
        named = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
        theirs, _, their_port = named.get("gcs-address", "").rpartition(":")
        local = theirs != host and of_this_machine(theirs) and of_this_machine(host)
        if their_port == port and (theirs == host or local) and "node_ip_address" in named:
            found.add(named["node_ip_address"])
    return found


def _command_lines() -> dict[int, list[str]]:
    lines = {}
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            raw = path.read_bytes()
        except OSError:
            continue
        lines[int(path.parent.name)] = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    return lines


def _of_node(gcs: str, ip: str) -> Callable[[list[str]], bool]:
    """Whether a command line is a Ray process of the node at `ip` of the cluster whose
    GCS is `gcs` (its raylet, log monitor, agents: each names both)."""
    wanted_gcs = {f"--gcs-address={gcs}", f"--gcs_address={gcs}"}
    wanted_ip = {f"--node-ip-address={ip}", f"--node_ip_address={ip}"}
    return lambda args: bool(wanted_gcs & set(args)) and bool(wanted_ip & set(args))


def _end_processes(ours: Callable[[list[str]], bool]) -> None:
    """SIGTERM the processes whose command line is `ours`, and their children."""
    lines = _command_lines()
    parents: dict[int, int] = {}
    for pid in lines:
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
    doomed = {pid for pid, args in lines.items() if ours(args)}
    grew = True
    while grew:
        more = {pid for pid, ppid in parents.items() if ppid in doomed} - doomed
        doomed |= more
        grew = bool(more)
    for pid in doomed:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])
