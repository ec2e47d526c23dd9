"""The knowledge report as text, Markdown, HTML (one page, no script, inline SVG) or
JSON. Every string from the suite's files is escaped where it is shown."""

from __future__ import annotations

from html import escape

from hangar.kinds.knowledge.report import ArmReport, KnowledgeComparison, KnowledgeReport


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


def _svg(report: KnowledgeReport) -> str:
    """Each arm's two rates with their intervals, on 0-100%."""
    rows = [(a.arm, m) for a in report.arms for m in a.metrics]
    left, width, h = 260, 420, 26 * len(rows) + 30
    out = [
        f'<svg id="plot-rates" width="{left + width + 40}" height="{h}" '
        'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="rates with 95% intervals">'
    ]
    for tick in range(0, 101, 25):
        x = left + width * tick / 100
        out.append(
            f'<line x1="{x}" y1="4" x2="{x}" y2="{h - 18}" stroke="#ddd"/>'
            f'<text x="{x}" y="{h - 4}" font-size="10" text-anchor="middle">{tick}%</text>'
        )
    for i, (arm, m) in enumerate(rows):
        y = 12 + 26 * i
        lo, hi, mid = (left + width * v for v in (m.ci_low, m.ci_high, m.mean))
        colour = "#3b6fb6" if m.metric == "correctness" else "#d9822b"
        out.append(
            f'<text x="{left - 6}" y="{y + 4}" font-size="11" text-anchor="end">'
            f"{escape(arm)} · {m.metric.replace('_', ' ')}</text>"
            f'<line class="interval" x1="{lo:.1f}" y1="{y}" x2="{hi:.1f}" y2="{y}" '
            f'stroke="{colour}" stroke-width="3"/>'
            f'<circle cx="{mid:.1f}" cy="{y}" r="5" fill="{colour}"/>'
        )
    out.append("</svg>")
    return "".join(out)


def render_html(report: KnowledgeReport) -> str:
    """One page."""
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{escape(x)}</td>"
            for x in (
                arm.arm,
                _metric(arm, "correctness"),
                _metric(arm, "citation_validity"),
                _counts(arm),
                f"{arm.pending} pending, {arm.unanswered} unanswered",
                _kappa(arm),
                arm.meta_note,
            )
        )
        + "</tr>"
        for arm in report.arms
    )
    comparisons = "".join(
        f"<li>{escape(_diff(c))}: <b>{escape(c.sentence)}</b></li>" for c in report.comparisons
    )
    void = f'<p class="void">{escape(_void(report))}</p>' if report.void else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>knowledge {escape(report.suite)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2rem;color:#222}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.3rem .5rem}}
th{{background:#f3f3f3}}.void{{color:#b00020;font-weight:bold}}</style></head><body>
<h1>Knowledge suite {escape(report.suite)}</h1>{void}
<table><tr><th>arm</th><th>correctness</th><th>citation validity</th><th>citations</th>
<th>not scored</th><th>raters</th><th>meta</th></tr>{rows}</table>
{_svg(report)}
<h2>Decision</h2><ul>{comparisons or "<li>no baseline and candidate named</li>"}</ul>
</body></html>
"""


def render(report: KnowledgeReport, fmt: str) -> str:
    """In `fmt`: text, md, html or json."""
    if fmt == "json":
        return report.model_dump_json(indent=1) + "\n"
    renderers = {"text": render_text, "md": render_markdown, "html": render_html}
    return renderers[fmt](report)
