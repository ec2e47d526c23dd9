"""Stopping a comparison once decided: the confidence sequence against an independent
slow computation of the same formula, its coverage over seeded sequences, the rule's
words, and `hangar run --until-decided` on Ray with a decision suite (decided either way,
resumed without a trial, reported with its stop)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hangar.cli import app
from hangar.errors import ConfigError
from hangar.scores.sequential import (
    GRID,
    ConfidenceSequence,
    SequentialOutcome,
    confidence_sequence,
    status,
    stop_reason,
)
from hangar.testing.scripted import Conversation, Reply, Script, ScriptedServer

runner = CliRunner()


def slow_sequence(xs: list[float], alpha: float = 0.05, c: float = 0.75) -> tuple[float, float]:
    """The betting confidence sequence for values in [0, 1], written out plainly: for
    each grid mean, the two wealth processes as products, excluded once their average
    reaches 1/alpha at any time; the bounds of what was never excluded."""
    grid = [(i + 0.5) / GRID for i in range(GRID)]
    excluded = [False] * GRID
    up = [1.0] * GRID
    down = [1.0] * GRID
    for t, x in enumerate(xs, start=1):
        past = xs[: t - 1]
        means = [(0.5 + sum(past[:i])) / (i + 1) for i in range(1, t)]
        var = (0.25 + sum((past[i] - means[i]) ** 2 for i in range(t - 1))) / t
        bet = math.sqrt(2 * math.log(2 / alpha) / (var * t * math.log(1 + t)))
        for j, m in enumerate(grid):
            up[j] *= 1 + min(bet, c / m) * (x - m)
            down[j] *= 1 - min(bet, c / (1 - m)) * (x - m)
            if (up[j] + down[j]) / 2 >= 1 / alpha:
                excluded[j] = True
    kept = [m for m, out in zip(grid, excluded, strict=True) if not out]
    return min(kept), max(kept)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_sequence_is_the_formula(seed: int) -> None:
    rng = random.Random(seed)
    xs = [rng.choice([0.0, 0.5, 1.0]) if seed != 3 else rng.random() for _ in range(40)]
    got = confidence_sequence([2 * x - 1 for x in xs])  # d in [-1, 1]
    low, high = slow_sequence(xs)
    step = 2 / GRID
    # the bounds of what was never excluded, mapped to [-1, 1], widened by one grid step
    assert got.low == pytest.approx((2 * low - 1) - step, abs=1e-9)
    assert got.high == pytest.approx((2 * high - 1) + step, abs=1e-9)
    assert got.low <= got.difference <= got.high


def test_it_covers_the_truth_at_every_look_at_least_95_percent_of_the_time() -> None:
    """400 seeded sequences of 150 paired differences with a known mean (0.1): the share
    whose sequence ever excludes it, looked at after every unit, stays under 5%."""
    rng = random.Random(2026)
    missed = 0
    for _ in range(400):
        sequence = ConfidenceSequence()
        for _ in range(150):
            b = sum(rng.random() < 0.4 for _ in range(3)) / 3
            c = sum(rng.random() < 0.5 for _ in range(3)) / 3
            sequence.add(c - b)
            now = sequence.now()
            if not now.low <= 0.1 <= now.high:
                missed += 1
                break
    assert missed / 400 <= 0.05


def test_spans_and_states() -> None:
    # a 1-5 score: differences in [-4, 4], the margin 15 points = 0.6
    wide = confidence_sequence([4.0] * 12, span=4.0)
    assert -4.0 <= wide.low <= wide.high <= 4.0
    assert status(wide, 0.6) == "lose"
    assert status(confidence_sequence([0.0] * 40), 0.15) == "not_lose"
    assert status(confidence_sequence([0.0] * 5), 0.15) == "open"
    assert status(confidence_sequence([]), 0.15) == "open"
    with pytest.raises(ValueError, match="span"):
        confidence_sequence([0.1], span=0)


def test_the_words() -> None:
    outcome = SequentialOutcome(
        factor="arm", within="prompt · m", metric="pass", baseline="control",
        candidate="skill", status="lose", units=10, of=60, difference=0.9, low=0.25,
        high=1.0, margin=0.15, points=15, why=stop_reason("lose", 10, 60, 15),
    )  # fmt: skip
    assert outcome.sentence == "control is shown to lose by at least 15 points on pass rate"
    assert "stopped after 10 of 60 paired units" in outcome.why
    assert outcome.model_copy(update={"status": "open"}).sentence == (
        "control is not shown to lose by 15 points"
    )
    assert "cannot come to be shown" in stop_reason("not_lose", 30, 60, 15)
    assert stop_reason("open", 60, 60, 15).startswith("ran all 60 paired units")
    assert stop_reason("open", 20, 60, 15, 20).startswith("ran its maximum of 20 of 60")
    assert "cut short" in stop_reason("open", 20, 60, 15)


# -- hangar run --until-decided on Ray ---------------------------------------------------------

CASES = 60


def decision_sweep(tmp_path: Path, name: str, server: ScriptedServer) -> Path:
    """A decision suite of 60 cases (the right choice is A) and its sweep."""
    folder = tmp_path / name
    (folder / "skills" / "pick").mkdir(parents=True)
    (folder / "skills" / "pick" / "SKILL.md").write_text(
        "---\nname: pick\ndescription: Picks well.\n---\nAlways pick the first choice.\n"
    )
    cases = [
        {"id": f"pick:case-{i:02d}", "skill": "pick",
         "scenario": f"PICK-CASE number {i}: which do you pick?",
         "choices": [{"id": "A", "text": "the first"}, {"id": "B", "text": "the second"}],
         "expected": ["A"], "rationale": "The first is right."}
        for i in range(CASES)
    ]  # fmt: skip
    suite = {"kind": "decision", "id": f"{name}-suite", "margin": 15,
             "skills": {"pick": "skills/pick/SKILL.md"}, "cases": cases}  # fmt: skip
    (folder / "suite.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    sweep = {
        "id": name, "scenarios": ["suite.yaml"], "agents": {"prompt": {"kind": "prompt"}},
        "models": [{"id": "scripted-picker", "base_url": f"{server.url}/v1",
                    "api_key_env": "HANGAR_SCRIPTED_KEY", "price": {"input": 1.0, "output": 2.0}}],
        "store": f"sqlite:///{tmp_path}/{name}.db", "evidence": (tmp_path / "ev").as_uri(),
    }  # fmt: skip
    (folder / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    return folder / "sweep.yaml"


def picker(control_right: bool) -> ScriptedServer:
    right = Reply(
        content='{"selected": ["A"], "explanation": "The first choice is the right one."}'
    )
    wrong = Reply(content='{"selected": ["B"], "explanation": "The second choice looks quicker."}')
    return ScriptedServer(
        Script(
            conversations=[
                Conversation(match=["PICK-CASE", "# Supplied skill:"], replies=[right]),
                Conversation(match="PICK-CASE", replies=[right if control_right else wrong]),
            ]
        )
    ).start()


ROLES = ["--until-decided", "--baseline", "control", "--candidate", "skill", "--round", "10"]


@pytest.mark.ray
@pytest.mark.slow
def test_a_clear_loss_stops_after_the_first_round(ray_local: None, tmp_path: Path) -> None:
    server = picker(control_right=False)
    sweep = decision_sweep(tmp_path, "clear", server)
    try:
        run = runner.invoke(app, ["run", str(sweep), "--json", "--allow-failures", *ROLES])
        again = runner.invoke(app, ["run", str(sweep), "--json", "--allow-failures", *ROLES])
    finally:
        server.shutdown()
    assert run.exit_code == 0, run.output
    outcome = json.loads(run.stdout)
    assert (outcome["total"], outcome["done"], outcome["not_run"]) == (2 * CASES, 20, 0)
    assert outcome["saved_by_deciding"] == 2 * CASES - 20
    (decided,) = outcome["decided"]
    assert decided["status"] == "lose" and decided["units"] == 10 and decided["of"] == CASES
    assert decided["sentence"] == "control is shown to lose by at least 15 points on correct"
    assert len(server.requests) == 20
    # run again: decided by what is in the store, no trial, the same decision
    assert again.exit_code == 0, again.output
    second = json.loads(again.stdout)
    assert (second["done"], second["skipped"], second["saved_by_deciding"]) == (0, 20, 100)
    assert second["decided"] == outcome["decided"] and len(server.requests) == 20
    # the report, in the sweep's roles, says it stopped early, after how many units, why
    report = runner.invoke(app, ["report", str(sweep), "--format", "json"])
    assert report.exit_code == 0, report.output
    data = json.loads(report.stdout)
    assert data["roles"] == ["control", "skill"] and data["sequential"][0]["units"] == 10
    (c,) = [c for c in data["comparisons"] if c["metric"] == "correct"]
    assert c["sentence"] == decided["sentence"] and c["scenarios"] == 10
    (note,) = [n for n in data["notes"] if n.startswith("run until decided")]
    assert "stopped after 10 of 60 paired units" in note and "lower bound reached 15" in note
    from hangar.catalog import Catalog
    from hangar.store import ResultsStore
    from hangar.viewer.data import ReportCache

    viewed = ReportCache(Catalog(ResultsStore(f"sqlite:///{tmp_path}/clear.db"))).report("clear")
    assert viewed is not None
    assert note in viewed.report.notes and viewed.report.roles == ("control", "skill")


@pytest.mark.ray
@pytest.mark.slow
def test_no_difference_stops_once_it_cannot_be_shown(ray_local: None, tmp_path: Path) -> None:
    server = picker(control_right=True)
    sweep = decision_sweep(tmp_path, "even", server)
    data = yaml.safe_load(sweep.read_text())
    data["until_decided"] = {"baseline": "control", "candidate": "skill", "round": 10}
    sweep.write_text(yaml.safe_dump(data))
    try:
        run = runner.invoke(app, ["run", str(sweep), "--json", "--until-decided"])
    finally:
        server.shutdown()
    assert run.exit_code == 0, run.output
    outcome = json.loads(run.stdout)
    (decided,) = outcome["decided"]
    assert decided["status"] == "not_lose" and decided["units"] == 30
    assert decided["sentence"] == "control is not shown to lose by 15 points"
    assert outcome["done"] == 60 and outcome["saved_by_deciding"] == 60
    assert "upper bound fell below 15 points" in decided["why"]


def test_roles_that_name_nothing_are_refused(tmp_path: Path) -> None:
    server = picker(control_right=True)
    try:
        sweep = decision_sweep(tmp_path, "bad", server)
        wrong = runner.invoke(
            app, ["run", str(sweep), "--until-decided", "--baseline", "control",
                  "--candidate", "gpt-9"],
        )  # fmt: skip
        bare = runner.invoke(app, ["run", str(sweep), "--until-decided"])
        loose = runner.invoke(app, ["run", str(sweep), "--baseline", "control"])
    finally:
        server.shutdown()
    said = {name: str(r.exception) for name, r in (("wrong", wrong), ("bare", bare),
                                                   ("loose", loose))}  # fmt: skip
    assert all(isinstance(r.exception, ConfigError) for r in (wrong, bare, loose)), said
    assert "no factor has both 'control' and 'gpt-9'" in said["wrong"]
    assert "arms: control, skill" in said["wrong"]
    assert "--until-decided needs the roles" in said["bare"]
    assert "go with --until-decided" in said["loose"]
    assert not server.requests
