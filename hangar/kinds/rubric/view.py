"""What the viewer's trial page shows of a rubric sample: per-dimension scores, the
structural checks, the judge's calls in both orderings, the output judged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hangar.files import read_json, text_of
from hangar.results import TrialResult

#: The most of the output shown inline.
TEXT_CAP = 64 * 1024


def section(result: TrialResult, evidence: Path | None) -> dict[str, Any]:
    """The rubric section of a trial page."""
    judged = (read_json(evidence / "judge.json") if evidence else None) or {}
    checks = (read_json(evidence / "checks.json") if evidence else None) or {}
    output, cut = text_of(evidence, "output.md", TEXT_CAP) if evidence else ("", 0)
    return {
        "phase": result.details.get("phase"),
        "difficulty": result.details.get("difficulty"),
        "judge_model": result.details.get("judgeModel"),
        "ci_judge": result.details.get("ciJudge"),
        "human": result.details.get("humanScores") or {},
        "verdicts": judged.get("verdicts", []) if isinstance(judged, dict) else [],
        "checks": checks.get("checks", []) if isinstance(checks, dict) else [],
        "tokenizer": checks.get("tokenizer") if isinstance(checks, dict) else None,
        "output": output,
        "cut": cut,
        "judge_cost": result.judge_usage.cost_usd,
    }
