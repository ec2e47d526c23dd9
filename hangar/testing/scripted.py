"""A scripted model server for tests and the demo: no model API is needed.

It speaks OpenAI Chat Completions (``/v1/chat/completions``), OpenAI Responses
(``/v1/responses``), Anthropic Messages (``/v1/messages``) and the Gemini API
(``/v1beta/models/{model}:generateContent``, ``:streamGenerateContent`` as SSE,
``:countTokens``), and the clouds' dialects: Azure OpenAI's paths for OpenAI's API
(``/openai/deployments/{deployment}/chat/completions?api-version=...``, ``/openai/v1/...``:
the deployment is the model; an Entra ID token from a managed identity's endpoint),
Amazon Bedrock's (``/model/{id}/invoke`` and ``/converse``, their streams in AWS's
event-stream framing, each call's SigV4 signature checked) and Vertex AI's (Claude by
``rawPredict``, Gemini by its verbs, with an OAuth token from ``/token``); streaming and
not, and answers from a script file:

```yaml
conversations:
  - match: statkit          # a substring of the user messages, or a list of them (optional)
    model: scripted-gold    # only for this model id (optional)
    replies:                # reply N answers a conversation with N earlier replies
      - tool_calls: [{name: bash, arguments: {command: "cat statkit/stats.py"}}]
        usage: {input: 120, output: 30, cached: 20, reasoning: 5}
      - content: "Fixed."
        usage: {input: 300, output: 12}
      - status: 429           # or fail once with an HTTP status
      - delay_s: 5            # or answer slowly
        content: "..."
      - drop: true            # or cut the stream off half way
      - throttle: 2           # or throttle the first 2 requests for this reply, as the
        content: "..."        # provider does (Bedrock's ThrottlingException...), then answer
models: [scripted-gold]     # the models it has (optional): any other is a 404, as a
                            # provider answers a model it does not have
```

The server is stateless: which reply comes next is read off the request's own history
(the number of assistant turns in it), so any number of trials can share it.
"""

from __future__ import annotations

import base64
import functools
import hmac
import json
import re
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, Field

from hangar.files import read_yaml
from hangar.results import CHECK_USER


class ScriptedUsage(BaseModel):
    """Token counts a scripted reply reports."""

    model_config = ConfigDict(extra="forbid")

    input: int = 10
    """Prompt tokens (cached included)."""
    output: int = 5
    """Completion tokens (reasoning included)."""
    cached: int = 0
    """Prompt tokens from the cache."""
    reasoning: int = 0
    """Reasoning tokens."""


class ToolCall(BaseModel):
    """A tool call the scripted model makes."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """Tool name."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Its arguments."""
    namespace: str | None = None
    """The Responses API's namespace of a tool offered in a group (Codex groups each MCP
    server's tools as ``mcp__<server>``); the other APIs have none."""


class Reply(BaseModel):
    """One scripted answer."""

    model_config = ConfigDict(extra="forbid")

    content: str = ""
    """Text of the answer."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Tool calls of the answer."""
    usage: ScriptedUsage = Field(default_factory=ScriptedUsage)
    """What it reports as usage."""
    status: int = 200
    """An HTTP error status instead of an answer."""
    delay_s: float = 0.0
    """Wait this long before answering."""
    drop: bool = False
    """Close the connection half way through a streamed answer."""
    throttle: int = 0
    """Answer the first N requests for this reply with the provider's throttling answer
    (`throttled`), then answer them (the server counts them)."""


class Conversation(BaseModel):
    """A scripted conversation and which requests it answers."""

    model_config = ConfigDict(extra="forbid")

    match: str | list[str] = ""
    """A substring of the user messages, or several that must all be there ('' matches
    every conversation)."""
    model: str | None = None
    """Only requests for this model id."""
    replies: list[Reply]
    """Replies in order; past the end, the last one repeats."""


class Script(BaseModel):
    """A script file."""

    model_config = ConfigDict(extra="forbid")

    conversations: list[Conversation]
    """Tried in order; the first that matches answers."""
    models: list[str] | None = None
    """The models the server has (None: any); a request for another is a 404 in its
    API's own words (`not_found`)."""

    @classmethod
    def load(cls, path: Path) -> Script:
        """Read a script YAML file."""
        return cls.model_validate(read_yaml(path))

    def reply(self, model: str, user_text: str, turn: int) -> Reply:
        """The reply to a request (see the module docstring)."""
        for conv in self.conversations:
            wanted = [conv.match] if isinstance(conv.match, str) else conv.match
            if conv.model not in (None, model) or any(w not in user_text for w in wanted):
                continue
            return conv.replies[min(turn, len(conv.replies) - 1)]
        return Reply(content=f"(no scripted conversation for model {model!r})")


def not_found(path: str, model: str) -> dict[str, Any]:
    """A provider's answer for a model it does not have, in the words of `path`'s API
    (sent as a 404; Bedrock's as a 400 ``ValidationException``, as Bedrock does)."""
    if BEDROCK_PATH.match(path):
        return {"message": "The provided model identifier is invalid."}
    vertex = VERTEX_PATH.match(path)
    if vertex:
        where = path.removeprefix("/v1/").partition(":")[0]
        message = f"Publisher Model `{where}` was not found or your project has no access to it."
        return {"error": {"code": 404, "message": message, "status": "NOT_FOUND"}}
    if GEMINI_PATH.match(path):
        message = f"models/{model} is not found for API version v1beta, or is not supported"
        return {"error": {"code": 404, "message": message, "status": "NOT_FOUND"}}
    if path.endswith("/messages"):
        return {"type": "error", "error": {"type": "not_found_error", "message": f"model: {model}"}}
    message = f"The model `{model}` does not exist or you do not have access to it."
    return {
        "error": {"message": message, "type": "invalid_request_error", "code": "model_not_found"}
    }


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


#: Amazon Bedrock's runtime API: InvokeModel (Anthropic's models) and Converse (any).
BEDROCK_PATH = re.compile(
    r"^/model/(?P<model>[^/]+)/(?P<verb>invoke|invoke-with-response-stream|converse|converse-stream)$"
)
_SIGV4 = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, SignedHeaders=(?P<signed>[^,]+), "
    r"Signature=(?P<sig>[0-9a-f]+)"
)


def sigv4_problem(
    h: BaseHTTPRequestHandler, raw: bytes, aws: tuple[str, str, str] | None
) -> str | None:
    """What is wrong with a request's SigV4 signature for service ``bedrock`` (None: it
    is the one `aws`'s keys make for these bytes, as AWS checks it)."""
    if aws is None:
        return None
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    key, secret, region = aws
    found = _SIGV4.fullmatch(h.headers.get("Authorization", ""))
    if found is None:
        return "the request is not signed with SigV4"
    if (found["key"], found["region"], found["service"]) != (key, region, "bedrock"):
        return f"signed for {found['key']}/{found['region']}/{found['service']}"
    names = found["signed"].split(";")
    if "host" not in names or "x-amz-date" not in names:
        return "the signature must cover host and x-amz-date"
    request = AWSRequest(
        method=h.command, url=f"http://{h.headers['host']}{h.path}", data=raw,
        headers={name: h.headers.get(name, "") for name in names},
    )  # fmt: skip
    request.context["timestamp"] = h.headers["x-amz-date"]
    signer = SigV4Auth(
        Credentials(key, secret, h.headers.get("x-amz-security-token")), "bedrock", region
    )
    expected = signer.signature(
        signer.string_to_sign(request, signer.canonical_request(request)), request
    )
    return None if hmac.compare_digest(expected, found["sig"]) else "the signature does not match"


def event_frame(event: dict[str, Any], kind: str = "chunk") -> bytes:
    """One frame of AWS's event-stream encoding as Bedrock sends it: InvokeModel's
    ``chunk`` carries `event` (Anthropic's) as base64 ``bytes``; Converse's events (`kind`:
    ``messageStart``, ``contentBlockDelta``...) carry their own JSON."""
    inner = json.dumps(event).encode()
    payload = (
        json.dumps({"bytes": base64.b64encode(inner).decode()}).encode()
        if kind == "chunk"
        else inner
    )
    fields = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    head = b"".join(
        bytes([len(k)]) + k.encode() + b"\x07" + len(v).to_bytes(2, "big") + v.encode()
        for k, v in fields.items()
    )
    total = 12 + len(head) + len(payload) + 4
    prelude = total.to_bytes(4, "big") + len(head).to_bytes(4, "big")
    message = prelude + zlib.crc32(prelude).to_bytes(4, "big") + head + payload
    return message + zlib.crc32(message).to_bytes(4, "big")


#: Vertex AI's model calls (Anthropic's models by rawPredict, Google's by Gemini's verbs).
VERTEX_PATH = re.compile(
    r"^/v1/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/publishers/"
    r"(?P<publisher>anthropic|google)/models/(?P<model>[^/:]+):(?P<verb>\w+)$"
)


#: Azure OpenAI's deployments API (the model is the deployment in the path).
AZURE_DEPLOYMENT_PATH = re.compile(r"^/openai/deployments/(?P<deployment>[^/]+)/")
GEMINI_PATH = re.compile(
    r"^/v1(?:beta|alpha)?/models/(?P<model>[^/:]+):(?P<verb>generateContent|streamGenerateContent|countTokens)$"
)


def _gemini_conversation(body: dict[str, Any]) -> tuple[str, int]:
    """(all user text, number of earlier model turns) of a Gemini request."""
    request = body.get("generateContentRequest") or body
    contents = [c for c in request.get("contents") or [] if isinstance(c, dict)]
    texts = [
        str(p.get("text", ""))
        for c in contents
        if c.get("role", "user") == "user"
        for p in c.get("parts") or []
        if isinstance(p, dict) and "text" in p
    ]
    return "\n".join(texts), sum(1 for c in contents if c.get("role") == "model")


def _conversation(path: str, body: dict[str, Any]) -> tuple[str, int]:
    """(all user text, number of earlier assistant turns) of a request."""
    vertex = VERTEX_PATH.match(path)
    if GEMINI_PATH.match(path) or (vertex and vertex["publisher"] == "google"):
        return _gemini_conversation(body)
    if path.endswith("/responses"):
        items = body.get("input")
        if isinstance(items, str):
            return items, 0
        items = items or []
        users = [i for i in items if isinstance(i, dict) and i.get("role") == "user"]
        first = "\n".join(_text(i.get("content")) for i in users)
        turns, previous = 0, None
        for item in items:
            kind = item.get("type") or ("message" if "role" in item else None)
            is_model = item.get("role") == "assistant" or kind in ("function_call", "reasoning")
            if is_model and previous != "model":
                turns += 1
            previous = "model" if is_model else "other"
        return (first or str(body.get("instructions", ""))), turns
    messages = body.get("messages") or []
    first = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "user")
    return first, sum(1 for m in messages if m.get("role") == "assistant")


# -- rendering in each API's shape -----------------------------------------------------------


def _chat(reply: Reply, model: str) -> dict[str, Any]:
    u = reply.usage
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": t.name, "arguments": json.dumps(t.arguments)},
            }
            for t in reply.tool_calls
        ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.tool_calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": u.input,
            "completion_tokens": u.output,
            "total_tokens": u.input + u.output,
            "prompt_tokens_details": {"cached_tokens": u.cached},
            "completion_tokens_details": {"reasoning_tokens": u.reasoning},
        },
    }


def _chat_stream(reply: Reply, model: str, include_usage: bool) -> Iterator[dict[str, Any]]:
    full = _chat(reply, model)
    base = {k: full[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    yield base | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    for piece in _pieces(reply.content):
        yield base | {"choices": [{"index": 0, "delta": {"content": piece}}]}
    for i, call in enumerate(full["choices"][0]["message"].get("tool_calls", [])):
        yield base | {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": i,
                                "id": call["id"],
                                "type": "function",
                                "function": {
                                    "name": call["function"]["name"],
                                    "arguments": call["function"]["arguments"],
                                },
                            }
                        ]
                    },
                }
            ]
        }
    yield base | {
        "choices": [{"index": 0, "delta": {}, "finish_reason": full["choices"][0]["finish_reason"]}]
    }
    if include_usage:
        yield base | {"choices": [], "usage": full["usage"]}


def _responses(reply: Reply, model: str) -> dict[str, Any]:
    u = reply.usage
    output: list[dict[str, Any]] = []
    if reply.content:
        output.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:12]}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.content, "annotations": []}],
            }
        )
    for t in reply.tool_calls:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex[:12]}",
                "call_id": f"call_{uuid.uuid4().hex[:12]}",
                "name": t.name,
                "arguments": json.dumps(t.arguments),
                "status": "completed",
                **({"namespace": t.namespace} if t.namespace else {}),
            }
        )
    return {
        "id": f"resp_{uuid.uuid4().hex[:16]}",
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "completed",
        "output": output,
        "usage": {
            "input_tokens": u.input,
            "output_tokens": u.output,
            "total_tokens": u.input + u.output,
            "input_tokens_details": {"cached_tokens": u.cached},
            "output_tokens_details": {"reasoning_tokens": u.reasoning},
        },
    }


def _responses_stream(reply: Reply, model: str) -> Iterator[dict[str, Any]]:
    full = _responses(reply, model)
    pending = full | {"status": "in_progress", "output": [], "usage": None}
    yield {"type": "response.created", "response": pending}
    for index, item in enumerate(full["output"]):
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": item | ({"content": []} if item["type"] == "message" else {}),
        }
        if item["type"] == "message":
            for piece in _pieces(reply.content):
                yield {
                    "type": "response.output_text.delta",
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "delta": piece,
                }
        yield {"type": "response.output_item.done", "output_index": index, "item": item}
    yield {"type": "response.completed", "response": full}


def _gemini_usage(u: ScriptedUsage) -> dict[str, int]:
    return {
        "promptTokenCount": u.input,
        "candidatesTokenCount": u.output - u.reasoning,
        "thoughtsTokenCount": u.reasoning,
        "cachedContentTokenCount": u.cached,
        "totalTokenCount": u.input + u.output,
    }


def _gemini(reply: Reply, model: str) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": reply.content}] if reply.content else []
    parts += [{"functionCall": {"name": t.name, "args": t.arguments}} for t in reply.tool_calls]
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": _gemini_usage(reply.usage),
        "modelVersion": model,
        "responseId": uuid.uuid4().hex[:16],
    }


def _gemini_stream(reply: Reply, model: str) -> Iterator[dict[str, Any]]:
    """Text in pieces, then the tool calls, the finish reason and the usage."""
    pieces = _pieces(reply.content) if reply.content else []
    for piece in pieces:
        yield {
            "candidates": [{"content": {"role": "model", "parts": [{"text": piece}]}, "index": 0}],
            "modelVersion": model,
        }
    last = _gemini(reply.model_copy(update={"content": ""}), model)
    if not last["candidates"][0]["content"]["parts"]:
        last["candidates"][0]["content"]["parts"] = [{"text": ""}]
    yield last


def _anthropic(reply: Reply, model: str) -> dict[str, Any]:
    u = reply.usage
    content: list[dict[str, Any]] = []
    if reply.content:
        content.append({"type": "text", "text": reply.content})
    for t in reply.tool_calls:
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex[:12]}",
                "name": t.name,
                "input": t.arguments,
            }
        )
    return {
        "id": f"msg_{uuid.uuid4().hex[:16]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": u.input - u.cached,
            "output_tokens": u.output,
            "cache_read_input_tokens": u.cached,
            "cache_creation_input_tokens": 0,
        },
    }


def _anthropic_stream(reply: Reply, model: str) -> Iterator[dict[str, Any]]:
    full = _anthropic(reply, model)
    start_usage = full["usage"] | {"output_tokens": 0}
    yield {
        "type": "message_start",
        "message": full | {"content": [], "stop_reason": None, "usage": start_usage},
    }
    for index, block in enumerate(full["content"]):
        if block["type"] == "text":
            yield {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            }
            for piece in _pieces(block["text"]):
                yield {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": piece},
                }
        else:
            yield {
                "type": "content_block_start",
                "index": index,
                "content_block": block | {"input": {}},
            }
            yield {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
            }
        yield {"type": "content_block_stop", "index": index}
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": full["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": full["usage"]["output_tokens"]},
    }
    yield {"type": "message_stop"}


def _converse(reply: Reply, model: str) -> dict[str, Any]:
    """Bedrock's Converse answer."""
    u = reply.usage
    content: list[dict[str, Any]] = [{"text": reply.content}] if reply.content else []
    for t in reply.tool_calls:
        use = {"toolUseId": f"tooluse_{uuid.uuid4().hex[:12]}", "name": t.name}
        content.append({"toolUse": use | {"input": t.arguments}})
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": "tool_use" if reply.tool_calls else "end_turn",
        "usage": {
            "inputTokens": u.input - u.cached,
            "outputTokens": u.output,
            "totalTokens": u.input + u.output,
            "cacheReadInputTokens": u.cached,
            "cacheWriteInputTokens": 0,
        },
        "metrics": {"latencyMs": 1},
    }


def _converse_stream(reply: Reply, model: str) -> Iterator[dict[str, Any]]:
    """Converse's stream, each event as ``{kind: payload}`` (as boto3 shows them)."""
    full = _converse(reply, model)
    yield {"messageStart": {"role": "assistant"}}
    for index, block in enumerate(full["output"]["message"]["content"]):
        if "text" in block:
            for piece in _pieces(block["text"]):
                yield {"contentBlockDelta": {"contentBlockIndex": index, "delta": {"text": piece}}}
        else:
            use = block["toolUse"]
            start = {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}
            yield {"contentBlockStart": {"contentBlockIndex": index, "start": start}}
            delta = {"toolUse": {"input": json.dumps(use["input"])}}
            yield {"contentBlockDelta": {"contentBlockIndex": index, "delta": delta}}
        yield {"contentBlockStop": {"contentBlockIndex": index}}
    yield {"messageStop": {"stopReason": full["stopReason"]}}
    yield {"metadata": {"usage": full["usage"], "metrics": full["metrics"]}}


def throttled(path: str) -> tuple[dict[str, str], dict[str, Any]]:
    """A provider's throttling answer (headers, body) in the words of `path`'s API:
    Bedrock's ``ThrottlingException``, Vertex AI's ``RESOURCE_EXHAUSTED``, else a 429 with
    ``retry-after`` as Azure OpenAI's."""
    if BEDROCK_PATH.match(path):
        kind = "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"
        words = "Too many requests, please wait before trying again."
        return {"x-amzn-ErrorType": kind}, {"message": words}
    if VERTEX_PATH.match(path):
        words = "Resource exhausted. Please try again later."
        return {}, {"error": {"code": 429, "message": words, "status": "RESOURCE_EXHAUSTED"}}
    words = "Rate limit of the deployment exceeded. Please retry after 1 second."
    return {"retry-after": "1"}, {"error": {"code": "429", "message": words}}


def _pieces(text: str, size: int = 16) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


# -- the server ------------------------------------------------------------------------------


Render = Callable[[Reply, str], dict[str, Any]]
Stream = Callable[[Reply, str], Iterator[dict[str, Any]]]


@dataclass(frozen=True)
class _Route:
    """What a request's path says: the API it speaks and the model it names."""

    path: str
    model: str
    gemini: re.Match[str] | None
    bedrock: re.Match[str] | None
    vertex: re.Match[str] | None

    @classmethod
    def of(cls, path: str, body: dict[str, Any]) -> _Route:
        gemini, azure = GEMINI_PATH.match(path), AZURE_DEPLOYMENT_PATH.match(path)
        bedrock, vertex = BEDROCK_PATH.match(path), VERTEX_PATH.match(path)
        model = gemini["model"] if gemini else str(body.get("model", ""))
        model = azure["deployment"] if azure else model
        if bedrock:
            model = unquote(bedrock["model"])
        if vertex:
            model = vertex["model"]
        return cls(path, model, gemini, bedrock, vertex)


def _dialect(route: _Route, body: dict[str, Any]) -> tuple[Render, Stream, bool] | None:
    """How to answer the route: (a reply, its stream, whether to stream); None: no route."""
    streaming = bool(body.get("stream"))
    gemini, bedrock, vertex, path = route.gemini, route.bedrock, route.vertex, route.path
    if gemini:
        return _gemini, _gemini_stream, gemini["verb"] == "streamGenerateContent"
    if bedrock and bedrock["verb"].startswith("converse"):
        return _converse, _converse_stream, bedrock["verb"] == "converse-stream"
    if bedrock:
        return _anthropic, _anthropic_stream, bedrock["verb"] == "invoke-with-response-stream"
    if vertex and vertex["publisher"] == "anthropic":
        return _anthropic, _anthropic_stream, vertex["verb"] == "streamRawPredict"
    if vertex:
        return _gemini, _gemini_stream, vertex["verb"] == "streamGenerateContent"
    if path.endswith("/messages"):
        return _anthropic, _anthropic_stream, streaming
    if path.endswith("/responses"):
        return _responses, _responses_stream, streaming
    if path.endswith("/chat/completions"):
        include = bool((body.get("stream_options") or {}).get("include_usage"))
        return _chat, functools.partial(_chat_stream, include_usage=include), streaming
    return None


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _record(self, body: dict[str, Any], turn: int = 0, check: bool = False) -> str:
        """Log the request (every method: tests check what reached the provider); a
        sweep's model check (`hangar.models.exists`) goes to `checks`, not `requests`."""
        path = self.path.split("?")[0].rstrip("/")
        (self.server.checks if check else self.server.requests).append(
            {
                "method": self.command,
                "path": path,
                "query": self.path.partition("?")[2],
                "model": str(body.get("model", "")),
                "turn": turn,
                "stream": bool(body.get("stream")),
                "body": body,
                "headers": dict(self.headers),
            }
        )
        return path

    def do_GET(self) -> None:
        path = self._record({})
        if path == "/msi/token":
            self._identity()
        elif path.endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": "every-model-of-the-account"}]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_DELETE(self) -> None:
        self._record({})
        self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?")[0].rstrip("/")
        if path == "/token":  # a form, not JSON
            self._token(raw)
            return
        body = json.loads(raw or b"{}")
        route = _Route.of(path, body)
        refused = self._refused(route, raw)
        if refused is not None:
            self._record(body)
            self._json(*refused)
            return
        first, turn = _conversation(path, body)
        check = turn == 0 and first.strip() == CHECK_USER
        self._record(body, turn, check=check)
        if not check:
            self.server.wait_released()
        reply = self._scripted(route, first, turn)
        if reply is None:
            return
        if route.gemini and route.gemini["verb"] == "countTokens":
            self._json(200, {"totalTokens": max(1, len(first.split()))})
            return
        dialect = _dialect(route, body)
        if dialect is None:
            self._json(404, {"error": {"message": f"no route {path}"}})
            return
        render, stream, streaming = dialect
        if not streaming:
            self._json(200, render(reply, route.model))
        elif route.bedrock:
            self._event_stream(list(stream(reply, route.model)), route.bedrock["verb"])
        else:
            self._sse(list(stream(reply, route.model)), reply, path)

    def _refused(self, route: _Route, raw: bytes) -> tuple[int, dict[str, Any]] | None:
        """The answer to a request whose cloud credentials are wrong (None: they are
        right, or the route takes none): a SigV4 signature, an Entra ID or Google token."""
        if route.bedrock:
            problem = sigv4_problem(self, raw, self.server.aws)
            return None if problem is None else (403, {"message": problem})
        given = self.headers.get("Authorization")
        entra, google = self.server.azure, self.server.google
        if (
            entra is not None
            and route.path.startswith("/openai/")
            and given != f"Bearer {entra[1]}"
        ):
            return 401, {"error": {"code": "401", "message": "invalid Entra ID token"}}
        if route.vertex and google is not None and given != f"Bearer {google[1]}":
            return 401, {"error": {"code": 401, "status": "UNAUTHENTICATED"}}
        return None

    def _scripted(self, route: _Route, first: str, turn: int) -> Reply | None:
        """The script's reply to the request; None when the answer is an error (a model
        the script does not name or no longer has, a throttle, a scripted status), which
        is sent here as the provider sends it."""
        missing = 400 if route.bedrock else 404
        known = self.server.script.models
        if known is not None and route.model not in known:
            self._json(missing, not_found(route.path, route.model))
            return None
        reply = self.server.script.reply(route.model, first, turn)
        if self.server.throttles(reply):
            headers, answer = throttled(route.path)
            self._json(429, answer, headers)
            return None
        time.sleep(reply.delay_s)
        if reply.status == 404:  # the provider no longer has the model
            self._json(missing, not_found(route.path, route.model))
            return None
        if reply.status != 200:
            message = f"scripted HTTP {reply.status}"
            self._json(reply.status, {"error": {"type": "scripted", "message": message}})
            return None
        return reply

    def _event_stream(self, events: list[dict[str, Any]], verb: str) -> None:
        """AWS's event-stream framing, one frame per event (Converse's named by kind)."""
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.amazon.eventstream")
        self.send_header("Connection", "close")
        self.end_headers()
        for event in events:
            if verb == "converse-stream":
                ((kind, payload),) = event.items()
                self.wfile.write(event_frame(payload, kind))
            else:
                self.wfile.write(event_frame(event))
        self.close_connection = True

    def _sse(self, events: list[dict[str, Any]], reply: Reply, path: str) -> None:
        """Server-sent events, cut halfway through for a reply that drops its stream."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for i, event in enumerate(events):
            if reply.drop and i >= len(events) // 2:
                self.wfile.flush()
                self.connection.shutdown(2)
                return
            name = f"event: {event['type']}\n" if "type" in event else ""
            self.wfile.write(f"{name}data: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
        if path.endswith("/chat/completions"):
            self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True

    def _identity(self) -> None:
        """A managed identity's token endpoint (App Service's): the token for the
        resource asked, to a request carrying the identity header's secret."""
        from urllib.parse import parse_qs

        azure = self.server.azure
        query = {k: v[0] for k, v in parse_qs(self.path.partition("?")[2]).items()}
        if azure is None or self.headers.get("X-IDENTITY-HEADER") != azure[0]:
            self._json(401, {"error": "invalid identity header"})
            return
        self.server.tokens.append(query)
        expires = str(int(time.time()) + 3600)
        resource = query.get("resource", "")
        answer = {"access_token": azure[1], "expires_on": expires, "resource": resource}
        self._json(200, answer | {"token_type": "Bearer"})

    def _token(self, raw: bytes) -> None:
        """Google's token endpoint: an access token for a signed assertion."""
        from urllib.parse import parse_qs

        from google.auth import jwt

        google = self.server.google
        form = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
        if google is None:
            self._json(404, {"error": "no token endpoint here"})
            return
        try:
            # google-auth addresses its assertion to Google's token endpoint, as Google checks
            audience = "https://oauth2.googleapis.com/token"
            assertion = form.get("assertion", "")
            claims = jwt.decode(assertion, certs=google[0], audience=audience)  # type: ignore[no-untyped-call]
        except ValueError as exc:
            self._json(400, {"error": "invalid_grant", "error_description": str(exc)})
            return
        self.server.tokens.append(dict(claims))
        self._json(200, {"access_token": google[1], "expires_in": 3600, "token_type": "Bearer"})

    def _json(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


#: The longest a held call waits for `ScriptedServer.release`.
HOLD_LIMIT_S = 120.0


class ScriptedServer(ThreadingHTTPServer):
    """The scripted model server; `url` is its base (``http://127.0.0.1:PORT``)."""

    daemon_threads = True

    def __init__(
        self,
        script: Script,
        port: int = 0,
        host: str = "127.0.0.1",
        aws: tuple[str, str, str] | None = None,
        google: tuple[str, str] | None = None,
        azure: tuple[str, str] | None = None,
    ) -> None:
        """`aws`: (access key id, secret key, region) that Bedrock calls must be signed
        with (SigV4, checked as AWS would; None: Bedrock's paths take any call).
        `google`: (a service account's public key, PEM; the access token to issue): its
        ``/token`` grants the token for an assertion that key verifies (OAuth's JWT
        bearer grant, as Google's token endpoint), and Vertex AI's paths take only that
        token (None: any call). `azure`: (the identity header's secret; the token to
        issue): ``GET /msi/token`` is a managed identity's endpoint (App Service's, as
        ``IDENTITY_ENDPOINT`` names it) granting the token to a request with that secret,
        and Azure OpenAI's paths take only that token (None: any call)."""
        super().__init__((host, port), _Handler)
        self.script = script
        self.aws = aws
        self.google = google
        self.azure = azure
        self._throttled: dict[int, int] = {}
        self._lock = threading.Lock()
        self.tokens: list[dict[str, Any]] = []
        """The claims of each assertion `/token` granted a token for; the query of each
        managed identity's token `/msi/token` granted."""
        self.requests: list[dict[str, Any]] = []
        """Every request but the model checks, as received."""
        self.checks: list[dict[str, Any]] = []
        """The sweeps' model checks (one-token calls before the first trial)."""
        self._released = threading.Event()
        self._released.set()

    def hold(self) -> None:
        """Hold every model call (not the sweeps' model checks) until `release`: a test
        sees trials while they run, instead of racing them."""
        self._released.clear()

    def release(self) -> None:
        """Answer the held calls, and every call after."""
        self._released.set()

    def wait_released(self) -> None:
        """Wait while the calls are held; at most `HOLD_LIMIT_S` (a test that never
        releases fails on what it then sees, it does not hang)."""
        self._released.wait(HOLD_LIMIT_S)

    def throttles(self, reply: Reply) -> bool:
        """Whether this request for `reply` is one of the first `Reply.throttle`."""
        with self._lock:
            done = self._throttled.get(id(reply), 0)
            if done >= reply.throttle:
                return False
            self._throttled[id(reply)] = done + 1
            return True

    @property
    def url(self) -> str:
        """Base URL (append ``/v1`` for OpenAI clients)."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> ScriptedServer:
        """Serve in a background thread."""
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()
        return self
