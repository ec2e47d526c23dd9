"""The relay is an allowlist: every refusal never reaches a recording fake provider.

The relay runs for real (its unix socket, its HTTP server, httpx to the upstream); the
provider is the scripted server, which records every request of every method. The
agent's side of the tunnel is a plain HTTP client on the relay's socket: what crosses the
tunnel from a sandbox arrives there byte for byte (tests/models/test_relay.py runs the
same through a real container).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hangar.models import ModelSpec
from hangar.models.policy import RelayPolicy
from hangar.models.relay import ModelRelay
from hangar.testing.scripted import Script, ScriptedServer
from hangar.trace import TraceWriter

SECRET = "sk-real-secret-0123456789"
SCRIPT = {
    "conversations": [
        {"match": "hello", "replies": [{"content": "hi"}, {"content": "again"}]},
        {"match": "flaky", "replies": [{"status": 503}]},
        {"match": "throttled", "replies": [{"status": 429}]},
        {"match": "nokey", "replies": [{"status": 401}]},
    ]
}


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[ScriptedServer]:
    (tmp_path / "script.yaml").write_text(json.dumps(SCRIPT))
    server = ScriptedServer(Script.load(tmp_path / "script.yaml")).start()
    yield server
    server.shutdown()


class Agent:
    """The agent's end: HTTP over the relay's socket, with the trial token."""

    def __init__(self, relay: ModelRelay, trace: Path) -> None:
        self.relay, self.trace = relay, trace
        transport = httpx.HTTPTransport(uds=str(relay.socket_path))
        self.http = httpx.Client(transport=transport, base_url="http://sandbox", timeout=30)

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.relay.token}", "x-api-key": self.relay.token}
        content = None if body is None else json.dumps(body).encode()
        return self.http.request(method, path, content=content, headers=headers, **kw)

    def events(self, kind: str) -> list[dict[str, Any]]:
        lines = self.trace.read_text().splitlines() if self.trace.exists() else []
        return [e for e in map(json.loads, lines) if e["kind"] == kind]


def _relay(tmp_path: Path, upstream: ScriptedServer, provider: str) -> Iterator[Agent]:
    base = f"{upstream.url}/v1" if provider == "openai" else upstream.url
    spec = ModelSpec(id="m1", provider=provider, base_url=base, api_key_env="HANGAR_POLICY_KEY")
    trace = TraceWriter(tmp_path / f"{provider}.jsonl")
    relay = ModelRelay(tmp_path / f"{provider}.sock", spec, trace).start()
    try:
        yield Agent(relay, tmp_path / f"{provider}.jsonl")
    finally:
        relay.stop()
        trace.close(completed=True)


@pytest.fixture
def openai(
    tmp_path: Path, upstream: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Agent]:
    monkeypatch.setenv("HANGAR_POLICY_KEY", SECRET)
    yield from _relay(tmp_path, upstream, "openai")


@pytest.fixture
def anthropic(
    tmp_path: Path, upstream: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Agent]:
    monkeypatch.setenv("HANGAR_POLICY_KEY", SECRET)
    yield from _relay(tmp_path, upstream, "anthropic")


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "m1", "messages": [{"role": "user", "content": "hello"}], **extra}


def responses(**extra: Any) -> dict[str, Any]:
    return {"model": "m1", "input": [{"role": "user", "content": "hello"}], **extra}


def messages(**extra: Any) -> dict[str, Any]:
    body = {"model": "m1", "max_tokens": 10, "messages": [{"role": "user", "content": "hello"}]}
    return {**body, **extra}


# -- what the issue names, each refused before the provider ---------------------------------

OPENAI_REFUSED = {
    "list the account's files": ("GET", "/v1/files", None),
    "download a file": ("GET", "/v1/files/file-abc/content", None),
    "upload a file": ("POST", "/v1/files", {"purpose": "assistants"}),
    "read a stored response": ("GET", "/v1/responses/resp_other", None),
    "delete a stored response": ("DELETE", "/v1/responses/resp_other", None),
    "embeddings": ("POST", "/v1/embeddings", {"model": "m1", "input": "x"}),
    "another model": ("POST", "/v1/chat/completions", chat(model="gpt-5")),
    "web search (responses)": ("POST", "/v1/responses", responses(tools=[{"type": "web_search"}])),
    "web search preview": (
        "POST",
        "/v1/responses",
        responses(tools=[{"type": "web_search_preview_2025_03_11"}]),
    ),
    "file search": (
        "POST",
        "/v1/responses",
        responses(tools=[{"type": "file_search", "vector_store_ids": ["vs_1"]}]),
    ),
    "code interpreter": (
        "POST",
        "/v1/responses",
        responses(tools=[{"type": "code_interpreter", "container": {"type": "auto"}}]),
    ),
    "computer use": ("POST", "/v1/responses", responses(tools=[{"type": "computer_use_preview"}])),
    "image generation": ("POST", "/v1/responses", responses(tools=[{"type": "image_generation"}])),
    "remote mcp": (
        "POST",
        "/v1/responses",
        responses(tools=[{"type": "mcp", "server_url": "https://mcp.invalid"}]),
    ),
    "a connector": ("POST", "/v1/responses", responses(tools=[{"type": "connector"}])),
    "a future hosted tool": ("POST", "/v1/responses", responses(tools=[{"type": "browser"}])),
    "a hosted tool in a namespace": (
        "POST",
        "/v1/responses",
        responses(tools=[{"type": "namespace", "name": "n", "tools": [{"type": "web_search"}]}]),
    ),
    "hosted tool choice": (
        "POST",
        "/v1/responses",
        responses(tool_choice={"type": "web_search_preview"}),
    ),
    "chat web_search_options": ("POST", "/v1/chat/completions", chat(web_search_options={})),
    "chat hosted tool": ("POST", "/v1/chat/completions", chat(tools=[{"type": "web_search"}])),
    "someone else's response": (
        "POST",
        "/v1/responses",
        responses(previous_response_id="resp_not_mine"),
    ),
    "a stored conversation": ("POST", "/v1/responses", responses(conversation="conv_1")),
    "a stored prompt": ("POST", "/v1/responses", responses(prompt={"id": "pmpt_1"})),
    "a background run": ("POST", "/v1/responses", responses(background=True)),
    "an account file in the input": (
        "POST",
        "/v1/responses",
        {
            "model": "m1",
            "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f1"}]}],
        },
    ),
    "a URL for the provider to fetch": (
        "POST",
        "/v1/chat/completions",
        {
            "model": "m1",
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "https://x.invalid/a"}}],
                }
            ],
        },
    ),
    "an unknown query parameter": ("POST", "/v1/chat/completions?organization=o", chat()),
    # fields the relay does not know: provider-run searches, other models, account state
    "OpenRouter's web plugin": ("POST", "/v1/chat/completions", chat(plugins=[{"id": "web"}])),
    "xAI's live search": (
        "POST",
        "/v1/chat/completions",
        chat(search_parameters={"mode": "on"}),
    ),
    "fallback models": ("POST", "/v1/chat/completions", chat(models=["gpt-5", "m1"])),
    "a field in the responses API": ("POST", "/v1/responses", responses(web_search=True)),
}


@pytest.mark.parametrize("case", sorted(OPENAI_REFUSED))
def test_openai_refusals_never_reach_the_provider(
    openai: Agent, upstream: ScriptedServer, case: str
) -> None:
    method, path, body = OPENAI_REFUSED[case]
    reply = openai.call(method, path, body)
    assert reply.status_code == 403, reply.text
    assert reply.json()["error"]["type"] == "hangar_relay"
    assert upstream.requests == []
    (refused,) = openai.events("model_refused")
    assert refused["path"] == path.partition("?")[0] and refused["method"] == method
    assert openai.relay.refused == 1 and openai.relay.calls == 0


ANTHROPIC_REFUSED = {
    "list files": ("GET", "/v1/files", None),
    "message batches": ("POST", "/v1/messages/batches", {"requests": []}),
    "web search": (
        "POST",
        "/v1/messages",
        messages(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
    ),
    "web fetch": (
        "POST",
        "/v1/messages",
        messages(tools=[{"type": "web_fetch_20250910", "name": "web_fetch"}]),
    ),
    "code execution": (
        "POST",
        "/v1/messages",
        messages(tools=[{"type": "code_execution_20250825", "name": "code_execution"}]),
    ),
    "mcp servers": (
        "POST",
        "/v1/messages",
        messages(mcp_servers=[{"type": "url", "url": "https://mcp.invalid", "name": "x"}]),
    ),
    "a document by URL": (
        "POST",
        "/v1/messages",
        messages(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "document", "source": {"type": "url", "url": "https://x.invalid"}}
                    ],
                }
            ]
        ),
    ),
    "an uploaded file": (
        "POST",
        "/v1/messages",
        messages(
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}],
                }
            ]
        ),
    ),
    "another model": ("POST", "/v1/messages", messages(model="claude-opus-4")),
    "fallback models": ("POST", "/v1/messages", messages(fallbacks=[{"model": "claude-x"}])),
    "an unknown field": ("POST", "/v1/messages", messages(search={"enabled": True})),
}


@pytest.mark.parametrize("case", sorted(ANTHROPIC_REFUSED))
def test_anthropic_refusals_never_reach_the_provider(
    anthropic: Agent, upstream: ScriptedServer, case: str
) -> None:
    method, path, body = ANTHROPIC_REFUSED[case]
    reply = anthropic.call(method, path, body)
    assert reply.status_code == 403, reply.text
    assert upstream.requests == []
    assert len(anthropic.events("model_refused")) == 1


# -- what stays allowed -------------------------------------------------------------------


def test_honest_openai_calls_stream_and_not(openai: Agent, upstream: ScriptedServer) -> None:
    tool = {"type": "function", "name": "bash", "parameters": {"type": "object"}}
    group = {"type": "namespace", "name": "agents", "tools": [tool]}  # Codex groups its tools
    plain = openai.call("POST", "/v1/chat/completions", chat())
    assert plain.status_code == 200 and plain.json()["choices"][0]["message"]["content"] == "hi"
    streamed = openai.call("POST", "/v1/chat/completions", chat(stream=True))
    assert streamed.status_code == 200 and '"hi"' in streamed.text and "[DONE]" in streamed.text
    first = openai.call("POST", "/v1/responses", responses(tools=[tool, group], store=True))
    assert first.status_code == 200
    shell = openai.call(
        "POST",
        "/v1/responses?api-version=1",
        responses(stream=True, tools=[{"type": "local_shell"}]),
    )
    assert shell.status_code == 200 and "response.completed" in shell.text
    # A response this trial created may be continued; streamed ones count too.
    created = [first.json()["id"]]
    created += [
        json.loads(line[5:])["response"]["id"]
        for line in shell.text.splitlines()
        if line.startswith("data:") and '"response.created"' in line
    ]
    for rid in created:
        follow = openai.call("POST", "/v1/responses", responses(previous_response_id=rid))
        assert follow.status_code == 200, follow.text
    sent = [r["body"] for r in upstream.requests]
    assert len(sent) == 6
    assert [b.get("store") for b in sent if "input" in b] == [False] * 4  # forced off
    assert "store" not in sent[0]  # Chat Completions: never added where it was not asked
    assert sent[1]["stream_options"] == {"include_usage": True}
    assert upstream.requests[3]["query"] == "api-version=1"
    assert all(r["headers"]["Authorization"] == f"Bearer {SECRET}" for r in upstream.requests)
    assert openai.relay.usage.input_tokens > 0 and openai.relay.provider_error() is None


def test_models_list_is_answered_by_the_relay(
    openai: Agent, anthropic: Agent, upstream: ScriptedServer
) -> None:
    listed = openai.call("GET", "/v1/models").json()
    assert [m["id"] for m in listed["data"]] == ["m1"]
    assert openai.call("GET", "/v1/models/m1").json()["id"] == "m1"
    assert openai.call("GET", "/v1/models/gpt-5").status_code == 403
    assert [m["id"] for m in anthropic.call("GET", "/v1/models").json()["data"]] == ["m1"]
    assert upstream.requests == []


def test_honest_anthropic_calls(anthropic: Agent, upstream: ScriptedServer) -> None:
    tools = [
        {"name": "run", "input_schema": {"type": "object"}},
        {"type": "bash_20250124", "name": "bash"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
    ]
    reply = anthropic.call("POST", "/v1/messages?beta=true", messages(tools=tools))
    assert reply.status_code == 200, reply.text
    streamed = anthropic.call("POST", "/v1/messages", messages(stream=True))
    assert streamed.status_code == 200 and "message_stop" in streamed.text
    assert [r["path"] for r in upstream.requests] == ["/v1/messages", "/v1/messages"]
    assert upstream.requests[0]["headers"]["x-api-key"] == SECRET


# -- provider failures: the agent's fault or not -------------------------------------------


def test_provider_failures_are_told_apart(openai: Agent) -> None:
    assert openai.call("POST", "/v1/chat/completions", chat()).status_code == 200
    assert openai.relay.provider_error() is None
    flaky = chat(messages=[{"role": "user", "content": "flaky"}])
    assert openai.call("POST", "/v1/chat/completions", flaky).status_code == 503
    error = openai.relay.provider_error()
    assert error is not None and error.kind == "unavailable" and error.status == 503
    assert openai.call("POST", "/v1/chat/completions", chat()).status_code == 200
    assert openai.relay.provider_error() is None  # recovered by a later call
    throttled = chat(messages=[{"role": "user", "content": "throttled"}])
    assert openai.call("POST", "/v1/chat/completions", throttled).status_code == 429
    assert openai.relay.provider_error().status == 429  # type: ignore[union-attr]
    nokey = chat(messages=[{"role": "user", "content": "nokey"}])
    assert openai.call("POST", "/v1/chat/completions", nokey).status_code == 401
    auth = openai.relay.provider_error()
    assert auth is not None and auth.kind == "auth" and auth.key_env == "HANGAR_POLICY_KEY"
    # The agent's own mistakes (a refused request, a wrong token) are not the provider's.
    assert openai.call("GET", "/v1/files").status_code == 403


def test_wrong_token_is_refused(openai: Agent, upstream: ScriptedServer) -> None:
    reply = openai.http.post(
        "/v1/chat/completions", json=chat(), headers={"Authorization": "Bearer sk-guess"}
    )
    assert reply.status_code == 401 and upstream.requests == []
    assert openai.events("model_refused")[0]["reason"] == "missing or wrong trial token"


def test_policy_directly() -> None:
    policy = RelayPolicy(ModelSpec(id="m1"))
    assert policy.decide("POST", "/responses", {}, responses()).body == {
        **responses(),
        "store": False,
    }
    assert not policy.decide("POST", "/responses", {}, "not an object").allowed  # type: ignore[arg-type]
    assert policy.decide("POST", "/chat/completions", {}, chat(store=True)).body == {
        **chat(),
        "store": False,
    }
    data_url = {"url": "data:image/png;base64,AAAA"}
    inline = chat(
        messages=[{"role": "user", "content": [{"type": "image_url", "image_url": data_url}]}]
    )
    assert policy.decide("POST", "/chat/completions", {}, inline).allowed


def test_unknown_fields_are_named_and_a_models_own_settings_pass() -> None:
    policy = RelayPolicy(ModelSpec(id="m1"))
    refused = policy.decide("POST", "/chat/completions", {}, chat(plugins=[], mirostat=2))
    assert not refused.allowed and "['mirostat', 'plugins']" in refused.reason
    own = RelayPolicy(ModelSpec(id="m1", request_fields=("mirostat",)))
    assert own.decide("POST", "/chat/completions", {}, chat(mirostat=2)).allowed
    assert not own.decide("POST", "/chat/completions", {}, chat(plugins=[])).allowed
    # what the providers document (and agent CLIs send) passes
    codex = responses(
        instructions="i", tools=[], tool_choice="auto", parallel_tool_calls=False,
        reasoning={"effort": "low"}, store=False, stream=True, include=[],
        prompt_cache_key="k", text={"verbosity": "low"},
    )  # fmt: skip
    assert policy.decide("POST", "/responses", {}, codex).allowed
    claude = messages(
        system=[], tools=[], metadata={"user_id": "u"}, thinking={"type": "enabled"},
        stream=True, temperature=1, context_management={}, output_config={},
    )  # fmt: skip
    assert (
        RelayPolicy(ModelSpec(id="m1", provider="anthropic"))
        .decide("POST", "/v1/messages", {}, claude)
        .allowed
    )


def _raw(relay: ModelRelay, head: str) -> bytes:
    """Send only a request's head on the relay's socket; what comes back (the relay must
    answer without waiting for a body it was told of)."""
    import socket

    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(20)
        sock.connect(str(relay.socket_path))
        sock.sendall(head.encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_the_token_and_the_size_are_checked_before_any_body_is_read(
    openai: Agent, upstream: ScriptedServer
) -> None:
    """300 MiB announced with no token: a 401 from the head alone. A body over the cap,
    with the token, or a length that is no number: a 413 or a 400, at once. Nothing of
    it reaches the provider."""
    token = openai.relay.token
    head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
    no_token = _raw(openai.relay, head + f"Content-Length: {300 << 20}\r\n\r\n")
    assert no_token.startswith(b"HTTP/1.1 401"), no_token[:200]
    auth = f"Authorization: Bearer {token}\r\n"
    huge = _raw(openai.relay, head + auth + "Content-Length: 99999999999999\r\n\r\n")
    assert huge.startswith(b"HTTP/1.1 413") and b"max_request_bytes" in huge, huge[:300]
    assert _raw(openai.relay, head + auth + "Content-Length: -1\r\n\r\n").startswith(
        b"HTTP/1.1 400"
    )
    chunked = _raw(openai.relay, head + auth + "Transfer-Encoding: chunked\r\n\r\n")
    assert chunked.startswith(b"HTTP/1.1 411")
    assert upstream.requests == [] and openai.relay.refused == 4
    # a body within the cap is read and served as before
    assert openai.call("POST", "/v1/chat/completions", chat()).status_code == 200


def test_the_cap_is_the_models_setting(
    tmp_path: Path, upstream: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANGAR_POLICY_KEY", SECRET)
    spec = ModelSpec(
        id="m1", base_url=f"{upstream.url}/v1", api_key_env="HANGAR_POLICY_KEY",
        max_request_bytes=1000,
    )  # fmt: skip
    relay = ModelRelay(tmp_path / "cap.sock", spec).start()
    try:
        agent = Agent(relay, tmp_path / "none.jsonl")
        big = chat(messages=[{"role": "user", "content": "hello " + "x" * 2000}])
        assert agent.call("POST", "/v1/chat/completions", big).status_code == 413
        assert agent.call("POST", "/v1/chat/completions", chat()).status_code == 200
    finally:
        relay.stop()
