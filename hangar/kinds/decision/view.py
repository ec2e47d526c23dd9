"""What the viewer's trial page shows of a decision case: its scenario, the choices
(expected and selected), the grader's explanation and the model's answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hangar.files import read_json
from hangar.results import TrialResult


def section(result: TrialResult, evidence: Path | None) -> dict[str, Any]:
    """The decision section of a trial page."""
    d = result.details
    case = (read_json(evidence / "case.json") if evidence else None) or {}
    spec = case.get("case", {}) if isinstance(case, dict) else {}
    grade = (read_json(evidence / "grader.json") if evidence else None) or {}
    expected, selected = set(d.get("expected") or []), set(d.get("selected") or [])
    choices = [
        {
            "id": c.get("id"),
            "text": c.get("text"),
            "expected": c.get("id") in expected,
            "selected": c.get("id") in selected,
        }
        for c in spec.get("choices", [])
        if isinstance(c, dict)
    ]
    return {
        "scenario": spec.get("scenario", ""),
        "choices": choices,
        "expected": sorted(expected),
        "selected": sorted(selected),
        "explanation": grade.get("explanation", "") if isinstance(grade, dict) else "",
        "output": d.get("output", ""),
        "skill": d.get("skillPath"),
    }
