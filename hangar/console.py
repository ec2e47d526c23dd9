"""What every command prints through: the two consoles, a trial's result for people, and
a model given on the command line (an id or a mapping)."""

from __future__ import annotations

import math
import os
import sys
from typing import Annotated, Any, TextIO

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from hangar.errors import ConfigError
from hangar.results import TrialResult

#: Columns when the output is not a terminal (a pipe, a file, CI) and COLUMNS is unset:
#: Rich's 80 would cut tables' ids and names (``more-itertools__more-itertool…``).
PIPE_WIDTH = 240


def _width(stream: TextIO) -> int | None:
    """None (the terminal's own) on a terminal or with COLUMNS set, else `PIPE_WIDTH`."""
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):  # no stream, or a closed one
        terminal = False
    return None if os.environ.get("COLUMNS") or terminal else PIPE_WIDTH


# Soft wrap: a command to copy or a URI in a message is never broken across lines.
console = Console(soft_wrap=True, width=_width(sys.stdout))
err_console = Console(stderr=True, soft_wrap=True, width=_width(sys.stderr))


JsonFlag = Annotated[
    bool, typer.Option("--json", help="Print JSON (the same as --format json where offered).")
]
"""The ``--json`` every command with machine-readable output takes."""

StoreOption = Annotated[
    str | None, typer.Option(help="Results store URL (default: the sweep's, or local).")
]

EndpointOption = Annotated[
    str | None,
    typer.Option(
        "--endpoint",
        help="S3 endpoint URL of the evidence (MinIO, Ceph...; default: the AWS settings, "
        "AWS_ENDPOINT_URL).",
    ),
]
"""The ``--endpoint`` every command that reads evidence archives takes."""


def reserve_stdout() -> Console:
    """A console on the process's real stdout, kept for one machine-readable document;
    from now on whatever else writes to stdout (Ray's notices from its threads, or a
    library writing file descriptor 1 itself, even at exit) goes to stderr."""
    try:
        real = sys.stdout.fileno() == 1
    except (AttributeError, OSError, ValueError):
        real = False
    if not real:  # a caller that captured stdout (a test's runner) keeps it as it is
        return console
    sys.stdout.flush()
    kept = os.fdopen(os.dup(1), "w", encoding="utf-8", closefd=True)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return Console(file=kept, soft_wrap=True, width=_width(kept))


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
