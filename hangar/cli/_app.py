"""The `hangar` command line: parse, build the config model, call a library function.

Every command here is a thin layer over a function callable from Python. A
`HangarError` is printed as one clear message (no traceback) with a non-zero exit.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from hangar import __version__
from hangar.errors import ConfigError, HangarError
from hangar.results import TrialResult
from hangar.store import ResultsStore

app = typer.Typer(
    name="hangar",
    help="A container-sandboxed execution farm for evaluating AI coding agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

# Soft wrap: a command to copy or a URI in a message is never broken across lines.
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


@app.command()
def version() -> None:
    """Print hangar's version."""
    console.print(f"hangar {__version__}")


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


def resolve_sweep(sweep: str, store: str | None) -> tuple[str, int | None, ResultsStore]:
    """SWEEP given as a sweep file or as an id: (sweep id, its size if known, the store)."""
    from hangar.scheduler.sweep import load_sweep

    if Path(sweep).is_file():
        loaded = load_sweep(Path(sweep))
        return loaded.id, loaded.size, ResultsStore(store or loaded.config.store)
    return sweep, None, ResultsStore(store)


def model_arg(text: str | None) -> str | dict[str, Any] | None:
    """A model given on the command line: an id, or a YAML/JSON mapping
    (``{id: m, base_url: http://127.0.0.1:8000/v1, api_key_env: KEY}``)."""
    if text is None or not text.lstrip().startswith("{"):
        return text
    import yaml

    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ConfigError(f"model {text!r} is neither an id nor a mapping")
    return data


def main() -> None:
    """Entry point of the `hangar` console script."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except HangarError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(2)
