"""The ready ``junit`` verifier judges checklist items from JUnit reports, safely."""

from __future__ import annotations

from pathlib import Path

from hangar.verifiers import junit
from hangar.verifiers.protocol import CommandRecord, VerificationRequest

REPORT = """<?xml version="1.0"?>
<testsuites><testsuite name="pytest">
 <testcase classname="tests.test_stats" name="test_mean"/>
 <testcase classname="tests.test_stats" name="test_median"><failure message="no"/></testcase>
 <testcase classname="tests.test_stats" name="test_skipped"><skipped/></testcase>
</testsuite></testsuites>
"""

BOMB = """<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;">]>
<testsuite><testcase classname="x" name="&lol2;"/></testsuite>
"""


def request(artifacts: Path, checklist: list[str], exit_code: int = 0) -> VerificationRequest:
    return VerificationRequest(
        case="c",
        fixture="f",
        workspace="w",
        artifacts=str(artifacts),
        trace_sha256="t" * 64,
        completed=True,
        checklist=checklist,
        commands=[CommandRecord(command="pytest", exit_code=exit_code, stdout="o", stderr="e")],
    )


def test_statuses_and_spellings(tmp_path: Path) -> None:
    (tmp_path / "verifier" / "out").mkdir(parents=True)
    (tmp_path / "verifier" / "out" / "junit.xml").write_text(REPORT)
    v = junit.verify(
        request(
            tmp_path,
            [
                "tests.test_stats.test_mean",
                "tests/test_stats.py::test_median",
                "test_skipped",
                "test_absent",
            ],
        )
    )
    assert [c.status for c in v.checks] == ["pass", "fail", "unassessed", "unassessed"]
    assert v.checks[0].evidence == ["verifier/out/junit.xml"] and v.checks[3].evidence == []
    assert v.route == "junit" and "1 JUnit report" in v.scope


def test_entity_bombs_are_refused(tmp_path: Path) -> None:
    (tmp_path / "verifier" / "out").mkdir(parents=True)
    (tmp_path / "verifier" / "out" / "junit.xml").write_text(BOMB)
    v = junit.verify(request(tmp_path, ["x.lollollollollollol"]))
    assert v.checks[0].status == "unassessed"


def test_failing_command_is_named_in_scope(tmp_path: Path) -> None:
    v = junit.verify(request(tmp_path, [], exit_code=2))
    assert v.checks == [] and "failing: pytest" in v.scope
