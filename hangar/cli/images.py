"""`hangar image` and `hangar sandbox`: images and throwaway sandboxes."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from hangar.cli._app import app, console, err_console

image_app = typer.Typer(help="Build sandbox images (offline base image, Dockerfiles).")
sandbox_app = typer.Typer(help="Run commands in a throwaway sandbox.")
app.add_typer(image_app, name="image")
app.add_typer(sandbox_app, name="sandbox")


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
    with_cli: Annotated[
        list[str] | None,
        typer.Option("--with", help="Also build <tag>-<cli> with an agent CLI (codex, claude)."),
    ] = None,
) -> None:
    """Build the base sandbox image from Debian's packages, with no registry."""
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
    for cli in with_cli or []:
        from hangar.sandbox.images import build_agent_image

        built = build_agent_image(
            cli, tag, force=force, progress=lambda line: err_console.print(f"[dim]{line}[/]")
        )
        verb = f"built in {built.seconds:.0f} s" if built.built else "is up to date; nothing to do"
        console.print(f"{built.tag} {verb}")


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


@sandbox_app.command(
    "exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def sandbox_exec(
    ctx: typer.Context,
    image: Annotated[str, typer.Option(help="Image of the sandbox.")] = "hangar/base:bookworm",
    backend: Annotated[str, typer.Option(help="Sandbox backend: docker or local.")] = "docker",
    copy_in: Annotated[
        Path | None, typer.Option(help="Host folder copied into the workdir first.")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds before the command is killed.")] = 600,
    as_json: Annotated[bool, typer.Option("--json", help="Print the ExecResult as JSON.")] = False,
) -> None:
    """Run one command (after ``--``) in a fresh sandbox, then remove the sandbox."""
    from hangar.sandbox import SandboxSpec, create_sandbox

    argv = list(ctx.args)
    if not argv:
        raise typer.BadParameter("give the command after --, e.g. hangar sandbox exec -- id")
    with create_sandbox(backend, SandboxSpec(image=image)) as sandbox:
        if copy_in is not None:
            sandbox.copy_in(copy_in, sandbox.spec.workdir)
        result = sandbox.exec(argv, timeout=timeout)
    if as_json:
        console.print_json(result.model_dump_json())
    else:
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        flags = [f for f in ("timed_out", "oom_killed") if getattr(result, f)]
        err_console.print(
            f"[dim]{shlex.join(argv)} -> exit {result.returncode} in {result.duration_s:.2f} s"
            f"{' (' + ', '.join(flags) + ')' if flags else ''}[/]"
        )
    raise typer.Exit(0 if result.ok else 1)
