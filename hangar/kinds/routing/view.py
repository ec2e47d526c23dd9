"""What the viewer's trial page shows of a routing case: the prompt, the golden set, the
route the agent took and every skill it loaded (where from, and whether the bytes it read
were the installed ones)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hangar.files import read_json
from hangar.results import TrialResult
from hangar.trials.kind import About


def section(result: TrialResult, evidence: Path | None) -> dict[str, Any]:
    """The routing section of a trial page."""
    route = (read_json(evidence / "route.json") if evidence else None) or {}
    if not isinstance(route, dict):
        route = {}
    installed = (read_json(evidence / "skills.json") if evidence else None) or {}
    expected, forbidden = set(route.get("expected") or []), set(route.get("forbidden") or [])
    loaded = set(route.get("loaded") or [])
    skills = sorted((installed.get("skills") or {}) if isinstance(installed, dict) else {})
    rows = [
        {
            "skill": name,
            "expected": name in expected,
            "forbidden": name in forbidden,
            "loaded": name in loaded,
            "right": (name in loaded) == (name in expected),
        }
        for name in skills
    ]
    return {
        "rows": rows,
        "folder": installed.get("folder", "") if isinstance(installed, dict) else "",
        "loads": [x for x in route.get("loads") or [] if isinstance(x, dict)],
        "outside": [x for x in route.get("outside") or [] if isinstance(x, dict)],
        "missing": route.get("missing") or [],
        "extra": route.get("extra") or [],
        "forbidden_loaded": route.get("forbidden_loaded") or [],
        "graded": bool(route),
    }


def about(evidence: Path) -> About:
    """The prompt, the suite and the image."""
    case = read_json(evidence / "case.json")
    if not isinstance(case, dict):
        return About(text="", facts=[])
    spec = case.get("case") if isinstance(case.get("case"), dict) else {}
    facts = [("suite", str(case.get("suite", ""))), ("image", str(case.get("image", "")))]
    return About(text=str((spec or {}).get("prompt", "")), facts=[(k, v) for k, v in facts if v])
