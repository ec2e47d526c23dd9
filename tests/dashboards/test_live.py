"""Every dashboard query against the real thing, fed by one real sweep:

- each SQL panel runs on a real PostgreSQL holding the sweep's results, with Grafana's
  macros and template variables expanded the way Grafana expands them, and returns the
  columns its panel expects and the numbers `hangar report` gives for the same sweep;
- each PromQL query runs on a real Prometheus that scraped the real Ray node during
  the sweep, and returns series.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import text

from hangar.dashboards.model import Sql
from hangar.dashboards.operations import QUERIES as PROMQL
from hangar.dashboards.provisioning import export as export_dashboards
from hangar.dashboards.scores import ALL_QUERIES, scores_dashboard
from hangar.results import TrialResult, Verdict
from hangar.scheduler.driver import SweepRunner
from hangar.scheduler.sweep import load_sweep
from hangar.scores.report import Report, build_report
from hangar.store import ResultsStore
from hangar.testing.scripted import Script, ScriptedServer
from tests.require import skip_or_fail
from tests.services import Prometheus, prometheus_binary

pytestmark = [pytest.mark.ray, pytest.mark.postgres, pytest.mark.prometheus, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SWEEP = "dash-live"
PRICE = {"input": 3.0, "output": 15.0, "cached_input": 0.3}


@dataclass
class Live:
    store: ResultsStore
    results: list[TrialResult]
    report: Report
    prometheus: Prometheus


@pytest.fixture(scope="module")
def live(ray_local: None, postgres_url: str) -> Iterator[Live]:
    """One real sweep into PostgreSQL while Prometheus scrapes the Ray node."""
    import ray

    if prometheus_binary() is None:
        skip_or_fail(
            "prometheus", "Prometheus is not installed (Debian: apt-get install prometheus)"
        )
    folder = Path(tempfile.mkdtemp(prefix="hangar-live-"))
    port = ray.nodes()[0]["MetricsExportPort"]
    # Prometheus as `hangar dashboards export` configures it: it finds the Ray node
    # through the discovery file the sweep writes when it attaches (none exists yet).
    discovery = folder / "ray-nodes.json"
    os.environ["HANGAR_PROMETHEUS_SD"] = str(discovery)
    export_dashboards(folder / "grafana")
    config = (folder / "grafana" / "prometheus" / "prometheus.yml").read_text()
    assert str(discovery) in config and not discovery.exists()
    prom = Prometheus(folder, text=config.replace("scrape_interval: 15s", "scrape_interval: 1s"))
    store = ResultsStore(postgres_url)
    with store.engine.begin() as conn:
        for table in ("checks", "trials", "sweeps", "baselines"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    server = ScriptedServer(Script.load(ROOT / "examples" / "scripted-model.yaml")).start()
    # A file where the sweep's evidence folder goes: the first attempts fail (the store
    # itself takes the preflight's probe).
    blocker = folder / "evidence" / SWEEP
    blocker.parent.mkdir()
    blocker.write_text("a file where the evidence folder goes: the first attempts fail")
    (folder / "sweep.yaml").write_text(
        yaml.safe_dump(
            {
                "id": SWEEP,
                "scenarios": [str(ROOT / "tests" / "fixtures" / "tiny" / "scenario.yaml")],
                "agents": {
                    "ok": {"command": "sleep 1"},
                    "bad": {"command": "exit 3"},
                    "chat": {"kind": "chat"},
                },
                "models": [
                    {
                        "id": "scripted",
                        "base_url": f"{server.url}/v1",
                        "api_key_env": "HANGAR_SCRIPTED_KEY",
                        "price": PRICE,
                    }
                ],
                "arms": {"control": [], "noted": ["note"]},
                "repeats": 2,
                "backend": "local",
                "store": postgres_url,
                "evidence": blocker.parent.as_uri(),
                "retry": {"infra_retries": 2, "backoff_s": 1, "backoff_max_s": 2},
            }
        )
    )

    def unblock(tally: Any, result: TrialResult | None) -> None:
        if result is not None and result.verdict is Verdict.INFRA_ERROR and blocker.is_file():
            blocker.unlink()

    try:
        sweep = load_sweep(folder / "sweep.yaml")
        SweepRunner(sweep, store, listener=unblock).run()
        groups = json.loads(discovery.read_text())
        node = ray.nodes()[0]["NodeManagerAddress"]
        assert groups[0]["targets"] == [f"{node}:{port}"], groups
        time.sleep(8)  # a few more scrapes after the last trial
        results = list(store.results(SWEEP))
        # a dataset's broken task, as `hangar dataset validate` records it
        store.record_validations(
            [
                {
                    "digest": "0" * 64,
                    "task_id": "broken-tests",
                    "status": "broken",
                    "reason": "the oracle fails: reward 0",
                    "sweep_id": "validate-demo",
                }
            ]
        )
        yield Live(store, results, build_report(SWEEP, results), prom)
    finally:
        os.environ.pop("HANGAR_PROMETHEUS_SD", None)
        server.shutdown()
        prom.stop()


# -- Grafana's macros, as its PostgreSQL datasource expands them ----------------------------

FROM, TO = "2000-01-01T00:00:00Z", "2100-01-01T00:00:00Z"
_INTERVAL = {"1d": 86400, "1h": 3600, "5m": 300}


def expand(sql: str, variables: dict[str, list[str]]) -> str:
    """Expand $__timeFilter, $__timeGroup(Alias) and $variables as Grafana does."""

    def group(m: re.Match[str], alias: bool) -> str:
        col, interval = m.group(1).strip(), m.group(2).strip().strip("'")
        expr = f"floor(extract(epoch from {col})/{_INTERVAL[interval]})*{_INTERVAL[interval]}"
        return f'{expr} AS "time"' if alias else expr

    sql = re.sub(
        r"\$__timeFilter\(([^)]+)\)", lambda m: f"{m.group(1)} BETWEEN '{FROM}' AND '{TO}'", sql
    )
    sql = re.sub(r"\$__timeGroupAlias\(([^,]+),([^)]+)\)", lambda m: group(m, True), sql)
    sql = re.sub(r"\$__timeGroup\(([^,]+),([^)]+)\)", lambda m: group(m, False), sql)
    for name, values in sorted(variables.items(), key=lambda kv: -len(kv[0])):
        quoted = ",".join("'" + v.replace("'", "''") + "'" for v in values) or "NULL"
        sql = sql.replace(f"${name}", quoted)
    assert "$" not in sql, f"an unexpanded macro or variable is left: {sql}"
    return sql


def run(live: Live, query: Sql) -> list[dict[str, Any]]:
    with live.store.engine.connect() as conn:
        variables = {}
        for var in scores_dashboard().variables:  # "All", as Grafana fills it in
            variables[var.name] = [str(r[0]) for r in conn.execute(text(var.query))]
        variables["sweep"] = [SWEEP]  # the sweep under test (the server holds others)
        result = conn.execute(text(expand(query.sql, variables)))
        rows = [dict(r._mapping) for r in result]
        assert tuple(result.keys()) == query.columns
    assert rows, "the panel query returned nothing"
    return rows


def test_every_sql_panel_runs(live: Live) -> None:
    for name, query in ALL_QUERIES.items():
        if name == "judge_cost_per_day":  # no judge in this sweep (tests/dashboards/test_kinds.py)
            continue
        assert run(live, query), name
    with live.store.engine.connect() as conn:
        for var in scores_dashboard().variables:
            assert conn.execute(text(var.query)).fetchall(), var.name


def _groups(live: Live) -> dict[tuple[str, str, str], Any]:
    return {(g.agent, g.model, g.arm): g for g in live.report.groups}


def test_scores_match_the_report(live: Live) -> None:
    groups = _groups(live)
    rows = run(live, ALL_QUERIES["scores_by_group"])
    assert len(rows) == len([g for g in groups.values() if g.trials])
    for row in rows:
        g = groups[(row["agent"], row["model"], row["arm"])]
        assert (row["trials"], row["passes"]) == (g.trials, g.passes)
        assert row["pass_rate"] == pytest.approx(g.pass_rate.estimate)
        assert (row["low"], row["high"]) == (
            pytest.approx(g.pass_rate.low),
            pytest.approx(g.pass_rate.high),
        )


def test_arm_difference_matches_the_report(live: Live) -> None:
    rows = run(live, ALL_QUERIES["arm_vs_control"])
    for row in rows:
        within = f"{row['agent']} · {row['model']}"
        (c,) = [
            c
            for c in live.report.comparisons
            if c.factor == "arm" and c.within == within and c.metric == "pass"
        ]
        sign = 1 if c.candidate == row["arm"] else -1
        assert row["difference"] == pytest.approx(sign * c.difference)
        assert row["scenarios"] == c.scenarios


def test_metric_panels_match_the_report(live: Live) -> None:
    groups = _groups(live)
    rows = run(live, ALL_QUERIES["metric_by_group"])
    assert {row["metric"] for row in rows} == {"pass"}
    for row in rows:
        g = groups[(row["agent"], row["model"], row["arm"])]
        (m,) = [m for m in g.metrics if m.metric == row["metric"]]
        assert (row["n"], row["scale"]) == (m.n, m.scale)
        assert row["mean"] == pytest.approx(m.mean)
        assert (row["low"], row["high"]) == (pytest.approx(m.ci_low), pytest.approx(m.ci_high))
    daily = run(live, ALL_QUERIES["metric_over_time"])
    assert {row["metric"] for row in daily} == {f"{model} · pass" for (_, model, _) in groups}


def test_cost_and_durations_match_the_report(live: Live) -> None:
    groups = _groups(live)
    for row in run(live, ALL_QUERIES["cost_per_pass"]):
        g = groups[(row["agent"], row["model"], row["arm"])]
        assert row["cost_usd"] == pytest.approx(g.cost_usd)
        assert row["cost_per_trial"] == pytest.approx(g.cost_per_trial)
        assert (row["cost_per_pass"] is None) == (g.cost_per_pass is None)
        if g.cost_per_pass is not None:
            assert row["cost_per_pass"] == pytest.approx(g.cost_per_pass)
    for row in run(live, ALL_QUERIES["durations"]):
        g = groups[(row["agent"], row["model"], row["arm"])]
        assert row["p50"] == pytest.approx(g.duration_p50_s)
        assert row["p95"] == pytest.approx(g.duration_p95_s)
    assert sum(g.cost_usd for g in groups.values()) > 0
    attempts = list(live.store.results(SWEEP, all_attempts=True))
    per_day = run(live, ALL_QUERIES["cost_per_day"])
    assert sum(r["value"] for r in per_day) == pytest.approx(
        sum(a.usage.cost_usd for a in attempts)
    )


def test_tokens_verdicts_and_latest_sweep_match(live: Live) -> None:
    (tokens,) = run(live, ALL_QUERIES["tokens_by_kind"])
    total = {
        k: sum(g.tokens[k] for g in live.report.groups)
        for k in ("input", "cached_input", "output", "reasoning")
    }
    assert tokens["input_uncached"] + tokens["cached_input"] == total["input"]
    assert tokens["output"] + tokens["reasoning"] == total["output"]
    verdicts = {r["metric"]: r["value"] for r in run(live, ALL_QUERIES["verdict_mix"])}
    expected: dict[str, int] = {}
    for g in live.report.groups:
        for v, n in g.verdicts.items():
            expected[v] = expected.get(v, 0) + n
    assert verdicts == expected
    (latest,) = run(live, ALL_QUERIES["latest_sweep"])
    passes = sum(g.passes for g in live.report.groups)
    trials = sum(g.trials for g in live.report.groups)
    assert latest["sweep_id"] == SWEEP and latest["pass_rate"] == pytest.approx(passes / trials)
    series = {r["metric"]: r["value"] for r in run(live, ALL_QUERIES["pass_rate_over_time"])}
    assert series["scripted"] == pytest.approx(passes / trials)


def test_every_promql_query_returns_series(live: Live) -> None:
    for name, query in PROMQL.items():
        expr = query.expr.replace("$__rate_interval", "2m")
        assert live.prometheus.query(expr), f"{name}: {expr} returned no series"


def test_metric_labels_are_bounded(live: Live) -> None:
    names = (
        "ray_hangar_trials_total",
        "ray_hangar_tokens_total",
        "ray_hangar_cost_usd_total",
        "ray_hangar_trial_duration_seconds_count",
        "ray_hangar_retries_total",
    )
    for name in names:
        for series in live.prometheus.query(name):
            labels = set(series["metric"]) - {
                "__name__",
                "instance",
                "job",
                "Component",
                "NodeAddress",
                "SessionName",
                "Version",
                "WorkerId",
                "otel_scope_name",
                "otel_scope_schema_url",
                "otel_scope_version",
            }
            assert labels <= {"verdict", "model", "arm", "kind", "node"}, (name, labels)
