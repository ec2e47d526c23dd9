"""`hangar sweep check --estimate`: what the trials still to run will cost, from real
earlier trials in the store (the example decision suite, asked of the scripted model)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hangar.agents import PromptAgent
from hangar.cli import app
from hangar.kinds.decision import case_trial
from hangar.kinds.decision.cases import load_decision_suite
from hangar.models import ModelSpec
from hangar.store import ResultsStore
from hangar.testing.scripted import Script, ScriptedServer
from hangar.trials import run_trial

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
runner = CliRunner()


def test_the_estimate_comes_from_earlier_trials_of_the_same_task_arm_and_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(EXAMPLES / "decision", tmp_path / "decision")
    server = ScriptedServer(Script.load(tmp_path / "decision" / "scripted-model.yaml")).start()
    monkeypatch.setenv("HANGAR_SCRIPTED_KEY", "scripted")
    sweep = tmp_path / "decision" / "sweep.yaml"
    data = yaml.safe_load(sweep.read_text())
    data["models"][0]["base_url"] = f"{server.url}/v1"
    data["models"].append({"id": "never-run", "api_key_env": "HANGAR_SCRIPTED_KEY"})
    store_url = f"sqlite:///{tmp_path}/r.db"
    data.update(store=store_url, evidence=(tmp_path / "ev").as_uri())
    sweep.write_text(yaml.safe_dump(data))
    # An earlier sweep asked every case in the skill arm only, with the same agent.
    agent = PromptAgent.model_validate(data["agents"]["prompt"] | {"name": "prompt"})
    model = ModelSpec.model_validate(data["models"][0])
    cases = load_decision_suite(tmp_path / "decision" / "suite.yaml")
    try:
        earlier = [
            run_trial(case_trial(c, agent, "skill", model=model, sweep="earlier",
                                 evidence_url=(tmp_path / "ev").as_uri()))
            for c in cases
        ]  # fmt: skip
    finally:
        server.shutdown()
    store = ResultsStore(store_url)
    store.record(earlier)
    spent = sum(r.usage.cost_usd for r in earlier)
    assert spent > 0

    out = runner.invoke(app, ["sweep", "check", str(sweep), "--estimate", "--json"])
    assert out.exit_code == 0, out.output
    guess = json.loads(out.stdout)["estimate"]
    assert (guess["trials"], guess["to_run"]) == (8 * 2 * 2, 32)
    # each skill-arm trial as its earlier one, each control-arm trial as the same case's
    # (the other arm: the nearest basis there is); the model never run: named, not guessed
    assert {b["what"]: b["trials"] for b in guess["basis"]} == {
        "same task, arm and model": 8,
        "same task and model": 8,
    }
    assert guess["cost_usd"] == pytest.approx(2 * spent)
    # every earlier trial cost the same (the scripted model's usage is fixed): no spread
    assert guess["low_usd"] == pytest.approx(2 * spent) == guess["high_usd"]
    assert guess["tokens_in"] == 2 * sum(r.usage.input_tokens for r in earlier)
    assert len(guess["unknown"]) == 8 and all("never-run" in u for u in guess["unknown"])
    # trials final in the sweep itself cost nothing more
    store.record([r.model_copy(update={"sweep": data["id"]}) for r in earlier])
    again = json.loads(
        runner.invoke(app, ["sweep", "check", str(sweep), "--estimate", "--json"]).stdout
    )["estimate"]
    assert again["to_run"] == 24 and again["cost_usd"] == pytest.approx(spent)
    text = runner.invoke(app, ["sweep", "check", str(sweep), "--estimate"])
    assert "24 of 32 trials still to run" in text.stdout
    assert "not estimated (no earlier trial; its tokens cannot be told" in text.output


def test_a_check_creates_no_store_to_estimate_from(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "decision", tmp_path / "decision")
    sweep = tmp_path / "decision" / "sweep.yaml"
    out = runner.invoke(
        app, ["sweep", "check", str(sweep), "--estimate"], env={"HANGAR_RUNS_DIR": ""}
    )
    assert out.exit_code == 0, out.output
    assert "nothing to estimate from" in out.output
    assert not (tmp_path / "decision" / "runs").exists()


def test_a_first_run_is_estimated_from_its_prompts_tokens_and_the_price(tmp_path: Path) -> None:
    """No earlier trial at all: each decision trial from its prompts' tokens (counted
    offline) and an answer's allowance, at the model's price; the interval spans no
    answer to twice the allowance."""
    from hangar.kinds.decision import ANSWER_TOKENS
    from hangar.kinds.decision.trial import render_prompt
    from hangar.models.tokens import count_tokens
    from hangar.scores.estimate import PROMPT_BASIS

    shutil.copytree(EXAMPLES / "decision", tmp_path / "decision")
    sweep = tmp_path / "decision" / "sweep.yaml"
    data = yaml.safe_load(sweep.read_text())
    data.update(store=f"sqlite:///{tmp_path}/r.db", evidence=(tmp_path / "ev").as_uri())
    sweep.write_text(yaml.safe_dump(data))
    out = runner.invoke(app, ["sweep", "check", str(sweep), "--estimate", "--json"])
    assert out.exit_code == 0, out.output
    guess = json.loads(out.stdout)["estimate"]
    assert guess["basis"] == [{"what": PROMPT_BASIS, "trials": 16}] and not guess["unknown"]
    system = PromptAgent.model_validate(data["agents"]["prompt"] | {"name": "p"}).system_prompt
    cases = load_decision_suite(tmp_path / "decision" / "suite.yaml")
    tokens = [count_tokens(system) + count_tokens(render_prompt(c, arm))
              for c in cases for arm in ("skill", "control")]  # fmt: skip
    price = data["models"][0]["price"]  # USD per 1M: input 1.25, output 10
    answers = 16 * ANSWER_TOKENS * price["output"] / 1e6
    expected = sum(tokens) * price["input"] / 1e6 + answers
    assert guess["tokens_in"] == sum(tokens) and guess["tokens_out"] == 16 * ANSWER_TOKENS
    assert guess["cost_usd"] == pytest.approx(expected)
    assert guess["low_usd"] == pytest.approx(expected - answers)
    assert guess["high_usd"] == pytest.approx(expected + answers)
    # `hangar run` says it before the first trial, and refuses past --confirm-above off a
    # terminal (nothing run, no Ray started), naming --yes
    refused = runner.invoke(app, ["run", str(sweep), "--confirm-above", "0.001"])
    assert "estimated cost of the 16 trials to run" in refused.output
    assert "above --confirm-above ($0.0010)" in str(refused.exception)
    assert "--yes" in str(refused.exception)
    assert not list(ResultsStore(f"sqlite:///{tmp_path}/r.db").results(data["id"]))
    data["budget_usd"] = 0.002
    sweep.write_text(yaml.safe_dump(data))
    over = runner.invoke(app, ["run", str(sweep)])
    assert "above the budget ($0.0020)" in str(over.exception)
