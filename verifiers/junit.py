"""The ready verifier ``{builtin: junit}``: judges from verifier commands and JUnit XML.

For scenarios that need nothing more than "the judged tests pass". The verifier commands
write JUnit XML reports into ``$HANGAR_VERIFIER_OUT`` (e.g. ``pytest
--junitxml=$HANGAR_VERIFIER_OUT/junit.xml``); hangar copies that folder into the
artifacts under ``verifier/out/``.

**Judged tests** are each test a checklist item names and every test of the hidden
verifier files (found in their source, `python_test_ids`). A judged test passes only when
it is in a report and every one of its cases passed: skipped, xfail, error, failed,
missing, or nothing collected all fail, with the test named in the reason. A checklist item
names a test case as ``classname.name``, ``path/to/file.py::name``,
``path/to/file.py::Class::name`` or the bare ``name``; without ``[...]`` it covers every
parametrization of that test. Only reports this verification wrote are read: a regular
file (never a link) in the output folder, written after the first command started
(`FRESH_SLACK_S`); an older one is refused and named.

Route and scope are Findings of their own (seed 001), each with an evidence file this
verifier writes under ``verifier/``:

- **route** (how the result was reached: the verifier commands): pass when every command
  exited 0 in time and every test of the hidden files passed; fail otherwise (the failing
  commands' output and ``verifier/junit-tests.json`` are the evidence); unassessed when the
  scenario has no command, so nothing ran to judge from.
- **scope** (what the agent touched, from ``diff.patch``): fail when the agent changed a
  test file that holds a judged test (an agent must not edit the tests it is judged by),
  or, when the scenario lists ``scope`` patterns, a path none of them matches; unassessed
  when there is no diff to read; pass otherwise. A change of the test harness fails scope
  too, for every verifier (`hangar.verifiers.admission`).

The reports are written by code under test, so they are parsed with defusedxml.
"""

from __future__ import annotations

import ast
import json
import os
import re
from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

from defusedxml import ElementTree
from defusedxml.common import DefusedXmlException
from pydantic import BaseModel

from hangar.results import CheckStatus
from hangar.verifiers.harness import Placement
from hangar.verifiers.protocol import Check, Finding, Verification, VerificationRequest
from hangar.verifiers.spec import BuiltinVerifier
from hangar.verifiers.tampering import is_test_module

REPORTS = "verifier/out"
ROUTE_FILE = "verifier/junit-route.json"
SCOPE_FILE = "verifier/junit-scope.json"
TESTS_FILE = "verifier/junit-tests.json"
#: A report whose time is this much before the first command started is older than it.
FRESH_SLACK_S = 2.0
_DIFF_PATHS = re.compile(r"^diff --git a/(.*) b/(.*)$")

Outcome = str  # "passed" | "failed" | "error" | "skipped"


class TestCase(BaseModel):
    """One test case of a report."""

    classname: str
    name: str
    outcome: Outcome
    report: str
    file: str = ""

    @property
    def base(self) -> str:
        """The test's name without its parametrization."""
        return self.name.split("[", 1)[0]

    def spellings(self) -> set[str]:
        """Every way a checklist item may name it (see the module docstring)."""
        out = {self.base, self.name}
        parts = [p for p in self.classname.split(".") if p]
        for name in {self.base, self.name}:
            out.add(f"{self.classname}.{name}")
            for k in range(1, len(parts) + 1):
                module = "/".join(parts[:k]) + ".py"
                out.add("::".join([module, *parts[k:], name]))
            if self.file:
                out.add(f"{self.file.removeprefix('./')}::{name}")
        return out

    def files(self) -> set[str]:
        """Source files it may live in (from ``file`` or its classname)."""
        if self.file:
            return {self.file.removeprefix("./")}
        parts = [p for p in self.classname.split(".") if p]
        return {"/".join(parts[:i]) + ".py" for i in range(1, len(parts) + 1)}

    def is_in(self, test_id: str) -> bool:
        """Whether this case is (a parametrization of) the test ``file.py::[Class::]name``."""
        file, _, qual = test_id.partition("::")
        *classes, name = qual.split("::")
        if self.base != name and self.name != name:
            return False
        if self.file:
            return self.file.removeprefix("./") == file and self.classname.endswith(
                ".".join(classes)
            )
        full = ".".join([*PurePosixPath(file).with_suffix("").parts, *classes])
        stem = PurePosixPath(file).stem
        own = self.classname
        return (full == own or full.endswith("." + own)) and stem in own.split(".")


class JudgedTest(BaseModel):
    """One judged test and what the reports say of it."""

    test: str
    """The checklist item or hidden test id."""
    status: CheckStatus
    why: str
    """In words: passed, or what kept it from passing."""
    cases: list[TestCase]


def python_test_ids(rel: str, text: str) -> list[str]:
    """The tests pytest collects by default from the module `rel` (``rel::name`` and
    ``rel::Class::name``): ``test*`` functions, ``test*`` methods of ``Test*`` classes
    (nested ones too) and of ``unittest.TestCase`` subclasses."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    ids: list[str] = []

    def visit(body: list[ast.stmt], classes: list[str]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if node.name.startswith("test"):
                    ids.append("::".join([rel, *classes, node.name]))
            elif isinstance(node, ast.ClassDef) and _collected_class(node):
                visit(node.body, [*classes, node.name])

    visit(tree.body, [])
    return ids


def _collected_class(node: ast.ClassDef) -> bool:
    bases = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
    if any(b.endswith("TestCase") for b in bases):
        return True
    has_init = any(isinstance(n, ast.FunctionDef) and n.name == "__init__" for n in node.body)
    return node.name.startswith("Test") and not has_init


def hidden_test_ids(placements: list[Placement]) -> list[str]:
    """The tests of the hidden verifier files, from their sources on the host."""
    ids: list[str] = []
    for target, source in placements:
        if source is None:
            continue
        files = (
            [(target, source)]
            if source.is_file()
            else [
                (f"{target}/{f.relative_to(source).as_posix()}", f)
                for f in sorted(source.rglob("*.py"))
                if f.is_file() and not f.is_symlink()
            ]
        )
        for rel, path in files:
            if is_test_module(rel) and not rel.endswith("__init__.py"):
                ids += python_test_ids(rel, path.read_text(errors="replace"))
    return ids


def judged_files(checklist: tuple[str, ...], workspace: Path) -> frozenset[str]:
    """The workspace's test files that hold the tests `checklist` names (before the agent:
    they are part of the harness, `hangar.verifiers.harness`)."""
    found: set[str] = set()
    bare = []
    for item in checklist:
        if "::" in item:
            found.add(item.split("::", 1)[0])
            continue
        parts = item.split(".")
        candidates = ["/".join(parts[:k]) + ".py" for k in range(1, len(parts))]
        existing = [c for c in candidates if (workspace / c).is_file()]
        found.update(existing)
        if not existing and item.isidentifier():
            bare.append(item)
    if bare:
        pattern = re.compile(rf"^\s*(?:async\s+)?def\s+({'|'.join(map(re.escape, bare))})\b", re.M)
        for path in _test_modules(workspace):
            if pattern.search(path.read_text(errors="replace")):
                found.add(path.relative_to(workspace).as_posix())
    return frozenset(found)


def _test_modules(workspace: Path) -> Iterator[Path]:
    """The test modules of `workspace`, never through a link (a repository's link may
    lead anywhere on the host)."""
    for folder, dirs, names in os.walk(workspace):
        if Path(folder) == workspace:
            dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            path = Path(folder) / name
            rel = path.relative_to(workspace).as_posix()
            if is_test_module(rel) and not path.is_symlink() and path.is_file():
                yield path


def _reports(request: VerificationRequest) -> tuple[list[TestCase], list[str], list[str]]:
    """Every test case of the fresh reports; the reports read; the reports refused."""
    artifacts = Path(request.artifacts)
    starts = [c.started_at for c in request.commands if c.started_at is not None]
    oldest = min(starts) - FRESH_SLACK_S if starts else None
    cases: list[TestCase] = []
    read: list[str] = []
    refused: list[str] = []
    root = artifacts / REPORTS
    for report in sorted(root.rglob("*.xml")) if root.is_dir() else []:
        if report.is_symlink() or not report.is_file():
            continue
        rel = report.relative_to(artifacts).as_posix()
        if oldest is not None and report.stat().st_mtime < oldest:
            refused.append(f"{rel}: written before this verification started")
            continue
        try:
            tree = ElementTree.parse(report)
        except (ElementTree.ParseError, DefusedXmlException):
            refused.append(f"{rel}: not a well-formed report")
            continue
        read.append(rel)
        for case in tree.iter("testcase"):
            cases.append(
                TestCase(
                    classname=case.get("classname", ""),
                    name=case.get("name", ""),
                    outcome=_outcome(case),
                    report=rel,
                    file=case.get("file", ""),
                )
            )
    return cases, read, refused


def _outcome(case: object) -> Outcome:
    find = case.find  # type: ignore[attr-defined]
    if find("failure") is not None:
        return "failed"
    if find("error") is not None:
        return "error"
    if find("skipped") is not None:
        return "skipped"
    return "passed"


def _judge(test: str, cases: list[TestCase]) -> JudgedTest:
    if not cases:
        return JudgedTest(test=test, status="fail", why="not in any report", cases=[])
    bad = [c for c in cases if c.outcome != "passed"]
    if not bad:
        return JudgedTest(test=test, status="pass", why="passed", cases=cases)
    if len(cases) == 1:
        return JudgedTest(test=test, status="fail", why=bad[0].outcome, cases=cases)
    shown = ", ".join(sorted({f"{c.name} {c.outcome}" for c in bad})[:5])
    why = f"did not pass in {len(bad)} of {len(cases)} cases ({shown})"
    return JudgedTest(test=test, status="fail", why=why, cases=cases)


def _write(artifacts: Path, rel: str, data: object) -> str:
    path = artifacts / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
    return rel


class JunitVerdict(BaseModel):
    """The Verification, and the reasons the judgement adds to a fail."""

    verification: Verification
    notes: list[str]


def verify_with_notes(
    request: VerificationRequest, host: BuiltinVerifier | None = None
) -> JunitVerdict:
    """Judge `request` from its JUnit reports (see the module docstring)."""
    host = host or BuiltinVerifier(builtin="junit")
    artifacts = Path(request.artifacts)
    cases, reports, refused = _reports(request)
    checks = [
        _judge(item, [c for c in cases if item in c.spellings()]) for item in request.checklist
    ]
    hidden = [_judge(t, [c for c in cases if c.is_in(t)]) for t in request.hidden_tests]
    tests_note = _write(
        artifacts,
        TESTS_FILE,
        {
            "checklist": [j.model_dump() for j in checks],
            "hidden": [j.model_dump() for j in hidden],
            "reports": reports,
            "refused": refused,
        },
    )
    notes = [f"judged test {j.test!r} {j.why}" for j in checks if j.status != "pass"]
    notes += [f"hidden test {j.test} {j.why}" for j in hidden if j.status != "pass"]
    notes += [f"report refused: {r}" for r in refused]
    verification = Verification(
        case_id=request.case,
        trace_sha256=request.trace_sha256,
        checks=[
            Check(
                requirement=j.test,
                status=j.status,
                evidence=sorted({c.report for c in j.cases})
                if j.status == "pass"
                else [tests_note],
            )
            for j in checks
        ],
        route=_route(
            request, reports, tests_note, failed_hidden=[j for j in hidden if j.status != "pass"]
        ),
        scope=_scope(request, host, [c for j in checks for c in j.cases]),
    )
    return JunitVerdict(verification=verification, notes=notes)


def verify(request: VerificationRequest, host: BuiltinVerifier | None = None) -> Verification:
    """Judge `request` from its JUnit reports (see the module docstring)."""
    return verify_with_notes(request, host).verification


def _route(
    request: VerificationRequest,
    reports: list[str],
    tests_note: str,
    failed_hidden: list[JudgedTest],
) -> Finding:
    artifacts = Path(request.artifacts)
    failed = [c for c in request.commands if c.exit_code != 0 or c.timed_out]
    note = _write(
        artifacts,
        ROUTE_FILE,
        {
            "commands": [c.model_dump(by_alias=True) for c in request.commands],
            "failing": [c.command for c in failed],
            "reports": reports,
            "hiddenTestsNotPassed": [j.test for j in failed_hidden],
        },
    )
    if not request.commands:
        return Finding(status="unassessed", evidence=[note])  # nothing ran to judge from
    if failed or failed_hidden:
        outputs = [p for c in failed for p in (c.stdout, c.stderr) if (artifacts / p).is_file()]
        return Finding(status="fail", evidence=[note, tests_note, *outputs])
    return Finding(status="pass", evidence=[note, *reports])


def _changed_paths(diff: str) -> list[str]:
    paths: dict[str, None] = {}
    for line in diff.splitlines():
        if match := _DIFF_PATHS.match(line):
            paths.update(dict.fromkeys(match.groups()))
    return list(paths)


def _scope(request: VerificationRequest, host: BuiltinVerifier, judged: list[TestCase]) -> Finding:
    artifacts = Path(request.artifacts)
    diff = artifacts / "diff.patch"
    if diff.is_symlink() or not diff.is_file():
        note = _write(artifacts, SCOPE_FILE, {"diff": "missing"})
        return Finding(status="unassessed", evidence=[note])
    changed = _changed_paths(diff.read_text(errors="replace"))
    test_files = sorted({f for case in judged for f in case.files()})
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
