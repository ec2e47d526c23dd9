"""Trials that need no sandbox run in pools (`hangar.scheduler.pool`): a few threaded actors
per node instead of a Ray task each, or threads of the driver's own process on a cluster
that is this machine, with the guarantees of every trial kept (results, evidence, the
board, the first and second Ctrl-C, resumption)."""

from __future__ import annotations

import json
import os
import queue
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from typer.testing import CliRunner

from hangar.cli import app
from hangar.errors import ConfigError
from hangar.results import STORED_PREFIX, TrialResult, Verdict
from hangar.scheduler.driver import SweepRunner, SweepTally
from hangar.scheduler.pool import all_here, pool_places, results, wait
from hangar.scheduler.sweep import load_sweep
from hangar.store import ResultsStore
from hangar.testing.scripted import Conversation, Reply, Script, ScriptedServer
from tests.services import sigint_twice_once, wait_for

ANSWER = json.dumps({"selected": ["B"], "explanation": "A failing test shows the bug."})


def test_pools_are_about_one_per_core_and_each_holds_a_share_of_the_window() -> None:
    nodes = [
        {"NodeID": "a", "Alive": True, "Resources": {"CPU": 2.0}},
        {"NodeID": "b", "Alive": True, "Resources": {"CPU": 4.0}},
        {"NodeID": "dead", "Alive": False, "Resources": {"CPU": 64.0}},
    ]
    assert pool_places(nodes, 8) == ["a"]  # one pool holds 8 trials
    assert pool_places(nodes, 32) == ["a", "b", "a", "b"]  # spread over the nodes in turn
    assert pool_places(nodes, 1000) == ["a", "b", "a", "b", "b", "b"]  # a core each at most
    assert pool_places([{"NodeID": "c", "Resources": {}}], 64) == ["c"]  # no CPU said: one
    # A driver that joined without CPUs to drive (not a node) runs no pool; nor does a node
    # that offers no room for pools when others do (hangar's nodes do).
    driver = {"NodeID": "driver", "Alive": True, "Resources": {"CPU": 0.0}}
    assert "driver" not in pool_places([driver, *nodes], 1000)
    mine = {"NodeID": "mine", "Alive": True, "Resources": {"CPU": 1.0, "hangar_pools": 1000}}
    assert pool_places([mine, *nodes], 1000) == ["mine"]


@pytest.fixture
def slow_model() -> Iterator[ScriptedServer]:
    """A model that answers every case after two seconds (the board is read every two)."""
    reply = Reply(content=ANSWER, delay_s=2.0)
    server = ScriptedServer(Script(conversations=[Conversation(replies=[reply])])).start()
    yield server
    server.shutdown()


#: Both places a pool can be (`concurrency.prompt_trials`).
PLACES = pytest.mark.parametrize("place", ["nodes", "driver"])


def write_sweep(tmp_path: Path, url: str, cases: int, in_flight: int, place: str = "nodes") -> Path:
    (tmp_path / "skills" / "tdd").mkdir(parents=True)
    (tmp_path / "skills" / "tdd" / "SKILL.md").write_text("A failing test comes first.\n")
    suite = {
        "kind": "decision",
        "id": "pooled",
        "skills": {"tdd": "skills/tdd/SKILL.md"},
        "cases": [
            {
                "id": f"tdd:case-{i}",
                "skill": "tdd",
                "scenario": f"CASE-{i}: a bug report arrives. What first?",
                "choices": [{"id": "A", "text": "patch"}, {"id": "B", "text": "test first"}],
                "expected": ["B"],
            }
            for i in range(cases)
        ],
    }
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    sweep = {
        "id": "pool",
        "scenarios": ["suite.yaml"],
        "agents": {"prompt": {"kind": "prompt"}},
        "models": [
            {"id": "decider", "base_url": f"{url}/v1", "api_key_env": "HANGAR_SCRIPTED_KEY"}
        ],
        "concurrency": {"max_in_flight": in_flight, "prompt_trials": place},
        "store": f"sqlite:///{tmp_path}/r.db",
        "evidence": (tmp_path / "ev").as_uri(),
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def go(path: Path, listener: Any = None) -> tuple[SweepTally, ResultsStore]:
    sweep = load_sweep(path)
    store = ResultsStore(sweep.config.store)
    return SweepRunner(sweep, store, listener=listener, poll_s=0.1).run(), store


def ray_workers() -> list[str]:
    """The titles of this machine's Ray worker processes (``ray::<what it runs>``)."""
    titles = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            line = " ".join(proc.info["cmdline"] or [])
        except psutil.Error:
            continue
        if line.startswith("ray::"):
            titles.append(line.split()[0])
    return titles


def pool_threads() -> set[threading.Thread]:
    """The driver's own pools' threads alive in this process."""
    return {t for t in threading.enumerate() if t.name.startswith("hangar-pool-")}


@pytest.mark.ray
@pytest.mark.slow
@PLACES
def test_prompt_trials_run_in_pools_with_their_evidence_and_the_board(
    ray_local: None, tmp_path: Path, slow_model: ScriptedServer, place: str
) -> None:
    path = write_sweep(tmp_path, slow_model.url, cases=12, in_flight=8, place=place)
    seen: list[tuple[int, list[str], set[threading.Thread]]] = []
    before = pool_threads()  # an earlier test's, still in a model call

    def watch(tally: SweepTally, result: TrialResult | None) -> None:
        # The model holds every call until the board has shown two trials running: seen
        # while they run, however slow the machine (a race with 2-second calls lost).
        if len(tally.board.running) >= 2 and not seen:
            seen.append((len(tally.board.running), ray_workers(), pool_threads() - before))
            slow_model.release()

    slow_model.hold()
    tally, store = go(path, watch)
    results = list(store.results("pool"))
    assert tally.done == 24 and len(results) == 24 and tally.verdicts["pass"] == 24
    # Each bundle is in the results store, written with its result: no file per call.
    assert all(str(r.evidence_uri).startswith(STORED_PREFIX) for r in results)
    assert not list(tmp_path.glob("ev/**/*.tar.gz"))
    for r in results[:3]:
        argv = ["evidence", "verify", str(r.evidence_uri), "--store", str(store.url)]
        checked = CliRunner().invoke(app, [*argv, "--sha256", str(r.evidence_sha256)])
        assert checked.exit_code == 0 and "files match" in checked.output, checked.output
        shown = CliRunner().invoke(app, ["trial", "show", r.trial_key, "--store", str(store.url)])
        assert shown.exit_code == 0 and "selection is exactly" in shown.output, shown.output
    # Read from another store, the error says which store to name.
    other = f"sqlite:///{tmp_path}/other.db"
    ResultsStore(other)
    argv = ["evidence", "verify", str(results[0].evidence_uri), "--store", other]
    refused = CliRunner().invoke(app, argv)
    assert refused.exit_code != 0 and "nothing stored at store:///" in str(refused.exception)
    assert all(r.usage.input_tokens > 0 and r.node for r in results)
    assert len(slow_model.requests) == 24
    # The board heard of the running trials (in batches), and they ran in a pool: no Ray
    # task of their own; on the nodes, a pool is a Ray actor's process, in the driver its
    # threads (a window's worth and one more).
    assert seen, "the board never showed a running trial"
    running, workers, threads = seen[0]
    actors = "ray::TrialPool" in {w.split(".")[0] for w in workers}
    assert running >= 2 and actors == (place == "nodes"), workers
    assert len(threads) == (9 if place == "driver" else 0)
    assert not [w for w in workers if w.startswith("ray::run_trial_task")], workers
    # The pools end with the run (Ray kills them asynchronously; the threads end).
    wait_for(lambda: "ray::TrialPool" not in ray_workers(), 30, "the end of the pools")
    wait_for(lambda: not pool_threads() - before, 30, "the end of the driver's pool threads")


@pytest.mark.ray
@pytest.mark.slow
@PLACES
def test_after_one_ctrl_c_no_pooled_trial_starts_and_the_rest_run_next_time(
    ray_local: None, tmp_path: Path, slow_model: ScriptedServer, place: str
) -> None:
    path = write_sweep(tmp_path, slow_model.url, cases=12, in_flight=4, place=place)

    def interrupt(tally: SweepTally, result: TrialResult | None) -> None:
        if result is not None and tally.done == 1:
            os.kill(os.getpid(), signal.SIGINT)

    tally, store = go(path, interrupt)
    asked = len(slow_model.requests)
    assert tally.interrupted and asked <= 1 + 4  # the first, and those already sent
    assert len(list(store.results("pool"))) == tally.done == asked  # each that started
    assert tally.not_run == 24 - asked
    rest, _ = go(path)
    assert rest.skipped == asked and rest.done == 24 - asked
    assert len(slow_model.requests) == 24  # none asked twice


@pytest.mark.ray
@pytest.mark.slow
@PLACES
def test_a_second_ctrl_c_ends_the_pooled_trials_as_interrupted(
    ray_local: None, tmp_path: Path, place: str
) -> None:
    reply = Reply(content=ANSWER, delay_s=30.0)  # the cases' answers (not the model check's)
    slow = Conversation(match="a bug report arrives", replies=[reply])
    server = ScriptedServer(Script(conversations=[slow])).start()
    path = write_sweep(tmp_path, server.url, cases=2, in_flight=4, place=place)
    started = threading.Event()

    def watch(tally: SweepTally, result: TrialResult | None) -> None:
        if tally.board.running:
            started.set()

    sigint_twice_once(started)
    began = time.monotonic()
    try:
        tally, store = go(path, watch)
    finally:
        server.shutdown()
    assert tally.interrupted and time.monotonic() - began < 30
    rows = list(store.results("pool"))
    assert len(rows) == 4 and {r.verdict for r in rows} == {Verdict.INFRA_ERROR}
    assert {r.reason for r in rows} == {"interrupted: cancelled by a second Ctrl-C"}
    assert store.resume_state("pool")[0] == set()  # not final: the next run runs them again


@pytest.mark.ray
def test_pools_opened_before_a_failing_preflight_end_with_the_run(
    ray_local: None, tmp_path: Path, slow_model: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pools start while the preflight runs; a preflight that refuses the sweep must
    # not leave them (nor the board) behind.
    import hangar.scheduler.driver as driver

    def refuse() -> Any:
        wait_for(lambda: "ray::TrialPool" in ray_workers(), 30, "the pools, during the preflight")
        raise ConfigError("node n1: the preflight refused the sweep")

    monkeypatch.setattr(driver, "start_preflight", lambda *args, **kwargs: refuse)
    path = write_sweep(tmp_path, slow_model.url, cases=4, in_flight=16)
    with pytest.raises(ConfigError, match="preflight refused"):
        go(path)
    wait_for(lambda: "ray::TrialPool" not in ray_workers(), 30, "the end of the pools")
    assert not slow_model.requests  # no trial started


def test_the_driver_holds_the_pool_only_when_every_node_is_this_machine() -> None:
    here = {"NodeID": "a", "Alive": True, "NodeManagerAddress": "127.0.0.1"}
    away = {"NodeID": "b", "Alive": True, "NodeManagerAddress": "192.0.2.7"}  # TEST-NET-1
    gone = {**away, "NodeID": "c", "Alive": False}
    assert all_here([here]) and all_here([here, gone])
    assert not all_here([here, away])


@pytest.mark.ray
def test_a_sweep_waits_on_the_drivers_trials_and_rays_alike(ray_local: None) -> None:
    import ray

    @ray.remote
    def slow(x: int) -> int:
        time.sleep(0.5)
        return x

    # The driver's pool hands its ended trials over in a queue: taken from there, those
    # the driver gave up dropped.
    finished: queue.SimpleQueue[Future[int]] = queue.SimpleQueue()
    given_up, mine = Future[int](), Future[int]()
    given_up.set_result(0)
    finished.put(given_up)
    theirs = slow.remote(2)

    def end_mine() -> None:
        mine.set_result(1)
        finished.put(mine)

    threading.Timer(0.1, end_mine).start()
    assert wait(ray, [theirs, mine], 5, finished) == [mine]  # long before Ray's
    assert wait(ray, [theirs], 5, finished) == [theirs]
    assert results(ray, [mine, theirs]) == [1, 2]
    assert wait(ray, [Future()], 0.05, finished) == []
    failed: Future[int] = Future()
    failed.set_exception(RuntimeError("the trial broke"))
    with pytest.raises(RuntimeError, match="the trial broke"):
        results(ray, [failed])


@pytest.mark.ray
def test_a_mixed_sweep_runs_prompts_in_the_driver_and_sandboxes_through_ray(
    ray_local: None, tmp_path: Path, slow_model: ScriptedServer
) -> None:
    # Decision cases (the driver's threads) beside an execution scenario (Ray tasks on the
    # local backend): both kinds of reference waited on together, every trial recorded.
    path = write_sweep(tmp_path, slow_model.url, cases=3, in_flight=4, place="auto")
    sweep = yaml.safe_load(path.read_text())
    tiny = Path(__file__).resolve().parents[1] / "fixtures" / "tiny" / "scenario.yaml"
    sweep["scenarios"].append(str(tiny))
    sweep["agents"]["ok"] = {"command": "sleep 0.5"}
    sweep["backend"] = "local"
    path.write_text(yaml.safe_dump(sweep))
    before = pool_threads()
    seen: list[int] = []

    def watch(tally: SweepTally, result: TrialResult | None) -> None:
        seen.append(len(pool_threads() - before))

    tally, store = go(path, watch)
    results = list(store.results("pool"))
    kinds = Counter(r.kind for r in results)
    assert kinds["decision"] == 6 and kinds["execution"] >= 1, kinds
    assert tally.done == len(results) and tally.verdicts["pass"] == len(results)
    assert max(seen) == 5  # the driver's pool: a window's worth of threads and one more
