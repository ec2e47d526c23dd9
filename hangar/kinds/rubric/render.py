"""A benchmark report as one self-contained HTML page: no script, inline SVG plots (each
phase's scores by dimension and by difficulty, and the trend over runs from
``history.yaml``). Every string from a run is escaped."""

from __future__ import annotations

from html import escape
from pathlib import Path

from hangar.kinds.rubric.report import BenchmarkReport, load_history

_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:.8rem 0;font-size:.9rem}
td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:left}
th{background:#f3f3f3} .bad{color:#b00020} .note{color:#8a5a00}
svg{background:#fafafa;border:1px solid #ddd;margin:.4rem 0}
"""


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def bars(title: str, values: dict[str, float], top: float = 5.0, css_id: str = "") -> str:
    """Horizontal bars of `values` on 0..`top`."""
    h, left, width = 26 * len(values) + 34, 170, 380
    out = [
        f'<svg class="bars" id="{escape(css_id)}" width="{left + width + 60}" height="{h}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{escape(title)}">'
    ]
    for tick in range(int(top) + 1):
        x = left + width * tick / top
        out.append(
            f'<line x1="{x:.1f}" y1="6" x2="{x:.1f}" y2="{h - 18}" stroke="#ddd"/>'
            f'<text x="{x:.1f}" y="{h - 4}" font-size="10" text-anchor="middle">{tick}</text>'
        )
    for i, (name, value) in enumerate(values.items()):
        y = 10 + 26 * i
        out.append(
            f'<text x="{left - 6}" y="{y + 12}" font-size="11" text-anchor="end">'
            f"{escape(name)}</text>"
            f'<rect class="bar" x="{left}" y="{y}" width="{width * value / top:.1f}" height="16" '
            f'fill="#3b6fb6"/><text x="{left + width * value / top + 4:.1f}" y="{y + 12}" '
            f'font-size="10">{value:.2f}</text>'
        )
    out.append("</svg>")
    return "".join(out)


_COLOURS = ("#2f9e44", "#3b6fb6", "#c2410c", "#7c3aed", "#0e7490", "#a16207")


def trend(history: list[dict[str, object]]) -> str:
    """Each run's overall average and phase averages, oldest first, as lines on 1-5."""
    runs = [r for r in history if isinstance(r.get("overall_avg"), int | float)]
    if not runs:
        return "<p>No scored run in history.yaml yet.</p>"
    phases = sorted({p for r in runs for p in (r.get("phases") or {})})  # type: ignore[attr-defined]
    series = {"overall": [r.get("overall_avg") for r in runs]} | {
        p: [(r.get("phases") or {}).get(p) for r in runs]  # type: ignore[attr-defined]
        for p in phases
    }
    w, h, pad, left = 640, 260, 34, 44
    step = (w - left - pad) / max(1, len(runs) - 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return left + step * i, h - pad - (h - 2 * pad) * (v - 1) / 4

    out = [
        f'<svg id="plot-trend" width="{w + 150}" height="{h}" xmlns="http://www.w3.org/2000/svg" '
        'role="img" aria-label="averages over runs">'
    ]
    for tick in range(1, 6):
        _, y = xy(0, tick)
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{w - pad}" y2="{y:.1f}" stroke="#e2e2e2"/>'
            f'<text x="{left - 8}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{tick}</text>'
        )
    for i, r in enumerate(runs):
        x, _ = xy(i, 1)
        label = escape(str(r.get("run_id", ""))[-9:])
        out.append(
            f'<text x="{x:.1f}" y="{h - pad + 16}" font-size="9" text-anchor="middle">'
            f"{label}</text>"
        )
    for k, (name, values) in enumerate(series.items()):
        colour = _COLOURS[k % len(_COLOURS)]
        points = [(i, float(v)) for i, v in enumerate(values) if isinstance(v, int | float)]
        coords = [xy(i, v) for i, v in points]
        out.append(
            f'<polyline points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in coords)}" fill="none" '
            f'stroke="{colour}" stroke-width="{3 if name == "overall" else 1.5}"/>'
        )
        out += [
            f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}">'
            f"<title>{escape(str(runs[i].get('run_id')))} {escape(name)}: {v:.2f}</title></circle>"
            for (x, y), (i, v) in zip(coords, points, strict=True)
        ]
        out.append(
            f'<text x="{w - pad + 12}" y="{pad + 16 * k}" font-size="11" fill="{colour}">'
            f"{escape(name)}</text>"
        )
    out.append("</svg>")
    return "".join(out)


def render_html(report: BenchmarkReport, history: Path) -> str:
    """The page (see the module docstring)."""
    s = report.summary
    phases = []
    for label, r in report.results.items():
        rows = "".join(
            f"<tr><td>{escape(g.kind)}</td><td>{escape(g.sample or '-')}</td>"
            f"<td>{g.baseline_score:.2f}</td><td>{g.current_score:.2f}</td>"
            f'<td class="bad">{escape(g.regression)}</td>'
            f"<td>{escape(g.affected_dimension or '-')}</td></tr>"
            for g in r.regressions
        )
        calibration = "".join(
            f"<tr><td>{escape(c.dimension)}</td><td>{c.pairs}</td><td>{_fmt(c.kappa)}</td>"
            f"<td>{_fmt(c.mean_abs_diff)}</td>"
            + ('<td class="bad">below 0.6</td></tr>' if c.below_bar else "<td>ok</td></tr>")
            for c in r.calibration
        )
        phases.append(
            f"<h2>{escape(label)}</h2><p>{r.samples_run} samples, average {_fmt(r.avg_score)} "
            f"(min {_fmt(r.min_score)}, max {_fmt(r.max_score)}), structural pass rate "
            f"{_fmt(r.structural_pass_rate)}, judge average {_fmt(r.judge_avg)}, "
            f"{r.unassessed} unassessed. Skill version "
            f"{escape(report.skill_versions.get(label, '-'))}.</p>"
            + "<h3>By dimension</h3>"
            + bars(f"{label} by dimension", r.by_dimension, css_id=f"dim-{label}")
            + "<h3>By difficulty</h3>"
            + bars(f"{label} by difficulty", r.by_difficulty, css_id=f"difficulty-{label}")
            + "<h3>Position bias (mean gap between orderings)</h3><p>"
            + (", ".join(f"{escape(d)} {g:.2f}" for d, g in r.position_bias.items()) or "-")
            + "</p><h3>Judge against people</h3><table><tr><th>dimension</th><th>pairs</th>"
            "<th>kappa (quadratic)</th><th>mean |diff|</th><th></th></tr>"
            + calibration
            + "</table><h3>Regressions</h3><table><tr><th>kind</th><th>sample</th>"
            "<th>baseline</th><th>now</th><th>change</th><th>dimension</th></tr>"
            + (rows or '<tr><td colspan="6">none</td></tr>')
            + "</table>"
        )
    runs = load_history(history) if history.is_file() else []
    judge = escape(report.judge_model) + (
        " (CI judge: never a baseline)" if report.ci_judge else ""
    )
    note = f'<p class="note">{escape(report.not_comparable)}</p>' if report.not_comparable else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>benchmark {escape(report.run_id)}</title>
<style>{_CSS}</style></head><body>
<h1>Benchmark run {escape(report.run_id)}</h1>
<p>{escape(report.timestamp)}: model {escape(report.model)}, judge {judge}; baseline
{escape(report.baseline or "none")}. Costs: model ${report.costs.get("model", 0):.4f},
judge ${report.costs.get("judge", 0):.4f}.</p>{note}
<p><b>{s.total_samples} samples, overall average {_fmt(s.overall_avg)}, {s.regressions_detected}
regression(s).</b> {escape(s.recommendation)}</p>
<h2>Trend over runs</h2>{trend(runs)}
{"".join(phases)}
</body></html>
"""
