"""A gold set's scores into the results store, per answer and arm, so reports of other kinds,
exports and the dashboards see them beside every other score.

`record_scores` scores each arm from its files (`scoring`) and writes one row per question:
``correct`` and ``citation_valid`` (1/0) once labelled, NULL while pending (an answered
question nobody labelled), 0 for a question the arm did not answer; the citation kinds
of that answer; the raters' votes. A row's *version* is the sha256 of what decided it
(the suite's manifest, the answer, its labels, the scoring code): a re-score after new
labels writes a new version and makes it the current one; the same inputs write nothing.
An arm that hangar ran (``knowledge run``) links each row to its trial (sweep and trial
key); an external arm's rows carry the person or harness and model of its meta.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from hangar.files import MANIFEST
from hangar.kinds.knowledge import scoring
from hangar.kinds.knowledge.custody import Suite, load_arm
from hangar.kinds.knowledge.formats import Label
from hangar.paths import runs_dir
from hangar.store import ResultsStore


def default_store(folder: Path) -> str:
    """The results store of a suite's runs and scores unless one is named: ``runs/hangar.db``
    beside the suite's folder (``$HANGAR_RUNS_DIR`` first), as a sweep's is beside its file."""
    return f"sqlite:///{runs_dir(folder.resolve().parent) / 'hangar.db'}"


def arm_sweep(suite: Suite, arm: str, model: str) -> str:
    """The sweep id `knowledge run` gives an arm's trials."""
    return f"knowledge-{suite.name}-{arm}-{model}".replace("/", "-").replace(":", "-")


def _code() -> str:
    return hashlib.sha256(Path(scoring.__file__).read_bytes()).hexdigest()


def score_rows(suite: Suite, arm_name: str, store: ResultsStore | None) -> list[dict[str, Any]]:
    """The rows of one arm (see the module docstring)."""
    arm = load_arm(suite, arm_name)
    meta = arm.meta
    model = (meta.model if meta else None) or "unknown"
    trials: dict[str, tuple[str | None, str | None, str]] = {}
    if store is not None:
        ran = arm_sweep(suite, arm_name, model)
        for r in store.results(ran):
            trials[r.scenario_id] = (ran, r.trial_key, r.agent)
    who = (meta.person or meta.harness if meta else None) or "unknown"
    manifest = hashlib.sha256((suite.folder / MANIFEST).read_bytes()).hexdigest()
    labels: dict[str, list[Label]] = defaultdict(list)
    for label in arm.labels:
        labels[label.id].append(label)
    code = _code()
    rows = []
    for score in scoring.score_arm(suite, arm):
        answer = arm.answers.get(score.id)
        mine = sorted(
            json.dumps(x.model_dump(mode="json"), sort_keys=True) for x in labels[score.id]
        )
        version = hashlib.sha256(
            json.dumps(
                [manifest, answer.model_dump(mode="json") if answer else None, mine, code],
                sort_keys=True,
            ).encode()
        ).hexdigest()
        sweep, key, agent = trials.get(score.id, (None, None, who[:200]))
        kinds = Counter(c.kind for c in score.citations)
        rows.append(
            {
                "suite": suite.name,
                "arm": arm_name,
                "question_id": score.id,
                "version": version,
                "status": score.status,
                "correct": None if score.correct is None else float(score.correct),
                "citation_valid": None
                if score.citation_valid is None
                else float(score.citation_valid),
                "citations": {k: kinds[k] for k in scoring.KINDS},
                "votes": score.votes,
                "agent": agent,
                "model": model,
                "sweep_id": sweep,
                "trial_key": key,
                "manifest_sha256": manifest,
            }
        )
    return rows


def record_scores(store: ResultsStore, suite: Suite, arms: list[str]) -> tuple[int, int]:
    """Score `arms` and record their rows; (new versions, unchanged)."""
    rows = [row for arm in arms for row in score_rows(suite, arm, store)]
    return store.record_knowledge_scores(rows)
