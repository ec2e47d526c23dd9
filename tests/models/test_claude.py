"""Claude Code fixes the example's bug in a sandbox with no network, talking the Anthropic
Messages API through the model relay to the scripted server; its image is built offline
from the npm registry (its linux-x64 binary and Node.js 22)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import docker
import pytest

from hangar.models import ModelSpec
from hangar.models.pricing import Price
from hangar.results import Verdict
from hangar.testing.scripted import Reply, ScriptedServer, ToolCall
from tests.models.cli_agents import (
    TDD_DESCRIPTION,
    ask_with_the_server,
    check_session,
    check_the_server_answered,
    cli_image,
    fix_the_example,
    in_bundle,
    route_the_example,
    scripted_trial,
)

#: The scripted model the routing and MCP tests talk to.
CLAUDE: dict[str, object] = {"id": "scripted-claude", "provider": "anthropic"}

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def claude_image(docker_client: docker.DockerClient) -> str:
    return cli_image("claude")


def test_the_bundle_runs_claude_code_and_node_22(claude_image: str) -> None:
    claude = in_bundle("claude", "claude --version", claude_image)
    node = in_bundle("claude", "/opt/hangar/agent/node/bin/node --version", claude_image)
    assert claude.returncode == 0 and "2.1.332 (Claude Code)" in claude.stdout
    assert node.returncode == 0 and node.stdout.startswith("v22.")


def test_claude_code_fixes_the_bug_through_the_relay(
    claude_image: str,
    scripted_server: ScriptedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HANGAR_TEST_CLAUDE_KEY", "sk-ant-claude-test")
    model = ModelSpec(
        id="scripted-claude",
        provider="anthropic",
        base_url=scripted_server.url,
        api_key_env="HANGAR_TEST_CLAUDE_KEY",
        price=Price(input=3.0, output=15.0, cached_input=0.3),
    )
    result = fix_the_example(claude_image, "claude", model, tmp_path)
    assert result.verdict is Verdict.PASS, result.reason
    messages = [r for r in scripted_server.requests if r["path"] == "/v1/messages"]
    assert len(messages) >= 3 and all(r["model"] == "scripted-claude" for r in messages)
    assert result.usage.input_tokens >= 4500 and result.usage.output_tokens >= 190
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        names = tar.getnames()
        sessions = [n for n in names if n.startswith("agent/") and n.endswith(".jsonl")]
        assert sessions, f"Claude Code's session files were not collected: {names}"
    check_session(result, "claude")


def test_claude_code_routes_to_the_skill_it_finds_natively(
    claude_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The routing case's catalog, installed in ~/.claude/skills, reaches the model through
    Claude Code's Skill tool; the scripted model calls it for tdd, and the route Claude
    Code's transcript shows is graded exactly."""
    replies = [
        Reply(tool_calls=[ToolCall(name="Skill", arguments={"skill": "tdd"})]),
        Reply(content="A failing test first, then the fix."),
    ]
    result, requests = scripted_trial(
        "parse_csv() drops the last field", replies, CLAUDE, monkeypatch,
        lambda model: route_the_example(claude_image, "claude", model, tmp_path),
    )  # fmt: skip
    assert (result.verdict, result.reason) == (Verdict.PASS, "routed exactly: tdd")
    messages = [r for r in requests if r["path"] == "/v1/messages"]
    assert any(TDD_DESCRIPTION in json.dumps(r["body"]) for r in messages), (
        "Claude Code did not offer the installed skills to the model"
    )
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        member = tar.extractfile("route.json")
        assert member is not None
        loads = json.loads(member.read())["loads"]
    assert [(load["skill"], load["source"]) for load in loads][:1] == [("tdd", "claude")]


def test_claude_calls_a_pinned_mcp_server_in_its_sandbox(
    claude_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The knowledge example's retrieval server, pinned, mounted read-only and configured
    natively (--mcp-config): the scripted model calls its search tool, and what the CLI
    sends back is the server's answer, computed in the sandbox with the network off."""
    call = ToolCall(name="mcp__handbook__search", arguments={"query": "PostgreSQL MongoDB"})
    replies = [Reply(tool_calls=[call]), Reply(content="Found ADR 0001.")]
    result, requests = scripted_trial(
        "parse_csv() drops the last field", replies, CLAUDE, monkeypatch,
        lambda model: ask_with_the_server(claude_image, "claude", model, tmp_path),
    )  # fmt: skip
    check_the_server_answered(result, requests)
