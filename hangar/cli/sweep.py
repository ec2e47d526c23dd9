"""`hangar sweep`: sweep files checked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from hangar.cli._app import app, given_fixtures
from hangar.console import console, err_console

if TYPE_CHECKING:
    from hangar.scheduler.sweep import Sweep
    from hangar.scores.estimate import Estimate
    from hangar.trials.spec import TrialSpec

sweep_app = typer.Typer(help="Check sweep files.")
app.add_typer(sweep_app, name="sweep")


@sweep_app.command("check")
def sweep_check(
    sweep_file: Annotated[Path, typer.Argument(help="Sweep YAML file.")],
    deep: Annotated[
        bool, typer.Option(help="Also check each scenario's revision and image.")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the check as JSON.")] = False,
    estimate: Annotated[
        bool,
        typer.Option(
            "--estimate",
            help="Also estimate the cost and tokens of the trials still to run, from "
            "earlier trials in the store.",
        ),
    ] = False,
    fixtures: Annotated[
        Path | None,
        typer.Option(
            envvar="HANGAR_FIXTURES",
            help="Fixture registry to check the sweep with (as `hangar run --fixtures`).",
        ),
    ] = None,
) -> None:
    """Print the matrix size, how it adds up, and every problem found; with --estimate,
    what the trials still to run are expected to cost. Exit 1 when there is a problem."""
    from hangar.scheduler.sweep import load_sweep
    from hangar.trials.kind import kind_of

    sweep = load_sweep(sweep_file, given_fixtures(fixtures))
    c, matrix = sweep.config, sweep.matrix()
    terms = sweep.breakdown()
    problems = [f"{bad.path} does not load: {bad.error}" for bad in sweep.unloadable]
    for task in sweep.tasks:
        problems += kind_of(task.kind).problems(task, matrix, deep=deep)
    problems = list(dict.fromkeys(problems))
    unpriced = _unpriced(c.models)
    guess = _estimate(sweep) if estimate else None
    if as_json:
        console.print_json(
            json.dumps(
                {
                    "sweep": sweep.id,
                    "trials": sweep.size,
                    "terms": terms,
                    "models": len(c.models),
                    "repeats": c.repeats,
                    "problems": problems,
                    "unpriced": unpriced,
                    **({"estimate": guess.model_dump()} if guess else {}),
                }
            )
        )
        raise typer.Exit(1 if problems else 0)
    words = [
        f"{t['tasks']} {'unloadable file(s) of ' if t['unloadable'] else ''}{t['kind']} "
        f"x {t['agents']} agents x {t['arms']} arms"
        for t in terms
    ]
    total = " + ".join(words) or "no task"
    if len(words) > 1:
        total = f"({total})"
    console.print(
        f"{sweep.id}: {total} x {len(c.models)} models x {c.repeats} repeats = {sweep.size} trials",
        highlight=False,
    )
    if guess is not None:
        _print_estimate(guess)
    for model, note in unpriced.items():
        err_console.print(f"[yellow]![/] model {escape(model)}: {escape(note)}", highlight=False)
    for problem in problems:
        err_console.print(f"[red]x[/] {escape(problem)}", highlight=False)
    raise typer.Exit(1 if problems else 0)


def _unpriced(models: list[Any]) -> dict[str, str]:
    """Each model hangar cannot price (no `price` in the sweep, not in the price table),
    with the nearest id the table knows: a typo is caught before a run asks its provider."""
    from hangar.models.pricing import has_price, nearest_priced

    found: dict[str, str] = {}
    for model in models:
        provider = model.price_table
        if model.provider == "none" or has_price(model.id, provider, model.price):
            continue
        near = nearest_priced(model.id, provider)
        hint = f"; did you mean {near}?" if near else ""
        found[model.id] = f"no price known (its cost will be recorded as 0: set `price`){hint}"
    return found


def _estimate(sweep: Sweep) -> Estimate:
    """The sweep's estimate from its store (no store yet: every trial unknown)."""
    from hangar.errors import StoreError
    from hangar.scores.estimate import estimate
    from hangar.store import ResultsStore

    try:  # a check creates no store
        store: ResultsStore | None = ResultsStore(sweep.config.store, create=False)
    except StoreError as exc:
        err_console.print(
            f"[yellow]![/] {escape(str(exc))}: nothing to estimate from", highlight=False
        )
        store = None
    final = store.resume_state(sweep.id)[0] if store is not None else set()
    return estimate(sweep.trials(sweep.config.evidence or ""), store, final, token_guess)


def token_guess(spec: TrialSpec) -> tuple[int, int] | None:
    """A trial's tokens told from its task by its kind (`Kind.token_guess`)."""
    from hangar.trials.kind import kind_of

    return kind_of(spec.task.kind).token_guess(spec)


def _print_estimate(guess: Estimate) -> None:
    from hangar.console import usd

    console.print(
        f"estimate: {guess.to_run} of {guess.trials} trials still to run, about "
        f"{usd(guess.cost_usd)} (95% interval {usd(guess.low_usd)} to {usd(guess.high_usd)}), "
        f"{guess.tokens_in} tokens in, {guess.tokens_out} out",
        highlight=False,
    )
    from hangar.scores.estimate import PROMPT_BASIS

    for basis in guess.basis:
        source = basis.what if basis.what == PROMPT_BASIS else f"earlier trials of the {basis.what}"
        console.print(f"  {basis.trials} from {source}", highlight=False)
    for unknown in guess.unknown:
        err_console.print(
            f"[yellow]![/] not estimated (no earlier trial; its tokens cannot be told from the "
            f"task, or its model has no price): {escape(unknown)}",
            highlight=False,
        )
