"""What an operator follows: the live view (nodes, slowest trials) fed by the sweep's
board, `--log-format json` for log shippers, `hangar status --watch`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from hangar.cli.progress import SweepView
from hangar.results import TrialResult
from hangar.scheduler.board import Running, Snapshot
from hangar.scheduler.driver import SweepRunner, SweepTally
from hangar.scheduler.sweep import load_sweep
from hangar.store import ResultsStore
from tests.services import wait_for

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "tiny" / "scenario.yaml"
HANGAR = str(Path(sys.executable).parent / "hangar")


def write_sweep(tmp_path: Path, command: str, repeats: int, **extra: Any) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "id": "ops",
                "scenarios": [str(TINY)],
                "agents": {"ok": {"command": command}},
                "repeats": repeats,
                "backend": "local",
                "store": f"sqlite:///{tmp_path}/r.db",
                "evidence": (tmp_path / "ev").as_uri(),
                **extra,
            }
        )
    )
    return path


def render(view: SweepView) -> str:
    console = Console(record=True, width=140, color_system=None)
    console.print(view)
    return console.export_text()


def test_the_view_shows_each_nodes_slots_and_the_slowest_trials() -> None:
    now = time.time()
    running = [
        Running(trial_key=f"k{i}", label=f"task-{i} · a · m · control", node=node, started=now - s)
        for i, (node, s) in enumerate([("h/aaa", 300), ("h/aaa", 20), ("h/bbb", 5)])
    ]
    tally = SweepTally(total=10, done=4)
    tally.board = Snapshot(slots={"h/aaa": 4, "h/bbb": 2, "h/ccc": 2}, running=running)
    view = SweepView("ops", 10)
    view.update(tally)
    text = render(view)
    assert "4/10" in text
    lines = {line.split()[0]: line.rstrip() for line in text.splitlines() if line.strip()}
    assert lines["h/aaa"].endswith("2/4") and lines["h/bbb"].endswith("1/2")
    assert lines["h/ccc"].endswith("0/2")  # an idle node is listed too
    slowest = [line for line in text.splitlines() if "task-" in line]
    assert [line.split()[0] for line in slowest] == ["task-0", "task-1", "task-2"]
    assert "300 s" in slowest[0]


def test_the_view_escapes_what_it_shows() -> None:
    tally = SweepTally(total=1)
    hostile = "[red]x[/red] [link=http://127.0.0.1/]y[/link]"
    running = [Running(trial_key="k", label=hostile, node="h/a", started=time.time())]
    tally.board = Snapshot(slots={"h/a": 1}, running=running)
    view = SweepView("[bold]s[/bold]", 1)
    view.update(tally)
    text = render(view)
    assert hostile in text and "[bold]s[/bold]" in text


def test_the_board_shows_running_trials_on_their_nodes(ray_local: None, tmp_path: Path) -> None:
    path = write_sweep(tmp_path, "sleep 5", repeats=2)
    seen: list[Snapshot] = []

    def listen(tally: SweepTally, result: TrialResult | None) -> None:
        seen.append(tally.board.model_copy())

    sweep = load_sweep(path)
    store = ResultsStore(sweep.config.store)
    SweepRunner(sweep, store, listener=listen, poll_s=0.2).run()
    busiest = max(seen, key=lambda b: len(b.running))
    nodes = {r.node for r in store.results("ops")}
    assert len(busiest.running) == 2, [len(b.running) for b in seen]
    assert {r.node for r in busiest.running} == nodes and set(busiest.slots) == nodes
    assert all(r.label.startswith("tiny · ok · none · control") for r in busiest.running)
    assert busiest.busy() == {nodes.pop(): 2}
    assert seen[-1].running == [], "finished trials stayed on the board"


def test_log_format_json_is_one_record_per_line(tmp_path: Path) -> None:
    # A reason holding newlines and a fake JSON line must stay inside its record.
    path = write_sweep(tmp_path, "echo x; exit 3", repeats=2)
    proc = subprocess.run(
        [HANGAR, "run", str(path), "--log-format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    records = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    others = [line for line in proc.stderr.splitlines() if not line.startswith("{")]
    assert not [line for line in others if "hangar" in line], others
    kinds = [r.get("event") for r in records]
    assert kinds[0] == "sweep_started" and kinds[-1] == "sweep_ended"
    trials = [r for r in records if r.get("event") == "trial_finished"]
    assert len(trials) == 2 and {t["verdict"] for t in trials} == {"fail"}
    for t in trials:
        assert t["sweep"] == "ops" and t["scenario"] == "tiny" and t["agent"] == "ok"
        assert t["level"] == "info" and t["ts"].endswith("+00:00")
        assert t["node"] and t["evidence"].startswith("file://") and not t["retrying"]
    assert records[-1]["verdicts"] == {"fail": 2} and records[-1]["done"] == 2
    assert proc.stdout.startswith("ops: 2 of 2 trials final; this run cost $0.00.\n  2 failed\n")
    assert f"Look further: hangar report {path}  ·  hangar view {path}" in proc.stdout


def test_hangar_run_names_a_model_without_a_price_before_it_runs(tmp_path: Path) -> None:
    # A model no price table knows: its cost would read $0, so the run says so first.
    model = {"id": "mystery-1", "provider": "openai", "api_key_env": "HANGAR_SCRIPTED_KEY"}
    path = write_sweep(tmp_path, "true", repeats=1, models=[model])
    proc = subprocess.run([HANGAR, "run", str(path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = " ".join(proc.stderr.split())
    assert "no price for model mystery-1: its cost is recorded as 0" in said
    assert "1 passed" in proc.stdout


@pytest.mark.parametrize(
    ("usd", "text"),
    [(0, "$0.00"), (0.0024, "$0.0024"), (0.25, "$0.25"), (0.01234, "$0.012"), (12.345, "$12.35")],
)
def test_costs_read_to_their_significant_digits(usd: float, text: str) -> None:
    from hangar.console import usd as fmt

    assert fmt(usd) == text


def test_status_watch_follows_a_sweep_to_its_end(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, "sleep 1", repeats=4)
    watch = subprocess.Popen(
        [HANGAR, "status", str(path), "--watch", "--interval", "0.3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1)
        assert watch.poll() is None, "status --watch ended before the sweep began"
        run = subprocess.run([HANGAR, "run", str(path)], capture_output=True, timeout=300)
        assert run.returncode == 0
        wait_for(lambda: watch.poll() is not None, 30, "status --watch to end by itself")
        out = watch.stdout.read() if watch.stdout else ""
    finally:
        watch.kill()
    assert watch.returncode == 0
    assert "4 final of 4 trials" in out


def test_a_double_ctrl_c_counts_only_what_is_final(tmp_path: Path) -> None:
    """Four trials in flight (two running, two waiting for a slot) cancelled by a second
    Ctrl-C: none is 'final', none reads as a farm error, and the run says to run again."""
    import signal

    marker = tmp_path / "started"
    command = f"touch {marker}; sleep 60"
    path = write_sweep(tmp_path, command, repeats=4, concurrency={"sandbox_slots": 2})
    proc = subprocess.Popen(
        [HANGAR, "run", str(path), "--address", "embedded"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(marker.exists, 120, "a trial to start")
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "ops: 0 of 4 trials final" in out, out
    assert "4 cancelled by the second Ctrl-C (recorded as infra_error)" in out
    assert "interrupted (Ctrl-C): run the sweep again" in out
    assert "hit a farm error" not in out and " 4 of 4 " not in out
