"""Decision suites (seed 001): the suite format, the prompt kind of trial, the choice
grader rule by rule, provenance, offline controls, and a sweep on Ray with its report."""

from __future__ import annotations

import json
import re
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from hangar.agents import PromptAgent
from hangar.cli import app
from hangar.errors import ConfigError
from hangar.evidence.archive import verify_archive
from hangar.kinds.decision import case_trial, choice
from hangar.kinds.decision.cases import load_decision_suite
from hangar.kinds.decision.trial import render_prompt
from hangar.models import ModelSpec
from hangar.results import TrialResult, Verdict
from hangar.store import ResultsStore
from hangar.testing.scripted import Conversation, Reply, Script, ScriptedServer
from hangar.trials import run_trial

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()
#: Strings that must never reach a prompt (the expected answer's rationale).
RATIONALE = "RATIONALE-CANARY-6b1f never show this"


def suite_file(tmp_path: Path, **changes: Any) -> Path:
    """A two-case suite with a skill and a reference, in `tmp_path`."""
    (tmp_path / "skills" / "tdd" / "refs").mkdir(parents=True, exist_ok=True)
    (tmp_path / "skills" / "tdd" / "SKILL.md").write_text("SKILL-TEXT-MARKER: red first.\n")
    (tmp_path / "skills" / "tdd" / "refs" / "why.md").write_text("REFERENCE-MARKER: see it fail\n")
    data: dict[str, Any] = {
        "kind": "decision",
        "id": "mini",
        "skills": {"tdd": "skills/tdd/SKILL.md"},
        "cases": [
            {
                "id": "first-step",
                "skill": "tdd",
                "scenario": "CASE-ONE: a bug report arrives. What first?",
                "choices": [{"id": "A", "text": "patch"}, {"id": "B", "text": "test first"}],
                "expected": ["B"],
                "rationale": RATIONALE,
                "references": ["refs/why.md"],
            },
            {
                "id": "two-right",
                "skill": "tdd",
                "scenario": "CASE-TWO: which two?",
                "choices": [
                    {"id": "A", "text": "a"},
                    {"id": "B", "text": "b"},
                    {"id": "C", "text": "c"},
                ],
                "expected": ["A", "C"],
                "rationale": RATIONALE,
            },
        ],
    }
    data.update(changes)
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedServer]:
    monkeypatch.setenv("HANGAR_DECISION_KEY", "sk-test")
    answer = json.dumps({"selected": ["B"], "explanation": "A test that fails first shows it."})
    srv = ScriptedServer(
        Script(
            conversations=[
                Conversation(
                    match=["CASE-ONE", "SKILL-TEXT-MARKER"], replies=[Reply(content=answer)]
                ),
                Conversation(
                    match="CASE-ONE",
                    replies=[
                        Reply(content='{"selected": ["A"], "explanation": "Patching is quickest."}')
                    ],
                ),
            ]
        )
    ).start()
    yield srv
    srv.shutdown()


def model(server: ScriptedServer) -> ModelSpec:
    return ModelSpec(id="decider", base_url=f"{server.url}/v1", api_key_env="HANGAR_DECISION_KEY")


def run_case(
    tmp_path: Path, server: ScriptedServer, arm: str, suite: Path | None = None
) -> TrialResult:
    case = load_decision_suite(suite or suite_file(tmp_path))[0]
    spec = case_trial(
        case, PromptAgent(), arm, model=model(server), evidence_url=(tmp_path / "ev").as_uri()
    ).model_copy(update={"work_root": tmp_path / "trials"})
    return run_trial(spec)


def bundle(result: TrialResult, name: str) -> str:
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        member = tar.extractfile(name)
        assert member is not None
        return member.read().decode()


# -- the suite format ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"cases": []}, "field `cases`"),
        ({"skills": {"other": "x.md"}}, "cases name skills the suite lacks: ['tdd']"),
        ({"kind": "decisions"}, "field `kind`"),
        ({"colour": "red"}, "field `colour` (line 29): unknown field"),  # safe_dump sorts keys
    ],
)
def test_malformed_suites_are_refused_naming_the_field(
    tmp_path: Path, changes: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        load_decision_suite(suite_file(tmp_path, **changes))


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ({"expected": ["Z"]}, "names no choice"),
        ({"expected": ["B", "B"]}, "lists a choice twice"),
        ({"choices": [{"id": "A", "text": "x"}, {"id": "A", "text": "y"}]}, "must be unique"),
        ({"references": ["../../etc/passwd"]}, "must stay inside the skill's folder"),
    ],
)
def test_malformed_cases_are_refused(tmp_path: Path, case: dict[str, Any], words: str) -> None:
    path = suite_file(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["cases"][0].update(case)
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=re.escape(words)):
        load_decision_suite(path)


@pytest.mark.parametrize("good", ["tdd:bug-report-first-step", "session-c/resume:after-crash"])
@pytest.mark.parametrize("bad", ["/tdd", "a//b", "a/../b", "a/./b", "tdd: x", ":tdd"])
def test_case_ids_follow_the_suites_convention(tmp_path: Path, good: str, bad: str) -> None:
    path = suite_file(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["cases"][0]["id"] = good
    path.write_text(yaml.safe_dump(data))
    assert load_decision_suite(path)[0].case.id == good
    data["cases"][0]["id"] = bad
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=re.escape("no empty, '.' or '..' part between slashes")):
        load_decision_suite(path)


def test_duplicate_case_ids_are_refused(tmp_path: Path) -> None:
    path = suite_file(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["cases"][1]["id"] = "first-step"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="case ids must be unique in a suite"):
        load_decision_suite(path)


def test_digests_track_what_the_case_depends_on(tmp_path: Path) -> None:
    path = suite_file(tmp_path)
    first, second = load_decision_suite(path)
    assert (
        first.grader_digest == choice.digest() and first.case_set_digest == second.case_set_digest
    )
    (tmp_path / "skills" / "tdd" / "refs" / "why.md").write_text("changed\n")
    after = load_decision_suite(path)
    assert after[0].digest != first.digest  # its reference changed
    assert after[1].digest == second.digest  # the other case supplies no reference


# -- the prompt ---------------------------------------------------------------------------------


def test_the_expected_answer_and_rationale_never_reach_the_prompt(tmp_path: Path) -> None:
    case = load_decision_suite(suite_file(tmp_path))[0]
    skill, control = render_prompt(case, "skill"), render_prompt(case, "control")
    for prompt in (skill, control):
        assert RATIONALE not in prompt and "expected" not in prompt.lower()
        assert "CASE-ONE" in prompt and "- A: patch" in prompt and "- B: test first" in prompt
    assert "SKILL-TEXT-MARKER" in skill and "REFERENCE-MARKER" in skill
    assert "SKILL-TEXT-MARKER" not in control and "REFERENCE-MARKER" not in control


def test_skill_and_control_arms_end_to_end(tmp_path: Path, server: ScriptedServer) -> None:
    skill = run_case(tmp_path, server, "skill")
    control = run_case(tmp_path, server, "control")
    assert skill.verdict is Verdict.PASS, skill.reason
    assert control.verdict is Verdict.FAIL
    assert "no expected choice is missing: expected but not selected: ['B']" in control.reason
    assert [(s.metric, s.value) for s in skill.scores] == [("correct", 1.0)]
    assert [(s.metric, s.value) for s in control.scores] == [("correct", 0.0)]
    # What the model saw, exactly: the prompts as sent upstream never hold the answer.
    sent = [json.dumps(r["body"]) for r in server.requests]
    assert len(sent) == 2 and all(RATIONALE not in body for body in sent)
    assert all(r["body"]["model"] == "decider" for r in server.requests)
    d = skill.details
    assert d["skillPath"] == "skills/tdd/SKILL.md" and d["skillDigest"].startswith("sha256:")
    assert d["referenceSources"] == [
        {
            "path": "refs/why.md",
            "sha256": load_decision_suite(tmp_path / "suite.yaml")[0].references[0].sha256,
        }
    ]
    for key in ("taskDigest", "caseSetDigest", "graderDigest"):
        assert d[key].startswith("sha256:") and len(d[key]) == 71
    assert d["selected"] == ["B"] and d["provider"]["id"] == "decider"
    assert "output" in d and skill.usage.input_tokens > 0
    assert control.details["referenceSources"] == [] and control.details["skillPath"] is None
    assert skill.plugins_digest != control.plugins_digest  # the supplied bytes count
    assert json.loads(bundle(skill, "prompt.json"))["user"].count("SKILL-TEXT-MARKER") == 1
    # Its evidence was kept in memory: no trial folder, the bundle whole and checked.
    assert not list((tmp_path / "trials").glob("*"))
    assert skill.evidence_uri is not None
    check = verify_archive(Path(skill.evidence_uri.removeprefix("file://")), skill.evidence_sha256)
    assert check.ok, check.problems
    kinds = [json.loads(line)["kind"] for line in bundle(skill, "trace.jsonl").splitlines()]
    assert kinds == ["model_request", "model_response", "trace_end"]
    assert json.loads(bundle(skill, "result.json"))["verdict"] == "pass"
    assert bundle(skill, "session.jsonl").strip(), "the trace's session"
    assert [c["status"] for c in json.loads(bundle(control, "grader.json"))["checks"]] == [
        "pass",
        "pass",
        "pass",
        "fail",
        "fail",
        "pass",
    ]


def test_a_missing_skill_file_blocks_before_any_model_call(
    tmp_path: Path, server: ScriptedServer
) -> None:
    path = suite_file(tmp_path)
    (tmp_path / "skills" / "tdd" / "refs" / "why.md").unlink()
    for arm in ("skill", "control"):
        result = run_case(tmp_path, server, arm, path)
        assert result.verdict is Verdict.BLOCKED_SETUP
        assert "missing reference refs/why.md" in result.reason
    assert server.requests == []


def test_a_provider_failure_is_infra_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANGAR_DECISION_KEY", "sk-test")
    failing = ScriptedServer(
        Script(conversations=[Conversation(replies=[Reply(status=503)])])
    ).start()
    try:
        result = run_case(tmp_path, failing, "skill")
    finally:
        failing.shutdown()
    assert result.verdict is Verdict.INFRA_ERROR and result.provider_error is not None
    assert result.reason.startswith("provider failure: model 'decider' failed upstream")


# -- the choice grader, rule by rule -------------------------------------------------------------


def answer(selected: Any, explanation: Any = "Because the skill says so, plainly.") -> str:
    return json.dumps({"selected": selected, "explanation": explanation})


@pytest.mark.parametrize(
    ("raw", "failed"),
    [
        (answer(["A", "C"]), []),
        ("Sure:\n```json\n" + answer(["C", "A"]) + "\n```\nDone.", []),
        (answer(["A"]), ["no expected choice is missing"]),
        (answer(["A", "B", "C"]), ["no extra choice is selected"]),
        (answer(["A", "C", "Q"]), ["no invented choice id"]),
        (answer(["A", "C", "A"]), ["no choice is selected twice"]),
        (answer(["A", "C"], "short"), ["explanation has at least 20 characters"]),
        ("A and C", ["answer is a JSON object {selected: [choice ids], explanation: text}"]),
        (answer("A,C"), ["answer is a JSON object {selected: [choice ids], explanation: text}"]),
        (
            answer(["A", "C"], None),
            ["answer is a JSON object {selected: [choice ids], explanation: text}"],
        ),
        ("[1, 2]", ["answer is a JSON object {selected: [choice ids], explanation: text}"]),
    ],
)
def test_each_grader_rule(raw: str, failed: list[str]) -> None:
    graded = choice.grade(raw, ["A", "B", "C"], ["A", "C"])
    assert graded.correct is (not failed)
    assert [c.requirement for c in graded.checks if c.status == "fail"] == failed
    assert set(graded.reasons) == set(failed)
    if failed and failed[0].startswith("answer is"):  # malformed: the rest is not assessed
        assert {c.status for c in graded.checks[1:]} == {"unassessed"}


# -- offline controls ----------------------------------------------------------------------------


def test_offline_controls_hold_on_the_example_suite() -> None:
    result = runner.invoke(app, ["decision", "controls", str(EXAMPLES / "decision" / "suite.yaml")])
    assert result.exit_code == 0, result.output
    assert "82/82 controls held over 8 cases" in result.output


def test_offline_controls_catch_a_permissive_grader(monkeypatch: pytest.MonkeyPatch) -> None:
    real = choice.grade

    def permissive(raw: str, choices: list[str], expected: list[str]) -> choice.Grade:
        graded = real(raw, choices, expected)  # accepts an extra choice: a subset is enough
        fine = {choice.RULES[4]}
        if set(graded.reasons) <= fine:
            return graded.model_copy(update={"correct": True, "reasons": {}})
        return graded

    monkeypatch.setattr(choice, "grade", permissive)
    result = runner.invoke(app, ["decision", "controls", str(EXAMPLES / "decision" / "suite.yaml")])
    assert result.exit_code == 1
    assert "toggle" in result.output  # the single-choice toggles that add a choice got through


# -- in a sweep ----------------------------------------------------------------------------------


def test_a_sweep_expands_cases_into_both_arms(tmp_path: Path) -> None:
    from hangar.scheduler.sweep import load_sweep

    suite_file(tmp_path)
    (tmp_path / "sweep.yaml").write_text(
        yaml.safe_dump({"scenarios": ["suite.yaml"], "models": ["m1", "m2"], "repeats": 2})
    )
    sweep = load_sweep(tmp_path / "sweep.yaml")
    assert sweep.size == 2 * 2 * 2 * 2 and not sweep.of_kind("execution")
    trials = list(sweep.trials("file:///ev"))
    assert len(trials) == sweep.size and len({t.trial_key for t in trials}) == sweep.size
    assert {(t.arm, t.agent.name) for t in trials} == {("skill", "prompt"), ("control", "prompt")}
    narrowed = sweep.narrowed("^two-", 1)
    assert narrowed.size == 1 * 2 * 2 * 1 and [c.id for c in narrowed.of_kind("decision")] == [
        "two-right"
    ]


def test_a_json_suite_loads_in_a_sweep_as_its_yaml_twin(tmp_path: Path) -> None:
    """The guide says "one YAML or JSON file": the kind is known by what the file says."""
    from hangar.scheduler.sweep import load_sweep

    data = yaml.safe_load(suite_file(tmp_path).read_text())
    (tmp_path / "suite.json").write_text(json.dumps(data, indent="\t"))  # tabs: JSON, not YAML
    sweeps = {}
    for name in ("suite.yaml", "suite.json"):
        (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({"scenarios": [name], "models": ["m"]}))
        sweep = load_sweep(tmp_path / "sweep.yaml")
        assert not sweep.unloadable, sweep.unloadable
        sweeps[name] = sorted((t.id, t.digest) for t in sweep.of_kind("decision"))
    assert sweeps["suite.json"] == sweeps["suite.yaml"] and len(sweeps["suite.json"]) == 2
    (tmp_path / "suite.json").write_text('{"kind": "decision", "cases": [}')
    sweep = load_sweep(tmp_path / "sweep.yaml")
    (bad,) = sweep.unloadable
    assert "suite.json:1:32: malformed JSON" in bad.error


@pytest.mark.ray
@pytest.mark.slow
def test_a_json_suite_with_tdd_case_ids_runs_through_hangar_run(tmp_path: Path) -> None:
    """The example suite written as JSON, its `tdd:` cases selected, run by the real CLI."""
    shutil.copytree(EXAMPLES / "decision", tmp_path / "decision")
    folder = tmp_path / "decision"
    data = yaml.safe_load((folder / "suite.yaml").read_text())
    (folder / "suite.json").write_text(json.dumps(data, indent=2))
    (folder / "suite.yaml").unlink()
    server = ScriptedServer(Script.load(folder / "scripted-model.yaml")).start()
    sweep = yaml.safe_load((folder / "sweep.yaml").read_text())
    sweep["scenarios"] = ["suite.json"]
    sweep["models"][0]["base_url"] = f"{server.url}/v1"
    sweep |= {"store": f"sqlite:///{tmp_path}/r.db", "evidence": (tmp_path / "ev").as_uri()}
    (folder / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    try:
        run = runner.invoke(
            app,
            ["run", str(folder / "sweep.yaml"), "--json", "--allow-failures", "--filter", "tdd:"],
        )
    finally:
        server.shutdown()
    assert run.exit_code == 0, run.output
    outcome = json.loads(run.stdout)
    assert outcome["total"] > 0 and outcome["done"] == outcome["total"]
    assert outcome["verdicts"].get("blocked_setup", 0) == 0
    ids = {r.scenario_id for r in ResultsStore(f"sqlite:///{tmp_path}/r.db").results(sweep["id"])}
    assert ids and all(i.startswith("tdd:") for i in ids), ids


@pytest.mark.ray
@pytest.mark.slow
def test_the_example_suite_on_ray_with_roles(ray_local: None, tmp_path: Path) -> None:
    """The demo's suite, run by `hangar run` on Ray; the report with fixed roles."""
    shutil.copytree(EXAMPLES / "decision", tmp_path / "decision")
    script = Script.load(tmp_path / "decision" / "scripted-model.yaml")
    server = ScriptedServer(script).start()
    sweep = tmp_path / "decision" / "sweep.yaml"
    data = yaml.safe_load(sweep.read_text())
    data["models"][0]["base_url"] = f"{server.url}/v1"
    data["store"] = f"sqlite:///{tmp_path}/r.db"
    data["evidence"] = (tmp_path / "ev").as_uri()
    sweep.write_text(yaml.safe_dump(data))
    try:
        part = runner.invoke(
            app, ["run", str(sweep), "--json", "--allow-failures", "--filter-pattern", "review:"]
        )
        run = runner.invoke(app, ["run", str(sweep), "--json", "--allow-failures"])
    finally:
        server.shutdown()
    assert part.exit_code == 0, part.output
    assert json.loads(part.stdout)["total"] == 4 * 2  # four review cases, two arms
    assert run.exit_code == 0, run.output
    outcome = json.loads(run.stdout)
    assert (outcome["total"], outcome["skipped"], outcome["done"]) == (16, 8, 8)
    out = tmp_path / "report.json"
    report = runner.invoke(
        app,
        [
            "report",
            str(sweep),
            "--format",
            "json",
            "--out",
            str(out),
            "--baseline",
            "control",
            "--candidate",
            "skill",
        ],
    )
    assert report.exit_code == 0, report.output
    data = json.loads(out.read_text())
    (c,) = [c for c in data["comparisons"] if c["metric"] == "correct"]
    assert (c["baseline"], c["candidate"], c["roles"]) == ("control", "skill", True)
    assert (
        c["sentence"] == "control is shown to lose by at least 15 points on correct"
    )  # suite margin
    assert c["difference"] == pytest.approx(0.75) and c["ci_low"] >= 0.15
    groups = {g["arm"]: g for g in data["groups"]}
    (correct,) = [m for m in groups["skill"]["metrics"] if m["metric"] == "correct"]
    assert {k: correct[k] for k in ("metric", "n", "mean")} == {
        "metric": "correct",
        "n": 8,
        "mean": 1.0,
    }
    assert correct["ci_low"] < 1.0 and correct["ci_high"] == 1.0
    # The margin is the data's: the sweep named by its id, and the viewer, say the same.
    roles = ["--baseline", "control", "--candidate", "skill"]
    by_id = runner.invoke(
        app, ["report", outcome["sweep"], "--store", f"sqlite:///{tmp_path}/r.db", *roles]
    )
    assert by_id.exit_code == 0, by_id.output
    assert "lose by at least 15 points on correct" in by_id.output
    from hangar.catalog import Catalog
    from hangar.store import ResultsStore
    from hangar.viewer.data import ReportCache

    cached = ReportCache(Catalog(ResultsStore(f"sqlite:///{tmp_path}/r.db"))).report(
        outcome["sweep"]
    )
    assert cached is not None
    assert cached.report.margin == pytest.approx(0.15)
    strict = runner.invoke(
        app,
        ["report", str(sweep), "--baseline", "control", "--candidate", "skill", "--margin", "90"],
    )
    assert "control is not shown to lose by 90 points" in strict.output
