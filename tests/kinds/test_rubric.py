"""Rubric benchmarks (seed 002): the file formats, the structural checks, the judge, the
scores against hand computations and an independent kappa, regressions and baselines,
the dataset check, the reports (HTML in chromium), and the example folder on Ray."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from hangar.cli import app
from hangar.errors import ConfigError
from hangar.kinds.rubric.benchmark import load_benchmark
from hangar.kinds.rubric.checks import count_tokens, run_check, run_checks
from hangar.kinds.rubric.dataset_check import check_folder
from hangar.kinds.rubric.formats import (
    Baseline,
    Dimension,
    MaxTokens,
    Rubric,
    RubricFile,
    Thresholds,
    load,
    load_config,
)
from hangar.kinds.rubric.judge import judge_output, parse
from hangar.kinds.rubric.render import render_html
from hangar.kinds.rubric.report import (
    BenchmarkReport,
    PhaseResult,
    build_benchmark_report,
    compare_reports,
    read_report,
    regressions,
    write_baseline,
    write_report,
)
from hangar.kinds.rubric.scoring import calibrate, quadratic_kappa, score_sample, whole
from hangar.models import ModelSpec
from hangar.results import Score, TrialResult
from hangar.testing.scripted import Conversation, Reply, Script, ScriptedServer
from tests.browser import dom, painted

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sdd-benchmark"
runner = CliRunner()


def dimension(name: str, weight: float, **extra: Any) -> Dimension:
    return Dimension(
        name=name,
        weight=weight,
        description=f"DESC-{name}",
        anchors={1: f"bad {name}", 3: f"fair {name}", 5: f"great {name}"},
        **extra,
    )


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """A copy of the example benchmark folder."""
    folder = tmp_path / "sdd-benchmark"
    shutil.copytree(EXAMPLE, folder)
    return folder


# -- the file formats ---------------------------------------------------------------------------


def test_the_example_folder_loads_as_the_seed_writes_it(example: Path) -> None:
    bench = load_benchmark(example)
    assert list(bench.samples) == ["propose", "tasks"]
    propose = bench.samples["propose"]
    assert [s.id for s in propose] == [f"BENCH-PROP-00{i}" for i in range(1, 5)]
    assert propose[0].rubric.phase == "sdd-propose" and propose[0].skill_version == "1.1"
    # a skill without a version in its front matter is versioned by its digest
    assert bench.samples["tasks"][0].skill_version.startswith("sha256:")
    assert bench.judge.id == "scripted-judge" and not bench.ci_judge
    # the seed's own sample, as written in the seed
    assert propose[0].sample.input["project_context"]["test_coverage"] == "42%"
    assert propose[0].sample.scores == {
        "completeness": 5,
        "clarity": 5,
        "risk_coverage": 5,
        "actionability": 4,
        "overall": 4.75,
    }


@pytest.mark.parametrize(
    ("path", "edit", "words"),
    [
        (
            "datasets/propose/samples.yaml",
            lambda t: t.replace("difficulty: easy", "difficulty: trivial"),
            r"(?s)samples\.yaml.*field `dataset\.samples\.1\.difficulty` \(line 77\)",
        ),
        (
            "datasets/propose/samples.yaml",
            lambda t: t.replace(
                "      reference_output: |\n        ## Intent\n        Add JWT",
                "      reference_out: |\n        ## Intent\n        Add JWT",
            ),
            r"(?s)field `dataset\.samples\.1\.reference_output` \(line \d+\): required field",
        ),
        (
            "datasets/propose/rubric.yaml",
            lambda t: t.replace("weight: 0.20", "weight: 0.25"),
            r"(?s)rubric\.yaml.*weights must sum to 1, they sum to 1\.05",
        ),
        (
            "datasets/propose/rubric.yaml",
            lambda t: t.replace("name: clarity", "name: overall"),
            r"'overall' is the name of a sample score",
        ),
        (
            "datasets/tasks/rubric.yaml",
            lambda t: t.replace('pattern: "^\\\\d+\\\\."', 'pattern: "^(\\\\d+\\\\."'),
            r"field `rubric\.dimensions\.0\.checks` \(line \d+\).*not a regular expression",
        ),
        (
            "datasets/tasks/rubric.yaml",
            lambda t: t.replace("- has_section:", "- has_sectoin:"),
            r"(?s)rubric\.yaml.*checks\.0` \(line 37\): not a check: write one of has_section",
        ),
        (
            "config.yaml",
            lambda t: t.replace("max_samples_per_phase: 20", "max_samples_per_phase: none"),
            r"(?s)config\.yaml.*field `benchmark_run\.config\.max_samples_per_phase` \(line 18\)",
        ),
        (
            "config.yaml",
            lambda t: t.replace("{phase: 0.3, sample: 1.0, dimension: 0.5}", "{phase: 0.2}"),
            r"field `benchmark_run\.config\.regression` \(line 24\).*need a reason",
        ),
        ("datasets/propose/samples.yaml", lambda t: t + "\n  - [unclosed", r"samples\.yaml"),
    ],
)
def test_malformed_files_are_refused_naming_file_line_and_field(
    example: Path, path: str, edit: Any, words: str
) -> None:
    target = example / path
    target.write_text(edit(target.read_text()))
    with pytest.raises(ConfigError, match=words):
        load_benchmark(example)


def test_the_config_may_sit_at_the_top_level_and_skills_default_to_skills_folders(
    tmp_path: Path, example: Path
) -> None:
    data = yaml.safe_load((example / "config.yaml").read_text())["benchmark_run"]["config"]
    del data["skills"]
    (example / "config.yaml").write_text(yaml.safe_dump(data))
    bench = load_benchmark(example)  # skills/sdd-<phase>/SKILL.md
    assert bench.samples["propose"][0].skill is not None
    assert bench.samples["propose"][0].skill.path == "skills/sdd-propose/SKILL.md"
    shutil.rmtree(example / "skills" / "sdd-tasks")
    with pytest.raises(ConfigError, match=r"phase 'tasks' names no skill: add `skills:"):
        load_benchmark(example)


def test_a_configured_skill_that_is_missing_blocks_its_samples(example: Path) -> None:
    (example / "skills" / "sdd-tasks" / "SKILL.md").unlink()
    bench = load_benchmark(example)
    assert all(s.skill is None for s in bench.samples["tasks"])
    assert all(s.skill is not None for s in bench.samples["propose"])


def test_versions_track_sample_rubric_skill_and_judge(example: Path) -> None:
    before = {s.id: s.digest for s in load_benchmark(example).samples["propose"]}
    skill = example / "skills" / "sdd-propose" / "SKILL.md"
    skill.write_text(skill.read_text() + "\nOne more rule.\n")
    after = {s.id: s.digest for s in load_benchmark(example).samples["propose"]}
    assert all(before[k] != after[k] for k in before)
    ci = {s.id: s.digest for s in load_benchmark(example, judge_model="cheap").samples["propose"]}
    assert all(ci[k] != after[k] for k in ci)
    tasks = {s.id: s.digest for s in load_benchmark(example).samples["tasks"]}
    assert tasks == {s.id: s.digest for s in load_benchmark(example).samples["tasks"]}


def test_subsets_are_seeded_capped_and_splits_keep_holdout_out(example: Path) -> None:
    first = [s.id for s in load_benchmark(example, max_samples=2).samples["propose"]]
    again = [s.id for s in load_benchmark(example, max_samples=2).samples["propose"]]
    assert first == again and len(first) == 2
    bench = load_benchmark(example, max_samples=2)
    assert bench.skipped == {"propose": 2, "tasks": 2}
    train = load_benchmark(example, split="train")
    assert [s.id for s in train.samples["propose"]] == ["BENCH-PROP-001"]
    assert all(s.sample.split == "train" for ss in train.samples.values() for s in ss)
    only = load_benchmark(example, phases=["sdd-tasks"])
    assert list(only.samples) == ["tasks"]
    with pytest.raises(ConfigError, match=r"phases \['design'\] are not in config\.yaml"):
        load_benchmark(example, phases=["design"])


# -- structural checks --------------------------------------------------------------------------


OUTPUT = """## Intent
Do the thing.

## Risks
1. One. 2. not at line start
2. Two.
3. Three.

Refs: SPEC-12
"""


@pytest.mark.parametrize(
    ("check", "passed"),
    [
        ({"has_section": "## Intent"}, True),
        ({"has_section": "## Scope"}, False),
        ({"has_section": "## Risk"}, False),  # a heading is a whole line
        ({"min_count": 3, "pattern": "^\\d+\\."}, True),
        ({"min_count": 4, "pattern": "^\\d+\\."}, False),  # "2." mid-line does not count
        ({"references_pattern": "SPEC-\\d+"}, True),
        ({"references_pattern": "TICKET-\\d+"}, False),
        ({"no_placeholder": "\\{TODO\\}|\\[TBD\\]"}, True),
    ],
)
def test_each_structural_check(check: dict[str, Any], passed: bool) -> None:
    dim = dimension("d", 1.0, checks=(check,))
    assert run_check(dim.checks[0], OUTPUT)[0] is passed


def test_placeholders_and_the_token_budget() -> None:
    dim = dimension("d", 1.0, checks=({"no_placeholder": "\\{TODO\\}|\\[TBD\\]"},))
    passed, detail = run_check(dim.checks[0], OUTPUT + "Owner: [TBD]\n")
    assert not passed and "[TBD]" in detail
    # o200k_base, offline: "hello world" is two tokens, "Hello, world!" four
    assert (count_tokens("hello world"), count_tokens("Hello, world!")) == (2, 4)
    n = count_tokens(OUTPUT)
    assert run_check(MaxTokens(max_tokens=n), OUTPUT)[0]
    assert not run_check(MaxTokens(max_tokens=n - 1), OUTPUT)[0]


# -- the judge ----------------------------------------------------------------------------------


def judge_server(conversations: list[Conversation]) -> ScriptedServer:
    return ScriptedServer(Script(conversations=conversations)).start()


@pytest.fixture
def judge_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANGAR_JUDGE_KEY", "sk-judge")


def judge_model(server: ScriptedServer, price: dict[str, float] | None = None) -> ModelSpec:
    return ModelSpec.model_validate(
        {
            "id": "judge-1",
            "base_url": f"{server.url}/v1",
            "api_key_env": "HANGAR_JUDGE_KEY",
            "price": price or {"input": 1.0, "output": 2.0},
        }
    )


def said(score: int | str) -> Reply:
    return Reply(
        content=f"Score (1-5): {score}\nJustification: because.", usage={"input": 100, "output": 10}
    )  # type: ignore[arg-type]


def test_the_judge_asks_per_dimension_in_both_orderings(judge_key: None) -> None:
    dims = [dimension("completeness", 0.6), dimension("clarity", 0.4)]
    server = judge_server(
        [
            Conversation(match="DESC-completeness\n\n## Reference Output", replies=[said(5)]),
            Conversation(match="DESC-completeness\n\n## Candidate Output", replies=[said(3)]),
            Conversation(match="DESC-clarity", replies=[said(4)]),
        ]
    )
    try:
        judged = judge_output(judge_model(server), "sdd-propose", dims, "REF-TEXT", "CAND-TEXT")
    finally:
        server.shutdown()
    users = [
        next(m["content"] for m in r["body"]["messages"] if m["role"] == "user")
        for r in server.requests
    ]
    assert len(users) == 4  # one call per dimension and ordering, never one for all
    # (asked at once, so in any order: put them in the judge's order)
    users.sort(key=lambda u: ("DESC-clarity" in u, u.index("## Candidate") < u.index("## Ref")))
    for text, dim in zip(
        users, ["completeness", "completeness", "clarity", "clarity"], strict=True
    ):
        assert f"Score the following sdd-propose output on the dimension: {dim}." in text
        assert f"DESC-{dim}" in text and f"1: bad {dim}\n3: fair {dim}\n5: great {dim}" in text
        assert "Score (1-5): \nJustification (1-2 sentences):" in text
        other = "clarity" if dim == "completeness" else "completeness"
        assert f"DESC-{other}" not in text  # each dimension independently
    first, second = users[0], users[1]
    assert first.index("## Reference Output (known good)\nREF-TEXT") < first.index(
        "## Candidate Output (to score)\nCAND-TEXT"
    )
    assert second.index("## Candidate Output") < second.index("## Reference Output")
    verdict = {v.dimension: v for v in judged.verdicts}
    assert (verdict["completeness"].score, verdict["completeness"].gap) == (4.0, 2.0)
    assert (verdict["clarity"].score, verdict["clarity"].gap) == (4.0, 0.0)
    # metered: 4 calls of 100 in, 10 out at $1 / $2 per 1M tokens
    assert (judged.usage.input_tokens, judged.usage.output_tokens) == (400, 40)
    assert judged.usage.cost_usd == pytest.approx(4 * (100 * 1e-6 + 10 * 2e-6))


def test_an_unparsable_answer_is_asked_again_then_left_unassessed(judge_key: None) -> None:
    dims = [dimension("clarity", 0.5), dimension("risk", 0.5)]
    rambling = Reply(content="It is rather good, I would say.")
    server = judge_server(
        [
            # clarity: the first answer does not parse, the follow-up does
            Conversation(match="DESC-clarity", replies=[rambling, said(4)]),
            # risk: a score off the scale, twice: unassessed
            Conversation(match="DESC-risk", replies=[said(7)]),
        ]
    )
    try:
        judged = judge_output(judge_model(server), "sdd-propose", dims, "REF", "CAND")
    finally:
        server.shutdown()
    verdict = {v.dimension: v for v in judged.verdicts}
    assert verdict["clarity"].score == 4.0
    assert [len(o.answers) for o in verdict["clarity"].orderings] == [2, 2]
    assert verdict["risk"].score is None and verdict["risk"].gap is None  # never made up
    assert all(len(o.answers) == 2 for o in verdict["risk"].orderings)
    assert len(server.requests) == 8  # each ordering asked at most twice
    # a follow-up continues its own conversation (the calls run at once, in any order)
    follow_ups = [
        r["body"]["messages"]
        for r in server.requests
        if len(r["body"]["messages"]) > 2 and "DESC-clarity" in r["body"]["messages"][1]["content"]
    ]
    assert len(follow_ups) == 2
    follow_up = follow_ups[0]
    assert [m["role"] for m in follow_up] == ["system", "user", "assistant", "user"]
    assert follow_up[2]["content"] == "It is rather good, I would say."
    assert "Score (1-5): <a whole number from 1 to 5>" in follow_up[3]["content"]
    scores = score_sample(Rubric(phase="p", version="1", dimensions=tuple(dims)), [], judged)
    assert scores.dimensions == {"clarity": 4.0, "risk": None}
    assert scores.judge is None and scores.overall is None


@pytest.mark.parametrize(
    ("answer", "parsed"),
    [
        ("Score (1-5): 4\nJustification (1-2 sentences): Solid.", (4.0, "Solid.")),
        ("**Score (1-5):** 3\nJustification: Thin on risks.", (3.0, "Thin on risks.")),
        ("score: 5", (5.0, "")),
        ("Score (1-5): 0", None),
        ("Score (1-5): 6", None),
        ("I'd give it four out of five.", None),
    ],
)
def test_judge_answers_parse_or_not(answer: str, parsed: tuple[float, str] | None) -> None:
    assert parse(answer) == parsed


# -- scores -------------------------------------------------------------------------------------


def test_hybrid_scores_by_hand(judge_key: None) -> None:
    """Weights .4/.35/.25; judge 5, 4 (orderings 4 and 4), 2 (orderings 3 and 1); checks
    3 of 4 pass. By hand: judge = .4*5 + .35*4 + .25*2 = 3.9; structural 0.75, on 1-5
    1 + 4*.75 = 4; overall = .3*4 + .7*3.9 = 3.93."""
    rubric = Rubric(
        phase="sdd-x",
        version="1",
        scoring_model="hybrid",
        dimensions=(
            dimension("a", 0.4, checks=({"has_section": "## Intent"}, {"has_section": "## Nope"})),
            dimension("b", 0.35, checks=({"min_count": 3, "pattern": "^\\d+\\."},)),
            dimension("c", 0.25, checks=({"references_pattern": "SPEC-\\d+"},)),
        ),
    )
    server = judge_server(
        [
            Conversation(match="DESC-a", replies=[said(5)]),
            Conversation(match="DESC-b", replies=[said(4)]),
            Conversation(match="DESC-c\n\n## Reference", replies=[said(3)]),
            Conversation(match="DESC-c\n\n## Candidate", replies=[said(1)]),
        ]
    )
    try:
        judged = judge_output(judge_model(server), "x", list(rubric.dimensions), "R", OUTPUT)
    finally:
        server.shutdown()
    checks = run_checks(rubric.dimensions, OUTPUT)
    assert [c.passed for c in checks] == [True, False, True, True]
    s = score_sample(rubric, checks, judged)
    assert s.dimensions == {"a": 5.0, "b": 4.0, "c": 2.0}
    assert s.structural == 0.75 and s.judge == pytest.approx(3.9)
    assert s.overall == pytest.approx(3.93)
    judge_only = score_sample(
        rubric.model_copy(update={"scoring_model": "llm-as-judge"}), checks, judged
    )
    assert judge_only.overall == pytest.approx(3.9)
    regex = score_sample(rubric.model_copy(update={"scoring_model": "regex"}), checks, None)
    # per dimension, its checks' pass rate on 1-5: a 1/2 -> 3, b 1/1 -> 5, c 1/1 -> 5
    assert regex.dimensions == {"a": 3.0, "b": 5.0, "c": 5.0} and regex.overall == 4.0
    by_metric = {x.metric: x for x in s.as_scores()}
    assert (by_metric["overall"].low, by_metric["overall"].high) == (1.0, 5.0)
    assert (by_metric["structural"].low, by_metric["structural"].high) == (0.0, 1.0)


def test_a_perfect_sample_scores_five_and_the_seeds_example_keeps_its_scale() -> None:
    """Both terms on 1-5: a perfect output is 5 (the literal formula would give 3.8)."""
    rubric = load(EXAMPLE / "datasets/propose/rubric.yaml", RubricFile, "rubric").rubric
    checks = run_checks(rubric.dimensions, (EXAMPLE / "datasets/propose/samples.yaml").read_text())
    from hangar.kinds.rubric.judge import DimensionVerdict, Judged

    judged = Judged(
        verdicts=[
            DimensionVerdict(dimension=d.name, score=5.0, gap=0.0, orderings=[])
            for d in rubric.dimensions
        ],
        usage={},  # type: ignore[arg-type]
    )
    perfect = score_sample(rubric, [c.model_copy(update={"passed": True}) for c in checks], judged)
    assert perfect.overall == 5.0
    half = score_sample(
        rubric,
        [c.model_copy(update={"passed": i % 2 == 0}) for i, c in enumerate(checks)],
        judged,
    )
    assert half.overall == pytest.approx(0.3 * 3 + 0.7 * 5)


def test_quadratic_kappa_agrees_with_statsmodels() -> None:
    from statsmodels.stats.inter_rater import cohens_kappa

    rng = random.Random(7)
    for trial in range(40):
        n = rng.randint(5, 40)
        a = [rng.randint(1, 5) for _ in range(n)]
        b = [min(5, max(1, x + rng.choice([-2, -1, 0, 0, 0, 1, 1]))) for x in a]
        if trial % 5 == 0:
            b = [rng.randint(1, 5) for _ in range(n)]
        table = [
            [sum(1 for x, y in zip(a, b, strict=True) if (x, y) == (i, j)) for j in range(1, 6)]
            for i in range(1, 6)
        ]
        theirs = cohens_kappa(table, wt="quadratic").kappa
        assert quadratic_kappa(a, b) == pytest.approx(theirs, abs=1e-12)
    assert quadratic_kappa([3, 3], [3, 3]) is None  # undefined, not 1


def test_calibration_flags_dimensions_under_the_bar() -> None:
    good = calibrate("clarity", [5, 4, 3, 2, 4.5], [5, 4, 3, 2, 5])
    assert good.kappa == pytest.approx(1.0) and not good.below_bar
    assert good.mean_abs_diff == pytest.approx(0.1)
    assert whole(4.5) == 5 and whole(3.49) == 3
    poor = calibrate("risk", [5, 5, 1, 1], [1, 2, 5, 4])
    assert poor.kappa is not None and poor.kappa < 0.6 and poor.below_bar
    assert poor.mean_abs_diff == pytest.approx((4 + 3 + 4 + 3) / 4)


# -- regressions and baselines ------------------------------------------------------------------


def phase(avg: float, samples: dict[str, float], dims: dict[str, float]) -> PhaseResult:
    return PhaseResult(
        samples_run=len(samples),
        avg_score=avg,
        min_score=min(samples.values()),
        max_score=max(samples.values()),
        by_dimension=dims,
        by_difficulty={},
        sample_scores=samples,
        sample_dimensions={s: dims for s in samples},
    )


BASE = Baseline(
    name="baseline-v1",
    created="2026-01-01T00:00:00Z",
    scores={"sdd-propose": 4.0},
    sample_scores={"P1": 4.5, "P2": 4.0},
    dimension_scores={"sdd-propose": {"clarity": 4.0, "risk": 4.0}},
    judge_model="judge-1",
)


@pytest.mark.parametrize(
    ("avg", "samples", "dims", "kinds"),
    [
        (3.7, {"P1": 3.5, "P2": 3.0}, {"clarity": 3.5, "risk": 3.5}, []),  # exactly at each bar
        (3.69, {"P1": 3.5, "P2": 4.0}, {"clarity": 4.0, "risk": 4.0}, ["phase"]),
        (4.0, {"P1": 3.49, "P2": 4.0}, {"clarity": 4.0, "risk": 4.0}, ["sample"]),
        (4.0, {"P1": 4.5, "P2": 4.0}, {"clarity": 4.0, "risk": 3.49}, ["dimension"]),
        (4.5, {"P1": 5.0, "P2": 5.0, "P9": 1.0}, {"clarity": 5.0, "risk": 5.0}, []),  # new sample
    ],
)
def test_the_seeds_three_thresholds(
    avg: float, samples: dict[str, float], dims: dict[str, float], kinds: list[str]
) -> None:
    found = regressions("sdd-propose", phase(avg, samples, dims), BASE, Thresholds())
    assert [g.kind for g in found] == kinds


def test_a_regression_names_the_sample_its_fallen_dimension_and_the_change() -> None:
    now = phase(3.6, {"P1": 3.2, "P2": 4.0}, {"clarity": 4.0, "risk": 2.9})
    now.sample_dimensions["P1"] = {"clarity": 4.0, "risk": 2.0}
    base = BASE.model_copy(
        update={"sample_dimension_scores": {"P1": {"clarity": 4.5, "risk": 5.0}}}
    )
    found = {g.kind: g for g in regressions("propose", now, base, Thresholds())}  # short name
    assert set(found) == {"phase", "sample", "dimension"}
    sample = found["sample"]
    assert (sample.sample, sample.baseline_score, sample.current_score) == ("P1", 4.5, 3.2)
    assert sample.regression == "-29%"  # the seed's own example: 4.5 -> 3.2
    assert sample.affected_dimension == "risk"  # fell 3 points, clarity 0.5
    assert found["dimension"].affected_dimension == "risk"


def test_changed_thresholds_need_a_reason_and_apply() -> None:
    with pytest.raises(ValueError, match="need a reason"):
        Thresholds(phase=0.1)
    loose = Thresholds(phase=0.5, sample=2.0, dimension=1.0, reason="small noisy dataset")
    now = phase(3.6, {"P1": 3.2, "P2": 4.0}, {"clarity": 4.0, "risk": 3.4})
    assert regressions("sdd-propose", now, BASE, loose) == []
    strict = Thresholds(phase=0.1, reason="release gate")
    assert [
        g.kind for g in regressions("sdd-propose", phase(3.85, {"P1": 4.5}, {}), BASE, strict)
    ] == ["phase"]


def result(sample: str, overall: float, dims: dict[str, float], **details: Any) -> TrialResult:
    scores = [Score(metric=d, value=v, scale="points", low=1, high=5) for d, v in dims.items()]
    scores.append(Score(metric="overall", value=overall, scale="points", low=1, high=5))
    scores.append(Score(metric="judge", value=overall, scale="points", low=1, high=5))
    return TrialResult.model_validate(
        {
            "sweep": "b",
            "arm": "skill",
            "trial_key": sample,
            "scenario_id": sample,
            "scenario_digest": "d",
            "agent": "prompt",
            "model": "m",
            "verdict": "pass",
            "reason": "scored",
            "started_at": "2026-11-30T00:00:00Z",
            "finished_at": "2026-11-30T00:00:01Z",
            "kind": "rubric",
            "scores": sorted(scores, key=lambda s: s.metric),
            "details": {"difficulty": "easy", "judge": {}} | details,
            "usage": {"cost_usd": 0.5},
            "judge_usage": {"cost_usd": 0.25},
        }
    )


def report_of(
    judge: str = "judge-1", ci: bool = False, baseline: Baseline | None = None
) -> BenchmarkReport:
    rows = [result("P1", 4.5, {"clarity": 4.0}), result("P2", 4.0, {"clarity": 4.0})]
    return build_benchmark_report(
        run_id="bench-2026-11-30-001",
        model="m",
        judge_model=judge,
        ci_judge=ci,
        phases={"sdd-propose": ("1.1", ["clarity"], rows)},
        baseline=baseline,
        thresholds=Thresholds(),
    )


def test_baselines_are_immutable_versions_and_never_a_ci_judges(tmp_path: Path) -> None:
    report = report_of()
    first = write_baseline(tmp_path, report, None, "")
    second = write_baseline(tmp_path, report, None, "after the fix")
    assert (first.name, second.name) == ("baseline-v1.yaml", "baseline-v2.yaml")
    text = first.read_text()
    with pytest.raises(ConfigError, match="baselines are immutable"):
        write_baseline(tmp_path, report, "baseline-v1", "")
    assert first.read_text() == text
    data = yaml.safe_load(second.read_text())["baseline"]
    assert data["scores"] == {"sdd-propose": 4.25} and data["sample_scores"] == {
        "P1": 4.5,
        "P2": 4.0,
    }
    assert data["description"] == "after the fix" and data["judge_model"] == "judge-1"
    with pytest.raises(ConfigError, match=r"CI judge .* never becomes a baseline"):
        write_baseline(tmp_path, report_of(judge="cheap", ci=True), None, "")


def test_a_different_judge_is_not_comparable() -> None:
    report = report_of(judge="judge-2", baseline=BASE)
    assert "not comparable" in report.not_comparable
    assert all(not r.regressions for r in report.results.values())
    assert report.summary.recommendation.startswith("Not compared")
    with pytest.raises(ConfigError, match="different judges are not comparable"):
        compare_reports(report_of(), report_of(judge="judge-2"))
    rows = compare_reports(report_of(), report_of())
    assert {
        "phase": "sdd-propose",
        "dimension": "(phase)",
        "before": 4.25,
        "after": 4.25,
        "change": 0.0,
    } in rows


def test_the_report_has_the_seeds_fields_and_costs_apart(tmp_path: Path) -> None:
    report = report_of(baseline=BASE)
    files = write_report(report, tmp_path)
    data = yaml.safe_load(files[0].read_text())["benchmark_report"]
    for key in (
        "run_id",
        "timestamp",
        "model",
        "judge_model",
        "skill_versions",
        "results",
        "summary",
    ):
        assert key in data
    propose = data["results"]["sdd-propose"]
    for key in (
        "samples_run",
        "avg_score",
        "min_score",
        "max_score",
        "by_dimension",
        "by_difficulty",
        "regressions",
    ):
        assert key in propose
    assert (propose["avg_score"], propose["min_score"], propose["max_score"]) == (4.25, 4.0, 4.5)
    assert set(data["summary"]) >= {
        "total_samples",
        "overall_avg",
        "phases_above_baseline",
        "phases_below_baseline",
        "regressions_detected",
        "recommendation",
    }
    assert data["summary"]["phases_above_baseline"] == ["propose"]  # as the seed lists them
    assert data["costs"] == {"model": 1.0, "judge": 0.5}
    assert json.loads(files[1].read_text()) == json.loads(report.model_dump_json())
    assert read_report(files[0]) == read_report(files[1])
    write_report(report_of(), tmp_path)
    history = yaml.safe_load((tmp_path / "history.yaml").read_text())["history"]
    assert [h["overall_avg"] for h in history] == [4.25, 4.25]


def test_the_html_report_escapes_and_renders_in_chromium(tmp_path: Path) -> None:
    hostile = "<img src=x onerror=alert(1)>"
    rows = [result("P1<b>", 4.5, {hostile: 4.0}), result("P2", 2.0, {hostile: 1.0})]
    report = build_benchmark_report(
        run_id="bench-2026-11-30-001",
        model="m<script>",
        judge_model="judge-1",
        ci_judge=False,
        phases={"sdd-propose": ("1.1", [hostile], rows)},
        baseline=BASE.model_copy(update={"sample_scores": {"P2": 4.0}}),
        thresholds=Thresholds(),
    )
    write_report(report, tmp_path)
    from hangar.console import console
    from hangar.kinds.rubric.cli import print_report

    with console.capture() as shown:
        print_report(report.model_copy(update={"model": "[bold]m[/bold]"}))
    assert "[bold]m[/bold]" in shown.get() and hostile in shown.get()  # shown, not interpreted
    page = tmp_path / "r.html"
    page.write_text(render_html(report, tmp_path / "history.yaml"))
    text = page.read_text()
    assert hostile not in text and "<script>" not in text and "&lt;img src=x" in text
    shown = dom(page)
    assert 'id="plot-trend"' in shown
    assert shown.count('class="bar"') == 2  # one dimension, one difficulty
    assert "<img" not in shown and "<script>" not in shown  # text, never markup
    assert "P2" in shown and "-50%" in shown
    colours = painted(page, "1100,1600")
    assert {(0x3B, 0x6F, 0xB6), (0x2F, 0x9E, 0x44)} <= colours  # bars and the trend line


# -- the dataset check --------------------------------------------------------------------------


def tasks_folder(tmp_path: Path, n: int = 10, **sample: Any) -> Path:
    """A tasks phase that meets the seed's table: 3 easy, 4 medium, 3 hard."""
    levels = ["easy"] * 3 + ["medium"] * 4 + ["hard"] * 3
    samples = [
        {
            "id": f"T-{i}",
            "name": f"task list {i}",
            "difficulty": levels[i % 10],
            "tags": [f"domain-{i % 4}", "dependency-ordering" if i == 0 else "api"],
            "split": "holdout" if i == 9 else "train" if i < 3 else "eval",
            "input": {"design": f"design number {i}"},
            "reference_output": f"1. step one of {i}\n2. step two (depends on 1)\n",
            "scores": {"ordering": 4, "clarity": 5, "overall": 4.4},
        }
        | (sample if i == 1 else {})
        for i in range(n)
    ]
    folder = tmp_path / "bench"
    (folder / "datasets" / "tasks").mkdir(parents=True)
    (folder / "skills" / "tasks").mkdir(parents=True)
    (folder / "skills" / "tasks" / "SKILL.md").write_text("Write tasks.\n")
    (folder / "config.yaml").write_text(
        yaml.safe_dump({"phases": ["tasks"], "model": "m", "judge_model": "j"})
    )
    (folder / "datasets" / "tasks" / "samples.yaml").write_text(
        yaml.safe_dump({"dataset": {"phase": "sdd-tasks", "version": "1", "samples": samples}})
    )
    rubric = {
        "phase": "sdd-tasks",
        "version": "1",
        "dimensions": [
            {"name": "ordering", "weight": 0.6, "description": "order"},
            {"name": "clarity", "weight": 0.4, "description": "clear"},
        ],
    }
    (folder / "datasets" / "tasks" / "rubric.yaml").write_text(yaml.safe_dump({"rubric": rubric}))
    return folder


def test_a_dataset_that_meets_the_guidelines_passes(tmp_path: Path) -> None:
    report = check_folder(tasks_folder(tmp_path))
    assert report.findings == [] and not report.failed(strict=True)
    assert report.phases["tasks"] == {
        "samples": 10,
        "easy": 3,
        "medium": 4,
        "hard": 3,
        "train": 3,
        "eval": 6,
        "holdout": 1,
    }


@pytest.mark.parametrize(
    ("n", "sample", "rule", "words"),
    [
        (9, {}, "size", "9 samples, the guidelines' minimum is 10"),
        (10, {"difficulty": "hard"}, "difficulty", "2 easy samples, at least 3 wanted"),
        (10, {"name": "task list 0"}, "duplicates", "T-1 repeats the name of T-0"),
        (
            10,
            {"input": {"design": "design number 0"}},
            "duplicates",
            "T-1 repeats the input of T-0",
        ),
        (10, {"tags": []}, "tagged", "samples without tags"),
        (10, {"scores": {"ordering": 4}}, "human scores", "T-1: no human score for ['clarity']"),
        (10, {"scores": None}, "human scores", "samples without human scores"),
        (10, {"scores": {"ordering": 4, "clarity": 9}}, "human scores", "outside 1-5"),
        (10, {"reference_output": "design number 1"}, "reference", "a copy of its input"),
    ],
)
def test_each_dataset_guideline(
    tmp_path: Path, n: int, sample: dict[str, Any], rule: str, words: str
) -> None:
    report = check_folder(tasks_folder(tmp_path, n, **sample))
    assert any(f.rule == rule and words in f.message for f in report.findings), report.findings
    assert report.failed()


def test_domains_dependency_ordering_and_holdout_leaks(tmp_path: Path) -> None:
    folder = tasks_folder(tmp_path)
    path = folder / "datasets" / "tasks" / "samples.yaml"
    data = yaml.safe_load(path.read_text())
    samples = data["dataset"]["samples"]
    for s in samples:
        s["tags"] = ["api"]  # no dependency-ordering tag
    samples[9]["input"] = samples[0]["input"]  # the holdout sample repeats a train one
    samples[9]["name"] = "another name"
    samples[0]["scores"]["overall"] = 3.0  # not the weighted mean (4.4)
    path.write_text(yaml.safe_dump(data))
    cfg = yaml.safe_load((folder / "config.yaml").read_text()) | {"phases": ["tasks"]}
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg))
    report = check_folder(folder)
    messages = {(f.rule, f.severity): f.message for f in report.findings}
    assert "tag one `dependency-ordering`" in messages[("dependency ordering", "error")]
    assert "holdout T-9 repeats the input of train sample T-0" in messages[("splits", "error")]
    assert "not the weighted mean" in messages[("human scores", "warning")]
    # a tuning run that scored a holdout sample
    reports = folder / "reports"
    reports.mkdir()
    leak = report_of().model_copy(update={"split": "train", "run_id": "bench-2026-11-30-009"})
    leak.results["sdd-tasks"] = leak.results.pop("sdd-propose").model_copy(
        update={"sample_scores": {"T-9": 4.0}}
    )
    write_report(leak, reports)
    found = [f.message for f in check_folder(folder).findings if f.rule == "splits"]
    assert "tuning run bench-2026-11-30-009 scored holdout samples ['T-9']" in found


def test_the_group_is_rubric_and_answers_to_its_former_name(example: Path) -> None:
    listed = runner.invoke(app, ["--help"]).stdout
    assert "rubric" in listed and "benchmark " not in listed  # the former name is not listed
    checked = [
        runner.invoke(app, [group, "check", str(example), "--format", "json"])
        for group in ("rubric", "benchmark")
    ]
    assert [c.exit_code for c in checked] == [1, 1]
    assert json.loads(checked[0].stdout) == json.loads(checked[1].stdout)


def test_the_propose_table_and_the_cli_exit_status(example: Path) -> None:
    out = runner.invoke(app, ["benchmark", "check", str(example), "--format", "json"])
    assert out.exit_code == 1
    found = json.loads(out.stdout)["findings"]
    assert {
        "phase": "propose",
        "rule": "size",
        "severity": "error",
        "message": "4 samples, the guidelines' minimum is 15: add 11",
    } in found
    assert any(f["message"].startswith("1 hard samples, at least 4") for f in found)


# -- CI ----------------------------------------------------------------------------------------


def test_the_ci_section_and_the_phases_a_change_affects(example: Path) -> None:
    from hangar.kinds.rubric.benchmark import skill_path
    from hangar.kinds.rubric.ci import changed_phases, load_ci

    assert load_ci(example).phases == "all"  # no section: the defaults
    config = example / "config.yaml"
    config.write_text(
        config.read_text()
        + "ci_benchmark:\n  trigger: on_skill_change\n  phases: [tasks]\n  max_samples: 2\n"
        "  fail_on_regression: false\n  judge_model: claude-haiku\n  timeout_per_sample: 2m\n"
    )
    ci = load_ci(example)
    assert (ci.phases, ci.max_samples, ci.fail_on_regression) == (("tasks",), 2, False)
    assert ci.timeout_per_sample == 120.0 and ci.judge_model is not None
    config.write_text(config.read_text().replace("2m", "soon"))
    with pytest.raises(ConfigError, match=r"ci_benchmark\.timeout_per_sample` \(line 31\)"):
        load_ci(example)
    config.write_text(config.read_text().replace("soon", "60s"))

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(example), *args], check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "benchmark")
    cfg = load_config(example)
    skills = {p: skill_path(example, cfg, p) for p in cfg.phases}
    assert changed_phases(example, cfg, "HEAD", skills) == []
    out = runner.invoke(app, ["benchmark", "run", str(example), "--changed-since", "HEAD"])
    assert out.exit_code == 0 and "no phase's skill, samples or rubric changed" in out.output
    skill = example / "skills" / "sdd-tasks" / "SKILL.md"
    skill.write_text(skill.read_text() + "- One more rule.\n")
    assert changed_phases(example, cfg, "HEAD", skills) == ["tasks"]
    (example / "datasets" / "propose" / "rubric.yaml").touch()  # same bytes: no change
    assert changed_phases(example, cfg, "HEAD", skills) == ["tasks"]
    with pytest.raises(ConfigError, match="--changed-since nope: git diff"):
        changed_phases(example, cfg, "nope", skills)


# -- on Ray: the example folder, end to end -----------------------------------------------------


@pytest.fixture
def served(example: Path) -> Iterator[ScriptedServer]:
    """The example's scripted writer and judge, and the folder pointed at them."""
    server = ScriptedServer(Script.load(example / "scripted-model.yaml")).start()
    config = example / "config.yaml"
    config.write_text(
        config.read_text().replace("http://127.0.0.1:8765/v1", f"{server.url}/v1")
        + f"    store: sqlite:///{example}/runs.db\n    evidence: {(example / 'ev').as_uri()}\n"
    )
    yield server
    server.shutdown()


def judge_calls(server: ScriptedServer) -> int:
    return sum(r["body"]["model"] == "scripted-judge" for r in server.requests)


@pytest.mark.ray
@pytest.mark.slow
def test_the_example_benchmark_on_ray(
    ray_local: None, example: Path, served: ScriptedServer
) -> None:
    out = runner.invoke(
        app, ["benchmark", "run", str(example), "--baseline", "baseline-v1", "--format", "json"]
    )
    assert out.exit_code == 1, out.output  # the regression is the CI gate
    report = json.loads(out.stdout)
    propose, tasks = report["results"]["sdd-propose"], report["results"]["sdd-tasks"]
    # By hand (README, "Scores"): e.g. BENCH-PROP-003: checks 4/8 -> 3 on 1-5; judge
    # .3*3 + .2*3 + .25*2 + .25*3 = 2.75; overall .3*3 + .7*2.75 = 2.825.
    assert propose["sample_scores"] == pytest.approx(
        {
            "BENCH-PROP-001": 4.685,
            "BENCH-PROP-002": 4.755,
            "BENCH-PROP-003": 2.825,
            "BENCH-PROP-004": 4.3875,
        }
    )
    assert propose["avg_score"] == pytest.approx(4.163125)
    assert tasks["sample_scores"] == pytest.approx(
        {
            "BENCH-TASK-001": 5.0,
            "BENCH-TASK-002": 4.72,
            "BENCH-TASK-003": 4.13,
            "BENCH-TASK-004": 4.2825,
        }
    )
    assert propose["by_dimension"] == pytest.approx(
        {"completeness": 4.25, "clarity": 3.875, "risk_coverage": 3.875, "actionability": 4.0}
    )
    assert propose["by_difficulty"] == pytest.approx(
        {"easy": 4.755, "medium": 3.755, "hard": 4.3875}
    )
    assert propose["position_bias"] == pytest.approx(
        {"completeness": 0.0, "clarity": 0.25, "risk_coverage": 0.25, "actionability": 0.0}
    )
    assert propose["structural_pass_rate"] == pytest.approx((1 + 1 + 0.5 + 1) / 4)
    kinds = {(g["kind"], g["sample"], g["affected_dimension"]) for g in propose["regressions"]}
    assert kinds == {
        ("phase", None, None),
        ("sample", "BENCH-PROP-003", "risk_coverage"),
        ("dimension", None, "risk_coverage"),
    }
    assert tasks["regressions"] == []
    s = report["summary"]
    assert (s["total_samples"], s["regressions_detected"]) == (8, 3)
    assert (s["phases_above_baseline"], s["phases_below_baseline"]) == (["tasks"], ["propose"])
    assert s["recommendation"] == (
        "Investigate sdd-propose regression on samples BENCH-PROP-003 (risk_coverage); its "
        "skill changed since the baseline (1.0 -> 1.1)"
    )
    assert report["skill_versions"]["sdd-propose"] == "1.1"
    # costs apart: the writer 8 x (640 in at $3 + 360 out at $15 per 1M); the judge 8 x 4
    # dimensions x 2 orderings of 900 in and 20 out at $0.8 / $4, but one answer (12 out)
    # did not parse and its follow-up took 930 in, 20 out
    assert report["costs"]["model"] == pytest.approx(8 * (640 * 3 + 360 * 15) / 1e6)
    judge = 63 * (900 * 0.8 + 20 * 4) + (900 * 0.8 + 12 * 4) + (930 * 0.8 + 20 * 4)
    assert report["costs"]["judge"] == pytest.approx(judge / 1e6)
    assert judge_calls(served) == 65
    calibration = {c["dimension"]: c for c in tasks["calibration"]}
    assert calibration["ordering"]["kappa"] == pytest.approx(1.0)
    assert not calibration["ordering"]["below_bar"]
    assert {c["dimension"]: c["below_bar"] for c in propose["calibration"]}["completeness"]
    for suffix in ("yaml", "json", "html"):
        assert (example / "reports" / f"{report['run_id']}.{suffix}").is_file()

    # again: every sample resumes (no model call), the same numbers, a second history entry
    calls = len(served.requests)
    again = runner.invoke(app, ["benchmark", "run", str(example), "--format", "json"])
    assert again.exit_code == 0, again.output  # no baseline named: nothing to regress
    assert len(served.requests) == calls
    assert json.loads(again.stdout)["results"]["sdd-propose"]["avg_score"] == pytest.approx(
        4.163125
    )
    history = yaml.safe_load((example / "reports" / "history.yaml").read_text())["history"]
    assert len(history) == 2

    # the seed's CI settings: a seeded subset of 2 per phase, a regression reported but
    # not failing the run (fail_on_regression: false); resumed, so no call
    config = example / "config.yaml"
    config.write_text(
        config.read_text() + "ci_benchmark:\n  max_samples: 2\n  fail_on_regression: false\n"
    )
    gate = runner.invoke(
        app,
        ["benchmark", "run", str(example), "--ci", "--baseline", "baseline-v1", "--format", "json"],
    )
    assert gate.exit_code == 0, gate.output
    assert json.loads(gate.stdout)["samples_left_out"] == {"propose": 2, "tasks": 2}
    assert len(served.requests) == calls

    # a CI judge: marked, refused against a baseline of another judge, never a baseline
    refused = runner.invoke(
        app,
        ["benchmark", "run", str(example), "--judge-model", "cheap", "--baseline", "baseline-v1"],
    )
    assert isinstance(refused.exception, ConfigError) and "not comparable" in str(refused.exception)
    assert len(served.requests) == calls  # refused before any call
    ci_model = json.dumps(
        {
            "id": "scripted-judge-mini",
            "base_url": f"{served.url}/v1",
            "api_key_env": "HANGAR_SCRIPTED_KEY",
        }
    )
    ci = runner.invoke(
        app,
        [
            "benchmark",
            "run",
            str(example),
            "--judge-model",
            ci_model,
            "--max-samples",
            "1",
            "--phases",
            "tasks",
            "--format",
            "json",
        ],
    )
    ci_report = json.loads(ci.stdout)
    assert ci_report["ci_judge"] and ci_report["judge_model"] == "scripted-judge-mini"
    assert ci_report["results"]["sdd-tasks"]["samples_run"] == 1
    assert ci_report["samples_left_out"] == {"tasks": 3}
    made = runner.invoke(
        app, ["benchmark", "baseline", str(example), "--from-run", ci_report["run_id"]]
    )
    assert isinstance(made.exception, ConfigError)
    assert "never becomes a baseline" in str(made.exception)
    compared = runner.invoke(
        app,
        [
            "benchmark",
            "compare",
            str(example / "reports" / f"{report['run_id']}.yaml"),
            str(example / "reports" / f"{ci_report['run_id']}.yaml"),
        ],
    )
    assert compared.exit_code == 3 and "not comparable" in compared.output

    # the accepted run becomes the next baseline, never over baseline-v1
    before = (example / "baselines" / "baseline-v1.yaml").read_text()
    made = runner.invoke(
        app, ["benchmark", "baseline", str(example), "--from-run", report["run_id"]]
    )
    assert made.exit_code == 0, made.output
    assert (example / "baselines" / "baseline-v1.yaml").read_text() == before
    v2 = yaml.safe_load((example / "baselines" / "baseline-v2.yaml").read_text())["baseline"]
    assert v2["scores"]["sdd-propose"] == pytest.approx(4.163125)
    gate = runner.invoke(
        app,
        ["benchmark", "run", str(example), "--baseline", "baseline-v2", "--write-baseline"],
    )
    assert gate.exit_code == 0, gate.output
    assert "No regression: the skills hold their baseline." in gate.output
    v3 = yaml.safe_load((example / "baselines" / "baseline-v3.yaml").read_text())["baseline"]
    assert v3["scores"] == v2["scores"] and v3["judge_model"] == "scripted-judge"


@pytest.mark.ray
@pytest.mark.slow
def test_unassessed_samples_and_the_budget(
    ray_local: None, example: Path, served: ScriptedServer
) -> None:
    """A judge that never answers in the format leaves its sample unassessed (exit 3);
    judge spend counts in the budget."""
    samples = example / "datasets" / "tasks" / "samples.yaml"
    # the judge sees the reference output, not the input: match on the reference's first line
    data = yaml.safe_load(samples.read_text())["dataset"]["samples"]
    first = data[1]["reference_output"].splitlines()[0]
    served.script.conversations.insert(
        0, Conversation(model="scripted-judge", match=first, replies=[Reply(content="no idea")])
    )
    out = runner.invoke(
        app, ["benchmark", "run", str(example), "--phases", "tasks", "--format", "json"]
    )
    assert out.exit_code == 3, out.output
    report = json.loads(out.stdout)
    tasks = report["results"]["sdd-tasks"]
    assert tasks["unassessed"] == 1 and "BENCH-TASK-002" not in tasks["sample_scores"]
    assert report["trials_not_scored"]["BENCH-TASK-002"].startswith("fail: unassessed dimensions")
    assert tasks["avg_score"] == pytest.approx((5.0 + 4.13 + 4.2825) / 3)

    # a free writer, one sample at a time, a budget under one sample's judge spend
    # (8 calls of $0.0008): the first sample runs, then nothing more is scheduled
    config = example / "config.yaml"
    text = (
        config.read_text()
        .replace("runs.db", "budget.db")
        .replace("budget_usd: 5", "budget_usd: 0.004")
    )
    text = text.replace("parallel: true", "parallel: false")
    config.write_text(
        text.replace("price: {input: 3.0, output: 15.0}", "price: {input: 0, output: 0}")
    )
    out = runner.invoke(
        app, ["benchmark", "run", str(example), "--phases", "propose", "--format", "json"]
    )
    assert out.exit_code == 3, out.output
    report = json.loads(out.stdout)
    not_run = [s for s, why in report["trials_not_scored"].items() if why.startswith("not run")]
    assert len(not_run) == 3 and report["results"]["sdd-propose"]["samples_run"] == 1
    assert report["costs"]["model"] == 0 and report["costs"]["judge"] == pytest.approx(8 * 0.0008)
    # the budget is per run: the next run scores one more sample (the first resumes)
    out = runner.invoke(
        app, ["benchmark", "run", str(example), "--phases", "propose", "--format", "json"]
    )
    report = json.loads(out.stdout)
    assert report["results"]["sdd-propose"]["samples_run"] == 2 and out.exit_code == 3


def test_a_sweep_report_carries_the_rubric_phases(tmp_path: Path) -> None:
    """`hangar report` of a sweep with rubric trials has the benchmark's phase numbers in
    every format (the kind's own section of the one report)."""
    from hangar.store import ResultsStore

    url = f"sqlite:///{tmp_path}/r.db"
    rows = [
        result("P1", 4.5, {"clarity": 4.0}, phase="propose"),
        result("P2", 4.0, {"clarity": 3.0}, phase="propose"),
        result("T1", 2.0, {"clarity": 2.0}, phase="tasks<b>"),
    ]
    store = ResultsStore(url)
    store.ensure_sweep("b", {"id": "b"}, len(rows))
    store.record(rows)
    expected = (
        "propose (prompt · m): 2 samples, average 4.25 (min 4.00, max 4.50), structural "
        "pass rate -, judge average 4.25, 0 unassessed; by dimension: clarity 3.50"
    )
    for fmt in ("text", "md", "html", "json"):
        out = runner.invoke(app, ["report", "b", "--store", url, "--format", fmt])
        assert out.exit_code == 0, out.output
        flat = " ".join(out.stdout.split())
        assert expected in flat, fmt
        assert "Rubric phases" in flat
    html = runner.invoke(app, ["report", "b", "--store", url, "--format", "html"]).stdout
    assert "tasks&lt;b&gt;" in html and "tasks<b>" not in html
    # the viewer's sweep page shows the same section
    from starlette.testclient import TestClient

    from hangar.viewer.app import Viewer, make_app

    page = ""
    with TestClient(make_app(Viewer(ResultsStore(url)))) as client:
        for _ in range(100):  # the report is built in the background
            page = client.get("/sweeps/b").text
            if "Rubric phases" in page:
                break
            time.sleep(0.1)
    assert expected in " ".join(page.split()) and "tasks&lt;b&gt;" in page
