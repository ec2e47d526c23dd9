"""Datasets validated before a paid trial: the oracle must pass and doing nothing must not.

`hangar dataset validate` runs the ``oracle`` (the task's reference solution) and the
``nop`` agent on every image task of a dataset, `repeats` times each, as a sweep of its
own (on Ray, resumable, in the store), then records one validation per task version:

- ``valid``: every oracle trial passed and no nop trial did;
- ``broken``, with the reason: the image does not build or the task cannot run here
  (blocked), the oracle fails, the oracle passes in only some repeats (flaky), or the
  nop passes (the tests accept an untouched environment);
- ``unvalidated``: some trials have no verdict yet (run it again).

A sweep leaves out tasks that are broken or unvalidated (`partition`), unless it is run
with ``--include-unvalidated``; they are listed and counted apart, never as a model's
failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple

from hangar.agents import NOP, ORACLE
from hangar.kinds.execution.images.task import ImageTask
from hangar.kinds.execution.task import execution_task
from hangar.models import ModelSpec
from hangar.results import TrialResult, Verdict
from hangar.store import ResultsStore
from hangar.trials.batch import BatchRunner, TaskBatch
from hangar.trials.spec import Arm, Task

Status = Literal["valid", "broken", "unvalidated"]


class Validation(NamedTuple):
    """One task version's validation."""

    task_id: str
    digest: str
    status: Status
    reason: str


def validation_batch(
    name: str, tasks: Sequence[ImageTask], *, repeats: int, store: str | None, evidence: str | None
) -> TaskBatch:
    """The sweep that validates `tasks`: oracle and nop, `repeats` each, no model."""
    return TaskBatch(
        id=f"validate-{name}",
        tasks=list(tasks),
        models=[ModelSpec(id="none")],
        agents={"oracle": ORACLE, "nop": NOP},
        arms=[Arm(name="control")],
        repeats=repeats,
        store=store,
        evidence=evidence,
    )


def judge_task(task: ImageTask, results: Iterable[TrialResult], repeats: int) -> Validation:
    """The validation of `task` from its oracle and nop trials (see the module docstring)."""
    mine = [r for r in results if r.scenario_digest == task.digest]
    oracle = [r for r in mine if r.agent == ORACLE.name]
    nop = [r for r in mine if r.agent == NOP.name]

    def verdict(status: Status, reason: str) -> Validation:
        return Validation(task.id, task.digest, status, reason)

    blocked = [r for r in mine if r.verdict is Verdict.BLOCKED_SETUP]
    if blocked:
        return verdict("broken", f"cannot run: {blocked[0].reason}")
    judged = [r for r in oracle + nop if r.verdict in (Verdict.PASS, Verdict.FAIL)]
    if len(judged) < 2 * repeats:
        missing = 2 * repeats - len(judged)
        return verdict("unvalidated", f"{missing} of {2 * repeats} trials have no verdict yet")
    passed = [r for r in oracle if r.verdict is Verdict.PASS]
    if not passed:
        return verdict("broken", f"the oracle fails: {oracle[0].reason}")
    if len(passed) < len(oracle):
        return verdict("broken", f"flaky: the oracle passes in {len(passed)} of {len(oracle)}")
    nop_passed = [r for r in nop if r.verdict is Verdict.PASS]
    if nop_passed:
        return verdict("broken", "the nop agent passes: the tests accept an untouched task")
    return verdict("valid", f"the oracle passes {len(oracle)} of {len(oracle)}; nop fails")


class Partition(NamedTuple):
    """A sweep's tasks: those it runs, and those it leaves out with the reason."""

    run: list[Task]
    left_out: list[Validation]


def partition(tasks: Sequence[Task], recorded: dict[str, dict[str, str]]) -> Partition:
    """Keep git scenarios and valid image tasks; leave out broken and unvalidated ones."""
    run: list[Task] = []
    left_out: list[Validation] = []
    for task in tasks:
        if not execution_task(task).needs_validation:
            run.append(task)
            continue
        row = recorded.get(task.digest)
        if row is None:
            left_out.append(
                Validation(
                    task.id,
                    task.digest,
                    "unvalidated",
                    "never validated (`hangar dataset validate`)",
                )
            )
        elif row["status"] != "valid":
            left_out.append(Validation(task.id, task.digest, row["status"], row["reason"]))  # type: ignore[arg-type]
        else:
            run.append(task)
    return Partition(run, left_out)


def validate_dataset(
    name: str,
    tasks: Sequence[ImageTask],
    runner: BatchRunner,
    *,
    repeats: int = 1,
    store: str | None = None,
    evidence: str | None = None,
) -> list[Validation]:
    """Run the validation sweep of `tasks` with `runner` and record each validation."""
    batch = validation_batch(name, tasks, repeats=repeats, store=store, evidence=evidence)
    runner(batch)
    results = ResultsStore(store)
    recorded = list(results.results(batch.id))
    found = [judge_task(t, recorded, repeats) for t in tasks]
    results.record_validations({**v._asdict(), "sweep_id": batch.id} for v in found)
    return found


def validated_tasks(
    tasks: Sequence[Task], store: ResultsStore, *, include_unvalidated: bool = False
) -> Partition:
    """The tasks a sweep runs, and the image tasks it leaves out (broken or never
    validated); with `include_unvalidated` it runs them all and still names them."""
    found = partition(tasks, store.validations(t.digest for t in tasks))
    return Partition(list(tasks), found.left_out) if include_unvalidated else found
