"""hangar's Prometheus metrics, through Ray's metrics agent on every node.

Labels have bounded cardinality: model, arm, verdict, node; never a trial key or a
scenario id. The driver counts outcomes; workers count live sandboxes.
"""

from __future__ import annotations

import functools
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
