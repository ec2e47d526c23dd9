"""`hangar dataset`: the field's datasets validated before a paid trial."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from hangar.cli._app import app
from hangar.console import console, err_console
from hangar.errors import ConfigError

dataset_app = typer.Typer(help="Validate datasets of image tasks (Harbor task directories).")
app.add_typer(dataset_app, name="dataset")


@dataset_app.command("validate")
def dataset_validate(
    dataset: Annotated[
        Path, typer.Argument(help="A sweep file (its image tasks), or a folder of task folders.")
    ],
    repeats: Annotated[
        int, typer.Option(min=1, help="Oracle and nop trials per task (flaky: some oracle fail).")
    ] = 1,
    image_map: Annotated[
        list[str] | None,
        typer.Option("--image-map", help="FROM=TO for a folder (a sweep file has its own)."),
    ] = None,
    store: Annotated[str | None, typer.Option(help="Results store URL.")] = None,
    address: Annotated[str | None, typer.Option(help="Ray cluster to attach to.")] = None,
) -> None:
    """Run the oracle (the task's solution) and the nop agent on every task, as a
    resumable sweep, and record each task version as valid or broken (with the reason).
    Sweeps leave broken and unvalidated tasks out unless run with --include-unvalidated.

    Exit status: 0 every task valid; 1 some broken; 3 some not validated yet.
    """
    from functools import partial

    from hangar.kinds.execution.imagetask import ImageTask
    from hangar.kinds.execution.task_cli import parse_image_map
    from hangar.kinds.execution.validate import validate_dataset
    from hangar.scheduler.batch import run_batch
    from hangar.scheduler.sweep import load_sweep, load_task_folder
    from hangar.store import ResultsStore

    if dataset.is_file():
        sweep = load_sweep(dataset)
        name, tasks = sweep.id, sweep.tasks
        store = store or sweep.config.store
        evidence = sweep.config.evidence
    else:
        name, evidence = dataset.resolve().name, None
        tasks = load_task_folder(dataset, parse_image_map(image_map))
    images = [t for t in tasks if isinstance(t, ImageTask)]
    if not images:
        raise ConfigError(f"{dataset}: no image tasks (Harbor task folders) to validate")
    found = validate_dataset(
        name,
        images,
        partial(run_batch, address=address),
        repeats=repeats,
        store=store,
        evidence=evidence,
    )
    table = Table("task", "validation", "why", title=f"dataset {escape(name)}")
    colour = {"valid": "green", "broken": "red", "unvalidated": "yellow"}
    for v in found:
        table.add_row(escape(v.task_id), f"[{colour[v.status]}]{v.status}[/]", escape(v.reason))
    console.print(table)
    counts = {s: sum(v.status == s for v in found) for s in colour}
    err_console.print(
        f"{counts['valid']} valid, {counts['broken']} broken, {counts['unvalidated']} not "
        f"validated yet (store: {ResultsStore(store).safe_url})",
        highlight=False,
    )
    raise typer.Exit(3 if counts["unvalidated"] else 1 if counts["broken"] else 0)
