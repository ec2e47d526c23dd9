"""`hangar trial`: one trial end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from hangar.cli._app import app
from hangar.console import EndpointOption, JsonFlag, console, print_result
from hangar.errors import ConfigError

if TYPE_CHECKING:
    from hangar.results import TrialResult
    from hangar.trials.kind import Failure

trial_app = typer.Typer(help="Run one trial end to end.")
app.add_typer(trial_app, name="trial")


def _refuse_missing_key(model: object) -> None:
    """A model whose key is not here is refused before the trial (as `hangar run` does)."""
    from hangar.models import ModelSpec, check_keys

    assert isinstance(model, ModelSpec)
    try:
        check_keys([model])
    except ConfigError:
        env = model.key_env
        hint = (
            f" (a server at --base-url that needs no key takes any value: `export {env}=unused`)"
            if model.base_url
            else ""
        )
        raise ConfigError(
            f"model {model.id!r} needs its key in {env}, which is not set here: set it, or "
            f"name the variable that holds it with --api-key-env{hint}; no trial was run"
        ) from None


@trial_app.command("run")
def trial_run(
    scenario: Annotated[
        Path, typer.Argument(help="A task file: a scenario YAML file, a Harbor task.toml.")
    ],
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
        str | None,
        typer.Option(help="Evidence store URL (default: runs/evidence beside the scenario)."),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(help="Results store URL (default: runs/hangar.db beside the scenario)."),
    ] = None,
    no_store: Annotated[
        bool,
        typer.Option(
            "--no-store", help="Record nothing in a results store (the bundle is still kept)."
        ),
    ] = False,
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
    """Run one trial and print its verdict, reason, timings and evidence archive. The result
    is recorded in the results store as a sweep of its own (unless --no-store), so
    'hangar report' and 'hangar view' show it."""
    from hangar.agents import AgentSpec, CommandAgent, load_agents
    from hangar.sandbox.config import backend_settings
    from hangar.trials import Arm, run_trial
    from hangar.trials.kind import Matrix, kind_of, tasks_in
    from hangar.trials.spec import adhoc_sweep_id

    if agent_command is not None:
        spec_agent: AgentSpec = CommandAgent(name=agent or "command", command=agent_command)
    elif agent is not None and agents_file is not None:
        agents = load_agents(agents_file)
        if agent not in agents:
            raise ConfigError(f"{agents_file}: no agent {agent!r} (has: {', '.join(agents)})")
        spec_agent = agents[agent]
    else:
        raise ConfigError("give --agent-command CMD, or --agent NAME with --agents-file FILE")
    found = tasks_in(scenario)
    if len(found) != 1:
        raise ConfigError(
            f"{scenario} holds {len(found)} tasks: `hangar trial run` runs one (a scenario "
            "file, a Harbor task.toml); run a file of several with `hangar run`"
        )
    (task,) = found
    from hangar.models import ModelSpec

    fields = {"id": model, "base_url": base_url, "api_key_env": api_key_env}
    model_spec = ModelSpec.model_validate({k: v for k, v in fields.items() if v is not None})
    _refuse_missing_key(model_spec)
    from hangar.paths import runs_dir
    from hangar.store import ResultsStore

    runs = runs_dir(scenario.resolve().parent)
    results = None if no_store else ResultsStore(store or f"sqlite:///{runs / 'hangar.db'}")
    matrix = Matrix(
        id=adhoc_sweep_id(),
        backend=backend_settings(backend),
        evidence_url=evidence or (runs / "evidence").as_uri(),
    )
    spec = kind_of(task.kind).spec(task, spec_agent, Arm.parse(arm), model_spec, 0, matrix)
    result = run_trial(spec)
    if results is not None:
        config = {"id": spec.sweep, "scenarios": [str(scenario.resolve())], "trial_run": True}
        results.ensure_sweep(spec.sweep, config, 1)
        results.record([result])
    if as_json:
        console.print_json(result.model_dump_json())
        raise typer.Exit(0 if result.verdict == "pass" else 1)
    print_result(result)
    if results is not None:
        console.print(
            f"  recorded as sweep {spec.sweep} in {results.safe_url}: "
            f"hangar report {spec.sweep} --store {results.url}",
            highlight=False,
        )
    raise typer.Exit(0 if result.verdict == "pass" else 1)


@trial_app.command("show")
def trial_show(
    key: Annotated[str, typer.Argument(help="The trial's key, or its first characters.")],
    sweep: Annotated[str | None, typer.Option(help="Look only in this sweep (an id).")] = None,
    store: Annotated[
        str | None, typer.Option(help="Results store URL (default: the local one).")
    ] = None,
    attempt: Annotated[
        int | None, typer.Option(min=1, help="Which attempt (default: the latest).")
    ] = None,
    endpoint: EndpointOption = None,
    as_json: JsonFlag = False,
) -> None:
    """One trial: its verdict, every reason, its checks and scores, and the output of
    what failed, read from its evidence archive (nothing to unpack)."""
    from hangar.trials.kind import kind_of
    from hangar.viewer.data import Evidence

    result, attempts, results = _trial(key, sweep, store, attempt)
    evidence = Evidence(endpoint, results=results)
    try:
        bundle = evidence.archive_of(result) if result.evidence_uri else None
        failing = kind_of(result.kind).failures(bundle.folder) if bundle else []
    finally:
        evidence.close()
    if as_json:
        shown = json.loads(result.model_dump_json())
        shown["failures"] = [f._asdict() for f in failing]
        console.print_json(json.dumps(shown))
        return
    _print_trial(result, attempts, failing)


def _trial(
    key: str, sweep: str | None, store: str | None, attempt: int | None
) -> tuple[Any, int, Any]:
    """The trial whose key starts with `key` (its `attempt`, default the latest), how
    many attempts it has and the results store; an unknown or ambiguous key is refused,
    naming the matches."""
    from hangar.store import ResultsStore

    results = ResultsStore(store, create=False)
    found = results.find_trials(key, sweep)
    if not found:
        where = f"sweep {sweep!r}" if sweep else results.safe_url
        raise ConfigError(f"no trial whose key starts with {key!r} in {where}")
    if len(found) > 1:
        listed = ", ".join(f"{k[:16]} ({s})" for s, k in found[:10])
        raise ConfigError(f"{key!r} is the start of {len(found)} trials' keys: {listed}")
    attempts = results.results_of(*found[0])
    chosen = [r for r in attempts if attempt is None or r.attempt == attempt]
    if not chosen:
        raise ConfigError(f"trial {found[0][1][:16]} has no attempt {attempt}")
    return max(chosen, key=lambda r: r.attempt), len(attempts), results


@trial_app.command("trajectory")
def trial_trajectory(
    key: Annotated[str, typer.Argument(help="The trial's key, or its first characters.")],
    sweep: Annotated[str | None, typer.Option(help="Look only in this sweep (an id).")] = None,
    store: Annotated[
        str | None, typer.Option(help="Results store URL (default: the local one).")
    ] = None,
    attempt: Annotated[
        int | None, typer.Option(min=1, help="Which attempt (default: the latest).")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Write to this file.")] = None,
    endpoint: EndpointOption = None,
) -> None:
    """The trial's agent session as an ATIF trajectory (v1.7, Harbor's trajectory.json),
    from its evidence archive."""
    from hangar.trajectories import trial_trajectory as build
    from hangar.viewer.data import Evidence

    result, _, results = _trial(key, sweep, store, attempt)
    evidence = Evidence(endpoint, results=results)
    try:
        bundle = evidence.archive_of(result)
        if bundle is None:
            raise ConfigError(f"trial {result.trial_key[:16]} has no evidence archive")
        doc = build(result, bundle.folder)
    finally:
        evidence.close()
    text = json.dumps(doc, indent=1) + "\n"
    if out is not None:
        out.write_text(text)
        console.print(f"wrote {out}")
    else:
        console.out(text, highlight=False)


def _print_trial(result: TrialResult, attempts: int, failing: list[Failure]) -> None:
    """A trial for people; everything from the trial is escaped (it is hostile)."""
    colour = {"pass": "green", "fail": "red", "void": "magenta"}.get(result.verdict, "yellow")
    console.print(
        f"[bold]{escape(result.scenario_id)}[/] · {escape(result.agent)} · "
        f"{escape(result.model)} · {escape(result.arm)} · repeat {result.repeat} · attempt "
        f"{result.attempt} of {attempts} -> [bold {colour}]{result.verdict.value}[/]",
        highlight=False,
    )
    console.print(f"  sweep {escape(result.sweep)}, key {result.trial_key}", highlight=False)
    for reason in result.reason.split("; "):
        console.print(f"  - {escape(reason)}", highlight=False)
    for check in result.checks:
        console.print(f"  check {check.status}: {escape(check.requirement)}", highlight=False)
    for score in result.scores:
        console.print(f"  score {escape(score.metric)} = {score.value}", highlight=False)
    for failure in failing:
        console.print(f"[bold]{escape(failure.what)}[/]", highlight=False)
        console.print(escape(failure.output) or "  (no output)", highlight=False)
    console.print(f"  evidence: {escape(result.evidence_uri or 'none')}", highlight=False)
