"""What the viewer's trial page shows of an execution trial: its diff (highlighted), the
verifier commands with their output, the host verifier's output. Every value is plain
data the template escapes; the highlighted diff is Pygments' HTML, in which every
character of the input is escaped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pygments import highlight  # type: ignore[import-untyped]
from pygments.formatters import HtmlFormatter  # type: ignore[import-untyped]
from pygments.lexers import DiffLexer  # type: ignore[import-untyped]

from hangar.files import read_json, text_of
from hangar.kinds.execution.testlog import first_failing_test
from hangar.trials.kind import About, Failure

#: The most of a diff highlighted on the page (the whole file is one click away).
DIFF_CAP = 512 * 1024
#: The most of one text file shown inline.
TEXT_CAP = 64 * 1024


def diff_html(evidence: Path) -> tuple[str, int] | None:
    """The workspace diff, highlighted, and how much was cut (None when there is none)."""
    text, cut = text_of(evidence, "diff.patch", DIFF_CAP)
    if not text.strip():
        return None
    formatter = HtmlFormatter(nowrap=False, cssclass="diff", noclasses=False)
    return highlight(text, DiffLexer(), formatter), cut


def commands(evidence: Path) -> list[dict[str, Any]]:
    """The verifier commands with their exit codes and output."""
    records = read_json(evidence / "verifier" / "commands.json") or []
    shown = []
    for r in records if isinstance(records, list) else []:
        if not isinstance(r, dict):
            continue
        out, out_cut = text_of(evidence, str(r.get("stdout", "")), TEXT_CAP)
        err, err_cut = text_of(evidence, str(r.get("stderr", "")), TEXT_CAP)
        code = r.get("exit_code", r.get("exitCode"))
        timed_out = bool(r.get("timed_out", r.get("timedOut", False)))
        shown.append(
            {
                "command": r.get("command"),
                "exit_code": code,
                "timed_out": timed_out,
                "failed": code != 0 or timed_out,
                "status": _status(code, timed_out, None),
                "stdout": out,
                "stderr": err,
                "cut": out_cut + err_cut,
                "stdout_file": r.get("stdout"),
                "stderr_file": r.get("stderr"),
            }
        )
    return shown


def test_script(evidence: Path) -> list[dict[str, Any]]:
    """An image task's test script, as a command with its exit code and output."""
    record = read_json(evidence / "verifier" / "test.json")
    if not isinstance(record, dict):
        return []
    out, out_cut = text_of(evidence, "verifier/stdout.txt", TEXT_CAP)
    err, err_cut = text_of(evidence, "verifier/stderr.txt", TEXT_CAP)
    code, timed_out = record.get("returncode"), bool(record.get("timed_out", False))
    short = reward_short(evidence)
    return [
        {
            "command": "bash /tests/test.sh",
            "exit_code": code,
            "timed_out": timed_out,
            # Its exit status is not its outcome: a script that exits 0 after writing a
            # failing reward failed.
            "failed": code != 0 or timed_out or short is not None,
            "status": _status(code, timed_out, short),
            "stdout": out,
            "stderr": err,
            "cut": out_cut + err_cut,
            "stdout_file": "verifier/stdout.txt",
            "stderr_file": "verifier/stderr.txt",
        }
    ]


#: Lines of a failing command's output `failures` keeps (its end: where errors are).
FAILURE_LINES = 40


def _status(code: object, timed_out: bool, short: str | None) -> str:
    """A command's outcome in words: its exit, and the reward when that failed."""
    said = "timed out" if timed_out else f"exit {code}"
    return f"{said}, {short}" if short else said


def reward_short(evidence: Path) -> str | None:
    """How an image task's reward fell short (`'reward 0 < 1'`, `'not resolved'`), or None
    when it did not (or there is none)."""
    reward = read_json(evidence / "verifier" / "reward.json")
    if not isinstance(reward, dict):
        return None
    value = reward.get("value")
    if not isinstance(value, int | float):
        return f"no reward ({reward.get('problem') or 'none written'})"
    report = read_json(evidence / "verifier" / "swebench-report.json")
    if isinstance(report, dict):
        return None if report.get("resolution") == "RESOLVED_FULL" else "not resolved"
    task = read_json(evidence / "task.json")
    threshold = task.get("threshold", 1.0) if isinstance(task, dict) else 1.0
    if not isinstance(threshold, int | float):
        threshold = 1.0
    return None if value >= threshold else f"reward {value:g} < {threshold:g}"


def reward_rows(evidence: Path) -> list[tuple[str, str]]:
    """An image task's reward as (name, value) rows for people (not its raw JSON)."""
    reward = read_json(evidence / "verifier" / "reward.json")
    if not isinstance(reward, dict):
        return []
    value = reward.get("value")
    rows = [("reward", f"{value:g}" if isinstance(value, int | float) else "none")]
    if short := reward_short(evidence):
        rows.append(("outcome", short))
    if reward.get("problem"):
        rows.append(("problem", str(reward["problem"])))
    for score in reward.get("scores") or []:
        if isinstance(score, dict) and score.get("metric") != "reward":
            v = score.get("value")
            rows.append(
                (str(score.get("metric")), f"{v:g}" if isinstance(v, int | float) else "none")
            )
    report = read_json(evidence / "verifier" / "swebench-report.json")
    if isinstance(report, dict):
        if report.get("not_run"):
            rows.append(("not in the test log", ", ".join(map(str, report["not_run"][:10]))))
        if report.get("log_error"):
            rows.append(("the test log says", str(report["log_error"])))
    return rows


def about(evidence: Path) -> About:
    """A scenario's task text, repository, revision and image; an image task's
    instruction, image and source."""
    loaded = read_json(evidence / "scenario.json")
    if isinstance(loaded, dict) and isinstance(loaded.get("scenario"), dict):
        scenario = loaded["scenario"]
        repository = loaded.get("origin") or scenario.get("repository", "")
        facts = [("repository", str(repository)), ("revision", str(scenario.get("revision", "")))]
        facts.append(("image", str(scenario.get("image", ""))))
        return About(text=str(scenario.get("context", "")), facts=facts)
    task = read_json(evidence / "task.json")
    if not isinstance(task, dict):
        return About(text="", facts=[])
    image = read_json(evidence / "image.json")
    facts = [
        ("task", str(task.get("title") or task.get("name", ""))),
        ("format", "SWE-bench" if task.get("grading") else str(task.get("format", ""))),
    ]
    if isinstance(image, dict):
        facts.append(("image", str(image.get("reference", ""))))
    if task.get("revision"):
        facts.append(("revision", str(task["revision"])))
    text, _ = text_of(evidence, "instruction.md", TEXT_CAP)
    return About(text=text, facts=[(k, v) for k, v in facts if v])


def failures(evidence: Path) -> list[Failure]:
    """The verifier commands (or the test script) that failed, each with the end of its
    output."""
    found = []
    for c in commands(evidence) + test_script(evidence):
        if not c["failed"]:
            continue
        text = "\n".join(part for part in (c["stderr"].rstrip(), c["stdout"].rstrip()) if part)
        logs = _test_logs(evidence) if c["command"] == "bash /tests/test.sh" else []
        first = next((t for t in map(first_failing_test, [text, *logs]) if t is not None), None)
        if first is not None:
            found.append(Failure(what=f"first failing test: {first.name}", output=first.section))
        tail = text.splitlines()[-FAILURE_LINES:]
        found.append(Failure(what=f"$ {c['command']} ({c['status']})", output="\n".join(tail)))
    return found


def _test_logs(evidence: Path) -> list[str]:
    """The text logs the test script left in ``logs/verifier`` (the SWE-bench test log)."""
    folder = evidence / "logs" / "verifier"
    names = sorted(p.name for p in folder.glob("*.txt") if p.is_file() and not p.is_symlink())
    return [
        text_of(evidence, f"logs/verifier/{n}", TEXT_CAP)[0] for n in names if n != "reward.txt"
    ]


def section(evidence: Path | None) -> dict[str, Any]:
    """The execution section of a trial page (empty without evidence): a scenario's host
    verifier output, or an image task's reward."""
    if evidence is None:
        return {}
    diff = diff_html(evidence)
    verification = read_json(evidence / "verifier" / "verification.json")
    reward = read_json(evidence / "verifier" / "reward.json")
    return {
        "diff": diff[0] if diff else "",
        "diff_cut": diff[1] if diff else 0,
        "commands": commands(evidence) + test_script(evidence),
        "verification": verification if verification is not None else reward,
        "verification_title": "Host verifier" if verification is not None else "Reward",
        "reward": reward_rows(evidence),
        "network": [
            line
            for phase in ("agent", "verifier")
            for line in text_of(evidence, f"network/{phase}.jsonl", TEXT_CAP)[0].splitlines()
        ],
    }
