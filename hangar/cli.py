"""The `hangar` command line: parse, build the config model, call a library function.

Every command here is a thin layer over a function callable from Python. A
`HangarError` is printed as one clear message (no traceback) with a non-zero exit.
"""

from __future__ import annotations

import logging
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from hangar import __version__
from hangar.errors import ConfigError, HangarError
from hangar.results import TrialResult

app = typer.Typer(
    name="hangar",
    help="A container-sandboxed execution farm for evaluating AI coding agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
image_app = typer.Typer(help="Build sandbox images (offline base image, Dockerfiles).")
sandbox_app = typer.Typer(help="Run commands in a throwaway sandbox.")
scenario_app = typer.Typer(help="Validate scenarios and print their digests.")
trial_app = typer.Typer(help="Run one trial end to end.")
evidence_app = typer.Typer(help="Check evidence bundles.")
app.add_typer(image_app, name="image")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(scenario_app, name="scenario")
app.add_typer(trial_app, name="trial")
app.add_typer(evidence_app, name="evidence")

# Soft wrap: a command to copy or a URI in a message is never broken across lines.
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


@app.command()
def version() -> None:
    """Print hangar's version."""
    console.print(f"hangar {__version__}")


@image_app.command("build-base")
def image_build_base(
    tag: Annotated[str, typer.Option(help="Tag of the image to build.")] = "hangar/base:bookworm",
    mirror: Annotated[
        str | None,
        typer.Option(help="Debian mirror (default: $HANGAR_DEBIAN_MIRROR or deb.debian.org)."),
    ] = None,
    package: Annotated[
        list[str] | None, typer.Option("--package", "-p", help="Extra Debian package (repeatable).")
    ] = None,
    force: Annotated[bool, typer.Option(help="Rebuild even when the image is up to date.")] = False,
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


@scenario_app.command("check")
def scenario_check(
    files: Annotated[list[Path], typer.Argument(help="Scenario YAML files.")],
    backend: Annotated[str, typer.Option(help="Backend whose images to check.")] = "docker",
) -> None:
    """Validate scenarios (schema, pins, files, revision, image) and print each digest."""
    from hangar.paths import cache_dir
    from hangar.sandbox import sandbox_class
    from hangar.sandbox.workspace import MirrorCache
    from hangar.scenario import load_scenario
    from hangar.verifiers.admission import fixture_problems

    seen: dict[str, Path] = {}
    bad = 0
    for path in files:
        try:
            loaded = load_scenario(path)
        except HangarError as exc:
            err_console.print(f"[red]x[/] {exc}", highlight=False)
            bad += 1
            continue
        sid = loaded.scenario.id
        problems = fixture_problems(
            loaded,
            tuple(p.name for p in loaded.scenario.plugins),
            mirrors=MirrorCache(cache_dir() / "mirrors"),
            image_problem=sandbox_class(backend).image_problem,
        )
        if sid in seen:
            problems.append(f"duplicate scenario id {sid!r} (also in {seen[sid]})")
        seen[sid] = path
        if problems:
            bad += 1
            err_console.print(f"[red]x[/] {path}: {sid}", highlight=False)
            for problem in problems:
                err_console.print(f"    {problem}", highlight=False)
        else:
            console.print(f"[green]ok[/] {sid} sha256:{loaded.digest}  {path}", highlight=False)
    raise typer.Exit(1 if bad else 0)


@scenario_app.command("pin")
def scenario_pin(files: Annotated[list[Path], typer.Argument(help="Scenario YAML files.")]) -> None:
    """Re-pin prepare and verifier scripts to their current sha256 (after a reviewed edit)."""
    from hangar.scenario import repin

    for path in files:
        changed = repin(path)
        for script, old, new in changed:
            console.print(f"{path}: {script} {old[:19]}... -> {new[:19]}...", highlight=False)
        if not changed:
            console.print(f"{path}: pins are current", highlight=False)


@trial_app.command("run")
def trial_run(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    agent_command: Annotated[
        str | None, typer.Option(help="Run this command line as the agent.")
    ] = None,
    agent: Annotated[str | None, typer.Option(help="Agent name in --agents-file.")] = None,
    agents_file: Annotated[
        Path | None, typer.Option(help="YAML mapping of agent names to configs.")
    ] = None,
    arm: Annotated[
        str, typer.Option(help="Arm: NAME or NAME=plugin1,plugin2 (control: none).")
    ] = "control",
    evidence: Annotated[
        str | None, typer.Option(help="Evidence store URL (default file://./runs/evidence).")
    ] = None,
    backend: Annotated[str, typer.Option(help="Sandbox backend: docker or local.")] = "docker",
    as_json: Annotated[bool, typer.Option("--json", help="Print the TrialResult as JSON.")] = False,
) -> None:
    """Run one trial and print its verdict, reason, timings and evidence bundle."""
    from hangar.agents import CommandAgent, load_agents
    from hangar.scenario import load_scenario
    from hangar.scheduler.keys import Arm
    from hangar.trial import run_trial, single_trial

    if agent_command is not None:
        spec_agent = CommandAgent(name=agent or "command", command=agent_command)
    elif agent is not None and agents_file is not None:
        agents = load_agents(agents_file)
        if agent not in agents:
            raise ConfigError(f"{agents_file}: no agent {agent!r} (has: {', '.join(agents)})")
        spec_agent = agents[agent]
    else:
        raise ConfigError("give --agent-command CMD, or --agent NAME with --agents-file FILE")
    loaded = load_scenario(scenario)
    result = run_trial(
        single_trial(loaded, spec_agent, Arm.parse(arm), backend=backend, evidence_url=evidence)
    )
    if as_json:
        console.print_json(result.model_dump_json())
    else:
        print_result(result)
    raise typer.Exit(0 if result.verdict == "pass" else 1)


def print_result(result: TrialResult) -> None:
    """A trial's verdict, reason, timings and bundle, for people."""
    colour = {"pass": "green", "fail": "red", "void": "magenta"}.get(result.verdict, "yellow")
    console.print(
        f"[bold]{result.scenario_id}[/] agent={result.agent} arm={result.arm} -> "
        f"[bold {colour}]{result.verdict.value}[/]",
        highlight=False,
    )
    console.print(f"  reason: {result.reason}", highlight=False)
    phases = ", ".join(f"{k} {v:.2f}s" for k, v in result.timings.items())
    console.print(f"  timings ({result.duration_s:.1f} s): {phases}", highlight=False)
    console.print(
        f"  evidence: {result.evidence_uri} (sha256 {result.evidence_sha256})", highlight=False
    )


@evidence_app.command("verify")
def evidence_verify(
    uri: Annotated[str, typer.Argument(help="Bundle URI (as in the result).")],
    sha256: Annotated[
        str | None, typer.Option(help="The archive sha256 the result recorded.")
    ] = None,
) -> None:
    """Recompute every hash in a bundle and say what differs."""
    import tempfile

    from hangar.verifiers.bundle import verify_bundle
    from hangar.verifiers.store import split_uri

    store, key = split_uri(uri)
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "bundle.tar.gz"
        store.get(key, local)
        check = verify_bundle(local, sha256)
    if check.ok:
        console.print(f"[green]ok[/] {check.files} files match the manifest; sha256 {check.sha256}")
        raise typer.Exit(0)
    err_console.print(f"[red]bundle differs[/] ({uri}):", highlight=False)
    for problem in check.problems:
        err_console.print(f"  {problem}", highlight=False)
    raise typer.Exit(1)


def main() -> None:
    """Entry point of the `hangar` console script."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except HangarError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(2)
