"""The `hangar` command line (Typer). Each submodule registers one group of commands."""

from hangar.cli import (
    benchmarks,
    dashboards,
    decisions,
    images,
    knowledge,
    scores,
    sweeps,
    trials,
    view,
)
from hangar.cli._app import app, console, err_console, main, print_result

__all__ = [
    "app",
    "benchmarks",
    "console",
    "dashboards",
    "decisions",
    "err_console",
    "images",
    "knowledge",
    "main",
    "print_result",
    "scores",
    "sweeps",
    "trials",
    "view",
]
