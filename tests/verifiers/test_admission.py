"""Every rule of verification admission (DESIGN.md phase 11), each on its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hangar.results import Verdict
from hangar.verifiers.admission import evidence_problem, judge
from hangar.verifiers.protocol import CommandRecord

CHECKLIST = ("even lists work", "odd lists work")
TRACE = "a" * 64


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    art = tmp_path / "artifacts"
    (art / "evidence").mkdir(parents=True)
    (art / "evidence" / "even.txt").write_text("ok")
    (art / "evidence" / "odd.txt").write_text("ok")
    return art


def verification(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "caseId": "case-1",
        "traceSha256": TRACE,
        "checks": [
            {"requirement": "even lists work", "status": "pass", "evidence": ["evidence/even.txt"]},
            {"requirement": "odd lists work", "status": "pass", "evidence": ["evidence/odd.txt"]},
        ],
        "route": {"status": "pass", "evidence": ["evidence/even.txt"]},
        "scope": {"status": "pass", "evidence": ["evidence/odd.txt"]},
    }
    base.update(changes)
    return base


def run(artifacts: Path, payload: dict[str, Any] | str, **kw: Any) -> tuple[Verdict, str]:
    raw = payload if isinstance(payload, str) else json.dumps(payload)
    args: dict[str, Any] = dict(
        case="case-1",
        trace_sha256=TRACE,
        completed=True,
        checklist=CHECKLIST,
        artifacts=artifacts,
        commands=[],
        canaries_found=[],
    )
    args.update(kw)
    j = judge(raw, **args)
    return j.verdict, j.reason


def with_check(index: int, **changes: Any) -> dict[str, Any]:
    v = verification()
    v["checks"][index] = {**v["checks"][index], **changes}
    return v


def test_a_sound_verification_passes(artifacts: Path) -> None:
    verdict, reason = run(artifacts, verification())
    assert verdict is Verdict.PASS and "2 checklist requirements passed" in reason


def test_missing_checklist_item(artifacts: Path) -> None:
    v = verification()
    v["checks"].pop(1)
    assert run(artifacts, v) == (
        Verdict.VERIFIER_ERROR,
        "checklist item not covered: 'odd lists work'",
    )


def test_extra_checklist_item(artifacts: Path) -> None:
    v = verification()
    v["checks"].append({"requirement": "bonus", "status": "pass", "evidence": ["evidence/odd.txt"]})
    verdict, reason = run(artifacts, v)
    assert (
        verdict is Verdict.VERIFIER_ERROR and "requirement not in the checklist: 'bonus'" in reason
    )


def test_duplicate_checklist_item(artifacts: Path) -> None:
    v = verification()
    v["checks"].append(dict(v["checks"][0]))
    verdict, reason = run(artifacts, v)
    assert verdict is Verdict.VERIFIER_ERROR and "covered 2 times: 'even lists work'" in reason


def test_reworded_checklist_item(artifacts: Path) -> None:
    verdict, reason = run(artifacts, with_check(0, requirement="Even lists work"))
    assert verdict is Verdict.VERIFIER_ERROR
    assert "not covered: 'even lists work'" in reason
    assert "not in the checklist: 'Even lists work'" in reason


def test_pass_without_evidence(artifacts: Path) -> None:
    verdict, reason = run(artifacts, with_check(0, evidence=[]))
    assert verdict is Verdict.FAIL and "passing finding without evidence" in reason


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/etc/passwd", "is an absolute path"),
        ("evidence/../../secret", "contains '..'"),
        ("evidence/nope.txt", "does not exist"),
        ("evidence", "is not a regular file"),
    ],
)
def test_inadmissible_evidence_paths(artifacts: Path, path: str, words: str) -> None:
    verdict, reason = run(artifacts, with_check(0, evidence=[path]))
    assert verdict is Verdict.FAIL and "inadmissible evidence" in reason and words in reason


def test_evidence_symlink(artifacts: Path) -> None:
    (artifacts / "evidence" / "link.txt").symlink_to("/etc/passwd")
    verdict, reason = run(artifacts, with_check(0, evidence=["evidence/link.txt"]))
    assert verdict is Verdict.FAIL and "goes through a symlink (evidence/link.txt)" in reason


def test_evidence_symlink_in_a_parent_folder(artifacts: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "even.txt").write_text("forged")
    (artifacts / "linked").symlink_to(outside)
    verdict, reason = run(artifacts, with_check(0, evidence=["linked/even.txt"]))
    assert verdict is Verdict.FAIL and "goes through a symlink (linked)" in reason


def test_one_bad_path_among_good_ones(artifacts: Path) -> None:
    verdict, _ = run(artifacts, with_check(0, evidence=["evidence/even.txt", "/etc/passwd"]))
    assert verdict is Verdict.FAIL


def test_stale_trace(artifacts: Path) -> None:
    verdict, reason = run(artifacts, verification(traceSha256="b" * 64))
    assert verdict is Verdict.VERIFIER_ERROR and reason.startswith("stale trace")


def test_incomplete_run(artifacts: Path) -> None:
    verdict, reason = run(artifacts, verification(), completed=False)
    assert verdict is Verdict.FAIL and reason.startswith("incomplete run")


def test_unassessed_finding(artifacts: Path) -> None:
    verdict, reason = run(artifacts, with_check(1, status="unassessed"))
    assert verdict is Verdict.FAIL and "unassessed finding: 'odd lists work'" in reason


def test_failed_finding(artifacts: Path) -> None:
    verdict, reason = run(artifacts, with_check(1, status="fail"))
    assert (verdict, reason) == (Verdict.FAIL, "failed check: 'odd lists work'")


def test_wrong_case(artifacts: Path) -> None:
    verdict, reason = run(artifacts, verification(caseId="other"))
    assert verdict is Verdict.VERIFIER_ERROR and "wrong case" in reason


@pytest.mark.parametrize("field", ["route", "scope"])
def test_route_and_scope_are_findings_never_strings(artifacts: Path, field: str) -> None:
    # Seed 001: route and scope are Findings; the pre-seed bare string is malformed, and
    # the message shows the expected shape.
    for value in ("junit", "  ", None, ["pass"]):
        verdict, reason = run(artifacts, verification(**{field: value}))
        assert verdict is Verdict.VERIFIER_ERROR
        assert reason.startswith(f"malformed verification: {field}: {field} must be a Finding")
        assert '{"status": "pass" | "fail" | "unassessed", "evidence": [' in reason
    v = verification()
    del v[field]
    verdict, reason = run(artifacts, v)
    assert verdict is Verdict.VERIFIER_ERROR and f"malformed verification: {field}" in reason


@pytest.mark.parametrize("field", ["route", "scope"])
@pytest.mark.parametrize(
    ("finding", "words"),
    [
        ({"status": "fail", "evidence": ["evidence/odd.txt"]}, "failed {field}"),
        ({"status": "unassessed", "evidence": []}, "unassessed {field}"),
        ({"status": "pass", "evidence": []}, "passing {field} without evidence"),
        ({"status": "pass"}, "passing {field} without evidence"),
        ({"status": "pass", "evidence": ["../x"]}, "inadmissible evidence for {field}: "),
        ({"status": "pass", "evidence": ["evidence/no.txt"]}, "'evidence/no.txt' does not exist"),
        ({"status": "passed", "evidence": []}, "malformed verification: {field}.status"),
    ],
)
def test_route_and_scope_are_admitted_like_checks(
    artifacts: Path, field: str, finding: dict[str, Any], words: str
) -> None:
    verdict, reason = run(artifacts, verification(**{field: finding}))
    expected = Verdict.VERIFIER_ERROR if words.startswith("malformed") else Verdict.FAIL
    assert verdict is expected and words.format(field=field) in reason, reason


def test_findings_reach_the_judgement(artifacts: Path) -> None:
    j = judge(
        json.dumps(verification(scope={"status": "fail", "evidence": ["evidence/odd.txt"]})),
        case="case-1",
        trace_sha256=TRACE,
        completed=True,
        checklist=CHECKLIST,
        artifacts=artifacts,
        commands=[],
        canaries_found=[],
    )
    assert j.verdict is Verdict.FAIL and j.reason == "failed scope"
    assert j.route is not None and j.route.status == "pass"
    assert j.route.evidence == ("evidence/even.txt",)
    assert j.scope is not None and j.scope.status == "fail"


@pytest.mark.parametrize("raw", ["", "not json", "[1, 2]", '{"caseId": "case-1"}'])
def test_malformed_output(artifacts: Path, raw: str) -> None:
    verdict, reason = run(artifacts, raw)
    assert verdict is Verdict.VERIFIER_ERROR and reason.startswith("malformed verification")


def test_bad_status_value(artifacts: Path) -> None:
    verdict, reason = run(artifacts, with_check(0, status="passed"))
    assert verdict is Verdict.VERIFIER_ERROR and "malformed verification: checks.0.status" in reason


@pytest.mark.parametrize(
    "error", ["host verifier hung: killed at its 5 s limit", "host verifier crashed (exit 3)"]
)
def test_verifier_that_hung_or_crashed(artifacts: Path, error: str) -> None:
    # Even a well-formed output does not count when the verifier did not end well.
    verdict, reason = run(artifacts, verification(), verifier_error=error)
    assert (verdict, reason) == (Verdict.VERIFIER_ERROR, error)


def test_a_broken_verifier_is_the_tasks_problem_unless_the_agent_failed_anyway(
    artifacts: Path,
) -> None:
    # The verifier's failure alone is never the agent's fail...
    crashed = "host verifier crashed (exit 1): RuntimeError: boom"
    assert run(artifacts, "", verifier_error=crashed) == (Verdict.VERIFIER_ERROR, crashed)
    # ...but what the agent's own record shows still fails it, with both reasons named.
    cmd = CommandRecord(command="pytest", exit_code=1, stdout="", stderr="")
    for kw in ({"completed": False}, {"commands": [cmd]}, {"harness": ["tests/conftest.py"]}):
        verdict, reason = run(artifacts, "", verifier_error=crashed, **kw)
        assert verdict is Verdict.FAIL and reason.startswith(crashed), kw
    verdict, reason = run(artifacts, verification(caseId="other"), completed=False)
    assert verdict is Verdict.FAIL and "wrong case" in reason and "incomplete run" in reason


def test_failing_verifier_command(artifacts: Path) -> None:
    cmd = CommandRecord(command="pytest", exit_code=1, stdout="a", stderr="b")
    verdict, reason = run(artifacts, verification(), commands=[cmd])
    assert (verdict, reason) == (Verdict.FAIL, "verifier command failed: 'pytest' exited 1")
    slow = CommandRecord(command="pytest", exit_code=124, timed_out=True, stdout="a", stderr="b")
    assert "timed out" in run(artifacts, verification(), commands=[slow])[1]


def test_canary_voids_even_a_pass(artifacts: Path) -> None:
    verdict, reason = run(artifacts, verification(), canaries_found=["CANARY-1"])
    assert verdict is Verdict.VOID and "CANARY-1" in reason


def test_every_broken_rule_is_reported(artifacts: Path) -> None:
    v = verification(traceSha256="b" * 64, route={"status": "unassessed", "evidence": []})
    v["checks"][0]["status"] = "unassessed"
    _, reason = run(artifacts, v, completed=False)
    for words in ("stale trace", "unassessed route", "unassessed finding", "incomplete run"):
        assert words in reason


def test_evidence_problem_accepts_a_nested_file(artifacts: Path) -> None:
    (artifacts / "a" / "b").mkdir(parents=True)
    (artifacts / "a" / "b" / "c.txt").write_text("x")
    assert evidence_problem(artifacts, "a/b/c.txt") is None
    assert evidence_problem(artifacts, "") == "an empty evidence path"
