"""`hangar view`, driven in headless Chromium (Debian's package, through Playwright) on a
real sweep of each kind (execution on docker, a decision suite, a rubric benchmark, a
knowledge gold set), including hostile evidence: a `<script>` payload in the output, an
HTML file in the evidence, megabytes of output, a non-UTF-8 file, a tampered bundle."""

from __future__ import annotations

import io
import json
import shutil
import socket
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from hangar.cli import app
from hangar.results import STORED_PREFIX
from hangar.store import ResultsStore, bundles
from tests.require import skip_or_fail

pytestmark = [pytest.mark.ray, pytest.mark.docker, pytest.mark.slow]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()
HOSTILE = r"""
printf '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">\n'
printf 'bad bytes: \377\376\375 end\n'
head -c 3000000 /dev/zero | tr '\0' A
echo
mkdir -p "$HOME/out"
printf '<html><body><script>window.__pwned=3</script>' > "$HOME/out/page.html"
printf '<h1 id="evil">evil</h1></body></html>' >> "$HOME/out/page.html"
printf '\377\376 not utf-8 \200\n' > "$HOME/out/latin.txt"
"""

#: A forged Codex session among the hostile agent's files: read into events, shown as text.
FORGED = [
    {"timestamp": "t", "type": "session_meta", "payload": {"id": "forged"}},
    {
        "timestamp": "t",
        "type": "response_item",
        "payload": {
            "type": "function_call",
            "name": "exec_command",
            "arguments": json.dumps({"cmd": "echo <script>window.__pwned=4</script>"}),
            "call_id": "c1",
        },
    },
    {
        "timestamp": "t",
        "type": "response_item",
        "payload": {
            "type": "function_call_output",
            "call_id": "c1",
            "output": 'Process exited with code 0\n<img src=x onerror="window.__pwned=5">',
        },
    },
]
HOSTILE += "cat > \"$HOME/out/rollout-forged.jsonl\" <<'EOF'\n"
HOSTILE += "".join(json.dumps(r) + "\n" for r in FORGED) + "EOF\n"


class Farm:
    """The store with one sweep of each kind, and the viewer serving it."""

    def __init__(self, root: Path, url: str, base: str, ids: dict[str, str], knowledge: Path):
        self.root, self.url, self.base, self.ids, self.knowledge = root, url, base, ids, knowledge

    @property
    def store(self) -> ResultsStore:
        return ResultsStore(self.url)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: A Harbor task whose test script runs unittest, writes reward 0 on a failure and exits 0.
GREETING_TEST = """import unittest
from pathlib import Path


class Greeting(unittest.TestCase):
    def test_readme_kept(self):
        self.assertTrue(Path("/app/README").exists())

    def test_hello_file(self):
        p = Path("/app/hello.txt")
        self.assertEqual(p.read_text().strip() if p.exists() else None, "Hello, world!")


if __name__ == "__main__":
    unittest.main()
"""
GREETING_SH = """#!/bin/bash
if python3 /tests/test_greeting.py; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""


def _harbor_sweep(root: Path, url: str, evidence: str) -> None:
    """The greeting task (hello-file, judged by unittest) with the nop agent."""
    from hangar.scheduler.driver import SweepRunner
    from hangar.scheduler.sweep import load_sweep

    task = root / "harbor" / "greeting"
    shutil.copytree(EXAMPLES / "harbor" / "dataset" / "hello-file", task)
    (task / "tests" / "test.sh").write_text(GREETING_SH)
    (task / "tests" / "test_greeting.py").write_text(GREETING_TEST)
    stock = "hangar/base:bookworm-stock"
    sweep = {
        "id": "view-harbor",
        "scenarios": ["greeting"],
        "agents": {"nop": {"kind": "reference", "role": "nop"}},
        "models": ["none"],
        "image_map": {"ubuntu:*": stock},
        "store": url,
        "evidence": evidence,
    }
    (root / "harbor" / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    SweepRunner(load_sweep(root / "harbor" / "sweep.yaml"), ResultsStore(url)).run()


def _sweeps(root: Path, url: str, server_url: str) -> dict[str, str]:
    """Run a sweep of each kind into the store at `url`."""
    from hangar.kinds.knowledge.custody import import_arm, sealed_suite
    from hangar.kinds.knowledge.run import run_arm
    from hangar.kinds.rubric.run import run_benchmark
    from hangar.models import ModelSpec
    from hangar.scheduler.batch import run_batch
    from hangar.scheduler.driver import SweepRunner
    from hangar.scheduler.sweep import load_sweep

    evidence = (root / "ev").as_uri()
    agents = yaml.safe_load((EXAMPLES / "agents.yaml").read_text())
    agents["hostile"] = {"command": HOSTILE, "collect": ["~/out"]}
    (root / "agents.yaml").write_text(yaml.safe_dump(agents))
    sweep = {
        "id": "view-exec",
        "scenarios": [str(EXAMPLES / "median" / "scenario.yaml")],
        "agents_file": "agents.yaml",
        "models": ["none"],
        "arms": {"control": []},
        "repeats": 1,
        "backend": "docker",
        "store": url,
        "evidence": evidence,
    }
    (root / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    loaded = load_sweep(root / "sweep.yaml")
    SweepRunner(loaded, ResultsStore(url)).run()

    _harbor_sweep(root, url, evidence)

    shutil.copytree(EXAMPLES / "decision", root / "decision")
    decision = yaml.safe_load((root / "decision" / "sweep.yaml").read_text())
    decision["models"][0]["base_url"] = f"{server_url}/v1"
    decision |= {"store": url, "evidence": evidence, "id": "view-decision"}
    (root / "decision" / "sweep.yaml").write_text(yaml.safe_dump(decision))
    SweepRunner(load_sweep(root / "decision" / "sweep.yaml"), ResultsStore(url)).run()

    bench = root / "sdd-benchmark"
    shutil.copytree(EXAMPLES / "sdd-benchmark", bench)
    config = bench / "config.yaml"
    config.write_text(
        config.read_text().replace("http://127.0.0.1:8765/v1", f"{server_url}/v1")
        + f"    store: {url}\n    evidence: {evidence}\n"
    )
    bench_run = run_benchmark(bench, run=run_batch)

    knowledge = root / "knowledge"
    shutil.copytree(EXAMPLES / "knowledge", knowledge)
    ext = knowledge / "external"
    import_arm(
        sealed_suite(knowledge),
        "baseline-projects",
        ext / "baseline-projects.jsonl",
        ext / "baseline-projects.meta.json",
    )
    model = ModelSpec(
        id="scripted-searcher", base_url=f"{server_url}/v1", api_key_env="HANGAR_SCRIPTED_KEY"
    )
    arm = run_arm(
        knowledge,
        "baseline-repo-search",
        model,
        repositories={"handbook": str(EXAMPLES / "repos" / "handbook.bundle")},
        store_url=url,
        evidence_url=evidence,
        run=run_batch,
    )
    benchmark_id = next(i for i in ResultsStore(url).sweep_ids() if i.startswith("sdd-benchmark"))
    assert bench_run.report.summary.total_samples == 8
    return {
        "execution": "view-exec",
        "harbor": "view-harbor",
        "decision": "view-decision",
        "rubric": benchmark_id,
        "knowledge": arm.sweep,
    }


@pytest.fixture(scope="module")
def farm(
    ray_local: None, docker_client: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Farm]:
    import uvicorn

    from hangar.testing.scripted import Script, ScriptedServer
    from hangar.viewer.app import Viewer, make_app

    root = tmp_path_factory.mktemp("farm")
    url = f"sqlite:///{root}/results.db"
    parts = (
        EXAMPLES / "decision" / "scripted-model.yaml",
        EXAMPLES / "sdd-benchmark" / "scripted-model.yaml",
        EXAMPLES / "knowledge" / "scripted-model.yaml",
    )
    script = Script(conversations=[c for p in parts for c in Script.load(p).conversations])
    server = ScriptedServer(script).start()
    try:
        ids = _sweeps(root, url, server.url)
    finally:
        server.shutdown()
    viewer = Viewer(ResultsStore(url), knowledge=[root / "knowledge"], poll_s=1.0)
    port = _port()
    config = uvicorn.Config(make_app(viewer), host="127.0.0.1", port=port, log_level="warning")
    web = uvicorn.Server(config)
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    for _ in range(100):
        if web.started:
            break
        time.sleep(0.05)
    yield Farm(root, url, f"http://127.0.0.1:{port}", ids, root / "knowledge")
    web.should_exit = True
    thread.join(10)
    viewer.evidence.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium = shutil.which("chromium")
    if chromium is None:
        skip_or_fail("chromium", "Debian's chromium is not installed")
    from playwright.sync_api import sync_playwright

    try:
        manager = sync_playwright().start()
    except Exception as exc:  # its node did not start (a missing shared library)
        skip_or_fail("chromium", f"Playwright's driver did not start: {exc}")
    try:
        b = manager.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield b
        b.close()
    finally:
        manager.stop()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1300, "height": 1000})
    p = context.new_page()
    p.errors = []  # type: ignore[attr-defined]
    p.on("pageerror", lambda e: p.errors.append(str(e)))  # type: ignore[attr-defined]
    p.on("console", lambda m: p.errors.append(m.text) if m.type == "error" else None)  # type: ignore[attr-defined]
    yield p
    context.close()


def trial_link(
    farm: Farm, sweep: str, agent: str | None = None, scenario: str | None = None
) -> str:
    for r in farm.store.results(sweep):
        if (agent is None or r.agent == agent) and (scenario is None or r.scenario_id == scenario):
            return f"{farm.base}/trials/{sweep}/{r.trial_key}"
    raise AssertionError(f"no trial of {agent or scenario} in {sweep}")


def test_the_sweeps_page_lists_every_run_and_filters(farm: Farm, page: Any) -> None:
    page.goto(farm.base + "/")
    rows = page.locator("tr.sweep-row")
    assert rows.count() == len(farm.ids) == 5
    text = page.inner_text("#sweeps")
    for sweep in farm.ids.values():
        assert sweep in text
    # filters are choices of what the store holds, not free text
    models = page.locator("select[name=model] option").all_inner_texts()
    assert "scripted-searcher" in models and "none" in models
    page.select_option("select[name=model]", "scripted-searcher")
    page.click("button[type=submit]")
    page.wait_for_load_state()
    assert page.locator("tr.sweep-row").count() == 1
    assert farm.ids["knowledge"] in page.inner_text("#sweeps")
    assert page.errors == []


def test_the_sweep_page_shows_the_reports_numbers(farm: Farm, page: Any, tmp_path: Path) -> None:
    for kind in ("execution", "decision"):
        sweep = farm.ids[kind]
        out = runner.invoke(app, ["report", sweep, "--store", farm.url, "--format", "json"])
        assert out.exit_code == 0, out.output
        report = json.loads(out.stdout)
        page.goto(f"{farm.base}/sweeps/{sweep}")
        for g in report["groups"]:
            label = f"{g['agent']} · {g['model']} · {g['arm']}"
            row = page.locator(f'tr.group[data-group="{label}"]').inner_text()
            r = g["pass_rate"]
            assert (
                f"{r['estimate'] * 100:.1f}% [{r['low'] * 100:.1f}%, {r['high'] * 100:.1f}%]" in row
            )
            for m in g["metrics"]:
                if m["scale"] == "binary":
                    assert f"{m['mean'] * 100:.1f}% [{m['ci_low'] * 100:.1f}%" in row
        sentences = page.locator("td.sentence").all_inner_texts()
        assert sentences == [c["sentence"] for c in report["comparisons"]]
    # the decision suite's margin (15 points), as `hangar report` says it
    assert "skill is shown to beat control by at least 15 points on correct" in sentences
    shot = tmp_path / "sweep.png"
    page.screenshot(path=str(shot), full_page=True)
    from PIL import Image

    with Image.open(shot) as image:
        colours = {c for _, c in image.convert("RGB").getcolors(maxcolors=1 << 20) or []}
    assert {(0x3B, 0x6F, 0xB6), (0xD9, 0x82, 0x2B)} <= colours  # the bars of two groups
    assert page.errors == []


def test_an_execution_trial(farm: Farm, page: Any) -> None:
    page.goto(trial_link(farm, farm.ids["execution"], agent="gold"))
    assert page.inner_text("#verdict") == "pass"
    diff = page.locator("#diff")
    assert "statkit/stats.py" in diff.inner_text()
    assert diff.locator("span.gi").count() >= 2  # added lines, highlighted
    assert "exit 0" in page.inner_text("body")
    assert page.locator("#timeline rect.phase").count() >= 8
    assert "model request" not in page.inner_text("#transcript")  # a command agent
    assert "The evidence archive's hashes match" in page.inner_text("#bundle-check")
    with page.expect_download() as download:
        page.click("text=download bundle.tar.gz")
    assert download.value.suggested_filename == "bundle.tar.gz"
    assert page.errors == []


def test_a_failed_trial_says_why_first(farm: Farm, page: Any, tmp_path: Path) -> None:
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(trial_link(farm, farm.ids["execution"], agent="noop"))
    assert page.inner_text("#verdict") == "fail"
    reasons = page.locator("#reason li").all_inner_texts()
    assert any(r.startswith("verifier command failed") for r in reasons)
    # the failing command and the end of its output come before everything else
    failing = page.inner_text("#failing")
    assert "$ python3 -m pytest" in failing and "assert 3 == 2.5" in failing
    order = page.evaluate(
        "[...document.querySelectorAll('main > section, main > h2, main > details')]"
        ".map(e => e.id || e.textContent.trim())"
    )
    assert order.index("failing") < order.index("task") < order.index("timings")
    # the task as the agent read it, the user's repository (never a worker's copy), the image
    task = page.inner_text("#task")
    assert "median() returns the wrong value" in task
    assert str(EXAMPLES / "repos" / "statkit.bundle") in task and ".cache" not in task
    assert "hangar/base:bookworm" in task and "1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2" in task
    assert page.locator("#judge").count() == 0  # no judge for execution trials
    assert not page.locator("#timings").evaluate("d => d.open")  # timings folded
    page.click("#agent-settings summary")
    assert '"kind": "command"' in page.inner_text("#agent-settings")
    # previous and next trials of the sweep
    here = page.url
    page.click("#next" if page.locator("#next").count() else "#previous")
    assert page.url != here and page.locator("#verdict").count() == 1
    shot = tmp_path / "trial.png"
    page.goto(here)
    page.screenshot(path=str(shot), full_page=True)
    assert page.errors == []


def test_a_script_that_exits_0_on_a_failed_reward_is_shown_failed(
    farm: Farm, page: Any, tmp_path: Path
) -> None:
    """Harbor's test.sh writes reward 0 and exits 0: the page and `hangar trial show` say
    it failed and show the first failing test's output before anything else."""
    link = trial_link(farm, farm.ids["harbor"], agent="nop")
    page.goto(link)
    assert page.inner_text("#verdict") == "fail"
    failing = page.locator("#failing .command").all_inner_texts()
    assert failing[0].startswith("first failing test: FAIL: test_hello_file")
    assert "AssertionError: None != 'Hello, world!'" in failing[0]
    assert "bash /tests/test.sh (exit 0, reward 0 < 1)" in failing[1]
    status = page.locator(".command p.mono span", has_text="exit 0, reward 0 < 1")
    assert status.get_attribute("class") == "error"  # never painted as success
    assert page.locator(".command span.ok").count() == 0
    reward = page.inner_text("#reward")  # rows, not raw JSON
    assert "reward\t0" in reward and "outcome\treward 0 < 1" in reward
    assert not page.locator("#reward + details").evaluate("d => d.open")  # raw JSON folded
    page.screenshot(path=str(tmp_path / "harbor-trial.png"), full_page=True)
    assert page.errors == []
    key = link.rsplit("/", 1)[1]
    shown = CliRunner().invoke(app, ["trial", "show", key[:12], "--store", farm.url])
    assert shown.exit_code == 0, shown.output
    out = shown.output
    first, script = (
        out.index("first failing test: FAIL: test_hello_file"),
        out.index("$ bash /tests/test.sh (exit 0, reward 0 < 1)"),
    )
    assert first < out.index("AssertionError: None != 'Hello, world!'") < script


def test_the_sweep_pages_sort_filter_by_choice_and_fit_1400_px(
    farm: Farm, page: Any, tmp_path: Path
) -> None:
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(farm.base + "/")
    heads = page.locator("#sweeps th").all_inner_texts()
    assert "pass rate" in heads
    rates = page.locator("#sweeps td.rate").all_inner_texts()
    assert all(r == "n/a" or r.endswith("%") for r in rates) and len(rates) == len(farm.ids)
    for name in ("since", "until"):  # a placeholder that does not read as a value
        assert page.get_attribute(f"input[name={name}]", "placeholder") == "YYYY-MM-DD"
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    # sort by pass rate, both ways
    page.click("#sweeps th:has-text('pass rate')")
    up = [
        float(v)
        for v in page.locator("#sweeps td.rate").evaluate_all(
            "cells => cells.map(c => c.dataset.value).filter(v => v !== '')"
        )
    ]
    assert up == sorted(up)
    page.click("#sweeps th:has-text('pass rate')")
    down = [
        float(v)
        for v in page.locator("#sweeps td.rate").evaluate_all(
            "cells => cells.map(c => c.dataset.value).filter(v => v !== '')"
        )
    ]
    assert down == sorted(up, reverse=True)
    # a sweep: the trial filters are choices; the groups sort; nothing scrolls sideways
    sweep = farm.ids["execution"]
    page.goto(f"{farm.base}/sweeps/{sweep}")
    agents = page.locator("select[name=agent] option").all_inner_texts()
    assert {"gold", "noop"} <= set(agents)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    assert page.locator("#plot-cost").count() == 0  # no cost recorded: no cost plot
    page.click("#groups th:has-text('trials')")
    page.select_option("select[name=agent]", "noop")
    page.click("form.filters button[type=submit]")
    page.wait_for_load_state()
    assert set(page.locator("#trial-list tr.trial td:nth-child(3)").all_inner_texts()) == {"noop"}
    page.screenshot(path=str(tmp_path / "sweep.png"), full_page=True)
    # two agents' attempts at the same task, side by side
    page.goto(trial_link(farm, sweep, agent="noop"))
    page.click("#siblings summary")
    page.click("#siblings a:has-text('gold')")
    sides = page.locator("#versus .side")
    assert sides.count() == 2
    left, right = sides.nth(0).inner_text(), sides.nth(1).inner_text()
    assert "noop" in left and "fail" in left and "No change to the workspace" in left
    assert "gold" in right and "pass" in right and "statkit/stats.py" in right
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    page.screenshot(path=str(tmp_path / "versus.png"), full_page=True)
    assert page.errors == []


def test_a_decision_case_a_rubric_sample_and_a_knowledge_answer(farm: Farm, page: Any) -> None:
    results = list(farm.store.results(farm.ids["decision"]))
    wrong = next(r for r in results if r.arm == "control" and r.verdict.value == "fail")
    page.goto(f"{farm.base}/trials/{farm.ids['decision']}/{wrong.trial_key}")
    table = page.inner_text("#choices")
    assert "expected" in table and page.locator("#choices tr.wrong").count() >= 1
    assert f"expected {', '.join(wrong.details['expected'])}" in page.inner_text("body")

    page.goto(trial_link(farm, farm.ids["rubric"], scenario="BENCH-TASK-003"))
    dims = page.inner_text("#dimensions")
    assert (
        "granularity" in dims and "(asked again)" in dims
    )  # the follow-up on an unparsable answer
    summaries = page.locator("details.judge summary").all_inner_texts()
    assert any("reference-first" in s for s in summaries)
    assert any("candidate-first" in s for s in summaries)
    assert len(summaries) == 8  # four dimensions, two orderings

    page.goto(trial_link(farm, farm.ids["knowledge"], scenario="Q08"))
    cites = page.inner_text("#citations")
    assert "valid" in cites and "fabricated" in cites  # README.md is not a valid source
    assert page.locator("#labels tr").count() == 3  # a header and two raters
    page.goto(
        f"{farm.base}/knowledge/{farm.knowledge.name}?baseline=baseline-projects&candidate=baseline-repo-search"
    )
    assert (
        "baseline is shown to lose by at least 15 points on citation validity"
        in page.inner_text("#knowledge")
    )
    assert page.errors == []


def test_hostile_evidence_is_shown_never_run(farm: Farm, page: Any) -> None:
    link = trial_link(farm, farm.ids["execution"], agent="hostile")
    response = page.goto(link)
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert page.evaluate("window.__pwned") is None
    body = page.locator("#transcript").text_content()  # folded blocks included
    assert "<script>window.__pwned=1</script>" in body  # shown as text
    assert "bad bytes: \ufffd" in body  # undecodable bytes replaced
    assert page.locator("#transcript details.fold").count() >= 1  # the long output folds
    assert "more in the file" in body  # megabytes: cut on the page, whole in the file
    size = page.evaluate("document.documentElement.outerHTML.length")
    assert size < 1_000_000
    html_file = next(
        f for f in page.locator("#files a").all_inner_texts() if f.endswith("page.html")
    )
    page.click(f"text={html_file}")
    page.wait_for_load_state()
    assert page.locator("#evil").count() == 0 and page.evaluate("window.__pwned") is None
    assert '<script>window.__pwned=3</script><h1 id="evil">evil</h1>' in page.inner_text(
        "#file-text"
    )
    page.goto(link)
    files = page.locator("#files a").all_inner_texts()
    page.click(f"text={next(f for f in files if f.endswith('latin.txt'))}")
    assert "\ufffd\ufffd not utf-8" in page.inner_text("#file-text")
    raw = httpx.get(page.url.replace("/file?", "/raw?"))
    assert raw.headers["content-type"] == "application/octet-stream"
    assert raw.headers["content-disposition"].startswith("attachment")
    assert raw.headers["x-content-type-options"] == "nosniff"
    # the agent's own session files, read into events and shown as text, never run
    page.goto(link)
    session = page.locator(".agent-transcript").text_content()
    assert "$ echo <script>window.__pwned=4</script>, exit 0" in session
    assert '<img src=x onerror="window.__pwned=5">' in session
    assert page.evaluate("window.__pwned") is None
    # the trace, paged: 3 MB in 256 KiB pages
    page.goto(link)
    page.click("text=trace.jsonl")
    assert page.locator("text=next").count() == 1
    assert page.errors == []


def test_a_tampered_bundle_is_named(farm: Farm, page: Any) -> None:
    # a trial no other test opens (the viewer keeps a bundle it has checked once)
    sweep = farm.ids["decision"]
    result = next(
        r for r in farm.store.results(sweep) if r.arm == "skill" and r.evidence_uri is not None
    )
    # A decision case's bundle is kept in the results store: tampered with there.
    key = str(result.evidence_uri).removeprefix(STORED_PREFIX)
    kept = farm.store.bundle(key)
    assert kept is not None
    with farm.store.engine.begin() as conn:
        conn.execute(bundles.update().where(bundles.c.key == key).values(data=kept + b"tampered"))
    page.goto(f"{farm.base}/trials/{sweep}/{result.trial_key}")
    check = page.inner_text("#bundle-check")
    assert "does not match" in check and "the result recorded" in check
    # never opened: nothing of it is listed or served as the trial's evidence
    assert "It was not opened" in check
    assert page.locator("#files a").count() == 0
    with tarfile.open(fileobj=io.BytesIO(kept)) as tar:
        held = next(m.name for m in tar if m.isfile())
    served = httpx.get(f"{page.url.split('?')[0].rstrip('/')}/file", params={"path": held})
    assert served.status_code == 404, held


def test_new_trials_appear_while_a_sweep_runs(farm: Farm, page: Any) -> None:
    sweep = farm.ids["decision"]
    page.goto(f"{farm.base}/sweeps/{sweep}")
    before = page.inner_text("#trial-count")
    page.evaluate("window.__marker = 'still here'")
    one = next(iter(farm.store.results(sweep)))
    later = one.model_copy(
        update={"trial_key": "f" * 64, "finished_at": one.finished_at.replace(year=2027)}
    )
    farm.store.record([later])
    deadline = time.monotonic() + 15
    while page.inner_text("#trial-count") == before and time.monotonic() < deadline:
        page.wait_for_timeout(300)  # the page polls every second; no reload here
    assert page.evaluate("window.__marker") == "still here"  # no reload
    assert str(int(before.split()[0]) + 1) in page.inner_text("#trial-count")


def test_comparing_two_sweeps_and_a_baseline(farm: Farm, page: Any) -> None:
    from hangar.scores.baseline import create_baseline

    create_baseline(farm.store, "exec-b1", farm.ids["execution"])
    page.goto(f"{farm.base}/compare?baseline=exec-b1&b={farm.ids['execution']}")
    assert "No regression." in page.inner_text("body")
    assert "pass" in page.inner_text("#compare-metrics")
    page.goto(f"{farm.base}/compare?a={farm.ids['decision']}&b={farm.ids['execution']}")
    assert page.locator("#compare-metrics tr").count() > 1
    assert page.errors == []


# -- labelling, where raters work ------------------------------------------------------------


@pytest.fixture
def labelling(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A viewer of a fresh copy of the example gold set whose external arm nobody labelled
    yet (no Ray, no docker: the flow reads only the suite's files and repository)."""
    import uvicorn

    from hangar.kinds.knowledge.custody import import_arm, sealed_suite
    from hangar.viewer.app import Viewer, make_app

    folder = tmp_path / "knowledge"
    shutil.copytree(EXAMPLES / "knowledge", folder)
    (folder / "labels" / "baseline-projects.jsonl").unlink()
    (folder / "repositories.yaml").write_text(f"handbook: {EXAMPLES / 'repos/handbook.bundle'}\n")
    external = folder / "external"
    import_arm(sealed_suite(folder), "baseline-projects", external / "baseline-projects.jsonl",
               external / "baseline-projects.meta.json")  # fmt: skip
    viewer = Viewer(ResultsStore(f"sqlite:///{tmp_path}/r.db"), knowledge=[folder])
    port = _port()
    web = uvicorn.Server(
        uvicorn.Config(make_app(viewer), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    for _ in range(100):
        if web.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", folder
    web.should_exit = True
    thread.join(10)


def test_two_raters_label_in_the_viewer_and_never_see_each_other(
    labelling: tuple[str, Path], browser: Any, tmp_path: Path
) -> None:
    base, folder = labelling
    labels = folder / "labels" / "baseline-projects.jsonl"
    start = f"{base}/knowledge/knowledge/label"

    def rater(name: str) -> Any:
        page = browser.new_context(viewport={"width": 1400, "height": 1100}).new_page()
        page.goto(start)
        page.fill("input[name=rater]", name)  # asked once: it travels in the links after
        page.click("button[type=submit]")
        page.click("#arms a")
        return page

    ana = rater("ana")
    assert ana.inner_text("h2") == "Q01 (decision-why)"
    assert "PostgreSQL rather than MongoDB" in ana.inner_text("#question")
    key = ana.inner_text("#key")  # the sealed key, shown in this flow
    assert "multi-row transactions with serializable isolation" in key
    assert "HANGAR-CANARY" not in ana.content()  # never its canary
    cited = ana.inner_text("#answer")
    assert "[1] ADR 0001 (attached: postgresql.md)" in cited
    ana.check("input[name=correct][value=yes]")
    ana.check("input[name=unsupported]")
    ana.screenshot(path=str(tmp_path / "label.png"), full_page=True)
    ana.click("#label button[type=submit]")
    ana.wait_for_load_state()
    assert ana.inner_text("h2").startswith("Q02")
    lines = labels.read_text().splitlines()
    assert [json.loads(x) for x in lines] == [
        {"id": "Q01", "rater": "ana", "correct": True,
         "unsupported": ["ADR 0001 (attached: postgresql.md)"]}
    ]  # fmt: skip
    # the terminal flow's exact line format
    assert lines[0] == json.dumps(json.loads(lines[0]))
    ana.click("text=skip this one")  # Q02 left for later: Q03 cites a repository file
    assert ana.inner_text("h2").startswith("Q03")
    cited = ana.inner_text("#answer")  # what the citation points at, read at its commit
    assert "repo://handbook@dee254872bb216846ae8eeaa1818a5071ed07e7a/docs/status.md" in cited
    assert "Search v2 is blocked: the search vendor has not approved" in cited
    ana.screenshot(path=str(tmp_path / "cited.png"), full_page=True)

    ben = rater("ben")
    assert ben.inner_text("h2") == "Q01 (decision-why)"  # his own queue: Q01 is still his
    assert "ana" not in ben.content()  # nothing of the first rater's labels
    assert "0 of 11 labelled by you" in ben.inner_text("main")
    ben.check("input[name=correct][value=no]")
    ben.click("#label button[type=submit]")
    ben.wait_for_load_state()
    assert [json.loads(x)["rater"] for x in labels.read_text().splitlines()] == ["ana", "ben"]
    # the labels score as the terminal's do: one yes, one no is a tie, incorrect
    from hangar.kinds.knowledge.custody import load_arm, sealed_suite
    from hangar.kinds.knowledge.scoring import score_arm

    suite = sealed_suite(folder)
    q01 = score_arm(suite, load_arm(suite, "baseline-projects"))[0]
    assert (q01.status, q01.correct, q01.votes) == ("scored", False, {"ana": True, "ben": False})
    for page in (ana, ben):
        page.context.close()


def test_a_label_posted_from_elsewhere_is_refused(labelling: tuple[str, Path]) -> None:
    base, folder = labelling
    form = {"rater": "eve", "arm": "baseline-projects", "question": "Q01", "correct": "yes"}
    for extra, headers in (
        ({}, {}),
        ({"csrf": "guess"}, {}),
    ):
        got = httpx.post(f"{base}/knowledge/knowledge/label", data={**form, **extra},
                         headers=headers, follow_redirects=False)  # fmt: skip
        assert got.status_code == 403
    page = httpx.get(f"{base}/knowledge/knowledge/label?rater=eve&arm=baseline-projects")
    token = page.text.split('name="csrf" value="')[1].split('"')[0]
    cross = httpx.post(
        f"{base}/knowledge/knowledge/label",
        data={**form, "csrf": token},
        headers={"Sec-Fetch-Site": "cross-site"},
        follow_redirects=False,
    )
    assert cross.status_code == 403
    assert not (folder / "labels" / "baseline-projects.jsonl").exists()
    ok = httpx.post(f"{base}/knowledge/knowledge/label", data={**form, "csrf": token},
                    follow_redirects=False)  # fmt: skip
    assert ok.status_code == 303 and ok.headers["location"].startswith(
        "/knowledge/knowledge/label?"
    )
    again = httpx.post(f"{base}/knowledge/knowledge/label", data={**form, "csrf": token})
    assert (
        again.status_code == 400 and "eve labelled Q01 of baseline-projects already" in again.text
    )
    bad = httpx.get(f"{base}/knowledge/knowledge/label?rater=%3Cscript%3E")
    assert bad.status_code == 400 and "<script>" not in bad.text
