"""The scheduler's `BatchRunner`: a kind's batch run as a sweep (`hangar.trials.batch`)."""

from __future__ import annotations

from hangar.scheduler.driver import SweepRunner
from hangar.scheduler.sweep import Concurrency, Sweep, SweepFile
from hangar.store import ResultsStore
from hangar.trials.batch import BatchOutcome, TaskBatch


def sweep_of(batch: TaskBatch) -> Sweep:
    """The sweep that runs `batch`."""
    return Sweep(
        id=batch.id,
        path=None,
        config=SweepFile(
            scenarios=[],
            models=batch.models,
            store=batch.store,
            evidence=batch.evidence,
            budget_usd=batch.budget_usd,
            concurrency=Concurrency(max_in_flight=batch.max_in_flight),
            backend=batch.backend,
            repeats=batch.repeats,
        ),
        tasks=list(batch.tasks),
        agents=dict(batch.agents),
        arms=list(batch.arms),
    )


def run_batch(batch: TaskBatch, *, address: str | None = None) -> BatchOutcome:
    """Run `batch` on Ray (attached to `address`, else as `hangar run` connects)."""
    tally = SweepRunner(sweep_of(batch), ResultsStore(batch.store), address=address).run()
    return BatchOutcome(not_run=tally.not_run + tally.lost, interrupted=tally.interrupted)
