"""`hangar run`, `hangar status`, `hangar gc`: sweeps run, watched and cleaned up."""

from __future__ import annotations

import contextlib
import json
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hangar.cli._app import app, given_fixtures, latest_run, resolve_sweep
from hangar.console import console, err_console, reserve_stdout
from hangar.errors import ConfigError
from hangar.logs import LogFormat
from hangar.logs import configure as configure_logs
from hangar.results import COUNTED_VERDICTS, Verdict

if TYPE_CHECKING:
    from hangar.scheduler.driver import SweepTally
    from hangar.scheduler.sweep import Sweep
    from hangar.store import ResultsStore


@app.command("run")
def run(
    sweep_file: Annotated[Path, typer.Argument(help="Sweep YAML file.")],
    address: Annotated[
        str | None,
        typer.Option(
            help="Ray cluster to attach to (default: the head `hangar cluster start` left "
            "running on this machine, else an embedded Ray; `embedded`: always embedded)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON.")] = False,
    allow_failures: Annotated[
        bool,
        typer.Option(
            help="Failed trials are expected results (a model comparison): exit 0 when every "
            "trial reached pass or fail."
        ),
    ] = False,
    filter_: Annotated[
        str | None,
        typer.Option(
            "--filter",
            "--filter-pattern",
            help="Only scenarios and decision cases whose id matches (a regular expression, "
            "searched: 'tdd:' selects tdd:bug-report-first-step).",
        ),
    ] = None,
    repeat: Annotated[
        int | None, typer.Option(min=1, help="Repeats of each trial (instead of the file's).")
    ] = None,
    new: Annotated[
        bool,
        typer.Option(
            "--new",
            help="Start a new run of the sweep (its id and the UTC time: "
            "statkit-demo.20261203-171207) instead of resuming the latest one.",
        ),
    ] = False,
    fixtures: Annotated[
        Path | None,
        typer.Option(
            envvar="HANGAR_FIXTURES",
            help="Fixture registry (a JSON list of {caseId, repository, revision, context, "
            "prepare?, verifier}) binding scenarios to local repositories and host scripts, "
            "instead of the sweep's `fixtures:`.",
        ),
    ] = None,
    log_format: Annotated[
        LogFormat,
        typer.Option(
            help="`json`: one JSON object per line on stderr (a sweep's start and end, every "
            "trial's verdict, warnings) for log shippers, instead of the live view.",
        ),
    ] = LogFormat.text,
    include_unvalidated: Annotated[
        bool,
        typer.Option(
            help="Also run image tasks that `hangar dataset validate` found broken or has "
            "not validated (left out by default: no model is charged for a broken task)."
        ),
    ] = False,
    retry_blocked: Annotated[
        bool,
        typer.Option(
            help="Run again the trials an earlier run found blocked_setup (a missing commit "
            "or image may have been added since; checking costs no model call)."
        ),
    ] = True,
    until_decided: Annotated[
        bool,
        typer.Option(
            "--until-decided",
            help="Run the comparison of --baseline against --candidate in rounds of paired "
            "units and stop each once its decision is reached (an anytime-valid 95% "
            "confidence sequence; the sweep's `until_decided:` does the same).",
        ),
    ] = False,
    baseline: Annotated[
        str | None,
        typer.Option(help="With --until-decided: the baseline arm, model or agent."),
    ] = None,
    candidate: Annotated[
        str | None,
        typer.Option(help="With --until-decided: the candidate arm, model or agent."),
    ] = None,
    round_units: Annotated[
        int | None,
        typer.Option("--round", min=1, help="With --until-decided: paired units per round."),
    ] = None,
    yes: Annotated[
        bool,
        typer.Option("--yes", "-y", help="Run without asking, whatever the estimated cost."),
    ] = False,
    confirm_above: Annotated[
        float,
        typer.Option(
            min=0,
            envvar="HANGAR_CONFIRM_ABOVE_USD",
            help="Ask before running when the trials still to run are estimated to cost "
            "more than this many USD (or more than the sweep's budget); off a terminal, "
            "refuse instead unless --yes.",
        ),
    ] = 10.0,
) -> None:
    """Run a sweep: new trials only, resuming where an earlier run stopped.

    Before the first trial it says what the trials still to run are estimated to cost,
    and asks when that is past --confirm-above or the budget.

    Exit status: 0 every trial passed; 1 some failed; 3 some are blocked_setup,
    infra_error, verifier_error or void, or were not run (budget, a refused key); 130
    Ctrl-C; 2 a configuration error (or a missing file, store or sweep, or an estimate
    not confirmed).
    """
    from hangar.scheduler.sweep import load_sweep
    from hangar.store import ResultsStore

    configure_logs(log_format)
    sweep = load_sweep(sweep_file, given_fixtures(fixtures)).narrowed(filter_, repeat)
    sweep = _until_decided(sweep, until_decided, baseline, candidate, round_units)
    for bad in sweep.unloadable:
        err_console.print(
            f"[yellow]blocked_setup:[/] {bad.path} does not load: {bad.error}", highlight=False
        )
    _warn_unpriced(sweep.config.models)
    store = ResultsStore(sweep.config.store)
    sweep, left_out = _ready(_this_run(sweep, store, new=new), store, include_unvalidated)
    _confirm_cost(sweep, store, yes=yes, above=confirm_above)
    quiet = as_json or log_format == LogFormat.json or not err_console.is_terminal
    out = reserve_stdout() if as_json else console  # before Ray can write to stdout
    tally = _run_watched(sweep, store, address, retry_blocked=retry_blocked, quiet=quiet)
    if as_json:
        out.print_json(json.dumps(_outcome(tally, sweep.id, store.safe_url, allow_failures)))
        out.file.flush()
    else:
        _print_tally(tally, sweep.id, sweep.config.budget_usd, sweep_file)
    _warn_models(tally, sweep_file)
    code = tally.exit_code(failures_ok=allow_failures)
    if left_out and not include_unvalidated and code != 130:
        _say_left_out(left_out, sweep_file)
        code = 3  # tasks not run: never a clean exit
    raise typer.Exit(code)


def _ready(sweep: Sweep, store: ResultsStore, include_unvalidated: bool) -> tuple[Sweep, list[Any]]:
    """The sweep with only the tasks ready to run (every task with
    `include_unvalidated`), and the validations of those that are not; each is named."""
    from hangar.scheduler.sweep import ready_tasks

    kept, left_out = ready_tasks(sweep.tasks, store, include_unready=include_unvalidated)
    listed = [] if include_unvalidated else [v.recorded() for v in left_out]
    for v in left_out:
        how = "run anyway" if include_unvalidated else "left out"
        err_console.print(
            f"[yellow]{how}:[/] {escape(v.task_id)} is {v.status}: {escape(v.reason)}",
            highlight=False,
        )
    return sweep.model_copy(update={"tasks": kept, "left_out": listed}), left_out


def _run_watched(
    sweep: Sweep, store: ResultsStore, address: str | None, *, retry_blocked: bool, quiet: bool
) -> SweepTally:
    """Run the sweep, with the live view on a terminal (elsewhere, a log or CI, its frames
    would be noise)."""
    from rich.live import Live

    from hangar.cli.progress import SweepView
    from hangar.scheduler.driver import SweepRunner

    view = SweepView(sweep.id, sweep.size)

    def listen(tally: SweepTally, result: object) -> None:
        view.update(tally)

    display = (
        contextlib.nullcontext()
        if quiet
        else Live(view, console=err_console, refresh_per_second=4, transient=False)
    )
    # Ray prints its own notices (a node died, a task is retried) on stdout, from its
    # threads and at exit too; keep stdout for hangar's output (the one JSON document of
    # --json) and send everything else to stderr with the view.
    with display, contextlib.redirect_stdout(sys.stderr):
        return SweepRunner(
            sweep,
            store,
            address=address,
            listener=None if quiet else listen,
            retry_blocked=retry_blocked,
        ).run()


def _warn_models(tally: SweepTally, sweep_file: Path) -> None:
    """What the models' checks noted, and the models the sweep stopped (and the fix)."""
    for check in tally.model_checks:
        if check.note:
            err_console.print(
                f"[yellow]warning:[/] model {escape(check.model)} did not answer its check "
                f"before the sweep ({escape(check.note)}): its trials met the provider themselves",
                highlight=False,
            )
    for model, error in tally.stopped_models.items():
        fix = (
            f"Name a model the provider has (`hangar sweep check {sweep_file}` suggests known ids)"
            if error.kind == "not_found"
            else f"Set a valid key in {error.key_env}"
        )
        err_console.print(
            f"[bold red]error:[/] stopped model {escape(model)}: {escape(error.message)}. "
            f"{fix} and run the sweep again: its trials were not run or not counted",
            highlight=False,
        )


def _say_left_out(left_out: list[Any], sweep_file: Path) -> None:
    said = ", ".join(f"{n} {status}" for status, n in Counter(v.status for v in left_out).items())
    err_console.print(
        f"[bold yellow]{len(left_out)} task(s) left out[/] ({said}): their trials were not "
        f"run. `hangar dataset validate {sweep_file}` validates them (or "
        "--include-unvalidated runs them anyway)",
        highlight=False,
    )


def _confirm_cost(sweep: Sweep, store: ResultsStore, *, yes: bool, above: float) -> None:
    """Say what the trials still to run are estimated to cost (`hangar sweep check
    --estimate`), and ask before an estimate past `above` or the sweep's budget (off a
    terminal: refuse, unless `yes`)."""
    from hangar.cli.sweep import token_guess
    from hangar.console import usd
    from hangar.scores.estimate import estimate

    final = store.resume_state(sweep.id)[0]
    guess = estimate(sweep.trials(sweep.config.evidence or ""), store, final, token_guess)
    if guess.to_run == 0 or (guess.cost_usd == 0 and not guess.unknown):
        return
    unknown = sum(int(u.rsplit(" x", 1)[1]) for u in guess.unknown)
    apart = f"; {unknown} not estimated (`hangar sweep check --estimate` names them)"
    err_console.print(
        f"estimated cost of the {guess.to_run} trials to run: {usd(guess.cost_usd)} (95% "
        f"interval {usd(guess.low_usd)} to {usd(guess.high_usd)}){apart if unknown else ''}",
        highlight=False,
    )
    budget = sweep.config.budget_usd
    limit = min(above, budget) if budget is not None else above
    if yes or guess.cost_usd <= limit:
        return
    which = "the budget" if budget is not None and budget <= above else "--confirm-above"
    said = f"the estimate, {usd(guess.cost_usd)}, is above {which} ({usd(limit)})"
    if not sys.stdin.isatty():
        raise ConfigError(f"{said}: run with --yes to pay for it, or narrow the sweep")
    if not typer.confirm(f"{said}. Run it?", default=False, err=True):
        raise ConfigError(f"not run: {said}")


def _until_decided(
    sweep: Sweep, on: bool, baseline: str | None, candidate: str | None, round_units: int | None
) -> Sweep:
    """`sweep` with the command line's ``--until-decided`` roles in its config."""
    from hangar.scheduler.sweep import UntilDecided

    given = sweep.config.until_decided
    if not on:
        if baseline or candidate or round_units:
            raise ConfigError("--baseline, --candidate and --round go with --until-decided")
        return sweep
    if given is None and (baseline is None or candidate is None):
        raise ConfigError(
            "--until-decided needs the roles: --baseline X --candidate Y (arms, models or "
            "agents of the sweep), or `until_decided: {baseline: X, candidate: Y}` in it"
        )
    fields = {"baseline": baseline, "candidate": candidate, "round": round_units}
    chosen = {k: v for k, v in fields.items() if v is not None}
    plan = given.model_copy(update=chosen) if given else UntilDecided.model_validate(chosen)
    config = sweep.config.model_copy(update={"until_decided": plan})
    return sweep.model_copy(update={"config": config})


def _warn_unpriced(models: list[Any]) -> None:
    """Say before the run which models have no price (their cost would read as $0)."""
    from hangar.models.pricing import has_price

    for m in models:
        if m.provider != "none" and not has_price(m.id, m.price_table, m.price):
            err_console.print(
                f"[yellow]no price for model {escape(m.id)}:[/] its cost is recorded as 0 "
                "(set `price: {input: USD, output: USD}` per 1M tokens in the sweep)",
                highlight=False,
            )


def _this_run(sweep: Sweep, store: ResultsStore, *, new: bool) -> Sweep:
    """The sweep as the run it continues (the latest of the file's, `latest_run`), or as
    a new run (`--new`), saying which when the file has had another."""
    from hangar.scheduler.sweep import new_run_id

    runs = dict(store.runs(sweep.family))
    if new:
        run_id = new_run_id(sweep.id, datetime.now(UTC))
        if runs:
            err_console.print(
                f"new run {run_id} (the file's runs before it: {len(runs)}; "
                f"`hangar report {sweep.path} --runs` compares them)",
                highlight=False,
            )
    else:
        run_id = latest_run(sweep, store, any_day=False)
        if run_id in runs and len(runs) > 1:
            started = runs[run_id].strftime("%Y-%m-%d %H:%M")
            err_console.print(
                f"resuming run {run_id} (started {started} UTC; `--new` starts another)",
                highlight=False,
            )
    return sweep.model_copy(update={"id": run_id})


def _outcome(tally: SweepTally, sweep: str, store: str, failures_ok: bool) -> dict[str, Any]:
    """What `hangar run --json` prints."""
    return {
        "sweep": sweep,
        "total": tally.total,
        "skipped": tally.skipped,
        "done": tally.done,
        "verdicts": dict(tally.verdicts),
        "cost_usd": round(tally.cost_usd, 6),
        "retries": tally.retries,
        "infra_errors_left": tally.lost,
        "not_run": tally.not_run,
        "interrupted": tally.interrupted,
        "budget_exhausted": tally.budget_exhausted,
        "stopped_models": {m: e.message for m, e in tally.stopped_models.items()},
        "model_checks": [c.model_dump(mode="json") for c in tally.model_checks],
        "saved_by_deciding": tally.saved,
        "decided": [{**o.model_dump(mode="json"), "sentence": o.sentence} for o in tally.decided],
        "store": store,
        "exit_code": tally.exit_code(failures_ok=failures_ok),
    }


#: How each verdict reads at the end of a run.
_OUTCOMES = {
    "pass": "passed",
    "fail": "failed",
    "blocked_setup": "blocked before the agent ran (blocked_setup)",
    "infra_error": "hit a farm error (infra_error)",
    "verifier_error": "met a broken verifier (verifier_error)",
    "void": "voided by a leaked canary",
}


def _print_tally(tally: SweepTally, sweep: str, budget_usd: float | None, path: Path) -> None:
    """How a run ended, for people: a sentence per outcome, the cost, where to look."""
    from hangar.console import usd

    earlier = f" ({tally.skipped} from earlier runs)" if tally.skipped else ""
    console.print(
        f"{escape(sweep)}: {tally.finished} of {tally.total} trials final{earlier}; "
        f"this run cost {usd(tally.cost_usd)}.",
        highlight=False,
    )
    for verdict, words in _OUTCOMES.items():
        n = tally.verdicts.get(verdict, 0) - (tally.cancelled if verdict == "infra_error" else 0)
        if n > 0:
            console.print(f"  {n} {words}", highlight=False)
    if tally.cancelled:
        console.print(
            f"  {tally.cancelled} cancelled by the second Ctrl-C (recorded as infra_error)",
            highlight=False,
        )
    if tally.not_run > 0:
        console.print(f"  {tally.not_run} not run yet: run the sweep again", highlight=False)
    if tally.interrupted:
        console.print("interrupted (Ctrl-C): run the sweep again to go on", highlight=False)
    for outcome in tally.decided:
        console.print(
            f"until decided ({escape(outcome.within)}): {escape(outcome.sentence)}; "
            f"{escape(outcome.why)}",
            highlight=False,
        )
    if tally.saved:
        console.print(
            f"  {tally.saved} trials not needed: their comparisons were decided", highlight=False
        )
    if tally.budget_exhausted and budget_usd is not None:
        spent = tally.spent_before + tally.cost_usd
        console.print(
            f"budget of {usd(budget_usd)} spent ({usd(spent)} so far): stopped scheduling new "
            f"trials; {tally.total - tally.finished} not run",
            highlight=False,
        )
    if tally.lost > tally.cancelled:
        console.print(
            f"{tally.lost - tally.cancelled} trial(s) still infra_error or verifier_error: "
            "run the sweep again to retry them",
            highlight=False,
        )
    console.print(
        f"Look further: hangar report {path}  ·  hangar view {path}  ·  hangar status {path}",
        highlight=False,
    )


@app.command("status")
def status(
    sweep: Annotated[str, typer.Argument(help="Sweep file, or a sweep id in --store.")],
    store: Annotated[
        str | None, typer.Option(help="Results store URL (default: the sweep's, or local).")
    ] = None,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch", help="Redraw every --interval seconds until every trial is final or Ctrl-C."
        ),
    ] = False,
    interval: Annotated[float, typer.Option(min=0.2, help="Seconds between redraws.")] = 2.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the counts as JSON.")] = False,
) -> None:
    """Counts by verdict, agent, model and arm of a sweep's latest attempts."""
    import time

    from rich.live import Live

    sweep_id, total, results = _resolve_or_wait(sweep, store, watch, interval)
    left_out = _left_out(sweep, results)
    if as_json:
        counts = results.counts(sweep_id)
        console.print_json(json.dumps(_status_json(sweep_id, total, counts, left_out)))
        return
    if not watch:
        console.print(_status_view(sweep_id, total, results.counts(sweep_id)))
        for task_id, status, reason in left_out:
            console.print(
                f"left out: {escape(task_id)} is {status}: {escape(reason)}", highlight=False
            )
        return
    with Live(console=console, auto_refresh=False) as live:
        try:
            while True:
                counts = results.counts(sweep_id)
                live.update(_status_view(sweep_id, total, counts), refresh=True)
                if total is not None and _final(counts) >= total:
                    return
                time.sleep(interval)
        except KeyboardInterrupt:
            return


def _resolve_or_wait(
    sweep: str, store: str | None, watch: bool, interval: float
) -> tuple[str, int | None, Any]:
    """The sweep and its store; with `watch`, a store not there yet is waited for (the
    sweep is about to start), never created."""
    import time

    from hangar.errors import StoreError

    said = False
    while True:
        try:
            return resolve_sweep(sweep, store, require=not watch)
        except StoreError as exc:
            if not watch:
                raise
            if not said:
                err_console.print(f"waiting for the sweep to start ({exc})", highlight=False)
                said = True
            time.sleep(interval)


Counts = list[tuple[str, str, str, str, int]]
"""(verdict, agent, model, arm, trials) of a sweep's latest attempts."""


def _final(counts: Counts) -> int:
    return sum(n for v, *_, n in counts if Verdict(v).final)


def _left_out(sweep: str, results: ResultsStore) -> list[tuple[str, str, str]]:
    """(task, status, reason) of each task a sweep file leaves out (broken, unvalidated)."""
    if not Path(sweep).is_file():
        return []
    from hangar.scheduler.sweep import load_sweep, ready_tasks

    _, found = ready_tasks(load_sweep(Path(sweep)).tasks, results)
    return [(v.task_id, v.status, v.reason) for v in found]


def _status_json(
    sweep_id: str, total: int | None, counts: Counts, left_out: list[tuple[str, str, str]]
) -> dict[str, Any]:
    """What `hangar status --json` prints."""
    return {
        "sweep": sweep_id,
        "total": total,
        "final": _final(counts),
        "recorded": sum(n for *_, n in counts),
        "counts": [
            {"verdict": v, "agent": g, "model": m, "arm": a, "trials": n}
            for v, g, m, a, n in counts
        ],
        "left_out": [{"task": t, "status": s, "reason": r} for t, s, r in left_out],
    }


def _status_view(sweep_id: str, total: int | None, counts: Counts) -> Group:
    """The status table of a sweep's counts and its summary line."""
    seen = {v for v, *_ in counts}
    verdicts = [v.value for v in Verdict if v.value in seen or v in COUNTED_VERDICTS]
    table = Table("agent", "model", "arm", *verdicts, "trials", title=f"sweep {escape(sweep_id)}")
    cells: dict[tuple[str, str, str], dict[str, int]] = {}
    for verdict, agent, model, arm, n in counts:
        cells.setdefault((agent, model, arm), {})[verdict] = n
    for (agent, model, arm), row in sorted(cells.items()):
        table.add_row(
            escape(agent),
            escape(model),
            escape(arm),
            *(str(row.get(v, 0)) for v in verdicts),
            str(sum(row.values())),
        )
    recorded = sum(n for *_, n in counts)
    final = _final(counts)
    parts = [f"{final} final" + (f" of {total} trials" if total else "")]
    if recorded > final:
        parts.append(f"{recorded - final} to retry (infra_error, verifier_error): run it again")
    if total and total > recorded:
        parts.append(f"{total - recorded} not run yet")
    return Group(table, Text("; ".join(parts)))


@app.command("gc")
def gc(
    sweep: Annotated[str | None, typer.Option(help="Only this sweep's sandboxes.")] = None,
    everything: Annotated[
        bool, typer.Option("--all", help="Also sandboxes that have not expired yet.")
    ] = False,
    dry_run: Annotated[bool, typer.Option(help="Say what would be removed.")] = False,
) -> None:
    """Remove leftover sandboxes (expired ones; --all: every one, e.g. after a crash)."""
    from hangar.cluster.reaper import collect_garbage
    from hangar.paths import cache_dir
    from hangar.sandbox.disk import release_expired

    removed = collect_garbage(sweep=sweep, everything=everything, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    if not dry_run and sweep is None:
        for point in release_expired(cache_dir() / "trials", everything=everything):
            console.print(f"released the trial disk at {point}", highlight=False)
    for item in removed:
        console.print(
            f"{verb} {item.id} sweep={item.sweep} trial={item.trial[:16]} expires={item.expires}",
            highlight=False,
        )
    console.print(f"{verb} {len(removed)} sandbox(es)")
