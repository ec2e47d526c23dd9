"""hangar's own calls on every cloud dialect: a prompt trial's call, a judge's, a chat
agent's tool loop; a throttled call sent again after the provider's back-off and never
counted against the model; no credential in a trace.

The clouds: Azure OpenAI by its key and by an Entra ID token (a managed identity's
endpoint, through azure-identity's own chain), Amazon Bedrock for Claude (InvokeModel)
and for the other models (Converse), every call SigV4-signed and checked, Vertex AI for
Claude and Gemini with a service account's OAuth token. The scripted server speaks each.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from hangar.kinds.rubric.formats import Dimension
from hangar.kinds.rubric.judge import judge_output
from hangar.models import ModelSpec
from hangar.models.complete import complete
from hangar.models.pricing import Price
from hangar.models.relay import ModelRelay
from hangar.testing.scripted import (
    Conversation,
    Reply,
    Script,
    ScriptedServer,
    ScriptedUsage,
)
from hangar.trace import TraceWriter
from tests.models import test_vertex
from tests.models.test_bedrock import ACCESS, SECRET
from tests.models.test_gemini import COUNT_FILES, GEMINI_REFUSED
from tests.models.test_gemini import contents as gemini_contents
from tests.models.test_policy import ANTHROPIC_REFUSED, OPENAI_REFUSED, Agent

KEY = "hangar-azure-key-0123456789"
IDENTITY, ENTRA = "hangar-identity-secret", "eyJ.hangar-entra-token.0123456789"
REGION = "eu-west-3"
PRICE = Price(input=3.0, output=15.0, cached_input=0.3)
USED = ScriptedUsage(input=1200, output=40, cached=200)
SCRIPT = Script(
    conversations=[
        COUNT_FILES,
        Conversation(
            match="DESC-clarity",
            replies=[Reply(content="Score (1-5): 4\nJustification: clear enough.")],
        ),
        Conversation(match="busy hour", replies=[Reply(throttle=2, content="after the wait")]),
        Conversation(replies=[Reply(content="median fixed", usage=USED)]),
    ]
)


class Cloud(NamedTuple):
    model: ModelSpec
    server: ScriptedServer
    secrets: tuple[str, ...]
    """What must never be in a trace: the key, the AWS secret, the tokens."""
    path: str
    """Where its model calls go (a prefix)."""


def _azure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, entra: bool) -> Cloud:
    from hangar.models import dialects

    monkeypatch.setattr(dialects, "_azure_tokens", {})
    if entra:  # no key: a managed identity's token (App Service's endpoint)
        server = ScriptedServer(SCRIPT, azure=(IDENTITY, ENTRA)).start()
        monkeypatch.delenv("AZURE_OPENAI_API_KEY", raising=False)
        monkeypatch.setenv("IDENTITY_ENDPOINT", f"{server.url}/msi/token")
        monkeypatch.setenv("IDENTITY_HEADER", IDENTITY)
        for name in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET"):
            monkeypatch.delenv(name, raising=False)
    else:
        server = ScriptedServer(SCRIPT).start()
        monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    spec = ModelSpec(id="gpt-4o", provider="azure", base_url=server.url, deployment="prod-4o",
                     api_version="2024-10-21", price=PRICE)  # fmt: skip
    return Cloud(spec, server, (KEY, IDENTITY, ENTRA), "/openai/deployments/prod-4o/")


def _bedrock(monkeypatch: pytest.MonkeyPatch, model_id: str) -> Cloud:
    from hangar.models import dialects

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    dialects._aws_session.cache_clear()
    server = ScriptedServer(SCRIPT, aws=(ACCESS, SECRET, REGION)).start()
    spec = ModelSpec(
        id=model_id, provider="bedrock", base_url=server.url, region=REGION, price=PRICE
    )
    return Cloud(spec, server, (SECRET,), "/model/")


def _vertex(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, model_id: str) -> Cloud:
    from hangar.models import dialects

    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "account.json"))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", test_vertex.PROJECT)
    dialects._google_credentials.cache_clear()
    server = test_vertex.serve(tmp_path, SCRIPT)
    spec = ModelSpec(id=model_id, provider="vertex", base_url=server.url,
                     region=test_vertex.LOCATION, price=PRICE)  # fmt: skip
    private = json.loads((tmp_path / "account.json").read_text())["private_key"]
    secret = private.splitlines()[1]  # a line of the account's private key
    return Cloud(spec, server, (test_vertex.TOKEN, secret), test_vertex.BASE)


CLOUDS = [
    "azure-key",
    "azure-entra",
    "bedrock-claude",
    "bedrock-converse",
    "vertex-claude",
    "vertex-gemini",
]


@pytest.fixture(params=CLOUDS)
def cloud(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[Cloud]:
    from hangar.models import dialects

    made = {
        "azure-key": lambda: _azure(monkeypatch, tmp_path, entra=False),
        "azure-entra": lambda: _azure(monkeypatch, tmp_path, entra=True),
        "bedrock-claude": lambda: _bedrock(monkeypatch, "anthropic.claude-scripted-v2:0"),
        "bedrock-converse": lambda: _bedrock(monkeypatch, "amazon.nova-scripted-v1:0"),
        "vertex-claude": lambda: _vertex(monkeypatch, tmp_path, "claude-scripted@20250929"),
        "vertex-gemini": lambda: _vertex(monkeypatch, tmp_path, "gemini-2.5-flash"),
    }[request.param]()
    yield made
    made.server.shutdown()
    dialects._aws_session.cache_clear()
    dialects._google_credentials.cache_clear()


def _calls(cloud: Cloud) -> list[dict[str, Any]]:
    return [r for r in cloud.server.requests if r["path"].startswith(cloud.path)]


def _clean(cloud: Cloud, trace: Path) -> None:
    text = trace.read_text()
    assert text.strip()
    for secret in cloud.secrets:
        assert secret not in text


def test_a_prompt_trials_call_is_metered_and_priced(cloud: Cloud, tmp_path: Path) -> None:
    trace = TraceWriter(tmp_path / "prompt.jsonl")
    done = complete(cloud.model, "Answer.", "statkit median", trace=trace)
    trace.close(completed=True)
    assert (done.text, done.error) == ("median fixed", ""), done
    usage = done.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cached_input_tokens) == (1200, 40, 200)
    assert usage.cost_usd == pytest.approx((1000 * 3.0 + 200 * 0.3 + 40 * 15.0) / 1e6)
    (call,) = _calls(cloud)
    assert call["body"].get("model") in (None, "prod-4o")  # the deployment, or in the path
    _clean(cloud, tmp_path / "prompt.jsonl")


def test_a_judge_scores_through_the_cloud(cloud: Cloud, tmp_path: Path) -> None:
    dimension = Dimension(name="clarity", weight=1.0, description="DESC-clarity",
                          anchors={1: "bad", 5: "great"})  # fmt: skip
    trace = TraceWriter(tmp_path / "judge.jsonl")
    judged = judge_output(cloud.model, "sdd-propose", [dimension], "REF", "CAND", trace)
    trace.close(completed=True)
    assert judged.provider_error is None
    ((verdict),) = judged.verdicts
    assert (verdict.dimension, verdict.score) == ("clarity", 4.0)
    assert len(_calls(cloud)) == 2  # both orderings
    _clean(cloud, tmp_path / "judge.jsonl")


def test_a_chat_agent_runs_its_tools_through_the_cloud(cloud: Cloud, tmp_path: Path) -> None:
    from hangar.agents import ChatAgent, run_chat_agent
    from hangar.sandbox import SandboxSpec
    from hangar.sandbox.local import LocalSandbox

    trace = TraceWriter(tmp_path / "trace.jsonl")
    spec = SandboxSpec(image="none", trial="cloud-chat", workdir=str(tmp_path))
    with LocalSandbox(spec) as sandbox:
        run, usage = run_chat_agent(
            ChatAgent(name="chat"), sandbox, "count the files", trace, 60, cloud.model
        )
    trace.close(completed=True)
    assert run.completed, run.reason
    first, second = _calls(cloud)
    told = json.dumps(second["body"])
    assert "3" in told and "bash" in json.dumps(first["body"])  # the tool, then its result
    assert usage.input_tokens == 20 and usage.cost_usd > 0
    _clean(cloud, tmp_path / "trace.jsonl")


def test_a_throttled_call_is_sent_again_after_the_back_off(cloud: Cloud, tmp_path: Path) -> None:
    """Two throttling answers (Bedrock's ThrottlingException, Vertex AI's 429, Azure's 429
    with retry-after), then the answer: the caller sees only the answer."""
    done = complete(cloud.model, "Answer.", "busy hour")
    assert (done.text, done.error, done.provider_error) == ("after the wait", "", None)
    assert len(_calls(cloud)) == 3


# -- the relay: what an agent in a sandbox sends, on each cloud --------------------------------


@pytest.fixture
def agent(cloud: Cloud, tmp_path: Path) -> Iterator[Agent]:
    trace = TraceWriter(tmp_path / "relay.jsonl")
    relay = ModelRelay(tmp_path / "relay.sock", cloud.model, trace).start()
    try:
        yield Agent(relay, tmp_path / "relay.jsonl")
    finally:
        relay.stop()
        trace.close(completed=True)


def ask(cloud: Cloud, user: str, stream: bool = False) -> tuple[str, dict[str, Any]]:
    """The agent's call in the API it speaks on `cloud`: (path, body)."""
    mid = cloud.model.id
    if cloud.model.family == "google":
        verb = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"/v1beta/models/{mid}:{verb}", {"contents": gemini_contents(user)}
    said = [{"role": "user", "content": user}]
    if cloud.model.family == "anthropic":
        return "/v1/messages", {"model": mid, "max_tokens": 100, "messages": said, "stream": stream}
    return "/v1/chat/completions", {"model": mid, "messages": said, "stream": stream}


def refusals(cloud: Cloud) -> dict[str, tuple[str, str, Any]]:
    """The relay's refusal cases of the API the agent speaks on `cloud`, for its model."""
    table = {"openai": OPENAI_REFUSED, "anthropic": ANTHROPIC_REFUSED, "google": GEMINI_REFUSED}
    mid = json.dumps(cloud.model.id)
    return {
        case: (
            method,
            path,
            None if body is None else json.loads(json.dumps(body).replace('"m1"', mid)),
        )
        for case, (method, path, body) in table[cloud.model.family].items()
    }


def test_the_relays_refusals_hold_on_every_cloud(cloud: Cloud, agent: Agent) -> None:
    cases = refusals(cloud)
    answered = {case: agent.call(m, p, b).status_code for case, (m, p, b) in cases.items()}
    assert answered == dict.fromkeys(cases, 403)
    reached = [r for r in cloud.server.requests if r["path"] != "/msi/token"]
    assert reached == []  # nothing reached the cloud (the node got its token, as it may)
    assert agent.relay.refused == len(cases) and agent.relay.calls == 0


def test_the_relay_sends_a_throttled_call_again(cloud: Cloud, agent: Agent, tmp_path: Path) -> None:
    """The agent waits through the throttling and gets the answer; the relay's back-off
    is in the trace; the provider is not held to have failed."""
    path, body = ask(cloud, "busy hour")
    reply = agent.call("POST", path, body)
    assert reply.status_code == 200, reply.text
    assert "after the wait" in reply.text
    assert [e["status"] for e in agent.events("model_throttled")] == [429, 429]
    assert len(_calls(cloud)) == 3 and agent.relay.calls == 1
    assert agent.relay.provider_error() is None
    _clean(cloud, tmp_path / "relay.jsonl")


def test_a_streamed_call_comes_back_in_the_agents_api(
    cloud: Cloud, agent: Agent, tmp_path: Path
) -> None:
    path, body = ask(cloud, "statkit median", stream=True)
    reply = agent.call("POST", path, body)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/event-stream")
    assert "median fixed" in reply.text
    usage = agent.relay.usage  # metered from the provider's own usage in the stream
    assert (usage.input_tokens, usage.output_tokens, usage.cached_input_tokens) == (1200, 40, 200)
    assert usage.cost_usd > 0
    _clean(cloud, tmp_path / "relay.jsonl")


def test_the_preflight_asks_each_node_for_a_key_or_an_entra_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Azure OpenAI without a key: a node whose identity is refused stops the sweep
    before any trial, naming the fix; one whose identity is granted a token is ready."""
    from hangar.scheduler.preflight import Needs, check_node

    cloud = _azure(monkeypatch, tmp_path, entra=True)
    try:
        needs = Needs(evidence_url=(tmp_path / "ev").as_uri(), signed=[cloud.model])
        assert check_node(needs, "here/abc").problems == []
        from hangar.models import dialects

        monkeypatch.setattr(dialects, "_azure_tokens", {})
        monkeypatch.setenv("IDENTITY_HEADER", "a secret the endpoint refuses")
        (problem,) = check_node(needs, "here/abc").problems
    finally:
        cloud.server.shutdown()
    assert "needs its key in AZURE_OPENAI_API_KEY or Azure credentials" in problem
    assert "managed identity" in problem and "a secret the endpoint refuses" not in problem


def test_a_model_the_cloud_lacks_stops_before_any_trial(cloud: Cloud) -> None:
    """The sweep's one-token model check meets the cloud's own answer for a model it does
    not serve there (Bedrock's 400 ValidationException for a region without it, Vertex
    AI's 404 for its publisher model, Azure's 404 for a deployment): the model stops."""
    from hangar.models.exists import check_model

    cloud.server.script = SCRIPT.model_copy(update={"models": ["another-model"]})
    found = check_model(cloud.model)
    assert not found.ok and found.error is not None and found.error.stops_model, found
    assert found.error.kind == "not_found"
