"""`hangar image`: sandbox images (the offline base image, Dockerfiles)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hangar.cli._app import app
from hangar.console import console, err_console

image_app = typer.Typer(help="Build sandbox images (offline base image, Dockerfiles).")
app.add_typer(image_app, name="image")


@image_app.command("build-base")
def image_build_base(
    tag: Annotated[str, typer.Option(help="Tag of the image to build.")] = "hangar/base:bookworm",
    mirror: Annotated[
        str | None,
        typer.Option(
            help="Debian mirror (default: $HANGAR_DEBIAN_MIRROR, else the one apt uses here)."
        ),
    ] = None,
    package: Annotated[
        list[str] | None, typer.Option("--package", "-p", help="Extra Debian package (repeatable).")
    ] = None,
    force: Annotated[bool, typer.Option(help="Rebuild even when the image is up to date.")] = False,
) -> None:
    """Build the base sandbox image from Debian's packages, with no registry, and its stock
    variant ``<tag>-stock`` (root by default, ``/`` as its working directory, as stock
    Debian images are: the image that a task's ``FROM debian:*`` is mapped onto offline);
    and this node's sandbox helper (the static program hangar runs in every sandbox)."""
    from hangar.sandbox.images import BaseImageRecipe, build_base_image

    recipe = BaseImageRecipe(extra_packages=tuple(package or ()))
    if mirror:
        recipe = recipe.model_copy(update={"mirror": mirror})
    outcome = build_base_image(
        tag, recipe, force=force, progress=lambda line: err_console.print(f"[dim]{line}[/]")
    )
    if outcome.built:
        console.print(f"built {outcome.tag} ({outcome.image_id[:19]}) in {outcome.seconds:.0f} s")
    else:
        console.print(f"{outcome.tag} is up to date (recipe {recipe.digest()[:12]}); nothing to do")
    from hangar.sandbox.task_images import stock_image

    stock = stock_image(tag)
    console.print(f"{stock.tag}: the stock variant (root, /) that image maps point debian:* at")
    from hangar.sandbox.helper import helper_binary

    console.print(f"hangar's sandbox helper: {helper_binary()}", highlight=False)


@image_app.command("build")
def image_build(
    context: Annotated[Path, typer.Argument(help="Folder with the Dockerfile.", exists=True)],
    tag: Annotated[str, typer.Option(help="Tag of the image to build.")],
    file: Annotated[str, typer.Option(help="Dockerfile name inside the folder.")] = "Dockerfile",
    network: Annotated[
        str, typer.Option(help="Network of RUN steps (none keeps builds offline).")
    ] = "none",
) -> None:
    """Build a Dockerfile (``FROM`` a local image works offline)."""
    from hangar.sandbox.images import build_dockerfile_image

    outcome = build_dockerfile_image(
        context,
        tag,
        dockerfile=file,
        network=network,
        progress=lambda line: err_console.print(f"[dim]{line}[/]", markup=False),
    )
    console.print(f"built {outcome.tag} ({outcome.image_id[:19]}) in {outcome.seconds:.0f} s")
