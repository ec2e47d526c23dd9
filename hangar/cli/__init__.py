"""The `hangar` command line (Typer): one module per command group (`hangar/cli/<group>.py`,
and each kind's own group in its package, `hangar/kinds/<kind>/cli.py`)."""

from hangar.cli import (
    agents,
    baseline,
    cluster,
    dashboards,
    evidence,
    image,
    model,
    report,
    run,
    sandbox,
    sessions,
    store,
    suite,
    sweep,
    trial,
    view,
)
from hangar.cli._app import add_kind_groups, app, main

add_kind_groups()

__all__ = [
    "agents",
    "app",
    "baseline",
    "cluster",
    "dashboards",
    "evidence",
    "image",
    "main",
    "model",
    "report",
    "run",
    "sandbox",
    "sessions",
    "store",
    "suite",
    "sweep",
    "trial",
    "view",
]
