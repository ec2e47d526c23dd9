"""Admission rules of a verification (and of the pinned scripts a task names).

`pinned_script_problem` says why a pinned script cannot run (missing, not runnable, its
bytes not those pinned); a task's own admission (`hangar.kinds.execution.admission`) uses
it before a trial starts.

`judge` (phase 11) admits a host verifier's output. A trial passes only when every
rule holds; each broken rule adds its own reason, naming the rule:

- the output is one well-formed Verification JSON, for this case (``route`` and
  ``scope`` are Findings, never bare strings);
- ``traceSha256`` equals the request's (otherwise the trace is stale);
- every checklist string is covered exactly once, and nothing else is (a reworded
  item is both missing and unknown);
- every passing finding (route, scope and each check) names at least one evidence
  file: a relative path with no ``..``, under the artifacts folder, a regular file, with
  no symlink anywhere on its way;
- the run completed; no finding is unassessed; no finding failed (a failed or
  unassessed route or scope prevents a pass like a check); every original verifier
  command exited 0;
- the test harness is as pinned: a change of it the scenario does not allow, or a sign
  that the agent's code reaches into the test run (`hangar.verifiers.harness`,
  `hangar.verifiers.tampering`), fails scope whatever the host verifier found.

A canary found in the trace makes the trial `void`, whatever else holds. A verifier
that crashed, hung, printed what is not a Verification, or answered another request
(another case or trace, a checklist not covered exactly once) makes it `verifier_error`
(the task's problem, retried, never counted) unless the agent's own record fails it: a
changed harness, an unfinished run, a failed verifier command.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ValidationError

from hangar.files import file_sha256
from hangar.results import CheckOutcome, FindingOutcome, Verdict
from hangar.verifiers.protocol import CommandRecord, Finding, Verification, script_problem
from hangar.verifiers.spec import PinnedFile

#: The evidence of harness changes and tampering signs (written by the execution trial).
HARNESS_FILE = "verifier/harness.json"


def pinned_script_problem(path: Path, pinned: PinnedFile, role: str) -> str | None:
    """Why the pinned script at `path` cannot run (missing, wrong bytes, not runnable), or
    None."""
    if not path.exists():
        return f"{role} script {pinned.file} is missing (looked for {path})"
    problem = script_problem(path)
    if problem is not None:
        return f"{role} script: {problem}"
    actual = file_sha256(path)
    if actual != pinned.sha256:
        return (
            f"{role} script {pinned.file} does not match its pin: the file is {actual}, "
            f"the scenario pins {pinned.sha256} (if the change is intended and reviewed, "
            "re-pin it: `hangar scenario pin SCENARIO`)"
        )
    return None


def evidence_problem(artifacts: Path, rel: str) -> str | None:
    """Why `rel` is not admissible evidence under `artifacts`, or None."""
    if not rel:
        return "an empty evidence path"
    path = PurePosixPath(rel)
    if path.is_absolute() or rel.startswith("\\"):
        return f"evidence {rel!r} is an absolute path"
    if ".." in path.parts:
        return f"evidence {rel!r} contains '..'"
    current = artifacts
    for part in path.parts:
        current = current / part
        if current.is_symlink():
            return f"evidence {rel!r} goes through a symlink ({current.relative_to(artifacts)})"
    if not current.exists():
        return f"evidence {rel!r} does not exist"
    if not current.is_file():
        return f"evidence {rel!r} is not a regular file"
    return None


class Judgement(BaseModel):
    """The admitted outcome of verification."""

    verdict: Verdict
    """pass, fail, void or verifier_error."""
    reason: str
    """Every rule that decided it, in words."""
    checks: tuple[CheckOutcome, ...] = ()
    """The verification's checklist findings (empty when it could not be read)."""
    route: FindingOutcome | None = None
    """Its route finding (None when it could not be read)."""
    scope: FindingOutcome | None = None
    """Its scope finding (None when it could not be read)."""


def _parse(raw: str) -> tuple[Verification | None, str]:
    text = raw.strip()
    if not text:
        return None, "malformed verification: the host verifier printed nothing"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"malformed verification: not JSON ({exc})"
    try:
        return Verification.model_validate(data), ""
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        return None, f"malformed verification: {where}: {message}"


def judge(
    raw: str,
    *,
    verifier_error: str | None = None,
    incomplete_reason: str = "",
    case: str,
    trace_sha256: str,
    completed: bool,
    checklist: tuple[str, ...],
    artifacts: Path,
    commands: list[CommandRecord],
    canaries_found: list[str],
    harness: Sequence[str] = (),
) -> Judgement:
    """Admit a host verifier's printed output (see the module docstring).

    `verifier_error` says the verifier crashed or hung; its output is then not read.
    `incomplete_reason` says why the agent's run did not complete. `harness` holds, in
    words, each change of the test harness and each sign of tampering that fails scope
    (its evidence file: `HARNESS_FILE`).
    """
    if canaries_found:
        return Judgement(
            verdict=Verdict.VOID,
            reason=f"canary leaked into the trace: {', '.join(map(repr, canaries_found))}",
        )
    verification, broken = (None, verifier_error) if verifier_error else _parse(raw)
    found: dict[str, Any] = {}
    reasons: list[str] = []
    if verification is not None:
        found = {
            "checks": tuple(
                CheckOutcome(requirement=c.requirement, status=c.status, evidence=tuple(c.evidence))
                for c in verification.checks
            ),
            "route": _outcome(verification.route),
            "scope": _outcome(verification.scope),
        }
        off = _off_contract(verification, case, trace_sha256, checklist)
        broken = "; ".join(off)
        reasons += _finding_problems(verification.route, artifacts, "route")
        reasons += _finding_problems(verification.scope, artifacts, "scope")
        for c in verification.checks:
            reasons += _finding_problems(c, artifacts, None, c.requirement)
    agents = _agent_problems(harness, completed, incomplete_reason, commands)
    if "scope" in found and harness:
        evidence = (*found["scope"].evidence, HARNESS_FILE)
        found["scope"] = FindingOutcome(status="fail", evidence=tuple(dict.fromkeys(evidence)))
    if broken and not agents:
        # Nothing the agent did decides the trial, and the verifier's answer cannot be
        # read as one about it: the task's problem, never the agent's fail.
        return Judgement(verdict=Verdict.VERIFIER_ERROR, reason=broken, **found)
    reasons = ([broken] if broken else []) + reasons + agents
    if reasons:
        return Judgement(verdict=Verdict.FAIL, reason="; ".join(reasons), **found)
    return Judgement(verdict=Verdict.PASS, reason=_pass_reason(found.get("checks", ())), **found)


def _agent_problems(
    harness: Sequence[str], completed: bool, incomplete_reason: str, commands: list[CommandRecord]
) -> list[str]:
    """What fails the trial on the agent's account, whatever the host verifier said: a
    changed harness, a run that did not finish, a verifier command that failed."""
    reasons = ["failed scope: " + "; ".join(harness)] if harness else []
    if not completed:
        why = f" ({incomplete_reason})" if incomplete_reason else ""
        reasons.append(f"incomplete run{why}: the agent did not finish, so the trial cannot pass")
    for record in commands:
        if record.exit_code != 0 or record.timed_out:
            how = "timed out" if record.timed_out else f"exited {record.exit_code}"
            reasons.append(f"verifier command failed: {record.command!r} {how}")
    return reasons


def _outcome(finding: Finding) -> FindingOutcome:
    return FindingOutcome(status=finding.status, evidence=tuple(finding.evidence))


def _off_contract(
    v: Verification, case: str, trace_sha256: str, checklist: tuple[str, ...]
) -> list[str]:
    """Why a well-formed verification does not answer this trial's request (another
    case, another trace, a checklist not covered exactly once): the verifier's fault."""
    problems: list[str] = []
    if v.case_id != case:
        problems.append(f"wrong case: the verification is for {v.case_id!r}, not {case!r}")
    if v.trace_sha256 != trace_sha256:
        problems.append(
            f"stale trace: the verification judged trace {v.trace_sha256[:12]}..., "
            f"the trial's trace is {trace_sha256[:12]}..."
        )
    covered = [c.requirement for c in v.checks]
    for item in checklist:
        if item not in covered:
            problems.append(f"checklist item not covered: {item!r}")
        elif covered.count(item) > 1:
            problems.append(f"checklist item covered {covered.count(item)} times: {item!r}")
    for item in dict.fromkeys(covered):
        if item not in checklist:
            problems.append(f"finding for a requirement not in the checklist: {item!r}")
    return problems


def _finding_problems(
    finding: Finding, artifacts: Path, field: str | None, requirement: str = ""
) -> list[str]:
    """What keeps one finding from supporting a pass: the `field` (route, scope) or, for
    None, the check of `requirement`, named in each reason."""
    which = f": {requirement!r}" if field is None else ""
    if finding.status == "unassessed":
        return [f"unassessed {field or 'finding'}{which}"]
    if finding.status == "fail":
        return [f"failed {field or 'check'}{which}"]
    if not finding.evidence:
        return [f"passing {field or 'finding'} without evidence{which}"]
    subject = field or repr(requirement)
    return [
        f"inadmissible evidence for {subject}: {p}"
        for p in (evidence_problem(artifacts, e) for e in finding.evidence)
        if p is not None
    ]


def _pass_reason(checks: tuple[CheckOutcome, ...]) -> str:
    if not checks:
        return "every verifier command passed (no checklist)"
    return f"all {len(checks)} checklist requirements passed on admitted evidence"
