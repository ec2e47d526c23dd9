"""Chat agents fix the example's bug against the scripted server, on each API."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from hangar.agents import ChatAgent
from hangar.kinds.execution import single_trial
from hangar.kinds.execution.scenarios.scenario import load_scenario
from hangar.models import ModelSpec
from hangar.models.pricing import Price
from hangar.results import TrialResult, Verdict
from hangar.testing.scripted import Script, ScriptedServer
from hangar.trials import Arm, run_trial

pytestmark = pytest.mark.docker

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PRICE = Price(input=3.0, output=15.0, cached_input=0.3)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    srv = ScriptedServer(Script.load(EXAMPLES / "scripted-model.yaml")).start()
    yield srv
    srv.shutdown()


def spec(server: ScriptedServer, api: str) -> ModelSpec:
    provider = "anthropic" if api == "messages" else "openai"
    base = server.url if provider == "anthropic" else f"{server.url}/v1"
    return ModelSpec(
        id=f"scripted-{api}",
        provider=provider,
        base_url=base,
        api=api,
        api_key_env="HANGAR_TEST_CHAT_KEY",
        price=PRICE,
    )


def run(server: ScriptedServer, api: str, tmp_path: Path, **agent: Any) -> TrialResult:
    loaded = load_scenario(EXAMPLES / "median" / "scenario.yaml")
    trial = single_trial(
        loaded,
        ChatAgent(name="chat", **agent),
        Arm(name="control"),
        model=spec(server, api),
        evidence_url=(tmp_path / "ev").as_uri(),
    )
    return run_trial(trial)


def kinds(result: TrialResult) -> list[str]:
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        member = tar.extractfile("trace.jsonl")
        assert member is not None
        return [json.loads(line)["kind"] for line in member.read().decode().splitlines()]


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_chat_agent_fixes_the_bug(
    docker_client: docker.DockerClient,
    server: ScriptedServer,
    tmp_path: Path,
    api: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HANGAR_TEST_CHAT_KEY", "sk-chat-test")
    result = run(server, api, tmp_path)
    assert result.verdict is Verdict.PASS, result.reason
    u = result.usage
    assert (u.input_tokens, u.output_tokens, u.cached_input_tokens) == (4500, 190, 2400)
    assert u.reasoning_tokens == (10 if api != "messages" else 0)  # Anthropic reports none
    assert u.cost_usd == pytest.approx(((4500 - 2400) * 3.0 + 2400 * 0.3 + 190 * 15.0) / 1e6)
    trace = kinds(result)
    assert trace.count("model_request") == 3 and trace.count("tool_call") == 2
    assert trace[-1] == "trace_end"
    assert [r["path"] for r in server.requests] == [
        {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}[
            api
        ]
    ] * 3
    if api == "responses":  # the relay's rules hold for the host's own calls: nothing stored
        assert [r["body"]["store"] for r in server.requests] == [False] * 3


@pytest.mark.parametrize("status", [500, 401])
def test_a_provider_failure_is_not_the_chat_agents(
    docker_client: docker.DockerClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    status: int,
) -> None:
    monkeypatch.setenv("HANGAR_TEST_CHAT_KEY", "sk-chat-test")
    (tmp_path / "script.yaml").write_text(
        json.dumps({"conversations": [{"replies": [{"status": status}]}]})
    )
    failing = ScriptedServer(Script.load(tmp_path / "script.yaml")).start()
    try:
        result = run(failing, "responses", tmp_path)
    finally:
        failing.shutdown()
    assert result.verdict is Verdict.INFRA_ERROR, result.reason
    assert result.provider_error is not None
    assert result.provider_error.kind == ("auth" if status == 401 else "unavailable")
    assert result.provider_error.status == status


@pytest.mark.parametrize(
    ("limits", "words"),
    [({"max_turns": 2}, "turn limit reached"), ({"max_cost_usd": 0.001}, "cost limit reached")],
)
def test_limits_stop_the_loop(
    docker_client: docker.DockerClient,
    server: ScriptedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    limits: dict[str, Any],
    words: str,
) -> None:
    monkeypatch.setenv("HANGAR_TEST_CHAT_KEY", "sk-chat-test")
    result = run(server, "chat", tmp_path, **limits)
    assert result.verdict is Verdict.FAIL and words in result.reason
