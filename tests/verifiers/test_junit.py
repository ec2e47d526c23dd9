"""The ready ``junit`` verifier judges checklist items from JUnit reports, safely."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hangar.scenario import BuiltinVerifier
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
    # The command exited 0 and its report was read: that is how the result was reached.
    assert v.route.status == "pass"
    assert v.route.evidence == ["verifier/junit-route.json", "verifier/out/junit.xml"]
    assert v.scope.status == "unassessed"  # no diff.patch to read


def test_entity_bombs_are_refused(tmp_path: Path) -> None:
    (tmp_path / "verifier" / "out").mkdir(parents=True)
    (tmp_path / "verifier" / "out" / "junit.xml").write_text(BOMB)
    v = junit.verify(request(tmp_path, ["x.lollollollollollol"]))
    assert v.checks[0].status == "unassessed"


def test_a_failing_command_fails_the_route(tmp_path: Path) -> None:
    (tmp_path / "o").write_text("1 failed")
    v = junit.verify(request(tmp_path, [], exit_code=2))
    assert v.checks == [] and v.route.status == "fail"
    assert v.route.evidence == ["verifier/junit-route.json", "o"]  # "e" was never written
    route = json.loads((tmp_path / "verifier" / "junit-route.json").read_text())
    assert route["failing"] == ["pytest"]


def test_the_route_is_the_commands(tmp_path: Path) -> None:
    # Commands that exit 0 are the route even without a report (a check like `test -f`).
    v = junit.verify(request(tmp_path, []))
    assert v.route.status == "pass" and v.route.evidence == ["verifier/junit-route.json"]
    # With no command at all, nothing ran to judge from.
    empty = request(tmp_path, []).model_copy(update={"commands": []})
    assert junit.verify(empty).route.status == "unassessed"


def _diff(*paths: str) -> str:
    return "".join(
        f"diff --git a/{p} b/{p}\nindex 1..2 100644\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-a\n+b\n"
        for p in paths
    )


@pytest.mark.parametrize(
    ("changed", "allowed", "status", "words"),
    [
        (["statkit/stats.py"], (), "pass", None),
        (["statkit/stats.py", "tests/test_stats.py"], (), "fail", "edited_judged_tests"),
        (["tests/test_other.py"], (), "pass", None),  # a test file no checklist item names
        (["statkit/stats.py", "README.md"], ("statkit/*",), "fail", "outside_scope"),
        (["statkit/sub/deep.py"], ("statkit/*",), "pass", None),
    ],
)
def test_scope_from_the_diff(
    tmp_path: Path, changed: list[str], allowed: tuple[str, ...], status: str, words: str | None
) -> None:
    (tmp_path / "verifier" / "out").mkdir(parents=True)
    (tmp_path / "verifier" / "out" / "junit.xml").write_text(REPORT)
    (tmp_path / "diff.patch").write_text(_diff(*changed))
    host = BuiltinVerifier(builtin="junit", scope=allowed)
    v = junit.verify(request(tmp_path, ["tests.test_stats.test_mean"]), host)
    assert v.scope.status == status
    assert v.scope.evidence == ["verifier/junit-scope.json", "diff.patch"]
    facts = json.loads((tmp_path / "verifier" / "junit-scope.json").read_text())
    assert facts["changed"] == changed
    if words is not None:
        assert facts[words], facts
