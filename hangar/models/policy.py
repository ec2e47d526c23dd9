"""What a trial's model traffic may do: an allowlist, not a pipe.

docs/architecture.md, "Models and the relay", places it among the rest.

The real API key is the host's. With only its trial token, an agent must buy nothing
with it but its own model calls: not the provider account's files, not the world (a
provider-hosted web search or URL fetch is network access by proxy), not state kept on
the account. `RelayPolicy.decide` judges one request by its API path (relative to the
provider's endpoint) and body:

- only the inference endpoints of the trial's model's provider: OpenAI-compatible
  ``POST /chat/completions`` and ``POST /responses``; Anthropic ``POST /v1/messages``
  and ``POST /v1/messages/count_tokens``; a models list (and the one model) is answered
  here, naming only the trial's model; any other method or path is refused;
- only the trial's model;
- tools only of the kinds the agent runs itself (OpenAI ``function``, ``custom``,
  ``local_shell``, ``shell``, ``apply_patch``, and ``namespace`` groups of those;
  Anthropic tools without a type or
  ``custom``, and its client-executed ``bash_*``, ``text_editor_*``, ``computer_*``,
  ``memory_*``): every provider-hosted tool is refused, named or not yet invented (web
  search or fetch, file search, code interpreter or execution, computer use on OpenAI,
  image generation, remote MCP and connectors), as are ``web_search_options``,
  ``mcp_servers`` and a code-execution ``container``;
- the Gemini API (``provider: google``): only ``POST /v1beta/models/<the trial's
  model>:generateContent``, ``:streamGenerateContent`` (``alt=sse``) and ``:countTokens``
  (the models list answered here); tools only of ``functionDeclarations`` (every other
  tool, ``google_search``, ``url_context``, ``code_execution``, file search, maps, computer
  use, and any the API adds later, is run by Google and refused), no ``cachedContent``,
  no file or file URI part (``fileData``: the Files API or a URL Google fetches), and no
  request field the relay does not know;
- no reference to what the account holds (``file_id``, a stored ``prompt``, a
  ``conversation``, ``background`` runs) and no URL for the provider to fetch (an image
  or file by ``http(s)://``; ``data:`` URLs carry their bytes and are fine);
- ``store`` forced off (Responses and Chat Completions), and ``previous_response_id``
  only for a response this trial created (`note_response` records them);
- only request fields the relay knows for that API (`_FIELDS`, plus the model's own
  `ModelSpec.request_fields`): a field it does not know may be a tool the provider runs
  (OpenRouter's ``plugins``, xAI's ``search_parameters``), another model (``models``,
  ``fallbacks``) or the account's state, and is refused by name.

A refused request never reaches the provider. The same policy guards the chat agents'
host-side calls (`PolicyTransport`), so both kinds of agent live by one set of rules.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel

from hangar.models import ModelSpec
from hangar.models.dialects import Upstream, throttle_wait, upstream

#: Request paths per provider family (relative to its endpoint) that reach the model.
_INFERENCE = {
    "openai": ("/chat/completions", "/responses"),
    "anthropic": ("/v1/messages", "/v1/messages/count_tokens"),
}
_MODELS = {"openai": "/models", "anthropic": "/v1/models"}
#: Tool types an OpenAI-compatible agent executes itself.
_OPENAI_CLIENT_TOOLS = {"function", "custom", "local_shell", "shell", "apply_patch"}
#: Anthropic tool types the client executes (versioned: ``bash_20250124``...).
_ANTHROPIC_CLIENT_TOOLS = re.compile(r"(custom|(bash|text_editor|computer|memory)_\d+)$")
#: Query parameters passed on (Claude Code's ``beta=true``, Azure's ``api-version``).
_QUERY = {"beta", "api-version"}
#: Request fields passed on, per API path: those the providers document for inference
#: (and a few settings of compatible servers'), nothing else. A field the relay does not
#: know may be a provider-run tool (OpenRouter's ``plugins``, xAI's ``search_parameters``),
#: another model (``models``, ``fallbacks``) or account state, so it is refused by name;
#: `ModelSpec.request_fields` adds a model's own settings.
_OPENAI_COMMON = {
    "model", "stream", "stream_options", "temperature", "top_p", "tools", "tool_choice",
    "parallel_tool_calls", "metadata", "store", "user", "safety_identifier", "service_tier",
    "prompt_cache_key", "prompt_cache_retention", "prompt_cache_options", "top_logprobs",
    "moderation",
}  # fmt: skip
_FIELDS: dict[str, frozenset[str]] = {
    "/chat/completions": frozenset(_OPENAI_COMMON | {
        "messages", "audio", "frequency_penalty", "presence_penalty", "function_call",
        "functions", "logit_bias", "logprobs", "max_completion_tokens", "max_tokens",
        "modalities", "n", "prediction", "reasoning_effort", "response_format", "seed",
        "stop", "verbosity", "web_search_options",
        # settings of OpenAI-compatible servers (vLLM, SGLang, OpenRouter, DashScope...)
        "top_k", "min_p", "repetition_penalty", "reasoning", "include_reasoning",
        "thinking", "enable_thinking", "thinking_budget", "chat_template_kwargs", "usage",
    }),
    "/responses": frozenset(_OPENAI_COMMON | {
        "input", "instructions", "include", "max_output_tokens", "max_tool_calls",
        "reasoning", "text", "truncation", "previous_response_id", "context_management",
        "background", "conversation", "prompt", "client_metadata",
    }),
    "/v1/messages": frozenset({
        "model", "messages", "max_tokens", "system", "tools", "tool_choice", "thinking",
        "metadata", "stop_sequences", "stream", "temperature", "top_k", "top_p",
        "service_tier", "context_management", "output_config", "output_format",
        "cache_control", "inference_geo", "speed", "compaction", "container", "mcp_servers",
    }),
    "/v1/messages/count_tokens": frozenset({
        "model", "messages", "system", "tools", "tool_choice", "thinking",
        "context_management", "output_config", "output_format", "cache_control", "speed",
        "compaction", "mcp_servers",
    }),
}  # fmt: skip
#: Body fields that name state kept on the provider's account.
_ACCOUNT_STATE = ("conversation", "prompt", "background", "container")
_EPOCH = "1970-01-01T00:00:00Z"


class Decision(BaseModel):
    """What to do with one request."""

    allowed: bool
    """Forward it (with `body`)."""
    reason: str = ""
    """Why it was refused."""
    body: dict[str, Any] | None = None
    """The request body to send (``store`` forced off)."""
    local: dict[str, Any] | None = None
    """An answer given here, without the provider (the models list)."""


def _refuse(reason: str) -> Decision:
    return Decision(allowed=False, reason=reason)


def _walk(value: Any) -> Iterator[dict[str, Any]]:
    """Every mapping inside `value` (messages, content blocks, their sources)."""
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


def _is_remote(url: Any) -> bool:
    return isinstance(url, str) and url.strip().lower().startswith(("http://", "https://"))


#: A Gemini API path: its version, model and method (the models list has neither).
_GEMINI = re.compile(
    r"^/(?P<version>v1|v1beta|v1alpha)/models(?:/(?P<model>[^/:]+)(?::(?P<verb>[A-Za-z]+))?)?$"
)
_GEMINI_VERBS = ("generateContent", "streamGenerateContent", "countTokens")
#: Fields of a Gemini request (both spellings the API takes); any other is refused.
_GEMINI_FIELDS = {
    "contents", "systemInstruction", "system_instruction", "tools", "toolConfig",
    "tool_config", "generationConfig", "generation_config", "safetySettings",
    "safety_settings", "generateContentRequest", "generate_content_request", "model",
}  # fmt: skip
_GEMINI_TOOL = {"functionDeclarations", "function_declarations"}
_GEMINI_TOOL_CONFIG = {"functionCallingConfig", "function_calling_config"}


class RelayPolicy:
    """The allowlist of one trial's model traffic (see the module docstring)."""

    def __init__(self, model: ModelSpec) -> None:
        self.model = model
        self.family = model.family
        self.responses: set[str] = set()
        """Ids of the responses this trial created (``previous_response_id`` may name them)."""

    # -- requests -------------------------------------------------------------------------

    def decide(
        self, method: str, path: str, query: dict[str, str], body: dict[str, Any] | None
    ) -> Decision:
        """Judge one request to `path` (relative to the provider's endpoint)."""
        if self.family == "google":
            return self._gemini(method, path, query, body)
        models = _MODELS[self.family]
        if method == "GET" and path in (models, f"{models}/{self.model.id}"):
            return Decision(allowed=True, local=self._models(path == models))
        if method != "POST" or path not in _INFERENCE[self.family]:
            return _refuse(
                f"{method} {path} is not an inference endpoint of {self.family} model "
                f"{self.model.id!r} (allowed: POST {', POST '.join(_INFERENCE[self.family])})"
            )
        if extra := sorted(set(query) - _QUERY):
            return _refuse(f"query parameters {extra} are not passed on")
        if not isinstance(body, dict):
            return _refuse("the request body must be a JSON object")
        requested = str(body.get("model", ""))
        if requested != self.model.id:
            return _refuse(
                f"model {requested!r} is not allowed in this trial (only {self.model.id!r})"
            )
        problem = self._body_problem(path, body)
        if problem:
            return _refuse(problem)
        # Responses are stored unless told not to; Chat Completions only when asked (and
        # some compatible servers refuse a field they do not know, so it is only turned off).
        if (path == "/responses" and body.get("store") is not False) or (
            path == "/chat/completions" and body.get("store")
        ):
            body = {**body, "store": False}
        return Decision(allowed=True, body=body)

    # -- the Gemini API ---------------------------------------------------------------------

    def _gemini(
        self, method: str, path: str, query: dict[str, str], body: dict[str, Any] | None
    ) -> Decision:
        match, mid = _GEMINI.match(path), self.model.id
        allowed = f"POST /v1beta/models/{mid}:{{{','.join(_GEMINI_VERBS)}}}"
        if match and method == "GET" and match["verb"] is None:
            if match["model"] in (None, mid):
                one = {"name": f"models/{mid}", "displayName": mid,
                       "supportedGenerationMethods": list(_GEMINI_VERBS)}  # fmt: skip
                return Decision(allowed=True, local=one if match["model"] else {"models": [one]})
            return _refuse(f"model {match['model']!r} is not allowed in this trial (only {mid!r})")
        if not match or method != "POST" or match["verb"] not in _GEMINI_VERBS:
            return _refuse(f"{method} {path} is not an inference endpoint of Gemini model "
                           f"{mid!r} (allowed: {allowed})")  # fmt: skip
        if match["model"] != mid:
            return _refuse(f"model {match['model']!r} is not allowed in this trial (only {mid!r})")
        if extra := sorted(set(query) - {"alt", "key"}):
            return _refuse(f"query parameters {extra} are not passed on")
        if query.get("alt", "sse") != "sse":
            return _refuse(f"alt={query['alt']!r}: only alt=sse streams are passed on")
        if not isinstance(body, dict):
            return _refuse("the request body must be a JSON object")
        problem = self._gemini_problem(body)
        return _refuse(problem) if problem else Decision(allowed=True, body=body)

    def _gemini_problem(self, body: dict[str, Any]) -> str:
        """What in a Gemini request the relay refuses ('' when nothing)."""
        if body.get("cachedContent") or body.get("cached_content"):
            return "cachedContent names content kept on the provider's account"
        if unknown := sorted(set(body) - _GEMINI_FIELDS):
            return f"request fields {unknown} are not passed on (the relay does not know them)"
        if (named := body.get("model")) is not None and str(named).removeprefix(
            "models/"
        ) != self.model.id:
            return f"model {named!r} is not allowed in this trial (only {self.model.id!r})"
        inner = body.get("generateContentRequest") or body.get("generate_content_request")
        if inner is not None:
            if not isinstance(inner, dict):
                return "generateContentRequest must be a JSON object"
            if problem := self._gemini_problem(inner):
                return problem
        tools = body.get("tools") or []
        if not isinstance(tools, list):
            return "a tools value that is not a list"
        for tool in tools:
            kinds = sorted(set(tool) - _GEMINI_TOOL) if isinstance(tool, dict) else ["?"]
            if kinds:
                return (
                    f"tool {kinds[0]!r} is run by the provider, not the agent (only "
                    "functionDeclarations, tools the agent runs itself, are allowed)"
                )
        config = body.get("toolConfig") or body.get("tool_config") or {}
        if not isinstance(config, dict) or set(config) - _GEMINI_TOOL_CONFIG:
            return "toolConfig may only hold functionCallingConfig"
        sent = [body.get(k) for k in ("contents", "systemInstruction", "system_instruction")]
        for block in _walk(sent):
            for key in ("fileData", "file_data", "fileUri", "file_uri"):
                if key in block:
                    return f"a {key} part names a file of the account or a URL Google fetches"
        return ""

    def _body_problem(self, path: str, body: dict[str, Any]) -> str:
        for key in _ACCOUNT_STATE:
            if body.get(key):
                return f"{key!r} uses state kept on the provider's account"
        if body.get("web_search_options") is not None:
            return "web_search_options: provider-hosted web search reaches the world"
        if body.get("mcp_servers"):
            return "mcp_servers: remote MCP servers are reached by the provider"
        previous = body.get("previous_response_id")
        if previous is not None and previous not in self.responses:
            return f"previous_response_id {previous!r} is not a response this trial created"
        if problem := self._tools_problem(body):
            return problem
        if unknown := sorted(set(body) - _FIELDS[path] - set(self.model.request_fields)):
            return (
                f"request fields {unknown} are not passed on (the relay does not know them; "
                "a model's own settings may be named in its request_fields)"
            )
        sent = [body.get(key) for key in ("input", "messages", "system")]
        for block in _walk(sent):
            if "file_id" in block:
                return "a file_id names a file kept on the provider's account"
            for key in ("image_url", "file_url", "url"):
                found = block.get(key)
                url = found.get("url") if isinstance(found, dict) else found
                if _is_remote(url):
                    return f"{key} {str(url)[:80]!r}: the provider would fetch it (network)"
        return ""

    def _hosted_tool(self, tools: Any) -> str | None:
        """The type of the first tool in `tools` the provider would run (None: none)."""
        if not isinstance(tools, list):
            return "a tools value that is not a list"
        for tool in tools:
            kind = tool.get("type") if isinstance(tool, dict) else None
            if self.family == "anthropic":
                if kind is not None and not _ANTHROPIC_CLIENT_TOOLS.match(str(kind)):
                    return str(kind)
            elif kind == "namespace":  # a named group of tools: judged by its members
                if (inner := self._hosted_tool(tool.get("tools"))) is not None:
                    return inner
            elif kind not in _OPENAI_CLIENT_TOOLS:
                return str(kind)
        return None

    def _tools_problem(self, body: dict[str, Any]) -> str:
        kind = self._hosted_tool(body.get("tools") or [])
        if kind is not None:
            return (
                f"tool type {kind!r} is run by the provider, not the agent "
                "(only tools the agent runs itself are allowed)"
            )
        choice = body.get("tool_choice")
        if isinstance(choice, dict):
            kind = choice.get("type")
            named = {"function", "custom", "allowed_tools", "tool", "auto", "any", "none"}
            if kind not in named | _OPENAI_CLIENT_TOOLS:
                return f"tool_choice {kind!r} names a provider-hosted tool"
        return ""

    def _models(self, listing: bool) -> dict[str, Any]:
        """The models list (or the one model), naming only the trial's model."""
        mid = self.model.id
        one: dict[str, Any]
        if self.family == "anthropic":
            one = {"type": "model", "id": mid, "display_name": mid, "created_at": _EPOCH}
            if not listing:
                return one
            return {"data": [one], "has_more": False, "first_id": mid, "last_id": mid}
        one = {"id": mid, "object": "model", "created": 0, "owned_by": "hangar"}
        return {"object": "list", "data": [one]} if listing else one

    # -- responses ------------------------------------------------------------------------

    def note_response(self, path: str, content_type: str, data: bytes) -> None:
        """Remember the ids of responses the provider created for this trial."""
        if path != "/responses":
            return
        if "event-stream" in content_type:
            for line in data.splitlines():
                if line.startswith(b"data:"):
                    self._note(line[5:])
        else:
            self._note(data)

    def _note(self, raw: bytes) -> None:
        try:
            event = json.loads(raw)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        response = event.get("response") if "response" in event else event
        if isinstance(response, dict) and str(response.get("id", "")).startswith("resp"):
            self.responses.add(str(response["id"]))


class PolicyTransport:
    """A transport for the SDKs' HTTP client that holds a chat agent's own calls to
    `RelayPolicy`: a refused request gets a 403 answer here and never leaves the host.

    `http` is the HTTP module the SDK is built on (``httpx``, or ``httpx2`` in the
    newer SDKs: the same API), so the transport speaks its types.
    """

    def __init__(
        self, policy: RelayPolicy, http: Any, on_refused: Callable[[str, str], None]
    ) -> None:
        self.policy, self.http, self.on_refused = policy, http, on_refused
        self.inner = shared_transport(http.__name__, os.getpid())

    def _cloud(self, request: Any, path: str, body: dict[str, Any] | None) -> Any:
        """`request` sent as the model's cloud wants it (`hangar.models.dialects`: its URL,
        credentials, body), again after the provider's back-off while it throttles; the
        answer in the API the SDK speaks."""
        model = self.policy.model
        raw = request.url.query
        query = raw.decode() if isinstance(raw, bytes) else str(raw)
        waited = 0.0
        for retries in itertools.count():
            call = upstream(model, model.api_key(), path, query, body)
            response = self.inner.handle_request(self._rewritten(request, call))
            wait = throttle_wait(model, response.status_code, response.headers, retries)
            if wait is None or waited + wait >= model.timeout_s:
                break
            response.close()
            waited += wait
            time.sleep(wait)
        if call.reframe is None or response.status_code != 200:
            return response
        framed = call.reframe()
        content = framed.feed(response.read()) + framed.close()
        response.close()
        skip = {"content-type", "content-length", "content-encoding", "transfer-encoding"}
        headers = {k: v for k, v in response.headers.items() if k.lower() not in skip}
        headers["content-type"] = framed.content_type
        return self.http.Response(200, headers=headers, content=content, request=request)

    def _rewritten(self, request: Any, call: Upstream) -> Any:
        dropped = {"content-length", "authorization", "api-key", "x-api-key", "x-goog-api-key"}
        dropped.add("host")
        dropped |= {k.lower() for k in call.headers}  # the dialect's (signed) headers win
        headers = {k: v for k, v in request.headers.items() if k.lower() not in dropped}
        headers.update(call.headers)
        return self.http.Request(
            request.method, call.url, headers=headers, content=call.content,
            extensions=request.extensions,
        )  # fmt: skip

    def handle_request(self, request: Any) -> Any:
        """Judge the request; forward it (rewritten) or answer it here."""
        http, endpoint = self.http, self.policy.model.endpoint
        url = str(request.url).partition("?")[0]  # no copy_with: a URL parsed again
        path = url[len(endpoint) :] if url.startswith(endpoint) else request.url.path
        body = None
        if request.content:
            try:
                body = json.loads(request.content)
            except ValueError:
                body = None
        decision = self.policy.decide(request.method, path, dict(request.url.params), body)
        if decision.local is not None:
            return http.Response(200, json=decision.local, request=request)
        if not decision.allowed:
            self.on_refused(path, decision.reason)
            error = {"error": {"type": "hangar_relay", "message": f"hangar: {decision.reason}"}}
            return http.Response(403, json=error, request=request)
        if self.policy.model.provider in ("azure", "bedrock", "vertex"):  # a cloud's paths, auth
            response = self._cloud(request, path, decision.body)
        else:
            if decision.body is not None and decision.body != body:
                headers = request.headers.items()
                request = http.Request(
                    request.method,
                    request.url,
                    headers={k: v for k, v in headers if k.lower() != "content-length"},
                    content=json.dumps(decision.body).encode(),
                    extensions=request.extensions,
                )
            response = self.inner.handle_request(request)
        if path == "/responses" and response.status_code == 200:
            response.read()
            kind = response.headers.get("content-type", "")
            self.policy.note_response(path, kind, response.content)
        return response

    def close(self) -> None:
        """Nothing to close: the inner transport is the process's, kept for its next call."""


def shared_transport(http: str, pid: int) -> Any:
    """The transport of HTTP module `http` (its connection pool) every model call of
    process `pid` shares, or of this thread where it keeps its own (`keep_own_transports`):
    a connection kept alive serves the next trial's call, where a transport of each
    call's own paid a TCP (and with a provider, TLS) handshake per call. Keyed by process,
    so that a forked child never writes on its parent's connections; unbounded in
    connections, as each call was."""
    held: dict[tuple[str, int], Any] | None = getattr(_OWN, "transports", None)
    if held is None:
        return _process_transport(http, pid)
    transport = held.get((http, pid))
    if transport is None:
        transport = held[http, pid] = _new_transport(http)
    return transport


def keep_own_transports() -> None:
    """From now on, this thread's model calls have a connection pool of their own: for a
    long-lived thread among many calling at once (`scheduler.pool.DriverPool`'s), which
    would otherwise queue on the process pool's lock (32 threads: a 2,000-prompt sweep's
    driver made a tenth fewer context switches, and spent 5% less CPU). It goes with the
    thread, connections closed."""
    _OWN.transports = {}


_OWN = threading.local()


@functools.cache
def _process_transport(http: str, pid: int) -> Any:
    return _new_transport(http)


def _new_transport(http: str) -> Any:
    module = importlib.import_module(http)
    limits = module.Limits(max_connections=None, max_keepalive_connections=64)
    return module.HTTPTransport(verify=ssl_context(http), limits=limits)


@functools.cache
def ssl_context(http: str) -> Any:
    """The TLS context every transport of HTTP module `http` shares (the one it would make
    itself, certificates and ``SSL_CERT_*`` included): made once per process, since loading
    the CA bundle is most of a prompt trial's CPU when each call makes its own."""
    return importlib.import_module(http).create_ssl_context()


def sdk_http(sdk: Any) -> Any:
    """The HTTP module the `sdk` (``openai`` or ``anthropic``) is built on (``httpx``, or
    ``httpx2`` in the newer SDKs)."""
    return importlib.import_module(sdk.DefaultHttpxClient.__mro__[1].__module__.split(".")[0])


def policy_client(sdk: Any, transport: PolicyTransport, timeout_s: float) -> Any:
    """The `sdk`'s (``openai`` or ``anthropic``) own HTTP client, over `transport`."""
    return sdk.DefaultHttpxClient(transport=transport, timeout=transport.http.Timeout(timeout_s))
