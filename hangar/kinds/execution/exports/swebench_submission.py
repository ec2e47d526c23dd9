"""A sweep's SWE-bench trials as SWE-bench's experiments layout
(`hangar export --format swebench-submission`).

One submission folder per (agent, model), ``<YYYYMMDD>_<agent>__<model>/``, as the
leaderboard's experiments repository holds them:

- ``all_preds.jsonl``: the predictions (``instance_id``, ``model_name_or_path``,
  ``model_patch``: the trial's diff), which SWE-bench's own harness re-grades;
- ``results/results.json``: the instance ids by outcome (``resolved``, ``no_generation``:
  an empty patch, ``no_logs``: no test log, the trial never reached its tests);
- ``logs/<instance_id>/``: ``patch.diff``, ``test_output.txt`` (the test log graded,
  between the harness's start and end markers),
  ``report.json`` (SWE-bench's per-instance report: ``patch_exists``, ``resolved``,
  ``tests_status``);
- ``trajs/<instance_id>.json``: the agent's session as an ATIF trajectory;
- ``metadata.yaml`` and ``README.md``: what the leaderboard asks, filled from the sweep
  where hangar knows it.

Only the first repeat of each instance is a submission's (SWE-bench reports one attempt);
`export` says so, and where the run departs from the benchmark (images mapped onto others).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from hangar.errors import ConfigError
from hangar.kinds.execution.exports.harbor_job import Bundles
from hangar.kinds.execution.swebench.instances import predictions
from hangar.results import SweepRecord, TrialResult
from hangar.trajectories import trial_trajectory


def _text(folder: Path | None, name: str) -> str | None:
    path = folder / name if folder is not None else None
    if path is None or not path.is_file() or path.is_symlink():
        return None
    return path.read_text(encoding="utf-8", errors="replace")


def framed(log: str) -> str:
    """The test log between the harness's markers, as SWE-bench's own logs hold it (its
    grading reads only what is between them)."""
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT

    return f"{START_TEST_OUTPUT}\n{log.rstrip()}\n{END_TEST_OUTPUT}\n"


def _grading(bundle: Path | None) -> dict[str, Any]:
    task = json.loads(_text(bundle, "task.json") or "{}")
    grading = task.get("grading")
    return grading if isinstance(grading, dict) else {}


def _instance(folder: Path, r: TrialResult, bundle: Path | None, model: str) -> dict[str, Any]:
    """Write one instance's logs and trajectory; its prediction and outcome."""
    patch = _text(bundle, "diff.patch") or ""
    grading = _grading(bundle)
    log = _text(bundle, f"logs/verifier/{grading.get('log', '')}") if grading else None
    report = json.loads(_text(bundle, "verifier/swebench-report.json") or "{}")
    resolved = report.get("resolution") == "RESOLVED_FULL"
    logs = folder / "logs" / r.scenario_id
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "patch.diff").write_text(patch)
    if log is not None:
        (logs / "test_output.txt").write_text(framed(log))
    instance_report = {
        r.scenario_id: {
            "patch_is_None": False,
            "patch_exists": bool(patch.strip()),
            "patch_successfully_applied": log is not None,
            "resolved": resolved,
            **({"tests_status": report["tests_status"]} if "tests_status" in report else {}),
        }
    }
    (logs / "report.json").write_text(json.dumps(instance_report, indent=2) + "\n")
    if bundle is not None:
        (folder / "trajs").mkdir(exist_ok=True)
        doc = trial_trajectory(r, bundle)
        (folder / "trajs" / f"{r.scenario_id}.json").write_text(json.dumps(doc, indent=1) + "\n")
    return {
        "prediction": (r.scenario_id, model, patch),
        "resolved": resolved,
        "empty": not patch.strip(),
        "logged": log is not None,
        "image_map": json.loads(_text(bundle, "task.json") or "{}").get("image_map") or {},
    }


def _metadata(agent: str, model: str, n: int) -> str:
    doc = {
        "info": {"name": f"{agent} ({model})", "site": "", "report": "", "logo": ""},
        "tags": {
            "checked": False,
            "model": [] if model == "none" else [model],
            "org": [],
            "os_model": None,
            "os_system": None,
            "system": {"attempts": "1"},
        },
    }
    head = (
        "# metadata.yaml for a SWE-bench submission, filled from hangar's sweep "
        f"({n} instance(s)): info.site, info.report, tags.org and os_* are yours to give.\n"
    )
    return head + yaml.safe_dump(doc, sort_keys=False)


def _write(folder: Path, rows: list[TrialResult], bundles: Bundles) -> list[str]:
    agent, model = rows[0].agent, rows[0].model
    name = f"{agent}/{model}"
    found = [_instance(folder, r, bundles(r), name) for r in rows]
    preds = predictions(f["prediction"] for f in found)
    (folder / "all_preds.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    ids = [r.scenario_id for r in rows]
    results = {
        "resolved": sorted(i for i, f in zip(ids, found, strict=True) if f["resolved"]),
        "no_generation": sorted(i for i, f in zip(ids, found, strict=True) if f["empty"]),
        "no_logs": sorted(i for i, f in zip(ids, found, strict=True) if not f["logged"]),
    }
    (folder / "results").mkdir(exist_ok=True)
    (folder / "results" / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (folder / "metadata.yaml").write_text(_metadata(agent, model, len(rows)))
    (folder / "README.md").write_text(
        f"# {agent} with {model}\n\n{len(results['resolved'])} of {len(rows)} instances "
        "resolved, run and graded by hangar (SWE-bench's log parsers and grading).\n"
    )
    mapped = {k: v for f in found for k, v in f["image_map"].items()}
    if mapped:
        pairs = ", ".join(f"{k} -> {v}" for k, v in sorted(mapped.items()))
        return [f"the instances' images were mapped onto others ({pairs})"]
    return []


def export(
    sweep: str, rows: list[TrialResult], recorded: SweepRecord, out: Path, bundles: Bundles
) -> list[str]:
    """Write the sweep's SWE-bench trials (`rows`, latest attempts) as submission folders
    under `out` (see the module docstring). Returns what departs from the benchmark."""
    swe = [r for r in rows if r.kind == "execution" and _grading(bundles(r))]
    if not swe:
        raise ConfigError(f"sweep {sweep!r} has no SWE-bench trials with evidence to export")
    said = []
    if any(r.repeat > 0 for r in swe):
        said.append("only the first repeat of each instance is exported (SWE-bench reports one)")
    groups: dict[tuple[str, str], list[TrialResult]] = defaultdict(list)
    for r in swe:
        if r.repeat == 0:
            groups[(r.agent, r.model)].append(r)
    for (agent, model), mine in sorted(groups.items()):
        day = min(r.started_at for r in mine).strftime("%Y%m%d")
        label = f"{day}_{agent}__{model.replace('/', '-')}"
        folder = out / label
        folder.mkdir(parents=True)
        said += [f"{label}: {d}" for d in _write(folder, sorted(mine, key=_id), bundles)]
    return said


def _id(r: TrialResult) -> str:
    return r.scenario_id
