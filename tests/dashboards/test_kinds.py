"""The scores dashboard over every kind: a real PostgreSQL holding real results of an
execution scenario, decision cases, rubric-benchmark samples (with their judge) and a
knowledge gold set's arm (scored from its labels, recorded per answer), and each panel's
SQL, expanded as Grafana expands it, gives the numbers each kind's own report gives."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from hangar.agents import CommandAgent, PromptAgent
from hangar.dashboards.model import Sql
from hangar.dashboards.scores import ALL_QUERIES, scores_dashboard
from hangar.kinds.decision import case_trial
from hangar.kinds.decision.cases import load_decision_suite
from hangar.kinds.execution import single_trial
from hangar.kinds.execution.scenarios.scenario import load_scenario
from hangar.kinds.knowledge.custody import import_arm, sealed_suite
from hangar.kinds.knowledge.record import record_scores
from hangar.kinds.knowledge.report import build_gold_set_report
from hangar.kinds.rubric import sample_trial
from hangar.kinds.rubric.benchmark import load_benchmark
from hangar.models import ModelSpec
from hangar.results import TrialResult
from hangar.scores.report import build_report
from hangar.store import ResultsStore
from hangar.testing.scripted import Script, ScriptedServer
from hangar.trials import Arm, run_trial
from tests.dashboards.test_live import expand

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SWEEPS = {"execution": "kinds-execution", "decision": "kinds-decision", "rubric": "kinds-rubric"}


@dataclass
class Kinds:
    store: ResultsStore
    results: dict[str, list[TrialResult]]
    folder: Path


@pytest.fixture(scope="module")
def kinds(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kinds]:
    tmp = tmp_path_factory.mktemp("kinds")
    store = ResultsStore(postgres_url)
    with store.engine.begin() as conn:
        for table in ("checks", "scores", "trials", "sweeps", "knowledge_scores"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    script = Script(
        conversations=[
            c
            for name in ("decision/scripted-model.yaml", "sdd-benchmark/scripted-model.yaml")
            for c in Script.load(EXAMPLES / name).conversations
        ]
    )
    server = ScriptedServer(script).start()
    evidence = (tmp / "ev").as_uri()
    results: dict[str, list[TrialResult]] = {}
    try:
        import os

        os.environ.setdefault("HANGAR_SCRIPTED_KEY", "scripted")
        # an execution scenario on the local backend: one agent passes, one fails
        scenario = load_scenario(ROOT / "tests" / "fixtures" / "tiny" / "scenario.yaml")
        results["execution"] = [
            run_trial(
                single_trial(
                    scenario,
                    agent,
                    Arm(name="control"),
                    sweep=SWEEPS["execution"],
                    backend="local",
                    evidence_url=evidence,
                )
            )
            for agent in (
                CommandAgent(name="ok", command="true"),
                CommandAgent(name="bad", command="exit 3"),
            )
        ]
        decider = ModelSpec(
            id="scripted-decider",
            base_url=f"{server.url}/v1",
            api_key_env="HANGAR_SCRIPTED_KEY",
            price={"input": 1.25, "output": 10.0},
        )
        cases = load_decision_suite(EXAMPLES / "decision" / "suite.yaml")
        results["decision"] = [
            run_trial(case_trial(c, PromptAgent(), arm, model=decider, sweep=SWEEPS["decision"],
                                 evidence_url=evidence))
            for c in cases for arm in ("skill", "control")
        ]  # fmt: skip
        bench_folder = tmp / "sdd-benchmark"
        shutil.copytree(EXAMPLES / "sdd-benchmark", bench_folder)
        config = bench_folder / "config.yaml"
        config.write_text(
            config.read_text().replace("http://127.0.0.1:8765/v1", f"{server.url}/v1")
        )
        bench = load_benchmark(bench_folder, phases=["propose"])
        results["rubric"] = [
            run_trial(sample_trial(s, PromptAgent(), model=bench.config.model,
                                   sweep=SWEEPS["rubric"], evidence_url=evidence))
            for s in bench.samples["propose"]
        ]  # fmt: skip
    finally:
        server.shutdown()
    for rows in results.values():
        store.record(rows)
    # a knowledge gold set's external arm: its answers imported, scored from its labels
    folder = tmp / "knowledge"
    shutil.copytree(EXAMPLES / "knowledge", folder)
    suite = sealed_suite(folder)
    external = folder / "external"
    import_arm(suite, "baseline-projects", external / "baseline-projects.jsonl",
               external / "baseline-projects.meta.json")  # fmt: skip
    assert record_scores(store, sealed_suite(folder), ["baseline-projects"]) == (11, 0)
    yield Kinds(store, results, folder)


def run(kinds: Kinds, query: Sql, **fixed: list[str]) -> list[dict[str, Any]]:
    with kinds.store.engine.connect() as conn:
        variables = {
            var.name: [str(r[0]) for r in conn.execute(text(var.query))]
            for var in scores_dashboard().variables
        }
        variables.update(fixed)
        result = conn.execute(text(expand(query.sql, variables)))
        rows = [dict(r._mapping) for r in result]
        assert tuple(result.keys()) == query.columns
    return rows


def test_every_kind_is_in_the_variables_and_every_panel_runs(kinds: Kinds) -> None:
    with kinds.store.engine.connect() as conn:
        values = {
            var.name: {str(r[0]) for r in conn.execute(text(var.query))}
            for var in scores_dashboard().variables
        }
    assert values["kind"] == {"execution", "decision", "rubric", "knowledge"}
    assert {*SWEEPS.values(), "knowledge:knowledge"} <= values["sweep"]
    assert "baseline-projects" in values["arm"]  # an arm with scores and no trial
    for name, query in ALL_QUERIES.items():
        if name != "tasks_left_out":
            assert run(kinds, query), name


def test_the_metric_panel_gives_each_kinds_report(kinds: Kinds) -> None:
    rows = run(kinds, ALL_QUERIES["metric_by_group"])
    by = {(r["kind"], r["agent"], r["model"], r["arm"], r["metric"]): r for r in rows}
    checked = 0
    for kind, results in kinds.results.items():
        report = build_report(SWEEPS[kind], results)
        for g in report.groups:
            for m in g.metrics:
                if not m.n:
                    continue
                row = by[(kind, g.agent, g.model, g.arm, m.metric)]
                assert (row["n"], row["scale"]) == (m.n, m.scale)
                assert row["mean"] == pytest.approx(m.mean)
                if m.scale == "binary":  # Wilson, as the report; points: the normal band
                    assert (row["low"], row["high"]) == (
                        pytest.approx(m.ci_low),
                        pytest.approx(m.ci_high),
                    )
                checked += 1
    assert {m for (k, *_, m) in by if k == "rubric"} >= {"overall", "completeness"}
    assert {m for (k, *_, m) in by if k == "decision"} == {"correct"}
    # the knowledge arm, per answer, as its own report scores it
    report = build_gold_set_report(sealed_suite(kinds.folder), ["baseline-projects"])
    (arm,) = report.arms
    meta = json.loads((kinds.folder / "answers" / "baseline-projects.meta.json").read_text())
    who = meta.get("person") or meta.get("harness")
    for m in arm.metrics:
        row = by[("knowledge", who, meta["model"], "baseline-projects", m.metric)]
        assert (row["n"], row["mean"]) == (m.n, pytest.approx(m.mean))
        assert (row["low"], row["high"]) == (pytest.approx(m.ci_low), pytest.approx(m.ci_high))
        checked += 1
    assert checked >= 8


def test_judge_cost_is_apart_from_model_cost(kinds: Kinds) -> None:
    rows = run(kinds, ALL_QUERIES["cost_by_payer"], sweep=[SWEEPS["rubric"]])
    (row,) = rows
    rubric = kinds.results["rubric"]
    assert row["model_cost_usd"] == pytest.approx(sum(r.usage.cost_usd for r in rubric))
    assert row["judge_cost_usd"] == pytest.approx(sum(r.judge_usage.cost_usd for r in rubric))
    assert row["judge_cost_usd"] > 0 and row["judge_tokens_in"] == sum(
        r.judge_usage.input_tokens for r in rubric
    )
    daily = run(kinds, ALL_QUERIES["judge_cost_per_day"])
    assert sum(r["value"] for r in daily) == pytest.approx(row["judge_cost_usd"])
    decision = run(kinds, ALL_QUERIES["cost_by_payer"], sweep=[SWEEPS["decision"]])
    assert all(r["judge_cost_usd"] == 0 for r in decision) and sum(
        r["model_cost_usd"] for r in decision
    ) == pytest.approx(sum(r.usage.cost_usd for r in kinds.results["decision"]))


def test_a_rescore_after_new_labels_is_a_new_current_version(kinds: Kinds) -> None:
    store, folder = kinds.store, kinds.folder
    assert record_scores(store, sealed_suite(folder), ["baseline-projects"]) == (0, 11)
    labels = folder / "labels" / "baseline-projects.jsonl"
    lines = labels.read_text().splitlines()
    q1 = [json.loads(x) for x in lines if json.loads(x)["id"] == "Q01"]
    flipped = [json.dumps({**x, "correct": not x["correct"]}) for x in q1]
    labels.write_text(
        "\n".join([x for x in lines if json.loads(x)["id"] != "Q01"] + flipped) + "\n"
    )
    try:
        assert record_scores(store, sealed_suite(folder), ["baseline-projects"]) == (1, 10)
        every = [
            r
            for r in store.knowledge_scores("knowledge", current=False)
            if r["question_id"] == "Q01"
        ]
        assert len(every) == 2 and sum(r["current"] for r in every) == 1
        (now,) = [r for r in every if r["current"]]
        (before,) = [r for r in every if not r["current"]]
        assert now["correct"] == 1 - before["correct"]
        rows = run(
            kinds, ALL_QUERIES["metric_by_group"], kind=["knowledge"], metric=["correctness"]
        )
        report = build_gold_set_report(sealed_suite(folder), ["baseline-projects"])
        (m,) = [m for m in report.arms[0].metrics if m.metric == "correctness"]
        assert rows[0]["mean"] == pytest.approx(m.mean)  # the view shows the current version
    finally:
        labels.write_text("\n".join(lines) + "\n")
        # the labels as they were: the earlier version is the current one again
        assert record_scores(store, sealed_suite(folder), ["baseline-projects"]) == (1, 10)
        (back,) = [r for r in store.knowledge_scores("knowledge") if r["question_id"] == "Q01"]
        assert back["version"] == before["version"]
