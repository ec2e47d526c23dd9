"""`make demo`: real sweeps on the embedded defaults.

1. `examples/sweep.yaml`: the statkit scenario with agents `gold` (applies the fix) and
   `noop` (changes nothing), two repeats each.
2. `examples/sweep-models.yaml`: the same scenario solved by model-driven agents: a
   command agent (`toolloop`, a script in the sandbox whose model calls go through the
   relay) and a chat agent (`chat`, a loop on the host whose tools run in the sandbox).
   With no API key set, the model is the scripted server (`examples/scripted-model.yaml`)
   on 127.0.0.1:8765; with OPENAI_API_KEY set, a real provider (HANGAR_DEMO_MODEL,
   default gpt-4o-mini).

3. `examples/decision/sweep.yaml`: a decision suite: eight cases over two
   skills, each answered with the skill supplied (arm skill) and without it (arm control)
   by the scripted model, graded by the choice grader; then the paired comparison with
   fixed roles (control as the baseline, skill as the candidate).

4. `examples/sdd-benchmark/`: a rubric benchmark, two phases of four samples,
   each written by the scripted model with the phase's skill and scored by structural
   checks and the scripted judge (one call per dimension, both orderings), against
   `baselines/baseline-v1.yaml`: the report shows the regression of BENCH-PROP-003 (a
   poorer proposal) on risk_coverage, which is the gate's exit status 1. It runs in a
   copy under ./runs/sdd-benchmark, whose reports/ keeps the history of every demo run.

5. `examples/knowledge/`: a sealed knowledge gold set, eleven questions over
   `repos/handbook.bundle`. The external arm `baseline-projects` (answers a person got
   from another system) is imported; the repo-search arm runs as trials (each question
   in a sandbox with the repository read-only at its `as_of`, an agent with only list,
   grep, read and answer, on the scripted model); both are scored from the committed
   labels of three raters, a canary scan of the run's evidence finds nothing, and the
   rule is printed: baseline-projects is not shown to lose on correctness, and is shown
   to lose by at least 15 points on citation validity. Then the retrieval arm
   `retrieval:handbook`: an agent with only the tools of a retrieval MCP server of the
   example's own (`knowledge/mcp/handbook_server.py`, on the MCP SDK from PyPI, pinned by
   sha256 with its snapshot of the handbook at 1.1), run in the sandbox; the arm's meta
   records the server's snapshot, and the two questions asked as of 1.0 get stale
   citations. In a fresh copy under ./runs/knowledge each time (the trials resume from the
   store).

6. `examples/harbor/`: a Harbor dataset of five tasks (the image built from each task's
   Dockerfile is the fixture, its `FROM` mapped onto the base image's stock variant). It
   is validated first: the oracle (each task's solution/solve.sh) must pass and the nop
   agent must fail; `broken-tests` is broken on purpose (its tests check another file
   than the task names), so the sweep over the dataset leaves it out, and runs the
   oracle and nop on the four valid tasks. `count-words`' verifier reaches one host, a
   service the demo serves on 127.0.0.1:8799, through the audited egress proxy. Then an
   agent CLI on one of its tasks (`harbor/sweep-agent.yaml`): mini-swe-agent's bundle (the
   CLI and a Python of its own, built once from PyPI and Debian's packages) mounted
   read-only into fix-median's own image, asking the scripted model through the relay.

7. `examples/swebench/`: two SWE-bench instances of statkit (the gold patch resolves
   each, nop resolves none), validated and run, then exported in the field's formats:
   Harbor job folders (`runs/exports/harbor-job`) and SWE-bench's submission layout
   (`runs/exports/swebench-submission`).

8. `examples/routing/`: a routing suite, four prompts over a catalog of three skills,
   checked offline first (`hangar routing check --require-all-fixtures`), then asked of
   hangar's chat agent in a docker sandbox with the whole catalog installed where it finds
   skills (~/.agents/skills), on the scripted model: the route is what its session shows
   it loaded. Three route exactly; on the review prompt it also loads tdd, an extra skill
   the grade names (fail).

Each execution trial clones the pinned revision, runs its agent in a docker sandbox with the
network off, runs the hidden tests in the same sandbox wiped, is judged by the pinned host
verifier and stores its evidence archive; results go to SQLite under ./runs. Prints every
result with its bundle, tokens and cost; exits non-zero if a verdict is not the expected
one. Run it again and both sweeps resume: nothing runs twice.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from rich.markup import escape

from hangar.agents import load_agents
from hangar.console import console, print_result
from hangar.kinds.execution.images.task import ImageTask
from hangar.kinds.execution.images.validate import validate_dataset
from hangar.kinds.knowledge.custody import import_arm, sealed_suite
from hangar.kinds.knowledge.record import default_store, record_scores
from hangar.kinds.knowledge.render import render as render_knowledge
from hangar.kinds.knowledge.report import build_gold_set_report
from hangar.kinds.knowledge.run import run_arm
from hangar.kinds.knowledge.scan import scan_and_void, suite_canaries
from hangar.kinds.rubric.cli import print_report
from hangar.kinds.rubric.run import run_benchmark
from hangar.models import ModelSpec
from hangar.sandbox.bundles import ensure_bundle
from hangar.scheduler.batch import run_batch
from hangar.scheduler.driver import SweepRunner
from hangar.scheduler.sweep import Sweep, load_sweep, ready_tasks
from hangar.scores.render import render_text
from hangar.scores.report import build_report
from hangar.store import ResultsStore
from hangar.testing.answers import EXAMPLE_ANSWERS, EXAMPLE_PORT, serve_answers
from hangar.testing.scripted import Script, ScriptedServer

HERE = Path(__file__).resolve().parent


def run(sweep: Sweep, expected: dict[str, str] | None) -> bool:
    """Run a sweep, print its results; whether every verdict is the expected one."""
    store = ResultsStore(sweep.config.store)
    console.rule(f"sweep {sweep.id}: {sweep.size} trials")
    tally = SweepRunner(sweep, store).run()
    current = {t.digest for t in sweep.tasks}  # not results of older scenario versions
    results = [r for r in store.results(sweep.id) if r.scenario_digest in current]
    for result in results:
        print_result(result)
        if result.usage.input_tokens:
            u = result.usage
            console.print(
                f"  usage: {u.input_tokens} in ({u.cached_input_tokens} cached), "
                f"{u.output_tokens} out, ${u.cost_usd:.5f}",
                highlight=False,
            )
    console.print(f"{tally.done} trial(s) ran now, {tally.skipped} were final already (resume)")
    ok = len(results) == sweep.size
    for name in sweep.agents:
        got = sorted({r.verdict.value for r in results if r.agent == name})
        want = (expected or {}).get(name)
        good = want is None or got == [want]
        ok &= good
        mark = (
            "" if want is None else "[green]as expected[/]" if good else f"[red]expected {want}[/]"
        )
        console.print(f"{name} -> {', '.join(got)}  {mark}")
    return ok


def _words(regressions: set[tuple[str, str | None, str | None]]) -> str:
    """Regressions as people read them: "sample BENCH-PROP-003 on risk_coverage"."""
    said = []
    for kind, sample, dimension in sorted(regressions, key=str):
        parts = [kind, sample or "", f"on {dimension}" if dimension else ""]
        said.append(" ".join(p for p in parts if p))
    return ", ".join(said) or "none"


def main() -> int:
    """Run both example sweeps."""
    # Every example's results in one store under ./runs (a sweep's are beside its file by
    # default), so `hangar view` in this folder shows them all.
    os.environ.setdefault("HANGAR_RUNS_DIR", str(Path("runs").resolve()))
    real = bool(os.environ.get("OPENAI_API_KEY"))
    if not real:
        # Before the first sweep starts Ray: its workers keep the environment they start with.
        os.environ.setdefault("HANGAR_SCRIPTED_KEY", "scripted")  # a fake key, for loopback
    ok = run(load_sweep(HERE / "sweep.yaml"), {"gold": "pass", "noop": "fail"})
    models = load_sweep(HERE / "sweep-models.yaml")
    if real:
        model = ModelSpec(id=os.environ.get("HANGAR_DEMO_MODEL", "gpt-4o-mini"))
        config = models.config.model_copy(update={"models": [model]})
        models = models.model_copy(update={"config": config, "id": f"{models.id}-{model.id}"})
        ok &= run(models, None)  # a real model's verdict is its own
    else:
        server = ScriptedServer(scripted(), port=8765).start()
        try:
            ok &= run(models, {"toolloop": "pass", "chat": "pass"})
            ok &= decide(load_sweep(HERE / "decision" / "sweep.yaml"))
            ok &= benchmark()
            ok &= knowledge()
            ok &= harbor()
            ok &= harbor_agent()
            ok &= swebench()
            ok &= routing(load_sweep(HERE / "routing" / "sweep.yaml"))
        finally:
            server.shutdown()
    console.print("check a bundle with: hangar evidence verify URI")
    return 0 if ok else 1


def scripted() -> Script:
    """The scripted model of every demo sweep (the decision demo's replies included)."""
    parts = (
        "scripted-model.yaml",
        "decision/scripted-model.yaml",
        "routing/scripted-model.yaml",
        "sdd-benchmark/scripted-model.yaml",
        "knowledge/scripted-model.yaml",
        "knowledge/scripted-retrieval.yaml",
        "harbor/scripted-model.yaml",
    )
    return Script(conversations=[c for p in parts for c in Script.load(HERE / p).conversations])


def decide(sweep: Sweep) -> bool:
    """Run the decision suite and show the paired skill-vs-control result."""
    store = ResultsStore(sweep.config.store)
    console.rule(f"sweep {sweep.id}: {sweep.size} trials (decision suite)")
    tally = SweepRunner(sweep, store).run()
    report = build_report(
        sweep.id, store.results(sweep.id), margin=0.15, roles=("control", "skill")
    )
    console.out(render_text(report), highlight=False)
    console.print(f"{tally.done} trial(s) ran now, {tally.skipped} were final already (resume)")
    sentences = [c.sentence for c in report.comparisons if c.metric == "correct"]
    want = "control is shown to lose by at least 15 points on correct"
    console.print(f"decision -> {'; '.join(sentences)}", highlight=False)
    return sentences == [want]


def benchmark() -> bool:
    """Run the example benchmark against its baseline; the regression must be caught."""
    folder = Path("runs") / "sdd-benchmark"
    shutil.copytree(HERE / "sdd-benchmark", folder, dirs_exist_ok=True)
    console.rule(f"rubric benchmark {folder}, against baseline-v1")
    run = run_benchmark(folder, baseline="baseline-v1", run=run_batch)
    print_report(run.report)
    for path in run.files:
        console.print(f"wrote {path}", highlight=False)
    found = {
        (g.kind, g.sample, g.affected_dimension)
        for r in run.report.results.values()
        for g in r.regressions
    }
    want = {
        ("phase", None, None),
        ("sample", "BENCH-PROP-003", "risk_coverage"),
        ("dimension", None, "risk_coverage"),
    }
    good = run.exit_code == 1 and found == want and not run.report.trials_not_scored
    mark = "[green]as expected[/]" if good else f"[red]expected exit 1 and {_words(want)}[/]"
    console.print(f"benchmark -> exit {run.exit_code}, regressions: {_words(found)}  {mark}")
    return good


def routing(sweep: Sweep) -> bool:
    """Check the routing suite offline, run it, and compare each route with the expected."""

    from hangar.kinds.routing.suite import consistency

    found = consistency(HERE / "routing" / "suite.yaml", require_all=True)
    console.rule(
        f"routing suite {found.suite}: {found.cases} cases over {len(found.skills)} skills"
    )
    console.print(f"golden check: {'consistent' if found.ok else found.problems}", highlight=False)
    store = ResultsStore(sweep.config.store)
    tally = SweepRunner(sweep, store).run()
    want = {
        "route:failing-bug-report": "pass",
        "route:review-before-merge": "fail",
        "route:notes-for-a-version": "pass",
        "route:no-skill-needed": "pass",
    }
    current = {t.digest for t in sweep.tasks}
    got = {r.scenario_id: r for r in store.results(sweep.id) if r.scenario_digest in current}
    good = found.ok and set(got) == set(want)
    for case, verdict in want.items():
        result = got.get(case)
        right = result is not None and result.verdict.value == verdict
        good &= right
        mark = "[green]as expected[/]" if right else f"[red]expected {verdict}[/]"
        said = f"{result.verdict.value}: {result.reason}" if result else "no result"
        console.print(f"{escape(case)} -> {escape(said)}  {mark}", highlight=False)
    console.print(f"{tally.done} trial(s) ran now, {tally.skipped} were final already (resume)")
    return good


def harbor() -> bool:
    """Validate the Harbor dataset, then run its sweep without the broken task."""
    sweep = load_sweep(HERE / "harbor" / "sweep.yaml")
    answers = serve_answers(EXAMPLE_ANSWERS, EXAMPLE_PORT)  # count-words' allowlisted host
    try:
        return _harbor(sweep)
    finally:
        answers.shutdown()


def _harbor(sweep: Sweep) -> bool:
    console.rule(f"dataset {sweep.id}: oracle and nop on each of {len(sweep.tasks)} tasks")
    found = validate_dataset(
        sweep.id,
        [t for t in sweep.tasks if isinstance(t, ImageTask)],
        run_batch,
        store=sweep.config.store,
    )
    for v in found:
        console.print(f"{v.task_id}: {v.status} ({v.reason})", highlight=False)
    want = {
        "hello-file": "valid",
        "fix-median": "valid",
        "count-lines": "valid",
        "count-words": "valid",
        "broken-tests": "broken",
    }
    ok = {v.task_id: v.status for v in found} == want
    console.print("[green]as expected[/]" if ok else f"[red]expected {want}[/]")
    kept, left_out = ready_tasks(sweep.tasks, ResultsStore(sweep.config.store))
    for v in left_out:
        console.print(f"left out: {v.task_id} is {v.status}", highlight=False)
    listed = [v.recorded() for v in left_out]
    sweep = sweep.model_copy(update={"tasks": kept, "left_out": listed})
    return run(sweep, {"oracle": "pass", "nop": "fail"}) and ok


def swebench() -> bool:
    """Validate and run the SWE-bench instances, then export the sweep in the field's
    formats: Harbor job folders and SWE-bench's submission layout."""
    sweep = load_sweep(HERE / "swebench" / "sweep.yaml")
    console.rule(f"SWE-bench instances {sweep.id}: gold and nop on each of {len(sweep.tasks)}")
    found = validate_dataset(sweep.id, list(sweep.tasks), run_batch, store=sweep.config.store)
    ok = all(v.status == "valid" for v in found) and run(sweep, {"gold": "pass", "nop": "fail"})
    for fmt in ("harbor-job", "swebench-submission"):
        out = Path("runs") / "exports" / fmt
        shutil.rmtree(out, ignore_errors=True)
        command = [sys.executable, "-m", "hangar", "export", str(sweep.path), "--format", fmt]
        done = subprocess.run([*command, "--out", str(out)], check=False)
        ok &= done.returncode == 0
        files = sum(1 for p in out.rglob("*") if p.is_file())
        mark = "[green]as expected[/]" if done.returncode == 0 else "[red]the export failed[/]"
        console.print(f"export {fmt} -> {files} file(s) under {out}  {mark}", highlight=False)
    return ok


def harbor_agent() -> bool:
    """mini-swe-agent's CLI on the Harbor task fix-median, in the task's own image."""
    console.rule("agent mini-swe-agent on Harbor's fix-median, in the task's own image")
    bundle = ensure_bundle(  # ahead of the trial, to show what the first build does
        "mini-swe-agent", progress=lambda line: console.print(f"[dim]{escape(line)}[/]")
    )
    console.print(f"bundle: {bundle.folder}", highlight=False)
    return run(load_sweep(HERE / "harbor" / "sweep-agent.yaml"), {"mini": "pass"})


def knowledge() -> bool:
    """The knowledge gold set: import, run, scan, score, and the rule."""
    folder = Path("runs") / "knowledge"
    shutil.rmtree(folder, ignore_errors=True)  # an arm is answered once: a fresh copy
    shutil.copytree(HERE / "knowledge", folder)
    console.rule(f"knowledge gold set {folder}")
    suite = sealed_suite(folder)
    external = folder / "external"
    import_arm(
        suite,
        "baseline-projects",
        external / "baseline-projects.jsonl",
        external / "baseline-projects.meta.json",
    )
    model = ModelSpec(
        id="scripted-searcher",
        base_url="http://127.0.0.1:8765/v1",
        api_key_env="HANGAR_SCRIPTED_KEY",
    )
    run = run_arm(
        folder,
        "baseline-repo-search",
        model,
        repositories={"handbook": str(HERE / "repos" / "handbook.bundle")},
        run=run_batch,
    )
    console.print(f"repo-search: {run.answered} answered (sweep {run.sweep})", highlight=False)
    found = scan_and_void([folder / "answers"], suite_canaries(folder), [run.sweep])
    console.print(f"canary scan of the answers and the run's evidence: {len(found)} found")
    report = build_gold_set_report(
        suite,
        ["baseline-projects", "baseline-repo-search"],
        baseline="baseline-projects",
        candidate="baseline-repo-search",
    )
    console.out(render_knowledge(report, "text"), highlight=False)
    sentences = [c.sentence for c in report.comparisons]
    want = [
        "baseline is not shown to lose by 15 points",
        "baseline is shown to lose by at least 15 points on citation validity",
    ]
    good = sentences == want and not found and run.answered == 11
    console.print(f"knowledge -> {'[green]as expected[/]' if good else f'[red]expected {want}[/]'}")
    return good & retrieval(folder)


def retrieval(folder: Path) -> bool:
    """The retrieval arm: the pinned handbook MCP server's tools instead of repo search;
    its snapshot (the handbook at 1.1) is recorded, and is stale for the two questions
    asked as of 1.0: the gate against the repo-search arm says so."""
    agents = load_agents(folder / "agents.yaml")
    model = ModelSpec(
        id="scripted-retriever",
        base_url="http://127.0.0.1:8765/v1",
        api_key_env="HANGAR_SCRIPTED_KEY",
    )
    arm = "retrieval:handbook"
    run = run_arm(
        folder,
        arm,
        model,
        agent=agents["retrieval"],  # type: ignore[arg-type]
        repositories={"handbook": str(HERE / "repos" / "handbook.bundle")},
        run=run_batch,
    )
    console.print(f"{arm}: {run.answered} answered (sweep {run.sweep})", highlight=False)
    report = build_gold_set_report(
        sealed_suite(folder),
        ["baseline-repo-search", arm],
        baseline="baseline-repo-search",
        candidate=arm,
    )
    console.out(render_knowledge(report, "text"), highlight=False)
    (mine,) = [a for a in report.arms if a.arm == arm]
    snapshot = (mine.meta or {}).get("knowledge_snapshot")
    stale = mine.citations.get("stale")
    good = run.answered == 11 and snapshot == "handbook@dee254872bb216846ae8eeaa1818a5071ed07e7a"
    good &= stale == 2
    # Every arm's scores, per answer, into the store (the dashboards and exports read them).
    arms = ["baseline-projects", "baseline-repo-search", arm]
    new, same = record_scores(ResultsStore(default_store(folder)), sealed_suite(folder), arms)
    console.print(f"knowledge scores in the store: {new} new, {same} unchanged", highlight=False)
    mark = "[green]as expected[/]" if good else "[red]expected the 1.1 snapshot, 2 stale[/]"
    console.print(f"retrieval -> snapshot {snapshot}, {stale} stale citation(s)  {mark}")
    return good


if __name__ == "__main__":
    sys.exit(main())
