"""Routing suites: the suite file and its offline golden check, the route graded from a
session rule by rule, real trials of hangar's chat agent in docker through the scripted
model (the example suite), a sweep on Ray and its report, and historical routing records
kept apart from every live score."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from hangar.agents import ChatAgent, PromptAgent, parse_agent
from hangar.cli import app
from hangar.errors import ConfigError
from hangar.kinds.routing import routing_trial
from hangar.kinds.routing.grading import grade
from hangar.kinds.routing.suite import consistency, load_routing_suite
from hangar.models import ModelSpec
from hangar.results import TrialResult, Verdict
from hangar.sessions import SessionEvent, read_session
from hangar.testing.scripted import Conversation, Reply, Script, ScriptedServer, ToolCall
from hangar.trials import run_trial

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()
SKILLS = "/home/agent/.agents/skills"


def example(tmp_path: Path) -> Path:
    """A copy of the example suite (and the decision skills it shares)."""
    shutil.copytree(EXAMPLES / "routing", tmp_path / "routing")
    shutil.copytree(EXAMPLES / "decision" / "skills", tmp_path / "decision" / "skills")
    return tmp_path / "routing" / "suite.yaml"


def edit(path: Path, change: Any) -> Path:
    """Rewrite the suite file's YAML with `change(data)`."""
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def check(path: Path, *flags: str) -> tuple[int, dict[str, Any]]:
    """`hangar routing check` as a user runs it: its exit code and JSON."""
    result = runner.invoke(app, ["routing", "check", str(path), "--json", *flags])
    return result.exit_code, json.loads(result.stdout)


# -- the suite and the golden check ---------------------------------------------------------


def test_the_example_suite_is_consistent_with_every_skill_covered(tmp_path: Path) -> None:
    code, found = check(example(tmp_path), "--require-all-fixtures")
    assert code == 0 and found["ok"], found
    assert found["skills"] == {"release-notes": 1, "review": 1, "tdd": 1}
    text = runner.invoke(app, ["routing", "check", str(tmp_path / "routing" / "suite.yaml")])
    assert text.exit_code == 0 and "4 case(s) over 3 skill(s): consistent" in text.stdout


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d["cases"].append(dict(d["cases"][0])), "repeated: ['route:failing-bug"),
        (lambda d: d["cases"][0]["expected"].append("deploy"), "the catalog lacks: deploy"),
        (lambda d: d["cases"][0]["forbidden"].append("tdd"), "expected and forbidden: ['tdd']"),
        (lambda d: d["skills"].update(tdd="../nowhere"), "skill tdd: no SKILL.md"),
        (lambda d: d["cases"][0].update(id="bad id"), "cases.0.id"),
    ],
    ids=["duplicate-id", "unknown-skill", "expected-and-forbidden", "no-skill-md", "bad-id"],
)  # fmt: skip
def test_the_golden_check_names_each_problem(tmp_path: Path, change: Any, words: str) -> None:
    code, found = check(edit(example(tmp_path), change))
    assert code == 1 and not found["ok"]
    assert any(words in p for p in found["problems"]), found["problems"]


def test_a_skill_no_case_expects_fails_only_with_require_all_fixtures(tmp_path: Path) -> None:
    suite = edit(example(tmp_path), lambda d: d["cases"].pop(2))  # release-notes' only case
    code, found = check(suite)
    assert code == 0 and any("no case expects: release-notes" in w for w in found["warnings"])
    code, found = check(suite, "--require-all-fixtures")
    assert code == 1 and any("no case expects: release-notes" in p for p in found["problems"])


def test_a_skill_md_without_description_or_under_another_name_is_a_problem(tmp_path: Path) -> None:
    suite = example(tmp_path)
    notes = tmp_path / "routing" / "skills" / "release-notes" / "SKILL.md"
    notes.write_text("---\nname: notes\n---\n# Release notes\n")
    found = consistency(suite, require_all=True)
    assert not found.ok
    said = " ".join(found.problems)
    assert "has no `description`" in said and "names it 'notes'" in said


def test_the_case_version_tracks_the_catalog_bytes_and_the_case(tmp_path: Path) -> None:
    suite = example(tmp_path)
    before = {c.id: c.digest for c in load_routing_suite(suite)}
    notes = tmp_path / "routing" / "skills" / "release-notes" / "SKILL.md"
    notes.write_text(notes.read_text() + "\n5. Thank contributors.\n")
    after = {c.id: c.digest for c in load_routing_suite(suite)}
    assert all(before[k] != after[k] for k in before)  # every case ran with the whole catalog
    edit(suite, lambda d: d["cases"][3].update(prompt="What is CSV?"))
    again = {c.id: c.digest for c in load_routing_suite(suite)}
    assert [k for k in again if again[k] != after[k]] == ["route:no-skill-needed"]


def test_a_malformed_suite_says_what_to_fix(tmp_path: Path) -> None:
    bad = tmp_path / "suite.yaml"
    bad.write_text("kind: routing\nid: x\nskills: {}\ncases: []\n")
    with pytest.raises(ConfigError) as err:
        load_routing_suite(bad)
    assert "routing suite" in str(err.value) and "skills" in str(err.value)


# -- the grade, rule by rule ----------------------------------------------------------------

TDD = "---\nname: tdd\ndescription: Test first.\n---\nRed, green, refactor.\n"


def graded(events: list[SessionEvent], expected: tuple[str, ...] = ("tdd",)) -> Any:
    return grade(
        events,
        expected=expected,
        forbidden=("review",),
        installed={"tdd": TDD, "review": "---\nname: review\n---\nReview.\n"},
        folder=SKILLS,
        home="/home/agent",
        workdir="/workspace",
    )


def skill(path: str = "", text: str = "", name: str = "tdd", source: str = "trace") -> SessionEvent:
    from hangar.sessions.common import digest

    return SessionEvent(
        source=source, type="skill", skill=name, path=path, text=text,
        sha256=digest(text) if text else "",
    )  # fmt: skip


def test_reading_the_installed_skill_md_is_the_route() -> None:
    route = graded([skill(f"{SKILLS}/tdd/SKILL.md", TDD)])
    assert route.exact and route.loaded == ["tdd"] and route.loads[0].delivered is True
    assert route.sentence() == "routed exactly: tdd"
    tilde = graded([skill("~/.agents/skills/tdd/SKILL.md", "other bytes")])
    assert tilde.exact and tilde.loads[0].delivered is False


def test_a_skill_md_read_elsewhere_counts_for_nothing() -> None:
    """One the agent wrote in its workspace, named like a catalog skill: outside."""
    route = graded([skill("tdd/SKILL.md", TDD), skill("/tmp/x/tdd/SKILL.md", TDD)])
    assert route.loaded == [] and route.missing == ["tdd"] and len(route.outside) == 2
    assert route.sentence() == "wrong route: missing tdd"


def test_extra_and_forbidden_skills_are_named_apart() -> None:
    route = graded([skill(name="tdd"), skill(name="review"), skill(name="deploy")])
    assert (route.extra, route.forbidden_loaded) == (["review"], ["review"])
    assert [o.skill for o in route.outside] == ["deploy"]  # not in the catalog
    assert route.sentence() == "wrong route: forbidden review"
    none = graded([skill(name="review")], expected=())
    assert none.sentence() == "wrong route: forbidden review" and not none.exact
    assert graded([], expected=()).sentence() == "routed exactly: no skill"


def _jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def claude_file(path: Path, prompt: str, skill_name: str, *, error: bool = False) -> Path:
    """A Claude Code project file: the prompt, its Skill tool loading `skill_name`."""
    t = "2026-11-30T09:00:00.000Z"
    return _jsonl(
        path,
        [
            {"sessionId": path.stem, "type": "user", "timestamp": t,
             "message": {"role": "user", "content": prompt}},
            {"sessionId": path.stem, "type": "assistant", "timestamp": t,
             "message": {"model": "m", "stop_reason": "tool_use", "content": [
                 {"type": "tool_use", "id": "u1", "name": "Skill",
                  "input": {"skill": skill_name}}]}},
            {"sessionId": path.stem, "type": "user", "timestamp": t,
             "message": {"content": [{"type": "tool_result", "tool_use_id": "u1", "is_error": error,
                                      "content": f"Launching skill: {skill_name}"}]}},
            {"sessionId": path.stem, "type": "assistant", "timestamp": t,
             "message": {"model": "m", "stop_reason": "end_turn",
                         "content": [{"type": "text", "text": "Done."}]}},
        ],
    )  # fmt: skip


def test_only_a_load_that_succeeded_is_a_load(tmp_path: Path) -> None:
    """A Skill tool call that failed, or a `cat` of a SKILL.md that failed, loaded nothing."""
    failed = read_session(claude_file(tmp_path / "c.jsonl", "p", "tdd", error=True))
    assert failed is not None and not [e for e in failed.events if e.type == "skill"]
    worked = read_session(claude_file(tmp_path / "d.jsonl", "p", "tdd"))
    assert worked is not None and [e.skill for e in worked.events if e.type == "skill"] == ["tdd"]
    trace = _jsonl(
        tmp_path / "trace.jsonl",
        [
            {"ts": 1.0, "seq": 0, "kind": "agent_start", "agent": "chat"},
            {"ts": 1.1, "seq": 1, "kind": "tool_call", "id": "a", "name": "bash",
             "arguments": {"command": f"cat {SKILLS}/review/SKILL.md"}},
            {"ts": 1.2, "seq": 2, "kind": "tool_result", "id": "a",
             "output": "exit 1\ncat: No such file or directory"},
            {"ts": 1.3, "seq": 3, "kind": "tool_call", "id": "b", "name": "bash",
             "arguments": {"command": f"cat {SKILLS}/tdd/SKILL.md"}},
            {"ts": 1.4, "seq": 4, "kind": "tool_result", "id": "b", "output": f"exit 0\n{TDD}"},
        ],
    )  # fmt: skip
    session = read_session(trace)
    assert session is not None
    route = graded(session.events)
    assert route.exact and route.loads[0].delivered is True  # cat printed the installed bytes


# -- real trials: hangar's chat agent in docker, through the scripted model ----------------


@pytest.fixture
def router(tmp_path: Path) -> Any:
    script = Script.load(EXAMPLES / "routing" / "scripted-model.yaml")
    server = ScriptedServer(script).start()
    yield server
    server.shutdown()


def model_of(server: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> ModelSpec:
    monkeypatch.setenv("HANGAR_TEST_ROUTER_KEY", "sk-router-test")
    return ModelSpec(
        id="scripted-router",
        provider="openai",
        base_url=f"{server.url}/v1",
        api_key_env="HANGAR_TEST_ROUTER_KEY",
    )


def run_case(case: Any, agent: Any, model: ModelSpec | str, tmp_path: Path) -> TrialResult:
    spec = routing_trial(case, agent, model=model, evidence_url=(tmp_path / "ev").as_uri())
    return run_trial(spec)


def bundle(result: TrialResult, name: str) -> Any:
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        member = tar.extractfile(name)
        assert member is not None, name
        return json.loads(member.read())


@pytest.mark.docker
def test_the_example_suite_through_the_chat_agent(
    tmp_path: Path, router: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = model_of(router, monkeypatch)
    agent = ChatAgent(name="chat", max_turns=6)
    results = {
        c.id: run_case(c, agent, model, tmp_path) for c in load_routing_suite(example(tmp_path))
    }
    verdicts = {k: (r.verdict, r.reason) for k, r in results.items()}
    assert verdicts == {
        "route:failing-bug-report": (Verdict.PASS, "routed exactly: tdd"),
        "route:review-before-merge": (Verdict.FAIL, "wrong route: extra tdd"),
        "route:notes-for-a-version": (Verdict.PASS, "routed exactly: release-notes"),
        "route:no-skill-needed": (Verdict.PASS, "routed exactly: no skill"),
    }
    review = results["route:review-before-merge"]
    assert {s.metric: s.value for s in review.scores} == {"route": 0.0, "forbidden_avoided": 1.0}
    assert review.details["route"]["extra"] == ["tdd"] and review.usage.input_tokens == 3900
    # The catalog reached the model natively: the agent's system prompt lists every skill
    # with its description and where its SKILL.md is; no prompt names the skill to use.
    first = next(r for r in router.requests if r["path"] == "/v1/chat/completions")
    system = first["body"]["messages"][0]["content"]
    for name, said in [("tdd", "Test-driven changes to existing code."),
                       ("review", "Reviewing a change before it merges."),
                       ("release-notes", "Writing release notes")]:  # fmt: skip
        assert f"- {name}: {said}" in system and f"{SKILLS}/{name}/SKILL.md" in system
    # What was read was the installed bytes; where they went is recorded.
    route = bundle(results["route:failing-bug-report"], "route.json")
    assert route["loads"][0]["delivered"] is True and route["loads"][0]["source"] == "trace"
    installed = bundle(results["route:failing-bug-report"], "skills.json")
    assert installed["folder"] == SKILLS
    assert set(installed["skills"]["tdd"]) == {"SKILL.md", "references/red-green.md"}


@pytest.mark.docker
def test_a_skill_the_agent_writes_itself_routes_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only what it loaded from the catalog counts for it: a SKILL.md it made, named tdd,
    is outside; a run cut short cannot pass, whatever it loaded."""
    forged = Conversation(
        match="parse_csv() drops the last field",
        replies=[
            Reply(tool_calls=[ToolCall(name="edit", arguments={
                "command": "create", "path": "tdd/SKILL.md", "file_text": TDD})]),
            Reply(tool_calls=[ToolCall(name="edit", arguments={
                "command": "view", "path": "tdd/SKILL.md"})]),
            Reply(content="Test first."),
        ],
    )  # fmt: skip
    cut = Conversation(
        match="Version 2.3 is tagged tomorrow",
        replies=[
            Reply(tool_calls=[ToolCall(name="bash", arguments={
                "command": f"cat {SKILLS}/release-notes/SKILL.md"})]),
            Reply(content="never reached"),
        ],
    )  # fmt: skip
    server = ScriptedServer(Script(conversations=[forged, cut])).start()
    try:
        model = model_of(server, monkeypatch)
        cases = {c.id: c for c in load_routing_suite(example(tmp_path))}
        wrote = run_case(cases["route:failing-bug-report"], ChatAgent(name="chat"), model, tmp_path)
        short = ChatAgent(name="short", max_turns=1)
        stopped = run_case(cases["route:notes-for-a-version"], short, model, tmp_path)
    finally:
        server.shutdown()
    assert (wrote.verdict, wrote.reason) == (Verdict.FAIL, "wrong route: missing tdd")
    outside = bundle(wrote, "route.json")["outside"]
    assert [(o["skill"], o["path"]) for o in outside] == [("tdd", "tdd/SKILL.md")]
    assert stopped.verdict is Verdict.FAIL
    assert stopped.reason.startswith("the agent's run did not complete (turn limit reached (1))")
    assert stopped.reason.endswith("routed exactly: release-notes")


@pytest.mark.docker
def test_what_cannot_route_is_blocked_before_any_model_call(
    tmp_path: Path, router: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = edit(example(tmp_path), lambda d: d["cases"][0]["expected"].append("deploy"))
    cases = load_routing_suite(suite)
    model = model_of(router, monkeypatch)
    unknown = run_case(cases[0], ChatAgent(name="chat"), model, tmp_path)
    prompt = run_case(cases[1], PromptAgent(), model, tmp_path)
    reader = run_case(cases[1], ChatAgent(name="reader", tools="read"), model, tmp_path)
    assert [r.verdict for r in (unknown, prompt, reader)] == [Verdict.BLOCKED_SETUP] * 3
    assert "the catalog lacks: deploy" in unknown.reason
    assert "is a prompt agent" in prompt.reason and "`tools: read`" in reader.reason
    assert not router.requests
    gone = edit(suite, lambda d: d.update(image="hangar/base:no-such-image"))
    missing = run_case(load_routing_suite(gone)[1], ChatAgent(name="chat"), model, tmp_path)
    assert missing.verdict is Verdict.BLOCKED_SETUP and "no-such-image" in missing.reason


# -- a sweep on Ray, its report, and historical records kept apart -------------------------


@pytest.mark.ray
@pytest.mark.slow
def test_the_example_sweep_and_history_kept_apart(ray_local: None, tmp_path: Path) -> None:
    suite = example(tmp_path)
    server = ScriptedServer(Script.load(tmp_path / "routing" / "scripted-model.yaml")).start()
    sweep = tmp_path / "routing" / "sweep.yaml"
    store = f"sqlite:///{tmp_path}/r.db"

    def localise(d: dict[str, Any]) -> None:
        d["models"][0]["base_url"] = f"{server.url}/v1"
        d.update(store=store, evidence=(tmp_path / "ev").as_uri())

    edit(sweep, localise)
    try:
        run = runner.invoke(
            app, ["run", str(sweep), "--json", "--allow-failures"], env={"HANGAR_SCRIPTED_KEY": "k"}
        )
    finally:
        server.shutdown()
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["total"] == 4
    report = runner.invoke(app, ["report", str(sweep), "--format", "json"])
    assert report.exit_code == 0, report.output
    (group,) = json.loads(report.stdout)["groups"]
    metrics = {m["metric"]: m["mean"] for m in group["metrics"]}
    assert (group["arm"], metrics) == ("catalog", {"route": 0.75, "forbidden_avoided": 1.0})

    # People's own sessions: one asked a case's prompt and loaded its skill, one asked
    # another case's prompt and loaded a forbidden skill, one loaded a catalog skill for
    # something else, one had nothing to do with the suite.
    cases = {c.id: c.case.prompt for c in load_routing_suite(suite)}
    history = tmp_path / "claude-projects" / "-home-me-work"
    claude_file(history / "h1.jsonl", cases["route:failing-bug-report"], "tdd")
    claude_file(
        history / "h2.jsonl", f"Please: {cases['route:review-before-merge']}", "release-notes"
    )
    claude_file(history / "h3.jsonl", "tidy my notes", "review")
    claude_file(history / "h4.jsonl", "hello", "unrelated-skill")
    args = ["routing", "history", str(suite), "--store", store, "--json"]
    imported = runner.invoke(app, [*args, "--import", str(history.parent)])
    assert imported.exit_code == 0, imported.output
    rows = {r["session_id"]: r for r in json.loads(imported.stdout)["historical"]}
    assert set(rows) == {"h1", "h2", "h3"}
    assert (rows["h1"]["case_id"], rows["h1"]["exact"]) == ("route:failing-bug-report", True)
    assert rows["h2"]["route"]["forbidden_loaded"] == ["release-notes"] and not rows["h2"]["exact"]
    assert (rows["h3"]["case_id"], rows["h3"]["loaded"], rows["h3"]["exact"]) == (
        "",
        ["review"],
        None,
    )
    again = runner.invoke(app, [*args, "--import", str(history.parent)])
    assert len(json.loads(again.stdout)["historical"]) == 3  # a session is recorded once
    # Never mixed into a live score: the report is what it was.
    after = runner.invoke(app, ["report", str(sweep), "--format", "json"])
    assert json.loads(after.stdout)["groups"] == json.loads(report.stdout)["groups"]
    text = runner.invoke(app, ["routing", "history", str(suite), "--store", store])
    assert "never part of a live score" in text.stdout and "(no case's prompt)" in text.stdout
    # The viewer's trial page shows the golden set against the route.
    from starlette.testclient import TestClient

    from hangar.store import ResultsStore
    from hangar.viewer.app import Viewer, make_app

    results = ResultsStore(store)
    (review,) = [r for r in results.results("routing-demo") if r.verdict is Verdict.FAIL]
    page = TestClient(make_app(Viewer(results))).get(f"/trials/routing-demo/{review.trial_key}")
    assert page.status_code == 200
    html = page.text
    assert "Routing case" in html and "wrong route: extra tdd" in html
    row = html[html.index("<td>tdd</td>") :].split("</tr>")[0]
    assert row == "<td>tdd</td><td></td><td></td><td>yes</td>"  # loaded, not expected
    assert "the installed SKILL.md" in html and "A pull request renames" in html


def test_history_of_a_suite_with_no_store_says_so(tmp_path: Path) -> None:
    suite = example(tmp_path)
    result = runner.invoke(app, ["routing", "history", str(suite)], env={"HANGAR_RUNS_DIR": ""})
    assert result.exit_code != 0 and "no store at" in str(result.exception or result.output)
    missing = runner.invoke(app, ["routing", "history", str(suite), "--import", "/nope/x"])
    assert missing.exit_code != 0 and "file not found: /nope/x" in str(
        missing.exception or missing.output
    )


def test_an_agent_preset_finds_skills_in_its_own_folder() -> None:
    from hangar.agents.skills import skills_dir

    assert skills_dir(parse_agent("c", {"preset": "claude"}, "t")) == "~/.claude/skills"
    assert skills_dir(parse_agent("x", {"preset": "codex"}, "t")) == "~/.agents/skills"
    assert skills_dir(ChatAgent(name="chat")) == "~/.agents/skills"
