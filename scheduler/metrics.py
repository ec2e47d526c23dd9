"""hangar's Prometheus metrics, through Ray's metrics agent on every node.

Labels have bounded cardinality: model, arm, verdict, node; never a trial key or a
scenario id. The driver counts outcomes; workers count live sandboxes.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

DURATION_BUCKETS = [1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0]


@functools.cache
def _metrics() -> dict[str, Any]:
    from ray.util import metrics

    return {
        "trials": metrics.Counter(
            "hangar_trials_total",
            "Trials finished, by verdict.",
            tag_keys=("verdict", "model", "arm"),
        ),
        "duration": metrics.Histogram(
            "hangar_trial_duration_seconds",
            "Wall time of a trial attempt.",
            boundaries=DURATION_BUCKETS,
            tag_keys=("model", "verdict"),
        ),
        "in_flight": metrics.Gauge(
            "hangar_trials_in_flight",
            "Trials submitted and not yet finished.",
            tag_keys=("model",),
        ),
        "retries": metrics.Counter(
            "hangar_retries_total", "infra_error attempts sent again.", tag_keys=("model",)
        ),
        "tokens": metrics.Counter(
            "hangar_tokens_total", "Model tokens, by kind.", tag_keys=("model", "kind")
        ),
        "cost": metrics.Counter("hangar_cost_usd_total", "Model cost in USD.", tag_keys=("model",)),
        "sandboxes": metrics.Gauge(
            "hangar_sandboxes_active", "Trials running on this node.", tag_keys=("node",)
        ),
    }


def metric(name: str) -> Any:
    """One of hangar's metrics (created on first use, after ray.init)."""
    return _metrics()[name]


Tags = tuple[tuple[str, str], ...]


class Batch:
    """Metric updates the driver's loop gathers (a dictionary's work) and `flush` sends
    to Ray's metrics agent from another thread: each of Ray's metric calls lets go of the
    interpreter's lock and waits to take it back behind every busy thread, and with a
    sweep's prompt trials running in the driver (`scheduler.pool.DriverPool`) the calls of
    each trial were a third of the loop's time. Counters add up, a gauge keeps its last
    value, a histogram every observation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._added: dict[tuple[str, Tags], float] = {}
        self._set: dict[tuple[str, Tags], float] = {}
        self._observed: list[tuple[str, Tags, float]] = []

    def inc(self, name: str, value: float = 1.0, *, tags: dict[str, str]) -> None:
        key = (name, tuple(tags.items()))
        with self._lock:
            self._added[key] = self._added.get(key, 0.0) + value

    def set(self, name: str, value: float, *, tags: dict[str, str]) -> None:
        with self._lock:
            self._set[(name, tuple(tags.items()))] = value

    def observe(self, name: str, value: float, *, tags: dict[str, str]) -> None:
        with self._lock:
            self._observed.append((name, tuple(tags.items()), value))

    def flush(self) -> None:
        """Send what was gathered since the last flush."""
        with self._lock:
            added, self._added = self._added, {}
            values, self._set = self._set, {}
            observed, self._observed = self._observed, []
        for (name, tags), value in added.items():
            metric(name).inc(value, tags=dict(tags))
        for (name, tags), value in values.items():
            metric(name).set(value, tags=dict(tags))
        for name, tags, value in observed:
            metric(name).observe(value, tags=dict(tags))
