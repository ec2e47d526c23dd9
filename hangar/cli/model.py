"""`hangar model`: models without a provider (a scripted model to try a scenario offline)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from hangar.cli._app import app
from hangar.console import console

model_app = typer.Typer(help="Models without a provider: a scripted model on loopback.")
app.add_typer(model_app, name="model")


@model_app.command("serve")
def model_serve(
    script: Annotated[Path, typer.Argument(help="Script file (conversations and replies).")],
    port: Annotated[int, typer.Option(help="Port (0: any free one).")] = 8765,
    host: Annotated[
        str,
        typer.Option(help="Address to listen on (0.0.0.0: every interface, for other machines)."),
    ] = "127.0.0.1",
) -> None:
    """Serve a scripted model (on loopback unless --host) until Ctrl-C: it
    answers the OpenAI, Anthropic
    and Gemini APIs from the script (its format: the models-and-agents guide), so sweeps
    run without a key.
    Give its models ``base_url: http://127.0.0.1:PORT/v1`` and any key variable."""
    from hangar.testing.scripted import Script, ScriptedServer

    server = ScriptedServer(Script.load(script), port=port, host=host).start()
    where = f"http://{host}:{server.server_address[1]}"
    console.print(f"scripted model on {where}/v1 (Ctrl-C to stop)", highlight=False)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
