"""What the trial page shows of each kind of trial, from its result and its evidence files.

Each kind gets its own section: an execution trial its diff (highlighted) and verifier
commands; a decision case its choices, expected and selected, and the explanation; a
rubric sample its dimensions, structural checks and the judge's calls in both orderings;
a knowledge answer its citations (with their validity and the labels, when the viewer
knows the suite). Every value is plain data: the templates escape it. The highlighted
diff is Pygments' HTML, whose every character of the input is escaped by Pygments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pygments import highlight  # type: ignore[import-untyped]
from pygments.formatters import HtmlFormatter  # type: ignore[import-untyped]
from pygments.lexers import DiffLexer  # type: ignore[import-untyped]

from hangar.results import TrialResult
from hangar.viewer.data import Bundle, read_json

#: The most of a diff highlighted on the page (the whole file is one click away).
DIFF_CAP = 512 * 1024
#: The most of one text file shown inline.
TEXT_CAP = 64 * 1024


def text_of(bundle: Bundle, rel: str, cap: int = TEXT_CAP) -> tuple[str, int]:
    """An evidence file as text (undecodable bytes replaced) and how much was cut."""
    path = bundle.folder / rel
    if not path.is_file():
        return "", 0
    with path.open("rb") as handle:
        data = handle.read(cap + 1)
    size = path.stat().st_size
    return data[:cap].decode("utf-8", errors="replace"), max(0, size - cap)


def diff_html(bundle: Bundle) -> tuple[str, int] | None:
    """The workspace diff, highlighted (None when there is none)."""
    text, cut = text_of(bundle, "diff.patch", DIFF_CAP)
    if not text.strip():
        return None
    formatter = HtmlFormatter(nowrap=False, cssclass="diff", noclasses=False)
    return highlight(text, DiffLexer(), formatter), cut


def commands(bundle: Bundle) -> list[dict[str, Any]]:
    """The verifier commands with their exit codes and output."""
    records = read_json(bundle.folder / "verifier" / "commands.json") or []
    shown = []
    for r in records if isinstance(records, list) else []:
        if not isinstance(r, dict):
            continue
        out, out_cut = text_of(bundle, str(r.get("stdout", "")))
        err, err_cut = text_of(bundle, str(r.get("stderr", "")))
        shown.append(
            {
                "command": r.get("command"),
                "exit_code": r.get("exit_code", r.get("exitCode")),
                "timed_out": r.get("timed_out", r.get("timedOut", False)),
                "stdout": out,
                "stderr": err,
                "cut": out_cut + err_cut,
                "stdout_file": r.get("stdout"),
                "stderr_file": r.get("stderr"),
            }
        )
    return shown


def decision(result: TrialResult, bundle: Bundle | None) -> dict[str, Any]:
    """A decision case: its scenario, choices, expected and selected, the explanation."""
    d = result.details
    case = (read_json(bundle.folder / "case.json") if bundle else None) or {}
    spec = case.get("case", {}) if isinstance(case, dict) else {}
    grade = (read_json(bundle.folder / "grader.json") if bundle else None) or {}
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


def rubric(result: TrialResult, bundle: Bundle | None) -> dict[str, Any]:
    """A rubric sample: per-dimension scores, checks, the judge's calls in both orderings."""
    judged = (read_json(bundle.folder / "judge.json") if bundle else None) or {}
    checks = (read_json(bundle.folder / "checks.json") if bundle else None) or {}
    output, cut = text_of(bundle, "output.md") if bundle else ("", 0)
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


def knowledge(result: TrialResult, bundle: Bundle | None, suites: list[Path]) -> dict[str, Any]:
    """A knowledge answer: its citations, and with the suite known, their validity and
    the labels."""
    answer = result.details.get("answer") or {}
    citations = [dict(c) for c in answer.get("citations", []) if isinstance(c, dict)]
    found: dict[str, Any] = {"answer": answer.get("answer", ""), "citations": citations}
    suite_name, qid = result.details.get("suite"), result.details.get("question")
    folder = next((s for s in suites if s.name == suite_name), None)
    if folder is None:
        found["note"] = "start the viewer with --knowledge SUITE to see validity and labels"
        return found
    from hangar.kinds.knowledge.custody import load_arm, load_suite
    from hangar.kinds.knowledge.scoring import classify

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
