"""What the viewer's trial page shows of a knowledge answer: the answer and its
citations, and, when the viewer was given the gold set, each citation's validity and the
labels people gave the answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hangar.kinds.knowledge.custody import load_arm, load_suite
from hangar.kinds.knowledge.scoring import classify
from hangar.results import TrialResult


def section(result: TrialResult, suites: list[Path]) -> dict[str, Any]:
    """The knowledge section of a trial page (`suites`: the gold sets the viewer knows)."""
    answer = result.details.get("answer") or {}
    citations = [dict(c) for c in answer.get("citations", []) if isinstance(c, dict)]
    found: dict[str, Any] = {"answer": answer.get("answer", ""), "citations": citations}
    suite_name, qid = result.details.get("suite"), result.details.get("question")
    folder = next((s for s in suites if s.name == suite_name), None)
    if folder is None:
        found["note"] = "start the viewer with --knowledge SUITE to see validity and labels"
        return found
    suite = load_suite(folder)
    key = suite.keys.get(str(qid))
    labels = []
    try:
        labels = [x for x in load_arm(suite, result.arm).labels if x.id == qid]
    except Exception as exc:  # no answers of this arm in the suite yet: no labels
        found["note"] = f"no labels: {exc}"
    unsupported = {u for x in labels for u in x.unsupported}
    if key is not None:
        for c in citations:
            digest = str(c.get("sha256") or "").lower().removeprefix("sha256:")
            c["kind"] = classify(str(c.get("uri", "")), digest, key, unsupported)
    found["labels"] = [x.model_dump() for x in labels]
    return found


def suite_page(params: dict[str, str], query: dict[str, str], suites: list[Path]) -> dict[str, Any]:
    """A gold set's report in the viewer, its arms compared as the query asks."""
    from hangar.kinds.knowledge.custody import sealed_suite
    from hangar.kinds.knowledge.render import render_html
    from hangar.kinds.knowledge.report import build_gold_set_report

    name = params["name"]
    folder = next((s for s in suites if s.name == name), None)
    if folder is None:
        raise LookupError(f"no knowledge suite {name!r} given")
    suite = sealed_suite(folder)
    arms = sorted(p.name.removesuffix(".jsonl") for p in (folder / "answers").glob("*.jsonl"))
    report = build_gold_set_report(
        suite,
        arms,
        baseline=query.get("baseline") or None,
        candidate=query.get("candidate") or None,
    )
    body = render_html(report)
    return {
        "name": name,
        "inner": body[body.index("<body>") + 6 : body.index("</body>")],
        "arms": arms,
    }
