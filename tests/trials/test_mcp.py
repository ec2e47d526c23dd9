"""MCP servers as pinned plugins: the config and its pins, the digest, installing on a
node (pip for the sandbox's Python, the artifact's sha256 checked), the one-shot client
in a real sandbox with the network off, and the knowledge gold set's retrieval arm
(`retrieval:handbook`) run end to end on Ray with the example's own server."""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hangar.agents import ChatAgent, load_agents, parse_agent
from hangar.agents.mcp import (
    McpError,
    McpServer,
    McpTools,
    codex_toml,
    install,
    mcp_json,
    native_config,
)
from hangar.cli import app
from hangar.errors import ConfigError
from hangar.kinds.knowledge.custody import sealed_suite
from hangar.kinds.knowledge.formats import Key, Source
from hangar.kinds.knowledge.scoring import classify
from hangar.results import Verdict

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KNOWLEDGE = EXAMPLES / "knowledge"
runner = CliRunner()
C1, C2 = "c95571d40e9c11cd8ce0c877148858ac0db487ad", "dee254872bb216846ae8eeaa1818a5071ed07e7a"


def example_agent() -> ChatAgent:
    agent = load_agents(KNOWLEDGE / "agents.yaml")["retrieval"]
    assert isinstance(agent, ChatAgent)
    return agent


def pin(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


# -- the config, its pins and the digest --------------------------------------------------


def test_a_server_file_is_read_and_checked_against_its_pin(tmp_path: Path) -> None:
    agent = example_agent()
    server = agent.mcp["handbook"]
    assert server.source_b64 and server.data[0].b64  # the bytes travel with the agent
    settings = agent.settings()["mcp"]
    assert settings == {"handbook": {  # pins and versions, not the bytes
        "file": "mcp/handbook_server.py", "sha256": pin(KNOWLEDGE / "mcp/handbook_server.py"),
        "requirements": ["mcp==2.3.0"],
        "data": [{"file": "mcp/data/snapshot.json",
                  "sha256": pin(KNOWLEDGE / "mcp/data/snapshot.json")}]}}  # fmt: skip
    shutil.copytree(KNOWLEDGE / "mcp", tmp_path / "mcp")
    (tmp_path / "mcp" / "handbook_server.py").write_text("# another server\n")
    data = {"kind": "chat", "mcp": {"handbook": server.identity()}}
    with pytest.raises(ConfigError, match="its pin says sha256:0127"):
        parse_agent("r", data, "agents.yaml", tmp_path)


def test_the_servers_pins_are_in_the_digest_and_an_agent_without_keeps_its_own() -> None:
    agent = example_agent()
    bare = ChatAgent(name="retrieval", tools="retrieval", max_turns=6)
    assert agent.digest() != bare.digest()
    other = agent.model_copy(
        update={"mcp": {"handbook": agent.mcp["handbook"].model_copy(update={"args": ("-v",)})}}
    )
    assert other.digest() != agent.digest()  # any change of the server is a new trial
    # An agent without servers has the digest it had before agents took them (resume).
    assert ChatAgent(name="c").digest() == (  # as the code before MCP servers computed it
        "f5b9fe6047c00716518c5d1e8a12d46d01a2fbe15be9551a56438ee195bac776"
    )


@pytest.mark.parametrize(
    ("server", "words"),
    [
        ({"sha256": "sha256:" + "0" * 64}, "either `package: NAME==VERSION` or `file: PATH`"),
        ({"package": "mcp", "sha256": "sha256:" + "0" * 64}, "NAME==VERSION (exact)"),
        ({"package": "x==1", "sha256": "abc"}, "expected 'sha256:'"),
        ({"package": "x==1", "sha256": "sha256:" + "0" * 64, "requirements": ["mcp>=2"]},
         "a requirement is NAME==VERSION"),
        ({"package": "x==1", "sha256": "sha256:" + "0" * 64, "python": "3"}, "MAJOR.MINOR"),
    ],
)  # fmt: skip
def test_a_malformed_server_says_what_to_fix(server: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        parse_agent("r", {"kind": "chat", "mcp": {"s": server}}, "agents.yaml")


def test_each_cli_is_told_of_its_servers_natively(tmp_path: Path) -> None:
    from hangar.agents.mcp import Installed

    servers = [
        Installed(name="handbook", folder=tmp_path, argv=["python3", "/opt/s.py", "-q"],
                  env={"PYTHONPATH": "/opt/site"}, wheels={})
    ]  # fmt: skip
    import tomllib

    toml = tomllib.loads(codex_toml(servers))["mcp_servers"]["handbook"]
    assert (toml["command"], toml["args"], toml["env"]) == (
        "python3",
        ["/opt/s.py", "-q"],
        {"PYTHONPATH": "/opt/site"},
    )
    claude = json.loads(mcp_json(servers))["mcpServers"]["handbook"]
    assert claude == {
        "command": "python3",
        "args": ["/opt/s.py", "-q"],
        "env": {"PYTHONPATH": "/opt/site"},
    }
    preset = parse_agent("c", {"preset": "claude", "mcp": {"handbook": {
        "package": "x==1", "sha256": "sha256:" + "0" * 64}}}, "t")  # fmt: skip
    assert '--mcp-config "$HOME/.hangar/mcp.json" --strict-mcp-config' in preset.command
    assert "--allowedTools mcp__handbook " in preset.command
    plain = parse_agent("c", {"preset": "claude"}, "t")
    assert "--mcp-config" not in plain.command and "{mcp}" not in plain.command
    # servers only a task gives: Claude Code reads them from its user scope
    assert native_config("claude", servers, flagged=False).path == "~/.claude.json"
    assert native_config("claude", servers).path == "~/.hangar/mcp.json"
    remote = [Installed(name="tools", transport="streamable-http", url="http://svc:8000/mcp")]
    assert json.loads(mcp_json(remote))["mcpServers"]["tools"] == {
        "type": "http",
        "url": "http://svc:8000/mcp",
    }
    assert tomllib.loads(codex_toml(remote))["mcp_servers"]["tools"] == {
        "url": "http://svc:8000/mcp"
    }


# -- installing and running in a real sandbox ------------------------------------------


@pytest.mark.docker
def test_the_example_server_installs_and_answers_in_a_sandbox_with_no_network(
    tmp_path: Path,
) -> None:
    from hangar.sandbox import Mount, SandboxSpec
    from hangar.sandbox.docker import DockerSandbox

    server = example_agent().mcp["handbook"]
    installed = install("handbook", server, tmp_path / "cache")
    again = install("handbook", server, tmp_path / "cache")  # once per node
    assert again.folder == installed.folder
    assert any(w.startswith("mcp-2.3.0-") for w in installed.wheels)
    assert all(v.startswith("sha256:") for v in installed.wheels.values())
    spec = SandboxSpec(
        image="hangar/base:bookworm",
        trial="mcp-example",
        mounts=(Mount(source=installed.folder, target=installed.target, read_only=True),),
    )
    with DockerSandbox(spec) as sandbox:
        assert (
            sandbox.exec(
                ["python3", "-c", "import socket; socket.create_connection(('1.1.1.1', 53), 2)"]
            ).returncode
            != 0
        )
        tools = McpTools(sandbox, [installed])
        names = [t.name for t in tools.discover()]
        assert names == ["mcp__handbook__search", "mcp__handbook__read"]
        hits = json.loads(tools.call("mcp__handbook__search", {"query": "PostgreSQL MongoDB"}))
        assert hits[0]["uri"] == f"repo://handbook@{C2}/docs/adr/0001-postgresql.md"
        manifest = json.loads(tools.read_resource("handbook", "knowledge://manifest") or "{}")
        assert manifest["knowledge_snapshot"] == f"handbook@{C2}"
        broken = sandbox.exec(["sh", "-c", f"echo x > {installed.target}/server.py"])
        assert broken.returncode != 0  # mounted read-only: the agent cannot change it


def test_an_artifact_that_is_not_the_pin_is_refused(tmp_path: Path) -> None:
    from tests.require import skip_or_fail

    wheel = "mcp_types==2.3.0"
    try:
        install("t", McpServer(package=wheel, sha256="sha256:" + "0" * 64), tmp_path)
    except McpError as exc:
        said = str(exc)
        if "resolving" in said:
            skip_or_fail("pypi", f"the package index is not reachable: {said}")
        assert "the pin says sha256:0000" in said and "mcp_types-2.3.0" in said
    else:
        pytest.fail("a wrong pin was accepted")


# -- citations of another commit ---------------------------------------------------------


def test_a_citation_of_another_commit_is_that_source_stale_unless_its_bytes_match() -> None:
    key = Key(
        id="q",
        answer_key="k",
        valid_sources=[Source(uri=f"repo://handbook@{C1}/CODEOWNERS", sha256="sha256:" + "a" * 64)],
    )
    at_c2 = f"repo://handbook@{C2}/CODEOWNERS"
    assert classify(at_c2, "b" * 64, key, set()) == "stale"
    assert classify(at_c2, "a" * 64, key, set()) == "valid"
    assert (
        classify(f"repo://handbook@{C2}/OWNERS", "sha256:" + "a" * 64, key, set()) == "fabricated"
    )


# -- the retrieval arm end to end ------------------------------------------------------


@pytest.mark.ray
@pytest.mark.docker
@pytest.mark.slow
def test_the_retrieval_arm_end_to_end(ray_local: None, tmp_path: Path) -> None:
    from hangar.store import ResultsStore
    from hangar.testing.scripted import Script, ScriptedServer

    folder = tmp_path / "knowledge"
    shutil.copytree(KNOWLEDGE, folder)
    (folder / "repositories.yaml").write_text(f"handbook: {EXAMPLES / 'repos/handbook.bundle'}\n")
    server = ScriptedServer(Script.load(folder / "scripted-retrieval.yaml")).start()
    model = json.dumps(
        {
            "id": "scripted-retriever",
            "base_url": f"{server.url}/v1",
            "api_key_env": "HANGAR_SCRIPTED_KEY",
        }
    )
    store = f"sqlite:///{tmp_path}/r.db"
    args = ["knowledge", "run", str(folder), "--arm", "retrieval:handbook", "--model", model,
            "--store", store, "--evidence", (tmp_path / "ev").as_uri()]  # fmt: skip
    try:
        wrong = runner.invoke(app, args)  # the default agent has no retrieval server
        run = runner.invoke(
            app, [*args, "--agents-file", str(folder / "agents.yaml"), "--agent", "retrieval"]
        )
    finally:
        server.shutdown()
    assert "arm needs the MCP server 'handbook' in the agent's `mcp` (none)" in str(wrong.exception)
    assert run.exit_code == 0, run.output
    assert "11 answered" in run.output, run.output
    # The model was offered the server's tools and nothing of the workspace; what it was
    # told back came from the server, in the sandbox.
    first = server.requests[0]["body"]
    assert sorted(t["function"]["name"] for t in first["tools"]) == [
        "answer", "mcp__handbook__read", "mcp__handbook__search"]  # fmt: skip
    told = [m for r in server.requests for m in r["body"]["messages"] if m.get("role") == "tool"]
    assert told and all("repo://handbook@" in m["content"] for m in told)
    meta = json.loads((folder / "answers" / "retrieval:handbook.meta.json").read_text())
    assert meta["knowledge_snapshot"] == f"handbook@{C2}"
    sweep = "knowledge-knowledge-retrieval-handbook-scripted-retriever"
    results = {r.scenario_id: r for r in ResultsStore(store).results(sweep)}
    assert len(results) == 11 and {r.verdict.value for r in results.values()} == {"pass"}
    mcp = results["Q01"].agent_settings["mcp"]["handbook"]
    assert mcp["sha256"] == pin(KNOWLEDGE / "mcp/handbook_server.py")
    with tarfile.open(str(results["Q04"].evidence_uri).removeprefix("file://")) as tar:
        record = json.loads(tar.extractfile("mcp.json").read())  # type: ignore[union-attr]
        answer = json.loads(tar.extractfile("answer.json").read())  # type: ignore[union-attr]
    assert record["handbook"]["mounted_at"] == "/opt/hangar/mcp/handbook"
    assert any(w.startswith("mcp-2.3.0-") for w in record["handbook"]["wheels"])
    # Q04 is asked as of 1.0: the server's 1.1 file is cited, hashed by hangar at 1.1
    suite = sealed_suite(folder)
    (cited,) = answer["citations"]
    assert cited["uri"] == f"repo://handbook@{C2}/docs/status.md"
    assert cited["sha256"] != suite.keys["Q04"].valid_sources[0].sha256
    out = runner.invoke(
        app,
        [
            "knowledge",
            "score",
            str(folder),
            "--arm",
            "retrieval:handbook",
            "--json",
            "--store",
            store,
        ],
    )
    (arm,) = json.loads(out.stdout)["arms"]
    assert {m["metric"]: (m["k"], m["n"]) for m in arm["metrics"]} == {
        "correctness": (9, 11), "citation_validity": (9, 11)}  # fmt: skip
    assert arm["citations"]["stale"] == 2 and "knowledge snapshot handbook@" in arm["meta_note"]
    # The scores went to the store, per answer and linked to each trial, and the sweep's
    # export carries them.
    rows = ResultsStore(store).knowledge_scores("knowledge")
    assert len(rows) == 11 and {r["sweep_id"] for r in rows} == {sweep}
    assert sum(r["correct"] for r in rows) == 9 and all(r["trial_key"] for r in rows)
    exported = tmp_path / "export.jsonl"
    done = runner.invoke(app, ["export", sweep, "--store", store, "--out", str(exported)])
    assert done.exit_code == 0, done.output
    lines = [json.loads(x) for x in exported.read_text().splitlines()]
    q04 = next(x for x in lines if x["scenario_id"] == "Q04")
    assert {s["metric"]: s["value"] for s in q04["scores"]} == {
        "correctness": 0.0,
        "citation_validity": 0.0,
    }


@pytest.mark.docker
def test_a_chat_agent_gets_its_servers_tools_in_any_sandboxed_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hangar's chat agent (tools: edit) with the handbook server, in a routing trial: the
    server's tools are offered beside bash and edit, and a call of one runs in the sandbox."""
    from hangar.kinds.routing import routing_trial
    from hangar.kinds.routing.suite import load_routing_suite
    from hangar.models import ModelSpec
    from hangar.testing.scripted import Conversation, Reply, Script, ScriptedServer, ToolCall
    from hangar.trials import run_trial

    shutil.copytree(EXAMPLES / "routing", tmp_path / "routing")
    shutil.copytree(EXAMPLES / "decision" / "skills", tmp_path / "decision" / "skills")
    (case, *_) = load_routing_suite(tmp_path / "routing" / "suite.yaml")
    agent = example_agent().model_copy(update={"tools": "edit", "system_prompt": "Help."})
    call = ToolCall(name="mcp__handbook__read", arguments={"uri": "nowhere"})
    script = Script(
        conversations=[
            Conversation(
                match=case.case.prompt[:30], replies=[Reply(tool_calls=[call]), Reply(content="ok")]
            )
        ]
    )
    server = ScriptedServer(script).start()
    monkeypatch.setenv("HANGAR_TEST_KEY", "k")
    try:
        model = ModelSpec(id="m", base_url=f"{server.url}/v1", api_key_env="HANGAR_TEST_KEY")
        result = run_trial(
            routing_trial(case, agent, model=model, evidence_url=(tmp_path / "ev").as_uri())
        )
    finally:
        server.shutdown()
    assert result.verdict is Verdict.FAIL and result.reason == "wrong route: missing tdd"
    offered = {t["function"]["name"] for t in server.requests[0]["body"]["tools"]}
    assert offered == {"bash", "edit", "mcp__handbook__search", "mcp__handbook__read"}
    told = [m for m in server.requests[1]["body"]["messages"] if m.get("role") == "tool"]
    assert told[0]["content"] == "no document nowhere"  # the server's own answer
