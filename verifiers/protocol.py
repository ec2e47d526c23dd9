"""The host verifier protocol, and how pinned host scripts (prepare, verifier) run.

A host verifier gets the path of a request file as its first argument (also in
``HANGAR_REQUEST``) and prints one Verification JSON on stdout:

    request:      {case, fixture, workspace, artifacts, traceSha256, completed,
                   checklist, commands: [{command, exitCode, timedOut, stdout, stderr,
                   startedAt, endedAt}], hiddenTests, harness, tampering}
    verification: {caseId, traceSha256, checks: [{requirement, status, evidence[]}],
                   route: {status, evidence[]}, scope: {status, evidence[]}}
                   status in pass | fail | unassessed

This is seed 001's interface to the letter: ``route`` (how the agent got its result:
the procedure, tool results, skill bytes it used) and ``scope`` (what it touched: no
forbidden action, unrelated work preserved) are *Findings* like every check, assessed
separately; a bare string is malformed. `evidence` paths are relative to the artifacts
folder. A prepare script gets ``{fixture, workspace, artifacts}`` the same way and
succeeds by exiting 0.

Pinned scripts are trusted code (their sha256 was checked at admission), but they run
with a scrubbed environment all the same: no host secret reaches them or their logs.
A ``.py`` script runs with hangar's own Python, so it may import `hangar.verifiers`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel

from hangar.sandbox.base import MiB, TailBuffer
from hangar.verifiers.harness import HarnessChange
from hangar.verifiers.tampering import TamperSign


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def to_json(self) -> str:
        """The camelCase JSON form."""
        return self.model_dump_json(by_alias=True, indent=1)


class CommandRecord(_Wire):
    """One verifier command as it ran in the sandbox."""

    command: str
    """The command line."""
    exit_code: int
    """Its exit code."""
    timed_out: bool = False
    """Killed at its time limit."""
    stdout: str
    """Its stdout, as a path relative to the artifacts folder."""
    stderr: str
    """Its stderr, as a path relative to the artifacts folder."""
    started_at: float | None = None
    """When it started (seconds since the epoch, the host's clock)."""
    ended_at: float | None = None
    """When it ended."""


class VerificationRequest(_Wire):
    """What a host verifier is asked to judge."""

    case: str
    """Scenario id; the verification's caseId must equal it."""
    fixture: str
    """Path of the scenario file (its folder holds the scenario's own files)."""
    workspace: str
    """The workspace after the agent (untrusted content: never run git in it on the host)."""
    artifacts: str
    """Folder for evidence files; evidence paths are relative to it."""
    trace_sha256: str
    """sha256 of the sealed trace; the verification must echo it."""
    completed: bool
    """Whether the agent's run completed."""
    checklist: list[str] = Field(default_factory=list)
    """The requirements to cover, each exactly once."""
    commands: list[CommandRecord] = Field(default_factory=list)
    """The original verifier commands and their outcomes."""
    hidden_tests: list[str] = Field(default_factory=list)
    """The tests of the hidden verifier files (``file.py::[Class::]name``), each of which
    must have run and passed."""
    harness: list[HarnessChange] = Field(default_factory=list)
    """Every change of the test harness hangar found, and what it did about it (each one
    not allowed fails scope, whatever the verifier says)."""
    tampering: list[TamperSign] = Field(default_factory=list)
    """Signs that the agent's added code reaches into the test run (each fails scope)."""
    session: str = ""
    """The agent's session as normalized events (``session.jsonl``, relative to the
    artifacts folder; '' when there is none): tool calls and their results, shell
    commands and exit codes, files read (with the sha256 of what was read) and written,
    skills loaded, errors, partial turns. Events of ``source`` ``trace`` are hangar's own
    record; the others are the agent's own session files, which it could have edited."""


class Finding(_Wire):
    """One assessment: seed 001's ``type Finding = {status, evidence: string[]}``."""

    status: Literal["pass", "fail", "unassessed"]
    """The finding."""
    evidence: list[str] = Field(default_factory=list)
    """Files under the artifacts folder that support it (a pass needs at least one)."""


class Check(Finding):
    """The finding of one checklist requirement."""

    requirement: str
    """A checklist string, exactly."""


#: What a Finding looks like, for the message that refuses anything else.
FINDING_SHAPE = '{"status": "pass" | "fail" | "unassessed", "evidence": ["path/under/artifacts"]}'


class Verification(_Wire):
    """What a host verifier prints."""

    case_id: str
    """The request's case."""
    trace_sha256: str
    """The request's traceSha256."""
    checks: list[Check]
    """One finding per checklist requirement."""
    route: Finding
    """How the agent reached its result (procedure, tool results, delivered skill bytes)."""
    scope: Finding
    """What the agent touched (forbidden actions, unrelated work preserved)."""

    @field_validator("route", "scope", mode="before")
    @classmethod
    def _finding(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, dict | Finding):
            raise ValueError(
                f"{info.field_name} must be a Finding {FINDING_SHAPE}, assessed on its own "
                f"like a check; got {type(value).__name__} {str(value)[:60]!r}"
            )
        return value


class ScriptRun(BaseModel):
    """How a host script ended."""

    exit_code: int | None
    """Exit code (None when it could not start)."""
    stdout: str
    """Its stdout (capped)."""
    stderr: str
    """Its stderr (capped)."""
    timed_out: bool = False
    """Killed at its time limit."""
    duration_s: float = 0.0
    """Wall time."""


def script_argv(script: Path) -> list[str]:
    """How to run a pinned script: by its suffix, or directly when it is executable."""
    suffix = script.suffix
    if suffix == ".py":
        return [sys.executable, str(script)]
    if suffix in (".js", ".mjs"):
        return ["node", str(script)]
    if suffix == ".mts":
        return ["node", "--experimental-strip-types", str(script)]
    return [str(script)]


def script_problem(script: Path) -> str | None:
    """Why `script` cannot run as a pinned script, or None."""
    if script.is_symlink() or not script.is_file():
        return f"{script} is not a regular file"
    if script.suffix not in (".py", ".js", ".mjs", ".mts") and not os.access(script, os.X_OK):
        return f"{script} must end .py, .js, .mjs or .mts, or be executable"
    return None


def run_host_script(
    script: Path, request: Path, *, timeout: float, cwd: Path, output_limit: int = 10 * MiB
) -> ScriptRun:
    """Run a pinned script with `request` as its argument, in a scrubbed environment."""
    with tempfile.TemporaryDirectory(prefix="hangar-script-home-") as home:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "HOME": home,
            "HANGAR_REQUEST": str(request),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                [*script_argv(script), str(request)],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            return ScriptRun(exit_code=None, stdout="", stderr=f"cannot start {script}: {exc}")
        try:
            out, err = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
            timed_out = True
    buffers = TailBuffer(output_limit), TailBuffer(output_limit)
    buffers[0].write(out)
    buffers[1].write(err)
    return ScriptRun(
        exit_code=proc.returncode,
        stdout=buffers[0].text(),
        stderr=buffers[1].text(),
        timed_out=timed_out,
        duration_s=time.monotonic() - started,
    )
