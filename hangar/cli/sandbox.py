"""`hangar sandbox`: commands in a throwaway sandbox."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from hangar.cli._app import app
from hangar.console import console, err_console

sandbox_app = typer.Typer(help="Run commands in a throwaway sandbox.")
app.add_typer(sandbox_app, name="sandbox")


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
