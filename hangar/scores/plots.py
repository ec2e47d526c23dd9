"""The reports' plots as geometry: where each bar, whisker and point goes.

The figures are drawn by ``templates/plots.html`` (inline SVG, autoescaped, `hangar.pages`)
for the HTML report and the viewer alike: pass rate with its interval per group, cost per
trial against pass rate, per-scenario differences of each comparison. A kind's own
report draws with the same pieces (`Tick`, `percent_ticks`, `PALETTE`).
"""

from __future__ import annotations

from typing import NamedTuple

from hangar.console import usd
from hangar.scores.comparisons import Comparison
from hangar.scores.report import Report

PALETTE = ("#3b6fb6", "#d9822b", "#2f9e44", "#c92a2a", "#7048e8", "#0b7285")


class Tick(NamedTuple):
    """An axis tick: where, and its label."""

    at: float
    label: str


def percent_ticks(start: float, length: float, *, down: bool = False) -> list[Tick]:
    """Ticks at 0, 25, 50, 75 and 100% along an axis of `length` from `start` (`down`:
    an axis drawn from `start` towards smaller coordinates, as a y axis is)."""
    sign = -1 if down else 1
    return [Tick(start + sign * length * t / 100, f"{t}%") for t in (0, 25, 50, 75, 100)]


class IntervalRow(NamedTuple):
    """A group's bar (its pass rate) and whisker (its interval); no bar: n/a."""

    label: str
    y: float
    bar: float | None
    low: float
    high: float
    color: str


class Intervals(NamedTuple):
    """Pass rate per group, a bar and the Wilson interval as a whisker."""

    width: float
    height: float
    left: float
    ticks: list[Tick]
    rows: list[IntervalRow]


def intervals(report: Report) -> Intervals:
    """The pass-rate plot of `report`."""
    h, left, width = 28 * len(report.groups) + 40, 260, 480
    ticks = percent_ticks(left, width)
    rows = []
    for i, g in enumerate(report.groups):
        r = g.pass_rate
        rows.append(
            IntervalRow(
                label=g.label,
                y=20 + 28 * i,
                bar=None if r is None else width * r.estimate,
                low=0.0 if r is None else left + width * r.low,
                high=0.0 if r is None else left + width * r.high,
                color=PALETTE[i % len(PALETTE)],
            )
        )
    return Intervals(left + width + 60, h, left, ticks, rows)


class Point(NamedTuple):
    """A group's point, and where its label goes."""

    label: str
    x: float
    y: float
    color: str
    anchor: str
    dx: float


class CostPlot(NamedTuple):
    """Cost per trial (x) against pass rate (y), one point per group."""

    width: float
    height: float
    left: float
    bottom: float
    right: float
    plot_w: float
    plot_h: float
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    points: list[Point]


def cost(report: Report) -> CostPlot | None:
    """The cost plot of `report`; None when no group has a cost (a plot of zeros says
    nothing)."""
    plotted = [(i, g) for i, g in enumerate(report.groups) if g.pass_rate is not None]
    top = max((g.cost_per_trial or 0.0 for _, g in plotted), default=0.0)
    if not top:
        return None
    w, h, left, bottom, right = 640, 320, 60, 50, 20
    plot_w, plot_h = w - left - right, h - bottom - 20
    x_ticks = [Tick(left + plot_w * t / 4, usd(top * t / 4)) for t in range(5)]
    y_ticks = percent_ticks(h - bottom, plot_h, down=True)
    points = []
    for i, g in plotted:
        assert g.pass_rate is not None
        x = left + plot_w * ((g.cost_per_trial or 0.0) / top)
        y = (h - bottom) - plot_h * g.pass_rate.estimate
        # labels to the left of points in the right half, so none runs off the plot
        anchor, dx = ("end", -8.0) if x > left + plot_w / 2 else ("start", 8.0)
        points.append(Point(g.label, x, y, PALETTE[i % len(PALETTE)], anchor, dx))
    return CostPlot(w, h, left, bottom, right, plot_w, plot_h, x_ticks, y_ticks, points)


class DiffRow(NamedTuple):
    """A scenario's difference: its bar around zero, and the value in points."""

    scenario: str
    y: float
    x: float
    width: float
    color: str
    points: float


class Differences(NamedTuple):
    """One comparison's per-scenario differences (candidate - baseline)."""

    title: str
    width: float
    height: float
    mid: float
    half: float
    rows: list[DiffRow]


def differences(report: Report, compared: dict[int, str]) -> list[Differences]:
    """Each comparison's per-scenario differences, as bars around zero (`compared`: the
    metric each compares, in words, by the comparison's index)."""
    return [_differences(c, compared[n]) for n, c in enumerate(report.comparisons)]


def _differences(c: Comparison, compared: str) -> Differences:
    items = list(c.per_scenario.items())
    h, mid, half = 24 * len(items) + 30, 420, 200
    rows = []
    for i, (scenario, value) in enumerate(items):
        diff = value / c.span  # a fraction of the metric's range
        x, width = (mid, half * diff) if diff >= 0 else (mid + half * diff, -half * diff)
        color = "#2f9e44" if diff >= 0 else "#c92a2a"
        rows.append(DiffRow(scenario, 12 + 24 * i, x, max(width, 1), color, diff * 100))
    title = f"{c.factor}: {c.candidate} - {c.baseline} on {compared} ({c.within})"
    return Differences(title, mid + half + 40, h, mid, half, rows)
