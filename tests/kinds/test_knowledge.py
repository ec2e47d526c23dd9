"""Knowledge gold sets (seed 003): the file formats, seal and custody, the canary scan,
citation validity, labels and kappa (against statsmodels), the report and its rule, the
regression gate, the labelling flow, and the repo-search arm as trials on Ray."""

from __future__ import annotations

import io
import json
import random
import re
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hangar.cli import app
from hangar.errors import ConfigError
from hangar.kinds.knowledge.custody import load_suite, seal, sealed_suite
from hangar.kinds.knowledge.formats import Key, Label, Source
from hangar.kinds.knowledge.report import build_gold_set_report, keep
from hangar.kinds.knowledge.scan import scan_and_void, suite_canaries
from hangar.kinds.knowledge.scoring import classify, cohen_kappa, score_question
from hangar.scores.stats import wilson
from tests.browser import dom

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "knowledge"
BUNDLE = EXAMPLE.parent / "repos" / "handbook.bundle"
runner = CliRunner()


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def src(name: str, digest: str = "a" * 64) -> dict[str, str]:
    return {"uri": f"repo://r@c/{name}", "sha256": f"sha256:{digest}"}


def make_suite(tmp_path: Path, n: int = 4) -> Path:
    """An unsealed suite of `n` questions, one valid source each."""
    folder = tmp_path / "gold-v1"
    kinds = ["decision-why", "blocker", "what-changed", "how-to", "who-owns"]
    jsonl(
        folder / "questions.jsonl",
        [
            {"id": f"q{i}", "question": f"QUESTION-{i}?", "kind": kinds[i % 5], "as_of": "c"}
            for i in range(n)
        ],
    )
    jsonl(
        folder / "keys.jsonl",
        [
            {
                "id": f"q{i}",
                "answer_key": f"KEY-TEXT-{i}",
                "required_facts": [f"fact {i}"],
                "valid_sources": [src(f"doc{i}.md")],
            }
            for i in range(n)
        ],
    )
    return folder


def make_sealed(tmp_path: Path, n: int = 4) -> Path:
    """A sealed suite of `n` questions."""
    folder = make_suite(tmp_path, n)
    seal(folder)
    return folder


def answers(folder: Path, arm: str, rows: list[dict[str, Any]], meta: bool = True) -> None:
    jsonl(folder / "answers" / f"{arm}.jsonl", rows)
    if meta:
        (folder / "answers" / f"{arm}.meta.json").write_text(
            json.dumps({"person": "P. Erson", "date": "2026-03-01", "model": "m-1"})
        )


def labels(folder: Path, arm: str, rows: list[tuple[str, str, bool]]) -> None:
    jsonl(
        folder / "labels" / f"{arm}.jsonl",
        [{"id": q, "rater": r, "correct": c, "unsupported": []} for q, r, c in rows],
    )


# -- formats --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "line", "words"),
    [
        (
            "questions.jsonl",
            '{"id": "q9", "question": "?", "kind": "trivia", "as_of": "c"}',
            r"line 5.*field `kind`",
        ),
        (
            "questions.jsonl",
            '{"question": "?", "kind": "blocker", "as_of": "c"}',
            r"line 5.*field `id`.*required",
        ),
        ("questions.jsonl", "{not json", r"questions\.jsonl, line 5: not JSON"),
        (
            "keys.jsonl",
            '{"id": "q9", "answer_key": "k", "valid_sources": [{"sha256": "x"}]}',
            r"keys\.jsonl, line 5.*valid_sources\.0\.uri",
        ),
    ],
)
def test_malformed_lines_are_refused_naming_file_line_and_field(
    tmp_path: Path, file: str, line: str, words: str
) -> None:
    folder = make_suite(tmp_path)
    with (folder / file).open("a") as handle:
        handle.write(line + "\n")
    with pytest.raises(ConfigError, match=re.compile(words, re.S)):
        load_suite(folder)


def test_questions_and_keys_must_match(tmp_path: Path) -> None:
    folder = make_suite(tmp_path)
    lines = (folder / "keys.jsonl").read_text().splitlines()
    (folder / "keys.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(ConfigError, match=r"questions without a key \['q3'\]"):
        load_suite(folder)
    (folder / "keys.jsonl").write_text("\n".join([*lines, lines[0]]) + "\n")
    with pytest.raises(ConfigError, match="'q0' appears more than once"):
        load_suite(folder)


# -- seal and custody -----------------------------------------------------------------------


def test_seal_writes_canaries_and_the_manifest_and_refuses_twice(tmp_path: Path) -> None:
    folder = make_suite(tmp_path)
    holdouts = tmp_path / "holdouts"
    seal(folder, holdouts)
    suite = sealed_suite(folder)
    canaries = [k.canary or "" for k in suite.keys.values()]
    assert len(set(canaries)) == 4 and all(
        re.fullmatch(r"HANGAR-CANARY-[0-9a-f]{32}", c) for c in canaries
    )
    manifest = json.loads((folder / "manifest.json").read_text())
    assert set(manifest["files"]) == {"questions.jsonl", "keys.jsonl"}
    held = json.loads((holdouts / "manifest.json").read_text())["canaries"]
    assert sorted(c["canary"] for c in held) == sorted(canaries)
    with pytest.raises(ConfigError, match="already sealed"):
        seal(folder)
    # a changed question is a new version: scoring refuses the edited suite, naming the file
    text = (folder / "questions.jsonl").read_text().replace("QUESTION-1?", "QUESTION-1, reworded?")
    (folder / "questions.jsonl").write_text(text)
    answers(folder, "a", [])
    out = runner.invoke(app, ["knowledge", "score", str(folder), "--arm", "a"])
    assert isinstance(out.exception, ConfigError)
    assert "questions.jsonl: changed since the suite was sealed" in str(out.exception)


def test_a_canary_found_voids_the_whole_suite(tmp_path: Path) -> None:
    folder = make_sealed(tmp_path)
    suite = sealed_suite(folder)
    leaked = suite.keys["q2"].canary or ""
    answers(folder, "a", [{"id": "q0", "answer": "x", "citations": []}])
    traces = tmp_path / "traces"
    (traces / "clean").mkdir(parents=True)
    (traces / "clean" / "trace.jsonl").write_text('{"event": "nothing here"}\n')
    assert scan_and_void([traces], suite_canaries(folder)) == []
    assert not (folder / "void.json").exists()
    # inside an evidence archive, JSON-escaped in a retrieval log
    data = json.dumps({"retrieved": f"...{leaked}..."}).encode()
    with tarfile.open(traces / "bundle.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("retrieval.log")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    found = scan_and_void([traces], suite_canaries(folder))
    assert [(f.id, f.where.endswith("bundle.tar.gz!retrieval.log")) for f in found] == [
        ("q2", True)
    ]
    void = json.loads((folder / "void.json").read_text())
    assert void["found"][0]["id"] == "q2"
    out = runner.invoke(app, ["knowledge", "score", str(folder), "--arm", "a"])
    assert out.exit_code == 3 and "VOID since" in out.output  # shown by every later report
    out = runner.invoke(
        app,
        [
            "knowledge",
            "score",
            str(folder),
            "--baseline",
            "a",
            "--candidate",
            "a",
            "--format",
            "json",
        ],
    )
    data_out = json.loads(out.stdout)
    assert data_out["void"] is not None
    assert {c["sentence"] for c in data_out["comparisons"]} == {
        "the suite is void (a canary was found): no decision"
    }
    cli = runner.invoke(app, ["knowledge", "scan", "--suite", str(folder), str(traces)])
    assert cli.exit_code == 1


# -- citations, labels, kappa ---------------------------------------------------------------


KEY = Key(
    id="q", answer_key="k", valid_sources=[Source(**src("a.md")), Source(**src("b.md", "b" * 64))]
)


@pytest.mark.parametrize(
    ("uri", "digest", "unsupported", "kind"),
    [
        ("repo://r@c/z.md", "a" * 64, set(), "fabricated"),
        ("repo://r@c/z.md", "a" * 64, {"repo://r@c/z.md"}, "fabricated"),  # the seed's order
        ("repo://r@c/a.md", "f" * 64, set(), "stale"),
        ("repo://r@c/a.md", "", set(), "stale"),  # no hash: not the one at as_of
        ("repo://r@c/a.md", "f" * 64, {"repo://r@c/a.md"}, "stale"),
        ("repo://r@c/a.md", "a" * 64, {"repo://r@c/a.md"}, "unsupported"),
        ("repo://r@c/a.md", "a" * 64, set(), "valid"),
        ("repo://r@c/b.md", "B" * 64, set(), "valid"),  # hashes compare case-blind
    ],
)
def test_each_citation_kind(uri: str, digest: str, unsupported: set[str], kind: str) -> None:
    assert classify(uri, digest.lower(), KEY, unsupported) == kind


def label(rater: str, correct: bool, unsupported: list[str] = []) -> Label:  # noqa: B006
    return Label(id="q", rater=rater, correct=correct, unsupported=unsupported)


def test_majority_ties_pending_and_unanswered() -> None:
    from hangar.kinds.knowledge.formats import Answer

    answer = Answer.model_validate(
        {"id": "q", "answer": "a", "citations": [src("a.md"), src("b.md", "b" * 64)]}
    )
    assert score_question(KEY, answer, [label("x", True), label("y", False)]).correct is False
    assert score_question(
        KEY, answer, [label("x", True), label("y", False), label("z", True)]
    ).correct
    assert (
        score_question(
            KEY, answer, [label("x", False), label("y", True), label("z", False)]
        ).correct
        is False
    )
    s = score_question(KEY, answer, [label("x", True), label("y", True, ["repo://r@c/b.md"])])
    assert s.correct and s.citation_valid is False  # one rater's unsupported is enough
    assert [c.kind for c in s.citations] == ["valid", "unsupported"]
    assert score_question(KEY, answer, [label("x", True)]).citation_valid is True
    bare = Answer(id="q", answer="a", citations=[])
    assert score_question(KEY, bare, [label("x", True)]).citation_valid is False  # cites nothing
    pending = score_question(KEY, answer, [])
    assert (pending.status, pending.correct, pending.citation_valid) == ("pending", None, None)
    missing = score_question(KEY, None, [])
    assert (missing.status, missing.correct, missing.citation_valid) == ("unanswered", False, False)


def test_cohen_kappa_agrees_with_statsmodels() -> None:
    from statsmodels.stats.inter_rater import cohens_kappa

    rng = random.Random(3)
    for _ in range(50):
        n = rng.randint(4, 40)
        a = [rng.random() < 0.6 for _ in range(n)]
        b = [x if rng.random() < 0.75 else not x for x in a]
        table = [
            [sum(1 for x, y in zip(a, b, strict=True) if (x, y) == (i, j)) for j in (True, False)]
            for i in (True, False)
        ]
        if (sum(a) in (0, n)) and (sum(b) in (0, n)):
            continue
        assert cohen_kappa(a, b) == pytest.approx(cohens_kappa(table).kappa, abs=1e-12)
    assert cohen_kappa([True, True], [True, True]) is None


# -- the report and the rule ----------------------------------------------------------------


def scored_suite(tmp_path: Path, n: int = 20) -> Path:
    """Arm `base` right on a quarter of the questions with stale citations, arm `cand`
    right on all of them with valid ones; two raters who agree except on q0."""
    folder = make_suite(tmp_path, n)
    seal(folder)
    answers(
        folder,
        "base",
        [
            {"id": f"q{i}", "answer": "b", "citations": [src(f"doc{i}.md", "f" * 64)]}
            for i in range(n - 1)  # q(n-1) unanswered
        ],
    )
    answers(
        folder,
        "cand",
        [{"id": f"q{i}", "answer": "c", "citations": [src(f"doc{i}.md")]} for i in range(n)],
        meta=False,
    )
    rows = [
        (f"q{i}", r, i % 4 == 0 and not (i == 0 and r == "bob"))
        for i in range(n - 1)
        for r in ("ann", "bob")
    ]
    labels(folder, "base", rows)
    labels(folder, "cand", [(f"q{i}", r, True) for i in range(n) for r in ("ann", "bob")])
    return folder


def test_the_report_numbers_and_the_json_contract(tmp_path: Path) -> None:
    folder = scored_suite(tmp_path)
    out = runner.invoke(
        app,
        [
            "knowledge",
            "score",
            str(folder),
            "--baseline",
            "base",
            "--candidate",
            "cand",
            "--format",
            "json",
        ],
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    arms = {a["arm"]: a for a in data["arms"]}
    base = {m["metric"]: m for m in arms["base"]["metrics"]}
    # base: q4, q8, q12, q16 correct (q0 is a 1-1 tie: incorrect), q19 unanswered: 4/20
    assert (base["correctness"]["k"], base["correctness"]["n"]) == (4, 20)
    w = wilson(4, 20)
    assert (
        base["correctness"]["mean"],
        base["correctness"]["ci_low"],
        base["correctness"]["ci_high"],
    ) == (w.estimate, w.low, w.high)
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(4, 20, alpha=0.05, method="wilson")
    assert (base["correctness"]["ci_low"], base["correctness"]["ci_high"]) == pytest.approx(
        (low, high)
    )
    assert base["citation_validity"]["k"] == 0
    assert arms["base"]["citations"] == {
        "fabricated": 0,
        "stale": 19,
        "unsupported": 0,
        "valid": 0,
        "total": 19,
    }
    assert arms["base"]["unanswered"] == 1 and arms["base"]["pending"] == 0
    assert arms["base"]["agreement"]["raters"] == ["ann", "bob"]
    ann = [i % 4 == 0 for i in range(19)]
    bob = [i % 4 == 0 and i != 0 for i in range(19)]
    assert arms["base"]["agreement"]["kappa"] == pytest.approx(cohen_kappa(ann, bob))
    assert "run by P. Erson" in arms["base"]["meta_note"]
    assert "meta missing" in arms["cand"]["meta_note"]
    comparisons = {c["metric"]: c for c in data["comparisons"]}
    for c in comparisons.values():
        for key in (
            "baseline",
            "candidate",
            "metric",
            "difference",
            "ci_low",
            "ci_high",
            "sentence",
        ):
            assert key in c
    assert comparisons["correctness"]["difference"] == pytest.approx(16 / 20)
    assert (
        comparisons["correctness"]["sentence"]
        == "baseline is shown to lose by at least 15 points on correctness"
    )
    assert (
        comparisons["citation_validity"]["sentence"]
        == "baseline is shown to lose by at least 15 points on citation validity"
    )
    # seeded: the same interval every time
    again = json.loads(
        runner.invoke(
            app,
            [
                "knowledge",
                "score",
                str(folder),
                "--baseline",
                "base",
                "--candidate",
                "cand",
                "--format",
                "json",
            ],
        ).stdout
    )
    assert again["comparisons"] == data["comparisons"]
    # the other way round, nobody is shown to lose
    reverse = build_gold_set_report(sealed_suite(folder), [], baseline="cand", candidate="base")
    assert {c.sentence for c in reverse.comparisons} == {
        "baseline is not shown to lose by 15 points"
    }
    for fmt in ("text", "md", "html"):
        shown = runner.invoke(
            app, ["knowledge", "score", str(folder), "--arm", "base", "--format", fmt]
        )
        assert shown.exit_code == 0 and "20.0% [" in shown.output


def test_pending_answers_are_never_scored(tmp_path: Path) -> None:
    folder = scored_suite(tmp_path)
    rows = [json.loads(x) for x in (folder / "labels" / "cand.jsonl").read_text().splitlines()]
    jsonl(folder / "labels" / "cand.jsonl", [r for r in rows if r["id"] not in ("q1", "q2")])
    report = build_gold_set_report(
        sealed_suite(folder), ["cand"], baseline="base", candidate="cand"
    )
    cand = report.arms[1] if report.arms[1].arm == "cand" else report.arms[0]
    assert (cand.pending, cand.scored) == (2, 18)
    assert next(m for m in cand.metrics if m.metric == "correctness").n == 18
    assert {c.n for c in report.comparisons} == {18}  # paired over questions both scored


def test_the_gate_keeps_a_baseline_and_fails_a_losing_candidate(tmp_path: Path) -> None:
    folder = scored_suite(tmp_path)
    path = keep(sealed_suite(folder), "cand")
    with pytest.raises(ConfigError, match="never overwritten"):
        keep(sealed_suite(folder), "cand")
    assert json.loads(path.read_text())["arm"]["arm"] == "cand"
    lose = runner.invoke(
        app, ["knowledge", "compare", str(folder), "--candidate", "base", "--baseline", "cand"]
    )
    assert lose.exit_code == 1, lose.output
    assert "base is shown to lose by at least 0 points on correctness" in lose.output
    hold = runner.invoke(
        app,
        [
            "knowledge",
            "compare",
            str(folder),
            "--candidate",
            "cand",
            "--baseline",
            "cand",
            "--format",
            "json",
        ],
    )
    assert hold.exit_code == 0, hold.output
    rows = json.loads(hold.stdout)
    assert {r["sentence"] for r in rows} == {"cand is not shown to lose by 0 points"}
    # more labels later do not move a kept baseline: it is compared as it was scored
    jsonl(folder / "labels" / "cand.jsonl", [])
    kept_again = runner.invoke(
        app, ["knowledge", "compare", str(folder), "--candidate", "base", "--baseline", "cand"]
    )
    assert kept_again.exit_code == 1
    # pending answers cannot be kept
    with pytest.raises(ConfigError, match="nobody labelled yet"):
        keep(sealed_suite(folder), "cand")


def test_labelling_in_the_terminal(tmp_path: Path) -> None:
    folder = make_sealed(tmp_path, 3)
    answers(
        folder,
        "a",
        [
            {"id": f"q{i}", "answer": f"ANSWER-{i}", "citations": [src(f"doc{i}.md"), src("x.md")]}
            for i in range(3)
        ],
    )
    out = runner.invoke(
        app,
        ["knowledge", "label", str(folder), "--arm", "a", "--rater", "ann"],
        input="y\n2\ns\nq\n",
    )
    assert out.exit_code == 0, out.output
    assert "QUESTION-0?" in out.output and "ANSWER-0" in out.output and "KEY-TEXT-0" in out.output
    rows = [json.loads(x) for x in (folder / "labels" / "a.jsonl").read_text().splitlines()]
    assert rows == [
        {"id": "q0", "rater": "ann", "correct": True, "unsupported": ["repo://r@c/x.md"]}
    ]
    # again: what ann labelled is skipped
    out = runner.invoke(
        app, ["knowledge", "label", str(folder), "--arm", "a", "--rater", "ann"], input="n\n\nn\n\n"
    )
    assert "2 answers of a to label" in out.output
    rows = [json.loads(x) for x in (folder / "labels" / "a.jsonl").read_text().splitlines()]
    assert [(r["id"], r["correct"]) for r in rows] == [("q0", True), ("q1", False), ("q2", False)]


def test_importing_an_external_arm(tmp_path: Path) -> None:
    folder = make_sealed(tmp_path)
    good = jsonl(tmp_path / "ext.jsonl", [{"id": "q0", "answer": "a", "citations": []}])
    out = runner.invoke(
        app, ["knowledge", "import", str(folder), "--arm", "ext", "--answers", str(good)]
    )
    assert out.exit_code == 0 and "no meta" in out.output
    again = runner.invoke(
        app, ["knowledge", "import", str(folder), "--arm", "ext", "--answers", str(good)]
    )
    assert "scored once" in str(again.exception)
    bad = jsonl(tmp_path / "bad.jsonl", [{"id": "nope", "answer": "a", "citations": []}])
    out = runner.invoke(
        app, ["knowledge", "import", str(folder), "--arm", "bad", "--answers", str(bad)]
    )
    assert "not questions of gold-v1: ['nope']" in str(out.exception)
    assert not (folder / "answers" / "bad.jsonl").exists()  # nothing half-imported


def test_the_html_report_escapes_and_renders(tmp_path: Path) -> None:
    folder = scored_suite(tmp_path, 8)
    (folder / "answers" / "base.meta.json").write_text(
        json.dumps({"person": "<img src=x onerror=alert(1)>", "date": "d", "model": "m"})
    )
    page = tmp_path / "r.html"
    out = runner.invoke(
        app,
        [
            "knowledge",
            "score",
            str(folder),
            "--baseline",
            "base",
            "--candidate",
            "cand",
            "--format",
            "html",
            "--out",
            str(page),
        ],
    )
    assert out.exit_code == 0, out.output
    text = page.read_text()
    assert "<img src=x" not in text and "&lt;img src=x" in text
    shown = dom(page)
    assert 'id="plot-rates"' in shown and "<img" not in shown
    assert shown.count('class="interval"') == 4
    assert "baseline is shown to lose by at least 15 points on citation validity" in shown


# -- the repo-search arm on Ray ------------------------------------------------------------


@pytest.mark.ray
@pytest.mark.docker
@pytest.mark.slow
def test_the_example_gold_set_end_to_end(
    ray_local: None, docker_client: Any, tmp_path: Path
) -> None:
    from hangar.testing.scripted import Script, ScriptedServer

    folder = tmp_path / "knowledge"
    shutil.copytree(EXAMPLE, folder)
    (folder / "repositories.yaml").write_text(f"handbook: {BUNDLE}\n")
    server = ScriptedServer(Script.load(folder / "scripted-model.yaml")).start()
    model = json.dumps(
        {
            "id": "scripted-searcher",
            "base_url": f"{server.url}/v1",
            "api_key_env": "HANGAR_SCRIPTED_KEY",
        }
    )
    store = f"sqlite:///{tmp_path}/r.db"
    evidence = (tmp_path / "ev").as_uri()
    try:
        imported = runner.invoke(
            app,
            [
                "knowledge",
                "import",
                str(folder),
                "--arm",
                "baseline-projects",
                "--answers",
                str(folder / "external/baseline-projects.jsonl"),
                "--meta",
                str(folder / "external/baseline-projects.meta.json"),
            ],
        )
        assert imported.exit_code == 0, imported.output
        run = runner.invoke(
            app,
            [
                "knowledge",
                "run",
                str(folder),
                "--model",
                model,
                "--store",
                store,
                "--evidence",
                evidence,
            ],
        )
        assert run.exit_code == 0, run.output
        again = runner.invoke(
            app, ["knowledge", "run", str(folder), "--model", model, "--store", store]
        )
        assert "scored once" in str(again.exception)
    finally:
        server.shutdown()
    suite = sealed_suite(folder)
    # the keys never reached the model: not the answer keys, not the canaries
    sent = json.dumps([r["body"] for r in server.requests])
    for key in suite.keys.values():  # (a short key such as "@sam" is in the files read)
        assert (key.canary or "") not in sent
        assert len(key.answer_key) < 40 or key.answer_key not in sent
    assert "Why does the ledger store its data in PostgreSQL" in sent
    # nor the sandbox or the evidence: the canary scan of the run's bundles finds nothing
    sweep = "knowledge-knowledge-baseline-repo-search-scripted-searcher"
    assert scan_and_void([folder / "answers"], suite_canaries(folder), [sweep], store) == []
    got = {
        json.loads(x)["id"]: json.loads(x)
        for x in (folder / "answers/baseline-repo-search.jsonl").read_text().splitlines()
    }
    assert len(got) == 11
    c2 = "dee254872bb216846ae8eeaa1818a5071ed07e7a"
    c1 = "c95571d40e9c11cd8ce0c877148858ac0db487ad"
    assert got["Q09"]["citations"] == [
        {
            "uri": f"repo://handbook@{c2}/CODEOWNERS",
            "sha256": suite.keys["Q09"].valid_sources[0].sha256,
        }
    ]
    assert got["Q11"]["citations"][0]["uri"] == f"repo://handbook@{c1}/CODEOWNERS"  # as_of 1.0
    assert got["Q08"]["citations"][1] == {"uri": "handbook/README.md"}  # out of scope: no hash
    meta = json.loads((folder / "answers/baseline-repo-search.meta.json").read_text())
    assert meta["model"] == "scripted-searcher" and meta["harness"].startswith(
        "hangar knowledge run"
    )
    # what the sandbox held: only the question's scope at as_of, no .git
    from hangar.store import ResultsStore

    results = {r.scenario_id: r for r in ResultsStore(store).results(sweep)}
    assert {r.verdict.value for r in results.values()} == {"pass"} and results[
        "Q09"
    ].kind == "knowledge"
    with tarfile.open(str(results["Q09"].evidence_uri).removeprefix("file://")) as tar:
        handle = tar.extractfile("files.json")
        assert handle is not None
        files = json.loads(handle.read())
    assert files == {"handbook": {"CODEOWNERS": suite.keys["Q09"].valid_sources[0].sha256}}
    out = runner.invoke(
        app,
        [
            "knowledge",
            "score",
            str(folder),
            "--baseline",
            "baseline-projects",
            "--candidate",
            "baseline-repo-search",
            "--format",
            "json",
        ],
    )
    report = json.loads(out.stdout)
    arms = {a["arm"]: a for a in report["arms"]}
    rs = {m["metric"]: (m["k"], m["n"]) for m in arms["baseline-repo-search"]["metrics"]}
    pj = {m["metric"]: (m["k"], m["n"]) for m in arms["baseline-projects"]["metrics"]}
    assert rs == {"correctness": (10, 11), "citation_validity": (10, 11)}
    assert pj == {"correctness": (7, 11), "citation_validity": (4, 11)}
    assert arms["baseline-projects"]["citations"] == {
        "fabricated": 3,
        "stale": 3,
        "unsupported": 1,
        "valid": 5,
        "total": 12,
    }
    assert arms["baseline-repo-search"]["citations"] == {
        "fabricated": 1,
        "stale": 0,
        "unsupported": 0,
        "valid": 12,
        "total": 13,
    }
    assert [c["sentence"] for c in report["comparisons"]] == [
        "baseline is not shown to lose by 15 points",
        "baseline is shown to lose by at least 15 points on citation validity",
    ]


@pytest.mark.ray
@pytest.mark.docker
@pytest.mark.slow
def test_an_as_of_commit_that_is_not_there_is_blocked_setup(
    ray_local: None, docker_client: Any, tmp_path: Path
) -> None:
    folder = make_suite(tmp_path, 1)
    rows = [json.loads(x) for x in (folder / "questions.jsonl").read_text().splitlines()]
    rows[0]["as_of"] = {"handbook": "0" * 40}
    jsonl(folder / "questions.jsonl", rows)
    seal(folder)
    out = runner.invoke(
        app,
        [
            "knowledge",
            "run",
            str(folder),
            # A key the test's Ray workers have (the preflight checks it on the node).
            "--model",
            "{id: gpt-4o-mini, api_key_env: HANGAR_SCRIPTED_KEY}",
            "--repo",
            f"handbook={BUNDLE}",
            "--store",
            f"sqlite:///{tmp_path}/r.db",
            "--evidence",
            (tmp_path / "ev").as_uri(),
        ],
    )
    assert out.exit_code == 0, out.output
    assert (
        "1 unanswered" in out.output
        and f"as_of commit {'0' * 40} is not in repository handbook" in out.output
    )


def test_a_manifest_written_elsewhere_and_the_rules_edge(tmp_path: Path) -> None:
    import hashlib

    from hangar.kinds.knowledge.report import sentence

    folder = make_suite(tmp_path)
    flat = {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
        for name in ("questions.jsonl", "keys.jsonl")
    }
    (folder / "manifest.json").write_text(json.dumps(flat))  # flat, bare hex: accepted
    assert [q.id for q in sealed_suite(folder).questions] == ["q0", "q1", "q2", "q3"]
    (folder / "keys.jsonl").write_text(
        (folder / "keys.jsonl").read_text().replace("KEY-TEXT-0", "X")
    )
    with pytest.raises(ConfigError, match=r"keys\.jsonl: changed since the suite was sealed"):
        sealed_suite(folder)
    # the lower bound "reaches" +15 points at 0.15 exactly, however the float came out
    shown = "baseline is shown to lose by at least 15 points on correctness"
    assert sentence("correctness", 0.1499999999999, 0.15, False) == shown
    assert sentence("correctness", 0.15000000000000002, 0.15, False) == shown
    assert (
        sentence("correctness", 0.149, 0.15, False) == "baseline is not shown to lose by 15 points"
    )


def test_a_citation_carries_the_as_of_hash_never_the_agents(tmp_path: Path) -> None:
    # Judging reads nothing the agent can change: the workspace is read-only, and a
    # citation's hash is the one hangar recorded when it exported the tree at as_of.
    from types import SimpleNamespace

    from hangar.agents import AgentRun
    from hangar.kinds.knowledge.trial import KnowledgeTrial

    trial = KnowledgeTrial.__new__(KnowledgeTrial)
    commit = "c" * 40
    trial.item = SimpleNamespace(id="Q1", commits={"handbook": commit})  # type: ignore[assignment]
    trial.files = {"handbook": {"README.md": "sha256:" + "1" * 64}}
    trial.artifacts = tmp_path
    forged = {"uri": "handbook/README.md", "sha256": "sha256:" + "f" * 64}
    trial.agent_run = AgentRun(completed=True, answer={"answer": "x", "citations": [forged]})
    trial.collect()
    assert trial.answer is not None
    assert trial.answer["citations"] == [
        {"uri": f"repo://handbook@{commit}/README.md", "sha256": "sha256:" + "1" * 64}
    ]
