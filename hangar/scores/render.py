"""`Report` as text (Rich tables), Markdown, or one self-contained HTML file.

The HTML has no script and loads nothing: its plots are inline SVG (pass rate with
interval bars per group; cost per trial against pass rate; per-scenario differences of
each comparison), laid out by `hangar.scores.plots` and drawn by the autoescaping
templates in ``templates/`` (`hangar.pages`), which the viewer shares.
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

from markupsafe import Markup
from rich.console import Console
from rich.markup import escape as plain
from rich.table import Table

from hangar.pages import environment, render
from hangar.results import Verdict
from hangar.scores import plots
from hangar.scores.comparisons import MIN_SCENARIOS, Comparison
from hangar.scores.report import Group, MetricSummary, Report

VERDICTS = tuple(v.value for v in Verdict)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _usd(x: float | None) -> str:
    return "-" if x is None else f"${x:.4f}"


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}s"


def _rate(g: Group) -> str:
    """A group's pass rate and interval; n/a when none of its trials counts."""
    r = g.pass_rate
    return "n/a" if r is None else f"{_pct(r.estimate)} [{_pct(r.low)}, {_pct(r.high)}]"


def _uncounted(report: Report) -> list[str]:
    """Per group, why its other trials are in no rate (one line per verdict and cause)."""
    return [
        f"{g.label}: {u.verdict} x{u.trials}: {u.reason}"
        for g in report.groups
        for u in g.uncounted
    ]


def _group_rows(report: Report) -> list[list[str]]:
    rows = []
    for g in report.groups:
        k = ", ".join(f"@{n} {_pct(v)}" for n, v in g.pass_at_k.items()) or "-"
        rows.append(
            [
                g.agent,
                g.model,
                g.arm,
                str(g.trials),
                _rate(g),
                k,
                _usd(g.cost_usd),
                _usd(g.cost_per_trial),
                _usd(g.cost_per_pass),
                f"{g.tokens['input']}/{g.tokens['output']}",
                f"{_secs(g.duration_p50_s)}/{_secs(g.duration_p95_s)}",
                " ".join(f"{v}:{g.verdicts[v]}" for v in VERDICTS if g.verdicts.get(v)),
            ]
        )
    return rows


GROUP_HEAD = [
    "agent",
    "model",
    "arm",
    "trials",
    "pass rate [95% CI]",
    "pass@k",
    "cost",
    "cost/trial",
    "cost/pass",
    "tokens in/out",
    "p50/p95",
    "verdicts",
]


def render_text(report: Report, width: int = 160) -> str:
    """The report as terminal tables. Every string that comes from results (ids, reasons,
    requirement texts) is escaped: none of it is read as Rich markup."""
    buf = StringIO()
    console = Console(file=buf, width=width, force_terminal=False)
    console.print(
        f"[bold]sweep {plain(report.sweep)}[/]  "
        "(only pass and fail count; other verdicts shown apart)"
    )
    table = Table(*GROUP_HEAD, title="groups")
    for row in _group_rows(report):
        table.add_row(*map(plain, row))
    console.print(table)
    for line in _uncounted(report):
        console.print(f"[yellow]not counted[/] {plain(line)}", highlight=False)
    buf.write(_matrix(report, width))
    if report.requirements:
        req = Table("requirement", "group", "pass rate", title="checklist requirements")
        for r in report.requirements:
            req.add_row(plain(r.requirement), plain(r.group), f"{r.passes}/{r.assessed}")
        console.print(req)
    metrics = [(g, m) for g in report.groups for m in g.metrics if m.metric != "pass"]
    if metrics:
        table = Table("group", "metric", "n", "mean [95% CI]", "unassessed", title="scores")
        for g, m in metrics:
            table.add_row(
                plain(g.label), plain(m.metric), str(m.n), plain(_metric(m)), str(m.unassessed)
            )
        console.print(table)
    for c in report.comparisons:
        console.print(
            f"[bold]{plain(c.factor)}[/] {plain(c.candidate)} vs {plain(c.baseline)} "
            f"({plain(c.within)}, {plain(_compared(c))}, {c.scenarios} scenarios): "
            f"{plain(_diff(c))}, SE {_points(c, c.se):.1f}\n  {plain(c.sentence)}"
        )
    for v in report.voided:
        console.print(
            f"[magenta]void[/] {plain(v.scenario)} {plain(v.group)} {v.trial_key[:12]}: "
            f"{plain(v.reason)}"
        )
    for b in report.blocked:
        console.print(
            f"[yellow]not run[/] {plain(b.scenario)} ({b.trials} trial(s)): {plain(b.reason)}"
        )
    for t in report.left_out:
        console.print(
            f"[yellow]left out[/] {plain(t.scenario)} is {plain(t.status)}: {plain(t.reason)} "
            "(no trial ran; in no rate)"
        )
    for section in report.sections:
        console.print(f"[bold]{plain(section.title)}[/]")
        for line in section.lines:
            console.print(f"  {plain(line)}")
    for note in report.notes:
        console.print(f"[yellow]note:[/] {plain(note)}")
    return buf.getvalue()


def _printable(text: str) -> str:
    """`text` with no control character (a terminal reads none from a result)."""
    return "".join(c if c.isprintable() else "?" for c in text)


def _matrix(report: Report, width: int) -> str:
    """The pass matrix as plain text: a scenario a line, a group a column (numbered, its
    name in a legend above), in as many blocks of columns as `width` needs. Plain text,
    not a Rich table: a sweep of 500 scenarios and 24 groups is 12,000 cells."""
    labels = [g.label for g in report.groups]
    if not labels:
        return ""
    names = [f"g{i}" for i in range(1, len(labels) + 1)]
    rows = [
        (
            _printable(s.scenario),
            [
                f"{p}/{n}" if (p, n) != (0, 0) else "-"
                for p, n in (s.cells.get(x, (0, 0)) for x in labels)
            ],
        )
        for s in report.scenarios
    ]
    first = max([len("scenario"), *(len(name) for name, _ in rows)])
    cell = max([3, *(len(n) for n in names), *(len(c) for _, cells in rows for c in cells)])
    per_block = max(1, (width - first) // (cell + 2))
    out = ["pass matrix (passes/trials; the groups:)"]
    out += [
        f"  {n:>{len(names[-1])}}  {_printable(label)}"
        for n, label in zip(names, labels, strict=True)
    ]
    for start in range(0, len(labels), per_block):
        block = slice(start, start + per_block)
        out.append(f"{'scenario':<{first}}" + "".join(f"  {n:>{cell}}" for n in names[block]))
        out += [
            f"{name:<{first}}" + "".join(f"  {c:>{cell}}" for c in cells[block])
            for name, cells in rows
        ]
    return "\n".join(out) + "\n"


def _metric(m: MetricSummary) -> str:
    """A metric's mean and interval: a percentage for a rate, the value otherwise."""
    if m.mean is None or m.ci_low is None or m.ci_high is None:
        return "-"
    if m.scale == "binary":
        return f"{_pct(m.mean)} [{_pct(m.ci_low)}, {_pct(m.ci_high)}]"
    return f"{m.mean:.2f} [{m.ci_low:.2f}, {m.ci_high:.2f}]"


def _points(c: Comparison, value: float) -> float:
    """`value` in points of the metric's range (a rate's percentage points)."""
    return value / c.span * 100


def _compared(c: Comparison) -> str:
    """The metric compared, with the metrics that say the same (``pass = reward``)."""
    return " = ".join([c.metric, *c.same_as])


def _diff(c: Comparison) -> str:
    """The difference and its interval, in points of the metric's range."""
    if c.scenarios < MIN_SCENARIOS:
        return (
            f"{_points(c, c.difference):+.1f} points, no interval "
            f"({MIN_SCENARIOS} or more scenarios are needed)"
        )
    return (
        f"{_points(c, c.difference):+.1f} points, 95% CI "
        f"[{_points(c, c.ci_low):+.1f}, {_points(c, c.ci_high):+.1f}]"
    )


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(out)


def _md_section(title: str, lines: list[str]) -> list[str]:
    """A Markdown section (nothing when it has no line)."""
    return [f"## {title}", "", *lines, ""] if lines else []


def _md_lists(report: Report) -> list[str]:
    """The report's comparisons, voided and blocked trials, as Markdown lists."""
    return [
        *_md_section(
            "Comparisons",
            [
                f"- **{c.factor}** {c.candidate} vs {c.baseline} ({c.within}, {_compared(c)}, "
                f"{c.scenarios} scenarios): {_diff(c)}, SE {_points(c, c.se):.1f}. "
                f"**{c.sentence}.**"
                for c in report.comparisons
            ],
        ),
        *_md_section(
            "Voided trials",
            [f"- {v.scenario} ({v.group}) `{v.trial_key[:12]}`: {v.reason}" for v in report.voided],
        ),
        *_md_section(
            "Not run (blocked_setup)",
            [f"- {b.scenario} ({b.trials} trial(s)): {b.reason}" for b in report.blocked],
        ),
        *_md_section(
            "Tasks left out (broken or not validated: no trial ran)",
            [f"- {t.scenario} is {t.status}: {t.reason}" for t in report.left_out],
        ),
    ]


def render_markdown(report: Report) -> str:
    """The report as Markdown."""
    labels = [g.label for g in report.groups]
    matrix = [
        [s.scenario, *(f"{p}/{n}" for p, n in (s.cells.get(x, (0, 0)) for x in labels))]
        for s in report.scenarios
    ]
    requirements = [
        [r.requirement, r.group, f"{r.passes}/{r.assessed}"] for r in report.requirements
    ]
    metrics = [
        [g.label, m.metric, str(m.n), _metric(m), str(m.unassessed)]
        for g in report.groups
        for m in g.metrics
        if m.metric != "pass"
    ]
    parts = [
        f"# Sweep {report.sweep}",
        "",
        "Only `pass` and `fail` count; other verdicts are shown apart.",
        "",
        *_md_section("Groups", [_md_table(GROUP_HEAD, _group_rows(report))]),
        *_md_section("Not counted (in no rate)", [f"- {line}" for line in _uncounted(report)]),
        *_md_section("Pass matrix", [_md_table(["scenario", *labels], matrix)]),
    ]
    if requirements:
        head = ["requirement", "group", "pass rate"]
        parts += _md_section("Checklist requirements", [_md_table(head, requirements)])
    if metrics:
        head = ["group", "metric", "n", "mean [95% CI]", "unassessed"]
        parts += _md_section("Scores", [_md_table(head, metrics)])
    parts += _md_lists(report)
    for section in report.sections:
        parts += _md_section(section.title, [f"- {line}" for line in section.lines])
    parts += [f"> note: {n}" for n in report.notes]
    return "\n".join(parts) + "\n"


# -- HTML with inline SVG (templates/sweep-report.html, templates/plots.html) ---------

TEMPLATES = Path(__file__).resolve().parent / "templates"


def _plot(macro: str, *args: Any) -> Markup:
    """One of the shared plots (``plots.html``), for a page of the viewer."""
    module = environment([TEMPLATES]).get_template("plots.html").module
    return Markup(getattr(module, macro)(*args))  # noqa: S704 - rendered autoescaped


def _compared_by_index(report: Report) -> dict[int, str]:
    return {n: _compared(c) for n, c in enumerate(report.comparisons)}


def svg_intervals(report: Report) -> Markup:
    """Pass rate per group: a bar and the Wilson interval as a whisker."""
    return _plot("intervals", plots.intervals(report))


def svg_cost(report: Report) -> Markup:
    """Cost per trial against pass rate (empty when no group has a cost)."""
    return _plot("cost", plots.cost(report))


def svg_differences(report: Report) -> Markup:
    """Per-scenario differences (A - B) of each comparison, as bars around zero."""
    return _plot("differences", plots.differences(report, _compared_by_index(report)))


def render_html(report: Report) -> str:
    """The report as one self-contained HTML page (inline CSS and SVG, no script)."""
    labels = [g.label for g in report.groups]
    return render(
        TEMPLATES,
        "sweep-report.html",
        r=report,
        group_head=GROUP_HEAD,
        group_rows=_group_rows(report),
        uncounted=_uncounted(report),
        metrics=[(g, m, _metric(m)) for g in report.groups for m in g.metrics],
        intervals=plots.intervals(report),
        cost=plots.cost(report),
        comparisons=[(c, _compared(c), _diff(c)) for c in report.comparisons],
        differences=plots.differences(report, _compared_by_index(report)),
        labels=labels,
        matrix=[(s.scenario, [s.cells.get(x, (0, 0)) for x in labels]) for s in report.scenarios],
    )
