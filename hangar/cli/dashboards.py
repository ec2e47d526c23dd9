"""`hangar dashboards`: Grafana dashboards exported, generated and pushed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from hangar.cli._app import app
from hangar.console import console

dashboards_app = typer.Typer(help="Grafana dashboards: export files, push to a Grafana.")
app.add_typer(dashboards_app, name="dashboards")


@dashboards_app.command("export")
def dashboards_export(
    out: Annotated[Path, typer.Option(help="Folder to write into.")] = Path("grafana"),
) -> None:
    """Write the dashboards, Grafana provisioning files and a Prometheus config."""
    from hangar.dashboards.provisioning import export

    for path in export(out):
        console.print(f"wrote {path}", highlight=False)
    console.print(
        "mount dashboards/ at /var/lib/grafana/dashboards/hangar and provisioning/ at "
        "/etc/grafana/provisioning; set HANGAR_PG_* and HANGAR_PROMETHEUS_URL"
    )


@dashboards_app.command("push")
def dashboards_push(
    url: Annotated[str, typer.Option(help="Grafana base URL.")],
    token: Annotated[
        str | None, typer.Option(help="Service-account token (default $HANGAR_GRAFANA_TOKEN).")
    ] = None,
    postgres: Annotated[
        str | None,
        typer.Option(help="Results store URL Grafana should read (postgresql+psycopg://...)."),
    ] = None,
    prometheus: Annotated[str | None, typer.Option(help="Prometheus URL for Grafana.")] = None,
) -> None:
    """Create or update the folder, datasources and dashboards (idempotent)."""
    from hangar.dashboards.provisioning import check_postgres_url, push

    report = push(
        url,
        token or os.environ.get("HANGAR_GRAFANA_TOKEN"),
        postgres=check_postgres_url(postgres) if postgres else None,
        prometheus_url=prometheus,
    )
    for verb, items in (
        ("created", report.created),
        ("updated", report.updated),
        ("unchanged", report.unchanged),
    ):
        for item in items:
            console.print(f"{verb}: {item}", highlight=False)


@dashboards_app.command("generate")
def dashboards_generate() -> None:
    """Rewrite dashboards/generated/*.json from the builders (for developers)."""
    from hangar.dashboards.provisioning import write_generated

    for path in write_generated():
        console.print(f"wrote {path}", highlight=False)
