"""The ready verifier ``{builtin: junit}``: judges from verifier commands and JUnit XML.

For scenarios that need nothing more than "the hidden tests pass". The verifier
commands write JUnit XML reports into ``$HANGAR_VERIFIER_OUT`` (e.g. ``pytest
--junitxml=$HANGAR_VERIFIER_OUT/junit.xml``); hangar copies that folder into the
artifacts under ``verifier/out/``. Each checklist item names a test case, matched as
``classname.name``, ``file::name`` or the bare ``name``; it passes when that test case
passed, fails when it failed or errored, and is unassessed when it was skipped or
not found. The evidence of a finding is the report that holds the test case.

The reports are written by code under test, so they are parsed with defusedxml.
"""

from __future__ import annotations

from pathlib import Path

from defusedxml import ElementTree
from defusedxml.common import DefusedXmlException

from hangar.results import CheckStatus
from hangar.verifiers.protocol import Check, Verification, VerificationRequest

REPORTS = "verifier/out"
ROUTE = "junit"


def _test_cases(artifacts: Path) -> dict[str, tuple[CheckStatus, str]]:
    """Test-case names (every accepted spelling) -> (status, report path)."""
    cases: dict[str, tuple[CheckStatus, str]] = {}
    root = artifacts / REPORTS
    for report in sorted(root.rglob("*.xml")) if root.is_dir() else []:
        if report.is_symlink() or not report.is_file():
            continue
        rel = report.relative_to(artifacts).as_posix()
        try:
            tree = ElementTree.parse(report)
        except (ElementTree.ParseError, DefusedXmlException):
            continue
        for case in tree.iter("testcase"):
            name, classname = case.get("name", ""), case.get("classname", "")
            status: CheckStatus
            if case.find("failure") is not None or case.find("error") is not None:
                status = "fail"
            elif case.find("skipped") is not None:
                status = "unassessed"
            else:
                status = "pass"
            module_file = classname.replace(".", "/") + ".py"
            for key in (f"{classname}.{name}", f"{module_file}::{name}", name):
                # A name seen twice with different outcomes counts as its worst outcome.
                if key not in cases or status == "fail":
                    cases[key] = (status, rel)
    return cases


def verify(request: VerificationRequest) -> Verification:
    """Judge `request` from its JUnit reports (see the module docstring)."""
    artifacts = Path(request.artifacts)
    cases = _test_cases(artifacts)
    checks = []
    for requirement in request.checklist:
        status, report = cases.get(requirement) or ("unassessed", "")
        checks.append(
            Check(requirement=requirement, status=status, evidence=[report] if report else [])
        )
    failed = [c.command for c in request.commands if c.exit_code != 0 or c.timed_out]
    reports = {report for _, report in cases.values()}
    scope = f"{len(request.commands)} verifier command(s), {len(reports)} JUnit report(s)"
    if failed:
        scope += f"; failing: {', '.join(failed)}"
    return Verification(
        case_id=request.case,
        trace_sha256=request.trace_sha256,
        checks=checks,
        route=ROUTE,
        scope=scope,
    )
