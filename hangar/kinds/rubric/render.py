"""A benchmark report as one self-contained HTML page: no script, inline SVG plots (each
phase's scores by dimension and by difficulty, and the trend over runs from
``history.yaml``), laid out here and drawn by ``templates/benchmark-report.html`` through
`hangar.pages` (autoescaped: every string from a run is text)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from hangar.kinds.rubric.report import BenchmarkReport, load_history
from hangar.pages import render
from hangar.scores.plots import Tick

TEMPLATES = Path(__file__).resolve().parent / "templates"


class Bar(NamedTuple):
    """One bar: its name, where, how long, the value."""

    name: str
    y: float
    width: float
    value: float


class Bars(NamedTuple):
    """Horizontal bars on 0..top."""

    title: str
    css_id: str
    width: float
    height: float
    left: float
    ticks: list[Tick]
    rows: list[Bar]


def bars(title: str, values: dict[str, float], top: float = 5.0, css_id: str = "") -> Bars:
    """Horizontal bars of `values` on 0..`top`."""
    h, left, width = 26 * len(values) + 34, 170, 380
    ticks = [Tick(left + width * t / top, str(t)) for t in range(int(top) + 1)]
    rows = [Bar(n, 10 + 26 * i, width * v / top, v) for i, (n, v) in enumerate(values.items())]
    return Bars(title, css_id, left + width + 60, h, left, ticks, rows)


_COLOURS = ("#2f9e44", "#3b6fb6", "#c2410c", "#7c3aed", "#0e7490", "#a16207")


class Dot(NamedTuple):
    """A run's value on a line."""

    x: float
    y: float
    run: str
    value: float


class Line(NamedTuple):
    """One series over the runs."""

    name: str
    colour: str
    stroke: float
    points: list[Dot]


class Trend(NamedTuple):
    """Averages over runs, on 1-5."""

    width: float
    height: float
    pad: float
    left: float
    ticks: list[Tick]
    runs: list[Tick]
    series: list[Line]


def trend(history: list[dict[str, object]]) -> Trend | None:
    """Each run's overall average and phase averages, oldest first, as lines on 1-5 (None
    when no run was scored)."""
    runs = [r for r in history if isinstance(r.get("overall_avg"), int | float)]
    if not runs:
        return None
    phases = sorted({p for r in runs for p in (r.get("phases") or {})})  # type: ignore[attr-defined]
    series = {"overall": [r.get("overall_avg") for r in runs]} | {
        p: [(r.get("phases") or {}).get(p) for r in runs]  # type: ignore[attr-defined]
        for p in phases
    }
    w, h, pad, left = 640, 260, 34, 44
    step = (w - left - pad) / max(1, len(runs) - 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return left + step * i, h - pad - (h - 2 * pad) * (v - 1) / 4

    lines = []
    for k, (name, values) in enumerate(series.items()):
        dots = [
            Dot(*xy(i, float(v)), str(runs[i].get("run_id")), float(v))
            for i, v in enumerate(values)
            if isinstance(v, int | float)
        ]
        lines.append(Line(name, _COLOURS[k % len(_COLOURS)], 3 if k == 0 else 1.5, dots))
    ticks = [Tick(xy(0, t)[1], str(t)) for t in range(1, 6)]
    labels = [Tick(xy(i, 1)[0], str(r.get("run_id", ""))[-9:]) for i, r in enumerate(runs)]
    return Trend(w, h, pad, left, ticks, labels, lines)


def render_html(report: BenchmarkReport, history: Path) -> str:
    """The page (see the module docstring)."""
    phases = [
        (
            label,
            r,
            bars(f"{label} by dimension", r.by_dimension, css_id=f"dim-{label}"),
            bars(f"{label} by difficulty", r.by_difficulty, css_id=f"difficulty-{label}"),
        )
        for label, r in report.results.items()
    ]
    runs = load_history(history) if history.is_file() else []
    return render(
        TEMPLATES,
        "benchmark-report.html",
        r=report,
        s=report.summary,
        phases=phases,
        history=trend(runs),
    )
