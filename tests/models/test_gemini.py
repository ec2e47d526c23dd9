"""The Gemini API family through the relay: the model's own shapes (generateContent,
streamGenerateContent as SSE, countTokens), its key from the host, usage metered; every
request the allowlist refuses never reaches a recording fake provider (the scripted
server); chat agents, prompt trials and judges on it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hangar.models import ModelSpec
from hangar.models.pricing import Price
from hangar.models.relay import ModelRelay
from hangar.testing.scripted import Conversation, Reply, Script, ScriptedServer, ToolCall
from hangar.trace import TraceWriter
from tests.models.test_policy import SECRET, Agent

MODEL = "gemini-2.5-flash"
GEN = f"/v1beta/models/{MODEL}:generateContent"
STREAM = f"/v1beta/models/{MODEL}:streamGenerateContent"


def contents(text: str = "hello") -> list[dict[str, Any]]:
    return [{"role": "user", "parts": [{"text": text}]}]


def body(**extra: Any) -> dict[str, Any]:
    return {"contents": contents(), **extra}


@pytest.fixture
def upstream() -> Iterator[ScriptedServer]:
    script = Script(
        conversations=[
            Conversation(
                match="hello",
                replies=[
                    Reply(
                        content="hi there",
                        usage={"input": 120, "output": 30, "cached": 20, "reasoning": 10},
                    ),
                    Reply(content="again"),
                ],
            ),
            Conversation(match="flaky", replies=[Reply(status=503)]),
        ]
    )
    server = ScriptedServer(script).start()
    yield server
    server.shutdown()


@pytest.fixture
def gemini(
    tmp_path: Path, upstream: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Agent]:
    monkeypatch.setenv("HANGAR_POLICY_KEY", SECRET)
    spec = ModelSpec(
        id=MODEL,
        provider="google",
        base_url=upstream.url,
        api_key_env="HANGAR_POLICY_KEY",
        price=Price(input=0.3, output=2.5, cached_input=0.075),
    )
    trace = TraceWriter(tmp_path / "google.jsonl")
    relay = ModelRelay(tmp_path / "google.sock", spec, trace).start()
    try:
        yield Agent(relay, tmp_path / "google.jsonl")
    finally:
        relay.stop()
        trace.close(completed=True)


# -- the model's own shapes, forwarded and metered ---------------------------------------


def test_generate_content_reaches_the_provider_with_the_real_key_only(
    gemini: Agent, upstream: ScriptedServer
) -> None:
    reply = gemini.call("POST", GEN, body())
    assert reply.status_code == 200, reply.text
    assert reply.json()["candidates"][0]["content"]["parts"][0]["text"] == "hi there"
    (seen,) = upstream.requests
    assert seen["path"] == GEN and seen["headers"].get("x-goog-api-key") == SECRET
    assert gemini.relay.token not in json.dumps(seen)  # the trial token never goes upstream
    usage = gemini.relay.usage  # 120 in (20 cached), 30 out of which 10 thoughts
    assert (usage.input_tokens, usage.cached_input_tokens) == (120, 20)
    assert (usage.output_tokens, usage.reasoning_tokens) == (30, 10)
    assert usage.cost_usd == pytest.approx((100 * 0.3 + 20 * 0.075 + 30 * 2.5) / 1e6)


def test_a_stream_is_passed_back_as_it_comes_and_metered(
    gemini: Agent, upstream: ScriptedServer
) -> None:
    reply = gemini.call("POST", f"{STREAM}?alt=sse", body())
    assert reply.status_code == 200 and "text/event-stream" in reply.headers["content-type"]
    chunks = [json.loads(x[5:]) for x in reply.text.splitlines() if x.startswith("data:")]
    text = "".join(
        p.get("text", "") for c in chunks for p in c["candidates"][0]["content"]["parts"]
    )
    assert text == "hi there"
    assert gemini.relay.usage.input_tokens == 120 and gemini.relay.usage.output_tokens == 30
    assert upstream.requests[0]["query"] == "alt=sse"


def test_the_key_may_come_as_gemini_tools_send_it(gemini: Agent, upstream: ScriptedServer) -> None:
    """Google's SDKs send ``x-goog-api-key`` (or ``?key=``): the trial token is accepted so
    and dropped; another key is refused."""
    token = gemini.relay.token
    http = gemini.http
    ok = http.post(GEN, content=json.dumps(body()), headers={"x-goog-api-key": token})
    assert ok.status_code == 200
    by_query = http.post(f"{GEN}?key={token}", content=json.dumps(body()))
    assert by_query.status_code == 200
    assert all("key=" not in r["query"] for r in upstream.requests)
    wrong = http.post(GEN, content=json.dumps(body()), headers={"x-goog-api-key": SECRET + "x"})
    assert wrong.status_code == 401
    counted = gemini.call("POST", f"/v1beta/models/{MODEL}:countTokens", {"contents": contents()})
    assert counted.status_code == 200 and counted.json()["totalTokens"] >= 1


def test_the_models_list_names_only_the_trials_model(
    gemini: Agent, upstream: ScriptedServer
) -> None:
    listed = gemini.call("GET", "/v1beta/models")
    assert [m["name"] for m in listed.json()["models"]] == [f"models/{MODEL}"]
    one = gemini.call("GET", f"/v1beta/models/{MODEL}")
    assert one.json()["name"] == f"models/{MODEL}"
    assert gemini.call("GET", "/v1beta/models/gemini-2.5-pro").status_code == 403
    assert upstream.requests == []


# -- refusals: none reaches the provider -----------------------------------------------

GEMINI_REFUSED = {
    "another model": ("POST", "/v1beta/models/gemini-2.5-pro:generateContent", body()),
    "another method": ("POST", f"/v1beta/models/{MODEL}:embedContent", body()),
    "batch generation": ("POST", f"/v1beta/models/{MODEL}:batchGenerateContent", body()),
    "the files API": ("GET", "/v1beta/files", None),
    "an upload": ("POST", "/upload/v1beta/files", {"file": {}}),
    "cached contents": ("POST", "/v1beta/cachedContents", {"model": f"models/{MODEL}"}),
    "a cachedContent reference": ("POST", GEN, body(cachedContent="cachedContents/abc")),
    "google search": ("POST", GEN, body(tools=[{"googleSearch": {}}])),
    "google_search spelled as the SDK does": ("POST", GEN, body(tools=[{"google_search": {}}])),
    "google search retrieval": ("POST", GEN, body(tools=[{"googleSearchRetrieval": {}}])),
    "url context": ("POST", GEN, body(tools=[{"urlContext": {}}])),
    "code execution": ("POST", GEN, body(tools=[{"codeExecution": {}}])),
    "file search": ("POST", GEN, body(tools=[{"fileSearch": {"fileSearchStoreNames": ["x"]}}])),
    "maps": ("POST", GEN, body(tools=[{"googleMaps": {}}])),
    "computer use": ("POST", GEN, body(tools=[{"computerUse": {"environment": "BROWSER"}}])),
    "a tool the API adds later": ("POST", GEN, body(tools=[{"someFutureTool": {}}])),
    "functions beside a hosted tool": (
        "POST",
        GEN,
        body(tools=[{"functionDeclarations": [{"name": "f"}], "googleSearch": {}}]),
    ),
    "a file uri": (
        "POST",
        GEN,
        {
            "contents": [
                {
                    "role": "user",
                    "parts": [
                        {
                            "fileData": {
                                "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/x",
                                "mimeType": "text/plain",
                            }
                        }
                    ],
                }
            ]
        },
    ),
    "a url for google to fetch": (
        "POST",
        GEN,
        {
            "contents": [
                {"role": "user", "parts": [{"file_data": {"file_uri": "https://x.invalid/a.pdf"}}]}
            ]
        },
    ),
    "a file in the system instruction": (
        "POST",
        GEN,
        body(systemInstruction={"parts": [{"fileData": {"fileUri": "gs://b/o"}}]}),
    ),
    "retrieval config": ("POST", GEN, body(toolConfig={"retrievalConfig": {"latLng": {}}})),
    "an unknown request field": ("POST", GEN, body(labels={"team": "x"})),
    "an unknown query parameter": ("POST", f"{GEN}?alt=json&foo=1", body()),
    "countTokens of another model": (
        "POST",
        f"/v1beta/models/{MODEL}:countTokens",
        {"generateContentRequest": {"model": "models/gemini-2.5-pro", "contents": contents()}},
    ),
    "countTokens with a hosted tool": (
        "POST",
        f"/v1beta/models/{MODEL}:countTokens",
        {
            "generateContentRequest": {
                "model": f"models/{MODEL}",
                "contents": contents(),
                "tools": [{"googleSearch": {}}],
            }
        },
    ),
    "a tuned model": ("POST", "/v1beta/tunedModels/t:generateContent", body()),
    "an operation": ("GET", "/v1beta/operations", None),
}


@pytest.mark.parametrize("case", sorted(GEMINI_REFUSED))
def test_gemini_refusals_never_reach_the_provider(
    gemini: Agent, upstream: ScriptedServer, case: str
) -> None:
    method, path, payload = GEMINI_REFUSED[case]
    reply = gemini.call(method, path, payload)
    assert reply.status_code == 403, reply.text
    assert reply.json()["error"]["type"] == "hangar_relay"
    assert upstream.requests == []
    (refused,) = gemini.events("model_refused")
    assert refused["path"] == path.partition("?")[0] and refused["method"] == method
    assert gemini.relay.refused == 1 and gemini.relay.calls == 0


def test_function_declarations_are_the_agents_own_tools(
    gemini: Agent, upstream: ScriptedServer
) -> None:
    tools = [{"functionDeclarations": [{"name": "bash", "parameters": {"type": "object"}}]}]
    reply = gemini.call(
        "POST", GEN, body(tools=tools, toolConfig={"functionCallingConfig": {"mode": "AUTO"}})
    )
    assert reply.status_code == 200 and len(upstream.requests) == 1


def test_a_provider_failure_is_told_from_the_agents_own(
    gemini: Agent, upstream: ScriptedServer
) -> None:
    reply = gemini.call("POST", GEN, {"contents": contents("flaky")})
    assert reply.status_code == 503
    failure = gemini.relay.provider_error()
    assert failure is not None and failure.kind == "unavailable"


# -- chat agents, prompt trials and judges on Gemini ---------------------------------------


def test_the_key_comes_from_gemini_api_key_else_google_api_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "g-key")
    spec = ModelSpec.model_validate("gemini-2.5-flash")
    assert (spec.provider, spec.chat_api, spec.key_env) == ("google", "gemini", "GOOGLE_API_KEY")
    assert spec.endpoint == "https://generativelanguage.googleapis.com"
    monkeypatch.setenv("GEMINI_API_KEY", "k")
    assert spec.key_env == "GEMINI_API_KEY" and spec.api_key() == "k"


def test_a_prompt_call_and_a_judge_on_gemini(
    upstream: ScriptedServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from hangar.models.complete import complete

    monkeypatch.setenv("HANGAR_GEMINI_KEY", SECRET)
    spec = ModelSpec(
        id=MODEL,
        provider="google",
        base_url=upstream.url,
        api_key_env="HANGAR_GEMINI_KEY",
        price=Price(input=0.3, output=2.5),
    )
    trace = TraceWriter(tmp_path / "t.jsonl")
    got = complete(spec, "Be brief.", "hello", trace=trace)
    trace.close(completed=True)
    assert (got.text, got.error) == ("hi there", "")
    assert got.usage.input_tokens == 120 and got.usage.cost_usd > 0
    (seen,) = upstream.requests
    assert seen["path"] == GEN and seen["headers"]["x-goog-api-key"] == SECRET
    assert seen["body"]["systemInstruction"]["parts"][0]["text"] == "Be brief."
    hosted = ModelSpec(id=MODEL, provider="google", base_url=upstream.url,
                       api_key_env="HANGAR_GEMINI_KEY")  # fmt: skip
    assert hosted.chat_api == "gemini"


#: A chat agent's conversation: one tool call (``echo 3``), then the answer.
COUNT_FILES = Conversation(
    match="count the files",
    replies=[
        Reply(tool_calls=[ToolCall(name="bash", arguments={"command": "echo 3"})]),
        Reply(content="There are 3."),
    ],
)


def test_a_chat_agent_on_gemini_calls_its_tools(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """hangar's chat agent over the Gemini API: function calls, function responses."""
    from hangar.agents import ChatAgent, run_chat_agent
    from hangar.sandbox import SandboxSpec
    from hangar.sandbox.local import LocalSandbox

    script = Script(conversations=[COUNT_FILES])
    server = ScriptedServer(script).start()
    monkeypatch.setenv("HANGAR_GEMINI_KEY", SECRET)
    spec = ModelSpec(
        id=MODEL,
        provider="google",
        base_url=server.url,
        api_key_env="HANGAR_GEMINI_KEY",
        price=Price(input=0.3, output=2.5),
    )
    trace = TraceWriter(tmp_path / "trace.jsonl")
    try:
        with LocalSandbox(
            SandboxSpec(image="none", trial="gemini-chat", workdir=str(tmp_path))
        ) as sb:
            run, usage = run_chat_agent(
                ChatAgent(name="chat"), sb, "count the files", trace, 60, spec
            )
    finally:
        server.shutdown()
        trace.close(completed=True)
    assert run.completed, run.reason
    first, second = server.requests
    assert [d["name"] for t in first["body"]["tools"] for d in t["functionDeclarations"]] == [
        "bash", "edit"]  # fmt: skip
    told = second["body"]["contents"][-1]["parts"][0]["functionResponse"]
    assert told["name"] == "bash" and "3" in json.dumps(told["response"])
    assert usage.input_tokens == 20 and usage.cost_usd > 0
