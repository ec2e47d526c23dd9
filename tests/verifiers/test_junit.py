"""The ready ``junit`` verifier judges checklist items from JUnit reports, safely."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from hangar.verifiers import junit
from hangar.verifiers.protocol import CommandRecord, VerificationRequest
from hangar.verifiers.spec import BuiltinVerifier

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
    v = junit.verify_with_notes(
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
    # Only a test that ran and passed passes: skipped and missing fail, with the test named.
    assert [c.status for c in v.verification.checks] == ["pass", "fail", "fail", "fail"]
    assert v.verification.checks[0].evidence == ["verifier/out/junit.xml"]
    assert v.verification.checks[3].evidence == [junit.TESTS_FILE]
    assert v.notes == [
        "judged test 'tests/test_stats.py::test_median' failed",
        "judged test 'test_skipped' skipped",
        "judged test 'test_absent' not in any report",
    ]
    # The command exited 0 and its report was read: that is how the result was reached.
    assert v.verification.route.status == "pass"
    assert v.verification.route.evidence == ["verifier/junit-route.json", "verifier/out/junit.xml"]
    assert v.verification.scope.status == "unassessed"  # no diff.patch to read


CASES = """<?xml version="1.0"?>
<testsuites><testsuite name="pytest">
 <testcase classname="tests.test_p" name="test_sq[1]"/>
 <testcase classname="tests.test_p" name="test_sq[2]"><skipped type="pytest.xfail"/></testcase>
 <testcase classname="tests.test_p.TestBox" name="test_open"/>
 <testcase classname="tests.test_p" name="test_err"><error message="fixture"/></testcase>
 <testcase classname="hidden.test_h" name="test_deep"/>
</testsuite></testsuites>
"""


@pytest.mark.parametrize(
    ("item", "status"),
    [
        ("test_sq", "fail"),  # every parametrization counts: one is an xfail
        ("test_sq[1]", "pass"),  # one parametrization, named
        ("tests/test_p.py::test_sq[2]", "fail"),
        ("tests/test_p.py::TestBox::test_open", "pass"),
        ("tests.test_p.TestBox.test_open", "pass"),
        ("test_err", "fail"),
    ],
)
def test_cases_parametrizations_and_classes(tmp_path: Path, item: str, status: str) -> None:
    (tmp_path / "verifier" / "out").mkdir(parents=True)
    (tmp_path / "verifier" / "out" / "junit.xml").write_text(CASES)
    assert junit.verify(request(tmp_path, [item])).checks[0].status == status


def test_every_hidden_test_must_have_run_and_passed(tmp_path: Path) -> None:
    (tmp_path / "verifier" / "out").mkdir(parents=True)
    (tmp_path / "verifier" / "out" / "junit.xml").write_text(CASES)
    hidden = [
        "tests/test_p.py::TestBox::test_open",
        "tests/hidden/test_h.py::test_deep",  # pytest's rootdir was tests/: a shorter classname
    ]
    ok = junit.verify_with_notes(request(tmp_path, []).model_copy(update={"hidden_tests": hidden}))
    assert ok.verification.route.status == "pass" and ok.notes == []
    hidden += ["tests/test_p.py::test_sq", "tests/test_p.py::test_gone"]
    bad = junit.verify_with_notes(request(tmp_path, []).model_copy(update={"hidden_tests": hidden}))
    assert bad.verification.route.status == "fail"
    assert bad.notes == [
        "hidden test tests/test_p.py::test_sq did not pass in 1 of 2 cases (test_sq[2] skipped)",
        "hidden test tests/test_p.py::test_gone not in any report",
    ]
    tests = json.loads((tmp_path / junit.TESTS_FILE).read_text())
    assert [t["status"] for t in tests["hidden"]] == ["pass", "pass", "fail", "fail"]


def test_nothing_collected_fails_every_judged_test(tmp_path: Path) -> None:
    (tmp_path / "verifier" / "out").mkdir(parents=True)
    (tmp_path / "verifier" / "out" / "junit.xml").write_text('<testsuite tests="0"/>')
    req = request(tmp_path, ["test_mean"]).model_copy(
        update={"hidden_tests": ["tests/hidden/test_h.py::test_x"]}
    )
    v = junit.verify_with_notes(req)
    assert v.verification.checks[0].status == "fail" and v.verification.route.status == "fail"


def test_a_report_older_than_the_verification_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "verifier" / "out"
    out.mkdir(parents=True)
    (out / "junit.xml").write_text(REPORT)
    (out / "left.xml").write_text(
        REPORT.replace('name="test_median"><failure message="no"/>', 'name="test_median">')
    )
    started = time.time()
    os.utime(out / "left.xml", (started - 3600, started - 3600))
    req = request(tmp_path, ["test_median"])
    req.commands[0].started_at = started
    v = junit.verify_with_notes(req)
    assert v.verification.checks[0].status == "fail"  # only the fresh report counts
    assert (
        v.notes[-1]
        == "report refused: verifier/out/left.xml: written before this verification started"
    )


def test_links_are_not_reports(tmp_path: Path) -> None:
    out = tmp_path / "verifier" / "out"
    out.mkdir(parents=True)
    (tmp_path / "fake.xml").write_text(REPORT.replace('<failure message="no"/>', ""))
    (out / "junit.xml").symlink_to(tmp_path / "fake.xml")
    assert junit.verify(request(tmp_path, ["test_median"])).checks[0].status == "fail"


def test_python_test_ids() -> None:
    source = (
        "import unittest\n"
        "def test_a(): pass\n"
        "async def test_b(): pass\n"
        "def helper(): pass\n"
        "class TestC:\n    def test_d(self): pass\n"
        "    class TestE:\n        def test_f(self): pass\n"
        "class TestInit:\n    def __init__(self): pass\n    def test_no(self): pass\n"
        "class Cases(unittest.TestCase):\n    def test_g(self): pass\n"
    )
    assert junit.python_test_ids("t/test_m.py", source) == [
        "t/test_m.py::test_a",
        "t/test_m.py::test_b",
        "t/test_m.py::TestC::test_d",
        "t/test_m.py::TestC::TestE::test_f",
        "t/test_m.py::Cases::test_g",
    ]


def test_judged_files_from_the_checklist(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_stats.py").write_text("def test_mean():\n    pass\n")
    (tmp_path / "tests" / "test_other.py").write_text("def test_other():\n    pass\n")
    for item, files in [
        ("tests/test_x.py::test_y", {"tests/test_x.py"}),
        ("tests.test_stats.test_mean", {"tests/test_stats.py"}),
        ("test_mean", {"tests/test_stats.py"}),
        ("median of an even-length list", set()),  # a requirement, not a test
    ]:
        assert junit.judged_files((item,), tmp_path) == files


def test_entity_bombs_are_refused(tmp_path: Path) -> None:
    (tmp_path / "verifier" / "out").mkdir(parents=True)
    (tmp_path / "verifier" / "out" / "junit.xml").write_text(BOMB)
    v = junit.verify_with_notes(request(tmp_path, ["x.lollollollollollol"]))
    assert v.verification.checks[0].status == "fail"
    assert "report refused: verifier/out/junit.xml: not a well-formed report" in v.notes


def test_a_failing_command_fails_the_route(tmp_path: Path) -> None:
    (tmp_path / "o").write_text("1 failed")
    v = junit.verify(request(tmp_path, [], exit_code=2))
    assert v.checks == [] and v.route.status == "fail"
    # "e" was never written
    assert v.route.evidence == ["verifier/junit-route.json", junit.TESTS_FILE, "o"]
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
