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


def test_script(evidence: Path) -> list[dict[str, Any]]:
    """An image task's test script, as a command with its exit code and output."""
    record = read_json(evidence / "verifier" / "test.json")
    if not isinstance(record, dict):
        return []
    out, out_cut = text_of(evidence, "verifier/stdout.txt", TEXT_CAP)
    err, err_cut = text_of(evidence, "verifier/stderr.txt", TEXT_CAP)
    return [
        {
            "command": "bash /tests/test.sh",
            "exit_code": record.get("returncode"),
            "timed_out": record.get("timed_out", False),
            "stdout": out,
            "stderr": err,
            "cut": out_cut + err_cut,
            "stdout_file": "verifier/stdout.txt",
            "stderr_file": "verifier/stderr.txt",
        }
    ]


#: Lines of a failing command's output `failures` keeps (its end: where errors are).
FAILURE_LINES = 40


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
        if c["exit_code"] == 0 and not c["timed_out"]:
            continue
        how = "timed out" if c["timed_out"] else f"exited {c['exit_code']}"
        text = "\n".join(part for part in (c["stderr"].rstrip(), c["stdout"].rstrip()) if part)
        tail = text.splitlines()[-FAILURE_LINES:]
        found.append(Failure(what=f"$ {c['command']} ({how})", output="\n".join(tail)))
    return found


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
        "network": [
            line
            for phase in ("agent", "verifier")
            for line in text_of(evidence, f"network/{phase}.jsonl", TEXT_CAP)[0].splitlines()
        ],
    }
