"""The one way hangar renders HTML: Jinja templates with autoescaping.

The viewer, the sweep report (`hangar report --format html`) and the kinds' own reports
(a rubric benchmark's, a knowledge gold set's) render through `environment`: every string
a template shows is escaped unless the template marks it safe, so a scenario id, an
agent's output or a judge's reason is text wherever it appears. Templates live in a
``templates`` folder beside the code that fills them; the shared plots and style are in
``hangar/scores/templates`` (``plots.html``, ``report.css``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jinja2 import BaseLoader, ChoiceLoader, Environment, FileSystemLoader, select_autoescape

from hangar.console import usd as _usd

#: The shared templates (plots, the report's style).
SHARED = Path(__file__).resolve().parent / "scores" / "templates"


def pct(x: float | None) -> str:
    """A rate as a percentage (one decimal)."""
    return "-" if x is None else f"{x * 100:.1f}%"


def num(x: float | None, digits: int = 2) -> str:
    """A number."""
    return "-" if x is None else f"{x:.{digits}f}"


def usd(x: float | None) -> str:
    """Dollars, to the significant digits of a small cost."""
    return "-" if x is None else _usd(x)


def environment(loaders: Sequence[BaseLoader | Path] = ()) -> Environment:
    """An autoescaping environment over `loaders` (folders or loaders, first wins) and
    the shared templates, with hangar's filters (``pct``, ``num``, ``usd``)."""
    found = [FileSystemLoader(x) if isinstance(x, Path) else x for x in loaders]
    env = Environment(
        loader=ChoiceLoader([*found, FileSystemLoader(SHARED)]),
        autoescape=select_autoescape(["html", "svg"]),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(pct=pct, num=num, usd=usd)
    return env


def render(folder: Path, template: str, **context: Any) -> str:
    """`template` (in `folder`, or shared) filled with `context`."""
    return environment([folder]).get_template(template).render(**context)
