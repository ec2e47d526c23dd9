"""The operations dashboard: Prometheus, over hangar's and Ray's metrics.

Ray exports application metrics with a ``ray_`` prefix, one series per worker process
(a ``WorkerId`` label), so every query sums them.
"""

from __future__ import annotations

from hangar.dashboards.model import Dashboard, Panel, PromQL

RATE = "[$__rate_interval]"
QUERIES: dict[str, PromQL] = {
    "trials_per_minute": PromQL(
        f"sum by (verdict) (rate(ray_hangar_trials_total{RATE})) * 60", "{{verdict}}"
    ),
    "in_flight": PromQL("sum by (model) (ray_hangar_trials_in_flight)", "{{model}}"),
    "sandboxes": PromQL("sum by (node) (ray_hangar_sandboxes_active)", "{{node}}"),
    "slots_used": PromQL('sum(ray_resources{Name="hangar_sandbox",State="USED"})', "slots used"),
    "duration_p95": PromQL(
        "histogram_quantile(0.95, sum by (le) "
        f"(rate(ray_hangar_trial_duration_seconds_bucket{RATE})))",
        "p95",
    ),
    "duration_p50": PromQL(
        "histogram_quantile(0.5, sum by (le) "
        f"(rate(ray_hangar_trial_duration_seconds_bucket{RATE})))",
        "p50",
    ),
    "duration_buckets": PromQL(
        f"sum by (le) (increase(ray_hangar_trial_duration_seconds_bucket{RATE}))", "{{le}}"
    ),
    "tokens_per_second": PromQL(
        f"sum by (model, kind) (rate(ray_hangar_tokens_total{RATE}))", "{{model}} {{kind}}"
    ),
    "cost_per_hour": PromQL(
        f"sum by (model) (rate(ray_hangar_cost_usd_total{RATE})) * 3600", "{{model}}"
    ),
    "retries_per_minute": PromQL(f"sum(rate(ray_hangar_retries_total{RATE})) * 60", "retries"),
    "infra_errors_per_minute": PromQL(
        "sum by (verdict) (rate(ray_hangar_trials_total"
        f'{{verdict=~"infra_error|verifier_error"}}{RATE})) * 60',
        "{{verdict}}",
    ),
    "node_cpu": PromQL("ray_node_cpu_utilization", "{{ip}}"),
    "node_memory": PromQL("ray_node_mem_used_host", "{{ip}}"),
}


def operations_dashboard() -> Dashboard:
    """Live operations of sweeps and the Ray cluster (Prometheus)."""
    q = QUERIES
    return Dashboard(
        uid="hangar-operations",
        title="hangar: operations",
        time_from="now-6h",
        panels=[
            Panel(
                "Trials per minute by verdict",
                "timeseries",
                (q["trials_per_minute"],),
                "Finished trial attempts per minute, by verdict.",
                "short",
            ),
            Panel(
                "In-flight trials per model",
                "timeseries",
                (q["in_flight"],),
                "Trials submitted to Ray and not yet finished, per model.",
                "short",
            ),
            Panel(
                "Active sandboxes per node",
                "timeseries",
                (q["sandboxes"], q["slots_used"]),
                "Trials running on each node, and the cluster's hangar_sandbox slots in use.",
                "short",
            ),
            Panel(
                "Trial duration p50 and p95",
                "timeseries",
                (q["duration_p50"], q["duration_p95"]),
                "Quantiles of trial duration from the histogram.",
                "s",
            ),
            Panel(
                "Trial duration histogram",
                "heatmap",
                (q["duration_buckets"],),
                "Trials per duration bucket over time.",
                "s",
            ),
            Panel(
                "Tokens per second per model",
                "timeseries",
                (q["tokens_per_second"],),
                "Model tokens by kind (input, cached_input, output, reasoning).",
                "short",
            ),
            Panel(
                "Cost per hour per model",
                "timeseries",
                (q["cost_per_hour"],),
                "USD per hour at the current rate, per model.",
                "currencyUSD",
            ),
            Panel(
                "Retries, infra and verifier errors per minute",
                "timeseries",
                (q["retries_per_minute"], q["infra_errors_per_minute"]),
                "Attempts sent again; infra_error results (the farm) and verifier_error results "
                "(a task's verifier crashed, hung or printed nonsense), retried, in no rate.",
                "short",
            ),
            Panel(
                "Ray nodes: CPU",
                "timeseries",
                (q["node_cpu"],),
                "CPU utilisation of each Ray node (percent).",
                "percent",
            ),
            Panel(
                "Ray nodes: memory used",
                "timeseries",
                (q["node_memory"],),
                "Memory used on each Ray node.",
                "bytes",
            ),
        ],
    )
