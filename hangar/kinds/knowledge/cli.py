"""`hangar knowledge`: knowledge gold sets (seal, check, import, label, scan, score, keep,
compare, run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape as esc
from rich.panel import Panel

from hangar.console import JsonFlag, console, err_console, output_format
from hangar.errors import ConfigError
from hangar.trials.batch import runner_from

app = typer.Typer(
    help="Knowledge gold sets: sealed questions, cited answers, labels, the decision rule."
)


SuiteArg = Annotated[Path, typer.Argument(help="The suite folder (questions.jsonl, keys.jsonl).")]


Fmt = Annotated[str, typer.Option("--format", help="text, md, html or json.")]


@app.command("seal")
def knowledge_seal(
    suite: SuiteArg,
    holdouts: Annotated[
        Path | None, typer.Option(help="Add the canaries to this holdouts folder's manifest.")
    ] = None,
) -> None:
    """Give every key a canary and write manifest.json (sha256 of both files); refuses a
    sealed suite."""
    from hangar.kinds.knowledge.custody import seal

    path = seal(suite, holdouts)
    console.print(f"sealed {esc(str(suite))}: {esc(str(path))}", highlight=False)


@app.command("check")
def knowledge_check(suite: SuiteArg) -> None:
    """Validate the suite's files and its seal; exit 1 naming what differs."""
    from hangar.kinds.knowledge.custody import load_suite, verify

    loaded = load_suite(suite)
    kinds: dict[str, int] = {}
    for q in loaded.questions:
        kinds[q.kind] = kinds.get(q.kind, 0) + 1
    console.print(f"{len(loaded.questions)} questions: {kinds}", highlight=False)
    problems = verify(suite)
    for problem in problems:
        err_console.print(f"[red]x[/] {esc(problem)}", highlight=False)
    raise typer.Exit(1 if problems else 0)


@app.command("import")
def knowledge_import(
    suite: SuiteArg,
    arm: Annotated[str, typer.Option(help="The arm's name (baseline-projects).")],
    answers: Annotated[Path, typer.Option(help="Its answers (JSONL: id, answer, citations).")],
    meta: Annotated[
        Path | None, typer.Option(help="How it was run (JSON: person or harness, date, model).")
    ] = None,
) -> None:
    """Import an external arm's answers (run by a person or another system) and its meta."""
    from hangar.kinds.knowledge.custody import import_arm, sealed_suite

    imported = import_arm(sealed_suite(suite), arm, answers, meta)
    note = "" if imported.meta else " (no meta: the report will say it is missing)"
    console.print(f"imported {len(imported.answers)} answers of {esc(arm)}{note}", highlight=False)


@app.command("label")
def knowledge_label(
    suite: SuiteArg,
    arm: Annotated[str, typer.Option(help="The arm whose answers to label.")],
    rater: Annotated[str, typer.Option(help="Your name, as it goes into the labels.")],
) -> None:
    """Label an arm's answers in the terminal: the question, the answer, its citations and
    the key side by side; y/n for correct, then the numbers of unsupported citations.
    Answers this rater labelled are skipped; q stops (what was labelled is kept)."""
    from hangar.kinds.knowledge.custody import add_label, load_arm, sealed_suite
    from hangar.kinds.knowledge.formats import Label

    loaded = sealed_suite(suite)
    current = load_arm(loaded, arm)
    done = {x.id for x in current.labels if x.rater == rater}
    path = suite / "labels" / f"{arm}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    todo = [q for q in loaded.questions if q.id in current.answers and q.id not in done]
    console.print(f"{len(todo)} answers of {esc(arm)} to label as {esc(rater)}", highlight=False)
    for n, q in enumerate(todo, start=1):
        answer, key = current.answers[q.id], loaded.keys[q.id]
        cites = "\n".join(
            f"[{i}] {esc(c.uri)} {esc(c.sha256 or '(no hash)')}"
            for i, c in enumerate(answer.citations, start=1)
        )
        sources = "\n".join(f"- {esc(s.uri)} {esc(s.sha256 or '')}" for s in key.valid_sources)
        facts = "\n".join(f"- {esc(f)}" for f in key.required_facts)
        console.print(Panel(esc(q.question), title=f"{n}/{len(todo)} {esc(q.id)} ({q.kind})"))
        console.print(Panel(f"{esc(answer.answer)}\n\n{cites or '(no citation)'}", title="answer"))
        console.print(
            Panel(
                f"{esc(key.answer_key)}\n\nrequired facts:\n{facts or '-'}\n\nvalid sources:\n"
                f"{sources or '-'}",
                title="key",
            )
        )
        verdict = typer.prompt("every required fact present? [y/n/s(kip)/q(uit)]").strip().lower()
        if verdict.startswith("q"):
            break
        if verdict.startswith("s") or verdict[:1] not in ("y", "n"):
            continue
        picked = typer.prompt(
            "unsupported citations (numbers, comma-separated; empty: none)", default=""
        )
        numbers = [int(x) for x in picked.replace(" ", "").split(",") if x.isdigit()]
        unsupported = [
            answer.citations[i - 1].uri for i in numbers if 1 <= i <= len(answer.citations)
        ]
        label = Label(
            id=q.id, rater=rater, correct=verdict.startswith("y"), unsupported=unsupported
        )
        add_label(loaded, arm, label)  # one line at a time: nothing labelled is lost
    console.print(f"labels: {esc(str(path))}", highlight=False)


@app.command("scan")
def knowledge_scan(
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Folders or files: traces, bundles, answers, logs.")
    ] = None,
    suite: Annotated[Path | None, typer.Option(help="Scan for this suite's canaries.")] = None,
    holdouts: Annotated[
        Path | None, typer.Option(help="Scan for every canary of this holdouts folder.")
    ] = None,
    sweep: Annotated[
        list[str] | None, typer.Option(help="Also the evidence archives of this sweep.")
    ] = None,
    store: Annotated[str | None, typer.Option(help="Results store URL (with --sweep).")] = None,
) -> None:
    """The canary scan: a canary found voids its whole suite (void.json). Exit 1 when one
    is found."""
    from hangar.kinds.knowledge.scan import holdout_canaries, scan_and_void, suite_canaries

    canaries: dict[str, tuple[str, str]] = {}
    if suite is not None:
        canaries |= suite_canaries(suite)
    if holdouts is not None:
        canaries |= holdout_canaries(holdouts)
    if not canaries:
        raise ConfigError("name --suite or --holdouts: there is no canary to look for")
    found = scan_and_void(list(paths or []), canaries, sweep or [], store)
    for f in found:
        err_console.print(
            f"[red]canary[/] of {esc(f.id)} ({esc(f.suite)}) in {esc(f.where)}: suite void",
            highlight=False,
        )
    console.print(f"{len(canaries)} canaries, {len(found)} found")
    raise typer.Exit(1 if found else 0)


@app.command("score")
def knowledge_score(
    suite: SuiteArg,
    arm: Annotated[list[str] | None, typer.Option(help="An arm to score (repeat).")] = None,
    baseline: Annotated[str | None, typer.Option(help="The baseline arm.")] = None,
    candidate: Annotated[str | None, typer.Option(help="The candidate arm.")] = None,
    margin: Annotated[float, typer.Option(help="The rule's points.")] = 15,
    seed: Annotated[int, typer.Option(help="The bootstrap's seed.")] = 0,
    fmt: Fmt = "text",
    as_json: JsonFlag = False,
    out: Annotated[Path | None, typer.Option(help="Write the report here.")] = None,
    store: Annotated[
        str | None,
        typer.Option(help="Results store the scores go to (default: runs/ beside the suite)."),
    ] = None,
    no_store: Annotated[bool, typer.Option(help="Record nothing in the store.")] = False,
) -> None:
    """Score arms on a sealed suite: correctness and citation validity with Wilson
    intervals, citation counts, kappa, meta; with --baseline and --candidate the paired
    difference and the rule. Each answer's scores are recorded in the results store too
    (a new version when its labels changed), for exports and the dashboards. Exit 3 when
    the suite is void."""
    fmt = output_format(fmt, as_json)
    from hangar.kinds.knowledge.custody import sealed_suite
    from hangar.kinds.knowledge.render import render
    from hangar.kinds.knowledge.report import build_gold_set_report

    if fmt not in ("text", "md", "html", "json"):
        raise ConfigError(f"--format {fmt!r}: choose text, md, html or json")
    loaded = sealed_suite(suite)
    arms = arm or []
    if not arms and not baseline:
        arms = sorted(p.name.removesuffix(".jsonl") for p in (suite / "answers").glob("*.jsonl"))
    report = build_gold_set_report(
        loaded, arms, baseline=baseline, candidate=candidate, margin=margin / 100, seed=seed
    )
    text = render(report, fmt)
    if not no_store:
        from hangar.kinds.knowledge.record import default_store, record_scores
        from hangar.store import ResultsStore

        results = ResultsStore(store or default_store(suite))
        new, same = record_scores(results, loaded, [a.arm for a in report.arms])
        err_console.print(
            f"scores recorded in {esc(results.safe_url)}: {new} new version(s), {same} unchanged",
            highlight=False,
        )
    if out is not None:
        out.write_text(text)
        console.print(f"wrote {esc(str(out))}", highlight=False)
    elif fmt in ("text", "md"):
        console.print(text, markup=False, highlight=False, end="")
    else:
        console.out(text, highlight=False, end="")
    raise typer.Exit(3 if report.void else 0)


@app.command("keep")
def knowledge_keep(
    suite: SuiteArg, arm: Annotated[str, typer.Option(help="The scored arm to keep.")]
) -> None:
    """Keep a scored arm as the baseline later arms are compared against (the gate)."""
    from hangar.kinds.knowledge.custody import sealed_suite
    from hangar.kinds.knowledge.report import keep

    path = keep(sealed_suite(suite), arm)
    console.print(f"kept {esc(arm)}: {esc(str(path))}", highlight=False)


@app.command("compare")
def knowledge_compare(
    suite: SuiteArg,
    candidate: Annotated[str, typer.Option(help="The arm to gate (a retrieval tool).")],
    baseline: Annotated[str, typer.Option(help="A kept baseline (knowledge keep).")],
    margin: Annotated[float, typer.Option(help="Points it may lose by (0: any loss).")] = 0,
    seed: Annotated[int, typer.Option(help="The bootstrap's seed.")] = 0,
    fmt: Fmt = "text",
    as_json: JsonFlag = False,
) -> None:
    """The regression gate: the candidate against a kept baseline, per metric. Exit 1 when
    the candidate is shown to lose, 3 when the suite is void."""
    fmt = output_format(fmt, as_json)
    from hangar.kinds.knowledge.custody import sealed_suite, void_record
    from hangar.kinds.knowledge.report import arm_report, gate, kept

    loaded = sealed_suite(suite)
    void = void_record(suite) is not None
    rows = gate(
        kept(loaded, baseline),
        arm_report(loaded, candidate),
        margin=margin / 100,
        seed=seed,
        void=void,
    )
    if fmt == "json":
        console.out(json.dumps([r.model_dump() for r in rows], indent=1), highlight=False)
    else:
        for r in rows:
            console.print(
                f"{esc(r.candidate)} - {esc(r.baseline)} on {r.metric}: "
                f"{r.difference * 100:+.1f} points [{r.ci_low * 100:+.1f}, {r.ci_high * 100:+.1f}]"
                f": {esc(r.sentence)}",
                highlight=False,
            )
    lost = any(" is shown to lose" in r.sentence for r in rows)
    raise typer.Exit(3 if void else 1 if lost else 0)


@app.command("run")
def knowledge_run(
    ctx: typer.Context,
    suite: SuiteArg,
    arm: Annotated[str, typer.Option(help="The arm's name.")] = "baseline-repo-search",
    model: Annotated[
        str, typer.Option(help="The model: an id or a mapping {id, base_url...}.")
    ] = "",
    agents_file: Annotated[
        Path | None, typer.Option(help="An agents file with a chat agent (tools: read).")
    ] = None,
    agent: Annotated[str | None, typer.Option(help="The agent's name in --agents-file.")] = None,
    repo: Annotated[
        list[str] | None, typer.Option(help="NAME=URL or path of a repository (repeat).")
    ] = None,
    image: Annotated[str, typer.Option(help="The sandbox image.")] = "hangar/base:bookworm",
    store: Annotated[
        str | None, typer.Option(help="Results store URL (default: runs/ beside the suite).")
    ] = None,
    evidence: Annotated[str | None, typer.Option(help="Evidence store URL.")] = None,
    budget_usd: Annotated[float | None, typer.Option(help="Stop scheduling past this.")] = None,
    address: Annotated[str | None, typer.Option(help="Ray cluster address.")] = None,
) -> None:
    """The repo-search arm as hangar trials: each question in a sandbox with the
    repositories read-only at as_of and a read/grep-only agent; writes
    answers/<arm>.jsonl and its meta. Exit 3 when a question has no final result yet
    (run again to resume)."""
    from hangar.agents import ChatAgent, load_agents
    from hangar.console import model_arg
    from hangar.kinds.knowledge.run import run_arm
    from hangar.models import ModelSpec

    if not model:
        raise ConfigError("--model is required (an id, or {id: ..., base_url: ...})")
    chosen: ChatAgent | None = None
    if agents_file is not None:
        agents = load_agents(agents_file)
        if agent not in agents:
            raise ConfigError(f"--agent {agent!r} is not in {agents_file} ({sorted(agents)})")
        found = agents[agent]
        if not isinstance(found, ChatAgent):
            raise ConfigError(f"agent {agent} is not a chat agent (kind: chat, tools: read)")
        chosen = found
    repos = {}
    for item in repo or []:
        name, sep, url = item.partition("=")
        if not sep:
            raise ConfigError(f"--repo {item!r}: write NAME=URL")
        repos[name] = url
    run = run_arm(
        suite,
        arm,
        ModelSpec.model_validate(model_arg(model)),
        agent=chosen,
        repositories=repos,
        image=image,
        store_url=store,
        evidence_url=evidence,
        budget_usd=budget_usd,
        run=runner_from(ctx.obj, address),
    )
    console.print(
        f"sweep {esc(run.sweep)}: {run.answered} answered, {len(run.unanswered)} unanswered, "
        f"{run.incomplete} without a final result",
        highlight=False,
    )
    for qid, why in run.unanswered.items():
        err_console.print(f"  [yellow]no answer[/] {esc(qid)}: {esc(why)}", highlight=False)
    for path in run.files:
        console.print(f"wrote {esc(str(path))}", highlight=False)
    raise typer.Exit(3 if run.incomplete else 0)
