"""Anthropic's models on Amazon Bedrock through the relay and from the host: the agent
speaks the Messages API, the relay signs each call with SigV4 from the node's AWS
credentials, and the scripted server checks the signature as AWS does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from hangar.models import ModelSpec
from hangar.models.complete import complete
from hangar.models.pricing import Price
from hangar.results import Verdict
from hangar.testing.scripted import Script, ScriptedServer
from tests.models.test_relay import EXAMPLES, TOOLLOOP, events, everything, run

#: A Bedrock model id (its colon is percent-encoded in the path, and signed so).
MODEL = "anthropic.claude-scripted-v2:0"
PRICE = Price(input=3.0, output=15.0, cached_input=0.3)
SCRIPT = f"""
conversations:
  - model: {MODEL}
    replies:
      - content: "median fixed"
        usage: {{input: 1200, output: 40, cached: 200}}
"""
#: The node's AWS credentials in these tests (fake; only ever sent to loopback).
ACCESS, SECRET = "AKIDHANGARBEDROCK", "hangar-bedrock-secret-0123456789"


@pytest.fixture(autouse=True)
def aws_keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This node's credentials, read afresh by boto3's chain."""
    from hangar.models import dialects

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    dialects._aws_session.cache_clear()
    yield
    dialects._aws_session.cache_clear()


def start(tmp_path: Path, secret: str = SECRET) -> ScriptedServer:
    (tmp_path / "bedrock.yaml").write_text(SCRIPT)
    aws = (ACCESS, secret, "eu-west-3")
    return ScriptedServer(Script.load(tmp_path / "bedrock.yaml"), aws=aws).start()


@pytest.fixture
def bedrock(tmp_path: Path) -> Iterator[ScriptedServer]:
    srv = start(tmp_path)
    yield srv
    srv.shutdown()


def no_aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node where boto3's chain finds no credentials (no variables, files or role)."""
    from hangar.models import dialects

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    dialects._aws_session.cache_clear()


def model(server: ScriptedServer) -> ModelSpec:
    return ModelSpec(
        id=MODEL, provider="bedrock", base_url=server.url, region="eu-west-3", price=PRICE
    )


def test_a_prompt_call_from_the_host_is_signed_for_bedrock(bedrock: ScriptedServer) -> None:
    done = complete(model(bedrock), "Answer.", "statkit median")
    assert done.error == "" and done.text == "median fixed", done
    assert (done.usage.input_tokens, done.usage.output_tokens) == (1200, 40)
    (call,) = bedrock.requests
    assert call["path"] == "/model/anthropic.claude-scripted-v2%3A0/invoke"
    assert call["body"]["anthropic_version"] == "bedrock-2023-05-31"
    assert "model" not in call["body"] and "stream" not in call["body"]
    assert call["headers"]["Authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS}/")
    assert SECRET not in str(call["headers"])


def test_a_wrong_secret_is_refused_by_the_server(tmp_path: Path) -> None:
    """The server's check can fail: credentials it does not hold sign differently."""
    srv = start(tmp_path, secret="not-the-secret-the-node-has")
    try:
        done = complete(model(srv), "Answer.", "statkit median")
    finally:
        srv.shutdown()
    assert "403" in done.error and done.text == "", done


def test_no_region_or_no_credentials_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from hangar.errors import ConfigError

    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="needs a region"):
        ModelSpec(id=MODEL, provider="bedrock").api_key()
    no_aws_credentials(monkeypatch)
    with pytest.raises(ConfigError, match="needs AWS credentials on this node"):
        ModelSpec(id=MODEL, provider="bedrock", region="eu-west-3").api_key()


STREAM = r"""python3 - <<'PY'
import json, os, urllib.request
r = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages",
    data=json.dumps({"model": os.environ["HANGAR_MODEL"], "max_tokens": 64, "stream": True,
                     "messages": [{"role": "user", "content": "statkit median"}]}).encode(),
    headers={"content-type": "application/json", "x-api-key": os.environ["ANTHROPIC_API_KEY"],
             "anthropic-version": "2023-06-01"})
with urllib.request.urlopen(r, timeout=60) as answer:
    print("type", answer.headers["content-type"])
    print(answer.read().decode())
PY"""


@pytest.mark.docker
def test_a_streamed_call_from_a_sandbox_comes_back_as_sse(
    docker_client: docker.DockerClient, bedrock: ScriptedServer, tmp_path: Path
) -> None:
    """The agent streams Anthropic's SSE; Bedrock answers in event-stream frames; the relay
    turns them into the SSE and meters the usage; the sandbox never sees a credential."""
    result = run(tmp_path, STREAM, model(bedrock))
    out = "".join(e["text"] for e in events(result, "stdout"))
    assert "type text/event-stream" in out, out
    assert "event: message_start" in out and "median fixed" in out and "message_stop" in out
    (call,) = bedrock.requests
    assert call["path"] == "/model/anthropic.claude-scripted-v2%3A0/invoke-with-response-stream"
    (metered,) = events(result, "model_call")
    assert metered["usage"]["input_tokens"] == 1200 and metered["usage"]["output_tokens"] == 40
    assert result.usage.cost_usd > 0
    found = everything(result)  # the result and every file of the bundle
    assert SECRET not in found and ACCESS not in found


@pytest.mark.docker
def test_a_command_agent_reaches_a_converse_model_through_the_relay(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """A model that is not Anthropic's: the agent's Chat Completions tool loop (tool
    calls, tool results) goes to Bedrock's Converse API, signed; its usage is metered
    from Converse's own fields."""
    srv = ScriptedServer(Script.load(EXAMPLES / "scripted-model.yaml"),
                         aws=(ACCESS, SECRET, "eu-west-3")).start()  # fmt: skip
    try:
        spec = ModelSpec(id="scripted-fixer", provider="bedrock", base_url=srv.url,
                         region="eu-west-3", price=PRICE)  # fmt: skip
        result = run(tmp_path, TOOLLOOP, spec)
    finally:
        srv.shutdown()
    assert result.verdict is Verdict.PASS, result.reason
    assert (result.usage.input_tokens, result.usage.output_tokens) == (4500, 190)
    assert result.usage.cached_input_tokens == 2400 and result.usage.cost_usd > 0
    assert [c["path"] for c in srv.requests] == ["/model/scripted-fixer/converse"] * 3
    results = [b for c in srv.requests for m in c["body"]["messages"] for b in m["content"]]
    assert any("toolResult" in b for b in results)  # the tool's output went back
    found = everything(result)  # the result and every file of the bundle
    assert SECRET not in found and ACCESS not in found


@pytest.mark.docker
@pytest.mark.slow
def test_claude_code_works_on_bedrock_through_the_relay(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """Claude Code speaks Anthropic's API to the relay as for any Claude model; the relay
    calls Bedrock, signed."""
    from tests.models.cli_agents import cli_image, fix_the_example

    srv = ScriptedServer(
        Script.load(Path(__file__).resolve().parents[2] / "examples" / "scripted-model.yaml"),
        aws=(ACCESS, SECRET, "eu-west-3"),
    ).start()
    try:
        spec = ModelSpec(
            id="scripted-claude", provider="bedrock", base_url=srv.url, region="eu-west-3",
            price=PRICE,
        )  # fmt: skip
        result = fix_the_example(cli_image("claude"), "claude", spec, tmp_path)
    finally:
        srv.shutdown()
    assert result.verdict is Verdict.PASS, result.reason
    calls: list[dict[str, Any]] = srv.requests
    paths = {c["path"] for c in calls}
    assert paths <= {
        "/model/scripted-claude/invoke",
        "/model/scripted-claude/invoke-with-response-stream",
    }, paths
    assert len(calls) >= 3 and result.usage.output_tokens >= 190


def test_the_preflight_asks_each_node_for_its_aws_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A node that cannot sign Bedrock's calls stops the sweep before any trial, naming
    the fix; no key variable is asked for (Bedrock has none)."""
    from hangar.scheduler.preflight import Needs, check_node

    spec = ModelSpec(id=MODEL, provider="bedrock", region="eu-west-3")
    needs = Needs(evidence_url=(tmp_path / "ev").as_uri(), signed=[spec])
    assert check_node(needs, "here/abc").problems == []
    no_aws_credentials(monkeypatch)
    (problem,) = check_node(needs, "here/abc").problems
    assert "needs AWS credentials on this node" in problem and "hangar cluster join" in problem
