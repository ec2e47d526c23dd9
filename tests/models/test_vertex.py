"""Claude and Gemini on Google Vertex AI through the relay and from the host: the agent
speaks Anthropic's or Gemini's API; the node gets an OAuth token for its service account
(google-auth's JWT bearer grant against the scripted server's token endpoint, which
verifies the assertion with the account's public key) and calls Vertex's paths."""

from __future__ import annotations

import json
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
from tests.models.test_bedrock import STREAM  # the agent's streamed Messages call
from tests.models.test_relay import EXAMPLES, events, everything, run

PRICE = Price(input=3.0, output=15.0, cached_input=0.3)
TOKEN = "ya29.hangar-vertex-token-0123456789"
PROJECT, LOCATION = "hangar-evals", "us-east5"
SCRIPT = """
conversations:
  - replies:
      - content: "median fixed"
        usage: {input: 900, output: 30}
"""


def _key() -> tuple[str, str]:
    """A fresh RSA key: (private PEM, public PEM)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


def serve(
    tmp_path: Path, script: Path | Script | None = None, public: str | None = None
) -> ScriptedServer:
    """The scripted server with Vertex's token endpoint; the node's service account file
    (GOOGLE_APPLICATION_CREDENTIALS) names it as its token URI. `public`: the key the
    server trusts (default: the account's own)."""
    if script is None:
        script = tmp_path / "vertex.yaml"
        script.write_text(SCRIPT)
    loaded = script if isinstance(script, Script) else Script.load(script)
    private, own = _key()
    srv = ScriptedServer(loaded, google=(public or own, TOKEN)).start()
    account = {
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": "hangar-test",
        "private_key": private,
        "client_email": f"evals@{PROJECT}.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": f"{srv.url}/token",
    }
    (tmp_path / "account.json").write_text(json.dumps(account))
    return srv


@pytest.fixture(autouse=True)
def google_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    from hangar.models import dialects

    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "account.json"))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    dialects._google_credentials.cache_clear()
    yield
    dialects._google_credentials.cache_clear()


@pytest.fixture
def vertex(tmp_path: Path) -> Iterator[ScriptedServer]:
    srv = serve(tmp_path)
    yield srv
    srv.shutdown()


def model(server: ScriptedServer, model_id: str = "claude-scripted@20250929") -> ModelSpec:
    return ModelSpec(
        id=model_id, provider="vertex", base_url=server.url, region=LOCATION, price=PRICE
    )


BASE = f"/v1/projects/{PROJECT}/locations/{LOCATION}/publishers"


def test_claude_from_the_host_goes_to_raw_predict_with_a_token(vertex: ScriptedServer) -> None:
    done = complete(model(vertex), "Answer.", "statkit median")
    assert done.error == "" and done.text == "median fixed", done
    assert (done.usage.input_tokens, done.usage.output_tokens) == (900, 30)
    (call,) = vertex.requests
    assert call["path"] == f"{BASE}/anthropic/models/claude-scripted@20250929:rawPredict"
    assert call["body"]["anthropic_version"] == "vertex-2023-10-16" and "model" not in call["body"]
    assert call["headers"]["Authorization"] == f"Bearer {TOKEN}"
    (claims,) = vertex.tokens  # one grant: the token is kept until it expires
    assert claims["iss"] == f"evals@{PROJECT}.iam.gserviceaccount.com"
    assert "cloud-platform" in claims["scope"]


def test_gemini_from_the_host_goes_to_generate_content(vertex: ScriptedServer) -> None:
    done = complete(model(vertex, "gemini-scripted"), "Answer.", "statkit median")
    assert done.error == "" and done.text == "median fixed", done
    (call,) = vertex.requests
    assert call["path"] == f"{BASE}/google/models/gemini-scripted:generateContent"
    assert call["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert "x-goog-api-key" not in {k.lower() for k in call["headers"]}


def test_credentials_the_token_endpoint_refuses_are_a_clear_error(tmp_path: Path) -> None:
    """The token endpoint's check can fail: an assertion signed with another key."""
    srv = serve(tmp_path, public=_key()[1])
    try:
        done = complete(model(srv), "Answer.", "statkit median")
    finally:
        srv.shutdown()
    assert "needs Google credentials on this node" in done.error, done
    assert srv.requests == [] and srv.tokens == []


@pytest.mark.docker
def test_a_streamed_claude_call_from_a_sandbox(
    docker_client: docker.DockerClient, vertex: ScriptedServer, tmp_path: Path
) -> None:
    result = run(tmp_path, STREAM, model(vertex))
    out = "".join(e["text"] for e in events(result, "stdout"))
    assert "event: message_start" in out and "median fixed" in out, out
    (call,) = vertex.requests
    assert call["path"] == f"{BASE}/anthropic/models/claude-scripted@20250929:streamRawPredict"
    assert result.usage.input_tokens == 900 and result.usage.cost_usd > 0
    found = everything(result)  # the result and every file of the bundle
    key = json.loads((tmp_path / "account.json").read_text())["private_key"]
    assert TOKEN not in found and key.splitlines()[1] not in found


@pytest.mark.docker
@pytest.mark.slow
def test_claude_code_works_on_vertex_through_the_relay(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    from tests.models.cli_agents import cli_image, fix_the_example

    srv = serve(tmp_path, script=EXAMPLES / "scripted-model.yaml")
    try:
        spec = ModelSpec(
            id="scripted-claude", provider="vertex", api="messages", base_url=srv.url,
            region=LOCATION, price=PRICE,
        )  # fmt: skip
        result = fix_the_example(cli_image("claude"), "claude", spec, tmp_path / "trial")
    finally:
        srv.shutdown()
    assert result.verdict is Verdict.PASS, result.reason
    calls: list[dict[str, Any]] = srv.requests
    assert {c["path"].rsplit(":", 1)[0] for c in calls} == {
        f"{BASE}/anthropic/models/scripted-claude"
    }
    assert len(calls) >= 3 and result.usage.output_tokens >= 190


@pytest.mark.docker
@pytest.mark.slow
def test_gemini_cli_works_on_vertex_through_the_relay(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """Gemini CLI speaks Gemini's API to the relay (streamGenerateContent, SSE); the relay
    calls Vertex's publisher path with the node's token."""
    from hangar.testing.scripted import Conversation, Reply, ScriptedUsage, ToolCall
    from tests.models.cli_agents import FIX, cli_image, fix_the_example

    def shell(command: str) -> list[ToolCall]:
        return [ToolCall(name="run_shell_command", arguments={"command": command})]

    replies = [
        Reply(tool_calls=shell("sed -n 13,20p statkit/stats.py"),
              usage=ScriptedUsage(input=1200, output=40)),
        Reply(tool_calls=shell(FIX), usage=ScriptedUsage(input=1500, output=120)),
        Reply(content="Fixed.", usage=ScriptedUsage(input=1800, output=30)),
    ]  # fmt: skip
    script = Script(
        conversations=[Conversation(match="statkit", model="gemini-2.5-flash", replies=replies)]
    )
    srv = serve(tmp_path, script=script)
    try:
        spec = ModelSpec(
            id="gemini-2.5-flash", provider="vertex", base_url=srv.url, region=LOCATION,
            price=Price(input=0.3, output=2.5),
        )  # fmt: skip
        result = fix_the_example(cli_image("gemini"), "gemini", spec, tmp_path / "trial")
    finally:
        srv.shutdown()
    calls = [c for c in srv.requests if "/publishers/google/models/gemini-2.5-flash:" in c["path"]]
    assert result.verdict is Verdict.PASS, (result.reason, [c["path"] for c in srv.requests])
    assert len(calls) >= 3
    assert all(c["headers"]["Authorization"] == f"Bearer {TOKEN}" for c in calls)
    assert result.usage.input_tokens >= 4500


def test_the_preflight_asks_each_node_for_its_google_credentials(
    vertex: ScriptedServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from hangar.models import dialects
    from hangar.scheduler.preflight import Needs, check_node

    needs = Needs(evidence_url=(tmp_path / "ev").as_uri(), signed=[model(vertex)])
    assert check_node(needs, "here/abc").problems == []
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT")
    (problem,) = check_node(needs, "here/abc").problems
    assert "needs a Google Cloud project" in problem
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "absent.json"))
    dialects._google_credentials.cache_clear()
    (problem,) = check_node(needs, "here/abc").problems
    assert "needs Google credentials on this node" in problem and "hangar cluster join" in problem
