"""Trials: what one is (`spec`), the boundary every kind runs in (`boundary`), and the
runners of each kind (`execution`, with its `verification`). docs/architecture.md walks
through them."""

from hangar.trials.boundary import Outcome, TrialRun, lost_result, run_trial
from hangar.trials.spec import (
    Arm,
    TrialSpec,
    case_trial,
    plugin_bytes_digest,
    question_trial,
    result_of,
    sample_trial,
    single_trial,
    trial_key,
)

__all__ = [
    "Arm",
    "Outcome",
    "TrialRun",
    "TrialSpec",
    "case_trial",
    "lost_result",
    "plugin_bytes_digest",
    "question_trial",
    "result_of",
    "run_trial",
    "sample_trial",
    "single_trial",
    "trial_key",
]
