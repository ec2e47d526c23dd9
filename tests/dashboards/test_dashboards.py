"""Dashboards as code: committed JSON in sync, export, push (recorded exchange), views."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hangar.dashboards.provisioning import (
    GENERATED,
    GrafanaError,
    PostgresSource,
    export,
    push,
    rendered,
)
from hangar.store import ResultsStore
from tests.dashboards.grafana_stub import GrafanaStub

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "grafana-push.json"
PG = PostgresSource(host="db:5432", database="hangar", user="grafana", password="s3cret")


def test_committed_json_matches_the_builders() -> None:
    for name, text in rendered().items():
        committed = (GENERATED / name).read_text()
        assert committed == text, f"{name} is stale: run `hangar dashboards generate`"
    assert sorted(p.name for p in GENERATED.glob("*.json")) == sorted(rendered())


def test_export_writes_mountable_files(tmp_path: Path) -> None:
    paths = export(tmp_path)
    assert (tmp_path / "dashboards" / "hangar-scores.json") in paths
    sources = yaml.safe_load((tmp_path / "provisioning/datasources/hangar.yaml").read_text())
    uids = {d["uid"] for d in sources["datasources"]}
    assert uids == {"hangar-postgres", "hangar-prometheus"}
    assert (
        "${HANGAR_PG_PASSWORD}" in (tmp_path / "provisioning/datasources/hangar.yaml").read_text()
    )
    providers = yaml.safe_load((tmp_path / "provisioning/dashboards/hangar.yaml").read_text())
    assert providers["providers"][0]["options"]["path"].endswith("hangar")
    prom = yaml.safe_load((tmp_path / "prometheus/prometheus.yml").read_text())
    from hangar.cluster.metrics import discovery_file

    assert prom["scrape_configs"][0]["file_sd_configs"][0]["files"] == [
        str(discovery_file()),  # hangar's, for the heads it starts without Ray's dashboard
        "/tmp/ray/prom_metrics_service_discovery.json",
    ]
    panel_uids = {
        p["datasource"]["uid"]
        for name in ("hangar-scores", "hangar-operations")
        for p in json.loads((tmp_path / "dashboards" / f"{name}.json").read_text())["panels"]
    }
    assert panel_uids == uids  # every panel uses a provisioned datasource


@pytest.fixture
def grafana() -> Iterator[GrafanaStub]:
    stub = GrafanaStub("glsa_token").start()
    yield stub
    stub.shutdown()


def test_push_follows_the_recorded_exchange_and_is_idempotent(grafana: GrafanaStub) -> None:
    recorded = json.loads(FIXTURE.read_text())
    first = push(grafana.url, "glsa_token", postgres=PG, prometheus_url="http://prom:9090")
    assert [list(e) for e in grafana.exchanges] == recorded["first"]
    assert len(first.created) == 5 and not first.updated
    assert grafana.dashboards["hangar-scores"]["meta"]["folderUid"] == "hangar"
    assert "s3cret" not in json.dumps(grafana.datasources)  # secure fields are write-only
    grafana.exchanges.clear()
    second = push(grafana.url, "glsa_token", postgres=PG, prometheus_url="http://prom:9090")
    assert [list(e) for e in grafana.exchanges] == recorded["second"]
    assert not second.created and not second.updated and len(second.unchanged) == 5


def test_push_updates_what_drifted(grafana: GrafanaStub) -> None:
    push(grafana.url, "glsa_token", prometheus_url="http://prom:9090")
    grafana.dashboards["hangar-operations"]["dashboard"]["title"] = "edited by hand"
    report = push(grafana.url, "glsa_token", prometheus_url="http://prom:9091")
    assert report.updated == ["datasource hangar-prometheus", "dashboard hangar: operations"]


def test_refused_token_and_unreachable_grafana(grafana: GrafanaStub) -> None:
    with pytest.raises(GrafanaError, match="refused the token"):
        push(grafana.url, "wrong")
    with pytest.raises(GrafanaError, match="cannot reach Grafana"):
        push("http://127.0.0.1:9", "glsa_token")


def test_old_store_is_migrated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/old.db"
    store = ResultsStore(url)
    with store.engine.begin() as conn:  # make it a schema-1 store again
        for view in ("v_scores", "v_daily_model_scores", "v_trials", "v_attempts"):
            conn.exec_driver_sql(f"DROP VIEW {view}")
        conn.exec_driver_sql("DROP TABLE scores")
        for column in ("suite", "route", "scope", "agent_digest", "agent_settings", "kind"):
            conn.exec_driver_sql(f"ALTER TABLE trials DROP COLUMN {column}")
        # plugins_digest, provider_error and details stay: a store an interrupted upgrade
        # left half done
        conn.exec_driver_sql("UPDATE hangar_meta SET value = '1' WHERE key = 'schema_version'")
        conn.exec_driver_sql("DELETE FROM hangar_meta WHERE key = 'views_version'")
    store = ResultsStore(url)
    with store.engine.connect() as conn:
        columns = [r[1] for r in conn.exec_driver_sql("PRAGMA table_info(trials)")]
        assert {"suite", "route", "scope", "agent_digest", "plugins_digest", "kind"} <= set(columns)
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM v_daily_model_scores").scalar() == 0
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM v_scores").scalar() == 0
