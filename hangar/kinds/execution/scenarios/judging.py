"""An execution trial's judgement: the host verifier run on its request, then its output
admitted with the harness's findings (`hangar.verifiers.admission`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from hangar.agents import AgentRun
from hangar.kinds.execution.scenarios.scenario import LoadedScenario
from hangar.results import Verdict
from hangar.trace import find_canaries
from hangar.trials.boundary import unless_provider_failed
from hangar.verifiers import junit
from hangar.verifiers.admission import Judgement, judge
from hangar.verifiers.protocol import VerificationRequest, run_host_script
from hangar.verifiers.spec import PinnedFile


class HostVerification(NamedTuple):
    """What the host verifier printed, what went wrong running it, and what a builtin
    verifier adds to the reason of a fail."""

    raw: str
    error: str | None = None
    notes: tuple[str, ...] = ()


def host_verify(
    request: VerificationRequest, loaded: LoadedScenario, write: Callable[[str, object], Path]
) -> HostVerification:
    """Run the scenario's host verifier on `request` (see `HostVerification`); `write`
    puts an evidence file under the artifacts folder."""
    verifier = loaded.scenario.verifier
    request_path = write("verifier/request.json", request.to_json())
    host = verifier.host
    if not isinstance(host, PinnedFile):
        judged = junit.verify_with_notes(request, host)
        raw = judged.verification.to_json()
        write("verifier/verification.json", raw)
        return HostVerification(raw, notes=tuple(judged.notes))
    run = run_host_script(
        loaded.local(host.file), request_path, timeout=verifier.host_timeout_s, cwd=loaded.folder
    )
    write("verifier/verification.json", run.stdout)
    write("verifier/host-stderr.txt", run.stderr)
    if run.timed_out:
        limit = verifier.host_timeout_s
        return HostVerification(run.stdout, f"host verifier hung: killed at its {limit:g} s limit")
    if run.exit_code != 0:
        last = (run.stderr.strip().splitlines() or [""])[-1]
        crashed = f"host verifier crashed (exit {run.exit_code}): {last}".rstrip(": ")
        return HostVerification(run.stdout, crashed)
    return HostVerification(run.stdout)


def judgement(
    request: VerificationRequest,
    verified: HostVerification,
    *,
    loaded: LoadedScenario,
    run: AgentRun,
    trace: Path,
    harness: list[str],
    disk_limit: int | None,
) -> Judgement:
    """Admit the verification of `request` (`hangar.verifiers.admission`), the harness's
    findings with it; a full disk (`disk_limit`: the size the agent filled) and a
    provider's failure are named; the latter makes a fail an infra_error (it was not the
    agent's)."""
    scenario = loaded.scenario
    judged = judge(
        verified.raw,
        verifier_error=verified.error,
        case=scenario.id,
        trace_sha256=request.trace_sha256,
        completed=run.completed,
        incomplete_reason=run.reason,
        checklist=scenario.verifier.checklist,
        artifacts=Path(request.artifacts),
        commands=list(request.commands),
        canaries_found=find_canaries(trace, scenario.canaries),
        harness=harness,
    )
    if verified.notes and judged.verdict is Verdict.FAIL:
        judged.reason += "; " + "; ".join(verified.notes)
    if disk_limit is not None and judged.verdict is Verdict.FAIL:
        judged.reason += f"; the agent filled its disk (limit {disk_limit / 1024**2:g} MiB)"
    verdict, reason = unless_provider_failed(judged.verdict, judged.reason, run.provider_error)
    return judged.model_copy(update={"verdict": verdict, "reason": reason})
