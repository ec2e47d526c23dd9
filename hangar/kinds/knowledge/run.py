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
from hangar.kinds.knowledge.questions import DEFAULT_IMAGE, load_questions
from hangar.models import ModelSpec, check_keys
from hangar.results import Verdict
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
    target = folder / "answers" / f"{arm}.jsonl"
    if target.exists():
        raise ConfigError(f"{target} exists: an arm is scored once (run it under a new name)")
    agent = agent or ChatAgent(name="repo-search", tools="read")
    if agent.tools != "read":
        raise ConfigError(f"agent {agent.name}: the repo-search arm needs `tools: read`")
    check_keys([model])
    questions = [
        q.model_copy(update={"arm": arm}) for q in load_questions(suite, repositories, image)
    ]
    batch = TaskBatch(
        id=f"knowledge-{suite.name}-{arm}-{model.id}".replace("/", "-"),
        tasks=list(questions),
        models=[model],
        agents={agent.name: agent},
        store=store_url,
        evidence=evidence_url,
        budget_usd=budget_usd,
        backend=backend_settings(backend),
    )
    run(batch)
    store = ResultsStore(store_url)
    by_question = {
        r.scenario_id: r
        for r in store.results(batch.id)
        if r.scenario_digest in {q.digest for q in questions}
    }
    incomplete = [q.id for q in questions if q.id not in by_question]
    incomplete += [
        q.id
        for q in questions
        if q.id in by_question and by_question[q.id].verdict is Verdict.INFRA_ERROR
    ]
    answers, unanswered = [], {}
    for q in questions:
        result = by_question.get(q.id)
        found = result.details.get("answer") if result else None
        if found:
            answers.append(Answer.model_validate(found))
        elif result is not None:
            unanswered[q.id] = f"{result.verdict.value}: {result.reason}"
    files: list[Path] = []
    if not incomplete:
        write_jsonl(target, list(answers))
        manifest = (folder / MANIFEST).read_bytes()
        meta = Meta(
            harness=f"hangar knowledge run (sweep {batch.id}, agent {agent.name})",
            date=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            model=model.id,
            knowledge_snapshot="repositories at each question's as_of; suite manifest "
            f"sha256:{hashlib.sha256(manifest).hexdigest()}",
        )
        meta_path = folder / "answers" / f"{arm}.meta.json"
        meta_path.write_text(json.dumps(meta.model_dump(exclude_none=True), indent=1) + "\n")
        files = [target, meta_path]
    return ArmRun(
        sweep=batch.id,
        answered=len(answers),
        unanswered=unanswered,
        incomplete=len(incomplete),
        files=files,
    )
