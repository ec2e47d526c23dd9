"""`hangar evidence`: evidence archives checked."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hangar.cli._app import app
from hangar.console import EndpointOption, StoreOption, console, err_console

evidence_app = typer.Typer(help="Check evidence archives.")
app.add_typer(evidence_app, name="evidence")


@evidence_app.command("verify")
def evidence_verify(
    uri: Annotated[str, typer.Argument(help="Bundle URI (as in the result).")],
    sha256: Annotated[
        str | None, typer.Option(help="The archive sha256 the result recorded.")
    ] = None,
    endpoint: EndpointOption = None,
    store: StoreOption = None,
) -> None:
    """Recompute every hash in a bundle and say what differs (a store:/// bundle, a
    prompt or rubric trial's, is read from the results store)."""
    import tempfile

    from hangar.evidence.archive import verify_archive
    from hangar.evidence.stores import split_uri
    from hangar.results import STORED_PREFIX
    from hangar.store import ResultsStore

    results = ResultsStore(store, create=False) if uri.startswith(STORED_PREFIX) else None
    evidence, key = split_uri(uri, endpoint, results)
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "bundle.tar.gz"
        evidence.get(key, local)
        check = verify_archive(local, sha256)
    if check.ok:
        console.print(f"[green]ok[/] {check.files} files match the manifest; sha256 {check.sha256}")
        raise typer.Exit(0)
    err_console.print(f"[red]bundle differs[/] ({uri}):", highlight=False)
    for problem in check.problems:
        err_console.print(f"  {problem}", highlight=False)
    raise typer.Exit(1)
