"""`hangar view`: the local web viewer (`hangar.viewer`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from hangar.cli._app import app
from hangar.console import EndpointOption, console, err_console
from hangar.errors import ConfigError


@app.command("view")
def view(
    sweep: Annotated[
        Path | None,
        typer.Argument(
            help="A sweep file: open its results store (default: --store, else ./runs).",
            metavar="SWEEP",
        ),
    ] = None,
    store: Annotated[
        str | None, typer.Option(help="Results store URL (default: the local one).")
    ] = None,
    evidence: Annotated[
        str | None,
        typer.Option(help="Evidence store to read bundles from when a result's own URI fails."),
    ] = None,
    endpoint: EndpointOption = None,
    knowledge: Annotated[
        list[Path] | None, typer.Option(help="A knowledge suite to show (repeat).")
    ] = None,
    host: Annotated[
        str, typer.Option(help="Address to listen on (loopback by default).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8470,
    margin: Annotated[
        float | None,
        typer.Option(help="Comparisons' margin, in points (default: each sweep's, else 5)."),
    ] = None,
) -> None:
    """Browse sweeps, trials, transcripts, evidence and scores in a local web page."""
    import uvicorn

    from hangar.store import ResultsStore
    from hangar.viewer.app import Viewer, make_app

    if sweep is not None and store is None:
        from hangar.scheduler.sweep import load_sweep

        if not sweep.is_file():
            raise ConfigError(f"file not found: {sweep} (give a sweep file)")
        store = load_sweep(sweep).config.store
    if host not in ("127.0.0.1", "localhost", "::1"):
        err_console.print(
            f"[yellow]listening on {host}: anyone who reaches it reads every trial's evidence[/]",
            highlight=False,
        )
    viewer = Viewer(
        ResultsStore(store, create=False),
        endpoint=endpoint,
        evidence=evidence,
        knowledge=knowledge,
        margin=None if margin is None else margin / 100,
    )

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:  # said once it answers, not before; the port it got (--port 0)
                bound = [s.getsockname()[1] for srv in self.servers for s in srv.sockets]
                url = f"http://{host}:{bound[0] if bound else port}/"
                console.print(f"hangar view on {url} (Ctrl-C stops it)", highlight=False)

    config = uvicorn.Config(make_app(viewer), host=host, port=port, log_level="warning")
    try:
        Server(config).run()
    finally:
        viewer.close()
