"""`Report` as text (Rich tables), Markdown, or one self-contained HTML file.

The HTML has no script and loads nothing: its plots are inline SVG drawn here (pass
rate with interval bars per group; cost per trial against pass rate; per-scenario
differences of each comparison).
"""

from __future__ import annotations

import html
from io import StringIO

from rich.console import Console
from rich.markup import escape as plain
from rich.table import Table

from hangar.console import usd
from hangar.results import Verdict
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
    labels = [g.label for g in report.groups]
    matrix = Table("scenario", *map(plain, labels), title="pass matrix (passes/trials)")
    for s in report.scenarios:
        matrix.add_row(
            plain(s.scenario),
            *(
                f"{p}/{n}" if (p, n) != (0, 0) else "-"
                for p, n in (s.cells.get(x, (0, 0)) for x in labels)
            ),
        )
    console.print(matrix)
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
    for note in report.notes:
        console.print(f"[yellow]note:[/] {plain(note)}")
    return buf.getvalue()


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
    parts += [f"> note: {n}" for n in report.notes]
    return "\n".join(parts) + "\n"


# -- HTML with inline SVG ----------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:1rem 0;font-size:.9rem}
td,th{border:1px solid #ccc;padding:.3rem .5rem;text-align:left}
th{background:#f3f3f3} .decision{font-weight:600} .note{color:#8a5a00}
svg{background:#fafafa;border:1px solid #ddd;margin:.5rem 0} .v{color:#8b008b}
"""
_PALETTE = ["#3b6fb6", "#d9822b", "#2f9e44", "#c92a2a", "#7048e8", "#0b7285"]


def svg_intervals(report: Report) -> str:
    """Pass rate per group: a bar and the Wilson interval as a whisker."""
    rows = report.groups
    h, left, width = 28 * len(rows) + 40, 260, 480
    out = [
        f'<svg id="plot-pass-rate" width="{left + width + 60}" height="{h}" '
        'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="pass rate by group">'
    ]
    for tick in (0, 25, 50, 75, 100):
        x = left + width * tick / 100
        out.append(
            f'<line x1="{x}" y1="10" x2="{x}" y2="{h - 20}" stroke="#ddd"/>'
            f'<text x="{x}" y="{h - 5}" font-size="10" text-anchor="middle">{tick}%</text>'
        )
    for i, g in enumerate(rows):
        y = 20 + 28 * i
        label = (
            f'<text x="{left - 6}" y="{y + 12}" font-size="11" text-anchor="end">'
            f"{html.escape(g.label)}</text>"
        )
        if g.pass_rate is None:
            out.append(f'{label}<text x="{left + 4}" y="{y + 12}" font-size="11">n/a</text>')
            continue
        bar = width * g.pass_rate.estimate
        lo, hi = left + width * g.pass_rate.low, left + width * g.pass_rate.high
        color = _PALETTE[i % len(_PALETTE)]
        out.append(
            f"{label}"
            f'<rect class="bar" x="{left}" y="{y}" width="{bar:.1f}" height="16" fill="{color}"/>'
            f'<line x1="{lo:.1f}" y1="{y + 8}" x2="{hi:.1f}" y2="{y + 8}" stroke="#111" '
            'stroke-width="2"/>'
            f'<line x1="{lo:.1f}" y1="{y + 2}" x2="{lo:.1f}" y2="{y + 14}" stroke="#111"/>'
            f'<line x1="{hi:.1f}" y1="{y + 2}" x2="{hi:.1f}" y2="{y + 14}" stroke="#111"/>'
        )
    out.append("</svg>")
    return "".join(out)


def svg_cost(report: Report) -> str:
    """Cost per trial (x) against pass rate (y), one point per group with a rate; empty
    when no group has a cost (a plot of zeros says nothing)."""
    plotted = [(i, g) for i, g in enumerate(report.groups) if g.pass_rate is not None]
    top = max((g.cost_per_trial or 0.0 for _, g in plotted), default=0.0)
    if not top:
        return ""
    w, h, left, bottom, right = 640, 320, 60, 50, 20
    plot_w, plot_h = w - left - right, h - bottom - 20
    out = [
        f'<svg id="plot-cost" width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg" '
        'role="img" aria-label="cost per trial against pass rate">',
        f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="#888"/>',
        f'<line x1="{left}" y1="20" x2="{left}" y2="{h - bottom}" stroke="#888"/>',
        f'<text x="{left + plot_w / 2}" y="{h - 8}" font-size="11" text-anchor="middle">'
        "cost per trial (USD)</text>",
        f'<text x="14" y="{20 + plot_h / 2}" font-size="11" '
        f'transform="rotate(-90 14 {20 + plot_h / 2})" text-anchor="middle">pass rate</text>',
    ]
    for tick in range(5):
        x = left + plot_w * tick / 4
        y = h - bottom - plot_h * tick / 4
        out.append(
            f'<line x1="{x:.1f}" y1="{h - bottom}" x2="{x:.1f}" y2="{h - bottom + 4}" '
            f'stroke="#888"/><text x="{x:.1f}" y="{h - bottom + 16}" font-size="10" '
            f'text-anchor="middle">{usd(top * tick / 4)}</text>'
            f'<line x1="{left - 4}" y1="{y:.1f}" x2="{left}" y2="{y:.1f}" stroke="#888"/>'
            f'<text x="{left - 6}" y="{y + 3:.1f}" font-size="10" text-anchor="end">'
            f"{tick * 25}%</text>"
        )
    for i, g in plotted:
        assert g.pass_rate is not None
        x = left + plot_w * ((g.cost_per_trial or 0.0) / top)
        y = (h - bottom) - plot_h * g.pass_rate.estimate
        # labels to the left of points in the right half, so none runs off the plot
        anchor, dx = ("end", -8) if x > left + plot_w / 2 else ("start", 8)
        out.append(
            f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="6" '
            f'fill="{_PALETTE[i % len(_PALETTE)]}"/>'
            f'<text x="{x + dx:.1f}" y="{max(y - 8, 12):.1f}" font-size="10" '
            f'text-anchor="{anchor}">{html.escape(g.label)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def svg_differences(report: Report) -> str:
    """Per-scenario differences (A - B) of each comparison, as bars around zero."""
    if not report.comparisons:
        return "<p>No two groups differ in exactly one factor: nothing to compare.</p>"
    blocks = []
    for n, c in enumerate(report.comparisons):
        items = list(c.per_scenario.items())
        h, mid, half = 24 * len(items) + 30, 420, 200
        out = [
            f'<svg class="plot-diff" id="plot-diff-{n}" width="{mid + half + 40}" height="{h}" '
            'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="per-scenario differences">',
            f'<line x1="{mid}" y1="5" x2="{mid}" y2="{h - 5}" stroke="#888"/>',
        ]
        for i, (scenario, value) in enumerate(items):
            diff = value / c.span  # a fraction of the metric's range
            y = 12 + 24 * i
            x, width = (mid, half * diff) if diff >= 0 else (mid + half * diff, -half * diff)
            color = "#2f9e44" if diff >= 0 else "#c92a2a"
            out.append(
                f'<text x="{mid - half - 10}" y="{y + 12}" font-size="11" '
                f'text-anchor="end">{html.escape(scenario)}</text>'
                f'<rect class="bar" x="{x:.1f}" y="{y}" width="{max(width, 1):.1f}" '
                f'height="16" fill="{color}"/>'
                f'<text x="{mid + half + 5}" y="{y + 12}" font-size="10">{diff * 100:+.0f}</text>'
            )
        out.append("</svg>")
        blocks.append(
            f"<h3>{html.escape(c.factor)}: {html.escape(c.candidate)} - "
            f"{html.escape(c.baseline)} on {html.escape(_compared(c))} "
            f"({html.escape(c.within)})</h3>" + "".join(out)
        )
    return "".join(blocks)


def render_html(report: Report) -> str:
    """The report as one self-contained HTML page (inline CSS and SVG, no script)."""
    esc = html.escape
    md_rows = _group_rows(report)
    groups = "".join(
        "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in md_rows
    )
    labels = [g.label for g in report.groups]
    matrix = "".join(
        f"<tr><td>{esc(s.scenario)}</td>"
        + "".join(f"<td>{p}/{n}</td>" for p, n in (s.cells.get(x, (0, 0)) for x in labels))
        + "</tr>"
        for s in report.scenarios
    )
    reqs = "".join(
        f"<tr><td>{esc(r.requirement)}</td><td>{esc(r.group)}</td>"
        f"<td>{r.passes}/{r.assessed}</td></tr>"
        for r in report.requirements
    )
    comps = "".join(
        f"<li>{esc(c.factor)} {esc(c.candidate)} vs {esc(c.baseline)} ({esc(c.within)}, "
        f"{esc(_compared(c))}, {c.scenarios} scenarios): {_diff(c)} "
        f'<span class="decision">{esc(c.sentence)}</span></li>'
        for c in report.comparisons
    )
    scores = "".join(
        f"<tr><td>{esc(g.label)}</td><td>{esc(m.metric)}</td><td>{m.n}</td>"
        f"<td>{esc(_metric(m))}</td><td>{m.unassessed}</td></tr>"
        for g in report.groups
        for m in g.metrics
    )
    voided = "".join(
        f'<li class="v">{esc(v.scenario)} ({esc(v.group)}): {esc(v.reason)}</li>'
        for v in report.voided
    )
    blocked = "".join(
        f"<li>{esc(b.scenario)} ({b.trials} trial(s)): {esc(b.reason)}</li>" for b in report.blocked
    )
    left_out = "".join(
        f"<li>{esc(t.scenario)} is {esc(t.status)}: {esc(t.reason)}</li>" for t in report.left_out
    )
    notes = "".join(f'<p class="note">note: {esc(n)}</p>' for n in report.notes)
    cost = svg_cost(report)
    cost_plot = f"<h2>Cost per trial against pass rate</h2>{cost}" if cost else ""
    uncounted = "".join(f"<li>{esc(line)}</li>" for line in _uncounted(report))
    head = "".join(f"<th>{esc(h)}</th>" for h in GROUP_HEAD)
    label_heads = "".join(f"<th>{esc(x)}</th>" for x in labels)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>hangar report: {esc(report.sweep)}</title>
<style>{_CSS}</style></head><body>
<h1>Sweep {esc(report.sweep)}</h1>
<p>Generated {report.generated_at:%Y-%m-%d %H:%M} UTC. Only <code>pass</code> and <code>fail</code>
count in rates; other verdicts are shown apart. Intervals are 95% (Wilson for rates, a
seeded paired bootstrap over scenarios for differences).</p>{notes}
<h2>Groups</h2><table><tr>{head}</tr>{groups}</table>
<h3>Not counted (in no rate)</h3><ul>{uncounted or "<li>none</li>"}</ul>
<h2>Scores per metric</h2><table><tr><th>group</th><th>metric</th><th>n</th>
<th>mean [95% CI]</th><th>unassessed</th></tr>{scores}</table>
<h2>Pass rate with 95% interval</h2>{svg_intervals(report)}
{cost_plot}
<h2>Comparisons</h2><ul>{comps or "<li>none</li>"}</ul>
<h2>Per-scenario differences</h2>{svg_differences(report)}
<h2>Pass matrix</h2><table><tr><th>scenario</th>{label_heads}</tr>{matrix}</table>
<h2>Checklist requirements</h2>
<table><tr><th>requirement</th><th>group</th><th>pass rate</th></tr>{reqs}</table>
<h2>Voided trials</h2><ul>{voided or "<li>none</li>"}</ul>
<h2>Not run (blocked_setup)</h2><ul>{blocked or "<li>none</li>"}</ul>
<h2>Tasks left out (broken or not validated: no trial ran)</h2>
<ul>{left_out or "<li>none</li>"}</ul>
</body></html>
"""
