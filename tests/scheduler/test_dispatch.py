"""The driver's dispatch logic without Ray: window, per-model caps, resume, retries with
backoff, a refused key; time is a number the test advances."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path

import yaml

from hangar.results import ProviderError, TrialResult, Verdict
from hangar.scheduler.dispatch import Dispatch
from hangar.scheduler.sweep import RetryPolicy, load_sweep
from hangar.trials import TrialSpec, result_of

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "tiny" / "scenario.yaml"
POLICY = RetryPolicy(infra_retries=2, backoff_s=10, backoff_max_s=60)


def specs(tmp_path: Path, models: int = 2, repeats: int = 5) -> list[TrialSpec]:
    """`models` x `repeats` trials of the tiny scenario, model by model."""
    path = tmp_path / "sweep.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "id": "disp",
                "scenarios": [str(TINY)],
                "agents": {"ok": {"command": "true"}},
                "models": [{"id": f"m{i}", "provider": "none"} for i in range(models)],
                "repeats": repeats,
                "backend": "local",
                "store": f"sqlite:///{tmp_path}/results.db",
            }
        )
    )
    return sorted(load_sweep(path).trials("file:///tmp/e"), key=lambda s: s.model)


def result(spec: TrialSpec, verdict: Verdict, error: ProviderError | None = None) -> TrialResult:
    now = datetime.now(UTC)
    out = result_of(spec, verdict, verdict.value, now, now)
    return out.model_copy(update={"provider_error": error}) if error else out


def drain(dispatch: Dispatch, now: float = 0.0) -> list[TrialSpec]:
    """Everything `dispatch` sends now."""
    sent = []
    while (spec := dispatch.next(now)) is not None:
        dispatch.started(spec)
        sent.append(spec)
    return sent


def test_the_window_bounds_what_is_in_flight(tmp_path: Path) -> None:
    all_specs = specs(tmp_path)
    dispatch = Dispatch(all_specs, window=3, policy=POLICY)
    first = drain(dispatch)
    assert len(first) == 3 and dispatch.in_flight == 3
    dispatch.finished(first[0], result(first[0], Verdict.PASS), 0.0)
    assert len(drain(dispatch)) == 1
    for spec in first[1:]:
        dispatch.finished(spec, result(spec, Verdict.PASS), 0.0)
    rest = drain(dispatch)
    assert len(rest) == 2 and not dispatch.idle
    assert dispatch.in_flight == 3


def test_a_capped_model_waits_while_others_go(tmp_path: Path) -> None:
    dispatch = Dispatch(specs(tmp_path), window=8, policy=POLICY, caps={"m0": 1})
    sent = drain(dispatch)
    by_model = [s.model for s in sent]
    assert by_model.count("m0") == 1 and by_model.count("m1") == 5  # m1 is not held back
    held = next(s for s in sent if s.model == "m0")
    dispatch.finished(held, result(held, Verdict.FAIL), 0.0)
    assert [s.model for s in drain(dispatch)] == ["m0"]


def test_final_trials_are_skipped_and_attempts_continue_earlier_runs(tmp_path: Path) -> None:
    all_specs = specs(tmp_path, models=1, repeats=4)
    final = {all_specs[0].trial_key, all_specs[1].trial_key}
    earlier = {all_specs[2].trial_key: 2}
    dispatch = Dispatch(all_specs, window=10, policy=POLICY, final=final, last_attempt=earlier)
    sent = drain(dispatch)
    assert [s.trial_key for s in sent] == [s.trial_key for s in all_specs[2:]]
    assert [s.attempt for s in sent] == [3, 1]
    assert dispatch.skipped == 2


def test_infra_errors_come_back_after_their_backoff_then_give_up(tmp_path: Path) -> None:
    (spec,) = specs(tmp_path, models=1, repeats=1)
    dispatch = Dispatch([spec], window=2, policy=POLICY)
    now = 100.0
    attempts = []
    while True:
        sent = drain(dispatch, now)
        if not sent:
            if dispatch.idle:
                break
            ready = dispatch.next_ready_at()
            assert ready is not None and ready > now  # backing off: nothing goes early
            now = ready
            continue
        (attempt,) = sent
        attempts.append((attempt.attempt, now))
        queued = dispatch.finished(attempt, result(attempt, Verdict.INFRA_ERROR), now)
        assert queued == (attempt.attempt <= POLICY.infra_retries)
    assert [a for a, _ in attempts] == [1, 2, 3]
    gaps = [b - a for (_, a), (_, b) in itertools.pairwise(attempts)]
    assert gaps == [POLICY.backoff(2), POLICY.backoff(3)] and gaps[0] < gaps[1]


def test_a_refused_key_drops_that_models_trials_and_retries(tmp_path: Path) -> None:
    dispatch = Dispatch(specs(tmp_path), window=4, policy=POLICY, caps={"m0": 2})
    sent = drain(dispatch)
    m0 = [s for s in sent if s.model == "m0"]
    assert len(m0) == 2
    dispatch.finished(m0[0], result(m0[0], Verdict.INFRA_ERROR), 0.0)  # queued for retry
    refused = ProviderError(kind="auth", model="m0", status=401, message="401 from the provider")
    assert not dispatch.finished(m0[1], result(m0[1], Verdict.INFRA_ERROR, refused), 0.0)
    assert "m0" in dispatch.stopped
    later = []
    for spec in sent:
        if spec.model == "m1":
            dispatch.finished(spec, result(spec, Verdict.PASS), 0.0)
    while (batch := drain(dispatch, 1e9)) or not dispatch.idle:
        later += batch
        for spec in batch:
            dispatch.finished(spec, result(spec, Verdict.PASS), 1e9)
    assert later and all(s.model == "m1" for s in later)
    assert sum(s.model == "m1" for s in sent + later) == 5
