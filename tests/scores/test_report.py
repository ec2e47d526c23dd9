"""Reports, baselines, regressions, sealed suites and exports on a synthetic sweep."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hangar.cli import app
from hangar.errors import ConfigError
from hangar.results import CheckOutcome, Score, TrialResult, Usage, Verdict
from hangar.scheduler.sweep import load_sweep
from hangar.scores import stats
from hangar.scores.render import render_html, render_markdown, render_text
from hangar.scores.report import Report, build_report
from hangar.store import ResultsStore
from tests.browser import dom, painted

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def trial(
    sweep: str,
    scenario: str,
    arm: str,
    repeat: int,
    verdict: Verdict,
    *,
    agent: str = "codex",
    cost: float = 0.01,
) -> TrialResult:
    start = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(minutes=repeat)
    return TrialResult(
        sweep=sweep,
        trial_key=f"{sweep}-{scenario}-{arm}-{agent}-{repeat}".ljust(64, "0")[:64],
        scenario_id=scenario,
        scenario_digest="d" * 64,
        agent=agent,
        model="m1",
        arm=arm,
        repeat=repeat,
        verdict=verdict,
        reason="r",
        completed=True,
        checks=(
            CheckOutcome(
                requirement="tests pass",
                status="pass" if verdict is Verdict.PASS else "fail",
                evidence=("e",),
            ),
        ),
        usage=Usage(input_tokens=100, output_tokens=10, cost_usd=cost),
        # What an execution trial scores: pass 1 or 0 (nothing for the unjudged).
        scores=(
            (Score(metric="pass", value=float(verdict is Verdict.PASS)),)
            if verdict in (Verdict.PASS, Verdict.FAIL)
            else ()
        ),
        started_at=start,
        finished_at=start + timedelta(seconds=10 + repeat),
    )


def skill_sweep(sweep: str = "sw", skill_fails: bool = False) -> list[TrialResult]:
    """Six scenarios x two repeats x arms skill/control; skill passes far more."""
    rows = []
    for s in range(6):
        for rep in range(2):
            skill_pass = not skill_fails and (s, rep) != (5, 1)
            rows.append(
                trial(sweep, f"s{s}", "skill", rep, Verdict.PASS if skill_pass else Verdict.FAIL)
            )
            rows.append(
                trial(sweep, f"s{s}", "control", rep, Verdict.PASS if s == 0 else Verdict.FAIL)
            )
    rows.append(trial(sweep, "s6", "skill", 0, Verdict.VOID))
    rows.append(trial(sweep, "s6", "control", 0, Verdict.BLOCKED_SETUP))
    rows.append(trial(sweep, "s7", "control", 0, Verdict.INFRA_ERROR))
    return rows


@pytest.fixture
def store(tmp_path: Path) -> ResultsStore:
    s = ResultsStore(f"sqlite:///{tmp_path}/r.db")
    s.record(skill_sweep("sw"))
    return s


def test_group_scores(store: ResultsStore) -> None:
    report = build_report("sw", store.results("sw"))
    groups = {g.arm: g for g in report.groups}
    skill, control = groups["skill"], groups["control"]
    assert (skill.passes, skill.trials) == (11, 12) and (control.passes, control.trials) == (2, 12)
    assert skill.pass_rate == stats.wilson(11, 12)
    assert skill.verdicts == {"pass": 11, "fail": 1, "void": 1}
    assert control.verdicts == {"pass": 2, "fail": 10, "blocked_setup": 1, "infra_error": 1}
    assert skill.pass_at_k[2] == pytest.approx(1.0)  # every scenario passed at least once
    assert skill.pass_hat_k[2] == pytest.approx(5 / 6)
    assert skill.cost_per_pass == pytest.approx(13 * 0.01 / 11)  # uncounted attempts cost too
    assert skill.duration_p50_s == pytest.approx(10.5)


def test_comparison_and_decision(store: ResultsStore) -> None:
    report = build_report("sw", store.results("sw"), margin=0.2)
    (c,) = report.comparisons
    assert (c.factor, c.candidate, c.baseline, c.scenarios) == ("arm", "skill", "control", 6)
    assert (c.metric, c.roles) == ("pass", False)
    assert c.difference == pytest.approx((11 / 2 - 2 / 2) / 6)
    assert c.sentence == "skill is shown to beat control by at least 20 points on pass rate"
    strict = build_report("sw", store.results("sw"), margin=0.9)
    assert strict.comparisons[0].sentence == "skill is not shown to beat control by 90 points"


def test_one_scenario_claims_no_interval() -> None:
    """Over one task a paired difference has no spread: no interval, no 'shown to beat'."""
    rows = [trial("one", "s0", arm, r, v) for r in range(3) for arm, v in
            (("skill", Verdict.PASS), ("control", Verdict.FAIL))]  # fmt: skip
    report = build_report("one", rows)
    (c,) = report.comparisons
    assert c.scenarios == 1 and c.difference == 1.0 and (c.ci_low, c.ci_high) == (-1.0, 1.0)
    assert c.sentence == "skill is not shown to beat control by 5 points"
    text = render_text(report)
    assert "+100.0 points, no interval (2 or more scenarios are needed)" in text
    assert "[+100.0, +100.0]" not in text and "[+100.0, +100.0]" not in render_markdown(report)


def test_metrics_that_say_one_thing_are_compared_once() -> None:
    """A SWE-bench trial's reward and resolved are its pass: one comparison says all three;
    a metric that differs (the share of tests) keeps its own."""
    rows = []
    for s in range(4):
        for arm, ok in (("skill", True), ("control", s == 0)):
            row = trial("swe", f"s{s}", arm, 0, Verdict.PASS if ok else Verdict.FAIL)
            same = [Score(metric=m, value=float(ok)) for m in ("resolved", "reward")]
            share = Score(metric="fail_to_pass", value=1.0 if ok else 0.5)
            rows.append(row.model_copy(update={"scores": (*row.scores, *same, share)}))
    report = build_report("swe", rows)
    said = {c.metric: c.same_as for c in report.comparisons}
    assert said == {"pass": ["resolved", "reward"], "fail_to_pass": []}
    assert "pass = resolved = reward, 4 scenarios" in render_text(report)


def test_voided_trials_are_listed(store: ResultsStore) -> None:
    report = build_report("sw", store.results("sw"))
    assert [v.scenario for v in report.voided] == ["s6"]
    assert "void" in render_text(report) and "Voided trials" in render_markdown(report)


def test_json_form_round_trips(store: ResultsStore, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = runner.invoke(
        app, ["report", "sw", "--format", "json", "--out", str(out), "--store", store.url]
    )
    assert result.exit_code == 0, result.output
    report = Report.model_validate_json(out.read_text())
    assert {g.arm for g in report.groups} == {"skill", "control"}


def test_text_report_names_the_decision(store: ResultsStore) -> None:
    result = runner.invoke(app, ["report", "sw", "--store", store.url, "--margin", "20"])
    assert result.exit_code == 0
    assert "skill is shown to beat control by at least 20 points on pass rate" in result.output


def test_export_jsonl(store: ResultsStore, tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    assert (
        runner.invoke(app, ["export", "sw", "--out", str(out), "--store", store.url]).exit_code == 0
    )
    lines = out.read_text().splitlines()
    assert len(lines) == 27 and TrialResult.model_validate(json.loads(lines[0]))
    piped = runner.invoke(app, ["export", "sw", "--out", "-", "--store", store.url])
    assert piped.exit_code == 0 and not Path("-").exists()
    assert piped.stdout.splitlines() == lines  # '-' is stdout; the count goes to stderr


def test_unnamed_baselines_are_the_next_versions(store: ResultsStore, tmp_path: Path) -> None:
    """Store baselines and a format's folder of them are one mechanism: the next version
    when unnamed, a taken name refused without touching what is kept."""
    from hangar.scores.kept import FolderBaselines

    url = store.url
    for expected in ("baseline-v1", "baseline-v2"):
        made = runner.invoke(app, ["baseline", "create", "--from", "sw", "--store", url])
        assert made.exit_code == 0 and f"baseline {expected}:" in made.output, made.output
    listed = runner.invoke(app, ["baseline", "list", "--store", url]).output
    assert listed.index("baseline-v1") < listed.index("baseline-v2")
    folder = FolderBaselines(tmp_path / "baselines", ".yaml")
    assert folder.keep(None, "a: 1\n") == "baseline-v1" and folder.keep("x", "b\n") == "x"
    with pytest.raises(ConfigError, match=r"'x' exists .* immutable .*baseline-v2"):
        folder.keep("x", "overwritten\n")
    assert folder.read("x") == "b\n" and folder.names() == ["baseline-v1", "x"]
    with pytest.raises(ConfigError, match=r"no baseline 'y' .*kept: baseline-v1, x"):
        folder.read("y")


def test_baseline_is_immutable_and_compare_gates(store: ResultsStore) -> None:
    url = store.url
    assert (
        runner.invoke(app, ["baseline", "create", "v1", "--from", "sw", "--store", url]).exit_code
        == 0
    )
    again = runner.invoke(app, ["baseline", "create", "v1", "--from", "sw", "--store", url])
    assert isinstance(again.exception, ConfigError) and "immutable" in str(again.exception)
    same = runner.invoke(app, ["compare", "--baseline", "v1", "--candidate", "sw", "--store", url])
    assert same.exit_code == 0 and "no regression" in same.output
    store.record(skill_sweep("worse", skill_fails=True))
    worse = runner.invoke(
        app, ["compare", "--baseline", "v1", "--candidate", "worse", "--store", url]
    )
    assert worse.exit_code == 1 and "regression(s) of worse against v1" in worse.output
    as_json = runner.invoke(
        app,
        ["compare", "--baseline", "v1", "--candidate", "worse", "--store", url, "--format", "json"],
    )
    assert as_json.exit_code == 1
    kinds = {r["kind"] for r in json.loads(as_json.output)["regressions"]}
    assert kinds == {"group", "scenario", "requirement"}
    loose = runner.invoke(
        app,
        [
            "compare",
            "--baseline",
            "v1",
            "--candidate",
            "worse",
            "--store",
            url,
            "--group-drop",
            "1",
            "--scenario-drop",
            "2",
            "--requirement-drop",
            "1",
        ],
    )
    assert loose.exit_code == 0


def _version(
    rows: list[TrialResult], scenario: str = "", agent: str = "", **update: str
) -> list[TrialResult]:
    """`rows` with the given fields changed where the scenario (or agent) matches."""
    return [
        r.model_copy(update=update)
        if (scenario and r.scenario_id == scenario) or (agent and r.agent == agent)
        else r
        for r in rows
    ]


def test_a_changed_scenario_is_not_mixed_into_a_report() -> None:
    rows = skill_sweep("sw")
    # An earlier run of the sweep, before s1's file changed: its trials fail everywhere.
    old = [
        r.model_copy(
            update={
                "scenario_digest": "e" * 64,
                "trial_key": "old" + r.trial_key[3:],
                "verdict": Verdict.FAIL,
                "finished_at": r.finished_at - timedelta(days=1),
            }
        )
        for r in rows
        if r.scenario_id == "s1"
    ]
    report = build_report("sw", rows + old)
    assert report.groups == build_report("sw", rows).groups  # the old version is not mixed in
    (aside,) = report.not_comparable
    assert (aside.kind, aside.subject, aside.kept, aside.other) == (
        "scenario",
        "s1",
        "d" * 64,
        ["e" * 64],
    )
    assert aside.trials == 4 and "4 trial(s) of the older version set aside" in aside.sentence
    assert aside.sentence in render_text(report) and aside.sentence in render_markdown(report)


def test_changed_agent_settings_are_not_mixed_into_a_report() -> None:
    rows = [r.model_copy(update={"agent_digest": "a" * 64}) for r in skill_sweep("sw")]
    older = [
        r.model_copy(
            update={
                "agent_digest": "b" * 64,
                "trial_key": "old" + r.trial_key[3:],
                "finished_at": r.finished_at - timedelta(days=1),
            }
        )
        for r in rows[:4]
    ]
    report = build_report("sw", rows + older)
    assert [(a.kind, a.subject, a.trials) for a in report.not_comparable] == [("agent", "codex", 4)]


def test_blocked_trials_are_listed() -> None:
    report = build_report("sw", skill_sweep("sw"))
    assert [(b.scenario, b.trials) for b in report.blocked] == [("s6", 1)]
    assert "not run" in render_text(report) and "Not run (blocked_setup)" in render_markdown(report)


def test_a_group_that_never_ran_has_no_rate_and_says_why() -> None:
    refused = "provider failure: the provider refused the key in OPENAI_API_KEY (401)"
    rows = [
        trial("sw", f"s{i}", "skill", 0, Verdict.INFRA_ERROR).model_copy(update={"reason": refused})
        for i in range(2)
    ]
    rows += [trial("sw", "s0", "control", 0, Verdict.PASS)]
    rows += [
        trial("sw", "s1", "control", 0, Verdict.VERIFIER_ERROR).model_copy(
            update={"reason": "host verifier crashed (exit 1): RuntimeError: boom"}
        )
    ]
    report = build_report("sw", rows)
    skill = next(g for g in report.groups if g.arm == "skill")
    control = next(g for g in report.groups if g.arm == "control")
    assert skill.trials == 0 and skill.pass_rate is None
    assert [(u.verdict, u.trials, u.reason) for u in skill.uncounted] == [
        ("infra_error", 2, refused)
    ]
    # a verifier's failure is in no rate: control passed 1 of 1 counted trial
    assert control.trials == 1 and control.pass_rate is not None
    assert control.pass_rate.estimate == 1.0
    assert [u.verdict for u in control.uncounted] == ["verifier_error"]
    text = render_text(report, width=240)
    line = next(x for x in text.splitlines() if x.startswith("│ codex") and "skill" in x)
    assert "n/a" in line and "0.0%" not in line
    assert f"not counted codex · m1 · skill: infra_error x2: {refused}" in text
    assert "verifier_error x1: host verifier crashed" in render_markdown(report)
    page = render_html(report)
    assert "n/a" in page and "RuntimeError: boom" in page


def test_compare_leaves_out_what_is_not_comparable(tmp_path: Path) -> None:
    from hangar.scores.baseline import Thresholds, compare, snapshot

    digests = {"agent_digest": "a" * 64, "plugins_digest": "p" * 64}
    base = [r.model_copy(update=digests) for r in skill_sweep("sw")]
    worse = [r.model_copy(update=digests) for r in skill_sweep("worse", skill_fails=True)]
    before = snapshot("v1", "sw", base)
    assert before.versions is not None and before.versions.scenarios["s1"] == "d" * 64
    # Every scenario changed: nothing is comparable, so nothing regresses, and all is listed.
    changed = snapshot(
        "c", "worse", [r.model_copy(update={"scenario_digest": "e" * 64}) for r in worse]
    )
    outcome = compare(before, changed, Thresholds())
    assert outcome.regressions == []
    assert {a.subject for a in outcome.not_comparable} == {f"s{i}" for i in range(8)}
    # The same candidate at the baseline's versions regresses.
    same = compare(before, snapshot("c", "worse", worse), Thresholds())
    assert {r.kind for r in same.regressions} == {"group", "scenario", "requirement"}
    assert same.not_comparable == []
    # One scenario's plugins changed: it is left out of the group rate, its regression too.
    plugins = _version(worse, scenario="s2", plugins_digest="q" * 64, scenario_digest="f" * 64)
    partial = compare(before, snapshot("c", "worse", plugins), Thresholds())
    kinds = {(a.kind, a.subject) for a in partial.not_comparable}
    assert kinds == {("plugins", "s2 · skill"), ("plugins", "s2 · control")}
    assert "s2" not in {r.subject for r in partial.regressions}
    assert partial.regressions  # the other five scenarios still regress
    # The agent's settings changed: its groups are not compared at all.
    agent = _version(worse, agent="codex", agent_digest="z" * 64)
    moved = compare(before, snapshot("c", "worse", agent), Thresholds())
    assert moved.regressions == [] and [a.kind for a in moved.not_comparable] == ["agent"]


def test_compare_exit_status_when_not_comparable(store: ResultsStore) -> None:
    url = store.url
    assert (
        runner.invoke(app, ["baseline", "create", "v1", "--from", "sw", "--store", url]).exit_code
        == 0
    )
    store.record(
        [
            r.model_copy(update={"sweep": "edited", "scenario_digest": "e" * 64})
            for r in skill_sweep("edited")
        ]
    )
    result = runner.invoke(
        app, ["compare", "--baseline", "v1", "--candidate", "edited", "--store", url]
    )
    assert result.exit_code == 3, result.output
    assert "not comparable: the scenario s0 changed" in result.output


def _scored(sweep: str, correct: list[int], clarity: list[float]) -> list[TrialResult]:
    """Decision-like trials: metric correct (binary) and clarity (points 1-5) per case."""
    rows = []
    for i, (ok, points) in enumerate(zip(correct, clarity, strict=True)):
        rows.append(
            trial(sweep, f"c{i}", "skill", 0, Verdict.PASS if ok else Verdict.FAIL).model_copy(
                update={
                    "kind": "prompt",
                    "scores": (
                        Score(metric="correct", value=float(ok)),
                        Score(metric="clarity", value=points, scale="points", low=1, high=5),
                    ),
                }
            )
        )
    return rows


def test_metrics_are_summarised_by_their_scale() -> None:
    rows = _scored("m", [1, 1, 0, 1], [4.0, 5.0, 2.0, 3.0])
    rows.append(
        rows[0].model_copy(
            update={
                "trial_key": "x" * 64,
                "scenario_id": "c9",
                "scores": (Score(metric="clarity", value=None, scale="points", low=1, high=5),),
            }
        )
    )
    (group,) = build_report("m", rows).groups
    metrics = {m.metric: m for m in group.metrics}
    correct, clarity = metrics["correct"], metrics["clarity"]
    assert (correct.n, correct.mean, correct.scale) == (4, 0.75, "binary")
    assert (correct.ci_low, correct.ci_high) == (stats.wilson(3, 4).low, stats.wilson(3, 4).high)
    assert (clarity.n, clarity.mean, clarity.unassessed) == (4, 3.5, 1)
    interval = stats.mean_interval([4.0, 5.0, 2.0, 3.0])
    assert (clarity.ci_low, clarity.ci_high) == (interval.low, interval.high)
    assert clarity.ci_low is not None and 2.0 <= clarity.ci_low < 3.5 < clarity.ci_high <= 5.0


def test_roles_fix_the_comparison_and_the_sentence() -> None:
    rows = [
        *[
            r.model_copy(update={"arm": "control", "trial_key": "c" + r.trial_key[1:]})
            for r in _scored("r", [0, 0, 0, 1, 0, 0], [2, 2, 1, 3, 2, 2])
        ],
        *_scored("r", [1, 1, 1, 1, 1, 0], [4, 5, 4, 4, 5, 3]),
    ]
    report = build_report("r", rows, margin=0.15, roles=("control", "skill"))
    by_metric = {c.metric: c for c in report.comparisons}
    assert set(by_metric) == {"correct", "clarity"}  # prompt trials: their own scores only
    c = by_metric["correct"]
    assert (c.baseline, c.candidate, c.roles) == ("control", "skill", True)
    assert c.difference == pytest.approx(4 / 6) and c.sentence == (
        "control is shown to lose by at least 15 points on correct"
    )
    points = by_metric["clarity"]  # 15 points of a 1-5 scale are 0.6
    assert points.margin == pytest.approx(0.6) and points.span == 4
    assert points.sentence == "control is shown to lose by at least 15 points on clarity"
    reverse = build_report("r", rows, margin=0.15, roles=("skill", "control"))
    assert {c.sentence for c in reverse.comparisons} == {"skill is not shown to lose by 15 points"}
    assert build_report("r", rows, roles=("nobody", "skill")).comparisons == []
    data = json.loads(report.model_dump_json())  # the JSON contract of DESIGN.md section 10
    for key in ("baseline", "candidate", "metric", "difference", "ci_low", "ci_high", "sentence"):
        assert key in data["comparisons"][0]
    for key in ("metric", "n", "mean", "ci_low", "ci_high"):
        assert key in data["groups"][0]["metrics"][0]


def test_baselines_gate_every_metric() -> None:
    from hangar.scores.baseline import Thresholds, compare, snapshot

    before = snapshot("v1", "a", _scored("a", [1, 1, 1, 1], [5, 5, 4, 5]))
    same = compare(
        before, snapshot("c", "b", _scored("b", [1, 1, 1, 1], [5, 5, 4, 5])), Thresholds()
    )
    assert same.regressions == []
    worse = compare(
        before, snapshot("c", "b", _scored("b", [0, 0, 1, 1], [2, 2, 4, 5])), Thresholds()
    )
    found = {(r.kind, r.metric, r.subject) for r in worse.regressions}
    assert ("group", "correct", "codex · m1 · skill") in found  # 100% -> 50%: over 0.3
    # 4.75 -> 3.25 on a 1-5 scale: a drop of 0.375 of its range, over 0.3.
    assert ("group", "clarity", "codex · m1 · skill") in found
    # One trial per case: a scenario can lose at most one trial's worth (not over 1.0).
    assert not [r for r in worse.regressions if r.kind == "scenario"]
    loose = compare(
        before,
        snapshot("c", "b", _scored("b", [0, 0, 1, 1], [2, 2, 4, 5])),
        Thresholds(group=0.6, task=0.5),
    )
    assert {(r.kind, r.metric, r.subject) for r in loose.regressions} == {
        ("scenario", "pass", "c0"),
        ("scenario", "pass", "c1"),
        ("scenario", "correct", "c0"),
        ("scenario", "correct", "c1"),
        ("scenario", "clarity", "c0"),  # 5 -> 2: 0.75 of the range
        ("scenario", "clarity", "c1"),
    }


def test_sealed_suite(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    shutil.copytree(EXAMPLES / "median", suite / "median")
    shutil.copytree(EXAMPLES / "repos", tmp_path / "repos")
    path = suite / "median" / "scenario.yaml"
    path.write_text(path.read_text().replace("../repos/", "../../repos/"))
    assert runner.invoke(app, ["suite", "seal", str(suite)]).exit_code == 0
    resealed = runner.invoke(app, ["suite", "seal", str(suite)])
    assert isinstance(resealed.exception, ConfigError) and "already sealed" in str(
        resealed.exception
    )
    assert runner.invoke(app, ["suite", "verify", str(suite)]).exit_code == 0
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"scenarios: [suite/]\nagents_file: {EXAMPLES}/agents.yaml\n")
    assert load_sweep(sweep).size == 2
    hidden = suite / "median" / "hidden" / "test_median_hidden.py"
    hidden.write_bytes(hidden.read_bytes().replace(b"== 2.5", b"== 2.6"))
    out = runner.invoke(app, ["suite", "verify", str(suite)])
    assert (
        out.exit_code == 1
        and "test_median_hidden.py: changed since the suite was sealed" in out.output
    )
    with pytest.raises(ConfigError, match=r"test_median_hidden\.py: changed since"):
        load_sweep(sweep)


def test_html_report_renders_in_chromium(store: ResultsStore, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render_html(build_report("sw", store.results("sw"))))
    shown = dom(page)
    assert 'id="plot-pass-rate"' in shown
    assert shown.count('class="bar"') >= 2 + 6 and 'id="plot-cost"' in shown
    assert "skill is shown to beat control" in shown
    colours = painted(page, "1300,2600")
    # the bars and points were painted: the palette's blue and orange, and the green of a gain
    assert {(0x3B, 0x6F, 0xB6), (0xD9, 0x82, 0x2B), (0x2F, 0x9E, 0x44)} <= colours


def test_every_pair_that_differs_in_one_factor_is_compared_once(tmp_path: Path) -> None:
    rows = []
    for agent in ("a1", "a2", "a3"):
        for arm in ("control", "skill"):
            for s in range(3):
                rows.append(
                    trial(
                        "many",
                        f"s{s}",
                        arm,
                        0,
                        Verdict.PASS if (agent, arm) != ("a1", "control") else Verdict.FAIL,
                        agent=agent,
                    )
                )
    report = build_report("many", rows)
    pairs = [(c.factor, c.within, frozenset((c.candidate, c.baseline))) for c in report.comparisons]
    assert len(pairs) == len(set(pairs)) == 3 + 2 * 3  # 3 arm pairs, 3 agent pairs per arm
