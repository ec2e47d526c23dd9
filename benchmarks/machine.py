"""What the benchmarks share: the machine's CPU time, a free loopback port, a cache folder
for the peers they install, and a local head kept warm the way `hangar run` keeps one (in a
private cache folder)."""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hangar.paths import cache_dir


def cpu_seconds() -> float:
    """CPU time the whole machine has spent (user, nice, system, irq, softirq), in seconds."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench_cache(name: str) -> Path:
    """Where a peer harness the benchmarks install (`name`) is kept: in hangar's cache."""
    return cache_dir() / "bench" / name


@contextmanager
def kept_warm() -> Iterator[None]:
    """`hangar run` keeping its own head warm (`hangar.cluster.local_head`), recorded in a private
    cache folder (the user's own warm head, if any, is not touched), stopped afterwards."""
    with tempfile.TemporaryDirectory(prefix="hwb-") as cache:
        saved = {k: os.environ.get(k) for k in ("HANGAR_CACHE_DIR", "HANGAR_WARM_HEAD")}
        os.environ.update(HANGAR_CACHE_DIR=cache, HANGAR_WARM_HEAD="1")
        try:
            yield
        finally:
            from hangar.cluster.local_head import stop_warm

            stop_warm()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
