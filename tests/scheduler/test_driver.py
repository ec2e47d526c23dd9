"""The sweep driver on a real embedded Ray: resume, caps, window, retries, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from hangar.paths import cache_dir
from hangar.results import TrialResult, Verdict
from hangar.scheduler.driver import SweepRunner, SweepTally
from hangar.scheduler.sweep import load_sweep
from hangar.store import ResultsStore
from tests.services import sigint_twice_once

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "tiny" / "scenario.yaml"


def write_sweep(tmp_path: Path, **overrides: Any) -> Path:
    """A sweep of the tiny scenario on the local backend, logging agent runs to run.log."""
    log = tmp_path / "run.log"
    config: dict[str, Any] = {
        "id": "drv",
        "scenarios": [str(TINY)],
        "agents": {
            "ok": {
                "command": f'echo "start $HANGAR_MODEL $(pwd) $(date +%s.%N)" >> {log}'
                f'; sleep 0.3; echo "end $HANGAR_MODEL $(date +%s.%N)" >> {log}'
            }
        },
        "models": [{"id": "m1", "provider": "none"}],  # a label: the agent calls no model
        "arms": {"control": [], "noted": ["note"]},
        "repeats": 1,
        "backend": "local",
        "store": f"sqlite:///{tmp_path}/results.db",
        "evidence": (tmp_path / "evidence").as_uri(),
        "retry": {"infra_retries": 2, "backoff_s": 0.2, "backoff_max_s": 1},
    }
    config.update(overrides)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def runs(tmp_path: Path) -> list[list[str]]:
    log = tmp_path / "run.log"
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def go(
    path: Path, listener: Callable[[SweepTally, TrialResult | None], None] | None = None
) -> tuple[SweepTally, ResultsStore]:
    sweep = load_sweep(path)
    store = ResultsStore(sweep.config.store)
    return SweepRunner(sweep, store, listener=listener, poll_s=0.1).run(), store


def test_sweep_runs_then_resumes_without_rerunning(ray_local: None, tmp_path: Path) -> None:
    path = write_sweep(
        tmp_path,
        agents={
            "ok": {"command": f"echo run $(pwd) >> {tmp_path}/run.log"},
            "bad": {"command": f"echo run $(pwd) >> {tmp_path}/run.log; exit 3"},
        },
        repeats=2,
    )
    tally, store = go(path)
    assert tally.total == 8 and tally.done == 8 and tally.skipped == 0
    assert tally.verdicts == {"pass": 4, "fail": 4}
    assert len(runs(tmp_path)) == 8
    assert sorted(store.counts("drv")) == [
        ("fail", "bad", "m1", "control", 2),
        ("fail", "bad", "m1", "noted", 2),
        ("pass", "ok", "m1", "control", 2),
        ("pass", "ok", "m1", "noted", 2),
    ]
    again, _ = go(path)
    assert again.skipped == 8 and again.done == 0
    assert len(runs(tmp_path)) == 8, "a finished trial ran again"


def test_arm_plugins_reach_the_sandbox(ray_local: None, tmp_path: Path) -> None:
    path = write_sweep(
        tmp_path,
        agents={
            "look": {
                "command": f"cat NOTE.md >> {tmp_path}/run.log 2>/dev/null || "
                f"echo absent >> {tmp_path}/run.log"
            },
        },
    )
    _, store = go(path)
    assert sorted(" ".join(r) for r in runs(tmp_path)) == ["A note an arm may install.", "absent"]
    # The workers ran the scenario shipped through the object store, not the driver's files.
    for result in store.results("drv"):
        assert result.evidence_uri is not None
        with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
            member = tar.extractfile("scenario.json")
            assert member is not None
            ran_from = Path(json.load(member)["path"])
        assert ran_from.is_relative_to(cache_dir() / "scenarios"), ran_from
        assert ran_from != TINY


def test_per_model_caps_and_the_window(ray_local: None, tmp_path: Path) -> None:
    path = write_sweep(
        tmp_path,
        models=[{"id": m, "provider": "none"} for m in ("m1", "m2")],
        repeats=3,
        concurrency={"sandbox_slots": 2, "max_in_flight": 3, "per_model": {"m1": 1}},
    )
    tally, _ = go(path)
    assert tally.done == 12 and tally.verdicts == {"pass": 12}
    assert tally.peak_in_flight <= 3
    running, peak = 0, 0
    events = sorted((float(r[-1]), r[0]) for r in runs(tmp_path) if r[1] == "m1")
    for _, kind in events:
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    assert peak == 1, "two m1 trials ran at once despite the cap of 1"
    assert len([r for r in runs(tmp_path) if r[0] == "start"]) == 12


def test_infra_errors_are_retried_then_succeed(ray_local: None, tmp_path: Path) -> None:
    # A file where the sweep's evidence folder should be (the store itself takes the
    # preflight's probe, so the sweep starts; its trials cannot store their bundles).
    blocker = tmp_path / "evidence" / "drv"
    blocker.parent.mkdir()
    blocker.write_text("a file where the evidence folder should be")
    seen: list[TrialResult] = []

    def unblock(tally: SweepTally, result: TrialResult | None) -> None:
        if result is not None:
            seen.append(result)
            if result.verdict is Verdict.INFRA_ERROR and blocker.is_file():
                blocker.unlink()

    tally, store = go(write_sweep(tmp_path, arms={"control": []}), unblock)
    assert [(r.attempt, r.verdict.value) for r in seen] == [(1, "infra_error"), (2, "pass")]
    assert "evidence could not be stored" in seen[0].reason
    assert tally.retries == 1 and tally.lost == 0 and tally.verdicts == {"pass": 1}
    assert len(list(store.results("drv", all_attempts=True))) == 2


def test_infra_errors_give_up_after_the_policy(ray_local: None, tmp_path: Path) -> None:
    (tmp_path / "evidence").mkdir()
    (tmp_path / "evidence" / "drv").write_text("never a folder")
    path = write_sweep(tmp_path, arms={"control": []})
    tally, store = go(path)
    attempts = [(r.attempt, r.verdict.value) for r in store.results("drv", all_attempts=True)]
    assert sorted(attempts) == [(1, "infra_error"), (2, "infra_error"), (3, "infra_error")]
    assert tally.lost == 1 and tally.retries == 2
    (tmp_path / "evidence" / "drv").unlink()
    again, store = go(path)  # not final, so the next run tries again, numbering on
    assert again.verdicts["pass"] == 1
    assert max(r.attempt for r in store.results("drv", all_attempts=True)) == 4


FLAKY_VERIFIER = """\
import json, sys
from pathlib import Path

request = json.loads(Path(sys.argv[1]).read_text())
marker = Path(MARKER)
if not marker.exists():
    marker.write_text("crashed once")
    raise RuntimeError("the verifier fell over")
art = Path(request["artifacts"])
(art / "evidence").mkdir(exist_ok=True)
(art / "evidence" / "ok.txt").write_text("ok")
found = {"status": "pass", "evidence": ["evidence/ok.txt"]}
print(json.dumps({"caseId": request["case"], "traceSha256": request["traceSha256"],
                  "checks": [], "route": found, "scope": found}))
"""


def test_a_crashing_verifier_is_retried_and_never_the_agents_fail(
    ray_local: None, tmp_path: Path
) -> None:
    import hashlib

    folder = tmp_path / "flaky"
    folder.mkdir()
    script = FLAKY_VERIFIER.replace("MARKER", repr(str(tmp_path / "crashed.txt")))
    (folder / "verify.py").write_text(script)
    scenario = yaml.safe_load(TINY.read_text())
    scenario["repository"] = str((TINY.parent / scenario["repository"]).resolve())
    scenario.pop("plugins")
    digest = "sha256:" + hashlib.sha256(script.encode()).hexdigest()
    scenario["verifier"]["host"] = {"file": "verify.py", "sha256": digest}
    (folder / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    path = write_sweep(tmp_path, scenarios=[str(folder / "scenario.yaml")], arms={"control": []})
    tally, store = go(path)
    attempts = [(r.attempt, r.verdict.value) for r in store.results("drv", all_attempts=True)]
    rows = list(store.results("drv", all_attempts=True))
    assert sorted(attempts) == [(1, "verifier_error"), (2, "pass")], rows[0].reason
    first = min(store.results("drv", all_attempts=True), key=lambda r: r.attempt)
    assert first.reason == "host verifier crashed (exit 1): RuntimeError: the verifier fell over"
    assert tally.retries == 1 and tally.lost == 0 and tally.verdicts == {"pass": 1}
    assert tally.exit_code() == 0


def test_ctrl_c_stops_submitting_and_keeps_what_finished(ray_local: None, tmp_path: Path) -> None:
    path = write_sweep(tmp_path, repeats=4, concurrency={"sandbox_slots": 2, "max_in_flight": 2})

    def interrupt(tally: SweepTally, result: TrialResult | None) -> None:
        if result is not None and tally.done == 1:
            os.kill(os.getpid(), signal.SIGINT)

    tally, store = go(path, interrupt)
    assert tally.interrupted and 1 <= tally.done < 8
    recorded = len(list(store.results("drv")))
    assert recorded == tally.done
    rest, store = go(path)
    assert rest.skipped == recorded and rest.done == 8 - recorded
    starts = [r[2] for r in runs(tmp_path) if r[0] == "start"]
    assert len(starts) == 8 and len(set(starts)) == 8, "a trial ran twice"


def test_after_one_ctrl_c_no_queued_trial_starts(ray_local: None, tmp_path: Path) -> None:
    # 2 slots, 6 in Ray at once: 4 wait for a slot when Ctrl-C comes, and must never start
    log = tmp_path / "run.log"
    slow = {"ok": {"command": f"echo start m1 $(pwd) $(date +%s.%N) >> {log}; sleep 3"}}
    path = write_sweep(
        tmp_path, agents=slow, repeats=4, concurrency={"sandbox_slots": 2, "max_in_flight": 6}
    )

    def interrupt(tally: SweepTally, result: TrialResult | None) -> None:
        if result is not None and tally.done == 1:
            os.kill(os.getpid(), signal.SIGINT)

    tally, store = go(path, interrupt)
    assert tally.interrupted
    starts = [r for r in runs(tmp_path) if r[0] == "start"]
    # the first, the one running beside it (3 s each: it is still running), and at most
    # one that took the first one's slot before the driver heard of its result
    assert 2 <= len(starts) <= 3, starts
    recorded = list(store.results("drv"))
    assert len(recorded) == len(starts) == tally.done  # each that started finished
    assert tally.not_run == 8 - len(starts)
    rest, _ = go(path)  # the rest run on the next run, none twice
    assert rest.skipped == len(starts) and rest.done == 8 - len(starts)


def test_a_second_ctrl_c_cancels_the_running_trials_as_interrupted(
    ray_local: None, tmp_path: Path
) -> None:
    import threading
    import time

    path = write_sweep(tmp_path, agents={"slow": {"command": "sleep 20"}}, arms={"control": []})
    running = threading.Event()

    def started(tally: SweepTally, result: TrialResult | None) -> None:
        if tally.board.running:
            running.set()

    sigint_twice_once(running)
    began = time.monotonic()
    tally, store = go(path, started)
    assert tally.interrupted and time.monotonic() - began < 20
    # Cancelled, not final: nothing counts it as done.
    assert (tally.finished, tally.lost, tally.not_run) == (0, 1, 0)
    (row,) = store.results("drv")
    assert row.verdict is Verdict.INFRA_ERROR
    assert row.reason == "interrupted: cancelled by a second Ctrl-C"
    assert store.resume_state("drv")[0] == set()  # not final: the next run runs it again


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def priced_sweep(tmp_path: Path, url: str, **overrides: Any) -> Path:
    """Six trials of the example scenario by a chat agent on the scripted model, priced."""
    model = {
        "id": "scripted",
        "base_url": f"{url}/v1",
        "api_key_env": "HANGAR_SCRIPTED_KEY",
        "price": {"input": 3.0, "output": 15.0, "cached_input": 0.3},
    }
    return write_sweep(
        tmp_path,
        scenarios=[str(EXAMPLES / "median" / "scenario.yaml")],
        repeats=6,
        arms={"control": []},
        agents={"chat": {"kind": "chat"}},
        models=[model],
        **overrides,
    )


def test_budget_stops_scheduling(ray_local: None, tmp_path: Path) -> None:
    from hangar.testing.scripted import Script, ScriptedServer

    server = ScriptedServer(Script.load(EXAMPLES / "scripted-model.yaml")).start()
    try:
        path = priced_sweep(
            tmp_path,
            server.url,
            budget_usd=0.015,
            concurrency={"sandbox_slots": 1, "max_in_flight": 1},
        )
        tally, store = go(path)
    finally:
        server.shutdown()
    per_trial = ((4500 - 2400) * 3.0 + 2400 * 0.3 + 190 * 15.0) / 1e6
    assert tally.budget_exhausted and tally.done == 2
    assert tally.cost_usd == pytest.approx(2 * per_trial)
    assert store.cost("drv") == pytest.approx(2 * per_trial)
    again, _ = go(path)  # the budget counts earlier runs too
    assert again.budget_exhausted and again.done == 0


def test_a_spent_budget_starts_no_queued_trial(ray_local: None, tmp_path: Path) -> None:
    from hangar.testing.scripted import Script, ScriptedServer

    server = ScriptedServer(Script.load(EXAMPLES / "scripted-model.yaml")).start()
    try:
        path = priced_sweep(
            tmp_path,
            server.url,
            budget_usd=0.005,  # spent by the first trial
            concurrency={"sandbox_slots": 1, "max_in_flight": 4},  # 3 queued behind it
        )
        tally, store = go(path)
    finally:
        server.shutdown()
    # Four are in flight (max_in_flight) on the session's node, whose two slots run two at
    # once: the first spends the budget; the other running one, and at most one queued
    # trial that took the freed slot before the driver saw the cost, may finish. Without
    # the board's refusal all four would (done == 4).
    slots = sum(tally.board.slots.values()) if tally.board else 1
    assert tally.budget_exhausted and 1 <= tally.done <= min(3, slots + 1), tally
    assert len(list(store.results("drv"))) == tally.done and tally.not_run >= 3


def test_missing_model_key_is_an_error_before_any_trial(tmp_path: Path) -> None:
    from hangar.errors import ConfigError

    path = write_sweep(
        tmp_path, models=[{"id": "gpt-4o-mini", "api_key_env": "HANGAR_NO_SUCH_KEY"}]
    )
    with pytest.raises(ConfigError, match="HANGAR_NO_SUCH_KEY, which is not set"):
        go(path)
    assert runs(tmp_path) == []


def _evidence_file(uri: str | None, name: str) -> str:
    assert uri is not None
    with tarfile.open(uri.removeprefix("file://")) as tar:
        member = tar.extractfile(name)
        assert member is not None
        return member.read().decode()


def test_a_task_that_raises_is_reported_by_its_root_error(ray_local: None, tmp_path: Path) -> None:
    """Ray's wrapper (RayTaskError(TypeError): ray::task() (pid=..)) never hides the error."""
    import time

    import ray

    from hangar.kinds.execution import single_trial
    from hangar.trials import Arm

    sweep = load_sweep(write_sweep(tmp_path))
    runner = SweepRunner(sweep, ResultsStore(sweep.config.store))
    spec = single_trial(
        sweep.tasks[0],
        sweep.agents["ok"],
        Arm(name="control"),
        sweep="drv",
        evidence_url=(tmp_path / "evidence").as_uri(),
    )

    @ray.remote
    def broken() -> None:
        raise TypeError("extractall() got an unexpected keyword argument 'filter'")

    result = runner._collect(broken.remote(), spec, time.time())
    assert result.verdict is Verdict.INFRA_ERROR
    assert result.reason == (
        "ray: TypeError: extractall() got an unexpected keyword argument 'filter'"
    )
    traceback = _evidence_file(result.evidence_uri, "error.txt")
    assert "in broken" in traceback and "TypeError: extractall()" in traceback
    assert "\x1b[" not in traceback


def test_a_worker_that_cannot_unpack_its_scenario_reports_why(
    ray_local: None, tmp_path: Path
) -> None:
    import ray

    from hangar.kinds.execution import single_trial
    from hangar.scheduler.task import put, run_trial_task
    from hangar.trials import Arm

    # A scenario this node has never unpacked (a new digest), so the package is read.
    fresh = tmp_path / "fresh.scenario.yaml"
    fresh.write_text(
        TINY.read_text()
        .replace("../../../examples", str(TINY.parents[3] / "examples"))
        .replace("id: tiny", f"id: fresh\ncanaries: [{tmp_path.name}]")
    )
    sweep = load_sweep(write_sweep(tmp_path, scenarios=[str(fresh)]))
    spec = single_trial(
        sweep.tasks[0],
        sweep.agents["ok"],
        Arm(name="control"),
        sweep="drv",
        backend="local",
        evidence_url=(tmp_path / "evidence").as_uri(),
    )
    task = ray.remote(run_trial_task).options(resources={"hangar_sandbox": 1}, num_cpus=0)
    package = put(ray, b"not a tar archive")
    result: TrialResult = ray.get(task.remote(spec, (package, None, None)))
    assert result.verdict is Verdict.INFRA_ERROR
    expected = "sandbox failure: SandboxError: could not read an untrusted archive"
    assert result.reason.startswith(expected), result.reason
    assert 'shipping.py", line' in (said := _evidence_file(result.evidence_uri, "error.txt"))
    assert ", in unpack\n" in said
    assert runs(tmp_path) == []  # no agent ran


def test_unloadable_scenarios_are_blocked_rows(ray_local: None, tmp_path: Path) -> None:
    broken = tmp_path / "broken.scenario.yaml"
    broken.write_text("id: broken\nrevision: nope\n")
    path = write_sweep(tmp_path, scenarios=[str(TINY), str(broken)], arms={"control": []})
    tally, store = go(path)
    assert tally.total == 2 and tally.done == 2
    assert tally.verdicts == {"pass": 1, "blocked_setup": 1}
    assert tally.exit_code() == 3  # a blocked trial needs a look before the results mean much
    (blocked,) = [r for r in store.results("drv") if r.verdict is Verdict.BLOCKED_SETUP]
    assert (
        blocked.scenario_id == "broken" and "broken.scenario.yaml does not load" in blocked.reason
    )
    assert sorted(store.counts("drv")) == [
        ("blocked_setup", "ok", "m1", "control", 1),
        ("pass", "ok", "m1", "control", 1),
    ]
    again, _ = go(path)  # recorded once: the next run skips it like any final trial
    assert again.skipped == 2 and again.done == 0 and again.exit_code() == 3
    assert len(list(store.results("drv", all_attempts=True))) == 2


def test_a_blocked_trial_runs_again_once_what_blocked_it_is_mended(
    ray_local: None, tmp_path: Path
) -> None:
    import shutil

    folder = tmp_path / "later"
    folder.mkdir()
    scenario = yaml.safe_load(TINY.read_text())
    bundle = (TINY.parent / scenario["repository"]).resolve()
    scenario["repository"] = str(tmp_path / "repo.bundle")  # not there yet
    scenario.pop("plugins")
    (folder / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    path = write_sweep(tmp_path, scenarios=[str(folder / "scenario.yaml")], arms={"control": []})
    tally, store = go(path)
    assert tally.verdicts == {"blocked_setup": 1} and tally.exit_code() == 3
    kept, _ = go_with(path, retry_blocked=False)  # the old behaviour, on request
    assert kept.skipped == 1 and kept.verdicts == {"blocked_setup": 1}
    shutil.copy(bundle, tmp_path / "repo.bundle")  # mended
    again, store = go(path)
    assert again.verdicts == {"pass": 1} and again.exit_code() == 0
    attempts = [(r.attempt, r.verdict.value) for r in store.results("drv", all_attempts=True)]
    assert sorted(attempts) == [(1, "blocked_setup"), (2, "pass")]


def go_with(path: Path, **options: Any) -> tuple[SweepTally, ResultsStore]:
    sweep = load_sweep(path)
    store = ResultsStore(sweep.config.store)
    return SweepRunner(sweep, store, poll_s=0.1, **options).run(), store


def test_exit_codes(tmp_path: Path) -> None:
    tally = SweepTally(total=4, done=4)
    tally.verdicts.update({"pass": 4})
    assert tally.exit_code() == 0
    tally.verdicts.update({"pass": -1, "fail": 1})
    assert tally.exit_code() == 1 and tally.exit_code(failures_ok=True) == 0
    tally.verdicts.update({"fail": -1, "infra_error": 1})
    assert tally.exit_code() == 3 and tally.exit_code(failures_ok=True) == 3
    budget = SweepTally(total=4, done=2)
    budget.verdicts.update({"pass": 2})
    assert budget.exit_code() == 3  # two trials were not run
    stopped = SweepTally(total=4, done=1, interrupted=True)
    assert stopped.exit_code() == 130


def _run_model_sweep(
    tmp_path: Path, script: dict[str, Any], model: str
) -> tuple[SweepTally, ResultsStore, Any]:
    """A sweep of the chat agent on `model` (served by `script`) and on a model of none,
    run; (tally, store, the stopped server with the requests it received)."""
    from hangar.testing.scripted import Script, ScriptedServer

    (tmp_path / "script.yaml").write_text(json.dumps(script))
    server = ScriptedServer(Script.load(tmp_path / "script.yaml")).start()
    # A key set before Ray started (Ray's workers keep the environment they started with).
    path = write_sweep(
        tmp_path,
        agents={"chat": {"kind": "chat", "max_turns": 1}},
        models=[
            {"id": model, "base_url": f"{server.url}/v1", "api_key_env": "HANGAR_SCRIPTED_KEY"},
            {"id": "m1", "provider": "none"},
        ],
        repeats=3,
        arms={"control": []},
        agents_file=None,
        concurrency={"sandbox_slots": 1, "max_in_flight": 1},
    )
    try:
        tally, store = go(path)
    finally:
        server.shutdown()
    return tally, store, server


def test_a_refused_key_stops_its_model_before_any_trial(ray_local: None, tmp_path: Path) -> None:
    script = {"conversations": [{"model": "locked", "replies": [{"status": 401}]}]}
    # The chat agent needs a model: "m1" (none) gives blocked_setup rows, "locked" a 401.
    tally, store, server = _run_model_sweep(tmp_path, script, "locked")
    assert list(tally.stopped_models) == ["locked"]
    error = tally.stopped_models["locked"]
    assert error.kind == "auth" and error.key_env == "HANGAR_SCRIPTED_KEY"
    assert not [r for r in store.results("drv", all_attempts=True) if r.model == "locked"]
    assert [r["model"] for r in server.checks] == ["locked"]  # "m1" calls no provider
    assert not server.requests  # no trial's call
    assert len([r for r in store.results("drv") if r.model == "m1"]) == 3  # the other model ran
    assert tally.retries == 0 and tally.exit_code() == 3


def test_a_model_that_does_not_exist_is_stopped_before_any_trial(
    ray_local: None, tmp_path: Path
) -> None:
    """A typo in a model id (the provider has gpt-4o-mini, the sweep names gpt-4o-mni)."""
    script = {"conversations": [{"replies": [{"content": "OK"}]}], "models": ["gpt-4o-mini"]}
    tally, store, server = _run_model_sweep(tmp_path, script, "gpt-4o-mni")
    error = tally.stopped_models["gpt-4o-mni"]
    assert error.kind == "not_found" and error.status == 404
    assert "The model `gpt-4o-mni` does not exist" in error.message  # the provider's words
    assert not [r for r in store.results("drv", all_attempts=True) if r.model == "gpt-4o-mni"]
    assert len(server.checks) == 1 and not server.requests and tally.exit_code() == 3
    (check,) = [c for c in tally.model_checks if c.model == "gpt-4o-mni"]
    assert not check.ok


def test_a_404_mid_sweep_stops_the_model_and_leaves_its_trials_to_run_again(
    ray_local: None, tmp_path: Path
) -> None:
    """The model answers the check, then its provider drops it: the trial that met the
    404 is an uncounted infra_error, none of the model's others is sent, and each is left
    to run again."""
    script = {
        "conversations": [
            {"match": "Say OK.", "replies": [{"content": "OK"}]},
            {"model": "vanishing", "replies": [{"status": 404}]},
        ]
    }
    tally, store, _ = _run_model_sweep(tmp_path, script, "vanishing")
    error = tally.stopped_models["vanishing"]
    assert error.kind == "not_found"
    vanishing = [r for r in store.results("drv", all_attempts=True) if r.model == "vanishing"]
    assert len(vanishing) == 1 and vanishing[0].verdict is Verdict.INFRA_ERROR
    assert not vanishing[0].verdict.final  # not counted: run again by the next run
    assert tally.retries == 0 and tally.exit_code() == 3


LATE_KEY = """
import os, ray
from hangar.cluster.attach import connect, detach

connect(None, 1, ())  # an earlier sweep of the process, which needed no key
os.environ["HANGAR_LATE_KEY"] = "set-after-the-first-sweep"

@ray.remote
def seen() -> str | None:
    return os.environ.get("HANGAR_LATE_KEY")

before = ray.get(seen.remote())
connect(None, 1, ("HANGAR_LATE_KEY",))  # this sweep needs the key: Ray is attached again
print(before, ray.get(seen.remote()))
detach()  # what the CLI does after its command: Ray attached by connect() is left
print(ray.is_initialized())
"""


@pytest.mark.ray
@pytest.mark.slow
def test_a_later_sweep_that_needs_a_key_attaches_ray_again(tmp_path: Path) -> None:
    """An earlier sweep of the process attached Ray without the key (an embedded Ray, or
    a warm head) whose workers do not have it: the sweep that needs it does not reuse that
    attachment but starts again, and says so."""
    import shutil
    import subprocess
    import sys
    import tempfile

    short = tempfile.mkdtemp(prefix="hr-", dir="/tmp")  # Ray's sockets need a short path
    env = {k: v for k, v in os.environ.items() if k != "HANGAR_LATE_KEY"}
    env.update(HANGAR_WARM_HEAD="0", RAY_TMPDIR=short, RAY_AUTH_MODE="token")
    try:
        run = subprocess.run(
            [sys.executable, "-c", LATE_KEY], capture_output=True, text=True, env=env, timeout=300
        )
    finally:
        shutil.rmtree(short, ignore_errors=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-3:] == ["None", "set-after-the-first-sweep", "False"], run.stdout
    assert "attaching Ray again for this sweep (it needs HANGAR_LATE_KEY" in run.stderr


@pytest.mark.ray
def test_detach_leaves_a_ray_the_caller_started(
    ray_local: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    import hangar.cluster.attach as attach
    from hangar.cluster.attach import connect, detach

    # The session's Ray may have been started by an earlier test's sweep (the fixture then
    # found it running): here it is the caller's, as for a notebook that started its own.
    monkeypatch.setattr(attach, "_ATTACHED", {})

    assert connect(None, 1) == 2  # the caller's Ray, used as it is
    detach()
    assert ray.is_initialized()
