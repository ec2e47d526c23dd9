"""The ready verifier ``{builtin: junit}``: judges from verifier commands and JUnit XML.

For scenarios that need nothing more than "the hidden tests pass". The verifier
commands write JUnit XML reports into ``$HANGAR_VERIFIER_OUT`` (e.g. ``pytest
--junitxml=$HANGAR_VERIFIER_OUT/junit.xml``); hangar copies that folder into the
artifacts under ``verifier/out/``. Each checklist item names a test case, matched as
``classname.name``, ``file::name`` or the bare ``name``; it passes when that test case
passed, fails when it failed or errored, and is unassessed when it was skipped or
not found. The evidence of a finding is the report that holds the test case.

Route and scope are Findings of their own (seed 001), each with an evidence file this
verifier writes under ``verifier/``:

- **route** (how the result was reached: the verifier commands): pass when every
  command exited 0 in time (the reports read are evidence too); fail when a command
  failed (its output files are the evidence); unassessed when the scenario has no
  command, so nothing ran to judge from.
- **scope** (what the agent touched, from ``diff.patch``): fail when the agent changed a
  test file that holds a checklist test case (an agent must not edit the tests it is
  judged by), or, when the scenario lists ``scope`` patterns, a path none of them
  matches; unassessed when there is no diff to read; pass otherwise.

The reports are written by code under test, so they are parsed with defusedxml.
"""

from __future__ import annotations

import json
import re
from fnmatch import fnmatchcase
from pathlib import Path

from defusedxml import ElementTree
from defusedxml.common import DefusedXmlException
from pydantic import BaseModel

from hangar.results import CheckStatus
from hangar.scenario import BuiltinVerifier
from hangar.verifiers.protocol import Check, Finding, Verification, VerificationRequest

REPORTS = "verifier/out"
ROUTE_FILE = "verifier/junit-route.json"
SCOPE_FILE = "verifier/junit-scope.json"
_DIFF_PATHS = re.compile(r"^diff --git a/(.*) b/(.*)$")


class _Case(BaseModel):
    status: CheckStatus
    report: str
    files: frozenset[str]
    """Source files the test case may live in (from ``file`` or its ``classname``)."""


def _files_of(classname: str, file: str) -> frozenset[str]:
    if file:
        return frozenset({file.removeprefix("./")})
    parts = [p for p in classname.split(".") if p]
    return frozenset("/".join(parts[:i]) + ".py" for i in range(1, len(parts) + 1))


def _test_cases(artifacts: Path) -> tuple[dict[str, _Case], list[str]]:
    """Test-case names (every accepted spelling) -> the case; and the reports read."""
    cases: dict[str, _Case] = {}
    read: list[str] = []
    root = artifacts / REPORTS
    for report in sorted(root.rglob("*.xml")) if root.is_dir() else []:
        if report.is_symlink() or not report.is_file():
            continue
        rel = report.relative_to(artifacts).as_posix()
        try:
            tree = ElementTree.parse(report)
        except (ElementTree.ParseError, DefusedXmlException):
            continue
        read.append(rel)
        for case in tree.iter("testcase"):
            name, classname = case.get("name", ""), case.get("classname", "")
            status: CheckStatus
            if case.find("failure") is not None or case.find("error") is not None:
                status = "fail"
            elif case.find("skipped") is not None:
                status = "unassessed"
            else:
                status = "pass"
            found = _Case(
                status=status, report=rel, files=_files_of(classname, case.get("file", ""))
            )
            module_file = classname.replace(".", "/") + ".py"
            for key in (f"{classname}.{name}", f"{module_file}::{name}", name):
                # A name seen twice with different outcomes counts as its worst outcome.
                if key not in cases or status == "fail":
                    cases[key] = found
    return cases, read


def _write(artifacts: Path, rel: str, data: object) -> str:
    path = artifacts / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
    return rel


def _route(request: VerificationRequest, reports: list[str]) -> Finding:
    artifacts = Path(request.artifacts)
    failed = [c for c in request.commands if c.exit_code != 0 or c.timed_out]
    note = _write(
        artifacts,
        ROUTE_FILE,
        {
            "commands": [c.model_dump(by_alias=True) for c in request.commands],
            "failing": [c.command for c in failed],
            "reports": reports,
        },
    )
    if not request.commands:
        return Finding(status="unassessed", evidence=[note])  # nothing ran to judge from
    if failed:
        outputs = [p for c in failed for p in (c.stdout, c.stderr) if (artifacts / p).is_file()]
        return Finding(status="fail", evidence=[note, *outputs])
    return Finding(status="pass", evidence=[note, *reports])


def _changed_paths(diff: str) -> list[str]:
    paths: dict[str, None] = {}
    for line in diff.splitlines():
        if match := _DIFF_PATHS.match(line):
            paths.update(dict.fromkeys(match.groups()))
    return list(paths)


def _scope(request: VerificationRequest, host: BuiltinVerifier, judged: list[_Case]) -> Finding:
    artifacts = Path(request.artifacts)
    diff = artifacts / "diff.patch"
    if diff.is_symlink() or not diff.is_file():
        note = _write(artifacts, SCOPE_FILE, {"diff": "missing"})
        return Finding(status="unassessed", evidence=[note])
    changed = _changed_paths(diff.read_text(errors="replace"))
    test_files = sorted({f for case in judged for f in case.files})
    edited_tests = [p for p in changed if p in test_files]
    outside = (
        [p for p in changed if not any(fnmatchcase(p, g) for g in host.scope)] if host.scope else []
    )
    note = _write(
        artifacts,
        SCOPE_FILE,
        {
            "changed": changed,
            "judged_test_files": test_files,
            "edited_judged_tests": edited_tests,
            "allowed": list(host.scope) or None,
            "outside_scope": outside,
        },
    )
    status: CheckStatus = "fail" if edited_tests or outside else "pass"
    return Finding(status=status, evidence=[note, "diff.patch"])


def verify(request: VerificationRequest, host: BuiltinVerifier | None = None) -> Verification:
    """Judge `request` from its JUnit reports (see the module docstring)."""
    host = host or BuiltinVerifier(builtin="junit")
    artifacts = Path(request.artifacts)
    cases, reports = _test_cases(artifacts)
    checks, judged = [], []
    for requirement in request.checklist:
        case = cases.get(requirement)
        if case is None:
            checks.append(Check(requirement=requirement, status="unassessed", evidence=[]))
            continue
        judged.append(case)
        checks.append(Check(requirement=requirement, status=case.status, evidence=[case.report]))
    return Verification(
        case_id=request.case,
        trace_sha256=request.trace_sha256,
        checks=checks,
        route=_route(request, reports),
        scope=_scope(request, host, judged),
    )
