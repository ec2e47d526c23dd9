"""`hangar store`: the results store."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from hangar.cli._app import app
from hangar.console import JsonFlag, console, usd

store_app = typer.Typer(help="The results store.")
app.add_typer(store_app, name="store")


@store_app.command("copy")
def store_copy(
    target: Annotated[str, typer.Option("--to", help="Store to write (postgresql+psycopg://...).")],
    source: Annotated[
        str | None,
        typer.Option("--from", help="Store to read (default: the local one, ./runs/hangar.db)."),
    ] = None,
) -> None:
    """Copy every result into another store (the dashboards' PostgreSQL): rows already
    there are kept, so run it again after each sweep and it copies what is new."""
    from hangar.store import ResultsStore, copy_store

    src = ResultsStore(source, create=False)
    dst = ResultsStore(target)
    counts = copy_store(src, dst)
    new = ", ".join(f"{n} new {table}" for table, n in counts.items() if n) or "nothing new"
    console.print(
        f"{src.safe_url} -> {dst.safe_url}: {counts['trials']} new trials ({new})",
        highlight=False,
    )


def list_sweeps(
    store: Annotated[
        str | None,
        typer.Option(help="Results store URL (default: the local one, ./runs/hangar.db)."),
    ] = None,
    as_json: JsonFlag = False,
    limit: Annotated[int, typer.Option(min=1, help="Show at most N sweeps, newest first.")] = 50,
) -> None:
    """The sweeps in a results store, newest first: trials run of the matrix, pass rate
    of the counted trials, agents, models and cost."""
    from hangar.catalog import Catalog, Filters
    from hangar.store import ResultsStore

    results = ResultsStore(store, create=False)
    rows, total = Catalog(results).sweeps(Filters(), 0, limit)
    if as_json:
        data = [r.model_dump(mode="json") | {"pass_rate": r.pass_rate} for r in rows]
        console.print_json(json.dumps({"store": results.safe_url, "total": total, "sweeps": data}))
        return
    table = Table()
    table.add_column("sweep", overflow="fold", ratio=3)
    table.add_column("updated (UTC)", no_wrap=True)
    for name in ("trials", "pass rate"):
        table.add_column(name, no_wrap=True, justify="right")
    for name in ("agents", "models"):
        table.add_column(name, overflow="fold", ratio=2)
    table.add_column("cost", no_wrap=True, justify="right")
    for r in rows:
        rate = "n/a" if r.pass_rate is None else f"{r.pass_rate * 100:.1f}%"
        table.add_row(
            escape(r.id),
            f"{r.updated_at:%Y-%m-%d %H:%M}",
            f"{r.done}/{r.total}",
            rate,
            escape(", ".join(r.agents)),
            escape(", ".join(r.models)),
            usd(r.cost_usd),
        )
    console.print(table)
    more = f" (the newest {len(rows)} shown: --limit)" if total > len(rows) else ""
    console.print(f"{total} sweep(s) in {results.safe_url}{more}", highlight=False)


app.command("sweeps")(list_sweeps)
store_app.command("list")(list_sweeps)
