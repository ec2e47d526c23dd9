"""`hangar dashboards` (export, push, generate) and `hangar store copy`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from hangar.cli._app import app, console

dashboards_app = typer.Typer(help="Grafana dashboards: export files, push to a Grafana.")
store_app = typer.Typer(help="The results store.")
app.add_typer(dashboards_app, name="dashboards")
app.add_typer(store_app, name="store")


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


@store_app.command("copy")
def store_copy(
    source: Annotated[
        str, typer.Option("--from", help="Store to read (e.g. sqlite:///runs/hangar.db).")
    ],
    target: Annotated[str, typer.Option("--to", help="Store to write (postgresql+psycopg://...).")],
) -> None:
    """Copy every result into another store (rows already there are kept)."""
    from hangar.store import ResultsStore, copy_store

    counts = copy_store(ResultsStore(source), ResultsStore(target))
    console.print(", ".join(f"{n} {table}" for table, n in counts.items()) + " copied")
