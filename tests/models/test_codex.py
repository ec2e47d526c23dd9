"""A real agent CLI (OpenAI Codex) fixes the example's bug in a sandbox with no network,
talking through the model relay to the scripted server."""

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
    route_the_example,
    scripted_trial,
)

#: The scripted model the routing and MCP tests talk to.
CODEX: dict[str, object] = {"id": "scripted-codex", "provider": "openai", "path": "/v1"}

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def codex_image(docker_client: docker.DockerClient) -> str:
    return cli_image("codex")


def test_codex_fixes_the_bug_through_the_relay(
    codex_image: str,
    scripted_server: ScriptedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HANGAR_TEST_CODEX_KEY", "sk-codex-test")
    model = ModelSpec(
        id="scripted-codex",
        provider="openai",
        base_url=f"{scripted_server.url}/v1",
        api_key_env="HANGAR_TEST_CODEX_KEY",
        price=Price(input=1.25, output=10.0, cached_input=0.125),
    )
    result = fix_the_example(codex_image, "codex", model, tmp_path)
    assert result.verdict is Verdict.PASS, result.reason
    assert [r["path"] for r in scripted_server.requests] == ["/v1/responses"] * 3
    assert all(r["stream"] for r in scripted_server.requests)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (4500, 190)
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        sessions = [n for n in tar.getnames() if n.startswith("agent/") and n.endswith(".jsonl")]
    assert sessions, "Codex's session files were not collected into the evidence"
    check_session(result, "codex")


def test_codex_routes_to_the_skill_it_finds_natively(
    codex_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The routing case's catalog, installed in ~/.agents/skills, reaches the model through
    Codex's own skill listing; the scripted model reads tdd's SKILL.md with a shell command,
    and the route Codex's session shows is graded exactly."""
    read = ToolCall(name="exec_command", arguments={"cmd": "cat ~/.agents/skills/tdd/SKILL.md"})
    replies = [Reply(tool_calls=[read]), Reply(content="A failing test first, then the fix.")]
    result, requests = scripted_trial(
        "parse_csv() drops the last field", replies, CODEX, monkeypatch,
        lambda model: route_the_example(codex_image, "codex", model, tmp_path),
    )  # fmt: skip
    assert (result.verdict, result.reason) == (Verdict.PASS, "routed exactly: tdd")
    first = json.dumps(requests[0]["body"])
    assert TDD_DESCRIPTION in first, "Codex did not list the installed skills to the model"
    assert result.details["route"]["loaded"] == ["tdd"]
    sources = {load["source"] for load in _loads(result)}
    assert "codex" in sources, "the route was not read from Codex's own session"


def _loads(result: object) -> list[dict[str, object]]:
    uri = getattr(result, "evidence_uri", None)
    assert uri is not None
    with tarfile.open(uri.removeprefix("file://")) as tar:
        member = tar.extractfile("route.json")
        assert member is not None
        return list(json.loads(member.read())["loads"])


def test_codex_calls_a_pinned_mcp_server_in_its_sandbox(
    codex_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The knowledge example's retrieval server, pinned, mounted read-only and configured
    natively (~/.codex/config.toml): the scripted model calls its search tool, and what the CLI
    sends back is the server's answer, computed in the sandbox with the network off."""
    call = ToolCall(
        name="search", namespace="mcp__handbook", arguments={"query": "PostgreSQL MongoDB"}
    )
    # a look around first, as models do (Codex starts its MCP servers beside the turn: a
    # call in the very first reply can come before they are up); the look waits for the
    # server's process and a moment more, which a loaded machine needs
    look = (
        "for i in $(seq 100); do grep -qs /mcp/[h]andbook /proc/[0-9]*/cmdline && break; "
        "sleep 0.1; done; sleep 1; ls"
    )
    replies = [
        Reply(tool_calls=[ToolCall(name="exec_command", arguments={"cmd": look})]),
        Reply(tool_calls=[call]),
        Reply(content="Found ADR 0001."),
    ]
    result, requests = scripted_trial(
        "parse_csv() drops the last field", replies, CODEX, monkeypatch,
        lambda model: ask_with_the_server(codex_image, "codex", model, tmp_path),
    )  # fmt: skip
    check_the_server_answered(result, requests)


def test_codex_reaches_an_azure_deployment_through_the_relay(
    codex_image: str,
    scripted_server: ScriptedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Codex speaks OpenAI's Responses API to the relay; the relay calls the Azure
    deployment (Azure's Responses path, its api-version, the key in ``api-key``)."""
    monkeypatch.setenv("HANGAR_TEST_AZURE_KEY", "azure-codex-test")
    model = ModelSpec(
        id="scripted-codex",
        provider="azure",
        base_url=scripted_server.url,
        api_version="2025-04-01-preview",
        api_key_env="HANGAR_TEST_AZURE_KEY",
        price=Price(input=1.25, output=10.0, cached_input=0.125),
    )
    result = fix_the_example(codex_image, "codex", model, tmp_path)
    assert result.verdict is Verdict.PASS, result.reason
    calls = scripted_server.requests
    assert [r["path"] for r in calls] == ["/openai/responses"] * 3
    assert all(r["query"] == "api-version=2025-04-01-preview" for r in calls)
    assert all(r["headers"].get("api-key") == "azure-codex-test" for r in calls)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (4500, 190)
