"""`hangar knowledge run`: the repo-search arm as hangar trials, then its answer file.

Each question of a sealed suite is one knowledge trial (`hangar.kinds.knowledge.trial`) of a
sweep of its own (one per suite, arm and model, so a stopped run resumes), on Ray with
the usual retries, budget and results store. When every question has a final result,
``answers/<arm>.jsonl`` and ``answers/<arm>.meta.json`` are written from them (a question
without an answer is left out: the report counts it unanswered). An arm is scored once:
an arm whose answers exist is refused.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

from hangar.agents import ChatAgent
from hangar.errors import ConfigError
from hangar.files import MANIFEST
from hangar.kinds.knowledge.custody import sealed_suite
from hangar.kinds.knowledge.formats import Answer, Meta, write_jsonl
from hangar.kinds.knowledge.questions import DEFAULT_IMAGE, LoadedQuestion, load_questions
from hangar.kinds.knowledge.record import arm_sweep, default_store, record_scores
from hangar.kinds.knowledge.trial import RETRIEVAL, arm_agent_problems
from hangar.models import ModelSpec, check_keys
from hangar.results import TrialResult, Verdict
from hangar.sandbox.config import backend_settings
from hangar.store import ResultsStore
from hangar.trials.batch import BatchRunner, TaskBatch


class ArmRun(BaseModel):
    """What a run did."""

    sweep: str
    """Its sweep id (results and evidence)."""
    answered: int
    """Questions answered."""
    unanswered: dict[str, str]
    """Question -> why it has no answer."""
    incomplete: int
    """Questions without a final result (rerun to resume); no answer file then."""
    files: list[Path]
    """What was written."""


def _answers(
    questions: list[LoadedQuestion], done: dict[str, TrialResult]
) -> tuple[list[Answer], dict[str, str]]:
    """The answers given, and why each question without one has none."""
    answers, unanswered = [], {}
    for q in questions:
        result = done.get(q.id)
        found = result.details.get("answer") if result else None
        if found:
            answers.append(Answer.model_validate(found))
        elif result is not None:
            unanswered[q.id] = f"{result.verdict.value}: {result.reason}"
    return answers, unanswered


def _snapshot(arm: str, done: dict[str, TrialResult]) -> str | None:
    """What a retrieval arm's server said it knows (every trial's manifest, when they
    differ); None for the repo-search arm."""
    if not arm.startswith(RETRIEVAL):
        return None
    said = sorted({str(r.details.get("knowledge_snapshot")) for r in done.values()})
    return "; ".join(s for s in said if s != "None") or "not reported by the server"


def _write(
    folder: Path,
    arm: str,
    answers: list[Answer],
    harness: str,
    model: str,
    snapshot: str | None = None,
) -> list[Path]:
    """``answers/<arm>.jsonl`` and its ``.meta.json`` (the knowledge snapshot: the
    retrieval server's manifest, or for the repo-search arm the suite's manifest digest)."""
    target = folder / "answers" / f"{arm}.jsonl"
    write_jsonl(target, list(answers))
    manifest = (folder / MANIFEST).read_bytes()
    meta = Meta(
        harness=harness,
        date=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        model=model,
        knowledge_snapshot=snapshot
        or "repositories at each question's as_of; suite manifest "
        f"sha256:{hashlib.sha256(manifest).hexdigest()}",
    )
    meta_path = folder / "answers" / f"{arm}.meta.json"
    meta_path.write_text(json.dumps(meta.model_dump(exclude_none=True), indent=1) + "\n")
    return [target, meta_path]


def run_arm(
    folder: Path,
    arm: str,
    model: ModelSpec,
    *,
    agent: ChatAgent | None = None,
    repositories: dict[str, str] | None = None,
    image: str = DEFAULT_IMAGE,
    store_url: str | None = None,
    evidence_url: str | None = None,
    budget_usd: float | None = None,
    backend: str = "docker",
    run: BatchRunner,
) -> ArmRun:
    """Run the repo-search arm on a sealed suite (see the module docstring), its trials
    through `run` (the scheduler's, from the command line)."""
    suite = sealed_suite(folder)
    store_url = store_url or default_store(folder)
    target = folder / "answers" / f"{arm}.jsonl"
    if target.exists():
        raise ConfigError(f"{target} exists: an arm is scored once (run it under a new name)")
    agent = agent or ChatAgent(name="repo-search", tools="read")
    problems = arm_agent_problems(arm, agent)
    if problems:
        raise ConfigError(f"agent {agent.name}: {problems[0]}")
    check_keys([model])
    questions = [
        q.model_copy(update={"arm": arm}) for q in load_questions(suite, repositories, image)
    ]
    batch = TaskBatch(
        id=arm_sweep(suite, arm, model.id),
        tasks=list(questions),
        models=[model],
        agents={agent.name: agent},
        store=store_url,
        evidence=evidence_url,
        budget_usd=budget_usd,
        backend=backend_settings(backend),
    )
    run(batch)
    results = {r.scenario_id: r for r in ResultsStore(store_url).results(batch.id)}
    done = {
        q.id: r for q in questions if (r := results.get(q.id)) and r.scenario_digest == q.digest
    }
    incomplete = [
        q.id for q in questions if q.id not in done or done[q.id].verdict is Verdict.INFRA_ERROR
    ]
    answers, unanswered = _answers(questions, done)
    files: list[Path] = []
    if not incomplete:
        harness = f"hangar knowledge run (sweep {batch.id}, agent {agent.name})"
        files = _write(folder, arm, answers, harness, model.id, _snapshot(arm, done))
        record_scores(
            ResultsStore(store_url), sealed_suite(folder), [arm]
        )  # pending until labelled
    return ArmRun(
        sweep=batch.id,
        answered=len(answers),
        unanswered=unanswered,
        incomplete=len(incomplete),
        files=files,
    )
