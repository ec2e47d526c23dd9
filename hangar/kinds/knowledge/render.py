"""The knowledge report as text, Markdown, HTML (one page, no script, inline SVG) or
JSON. Every string from the suite's files is escaped where it is shown (the page through
`hangar.pages`' autoescaping templates)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from hangar import pages
from hangar.kinds.knowledge.report import ArmReport, KnowledgeComparison, KnowledgeReport
from hangar.scores.plots import Tick, percent_ticks

TEMPLATES = Path(__file__).resolve().parent / "templates"


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _metric(arm: ArmReport, metric: str) -> str:
    m = next(m for m in arm.metrics if m.metric == metric)
    return f"{_pct(m.mean)} [{_pct(m.ci_low)}, {_pct(m.ci_high)}] ({m.k}/{m.n})"


def _kappa(arm: ArmReport) -> str:
    a = arm.agreement
    if len(a.raters) < 2:
        return "kappa: fewer than two raters"
    value = "undefined" if a.kappa is None else f"{a.kappa:.3f}"
    return f"kappa {a.raters[0]} / {a.raters[1]}: {value} over {a.pairs} answers"


def _counts(arm: ArmReport) -> str:
    c = arm.citations
    return (
        f"{c['total']} citations: {c['valid']} valid, {c['fabricated']} fabricated, "
        f"{c['stale']} stale, {c['unsupported']} unsupported"
    )


def _diff(c: KnowledgeComparison) -> str:
    return (
        f"{c.candidate} - {c.baseline} on {c.metric.replace('_', ' ')} over {c.n} questions: "
        f"{c.difference * 100:+.1f} points, 95% CI [{c.ci_low * 100:+.1f}, {c.ci_high * 100:+.1f}]"
    )


def _void(report: KnowledgeReport) -> str:
    if not report.void:
        return ""
    where = "; ".join(f"{f['id']} in {f['where']}" for f in report.void.get("found", []))
    return f"VOID since {report.void.get('voided')}: a canary was found ({where})"


def lines(report: KnowledgeReport) -> list[str]:
    """The report as plain lines (text and the base of Markdown)."""
    out = [f"knowledge suite {report.suite} (sealed {report.manifest.get('sealed', '?')})"]
    if report.void:
        out.append(_void(report))
    for arm in report.arms:
        out += [
            "",
            f"arm {arm.arm}" + ("" if arm.source == "labels" else f" ({arm.source})"),
            f"  {arm.meta_note}",
            f"  correctness        {_metric(arm, 'correctness')}",
            f"  citation validity  {_metric(arm, 'citation_validity')}",
            f"  {_counts(arm)}",
            f"  {arm.scored} scored, {arm.pending} pending (not labelled: never scored), "
            f"{arm.unanswered} unanswered (scored incorrect)",
            f"  {_kappa(arm)}",
        ]
    for c in report.comparisons:
        out += ["", _diff(c), f"  {c.sentence}"]
    return out


def render_text(report: KnowledgeReport) -> str:
    """Plain text."""
    return "\n".join(lines(report)) + "\n"


def render_markdown(report: KnowledgeReport) -> str:
    """Markdown: a table of the arms, then the comparisons."""
    out = [f"# Knowledge suite {report.suite}", ""]
    if report.void:
        out += [f"**{_void(report)}**", ""]
    out += [
        "| arm | correctness | citation validity | citations | pending | kappa | meta |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for arm in report.arms:
        cells = [
            arm.arm,
            _metric(arm, "correctness"),
            _metric(arm, "citation_validity"),
            _counts(arm),
            str(arm.pending),
            _kappa(arm),
            arm.meta_note,
        ]
        out.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    for c in report.comparisons:
        out += ["", f"- {_diff(c)}: **{c.sentence}**"]
    return "\n".join(out) + "\n"


class RateRow(NamedTuple):
    """An arm's rate: its interval and mean, where they go."""

    label: str
    y: float
    low: float
    high: float
    mid: float
    colour: str


class RatePlot(NamedTuple):
    """Each arm's two rates with their intervals, on 0-100%."""

    width: float
    height: float
    left: float
    ticks: list[Tick]
    rows: list[RateRow]


def rate_plot(report: KnowledgeReport) -> RatePlot:
    """The rates plot of `report`."""
    rows = [(a.arm, m) for a in report.arms for m in a.metrics]
    left, width, h = 260, 420, 26 * len(rows) + 30
    ticks = percent_ticks(left, width)
    drawn = []
    for i, (arm, m) in enumerate(rows):
        low, high, mid = (left + width * v for v in (m.ci_low, m.ci_high, m.mean))
        colour = "#3b6fb6" if m.metric == "correctness" else "#d9822b"
        label = f"{arm} · {m.metric.replace('_', ' ')}"
        drawn.append(RateRow(label, 12 + 26 * i, low, high, mid, colour))
    return RatePlot(left + width + 40, h, left, ticks, drawn)


def render_html(report: KnowledgeReport) -> str:
    """One page (``templates/gold-set-report.html``, autoescaped through `hangar.pages`)."""
    rows = [
        (
            arm.arm,
            _metric(arm, "correctness"),
            _metric(arm, "citation_validity"),
            _counts(arm),
            f"{arm.pending} pending, {arm.unanswered} unanswered",
            _kappa(arm),
            arm.meta_note,
        )
        for arm in report.arms
    ]
    return pages.render(
        TEMPLATES,
        "gold-set-report.html",
        r=report,
        void=_void(report) if report.void else "",
        rows=rows,
        plot=rate_plot(report),
        comparisons=[(_diff(c), c.sentence) for c in report.comparisons],
    )


def render(report: KnowledgeReport, fmt: str) -> str:
    """In `fmt`: text, md, html or json."""
    if fmt == "json":
        return report.model_dump_json(indent=1) + "\n"
    renderers = {"text": render_text, "md": render_markdown, "html": render_html}
    return renderers[fmt](report)
