"""The `hangar` command line: parse, build the config model, call a library function.

Every command here is a thin layer over a function callable from Python. A
`HangarError` is printed as one clear message (no traceback) with a non-zero exit.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from hangar import __version__
from hangar.console import console, err_console
from hangar.errors import ConfigError, HangarError
from hangar.store import ResultsStore
from hangar.trials.batch import BatchOutcome, Services, SweepTasks, TaskBatch
from hangar.trials.kind import SweepSettings, kinds

if TYPE_CHECKING:
    from hangar.scheduler.sweep import Sweep

app = typer.Typer(
    name="hangar",
    help="A container-sandboxed execution farm for evaluating AI coding agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # Click's plain help: it wraps to any width (`hangar.cli.help`)
)


def _run_batch(batch: TaskBatch, *, address: str | None = None) -> BatchOutcome:
    """The scheduler's batch runner, imported when a command first runs trials."""
    from hangar.scheduler.batch import run_batch

    return run_batch(batch, address=address)


def _print_version(value: bool) -> None:
    if value:
        console.print(f"hangar {__version__}")
        raise typer.Exit(0)


@app.callback()
def _services(
    ctx: typer.Context,
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print the version."
    ),
) -> None:
    """Give every command the services the kinds' own commands cannot import."""
    ctx.obj = Services(
        scheduler=_run_batch, sweep_tasks=_sweep_tasks, resolve_sweep=_resolve_for_kinds
    )


def _sweep_tasks(path: Path, settings: SweepSettings) -> SweepTasks:
    """A sweep file's tasks (its own settings), or a folder's (with `settings`)."""
    from hangar.scheduler.driver import evidence_url
    from hangar.scheduler.sweep import load_sweep, load_task_folder

    if path.is_file():
        sweep = load_sweep(path)
        unloadable = [(u.scenario_id, u.error) for u in sweep.unloadable]
        c = sweep.config
        # the sweep's S3 endpoint travels in the URL, as `hangar run` gives it to workers
        evidence = evidence_url(c.evidence, c.evidence_endpoint) if c.evidence else None
        return SweepTasks(sweep.id, sweep.tasks, unloadable, c.store, evidence)
    tasks = load_task_folder(path, settings)
    return SweepTasks(path.resolve().name, tasks, [], None, None)


def given_fixtures(path: Path | None) -> dict[str, str]:
    """The sweep field `--fixtures` gives instead of the file's (none when not given)."""
    return {"fixtures": str(path.resolve())} if path is not None else {}


def _resolve_for_kinds(sweep: str, store: str | None) -> tuple[str, ResultsStore]:
    sweep_id, _, results = resolve_sweep(sweep, store)
    return sweep_id, results


def add_kind_groups() -> None:
    """Each kind's own command group (`hangar.trials.kind.Kind.cli`), under its name."""
    for kind in kinds():
        for name, module in kind.cli:
            app.add_typer(importlib.import_module(module).app, name=name)
        for name, module in kind.cli_aliases:
            app.add_typer(importlib.import_module(module).app, name=name, hidden=True)


@app.command()
def version() -> None:
    """Print hangar's version."""
    console.print(f"hangar {__version__}")


def resolve_sweep(
    sweep: str, store: str | None, *, require: bool = True
) -> tuple[str, int | None, ResultsStore]:
    """SWEEP given as a sweep file or as an id: (sweep id, its size if known, the store).

    For the commands that read results: the store is the sweep file's (or `store`) and
    must exist (nothing is created), and the sweep must be in it; every such command
    fails the same way, naming what it looked for and the sweeps the store holds (with
    `require` False, a sweep not in the store yet is let through: `status --watch`)."""
    from hangar.scheduler.sweep import load_sweep

    path = Path(sweep)
    size: int | None = None
    if path.is_file():
        loaded = load_sweep(path)
        results = ResultsStore(store or loaded.config.store, create=False)
        sweep_id, size = latest_run(loaded, results, any_day=True), loaded.size
    elif path.suffix in (".yaml", ".yml") or "/" in sweep:
        raise ConfigError(f"file not found: {sweep} (give a sweep file or a sweep id)")
    else:
        sweep_id, results = sweep, ResultsStore(store, create=False)
    if require and results.sweep_config(sweep_id) is None and not results.counts(sweep_id):
        known = results.sweep_ids()
        listed = f"its sweeps: {', '.join(known[:20])}" if known else "it holds no sweep yet"
        more = f" (and {len(known) - 20} more: `hangar sweeps`)" if len(known) > 20 else ""
        raise ConfigError(f"no sweep {sweep_id!r} in {results.safe_url}; {listed}{more}")
    return sweep_id, size, results


def latest_run(sweep: Sweep, results: ResultsStore, *, any_day: bool) -> str:
    """The run of a sweep file that commands continue (`hangar run`) or read (reports):
    the newest of its runs in the store (`hangar run --new` starts new ones); with
    `any_day` False, the newest of those with the id the file gives today (its
    ``{date}`` or ``{week}`` filled in); the file's id when there is none."""
    for run_id, _ in results.runs(sweep.family or sweep.id):
        if any_day or run_id == sweep.id or run_id.startswith(sweep.id + "."):
            return run_id
    return sweep.id


def main() -> None:
    """Run the command line with the commands loaded so far (`hangar.cli.main` loads the
    one asked for)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from hangar.cli.help import conventional

    try:
        conventional(typer.main.get_command(app))(prog_name="hangar")
    except HangarError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(2)
    finally:
        if "hangar.cluster.attach" in sys.modules:  # a command that attached Ray
            with contextlib.suppress(Exception):  # the command's own exit stands
                sys.modules["hangar.cluster.attach"].detach()
        # The interpreter's last collection walks every object a command kept (a sweep's
        # trials, a report's rows: 0.4 s after a 2,000-trial run) only to free memory the
        # process gives back as it exits (files are flushed by their own exit handlers).
        gc.freeze()
