"""`hangar task`: Harbor task directories checked before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from hangar.console import console, err_console
from hangar.errors import HangarError

app = typer.Typer(help="Check Harbor task directories (one task, or a dataset of them).")


def parse_pairs(pairs: list[str] | None, option: str) -> dict[str, str]:
    """``KEY=VALUE`` options as a mapping (``--image-map 'ubuntu:*=my/ubuntu:24.04'``)."""
    mapping = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key or not value:
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint=option)
        mapping[key] = value
    return mapping


@app.command("check")
def task_check(
    paths: Annotated[
        list[Path], typer.Argument(help="Task folders, or datasets (folders of them).")
    ],
    image_map: Annotated[
        list[str] | None,
        typer.Option("--image-map", help="FROM=TO: rewrite an image reference (repeatable)."),
    ] = None,
    build: Annotated[
        bool,
        typer.Option(
            help="Also build each task's image (its RUN steps reach only the package registries)."
        ),
    ] = False,
) -> None:
    """Validate Harbor tasks (task.toml fields, files, what hangar cannot honour) and print
    each one's digest; with --build, build their images too. Exit 1 if any is unusable."""
    from hangar.kinds.execution.harbor.tasks import load_task, task_files

    mapping = parse_pairs(image_map, "--image-map")
    bad = 0
    for folder in paths:
        files = task_files(folder) if folder.is_dir() else []
        if not files:
            err_console.print(
                f"[red]x[/] {folder}: no task.toml in it or under it", highlight=False
            )
            bad += 1
        for path in files:
            try:
                task = load_task(path).configured(image_map=mapping, threshold=None)
                problems = list(task.blocked) + (_build_problem(task) if build else [])
            except HangarError as exc:
                err_console.print(f"[red]x[/] {escape(str(exc))}", highlight=False)
                bad += 1
                continue
            for note in task.notes:
                err_console.print(
                    f"[yellow]![/] {escape(task.id)}: {escape(note)}", highlight=False
                )
            if problems:
                bad += 1
                err_console.print(
                    f"[red]x[/] {escape(task.id)}  {escape(str(path.parent))}", highlight=False
                )
                for problem in problems:
                    err_console.print(f"    {problem}", highlight=False, markup=False)
            else:
                console.print(
                    f"[green]ok[/] {task.id} sha256:{task.digest}  {path.parent}", highlight=False
                )
    raise typer.Exit(1 if bad else 0)


def _build_problem(task: object) -> list[str]:
    """Why the task's image does not build ([] when it does)."""
    import tempfile

    from hangar.errors import ImageBuildError
    from hangar.kinds.execution.images.build_network import build_networks
    from hangar.kinds.execution.images.task import ImageTask
    from hangar.sandbox.task_images import ensure_task_image

    assert isinstance(task, ImageTask)
    if task.image.context is None:
        return []
    try:
        with tempfile.TemporaryDirectory() as audit:
            ensure_task_image(
                task.id,
                task.local(task.image.context),
                dockerfile=task.image.dockerfile,
                mapped=task.mapped,
                timeout_s=task.image.build_timeout_s,
                network=build_networks(task, Path(audit) / "network.jsonl"),
            )
    except ImageBuildError as exc:
        return [f"the image does not build: {exc}"]
    return []
