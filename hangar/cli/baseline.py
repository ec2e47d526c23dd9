"""`hangar baseline`: immutable snapshots of a sweep's scores."""

from __future__ import annotations

from typing import Annotated

import typer

from hangar.cli._app import app, resolve_sweep
from hangar.console import StoreOption, console

baseline_app = typer.Typer(help="Immutable snapshots of a sweep's scores.")
app.add_typer(baseline_app, name="baseline")


@baseline_app.command("create")
def baseline_create(
    from_sweep: Annotated[str, typer.Option("--from", help="Sweep file or id.")],
    name: Annotated[
        str | None,
        typer.Argument(help="Baseline name (never reused; default: the next baseline-vN)."),
    ] = None,
    store: StoreOption = None,
) -> None:
    """Snapshot a sweep's scores under NAME (an existing name is refused; without one, the
    next version: baseline-v1, baseline-v2, ...)."""
    from hangar.scores.baseline import create_baseline

    sweep_id, _, results = resolve_sweep(from_sweep, store)
    snap = create_baseline(results, name, sweep_id)
    console.print(f"baseline {snap.name}: {len(snap.groups)} group(s) from sweep {sweep_id}")


@baseline_app.command("list")
def baseline_list(store: StoreOption = None) -> None:
    """Every baseline in the store."""
    from hangar.scores.baseline import baseline_names
    from hangar.store import ResultsStore

    for name, sweep, created in baseline_names(ResultsStore(store, create=False)):
        console.print(f"{name}  sweep={sweep}  {created:%Y-%m-%d %H:%M}")
