"""`hangar scenario`, `hangar trial` and `hangar evidence`: one trial and its evidence."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hangar.cli._app import app, console, err_console, print_result
from hangar.errors import ConfigError, HangarError

scenario_app = typer.Typer(help="Validate scenarios, print their digests, re-pin scripts.")
trial_app = typer.Typer(help="Run one trial end to end.")
evidence_app = typer.Typer(help="Check evidence bundles.")
app.add_typer(scenario_app, name="scenario")
app.add_typer(trial_app, name="trial")
app.add_typer(evidence_app, name="evidence")


@scenario_app.command("check")
def scenario_check(
    files: Annotated[list[Path], typer.Argument(help="Scenario YAML files.")],
    backend: Annotated[str, typer.Option(help="Backend whose images to check.")] = "docker",
) -> None:
    """Validate scenarios (schema, pins, files, revision, image) and print each digest."""
    from hangar.kinds.execution.admission import fixture_problems
    from hangar.kinds.execution.scenario import load_scenario
    from hangar.paths import cache_dir
    from hangar.sandbox import sandbox_class
    from hangar.sandbox.workspace import MirrorCache

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
    from hangar.kinds.execution.scenario import repin

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
    model: Annotated[str, typer.Option(help="Model id (none: the agent calls no model).")] = "none",
    base_url: Annotated[
        str | None, typer.Option(help="The model's endpoint (an OpenAI-compatible URL).")
    ] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="Host variable holding the model's key.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the TrialResult as JSON.")] = False,
) -> None:
    """Run one trial and print its verdict, reason, timings and evidence bundle."""
    from hangar.agents import AgentSpec, CommandAgent, load_agents
    from hangar.kinds.execution import single_trial
    from hangar.kinds.execution.scenario import load_scenario
    from hangar.trials import Arm, run_trial

    if agent_command is not None:
        spec_agent: AgentSpec = CommandAgent(name=agent or "command", command=agent_command)
    elif agent is not None and agents_file is not None:
        agents = load_agents(agents_file)
        if agent not in agents:
            raise ConfigError(f"{agents_file}: no agent {agent!r} (has: {', '.join(agents)})")
        spec_agent = agents[agent]
    else:
        raise ConfigError("give --agent-command CMD, or --agent NAME with --agents-file FILE")
    loaded = load_scenario(scenario)
    from hangar.models import ModelSpec

    fields = {"id": model, "base_url": base_url, "api_key_env": api_key_env}
    model_spec = ModelSpec.model_validate({k: v for k, v in fields.items() if v is not None})
    result = run_trial(
        single_trial(
            loaded,
            spec_agent,
            Arm.parse(arm),
            backend=backend,
            evidence_url=evidence,
            model=model_spec,
        )
    )
    if as_json:
        console.print_json(result.model_dump_json())
    else:
        print_result(result)
    raise typer.Exit(0 if result.verdict == "pass" else 1)


@evidence_app.command("verify")
def evidence_verify(
    uri: Annotated[str, typer.Argument(help="Bundle URI (as in the result).")],
    sha256: Annotated[
        str | None, typer.Option(help="The archive sha256 the result recorded.")
    ] = None,
    endpoint: Annotated[
        str | None, typer.Option(help="S3 endpoint URL (default: the AWS settings).")
    ] = None,
) -> None:
    """Recompute every hash in a bundle and say what differs."""
    import tempfile

    from hangar.verifiers.bundle import verify_bundle
    from hangar.verifiers.store import split_uri

    store, key = split_uri(uri, endpoint)
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
