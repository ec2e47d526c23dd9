"""Trials: what one is (`spec`: the task, its arm and key, the spec, the result), the
boundary every kind runs in (`boundary`), and the kinds' interface and registry
(`kind`). Each kind's runner lives in its package under `hangar.kinds`;
docs/architecture.md walks through them."""

from hangar.trials.boundary import Outcome, TrialRun, lost_result, run_trial
from hangar.trials.spec import (
    CONTROL_ARM,
    SKILL_ARM,
    Arm,
    Task,
    TrialSpec,
    adhoc_sweep_id,
    new_spec,
    result_of,
    trial_key,
)

__all__ = [
    "CONTROL_ARM",
    "SKILL_ARM",
    "Arm",
    "Outcome",
    "Task",
    "TrialRun",
    "TrialSpec",
    "adhoc_sweep_id",
    "lost_result",
    "new_spec",
    "result_of",
    "run_trial",
    "trial_key",
]
