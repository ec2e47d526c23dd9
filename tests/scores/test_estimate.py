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
from hangar.kinds.decision.trial import render_prompt
from hangar.models import ModelSpec
from hangar.models.tokens import count_tokens
from hangar.scores.estimate import OWN_INPUT
from hangar.store import ResultsStore
from hangar.testing.scripted import Script, ScriptedServer
from hangar.trials import run_trial

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
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
    # each skill-arm trial as its earlier one; each control-arm trial from the same case's
    # (the other arm: the nearest basis there is) output tokens and its own prompt's input
    # tokens (counted offline: what it will send is known); the model never run: named,
    # not guessed
    assert {b["what"]: b["trials"] for b in guess["basis"]} == {
        "same task, arm, agent and model": 8,
        f"same task and model ({OWN_INPUT})": 8,
    }
    system = agent.system_prompt
    control_in = sum(
        count_tokens(system) + count_tokens(render_prompt(c, "control")) for c in cases
    )
    out_tokens = sum(r.usage.output_tokens for r in earlier)
    price = data["models"][0]["price"]
    control = (control_in * price["input"] + out_tokens * price["output"]) / 1e6
    assert guess["cost_usd"] == pytest.approx(spent + control)
    # every earlier trial cost the same (the scripted model's usage is fixed): no spread
    assert guess["low_usd"] == pytest.approx(spent + control) == guess["high_usd"]
    assert guess["tokens_in"] == sum(r.usage.input_tokens for r in earlier) + control_in
    assert len(guess["unknown"]) == 8 and all("never-run" in u for u in guess["unknown"])
    # trials final in the sweep itself cost nothing more
    store.record([r.model_copy(update={"sweep": data["id"]}) for r in earlier])
    again = json.loads(
        runner.invoke(app, ["sweep", "check", str(sweep), "--estimate", "--json"]).stdout
    )["estimate"]
    assert again["to_run"] == 24 and again["cost_usd"] == pytest.approx(control)
    # A model with no price is never estimated from its earlier trials (they recorded
    # cost 0 beside the warning that they would): it is named, not guessed at $0 or more.
    store.record(
        [
            r.model_copy(update={"model": "never-run", "trial_key": "n" + r.trial_key[1:]})
            for r in earlier
        ]
    )
    unpriced = json.loads(
        runner.invoke(app, ["sweep", "check", str(sweep), "--estimate", "--json"]).stdout
    )["estimate"]
    assert unpriced["cost_usd"] == pytest.approx(control)
    assert len(unpriced["unknown"]) == 8, unpriced["unknown"]
    assert all(u.endswith("with model never-run: no price x2") for u in unpriced["unknown"])
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


def test_another_agent_s_trials_lend_their_output_and_the_prompt_its_input() -> None:
    """An agent with a longer system prompt: its trials are estimated from the earlier
    agent's trials of the same task, arm and model, with their own prompts' input tokens
    (what a longer prompt adds is counted, not lost)."""
    from hangar.cli.sweep import token_guess
    from hangar.kinds.decision import case_trial
    from hangar.scores.estimate import estimate

    cases = load_decision_suite(EXAMPLES / "decision" / "suite.yaml")
    model = ModelSpec(id="m", api_key_env="K", price={"input": 2.0, "output": 8.0})
    short = PromptAgent(name="p", system_prompt="Choose.")
    longer = PromptAgent(name="p", system_prompt="Choose carefully. " * 50)
    earlier = [case_trial(c, short, "skill", model=model) for c in cases]

    class Store:  # what the estimate reads of a store: the earlier trials' rows
        def cost_history(self) -> list[dict[str, object]]:
            return [
                {"kind": s.task.kind, "scenario_digest": s.task.digest, "model": "m",
                 "arm": "skill", "agent_digest": s.agent.digest(), "cost_usd": 0.001,
                 "tokens_in": 300, "tokens_out": 50}
                for s in earlier
            ]  # fmt: skip

    again = estimate(earlier, Store(), set(), token_guess)  # type: ignore[arg-type]
    assert [(b.what, b.trials) for b in again.basis] == [("same task, arm, agent and model", 8)]
    assert again.cost_usd == pytest.approx(8 * 0.001)
    changed = [case_trial(c, longer, "skill", model=model) for c in cases]
    guess = estimate(changed, Store(), set(), token_guess)  # type: ignore[arg-type]
    what = f"same task, arm and model, another agent ({OWN_INPUT})"
    assert [(b.what, b.trials) for b in guess.basis] == [(what, 8)]
    inputs = sum(token_guess(s)[0] for s in changed)  # type: ignore[index]
    assert guess.tokens_in == inputs and guess.tokens_out == 8 * 50
    assert guess.cost_usd == pytest.approx((inputs * 2.0 + 8 * 50 * 8.0) / 1e6)
    assert inputs > 8 * 300  # the longer prompt costs what it adds
