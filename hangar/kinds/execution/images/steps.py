"""Multi-step image tasks (Harbor's ``[[steps]]``): the agent works through named steps
in one environment, each step with its own instruction, tests and reward.

Each step runs as a single-step trial would (the agent's turn, then the hand-over and
the tests in a snapshot of the agent's sandbox); the next step's agent sandbox starts
from that snapshot with the same workspace, so files, installed packages and changed
configuration carry over (processes do not: every process of the agent ends before its
work is judged). Before a step's agent, its ``workdir/`` files are copied into the
working directory (and into the pristine copy, so they are not counted as the agent's
changes) and a ``setup.sh`` among them is run as the agent's user; its healthcheck is
waited for (after the first step as the agent's user, and one that never passes is then
the agent's ``fail``: the environment is what it left).

A step whose rewards fall below its ``min_reward`` (a missing one counts as below) ends
the trial, as does a step that could not be verified. The trial's reward comes from the
steps' rewards: each reward's mean over the steps that ran (``mean``, Harbor's default;
a step whose tests wrote no reward counts 0: only what the agent achieved counts for it)
or the last step's (``final``). A takeover found at any step (the judge's machinery used
what the agent changed) voids a pass: a change the agent made in an early step stays in
the environment of every later one.

Evidence: each step but the last that ran is moved to ``steps/<name>/`` (its trace, its
agent and verifier files, its logs); the last stays where a single-step trial's is; and
``steps.json`` lists every step's reward, verdict and reason.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from hangar.kinds.execution.images.healthcheck import wait_healthy
from hangar.kinds.execution.images.rewards import Reward
from hangar.kinds.execution.images.task import Step
from hangar.kinds.execution.images.trial_view import ImageTrialView
from hangar.results import Score, Verdict
from hangar.sandbox import Sandbox
from hangar.trials.boundary import Outcome

#: What of the evidence belongs to one step (moved to ``steps/<name>/`` after it).
STEP_EVIDENCE = (
    "trace.jsonl",
    "agent",
    "verifier",
    "logs",
    "relay.json",
    "healthcheck.json",
    "network",
    "step-setup.json",
)
#: A step's setup script among its workdir files.
SETUP = "setup.sh"


def prepare_step(trial: ImageTrialView, sandbox: Sandbox, step: Step) -> None:
    """The step's files in the working directory, its setup run, its healthcheck passed.
    A setup that fails is the task's problem at the first step, and the agent's after
    (the task's oracle shows which: a task whose oracle fails is left out as broken).
    The files go in through the sandbox (the workspace is the agent's: a link it left
    there is followed inside the sandbox, never on the host), owned by the agent's user;
    the pristine copy is hangar's alone."""
    if step.workdir is not None:
        source = trial.task.local(step.workdir)
        sandbox.copy_in(source, trial.workdir)
        shutil.copytree(source, trial.initial, symlinks=True, dirs_exist_ok=True)
        (trial.initial / SETUP).unlink(missing_ok=True)  # it deletes itself when it is done
        if (source / SETUP).is_file():
            res = sandbox.exec(["bash", f"{trial.workdir}/{SETUP}"], timeout=600)
            trial.write("step-setup.json", res.model_dump(exclude={"stdout", "stderr"}))
            if not res.ok:
                tail = (res.stderr.strip() or res.stdout.strip())[-300:]
                verdict = Verdict.BLOCKED_SETUP if trial.step_index == 0 else Verdict.FAIL
                raise Outcome(
                    verdict,
                    f"step {step.name!r}: its workdir/setup.sh failed (exit {res.returncode}: "
                    f"{tail or 'no output'})",
                )
    if step.healthcheck is not None:
        # after the first step the environment is what the agent left: its user runs the
        # check, and a check that never passes is the agent's doing
        later = trial.step_index > 0
        with trial.phase("healthcheck"):
            wait_healthy(
                sandbox,
                step.healthcheck,
                lambda r: trial.write("healthcheck.json", r),
                user=None if later else "root",
                unhealthy=Verdict.FAIL if later else Verdict.BLOCKED_SETUP,
            )


def step_record(trial: ImageTrialView, step: Step) -> dict[str, Any]:
    """What one verified step gave."""
    reward = trial.reward
    scores = {s.metric: s.value for s in reward.scores} if reward is not None else {}
    return {
        "name": step.name,
        "reward": reward.value if reward is not None else None,
        "scores": scores,
        "verdict": trial.verdict.value,
        "reason": trial.reason,
        "takeover": list(trial.takeover),
    }


def below_minimum(record: dict[str, Any], step: Step) -> str:
    """Why the trial stops after this step ('' when it goes on)."""
    if record["verdict"] not in (Verdict.PASS.value, Verdict.FAIL.value):
        return f"step {step.name!r} was not verified ({record['reason']})"
    if record["reward"] is None:
        return f"step {step.name!r} has no reward ({record['reason']})"
    for key, minimum in (step.min_reward or {}).items():
        value = record["reward"] if key == "reward" else record["scores"].get(key)
        if value is None or value < minimum:
            shown = "missing" if value is None else f"{value:g}"
            return f"step {step.name!r}: {key} {shown} is below its min_reward {minimum:g}"
    return ""


def archive_step(artifacts: Path, name: str) -> None:
    """The step's evidence moved to ``steps/<name>/``."""
    target = artifacts / "steps" / name
    target.mkdir(parents=True, exist_ok=True)
    for entry in STEP_EVIDENCE:
        if (artifacts / entry).exists():
            shutil.move(artifacts / entry, target / entry)


def combined(records: list[dict[str, Any]], strategy: str) -> Reward:
    """The trial's reward from its steps' (see the module docstring)."""
    if not records:
        return Reward(value=None, problem="no step was verified")
    if strategy == "final":
        chosen = records[-1]
        value = chosen["reward"] or 0.0
        scores = {k: v for k, v in chosen["scores"].items() if v is not None}
    else:
        value = sum(r["reward"] or 0.0 for r in records) / len(records)
        keys = sorted({k for r in records for k in r["scores"]})
        scores = {k: sum(r["scores"].get(k) or 0.0 for r in records) / len(records) for k in keys}
    scores["reward"] = value
    return Reward(value=value, scores=tuple(Score(metric=k, value=v) for k, v in scores.items()))


def steps_words(records: list[dict[str, Any]], total: int, strategy: str, stopped: str) -> str:
    """The steps in words: each one's reward, how they combine, why the trial stopped."""
    shown = ", ".join(f"{r['name']} {_reward_words(r['reward'])}" for r in records)
    words = f"{len(records)} of {total} steps ({shown}; {strategy})"
    return f"{words}; stopped: {stopped}" if stopped else words


def _reward_words(value: float | None) -> str:
    return "no reward" if value is None else f"reward {value:g}"
