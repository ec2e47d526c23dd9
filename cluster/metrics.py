"""The Prometheus service-discovery file of the Ray nodes hangar runs on.

Ray writes ``/tmp/ray/prom_metrics_service_discovery.json`` only from its dashboard, which
the heads hangar starts leave off (an embedded Ray, the head a run keeps warm, in a temp
folder of its own). So hangar writes a file of its own in Prometheus' ``file_sd`` format
whenever a sweep attaches to Ray (and `hangar cluster start` when it starts a head): every
alive node's metrics endpoint. The ``prometheus.yml`` `hangar dashboards export` writes
reads it beside Ray's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hangar.paths import cache_dir


def discovery_file() -> Path:
    """Where hangar keeps the discovery file (``$HANGAR_PROMETHEUS_SD``, else the cache)."""
    given = os.environ.get("HANGAR_PROMETHEUS_SD")
    return Path(given) if given else cache_dir() / "prometheus" / "ray-nodes.json"


def targets(nodes: list[dict[str, Any]]) -> list[str]:
    """``host:port`` of each alive node's metrics endpoint (from ``ray.nodes()``)."""
    found = {
        f"{n['NodeManagerAddress']}:{n['MetricsExportPort']}"
        for n in nodes
        if n.get("Alive") and n.get("MetricsExportPort") and n.get("NodeManagerAddress")
    }
    return sorted(found)


def write_discovery(found: list[str], path: Path | None = None) -> Path:
    """Write `found` as a ``file_sd`` target group (atomically: Prometheus may read it
    at any moment); returns the file."""
    path = path or discovery_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    groups = [{"targets": found, "labels": {}}] if found else []
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(groups, indent=1) + "\n")
    partial.replace(path)
    return path
