"""The `hangar` command line (Typer). Each submodule registers one group of commands."""

from hangar.cli import dashboards, decisions, images, scores, sweeps, trials
from hangar.cli._app import app, console, err_console, main, print_result

__all__ = [
    "app",
    "console",
    "dashboards",
    "decisions",
    "err_console",
    "images",
    "main",
    "print_result",
    "scores",
    "sweeps",
    "trials",
]
