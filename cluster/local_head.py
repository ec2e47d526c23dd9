"""A local Ray head kept warm on its own: started by the first `hangar run` that needs one,
reused by the next, stopped once idle.

`hangar run` without ``--address``, on a machine with no head `hangar cluster start` left
running, starts one (`ensure_warm`): a small detached keeper process (``python -m
hangar.cluster.local_head``) runs ``ray start --head --block`` on loopback as its child, writes
the head's record (the same file `local_head` reads, marked ``auto``), and watches: each
`hangar run` attached to it holds a run file (`attached`); once none has been held for
``idle_s`` seconds (default 30 minutes, ``$HANGAR_WARM_IDLE_S``), the keeper stops its
child (Ray stops every process it started) and removes the record. A run saves Ray's
start-up (about 8 s here) whenever the head is already warm. ``HANGAR_WARM_HEAD=0`` keeps
the old behaviour (an embedded Ray per run).

A head's processes keep the environment they were started with, and the model relay
reads provider keys there: the record holds a fingerprint (a short sha256) of each
variable's value at start, never the value, and a run whose sweep needs a key whose
value is not the head's restarts an idle head (or, while another run holds it, runs on an
embedded Ray of its own).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from hangar.cluster.nodes import _marker, _ray, local_head, node_resources, ray_env
from hangar.errors import ClusterError
from hangar.paths import cache_dir

#: Seconds without an attached run after which the keeper stops its head.
DEFAULT_IDLE_S = 1800.0


def enabled() -> bool:
    """Whether `hangar run` keeps a warm head (``$HANGAR_WARM_HEAD``, default on)."""
    return os.environ.get("HANGAR_WARM_HEAD", "1").lower() not in ("0", "false", "no", "off")


def idle_seconds() -> float:
    """``$HANGAR_WARM_IDLE_S``, else `DEFAULT_IDLE_S`."""
    try:
        return float(os.environ.get("HANGAR_WARM_IDLE_S", DEFAULT_IDLE_S))
    except ValueError:
        return DEFAULT_IDLE_S


def fingerprint(value: str) -> str:
    """What the record keeps of a variable's value: a short sha256, never the value."""
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def _runs() -> Path:
    return cache_dir() / "local-ray-runs"


def active_runs() -> list[int]:
    """The pids of the runs attached to the warm head now (stale files removed)."""
    alive = []
    for path in _runs().glob("[0-9]*") if _runs().is_dir() else []:
        try:
            pid = int(path.name)
            os.kill(pid, 0)
            alive.append(pid)
        except (ValueError, ProcessLookupError):
            path.unlink(missing_ok=True)
        except PermissionError:  # another user's live process
            alive.append(int(path.name))
    return sorted(alive)


def record() -> dict[str, object] | None:
    """The local head's record (None: no head answers)."""
    if local_head() is None:
        return None
    try:
        found = json.loads(_marker().read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


@contextlib.contextmanager
def attached() -> Iterator[None]:
    """Hold the warm head for this run (the keeper does not stop it meanwhile)."""
    _runs().mkdir(parents=True, exist_ok=True)
    mine = _runs() / str(os.getpid())
    mine.touch()
    try:
        yield
    finally:
        mine.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            (_runs() / ".last").touch()  # the idle time starts now


def _stale(head: dict[str, object], needs: Iterable[str]) -> list[str]:
    """The variables `needs` names whose value (or absence) is not the head's at start."""
    prints = head.get("env")
    known = prints if isinstance(prints, dict) else {}
    now = {n: fingerprint(os.environ[n]) if n in os.environ else None for n in needs}
    return [name for name, value in now.items() if known.get(name) != value]


def ensure_warm(slots: int, needs: Iterable[str] = ()) -> tuple[str, str] | None:
    """(address, node IP) of a warm local head for this run, started if need be (see the
    module docstring); None when this run should use an embedded Ray (warm heads off, a
    held head whose environment lacks a key this sweep needs, or one that cannot start)."""
    head = record()
    if head is not None and not head.get("auto"):
        return local_head()  # started by hand: used as it is
    if not enabled():
        return None  # an embedded Ray per run, even beside a head kept warm earlier
    if head is not None:
        if not _stale(head, needs):
            return local_head()
        if [pid for pid in active_runs() if pid != os.getpid()]:
            return None  # held by another run, with other keys: not ours to restart
        stop_warm()
    return start_warm(slots)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_warm(slots: int, timeout_s: float = 90.0) -> tuple[str, str]:
    """Start the keeper and wait for its head to answer."""
    port = _free_port()
    logs = cache_dir() / "local-ray-keeper.log"
    logs.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "hangar.cluster.local_head", "--port", str(port),
            "--slots", str(slots), "--idle", str(idle_seconds())]  # fmt: skip
    with logs.open("ab") as out:
        subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
            env=ray_env(),
        )  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        head = record()
        if head is not None and head.get("port") == port:
            found = local_head()
            if found is not None:
                return found
        time.sleep(0.2)
    raise ClusterError(f"the warm Ray head did not start in {timeout_s:.0f} s: see {logs}")


def stop_warm(timeout_s: float = 60.0) -> bool:
    """Stop the keeper of an automatic head (and so its head); False when there is none."""
    head = record()
    if head is None or not head.get("auto"):
        return False
    pid = head.get("keeper")
    if isinstance(pid, int):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.2)
    _marker().unlink(missing_ok=True)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def status() -> dict[str, object]:
    """What `hangar cluster status` shows of this machine's local head."""
    head = record()
    if head is None:
        return {"running": False, "warm_heads": enabled(), "idle_s": idle_seconds()}
    last = _runs() / ".last"
    since = time.time() - last.stat().st_mtime if last.exists() else None
    return {
        "running": True,
        "address": head.get("address"),
        "started_by": "hangar run (kept warm)" if head.get("auto") else "hangar cluster start",
        "sandbox_slots": head.get("slots"),
        "idle_s": head.get("idle_s"),
        "active_runs": active_runs(),
        "idle_for_s": None if active_runs() else since,
    }


# -- the keeper --------------------------------------------------------------------------------


def keep(port: int, slots: int, idle_s: float, poll_s: float = 2.0) -> int:
    """Run the head as a child and stop it once idle (see the module docstring)."""
    # A temp folder of its own (short: Ray's sockets live in it): Ray records the "current
    # cluster" there, not in /tmp/ray, where a later bare `ray.init()` would find a head
    # that has stopped and try to join it.
    temp = Path(f"/tmp/hangar-ray-{os.getuid()}-{port}")
    # Without what a one-machine head of hangar's own never uses: the autoscaler's monitor
    # (nothing to scale) and the log monitor (runs attach with log_to_driver off). Each is a
    # Python process: about 2 s of CPU at start and a share of a core while it idles.
    argv = [_ray(), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
            "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}",
            "--no-monitor", "--include-log-monitor=false",
            f"--resources={json.dumps(node_resources(slots))}"]  # fmt: skip
    child = subprocess.Popen(argv, env=ray_env())
    stopping = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    address = f"127.0.0.1:{port}"
    _runs().mkdir(parents=True, exist_ok=True)
    (_runs() / ".last").touch()
    written = False
    try:
        while child.poll() is None and not stopping:
            if not written and _answers(port):
                env = {k: fingerprint(v) for k, v in os.environ.items()}
                _marker().parent.mkdir(parents=True, exist_ok=True)
                _marker().touch(mode=0o600)
                _marker().write_text(json.dumps({
                    "address": address, "node_ip": "127.0.0.1", "auto": True, "port": port,
                    "slots": slots, "idle_s": idle_s, "keeper": os.getpid(), "env": env,
                }))  # fmt: skip
                written = True
            last = _runs() / ".last"
            if active_runs() or not last.exists():
                last.touch()
            elif time.time() - last.stat().st_mtime > idle_s:
                break
            # Until the head answers, look often: a run is waiting for it.
            time.sleep(poll_s if written else 0.05)
    finally:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(_marker().read_text()).get("keeper") == os.getpid():
                _marker().unlink()
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
        _forget(port)
        shutil.rmtree(temp, ignore_errors=True)
    return 0


def _forget(port: int) -> None:
    """Remove Ray's record of the current cluster where it names this head (Ray may
    write it to its default folder too)."""
    for folder in {Path(os.environ.get("RAY_TMPDIR") or "/tmp") / "ray", Path("/tmp/ray")}:
        current = folder / "ray_current_cluster"
        with contextlib.suppress(OSError):
            if current.read_text().strip().endswith(f":{port}"):
                current.unlink()


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description="hangar's warm local Ray head keeper")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--slots", type=int, required=True)
    parser.add_argument("--idle", type=float, default=DEFAULT_IDLE_S)
    args = parser.parse_args()
    sys.exit(keep(args.port, args.slots, args.idle))


if __name__ == "__main__":
    main()
