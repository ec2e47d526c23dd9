"""What every command prints through: the two consoles, a trial's result for people, and
a model given on the command line (an id or a mapping)."""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from hangar.errors import ConfigError
from hangar.results import TrialResult

# Soft wrap: a command to copy or a URI in a message is never broken across lines.
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


JsonFlag = Annotated[
    bool, typer.Option("--json", help="Print JSON (the same as --format json where offered).")
]
"""The ``--json`` every command with machine-readable output takes."""


def output_format(fmt: str, as_json: bool) -> str:
    """The format asked for: ``json`` with --json, else --format's."""
    return "json" if as_json else fmt


def usd(x: float) -> str:
    """Dollars to the cents, or to two significant digits below a dollar: $12.34, $0.25,
    $0.0024 (never $0.00 for a cost that is not zero)."""
    if x == 0 or abs(x) >= 1:
        return f"${x:,.2f}"
    digits = max(2, 1 - math.floor(math.log10(abs(x))))
    return f"${x:.{digits}f}"


def print_result(result: TrialResult) -> None:
    """A trial's verdict, reason, timings and bundle, for people (everything that came
    from the trial escaped: it is never read as markup)."""
    colour = {"pass": "green", "fail": "red", "void": "magenta"}.get(result.verdict, "yellow")
    console.print(
        f"[bold]{escape(result.scenario_id)}[/] agent={escape(result.agent)} "
        f"arm={escape(result.arm)} -> [bold {colour}]{result.verdict.value}[/]",
        highlight=False,
    )
    console.print(f"  reason: {escape(result.reason)}", highlight=False)
    phases = ", ".join(f"{k} {v:.2f}s" for k, v in result.timings.items())
    console.print(f"  timings ({result.duration_s:.1f} s): {phases}", highlight=False)
    console.print(
        f"  evidence: {escape(str(result.evidence_uri))} (sha256 {result.evidence_sha256})",
        highlight=False,
    )


def model_arg(text: str | None) -> str | dict[str, Any] | None:
    """A model given on the command line: an id, or a YAML/JSON mapping
    (``{id: m, base_url: http://127.0.0.1:8000/v1, api_key_env: KEY}``)."""
    if text is None or not text.lstrip().startswith("{"):
        return text
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ConfigError(f"model {text!r} is neither an id nor a mapping")
    return data
