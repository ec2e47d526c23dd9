"""Getting the dashboards into a Grafana: files to mount, or a push over its HTTP API.

`export` writes what a stock Grafana mounts (dashboards, datasource and provider
provisioning files, whose URLs and credentials come from environment variables) and a
Prometheus config that scrapes every Ray node through Ray's service-discovery file.
`push` creates or updates the folder, datasources and dashboards with grafana-client,
idempotently: what already matches is left alone, and the report says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from hangar.cluster.metrics import discovery_file
from hangar.dashboards.model import PG, PROM, Dashboard
from hangar.dashboards.operations import operations_dashboard
from hangar.dashboards.scores import scores_dashboard
from hangar.errors import ConfigError, GrafanaError

GENERATED = Path(__file__).with_name("generated")
FOLDER_UID, FOLDER_TITLE = "hangar", "hangar"
RAY_SERVICE_DISCOVERY = "/tmp/ray/prom_metrics_service_discovery.json"


def dashboards() -> list[Dashboard]:
    """Every hangar dashboard."""
    return [scores_dashboard(), operations_dashboard()]


def rendered() -> dict[str, str]:
    """File name -> JSON text of every dashboard (what `generated/` must hold)."""
    return {f"{d.uid}.json": d.render() for d in dashboards()}


#: The Helm chart's copy (Helm reads no file outside its chart), in a checkout.
CHART_DASHBOARDS = GENERATED.resolve().parent.parent / "helm" / "hangar" / "dashboards"


def write_generated(folder: Path = GENERATED) -> list[Path]:
    """Rewrite the committed JSON from the builders (and the chart's copy, in a checkout)."""
    folders = [folder] + ([CHART_DASHBOARDS] if CHART_DASHBOARDS.is_dir() else [])
    written = []
    for target in folders:
        target.mkdir(parents=True, exist_ok=True)
        for name, text in rendered().items():
            (target / name).write_text(text)
            written.append(target / name)
    return written


DATASOURCES_YAML = f"""# Grafana datasources for hangar; the values come from the environment.
apiVersion: 1
datasources:
  - name: hangar-postgres
    uid: {PG["uid"]}
    type: {PG["type"]}
    url: ${{HANGAR_PG_HOST}}              # host:port of the results store
    user: ${{HANGAR_PG_USER}}
    jsonData:
      database: ${{HANGAR_PG_DATABASE}}
      sslmode: ${{HANGAR_PG_SSLMODE}}     # disable, require, verify-full
      postgresVersion: 1500
    secureJsonData:
      password: ${{HANGAR_PG_PASSWORD}}
  - name: hangar-prometheus
    uid: {PROM["uid"]}
    type: {PROM["type"]}
    url: ${{HANGAR_PROMETHEUS_URL}}       # e.g. http://prometheus:9090
"""

PROVIDERS_YAML = f"""# Grafana dashboard provider for hangar's dashboards.
apiVersion: 1
providers:
  - name: hangar
    folder: {FOLDER_TITLE}
    folderUid: {FOLDER_UID}
    type: file
    allowUiUpdates: false
    options:
      path: /var/lib/grafana/dashboards/hangar
"""


def prometheus_yaml(hangar_file: Path) -> str:
    """A Prometheus config scraping every Ray node: through Ray's own discovery file
    (written by a head whose dashboard is on) and hangar's (`hangar.cluster.metrics`,
    written whenever a sweep attaches to Ray, for every head hangar starts)."""
    return f"""# Prometheus scraping every Ray node. hangar's file lists the nodes of the Ray
# a sweep last attached to (embedded, kept warm, or a cluster); Ray's lists them on a
# head whose dashboard is on. A file that does not exist yet is empty to Prometheus.
global:
  scrape_interval: 15s
scrape_configs:
  - job_name: ray
    file_sd_configs:
      - files: ["{hangar_file}", "{RAY_SERVICE_DISCOVERY}"]
"""


def export(out: Path) -> list[Path]:
    """Write the dashboards, Grafana provisioning files and a Prometheus config."""
    files = {
        **{f"dashboards/{n}": t for n, t in rendered().items()},
        "provisioning/datasources/hangar.yaml": DATASOURCES_YAML,
        "provisioning/dashboards/hangar.yaml": PROVIDERS_YAML,
        "prometheus/prometheus.yml": prometheus_yaml(discovery_file()),
    }
    written = []
    for rel, text in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


class PostgresSource(BaseModel):
    """How Grafana reaches the results store."""

    host: str
    """host:port."""
    database: str
    """Database name."""
    user: str
    """User (read-only is enough)."""
    password: str = ""
    """Password (sent to Grafana's secure store only; never printed)."""
    sslmode: str = "disable"
    """sslmode."""


class PushReport(BaseModel):
    """What `push` did."""

    created: list[str] = Field(default_factory=list)
    updated: list[str] = Field(default_factory=list)
    unchanged: list[str] = Field(default_factory=list)


def _datasources(pg: PostgresSource | None, prometheus_url: str | None) -> list[dict[str, Any]]:
    found = []
    if pg is not None:
        found.append(
            {
                "name": "hangar-postgres",
                "uid": PG["uid"],
                "type": PG["type"],
                "access": "proxy",
                "url": pg.host,
                "user": pg.user,
                "jsonData": {
                    "database": pg.database,
                    "sslmode": pg.sslmode,
                    "postgresVersion": 1500,
                },
                "secureJsonData": {"password": pg.password},
            }
        )
    if prometheus_url is not None:
        found.append(
            {
                "name": "hangar-prometheus",
                "uid": PROM["uid"],
                "type": PROM["type"],
                "access": "proxy",
                "url": prometheus_url,
                "jsonData": {},
            }
        )
    return found


def _same(want: dict[str, Any], have: dict[str, Any]) -> bool:
    """Whether every field we set already has that value (secure fields are not readable)."""
    return all(have.get(k) == v for k, v in want.items() if k != "secureJsonData")


def push(
    url: str,
    token: str | None,
    *,
    postgres: PostgresSource | None = None,
    prometheus_url: str | None = None,
) -> PushReport:
    """Create or update hangar's folder, datasources and dashboards in a Grafana."""
    from grafana_client.api import GrafanaApi
    from grafana_client.client import (
        GrafanaClientError,
        GrafanaException,
        GrafanaUnauthorizedError,
    )

    api = GrafanaApi.from_url(url, credential=token, timeout=15.0)
    report = PushReport()
    try:
        api.health.check()
        _push_folder(api, report)
        for ds in _datasources(postgres, prometheus_url):
            _push_datasource(api, ds, report)
        for dashboard in dashboards():
            _push_dashboard(api, dashboard, report)
    except GrafanaUnauthorizedError as exc:
        raise GrafanaError(
            f"Grafana at {url} refused the token ({exc.status_code}): give a service-account "
            "token with the Editor role (--token or HANGAR_GRAFANA_TOKEN)"
        ) from exc
    except (GrafanaClientError, GrafanaException) as exc:
        raise GrafanaError(f"Grafana at {url} rejected a request: {exc}") from exc
    except OSError as exc:
        raise GrafanaError(f"cannot reach Grafana at {url}: {exc}") from exc
    except Exception as exc:  # an HTTP library's error that is not an OSError
        if type(exc).__module__.startswith(("requests", "urllib3")):
            raise GrafanaError(f"cannot reach Grafana at {url}: {exc}") from exc
        raise
    return report


def _not_found(exc: Exception) -> bool:
    return getattr(exc, "status_code", None) == 404


def _push_folder(api: Any, report: PushReport) -> None:
    try:
        folder = api.folder.get_folder(FOLDER_UID)
    except Exception as exc:
        if not _not_found(exc):
            raise
        api.folder.create_folder(FOLDER_TITLE, uid=FOLDER_UID)
        report.created.append(f"folder {FOLDER_TITLE}")
        return
    if folder.get("title") != FOLDER_TITLE:
        api.folder.update_folder(FOLDER_UID, title=FOLDER_TITLE, overwrite=True)
        report.updated.append(f"folder {FOLDER_TITLE}")
    else:
        report.unchanged.append(f"folder {FOLDER_TITLE}")


def _push_datasource(api: Any, ds: dict[str, Any], report: PushReport) -> None:
    name = f"datasource {ds['name']}"
    try:
        have = api.datasource.get_datasource_by_uid(ds["uid"])
    except Exception as exc:
        if not _not_found(exc):
            raise
        api.datasource.create_datasource(ds)
        report.created.append(name)
        return
    if _same(ds, have):  # a password cannot be read back, so it does not count
        report.unchanged.append(name)
        return
    api.datasource.update_datasource_by_uid(ds["uid"], ds)
    report.updated.append(name)


def _push_dashboard(api: Any, dashboard: Dashboard, report: PushReport) -> None:
    want = dashboard.to_json()
    name = f"dashboard {dashboard.title}"
    try:
        have = api.dashboard.get_dashboard(dashboard.uid)
    except Exception as exc:
        if not _not_found(exc):
            raise
        have = None
    if have is not None:
        current = {k: v for k, v in have.get("dashboard", {}).items() if k not in ("id", "version")}
        folder = have.get("meta", {}).get("folderUid")
        if json.dumps(current, sort_keys=True) == json.dumps(want, sort_keys=True) and (
            folder == FOLDER_UID
        ):
            report.unchanged.append(name)
            return
    api.dashboard.update_dashboard(
        {
            "dashboard": want,
            "folderUid": FOLDER_UID,
            "overwrite": True,
            "message": "hangar dashboards push",
        }
    )
    (report.updated if have is not None else report.created).append(name)


def check_postgres_url(url: str) -> PostgresSource:
    """A PostgresSource from a SQLAlchemy URL of the results store."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if not parsed.drivername.startswith("postgres"):
        raise ConfigError(
            f"Grafana reads the results store from PostgreSQL, not {parsed.drivername}"
        )
    return PostgresSource(
        host=f"{parsed.host or 'localhost'}:{parsed.port or 5432}",
        database=parsed.database or "",
        user=parsed.username or "",
        password=parsed.password or "",
    )
