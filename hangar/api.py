"""hangar's public API: the names a package that extends hangar builds on.

A package adds a kind of work, a sandbox backend, an agent preset or a task source of
the execution kind through entry points (`hangar.plugins`; docs/architecture.md,
"Extending hangar from a package"). What it imports from hangar, it imports from here:
these names keep their meaning across releases, and `tests/test_api.py` holds the list.
Everything else in hangar's modules is internal and may move.

- **Kinds** (entry point group ``hangar.kinds``): a module whose ``KIND`` is a `Kind`;
  its trials are `TrialRun` subclasses (`SandboxedTrial` for one that runs an agent in a
  sandbox), which end by raising `Outcome` or setting a `Verdict`, and report what they
  judged as a `TrialOutcome`.
- **Sandbox backends** (``hangar.sandboxes``): a `Sandbox` subclass (`LocalSandbox` is
  the simplest to start from), made from a `SandboxSpec`, answering `ExecResult`.
- **Agent presets** (``hangar.agent_presets``): a `Preset`.
- **Task sources** (``hangar.task_sources``): a `TaskSource` whose tasks are
  `ExecutionTask`: scenarios (`load_scenario`) or image tasks.
"""

from __future__ import annotations

from hangar.agents import AgentSpec
from hangar.agents.presets import Preset
from hangar.errors import ConfigError, HangarError, SandboxError
from hangar.kinds.execution.images.task import ImageTask
from hangar.kinds.execution.scenarios.scenario import LoadedScenario, load_scenario
from hangar.kinds.execution.sources import TaskSource
from hangar.kinds.execution.task import ExecutionTask
from hangar.models import ModelSpec
from hangar.results import CheckOutcome, Score, TrialOutcome, TrialResult, Usage, Verdict
from hangar.sandbox import ExecResult, Mount, Sandbox, SandboxLimits, SandboxSpec
from hangar.sandbox.local import LocalSandbox
from hangar.trials.boundary import Outcome, TrialRun
from hangar.trials.kind import (
    About,
    Failure,
    Kind,
    KindSettings,
    Matrix,
    ReportSection,
    SweepSettings,
    ViewSettings,
)
from hangar.trials.sandboxed import SandboxedTrial
from hangar.trials.spec import Arm, Task, TrialSpec, new_spec

#: What a name is, for a name whose object has no docstring of its own (a type alias).
ABOUT = {
    "AgentSpec": "An agent of a sweep, told apart by its `kind`: a command agent (an agent "
    "CLI or any command), a chat agent, or a reference agent (oracle, gold, nop).",
}

__all__ = [
    "About",
    "AgentSpec",
    "Arm",
    "CheckOutcome",
    "ConfigError",
    "ExecResult",
    "ExecutionTask",
    "Failure",
    "HangarError",
    "ImageTask",
    "Kind",
    "KindSettings",
    "LoadedScenario",
    "LocalSandbox",
    "Matrix",
    "ModelSpec",
    "Mount",
    "Outcome",
    "Preset",
    "ReportSection",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "SandboxSpec",
    "SandboxedTrial",
    "Score",
    "SweepSettings",
    "Task",
    "TaskSource",
    "TrialOutcome",
    "TrialResult",
    "TrialRun",
    "TrialSpec",
    "Usage",
    "Verdict",
    "ViewSettings",
    "load_scenario",
    "new_spec",
]
