"""A sweep's execution trials as Harbor job folders (`hangar export --format harbor-job`).

What the Terminal-Bench leaderboard takes and Harbor's viewer reads: per (agent, model),
``<agent>__<model>/metadata.yaml`` (the leaderboard's agent and model fields) beside one
job folder named after the sweep, holding the job's ``config.json``, ``result.json`` and
``lock.json`` and, per trial, ``config.json``, ``result.json``, ``agent/trajectory.json``
(ATIF, `hangar.trajectories`), ``verifier/`` (the reward file the task's tests wrote and
their output), ``trial.log`` and the trial's whole hangar evidence (``hangar/``).

The files follow Harbor's pydantic models (the tests load every one with Harbor's own
package). A task is pinned by Harbor's content digest (a registry dataset's lock's, else
the task folder's). Where the run departs from what a leaderboard requires (fewer than
five trials of a task, images mapped onto others, limits other than the task's own, an
agent Harbor does not name), `departures` says so in words, and ``metadata.yaml`` carries
them as comments.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from hangar.errors import ConfigError, HangarError
from hangar.kinds.execution.harbor.digest import content_digest
from hangar.kinds.execution.harbor.tasks import load_task
from hangar.results import SweepRecord, TrialResult, Verdict
from hangar.trajectories import trial_trajectory

#: Trials of each task a leaderboard asks for.
LEADERBOARD_TRIALS = 5
#: hangar's agent presets and reference roles -> Harbor's agent names.
HARBOR_AGENTS = {
    "oracle": "oracle",
    "gold": "oracle",
    "nop": "nop",
    "codex": "codex",
    "claude": "claude-code",
    "gemini": "gemini-cli",
    "qwen": "qwen-coder",
    "opencode": "opencode",
    "copilot": "copilot-cli",
    "cline": "cline-cli",
    "pi": "pi",
    "openhands": "openhands",
    "mini-swe-agent": "mini-swe-agent",
    "aider": "aider",
}
#: How each verdict that is not the agent's reads as Harbor's exception types.
EXCEPTIONS = {
    Verdict.INFRA_ERROR: "EnvironmentStartTimeoutError",
    Verdict.BLOCKED_SETUP: "RuntimeError",
    Verdict.VERIFIER_ERROR: "VerifierRuntimeError",
    Verdict.VOID: "RuntimeError",
}
_NAMESPACE = uuid.UUID("5d7c2c9e-8f0b-4a53-9a51-6b6c1f0e2a10")

Bundles = Callable[[TrialResult], Path | None]


def harbor_agent(result: TrialResult) -> str | None:
    """The agent's name in Harbor's words (its preset's or role's; None: Harbor has none)."""
    settings = result.agent_settings
    return HARBOR_AGENTS.get(str(settings.get("preset") or settings.get("role") or ""))


def _json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def _read(folder: Path | None, name: str) -> Any:
    path = folder / name if folder is not None else None
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None


class _Task:
    """What the export says of one task: its id, its digest, where it came from."""

    def __init__(self, result: TrialResult, task: dict[str, Any], lock: dict[str, Any] | None):
        self.name = result.scenario_id
        self.source = result.suite or None
        self.folder = Path(task["folder"]) if task.get("folder") else None
        locked = {t["name"]: t for t in (lock or {}).get("tasks", [])}.get(self.name)
        if locked is not None and locked.get("git_url"):
            self.id: dict[str, Any] = {
                "git_url": locked["git_url"],
                "git_commit_id": locked["git_commit_id"],
                "path": locked["path"],
            }
            self.digest = locked["digest"]
        else:
            self.id = {"path": str(self.folder or self.name)}
            self.digest = (
                content_digest(self.folder)
                if self.folder is not None and (self.folder / "task.toml").is_file()
                else f"sha256:{result.scenario_digest}"
            )
        self.task = task

    def lock(self) -> dict[str, Any]:
        kind = "git" if "git_url" in self.id else "local"
        return {"name": self.name, "type": kind, "digest": self.digest, "source": self.source}


def _departures(rows: list[TrialResult], tasks: dict[str, _Task]) -> list[str]:
    """What departs from a leaderboard's rules, in words."""
    found = []
    counts = Counter(r.scenario_id for r in rows)
    few = sorted(name for name, n in counts.items() if n < LEADERBOARD_TRIALS)
    if few:
        found.append(
            f"{len(few)} task(s) have fewer than {LEADERBOARD_TRIALS} trials "
            f"(a leaderboard asks for {LEADERBOARD_TRIALS}; `repeats: 5`): {', '.join(few[:5])}"
            + (" ..." if len(few) > 5 else "")
        )
    mapped = {k: v for t in tasks.values() for k, v in (t.task.get("image_map") or {}).items()}
    if mapped:
        pairs = ", ".join(f"{k} -> {v}" for k, v in sorted(mapped.items()))
        found.append(f"the tasks' images were mapped onto others ({pairs}): not their own")
    for t in tasks.values():
        toml = Path(t.task.get("path", ""))
        try:
            own = load_task(toml).limits.model_dump() if toml.is_file() else None
        except HangarError:
            own = None
        if own is not None and own != t.task.get("limits"):
            found.append(f"{t.name} ran with limits other than its task.toml's")
    agents = {r.agent for r in rows if harbor_agent(r) is None}
    if agents:
        found.append(f"agent(s) Harbor has no name for: {', '.join(sorted(agents))}")
    return found


class _Job:
    """One job folder: the trials of one (agent, model) pair."""

    def __init__(self, sweep: str, folder: Path, rows: list[TrialResult]) -> None:
        self.sweep, self.folder, self.rows = sweep, folder, rows
        self.id = uuid.uuid5(_NAMESPACE, f"{sweep}/{folder.parent.name}")
        first = rows[0]
        model = None if first.model == "none" else first.model
        self.agent: dict[str, Any] = {
            "name": harbor_agent(first) or first.agent,
            "model_name": model,
        }

    def trial_config(self, name: str, task: _Task) -> dict[str, Any]:
        return {
            "task": {**task.id, "source": task.source},
            "trial_name": name,
            "trials_dir": str(self.folder),
            "timeout_multiplier": 1.0,
            "agent": self.agent,
            "environment": {"type": "docker", "delete": True},
            "verifier": {},
            "job_id": str(self.id),
        }

    def trial_result(
        self, r: TrialResult, name: str, task: _Task, bundle: Path | None
    ) -> dict[str, Any]:
        rewards = (_read(bundle, "logs/verifier/reward.json") or {}) if bundle else {}
        if not rewards:
            rewards = {s.metric: s.value for s in r.scores if s.metric == "reward"}
        usage = r.usage
        result: dict[str, Any] = {
            "id": str(uuid.uuid5(_NAMESPACE, f"{r.sweep}/{r.trial_key}/{r.attempt}")),
            "task_name": task.name,
            "trial_name": name,
            "trial_uri": (self.folder / name).resolve().as_uri(),
            "task_id": task.id,
            "source": task.source,
            "task_checksum": task.digest,
            "config": self.trial_config(name, task),
            "agent_info": {
                "name": self.agent["name"],
                "version": r.agent_digest[:12] or "unknown",
                "model_info": {"name": r.model} if self.agent["model_name"] else None,
            },
            "agent_result": {
                "n_input_tokens": usage.input_tokens + usage.cached_input_tokens,
                "n_cache_tokens": usage.cached_input_tokens,
                "n_output_tokens": usage.output_tokens,
                "cost_usd": usage.cost_usd,
                "metadata": {"hangar_trial_key": r.trial_key, "hangar_verdict": r.verdict},
            },
            "verifier_result": {"rewards": rewards}
            if r.verdict in (Verdict.PASS, Verdict.FAIL)
            else None,
            "started_at": r.started_at.isoformat(),
            "finished_at": r.finished_at.isoformat(),
        }
        if r.verdict in EXCEPTIONS:
            result["exception_info"] = {
                "exception_type": EXCEPTIONS[r.verdict],
                "exception_message": f"hangar: {r.verdict.value}: {r.reason}",
                "exception_traceback": "",
                "occurred_at": r.finished_at.isoformat(),
            }
        return result


def _trial_files(folder: Path, r: TrialResult, bundle: Path | None) -> None:
    """A trial folder's logs: the trajectory, the verifier's files, trial.log, hangar's
    evidence."""
    lines = [f"hangar trial {r.trial_key} attempt {r.attempt}: {r.verdict.value}: {r.reason}"]
    lines += [f"{phase}: {seconds:.3f}s" for phase, seconds in r.timings.items()]
    (folder / "trial.log").write_text("\n".join(lines) + "\n")
    (folder / "agent").mkdir(parents=True, exist_ok=True)
    (folder / "verifier").mkdir(exist_ok=True)
    if r.verdict in EXCEPTIONS:
        (folder / "exception.txt").write_text(f"{r.verdict.value}: {r.reason}\n")
    if bundle is None:
        return
    _json(folder / "agent" / "trajectory.json", trial_trajectory(r, bundle))
    for src, dest in (
        ("logs/verifier/reward.txt", "verifier/reward.txt"),
        ("logs/verifier/reward.json", "verifier/reward.json"),
        ("verifier/stdout.txt", "verifier/test-stdout.txt"),
        ("verifier/stderr.txt", "verifier/test-stderr.txt"),
    ):
        if (bundle / src).is_file():
            shutil.copyfile(bundle / src, folder / dest)
    shutil.copytree(bundle, folder / "hangar", symlinks=True)


def _stats(results: list[dict[str, Any]], key: str) -> dict[str, Any]:
    rewards = [
        (x["verifier_result"] or {}).get("rewards", {}).get("reward")
        for x in results
        if x.get("verifier_result")
    ]
    values = [float(v) for v in rewards if v is not None]
    reward_stats: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    exception_stats: dict[str, list[str]] = defaultdict(list)
    for x in results:
        for metric, value in ((x["verifier_result"] or {}).get("rewards") or {}).items():
            reward_stats[metric][str(value)].append(x["trial_name"])
        if "exception_info" in x:
            exception_stats[x["exception_info"]["exception_type"]].append(x["trial_name"])
    errored = sum(1 for x in results if "exception_info" in x)
    return {
        "n_completed_trials": len(results),
        "n_errored_trials": errored,
        "evals": {
            key: {
                "n_trials": len(results) - errored,
                "n_errors": errored,
                "metrics": [{"mean": sum(values) / len(values)}] if values else [],
                "reward_stats": reward_stats,
                "exception_stats": exception_stats,
            }
        },
    }


def _metadata(rows: list[TrialResult], departures: list[str]) -> str:
    first = rows[0]
    models = []
    if first.model != "none":
        provider = first.model.split("/", 1)[0] if "/" in first.model else ""
        models.append(
            {
                "model_name": first.model,
                "model_provider": provider,
                "model_display_name": first.model,
                "model_org_display_name": provider,
            }
        )
    doc = {
        "agent_url": "",
        "agent_display_name": first.agent,
        "agent_org_display_name": "",
        "models": models,
    }
    notes = [
        "# metadata.yaml for a leaderboard submission, filled from hangar's sweep:",
        "# agent_url, agent_org_display_name and the models' display names are yours to give.",
        *(f"# departs from a leaderboard's rules: {d}" for d in departures),
    ]
    return "\n".join(notes) + "\n" + yaml.safe_dump(doc, sort_keys=False)


def export(
    sweep: str, rows: list[TrialResult], recorded: SweepRecord, out: Path, bundles: Bundles
) -> list[str]:
    """Write the sweep's execution trials (`rows`, latest attempts) as Harbor job folders
    under `out` (see the module docstring); `recorded`: the sweep's record in the store,
    `bundles`: a trial's evidence folder. Returns what departs from a leaderboard's rules."""
    rows = [r for r in rows if r.kind == "execution"]
    if not rows:
        raise ConfigError(f"sweep {sweep!r} has no execution trials to export as Harbor jobs")
    locks = {k.partition(":")[2]: v for k, v in recorded.sources.items()}
    groups: dict[tuple[str, str], list[TrialResult]] = defaultdict(list)
    for r in rows:
        groups[(r.agent, r.model)].append(r)
    said: list[str] = []
    for (agent, model), mine in sorted(groups.items()):
        label = f"{agent}__{model.replace('/', '-')}"
        job = _Job(sweep, out / label / sweep, mine)
        departures = _write_job(job, mine, locks, bundles, recorded)
        (out / label / "metadata.yaml").write_text(_metadata(mine, departures))
        said += [f"{label}: {d}" for d in departures]
    return said


def _write_job(
    job: _Job,
    rows: list[TrialResult],
    locks: dict[str, Any],
    bundles: Bundles,
    recorded: SweepRecord,
) -> list[str]:
    tasks: dict[str, _Task] = {}
    results, trial_locks = [], []
    for r in sorted(rows, key=lambda r: (r.scenario_id, r.repeat)):
        bundle = bundles(r)
        task_json = _read(bundle, "task.json") or {}
        task = tasks.setdefault(r.scenario_id, _Task(r, task_json, locks.get(r.suite)))
        name = f"{task.name[:32].rstrip('_-')}__{r.trial_key[:7]}"
        folder = job.folder / name
        folder.mkdir(parents=True, exist_ok=True)
        result = job.trial_result(r, name, task, bundle)
        _json(folder / "config.json", result["config"])
        _json(folder / "result.json", result)
        _trial_files(folder, r, bundle)
        results.append(result)
        trial_locks.append(
            {
                "task": task.lock() | task.id,
                "agent": job.agent,
                "environment": {"type": "docker"},
                "verifier": {},
            }
        )
    started = min(r.started_at for r in rows)
    finished = max(r.finished_at for r in rows)
    key = f"{job.agent['name']}__{job.agent['model_name']}__{rows[0].suite or 'adhoc'}"
    if job.agent["model_name"] is None:
        key = f"{job.agent['name']}__{rows[0].suite or 'adhoc'}"
    _json(job.folder / "config.json", _job_config(job, tasks, recorded))
    _json(
        job.folder / "result.json",
        {
            "id": str(job.id),
            "started_at": started.isoformat(),
            "updated_at": finished.isoformat(),
            "finished_at": finished.isoformat(),
            "n_total_trials": len(results),
            "stats": _stats(results, key),
        },
    )
    _json(
        job.folder / "lock.json",
        {
            "schema_version": 3,
            "created_at": _now(finished),
            "harbor": {"version": None},
            "n_concurrent_trials": _slots(recorded),
            "retry": {"max_retries": recorded.retry.infra_retries},
            "trials": trial_locks,
        },
    )
    return _departures(rows, tasks)


def _slots(recorded: SweepRecord) -> int:
    return recorded.concurrency.sandbox_slots or 1


def _now(when: datetime) -> str:
    return when.isoformat()


def _job_config(job: _Job, tasks: dict[str, _Task], recorded: SweepRecord) -> dict[str, Any]:
    return {
        "job_name": job.sweep,
        "jobs_dir": str(job.folder.parent),
        "n_attempts": recorded.repeats,
        "timeout_multiplier": 1.0,
        "n_concurrent_trials": _slots(recorded),
        "agents": [job.agent],
        "tasks": [{**t.id, "source": t.source} for t in tasks.values()],
    }
