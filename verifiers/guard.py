"""One execution trial's test harness, from before the agent to the judgement.

`HarnessGuard` drives `hangar.verifiers.harness` and `hangar.verifiers.tampering` for a
trial: `record` once the workspace is ready for the agent (``harness-baseline.json``),
`before_commands` once the agent is done (what to put back, and the signs in its code),
`after_commands` once the verifier commands are (what changed while they ran). Its
`findings` are what fails scope, in words; ``verifier/harness.json`` holds them all.
"""

from __future__ import annotations

import json
from pathlib import Path

from hangar.verifiers.admission import HARNESS_FILE
from hangar.verifiers.ecosystems import command_files
from hangar.verifiers.harness import (
    HarnessAllowance,
    HarnessBaseline,
    HarnessChange,
    Placement,
    discard,
    findings,
    is_under,
    placements,
)
from hangar.verifiers.junit import judged_files
from hangar.verifiers.spec import BuiltinVerifier, VerifierSpec
from hangar.verifiers.tampering import TamperSign, signs

BASELINE_FILE = "harness-baseline.json"


class HarnessGuard:
    """The test harness of one trial (see the module docstring)."""

    def __init__(self, verifier: VerifierSpec, workspace: Path, store: Path, artifacts: Path):
        builtin = verifier.host if isinstance(verifier.host, BuiltinVerifier) else None
        self.verifier = verifier
        self.workspace = workspace
        self.store = store
        self.artifacts = artifacts
        self.allowance = HarnessAllowance.of(
            verifier.harness.allow, builtin.scope if builtin else ()
        )
        self.hidden = frozenset(h.target.rstrip("/") for h in verifier.files)
        self.judge_checklist = builtin is not None
        self.baseline: HarnessBaseline | None = None
        self.changes: list[HarnessChange] = []
        self.tampering: list[TamperSign] = []

    def record(self, extra: dict[str, Path] | None = None) -> None:
        """Record the harness of the workspace as the agent gets it (`extra`: files that
        will be in it then, see `HarnessBaseline.take`)."""
        verifier = self.verifier
        judged = (
            judged_files(verifier.checklist, self.workspace)
            if self.judge_checklist
            else frozenset()
        )
        also = (*verifier.harness.also, *command_files(verifier.commands, self.workspace))
        self.baseline = HarnessBaseline.take(
            self.workspace, self.store, judged=judged, also=also, extra=extra
        )
        self._write(
            BASELINE_FILE,
            {
                "entries": {p: e.model_dump() for p, e in self.baseline.entries.items()},
                "exempt": self.baseline.exempt,
                "judged": self.baseline.judged,
                "also": self.baseline.also,
                "markersKnown": self.baseline.markers,
            },
        )

    def before_commands(self) -> list[Placement]:
        """Once the agent is done: every change, the signs in the code it added, and the
        placements that put the harness back (to run before the hidden files)."""
        if self.baseline is None:  # the trial ended before its agent started
            return []
        found = self.baseline.compare(self.workspace, self.allowance, skip=self.hidden)
        self.changes = found.changes
        diff = self.artifacts / "diff.patch"
        harness_paths = {c.path for c in self.changes}
        hidden = [p for p in found.sources_changed if is_under(p, self.hidden)]  # replaced next
        self.tampering = signs(
            self.workspace,
            [p for p in found.sources_changed if p not in harness_paths and p not in hidden],
            diff.read_text(errors="replace") if diff.is_file() and not diff.is_symlink() else None,
            known=set(self.baseline.markers),
            skip=frozenset(p for p in found.sources_changed if self.allowance.allows(p)),
        )
        undo = placements(self.baseline, self.changes)
        self.baseline = found.after
        self._record_findings()
        return undo

    def after_commands(self) -> None:
        """Once the verifier commands are done: harness files they changed (code under test
        writing a ``conftest.py`` that a later collection loads) are findings too."""
        if self.baseline is None:
            return
        found = self.baseline.compare(self.workspace, self.allowance, skip=self.hidden, during=True)
        self.changes += found.changes
        self._record_findings()

    def findings(self) -> list[str]:
        """Each change and sign that fails scope, in words (empty: the harness held)."""
        words = []
        failing = findings(self.changes)
        if failing:
            words.append(
                "the agent changed the test harness: " + ", ".join(c.words() for c in failing)
            )
        if self.tampering:
            words.append(
                "the agent's code reaches into the test run: "
                + ", ".join(s.words() for s in self.tampering)
            )
        return words

    def close(self) -> None:
        """Remove the kept bytes."""
        discard(self.store)

    def _record_findings(self) -> None:
        self._write(
            HARNESS_FILE,
            {
                "changes": [c.model_dump() for c in self.changes],
                "tampering": [s.model_dump() for s in self.tampering],
                "findings": self.findings(),
            },
        )

    def _write(self, rel: str, data: object) -> None:
        path = self.artifacts / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1))
