"""`hangar store`: the results store."""

from __future__ import annotations

from typing import Annotated

import typer

from hangar.cli._app import app
from hangar.console import console

store_app = typer.Typer(help="The results store.")
app.add_typer(store_app, name="store")


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
